//! What a ResourceBinding (and a member-cluster pod) costs: design §3.
//!
//! [`BindingCharge::compute`] turns a binding into scope-independent parts (one per
//! component, or one for a single-component workload) with their expanded resource
//! names, totals and per-cluster split; [`BindingCharge::scoped`] sums the parts a quota's
//! scope matches. Computing the charge once and scoping it per quota keeps both the webhook
//! and the controller cheap.

use std::collections::BTreeMap;

use crate::binding::{ResourceBindingSpec, TargetCluster};
use crate::quantity::{Format, Quantity};
use crate::resources::{LEGACY_COUNTS, PODS, ResourceList, expand_request};
use crate::scope::ScopeSelector;

/// One priced part of a binding: a single-component workload, or one component.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChargePart {
    /// Component name (empty for a single-component workload).
    pub component: String,
    /// The PriorityClass this part is matched on (empty = none).
    pub priority_class: String,
    /// Usage of this part over all clusters, names expanded (cpu + requests.cpu, …, pods).
    pub total: ResourceList,
    /// Usage of this part per member cluster (empty before scheduling).
    pub clusters: BTreeMap<String, ResourceList>,
    /// Compute names (`cpu`, `memory`, `ephemeral-storage`) the per-replica request lacks:
    /// a quota tracking one of them refuses the binding (`must specify …`).
    pub missing_requests: Vec<&'static str>,
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
}

/// A member-cluster pod, reduced to what quota needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    /// `spec.priorityClassName` (empty = none).
    pub priority_class: String,
    /// `spec.containers[].resources.requests`.
    pub containers: Vec<ResourceList>,
    /// `spec.initContainers[].resources.requests` (restartable sidecars count like containers).
    pub init_containers: Vec<ResourceList>,
    /// `spec.overhead`.
    pub overhead: ResourceList,
    /// Succeeded/Failed pods use nothing.
    pub terminal: bool,
    /// Parallel to `init_containers`: `true` where the init container is a restartable
    /// sidecar (`restartPolicy: Always`); missing entries count as `false`.
    pub init_restartable: Vec<bool>,
}

/// Compute names a quota may require every workload to request, each with its
/// `requests.` twin (design §3; Kubernetes' rule for cpu and memory, extended to
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

/// `expand_request(per_replica) + pods=1`, every value multiplied by `n`.
fn expand_scaled(per_replica: &ResourceList, n: i64) -> ResourceList {
    let mut out = expand_request(per_replica).scaled(n);
    out.insert(PODS, one().saturating_mul(n));
    out
}

/// Add `list` to the entry of `cluster`, creating it when absent.
fn add_cluster(map: &mut BTreeMap<String, ResourceList>, cluster: &str, list: &ResourceList) {
    match map.get_mut(cluster) {
        Some(acc) => acc.add_assign(list),
        None => {
            map.insert(cluster.to_owned(), list.clone());
        }
    }
}

impl BindingCharge {
    /// What `spec` costs (design §3), independent of any quota's scope.
    ///
    /// `count_name` is the template's resolved `count/<plural>[.<group>]` (see
    /// [`count_name`], [`builtin_plural`]); `None` when the plural is unknown, which leaves
    /// out the `count/…` entry (the legacy names still come from the template's kind).
    ///
    /// A binding is a workload when it has `replicaRequirements` or `components` — or, beyond
    /// design §3, replicas: Karmada leaves `replicaRequirements` out for a pod template
    /// with no requests and no node claim, and such a workload must still be charged its
    /// `pods` and refused by a quota that tracks cpu or memory (`must specify …`).
    pub fn compute(spec: &ResourceBindingSpec, count_name: Option<&str>) -> BindingCharge {
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
        BindingCharge {
            workload,
            parts,
            objects,
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
        let mut matched = false;
        if self.workload {
            for part in self
                .parts
                .iter()
                .filter(|p| scope.matches(&p.priority_class))
            {
                matched = true;
                acc.total.add_assign(&part.total);
                for (cluster, list) in &part.clusters {
                    add_cluster(&mut acc.clusters, cluster, list);
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
            acc.total.add_assign(&self.objects);
        }
        matched
    }
}

/// A single-component workload: R = max(spec.replicas, Σ clusters[].replicas).
fn single_part(spec: &ResourceBindingSpec) -> ChargePart {
    let empty = ResourceList::new();
    let (request, class) = match &spec.replica_requirements {
        Some(r) => (&r.resource_request, r.priority_class_name.as_str()),
        None => (&empty, ""),
    };
    let placed: i64 = spec.clusters.iter().map(|c| replicas(c.replicas)).sum();
    let charged = replicas(spec.replicas).max(placed);
    let mut clusters = BTreeMap::new();
    if !spec.clusters.is_empty() {
        let per_replica = expand_scaled(request, 1);
        for c in &spec.clusters {
            add_cluster(
                &mut clusters,
                &c.name,
                &per_replica.scaled(replicas(c.replicas)),
            );
        }
    }
    ChargePart {
        component: String::new(),
        priority_class: class.to_owned(),
        total: expand_scaled(request, charged),
        clusters,
        missing_requests: missing_requests(request),
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
/// gave one (`clusters[].components`), else Karmada's rule: every target cluster runs
/// `replicas_k` of component k (total = replicas_k × max(1, clusters)).
fn component_parts(spec: &ResourceBindingSpec) -> Vec<ChargePart> {
    let split = spec.clusters.iter().any(|c| !c.components.is_empty());
    let targets = i64::try_from(spec.clusters.len())
        .unwrap_or(i64::MAX)
        .max(1);
    let empty = ResourceList::new();
    spec.components
        .iter()
        .map(|comp| {
            let (request, class) = match &comp.replica_requirements {
                Some(r) => (&r.resource_request, r.priority_class_name.as_str()),
                None => (&empty, ""),
            };
            let k = replicas(comp.replicas);
            let per_replica = expand_scaled(request, 1);
            let mut clusters = BTreeMap::new();
            let mut placed = 0i64;
            for c in &spec.clusters {
                let rc = if split {
                    split_replicas(c, &comp.name)
                } else {
                    k
                };
                placed = placed.saturating_add(rc);
                add_cluster(&mut clusters, &c.name, &per_replica.scaled(rc));
            }
            let charged = if split {
                k.max(placed)
            } else {
                k.saturating_mul(targets)
            };
            ChargePart {
                component: comp.name.clone(),
                priority_class: class.to_owned(),
                total: per_replica.scaled(charged),
                clusters,
                missing_requests: missing_requests(request),
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

/// What a member-cluster pod uses, by Kubernetes' pod request rule: the larger of
/// Σ containers (+ restartable sidecars) and the peak of any init container (plus the
/// sidecars started before it), plus overhead; names expanded like [`expand_request`],
/// `pods` = 1. A terminal (Succeeded/Failed) pod uses nothing.
pub fn pod_usage(pod: &PodView) -> ResourceList {
    if pod.terminal {
        return ResourceList::new();
    }
    let mut requests = ResourceList::new();
    for c in &pod.containers {
        requests.add_assign(c);
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for (i, init) in pod.init_containers.iter().enumerate() {
        if pod.init_restartable.get(i).copied().unwrap_or(false) {
            requests.add_assign(init);
            sidecars.add_assign(init);
        } else {
            init_peak = init_peak.max(&init.plus(&sidecars));
        }
    }
    let mut requests = requests.max(&init_peak);
    requests.add_assign(&pod.overhead);
    expand_scaled(&requests, 1)
}
