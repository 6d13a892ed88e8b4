//! The one reconciler against an in-memory status store: write pacing, conflicts,
//! leadership, events — with KarmadaQuotas here, and the same pacing with
//! KarmadaClusterQuotas in `cluster_kind`.

use super::*;
use crate::desired::REASON_SYNCED;
use crate::testutil::*;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::quota::CONDITION_READY;
use karmada_quota_status::fake::FakeStore;
use kube::runtime::watcher::Event;

const FAR: i64 = 4_000_000_000;

const NS: &str = "team-a";

type QuotaCtx = Arc<KindCtx<KarmadaQuota>>;

/// A context writing to `store`; the written quota is "q" in "team-a".
fn ctx(store: &Arc<FakeStore>, index: Index, leader: bool) -> (QuotaCtx, watch::Sender<bool>) {
    ctx_with(store, index, leader, |c| c)
}

/// [`ctx`], its shared part set by `f` (pacing).
fn ctx_with(
    store: &Arc<FakeStore>,
    index: Index,
    leader: bool,
    f: impl FnOnce(Ctx) -> Ctx,
) -> (QuotaCtx, watch::Sender<bool>) {
    let (base, tx) = base_ctx(index, leader);
    let c = KindCtx {
        base: Arc::new(f(base)),
        store: store.clone(),
        own: (),
    };
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
    let views = c.views.read();
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
    let (c, _tx) = ctx_with(&store, i, true, |c| {
        c.with_min_write_interval(Duration::from_secs(60))
    });
    reconcile(Arc::new(q), c.clone()).await.unwrap();
    assert_eq!(store.written(NS, "q").len(), 1);

    // A new binding changes usage, but the last write was just now: no write, and a
    // requeue for when the interval has passed.
    c.index.write().apply_binding_event(
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
    c.pacing.last_write.lock().insert(key, long_ago);
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
    assert_eq!(c.views.read().len(), 1);
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

/// A replica that takes the Lease writes nothing from the binding list it had (begun
/// before the Lease: its index may be older than the previous leader's last write), and
/// writes once its binding watch completed a list begun after it (R21, `crate::fence`).
#[tokio::test]
async fn a_new_leader_writes_only_once_its_bindings_are_listed_in_its_term() {
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
    let fence = Arc::new(crate::fence::Fence::default());
    let store = FakeStore::with(std::slice::from_ref(&q));
    let (c, _tx) = ctx_with(&store, i, true, |c| c.with_fence(fence.clone()));
    let generation = fence.took_lease();
    let action = reconcile(Arc::new(q.clone()), c.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(NOT_SYNCED_RETRY));
    assert!(
        store.written(NS, "q").is_empty(),
        "written from an old list"
    );
    c.index.write().bindings_listed(generation);
    reconcile(Arc::new(q), c.clone()).await.unwrap();
    assert_eq!(store.written(NS, "q").len(), 1);
    assert_eq!(store.object(NS, "q").status.unwrap().used["pods"].0, "3");
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
    let view = c.views.read()[&("team-a".to_owned(), "q".to_owned())].clone();
    // What admission checks against: used + the pending reservations.
    let mut effective = view.used.clone();
    effective.add_assign(&view.reserved);
    assert_eq!(
        effective.get("pods").map(ToString::to_string).as_deref(),
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
    assert!(c.pacing.last_write.lock().is_empty());
    assert_eq!(c.views.read().len(), 1);
}

#[tokio::test]
async fn a_contended_write_is_left_for_later_and_the_interval_doubles_until_a_clean_write() {
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 3, "1", &[])]);
    let store = FakeStore::with(std::slice::from_ref(&q));
    store
        .conflict_every
        .store(1, std::sync::atomic::Ordering::SeqCst);
    let (c, _tx) = ctx_with(&store, i, true, |c| {
        c.with_min_write_interval(Duration::from_millis(250))
            .with_max_write_backoff(Duration::from_secs(2))
    });
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
        c.pacing.last_write.lock().remove(&key);
        let action = reconcile(Arc::new(q.clone()), c.clone()).await.unwrap();
        assert_eq!(action, Action::requeue(Duration::from_millis(want)));
    }
    // Not while many entries are pending: pruning them is what keeps writes cheap.
    assert_eq!(
        c.pacing.write_interval(&key, FOLD_BATCH),
        Duration::from_millis(250)
    );
    // A clean write (from the newest copy, as the watch brings it) resets it to the
    // min interval.
    store
        .conflict_every
        .store(0, std::sync::atomic::Ordering::SeqCst);
    c.pacing.last_write.lock().remove(&key);
    reconcile(Arc::new(store.object(NS, "q")), c.clone())
        .await
        .unwrap();
    assert_eq!(store.written(NS, "q").len(), 1);
    assert_eq!(c.pacing.write_interval(&key, 0), Duration::from_millis(250));
}

#[tokio::test]
async fn a_fold_only_change_is_put_off_and_any_other_is_written_at_once() {
    // Written once: used = 3 (web), no entries.
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let i = synced_index(&[mk_binding("team-a", "web", "u1", 1, 3, "1", &[])]);
    let store = FakeStore::with(std::slice::from_ref(&q));
    let (c, _tx) = ctx_with(&store, i, true, |c| {
        c.with_fold_interval(Duration::from_secs(60))
    });
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
    c.index.write().apply_binding_event(
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
    c.index.write().apply_binding_event(
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
