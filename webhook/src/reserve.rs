//! The per-namespace reservation batcher (docs/design.md §5).
//!
//! ```text
//!  handler ── submit(BindingRequest, deadline) ──► Namespace queue ──► worker (one per
//!     ▲                                                namespace, spawned on demand,
//!     │                                                exits when the queue is empty)
//!     │   per batch:
//!     │     1. newest copy of each quota: the cache's, or the object our own last
//!     │        write/read returned when its resourceVersion is newer
//!     │     2. core::decision::decide_batch over the batch (a Deny is final at once:
//!     │        a request denied by one quota stays denied)
//!     │     3. per quota with new entries, in name order: status::update (compare-and-
//!     │        swap; on 409 re-read and re-decide this quota's requests against the
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

use karmada_quota_core::decision::{AdmissionRequest, Decision, decide, decide_batch};
use karmada_quota_core::quota::{QuotaState, Reservation};
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_status::StatusStore;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cache::{CachedQuota, QuotaCache};
use crate::metrics::Metrics;
use crate::{Error, Result};

/// Step 3: one quota's compare-and-swap update with re-decision.
mod record;
/// Step 5: removing what a request that did not end admitted had written.
mod rollback;

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
    store: Arc<dyn StatusStore>,
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
    /// Quotas that still have to record this request's entry.
    needed: BTreeSet<String>,
    /// Entries written so far, with their quota: answered with an Allow, or rolled back.
    written: Vec<(String, Reservation)>,
    /// Entries that may have been written (the write's outcome is unknown: it timed out).
    maybe_written: Vec<(String, Reservation)>,
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

    /// Like [`Self::new`] with a custom clock (Unix seconds), for tests.
    pub fn with_clock(
        store: Arc<dyn StatusStore>,
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

        // 1–2: decide the batch against the newest copies.
        let copies = self.newest_copies(namespace, &HashSet::new());
        let mut states = match states(namespace, &copies) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(%namespace, error = %e, "refusing ResourceBindings");
                let bad = copies.iter().find(|c| c.parsed.is_err());
                for s in &mut slots {
                    s.answer(Err(bad
                        .map_or(Error::WorkerGone(namespace.to_owned()), |c| {
                            invalid_quota(namespace, c)
                        })));
                }
                return;
            }
        };
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
            decide_batch(&mut states, &reqs)
        };
        let mut quotas: BTreeSet<String> = BTreeSet::new();
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

        // 3: per quota, in name order, record the entries of the requests still open.
        for quota in quotas {
            let Some(copy) = copies.iter().find(|c| c.name() == quota) else {
                continue; // unreachable: decisions only name quotas of `copies`
            };
            let Ok(parsed) = copy.parsed.as_ref() else {
                continue; // unreachable: `states` refused the batch
            };
            self.record(
                namespace,
                &quota,
                (*parsed.object).clone(),
                &parsed.state,
                &mut slots,
            )
            .await;
        }

        // 4: answer. Admitted = every quota it needed holds its entry, and its caller is
        // still waiting for the answer.
        let mut undo: BTreeMap<String, Vec<Reservation>> = BTreeMap::new();
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
                    let _ = tx.send(Err(Error::WorkerGone(namespace.to_owned())));
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
            self.roll_back(namespace, &quota, &entries).await;
        }
    }
}
