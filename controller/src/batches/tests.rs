//! Tests of the batches the controller holds and of its deletion sweep, against the
//! in-memory batch store.

use std::sync::Arc;

use karmada_quota_core::quota::Reservation;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::reservation_batch::{batch_entry, batch_name, batch_object};
use karmada_quota_status::BatchStore;
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

/// A quota's fold for the sweep: every quota folded through `f`.
fn folded(f: u64) -> impl Fn(&QuotaKey) -> Fold {
    move |_| Some(Some(f))
}

/// `store`'s later creates and deletes shown to `b`, as its watch would.
fn watch(store: &FakeBatchStore, b: &Arc<Batches>) {
    use karmada_quota_status::batch_store::FakeChange;
    let b = b.clone();
    store.on_change(move |change| {
        let ev = match change {
            FakeChange::Created(batch) => Event::Apply(dynamic(batch)),
            FakeChange::Deleted(batch) => Event::Delete(dynamic(batch)),
        };
        b.apply(&ev);
    });
}

#[tokio::test]
async fn the_newest_batch_taken_by_hand_is_seeded_again_empty() {
    use super::seed::{Seeded, seed_once};
    use karmada_quota_crds::reservation_batch::SEED_WRITER;
    let objects: Vec<DynamicObject> = [
        batch(1, &[("a", "u1")]),
        batch(2, &[("a", "u2")]),
        batch(3, &[("b", "u3")]),
    ]
    .iter()
    .map(dynamic)
    .collect();
    let (b, store) = listed(&objects);
    let b = Arc::new(b);
    watch(&store, &b);
    // a folded through 2, b nothing yet: the sweep deletes 1 and 2; 3 stays.
    let fold = |k: &QuotaKey| -> Fold {
        if *k == key("a") {
            Some(Some(2))
        } else {
            Some(None)
        }
    };
    assert_eq!(sweep_once(&b, &store, fold, NOW).await.deleted, 2);
    assert_eq!(seed_once(&b, &store, NS, Some(2)).await, Seeded::Held);
    // A hand deletes the newest, 3, before any fold of it: the store holds nothing at or
    // above a's fold. The number the controller saw, 3, is created again, empty.
    store.delete(&batch_name(3), None).await.unwrap();
    assert!(stored(&store).is_empty());
    assert_eq!(seed_once(&b, &store, NS, Some(2)).await, Seeded::Created(3));
    let seeded = store.all();
    assert_eq!(stored(&store), names(&[3]));
    assert!(seeded[0].spec.entries.is_empty());
    assert_eq!(seeded[0].spec.writer.as_deref(), Some(SEED_WRITER));
    // Its watch shows it: held, naming no quota, and nothing more to seed.
    assert_eq!(b.live(), [3]);
    assert_eq!(b.unfolded(&key("b"), None), None);
    assert_eq!(seed_once(&b, &store, NS, Some(2)).await, Seeded::Held);
    // It is the newest: never swept; once a later batch exists it goes as any folded one.
    assert_eq!(sweep_once(&b, &store, folded(2), NOW).await.deleted, 0);
    store.put(batch(4, &[("a", "u4")]));
    b.apply(&Event::Apply(dynamic(&batch(4, &[("a", "u4")]))));
    assert_eq!(sweep_once(&b, &store, folded(2), NOW).await.deleted, 1);
    assert_eq!(stored(&store), names(&[4]));
}

#[tokio::test]
async fn a_restarted_controller_seeds_the_greatest_fold_and_a_taken_number_is_left_alone() {
    use super::seed::{Seeded, seed_once};
    // Nothing before the first list.
    let b = held();
    let store = FakeBatchStore::new();
    assert_eq!(seed_once(&b, &store, NS, Some(5)).await, Seeded::Held);
    // Listed empty, no quota folded anything: nothing to seed (a store that never held a
    // batch numbers from 1).
    let (b, store) = listed(&[]);
    assert_eq!(seed_once(&b, &store, NS, None).await, Seeded::Held);
    // A quota folded through 5 and the store lists only 2: 5 is created.
    let (b, store) = listed(&[dynamic(&batch(2, &[("a", "u2")]))]);
    assert_eq!(seed_once(&b, &store, NS, Some(5)).await, Seeded::Created(5));
    assert_eq!(stored(&store), names(&[2, 5]));
    // A list that lags behind the store: 5 is held by a batch the view has not seen; the
    // create is refused (409) and the stored batch stays as it was.
    let (b, _) = listed(&[dynamic(&batch(2, &[("a", "u2")]))]);
    store.put(batch(6, &[("a", "u6")]));
    assert_eq!(seed_once(&b, &store, NS, Some(6)).await, Seeded::Taken(6));
    let six = store.get(&batch_name(6)).await.unwrap();
    assert_eq!(six.spec.entries.len(), 1);
    // A live batch above the fold, or one that does not parse at or above it: held.
    let (b, store) = listed(&[dynamic(&batch(7, &[("a", "u7")]))]);
    assert_eq!(seed_once(&b, &store, NS, Some(6)).await, Seeded::Held);
    let bad = raw(&batch_name(8), serde_json::json!({"entries": "oops"}));
    let (b, store) = listed(&[bad]);
    assert_eq!(seed_once(&b, &store, NS, Some(8)).await, Seeded::Held);
    assert_eq!(seed_once(&b, &store, NS, Some(9)).await, Seeded::Created(9));
    // A failed create is retried later.
    let (b, store) = listed(&[]);
    store.fail.store(true, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(seed_once(&b, &store, NS, Some(3)).await, Seeded::Failed(3));
}

#[tokio::test]
async fn the_last_number_is_never_seeded_again_once_a_hand_took_it_away() {
    use super::seed::{Seeded, seed_once};
    use karmada_quota_crds::reservation_batch::LAST_SEQUENCE;
    let last = batch(LAST_SEQUENCE, &[("a", "far")]);
    let (b, store) = listed(&[dynamic(&batch(4, &[("a", "u4")])), dynamic(&last)]);
    // While it is there the webhooks refuse naming it; the controller leaves it be.
    assert_eq!(seed_once(&b, &store, NS, Some(4)).await, Seeded::Held);
    // The sweep took 4 once the hand-made batch was newer; then the hand deletes it.
    assert_eq!(sweep_once(&b, &store, folded(4), NOW).await.deleted, 1);
    store
        .delete(&batch_name(LAST_SEQUENCE), None)
        .await
        .unwrap();
    b.apply(&Event::Delete(dynamic(&last)));
    // The greatest fold is seeded, not the last number (which would refuse for good).
    assert_eq!(seed_once(&b, &store, NS, Some(4)).await, Seeded::Created(4));
    assert_eq!(stored(&store), names(&[4]));
}

/// The folds `run` reads: every quota folded through `greatest`.
struct FixedFolds {
    greatest: Option<u64>,
}

impl super::folds::Folds for FixedFolds {
    fn fold(&self, _: &QuotaKey) -> Fold {
        Some(self.greatest)
    }

    fn greatest(&self) -> Option<Option<u64>> {
        Some(self.greatest)
    }
}

#[tokio::test(start_paused = true)]
async fn the_leader_seeds_the_missing_newest_number_within_a_sweep_and_a_follower_does_not() {
    let (b, _) = listed(&[]);
    let b = Arc::new(b);
    let store = Arc::new(FakeBatchStore::new());
    watch(&store, &b);
    let (leader_tx, leader) = tokio::sync::watch::channel(false);
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(super::sweep::run(
        b.clone(),
        (store.clone(), NS.to_owned()),
        FixedFolds { greatest: Some(3) },
        leader,
        async {
            let _ = stop.await;
        },
    ));
    tokio::time::sleep(super::sweep::SWEEP_INTERVAL * 3).await;
    assert!(stored(&store).is_empty(), "a follower creates nothing");
    leader_tx.send(true).unwrap();
    tokio::time::sleep(super::sweep::SWEEP_INTERVAL + std::time::Duration::from_millis(10)).await;
    assert_eq!(stored(&store), names(&[3]));
    assert_eq!(b.live(), [3]);
    // Held from then on: no second create.
    tokio::time::sleep(super::sweep::SWEEP_INTERVAL * 3).await;
    assert_eq!(store.creates.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(store.conflicts.load(std::sync::atomic::Ordering::SeqCst), 0);
    stop_tx.send(()).unwrap();
    task.await.unwrap();
}

/// A number freed by a delete can be taken again (docs/reservations.md R2). A sweep whose
/// view still holds the first batch of the number — a new leader's, or a stalled watch's —
/// must not delete the later one, which no quota may have folded: the simulation's seed
/// 81643 lost such a batch's entries that way (its replicas then kept its tombstone, and
/// the quota refused for good). The delete names the uid the view holds.
#[tokio::test]
async fn a_view_behind_the_store_never_deletes_a_later_batch_of_the_same_number() {
    let with_uid = |mut b: karmada_quota_crds::KarmadaQuotaReservation, uid: &str| {
        b.metadata.uid = Some(uid.into());
        b
    };
    let first = with_uid(batch(1, &[("a", "u1")]), "batch-1-first");
    let objects: Vec<DynamicObject> = [first, with_uid(batch(2, &[("a", "u2")]), "batch-2")]
        .iter()
        .map(dynamic)
        .collect();
    let (b, store) = listed(&objects);
    // Another leader folded and deleted 1; a writer whose view lagged took 1 again, for
    // quota c, which folded nothing. This view saw neither.
    store.delete(&batch_name(1), None).await.unwrap();
    store.put(with_uid(batch(1, &[("c", "u9")]), "batch-1-later"));
    let fold = |k: &QuotaKey| -> Fold {
        if *k == key("a") {
            Some(Some(2))
        } else {
            Some(None)
        }
    };
    let swept = sweep_once(&b, &store, fold, NOW).await;
    assert_eq!((swept.deleted, swept.gone), (0, 1));
    assert_eq!(stored(&store), names(&[1, 2]), "the later batch 1 stays");
    assert_eq!(
        store
            .get(&batch_name(1))
            .await
            .unwrap()
            .metadata
            .uid
            .as_deref(),
        Some("batch-1-later")
    );
    assert_eq!(b.live(), [2], "the first batch 1 is forgotten");
    // The watch brings the later one; the sweep keeps it until c folds it.
    b.apply(&Event::Apply(dynamic(&with_uid(
        batch(1, &[("c", "u9")]),
        "batch-1-later",
    ))));
    assert_eq!(sweep_once(&b, &store, fold, NOW).await.deleted, 0);
    let all = |_: &QuotaKey| -> Fold { Some(Some(2)) };
    assert_eq!(sweep_once(&b, &store, all, NOW).await.deleted, 1);
    assert_eq!(stored(&store), names(&[2]));
}
