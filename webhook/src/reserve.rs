//! The reservation batcher (docs/reservations.md): one queue for every namespace, whose
//! worker decides the waiting requests together and makes the admitted ones durable in one
//! reservation batch (`KarmadaQuotaReservation`).
//!
//! ```text
//!  handler ── submit(BindingRequest, deadline) ──► queue ──► worker (spawned on demand,
//!     ▲                                                     exits when the queue is empty)
//!     │   per batch (`commit`), at most `max_attempts` rounds:
//!     │     1. the newest copy of each quota object the batch's namespaces answer to
//!     │        (their KarmadaQuotas, the KarmadaClusterQuotas selecting them), each read
//!     │        from etcd once per read generation (`verified`)
//!     │     2. the next batch number, read before the view is counted; each quota's
//!     │        entries completed with the batches its status does not account for
//!     │        (`Inner::enforced`); core::decision::decide_batch_selected over the batch
//!     │     3. create batch kqr-<number> holding the admitted entries (the create is the
//!     │        compare-and-swap: a number taken means decide again under the next one)
//!     │     4. answer once this webhook's batch watch confirmed the batch (R5); else
//!     │        withdraw it and answer 503
//!     └──────────────────── oneshot answer ◄────────┘
//! ```
//!
//! The webhook only creates batches; the controller folds them into the quotas' status
//! and deletes them. The quota reads go through `karmada_quota_status::StatusStore` and
//! the batch creates through the ledger's `BatchStore`, so tests drive the batcher with
//! the in-memory stores, which inject conflicts and failures.
//!
//! This file holds the batcher's API ([`Batcher`]: submit, dry run, the enforceability
//! check of the early answer) and its shared state; the steps live in the sub-modules
//! (`worker`, `batch`, `commit`, `newest`, `verified`, `arrival`). Each batch runs in a
//! `reservation_batch` span (`requests`, `namespace` when it holds one).

use std::collections::HashMap;
use std::sync::Arc;

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
/// A batch's requests and how each is answered.
mod batch;
/// Steps 1–4 for one batch: one batch object per decision.
mod commit;
/// A batch's copy of one quota object, of either kind.
mod copy;
/// Steps 1 and 2's inputs: the newest copies, and which of them can be enforced.
mod newest;
/// The cluster quota store of a batcher built without one.
mod no_cluster_store;
/// Step 1: each quota read from etcd before its first use.
mod verified;
/// The queue's worker: batch after batch until the queue is empty.
mod worker;

use batch::Job;
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
    /// How long a worker that finds the queue idle waits for more requests before its
    /// first batch (`--batch-linger`); zero takes what is there at once.
    pub linger: Duration,
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
            linger: Duration::ZERO,
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

/// What a batcher reads and writes: the quotas of each kind (reads from etcd) and the
/// reservation batches.
pub struct Stores {
    /// KarmadaQuotas.
    pub quotas: Arc<dyn StatusStore>,
    /// KarmadaClusterQuotas.
    pub cluster_quotas: Arc<dyn StatusStore<KarmadaClusterQuota>>,
    /// The reservation batches (this webhook's view and their store).
    pub ledger: Arc<Ledger>,
}

/// Unix seconds now.
fn wall_clock() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Hands ResourceBinding requests to the queue's worker, which decides them in batches
/// and makes the admitted ones durable in reservation batches. Clone freely.
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
    /// The reservation batches: this webhook's view of them and their store.
    ledger: Arc<Ledger>,
    /// The quota reads from etcd (`verified`), per kind.
    store: Arc<dyn StatusStore>,
    cluster_store: Arc<dyn StatusStore<KarmadaClusterQuota>>,
    cache: QuotaCache,
    metrics: Arc<Metrics>,
    config: BatcherConfig,
    clock: fn() -> i64,
    queue: Mutex<Queue>,
    /// Bindings this webhook suspended and the controller's status does not show yet.
    arrivals: Mutex<arrival::Recent>,
    /// The quota copies read from etcd (`verified`).
    verified: Mutex<verified::Verified>,
}

/// The one queue of every namespace's requests.
#[derive(Default)]
struct Queue {
    /// Requests waiting for the worker.
    pending: Vec<Job>,
    /// A worker task is running.
    running: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

impl Batcher {
    /// A batcher reserving in `ledger`'s batches, reading KarmadaQuotas from etcd through
    /// `store` and from `cache`, on the real clock; without a cluster quota store (see
    /// [`Self::with_stores`]).
    pub fn new(
        store: Arc<dyn StatusStore>,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
        ledger: Arc<Ledger>,
    ) -> Self {
        Self::with_stores(
            Stores {
                quotas: store,
                cluster_quotas: Arc::new(NoClusterStore),
                ledger,
            },
            cache,
            metrics,
            config,
            wall_clock,
        )
    }

    /// A batcher over `stores`, with the clock `clock` (Unix seconds).
    pub fn with_stores(
        stores: Stores,
        cache: QuotaCache,
        metrics: Arc<Metrics>,
        config: BatcherConfig,
        clock: fn() -> i64,
    ) -> Self {
        let Stores {
            quotas: store,
            cluster_quotas: cluster_store,
            ledger,
        } = stores;
        Self {
            inner: Arc::new(Inner {
                ledger,
                store,
                cluster_store,
                cache,
                metrics,
                config,
                clock,
                queue: Mutex::default(),
                arrivals: Mutex::default(),
                verified: Mutex::default(),
            }),
        }
    }

    /// The real clock.
    pub fn wall_clock() -> fn() -> i64 {
        wall_clock
    }

    /// Decide `request` with the queue's next batch and, when admitted, make its
    /// reservations durable. Resolves to core's decision, or an error (never to be read as an
    /// allow). The caller bounds the wait with `deadline` (the worker gives up on the
    /// request at the same instant).
    pub async fn submit(&self, request: BindingRequest, deadline: Instant) -> Result<Decision> {
        let (reply, answer) = oneshot::channel();
        let namespace = request.namespace.clone();
        let spawn = {
            let mut queue = lock(&self.inner.queue);
            queue.pending.push(Job {
                request,
                deadline,
                reply,
            });
            !std::mem::replace(&mut queue.running, true)
        };
        if spawn {
            tokio::spawn(worker::worker(self.inner.clone()));
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

impl Inner {
    /// The states a decision enforces ([`enforced_states`]), each quota's
    /// `reservations` completed with the batch entries its status does not account for
    /// yet (`status.foldedThrough`); the error of a batch that cannot be counted.
    fn enforced(
        &self,
        copies: &std::collections::BTreeMap<QuotaKey, copy::QuotaCopy>,
    ) -> Result<Vec<karmada_quota_core::quota::QuotaState>> {
        let mut states = enforced_states(copies, &self.config);
        let ledger = &self.ledger;
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
