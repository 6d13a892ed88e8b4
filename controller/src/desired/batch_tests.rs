//! Tests of a quota's desired status with reservation batches:
//! which batch entries it carries, which it folds into `used`, and the `foldedThrough`
//! it records.

use super::*;
use crate::testutil::*;
use karmada_quota_core::quota::Reservation as Entry;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::reservation_batch::ParsedBatch;
use karmada_quota_status::BatchView;
use kube::runtime::watcher::Event;

const NOW: i64 = 1_795_000_000;

fn ts() -> jiff::Timestamp {
    jiff::Timestamp::from_second(NOW).unwrap()
}

fn q_key(ns: &str) -> QuotaKey {
    quota_key(ns, "q")
}

/// An admission's entry: binding `name`/`uid` at generation 1, `cpu` requested.
fn entry(name: &str, uid: &str, cpu: &str) -> Entry {
    mk_entry(name, uid, 1, &[("requests.cpu", cpu)], NOW + 300)
}

/// Binding `web` (uid u-web, 2 × 1 cpu) exists in team-a; nothing else does.
fn index() -> Index {
    let mut i = Index::new(600);
    i.apply_binding_event(&Event::Init, None, NOW);
    let rb = mk_binding("team-a", "web", "u-web", 1, 2, "1", &[("member1", 2)]);
    i.apply_binding_event(&Event::InitApply(rb), Some("count/deployments.apps"), NOW);
    i.apply_binding_event(&Event::InitDone, None, NOW);
    i
}

/// Batches 1…4 as the webhook would have written them: 1 (already folded by team-a/q),
/// 2 (the admission of `web`, now observed, and one for team-b), 3 (`api`, not created
/// yet), 4 (team-b only).
fn view() -> BatchView {
    let mut v = BatchView::new();
    for (sequence, entries) in [
        (1, vec![(q_key("team-a"), entry("old", "u-old", "7"))]),
        (
            2,
            vec![
                (q_key("team-a"), entry("web", "u-web", "2")),
                (q_key("team-b"), entry("other", "u-other", "1")),
            ],
        ),
        (3, vec![(q_key("team-a"), entry("api", "u-api", "3"))]),
        (4, vec![(q_key("team-b"), entry("late", "u-late", "1"))]),
    ] {
        v.insert(&ParsedBatch {
            sequence,
            entries,
            writer: None,
            uid: None,
        });
    }
    v
}

/// team-a/q, whose stored status folded batch 1 and holds one entry of 0.2.0's status store.
fn quota() -> KarmadaQuota {
    let mut q = mk_quota("team-a", "q", &[("requests.cpu", "10")]);
    q.status = Some(KarmadaQuotaStatus {
        folded_through: Some(1),
        reservations: vec![mk_reservation(
            "db",
            "u-db",
            1,
            &[("requests.cpu", "1")],
            NOW + 300,
        )],
        ..KarmadaQuotaStatus::default()
    });
    q
}

fn uids(status: &KarmadaQuotaStatus) -> Vec<&str> {
    status
        .reservations
        .iter()
        .map(|r| r.reserved_by.uid.as_str())
        .collect()
}

#[test]
fn unobserved_batch_entries_are_carried_observed_ones_folded_and_the_fold_recorded() {
    let q = quota();
    let unfolded = Unfolded::of(&view(), &q_key("team-a"), Some(1), 3600).expect("batches name it");
    assert_eq!(
        unfolded.through, 3,
        "the newest batch naming team-a/q, not 4"
    );
    let c = compute_with(&q, &index(), &ObservedPods::new(), NOW, Some(&unfolded));
    let next = desired_status(&q, &c, &BTreeMap::new(), ts()).expect("a write");
    assert_eq!(next.folded_through, Some(3));
    // u-web is observed: its usage is in used, its entry goes; u-api waits for its
    // binding: carried; u-db (a status-store entry) stays; u-old (batch 1, folded
    // before) is not carried again.
    assert_eq!(uids(&next), ["u-db", "u-api"]);
    assert_eq!(
        next.used.get("requests.cpu").map(|q| q.0.as_str()),
        Some("2")
    );
    // Written, the next plan has nothing left to fold: no write.
    let mut written = q.clone();
    written.status = Some(next);
    assert_eq!(
        Unfolded::of(&view(), &q_key("team-a"), Some(3), 3600),
        None,
        "nothing above the recorded fold"
    );
    let again = compute_with(&written, &index(), &ObservedPods::new(), NOW, None);
    assert_eq!(
        desired_status(&written, &again, &BTreeMap::new(), ts()),
        None
    );
}

#[test]
fn a_quota_no_batch_names_keeps_its_fold_and_is_not_rewritten() {
    let q = quota();
    let c = compute_with(&q, &index(), &ObservedPods::new(), NOW, None);
    let first = desired_status(&q, &c, &BTreeMap::new(), ts()).expect("first status");
    assert_eq!(
        first.folded_through,
        Some(1),
        "never bumped without a batch naming it"
    );
    let mut settled = q.clone();
    settled.status = Some(first);
    // Batch 4 (team-b only) arrives: team-a/q has nothing above its fold.
    let v = view();
    assert_eq!(Unfolded::of(&v, &q_key("team-a"), Some(3), 3600), None);
    let c = compute_with(&settled, &index(), &ObservedPods::new(), NOW, None);
    assert_eq!(desired_status(&settled, &c, &BTreeMap::new(), ts()), None);
}

#[test]
fn the_recorded_fold_is_never_lowered_and_an_entry_in_both_stores_counts_once() {
    let mut q = quota();
    // The status also holds u-api from 0.2.0's status store (an upgrade: both kinds of entries).
    q.status.as_mut().unwrap().reservations.push(mk_reservation(
        "api",
        "u-api",
        1,
        &[("requests.cpu", "3")],
        NOW + 300,
    ));
    let unfolded = Unfolded {
        through: 0,
        entries: vec![entry("api", "u-api", "3")],
        ttl_secs: 3600,
    };
    let c = compute_with(&q, &index(), &ObservedPods::new(), NOW, Some(&unfolded));
    let next = desired_status(&q, &c, &BTreeMap::new(), ts()).unwrap();
    assert_eq!(next.folded_through, Some(1));
    assert_eq!(uids(&next), ["u-db", "u-api"]);
}

#[test]
fn an_invalid_spec_folds_nothing() {
    let mut q = quota();
    q.spec.hard.insert(
        "requests.cpu".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("lots".into()),
    );
    let unfolded = Unfolded::of(&view(), &q_key("team-a"), Some(1), 3600).unwrap();
    let c = compute_with(&q, &index(), &ObservedPods::new(), NOW, Some(&unfolded));
    let next = desired_status(&q, &c, &BTreeMap::new(), ts()).unwrap();
    assert_eq!(next.folded_through, Some(1), "its batches stay counted");
    assert_eq!(uids(&next), ["u-db"]);
}
