//! What a member-cluster pod requests, by the rule of Kubernetes 1.35
//! (`k8s.io/component-helpers/resource.PodRequests` v0.35, the version Karmada v1.18
//! vendors), with the options a 1.35 member's ResourceQuota prices a running pod with:
//! in-place resize on (GA in 1.35), in-place resize of pod-level resources off (alpha).
//!
//! ```text
//!  per container  spec.containers[].resources.requests
//!                 ─ with status.containerStatuses[name].resources set (a kubelet ran it):
//!                   max(spec, resources.requests, allocatedResources)   per name
//!                   max(resources.requests, allocatedResources)         resize Infeasible
//!  containers     Σ containers + Σ sidecars (restartable init containers, resized alike)
//!  init peak      max over init containers i of (init i + sidecars before i); the spec of
//!                 a regular init container is read, never its status
//!  aggregate      max(containers, init peak)                            per name
//!  pod level      spec.resources.requests replaces the aggregate for cpu, memory and
//!                 hugepages-*; every other name keeps the aggregate
//!  overhead       + spec.overhead
//! ```
//!
//! "Resize Infeasible" is the pod condition `PodResizePending` with reason `Infeasible`
//! (the first `PodResizePending` condition decides); a pending (`Deferred`) or in-progress
//! resize takes the spec too, so a resize up is counted from the moment it is asked for.
//! The deprecated `status.resize` field is not read (1.35's helper does not read it).
//! Limits are not priced (a ResourceBinding carries requests only, design §4).
//! docs/decisions/0002-pod-requests.md says what the loopback apiserver can store of this.

use crate::resources::ResourceList;

/// A member-cluster pod, reduced to what quota needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    /// `spec.priorityClassName` (empty = none).
    pub priority_class: String,
    /// `spec.containers`.
    pub containers: Vec<ContainerView>,
    /// `spec.initContainers`, in order (restartable sidecars count like containers).
    pub init_containers: Vec<ContainerView>,
    /// `spec.resources.requests`: pod-level requests (only cpu, memory and hugepages-*
    /// take effect).
    pub pod_level: ResourceList,
    /// `spec.overhead`.
    pub overhead: ResourceList,
    /// Succeeded/Failed pods use nothing.
    pub terminal: bool,
    /// The pod's `PodResizePending` condition says `Infeasible`: the spec of a resized
    /// container is not counted, only what it was given.
    pub resize_infeasible: bool,
}

/// One container of a [`PodView`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerView {
    /// `resources.requests` of its spec.
    pub requests: ResourceList,
    /// An init container with `restartPolicy: Always` (a sidecar); `false` for an app
    /// container.
    pub restartable: bool,
    /// Its container status, when that status has `resources` set (a kubelet with in-place
    /// resize reported it); `None` otherwise, and the spec alone counts.
    pub status: Option<ContainerStatusView>,
}

/// What the kubelet reports of one container (`status.containerStatuses[]` or
/// `status.initContainerStatuses[]`, by name).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerStatusView {
    /// `resources.requests`: what the container runs with now.
    pub actual: ResourceList,
    /// `allocatedResources`: what the node has admitted for it.
    pub allocated: ResourceList,
}

/// Whether a pod's conditions, as (type, reason) pairs in order, say its resize is
/// infeasible: the first `PodResizePending` condition decides, by reason `Infeasible`
/// (`Deferred` is not); no such condition, not infeasible.
pub fn resize_infeasible<'a>(conditions: impl IntoIterator<Item = (&'a str, &'a str)>) -> bool {
    conditions
        .into_iter()
        .find(|(kind, _)| *kind == "PodResizePending")
        .is_some_and(|(_, reason)| reason == "Infeasible")
}

/// Whether a pod-level request of `name` replaces the containers' aggregate (cpu, memory
/// and hugepages of any page size; Kubernetes ignores other names there).
pub fn is_pod_level_name(name: &str) -> bool {
    matches!(name, "cpu" | "memory") || name.starts_with("hugepages-")
}

impl ContainerView {
    /// The requests this container counts with (see the module doc). `status_read` is
    /// false for a regular init container, whose status Kubernetes does not read.
    fn effective(&self, infeasible: bool, status_read: bool) -> ResourceList {
        match &self.status {
            Some(s) if status_read => {
                let given = s.actual.max(&s.allocated);
                if infeasible {
                    given
                } else {
                    self.requests.max(&given)
                }
            }
            _ => self.requests.clone(),
        }
    }
}

/// The containers' aggregate: max(Σ containers + Σ sidecars, the init peak), per name.
fn aggregate(pod: &PodView) -> ResourceList {
    let infeasible = pod.resize_infeasible;
    let mut sum = ResourceList::new();
    for c in &pod.containers {
        sum.add_assign(&c.effective(infeasible, true));
    }
    let mut sidecars = ResourceList::new();
    let mut init_peak = ResourceList::new();
    for init in &pod.init_containers {
        let own = init.effective(infeasible, init.restartable);
        if init.restartable {
            // Also in `sum`, which therefore covers every sidecar prefix of the peak.
            sum.add_assign(&own);
            sidecars.add_assign(&own);
        } else {
            init_peak = init_peak.max(&own.plus(&sidecars));
        }
    }
    sum.max(&init_peak)
}

/// What `pod` requests by Kubernetes 1.35's rule (the module doc), names as the pod spells
/// them (`cpu`, `memory`, …; not expanded, no `pods`). A terminal pod is priced like any
/// other here: [`pod_usage`] is where it uses nothing.
pub fn pod_requests(pod: &PodView) -> ResourceList {
    let mut requests = aggregate(pod);
    for (name, q) in pod.pod_level.iter() {
        if is_pod_level_name(name) {
            requests.insert(name, *q);
        }
    }
    requests.add_assign(&pod.overhead);
    requests
}

/// What a member-cluster pod uses in a quota: [`pod_requests`] with names expanded like
/// [`crate::resources::expand_request`] (a negative value counted as zero) and `pods` = 1.
/// A terminal (Succeeded/Failed) pod uses nothing.
pub fn pod_usage(pod: &PodView) -> ResourceList {
    if pod.terminal {
        return ResourceList::new();
    }
    crate::usage::charge_per_replica(&pod_requests(pod))
}

#[cfg(test)]
mod tests;
