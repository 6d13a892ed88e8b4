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
//!
//! This file holds the batcher's API ([`Batcher`]: submit, dry run, the enforceability
//! check of the early answer) and its shared state; the steps live in the sub-modules
//! (`worker`, `batch`, `newest`, `record`, `rollback`, `arrival`). Each batch runs in a
//! `reservation_batch` span (`group`, `requests`, `namespace` when it holds one), each
//! quota write and rollback in a span with its `quota`.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::{Mutex, MutexGuard};
use std::time::Duration;

use karmada_quota_core::decision::{AdmissionRequest, Decision, decide_batch_selected};
use karmada_quota_core::quota::Unaccounted;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_status::StatusStore;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::cache::{CachedClusterQuota, CachedQuota, QuotaCache};
use crate::error::{Error, Result};
use crate::ledger::Ledger;
use crate::metrics::Metrics;

/// Step 0 of a CREATE under a queueing quota: does it wait (docs/queueing.md)?
mod arrival;
/// Steps 1–5 for one batch.
mod batch;
/// Steps 3–4 with reservation batches: one batch object per decision.
mod commit;
/// A batch's copy of one quota object, of either kind.
mod copy;
/// Steps 1 and 2's inputs: the newest copies, and which of them can be enforced.
mod newest;
/// The cluster quota store of a batcher built without one.
mod no_cluster_store;
/// Step 3: one quota's compare-and-swap update with re-decision.
mod record;
/// Step 5: removing what a request that did not end admitted had written.
mod rollback;
/// With reservation batches: each quota read from etcd before its first use.
mod verified;
/// A group's worker: batch after batch until its queue is empty.
mod worker;

use batch::Job;
use copy::QuotaCopy;
use newest::enforced_states;
use no_cluster_store::NoClusterStore;

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

/// Hands ResourceBinding requests to the worker of their batch group (a namespace, or the
/// namespaces sharing cluster quotas; one group for all with reservation batches), which
/// decides them in batches and records the reservations. Clone freely.
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
    /// The reservation batches, when they are the store (`--reservation-store=batches`).
    ledger: OnceLock<Arc<Ledger>>,
    store: Arc<dyn StatusStore>,
    cluster_store: Arc<dyn StatusStore<KarmadaClusterQuota>>,
    cache: QuotaCache,
    metrics: Arc<Metrics>,
    config: BatcherConfig,
    clock: fn() -> i64,
    groups: Mutex<HashMap<String, Group>>,
    /// Bindings this webhook suspended and the controller's status does not show yet.
    arrivals: Mutex<arrival::Recent>,
    /// With reservation batches: the quota copies read from etcd (`verified`).
    verified: Mutex<verified::Verified>,
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

impl Batcher {
    /// A batcher writing KarmadaQuotas through `store`, reading quotas from `cache`, on
    /// the real clock; without a cluster quota store (see [`Self::with_stores`]).
    pub fn new(
        store: Arc<dyn StatusStore>,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
    ) -> Self {
        Self::with_stores(
            store,
            Arc::new(NoClusterStore),
            cache,
            metrics,
            config,
            wall_clock,
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
                ledger: OnceLock::new(),
                store,
                cluster_store,
                cache,
                metrics,
                config,
                clock,
                groups: Mutex::default(),
                arrivals: Mutex::default(),
                verified: Mutex::default(),
            }),
        }
    }

    /// Make reservations durable in reservation batches (`--reservation-store=batches`)
    /// instead of the quotas' status: every namespace then shares one queue, so one batch
    /// carries admissions of many namespaces (group commit across namespaces).
    #[must_use]
    pub fn with_ledger(self, ledger: Arc<Ledger>) -> Self {
        if self.inner.ledger.set(ledger).is_err() {
            tracing::warn!("the batcher already has a reservation ledger; keeping the first");
        }
        self
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
        let group = self.inner.group_of(&namespace);
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
            tokio::spawn(worker::worker(self.inner.clone(), group));
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
        let states = self.inner.enforced(&copies)?;
        let now = (self.inner.clock)();
        let req = request.as_core(now, ttl_secs(c.reservation_ttl), c.max_reservations);
        let mut states = states;
        Ok(decide_batch_selected(&mut states, &[req], |n| labels.get(n)).remove(0))
    }

    /// Whether every quota object covering `namespace` can be enforced, judged on the
    /// newest copies as a batch or a dry run would see them (`quotas` and `clusters` as
    /// the caller has just read them from the cache): the error of the first that cannot.
    /// Writes nothing and waits for no batch.
    pub fn check_enforceable(
        &self,
        namespace: &str,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
    ) -> Result<()> {
        self.inner.newest(namespace, quotas, clusters).map(drop)
    }
}

/// The one batch group of every namespace when reservations go to batches.
const ALL_NAMESPACES: &str = "*";

impl Inner {
    /// The batch group of a request of `namespace`: its own group of connected quotas, or
    /// every namespace's when reservations go to batches.
    fn group_of(&self, namespace: &str) -> String {
        if self.ledger.get().is_some() {
            ALL_NAMESPACES.to_owned()
        } else {
            self.cache.batch_group(namespace)
        }
    }

    /// The states a decision enforces ([`enforced_states`]), each quota's
    /// `reservations` completed with the batch entries its status does not account for
    /// yet (`status.foldedThrough`) when reservations go to batches; the error of a batch
    /// that cannot be counted.
    fn enforced(
        &self,
        copies: &std::collections::BTreeMap<QuotaKey, copy::QuotaCopy>,
    ) -> Result<Vec<karmada_quota_core::quota::QuotaState>> {
        let mut states = enforced_states(copies, &self.config);
        let Some(ledger) = self.ledger.get() else {
            return Ok(states);
        };
        ledger.check()?;
        ledger.with_view(|view| {
            for state in &mut states {
                let key = state.key();
                let folded = copies.get(&key).and_then(copy::QuotaCopy::folded_through);
                // Upsert by (uid, generation) — the same admission retried counts once —
                // in linear time: a quota can hold thousands of pending entries.
                let mut at: HashMap<(String, i64), usize> = state
                    .reservations
                    .iter()
                    .enumerate()
                    .map(|(i, e)| ((e.reserved_by.uid.clone(), e.generation), i))
                    .collect();
                for (_, entry) in view.unfolded(&key, folded) {
                    let id = (entry.reserved_by.uid.clone(), entry.generation);
                    match at.get(&id) {
                        Some(&i) => state.reservations[i] = entry.clone(),
                        None => {
                            at.insert(id, state.reservations.len());
                            state.reservations.push(entry.clone());
                        }
                    }
                }
            }
        });
        Ok(states)
    }
}

/// `ttl` in whole seconds, rounded up.
fn ttl_secs(ttl: Duration) -> i64 {
    let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
    i64::try_from(secs).unwrap_or(i64::MAX)
}
