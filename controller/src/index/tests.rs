//! The index under binding, cluster and re-list events: charges, touched namespaces,
//! deleted uids, unpriced bindings, sync.

use super::*;
use crate::testutil::*;

const NOW: i64 = 1_000_000;

fn idx() -> Index {
    Index::new(600)
}

#[test]
fn apply_computes_the_charge_once_and_touches_only_its_namespace() {
    let mut i = idx();
    let rb = mk_binding("team-a", "web", "uid-1", 1, 3, "500m", &[("member1", 3)]);
    let touched = i.apply_binding_event(
        &Event::Apply(rb.clone()),
        Some("count/deployments.apps"),
        NOW,
    );
    assert_eq!(touched, Touched::from(["team-a".to_owned()]));
    let entries: Vec<_> = i.bindings_in("team-a").collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].0, "uid-1");
    assert_eq!(entries[0].1.generation, 1);
    assert_eq!(
        *entries[0].1.charge,
        BindingCharge::compute(&rb.spec, Some("count/deployments.apps"))
    );
    assert_eq!(i.bindings_in("team-b").count(), 0);
}

#[test]
fn unchanged_binding_touches_nothing() {
    let mut i = idx();
    let rb = mk_binding("team-a", "web", "uid-1", 1, 3, "500m", &[]);
    i.apply_binding_event(&Event::Apply(rb.clone()), None, NOW);
    let mut status_only = rb.clone();
    status_only.metadata.resource_version = Some("99".into());
    assert!(
        i.apply_binding_event(&Event::Apply(status_only), None, NOW)
            .is_empty()
    );
    let mut scaled = rb;
    scaled.spec.replicas = 5;
    scaled.metadata.generation = Some(2);
    assert_eq!(
        i.apply_binding_event(&Event::Apply(scaled), None, NOW)
            .len(),
        1
    );
    assert_eq!(
        i.observation("team-a", &by_uid("uid-1")),
        Observation::Seen(2)
    );
}

#[test]
fn an_entry_whose_binding_name_is_served_by_another_uid_is_a_failed_duplicate_create() {
    let mut i = idx();
    let served = mk_binding("team-a", "web", "uid-1", 1, 3, "500m", &[]);
    i.apply_binding_event(&Event::Apply(served.clone()), None, NOW);
    // A duplicate CREATE of "web" was admitted under a new uid; the apiserver answered
    // already exists, so that uid will never appear.
    let duplicate = karmada_quota_core::quota::ReservedBy {
        name: "web".into(),
        ..by_uid("uid-dup")
    };
    assert_eq!(i.observation("team-a", &duplicate), Observation::NameTaken);
    // Another namespace's "web" is another binding.
    assert_eq!(i.observation("team-b", &duplicate), Observation::NotSeen);
    // While the served one is being deleted, a new CREATE of its name may succeed:
    // keep the entry until its uid shows up.
    let mut deleting = served.clone();
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
    );
    i.apply_binding_event(&Event::Apply(deleting), None, NOW);
    assert_eq!(i.observation("team-a", &duplicate), Observation::NotSeen);
    // Gone: the name is free, the new uid is awaited.
    i.apply_binding_event(&Event::Delete(served), None, NOW);
    assert_eq!(i.observation("team-a", &duplicate), Observation::NotSeen);
    // A re-list rebuilds the name index too.
    let again = mk_binding("team-a", "web", "uid-2", 1, 3, "500m", &[]);
    i.apply_binding_event(&Event::Init, None, NOW);
    i.apply_binding_event(&Event::InitApply(again), None, NOW);
    i.apply_binding_event(&Event::InitDone, None, NOW);
    assert_eq!(i.observation("team-a", &duplicate), Observation::NameTaken);
}

#[test]
fn delete_is_remembered_for_pruning_then_forgotten() {
    let mut i = idx();
    let rb = mk_binding("team-a", "web", "uid-1", 4, 3, "500m", &[]);
    assert_eq!(
        i.observation("team-a", &by_uid("uid-1")),
        Observation::NotSeen
    );
    i.apply_binding_event(&Event::Apply(rb.clone()), None, NOW);
    assert_eq!(
        i.observation("team-a", &by_uid("uid-1")),
        Observation::Seen(4)
    );
    let touched = i.apply_binding_event(&Event::Delete(rb), None, NOW);
    assert_eq!(touched.len(), 1);
    assert_eq!(
        i.observation("team-a", &by_uid("uid-1")),
        Observation::Deleted
    );
    assert_eq!(i.binding_count(), 0);
    // Still remembered just before the memory runs out, forgotten after (GC runs at
    // most every 10 s).
    i.apply_binding_event(&Event::Init, None, NOW + 599);
    assert_eq!(
        i.observation("team-a", &by_uid("uid-1")),
        Observation::Deleted
    );
    i.apply_binding_event(&Event::Init, None, NOW + 610);
    assert_eq!(
        i.observation("team-a", &by_uid("uid-1")),
        Observation::NotSeen
    );
}

#[test]
fn relist_replaces_state_and_marks_missing_uids_deleted() {
    let mut i = idx();
    let a = mk_binding("team-a", "a", "uid-a", 1, 1, "1", &[]);
    let b = mk_binding("team-b", "b", "uid-b", 1, 1, "1", &[]);
    let c = mk_binding("team-c", "c", "uid-c", 1, 1, "1", &[]);
    for ev in [
        Event::Init,
        Event::InitApply(a.clone()),
        Event::InitApply(b.clone()),
        Event::InitDone,
    ] {
        i.apply_binding_event(&ev, None, NOW);
    }
    assert!(i.bindings_synced());
    assert_eq!(i.binding_count(), 2);
    // The watch restarts: `a` is gone, `b` unchanged, `c` is new.
    i.apply_binding_event(&Event::Init, None, NOW);
    // During the re-list the old state still answers.
    assert_eq!(i.binding_count(), 2);
    i.apply_binding_event(&Event::InitApply(b), None, NOW);
    i.apply_binding_event(&Event::InitApply(c), None, NOW);
    let touched = i.apply_binding_event(&Event::InitDone, None, NOW);
    assert_eq!(
        touched,
        Touched::from(["team-a".to_owned(), "team-c".to_owned()])
    );
    assert_eq!(
        i.observation("team-a", &by_uid("uid-a")),
        Observation::Deleted
    );
    assert_eq!(
        i.observation("team-b", &by_uid("uid-b")),
        Observation::Seen(1)
    );
    assert_eq!(
        i.observation("team-c", &by_uid("uid-c")),
        Observation::Seen(1)
    );
}

#[test]
fn an_unpriced_binding_is_reported_until_its_kind_resolves() {
    let mut i = idx();
    let mut rb = mk_binding("team-a", "w", "uid-w", 1, 0, "1", &[]);
    rb.spec.resource.api_version = "example.com/v1".into();
    rb.spec.resource.kind = "Widget".into();
    let touched =
        i.apply_resolved_binding_event(&Event::Apply(rb.clone()), Err("discovery failed"), NOW);
    assert_eq!(touched.len(), 1);
    assert_eq!(
        i.unpriced(),
        [(
            "team-a".to_owned(),
            "uid-w".to_owned(),
            "example.com/v1".to_owned(),
            "Widget".to_owned()
        )]
    );
    let gaps: Vec<_> = i.gaps_in("team-a").map(|(_, g)| g.reason.clone()).collect();
    assert_eq!(gaps, ["discovery failed"]);
    // Still failing: the reason is refreshed, nothing is touched.
    assert!(i.price("team-a", "uid-w", Err("still failing")).is_empty());
    assert_eq!(
        i.gaps_in("team-a").next().unwrap().1.reason,
        "still failing"
    );
    // Resolved: priced from the kept spec, the namespace is touched.
    let touched = i.price("team-a", "uid-w", Ok(Some("count/widgets.example.com")));
    assert_eq!(touched, Touched::from(["team-a".to_owned()]));
    assert!(i.unpriced().is_empty());
    assert_eq!(i.gaps_in("team-a").count(), 0);
    let entry = i.bindings_in("team-a").next().unwrap().1;
    assert_eq!(
        *entry.charge,
        BindingCharge::compute(&rb.spec, Some("count/widgets.example.com"))
    );
    // A later failure on a re-list makes it unpriced again; a delete forgets it.
    for ev in [Event::Init, Event::InitApply(rb.clone()), Event::InitDone] {
        i.apply_resolved_binding_event(&ev, Err("down again"), NOW);
    }
    assert_eq!(i.unpriced().len(), 1);
    i.apply_binding_event(&Event::Delete(rb), None, NOW);
    assert!(i.unpriced().is_empty());
    assert!(i.price("team-a", "uid-w", Ok(None)).is_empty());
}

#[test]
fn clusters_report_spec_changes_only() {
    let mut i = idx();
    let c = mk_cluster(
        "member1",
        Some("https://127.0.0.1:6443"),
        Some(("karmada-cluster", "member1")),
    );
    assert!(i.apply_cluster_event(&Event::Apply(c.clone())));
    let mut relabelled = c.clone();
    relabelled.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
    assert!(!i.apply_cluster_event(&Event::Apply(relabelled)));
    let mut moved = c.clone();
    moved.spec.api_endpoint = Some("https://127.0.0.1:7443".into());
    assert!(i.apply_cluster_event(&Event::Apply(moved)));
    assert!(i.apply_cluster_event(&Event::Delete(c)));
    assert!(i.clusters().is_empty());
}

#[test]
fn synced_only_after_every_watch_listed() {
    let mut i = idx();
    assert!(!i.synced());
    i.apply_binding_event(&Event::Init, None, NOW);
    i.apply_binding_event(&Event::InitDone, None, NOW);
    assert!(!i.synced());
    i.skip_clusters();
    assert!(!i.synced());
    i.quotas_listed();
    assert!(i.synced());
}
