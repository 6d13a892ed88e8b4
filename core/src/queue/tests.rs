//! The line's planning: order (priority, arrival, name), strict against best effort,
//! several quotas, demand changes, and the arrival rule.

use std::collections::BTreeMap;

use super::*;
use crate::quota::{QuotaPolicy, QuotaSpec};
use crate::selection::Covers;
use crate::testutil::{mk_cpu_charge, mk_list};

fn quota(name: &str, hard: &str, used: &str, order: QueueOrder) -> QuotaState {
    QuotaState {
        name: name.into(),
        covers: Covers::Namespace("team-a".into()),
        spec: QuotaSpec {
            policy: QuotaPolicy {
                admission: Admission {
                    mode: AdmissionMode::Queue,
                    order,
                },
                ..QuotaPolicy::default()
            },
            hard: mk_list(&[("requests.cpu", hard)]),
            scope: Default::default(),
        },
        used: Some(mk_list(&[("requests.cpu", used)])),
        reservations: Vec::new(),
        clusters: Vec::new(),
    }
}

/// `name`: `replicas` × 1 cpu, priority, created at second `created`.
fn waiting(name: &str, cpus: i32, priority: i32, created: i64) -> Waiting {
    Waiting {
        namespace: "team-a".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
        generation: 1,
        priority,
        created,
        queued_at: created * 1000,
        charge: mk_cpu_charge(cpus, "1"),
    }
}

fn no_labels(_: &str) -> Option<&'static Labels> {
    None
}

fn released(quotas: &[QuotaState], line: &[Waiting]) -> Vec<String> {
    plan(quotas, line, no_labels, 0)
        .released
        .into_iter()
        .map(|i| line[i].name.clone())
        .collect()
}

#[test]
fn higher_priority_goes_first_then_arrival_then_name() {
    let q = [quota("q", "3", "0", QueueOrder::StrictFifo)];
    let line = [
        waiting("late-low", 1, 0, 30),
        waiting("early-low", 1, 0, 10),
        waiting("high", 1, 5, 50),
        waiting("b-tie", 1, 0, 20),
        waiting("a-tie", 1, 0, 20),
    ];
    // Room for three: the high one, then by arrival; a tie in the same second by name.
    assert_eq!(released(&q, &line), ["high", "early-low", "a-tie"]);
    let p = plan(&q, &line, no_labels, 0);
    let left: Vec<_> = p.lines[&q[0].key()]
        .iter()
        .map(|pl| (line[pl.binding].name.as_str(), pl.position))
        .collect();
    assert_eq!(left, [("b-tie", 1), ("late-low", 2)]);
}

#[test]
fn the_mark_breaks_ties_within_a_second() {
    let q = [quota("q", "1", "0", QueueOrder::StrictFifo)];
    let mut first = waiting("zz", 1, 0, 20);
    first.queued_at = 20_100;
    let mut second = waiting("aa", 1, 0, 20);
    second.queued_at = 20_900;
    assert_eq!(released(&q, &[second, first]), ["zz"]);
}

#[test]
fn strict_order_lets_nothing_pass_a_head_that_does_not_fit() {
    let q = [quota("q", "4", "2", QueueOrder::StrictFifo)];
    let line = [waiting("big", 3, 0, 1), waiting("small", 1, 0, 2)];
    assert!(released(&q, &line).is_empty());
    let p = plan(&q, &line, no_labels, 0);
    let head = &p.lines[&q[0].key()][0];
    assert_eq!(line[head.binding].name, "big");
    assert_eq!(head.short, mk_list(&[("requests.cpu", "1")]));
    assert_eq!(head.asks, mk_list(&[("requests.cpu", "3")]));
    // The second fits on its own, but waits behind the head.
    assert!(p.lines[&q[0].key()][1].short.is_empty());
}

#[test]
fn best_effort_lets_smaller_later_work_start_while_the_head_does_not_fit() {
    let q = [quota("q", "4", "2", QueueOrder::BestEffortFifo)];
    let line = [
        waiting("big", 3, 0, 1),
        waiting("small", 1, 0, 2),
        waiting("small-2", 1, 0, 3),
    ];
    // Room for 2: big (3) does not fit; small takes 1, small-2 the last one.
    assert_eq!(released(&q, &line), ["small", "small-2"]);
}

#[test]
fn each_release_takes_its_room_before_the_next_is_decided() {
    let q = [quota("q", "4", "1", QueueOrder::BestEffortFifo)];
    let line = [waiting("a", 2, 0, 1), waiting("b", 2, 0, 2)];
    // 3 free: a takes 2, b (2) no longer fits.
    assert_eq!(released(&q, &line), ["a"]);
}

#[test]
fn reservations_count_as_taken() {
    let mut q = quota("q", "4", "1", QueueOrder::StrictFifo);
    q.reservations.push(crate::quota::Reservation {
        reserved_by: Default::default(),
        generation: 1,
        reserved: mk_list(&[("requests.cpu", "2")]),
        expiration_time: 0,
    });
    assert_eq!(
        released(&[q], &[waiting("a", 2, 0, 1)]),
        Vec::<String>::new()
    );
}

#[test]
fn a_demand_change_keeps_the_place_and_is_decided_at_its_new_size() {
    let q = [quota("q", "4", "2", QueueOrder::StrictFifo)];
    let mut head = waiting("head", 4, 0, 1);
    let line = [head.clone(), waiting("next", 1, 0, 2)];
    assert!(released(&q, &line).is_empty());
    // The detector scaled the waiting template down: same place, new charge; it now fits.
    head.charge = mk_cpu_charge(2, "1");
    assert_eq!(released(&q, &[head, line[1].clone()]), ["head"]);
}

#[test]
fn a_binding_waits_for_every_quota_covering_it() {
    let a = quota("a", "10", "0", QueueOrder::StrictFifo);
    let b = quota("b", "2", "2", QueueOrder::StrictFifo);
    let line = [waiting("w", 1, 0, 1)];
    assert!(released(&[a.clone(), b.clone()], &line).is_empty());
    let p = plan(&[a.clone(), b.clone()], &line, no_labels, 0);
    assert!(p.lines[&a.key()][0].short.is_empty());
    assert_eq!(
        p.lines[&b.key()][0].short,
        mk_list(&[("requests.cpu", "1")])
    );
}

#[test]
fn a_strict_head_held_by_another_quota_blocks_its_own_line() {
    // head fits in a but not in b; next needs only a... but a is strict: it waits too.
    let a = quota("a", "10", "0", QueueOrder::StrictFifo);
    let mut b = quota("b", "1", "1", QueueOrder::StrictFifo);
    b.spec.scope = crate::testutil::mk_scope("In", &["gold"]);
    let mut head = waiting("head", 1, 0, 1);
    head.charge = crate::testutil::mk_charge(&crate::testutil::mk_deployment(
        1,
        &[("cpu", "1")],
        "gold",
        &[],
    ));
    let next = waiting("next", 1, 0, 2);
    assert!(released(&[a.clone(), b.clone()], &[head.clone(), next.clone()]).is_empty());
    let mut a_best = a;
    a_best.spec.policy.admission.order = QueueOrder::BestEffortFifo;
    assert_eq!(released(&[a_best, b], &[head, next]), ["next"]);
}

#[test]
fn a_binding_no_quota_covers_any_more_is_released() {
    assert_eq!(released(&[], &[waiting("w", 1, 0, 1)]), ["w"]);
}

#[test]
fn a_refusal_no_room_ends_neither_releases_nor_blocks() {
    let q = [quota("q", "10", "0", QueueOrder::StrictFifo)];
    let mut bad = waiting("bad", 1, 9, 1);
    // No cpu request under a quota on cpu: `must specify`, for ever.
    bad.charge = crate::testutil::mk_charge(&crate::testutil::mk_deployment(
        1,
        &[("memory", "1Gi")],
        "",
        &[],
    ));
    let mut cpu_and_mem = q[0].clone();
    cpu_and_mem.spec.hard = mk_list(&[("requests.cpu", "10"), ("requests.memory", "10Gi")]);
    cpu_and_mem.used = Some(mk_list(&[("requests.cpu", "0"), ("requests.memory", "0")]));
    let mut good = waiting("good", 1, 0, 2);
    good.charge = crate::testutil::mk_charge(&crate::testutil::mk_deployment(
        1,
        &[("cpu", "1"), ("memory", "1Gi")],
        "",
        &[],
    ));
    let line = [bad, good];
    let p = plan(&[cpu_and_mem.clone()], &line, no_labels, 0);
    assert_eq!(p.released, [1]);
    let stuck = &p.lines[&cpu_and_mem.key()][0];
    assert!(
        stuck.stuck.as_deref().unwrap().contains("must specify cpu"),
        "{stuck:?}"
    );
}

#[test]
fn status_unknown_waits_and_lacks_its_whole_ask() {
    let mut q = quota("q", "4", "0", QueueOrder::StrictFifo);
    q.used = None;
    let p = plan(&[q.clone()], &[waiting("w", 2, 0, 1)], no_labels, 0);
    assert!(p.released.is_empty());
    assert_eq!(
        p.lines[&q.key()][0].short,
        mk_list(&[("requests.cpu", "2")])
    );
}

#[test]
fn arrival_waits_only_when_a_queueing_quota_lacks_room_or_would_be_jumped() {
    let full = quota("q", "4", "4", QueueOrder::StrictFifo);
    let free = quota("q", "4", "0", QueueOrder::StrictFifo);
    let newcomer = waiting("n", 1, 0, 1);
    let none = BTreeMap::new();
    assert_eq!(
        arrival(std::slice::from_ref(&full), &none, &newcomer, 0),
        Arrival::Wait(vec![full.key()])
    );
    assert_eq!(
        arrival(std::slice::from_ref(&free), &none, &newcomer, 0),
        Arrival::Admit
    );
    // Strict: someone of equal or higher priority waits → the newcomer queues behind.
    let line = BTreeMap::from([(
        free.key(),
        LineHead {
            waiting: 2,
            head_priority: 0,
        },
    )]);
    assert_eq!(
        arrival(std::slice::from_ref(&free), &line, &newcomer, 0),
        Arrival::Wait(vec![free.key()])
    );
    // A higher priority newcomer that fits goes ahead of them.
    let mut urgent = newcomer.clone();
    urgent.priority = 1;
    assert_eq!(
        arrival(std::slice::from_ref(&free), &line, &urgent, 0),
        Arrival::Admit
    );
    // Best effort: a newcomer that fits starts.
    let mut best = free.clone();
    best.spec.policy.admission.order = QueueOrder::BestEffortFifo;
    assert_eq!(arrival(&[best], &line, &newcomer, 0), Arrival::Admit);
}

#[test]
fn arrival_under_a_refusing_quota_is_left_to_the_validating_webhook() {
    let mut refuse = quota("q", "4", "4", QueueOrder::StrictFifo);
    refuse.spec.policy.admission.mode = AdmissionMode::Refuse;
    let newcomer = waiting("n", 1, 0, 1);
    assert_eq!(
        arrival(&[refuse.clone()], &BTreeMap::new(), &newcomer, 0),
        Arrival::Admit
    );
    // Queue mode on one quota, refusal on another it does not fit: refused as before.
    let mut queue = quota("p", "4", "4", QueueOrder::StrictFifo);
    queue.name = "a-first".into();
    assert_eq!(
        arrival(&[queue, refuse], &BTreeMap::new(), &newcomer, 0),
        Arrival::Admit
    );
}

#[test]
fn waiting_is_suspended_marked_and_unplaced() {
    use crate::binding::{Suspension, TargetCluster};
    let mut spec = crate::testutil::mk_deployment(1, &[("cpu", "1")], "", &[]);
    let mark = BTreeMap::from([(
        ANNOTATION_QUEUED_AT.to_owned(),
        "2026-11-26T03:00:00.000Z".to_owned(),
    )]);
    assert!(!is_waiting(Some(&mark), &spec), "not suspended");
    spec.suspension = Some(Suspension {
        scheduling: Some(true),
    });
    assert!(is_waiting(Some(&mark), &spec));
    assert!(!is_waiting(None, &spec), "suspended by someone else");
    spec.clusters.push(TargetCluster {
        name: "member1".into(),
        replicas: 1,
        ..Default::default()
    });
    assert!(!is_waiting(Some(&mark), &spec), "placed: charged in full");
}

#[test]
fn the_mark_round_trips_with_milliseconds() {
    let v = format_queued_at(1_790_000_000_123);
    assert_eq!(parse_queued_at(&v), Some(1_790_000_000_123));
    assert_eq!(parse_queued_at("yesterday"), None);
}

#[test]
fn a_failed_release_holds_the_strict_lines_it_stands_in_only() {
    let strict = quota("strict", "4", "0", QueueOrder::StrictFifo);
    let best = quota("best", "4", "0", QueueOrder::BestEffortFifo);
    let w = waiting("head", 2, 10, 1);
    let lines = strict_lines(&[strict.clone(), best.clone()], &w, no_labels);
    assert_eq!(lines.into_iter().collect::<Vec<_>>(), [strict.key()]);
    // A quota over another namespace, or one that limits nothing it asks: not its line.
    let mut other = strict.clone();
    other.covers = Covers::Namespace("team-b".into());
    let mut memory = strict;
    memory.spec.hard = mk_list(&[("requests.memory", "1Gi")]);
    assert!(strict_lines(&[other, memory, best], &w, no_labels).is_empty());
}

#[test]
fn the_line_orders_by_the_priority_a_binding_joined_with() {
    let spec = |p: Option<i32>| -> ResourceBindingSpec {
        serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"},
            "schedulePriority": p.map(|p| serde_json::json!({"priority": p})),
        }))
        .unwrap()
    };
    let marks = |v: &str| BTreeMap::from([(ANNOTATION_QUEUED_PRIORITY.to_owned(), v.to_owned())]);
    // Raised to 100 while waiting: the line still sees 5.
    assert_eq!(line_priority(Some(&marks("5")), &spec(Some(100))), 5);
    assert_eq!(line_priority(Some(&marks(" -3 ")), &spec(None)), -3);
    // Marked before the annotation existed, or a value that does not parse: the spec's.
    assert_eq!(line_priority(None, &spec(Some(7))), 7);
    assert_eq!(line_priority(Some(&BTreeMap::new()), &spec(None)), 0);
    assert_eq!(line_priority(Some(&marks("high")), &spec(Some(2))), 2);
}

#[test]
fn a_line_can_form_only_where_a_queue_mode_quota_covers_the_namespace() {
    let labels = |pairs: &[(&str, &str)]| -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    };
    let namespaces = vec![
        ("team-a".to_owned(), labels(&[])),
        ("team-b".to_owned(), labels(&[("business", "ai")])),
        (
            "team-c".to_owned(),
            labels(&[(LABEL_WAITING_LINE, LABEL_WAITING_LINE_VALUE)]),
        ),
        ("team-d".to_owned(), labels(&[("business", "web")])),
    ];
    let queued = quota("q", "4", "0", QueueOrder::StrictFifo);
    let mut refusing = queued.clone();
    refusing.spec.policy.admission.mode = AdmissionMode::Refuse;
    refusing.covers = Covers::Namespace("team-d".into());
    let mut business = queued.clone();
    business.covers = Covers::Selected(crate::placement::LabelSelector {
        match_labels: BTreeMap::from([("business".to_owned(), "ai".to_owned())]),
        ..Default::default()
    });
    // No quota queues: no line anywhere, a stale mark included.
    assert!(line_namespaces(&[refusing.clone()], &namespaces).is_empty());
    // A KarmadaQuota in Queue mode: its namespace; a cluster quota: what it selects.
    let got = line_namespaces(&[queued, refusing, business], &namespaces);
    assert_eq!(got.into_iter().collect::<Vec<_>>(), ["team-a", "team-b"]);
    // A selector naming the mark itself selects nothing by it.
    let mut by_mark = quota("m", "4", "0", QueueOrder::BestEffortFifo);
    by_mark.covers = Covers::Selected(crate::placement::LabelSelector {
        match_labels: BTreeMap::from([(
            LABEL_WAITING_LINE.to_owned(),
            LABEL_WAITING_LINE_VALUE.to_owned(),
        )]),
        ..Default::default()
    });
    assert!(line_namespaces(&[by_mark], &namespaces).is_empty());
}
