//! The reservation batcher (docs/design.md §5): one queue per batch group — a namespace,
//! or every namespace sharing cluster quotas ([`crate::selection`]).
//!
//! ```text
//!  handler ── submit(BindingRequest, deadline) ──► Group queue ──► worker (one per
//!     ▲                                                group, spawned on demand,
//!     │                                                exits when the queue is empty)
//!     │   per batch:
//!     │     1. newest copy of each quota object the batch's namespaces answer to (their
//!     │        KarmadaQuotas, the KarmadaClusterQuotas selecting them): the cache's, or
//!     │        the object our own last write/read returned when its resourceVersion is
//!     │        newer
//!     │     2. core::decision::decide_batch_selected over the batch, each request against
//!     │        the quotas covering its namespace (a Deny is final at once: a request
//!     │        denied by one quota stays denied)
//!     │     3. per quota object with new entries, in key order: status::update (compare-
//!     │        and-swap; on 409 re-read and re-decide this quota's requests against the
//!     │        fresh object); a request may be refused there, or its write fail
//!     │     4. answer: allowed once every quota it needs holds its entry
//!     │     5. roll back the entries of requests that ended refused, failed or timed out
//!     └──────────────────── oneshot answer ◄────────┘
//! ```
//!
//! The webhook only adds entries (`status::entries::add`) and removes only its own for a
//! request that did not end admitted (`status::entries::roll_back`); the controller prunes.
//! The API calls go through `karmada_quota_status::StatusStore`, so tests drive the batcher
//! with its in-memory store, which injects conflicts and failures.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use karmada_quota_core::decision::{AdmissionRequest, Decision, decide_batch_selected};
use karmada_quota_core::quota::{QuotaState, Reservation, Unaccounted};
use karmada_quota_core::selection::{Labels, QuotaKey};
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use karmada_quota_status::{StatusStore, StoreError};
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cache::{CachedClusterQuota, CachedQuota, QuotaCache};
use crate::metrics::Metrics;
use crate::{Error, Result};

/// Step 0 of a CREATE under a queueing quota: does it wait (issue 26)?
mod arrival;
/// A batch's copy of one quota object, of either kind.
mod copy;
/// Step 3: one quota's compare-and-swap update with re-decision.
mod record;
/// Step 5: removing what a request that did not end admitted had written.
mod rollback;

use copy::{Kind, QuotaCopy};

/// Tuning of the batcher.
#[derive(Clone, Debug)]
pub struct BatcherConfig {
    /// Lifetime of a reservation entry (`--reservation-ttl`), rounded up to whole seconds.
    pub reservation_ttl: Duration,
    /// Entries a quota may hold before it refuses new ones (`--max-reservations`).
    pub max_reservations: usize,
    /// Decision rounds per batch (the first plus retries after conflicts).
    pub max_attempts: u32,
    /// Most requests decided in one batch; the rest wait for the next one.
    pub max_batch: usize,
    /// The `unaccountedWorkloads` policy of a quota that does not set one
    /// (`--unaccounted-workloads`).
    pub unaccounted_default: Unaccounted,
}

impl Default for BatcherConfig {
    fn default() -> Self {
        Self {
            reservation_ttl: Duration::from_secs(60),
            max_reservations: 1000,
            // A conflict costs one GET and one more write; two webhook replicas and the
            // controller rarely collide more than a few times in a row.
            max_attempts: 10,
            // Bounds the work (and latency) of one round; 512 requests of one namespace
            // in flight at once is far beyond what one apiserver sends.
            max_batch: 512,
            unaccounted_default: Unaccounted::Deny,
        }
    }
}

/// One ResourceBinding CREATE/UPDATE, owned, with its charges computed by core.
#[derive(Clone, Debug)]
pub struct BindingRequest {
    /// Binding namespace.
    pub namespace: String,
    /// Binding name.
    pub name: String,
    /// Binding metadata.uid.
    pub uid: String,
    /// Binding metadata.generation (of the new object).
    pub generation: i64,
    /// Charge of the stored object (UPDATE), `None` on CREATE.
    pub old: Option<BindingCharge>,
    /// Charge of the new object.
    pub new: BindingCharge,
}

impl BindingRequest {
    fn as_core(&self, now: i64, ttl: i64, max_reservations: usize) -> AdmissionRequest<'_> {
        AdmissionRequest {
            namespace: &self.namespace,
            name: &self.name,
            uid: &self.uid,
            generation: self.generation,
            old: self.old.as_ref(),
            new: &self.new,
            now,
            reservation_ttl: ttl,
            max_reservations,
        }
    }
}

/// Unix seconds now.
fn wall_clock() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Hands ResourceBinding requests to per-namespace workers that decide them in batches and
/// record the reservations. Clone freely.
#[derive(Clone)]
pub struct Batcher {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Batcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

struct Inner {
    store: Arc<dyn StatusStore>,
    cluster_store: Arc<dyn StatusStore<KarmadaClusterQuota>>,
    cache: QuotaCache,
    metrics: Arc<Metrics>,
    config: BatcherConfig,
    clock: fn() -> i64,
    groups: Mutex<HashMap<String, Group>>,
    /// Bindings this webhook suspended and the controller's status does not show yet.
    arrivals: Mutex<arrival::Recent>,
}

/// One batch group's queue (see [`crate::selection`]).
#[derive(Default)]
struct Group {
    /// Requests waiting for the worker.
    pending: Vec<Job>,
    /// A worker task is running for this group.
    running: bool,
    /// Quota objects our own writes (or re-reads after a conflict) returned, by key:
    /// newer than the cache until the watch catches up.
    newest: HashMap<QuotaKey, QuotaCopy>,
}

/// The cluster quota store of a batcher built without one: every call fails (no cluster
/// quota can then be written; the cache of such a batcher has none either).
struct NoClusterStore;

impl StatusStore<KarmadaClusterQuota> for NoClusterStore {
    fn get<'a>(
        &'a self,
        _: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, std::result::Result<KarmadaClusterQuota, StoreError>> {
        Box::pin(async move {
            Err(StoreError::Api(format!(
                "no store for KarmadaClusterQuota {name}"
            )))
        })
    }
    fn replace_status<'a>(
        &'a self,
        q: &'a KarmadaClusterQuota,
    ) -> BoxFuture<'a, std::result::Result<KarmadaClusterQuota, StoreError>> {
        let name = q.metadata.name.clone().unwrap_or_default();
        Box::pin(async move {
            Err(StoreError::Api(format!(
                "no store for KarmadaClusterQuota {name}"
            )))
        })
    }
}

struct Job {
    request: BindingRequest,
    deadline: Instant,
    reply: oneshot::Sender<Result<Decision>>,
}

/// A request inside a batch.
struct Slot {
    request: BindingRequest,
    deadline: Instant,
    /// `None` once answered (or abandoned by its caller).
    reply: Option<oneshot::Sender<Result<Decision>>>,
    /// Quotas that still have to record this request's entry.
    needed: BTreeSet<QuotaKey>,
    /// Entries written so far, with their quota: answered with an Allow, or rolled back.
    written: Vec<(QuotaKey, Reservation)>,
    /// Entries that may have been written (the write's outcome is unknown: it timed out).
    maybe_written: Vec<(QuotaKey, Reservation)>,
    /// The request ends refused or failed: its answer, sent after the writes of the batch.
    failed: Option<Result<Decision>>,
}

impl Slot {
    /// Still waiting for its quotas (not answered, not failed, caller still there).
    fn open(&self) -> bool {
        self.failed.is_none() && self.reply.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    fn answer(&mut self, result: Result<Decision>) {
        if let Some(tx) = self.reply.take() {
            let _ = tx.send(result);
        }
    }

    /// Refused or failed at some quota; answered once the batch's writes are done.
    fn fail(&mut self, result: Result<Decision>) {
        if self.failed.is_none() {
            self.failed = Some(result);
        }
    }
}

/// What the re-decision of one quota said about one request.
enum Verdict {
    /// Admitted; the entry to write (`None`: the quota no longer charges it anything).
    Admit(Option<Reservation>),
    /// Refused by this quota now.
    Deny(Decision),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Batcher {
    /// A batcher writing through `store`, reading quotas from `cache`.
    pub fn new(
        store: Arc<dyn StatusStore>,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
    ) -> Self {
        Self::with_clock(store, cache, metrics, config, wall_clock)
    }

    /// Like [`Self::new`] with a custom clock (Unix seconds), for tests. Without a
    /// cluster quota store: see [`Self::with_stores`].
    pub fn with_clock(
        store: Arc<dyn StatusStore>,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
        clock: fn() -> i64,
    ) -> Self {
        Self::with_stores(
            store,
            Arc::new(NoClusterStore),
            cache,
            metrics,
            config,
            clock,
        )
    }

    /// A batcher writing KarmadaQuotas through `store` and KarmadaClusterQuotas through
    /// `cluster_store`, with the clock `clock` (Unix seconds).
    pub fn with_stores(
        store: Arc<dyn StatusStore>,
        cluster_store: Arc<dyn StatusStore<KarmadaClusterQuota>>,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
        clock: fn() -> i64,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                cluster_store,
                cache,
                metrics,
                config,
                clock,
                groups: Mutex::default(),
                arrivals: Mutex::default(),
            }),
        }
    }

    /// The real clock.
    pub fn wall_clock() -> fn() -> i64 {
        wall_clock
    }

    /// Decide `request` with its group's batch and, when admitted, record its
    /// reservations. Resolves to core's decision, or an error (never to be read as an
    /// allow). The caller bounds the wait with `deadline` (the worker gives up on the
    /// request at the same instant).
    pub async fn submit(&self, request: BindingRequest, deadline: Instant) -> Result<Decision> {
        let (reply, answer) = oneshot::channel();
        let namespace = request.namespace.clone();
        let group = self.inner.cache.batch_group(&namespace);
        let spawn = {
            let mut groups = lock(&self.inner.groups);
            let g = groups.entry(group.clone()).or_default();
            g.pending.push(Job {
                request,
                deadline,
                reply,
            });
            !std::mem::replace(&mut g.running, true)
        };
        if spawn {
            tokio::spawn(worker(self.inner.clone(), group));
        }
        answer.await.unwrap_or(Err(Error::WorkerGone(namespace)))
    }

    /// Decide `request` against the newest copies without recording anything (dry-run),
    /// with the quota objects of the request's namespace the caller has just read from
    /// the cache (`QuotaCache::in_namespace`, `QuotaCache::cluster_quotas_covering`), so
    /// a review looks them up once.
    pub fn decide_now_with(
        &self,
        request: &BindingRequest,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
    ) -> Result<Decision> {
        let ns = &request.namespace;
        let (copies, labels) = self.inner.newest(ns, quotas, clusters)?;
        let c = &self.inner.config;
        let states = enforced_states(&copies, c);
        let now = (self.inner.clock)();
        let req = request.as_core(now, ttl_secs(c.reservation_ttl), c.max_reservations);
        let mut states = states;
        Ok(decide_batch_selected(&mut states, &[req], |n| labels.get(n)).remove(0))
    }
}

/// The states the decision enforces: every quota that parses, a policy it leaves unset
/// given the webhook's default.
fn enforced_states(copies: &BTreeMap<QuotaKey, QuotaCopy>, c: &BatcherConfig) -> Vec<QuotaState> {
    copies
        .values()
        .filter_map(|q| q.state().ok().cloned())
        .map(|mut s| {
            s.spec
                .policy
                .unaccounted
                .get_or_insert(c.unaccounted_default);
            s
        })
        .collect()
}

/// The cache's copies of `quotas` and `clusters`, by key.
fn add_copies(
    copies: &mut BTreeMap<QuotaKey, QuotaCopy>,
    quotas: &[Arc<CachedQuota>],
    clusters: &[Arc<CachedClusterQuota>],
) {
    for c in quotas {
        copies.insert(c.key(), QuotaCopy::Quota(c.clone()));
    }
    for c in clusters {
        copies.insert(c.key(), QuotaCopy::Cluster(c.clone()));
    }
}

fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// The error refusing a request of `namespace`: the first quota covering it that cannot
/// be enforced.
fn invalid_covering(
    copies: &BTreeMap<QuotaKey, QuotaCopy>,
    namespace: &str,
    labels: &HashMap<String, Labels>,
) -> Option<Error> {
    copies.values().find_map(|c| match c.state() {
        Err(errors) if c.covers(namespace, labels.get(namespace)) => {
            Some(invalid_quota(&c.key(), errors))
        }
        _ => None,
    })
}

fn invalid_quota(key: &QuotaKey, errors: &str) -> Error {
    Error::InvalidQuota {
        namespace: key.namespace().unwrap_or_default().to_owned(),
        name: key.name().to_owned(),
        errors: errors.to_owned(),
    }
}

/// Resets the group when its worker unwinds (a bug), so later requests get a new
/// worker and the waiting ones an error instead of a hang.
struct WorkerGuard {
    inner: Arc<Inner>,
    group: String,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(group = %self.group, "reservation worker panicked");
            lock(&self.inner.groups).remove(&self.group);
        }
    }
}

async fn worker(inner: Arc<Inner>, group: String) {
    let _guard = WorkerGuard {
        inner: inner.clone(),
        group: group.clone(),
    };
    loop {
        let jobs: Vec<Job> = {
            // Our copies, to compare with the cache outside the groups lock.
            let newest: Vec<QuotaCopy> = {
                let groups = lock(&inner.groups);
                let Some(g) = groups.get(&group) else {
                    return;
                };
                if g.pending.is_empty() {
                    g.newest.values().cloned().collect()
                } else {
                    Vec::new()
                }
            };
            // Keep only our copies the cache has not caught up with yet, so a quiet group
            // or a deleted quota does not hold its objects for the process's life.
            let stale: HashSet<QuotaKey> = newest
                .iter()
                .filter(|own| !inner.cached(&own.key()).is_some_and(|c| own.is_newer(&c)))
                .map(QuotaCopy::key)
                .collect();
            let mut groups = lock(&inner.groups);
            let Some(g) = groups.get_mut(&group) else {
                return;
            };
            if g.pending.is_empty() {
                g.running = false;
                g.newest.retain(|key, _| !stale.contains(key));
                if g.newest.is_empty() {
                    groups.remove(&group);
                }
                return;
            }
            let n = g.pending.len().min(inner.config.max_batch.max(1));
            g.pending.drain(..n).collect()
        };
        inner.process(&group, jobs).await;
    }
}

impl Inner {
    /// The cache's copy of one quota object.
    fn cached(&self, key: &QuotaKey) -> Option<QuotaCopy> {
        match key {
            QuotaKey::Namespaced { namespace, name } => {
                self.cache.quota(namespace, name).map(QuotaCopy::Quota)
            }
            QuotaKey::Cluster { name } => self.cache.cluster_quota(name).map(QuotaCopy::Cluster),
        }
    }

    /// The labels of `namespaces` the cache knows.
    /// The newest copies of the quota objects of `ns` (the cache's `quotas` and
    /// `clusters`, or our own newer writes) and the namespace's labels; the error of the
    /// first covering quota that cannot be enforced.
    fn newest(
        &self,
        ns: &String,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
    ) -> Result<(BTreeMap<QuotaKey, QuotaCopy>, HashMap<String, Labels>)> {
        let group = self.cache.batch_group(ns);
        let mut cached = BTreeMap::new();
        add_copies(&mut cached, quotas, clusters);
        let copies = self.overlay(&group, cached);
        let labels = self.labels(std::iter::once(ns));
        if let Some(bad) = invalid_covering(&copies, ns, &labels) {
            return Err(bad);
        }
        Ok((copies, labels))
    }

    fn labels<'a>(&self, namespaces: impl Iterator<Item = &'a String>) -> HashMap<String, Labels> {
        namespaces
            .filter_map(|ns| self.cache.labels_of(ns).map(|l| (ns.clone(), l)))
            .collect()
    }

    /// The quota objects `namespaces` answer to (their KarmadaQuotas and the cluster
    /// quotas selecting them), by key, each replaced by the group's own copy when that is
    /// newer; `gone` = quotas found deleted during this batch.
    fn newest_copies(
        &self,
        group: &str,
        namespaces: &BTreeSet<String>,
        gone: &HashSet<QuotaKey>,
    ) -> BTreeMap<QuotaKey, QuotaCopy> {
        let mut cached: BTreeMap<QuotaKey, QuotaCopy> = BTreeMap::new();
        for ns in namespaces {
            let quotas = self.cache.in_namespace(ns);
            let clusters = self.cache.cluster_quotas_covering(ns);
            add_copies(&mut cached, &quotas, &clusters);
        }
        cached.retain(|key, _| !gone.contains(key));
        self.overlay(group, cached)
    }

    /// `cached`, each replaced by the group's own copy when that is newer.
    fn overlay(
        &self,
        group: &str,
        mut cached: BTreeMap<QuotaKey, QuotaCopy>,
    ) -> BTreeMap<QuotaKey, QuotaCopy> {
        let mut groups = lock(&self.groups);
        let Some(g) = groups.get_mut(group) else {
            return cached;
        };
        for (key, c) in &mut cached {
            match g.newest.get(key) {
                Some(own) if own.is_newer(c) => *c = own.clone(),
                Some(_) => {
                    g.newest.remove(key);
                }
                None => {}
            }
        }
        cached
    }

    /// Keep `copy` (of an object returned by a write or a re-read) as the newest copy.
    fn remember(&self, group: &str, copy: QuotaCopy) {
        if let Some(g) = lock(&self.groups).get_mut(group) {
            g.newest.insert(copy.key(), copy);
        }
    }

    /// Drop our copy of a quota whose state is unknown now (failed or timed-out write).
    fn forget(&self, group: &str, key: &QuotaKey) {
        if let Some(g) = lock(&self.groups).get_mut(group) {
            g.newest.remove(key);
        }
    }

    async fn process(&self, group: &str, jobs: Vec<Job>) {
        #[allow(clippy::cast_precision_loss)]
        self.metrics.batch_size.observe(jobs.len() as f64);
        let mut slots: Vec<Slot> = jobs
            .into_iter()
            .map(|j| Slot {
                request: j.request,
                deadline: j.deadline,
                reply: Some(j.reply),
                needed: BTreeSet::new(),
                written: Vec::new(),
                maybe_written: Vec::new(),
                failed: None,
            })
            .collect();
        let started = Instant::now();
        for s in &mut slots {
            if s.deadline <= started {
                s.answer(Err(Error::Timeout));
            }
        }

        // 1–2: decide the batch against the newest copies; a request whose namespace a
        // quota that cannot be enforced covers is refused with its errors.
        let namespaces: BTreeSet<String> =
            slots.iter().map(|s| s.request.namespace.clone()).collect();
        let copies = self.newest_copies(group, &namespaces, &HashSet::new());
        let labels = self.labels(namespaces.iter());
        for s in &mut slots {
            if s.open()
                && let Some(e) = invalid_covering(&copies, &s.request.namespace, &labels)
            {
                tracing::warn!(namespace = %s.request.namespace, error = %e, "refusing ResourceBindings");
                s.answer(Err(e));
            }
        }
        let mut states = enforced_states(&copies, &self.config);
        let now = (self.clock)();
        let (ttl, max) = (
            ttl_secs(self.config.reservation_ttl),
            self.config.max_reservations,
        );
        let open: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].open()).collect();
        let decisions = {
            let reqs: Vec<AdmissionRequest<'_>> = open
                .iter()
                .map(|&i| slots[i].request.as_core(now, ttl, max))
                .collect();
            decide_batch_selected(&mut states, &reqs, |ns| labels.get(ns))
        };
        let mut quotas: BTreeSet<QuotaKey> = BTreeSet::new();
        for (&i, decision) in open.iter().zip(decisions) {
            let slot = &mut slots[i];
            match decision {
                Decision::Deny(d) => slot.answer(Ok(Decision::Deny(d))),
                Decision::Allow(entries) => {
                    slot.needed = entries.into_iter().map(|(q, _)| q).collect();
                    quotas.extend(slot.needed.iter().cloned());
                }
            }
        }

        // 3: per quota object, in key order, record the entries of the requests still open.
        for quota in quotas {
            let Some(copy) = copies.get(&quota) else {
                continue; // unreachable: decisions only name quotas of `copies`
            };
            match copy {
                QuotaCopy::Quota(_) => {
                    self.record_in::<KarmadaQuota>(group, &quota, copy, &mut slots)
                        .await;
                }
                QuotaCopy::Cluster(_) => {
                    self.record_in::<KarmadaClusterQuota>(group, &quota, copy, &mut slots)
                        .await;
                }
            }
        }

        // 4: answer. Admitted = every quota it needed holds its entry, and its caller is
        // still waiting for the answer.
        let mut undo: BTreeMap<QuotaKey, Vec<Reservation>> = BTreeMap::new();
        for s in &mut slots {
            let Some(tx) = s.reply.take() else {
                // Denied in the batch decision, or abandoned by a caller that timed out
                // before its writes began: nothing of it was written.
                continue;
            };
            let admitted = match s.failed.take() {
                Some(result) => {
                    let _ = tx.send(result);
                    false
                }
                None if s.needed.is_empty() => {
                    tx.send(Ok(Decision::Allow(s.written.clone()))).is_ok()
                }
                None => {
                    // Every quota it needed was tried, so none can be left. Defensive.
                    let _ = tx.send(Err(Error::WorkerGone(s.request.namespace.clone())));
                    false
                }
            };
            // 5: what was written for a request that did not end admitted (refused,
            // failed, or its caller gone after a timeout) is rolled back.
            if !admitted {
                for (q, e) in s.written.drain(..).chain(s.maybe_written.drain(..)) {
                    undo.entry(q).or_default().push(e);
                }
            }
        }
        for (quota, entries) in undo {
            if quota.is_cluster() {
                self.roll_back::<KarmadaClusterQuota>(group, &quota, &entries)
                    .await;
            } else {
                self.roll_back::<KarmadaQuota>(group, &quota, &entries)
                    .await;
            }
        }
    }

    /// Step 3 for one quota object of kind `K` (its copy parsed: `states` held it).
    async fn record_in<K: Kind>(
        &self,
        group: &str,
        quota: &QuotaKey,
        copy: &QuotaCopy,
        slots: &mut [Slot],
    ) {
        let Some(parsed) = K::object(copy).and_then(|c| c.parsed.as_ref().ok()) else {
            return; // unreachable: only parsed copies have states
        };
        self.record::<K>(group, quota, (*parsed.object).clone(), &parsed.state, slots)
            .await;
    }
}
