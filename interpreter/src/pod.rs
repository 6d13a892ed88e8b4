//! A pod spec as Karmada's default interpreter reads it, and what one replica of it asks
//! (Karmada's `AddPodTemplateRequest`): each container's requests, a limit standing in for
//! a request it lacks; the sum over app containers, then per resource the larger of that
//! sum and each init container, plus `spec.overhead`; cpu rounded up to millicores and
//! every other resource up to whole units; only the names Karmada keeps. Pod-level
//! requests (`spec.resources`) are not read, nor are sidecars told apart: Karmada v1.18
//! reads neither (a member pod is priced with both, by core's `pod_requests`). Used by
//! [`crate::template`] (one pod template per kind) and [`crate::workload_kinds`] (a pod
//! template per component).

use std::collections::BTreeMap;

use karmada_quota_core::quantity::{Format, Quantity};
use karmada_quota_core::resources::ResourceList;

/// `spec.template`.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodTemplate {
    /// The pod spec.
    pub spec: PodSpec,
}

/// A pod spec: containers, init containers, overhead, priority class.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PodSpec {
    /// App containers.
    pub containers: Vec<Container>,
    /// Init containers.
    pub init_containers: Vec<Container>,
    /// Pod overhead (RuntimeClass).
    pub overhead: BTreeMap<String, RawQuantity>,
    /// `spec.resources`: pod-level requests and limits. Karmada does not read them; only
    /// [`pod_level_requests`] does, to say so.
    pub resources: Option<Resources>,
    /// spec.priorityClassName.
    pub priority_class_name: String,
}

/// A container's resources.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Container {
    /// `resources.requests` and `resources.limits`.
    pub resources: Resources,
}

/// `resources`.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Resources {
    /// Requests.
    pub requests: BTreeMap<String, RawQuantity>,
    /// Limits (a limit stands in for a missing request).
    pub limits: BTreeMap<String, RawQuantity>,
}

/// A quantity as written in a manifest: a string or a bare number.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(untagged)]
pub enum RawQuantity {
    /// `"500m"`, `"1Gi"`.
    Text(String),
    /// `2`, `0.5`.
    Number(f64),
}

impl RawQuantity {
    pub(crate) fn parse(&self) -> Result<Quantity, String> {
        let text = match self {
            RawQuantity::Text(t) => t.clone(),
            RawQuantity::Number(n) => n.to_string(),
        };
        Quantity::read(&text).map_err(|e| format!("{text:?}: {e}"))
    }
}

/// Whether Karmada keeps a requested resource name (its `Resource.Add`: cpu, memory,
/// ephemeral-storage, pods, and scalar names).
fn kept(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage" | "pods")
        || name.contains('/')
        || name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
}

/// One container's effective requests: its requests, a limit standing in for each
/// missing one; `(field, message)` on a value that does not parse.
fn container_requests(c: &Container, field: &str) -> Result<ResourceList, (String, String)> {
    let mut out = ResourceList::new();
    let sources = c
        .resources
        .limits
        .iter()
        .filter(|(name, _)| !c.resources.requests.contains_key(*name))
        .map(|(n, q)| (n, q, "limits"))
        .chain(c.resources.requests.iter().map(|(n, q)| (n, q, "requests")));
    for (name, raw, which) in sources {
        if !kept(name) {
            continue;
        }
        let q = raw
            .parse()
            .map_err(|e| (format!("{field}.resources.{which}[{name}]"), e))?;
        out.insert(name.clone(), q);
    }
    Ok(out)
}

/// Karmada's rounding: cpu up to millicores, everything else up to whole units (away from
/// zero). Karmada holds the result in an int64; a value past it (a stored `12E`) is kept
/// whole here rather than cut to the int64 bound, which would price it below a hard limit
/// a user may write.
fn rounded(name: &str, q: Quantity) -> Quantity {
    if name == "cpu" {
        q.rounded_to_milli(Format::DecimalSI)
    } else {
        let format =
            if matches!(name, "memory" | "ephemeral-storage") || name.starts_with("hugepages-") {
                Format::BinarySI
            } else {
                Format::DecimalSI
            };
        q.rounded_to_units(format)
    }
}

/// The names a pod spec requests at pod level that its pods use in a member cluster (cpu,
/// memory, hugepages: core's `pod_requests::is_pod_level_name`), though Karmada's binding
/// leaves them out.
pub fn pod_level_requests(pod: &PodSpec) -> Vec<&str> {
    pod.resources
        .iter()
        .flat_map(|r| r.requests.keys())
        .map(String::as_str)
        .filter(|name| karmada_quota_core::pod_requests::is_pod_level_name(name))
        .collect()
}

/// The per-replica request of a pod spec by the default interpreter's rule (see the module
/// doc), for callers outside core (a customization's `kube.accuratePodRequirements`);
/// `(field under the pod spec, message)` on a value that does not parse.
pub fn pod_template_request(pod: &PodSpec) -> Result<ResourceList, (String, String)> {
    pod_request(pod)
}

/// The per-replica request of a pod spec (see the module doc); `(field, message)` on a
/// value that does not parse.
pub(crate) fn pod_request(pod: &PodSpec) -> Result<ResourceList, (String, String)> {
    let mut sum = ResourceList::new();
    for (i, c) in pod.containers.iter().enumerate() {
        for (name, q) in container_requests(c, &format!("containers[{i}]"))?.iter() {
            sum.add_one(name, rounded(name, *q));
        }
    }
    for (i, c) in pod.init_containers.iter().enumerate() {
        let init = container_requests(c, &format!("initContainers[{i}]"))?;
        for (name, q) in init.iter() {
            let q = rounded(name, *q);
            if sum.get(name).is_none_or(|s| q > *s) {
                sum.insert(name, q);
            }
        }
    }
    for (name, raw) in &pod.overhead {
        if kept(name) {
            let q = raw.parse().map_err(|e| (format!("overhead[{name}]"), e))?;
            sum.add_one(name, rounded(name, q));
        }
    }
    Ok(sum.without_zeros())
}
