//! The controller's computed view of one quota (what status and the dashboard show).
//!
//! ```text
//!  BindingCharge (each observed binding in the namespace) ──┐
//!  observed pods per member cluster (priority class, usage) ┼─► compute ─► QuotaView
//!  QuotaState (spec, status.reservations) + observe(uid) ───┘      (used, clusters[],
//!                                                                   reservations, drift)
//! ```

use std::collections::BTreeMap;

use crate::ledger::{Observation, effective_usage, prune};
use crate::quantity::Quantity;
use crate::quota::{DrainingReplicas, QuotaState, Reservation, Unaccounted};
use crate::resources::{PODS, ResourceList, is_object_count};
use crate::usage::{BindingCharge, ScopedUsage};

/// Pods observed in the member clusters, for one namespace: cluster name → the
/// non-terminal pods as (priority class, [`crate::pod_requests::pod_usage`]), or `None` when
/// the member is unreachable or not yet listed.
pub type ObservedPods = BTreeMap<String, Option<Vec<ObservedPod>>>;

/// One non-terminal pod a member runs, reduced to what quota needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObservedPod {
    /// `spec.priorityClassName` (empty = none): the scope it is matched by.
    pub class: String,
    /// core's `pod_usage`.
    pub usage: ResourceList,
    /// Its controlling owner: how the pods of a workload nothing counts are charged to it
    /// (`spec.unaccountedWorkloads: Observed`).
    pub owner: Option<PodOwner>,
}

/// A pod's controlling owner (`metadata.ownerReferences[controller=true]`) and namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodOwner {
    /// The pod's namespace.
    pub namespace: String,
    /// The owner's kind.
    pub kind: String,
    /// The owner's name.
    pub name: String,
}

impl PodOwner {
    /// Whether a pod with this owner was made for `t`: owned by it directly (a DaemonSet,
    /// a ReplicaSet, a custom kind whose operator owns its pods), or, for a CronJob, by one
    /// of the Jobs it made (`<cronjob>-<schedule time>`). A template without a namespace
    /// matches pods of any namespace the quota covers.
    pub fn made_for(&self, t: &crate::usage::UncountedTemplate) -> bool {
        if !t.namespace.is_empty() && t.namespace != self.namespace {
            return false;
        }
        if self.kind == t.kind && self.name == t.name {
            return true;
        }
        t.kind == "CronJob"
            && self.kind == "Job"
            && self
                .name
                .strip_prefix(t.name.as_str())
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    }
}

/// One member cluster's row.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClusterView {
    /// Member cluster name.
    pub name: String,
    /// Usage placed there by Karmada (from bindings).
    pub used: ResourceList,
    /// Usage measured in the member (non-terminal pods' requests), when known.
    pub observed: Option<ResourceList>,
    /// Failover: usage still draining there after Karmada moved workloads off the member
    /// (graceful-eviction tasks, [`crate::failover`]), restricted to hard's names; `None`
    /// when nothing drains.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<ResourceList>,
    /// A task drains replicas of unknown count there (not in `draining`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining_unknown: bool,
}

impl ClusterView {
    /// What the member is expected to run: placed plus draining (what drift is judged
    /// against: old replicas of a failover are expected, not drift).
    pub fn expected(&self) -> ResourceList {
        expected(&self.used, self.draining.as_ref())
    }
}

/// What a member is expected to run: `placed` plus what drains there.
fn expected(placed: &ResourceList, draining: Option<&ResourceList>) -> ResourceList {
    match draining {
        Some(d) => placed.plus(d),
        None => placed.clone(),
    }
}

/// What one member runs above what it is expected to run (placed plus draining): empty
/// where nothing is measured or where replicas of unknown count drain (its old replicas
/// may be any number). The one drift rule of the controller, the dashboard and the plugin.
pub fn member_drift(
    placed: &ResourceList,
    observed: Option<&ResourceList>,
    draining: Option<&ResourceList>,
    draining_unknown: bool,
) -> ResourceList {
    match observed {
        Some(o) if !draining_unknown => o.above(&expected(placed, draining)),
        _ => ResourceList::new(),
    }
}

/// A quota as computed by the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Limits in force (= spec.hard).
    pub hard: ResourceList,
    /// Σ usage of observed matching bindings, restricted to hard's names.
    pub used: ResourceList,
    /// Per member cluster.
    pub clusters: Vec<ClusterView>,
    /// Reservations after pruning.
    pub reservations: Vec<Reservation>,
    /// Σ pruned reservations, restricted to hard's names.
    pub reserved: ResourceList,
    /// Effective usage = used + reserved.
    pub effective: ResourceList,
    /// Clusters whose observed usage exceeds placed usage: name → the names above.
    pub drift: BTreeMap<String, ResourceList>,
    /// Number of matching bindings.
    pub bindings: usize,
    /// The bindings that use the largest share of hard ([`crate::top::top_bindings`]);
    /// left empty by [`compute`], filled by the caller that knows the bindings' names.
    pub top_bindings: Vec<crate::top::BindingUsage>,
}

/// Compute what one quota's status shows (docs/design.md §6).
///
/// - `namespace`: the quota's namespace (carried into the view).
/// - `quota`: spec (hard, scope) and `status.reservations`.
/// - `bindings`: the charges of the observed ResourceBindings in the namespace; those the
///   scope does not match are skipped.
/// - `observe`: what the controller knows of an entry's binding (name, uid, and the entry's
///   generation and expiry), for pruning.
/// - `observed_pods`: pods per member cluster (see [`ObservedPods`]).
/// - `now`: Unix seconds.
///
/// `used` holds every hard name (zero when nothing uses it, so the webhook never sees an
/// unknown status for a synced quota). `clusters` are the union of placement and observed
/// members, sorted; each cluster's `used` (and `observed`, where measured) carries every
/// hard name but the object counts, zero-filled, so every cluster has the same shape. `drift` lists members where an
/// observed value is above the placed one plus what drains there. `effective` = used + Σ
/// pruned reservations.
///
/// Failover (docs/design.md §4): each cluster shows what drains there (`draining`); under
/// `drainingReplicas: Count` the draining usage is also added to `used`.
pub fn compute<'a>(
    namespace: &str,
    quota: &QuotaState,
    bindings: impl IntoIterator<Item = &'a BindingCharge>,
    observe: impl Fn(&Reservation) -> Observation,
    observed_pods: &ObservedPods,
    now: i64,
) -> QuotaView {
    compute_counted(
        namespace,
        quota,
        bindings.into_iter().map(|c| (c, 1)),
        observe,
        observed_pods,
        now,
    )
}

/// [`compute`] over distinct charges, each with the number of bindings that cost it:
/// the same view as [`compute`] given every binding (a charge counted `n` times adds
/// `n` × its usage and `n` matched bindings), in O(distinct charges).
pub fn compute_counted<'a>(
    namespace: &str,
    quota: &QuotaState,
    bindings: impl IntoIterator<Item = (&'a BindingCharge, usize)>,
    observe: impl Fn(&Reservation) -> Observation,
    observed_pods: &ObservedPods,
    now: i64,
) -> QuotaView {
    let hard = &quota.spec.hard;
    let (acc, matched) = charged(quota, bindings, observed_pods);
    let used: ResourceList = hard
        .names()
        .map(|name| (name.to_owned(), acc.total.get_or_zero(name)))
        .collect();
    let clusters = cluster_views(quota, &acc, observed_pods);

    let drift = drift(&clusters);
    let reservations = prune(&quota.reservations, observe, now);
    let reserved = effective_usage(&ResourceList::new(), &reservations, None).restricted_to(hard);
    let effective = used.plus(&reserved);

    QuotaView {
        namespace: namespace.to_owned(),
        name: quota.name.clone(),
        hard: hard.clone(),
        used,
        clusters,
        reservations,
        reserved,
        effective,
        drift,
        bindings: matched,
        top_bindings: Vec::new(),
    }
}

/// The usage the charges of `bindings` (each with how many bindings cost it) put on
/// `quota` (those its scope matches; the pods the members run for an uncountable workload
/// under `unaccountedWorkloads: Observed`; draining usage in the total under
/// `drainingReplicas: Count`), and how many bindings matched.
fn charged<'a>(
    quota: &QuotaState,
    bindings: impl IntoIterator<Item = (&'a BindingCharge, usize)>,
    observed_pods: &ObservedPods,
) -> (ScopedUsage, usize) {
    let scope = &quota.spec.scope;
    let mut acc = ScopedUsage::default();
    let mut matched = 0;
    for (charge, n) in bindings {
        if n == 0 {
            continue;
        }
        let times = i64::try_from(n).unwrap_or(i64::MAX);
        if charge.add_scoped_times_to(scope, &mut acc, times) {
            matched += n;
            if let Some(t) = &charge.unaccounted
                && quota.spec.policy.unaccounted == Some(Unaccounted::Observed)
            {
                add_observed_pods(t, scope, observed_pods, &mut acc);
            }
        }
    }
    if quota.spec.policy.draining == DrainingReplicas::Count {
        for list in acc.draining.values() {
            acc.total.add_assign(list);
        }
    }
    (acc, matched)
}

/// One view per member cluster, sorted by name: the union of those `acc` places or
/// drains on and those `observed_pods` names. Each carries what is placed there and
/// (where measured) what its pods in `quota`'s scope use, restricted to and zero-filled
/// with the per-cluster names of hard; and what drains there.
fn cluster_views(
    quota: &QuotaState,
    acc: &ScopedUsage,
    observed_pods: &ObservedPods,
) -> Vec<ClusterView> {
    let hard = &quota.spec.hard;
    let mut names: Vec<&str> = acc.clusters.keys().map(String::as_str).collect();
    names.extend(observed_pods.keys().map(String::as_str));
    names.extend(acc.draining.keys().map(String::as_str));
    names.extend(acc.draining_unknown.iter().map(String::as_str));
    names.sort_unstable();
    names.dedup();

    // Every cluster carries every per-cluster name of hard (object counts are per binding,
    // not per cluster), zero where nothing is placed or measured: one shape for all.
    let per_cluster: ResourceList = hard
        .iter()
        .filter(|(n, _)| !is_object_count(n))
        .map(|(n, _)| (n.to_owned(), Quantity::ZERO))
        .collect();
    let mut clusters = Vec::with_capacity(names.len());
    for name in names {
        let mut placed = acc
            .clusters
            .get(name)
            .map(|l| l.restricted_to(hard))
            .unwrap_or_default();
        zero_fill(&mut placed, &per_cluster);
        let draining = acc
            .draining
            .get(name)
            .map(|l| l.restricted_to(hard))
            .filter(|l| !l.is_empty());
        let draining_unknown = acc.draining_unknown.contains(name);
        let observed = observed_in_scope(quota, observed_pods, name);
        if let Some(mut observed) = observed {
            zero_fill(&mut observed, &placed);
            clusters.push(ClusterView {
                name: name.to_owned(),
                used: placed,
                observed: Some(observed),
                draining,
                draining_unknown,
            });
        } else {
            clusters.push(ClusterView {
                name: name.to_owned(),
                used: placed,
                observed: None,
                draining,
                draining_unknown,
            });
        }
    }
    clusters
}

/// What the pods member `name` runs in `quota`'s scope use, restricted to its hard
/// names; `None` when the member is unreachable or not yet listed.
fn observed_in_scope(
    quota: &QuotaState,
    observed_pods: &ObservedPods,
    name: &str,
) -> Option<ResourceList> {
    let hard = &quota.spec.hard;
    let scope = &quota.spec.scope;
    observed_pods
        .get(name)
        .and_then(Option::as_ref)
        .map(|pods| {
            let mut sum = ResourceList::new();
            for pod in pods.iter().filter(|p| scope.matches(&p.class)) {
                sum.add_assign(&pod.usage);
            }
            sum.restricted_to(hard)
        })
}

/// Charge `acc` with the pods the members run for the uncountable workload `t` (those
/// `scope` matches), per member: `spec.unaccountedWorkloads: Observed`.
fn add_observed_pods(
    t: &crate::usage::UncountedTemplate,
    scope: &crate::scope::ScopeSelector,
    observed_pods: &ObservedPods,
    acc: &mut ScopedUsage,
) {
    for (member, pods) in observed_pods {
        let mut sum = ResourceList::new();
        for pod in pods.iter().flatten() {
            if scope.matches(&pod.class) && pod.owner.as_ref().is_some_and(|o| o.made_for(t)) {
                sum.add_assign(&pod.usage);
            }
        }
        if !sum.is_empty() {
            acc.total.add_assign(&sum);
            acc.clusters
                .entry(member.clone())
                .or_default()
                .add_assign(&sum);
        }
    }
}

/// The clusters whose observed usage is above the placed one plus what drains there
/// ([`ClusterView::expected`]): name → the names above. A cluster where replicas of
/// unknown count drain is not judged (its old replicas may be any number).
pub fn drift(clusters: &[ClusterView]) -> BTreeMap<String, ResourceList> {
    clusters
        .iter()
        .filter_map(|c| {
            let above = member_drift(
                &c.used,
                c.observed.as_ref(),
                c.draining.as_ref(),
                c.draining_unknown,
            );
            (!above.is_empty()).then(|| (c.name.clone(), above))
        })
        .collect()
}

/// Give `list` a zero entry for every name of `names_of` it lacks.
fn zero_fill(list: &mut ResourceList, names_of: &ResourceList) {
    for name in names_of.names() {
        if !list.contains(name) {
            list.insert(name, Quantity::ZERO);
        }
    }
}

/// Display order of names in messages meant for people: requests first, then pods, then
/// object counts; alphabetical within a group.
fn display_rank(name: &str) -> u8 {
    if name == PODS {
        1
    } else if is_object_count(name) {
        2
    } else {
        0
    }
}

/// The Drift condition message for one member: the names whose observed value is above
/// the placed one, e.g.
/// `member2 runs requests.cpu=2300m, pods=7 but Karmada placed requests.cpu=1300m, pods=5`.
pub fn drift_message(cluster: &str, observed: &ResourceList, placed: &ResourceList) -> String {
    let mut above: Vec<(&str, Quantity, Quantity)> = observed
        .iter()
        .map(|(n, q)| (n, *q, placed.get_or_zero(n)))
        .filter(|(_, runs, put)| runs > put)
        .collect();
    above.sort_by(|a, b| (display_rank(a.0), a.0).cmp(&(display_rank(b.0), b.0)));
    let list = |pick: fn(&(&str, Quantity, Quantity)) -> Quantity| {
        above
            .iter()
            .map(|e| format!("{}={}", e.0, pick(e)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{cluster} runs {} but Karmada placed {}",
        list(|e| e.1),
        list(|e| e.2)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod_requests::{ContainerView, PodView, pod_usage};
    use crate::quota::{QuotaSpec, validate_spec};
    use crate::scope::RawRequirement;
    use crate::testutil::*;

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Expression {
        scope_name: String,
        operator: String,
        #[serde(default)]
        values: Vec<String>,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ScopeSelectorDoc {
        match_expressions: Vec<Expression>,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct SpecDoc {
        hard: BTreeMap<String, String>,
        scope_selector: ScopeSelectorDoc,
    }

    #[derive(serde::Deserialize)]
    struct ClusterDoc {
        name: String,
        used: ResourceList,
        observed: Option<ResourceList>,
    }

    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct ConditionDoc {
        #[serde(rename = "type")]
        type_: String,
        message: String,
    }

    #[derive(serde::Deserialize)]
    struct StatusDoc {
        used: ResourceList,
        clusters: Vec<ClusterDoc>,
        conditions: Vec<ConditionDoc>,
    }

    #[derive(serde::Deserialize)]
    struct QuotaDoc {
        spec: SpecDoc,
        status: StatusDoc,
    }

    fn example_quota() -> QuotaDoc {
        serde_saphyr::from_str(KARMADAQUOTA_YAML).expect("example parses")
    }

    fn mk_state(doc: &QuotaDoc) -> QuotaState {
        let raw: Vec<RawRequirement<'_>> = doc
            .spec
            .scope_selector
            .match_expressions
            .iter()
            .map(|e| RawRequirement {
                scope_name: &e.scope_name,
                operator: &e.operator,
                values: &e.values,
            })
            .collect();
        let hard = doc.spec.hard.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        let spec = validate_spec(hard, &raw).expect("example spec is valid");
        QuotaState {
            clusters: Vec::new(),
            name: "team-a-compute".into(),
            covers: Default::default(),
            spec,
            used: None,
            reservations: Vec::new(),
        }
    }

    /// `n` pods of one container with `requests`, as the member reports them.
    fn mk_pods(n: usize, class: &str, requests: &[(&str, &str)]) -> Vec<ObservedPod> {
        let pod = PodView {
            priority_class: class.into(),
            containers: vec![ContainerView {
                requests: mk_list(requests),
                ..Default::default()
            }],
            ..Default::default()
        };
        vec![
            ObservedPod {
                class: class.to_owned(),
                usage: pod_usage(&pod),
                owner: None,
            };
            n
        ]
    }

    /// What the members run for web (high) and trainer (no class); member2 also runs two
    /// pods created behind Karmada's back; member1 runs batch pods out of scope.
    fn example_pods() -> ObservedPods {
        let web = |n| mk_pods(n, "high", &[("cpu", "500m"), ("memory", "256Mi")]);
        let trainer = |n| {
            mk_pods(
                n,
                "",
                &[
                    ("cpu", "100m"),
                    ("memory", "512Mi"),
                    ("nvidia.com/gpu", "1"),
                ],
            )
        };
        let mut member1 = [web(3), trainer(3)].concat();
        member1.extend(mk_pods(4, "batch", &[("cpu", "2")]));
        let member2 = [web(2), trainer(3), mk_pods(2, "", &[("cpu", "500m")])].concat();
        BTreeMap::from([
            ("member1".to_owned(), Some(member1)),
            ("member2".to_owned(), Some(member2)),
        ])
    }

    fn mk_entry(uid: &str, generation: i64, expiration_time: i64) -> Reservation {
        Reservation {
            reserved_by: crate::quota::ReservedBy {
                api_version: "work.karmada.io/v1alpha2".into(),
                kind: "ResourceBinding".into(),
                namespace: String::new(),
                name: "api-deployment".into(),
                uid: uid.into(),
            },
            generation,
            reserved: mk_list(&[
                ("requests.cpu", "2"),
                ("requests.memory", "4Gi"),
                ("pods", "4"),
                ("count/deployments.apps", "1"),
            ]),
            expiration_time,
        }
    }

    #[test]
    fn reproduces_the_example_quota_status() {
        let doc = example_quota();
        let mut state = mk_state(&doc);
        state.reservations = vec![mk_entry("api", 1, 160), mk_entry("gone", 1, 160)];
        let charges = [
            example_charge("web-deployment"),
            example_charge("trainer-deployment"),
        ];
        let observe = |r: &Reservation| match r.reserved_by.uid.as_str() {
            "gone" => Observation::Deleted,
            _ => Observation::NotSeen,
        };
        let view = compute("team-a", &state, &charges, observe, &example_pods(), 100);

        assert_eq!(view.used, doc.status.used);
        assert_eq!(
            view.used,
            mk_list(&[
                ("requests.cpu", "3100m"),
                ("requests.memory", "4352Mi"),
                ("requests.nvidia.com/gpu", "6"),
                ("pods", "11"),
                ("count/deployments.apps", "2"),
            ])
        );
        assert_eq!(
            view.used
                .get("requests.memory")
                .map(ToString::to_string)
                .as_deref(),
            Some("4352Mi")
        );
        assert_eq!(view.bindings, 2);
        let names: Vec<&str> = view.clusters.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["member1", "member2"]);
        for (got, want) in view.clusters.iter().zip(&doc.status.clusters) {
            assert_eq!(got.name, want.name);
            assert_eq!(got.used, want.used, "{} used", want.name);
            assert_eq!(got.observed, want.observed, "{} observed", want.name);
        }
        let drift = doc
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "Drift")
            .expect("Drift");
        assert_eq!(view.drift.keys().collect::<Vec<_>>(), ["member2"]);
        let member2 = &view.clusters[1];
        let message = drift_message(
            "member2",
            member2.observed.as_ref().expect("observed"),
            &member2.used,
        );
        assert_eq!(message, drift.message);
        assert_eq!(
            message,
            "member2 runs requests.cpu=2300m, pods=7 but Karmada placed requests.cpu=1300m, pods=5"
        );
        assert_eq!(
            view.drift["member2"],
            mk_list(&[("requests.cpu", "2300m"), ("pods", "7")])
        );

        // The never-seen entry is kept, the deleted one dropped; effective adds it.
        assert_eq!(view.reservations, [mk_entry("api", 1, 160)]);
        assert_eq!(
            view.effective,
            mk_list(&[
                ("requests.cpu", "5100m"),
                ("requests.memory", "8448Mi"),
                ("requests.nvidia.com/gpu", "6"),
                ("pods", "15"),
                ("count/deployments.apps", "3"),
            ])
        );
        assert_eq!(view.namespace, "team-a");
        assert_eq!(view.name, "team-a-compute");
        assert_eq!(view.hard, state.spec.hard);
    }

    #[test]
    fn used_lists_every_hard_name_even_when_nothing_matches() {
        let state = QuotaState {
            clusters: Vec::new(),
            name: "q".into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: mk_list(&[("pods", "5"), ("requests.cpu", "2")]),
                ..Default::default()
            },
            used: None,
            reservations: Vec::new(),
        };
        let view = compute(
            "ns",
            &state,
            &[],
            |_| Observation::NotSeen,
            &ObservedPods::new(),
            0,
        );
        assert_eq!(view.used, mk_list(&[("pods", "0"), ("requests.cpu", "0")]));
        assert!(view.clusters.is_empty());
        assert_eq!(view.bindings, 0);
    }

    #[test]
    fn an_unreachable_member_has_no_observed_usage_and_no_drift() {
        let state = QuotaState {
            clusters: Vec::new(),
            name: "q".into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: mk_list(&[("pods", "50")]),
                ..Default::default()
            },
            used: None,
            reservations: Vec::new(),
        };
        let charge = mk_charge(&mk_deployment(2, &[("cpu", "1")], "", &[("m1", 2)]));
        let pods = BTreeMap::from([("m1".to_owned(), None), ("m9".to_owned(), None)]);
        let view = compute("ns", &state, [&charge], |_| Observation::NotSeen, &pods, 0);
        assert_eq!(view.clusters.len(), 2);
        assert_eq!(view.clusters[0].used, mk_list(&[("pods", "2")]));
        assert_eq!(view.clusters[0].observed, None);
        assert_eq!(view.clusters[1].name, "m9");
        assert!(view.drift.is_empty());
    }

    #[test]
    fn every_cluster_has_the_same_shape_zeros_included() {
        // m1 runs the binding; m2 is measured and runs nothing; m9 is unreachable. Each
        // carries every per-cluster hard name (not the object count), zero where nothing
        // is placed or measured — never an empty map beside zero-filled ones.
        let state = QuotaState {
            clusters: Vec::new(),
            name: "q".into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: mk_list(&[
                    ("pods", "50"),
                    ("requests.cpu", "10"),
                    ("count/deployments.apps", "5"),
                ]),
                ..Default::default()
            },
            used: None,
            reservations: Vec::new(),
        };
        let charge = mk_charge(&mk_deployment(2, &[("cpu", "1")], "", &[("m1", 2)]));
        let pods = BTreeMap::from([("m2".to_owned(), Some(Vec::new())), ("m9".to_owned(), None)]);
        let view = compute("ns", &state, [&charge], |_| Observation::NotSeen, &pods, 0);
        let zeros = mk_list(&[("pods", "0"), ("requests.cpu", "0")]);
        let shapes: Vec<_> = view
            .clusters
            .iter()
            .map(|c| (c.name.as_str(), c.used.clone(), c.observed.clone()))
            .collect();
        assert_eq!(
            shapes,
            [
                ("m1", mk_list(&[("pods", "2"), ("requests.cpu", "2")]), None),
                ("m2", zeros.clone(), Some(zeros.clone())),
                ("m9", zeros, None),
            ]
        );
    }

    #[test]
    fn counted_charges_give_the_view_of_every_binding() {
        let state = QuotaState {
            clusters: Vec::new(),
            name: "q".into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: mk_list(&[
                    ("pods", "50"),
                    ("requests.cpu", "10"),
                    ("count/deployments.apps", "5"),
                ]),
                scope: mk_scope("NotIn", &["batch"]),
            },
            used: None,
            reservations: Vec::new(),
        };
        let mut charges: Vec<BindingCharge> = example_bindings()
            .keys()
            .map(|name| example_charge(name))
            .collect();
        charges.push(mk_charge(&mk_deployment(
            2,
            &[("cpu", "1")],
            "",
            &[("m1", 2)],
        )));
        charges.push(mk_charge(&mk_deployment(
            3,
            &[("cpu", "2")],
            "batch",
            &[("m2", 3)],
        )));
        let counts = [3usize, 0, 1, 2, 5, 1, 4];
        let every: Vec<&BindingCharge> = charges
            .iter()
            .zip(counts.iter().cycle())
            .flat_map(|(c, n)| std::iter::repeat_n(c, *n))
            .collect();
        let pods = BTreeMap::from([("m3".to_owned(), Some(Vec::new()))]);
        let full = compute(
            "ns",
            &state,
            every.iter().copied(),
            |_| Observation::NotSeen,
            &pods,
            0,
        );
        let counted = compute_counted(
            "ns",
            &state,
            charges.iter().zip(counts.iter().cycle().copied()),
            |_| Observation::NotSeen,
            &pods,
            0,
        );
        assert_eq!(counted, full);
        assert!(full.bindings > 0);
    }

    #[test]
    fn drift_message_lists_only_names_above_placed() {
        let observed = mk_list(&[
            ("pods", "3"),
            ("requests.memory", "1Gi"),
            ("count/pods", "9"),
        ]);
        let placed = mk_list(&[("pods", "1"), ("requests.memory", "2Gi")]);
        assert_eq!(
            drift_message("m1", &observed, &placed),
            "m1 runs pods=3, count/pods=9 but Karmada placed pods=1, count/pods=0"
        );
    }

    #[test]
    fn an_uncountable_workload_under_observed_is_charged_the_pods_its_owner_runs() {
        use crate::quota::{QuotaPolicy, QuotaSpec, Unaccounted};
        let ds = crate::testutil::mk_charge(&crate::binding::ResourceBindingSpec {
            resource: crate::binding::ObjectReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                namespace: "team-a".into(),
                name: "gpu-agent".into(),
                ..Default::default()
            },
            ..Default::default()
        });
        let pod = |owner: Option<(&str, &str)>, gpu: &str| ObservedPod {
            class: String::new(),
            usage: mk_list(&[("requests.nvidia.com/gpu", gpu), ("pods", "1")]),
            owner: owner.map(|(kind, name)| PodOwner {
                namespace: "team-a".into(),
                kind: kind.into(),
                name: name.into(),
            }),
        };
        let pods: ObservedPods = BTreeMap::from([
            (
                "member1".to_owned(),
                Some(vec![
                    pod(Some(("DaemonSet", "gpu-agent")), "1"),
                    pod(Some(("DaemonSet", "other")), "1"),
                    pod(None, "1"),
                ]),
            ),
            (
                "member2".to_owned(),
                Some(vec![pod(Some(("DaemonSet", "gpu-agent")), "2")]),
            ),
            ("member3".to_owned(), None),
        ]);
        let state = |unaccounted| QuotaState {
            clusters: Vec::new(),
            name: "gpus".into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: QuotaPolicy {
                    unaccounted: Some(unaccounted),
                    ..QuotaPolicy::default()
                },
                hard: mk_list(&[("requests.nvidia.com/gpu", "8"), ("pods", "10")]),
                scope: Default::default(),
            },
            used: None,
            reservations: Vec::new(),
        };
        let observe = |_: &Reservation| Observation::NotSeen;
        let view = compute(
            "team-a",
            &state(Unaccounted::Observed),
            [&ds],
            observe,
            &pods,
            0,
        );
        assert_eq!(
            view.used,
            mk_list(&[("requests.nvidia.com/gpu", "3"), ("pods", "2")])
        );
        let member2 = view.clusters.iter().find(|c| c.name == "member2").unwrap();
        assert_eq!(
            member2
                .used
                .get_or_zero("requests.nvidia.com/gpu")
                .to_string(),
            "2"
        );
        // Allow: its object count only.
        let view = compute(
            "team-a",
            &state(Unaccounted::Allow),
            [&ds],
            observe,
            &pods,
            0,
        );
        assert_eq!(
            view.used,
            mk_list(&[("requests.nvidia.com/gpu", "0"), ("pods", "0")])
        );
    }

    #[test]
    fn a_cronjobs_pods_are_those_of_the_jobs_it_made() {
        let t = crate::usage::UncountedTemplate {
            namespace: "team-a".into(),
            api_version: "batch/v1".into(),
            kind: "CronJob".into(),
            name: "nightly".into(),
        };
        let owner = |ns: &str, kind: &str, name: &str| PodOwner {
            namespace: ns.into(),
            kind: kind.into(),
            name: name.into(),
        };
        assert!(owner("team-a", "Job", "nightly-29012345").made_for(&t));
        assert!(!owner("team-a", "Job", "nightly-extra-1").made_for(&t));
        assert!(!owner("team-a", "Job", "nightly-").made_for(&t));
        assert!(!owner("team-b", "Job", "nightly-29012345").made_for(&t));
        assert!(owner("team-a", "CronJob", "nightly").made_for(&t));
    }
    /// The view of `state` over the one binding `charge` and the members' `pods`.
    fn view_of(state: &QuotaState, charge: &BindingCharge, pods: &ObservedPods) -> QuotaView {
        compute(
            "team-a",
            state,
            [charge],
            |_: &Reservation| Observation::NotSeen,
            pods,
            0,
        )
    }

    /// The failover of e2e/tests/failover.rs: quota 400m / 4 pods; a 4 × 100m Deployment moved from member1
    /// to member2 while member1 still runs 2 old replicas.
    fn failover(draining: crate::quota::DrainingReplicas) -> (QuotaView, QuotaState) {
        let mut spec = mk_deployment(4, &[("cpu", "100m")], "", &[("member2", 4)]);
        spec.graceful_eviction_tasks = vec![crate::binding::GracefulEvictionTask {
            from_cluster: "member1".into(),
            replicas: Some(2),
            purge_mode: "Gracefully".into(),
            ..Default::default()
        }];
        let charge = mk_charge(&spec);
        let state = QuotaState {
            clusters: Vec::new(),
            name: "compute".into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: crate::quota::QuotaPolicy {
                    draining,
                    ..Default::default()
                },
                hard: mk_list(&[("requests.cpu", "400m"), ("pods", "4")]),
                scope: Default::default(),
            },
            used: None,
            reservations: Vec::new(),
        };
        // member1 is back and runs its 2 old pods; member2 runs the 4 new ones.
        let pods: ObservedPods = BTreeMap::from([
            (
                "member1".to_owned(),
                Some(mk_pods(2, "", &[("cpu", "100m")])),
            ),
            (
                "member2".to_owned(),
                Some(mk_pods(4, "", &[("cpu", "100m")])),
            ),
        ]);
        (view_of(&state, &charge, &pods), state)
    }

    #[test]
    fn draining_replicas_are_shown_per_member_not_counted_and_are_not_drift() {
        let (view, _) = failover(crate::quota::DrainingReplicas::Show);
        assert_eq!(
            view.used,
            mk_list(&[("requests.cpu", "400m"), ("pods", "4")])
        );
        let member1 = view.clusters.iter().find(|c| c.name == "member1").unwrap();
        assert_eq!(
            member1.used,
            mk_list(&[("requests.cpu", "0"), ("pods", "0")])
        );
        assert_eq!(
            member1.draining,
            Some(mk_list(&[("requests.cpu", "200m"), ("pods", "2")]))
        );
        assert!(!member1.draining_unknown);
        let member2 = view.clusters.iter().find(|c| c.name == "member2").unwrap();
        assert_eq!(member2.draining, None);
        // The old replicas member1 runs are expected while they drain: no drift.
        assert!(view.drift.is_empty(), "{:?}", view.drift);
        // Three old pods where two drain: the third is drift.
        let mut clusters = view.clusters.clone();
        clusters[0].observed = Some(mk_list(&[("requests.cpu", "300m"), ("pods", "3")]));
        assert_eq!(
            drift(&clusters).get("member1"),
            Some(&mk_list(&[("requests.cpu", "300m"), ("pods", "3")]))
        );
    }

    #[test]
    fn draining_replicas_count_in_used_under_count() {
        let (view, state) = failover(crate::quota::DrainingReplicas::Count);
        assert_eq!(
            view.used,
            mk_list(&[("requests.cpu", "600m"), ("pods", "6")])
        );
        assert_eq!(view.effective, view.used);
        // Per member, placed usage stays what Karmada placed; draining is beside it.
        let member1 = view.clusters.iter().find(|c| c.name == "member1").unwrap();
        assert_eq!(member1.used.get("requests.cpu"), Some(&q("0")));
        assert!(view.drift.is_empty());
        // The eviction completes (task gone): used falls back to the binding's charge.
        let done = mk_charge(&mk_deployment(4, &[("cpu", "100m")], "", &[("member2", 4)]));
        let view = view_of(&state, &done, &ObservedPods::new());
        assert_eq!(
            view.used,
            mk_list(&[("requests.cpu", "400m"), ("pods", "4")])
        );
        assert!(view.clusters.iter().all(|c| c.draining.is_none()));
    }

    #[test]
    fn a_member_draining_an_unknown_count_is_listed_and_not_judged_for_drift() {
        let mut spec = mk_deployment(4, &[("cpu", "100m")], "", &[("member2", 4)]);
        spec.graceful_eviction_tasks = vec![crate::binding::GracefulEvictionTask {
            from_cluster: "member1".into(),
            ..Default::default()
        }];
        let charge = mk_charge(&spec);
        let (_, state) = failover(crate::quota::DrainingReplicas::Count);
        let pods: ObservedPods = BTreeMap::from([(
            "member1".to_owned(),
            Some(mk_pods(3, "", &[("cpu", "100m")])),
        )]);
        let view = view_of(&state, &charge, &pods);
        let member1 = view.clusters.iter().find(|c| c.name == "member1").unwrap();
        assert!(member1.draining_unknown);
        assert_eq!(member1.draining, None);
        assert!(view.drift.is_empty());
        // Nothing known to count: used is the binding's charge.
        assert_eq!(
            view.used,
            mk_list(&[("requests.cpu", "400m"), ("pods", "4")])
        );
    }
}
