//! `member_pods`: a member cluster's pods as its pod watch delivers them, reduced to what
//! quota counts (`controller::members::pod_entry`: priority class and core's
//! `pod_usage`) and kept in the member's index (`MemberPods::apply_event`).
//!
//! Input: a JSON array of Pods (anything else: no pods). Each is applied, then the last
//! pod of each (namespace, uid) is delivered as a relist (`Init`, `InitApply`…,
//! `InitDone`) to a fresh index, then each pod is deleted.
//!
//! Laws:
//! - a pod has an entry exactly when it is not `Succeeded`/`Failed`; its usage is never
//!   negative and counts `pods` = 1;
//! - the index holds one entry per (namespace, uid) whose last pod is not terminal, the
//!   same after a relist of those last pods (a list holds each pod once) as after the
//!   events, and nothing after every pod is deleted.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use karmada_quota_controller::members::{MemberPods, pod_entry};
use karmada_quota_core::Quantity;
use kube::runtime::watcher::Event;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(values) = serde_json::from_slice::<Vec<serde_json::Value>>(data) else {
        return;
    };
    let pods: Vec<Pod> = values
        .into_iter()
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect();
    let mut expected: BTreeMap<(String, String), ()> = BTreeMap::new();
    for pod in &pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminal = matches!(phase, Some("Succeeded" | "Failed"));
        let entry = pod_entry(pod);
        assert_eq!(entry.is_none(), terminal, "entry of a {phase:?} pod");
        let key = pod.metadata.namespace.clone().zip(pod.metadata.uid.clone());
        if let Some(key) = key {
            // The last event for a key decides.
            if entry.is_some() {
                expected.insert(key, ());
            } else {
                expected.remove(&key);
            }
        }
        let Some(entry) = entry else { continue };
        assert_eq!(
            entry.usage.get_or_zero("pods"),
            Quantity::from_units(1, Default::default()),
            "a pod counts one pod"
        );
        for (name, q) in entry.usage.iter() {
            assert!(!q.is_negative(), "{name}={q} from {pod:?}");
        }
    }

    let mut index = MemberPods::default();
    for pod in &pods {
        index.apply_event(&Event::Apply(pod.clone()));
    }
    assert_eq!(index.len(), expected.len(), "events: {pods:?}");
    let after_events = snapshot(&index, &expected);

    let mut relisted = MemberPods::default();
    relisted.apply_event(&Event::Init);
    let mut last: BTreeMap<(String, String), &Pod> = BTreeMap::new();
    for pod in &pods {
        if let Some(key) = pod.metadata.namespace.clone().zip(pod.metadata.uid.clone()) {
            last.insert(key, pod);
        }
    }
    for pod in last.values() {
        relisted.apply_event(&Event::InitApply((*pod).clone()));
    }
    relisted.apply_event(&Event::InitDone);
    assert_eq!(relisted.len(), expected.len(), "relist: {pods:?}");
    assert_eq!(snapshot(&relisted, &expected), after_events);

    for pod in &pods {
        index.apply_event(&Event::Delete(pod.clone()));
    }
    assert!(index.is_empty(), "pods left after every delete");
}

/// Per namespace the (priority class, usage, owner) of each pod, sorted.
fn snapshot(
    index: &MemberPods,
    expected: &BTreeMap<(String, String), ()>,
) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for (ns, _) in expected.keys() {
        let mut pods: Vec<String> = index
            .in_namespace(ns)
            .into_iter()
            .map(|p| format!("{} {:?} {:?}", p.class, p.usage, p.owner))
            .collect();
        pods.sort();
        out.insert(ns.clone(), pods);
    }
    out
}
