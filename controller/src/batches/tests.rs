//! Tests of the batches the controller holds and of its deletion sweep, against the
//! in-memory batch store.

use std::sync::Arc;

use karmada_quota_core::quota::Reservation;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::reservation_batch::{batch_entry, batch_name, batch_object};
use karmada_quota_status::batch_store::FakeBatchStore;
use karmada_quota_status::batches::Fold;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use super::sweep::sweep_once;
use super::*;

const NS: &str = "kq-system";
const NOW: i64 = 1_800_000_000;

use crate::testutil::{mk_entry, quota_key};

fn key(ns: &str) -> QuotaKey {
    quota_key(ns, "q")
}

fn entry(uid: &str, expires: i64) -> Reservation {
    mk_entry(
        &format!("rb-{uid}"),
        uid,
        1,
        &[("requests.cpu", "1")],
        expires,
    )
}

/// Batch `sequence` as the webhook writes it: one entry per (quota namespace, uid).
fn batch(sequence: u64, entries: &[(&str, &str)]) -> karmada_quota_crds::KarmadaQuotaReservation {
    batch_object(
        NS,
        sequence,
        entries
            .iter()
            .map(|(ns, uid)| batch_entry(&key(ns), &entry(uid, NOW + 300)))
            .collect(),
    )
}

use crate::testutil::batch_dynamic as dynamic;

/// A batch named `name` whose spec is `spec` (what a hand edit could leave).
fn raw(name: &str, spec: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuotaReservation",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .unwrap()
}

fn held() -> Batches {
    Batches::new(Arc::default())
}

/// `batches` listed from `objects`, and `store` holding them.
fn listed(objects: &[DynamicObject]) -> (Batches, FakeBatchStore) {
    let b = crate::testutil::batches_listing(objects);
    let store = FakeBatchStore::new();
    for o in objects {
        let typed: karmada_quota_crds::KarmadaQuotaReservation =
            serde_json::from_value(serde_json::to_value(o).unwrap()).unwrap_or_else(|_| {
                karmada_quota_crds::KarmadaQuotaReservation {
                    metadata: o.metadata.clone(),
                    spec: Default::default(),
                }
            });
        store.put(typed);
    }
    (b, store)
}

fn stored(store: &FakeBatchStore) -> Vec<String> {
    store
        .all()
        .iter()
        .map(|b| b.metadata.name.clone().unwrap())
        .collect()
}

fn names(seqs: &[u64]) -> Vec<String> {
    seqs.iter().map(|s| batch_name(*s)).collect()
}

#[test]
fn a_new_batch_reconciles_every_quota_it_names_and_counts_above_their_fold() {
    let b = held();
    b.apply(&Event::Init);
    b.apply(&Event::InitDone);
    let touched = b.apply(&Event::Apply(dynamic(&batch(
        1,
        &[("a", "u1"), ("b", "u2")],
    ))));
    assert_eq!(
        touched.into_iter().collect::<Vec<_>>(),
        [key("a"), key("b")]
    );
    let a = b.unfolded(&key("a"), None).unwrap();
    assert_eq!((a.through, a.entries.len()), (1, 1));
    assert_eq!(b.unfolded(&key("a"), Some(1)), None, "folded: nothing left");
    // A watch delete forgets it.
    b.apply(&Event::Delete(dynamic(&batch(
        1,
        &[("a", "u1"), ("b", "u2")],
    ))));
    assert_eq!(b.unfolded(&key("a"), None), None);
    assert!(b.live().is_empty());
}

#[tokio::test]
async fn the_sweep_deletes_only_folded_batches_and_never_the_newest() {
    let objects: Vec<DynamicObject> = [
        batch(1, &[("a", "u1")]),
        batch(2, &[("a", "u2"), ("b", "u3")]),
        batch(3, &[("b", "u4")]),
        batch(4, &[("a", "u5")]),
    ]
    .iter()
    .map(dynamic)
    .collect();
    let (b, store) = listed(&objects);
    // a folded through 4 (everything), b only through 1: 2 names b, so it stays; 3 too.
    let fold = |k: &QuotaKey| -> Fold {
        if *k == key("a") {
            Some(Some(4))
        } else {
            Some(Some(1))
        }
    };
    let swept = sweep_once(&b, &store, fold, NOW).await;
    assert_eq!(swept.deleted, 1);
    assert_eq!(stored(&store), names(&[2, 3, 4]));
    assert_eq!(b.live(), [2, 3, 4]);
    // b catches up: 2 and 3 go; 4 is the newest and stays although every quota folded it.
    let all = |_: &QuotaKey| -> Fold { Some(Some(4)) };
    let swept = sweep_once(&b, &store, all, NOW).await;
    assert_eq!(swept.deleted, 2);
    assert_eq!(stored(&store), names(&[4]));
    assert_eq!(b.live(), [4]);
    assert_eq!(sweep_once(&b, &store, all, NOW).await.deleted, 0);
    assert_eq!(stored(&store), names(&[4]));
}

#[tokio::test]
async fn nothing_is_deleted_for_a_quota_whose_fold_is_behind_or_unknown() {
    let objects: Vec<DynamicObject> = [
        batch(1, &[("a", "u1")]),
        batch(2, &[("a", "u2")]),
        batch(3, &[("b", "u3")]),
    ]
    .iter()
    .map(dynamic)
    .collect();
    let (b, store) = listed(&objects);
    // a's status has not recorded any fold yet.
    assert_eq!(sweep_once(&b, &store, |_| Some(None), NOW).await.deleted, 0);
    // a folded through 1 only: 2 stays.
    let behind = |k: &QuotaKey| -> Fold {
        if *k == key("a") {
            Some(Some(1))
        } else {
            Some(None)
        }
    };
    assert_eq!(sweep_once(&b, &store, behind, NOW).await.deleted, 1);
    assert_eq!(stored(&store), names(&[2, 3]));
    // a is gone from the stores: its entries go only once expired (NOW + 300).
    assert_eq!(sweep_once(&b, &store, |_| None, NOW + 299).await.deleted, 0);
    assert_eq!(sweep_once(&b, &store, |_| None, NOW + 300).await.deleted, 1);
    assert_eq!(stored(&store), names(&[3]));
}

#[tokio::test]
async fn nothing_is_deleted_before_the_first_list_and_a_gone_batch_is_forgotten() {
    let b = held();
    let store = FakeBatchStore::new();
    b.apply(&Event::Apply(dynamic(&batch(1, &[("a", "u1")]))));
    b.apply(&Event::Apply(dynamic(&batch(2, &[("a", "u2")]))));
    store.put(batch(2, &[("a", "u2")]));
    let all = |_: &QuotaKey| -> Fold { Some(Some(9)) };
    assert_eq!(sweep_once(&b, &store, all, NOW).await, Default::default());
    b.apply(&Event::Init);
    b.apply(&Event::InitApply(dynamic(&batch(1, &[("a", "u1")]))));
    b.apply(&Event::InitApply(dynamic(&batch(2, &[("a", "u2")]))));
    b.apply(&Event::InitDone);
    // 1 is not in the store any more (someone deleted it): NotFound is done.
    let swept = sweep_once(&b, &store, all, NOW).await;
    assert_eq!((swept.deleted, swept.gone, swept.failed), (0, 1, 0));
    assert_eq!(b.live(), [2]);
}

#[tokio::test]
async fn an_unparseable_batch_is_never_counted_nor_deleted() {
    let bad_entry = raw(
        &batch_name(2),
        serde_json::json!({"count": 1, "entries": [{
            "quota": {"namespace": "a", "name": "q"},
            "reservedBy": {"name": "rb", "uid": "u2"},
            "generation": 1,
            "reserved": {"requests.cpu": "not-a-quantity"},
            "expirationTime": "2030-01-01T00:00:00Z",
        }]}),
    );
    let bad_spec = raw(&batch_name(3), serde_json::json!({"entries": "oops"}));
    let not_a_batch = raw("hello", serde_json::json!({"count": 0, "entries": []}));
    let objects = vec![
        dynamic(&batch(1, &[("a", "u1")])),
        bad_entry,
        bad_spec,
        not_a_batch,
        dynamic(&batch(4, &[("a", "u4")])),
    ];
    let (b, store) = listed(&objects);
    assert_eq!(
        b.unparsed(),
        ["hello".to_owned(), batch_name(2), batch_name(3)]
    );
    // Counted by nothing: a's unfolded entries are those of 1 and 4 only.
    let a = b.unfolded(&key("a"), None).unwrap();
    let uids: Vec<&str> = a
        .entries
        .iter()
        .map(|e| e.reserved_by.uid.as_str())
        .collect();
    assert_eq!((a.through, uids), (4, vec!["u1", "u4"]));
    // Everything folded, everything expired: only 1 goes (4 is the newest).
    let all = |_: &QuotaKey| -> Fold { Some(Some(9)) };
    assert_eq!(sweep_once(&b, &store, all, NOW + 10_000).await.deleted, 1);
    assert_eq!(
        sweep_once(&b, &store, |_| None, NOW + 10_000).await.deleted,
        0
    );
    assert_eq!(
        stored(&store),
        [
            "hello".to_owned(),
            batch_name(2),
            batch_name(3),
            batch_name(4)
        ]
    );
    // A watch event of the same bad batch changes nothing; its delete (by hand) forgets it.
    b.apply(&Event::Apply(raw(&batch_name(3), serde_json::json!(7))));
    assert_eq!(b.unparsed().len(), 3);
    b.apply(&Event::Delete(raw(&batch_name(3), serde_json::json!(7))));
    assert_eq!(b.unparsed(), ["hello".to_owned(), batch_name(2)]);
}

#[test]
fn a_relist_replaces_the_view_but_the_newest_number_stays_taken() {
    let b = held();
    b.apply(&Event::Init);
    for s in 1..=3 {
        b.apply(&Event::InitApply(dynamic(&batch(
            s,
            &[("a", &format!("u{s}"))],
        ))));
    }
    b.apply(&Event::InitDone);
    // A re-list that no longer holds 1 (deleted meanwhile) nor 3 (taken by a hand).
    b.apply(&Event::Init);
    b.apply(&Event::InitApply(dynamic(&batch(2, &[("a", "u2")]))));
    let touched = b.apply(&Event::InitDone);
    assert_eq!(touched.into_iter().collect::<Vec<_>>(), [key("a")]);
    assert_eq!(b.live(), [2]);
    let a = b.unfolded(&key("a"), None).unwrap();
    assert_eq!((a.through, a.entries.len()), (2, 1));
    // 2 is the newest live batch: not deleted, although the newest number seen is 3.
    assert!(b.deletable(|_| Some(Some(9)), NOW).is_empty());
}
