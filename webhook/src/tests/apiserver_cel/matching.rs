//! The chart's matchConditions on the ResourceBinding webhook, evaluated as kube-apiserver
//! 1.28+ does, against the webhook's real answers: a review the conditions hold back
//! (never sent) must be one the webhook allows without charging anything more — answered
//! early (its charge unchanged), or allowed by a quota with no room left (a placement that
//! cannot raise the charge) — so that a real review would write nothing. A table names the
//! cases of the early answer's own tests, the fields the charge reads and the scheduler's
//! placements; a property test draws pairs of stored and new bindings.

use std::sync::atomic::Ordering;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{Value, json};

use super::super::*;
use super::MatchConditions;
use crate::admission::REASON_CHARGE_UNCHANGED;

/// The quotas' limits: requests and object counts, so that both the per-replica charge
/// and the template's kind matter.
const HARD: &[(&str, &str)] = &[
    ("requests.cpu", "10"),
    ("pods", "20"),
    ("count/deployments.apps", "5"),
];

/// [`HARD`] with room left; every quota enforceable and synced.
fn quota() -> KarmadaQuota {
    mk_quota(
        "compute",
        HARD,
        &[
            ("requests.cpu", "2"),
            ("pods", "2"),
            ("count/deployments.apps", "1"),
        ],
    )
}

/// [`quota`] with every name of `hard` used up: the webhook refuses any review that charges
/// more, so one it allows charges nothing more (and, not a dry run, writes nothing).
fn full_quota() -> KarmadaQuota {
    mk_quota("compute", HARD, HARD)
}

/// Whether the webhook allows `review` under [`full_quota`]: it charges nothing more.
async fn charges_nothing_more(full: &Harness, review: Value) -> bool {
    verdict(&full.review_binding(review).await).0
}

/// What the webhook makes of `review`: (answered early, allowed).
async fn webhook_answer(h: &Harness, review: Value) -> (bool, bool) {
    let before = h.allowed_with(REASON_CHARGE_UNCHANGED);
    let response = h.review_binding(review).await;
    (
        h.allowed_with(REASON_CHARGE_UNCHANGED) > before,
        verdict(&response).0,
    )
}

/// A dry-run UPDATE review from `old` to `new` (decided now, nothing written, so one
/// harness serves many reviews).
fn update(old: Value, new: Value) -> Value {
    mk_review("UPDATE", RB, "resourcebindings", Some(new), Some(old), true)
}

/// `web`, placed: 2 replicas of 1 cpu on two members.
fn placed() -> Value {
    let mut b = mk_binding("web", "uid-web", 1, 2, "1", "");
    b["spec"]["clusters"] = json!([{"name": "m1", "replicas": 1}, {"name": "m2", "replicas": 1}]);
    b["spec"]["resource"]["resourceVersion"] = json!("100");
    b
}

/// What the conditions must make of a case.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Want {
    /// Held back: the charge cannot change (the saving matchConditions are for).
    Skipped,
    /// Held back: the charge changes but cannot rise (the scheduler's placement of a
    /// single-template workload onto no more replicas than it has); the webhook allows it
    /// even with no room left.
    SkippedNoRise,
    /// Sent, and the webhook does not answer it early: it must be sent.
    Sent,
    /// Sent although the webhook answers it early (a difference the conditions do not
    /// tell apart; sending is always safe).
    SentAnyway,
}

/// The cases: (what, stored → new binding, want).
fn cases() -> Vec<(&'static str, Value, Value, Want)> {
    let with = |f: &dyn Fn(&mut Value)| {
        let mut b = placed();
        f(&mut b);
        b
    };
    // The binding before the scheduler placed it (no spec.clusters), changed by `f`.
    let unscheduled = |f: &dyn Fn(&mut Value)| {
        with(&|b| {
            b["spec"].as_object_mut().unwrap().remove("clusters");
            f(b);
        })
    };
    // Without spec.replicaRequirements.
    let no_requirements = |b: &mut Value| {
        b["spec"]
            .as_object_mut()
            .unwrap()
            .remove("replicaRequirements");
    };
    // The binding placed on `clusters`.
    let on = |clusters: Value| with(&|b| b["spec"]["clusters"] = clusters.clone());
    let queued = |b: &mut Value| {
        b["metadata"]["annotations"] =
            json!({"quota.karmada.io/queued-at": "2026-01-01T00:00:00.000Z"});
        b["spec"]["suspension"] = json!({"scheduling": true});
        b["spec"]["clusters"] = json!([]);
    };
    use Want::*;
    vec![
        // The early answer's own cases (tests/early.rs).
        (
            "relabelled",
            placed(),
            with(&|b| b["metadata"]["labels"] = json!({"team": "a"})),
            Skipped,
        ),
        (
            "scaled up 2 → 3",
            placed(),
            with(&|b| b["spec"]["replicas"] = json!(3)),
            Sent,
        ),
        (
            "scaled down 2 → 1",
            placed(),
            with(&|b| {
                b["spec"]["replicas"] = json!(1);
                b["spec"]["clusters"] = json!([{"name": "m1", "replicas": 1}]);
            }),
            Sent,
        ),
        (
            "stored object does not decode",
            with(&|b| b["spec"]["replicas"] = json!("two")),
            placed(),
            Sent,
        ),
        // What Karmada's controllers write without changing a charge.
        (
            "the template's new resourceVersion",
            placed(),
            with(&|b| b["spec"]["resource"]["resourceVersion"] = json!("101")),
            Skipped,
        ),
        (
            "a finalizer",
            placed(),
            with(&|b| b["metadata"]["finalizers"] = json!(["karmada.io/binding-controller"])),
            Skipped,
        ),
        (
            "the last finalizer removed from a binding being deleted",
            with(&|b| {
                b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                b["metadata"]["finalizers"] = json!(["karmada.io/binding-controller"]);
            }),
            with(&|b| b["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z")),
            Skipped,
        ),
        (
            "a new generation",
            placed(),
            with(&|b| b["metadata"]["generation"] = json!(2)),
            Skipped,
        ),
        (
            "an annotation other than the line's mark",
            placed(),
            with(&|b| {
                b["metadata"]["annotations"] = json!({"policy.karmada.io/applied-placement": "{}"})
            }),
            Skipped,
        ),
        (
            "schedulePriority (the line's order, read by the controller)",
            placed(),
            with(&|b| b["spec"]["schedulePriority"] = json!({"priority": 5})),
            Skipped,
        ),
        (
            "a spec field the charge does not read",
            placed(),
            with(&|b| b["spec"]["conflictResolution"] = json!("Overwrite")),
            Skipped,
        ),
        // Every field the charge reads.
        (
            "rescheduled m2 → m3",
            placed(),
            with(&|b| b["spec"]["clusters"][1]["name"] = json!("m3")),
            SkippedNoRise,
        ),
        // The scheduler's placement (spec.clusters alone): held back when it cannot
        // raise the charge max(spec.replicas, Σ clusters[].replicas).
        (
            "scheduled: divided over two members (Karmada's scheduler update)",
            unscheduled(&|_| {}),
            placed(),
            SkippedNoRise,
        ),
        (
            "scheduled: both replicas on one member, the replicas field left out",
            unscheduled(&|_| {}),
            on(json!([{"name": "m1", "replicas": 2}, {"name": "m2"}])),
            SkippedNoRise,
        ),
        (
            "moved onto fewer replicas than the binding has",
            placed(),
            on(json!([{"name": "m3", "replicas": 1}])),
            SkippedNoRise,
        ),
        (
            "scheduled: duplicated, each member runs every replica",
            unscheduled(&|_| {}),
            on(json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 2}])),
            Sent,
        ),
        (
            "placed onto more replicas than before and than the binding has",
            placed(),
            on(json!([{"name": "m1", "replicas": 2}, {"name": "m2", "replicas": 1}])),
            Sent,
        ),
        (
            "a negative replica count (the charge counts it as 0)",
            unscheduled(&|_| {}),
            on(json!([{"name": "m1", "replicas": 3}, {"name": "m2", "replicas": -1}])),
            Sent,
        ),
        (
            "scheduled without replica requirements",
            unscheduled(&no_requirements),
            with(&no_requirements),
            Sent,
        ),
        // Counts past int32, which the apiserver stores (it does not enforce the schema's
        // `format: int32`) and the webhook reads saturated.
        (
            "a spec.replicas past int32 the clusters' sum stays under",
            unscheduled(&|b| b["spec"]["replicas"] = json!(2_147_483_648_i64)),
            with(&|b| {
                b["spec"]["replicas"] = json!(2_147_483_648_i64);
                b["spec"]["clusters"] = json!([{"name": "m1", "replicas": 2_147_483_647}, {"name": "m2", "replicas": 1}]);
            }),
            Sent,
        ),
        (
            "a cluster's replicas past int32, their sum no higher than before",
            on(json!([{"name": "m1", "replicas": 2_147_483_647}, {"name": "m2", "replicas": 1}])),
            on(json!([{"name": "m1", "replicas": 2_147_483_648_i64}])),
            Sent,
        ),
        (
            "a schedulePriority past int32 (the charge does not read it)",
            placed(),
            with(&|b| b["spec"]["schedulePriority"] = json!({"priority": 2_147_483_648_i64})),
            Skipped,
        ),
        (
            "scheduled, the stored binding's schedulePriority past int32",
            unscheduled(&|b| {
                b["spec"]["schedulePriority"] = json!({"priority": 2_147_483_648_i64})
            }),
            with(&|b| b["spec"]["schedulePriority"] = json!({"priority": 2_147_483_648_i64})),
            SkippedNoRise,
        ),
        (
            "scheduled during a graceful eviction",
            unscheduled(&|b| {
                b["spec"]["gracefulEvictionTasks"] = json!([{"fromCluster": "m3", "replicas": 1}])
            }),
            with(&|b| {
                b["spec"]["gracefulEvictionTasks"] = json!([{"fromCluster": "m3", "replicas": 1}])
            }),
            Sent,
        ),
        ("unscheduled", placed(), unscheduled(&|_| {}), Sent),
        (
            "cpu request",
            placed(),
            with(&|b| b["spec"]["replicaRequirements"]["resourceRequest"]["cpu"] = json!("2")),
            Sent,
        ),
        (
            "PriorityClass",
            placed(),
            with(&|b| b["spec"]["replicaRequirements"]["priorityClassName"] = json!("high")),
            Sent,
        ),
        (
            "replicaRequirements dropped",
            placed(),
            with(&no_requirements),
            Sent,
        ),
        (
            "components",
            placed(),
            with(
                &|b| b["spec"]["components"] = json!([{"name": "jm", "replicas": 1, "replicaRequirements": {"resourceRequest": {"cpu": "1"}}}]),
            ),
            Sent,
        ),
        (
            "placement: duplicated on three members",
            with(&|b| {
                b["spec"]["clusters"] = json!([]);
            }),
            with(&|b| {
                b["spec"]["clusters"] = json!([]);
                b["spec"]["placement"] = json!({"clusterAffinity": {"clusterNames": ["m1", "m2", "m3"]}, "replicaScheduling": {"replicaSchedulingType": "Duplicated"}});
            }),
            Sent,
        ),
        (
            "a graceful eviction",
            placed(),
            with(&|b| {
                b["spec"]["gracefulEvictionTasks"] = json!([{"fromCluster": "m3", "replicas": 1}])
            }),
            Sent,
        ),
        (
            "template kind",
            placed(),
            with(&|b| b["spec"]["resource"]["kind"] = json!("StatefulSet")),
            Sent,
        ),
        (
            "template apiVersion",
            placed(),
            with(&|b| b["spec"]["resource"]["apiVersion"] = json!("v1")),
            Sent,
        ),
        (
            "template renamed",
            placed(),
            with(&|b| b["spec"]["resource"]["name"] = json!("web2")),
            SentAnyway,
        ),
        (
            "replicas 2 written out, the same charge",
            with(&|b| {
                b["spec"].as_object_mut().unwrap().remove("replicas");
                b["spec"]["clusters"] = json!([{"name": "m1", "replicas": 2}]);
            }),
            with(&|b| b["spec"]["clusters"] = json!([{"name": "m1", "replicas": 2}])),
            SentAnyway,
        ),
        // The waiting line.
        (
            "suspended by someone else (no mark: charged as before)",
            placed(),
            with(&|b| b["spec"]["suspension"] = json!({"scheduling": true})),
            Skipped,
        ),
        (
            "joins the line after creation (refused)",
            placed(),
            with(&queued),
            Sent,
        ),
        ("released from the line", with(&queued), placed(), Sent),
        (
            "relabelled while waiting",
            with(&queued),
            with(&|b| {
                queued(b);
                b["metadata"]["labels"] = json!({"team": "a"});
            }),
            SentAnyway,
        ),
    ]
}

#[tokio::test]
async fn the_match_conditions_hold_back_only_updates_the_webhook_answers_early() {
    let h = Harness::new(&[quota()]);
    let full = Harness::new(&[full_quota()]);
    let conditions = MatchConditions::binding();
    let mut skipped = 0;
    for (what, old, new, want) in cases() {
        let review = update(old, new);
        let sent = conditions
            .sent(&review)
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        let (early, allowed) = webhook_answer(&h, review.clone()).await;
        let got = match (sent, early) {
            (false, true) => Want::Skipped,
            (false, false) => Want::SkippedNoRise,
            (true, false) => Want::Sent,
            (true, true) => Want::SentAnyway,
        };
        assert_eq!(got, want, "{what}: sent {sent}, answered early {early}");
        if !sent {
            assert!(allowed, "{what}: held back, yet the webhook refuses it");
            assert!(
                early || charges_nothing_more(&full, review).await,
                "{what}: held back, yet it charges more than the stored binding"
            );
            skipped += 1;
        }
    }
    for harness in [&h, &full] {
        assert_eq!(
            harness.store.writes.load(Ordering::SeqCst)
                + harness.batches.creates.load(Ordering::SeqCst),
            0,
            "dry runs write nothing"
        );
    }
    assert_eq!(skipped, 15);
}

#[test]
fn every_create_is_sent() {
    let conditions = MatchConditions::binding();
    let create = mk_review(
        "CREATE",
        RB,
        "resourcebindings",
        Some(placed()),
        None,
        false,
    );
    assert_eq!(conditions.sent(&create), Ok(true));
    // The same object as an UPDATE of itself is not.
    assert_eq!(conditions.sent(&update(placed(), placed())), Ok(false));
}

/// One field of a binding the property test varies: where it goes (an object value is
/// merged into an object there) and its values (`None`: absent).
struct Field {
    path: &'static [&'static str],
    values: BoxedStrategy<Option<Value>>,
}

/// A field that may be absent.
fn field(path: &'static [&'static str], values: impl Strategy<Value = Value> + 'static) -> Field {
    Field {
        path,
        values: proptest::option::of(values).boxed(),
    }
}

/// A field Karmada's schema requires.
fn required(
    path: &'static [&'static str],
    values: impl Strategy<Value = Value> + 'static,
) -> Field {
    Field {
        path,
        values: values.prop_map(Some).boxed(),
    }
}

fn requirements() -> impl Strategy<Value = Value> {
    (
        prop::sample::select(vec!["100m", "1"]),
        prop::sample::select(vec!["", "high"]),
    )
        .prop_map(
            |(cpu, class)| json!({"resourceRequest": {"cpu": cpu}, "priorityClassName": class}),
        )
}

/// Every field the charge reads and some it does not, each with a few values.
fn fields() -> Vec<Field> {
    let member = || prop::sample::select(vec!["m1", "m2", "m3"]);
    vec![
        // Kinds the builtin plurals name, or of a group no quota counts: a template whose
        // objects a covering quota counts but whose plural is unknown is refused whatever
        // changed (the state-dependent refusals docs/decisions/0003-apiserver-versions.md names).
        required(&["spec", "resource"], prop::sample::select(vec![
            json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet"}),
            json!({"apiVersion": "v1", "kind": "ConfigMap"}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget"}),
        ])),
        required(&["spec", "resource", "name"], prop::sample::select(vec![json!("web"), json!("api")])),
        field(&["spec", "resource", "resourceVersion"], (1..4u8).prop_map(|v| json!(v.to_string()))),
        // Counts past int32 now and then: the apiserver stores them.
        field(&["spec", "replicas"], prop_oneof![
            8 => (0..4i64).prop_map(|r| json!(r)),
            1 => Just(json!(2_147_483_648_i64)),
        ]),
        field(&["spec", "replicaRequirements"], requirements()),
        field(&["spec", "components"], prop::collection::vec(
            (prop::sample::select(vec!["jm", "tm"]), 0..3i32, requirements())
                .prop_map(|(name, replicas, req)| json!({"name": name, "replicas": replicas, "replicaRequirements": req})),
            0..3,
        ).prop_map(Value::from)),
        // Replicas from −1 (counted as 0 by the charge) and sometimes left out, as Karmada
        // leaves out a 0.
        field(&["spec", "clusters"], prop::collection::vec(
            (member(), proptest::option::of(prop_oneof![
                12 => -1..4i64,
                1 => Just(2_147_483_647_i64),
                1 => Just(2_147_483_648_i64),
            ])).prop_map(|(name, replicas)| match replicas {
                Some(r) => json!({"name": name, "replicas": r}),
                None => json!({"name": name}),
            }),
            0..3,
        ).prop_map(Value::from)),
        field(&["spec", "placement"], (prop::sample::select(vec!["Duplicated", "Divided"]), 1..4usize).prop_map(|(kind, n)| {
            let names = &["m1", "m2", "m3"][..n];
            json!({"clusterAffinity": {"clusterNames": names}, "replicaScheduling": {"replicaSchedulingType": kind}})
        })),
        field(&["spec", "gracefulEvictionTasks"], (member(), proptest::option::of(0..3i32)).prop_map(|(from, replicas)| {
            let mut task = json!({"fromCluster": from});
            if let Some(r) = replicas {
                task["replicas"] = json!(r);
            }
            json!([task])
        })),
        field(&["spec", "suspension"], any::<bool>().prop_map(|s| json!({"scheduling": s}))),
        field(&["spec", "schedulePriority"], prop_oneof![
            4 => (0..3i64).prop_map(|p| json!({"priority": p})),
            1 => Just(json!({"priority": 2_147_483_648_i64})),
        ]),
        field(&["spec", "conflictResolution"], prop::sample::select(vec![json!("Abort"), json!("Overwrite")])),
        field(&["metadata", "labels"], prop::sample::select(vec![json!({"team": "a"}), json!({"team": "b"})])),
        field(&["metadata", "annotations"], prop::sample::select(vec![
            json!({"quota.karmada.io/queued-at": "2026-01-01T00:00:00.000Z"}),
            json!({"quota.karmada.io/queued-at": "2026-01-02T00:00:00.000Z", "x": "y"}),
            json!({"x": "y"}),
        ])),
        field(&["metadata", "finalizers"], Just(json!(["karmada.io/binding-controller"]))),
    ]
}

/// A binding of `values`, one per field of [`fields`] (absent ones left out).
fn binding(values: &[Option<Value>]) -> Value {
    let mut b = json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": "web", "namespace": NS, "uid": "uid-web", "generation": 1},
        "spec": {"resource": {"namespace": NS}}
    });
    for (f, v) in fields().iter().zip(values) {
        if let Some(v) = v {
            let (last, parents) = f.path.split_last().unwrap();
            let mut at = &mut b;
            for p in parents {
                at = &mut at[*p];
            }
            match (at[*last].as_object_mut(), v.as_object()) {
                (Some(there), Some(fields)) => there.extend(fields.clone()),
                _ => at[*last] = v.clone(),
            }
        }
    }
    b
}

/// A stored binding and a new one that takes each field from the stored one or, now and
/// then, a value of its own.
fn pairs() -> impl Strategy<Value = (Value, Value)> {
    let values = || fields().into_iter().map(|f| f.values).collect::<Vec<_>>();
    let n = fields().len();
    (
        values(),
        values(),
        prop::collection::vec(prop::bool::weighted(0.12), n),
    )
        .prop_map(|(old, own, changed)| {
            let new: Vec<Option<Value>> = old
                .iter()
                .zip(own)
                .zip(changed)
                .map(|((o, own), c)| if c { own } else { o.clone() })
                .collect();
            (binding(&old), binding(&new))
        })
}

#[test]
fn whatever_the_match_conditions_hold_back_the_webhook_answers_early() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let (h, full) =
        rt.block_on(async { (Harness::new(&[quota()]), Harness::new(&[full_quota()])) });
    let conditions = MatchConditions::binding();
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    let (held, total) = (std::cell::Cell::new(0u32), std::cell::Cell::new(0u32));
    runner
        .run(&pairs(), |(old, new)| {
            let review = update(old, new);
            let sent = conditions.sent(&review).map_err(TestCaseError::fail)?;
            let (early, allowed) = rt.block_on(webhook_answer(&h, review.clone()));
            total.set(total.get() + 1);
            if !sent {
                held.set(held.get() + 1);
                prop_assert!(
                    allowed && (early || rt.block_on(charges_nothing_more(&full, review.clone()))),
                    "held back, yet the webhook refuses it or it charges more: {}",
                    review["request"]
                );
            }
            Ok(())
        })
        .unwrap();
    // The conditions must hold back something, or they save nothing.
    assert!(
        held.get() * 20 >= total.get(),
        "only {} of {} updates held back",
        held.get(),
        total.get()
    );
    eprintln!("{} of {} random updates held back", held.get(), total.get());
}
