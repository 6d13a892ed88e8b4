//! What a ResourceBinding costs: docs/design.md §4.
//!
//! [`BindingCharge::compute`] turns a binding into scope-independent parts (one per
//! component, or one for a single-component workload): the expanded per-replica usage,
//! the charged replicas and their per-cluster split; [`BindingCharge::scoped`] sums the
//! parts a quota's scope matches (and [`BindingCharge::view`] reads them name by name). Computing the charge once and scoping it per quota keeps both the webhook
//! and the controller cheap. A member-cluster pod is priced by [`crate::pod_requests`].

use std::collections::BTreeMap;

use crate::binding::{ResourceBindingSpec, TargetCluster};
use crate::quantity::{Format, Quantity};
use crate::resources::{LEGACY_COUNTS, PODS, ResourceList, expand_request};
use crate::scope::ScopeSelector;

/// One priced part of a binding: a single-component workload, or one component.
///
/// Kept compact (one resource list and the replica counts, not a list per cluster): the
/// controller holds a charge for every binding it watches and sums them on each reconcile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChargePart {
    /// Component name (empty for a single-component workload).
    pub component: String,
    /// The PriorityClass this part is matched on (empty = none).
    pub priority_class: String,
    /// Usage of one replica, names expanded (cpu + requests.cpu, …, pods = 1).
    pub per_replica: ResourceList,
    /// Charged replicas over all clusters (docs/design.md §4: R = max(desired, Σ placed); for a
    /// component without a per-cluster split, replicas × max(1, clusters)).
    pub replicas: i64,
    /// Replicas per member cluster, in `spec.clusters` order (empty before scheduling).
    pub placement: Vec<(String, i64)>,
    /// Failover: replicas still draining per member Karmada moved the workload off
    /// (`None`: how many is unknown), from `spec.gracefulEvictionTasks`
    /// ([`crate::failover`]). Not part of the charge: shown, and counted in `used` only by
    /// a quota with `drainingReplicas: Count`.
    pub draining: Vec<crate::failover::Draining>,
    /// Compute names (`cpu`, `memory`, `ephemeral-storage`) the per-replica request lacks:
    /// a quota tracking one of them refuses the binding (`must specify …`).
    pub missing_requests: Vec<&'static str>,
}

impl ChargePart {
    /// Usage of this part over all clusters: `per_replica × replicas`.
    pub fn total(&self) -> ResourceList {
        self.per_replica.scaled(self.replicas)
    }

    /// Usage of this part per member cluster (empty before scheduling).
    pub fn clusters(&self) -> BTreeMap<String, ResourceList> {
        let mut out = BTreeMap::new();
        for (cluster, replicas) in &self.placement {
            add_cluster(&mut out, cluster, &self.per_replica, *replicas);
        }
        out
    }
}

/// What a binding costs, independent of any quota's scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BindingCharge {
    /// A workload: has replicaRequirements or components.
    pub workload: bool,
    /// Priced parts (empty for a non-workload).
    pub parts: Vec<ChargePart>,
    /// Object counts: `count/<plural>[.<group>]` = 1 and the legacy name if any.
    pub objects: ResourceList,
    /// Not a workload by its spec, yet its template may run pods
    /// ([`crate::pod_kinds::runs_uncounted_pods`]): a DaemonSet, a CronJob, a custom kind without
    /// an interpreter. Its pods are uncounted here; each quota's `unaccountedWorkloads`
    /// decides (refuse, charge what the members observe, or allow).
    pub unaccounted: Option<UncountedTemplate>,
}

/// The template of an uncountable workload ([`BindingCharge::unaccounted`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct UncountedTemplate {
    /// Namespace of the template (empty when the binding does not say).
    pub namespace: String,
    /// `apiVersion` of the template.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// Its name (the pods it runs name it as their owner).
    pub name: String,
}

/// A charge restricted to one quota's scope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopedUsage {
    /// Usage summed over clusters.
    pub total: ResourceList,
    /// Usage per member cluster.
    pub clusters: BTreeMap<String, ResourceList>,
    /// Compute names a matching part lacks (see [`ChargePart::missing_requests`]).
    pub missing_requests: Vec<&'static str>,
    /// Failover: usage still draining per member Karmada moved workloads off
    /// ([`ChargePart::draining`]); not in `total`.
    pub draining: BTreeMap<String, ResourceList>,
    /// Members where a matching part drains replicas of unknown count.
    pub draining_unknown: std::collections::BTreeSet<String>,
}

/// Compute names a quota may require every workload to request, each with its
/// `requests.` twin (docs/design.md §4; Kubernetes' rule for cpu and memory, extended to
/// ephemeral-storage).
pub const MUST_SPECIFY: [(&str, &str); 3] = [
    ("cpu", "requests.cpu"),
    ("ephemeral-storage", "requests.ephemeral-storage"),
    ("memory", "requests.memory"),
];

/// API group and version of a ResourceBinding (for reservation entries).
pub const BINDING_API_VERSION: &str = "work.karmada.io/v1alpha2";
/// Kind of a ResourceBinding.
pub const BINDING_KIND: &str = "ResourceBinding";

fn one() -> Quantity {
    Quantity::from_units(1, Format::DecimalSI)
}

/// Replica counts are `i32` in the API; a negative one (invalid) is charged as zero.
fn replicas(n: i32) -> i64 {
    i64::from(n.max(0))
}

/// The must-specify names a per-replica request lacks.
fn missing_requests(per_replica: &ResourceList) -> Vec<&'static str> {
    MUST_SPECIFY
        .iter()
        .filter(|(bare, req)| !per_replica.contains(bare) && !per_replica.contains(req))
        .map(|(bare, _)| *bare)
        .collect()
}

/// `expand_request(per_replica) + pods=1`: what one replica is charged. A negative
/// request (the API server's pod validation never lets one through, but a ResourceBinding
/// written by hand may carry one) is charged as zero: a binding never lowers usage.
pub(crate) fn charge_per_replica(per_replica: &ResourceList) -> ResourceList {
    let clamped;
    let request = if per_replica.iter().any(|(_, q)| q.is_negative()) {
        clamped = per_replica
            .iter()
            .map(|(name, q)| (name.to_owned(), q.max(&Quantity::ZERO).to_owned()))
            .collect();
        &clamped
    } else {
        per_replica
    };
    let mut out = expand_request(request);
    out.insert(PODS, one());
    out
}

/// Add `per_replica × replicas` to the entry of `cluster`, creating it when absent.
fn add_cluster(
    map: &mut BTreeMap<String, ResourceList>,
    cluster: &str,
    per_replica: &ResourceList,
    replicas: i64,
) {
    match map.get_mut(cluster) {
        Some(acc) => acc.add_scaled(per_replica, replicas),
        None => {
            map.insert(cluster.to_owned(), per_replica.scaled(replicas));
        }
    }
}

impl BindingCharge {
    /// What `spec` costs (docs/design.md §4), independent of any quota's scope.
    ///
    /// `count_name` is the template's resolved `count/<plural>[.<group>]` (see
    /// [`count_name`], [`builtin_plural`]); `None` when the plural is unknown, which leaves
    /// out the `count/…` entry (the legacy names still come from the template's kind).
    ///
    /// A binding is a workload when it has `replicaRequirements` or `components` — or
    /// replicas (docs/design.md §4): Karmada leaves `replicaRequirements` out for a pod
    /// template with no requests and no node claim, and such a workload must still be charged its
    /// `pods` and refused by a quota that tracks cpu or memory (`must specify …`).
    pub fn compute(spec: &ResourceBindingSpec, count_name: Option<&str>) -> BindingCharge {
        Self::compute_with(spec, count_name, &[])
    }

    /// [`Self::compute`], where the template kinds of `pod_less_groups` (the webhook's
    /// `--pod-less-groups`) are objects, never uncountable workloads.
    pub fn compute_with(
        spec: &ResourceBindingSpec,
        count_name: Option<&str>,
        pod_less_groups: &[String],
    ) -> BindingCharge {
        let mut objects = ResourceList::new();
        if let Some(name) = count_name {
            objects.insert(name, one());
        }
        if let Some(legacy) = legacy_count(&spec.resource.api_version, &spec.resource.kind) {
            objects.insert(legacy, one());
        }
        let workload = spec.replica_requirements.is_some()
            || !spec.components.is_empty()
            || spec.replicas > 0
            || spec.clusters.iter().any(|c| c.replicas > 0);
        let parts = if !workload {
            Vec::new()
        } else if spec.components.is_empty() {
            vec![single_part(spec)]
        } else {
            component_parts(spec)
        };
        let t = &spec.resource;
        let unaccounted = (!workload
            && crate::pod_kinds::runs_uncounted_pods(&t.api_version, &t.kind, pod_less_groups))
        .then(|| UncountedTemplate {
            namespace: t.namespace.clone(),
            api_version: t.api_version.clone(),
            kind: t.kind.clone(),
            name: t.name.clone(),
        });
        BindingCharge {
            workload,
            parts,
            objects,
            unaccounted,
        }
    }

    /// The usage of the parts `scope` matches, or `None` when nothing matches.
    ///
    /// Each part is matched on its own PriorityClass; the object counts count when any part
    /// matches (a non-workload is matched as a binding without a class).
    pub fn scoped(&self, scope: &ScopeSelector) -> Option<ScopedUsage> {
        let mut acc = ScopedUsage::default();
        self.add_scoped_to(scope, &mut acc).then_some(acc)
    }

    /// Add the usage `scope` matches to `acc` (the allocation-free way to sum many
    /// bindings); returns whether anything matched.
    pub fn add_scoped_to(&self, scope: &ScopeSelector, acc: &mut ScopedUsage) -> bool {
        self.add_scoped_times_to(scope, acc, 1)
    }

    /// Add the usage `scope` matches, `times` over, to `acc`: what `times` bindings with
    /// this charge add (the controller counts the bindings of each distinct charge and
    /// sums each charge once). Returns whether anything matched.
    pub fn add_scoped_times_to(
        &self,
        scope: &ScopeSelector,
        acc: &mut ScopedUsage,
        times: i64,
    ) -> bool {
        let mut matched = false;
        if self.workload {
            for part in self
                .parts
                .iter()
                .filter(|p| scope.matches(&p.priority_class))
            {
                matched = true;
                acc.total
                    .add_scaled(&part.per_replica, part.replicas.saturating_mul(times));
                for (cluster, replicas) in &part.placement {
                    add_cluster(
                        &mut acc.clusters,
                        cluster,
                        &part.per_replica,
                        replicas.saturating_mul(times),
                    );
                }
                for (cluster, replicas) in &part.draining {
                    match replicas {
                        Some(n) => add_cluster(
                            &mut acc.draining,
                            cluster,
                            &part.per_replica,
                            n.saturating_mul(times),
                        ),
                        None => {
                            acc.draining_unknown.insert(cluster.clone());
                        }
                    }
                }
                for name in &part.missing_requests {
                    if !acc.missing_requests.contains(name) {
                        acc.missing_requests.push(name);
                    }
                }
            }
            acc.missing_requests.sort_unstable();
        } else {
            matched = scope.matches("");
        }
        if matched {
            if times == 1 {
                acc.total.add_assign(&self.objects);
            } else {
                acc.total.add_scaled(&self.objects, times);
            }
        }
        matched
    }
}

/// A borrowed view of the parts of a charge that one scope matches: the same numbers as
/// [`BindingCharge::scoped`]'s total, read name by name without copying any list (the
/// webhook's hot path).
#[derive(Clone, Debug)]
pub struct ScopedView<'a> {
    charge: &'a BindingCharge,
    parts: Vec<&'a ChargePart>,
}

impl<'a> ScopedView<'a> {
    /// The scoped total of `name`; `None` when no matching part (nor the object counts) has it.
    pub fn get(&self, name: &str) -> Option<Quantity> {
        let parts = self.parts.iter().filter_map(|p| {
            p.per_replica
                .get(name)
                .map(|q| q.saturating_mul(p.replicas))
        });
        parts
            .chain(self.charge.objects.get(name).copied())
            .reduce(Quantity::saturating_add)
    }

    /// The scoped total as (name, value) pairs sorted by name, one per name: what
    /// [`BindingCharge::scoped`] would total, without building a map.
    pub fn entries(&self) -> Vec<(&'a str, Quantity)> {
        let objects = &self.charge.objects;
        if let [part] = self.parts.as_slice() {
            // The common case: one part and the object counts, both sorted: merge them.
            let mut out = Vec::with_capacity(part.per_replica.len() + objects.len());
            let mut theirs = objects.iter().peekable();
            for (name, q) in part.per_replica.iter() {
                while let Some((o, oq)) = theirs.next_if(|(o, _)| o < &name) {
                    out.push((o, *oq));
                }
                let own = q.saturating_mul(part.replicas);
                match theirs.next_if(|(o, _)| *o == name) {
                    Some((_, extra)) => out.push((name, own.saturating_add(*extra))),
                    None => out.push((name, own)),
                }
            }
            out.extend(theirs.map(|(o, q)| (o, *q)));
            return out;
        }
        let mut out: Vec<(&'a str, Quantity)> = self
            .parts
            .iter()
            .flat_map(|p| {
                p.per_replica
                    .iter()
                    .map(|(n, q)| (n, q.saturating_mul(p.replicas)))
            })
            .chain(objects.iter().map(|(n, q)| (n, *q)))
            .collect();
        out.sort_unstable_by(|a, b| a.0.cmp(b.0));
        out.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 = kept.1.saturating_add(later.1);
            }
            same
        });
        out
    }

    /// Whether the scoped usage has `name` (even with a zero value).
    pub fn contains(&self, name: &str) -> bool {
        self.charge.objects.contains(name)
            || self.parts.iter().any(|p| p.per_replica.contains(name))
    }

    /// Must-specify names a matching part lacks (sorted, see [`ChargePart::missing_requests`]).
    pub fn missing_requests(&self) -> Vec<&'static str> {
        let mut names: Vec<&'static str> = self
            .parts
            .iter()
            .flat_map(|p| p.missing_requests.iter().copied())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

impl BindingCharge {
    /// The parts `scope` matches, as a [`ScopedView`]; `None` when nothing matches (the same
    /// rule as [`BindingCharge::scoped`]).
    pub fn view(&self, scope: &ScopeSelector) -> Option<ScopedView<'_>> {
        if self.workload {
            let parts: Vec<&ChargePart> = self
                .parts
                .iter()
                .filter(|p| scope.matches(&p.priority_class))
                .collect();
            (!parts.is_empty()).then_some(ScopedView {
                charge: self,
                parts,
            })
        } else {
            scope.matches("").then_some(ScopedView {
                charge: self,
                parts: Vec::new(),
            })
        }
    }
}

/// Before scheduling (`spec.clusters` empty), how many clusters a Duplicated placement
/// that names its clusters will run the replicas on; 1 otherwise (charged once until the
/// scheduler's update names the clusters).
fn clusters_before_scheduling(spec: &ResourceBindingSpec) -> i64 {
    if !spec.clusters.is_empty() {
        return 1;
    }
    spec.placement
        .as_ref()
        .and_then(|p| p.named_duplicated_clusters())
        .map_or(1, |names| {
            i64::try_from(names.len()).unwrap_or(i64::MAX).max(1)
        })
}

/// Before scheduling, the clusters a placement names (Divided or Duplicated): a
/// multi-template workload is charged one copy of each component per named cluster at
/// CREATE — what the scheduler's placement will need unless it splits the components — so
/// over-quota is refused up front instead of leaving an unschedulable binding holding
/// quota. 1 once scheduled, or when the clusters are chosen by the scheduler.
fn named_before_scheduling(spec: &ResourceBindingSpec) -> i64 {
    if !spec.clusters.is_empty() {
        return 1;
    }
    spec.placement
        .as_ref()
        .and_then(|p| p.named_clusters())
        .map_or(1, |names| {
            i64::try_from(names.len()).unwrap_or(i64::MAX).max(1)
        })
}

/// A single-component workload: R = max(spec.replicas × n, Σ clusters[].replicas), where n
/// is the number of clusters a Duplicated placement names before scheduling (else 1).
fn single_part(spec: &ResourceBindingSpec) -> ChargePart {
    let empty = ResourceList::new();
    let (request, class) = match &spec.replica_requirements {
        Some(r) => (&r.resource_request, r.priority_class_name.as_str()),
        None => (&empty, ""),
    };
    let placement: Vec<(String, i64)> = spec
        .clusters
        .iter()
        .map(|c| (c.name.clone(), replicas(c.replicas)))
        .collect();
    let placed = placement
        .iter()
        .fold(0i64, |acc, (_, r)| acc.saturating_add(*r));
    ChargePart {
        component: String::new(),
        priority_class: class.to_owned(),
        per_replica: charge_per_replica(request),
        replicas: replicas(spec.replicas)
            .saturating_mul(clusters_before_scheduling(spec))
            .max(placed),
        placement,
        missing_requests: missing_requests(request),
        draining: crate::failover::single_draining(spec),
    }
}

/// Replicas of component `name` in cluster `c` (per-cluster split).
fn split_replicas(c: &TargetCluster, name: &str) -> i64 {
    c.components
        .iter()
        .filter(|k| k.name == name)
        .map(|k| replicas(k.replicas))
        .sum()
}

/// A multi-component workload: per component, the per-cluster split when the scheduler
/// gave one (`clusters[].components`; charged max(replicas_k, Σ split)), else Karmada's
/// rule: every target cluster runs `replicas_k` of component k (total = replicas_k ×
/// max(1, clusters)).
fn component_parts(spec: &ResourceBindingSpec) -> Vec<ChargePart> {
    let split = spec.clusters.iter().any(|c| !c.components.is_empty());
    let targets = i64::try_from(spec.clusters.len())
        .unwrap_or(i64::MAX)
        .max(named_before_scheduling(spec));
    let empty = ResourceList::new();
    spec.components
        .iter()
        .map(|comp| {
            let (request, class) = match &comp.replica_requirements {
                Some(r) => (&r.resource_request, r.priority_class_name.as_str()),
                None => (&empty, ""),
            };
            let k = replicas(comp.replicas);
            let placement: Vec<(String, i64)> = spec
                .clusters
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        if split {
                            split_replicas(c, &comp.name)
                        } else {
                            k
                        },
                    )
                })
                .collect();
            let placed = placement
                .iter()
                .fold(0i64, |acc, (_, r)| acc.saturating_add(*r));
            ChargePart {
                component: comp.name.clone(),
                priority_class: class.to_owned(),
                per_replica: charge_per_replica(request),
                replicas: if split {
                    k.max(placed)
                } else {
                    k.saturating_mul(targets)
                },
                placement,
                missing_requests: missing_requests(request),
                draining: crate::failover::component_draining(spec, comp),
            }
        })
        .collect()
}

/// The API group of an apiVersion (`apps/v1` → `apps`, `v1` → ``).
fn group_of(api_version: &str) -> &str {
    api_version.split_once('/').map_or("", |(group, _)| group)
}

/// The legacy object-count name of a core kind (`v1` Service → `services`).
fn legacy_count(api_version: &str, kind: &str) -> Option<&'static str> {
    if !group_of(api_version).is_empty() {
        return None;
    }
    LEGACY_COUNTS
        .iter()
        .find(|(k, _)| *k == kind)
        .map(|(_, name)| *name)
}

/// The object-count name of a template: `count/<plural>` for the core group,
/// `count/<plural>.<group>` otherwise (`apps/v1`, `deployments` → `count/deployments.apps`).
pub fn count_name(api_version: &str, plural: &str) -> String {
    match group_of(api_version) {
        "" => format!("count/{plural}"),
        group => format!("count/{plural}.{group}"),
    }
}

/// Plurals of common kinds, by (group, kind): the fallback when API discovery cannot
/// resolve a template's kind.
const BUILTIN_PLURALS: &[(&str, &str, &str)] = &[
    ("", "ConfigMap", "configmaps"),
    ("", "Endpoints", "endpoints"),
    ("", "Event", "events"),
    ("", "LimitRange", "limitranges"),
    ("", "PersistentVolumeClaim", "persistentvolumeclaims"),
    ("", "Pod", "pods"),
    ("", "PodTemplate", "podtemplates"),
    ("", "ReplicationController", "replicationcontrollers"),
    ("", "ResourceQuota", "resourcequotas"),
    ("", "Secret", "secrets"),
    ("", "Service", "services"),
    ("", "ServiceAccount", "serviceaccounts"),
    ("apps", "ControllerRevision", "controllerrevisions"),
    ("apps", "DaemonSet", "daemonsets"),
    ("apps", "Deployment", "deployments"),
    ("apps", "ReplicaSet", "replicasets"),
    ("apps", "StatefulSet", "statefulsets"),
    (
        "autoscaling",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
    ),
    ("batch", "CronJob", "cronjobs"),
    ("batch", "Job", "jobs"),
    ("coordination.k8s.io", "Lease", "leases"),
    ("discovery.k8s.io", "EndpointSlice", "endpointslices"),
    ("networking.k8s.io", "Ingress", "ingresses"),
    ("networking.k8s.io", "NetworkPolicy", "networkpolicies"),
    ("policy", "PodDisruptionBudget", "poddisruptionbudgets"),
    ("rbac.authorization.k8s.io", "Role", "roles"),
    ("rbac.authorization.k8s.io", "RoleBinding", "rolebindings"),
    ("argoproj.io", "Rollout", "rollouts"),
    ("argoproj.io", "Workflow", "workflows"),
    ("batch.volcano.sh", "Job", "jobs"),
    ("flink.apache.org", "FlinkDeployment", "flinkdeployments"),
    ("kubeflow.org", "MPIJob", "mpijobs"),
    ("kubeflow.org", "PyTorchJob", "pytorchjobs"),
    ("kubeflow.org", "TFJob", "tfjobs"),
    ("ray.io", "RayCluster", "rayclusters"),
    ("ray.io", "RayJob", "rayjobs"),
    ("ray.io", "RayService", "rayservices"),
];

/// The plural of a common kind (`apps/v1`, `Deployment` → `deployments`), any version;
/// `None` for kinds outside the built-in table.
pub fn builtin_plural(api_version: &str, kind: &str) -> Option<&'static str> {
    let group = group_of(api_version);
    BUILTIN_PLURALS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map(|(_, _, plural)| *plural)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    fn cluster(charge: &ScopedUsage, name: &str) -> ResourceList {
        charge.clusters.get(name).cloned().unwrap_or_default()
    }

    #[test]
    fn example_divided_web_deployment() {
        let charge = example_charge("web-deployment");
        assert!(charge.workload);
        let usage = charge.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(
            usage.total,
            mk_list(&[
                ("cpu", "2500m"),
                ("requests.cpu", "2500m"),
                ("memory", "1280Mi"),
                ("requests.memory", "1280Mi"),
                ("pods", "5"),
                ("count/deployments.apps", "1"),
            ])
        );
        assert_eq!(
            usage.total.to_string(),
            "count/deployments.apps=1,cpu=2500m,memory=1280Mi,pods=5,requests.cpu=2500m,\
             requests.memory=1280Mi"
        );
        let member1 = mk_list(&[
            ("cpu", "1500m"),
            ("requests.cpu", "1500m"),
            ("memory", "768Mi"),
            ("requests.memory", "768Mi"),
            ("pods", "3"),
        ]);
        let member2 = mk_list(&[
            ("cpu", "1000m"),
            ("requests.cpu", "1000m"),
            ("memory", "512Mi"),
            ("requests.memory", "512Mi"),
            ("pods", "2"),
        ]);
        assert_eq!(cluster(&usage, "member1"), member1);
        assert_eq!(cluster(&usage, "member2"), member2);
        assert_eq!(usage.clusters.len(), 2);
        assert!(usage.missing_requests == ["ephemeral-storage"]);
    }

    #[test]
    fn example_duplicated_trainer_deployment() {
        let charge = example_charge("trainer-deployment");
        let usage = charge.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(
            usage.total,
            mk_list(&[
                ("cpu", "600m"),
                ("requests.cpu", "600m"),
                ("memory", "3Gi"),
                ("requests.memory", "3Gi"),
                ("requests.nvidia.com/gpu", "6"),
                ("pods", "6"),
                ("count/deployments.apps", "1"),
            ])
        );
        assert!(
            !usage.total.contains("nvidia.com/gpu"),
            "extended names only as requests.*"
        );
        assert_eq!(
            usage
                .total
                .get("memory")
                .map(ToString::to_string)
                .as_deref(),
            Some("3Gi")
        );
        let each = mk_list(&[
            ("cpu", "300m"),
            ("requests.cpu", "300m"),
            ("memory", "1536Mi"),
            ("requests.memory", "1536Mi"),
            ("requests.nvidia.com/gpu", "3"),
            ("pods", "3"),
        ]);
        assert_eq!(cluster(&usage, "member1"), each);
        assert_eq!(cluster(&usage, "member2"), each);
    }

    #[test]
    fn example_multi_component_flinkdeployment() {
        let charge = example_charge("analytics-flinkdeployment");
        assert_eq!(charge.parts.len(), 2);
        let usage = charge.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(
            usage.total,
            mk_list(&[
                ("cpu", "10"),
                ("requests.cpu", "10"),
                ("memory", "10Gi"),
                ("requests.memory", "10Gi"),
                ("pods", "6"),
                ("count/flinkdeployments.flink.apache.org", "1"),
            ])
        );
        // Every target cluster runs each component's replicas: 1×1 + 2×2 cpu per cluster.
        let each = mk_list(&[
            ("cpu", "5"),
            ("requests.cpu", "5"),
            ("memory", "5Gi"),
            ("requests.memory", "5Gi"),
            ("pods", "3"),
        ]);
        assert_eq!(cluster(&usage, "member1"), each);
        assert_eq!(cluster(&usage, "member2"), each);
    }

    #[test]
    fn example_flinkdeployment_under_notin_batch_counts_the_jobmanager_only() {
        let charge = example_charge("analytics-flinkdeployment");
        let usage = charge
            .scoped(&mk_scope("NotIn", &["batch"]))
            .expect("jobmanager matches");
        assert_eq!(
            usage.total,
            mk_list(&[
                ("cpu", "2"),
                ("requests.cpu", "2"),
                ("memory", "2Gi"),
                ("requests.memory", "2Gi"),
                ("pods", "2"),
                ("count/flinkdeployments.flink.apache.org", "1"),
            ])
        );
        let taskmanager = charge
            .scoped(&mk_scope("In", &["batch"]))
            .expect("taskmanager");
        assert_eq!(taskmanager.total.get("cpu"), Some(&q("8")));
        assert_eq!(taskmanager.total.get("pods"), Some(&q("4")));
    }

    #[test]
    fn view_reads_the_same_numbers_as_scoped() {
        let scopes = [
            ScopeSelector::default(),
            mk_scope("NotIn", &["batch"]),
            mk_scope("In", &["high"]),
        ];
        let mut compared = 0;
        for name in example_bindings().keys() {
            let charge = example_charge(name);
            for scope in &scopes {
                let (scoped, view) = (charge.scoped(scope), charge.view(scope));
                assert_eq!(scoped.is_some(), view.is_some(), "{name}");
                let (Some(scoped), Some(view)) = (scoped, view) else {
                    continue;
                };
                for (n, value) in scoped.total.iter() {
                    assert!(view.contains(n));
                    assert_eq!(view.get(n), Some(*value), "{name} {n}");
                    compared += 1;
                }
                assert_eq!(view.get("no-such-name"), None);
                let entries: ResourceList = view
                    .entries()
                    .into_iter()
                    .map(|(n, q)| (n.to_owned(), q))
                    .collect();
                assert_eq!(entries, scoped.total, "{name}");
                assert_eq!(view.missing_requests(), scoped.missing_requests);
            }
        }
        assert!(compared > 20);
    }

    #[test]
    fn example_configmap_counts_only_as_objects() {
        let charge = example_charge("settings-configmap");
        assert!(!charge.workload);
        assert!(charge.parts.is_empty());
        let usage = charge.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(
            usage.total,
            mk_list(&[("count/configmaps", "1"), ("configmaps", "1")])
        );
        assert!(usage.clusters.is_empty());
        // A non-workload has no class: NotIn matches it, Exists does not.
        assert!(charge.scoped(&mk_scope("NotIn", &["batch"])).is_some());
        assert!(charge.scoped(&mk_scope("Exists", &[])).is_none());
    }

    #[test]
    fn negative_requests_are_charged_as_zero() {
        // Found by the admission fuzz target: a hand-written binding asking for -2 cpu per
        // replica lowered the namespace's usage by 10 cpu.
        let charge = mk_charge(&mk_deployment(
            5,
            &[
                ("cpu", "-2"),
                ("requests.memory", "-1Gi"),
                ("memory", "1Gi"),
                ("nvidia.com/gpu", "1"),
            ],
            "",
            &[("m1", 3), ("m2", 2)],
        ));
        let usage = charge.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(usage.total.get("cpu"), Some(&q("0")));
        assert_eq!(usage.total.get("requests.cpu"), Some(&q("0")));
        // The explicit -1Gi does not take away from the 1Gi of `memory`.
        assert_eq!(usage.total.get("requests.memory"), Some(&q("5Gi")));
        assert_eq!(usage.total.get("requests.nvidia.com/gpu"), Some(&q("5")));
        assert_eq!(usage.total.get("pods"), Some(&q("5")));
        assert_eq!(cluster(&usage, "m1").get("requests.cpu"), Some(&q("0")));
    }

    #[test]
    fn charged_replicas_are_the_larger_of_desired_and_placed() {
        // Before scheduling: the desired count, no per-cluster split.
        let unscheduled = mk_charge(&mk_deployment(4, &[("cpu", "1")], "", &[]));
        let usage = unscheduled
            .scoped(&ScopeSelector::default())
            .expect("matches");
        assert_eq!(usage.total.get("requests.cpu"), Some(&q("4")));
        assert_eq!(usage.total.get("pods"), Some(&q("4")));
        assert!(usage.clusters.is_empty());
        // Mid-scheduling: placed 1 of 4 → still 4.
        let partial = mk_charge(&mk_deployment(4, &[("cpu", "1")], "", &[("m1", 1)]));
        let usage = partial.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(usage.total.get("pods"), Some(&q("4")));
        assert_eq!(cluster(&usage, "m1").get("pods"), Some(&q("1")));
    }

    #[test]
    fn uses_per_cluster_component_replicas_when_given() {
        let mut spec = mk_components(
            &[
                ("jm", 1, &[("cpu", "1")], ""),
                ("tm", 4, &[("cpu", "2")], ""),
            ],
            &["m1", "m2"],
        );
        spec.clusters[0].components = vec![
            crate::binding::ComponentReplicas {
                name: "jm".into(),
                replicas: 1,
            },
            crate::binding::ComponentReplicas {
                name: "tm".into(),
                replicas: 3,
            },
        ];
        spec.clusters[1].components = vec![crate::binding::ComponentReplicas {
            name: "tm".into(),
            replicas: 1,
        }];
        let usage = mk_charge(&spec)
            .scoped(&ScopeSelector::default())
            .expect("matches");
        assert_eq!(usage.total.get("cpu"), Some(&q("9")));
        assert_eq!(usage.total.get("pods"), Some(&q("5")));
        assert_eq!(cluster(&usage, "m1").get("cpu"), Some(&q("7")));
        assert_eq!(cluster(&usage, "m1").get("pods"), Some(&q("4")));
        assert_eq!(cluster(&usage, "m2").get("cpu"), Some(&q("2")));
        assert_eq!(cluster(&usage, "m2").get("pods"), Some(&q("1")));
    }

    fn with_placement(mut spec: ResourceBindingSpec, yaml: &str) -> ResourceBindingSpec {
        spec.placement = Some(serde_saphyr::from_str(yaml).expect("placement"));
        spec
    }

    #[test]
    fn a_duplicated_placement_that_names_its_clusters_is_charged_for_all_of_them_at_create() {
        // Karmada's detector creates the binding without clusters; the scheduler then puts
        // all 3 replicas on each named cluster. Charged 3 × 2 up front, so an over-limit
        // policy is refused at the CREATE (like a Divided one), not at the scheduler's
        // update that would leave the binding unscheduled holding its first charge.
        let named = "clusterAffinity: {clusterNames: [member1, member2]}";
        let create = with_placement(mk_deployment(3, &[("cpu", "250m")], "", &[]), named);
        let usage = mk_charge(&create)
            .scoped(&ScopeSelector::default())
            .unwrap();
        assert_eq!(usage.total.get("requests.cpu"), Some(&q("1500m")));
        assert_eq!(usage.total.get("pods"), Some(&q("6")));
        assert!(usage.clusters.is_empty(), "not placed yet");
        // After scheduling: the same total, now per cluster (the update charges nothing).
        let scheduled = with_placement(
            mk_deployment(3, &[("cpu", "250m")], "", &[("member1", 3), ("member2", 3)]),
            named,
        );
        assert_eq!(
            mk_charge(&scheduled)
                .scoped(&ScopeSelector::default())
                .unwrap()
                .total,
            usage.total
        );
        // Divided with the same names: the replicas are split, charged once.
        let divided = with_placement(
            mk_deployment(3, &[("cpu", "250m")], "", &[]),
            "{clusterAffinity: {clusterNames: [member1, member2]}, replicaScheduling: {replicaSchedulingType: Divided}}",
        );
        let usage = mk_charge(&divided)
            .scoped(&ScopeSelector::default())
            .unwrap();
        assert_eq!(usage.total.get("pods"), Some(&q("3")));
        // Clusters chosen by labels: known only after scheduling, charged once until then.
        let by_label = with_placement(
            mk_deployment(3, &[("cpu", "250m")], "", &[]),
            "clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}",
        );
        let usage = mk_charge(&by_label)
            .scoped(&ScopeSelector::default())
            .unwrap();
        assert_eq!(usage.total.get("pods"), Some(&q("3")));
    }

    #[test]
    fn named_duplicated_components_run_on_every_named_cluster() {
        let spec = with_placement(
            mk_components(
                &[
                    ("jm", 1, &[("cpu", "1")], ""),
                    ("tm", 2, &[("cpu", "2")], ""),
                ],
                &[],
            ),
            "clusterAffinity: {clusterNames: [m1, m2, m3]}",
        );
        let usage = mk_charge(&spec).scoped(&ScopeSelector::default()).unwrap();
        assert_eq!(usage.total.get("cpu"), Some(&q("15")));
        assert_eq!(usage.total.get("pods"), Some(&q("9")));
    }

    #[test]
    fn divided_components_naming_their_clusters_are_charged_a_copy_per_cluster_at_create() {
        // A Divided RayCluster naming two members runs a copy of each component on each
        // member: charged for both at CREATE, so the scheduler's UPDATE fits and the
        // workload never sits unscheduled holding the quota of one copy.
        let spec = with_placement(
            mk_components(
                &[
                    ("head", 1, &[("cpu", "500m")], ""),
                    ("workers", 3, &[("cpu", "250m")], ""),
                ],
                &[],
            ),
            "{clusterAffinity: {clusterNames: [member1, member2]}, replicaScheduling: {replicaSchedulingType: Divided}}",
        );
        let usage = mk_charge(&spec).scoped(&ScopeSelector::default()).unwrap();
        assert_eq!(usage.total.get("cpu"), Some(&q("2500m")));
        assert_eq!(usage.total.get("pods"), Some(&q("8")));
        // Clusters chosen by a selector: not known before scheduling, charged once.
        let by_label = with_placement(
            mk_components(&[("head", 1, &[("cpu", "500m")], "")], &[]),
            "{clusterAffinity: {labelSelector: {matchLabels: {gpu: \"true\"}}}, replicaScheduling: {replicaSchedulingType: Divided}}",
        );
        let usage = mk_charge(&by_label)
            .scoped(&ScopeSelector::default())
            .unwrap();
        assert_eq!(usage.total.get("cpu"), Some(&q("500m")));
    }

    #[test]
    fn a_kind_of_a_pod_less_group_is_an_object_not_an_uncountable_workload() {
        let spec = ResourceBindingSpec {
            resource: crate::binding::ObjectReference {
                api_version: "cert-manager.io/v1".into(),
                kind: "Certificate".into(),
                name: "tls".into(),
                ..Default::default()
            },
            ..Default::default()
        };
        assert!(BindingCharge::compute(&spec, None).unaccounted.is_some());
        let pod_less = ["cert-manager.io".to_owned()];
        assert!(
            BindingCharge::compute_with(&spec, None, &pod_less)
                .unaccounted
                .is_none()
        );
    }

    #[test]
    fn components_before_scheduling_count_once() {
        let spec = mk_components(
            &[
                ("a", 2, &[("cpu", "25m")], ""),
                ("b", 1, &[("cpu", "30m")], ""),
            ],
            &[],
        );
        let usage = mk_charge(&spec)
            .scoped(&ScopeSelector::default())
            .expect("matches");
        assert_eq!(usage.total.get("cpu"), Some(&q("80m")));
        assert_eq!(usage.total.get("pods"), Some(&q("3")));
    }

    #[test]
    fn a_workload_without_requirements_is_charged_pods_and_lacks_every_request() {
        let mut spec = mk_deployment(3, &[], "", &[("m1", 3)]);
        spec.replica_requirements = None;
        let charge = mk_charge(&spec);
        assert!(charge.workload);
        let usage = charge.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(
            usage.total,
            mk_list(&[("pods", "3"), ("count/deployments.apps", "1")])
        );
        assert_eq!(
            usage.missing_requests,
            ["cpu", "ephemeral-storage", "memory"]
        );
    }

    #[test]
    fn unknown_plural_leaves_out_the_count_but_keeps_legacy_names() {
        let mut spec = mk_deployment(0, &[], "", &[]);
        spec.replica_requirements = None;
        spec.resource.api_version = "v1".into();
        spec.resource.kind = "Service".into();
        let charge = BindingCharge::compute(&spec, None);
        assert_eq!(charge.objects, mk_list(&[("services", "1")]));
        spec.resource.api_version = "example.com/v1".into();
        assert_eq!(
            BindingCharge::compute(&spec, None).objects,
            ResourceList::new()
        );
    }

    #[test]
    fn multi_component_objects_count_when_any_component_matches() {
        let spec = mk_components(
            &[
                ("a", 1, &[("cpu", "1")], "high"),
                ("b", 1, &[("cpu", "1")], "batch"),
            ],
            &[],
        );
        let charge = mk_charge(&spec);
        assert!(charge.scoped(&mk_scope("In", &["gold"])).is_none());
        let high = charge
            .scoped(&mk_scope("In", &["high"]))
            .expect("a matches");
        assert_eq!(
            high.total.get("count/flinkdeployments.flink.apache.org"),
            Some(&q("1"))
        );
        assert_eq!(high.total.get("cpu"), Some(&q("1")));
    }

    #[test]
    fn negative_replicas_are_charged_as_zero() {
        let charge = mk_charge(&mk_deployment(-3, &[("cpu", "1")], "", &[("m1", -1)]));
        let usage = charge.scoped(&ScopeSelector::default()).expect("matches");
        assert_eq!(usage.total.get("cpu"), Some(&Quantity::ZERO));
    }

    #[test]
    fn count_names_by_group() {
        assert_eq!(
            count_name("apps/v1", "deployments"),
            "count/deployments.apps"
        );
        assert_eq!(count_name("v1", "configmaps"), "count/configmaps");
        assert_eq!(
            count_name("flink.apache.org/v1beta1", "flinkdeployments"),
            "count/flinkdeployments.flink.apache.org"
        );
    }

    #[test]
    fn builtin_plurals_by_group_and_kind() {
        let table = [
            ("apps/v1", "Deployment", Some("deployments")),
            ("apps/v1beta2", "StatefulSet", Some("statefulsets")),
            ("batch/v1", "CronJob", Some("cronjobs")),
            ("v1", "Service", Some("services")),
            (
                "v1",
                "PersistentVolumeClaim",
                Some("persistentvolumeclaims"),
            ),
            ("networking.k8s.io/v1", "Ingress", Some("ingresses")),
            (
                "networking.k8s.io/v1",
                "NetworkPolicy",
                Some("networkpolicies"),
            ),
            (
                "policy/v1",
                "PodDisruptionBudget",
                Some("poddisruptionbudgets"),
            ),
            (
                "autoscaling/v2",
                "HorizontalPodAutoscaler",
                Some("horizontalpodautoscalers"),
            ),
            ("v1", "Deployment", None),
            ("example.com/v1", "Widget", None),
        ];
        for (api_version, kind, plural) in table {
            assert_eq!(
                builtin_plural(api_version, kind),
                plural,
                "{api_version} {kind}"
            );
        }
    }
}
