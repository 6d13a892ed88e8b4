//! The KarmadaQuota reconciler and its one writer.
//!
//! ```text
//!  reconcile(quota) ─ not synced yet? requeue
//!     │ plan(fresh quota) = desired::compute + desired_status   (pure, from the index)
//!     ├─ follower: keep the view for /api/v1/quotas, write nothing
//!     └─ leader:   write_status ─ unchanged ─► nothing
//!                      │ still the leader? (checked before every write) ─ no ─► nothing
//!                      │ replace_status(resourceVersion = the one the plan was computed on)
//!                      ├─ 200 ─► events for notable changes
//!                      └─ 409 ─► GET the quota, plan again from it (entries the webhook
//!                               added meanwhile are in the fresh object, so they survive)
//!  requeue: 1 s after the earliest reservation expiry, else the resync period.
//! ```

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaStatus};
use karmada_quota_status::{self as status, Outcome, StatusStore};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, Recorder};
use kube::{Resource, ResourceExt};
use tokio::sync::watch;

use crate::Error;
use crate::api::{QuotaReport, Views};
use crate::desired::{self, Computed, Notice};
use crate::index::Index;
use crate::members::{MemberRegistry, Reach};
use crate::metrics::Metrics;

/// How many times a status write is recomputed after a 409 before the reconcile fails
/// (and is retried with backoff), without a write backoff (`--max-write-backoff=0s`).
pub const MAX_WRITE_ATTEMPTS: u32 = 5;
/// Writes of one turn with a write backoff: the first, and one after re-reading; a quota
/// still contended is left to its next turn, after the backoff.
pub const CONTENDED_WRITE_ATTEMPTS: u32 = 2;
/// Entries a quota may hold before a fold-only write is no longer put off.
pub const FOLD_BATCH: usize = 64;
/// Wait before reconciling again while the binding watch has not listed everything.
const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);
/// Longest error backoff of one quota.
const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(300);

/// Everything a reconcile needs.
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
    /// Reads and writes quota status (the only writer of it in the controller).
    pub store: Arc<dyn StatusStore>,
    /// Event recorder (`None` in tests).
    pub recorder: Option<Recorder>,
    /// Resync period.
    pub resync: Duration,
    /// Consecutive failures per quota, for the error backoff.
    pub failures: Mutex<HashMap<(String, String), u32>>,
    /// Least time between two status writes of one quota (see [`Ctx::throttled`]).
    pub min_write_interval: Duration,
    /// When this replica last wrote each quota's status (or gave a contended write up).
    pub last_write: Mutex<HashMap<(String, String), Instant>>,
    /// Longest wait between writes of a contended quota (see [`Ctx::throttled`]); zero:
    /// no backoff.
    pub max_write_backoff: Duration,
    /// Consecutive turns whose write met a conflict, per quota.
    pub contended: Mutex<HashMap<(String, String), u32>>,
    /// Longest a fold-only write is put off (see [`Ctx::fold_wait`]); zero: never.
    pub fold_interval: Duration,
}

impl Ctx {
    /// A context; `failures` starts empty.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: Arc<RwLock<Index>>,
        members: MemberRegistry,
        views: Views,
        metrics: Arc<Metrics>,
        leader: watch::Receiver<bool>,
        store: Arc<dyn StatusStore>,
        recorder: Option<Recorder>,
        resync: Duration,
    ) -> Self {
        Self {
            index,
            members,
            views,
            metrics,
            leader,
            store,
            recorder,
            resync,
            failures: Mutex::new(HashMap::new()),
            min_write_interval: Duration::ZERO,
            last_write: Mutex::new(HashMap::new()),
            max_write_backoff: Duration::ZERO,
            contended: Mutex::new(HashMap::new()),
            fold_interval: Duration::ZERO,
        }
    }

    /// Set the longest a fold-only write is put off (zero: never).
    #[must_use]
    pub fn with_fold_interval(mut self, interval: Duration) -> Self {
        self.fold_interval = interval;
        self
    }

    /// How long to put off writing `next` over `quota`'s status, if at all: only a write
    /// that folds observed entries into `used` and nothing else (`desired::fold::fold_only`),
    /// while the quota holds fewer than [`FOLD_BATCH`] entries and its last write is less
    /// than `--fold-interval` ago. Effective usage is the same either way; writing less
    /// often leaves the quota to the webhook's admissions.
    fn fold_wait(
        &self,
        key: &(String, String),
        quota: &KarmadaQuota,
        next: &KarmadaQuotaStatus,
    ) -> Option<Duration> {
        if self.fold_interval.is_zero() || next.reservations.len() >= FOLD_BATCH {
            return None;
        }
        let elapsed = self
            .last_write
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)?
            .elapsed();
        let wait = self
            .fold_interval
            .checked_sub(elapsed)
            .filter(|d| !d.is_zero())?;
        let current = quota.status.clone().unwrap_or_default();
        desired::fold::fold_only(&current, next).then_some(wait)
    }

    /// Set the longest wait between writes of a contended quota (zero: no backoff).
    #[must_use]
    pub fn with_max_write_backoff(mut self, max: Duration) -> Self {
        self.max_write_backoff = max;
        self
    }

    /// The least time between two writes of `key` now: `--min-write-interval`, doubled for
    /// every consecutive turn whose write met the webhook's (409), up to
    /// `--max-write-backoff`.
    ///
    /// No backoff while the quota holds [`FOLD_BATCH`] entries or more (`pending`): every
    /// write then carries them all, so pruning them soon is what keeps both writers cheap,
    /// and `--max-reservations` must not be reached because the controller held back.
    fn write_interval(&self, key: &(String, String), pending: usize) -> Duration {
        if pending >= FOLD_BATCH {
            return self.min_write_interval;
        }
        let streak = self
            .contended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0);
        if streak == 0 || self.max_write_backoff.is_zero() {
            return self.min_write_interval;
        }
        self.min_write_interval
            .saturating_mul(1 << streak.min(16))
            .min(self.max_write_backoff)
            .max(self.min_write_interval)
    }

    /// Record how a turn's write went: `conflicted` when it met a 409 (written after a
    /// re-read, or given up); also starts the interval when it was given up.
    fn paced(&self, key: &(String, String), conflicted: bool, gave_up: bool) {
        let mut contended = self.contended.lock().unwrap_or_else(|e| e.into_inner());
        if conflicted {
            *contended.entry(key.clone()).or_insert(0) += 1;
        } else {
            contended.remove(key);
        }
        drop(contended);
        if gave_up {
            self.last_write
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(key.clone(), Instant::now());
        }
    }

    /// Set the least time between two status writes of one quota.
    #[must_use]
    pub fn with_min_write_interval(mut self, interval: Duration) -> Self {
        self.min_write_interval = interval;
        self
    }

    /// How long to wait before this quota's status may be written again, if at all.
    ///
    /// During a burst of admissions the webhook rewrites the quota's status many times a
    /// second, and every rewrite is a watch event that asks for a reconcile. Writing after
    /// each one would make the controller and the webhook conflict on nearly every write.
    /// So the first write goes out at once and later ones at most once per interval
    /// (leading edge: unlike a trailing debounce, a steady stream of events can never
    /// postpone the controller's write, and so its pruning, for good).
    ///
    /// While the quota's writes keep meeting the webhook's, the interval doubles (see
    /// [`Ctx::write_interval`]): the webhook's writes are the admissions waiting, the
    /// controller's only move `used` and prune, which can wait a little longer.
    pub(crate) fn throttled(&self, key: &(String, String), pending: usize) -> Option<Duration> {
        let interval = self.write_interval(key, pending);
        let last = self.last_write.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = last.get(key)?.elapsed();
        interval.checked_sub(elapsed).filter(|d| !d.is_zero())
    }

    /// Plan one quota: compute from the index and members, then the desired status.
    fn plan(
        &self,
        quota: &KarmadaQuota,
    ) -> (
        Option<KarmadaQuotaStatus>,
        (Computed, BTreeMap<String, Reach>, jiff::Timestamp),
    ) {
        let now = jiff::Timestamp::now();
        let ns = quota.namespace().unwrap_or_default();
        let observed = self.members.observed_pods(&ns);
        let reach = self.members.reach();
        let computed = {
            let index = self.index.read().unwrap_or_else(|e| e.into_inner());
            desired::compute(quota, &index, &observed, now.as_second())
        };
        let status = desired::desired_status(quota, &computed, &reach, now);
        (status, (computed, reach, now))
    }
}

/// Reconcile one quota (idempotent).
pub async fn reconcile(quota: Arc<KarmadaQuota>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    let started = Instant::now();
    let ns = quota
        .namespace()
        .ok_or_else(|| Error::MissingNamespace(quota.name_any()))?;
    let name = quota.name_any();
    if !ctx
        .index
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .bindings_synced()
    {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    let leader = *ctx.leader.borrow();
    let key = (ns.clone(), name.clone());
    let mut fold_after: Option<Duration> = None;
    let pending = quota.status.as_ref().map_or(0, |s| s.reservations.len());
    if leader && let Some(wait) = ctx.throttled(&key, pending) {
        return Ok(Action::requeue(wait));
    }
    let (report, computed, now) = if leader {
        let backoff = !ctx.max_write_backoff.is_zero();
        let attempts = if backoff {
            CONTENDED_WRITE_ATTEMPTS
        } else {
            MAX_WRITE_ATTEMPTS
        };
        // A fold-only change is put off (see Ctx::fold_wait): then nothing is written and
        // the quota is looked at again when the wait is over.
        let deferred: Mutex<Option<Duration>> = Mutex::new(None);
        let w = status::update(
            &*ctx.store,
            (*quota).clone(),
            |q| {
                let (next, rest) = ctx.plan(q);
                let wait = next.as_ref().and_then(|n| ctx.fold_wait(&key, q, n));
                *deferred.lock().unwrap_or_else(|e| e.into_inner()) = wait;
                (next.filter(|_| wait.is_none()), rest)
            },
            || *ctx.leader.borrow(),
            attempts,
        )
        .await;
        let deferred = deferred.into_inner().unwrap_or_else(|e| e.into_inner());
        let w = match w {
            Ok(w) => w,
            Err(e) => {
                for _ in 0..e.conflicts() {
                    ctx.metrics.status_conflict();
                }
                if backoff && matches!(e, status::UpdateError::Conflicts { .. }) {
                    // Contended: leave the quota to the webhook for a while; the next
                    // turn plans from the newest copy the watch brings.
                    ctx.paced(&key, true, true);
                    let wait = ctx.write_interval(&key, pending);
                    tracing::debug!(quota = %format!("{ns}/{name}"), ?wait, "status write contended; retrying later");
                    return Ok(Action::requeue(wait));
                }
                return Err(e.into());
            }
        };
        for _ in 0..w.conflicts {
            ctx.metrics.status_conflict();
        }
        if backoff && matches!(w.outcome, Outcome::Written(_)) {
            ctx.paced(&key, w.conflicts > 0, false);
        }
        let (computed, _reach, now) = w.plan;
        let status = match &w.outcome {
            Outcome::Gone => {
                forget(&ctx, &ns, &name);
                return Ok(Action::await_change());
            }
            // Lost leadership mid-write: like a follower, keep the view of what is stored.
            Outcome::Unchanged | Outcome::Stopped => w.base.status.clone().unwrap_or_default(),
            Outcome::Written(written) => {
                ctx.metrics.status_written();
                ctx.last_write
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone(), Instant::now());
                let new = written.status.clone().unwrap_or_default();
                let notices = desired::notices(w.base.status.as_ref(), &new);
                publish(&ctx, &written.object_ref(&()), &notices).await;
                tracing::debug!(quota = %format!("{ns}/{name}"), "status written");
                new
            }
        };
        if let Some(wait) = deferred {
            tracing::debug!(quota = %format!("{ns}/{name}"), ?wait, "fold-only change put off");
            fold_after = Some(wait);
        }
        (
            QuotaReport::new(&w.base, &computed, &status, now),
            computed,
            now,
        )
    } else {
        let (_, (computed, _reach, now)) = ctx.plan(&quota);
        let status = quota.status.clone().unwrap_or_default();
        (
            QuotaReport::new(&quota, &computed, &status, now),
            computed,
            now,
        )
    };
    if let Computed::Valid { view, .. } = &computed {
        ctx.metrics.observe_quota(view);
    }
    ctx.views
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert((ns.clone(), name.clone()), report);
    ctx.failures
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ns, name));
    ctx.metrics.reconciled(started.elapsed());
    let next = desired::next_requeue(&computed, now.as_second(), ctx.resync);
    Ok(Action::requeue(fold_after.map_or(next, |f| f.min(next))))
}

/// After a failed reconcile: count it and retry with exponential backoff (1 s … 5 min).
pub fn error_policy(quota: Arc<KarmadaQuota>, error: &Error, ctx: Arc<Ctx>) -> Action {
    ctx.metrics.reconcile_failed(error.metric_label());
    let key = (quota.namespace().unwrap_or_default(), quota.name_any());
    let (n, delay) = count_failure(&ctx, &key);
    tracing::warn!(quota = %format!("{}/{}", key.0, key.1), %error, attempt = n, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Counts one more failed reconcile of `key` (either quota kind): the attempt number and
/// the exponential backoff before the next (1 s … `MAX_ERROR_BACKOFF`).
pub(crate) fn count_failure(ctx: &Ctx, key: &(String, String)) -> (u32, Duration) {
    let n = {
        let mut failures = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = Duration::from_secs(1_u64 << n.min(9).saturating_sub(1)).min(MAX_ERROR_BACKOFF);
    (n, delay)
}

/// Drop what is kept about a deleted quota.
pub fn forget(ctx: &Ctx, ns: &str, name: &str) {
    ctx.views
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ns.to_owned(), name.to_owned()));
    ctx.last_write
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ns.to_owned(), name.to_owned()));
    ctx.contended
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ns.to_owned(), name.to_owned()));
    ctx.metrics.forget_quota(ns, name);
}

/// Publishes `notices` as Events of the quota object `reference` (either kind).
pub(crate) async fn publish(
    ctx: &Ctx,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    notices: &[Notice],
) {
    let Some(recorder) = &ctx.recorder else {
        return;
    };
    for n in notices {
        let ev = KubeEvent {
            type_: n.type_,
            reason: n.reason.to_owned(),
            note: Some(n.note.chars().take(1000).collect()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&ev, reference).await {
            tracing::warn!(error = %e, reason = n.reason, "could not publish event");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::desired::REASON_SYNCED;
    use crate::testutil::*;
    use karmada_quota_crds::quota::CONDITION_READY;
    use karmada_quota_status::fake::FakeStore;
    use kube::runtime::watcher::Event;
    use prometheus_client::registry::Registry;

    const FAR: i64 = 4_000_000_000;

    const NS: &str = "team-a";

    /// A context writing to `store`; the written quota is "q" in "team-a".
    fn ctx(store: &Arc<FakeStore>, index: Index, leader: bool) -> (Arc<Ctx>, watch::Sender<bool>) {
        let mut reg = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut reg));
        let (tx, rx) = watch::channel(leader);
        let c = Ctx::new(
            Arc::new(RwLock::new(index)),
            MemberRegistry::default(),
            Views::default(),
            metrics,
            rx,
            store.clone(),
            None,
            Duration::from_secs(300),
        );
        (Arc::new(c), tx)
    }

    fn synced_index(bindings: &[karmada_quota_crds::ResourceBinding]) -> Index {
        let mut i = Index::new(600);
        i.apply_binding_event(&Event::Init, None, 0);
        for b in bindings {
            i.apply_binding_event(&Event::InitApply(b.clone()), None, 0);
        }
        i.apply_binding_event(&Event::InitDone, None, 0);
        i
    }

    #[tokio::test]
    async fn leader_writes_once_then_nothing_when_unchanged() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding(
            "team-a",
            "web",
            "u1",
            1,
            3,
            "1",
            &[("member1", 3)],
        )]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        let (c, _tx) = ctx(&store, i, true);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        let stored = store.object(NS, "q");
        let st = stored.status.clone().unwrap();
        assert_eq!(st.used["pods"].0, "3");
        assert_eq!(
            st.conditions
                .iter()
                .find(|c| c.type_ == CONDITION_READY)
                .unwrap()
                .reason,
            REASON_SYNCED
        );
        // Reconciling the written object again writes nothing.
        reconcile(Arc::new(stored), c.clone()).await.unwrap();
        assert_eq!(store.written(NS, "q").len(), 1);
        let views = c.views.read().unwrap();
        let report = &views[&("team-a".to_owned(), "q".to_owned())];
        assert_eq!(
            report.used.get("pods").map(ToString::to_string).as_deref(),
            Some("3")
        );
    }

    #[tokio::test]
    async fn writes_of_one_quota_are_spaced_by_the_min_write_interval() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 3, "1", &[])]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        let (c, _tx) = ctx(&store, i, true);
        let mut c = Arc::into_inner(c).unwrap();
        c.min_write_interval = Duration::from_secs(60);
        let c = Arc::new(c);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert_eq!(store.written(NS, "q").len(), 1);

        // A new binding changes usage, but the last write was just now: no write, and a
        // requeue for when the interval has passed.
        c.index.write().unwrap().apply_binding_event(
            &Event::Apply(mk_binding("team-a", "api", "u2", 1, 2, "1", &[])),
            None,
            0,
        );
        let stored = store.object(NS, "q");
        let action = reconcile(Arc::new(stored.clone()), c.clone())
            .await
            .unwrap();
        assert_eq!(store.written(NS, "q").len(), 1);
        assert!(
            action != Action::requeue(Duration::from_secs(300)),
            "{action:?}"
        );

        // Once the interval has passed, the change is written.
        let key = ("team-a".to_owned(), "q".to_owned());
        let long_ago = Instant::now().checked_sub(Duration::from_secs(61)).unwrap();
        c.last_write.lock().unwrap().insert(key, long_ago);
        reconcile(Arc::new(stored), c.clone()).await.unwrap();
        assert_eq!(store.written(NS, "q").len(), 2);
        assert_eq!(store.object(NS, "q").status.unwrap().used["pods"].0, "5");
    }

    #[tokio::test]
    async fn follower_computes_the_view_but_never_writes() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 2, "1", &[])]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        let (c, tx) = ctx(&store, i, false);
        reconcile(Arc::new(q.clone()), c.clone()).await.unwrap();
        assert!(store.written(NS, "q").is_empty());
        assert_eq!(c.views.read().unwrap().len(), 1);
        tx.send_replace(true);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert_eq!(store.written(NS, "q").len(), 1);
    }

    #[tokio::test]
    async fn nothing_is_written_before_the_bindings_are_listed() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        let (c, _tx) = ctx(&store, Index::new(600), true);
        let action = reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert_eq!(action, Action::requeue(NOT_SYNCED_RETRY));
        assert!(store.written(NS, "q").is_empty());
    }

    #[tokio::test]
    async fn conflict_rereads_so_a_reservation_added_meanwhile_survives() {
        // The controller read the quota (no reservations); before its write, the webhook
        // admits "api" (never observed yet) and adds an entry. The controller's first write
        // conflicts; it re-reads and recomputes, and the entry is kept.
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding(
            "team-a",
            "web",
            "u1",
            1,
            3,
            "1",
            &[("member1", 3)],
        )]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        store.intrude_on(NS, "q", |stored: &mut KarmadaQuota| {
            let st = stored
                .status
                .get_or_insert_with(KarmadaQuotaStatus::default);
            st.reservations
                .push(mk_reservation("api", "u-api", 1, &[("pods", "4")], FAR));
        });
        let (c, _tx) = ctx(&store, i, true);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        let st = store.object(NS, "q").status.unwrap();
        assert_eq!(st.used["pods"].0, "3");
        assert_eq!(st.reservations.len(), 1);
        assert_eq!(st.reservations[0].reserved_by.uid, "u-api");
        assert_eq!(store.written(NS, "q").len(), 1);
        let report = c.views.read().unwrap()[&("team-a".to_owned(), "q".to_owned())].clone();
        assert_eq!(
            report
                .effective
                .get("pods")
                .map(ToString::to_string)
                .as_deref(),
            Some("7")
        );
    }

    #[tokio::test]
    async fn reconcile_fails_after_repeated_conflicts_and_counts_them() {
        let q = mk_quota("team-a", "q", &[("pods", "1")]);
        let i = synced_index(&[]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        store
            .conflict_every
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let (c, _tx) = ctx(&store, i, true);
        let err = reconcile(Arc::new(q), c.clone()).await.unwrap_err();
        assert_eq!(err.metric_label(), "conflict");
        assert!(err.to_string().contains("team-a/q"), "{err}");
        assert_eq!(
            store.conflicts.load(std::sync::atomic::Ordering::SeqCst),
            MAX_WRITE_ATTEMPTS as usize
        );
    }

    #[tokio::test]
    async fn reconcile_stops_writing_when_leadership_is_lost_mid_write() {
        // Leader at the start of the reconcile; the elector steps down while the first write
        // is in flight (and conflicts). The reconcile ends Ok (no error backoff), writes
        // nothing, and still publishes the view.
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 3, "1", &[])]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        let (c, tx) = ctx(&store, i, true);
        store.intrude_on(NS, "q", move |_: &mut KarmadaQuota| {
            tx.send_replace(false);
        });
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert!(store.written(NS, "q").is_empty());
        assert!(c.last_write.lock().unwrap().is_empty());
        assert_eq!(c.views.read().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_contended_write_is_left_for_later_and_the_interval_doubles_until_a_clean_write() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 3, "1", &[])]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        store
            .conflict_every
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let (c, _tx) = ctx(&store, i, true);
        let c = Arc::new(
            Arc::into_inner(c)
                .unwrap()
                .with_min_write_interval(Duration::from_millis(250))
                .with_max_write_backoff(Duration::from_secs(2)),
        );
        let key = ("team-a".to_owned(), "q".to_owned());
        // Every write conflicts: two attempts (one re-read), then no error but a requeue
        // after the doubled interval.
        let action = reconcile(Arc::new(q.clone()), c.clone()).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_millis(500)));
        let q = store.object(NS, "q");
        assert_eq!(
            store.conflicts.load(std::sync::atomic::Ordering::SeqCst),
            CONTENDED_WRITE_ATTEMPTS as usize
        );
        assert!(store.written(NS, "q").is_empty());
        // Right after, the quota is still throttled: nothing is tried.
        reconcile(Arc::new(q.clone()), c.clone()).await.unwrap();
        assert_eq!(
            store.conflicts.load(std::sync::atomic::Ordering::SeqCst),
            CONTENDED_WRITE_ATTEMPTS as usize
        );
        // Further contended turns double the interval up to the maximum.
        for want in [1000, 2000, 2000] {
            c.last_write.lock().unwrap().remove(&key);
            let action = reconcile(Arc::new(q.clone()), c.clone()).await.unwrap();
            assert_eq!(action, Action::requeue(Duration::from_millis(want)));
        }
        // Not while many entries are pending: pruning them is what keeps writes cheap.
        assert_eq!(
            c.write_interval(&key, FOLD_BATCH),
            Duration::from_millis(250)
        );
        // A clean write (from the newest copy, as the watch brings it) resets it to the
        // min interval.
        store
            .conflict_every
            .store(0, std::sync::atomic::Ordering::SeqCst);
        c.last_write.lock().unwrap().remove(&key);
        reconcile(Arc::new(store.object(NS, "q")), c.clone())
            .await
            .unwrap();
        assert_eq!(store.written(NS, "q").len(), 1);
        assert_eq!(c.write_interval(&key, 0), Duration::from_millis(250));
    }

    #[tokio::test]
    async fn a_fold_only_change_is_put_off_and_any_other_is_written_at_once() {
        // Written once: used = 3 (web), no entries.
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 3, "1", &[])]);
        let store = FakeStore::with(std::slice::from_ref(&q));
        let (c, _tx) = ctx(&store, i, true);
        let c = Arc::new(
            Arc::into_inner(c)
                .unwrap()
                .with_fold_interval(Duration::from_secs(60)),
        );
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert_eq!(store.written(NS, "q").len(), 1);
        // The webhook admits "api" (2 pods); then the binding is observed: folding its
        // entry into used changes nothing admission reads, so it is put off.
        let mut stored = store.object(NS, "q");
        stored
            .status
            .as_mut()
            .unwrap()
            .reservations
            .push(mk_reservation("api", "u2", 1, &[("pods", "2")], FAR));
        store.put(stored);
        c.index.write().unwrap().apply_binding_event(
            &Event::Apply(mk_binding("team-a", "api", "u2", 1, 2, "1", &[])),
            None,
            0,
        );
        let action = reconcile(Arc::new(store.object(NS, "q")), c.clone())
            .await
            .unwrap();
        assert_eq!(store.written(NS, "q").len(), 1, "fold put off");
        assert!(
            action != Action::requeue(Duration::from_secs(300)),
            "{action:?}"
        );
        // "web" is deleted: effective usage falls, written at once (with the fold).
        c.index.write().unwrap().apply_binding_event(
            &Event::Delete(mk_binding("team-a", "web", "u1", 1, 3, "1", &[])),
            None,
            0,
        );
        reconcile(Arc::new(store.object(NS, "q")), c.clone())
            .await
            .unwrap();
        assert_eq!(store.written(NS, "q").len(), 2);
        let st = store.object(NS, "q").status.unwrap();
        assert_eq!(st.used["pods"].0, "2");
        assert!(st.reservations.is_empty());
    }

    #[tokio::test]
    async fn error_policy_backs_off_exponentially() {
        let q = Arc::new(mk_quota("team-a", "q", &[("pods", "1")]));
        let store = FakeStore::with(std::slice::from_ref(&*q));
        let (c, _tx) = ctx(&store, Index::new(600), true);
        let err = Error::MissingNamespace("q".into());
        let delays: Vec<_> = (0..4)
            .map(|_| error_policy(q.clone(), &err, c.clone()))
            .collect();
        assert_eq!(
            delays,
            [1, 2, 4, 8].map(|s| Action::requeue(Duration::from_secs(s)))
        );
    }
}
