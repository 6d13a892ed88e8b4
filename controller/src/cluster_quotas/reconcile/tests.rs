//! A KarmadaClusterQuota through the one reconciler: the same write pacing as a
//! KarmadaQuota's (the contended-write backoff, the fold put-off), which the cluster
//! quota's own copy of the reconciler lacked.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_status::fake::FakeStore;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMetaExt;
use kube::runtime::controller::Action;
use kube::runtime::watcher::Event;

use super::*;
use crate::index::Index;
use crate::reconcile::{CONTENDED_WRITE_ATTEMPTS, Ctx, reconcile};
use crate::testutil::*;

const FAR: i64 = 4_000_000_000;

/// Namespace "a-dev" labelled business=a, listed.
fn labels() -> NamespaceLabels {
    let (labels, mut writer) = NamespaceLabels::with_writer();
    let ns = ObjectMeta {
        name: Some("a-dev".into()),
        labels: Some([("business".to_owned(), "a".to_owned())].into()),
        ..Default::default()
    }
    .into_response_partial::<Namespace>();
    writer.apply_watcher_event(&Event::Init);
    writer.apply_watcher_event(&Event::InitApply(ns));
    writer.apply_watcher_event(&Event::InitDone);
    labels
}

fn synced_index() -> Index {
    let mut i = Index::new(600);
    i.apply_binding_event(&Event::Init, None, 0);
    let web = mk_binding("a-dev", "web", "u1", 1, 3, "1", &[]);
    i.apply_binding_event(&Event::InitApply(web), None, 0);
    i.apply_binding_event(&Event::InitDone, None, 0);
    i
}

fn ctx(
    store: &Arc<FakeStore<KarmadaClusterQuota>>,
    f: impl FnOnce(Ctx) -> Ctx,
) -> (Arc<ClusterCtx>, tokio::sync::watch::Sender<bool>) {
    let (base, tx) = base_ctx(synced_index(), true);
    let c = ClusterCtx {
        base: Arc::new(f(base)),
        store: store.clone(),
        own: ClusterOwn {
            labels: labels(),
            shares: None,
        },
    };
    (Arc::new(c), tx)
}

#[tokio::test]
async fn a_cluster_quota_is_written_and_its_view_lists_its_namespaces() {
    let q = business_quota(&[("pods", "10")]);
    let store = FakeStore::with(std::slice::from_ref(&q));
    let (c, _tx) = ctx(&store, |c| c);
    reconcile(Arc::new(q), c.clone()).await.unwrap();
    let st = store.object("", "business-a").status.unwrap();
    assert_eq!(st.quota.used["pods"].0, "3");
    assert_eq!(st.namespaces.len(), 1);
    let views = c.views.read();
    let view = &views[&(String::new(), "business-a".to_owned())];
    assert_eq!(view.namespaces, ["a-dev"]);
}

#[tokio::test]
async fn a_contended_cluster_quota_write_backs_off_like_a_namespaced_one() {
    let q = business_quota(&[("pods", "10")]);
    let store = FakeStore::with(std::slice::from_ref(&q));
    store.conflict_every.store(1, Ordering::SeqCst);
    let (c, _tx) = ctx(&store, |c| {
        c.with_min_write_interval(Duration::from_millis(250))
            .with_max_write_backoff(Duration::from_secs(2))
    });
    // Every write conflicts: two attempts, then no error but a requeue after the doubled
    // interval (the cluster quota's copy of the reconciler failed after five instead).
    let action = reconcile(Arc::new(q), c.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_millis(500)));
    assert_eq!(
        store.conflicts.load(Ordering::SeqCst),
        CONTENDED_WRITE_ATTEMPTS as usize
    );
    assert!(store.written("", "business-a").is_empty());
}

#[tokio::test]
async fn a_fold_only_change_of_a_cluster_quota_is_put_off() {
    let q = business_quota(&[("pods", "10")]);
    let store = FakeStore::with(std::slice::from_ref(&q));
    let (c, _tx) = ctx(&store, |c| c.with_fold_interval(Duration::from_secs(60)));
    reconcile(Arc::new(q), c.clone()).await.unwrap();
    assert_eq!(store.written("", "business-a").len(), 1);
    // The webhook admits "api" (2 pods) in a-dev; then the binding is observed: folding
    // its entry into used changes nothing admission reads, so it is put off.
    let mut stored = store.object("", "business-a");
    let mut entry = mk_reservation("api", "u2", 1, &[("pods", "2")], FAR);
    entry.reserved_by.namespace = "a-dev".into();
    stored
        .status
        .as_mut()
        .unwrap()
        .quota
        .reservations
        .push(entry);
    store.put(stored);
    c.index.write().apply_binding_event(
        &Event::Apply(mk_binding("a-dev", "api", "u2", 1, 2, "1", &[])),
        None,
        0,
    );
    reconcile(Arc::new(store.object("", "business-a")), c.clone())
        .await
        .unwrap();
    assert_eq!(store.written("", "business-a").len(), 1, "fold put off");
    // "web" is deleted: effective usage falls, written at once (with the fold).
    c.index.write().apply_binding_event(
        &Event::Delete(mk_binding("a-dev", "web", "u1", 1, 3, "1", &[])),
        None,
        0,
    );
    reconcile(Arc::new(store.object("", "business-a")), c.clone())
        .await
        .unwrap();
    assert_eq!(store.written("", "business-a").len(), 2);
    let st = store.object("", "business-a").status.unwrap();
    assert_eq!(st.quota.used["pods"].0, "2");
    assert!(st.quota.reservations.is_empty());
}
