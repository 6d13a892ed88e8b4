//! The observed-usage index of one member: its non-terminal pods, reduced to priority class and usage, by namespace.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Container, ContainerStatus, Pod, ResourceRequirements};
use karmada_quota_core::ResourceList;
use karmada_quota_core::pod_requests::{
    ContainerStatusView, ContainerView, PodView, pod_usage, resize_infeasible,
};
use karmada_quota_core::status::{ObservedPod, PodOwner};
use karmada_quota_crds::convert::stored_list_from_api;
use karmada_quota_shell::relist::{Relist, Step};
use kube::runtime::watcher::Event;

use crate::index::Touched;

/// One pod, reduced to what quota needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEntry {
    /// `spec.priorityClassName` (empty = none).
    pub priority_class: String,
    /// core's `pod_requests::pod_usage`.
    pub usage: ResourceList,
    /// Kind and name of its controlling owner, if any.
    pub owner: Option<(String, String)>,
}

/// The quota-relevant view of a pod (requests parsed; unparseable values skipped — the
/// API server validated them, so this never happens in practice): each container with
/// its status when the kubelet reported its `resources`, the pod-level requests, the
/// resize condition — what core's `pod_requests` prices.
pub fn pod_view(pod: &Pod) -> PodView {
    let spec = pod.spec.as_ref();
    let status = pod.status.as_ref();
    let phase = status.and_then(|s| s.phase.as_deref());
    let statuses: Vec<&ContainerStatus> = status
        .map(|s| {
            let inits = s.init_container_statuses.iter().flatten();
            s.container_statuses.iter().flatten().chain(inits).collect()
        })
        .unwrap_or_default();
    let conditions = status.and_then(|s| s.conditions.as_ref());
    let view = |c: &Container| container_view(c, &statuses);
    PodView {
        priority_class: spec
            .and_then(|s| s.priority_class_name.clone())
            .unwrap_or_default(),
        containers: spec
            .map(|s| s.containers.iter().map(view).collect())
            .unwrap_or_default(),
        init_containers: spec
            .and_then(|s| s.init_containers.as_ref())
            .map(|ics| ics.iter().map(view).collect())
            .unwrap_or_default(),
        pod_level: requests_of(spec.and_then(|s| s.resources.as_ref())),
        overhead: spec
            .and_then(|s| s.overhead.as_ref())
            .map(parse_lenient)
            .unwrap_or_default(),
        terminal: matches!(phase, Some("Succeeded" | "Failed")),
        resize_infeasible: resize_infeasible(
            conditions
                .into_iter()
                .flatten()
                .map(|c| (c.type_.as_str(), c.reason.as_deref().unwrap_or_default())),
        ),
    }
}

/// `resources.requests`, parsed (none: empty).
fn requests_of(r: Option<&ResourceRequirements>) -> ResourceList {
    r.and_then(|r| r.requests.as_ref())
        .map(parse_lenient)
        .unwrap_or_default()
}

/// One container: its spec requests, whether it is a sidecar, and its status by name when
/// that status has `resources` (the last status of that name, as Kubernetes indexes them).
fn container_view(c: &Container, statuses: &[&ContainerStatus]) -> ContainerView {
    let status = statuses
        .iter()
        .rev()
        .find(|s| s.name == c.name)
        .filter(|s| s.resources.is_some())
        .map(|s| ContainerStatusView {
            actual: requests_of(s.resources.as_ref()),
            allocated: s
                .allocated_resources
                .as_ref()
                .map(parse_lenient)
                .unwrap_or_default(),
        });
    ContainerView {
        requests: requests_of(c.resources.as_ref()),
        restartable: c.restart_policy.as_deref() == Some("Always"),
        status,
    }
}

fn parse_lenient(
    map: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> ResourceList {
    match stored_list_from_api(map, "requests") {
        Ok(l) => l,
        Err(_) => map
            .iter()
            .filter_map(|(k, v)| {
                let one = BTreeMap::from([(k.clone(), v.clone())]);
                stored_list_from_api(&one, "requests").ok()
            })
            .fold(ResourceList::new(), |mut acc, l| {
                acc.0.extend(l.0);
                acc
            }),
    }
}

/// The entry of a pod, or `None` for a terminal pod (it uses nothing).
pub fn pod_entry(pod: &Pod) -> Option<PodEntry> {
    let view = pod_view(pod);
    if view.terminal {
        return None;
    }
    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| (o.kind.clone(), o.name.clone()));
    Some(PodEntry {
        priority_class: view.priority_class.clone(),
        usage: pod_usage(&view),
        owner,
    })
}

/// namespace → pod uid → entry.
type Pods = HashMap<String, HashMap<String, PodEntry>>;

/// The non-terminal pods of one member, fed by its pod watch.
#[derive(Debug, Default)]
pub struct MemberPods {
    pods: Pods,
    relist: Relist<Pods>,
}

impl MemberPods {
    /// Apply a pod watch event; returns the namespaces whose pods changed. `InitDone`
    /// replaces everything (and touches every namespace that differs).
    pub fn apply_event(&mut self, ev: &Event<Pod>) -> Touched {
        let step = self.relist.step(ev, |buf, pod| {
            if let (Some((ns, uid)), Some(entry)) = (pod_key(pod), pod_entry(pod)) {
                buf.entry(ns).or_default().insert(uid, entry);
            }
        });
        match step {
            Step::Apply(pod) => {
                let Some((ns, uid)) = pod_key(pod) else {
                    return Touched::new();
                };
                match pod_entry(pod) {
                    Some(entry) => {
                        let by_uid = self.pods.entry(ns.clone()).or_default();
                        if by_uid.get(&uid) == Some(&entry) {
                            return Touched::new();
                        }
                        by_uid.insert(uid, entry);
                        Touched::from([ns])
                    }
                    None => self.remove(&ns, &uid),
                }
            }
            Step::Delete(pod) => match pod_key(pod) {
                Some((ns, uid)) => self.remove(&ns, &uid),
                None => Touched::new(),
            },
            Step::Buffered => Touched::new(),
            Step::Relisted(new) => {
                let mut touched: Touched = self
                    .pods
                    .iter()
                    .filter(|(ns, old)| new.get(*ns) != Some(*old))
                    .map(|(ns, _)| ns.clone())
                    .collect();
                touched.extend(
                    new.iter()
                        .filter(|(ns, p)| !self.pods.contains_key(*ns) && !p.is_empty())
                        .map(|(ns, _)| ns.clone()),
                );
                self.pods = new;
                touched
            }
        }
    }

    fn remove(&mut self, ns: &str, uid: &str) -> Touched {
        let Some(by_uid) = self.pods.get_mut(ns) else {
            return Touched::new();
        };
        let removed = by_uid.remove(uid).is_some();
        if by_uid.is_empty() {
            self.pods.remove(ns);
        }
        if removed {
            Touched::from([ns.to_owned()])
        } else {
            Touched::new()
        }
    }

    /// The pods of `namespace`: priority class, usage, owner.
    pub fn in_namespace(&self, namespace: &str) -> Vec<ObservedPod> {
        self.pods
            .get(namespace)
            .map(|m| {
                m.values()
                    .map(|e| ObservedPod {
                        class: e.priority_class.clone(),
                        usage: e.usage.clone(),
                        owner: e.owner.as_ref().map(|(kind, name)| PodOwner {
                            namespace: namespace.to_owned(),
                            kind: kind.clone(),
                            name: name.clone(),
                        }),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Number of pods.
    pub fn len(&self) -> usize {
        self.pods.values().map(HashMap::len).sum()
    }

    /// Whether no pod is known.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

fn pod_key(pod: &Pod) -> Option<(String, String)> {
    Some((pod.metadata.namespace.clone()?, pod.metadata.uid.clone()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn pod_events_keep_non_terminal_pods_per_namespace() {
        let mut p = MemberPods::default();
        let a = mk_pod("team-a", "a", "uid-a", "", &["500m"], "Running");
        let b = mk_pod("team-a", "b", "uid-b", "batch", &["1"], "Pending");
        let done = mk_pod("team-a", "c", "uid-c", "", &["1"], "Succeeded");
        for ev in [
            Event::Init,
            Event::InitApply(a.clone()),
            Event::InitApply(done),
            Event::InitApply(b.clone()),
        ] {
            assert!(p.apply_event(&ev).is_empty());
        }
        assert_eq!(
            p.apply_event(&Event::InitDone),
            Touched::from(["team-a".to_owned()])
        );
        assert_eq!(p.len(), 2);
        let pods = p.in_namespace("team-a");
        assert_eq!(pods.len(), 2);
        assert!(pods.iter().any(|p| {
            p.class == "batch"
                && p.usage
                    .get("requests.cpu")
                    .map(ToString::to_string)
                    .as_deref()
                    == Some("1")
        }));
        // Same pod, status change only: nothing touched.
        let mut a2 = a.clone();
        a2.metadata.resource_version = Some("2".into());
        assert!(p.apply_event(&Event::Apply(a2)).is_empty());
        // It finishes: removed.
        let mut a3 = a;
        a3.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(p.apply_event(&Event::Apply(a3)).len(), 1);
        assert_eq!(p.apply_event(&Event::Delete(b)).len(), 1);
        assert!(p.is_empty());
    }

    #[test]
    fn pod_view_reads_requests_sidecars_and_overhead() {
        let mut pod = mk_pod("ns", "p", "u", "high", &["250m", "250m"], "Running");
        let spec = pod.spec.as_mut().unwrap();
        spec.init_containers = Some(vec![mk_container("init", "2"), {
            let mut c = mk_container("sidecar", "100m");
            c.restart_policy = Some("Always".into());
            c
        }]);
        let v = pod_view(&pod);
        assert_eq!(v.priority_class, "high");
        assert_eq!(v.containers.len(), 2);
        let restartable: Vec<bool> = v.init_containers.iter().map(|c| c.restartable).collect();
        assert_eq!(restartable, vec![false, true]);
        assert!(!v.terminal);
    }

    fn cpu_of(pod: &Pod) -> String {
        pod_entry(pod)
            .and_then(|e| e.usage.get("requests.cpu").map(ToString::to_string))
            .unwrap_or_default()
    }

    fn status_of(name: &str, actual: Option<&str>, allocated: Option<&str>) -> ContainerStatus {
        ContainerStatus {
            name: name.to_owned(),
            resources: actual.map(|cpu| ResourceRequirements {
                requests: Some(api_map(&[("cpu", cpu)])),
                ..ResourceRequirements::default()
            }),
            allocated_resources: allocated.map(|cpu| api_map(&[("cpu", cpu)])),
            ..ContainerStatus::default()
        }
    }

    #[test]
    fn pod_level_requests_replace_the_containers_cpu() {
        let mut pod = mk_pod("ns", "p", "u", "", &["100m", "100m"], "Running");
        pod.spec.as_mut().unwrap().resources = Some(ResourceRequirements {
            requests: Some(api_map(&[("cpu", "2")])),
            ..ResourceRequirements::default()
        });
        assert_eq!(cpu_of(&pod), "2");
    }

    #[test]
    fn a_resized_container_counts_the_larger_of_spec_and_what_the_kubelet_gave() {
        let mut pod = mk_pod("ns", "p", "u", "", &["500m"], "Running");
        let status = pod.status.as_mut().unwrap();
        status.container_statuses = Some(vec![status_of("c0", Some("500m"), Some("2"))]);
        assert_eq!(cpu_of(&pod), "2");
        // A status without `resources` (a kubelet without in-place resize): the spec.
        let status = pod.status.as_mut().unwrap();
        status.container_statuses = Some(vec![status_of("c0", None, Some("2"))]);
        assert_eq!(cpu_of(&pod), "500m");
    }

    #[test]
    fn an_infeasible_resize_counts_what_the_container_runs_with() {
        let mut pod = mk_pod("ns", "p", "u", "", &["4"], "Running");
        let status = pod.status.as_mut().unwrap();
        status.container_statuses = Some(vec![status_of("c0", Some("1"), Some("1"))]);
        assert_eq!(cpu_of(&pod), "4", "resize asked: the spec counts");
        status_infeasible(&mut pod, "Infeasible");
        assert_eq!(cpu_of(&pod), "1");
        status_infeasible(&mut pod, "Deferred");
        assert_eq!(cpu_of(&pod), "4");
    }

    fn status_infeasible(pod: &mut Pod, reason: &str) {
        pod.status.as_mut().unwrap().conditions =
            Some(vec![k8s_openapi::api::core::v1::PodCondition {
                type_: "PodResizePending".into(),
                status: "True".into(),
                reason: Some(reason.into()),
                ..Default::default()
            }]);
    }

    #[test]
    fn a_resized_sidecar_is_found_among_the_init_container_statuses() {
        let mut pod = mk_pod("ns", "p", "u", "", &["100m"], "Running");
        let mut sidecar = mk_container("proxy", "100m");
        sidecar.restart_policy = Some("Always".into());
        pod.spec.as_mut().unwrap().init_containers = Some(vec![sidecar]);
        pod.status.as_mut().unwrap().init_container_statuses =
            Some(vec![status_of("proxy", Some("100m"), Some("400m"))]);
        assert_eq!(cpu_of(&pod), "500m");
    }
}
