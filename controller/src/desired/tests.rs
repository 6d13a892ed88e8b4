//! Tests of the status computation: from index, members and the current status to the desired status and its events.

use super::*;
use crate::testutil::*;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karmada_quota_core::ledger::Observation;
use kube::runtime::events::EventType;
use kube::runtime::watcher::Event;

const NOW: i64 = 1_795_000_000;

fn ts(secs: i64) -> jiff::Timestamp {
    jiff::Timestamp::from_second(secs).unwrap()
}

fn index_with(bindings: &[karmada_quota_crds::ResourceBinding]) -> Index {
    let mut i = Index::new(600);
    i.apply_binding_event(&Event::Init, None, NOW);
    for b in bindings {
        i.apply_binding_event(
            &Event::InitApply(b.clone()),
            Some("count/deployments.apps"),
            NOW,
        );
    }
    i.apply_binding_event(&Event::InitDone, None, NOW);
    i
}

fn no_members() -> BTreeMap<String, Reach> {
    BTreeMap::new()
}

fn status_of(
    q: &KarmadaQuota,
    i: &Index,
    pods: &ObservedPods,
    reach: &BTreeMap<String, Reach>,
) -> KarmadaQuotaStatus {
    let c = compute(q, i, pods, NOW);
    desired_status(q, &c, reach, ts(NOW)).expect("a first status differs")
}

fn s(
    map: &std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    >,
    k: &str,
) -> String {
    map.get(k)
        .map(|q| q.0.clone())
        .unwrap_or_else(|| "<none>".into())
}

#[test]
fn an_unresolved_count_keeps_its_last_known_used_and_says_why() {
    let mut q = mk_quota(
        "team-a",
        "q",
        &[("count/widgets.example.com", "5"), ("requests.cpu", "10")],
    );
    // What the controller wrote before discovery broke: two widgets.
    q.status = Some(KarmadaQuotaStatus {
        used: list_to_api(&rl(&[
            ("count/widgets.example.com", "2"),
            ("requests.cpu", "3"),
        ])),
        ..KarmadaQuotaStatus::default()
    });
    let mut w = mk_binding("team-a", "w", "uid-w", 1, 1, "1", &[]);
    w.spec.resource.api_version = "example.com/v1".into();
    w.spec.resource.kind = "Widget".into();
    let mut i = Index::new(600);
    for ev in [Event::Init, Event::InitApply(w), Event::InitDone] {
        i.apply_resolved_binding_event(
            &ev,
            Err("API discovery of example.com/v1 failed: 503"),
            NOW,
        );
    }
    let st = status_of(&q, &i, &ObservedPods::new(), &no_members());
    // The count keeps 2 (this computation alone would say 0); cpu is complete: 1.
    assert_eq!(s(&st.used, "count/widgets.example.com"), "2");
    assert_eq!(s(&st.used, "requests.cpu"), "1");
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_USAGE_COMPLETE)
        .expect("UsageComplete");
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", complete::REASON_INCOMPLETE)
    );
    let raised = notices(q.status.as_ref(), &st);
    assert!(
        raised
            .iter()
            .any(|n| n.reason == EVENT_USAGE_INCOMPLETE && n.type_ == EventType::Warning),
        "{raised:?}"
    );
    // Written, then computed again: unchanged, so nothing is written and no second event.
    let written = KarmadaQuota {
        status: Some(st.clone()),
        ..q.clone()
    };
    let again = compute(&written, &i, &ObservedPods::new(), NOW);
    assert_eq!(
        desired_status(&written, &again, &no_members(), ts(NOW)),
        None
    );
    assert!(
        c.message.contains("count/widgets.example.com") && c.message.contains("503"),
        "{}",
        c.message
    );
    // Discovery recovers: the count is priced, the condition turns True.
    let touched = i.price("team-a", "uid-w", Ok(Some("count/widgets.example.com")));
    assert_eq!(touched.len(), 1);
    let before = written.status.clone();
    let st = status_of(&written, &i, &ObservedPods::new(), &no_members());
    assert_eq!(s(&st.used, "count/widgets.example.com"), "1");
    assert!(
        notices(before.as_ref(), &st)
            .iter()
            .any(|n| n.reason == EVENT_USAGE_COMPLETE)
    );
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_USAGE_COMPLETE)
        .expect("UsageComplete");
    assert_eq!(c.status, "True");
}

#[test]
fn used_and_clusters_sum_the_namespace_bindings() {
    let q = mk_quota(
        "team-a",
        "q",
        &[
            ("requests.cpu", "10"),
            ("pods", "20"),
            ("count/deployments.apps", "5"),
        ],
    );
    let i = index_with(&[
        mk_binding(
            "team-a",
            "web",
            "u1",
            1,
            3,
            "500m",
            &[("member1", 2), ("member2", 1)],
        ),
        mk_binding("team-a", "api", "u2", 1, 2, "1", &[("member2", 2)]),
        mk_binding("team-b", "other", "u3", 1, 9, "1", &[("member1", 9)]),
    ]);
    let st = status_of(&q, &i, &ObservedPods::new(), &no_members());
    assert_eq!(s(&st.used, "requests.cpu"), "3500m");
    assert_eq!(s(&st.used, "pods"), "5");
    assert_eq!(s(&st.used, "count/deployments.apps"), "2");
    assert_eq!(st.hard.len(), 3);
    let names: Vec<_> = st.clusters.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["member1", "member2"]);
    assert_eq!(s(&st.clusters[0].used, "requests.cpu"), "1");
    assert_eq!(s(&st.clusters[1].used, "requests.cpu"), "2500m");
    assert!(st.clusters.iter().all(|c| c.observed.is_none()));
    assert_eq!(
        st.summary.as_deref(),
        Some("count/deployments.apps: 2/5, pods: 5/20, requests.cpu: 3500m/10")
    );
    let ready = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("True", REASON_SYNCED)
    );
    assert_eq!(
        ready.message,
        "usage computed from 2 bindings in 2 clusters"
    );
    assert_eq!(st.observed_generation, Some(1));
}

#[test]
fn the_view_lists_the_bindings_that_use_the_most_of_the_namespace() {
    let q = mk_quota("team-a", "q", &[("requests.cpu", "10"), ("pods", "4")]);
    let i = index_with(&[
        mk_binding(
            "team-a",
            "web",
            "u1",
            1,
            3,
            "500m",
            &[("member1", 2), ("member2", 1)],
        ),
        mk_binding("team-a", "api", "u2", 1, 1, "4", &[("member2", 1)]),
        mk_binding("team-b", "other", "u3", 1, 9, "1", &[("member1", 9)]),
    ]);
    let Computed::Valid { view, .. } = compute(&q, &i, &ObservedPods::new(), NOW) else {
        panic!("a valid spec computes");
    };
    // web: 3 of 4 pods (75 %); api: 4 of 10 cpu (40 %); team-b's binding is not listed.
    let names: Vec<_> = view.top_bindings.iter().map(|b| b.name.as_str()).collect();
    assert_eq!(names, ["web", "api"]);
    assert_eq!(
        view.top_bindings[0].usage,
        rl(&[("requests.cpu", "1500m"), ("pods", "3")])
    );
    assert_eq!(view.top_bindings[0].clusters, ["member1", "member2"]);
}

#[test]
fn every_hard_name_is_present_even_with_no_bindings() {
    let q = mk_quota("team-a", "q", &[("requests.memory", "1Gi"), ("pods", "2")]);
    let st = status_of(&q, &index_with(&[]), &ObservedPods::new(), &no_members());
    assert_eq!(s(&st.used, "requests.memory"), "0");
    assert_eq!(s(&st.used, "pods"), "0");
    assert!(st.clusters.is_empty());
}

#[test]
fn unchanged_status_is_not_written_and_transition_times_stay() {
    let q = mk_quota("team-a", "q", &[("pods", "2")]);
    let i = index_with(&[mk_binding(
        "team-a",
        "web",
        "u1",
        1,
        1,
        "1",
        &[("member1", 1)],
    )]);
    let first = status_of(&q, &i, &ObservedPods::new(), &no_members());
    let mut q2 = q.clone();
    q2.status = Some(first.clone());
    // Later, same inputs: nothing to write.
    let c = compute(&q2, &i, &ObservedPods::new(), NOW + 100);
    assert_eq!(desired_status(&q2, &c, &no_members(), ts(NOW + 100)), None);
    // A new binding changes the message but not Ready's status: same transition time.
    let i2 = index_with(&[
        mk_binding("team-a", "web", "u1", 1, 1, "1", &[("member1", 1)]),
        mk_binding("team-a", "web2", "u2", 1, 1, "1", &[("member1", 1)]),
    ]);
    let c = compute(&q2, &i2, &ObservedPods::new(), NOW + 100);
    let next = desired_status(&q2, &c, &no_members(), ts(NOW + 100)).unwrap();
    let ready = next
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
        .unwrap();
    assert_eq!(ready.last_transition_time, Time(ts(NOW)));
    assert!(ready.message.contains("2 bindings"));
}

#[test]
fn observed_pods_raise_drift_with_cores_message() {
    let q = mk_quota("team-a", "q", &[("requests.cpu", "100"), ("pods", "500")]);
    let i = index_with(&[mk_binding(
        "team-a",
        "web",
        "u1",
        1,
        2,
        "500m",
        &[("member1", 1), ("member2", 1)],
    )]);
    let pods: ObservedPods = [
        ("member1".to_owned(), Some(vec![pod_usage_of("", "500m")])),
        (
            "member2".to_owned(),
            Some(vec![
                pod_usage_of("", "500m"),
                pod_usage_of("", "500m"),
                pod_usage_of("", "500m"),
            ]),
        ),
    ]
    .into();
    let reach: BTreeMap<_, _> = [
        ("member1".to_owned(), Reach::Reachable),
        ("member2".to_owned(), Reach::Reachable),
    ]
    .into();
    let st = status_of(&q, &i, &pods, &reach);
    let m2 = st.clusters.iter().find(|c| c.name == "member2").unwrap();
    assert_eq!(s(m2.observed.as_ref().unwrap(), "requests.cpu"), "1500m");
    assert_eq!(s(&m2.used, "requests.cpu"), "500m");
    let drift = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_DRIFT)
        .unwrap();
    assert_eq!(
        (drift.status.as_str(), drift.reason.as_str()),
        ("True", REASON_OBSERVED_ABOVE_PLACED)
    );
    assert_eq!(
        drift.message,
        "member2 runs requests.cpu=1500m, pods=3 but Karmada placed requests.cpu=500m, pods=1"
    );
    let ev = notices(None, &st);
    assert!(
        ev.iter()
            .any(|n| n.reason == EVENT_DRIFT_DETECTED && n.type_ == EventType::Warning)
    );
    let reachable = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_MEMBERS_REACHABLE)
        .unwrap();
    assert_eq!(reachable.status, "True");

    // The extra pods go away: drift cleared, an event says so.
    let mut q2 = q.clone();
    q2.status = Some(st.clone());
    let calm: ObservedPods = [
        ("member1".to_owned(), Some(vec![pod_usage_of("", "500m")])),
        ("member2".to_owned(), Some(vec![pod_usage_of("", "500m")])),
    ]
    .into();
    let c = compute(&q2, &i, &calm, NOW + 5);
    let st2 = desired_status(&q2, &c, &reach, ts(NOW + 5)).unwrap();
    let drift2 = st2
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_DRIFT)
        .unwrap();
    assert_eq!(
        (drift2.status.as_str(), drift2.reason.as_str()),
        ("False", REASON_NO_DRIFT)
    );
    assert_eq!(drift2.last_transition_time, Time(ts(NOW + 5)));
    assert!(
        notices(Some(&st), &st2)
            .iter()
            .any(|n| n.reason == EVENT_DRIFT_RESOLVED)
    );
}

#[test]
fn scoped_quota_counts_only_matching_pods() {
    let mut q = mk_quota("team-a", "q", &[("requests.cpu", "100")]);
    q.spec.scope_selector = Some(scope_not_in(&["batch"]));
    let pods: ObservedPods = [(
        "member1".to_owned(),
        Some(vec![
            pod_usage_of("", "1"),
            pod_usage_of("batch", "4"),
            pod_usage_of("high", "2"),
        ]),
    )]
    .into();
    let reach: BTreeMap<_, _> = [("member1".to_owned(), Reach::Reachable)].into();
    let st = status_of(&q, &index_with(&[]), &pods, &reach);
    assert_eq!(
        s(st.clusters[0].observed.as_ref().unwrap(), "requests.cpu"),
        "3"
    );
}

#[test]
fn unreachable_member_is_named_and_has_no_observed() {
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let i = index_with(&[mk_binding(
        "team-a",
        "web",
        "u1",
        1,
        2,
        "1",
        &[("member1", 1), ("member2", 1)],
    )]);
    let pods: ObservedPods = [
        ("member1".to_owned(), Some(vec![pod_usage_of("", "1")])),
        ("member2".to_owned(), None),
    ]
    .into();
    let reach: BTreeMap<_, _> = [
        ("member1".to_owned(), Reach::Reachable),
        (
            "member2".to_owned(),
            Reach::Unreachable("dial tcp 127.0.0.1:7443: connection refused".into()),
        ),
    ]
    .into();
    let st = status_of(&q, &i, &pods, &reach);
    let m1 = st.clusters.iter().find(|c| c.name == "member1").unwrap();
    let m2 = st.clusters.iter().find(|c| c.name == "member2").unwrap();
    assert!(m1.observed.is_some());
    assert!(m2.observed.is_none());
    assert_eq!(s(&m2.used, "pods"), "1");
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_MEMBERS_REACHABLE)
        .unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", REASON_UNREACHABLE)
    );
    assert!(
        c.message.starts_with("member2 unreachable: dial tcp"),
        "{}",
        c.message
    );
    assert!(!c.message.contains("member1"));
    assert!(
        notices(None, &st)
            .iter()
            .any(|n| n.reason == EVENT_MEMBER_UNREACHABLE)
    );
}

#[test]
fn reservations_are_pruned_when_observed_deleted_or_expired_and_read_not_stored() {
    let q = {
        let mut q = mk_quota("team-a", "q", &[("pods", "10")]);
        q.status = Some(KarmadaQuotaStatus {
            reservations: vec![
                mk_reservation("observed", "u-obs", 2, &[("pods", "1")], NOW + 30),
                mk_reservation("older-gen", "u-old", 3, &[("pods", "1")], NOW + 30),
                mk_reservation("deleted", "u-del", 1, &[("pods", "1")], NOW + 30),
                mk_reservation("expired", "u-exp", 1, &[("pods", "1")], NOW - 1),
                mk_reservation("pending", "u-pend", 1, &[("pods", "4")], NOW + 30),
            ],
            ..KarmadaQuotaStatus::default()
        });
        q
    };
    let del = mk_binding("team-a", "deleted", "u-del", 1, 1, "1", &[]);
    let mut i = index_with(&[
        mk_binding("team-a", "observed", "u-obs", 2, 1, "1", &[]),
        mk_binding("team-a", "older-gen", "u-old", 2, 1, "1", &[]),
        del.clone(),
    ]);
    i.apply_binding_event(&Event::Delete(del), None, NOW);
    assert_eq!(
        i.observation("team-a", &by_uid("u-pend")),
        Observation::NotSeen
    );
    let kept = |i: &Index| -> (Vec<String>, Computed) {
        let c = compute(&q, i, &ObservedPods::new(), NOW);
        let st = desired_status(&q, &c, &no_members(), ts(NOW)).unwrap();
        let names = st
            .reservations
            .iter()
            .map(|r| r.reserved_by.name.clone())
            .collect();
        (names, c)
    };
    // Expired, its binding never shown by the watch, never read: kept (the watch may
    // lag), and looked at again after READ_AGAIN.
    let (names, c) = kept(&i);
    assert_eq!(names, ["older-gen", "expired", "pending"]);
    assert_eq!(
        next_requeue(&c, NOW, Duration::from_secs(300)),
        Duration::from_secs(10)
    );
    // A read after the expiry finds it stored: still kept.
    i.record_read("team-a", "u-exp", Some(("u-exp", 1)), NOW);
    assert_eq!(kept(&i).0, ["older-gen", "expired", "pending"]);
    // A read after the expiry finds no binding of its uid: dropped.
    i.record_read("team-a", "u-exp", None, NOW);
    let (names, c) = kept(&i);
    assert_eq!(names, ["older-gen", "pending"]);
    // Requeue right after the earliest kept entry expires.
    assert_eq!(
        next_requeue(&c, NOW, Duration::from_secs(300)),
        Duration::from_secs(31)
    );
    assert_eq!(
        next_requeue(&c, NOW, Duration::from_secs(10)),
        Duration::from_secs(10)
    );
}

#[test]
fn invalid_spec_sets_ready_false_and_computes_nothing_else() {
    let q = mk_quota("team-a", "q", &[("limits.cpu", "10")]);
    let i = index_with(&[mk_binding(
        "team-a",
        "web",
        "u1",
        1,
        1,
        "1",
        &[("member1", 1)],
    )]);
    let c = compute(&q, &i, &ObservedPods::new(), NOW);
    assert!(matches!(c, Computed::Invalid(_)));
    let st = desired_status(&q, &c, &no_members(), ts(NOW)).unwrap();
    assert!(st.used.is_empty() && st.clusters.is_empty() && st.hard.is_empty());
    let ready = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_READY)
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", REASON_INVALID_SPEC)
    );
    assert!(ready.message.contains("limits.cpu"), "{}", ready.message);
    assert_eq!(st.conditions.len(), 1);
    assert!(
        notices(None, &st)
            .iter()
            .any(|n| n.reason == EVENT_INVALID_SPEC)
    );
    assert_eq!(
        next_requeue(&c, NOW, Duration::from_secs(300)),
        Duration::from_secs(300)
    );
}

#[test]
fn no_members_means_drift_not_measured() {
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let st = status_of(&q, &index_with(&[]), &ObservedPods::new(), &no_members());
    let d = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_DRIFT)
        .unwrap();
    assert_eq!(
        (d.status.as_str(), d.reason.as_str()),
        ("Unknown", REASON_NOT_MEASURED)
    );
    let m = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_MEMBERS_REACHABLE)
        .unwrap();
    assert_eq!(m.reason, REASON_NO_MEMBERS);
}

#[test]
fn connecting_members_do_not_lower_drift_or_reachability() {
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let i = index_with(&[mk_binding(
        "team-a",
        "web",
        "u1",
        1,
        1,
        "1",
        &[("member1", 1)],
    )]);
    let pods: ObservedPods = [(
        "member1".to_owned(),
        Some(vec![pod_usage_of("", "1"), pod_usage_of("", "1")]),
    )]
    .into();
    let reach: BTreeMap<_, _> = [
        ("member1".to_owned(), Reach::Reachable),
        ("member2".to_owned(), Reach::Unreachable("refused".into())),
    ]
    .into();
    let mut q2 = q.clone();
    q2.status = Some(status_of(&q, &i, &pods, &reach));
    // The controller restarts: both members are connecting, nothing is measured yet.
    let connecting: BTreeMap<_, _> = [
        ("member1".to_owned(), Reach::Connecting),
        ("member2".to_owned(), Reach::Connecting),
    ]
    .into();
    let none: ObservedPods = [("member1".to_owned(), None), ("member2".to_owned(), None)].into();
    let c = compute(&q2, &i, &none, NOW + 1);
    let next = desired_status(&q2, &c, &connecting, ts(NOW + 1)).unwrap();
    let get = |st: &KarmadaQuotaStatus, t: &str| {
        st.conditions
            .iter()
            .find(|c| c.type_ == t)
            .unwrap()
            .status
            .clone()
    };
    assert_eq!(get(&next, CONDITION_DRIFT), "True");
    assert_eq!(get(&next, CONDITION_MEMBERS_REACHABLE), "False");
    assert!(notices(q2.status.as_ref(), &next).is_empty());
}

#[test]
fn drift_free_message_agrees_in_number() {
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let pods: ObservedPods = [("member1".to_owned(), Some(vec![]))].into();
    let reach: BTreeMap<_, _> = [("member1".to_owned(), Reach::Reachable)].into();
    let st = status_of(&q, &index_with(&[]), &pods, &reach);
    let d = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_DRIFT)
        .unwrap();
    assert_eq!(
        d.message,
        "1 measured cluster runs at most what Karmada placed"
    );
}

#[test]
fn member_unreachable_event_only_when_a_member_newly_fails() {
    let q = mk_quota("team-a", "q", &[("pods", "10")]);
    let i = index_with(&[]);
    let reach = |m: &[(&str, &str)]| -> BTreeMap<String, Reach> {
        m.iter()
            .map(|(n, e)| {
                let r = if e.is_empty() {
                    Reach::Reachable
                } else {
                    Reach::Unreachable((*e).into())
                };
                ((*n).to_owned(), r)
            })
            .collect()
    };
    let r1 = reach(&[("member1", ""), ("member2", "refused; retry later")]);
    let st1 = status_of(&q, &i, &ObservedPods::new(), &r1);
    assert_eq!(notices(None, &st1).len(), 1);
    // Same member, another error text: no new event.
    let mut q1 = q.clone();
    q1.status = Some(st1.clone());
    let r2 = reach(&[("member1", ""), ("member2", "timeout")]);
    let st2 = desired_status(
        &q1,
        &compute(&q1, &i, &ObservedPods::new(), NOW),
        &r2,
        ts(NOW),
    )
    .unwrap();
    assert!(
        notices(Some(&st1), &st2)
            .iter()
            .all(|n| n.reason != EVENT_MEMBER_UNREACHABLE)
    );
    // A second member fails: an event.
    let r3 = reach(&[("member1", "refused"), ("member2", "timeout")]);
    let st3 = desired_status(
        &q1,
        &compute(&q1, &i, &ObservedPods::new(), NOW),
        &r3,
        ts(NOW),
    )
    .unwrap();
    assert!(
        notices(Some(&st2), &st3)
            .iter()
            .any(|n| n.reason == EVENT_MEMBER_UNREACHABLE)
    );
}

/// The failover of e2e/tests/failover.rs: 4 × 100m moved from member1 to member2, 2 old replicas draining
/// in member1 (back and running them).
fn failed_over() -> karmada_quota_crds::ResourceBinding {
    let mut rb = mk_binding("team-a", "web", "uid-web", 3, 4, "100m", &[("member2", 4)]);
    rb.spec.graceful_eviction_tasks = vec![karmada_quota_core::binding::GracefulEvictionTask {
        from_cluster: "member1".into(),
        replicas: Some(2),
        purge_mode: "Gracefully".into(),
        reason: "TaintUntolerated".into(),
        producer: "taint-manager".into(),
        ..Default::default()
    }];
    rb
}

fn failover_pods() -> ObservedPods {
    [
        (
            "member1".to_owned(),
            Some(vec![pod_usage_of("", "100m"); 2]),
        ),
        (
            "member2".to_owned(),
            Some(vec![pod_usage_of("", "100m"); 4]),
        ),
    ]
    .into()
}

#[test]
fn a_failover_shows_draining_per_member_without_drift_and_counts_it_only_under_count() {
    let mut q = mk_quota("team-a", "q", &[("requests.cpu", "400m"), ("pods", "4")]);
    let i = index_with(&[failed_over()]);
    let reach: BTreeMap<_, _> = [
        ("member1".to_owned(), Reach::Reachable),
        ("member2".to_owned(), Reach::Reachable),
    ]
    .into();
    let st = status_of(&q, &i, &failover_pods(), &reach);
    // Show (the default): used is the binding's charge; member1 shows 2 draining.
    assert_eq!(
        (s(&st.used, "requests.cpu"), s(&st.used, "pods")),
        ("400m".into(), "4".into())
    );
    let member1 = st.clusters.iter().find(|c| c.name == "member1").unwrap();
    let draining = member1.draining.as_ref().expect("member1 drains");
    assert_eq!(
        (s(draining, "requests.cpu"), s(draining, "pods")),
        ("200m".into(), "2".into())
    );
    assert!(!member1.draining_unknown);
    let member2 = st.clusters.iter().find(|c| c.name == "member2").unwrap();
    assert_eq!(member2.draining, None);
    // The old pods member1 runs are expected while they drain: Drift stays False.
    let drift = st
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_DRIFT)
        .expect("Drift");
    assert_eq!(
        (drift.status.as_str(), drift.reason.as_str()),
        ("False", REASON_NO_DRIFT),
        "{}",
        drift.message
    );
    // Computed again over the written status: nothing to write (no flapping).
    let written = KarmadaQuota {
        status: Some(st.clone()),
        ..q.clone()
    };
    let again = compute(&written, &i, &failover_pods(), NOW);
    assert_eq!(desired_status(&written, &again, &reach, ts(NOW + 1)), None);

    // Count: the draining replicas are in used (600m of 400m).
    q.spec.draining_replicas = Some("Count".into());
    let st = status_of(&q, &i, &failover_pods(), &reach);
    assert_eq!(
        (s(&st.used, "requests.cpu"), s(&st.used, "pods")),
        ("600m".into(), "6".into())
    );
    assert_eq!(
        st.summary.as_deref(),
        Some("pods: 6/4, requests.cpu: 600m/400m")
    );

    // The eviction completes: the task goes, member1 drains nothing, used falls back.
    let mut done = failed_over();
    done.spec.graceful_eviction_tasks.clear();
    let i = index_with(&[done]);
    let st = status_of(&q, &i, &ObservedPods::new(), &no_members());
    assert_eq!(s(&st.used, "requests.cpu"), "400m");
    assert!(st.clusters.iter().all(|c| c.draining.is_none()));
}
