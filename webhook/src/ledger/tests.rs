//! The ledger's tests: re-lists, holds, unparsable batches, confirmations.

use super::*;
use karmada_quota_crds::reservation_batch::{BatchEntry, BatchQuota, batch_object};
use karmada_quota_status::batch_store::FakeBatchStore;

fn entry(ns: &str, uid: &str) -> BatchEntry {
    BatchEntry {
        quota: BatchQuota {
            namespace: Some(ns.into()),
            name: "q".into(),
        },
        reservation: karmada_quota_crds::quota::Reservation {
            reserved_by: karmada_quota_crds::quota::ReservedBy {
                name: format!("rb-{uid}"),
                uid: uid.into(),
                ..Default::default()
            },
            generation: 1,
            reserved: [(
                "pods".to_string(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("1".into()),
            )]
            .into(),
            expiration_time: karmada_quota_crds::convert::unix_to_time(100),
        },
    }
}

fn key(ns: &str) -> QuotaKey {
    QuotaKey::Namespaced {
        namespace: ns.into(),
        name: "q".into(),
    }
}

fn counted(l: &Ledger, ns: &str) -> Vec<String> {
    l.with_view(|v| {
        v.unfolded(&key(ns), None)
            .map(|(_, e)| e.reserved_by.uid.clone())
            .collect()
    })
}

#[test]
fn a_relist_that_lost_a_batch_keeps_it_as_a_tombstone() {
    let l = Ledger::new(Arc::new(FakeBatchStore::new()), "kq", Relists::default());
    let b1 = batch_object("kq", 1, vec![entry("a", "1")]);
    let b2 = batch_object("kq", 2, vec![entry("a", "2")]);
    for ev in [
        watcher::Event::Init,
        watcher::Event::InitApply(b1.clone()),
        watcher::Event::InitApply(b2.clone()),
        watcher::Event::InitDone,
    ] {
        l.apply(&ev);
    }
    assert!(l.is_synced());
    assert_eq!(l.next_sequence(), 3);
    // The watch fails; batch 1 is deleted meanwhile; the re-list holds only 2.
    for ev in [
        watcher::Event::Init,
        watcher::Event::InitApply(b2),
        watcher::Event::InitDone,
    ] {
        l.apply(&ev);
    }
    // Still counted (a tombstone) until the quota view shows the fold.
    assert_eq!(counted(&l, "a"), ["1", "2"]);
    assert_eq!(l.with_view(|v| v.live().collect::<Vec<_>>()), [2]);
}

fn list(l: &Ledger, batches: &[&KarmadaQuotaReservation]) {
    l.apply(&watcher::Event::Init);
    for b in batches {
        l.apply(&watcher::Event::InitApply((*b).clone()));
    }
    l.apply(&watcher::Event::InitDone);
}

#[test]
fn a_relist_that_shows_batches_never_seen_refuses_until_the_quotas_listed_again() {
    use crate::cache::freshness::Watch;
    let relists = Relists::default();
    let l = Ledger::new(Arc::new(FakeBatchStore::new()), "kq", relists.clone());
    let b1 = batch_object("kq", 1, vec![entry("a", "1")]);
    let b3 = batch_object("kq", 3, vec![entry("a", "3")]);
    // The first list may start anywhere: the quota list comes after it (module doc).
    list(&l, &[&b3]);
    l.check().unwrap();
    // The watch fails; 4 and 5 are created, 4 is folded and deleted: the re-list
    // shows 3 and 5. Batch 4's entries are in no view this webhook has.
    let b5 = batch_object("kq", 5, vec![entry("a", "5")]);
    list(&l, &[&b3, &b5]);
    let err = l.check().unwrap_err();
    assert!(
        matches!(err, Error::BatchesUnseen { batches: 1, .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), 503, "retryable");
    assert!(err.to_string().contains("in kq"), "{err}");
    // Held until both quota kinds listed from the request on.
    assert!(l.check().is_err());
    relists.listed(Watch::Quotas, 1);
    assert!(
        l.check().is_err(),
        "the cluster quotas have not listed again"
    );
    relists.listed(Watch::ClusterQuotas, 1);
    l.check().unwrap();
    assert_eq!(counted(&l, "a"), ["3", "5"]);
    // Re-lists that show nothing new, or only the next numbers, hold nothing.
    list(&l, &[&b5]);
    l.check().unwrap();
    let b6 = batch_object("kq", 6, vec![entry("a", "6")]);
    list(&l, &[&b5, &b6]);
    l.check().unwrap();
    // A re-list that jumps: only the numbers above the newest seen before count.
    let b9 = batch_object("kq", 9, vec![entry("a", "9")]);
    list(&l, &[&b1, &b9]);
    assert!(
        matches!(l.check(), Err(Error::BatchesUnseen { batches: 2, .. })),
        "7 and 8 (1 is below what was seen, and listed)"
    );
}

#[test]
fn a_failed_batch_watch_refuses_until_its_relist_is_in() {
    let l = Ledger::new(Arc::new(FakeBatchStore::new()), "kq", Relists::default());
    let b1 = batch_object("kq", 1, vec![entry("a", "1")]);
    list(&l, &[&b1]);
    l.watch_relisted();
    l.check().unwrap();
    // Cut: batch 2 may be created, folded and deleted meanwhile, freeing its number.
    l.watch_failed();
    let err = l.check().unwrap_err();
    assert!(matches!(err, Error::BatchWatchDown { .. }), "{err:?}");
    assert_eq!(err.code(), 503, "retryable");
    assert!(err.to_string().contains("kq"), "{err}");
    list(&l, &[&b1]);
    l.watch_relisted();
    l.check().unwrap();
}

#[test]
fn a_batch_that_is_not_even_a_batch_object_is_remembered_and_refuses() {
    let l = Ledger::new(Arc::new(FakeBatchStore::new()), "kq", Relists::default());
    let resource = ApiResource::erase::<KarmadaQuotaReservation>(&());
    let mut bad = DynamicObject::new("kqr-000000000003", &resource).within("kq");
    bad.data = serde_json::json!({"spec": {"entries": "not a list"}});
    let good = batch_object("kq", 2, vec![entry("a", "1")]);
    let good =
        serde_json::from_value::<DynamicObject>(serde_json::to_value(&good).unwrap()).unwrap();
    for ev in [
        watcher::Event::Init,
        watcher::Event::InitApply(bad.clone()),
        watcher::Event::InitApply(good),
        watcher::Event::InitDone,
    ] {
        l.apply_dynamic(&ev);
    }
    assert!(l.is_synced(), "the list went through");
    assert_eq!(counted(&l, "a"), ["1"]);
    let err = l.check().unwrap_err().to_string();
    assert!(err.contains("kqr-000000000003"), "{err}");
    l.apply_dynamic(&watcher::Event::Delete(bad));
    l.check().unwrap();
}

#[test]
fn an_unparsable_batch_refuses_until_it_is_deleted() {
    let l = Ledger::new(Arc::new(FakeBatchStore::new()), "kq", Relists::default());
    let mut bad = batch_object("kq", 1, vec![entry("a", "1")]);
    bad.spec.entries[0].reservation.reserved.insert(
        "pods".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
    );
    l.apply(&watcher::Event::Apply(bad.clone()));
    let err = l.check().unwrap_err().to_string();
    assert!(err.contains("kqr-000000000001"), "{err}");
    assert!(err.contains("kq"), "{err}");
    l.apply(&watcher::Event::Delete(bad));
    l.check().unwrap();
}

fn by(mut b: KarmadaQuotaReservation, writer: &str) -> KarmadaQuotaReservation {
    b.spec.writer = Some(writer.into());
    b
}

#[tokio::test]
async fn a_create_is_confirmed_by_its_own_event_and_a_withdrawn_one_never_counts() {
    let l = Ledger::new(Arc::new(FakeBatchStore::new()), "kq", Relists::default());
    list(&l, &[]);
    let w = l.writer_token();
    assert_ne!(w, l.writer_token(), "one token per create");
    let mut e = l.expect(1, &w).unwrap().unwrap();
    l.apply(&watcher::Event::Apply(by(
        batch_object("kq", 1, vec![entry("a", "1")]),
        &w,
    )));
    assert_eq!(e.outcome().await, Outcome::Confirmed);
    drop(e);
    assert!(l.expect(1, "again").unwrap().is_none(), "1 is seen");
    // Batch 2 withdrawn before its events come: they count nothing, and 2 stays taken.
    let w2 = l.writer_token();
    let two = by(batch_object("kq", 2, vec![entry("a", "2")]), &w2);
    l.withdraw(2, &w2);
    l.apply(&watcher::Event::Apply(two.clone()));
    assert_eq!(counted(&l, "a"), ["1"]);
    assert_eq!(l.next_sequence(), 3);
    l.apply(&watcher::Event::Delete(two));
    assert_eq!(counted(&l, "a"), ["1"]);
    // Withdrawn after its event: forgotten; another writer's batch of a number is not.
    let w3 = l.writer_token();
    l.apply(&watcher::Event::Apply(by(
        batch_object("kq", 3, vec![entry("a", "3")]),
        "other",
    )));
    l.withdraw(3, &w3);
    assert_eq!(counted(&l, "a"), ["1", "3"]);
    let w4 = l.writer_token();
    l.apply(&watcher::Event::Apply(by(
        batch_object("kq", 4, vec![entry("a", "4")]),
        &w4,
    )));
    l.withdraw(4, &w4);
    assert_eq!(counted(&l, "a"), ["1", "3"]);
    // A re-list answers a waiting create, and none is expected while it runs.
    let mut e = l.expect(5, &l.writer_token()).unwrap().unwrap();
    l.apply(&watcher::Event::Init);
    assert_eq!(e.outcome().await, Outcome::Unverified);
    drop(e);
    let err = l.expect(5, "x").err().unwrap();
    assert_eq!(err.code(), 503);
    l.apply(&watcher::Event::InitDone);
    assert!(l.expect(5, "x").unwrap().is_some());
}
