//! The one reconciler of both quota kinds (KarmadaQuota, KarmadaClusterQuota: [`QuotaKind`])
//! and its one writer of their status. A turn is five steps, each a function of its own:
//!
//! ```text
//!  reconcile(quota) ─ not synced yet? requeue
//!  fence    a leader whose binding index holds no list begun in its term (a Lease just
//!           taken: crate::fence, R21)? requeue
//!  pace     leader and paced (interval, contended backoff)? requeue after the wait
//!  read     (expired.rs) the leader: the bindings of expired entries the watch has not
//!           shown, read from the apiserver (quorum GETs) into the index, so the prune
//!           drops only entries whose request was not stored (R19)
//!  plan     (plan.rs, pure) the kind's computation + desired status + its waiting line;
//!           a fold-only change while few entries wait is put off: no status, and the
//!           put-off returned (Plan::fold_after)
//!  write    (write.rs) follower: nothing
//!           leader: status::update ─ nothing planned ─► nothing
//!                      │ still the leader, past the fence? (checked before every
//!                      │ write) ─ no ─► nothing
//!                      │ replace_status(resourceVersion = the one the plan was computed on)
//!                      ├─ 200 ─► events for notable changes
//!                      └─ 409 ─► GET the quota, plan again from it (entries the webhook
//!                               added meanwhile are in the fresh object, so they survive);
//!                               with a backoff: contended after two, retried later
//!  publish  (publish.rs) the leader: the kind's own writes (a cluster quota's shares);
//!           every replica: the view for the dashboard, the quota's metrics
//!  requeue: 1 s after the earliest reservation expiry, else the resync period; sooner
//!  for a fold put off.
//! ```

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use std::time::{Duration, Instant};

use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::{KarmadaQuotaStatus, QuotaObject};
use karmada_quota_shell::backoff::Backoff;
use karmada_quota_shell::events::{Event, EventQueue};
use kube::runtime::controller::Action;
use tokio::sync::watch;

use crate::api::Views;
use crate::desired::{self, Computed};
use crate::error::Error;
use crate::index::Index;
use crate::members::MemberRegistry;
use crate::metrics::Metrics;
use karmada_quota_dashboard::model::Quota;

mod kind;
mod pacing;
mod plan;
mod publish;
mod write;

pub use kind::{KindCtx, Planned, QuotaKind};
pub use pacing::{FOLD_BATCH, Pacing};
pub use plan::{Plan, plan};

use publish::Turn;
use write::Wrote;

/// How many times a status write is recomputed after a 409 before the reconcile fails
/// (and is retried with backoff), without a write backoff (`--max-write-backoff=0s`).
pub const MAX_WRITE_ATTEMPTS: u32 = 5;
/// Writes of one turn with a write backoff: the first, and one after re-reading; a quota
/// still contended is left to its next turn, after the backoff.
pub const CONTENDED_WRITE_ATTEMPTS: u32 = 2;
/// Wait before reconciling again while the binding watch has not listed everything.
const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);
/// How long one write step (its reads and compare-and-swap attempts), or one of the
/// kind's own writes after it, may take before it is abandoned and the quota reconciled
/// again: a write that lands after it is read back by the next plan, which starts from
/// the stored copy.
const WRITE_DEADLINE: Duration = Duration::from_secs(15);
/// The error backoff of one quota: 1 s doubling per failure in a row, up to 256 s (the
/// doubling stopped at 2^8 s before this was one type, below the 300 s once named as its
/// ceiling; the waits are kept as they were).
const ERROR_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(256));

/// The reconcilers' settings, from the flags.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// Recompute every quota at least this often (`--resync-period`).
    pub resync: Duration,
    /// Least time between two status writes of one quota (`--min-write-interval`).
    pub min_write_interval: Duration,
    /// Longest wait between writes of a contended quota (`--max-write-backoff`; zero: no
    /// backoff).
    pub max_write_backoff: Duration,
    /// Longest a fold-only write is put off (`--fold-interval`; zero: never).
    pub fold_interval: Duration,
    /// This replica measures no member (`--role=dashboard`): the views take `observed`
    /// from the quotas' status.
    pub observed_from_status: bool,
}

/// What the reconcilers of both kinds share.
pub struct Ctx {
    /// Control-plane state.
    pub index: Arc<RwLock<Index>>,
    /// Member clusters' pods and reachability.
    pub members: MemberRegistry,
    /// The computed view of every quota (served at /api/v1/quotas).
    pub views: Views,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Whether this replica is the leader (only the leader writes and records events).
    pub leader: watch::Receiver<bool>,
    /// The event writer's queue (`None` in tests).
    pub events: Option<EventQueue<Event>>,
    /// Resync period.
    pub resync: Duration,
    /// Consecutive failures per quota, for the error backoff.
    pub failures: Mutex<HashMap<(String, String), u32>>,
    /// When each quota's status may be written (interval, backoff, fold put-off).
    pub pacing: Pacing,
    /// This replica measures no member (`--role=dashboard`): the views take `observed`
    /// from the quotas' status.
    pub observed_from_status: bool,
    /// The waiting lines (`status.queue`), kept by the leader's release loop.
    pub queue: Arc<crate::queue::Line>,
    /// The reservation batches held (`None`: a replica that does not reconcile).
    pub batches: Option<Arc<crate::batches::Batches>>,
    /// Reads the bindings of expired entries before the leader plans (`expired`; `None`:
    /// no reads, and an expired entry the watch has not shown is kept).
    pub binding_reads: Option<Arc<dyn crate::expired::BindingReads>>,
    /// The leader's fence: a term writes only from a binding list begun in it.
    pub fence: Arc<crate::fence::Fence>,
}

impl Ctx {
    /// A context; `failures` starts empty.
    pub fn new(
        index: Arc<RwLock<Index>>,
        members: MemberRegistry,
        views: Views,
        metrics: Arc<Metrics>,
        leader: watch::Receiver<bool>,
        events: Option<EventQueue<Event>>,
        resync: Duration,
    ) -> Self {
        Self {
            index,
            members,
            views,
            metrics,
            leader,
            events,
            resync,
            failures: Mutex::new(HashMap::new()),
            pacing: Pacing::default(),
            observed_from_status: false,
            queue: Arc::default(),
            batches: None,
            binding_reads: None,
            fence: Arc::default(),
        }
    }

    /// Whether this replica may write status now: it leads, and its binding index holds a
    /// list begun in this term (`crate::fence`).
    pub fn may_write(&self) -> bool {
        *self.leader.borrow() && self.fence.allows(&self.index.read())
    }

    /// Apply `settings`: the resync period, the write pacing and where `observed` comes
    /// from.
    #[must_use]
    pub fn with_settings(self, settings: &Settings) -> Self {
        Self {
            resync: settings.resync,
            observed_from_status: settings.observed_from_status,
            ..self
        }
        .with_min_write_interval(settings.min_write_interval)
        .with_max_write_backoff(settings.max_write_backoff)
        .with_fold_interval(settings.fold_interval)
    }

    /// Read the bindings of expired entries through `reads` before planning (R19).
    #[must_use]
    pub fn with_binding_reads(mut self, reads: Arc<dyn crate::expired::BindingReads>) -> Self {
        self.binding_reads = Some(reads);
        self
    }

    /// Write only from binding lists begun after each Lease taken (`fence`).
    #[must_use]
    pub fn with_fence(mut self, fence: Arc<crate::fence::Fence>) -> Self {
        self.fence = fence;
        self
    }

    /// Fold the entries of these reservation batches into the quotas they name.
    #[must_use]
    pub fn with_batches(mut self, batches: Option<Arc<crate::batches::Batches>>) -> Self {
        self.batches = batches;
        self
    }

    /// The batch entries `object`'s stored status does not account for (read from the
    /// object itself: the status writer plans again from a fresh one after a 409);
    /// `None` when no batches are held or none above its `foldedThrough` names it.
    pub fn unfolded<K: karmada_quota_crds::QuotaObject>(
        &self,
        object: &K,
    ) -> Option<desired::Unfolded> {
        let folded = object.quota_status().and_then(|s| s.folded_through);
        self.batches.as_ref()?.unfolded(&object.key(), folded)
    }

    /// Take what members run from the quotas' status instead of measuring it (a replica
    /// that holds no member credential, `--role=dashboard`).
    #[must_use]
    pub fn with_observed_from_status(mut self, on: bool) -> Self {
        self.observed_from_status = on;
        self
    }

    /// The view of `quota` computed as `computed`, whose stored status is `status`.
    pub(crate) fn view_of<K: QuotaObject>(
        &self,
        quota: &K,
        computed: &Computed,
        status: &KarmadaQuotaStatus,
        now: jiff::Timestamp,
    ) -> Quota {
        let mut view = crate::api::computed_quota(quota, computed, status, now);
        if self.observed_from_status {
            crate::api::observed_from_status(&mut view, status);
        }
        view
    }

    /// Show the lines `queue` keeps in the quotas' status.
    #[must_use]
    pub fn with_queue(mut self, queue: Arc<crate::queue::Line>) -> Self {
        self.queue = queue;
        self
    }

    /// Set the longest a fold-only write is put off (zero: never).
    #[must_use]
    pub fn with_fold_interval(mut self, interval: Duration) -> Self {
        self.pacing.fold_interval = interval;
        self
    }

    /// Set the longest wait between writes of a contended quota (zero: no backoff).
    #[must_use]
    pub fn with_max_write_backoff(mut self, max: Duration) -> Self {
        self.pacing.max_write_backoff = max;
        self
    }

    /// Set the least time between two status writes of one quota.
    #[must_use]
    pub fn with_min_write_interval(mut self, interval: Duration) -> Self {
        self.pacing.min_write_interval = interval;
        self
    }

    /// Whether the binding watch has listed everything (no plan from a partial list).
    pub fn bindings_synced(&self) -> bool {
        self.index.read().bindings_synced()
    }
}

/// The key of a quota's view, pacing and failures: (namespace, name), `""` for a
/// cluster-scoped one.
pub fn view_key(key: &QuotaKey) -> (String, String) {
    match key {
        QuotaKey::Namespaced { namespace, name } => (namespace.clone(), name.clone()),
        QuotaKey::Cluster { name } => (String::new(), name.clone()),
    }
}

/// Reconcile one quota of either kind (idempotent): pace, plan, write (the leader),
/// publish.
#[tracing::instrument(name = "reconcile", skip_all, fields(kind = K::KIND, quota = %object.key()))]
pub async fn reconcile<K: QuotaKind>(
    object: Arc<K>,
    ctx: Arc<KindCtx<K>>,
) -> Result<Action, Error> {
    let started = Instant::now();
    object.check()?;
    if !K::ready(&ctx) {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    let key = view_key(&object.key());
    let turn = if *ctx.leader.borrow() {
        if !ctx.may_write() {
            tracing::debug!("a new leader: waiting for the bindings listed in this term");
            return Ok(Action::requeue(NOT_SYNCED_RETRY));
        }
        if let Some(wait) = ctx.pacing.throttled(&key, pending(&*object)) {
            return Ok(Action::requeue(wait));
        }
        if let Some(reads) = &ctx.binding_reads {
            let now = crate::clock::now_secs();
            let outcome = crate::expired::read_for(&ctx.index, reads.as_ref(), &*object, now).await;
            ctx.metrics.expired_entries_read(&outcome);
        }
        match write::write(&ctx, &key, &object).await? {
            Wrote::Settled(turn) => turn,
            Wrote::Requeue(action) => return Ok(action),
        }
    } else {
        let Some(computation) = K::plan(&ctx, &object).1 else {
            return Ok(Action::requeue(NOT_SYNCED_RETRY));
        };
        Turn::follower(object, computation)
    };
    publish::publish(&ctx, key, turn, started).await
}

/// The entries a quota's stored status holds (its writes are not backed off while they
/// are many: [`FOLD_BATCH`]).
fn pending<K: QuotaKind>(object: &K) -> usize {
    object.quota_status().map_or(0, |s| s.reservations.len())
}

/// Logs what a kind's Controller made of one request (`noun`: "quota", "cluster
/// quota"); a failed reconcile is logged by [`error_policy`].
pub(crate) fn log_result<K: QuotaKind>(
    res: Result<
        (kube::runtime::reflector::ObjectRef<K>, Action),
        kube::runtime::controller::Error<Error, kube::runtime::watcher::Error>,
    >,
    noun: &str,
) {
    use kube::runtime::controller::Error as Failed;
    match res {
        Ok((obj, _)) => tracing::trace!(quota = %obj, "reconciled"),
        Err(Failed::ObjectNotFound(obj)) => {
            tracing::debug!(quota = %obj, "{noun} gone before its reconcile");
        }
        Err(Failed::ReconcilerFailed(..)) => {}
        Err(e) => tracing::warn!(error = %e, "{noun} controller error"),
    }
}

/// After a failed reconcile: count it and retry with exponential backoff (1 s … 5 min).
pub fn error_policy<K: QuotaKind>(object: Arc<K>, error: &Error, ctx: Arc<KindCtx<K>>) -> Action {
    ctx.metrics.reconcile_failed(error.metric_label());
    let key = view_key(&object.key());
    let (n, delay) = count_failure(&ctx, &key);
    tracing::warn!(kind = K::KIND, quota = %object.key(), %error, attempt = n, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Counts one more failed reconcile of `key` (either quota kind): the attempt number and
/// the exponential backoff before the next ([`ERROR_BACKOFF`]: 1 s … 256 s).
pub(crate) fn count_failure(ctx: &Ctx, key: &(String, String)) -> (u32, Duration) {
    let n = {
        let mut failures = ctx.failures.lock();
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = ERROR_BACKOFF.delay(n);
    (n, delay)
}

/// Drop what is kept about a deleted quota.
pub fn forget(ctx: &Ctx, ns: &str, name: &str) {
    ctx.views.remove([&(ns.to_owned(), name.to_owned())]);
    ctx.pacing.forget(&(ns.to_owned(), name.to_owned()));
    ctx.metrics.forget_quota(ns, name);
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod tests;
