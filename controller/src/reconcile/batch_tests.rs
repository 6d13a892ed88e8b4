//! The one reconciler with reservation batches, against the in-memory status store: a
//! quota's write records the batches it folds, and after a 409 the plan reads the fold
//! from the fresh object, not from the one it was asked to reconcile.

use super::*;
use crate::testutil::*;
use karmada_quota_core::quota::Reservation as Entry;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::reservation_batch::{batch_entry, batch_object};
use karmada_quota_status::fake::FakeStore;
use kube::runtime::watcher::Event;

const NS: &str = "team-a";

fn key() -> QuotaKey {
    quota_key(NS, "q")
}

fn entry(name: &str, uid: &str) -> Entry {
    mk_entry(name, uid, 1, &[("pods", "1")], 4_000_000_000)
}

/// Batch 1 holds the admission of `gone` (never created), batch 2 that of `web`
/// (observed), batch 3 that of `api` (not observed yet): all for team-a/q.
fn batches() -> Arc<crate::batches::Batches> {
    let objects: Vec<_> = [
        (1, "gone", "u-gone"),
        (2, "web", "u-web"),
        (3, "api", "u-api"),
    ]
    .into_iter()
    .map(|(s, name, uid)| {
        batch_dynamic(&batch_object(
            "kq-system",
            s,
            vec![batch_entry(&key(), &entry(name, uid))],
        ))
    })
    .collect();
    Arc::new(batches_listing(&objects))
}

fn ctx(store: &Arc<FakeStore>) -> Arc<KindCtx<KarmadaQuota>> {
    let mut i = Index::new(600);
    i.apply_binding_event(&Event::Init, None, 0);
    let web = mk_binding(NS, "web", "u-web", 1, 1, "1", &[]);
    i.apply_binding_event(&Event::InitApply(web), None, 0);
    i.apply_binding_event(&Event::InitDone, None, 0);
    let (base, _tx) = base_ctx(i, true);
    Arc::new(KindCtx {
        base: Arc::new(base.with_batches(Some(batches()))),
        store: store.clone(),
        own: (),
    })
}

fn uids(st: &KarmadaQuotaStatus) -> Vec<&str> {
    st.reservations
        .iter()
        .map(|r| r.reserved_by.uid.as_str())
        .collect()
}

#[tokio::test]
async fn the_write_folds_every_held_batch_naming_the_quota_and_records_the_newest() {
    let q = mk_quota(NS, "q", &[("pods", "10")]);
    let store = FakeStore::with(std::slice::from_ref(&q));
    let c = ctx(&store);
    reconcile(Arc::new(q), c.clone()).await.unwrap();
    let st = store.object(NS, "q").status.unwrap();
    assert_eq!(st.folded_through, Some(3));
    assert_eq!(st.used["pods"].0, "1", "web is observed");
    assert_eq!(
        uids(&st),
        ["u-gone", "u-api", "reservation-store-fence"],
        "the others are carried, and the quota is fenced for the batch store (R22)"
    );
    // Nothing left to fold: the written quota is not written again.
    reconcile(Arc::new(store.object(NS, "q")), c).await.unwrap();
    assert_eq!(store.written(NS, "q").len(), 1);
}

#[tokio::test]
async fn after_a_conflict_the_fold_is_read_from_the_fresh_object() {
    let stale = mk_quota(NS, "q", &[("pods", "10")]);
    // Meanwhile a write folded batches 1 and 2, and u-gone's entry has since been pruned
    // (its binding was seen deleted): the fresh status must not get it back from batch 1.
    let mut fresh = stale.clone();
    fresh.status = Some(KarmadaQuotaStatus {
        folded_through: Some(2),
        ..KarmadaQuotaStatus::default()
    });
    let store = FakeStore::with(std::slice::from_ref(&stale));
    store.put(fresh);
    let c = ctx(&store);
    reconcile(Arc::new(stale), c).await.unwrap();
    assert_eq!(store.conflicts.load(std::sync::atomic::Ordering::SeqCst), 1);
    let st = store.object(NS, "q").status.unwrap();
    assert_eq!(st.folded_through, Some(3));
    assert_eq!(
        uids(&st),
        ["u-api", "reservation-store-fence"],
        "only the batch above the fresh fold"
    );
}

#[tokio::test]
async fn a_context_holding_no_batches_folds_nothing_and_writes_no_fence() {
    let q = mk_quota(NS, "q", &[("pods", "10")]);
    let store = FakeStore::with(std::slice::from_ref(&q));
    let c = ctx(&store);
    let no_batches = Arc::new(KindCtx {
        base: Arc::new(
            Ctx::new(
                c.index.clone(),
                c.members.clone(),
                c.views.clone(),
                c.metrics.clone(),
                c.leader.clone(),
                None,
                Duration::from_secs(300),
            )
            .with_batches(None),
        ),
        store: store.clone(),
        own: (),
    });
    reconcile(Arc::new(q), no_batches).await.unwrap();
    let st = store.object(NS, "q").status.unwrap();
    assert_eq!(st.folded_through, None);
    assert!(st.reservations.is_empty());
}
