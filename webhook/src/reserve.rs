//! The per-namespace reservation batcher (design §4 step 5).
//!
//! ```text
//!  handler ── submit(BindingRequest, deadline) ──► Namespace queue ──► worker (one per
//!     ▲                                                namespace, spawned on demand,
//!     │                                                exits when the queue is empty)
//!     │   per batch, until every request is answered (≤ max_attempts rounds):
//!     │     1. newest copy of each quota: the cache's, or the object our own last
//!     │        write/read returned when its resourceVersion is newer
//!     │     2. core::decision::decide_batch over the still-open requests
//!     │        (a Deny is final at once: a request denied by one quota stays denied)
//!     │     3. one replace_status per quota with new entries, in name order, with the
//!     │        copy's resourceVersion (compare-and-swap); the returned object becomes the
//!     │        newest copy; a request is allowed once every quota it needs is written
//!     │     4. 409 Conflict → re-GET that quota and go to 1 for the requests not yet
//!     │        answered (entries already written stay; they are never written twice)
//!     └──────────────────── oneshot answer ◄────────┘
//! ```
//!
//! The webhook only adds entries (upsert by (uid, generation)); the controller prunes.
//! The API calls sit behind [`QuotaStore`], so tests drive the batcher with an in-memory
//! store that injects conflicts and failures.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use karmada_quota_core::decision::{AdmissionRequest, Decision, decide, decide_batch};
use karmada_quota_core::quota::{QuotaState, Reservation};
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::reservation_to_api;
use kube::api::PostParams;
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout_at};

use crate::cache::{CachedQuota, QuotaCache};
use crate::metrics::Metrics;
use crate::{Error, Result};

/// Why a quota API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// 409: the resourceVersion precondition failed (someone wrote the quota first).
    #[error("conflict: the quota was modified concurrently")]
    Conflict,
    /// 404: the quota no longer exists.
    #[error("not found")]
    NotFound,
    /// Any other API or transport error.
    #[error("{0}")]
    Api(String),
}

impl StoreError {
    /// Low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            StoreError::Conflict => "conflict",
            StoreError::NotFound => "not_found",
            StoreError::Api(_) => "api_error",
        }
    }
}

impl From<kube::Error> for StoreError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.is_conflict() => StoreError::Conflict,
            kube::Error::Api(s) if s.is_not_found() => StoreError::NotFound,
            other => StoreError::Api(other.to_string()),
        }
    }
}

/// The two KarmadaQuota API calls the batcher makes.
pub trait QuotaStore: Send + Sync + 'static {
    /// Read a quota (a quorum read: the newest version).
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>>;

    /// Replace the status subresource of `quota` (its namespace, name and
    /// `metadata.resourceVersion` set: a compare-and-swap); returns the stored object.
    fn replace_status<'a>(
        &'a self,
        quota: &'a KarmadaQuota,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>>;
}

/// [`QuotaStore`] over the Kubernetes API.
#[derive(Clone)]
pub struct KubeQuotaStore {
    client: kube::Client,
}

impl KubeQuotaStore {
    /// A store that talks to the apiserver through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl QuotaStore for KubeQuotaStore {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            let api = kube::Api::<KarmadaQuota>::namespaced(self.client.clone(), namespace);
            Ok(api.get(name).await?)
        })
    }

    fn replace_status<'a>(
        &'a self,
        quota: &'a KarmadaQuota,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            let namespace = quota.metadata.namespace.as_deref().unwrap_or_default();
            let name = quota.metadata.name.as_deref().unwrap_or_default();
            let api = kube::Api::<KarmadaQuota>::namespaced(self.client.clone(), namespace);
            Ok(api
                .replace_status(name, &PostParams::default(), quota)
                .await?)
        })
    }
}

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
    store: Arc<dyn QuotaStore>,
    cache: QuotaCache,
    metrics: Arc<Metrics>,
    config: BatcherConfig,
    clock: fn() -> i64,
    namespaces: Mutex<HashMap<String, Namespace>>,
}

#[derive(Default)]
struct Namespace {
    /// Requests waiting for the worker.
    pending: Vec<Job>,
    /// A worker task is running for this namespace.
    running: bool,
    /// Quota objects our own writes (or re-reads after a conflict) returned, by name:
    /// newer than the cache until the watch catches up.
    newest: HashMap<String, Arc<CachedQuota>>,
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
    /// Quotas whose status durably holds this request's entry.
    durable: BTreeSet<String>,
    /// Entries of the latest Allow.
    allowed: Vec<(String, Reservation)>,
}

impl Slot {
    fn open(&self) -> bool {
        self.reply.is_some()
    }

    fn answer(&mut self, result: Result<Decision>) {
        if let Some(tx) = self.reply.take() {
            let _ = tx.send(result);
        }
    }

    /// Allowed once every quota of its latest Allow is written.
    fn answer_if_durable(&mut self) {
        if self.allowed.iter().all(|(q, _)| self.durable.contains(q)) {
            let entries = std::mem::take(&mut self.allowed);
            self.answer(Ok(Decision::Allow(entries)));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Batcher {
    /// A batcher writing through `store`, reading quotas from `cache`.
    pub fn new(
        store: Arc<dyn QuotaStore>,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
    ) -> Self {
        Self::with_clock(store, cache, metrics, config, wall_clock)
    }

    /// Like [`Self::new`] with a custom clock (Unix seconds), for tests.
    pub fn with_clock(
        store: Arc<dyn QuotaStore>,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
        clock: fn() -> i64,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                cache,
                metrics,
                config,
                clock,
                namespaces: Mutex::default(),
            }),
        }
    }

    /// Decide `request` with the namespace's batch and, when admitted, record its
    /// reservations. Resolves to core's decision, or an error (never to be read as an
    /// allow). The caller bounds the wait with `deadline` (the worker gives up on the
    /// request at the same instant).
    pub async fn submit(&self, request: BindingRequest, deadline: Instant) -> Result<Decision> {
        let (reply, answer) = oneshot::channel();
        let namespace = request.namespace.clone();
        let spawn = {
            let mut namespaces = lock(&self.inner.namespaces);
            let ns = namespaces.entry(namespace.clone()).or_default();
            ns.pending.push(Job {
                request,
                deadline,
                reply,
            });
            !std::mem::replace(&mut ns.running, true)
        };
        if spawn {
            tokio::spawn(worker(self.inner.clone(), namespace.clone()));
        }
        answer.await.unwrap_or(Err(Error::WorkerGone(namespace)))
    }

    /// Decide `request` against the newest copies without recording anything (dry-run).
    pub fn decide_now(&self, request: &BindingRequest) -> Result<Decision> {
        let copies = self
            .inner
            .newest_copies(&request.namespace, &HashSet::new());
        let states = states(&request.namespace, &copies)?;
        let c = &self.inner.config;
        let now = (self.inner.clock)();
        Ok(decide(
            &states,
            &request.as_core(now, ttl_secs(c.reservation_ttl), c.max_reservations),
        ))
    }

    /// The cache the batcher reads.
    pub fn cache(&self) -> &QuotaCache {
        &self.inner.cache
    }
}

fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs).unwrap_or(i64::MAX)
}

/// The engine states of `copies`, or the error of the first quota that cannot be enforced.
fn states(namespace: &str, copies: &[Arc<CachedQuota>]) -> Result<Vec<QuotaState>> {
    copies
        .iter()
        .map(|c| match &c.parsed {
            Ok(p) => Ok(p.state.clone()),
            Err(_) => Err(invalid_quota(namespace, c)),
        })
        .collect()
}

fn invalid_quota(namespace: &str, c: &CachedQuota) -> Error {
    Error::InvalidQuota {
        namespace: namespace.to_owned(),
        name: c.name().to_owned(),
        errors: c.parsed.as_ref().err().cloned().unwrap_or_default(),
    }
}

/// `object` with `entries` upserted into `status.reservations` by (uid, generation), and
/// lapsed entries (`expirationTime ≤ now`) dropped; the other entries are left exactly as
/// they are. Lapsed entries count for nothing (core ignores them), and dropping them keeps
/// the list within `--max-reservations` live entries even while no controller prunes —
/// otherwise it could grow by that many per TTL toward etcd's object size limit.
fn with_entries<'a>(
    object: &KarmadaQuota,
    entries: impl IntoIterator<Item = &'a Reservation>,
    now: i64,
) -> KarmadaQuota {
    let mut q = object.clone();
    // Not needed for a status replace (nil keeps the stored ones) and often large.
    q.metadata.managed_fields = None;
    let status = q.status.get_or_insert_with(Default::default);
    status
        .reservations
        .retain(|r| r.expiration_time.0.as_second() > now);
    for entry in entries {
        let api = reservation_to_api(entry);
        match status
            .reservations
            .iter_mut()
            .find(|r| r.reserved_by.uid == api.reserved_by.uid && r.generation == api.generation)
        {
            Some(existing) => *existing = api,
            None => status.reservations.push(api),
        }
    }
    q
}

/// Whether our own copy is newer than the cache's: by resourceVersion when both are
/// numbers; otherwise ours (it came from the apiserver after the cache's, or the cache
/// would not differ; a wrong guess costs one conflict and a re-read).
fn is_newer(own: &CachedQuota, cached: &CachedQuota) -> bool {
    match (own.resource_version(), cached.resource_version()) {
        (Some(a), Some(b)) => a > b,
        _ => own.metadata.resource_version != cached.metadata.resource_version,
    }
}

/// Resets the namespace when its worker unwinds (a bug), so later requests get a new
/// worker and the waiting ones an error instead of a hang.
struct WorkerGuard {
    inner: Arc<Inner>,
    namespace: String,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(namespace = %self.namespace, "reservation worker panicked");
            lock(&self.inner.namespaces).remove(&self.namespace);
        }
    }
}

async fn worker(inner: Arc<Inner>, namespace: String) {
    let _guard = WorkerGuard {
        inner: inner.clone(),
        namespace: namespace.clone(),
    };
    loop {
        // Read before taking the namespaces lock, as newest_copies does.
        let cached = inner.cache.in_namespace(&namespace);
        let jobs: Vec<Job> = {
            let mut namespaces = lock(&inner.namespaces);
            let Some(ns) = namespaces.get_mut(&namespace) else {
                return;
            };
            if ns.pending.is_empty() {
                ns.running = false;
                // Keep only our copies the cache has not caught up with yet, so a quiet or
                // deleted namespace does not hold its quota objects for the process's life.
                ns.newest.retain(|name, own| {
                    cached.iter().any(|c| c.name() == name && is_newer(own, c))
                });
                if ns.newest.is_empty() {
                    namespaces.remove(&namespace);
                }
                return;
            }
            let n = ns.pending.len().min(inner.config.max_batch.max(1));
            ns.pending.drain(..n).collect()
        };
        inner.process(&namespace, jobs).await;
    }
}

impl Inner {
    /// The namespace's quotas (cache order = name order), each replaced by our own copy
    /// when that is newer; `gone` = quotas found deleted during this batch.
    fn newest_copies(&self, namespace: &str, gone: &HashSet<String>) -> Vec<Arc<CachedQuota>> {
        let cached = self.cache.in_namespace(namespace);
        let mut namespaces = lock(&self.namespaces);
        let Some(ns) = namespaces.get_mut(namespace) else {
            return cached
                .into_iter()
                .filter(|c| !gone.contains(c.name()))
                .collect();
        };
        ns.newest
            .retain(|name, _| cached.iter().any(|c| c.name() == name));
        cached
            .into_iter()
            .filter(|c| !gone.contains(c.name()))
            .map(|c| match ns.newest.get(c.name()) {
                Some(own) if is_newer(own, &c) => own.clone(),
                Some(_) => {
                    ns.newest.remove(c.name());
                    c
                }
                None => c,
            })
            .collect()
    }

    /// Keep `object` (returned by a write or a re-read) as the newest copy.
    fn remember(&self, namespace: &str, object: KarmadaQuota) {
        let copy = Arc::new(CachedQuota::from_object(object));
        if let Some(ns) = lock(&self.namespaces).get_mut(namespace) {
            ns.newest.insert(copy.name().to_owned(), copy);
        }
    }

    /// Drop our copy of a quota whose state is unknown now (failed or timed-out write).
    fn forget(&self, namespace: &str, name: &str) {
        if let Some(ns) = lock(&self.namespaces).get_mut(namespace) {
            ns.newest.remove(name);
        }
    }

    async fn process(&self, namespace: &str, jobs: Vec<Job>) {
        #[allow(clippy::cast_precision_loss)]
        self.metrics.batch_size.observe(jobs.len() as f64);
        let mut slots: Vec<Slot> = jobs
            .into_iter()
            .map(|j| Slot {
                request: j.request,
                deadline: j.deadline,
                reply: Some(j.reply),
                durable: BTreeSet::new(),
                allowed: Vec::new(),
            })
            .collect();
        let ttl = ttl_secs(self.config.reservation_ttl);
        let max = self.config.max_reservations;
        let mut gone = HashSet::new();
        let mut last_conflict = String::new();
        let mut exhausted = true;

        for attempt in 1..=self.config.max_attempts.max(1) {
            let started = Instant::now();
            for s in &mut slots {
                if s.reply.as_ref().is_some_and(oneshot::Sender::is_closed) {
                    s.reply = None; // the caller gave up (timeout): nothing more to do
                } else if s.deadline <= started {
                    s.answer(Err(Error::Timeout));
                }
            }
            let open: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].open()).collect();
            if open.is_empty() {
                return;
            }
            if attempt > 1 {
                self.metrics.retries.inc();
            }

            let copies = self.newest_copies(namespace, &gone);
            let mut states = match states(namespace, &copies) {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(%namespace, error = %e, "refusing ResourceBindings");
                    let bad = copies.iter().find(|c| c.parsed.is_err());
                    for &i in &open {
                        slots[i].answer(Err(bad
                            .map_or(Error::WorkerGone(namespace.to_owned()), |c| {
                                invalid_quota(namespace, c)
                            })));
                    }
                    return;
                }
            };

            let now = (self.clock)();
            let decisions = {
                let reqs: Vec<AdmissionRequest<'_>> = open
                    .iter()
                    .map(|&i| slots[i].request.as_core(now, ttl, max))
                    .collect();
                decide_batch(&mut states, &reqs)
            };

            // quota → (slot, entry) still to be written
            let mut writes: BTreeMap<String, Vec<(usize, Reservation)>> = BTreeMap::new();
            for (&i, decision) in open.iter().zip(decisions) {
                let slot = &mut slots[i];
                match decision {
                    Decision::Deny(d) => slot.answer(Ok(Decision::Deny(d))),
                    Decision::Allow(entries) => {
                        for (q, e) in &entries {
                            if !slot.durable.contains(q) {
                                writes.entry(q.clone()).or_default().push((i, e.clone()));
                            }
                        }
                        slot.allowed = entries;
                        slot.answer_if_durable();
                    }
                }
            }

            let mut conflicted = false;
            for (quota, entries) in writes {
                let entries: Vec<(usize, Reservation)> = entries
                    .into_iter()
                    .filter(|(i, _)| slots[*i].open())
                    .collect();
                let Some(deadline) = entries.iter().map(|(i, _)| slots[*i].deadline).max() else {
                    continue;
                };
                let Some(Ok(parsed)) = copies
                    .iter()
                    .find(|c| c.name() == quota)
                    .map(|c| c.parsed.as_ref())
                else {
                    continue; // unreachable: decisions only name quotas of `copies`
                };
                let body = with_entries(&parsed.object, entries.iter().map(|(_, e)| e), now);
                match timeout_at(deadline, self.store.replace_status(&body)).await {
                    Ok(Ok(written)) => {
                        self.metrics.write("ok");
                        self.remember(namespace, written);
                        for (i, _) in &entries {
                            slots[*i].durable.insert(quota.clone());
                            slots[*i].answer_if_durable();
                        }
                    }
                    Ok(Err(StoreError::Conflict)) => {
                        self.metrics.write("conflict");
                        self.metrics.conflicts.inc();
                        tracing::debug!(%namespace, %quota, attempt, "status write conflict; re-reading");
                        match timeout_at(deadline, self.store.get(namespace, &quota)).await {
                            Ok(Ok(fresh)) => self.remember(namespace, fresh),
                            Ok(Err(StoreError::NotFound)) => {
                                gone.insert(quota.clone());
                            }
                            Ok(Err(_)) | Err(_) => self.forget(namespace, &quota),
                        }
                        last_conflict = quota;
                        conflicted = true;
                        break;
                    }
                    Ok(Err(StoreError::NotFound)) => {
                        // Deleted since the cache saw it: it no longer applies; decide again.
                        self.metrics.write("not_found");
                        self.forget(namespace, &quota);
                        gone.insert(quota);
                        conflicted = true;
                        break;
                    }
                    Ok(Err(e)) => {
                        self.metrics.write("error");
                        self.forget(namespace, &quota);
                        tracing::warn!(%namespace, %quota, error = %e, "status write failed");
                        for (i, _) in &entries {
                            slots[*i].answer(Err(Error::Store {
                                namespace: namespace.to_owned(),
                                name: quota.clone(),
                                source: e.clone(),
                            }));
                        }
                    }
                    Err(_elapsed) => {
                        self.metrics.write("timeout");
                        self.forget(namespace, &quota);
                        for (i, _) in &entries {
                            slots[*i].answer(Err(Error::Timeout));
                        }
                    }
                }
            }
            if !conflicted {
                exhausted = false;
                break;
            }
        }
        for s in slots.iter_mut().filter(|s| s.open()) {
            s.answer(Err(if exhausted {
                Error::TooManyConflicts {
                    namespace: namespace.to_owned(),
                    name: last_conflict.clone(),
                    attempts: self.config.max_attempts,
                }
            } else {
                // Every open request had its writes attempted; none can be left. Defensive.
                Error::WorkerGone(namespace.to_owned())
            }));
        }
    }
}
