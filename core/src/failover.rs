//! Failover: the replicas a binding's graceful-eviction tasks leave draining in the members
//! Karmada moved the workload off (docs/design.md §4, "Failover").
//!
//! When Karmada evicts a workload from a member (its taint manager on a failed member, an
//! application failover), it removes the member from `spec.clusters`, the scheduler places
//! the replicas elsewhere, and `spec.gracefulEvictionTasks` keeps `{fromCluster,
//! replicas}` while the old replicas are left running there: until the workload is healthy
//! on its new members, or the grace period ends (10 minutes by default), or for ever with
//! `purgeMode: Never` / `suppressDeletion`. Measured (e2e/tests/karmada_failover.rs): when the failed member
//! came back, its old replicas ran ~60 s beside the new ones.
//!
//! This module says how many replicas of each priced part drain in which member:
//!
//! - a task whose member is in `spec.clusters` again drains nothing there (the member runs
//!   the new placement); only the first task of a member counts (Karmada keeps one);
//! - a single-template workload: the task's `replicas` (Karmada records what the member
//!   held); absent, the count is **unknown** — the binding no longer says what it placed
//!   there, and guessing 0 would hide replicas that may run;
//! - a multi-template workload (`components`): Karmada does not divide one (every member
//!   runs each component's full replicas) and its tasks carry no `replicas`, so each
//!   component drains its `replicas` in the member; a task with `replicas` on a binding of
//!   exactly one component drains that many.
//!
//! The usage is `replicas × per-replica charge` of the part ([`crate::usage::ChargePart`]),
//! summed per member by [`crate::usage::BindingCharge::add_scoped_times_to`].

use crate::binding::{Component, GracefulEvictionTask, ResourceBindingSpec};

/// Replicas of one part draining in one member: `Some(n)`, or `None` when unknown.
pub type Draining = (String, Option<i64>);

/// The tasks that leave something draining: one per member (the first), whose member is
/// not a target of the binding again, and that name a member.
fn draining_tasks(spec: &ResourceBindingSpec) -> impl Iterator<Item = &GracefulEvictionTask> {
    spec.graceful_eviction_tasks
        .iter()
        .enumerate()
        .filter(move |(i, task)| {
            !task.from_cluster.is_empty()
                && !spec.clusters.iter().any(|c| c.name == task.from_cluster)
                && !spec.graceful_eviction_tasks[..*i]
                    .iter()
                    .any(|t| t.from_cluster == task.from_cluster)
        })
        .map(|(_, task)| task)
}

/// A replica count of the API (`i32`), a negative one (invalid) as zero.
fn count(n: i32) -> i64 {
    i64::from(n.max(0))
}

/// Members draining replicas of a single-template workload: the task's `replicas`, or
/// `None` (unknown) when the task does not say. A workload with no replicas drains
/// nothing. Entries with zero replicas are left out.
pub fn single_draining(spec: &ResourceBindingSpec) -> Vec<Draining> {
    draining_tasks(spec)
        .filter_map(|task| match task.replicas {
            Some(n) => (n > 0).then(|| (task.from_cluster.clone(), Some(count(n)))),
            None => (spec.replicas > 0).then(|| (task.from_cluster.clone(), None)),
        })
        .collect()
}

/// Members draining replicas of component `comp` of a multi-template workload: the
/// component's full `replicas` per member (Karmada runs a whole copy on every member), or
/// the task's `replicas` when the binding has this one component only.
pub fn component_draining(spec: &ResourceBindingSpec, comp: &Component) -> Vec<Draining> {
    let only = spec.components.len() == 1;
    draining_tasks(spec)
        .filter_map(|task| {
            let n = match task.replicas {
                Some(n) if only => count(n),
                _ => count(comp.replicas),
            };
            (n > 0).then(|| (task.from_cluster.clone(), Some(n)))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::ScopeSelector;
    use crate::testutil::*;

    fn task(from: &str, replicas: Option<i32>) -> GracefulEvictionTask {
        GracefulEvictionTask {
            from_cluster: from.into(),
            replicas,
            purge_mode: "Gracefully".into(),
            reason: "TaintUntolerated".into(),
            producer: "taint-manager".into(),
            ..Default::default()
        }
    }

    #[test]
    fn tasks_parse_as_karmada_writes_them_and_unknown_fields_are_ignored() {
        let spec: ResourceBindingSpec = serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "replicas": 4,
            "clusters": [{"name": "member2", "replicas": 4}],
            "gracefulEvictionTasks": [{
                "fromCluster": "member1",
                "replicas": 2,
                "purgeMode": "Gracefully",
                "reason": "TaintUntolerated",
                "message": "cluster member1 is not ready",
                "producer": "taint-manager",
                "creationTimestamp": "2026-11-20T10:02:10Z",
                "suppressDeletion": false,
                "clustersBeforeFailover": ["member1", "member2"],
                "preservedLabelState": {"a": "b"},
                "someFutureField": {"x": 1}
            }, {"fromCluster": "member3", "reason": "ApplicationFailure", "producer": "x"}]
        }))
        .expect("parses");
        let t = &spec.graceful_eviction_tasks;
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].from_cluster, "member1");
        assert_eq!(t[0].replicas, Some(2));
        assert_eq!(t[0].purge_mode, "Gracefully");
        assert_eq!(
            t[0].creation_timestamp.as_deref(),
            Some("2026-11-20T10:02:10Z")
        );
        assert_eq!(t[0].clusters_before_failover, ["member1", "member2"]);
        assert_eq!(t[1].replicas, None);
        // Written back without the fields it does not keep, and without empty ones.
        let back = serde_json::to_value(&t[1]).expect("serializes");
        assert_eq!(
            back,
            serde_json::json!({"fromCluster": "member3", "reason": "ApplicationFailure", "producer": "x"})
        );
    }

    #[test]
    fn a_task_with_replicas_drains_them_and_one_without_is_unknown() {
        let mut spec = mk_deployment(4, &[("cpu", "100m")], "", &[("member2", 4)]);
        spec.graceful_eviction_tasks = vec![task("member1", Some(2)), task("member3", None)];
        assert_eq!(
            single_draining(&spec),
            [
                ("member1".to_owned(), Some(2)),
                ("member3".to_owned(), None)
            ]
        );
        // A workload scaled to zero drains nothing, even from a task without replicas.
        let mut zero = mk_deployment(0, &[("cpu", "100m")], "", &[]);
        zero.graceful_eviction_tasks = vec![task("member1", None), task("member2", Some(0))];
        assert!(single_draining(&zero).is_empty());
    }

    #[test]
    fn several_tasks_each_drain_in_their_member_once() {
        let mut spec = mk_deployment(6, &[("cpu", "100m")], "", &[("member3", 6)]);
        spec.graceful_eviction_tasks = vec![
            task("member1", Some(2)),
            task("member2", Some(4)),
            // A second task for member1: Karmada keeps one; the first counts.
            task("member1", Some(9)),
            task("", Some(1)),
        ];
        assert_eq!(
            single_draining(&spec),
            [
                ("member1".to_owned(), Some(2)),
                ("member2".to_owned(), Some(4))
            ]
        );
    }

    #[test]
    fn a_member_placed_again_drains_nothing() {
        // member1 came back and the scheduler put replicas there again: the member runs
        // the new placement (charged in `used`), not the old replicas on top.
        let mut spec = mk_deployment(4, &[("cpu", "100m")], "", &[("member1", 1), ("member2", 3)]);
        spec.graceful_eviction_tasks = vec![task("member1", Some(2))];
        assert!(single_draining(&spec).is_empty());
    }

    #[test]
    fn components_drain_a_whole_copy_unless_one_component_says_how_many() {
        let mut spec = mk_components(
            &[
                ("head", 1, &[("cpu", "500m")], ""),
                ("workers", 3, &[("cpu", "250m")], ""),
            ],
            &["member2"],
        );
        spec.graceful_eviction_tasks = vec![task("member1", None)];
        let [head, workers] = [&spec.components[0], &spec.components[1]];
        assert_eq!(
            component_draining(&spec, head),
            [("member1".to_owned(), Some(1))]
        );
        assert_eq!(
            component_draining(&spec, workers),
            [("member1".to_owned(), Some(3))]
        );
        // One component and a task that names its replicas: that many.
        let mut one = mk_components(&[("main", 4, &[("cpu", "1")], "")], &["member2"]);
        one.graceful_eviction_tasks = vec![task("member1", Some(2))];
        assert_eq!(
            component_draining(&one, &one.components[0]),
            [("member1".to_owned(), Some(2))]
        );
    }

    #[test]
    fn draining_usage_is_replicas_times_the_per_replica_charge_per_member_and_scope() {
        // The failover of e2e/tests/failover.rs: 4 × 100m; member1 failed, member2 now runs 4, member1 still
        // runs 2 until the eviction completes.
        let mut spec = mk_deployment(4, &[("cpu", "100m")], "high", &[("member2", 4)]);
        spec.graceful_eviction_tasks = vec![task("member1", Some(2)), task("member3", None)];
        let usage = mk_charge(&spec)
            .scoped(&ScopeSelector::default())
            .expect("matches");
        // What the binding is charged is unchanged by the failover.
        assert_eq!(usage.total.get("requests.cpu"), Some(&q("400m")));
        assert_eq!(
            usage.draining.get("member1"),
            Some(&mk_list(&[
                ("cpu", "200m"),
                ("requests.cpu", "200m"),
                ("pods", "2")
            ]))
        );
        assert!(!usage.draining.contains_key("member3"));
        assert!(usage.draining_unknown.contains("member3"));
        // A scope that does not match the part sees nothing draining.
        assert!(
            mk_charge(&spec)
                .scoped(&mk_scope("In", &["batch"]))
                .is_none()
        );

        // Components: each drains its own charge, summed per member; scoped by class.
        let mut comps = mk_components(
            &[
                ("head", 1, &[("cpu", "500m")], "high"),
                (
                    "workers",
                    3,
                    &[("cpu", "250m"), ("nvidia.com/gpu", "1")],
                    "batch",
                ),
            ],
            &["member2"],
        );
        comps.graceful_eviction_tasks = vec![task("member1", None)];
        let all = mk_charge(&comps)
            .scoped(&ScopeSelector::default())
            .expect("matches");
        let member1 = &all.draining["member1"];
        assert_eq!(member1.get("requests.cpu"), Some(&q("1250m")));
        assert_eq!(member1.get("requests.nvidia.com/gpu"), Some(&q("3")));
        assert_eq!(member1.get("pods"), Some(&q("4")));
        let batch = mk_charge(&comps)
            .scoped(&mk_scope("In", &["batch"]))
            .expect("workers match");
        assert_eq!(
            batch.draining["member1"].get("requests.cpu"),
            Some(&q("750m"))
        );
        // Many bindings of the same charge drain that many times over.
        let mut acc = crate::usage::ScopedUsage::default();
        mk_charge(&spec).add_scoped_times_to(&ScopeSelector::default(), &mut acc, 3);
        assert_eq!(acc.draining["member1"].get("pods"), Some(&q("6")));
    }
}
