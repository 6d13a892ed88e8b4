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
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event as KubeEvent, Recorder};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::watch;

use crate::Error;
use crate::api::{QuotaReport, Views};
use crate::desired::{self, Computed, Notice};
use crate::index::Index;
use crate::members::{MemberRegistry, Reach};
use crate::metrics::Metrics;

/// How many times a status write is recomputed after a 409 before the reconcile fails
/// (and is retried with backoff).
pub const MAX_WRITE_ATTEMPTS: u32 = 5;
/// Wait before reconciling again while the binding watch has not listed everything.
const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);
/// Longest error backoff of one quota.
const MAX_ERROR_BACKOFF: Duration = Duration::from_secs(300);

/// The only place that writes a quota's status (style.md point 4).
pub trait StatusApi: Send + Sync + 'static {
    /// The current object, `None` when it is gone.
    fn get(
        &self,
        namespace: &str,
        name: &str,
    ) -> impl Future<Output = Result<Option<KarmadaQuota>, kube::Error>> + Send;

    /// Replace the status subresource; `quota.metadata.resourceVersion` is the precondition.
    fn replace_status(
        &self,
        quota: &KarmadaQuota,
    ) -> impl Future<Output = Result<KarmadaQuota, kube::Error>> + Send;
}

/// [`StatusApi`] over the API server.
#[derive(Clone)]
pub struct KubeStatusApi(pub Client);

impl StatusApi for KubeStatusApi {
    async fn get(&self, namespace: &str, name: &str) -> Result<Option<KarmadaQuota>, kube::Error> {
        Api::<KarmadaQuota>::namespaced(self.0.clone(), namespace)
            .get_opt(name)
            .await
    }

    async fn replace_status(&self, quota: &KarmadaQuota) -> Result<KarmadaQuota, kube::Error> {
        let ns = quota.namespace().unwrap_or_default();
        Api::<KarmadaQuota>::namespaced(self.0.clone(), &ns)
            .replace_status(&quota.name_any(), &PostParams::default(), quota)
            .await
    }
}

/// What [`write_status`] did.
#[derive(Clone, Debug)]
pub enum WriteOutcome {
    /// The status already said it; nothing written.
    Unchanged,
    /// Written; the object the API server returned.
    Written(Box<KarmadaQuota>),
    /// The quota was deleted meanwhile.
    Gone,
    /// Leadership was lost before a write; nothing (more) written.
    NotLeader,
}

/// The result of [`write_status`]: the outcome, the plan that was (or would have been)
/// written, and the object it was computed from.
#[derive(Debug)]
pub struct Written<P> {
    /// What happened.
    pub outcome: WriteOutcome,
    /// The last plan computed.
    pub plan: P,
    /// The quota the last plan was computed from (its status is what was replaced).
    pub base: KarmadaQuota,
    /// How many 409s were met.
    pub conflicts: u32,
}

/// Compute the desired status with `plan` and write it when it differs, with a
/// resourceVersion precondition; on 409 re-read the quota and plan again from the fresh
/// object, at most `max_attempts` writes. `is_leader` is asked before every write; once it
/// says no, nothing more is written ([`WriteOutcome::NotLeader`]).
pub async fn write_status<A: StatusApi, P>(
    api: &A,
    quota: KarmadaQuota,
    mut plan: impl FnMut(&KarmadaQuota) -> (Option<KarmadaQuotaStatus>, P),
    is_leader: impl Fn() -> bool,
    max_attempts: u32,
) -> Result<Written<P>, Error> {
    let ns = quota.namespace().unwrap_or_default();
    let name = quota.name_any();
    let mut base = quota;
    let mut conflicts = 0;
    loop {
        let (status, p) = plan(&base);
        let Some(status) = status else {
            return Ok(Written {
                outcome: WriteOutcome::Unchanged,
                plan: p,
                base,
                conflicts,
            });
        };
        if !is_leader() {
            tracing::debug!(quota = %format!("{ns}/{name}"), "no longer the leader; not writing");
            return Ok(Written {
                outcome: WriteOutcome::NotLeader,
                plan: p,
                base,
                conflicts,
            });
        }
        let mut obj = base.clone();
        obj.status = Some(status);
        match api.replace_status(&obj).await {
            Ok(written) => {
                return Ok(Written {
                    outcome: WriteOutcome::Written(Box::new(written)),
                    plan: p,
                    base,
                    conflicts,
                });
            }
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                return Ok(Written {
                    outcome: WriteOutcome::Gone,
                    plan: p,
                    base,
                    conflicts,
                });
            }
            Err(kube::Error::Api(s)) if s.is_conflict() => {
                conflicts += 1;
                if conflicts >= max_attempts {
                    return Err(Error::Conflicts {
                        quota: format!("{ns}/{name}"),
                        attempts: conflicts,
                    });
                }
                tracing::debug!(quota = %format!("{ns}/{name}"), "status write conflict; re-reading");
                match api.get(&ns, &name).await? {
                    Some(fresh) => base = fresh,
                    None => {
                        return Ok(Written {
                            outcome: WriteOutcome::Gone,
                            plan: p,
                            base,
                            conflicts,
                        });
                    }
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Everything a reconcile needs.
pub struct Ctx<A: StatusApi = KubeStatusApi> {
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
    /// The status writer.
    pub status_api: A,
    /// Event recorder (`None` in tests).
    pub recorder: Option<Recorder>,
    /// Resync period.
    pub resync: Duration,
    /// Consecutive failures per quota, for the error backoff.
    pub failures: Mutex<HashMap<(String, String), u32>>,
    /// Least time between two status writes of one quota (see [`Ctx::throttled`]).
    pub min_write_interval: Duration,
    /// When this replica last wrote each quota's status.
    pub last_write: Mutex<HashMap<(String, String), Instant>>,
}

impl<A: StatusApi> Ctx<A> {
    /// A context; `failures` starts empty.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        index: Arc<RwLock<Index>>,
        members: MemberRegistry,
        views: Views,
        metrics: Arc<Metrics>,
        leader: watch::Receiver<bool>,
        status_api: A,
        recorder: Option<Recorder>,
        resync: Duration,
    ) -> Self {
        Self {
            index,
            members,
            views,
            metrics,
            leader,
            status_api,
            recorder,
            resync,
            failures: Mutex::new(HashMap::new()),
            min_write_interval: Duration::ZERO,
            last_write: Mutex::new(HashMap::new()),
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
    fn throttled(&self, key: &(String, String)) -> Option<Duration> {
        let last = self.last_write.lock().unwrap_or_else(|e| e.into_inner());
        let elapsed = last.get(key)?.elapsed();
        self.min_write_interval
            .checked_sub(elapsed)
            .filter(|d| !d.is_zero())
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
pub async fn reconcile<A: StatusApi>(
    quota: Arc<KarmadaQuota>,
    ctx: Arc<Ctx<A>>,
) -> Result<Action, Error> {
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
    if leader && let Some(wait) = ctx.throttled(&key) {
        return Ok(Action::requeue(wait));
    }
    let (report, computed, now) = if leader {
        let w = write_status(
            &ctx.status_api,
            (*quota).clone(),
            |q| ctx.plan(q),
            || *ctx.leader.borrow(),
            MAX_WRITE_ATTEMPTS,
        )
        .await;
        let w = match w {
            Ok(w) => w,
            Err(e) => {
                if let Error::Conflicts { attempts, .. } = &e {
                    for _ in 0..*attempts {
                        ctx.metrics.status_conflict();
                    }
                }
                return Err(e);
            }
        };
        for _ in 0..w.conflicts {
            ctx.metrics.status_conflict();
        }
        let (computed, _reach, now) = w.plan;
        let status = match &w.outcome {
            WriteOutcome::Gone => {
                forget(&ctx, &ns, &name);
                return Ok(Action::await_change());
            }
            // Lost leadership mid-write: like a follower, keep the view of what is stored.
            WriteOutcome::Unchanged | WriteOutcome::NotLeader => {
                w.base.status.clone().unwrap_or_default()
            }
            WriteOutcome::Written(written) => {
                ctx.metrics.status_written();
                ctx.last_write
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key.clone(), Instant::now());
                let new = written.status.clone().unwrap_or_default();
                let notices = desired::notices(w.base.status.as_ref(), &new);
                publish(&ctx, written, &notices).await;
                tracing::debug!(quota = %format!("{ns}/{name}"), "status written");
                new
            }
        };
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
    Ok(Action::requeue(desired::next_requeue(
        &computed,
        now.as_second(),
        ctx.resync,
    )))
}

/// After a failed reconcile: count it and retry with exponential backoff (1 s … 5 min).
pub fn error_policy<A: StatusApi>(
    quota: Arc<KarmadaQuota>,
    error: &Error,
    ctx: Arc<Ctx<A>>,
) -> Action {
    ctx.metrics.reconcile_failed(error.metric_label());
    let key = (quota.namespace().unwrap_or_default(), quota.name_any());
    let n = {
        let mut failures = ctx.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    };
    let delay = Duration::from_secs(1_u64 << n.min(9).saturating_sub(1)).min(MAX_ERROR_BACKOFF);
    tracing::warn!(quota = %format!("{}/{}", key.0, key.1), %error, attempt = n, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// Drop what is kept about a deleted quota.
pub fn forget<A: StatusApi>(ctx: &Ctx<A>, ns: &str, name: &str) {
    ctx.views
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ns.to_owned(), name.to_owned()));
    ctx.last_write
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&(ns.to_owned(), name.to_owned()));
    ctx.metrics.forget_quota(ns, name);
}

async fn publish<A: StatusApi>(ctx: &Ctx<A>, quota: &KarmadaQuota, notices: &[Notice]) {
    let Some(recorder) = &ctx.recorder else {
        return;
    };
    let reference = quota.object_ref(&());
    for n in notices {
        let ev = KubeEvent {
            type_: n.type_,
            reason: n.reason.to_owned(),
            note: Some(n.note.chars().take(1000).collect()),
            action: "Reconcile".to_owned(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&ev, &reference).await {
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
    use kube::core::Status;
    use kube::runtime::watcher::Event;
    use prometheus_client::registry::Registry;

    const FAR: i64 = 4_000_000_000;

    /// An in-memory API server for one quota: resourceVersion compare-and-swap, and a hook
    /// that runs before the first write (to simulate the webhook writing in between).
    type Hook = Box<dyn FnOnce(&mut KarmadaQuota) + Send>;

    struct FakeApi {
        stored: Mutex<Option<KarmadaQuota>>,
        before_first_write: Mutex<Option<Hook>>,
        writes: Mutex<Vec<KarmadaQuotaStatus>>,
    }

    impl FakeApi {
        fn new(q: &KarmadaQuota) -> Self {
            Self {
                stored: Mutex::new(Some(q.clone())),
                before_first_write: Mutex::new(None),
                writes: Mutex::new(Vec::new()),
            }
        }
        fn stored(&self) -> KarmadaQuota {
            self.stored.lock().unwrap().clone().unwrap()
        }
    }

    fn conflict() -> kube::Error {
        kube::Error::Api(
            Status::failure("the object has been modified", "Conflict")
                .with_code(409)
                .boxed(),
        )
    }

    fn bump(q: &mut KarmadaQuota) {
        let rv: u64 = q
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or("0")
            .parse()
            .unwrap();
        q.metadata.resource_version = Some((rv + 1).to_string());
    }

    impl StatusApi for FakeApi {
        async fn get(&self, _ns: &str, _name: &str) -> Result<Option<KarmadaQuota>, kube::Error> {
            Ok(self.stored.lock().unwrap().clone())
        }
        async fn replace_status(&self, quota: &KarmadaQuota) -> Result<KarmadaQuota, kube::Error> {
            if let Some(hook) = self.before_first_write.lock().unwrap().take() {
                let mut guard = self.stored.lock().unwrap();
                let stored = guard.as_mut().unwrap();
                hook(stored);
                bump(stored);
            }
            let mut guard = self.stored.lock().unwrap();
            let stored = guard.as_mut().unwrap();
            if stored.metadata.resource_version != quota.metadata.resource_version {
                return Err(conflict());
            }
            stored.status = quota.status.clone();
            bump(stored);
            self.writes
                .lock()
                .unwrap()
                .push(quota.status.clone().unwrap());
            Ok(stored.clone())
        }
    }

    fn ctx(api: FakeApi, index: Index, leader: bool) -> (Arc<Ctx<FakeApi>>, watch::Sender<bool>) {
        let mut reg = Registry::default();
        let metrics = Arc::new(Metrics::register(&mut reg));
        let (tx, rx) = watch::channel(leader);
        let c = Ctx::new(
            Arc::new(RwLock::new(index)),
            MemberRegistry::default(),
            Views::default(),
            metrics,
            rx,
            api,
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
        let (c, _tx) = ctx(FakeApi::new(&q), i, true);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        let stored = c.status_api.stored();
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
        assert_eq!(c.status_api.writes.lock().unwrap().len(), 1);
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
        let (c, _tx) = ctx(FakeApi::new(&q), i, true);
        let mut c = Arc::into_inner(c).unwrap();
        c.min_write_interval = Duration::from_secs(60);
        let c = Arc::new(c);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert_eq!(c.status_api.writes.lock().unwrap().len(), 1);

        // A new binding changes usage, but the last write was just now: no write, and a
        // requeue for when the interval has passed.
        c.index.write().unwrap().apply_binding_event(
            &Event::Apply(mk_binding("team-a", "api", "u2", 1, 2, "1", &[])),
            None,
            0,
        );
        let stored = c.status_api.stored();
        let action = reconcile(Arc::new(stored.clone()), c.clone())
            .await
            .unwrap();
        assert_eq!(c.status_api.writes.lock().unwrap().len(), 1);
        assert!(
            action != Action::requeue(Duration::from_secs(300)),
            "{action:?}"
        );

        // Once the interval has passed, the change is written.
        let key = ("team-a".to_owned(), "q".to_owned());
        let long_ago = Instant::now().checked_sub(Duration::from_secs(61)).unwrap();
        c.last_write.lock().unwrap().insert(key, long_ago);
        reconcile(Arc::new(stored), c.clone()).await.unwrap();
        assert_eq!(c.status_api.writes.lock().unwrap().len(), 2);
        assert_eq!(c.status_api.stored().status.unwrap().used["pods"].0, "5");
    }

    #[tokio::test]
    async fn follower_computes_the_view_but_never_writes() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 2, "1", &[])]);
        let (c, tx) = ctx(FakeApi::new(&q), i, false);
        reconcile(Arc::new(q.clone()), c.clone()).await.unwrap();
        assert!(c.status_api.writes.lock().unwrap().is_empty());
        assert_eq!(c.views.read().unwrap().len(), 1);
        tx.send_replace(true);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert_eq!(c.status_api.writes.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn nothing_is_written_before_the_bindings_are_listed() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let (c, _tx) = ctx(FakeApi::new(&q), Index::new(600), true);
        let action = reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert_eq!(action, Action::requeue(NOT_SYNCED_RETRY));
        assert!(c.status_api.writes.lock().unwrap().is_empty());
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
        let api = FakeApi::new(&q);
        *api.before_first_write.lock().unwrap() = Some(Box::new(|stored: &mut KarmadaQuota| {
            let st = stored
                .status
                .get_or_insert_with(KarmadaQuotaStatus::default);
            st.reservations
                .push(mk_reservation("api", "u-api", 1, &[("pods", "4")], FAR));
        }));
        let (c, _tx) = ctx(api, i, true);
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        let st = c.status_api.stored().status.unwrap();
        assert_eq!(st.used["pods"].0, "3");
        assert_eq!(st.reservations.len(), 1);
        assert_eq!(st.reservations[0].reserved_by.uid, "u-api");
        assert_eq!(c.status_api.writes.lock().unwrap().len(), 1);
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
    async fn write_status_gives_up_after_repeated_conflicts() {
        struct AlwaysConflict;
        impl StatusApi for AlwaysConflict {
            async fn get(&self, _: &str, _: &str) -> Result<Option<KarmadaQuota>, kube::Error> {
                Ok(Some(mk_quota("team-a", "q", &[("pods", "1")])))
            }
            async fn replace_status(&self, _: &KarmadaQuota) -> Result<KarmadaQuota, kube::Error> {
                Err(conflict())
            }
        }
        let q = mk_quota("team-a", "q", &[("pods", "1")]);
        let mut plans = 0;
        let err = write_status(
            &AlwaysConflict,
            q,
            |_| {
                plans += 1;
                (Some(KarmadaQuotaStatus::default()), ())
            },
            || true,
            3,
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::Conflicts { attempts: 3, .. }), "{err}");
        assert_eq!(plans, 3);
        assert_eq!(err.metric_label(), "conflict");
    }

    #[tokio::test]
    async fn write_status_stops_when_leadership_is_lost_between_attempts() {
        use std::sync::atomic::{AtomicBool, Ordering};
        // The first write conflicts (the webhook wrote in between); meanwhile leadership is
        // lost, so the retry must not write.
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let api = FakeApi::new(&q);
        let leader = Arc::new(AtomicBool::new(true));
        let l = leader.clone();
        *api.before_first_write.lock().unwrap() = Some(Box::new(move |_: &mut KarmadaQuota| {
            l.store(false, Ordering::SeqCst);
        }));
        let mut plans = 0;
        let w = write_status(
            &api,
            q,
            |_| {
                plans += 1;
                (Some(KarmadaQuotaStatus::default()), ())
            },
            || leader.load(Ordering::SeqCst),
            MAX_WRITE_ATTEMPTS,
        )
        .await
        .unwrap();
        assert!(matches!(w.outcome, WriteOutcome::NotLeader), "{w:?}");
        assert_eq!(w.conflicts, 1);
        assert_eq!(plans, 2);
        assert!(api.writes.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn write_status_writes_nothing_when_not_the_leader() {
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let api = FakeApi::new(&q);
        let w = write_status(
            &api,
            q,
            |_| (Some(KarmadaQuotaStatus::default()), ()),
            || false,
            MAX_WRITE_ATTEMPTS,
        )
        .await
        .unwrap();
        assert!(matches!(w.outcome, WriteOutcome::NotLeader), "{w:?}");
        assert!(api.writes.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn reconcile_stops_writing_when_leadership_is_lost_mid_write() {
        // Leader at the start of the reconcile; the elector steps down while the first write
        // is in flight (and conflicts). The reconcile ends Ok (no error backoff), writes
        // nothing, and still publishes the view.
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 3, "1", &[])]);
        let (c, tx) = ctx(FakeApi::new(&q), i, true);
        *c.status_api.before_first_write.lock().unwrap() =
            Some(Box::new(move |_: &mut KarmadaQuota| {
                tx.send_replace(false);
            }));
        reconcile(Arc::new(q), c.clone()).await.unwrap();
        assert!(c.status_api.writes.lock().unwrap().is_empty());
        assert!(c.last_write.lock().unwrap().is_empty());
        assert_eq!(c.views.read().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn error_policy_backs_off_exponentially() {
        let q = Arc::new(mk_quota("team-a", "q", &[("pods", "1")]));
        let (c, _tx) = ctx(FakeApi::new(&q), Index::new(600), true);
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
