//! The incremental fold against the full recompute: random sequences of binding applies,
//! updates, deletes, re-lists and pricing, after each of which what a quota is computed
//! from (the per-namespace tallies, the unpriced gaps, the top bindings) must equal what
//! walking every binding gives.

use std::collections::BTreeMap;

use karmada_quota_core::binding::{
    Component, ComponentReplicaRequirements, ComponentReplicas, ReplicaRequirements,
};
use karmada_quota_core::quota::QuotaSpec;
use karmada_quota_core::scope::{Operator, Requirement, ScopeSelector};
use karmada_quota_core::status::{ObservedPods, compute as full_compute};
use karmada_quota_crds::ResourceBinding;
use kube::runtime::watcher::Event;

use super::*;
use crate::index::CountResolution;
use crate::testutil::*;
use karmada_quota_core::ledger::Observation;

const NOW: i64 = 1_795_000_000;
const NAMESPACES: [&str; 3] = ["team-a", "team-b", "team-c"];
const CLASSES: [&str; 3] = ["", "batch", "high"];
const CPUS: [&str; 4] = ["100m", "250m", "1", "0"];
const COUNT: &str = "count/deployments.apps";

/// A small deterministic generator (xorshift64*), so a failure replays.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, of: &[&'a str]) -> &'a str {
        of[self.below(of.len())]
    }
}

/// A random binding `k` (its namespace, name and uid fixed by `k`): a single workload with
/// a priority class, a two-component workload with two classes, or a non-workload;
/// placed or not. Few shapes, so charges repeat.
fn binding(rng: &mut Rng, k: usize, generation: i64) -> ResourceBinding {
    let ns = NAMESPACES[k % NAMESPACES.len()];
    let mut rb = mk_binding(
        ns,
        &format!("b{k}"),
        &format!("uid-{k}"),
        generation,
        0,
        "1",
        &[],
    );
    let replicas = rng.below(4) as i32;
    let clusters: Vec<(&str, i32)> = match rng.below(3) {
        0 => Vec::new(),
        1 => vec![("member1", replicas)],
        _ => vec![
            ("member1", replicas / 2),
            ("member2", replicas - replicas / 2),
        ],
    };
    rb.spec.clusters = mk_binding(ns, "x", "x", 1, 0, "1", &clusters).spec.clusters;
    match rng.below(5) {
        0 => {
            // Not a workload (a ConfigMap-like binding): only its object count.
            rb.spec.replica_requirements = None;
            rb.spec.clusters.clear();
        }
        1 => {
            rb.spec.replica_requirements = None;
            rb.spec.components = ["jobmanager", "taskmanager"]
                .iter()
                .map(|name| Component {
                    name: (*name).into(),
                    replicas: rng.below(3) as i32,
                    replica_requirements: Some(ComponentReplicaRequirements {
                        resource_request: rl(&[("cpu", rng.pick(&CPUS))]),
                        priority_class_name: rng.pick(&CLASSES).into(),
                    }),
                })
                .collect();
            for c in &mut rb.spec.clusters {
                c.components = vec![ComponentReplicas {
                    name: "taskmanager".into(),
                    replicas: c.replicas,
                }];
            }
        }
        _ => {
            rb.spec.replicas = replicas;
            rb.spec.replica_requirements = Some(ReplicaRequirements {
                resource_request: rl(&[("cpu", rng.pick(&CPUS)), ("memory", "1Gi")]),
                priority_class_name: rng.pick(&CLASSES).into(),
                ..ReplicaRequirements::default()
            });
        }
    }
    rb
}

/// The scopes quotas are tried with.
fn scopes() -> Vec<ScopeSelector> {
    let req = |operator, values: &[&str]| ScopeSelector {
        requirements: vec![Requirement {
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }],
    };
    vec![
        ScopeSelector::default(),
        req(Operator::NotIn, &["batch"]),
        req(Operator::In, &["high"]),
        req(Operator::Exists, &[]),
        req(Operator::DoesNotExist, &[]),
    ]
}

/// Everything a quota's fold reads from the index, both ways, must agree.
fn check(index: &Index, step: usize) {
    let hard = rl(&[
        ("requests.cpu", "10"),
        ("pods", "20"),
        ("requests.memory", "64Gi"),
        (COUNT, "30"),
    ]);
    let pods: ObservedPods = BTreeMap::from([("member3".to_owned(), Some(Vec::new()))]);
    for scope in scopes() {
        let spec = QuotaSpec {
            policy: Default::default(),
            hard: hard.clone(),
            scope: scope.clone(),
        };
        let state = karmada_quota_core::quota::QuotaState {
            clusters: Vec::new(),
            name: "q".into(),
            covers: Default::default(),
            spec: spec.clone(),
            used: None,
            reservations: Vec::new(),
        };
        let observe = |_: &karmada_quota_core::quota::Reservation| Observation::NotSeen;
        // One namespace (a KarmadaQuota) and all of them (a cluster quota).
        let sets: Vec<Vec<&str>> = NAMESPACES
            .iter()
            .map(|ns| vec![*ns])
            .chain([NAMESPACES.to_vec()])
            .collect();
        for set in sets {
            let full = full_compute(
                "ns",
                &state,
                set.iter().flat_map(|ns| index.charges_in(ns)),
                observe,
                &pods,
                NOW,
            );
            let counted = core_status::compute_counted(
                "ns",
                &state,
                set.iter().flat_map(|ns| index.tally_in(ns)),
                observe,
                &pods,
                NOW,
            );
            assert_eq!(counted, full, "step {step}, scope {scope:?}, {set:?}");
        }
        for ns in NAMESPACES {
            let every = top::top_bindings(
                &hard,
                &scope,
                index.bindings_in(ns).map(|(_, e)| (&*e.name, &*e.charge)),
                top::TOP_BINDINGS,
            );
            assert_eq!(
                top_bindings(&spec, ns, index),
                every,
                "step {step}, scope {scope:?}, {ns}"
            );
        }
    }
    for ns in NAMESPACES {
        let mut walked: Vec<(String, String)> = index
            .bindings_in(ns)
            .filter_map(|(_, e)| e.unpriced.as_ref())
            .map(|u| (u.gap.kind.clone(), u.gap.reason.clone()))
            .collect();
        let mut looked_up: Vec<(String, String)> = index
            .gaps_in(ns)
            .map(|(_, g)| (g.kind.clone(), g.reason.clone()))
            .collect();
        walked.sort();
        looked_up.sort();
        assert_eq!(looked_up, walked, "step {step}, {ns}");
        let bindings = index.bindings_in(ns).count();
        let tallied: usize = index.tally_in(ns).map(|(_, n)| n).sum();
        assert_eq!(tallied, bindings, "step {step}, {ns}");
    }
}

#[test]
fn the_incremental_fold_equals_the_full_recompute_over_random_event_sequences() {
    for seed in 1..=12u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut index = Index::new(600);
        let universe = 24;
        let mut generation = vec![1i64; universe];
        let mut live: Vec<Option<ResourceBinding>> = vec![None; universe];
        let resolution = |rng: &mut Rng| -> CountResolution<'static> {
            match rng.below(6) {
                0 => Err("discovery failed"),
                1 => Ok(None),
                _ => Ok(Some(COUNT)),
            }
        };
        for ev in [Event::Init, Event::InitDone] {
            index.apply_binding_event(&ev, None, NOW);
        }
        for step in 0..300 {
            let k = rng.below(universe);
            match rng.below(10) {
                // Create or update (a new spec, sometimes unpriced).
                0..=4 => {
                    generation[k] += 1;
                    let rb = binding(&mut rng, k, generation[k]);
                    let count = resolution(&mut rng);
                    index.apply_resolved_binding_event(&Event::Apply(rb.clone()), count, NOW);
                    live[k] = Some(rb);
                }
                // The same object again (a status-only update).
                5 => {
                    if let Some(rb) = live[k].clone() {
                        index.apply_binding_event(&Event::Apply(rb), Some(COUNT), NOW);
                    }
                }
                6 | 7 => {
                    if let Some(rb) = live[k].take() {
                        index.apply_binding_event(&Event::Delete(rb), None, NOW);
                    }
                }
                // Price the unpriced (some still failing).
                8 => {
                    for (ns, uid, _, _) in index.unpriced() {
                        let count = resolution(&mut rng);
                        index.price(&ns, &uid, count);
                    }
                }
                // A re-list: every live binding again, some dropped, some new.
                _ => {
                    index.apply_binding_event(&Event::Init, None, NOW);
                    for (j, slot) in live.iter_mut().enumerate() {
                        match rng.below(6) {
                            0 => *slot = None,
                            1 => *slot = Some(binding(&mut rng, j, generation[j] + 1)),
                            _ => {}
                        }
                        if let Some(rb) = slot {
                            let count = resolution(&mut rng);
                            index.apply_resolved_binding_event(
                                &Event::InitApply(rb.clone()),
                                count,
                                NOW,
                            );
                        }
                    }
                    index.apply_binding_event(&Event::InitDone, None, NOW);
                }
            }
            check(&index, step);
        }
    }
}

#[test]
fn a_quota_computed_from_the_tallies_is_the_full_recompute() {
    // Many bindings of few shapes: the fold sums each shape once, and the quota's used,
    // clusters, binding count and top list are those of every binding.
    let mut rng = Rng(7);
    let mut index = Index::new(600);
    for k in 0..300 {
        let rb = binding(&mut rng, k * NAMESPACES.len(), 1);
        index.apply_binding_event(&Event::Apply(rb), Some(COUNT), NOW);
    }
    assert!(index.tally_in("team-a").count() < index.bindings_in("team-a").count());
    let mut q = mk_quota(
        "team-a",
        "compute",
        &[("requests.cpu", "100"), ("pods", "200"), (COUNT, "300")],
    );
    q.spec.scope_selector = Some(scope_not_in(&["batch"]));
    let Computed::Valid { view, .. } = compute(&q, &index, &ObservedPods::default(), NOW) else {
        panic!("the spec validates");
    };
    let spec = validate_spec(&q.spec).unwrap();
    let state = karmada_quota_core::quota::QuotaState {
        clusters: Vec::new(),
        name: "compute".into(),
        covers: Default::default(),
        spec: spec.clone(),
        used: None,
        reservations: Vec::new(),
    };
    let mut full = full_compute(
        "team-a",
        &state,
        index.charges_in("team-a"),
        |_| Observation::NotSeen,
        &ObservedPods::default(),
        NOW,
    );
    full.top_bindings = top::top_bindings(
        &spec.hard,
        &spec.scope,
        index
            .bindings_in("team-a")
            .map(|(_, e)| (&*e.name, &*e.charge)),
        top::TOP_BINDINGS,
    );
    assert_eq!(*view, full);
    assert!(view.bindings > 0 && view.bindings < 300);
    assert_eq!(view.top_bindings.len(), top::TOP_BINDINGS);
}

#[test]
fn the_top_list_takes_the_first_names_of_a_charge_many_bindings_share() {
    // 30 bindings of one charge outrank 3 smaller ones: the top list is the first 10 of
    // the 30 by name, as ranking every binding gives it.
    let mut index = Index::new(600);
    for k in (0..30).rev() {
        let rb = mk_binding(
            "team-a",
            &format!("web-{k:02}"),
            &format!("uid-w{k}"),
            1,
            2,
            "1",
            &[("member1", 2)],
        );
        index.apply_binding_event(&Event::Apply(rb), Some(COUNT), NOW);
    }
    for k in 0..3 {
        let rb = mk_binding(
            "team-a",
            &format!("a-small-{k}"),
            &format!("uid-s{k}"),
            1,
            1,
            "1",
            &[("member1", 1)],
        );
        index.apply_binding_event(&Event::Apply(rb), Some(COUNT), NOW);
    }
    assert_eq!(index.tally_in("team-a").count(), 2);
    let q = mk_quota(
        "team-a",
        "compute",
        &[("requests.cpu", "100"), ("pods", "200")],
    );
    let Computed::Valid { view, .. } = compute(&q, &index, &ObservedPods::default(), NOW) else {
        panic!("the spec validates");
    };
    let names: Vec<&str> = view.top_bindings.iter().map(|b| b.name.as_str()).collect();
    let want: Vec<String> = (0..10).map(|k| format!("web-{k:02}")).collect();
    assert_eq!(names, want);
    let spec = validate_spec(&q.spec).unwrap();
    let every = top::top_bindings(
        &spec.hard,
        &spec.scope,
        index
            .bindings_in("team-a")
            .map(|(_, e)| (&*e.name, &*e.charge)),
        top::TOP_BINDINGS,
    );
    assert_eq!(view.top_bindings, every);
}
