//! The offline what-if (`check`): given manifests (quotas, policies, templates, clusters)
//! and the current usage, what would the change add to each quota, and would it fit?
//!
//! ```text
//!  manifests ─► Inputs { quotas, policies, templates, clusters, customizations }
//!  usage (cluster | file | none) ─► Current: quotas (used + reservations), bindings,
//!        │ the cluster's ResourceInterpreterCustomizations
//!        │ quotas: the manifests' spec with the current status ─► engine states
//!        │ templates a customization targets: priced by its Lua (`interpreted`)
//!        ▼
//!  interpreter::whatif::what_if (the interpreter, the placement, the webhook's decision as a
//!  dry run) ─► Verdict for people and bots
//! ```

use std::collections::BTreeMap;

use karmada_quota_core::ResourceList;
use karmada_quota_core::binding::ResourceBindingSpec;
use karmada_quota_crds::convert::{cluster_quota_state, quota_state};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use karmada_quota_interpreter::clusters::ClusterFacts;
use karmada_quota_interpreter::policy::Policy;
use karmada_quota_interpreter::template::Template;
use karmada_quota_interpreter::whatif;
use karmada_quota_interpreter::{Customization, Customizations, Limits};
use serde::Serialize;
use serde_json::Value;

/// What the manifests hold, sorted by kind.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// KarmadaQuotas (their spec replaces the cluster's).
    pub quotas: Vec<KarmadaQuota>,
    /// KarmadaClusterQuotas (their spec replaces the cluster's).
    pub cluster_quotas: Vec<KarmadaClusterQuota>,
    /// PropagationPolicies and ClusterPropagationPolicies.
    pub policies: Vec<Policy>,
    /// Everything else: resource templates.
    pub templates: Vec<Template>,
    /// The templates as written (same order), for a customization's Lua.
    pub template_objects: Vec<Value>,
    /// ResourceInterpreterCustomizations (config.karmada.io): they replace the cluster's
    /// of the same name.
    pub customizations: Vec<Value>,
    /// Cluster objects (for Duplicated placements).
    pub clusters: Vec<ClusterFacts>,
}

/// Why the input cannot be checked (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// A document is not a Kubernetes object of a kind the check reads.
    #[error("{source_name}: document {index}: {message}")]
    Document {
        /// File (or `-`).
        source_name: String,
        /// 1-based document number.
        index: usize,
        /// What is wrong.
        message: String,
    },
}

impl Inputs {
    /// Sort the documents of one file (`List` objects are unpacked).
    pub fn add_documents(&mut self, source_name: &str, docs: Vec<Value>) -> Result<(), InputError> {
        for (i, doc) in docs.into_iter().enumerate() {
            let err = |message: String| InputError::Document {
                source_name: source_name.to_owned(),
                index: i + 1,
                message,
            };
            if doc.is_null() {
                continue;
            }
            let kind = doc
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let api_version = doc
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if kind.is_empty() || api_version.is_empty() {
                return Err(err("no apiVersion or kind".to_owned()));
            }
            if kind == "List" || kind.ends_with("List") && doc.get("items").is_some() {
                let items = doc
                    .get("items")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                self.add_documents(source_name, items)?;
                continue;
            }
            let group = api_version.split_once('/').map_or("", |(g, _)| g);
            match (group, kind.as_str()) {
                ("quota.karmada.io", "KarmadaQuota") => self.quotas.push(
                    serde_json::from_value(doc).map_err(|e| err(format!("KarmadaQuota: {e}")))?,
                ),
                ("quota.karmada.io", "KarmadaClusterQuota") => {
                    self.cluster_quotas.push(
                        serde_json::from_value(doc)
                            .map_err(|e| err(format!("KarmadaClusterQuota: {e}")))?,
                    );
                }
                ("policy.karmada.io", "PropagationPolicy" | "ClusterPropagationPolicy") => self
                    .policies
                    .push(serde_json::from_value(doc).map_err(|e| err(format!("{kind}: {e}")))?),
                ("cluster.karmada.io", "Cluster") => {
                    self.clusters
                        .push(karmada_quota_interpreter::clusters::facts(&doc));
                }
                _ if karmada_quota_interpreter::is_customization(&doc) => {
                    Customization::from_object(&doc).map_err(err)?;
                    self.customizations.push(doc);
                }
                _ => {
                    self.templates.push(
                        serde_json::from_value(doc.clone())
                            .map_err(|e| err(format!("{kind}: {e}")))?,
                    );
                    self.template_objects.push(doc);
                }
            }
        }
        Ok(())
    }
}

/// The state the change is checked against, as the API (or a usage file) gives it.
#[derive(Clone, Debug, Default)]
pub struct Current {
    /// Quotas as they are (status used and reservations; spec when the manifests have none).
    pub quotas: Vec<KarmadaQuota>,
    /// KarmadaClusterQuotas as they are (`used`: their total over every namespace).
    pub cluster_quotas: Vec<KarmadaClusterQuota>,
    /// Labels of the namespaces the manifests touch. A namespace missing here (a tenant
    /// may not read Namespaces) is selected by the cluster quotas whose
    /// `status.namespaces` lists it.
    pub namespace_labels: BTreeMap<String, BTreeMap<String, String>>,
    /// Member clusters.
    pub clusters: Vec<ClusterFacts>,
    /// Existing bindings (namespace → specs), for the increase over what runs.
    pub bindings: BTreeMap<String, Vec<ResourceBindingSpec>>,
    /// The cluster's ResourceInterpreterCustomizations, as objects.
    pub customizations: Vec<Value>,
}

/// One quota's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaOutcome {
    /// Namespace (empty for a KarmadaClusterQuota).
    pub namespace: String,
    /// A KarmadaClusterQuota: `current`, `added` and `hard` are over every namespace it
    /// selects.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub cluster: bool,
    /// Name.
    pub name: String,
    /// used + reservations now.
    pub current: BTreeMap<String, String>,
    /// What the admitted templates add.
    pub added: BTreeMap<String, String>,
    /// current + added.
    pub after: BTreeMap<String, String>,
    /// The limits (from the manifests when they change them).
    pub hard: BTreeMap<String, String>,
    /// Whether every template it would charge fits.
    pub fits: bool,
}

/// One template the change refuses.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// `Deployment team-a/web`.
    pub template: String,
    /// The quota that refuses it: `namespace/name`, or a cluster quota's name.
    pub quota: String,
    /// The webhook's message.
    pub message: String,
    /// What the template would add to that quota (all of it, not only what does not fit).
    pub charge: BTreeMap<String, String>,
}

/// The whole answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// Per quota touched or defined by the change, by namespace and name.
    pub quotas: Vec<QuotaOutcome>,
    /// Templates the webhook would refuse.
    pub refused: Vec<Refusal>,
    /// Templates no policy of the manifests selects (not charged here).
    pub unselected: Vec<String>,
    /// Problems reading a template or quota (each also makes the check fail).
    pub errors: Vec<String>,
    /// What the check prices differently from the member clusters (pod-level requests).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl Verdict {
    /// Whether everything fits.
    pub fn fits(&self) -> bool {
        self.refused.is_empty() && self.errors.is_empty() && self.quotas.iter().all(|q| q.fits)
    }
}

fn strings(list: &ResourceList) -> BTreeMap<String, String> {
    list.iter()
        .map(|(n, q)| (n.to_owned(), q.to_string()))
        .collect()
}

fn key(q: &KarmadaQuota) -> (String, String) {
    (
        q.metadata.namespace.clone().unwrap_or_default(),
        q.metadata.name.clone().unwrap_or_default(),
    )
}

/// Whether cluster quota `q` selects namespace `ns`: by its selector when the namespace's
/// `labels` are known (as the webhook decides), else by its `status.namespaces` (the
/// controller's last word).
pub fn selects(
    q: &KarmadaClusterQuota,
    ns: &str,
    labels: Option<&BTreeMap<String, String>>,
) -> bool {
    match (labels, cluster_quota_state(q)) {
        (Some(labels), Ok(state)) => state.covers.covers(ns, Some(labels)),
        _ => q
            .status
            .as_ref()
            .is_some_and(|s| s.namespaces.iter().any(|n| n.name == ns)),
    }
}

/// The templates, those a customization (the manifests' first, then the cluster's of
/// other names) targets priced by its Lua, which wins over the built-in rules as in
/// Karmada. A script that fails is an error of the check; its template keeps the built-in
/// reading (a kind nothing prices stays an unpriced workload, never 0).
fn interpreted(inputs: &Inputs, current: &Current, errors: &mut Vec<String>) -> Vec<Template> {
    let mut list: Vec<Customization> = Vec::new();
    for doc in inputs.customizations.iter().chain(&current.customizations) {
        match Customization::from_object(doc) {
            Ok(c) if !list.iter().any(|seen| seen.name == c.name) => list.push(c),
            Ok(_) => {}
            Err(e) => errors.push(e),
        }
    }
    let customizations = Customizations::new(list);
    let mut templates = inputs.templates.clone();
    if customizations.is_empty() {
        return templates;
    }
    for (t, object) in templates.iter_mut().zip(&inputs.template_objects) {
        match customizations.interpret(object, Limits::default()) {
            None => {}
            Some(Ok(i)) => t.interpreted = Some(i),
            Some(Err(e)) => errors.push(format!("{}: {e}", whatif::describe(t))),
        }
    }
    templates
}

/// Check `inputs` against `current`: the interpreter crate's what-if (a dry run of the webhook's decision)
/// over the quotas as the manifests define them (their spec wins, the status is the
/// current one).
pub fn check(inputs: &Inputs, current: &Current) -> Verdict {
    let mut report = Verdict::default();
    let mut state = whatif::Current {
        clusters: current.clusters.clone(),
        bindings: current.bindings.clone(),
        ..Default::default()
    };
    for c in &inputs.clusters {
        if !state.clusters.iter().any(|k| k.name == c.name) {
            state.clusters.push(c.clone());
        }
    }
    add_quotas(inputs, current, &mut state, &mut report.errors);
    let clusters = add_cluster_quotas(inputs, current, &mut state, &mut report.errors);
    select_namespaces(inputs, current, &clusters, &mut state);
    let templates = interpreted(inputs, current, &mut report.errors);
    let outcome = whatif::what_if(&templates, &inputs.policies, &state);
    report_outcome(inputs, outcome, &mut report);
    report
}

/// The KarmadaQuotas as the manifests define them (spec from the manifest, status from
/// the cluster) into `state`; one error per quota that does not validate.
fn add_quotas(
    inputs: &Inputs,
    current: &Current,
    state: &mut whatif::Current,
    errors: &mut Vec<String>,
) {
    let mut quotas: BTreeMap<(String, String), KarmadaQuota> =
        current.quotas.iter().map(|q| (key(q), q.clone())).collect();
    for q in &inputs.quotas {
        let status = quotas.get(&key(q)).and_then(|c| c.status.clone());
        let mut q = q.clone();
        q.status = status;
        quotas.insert(key(&q), q);
    }
    for ((ns, name), q) in &quotas {
        match quota_state(q) {
            Ok(s) => state.quotas.entry(ns.clone()).or_default().push(s),
            Err(e) => {
                let e: Vec<String> = e.iter().map(ToString::to_string).collect();
                errors.push(format!("KarmadaQuota {ns}/{name}: {}", e.join("; ")));
            }
        }
    }
}

/// The KarmadaClusterQuotas likewise; returns them by name (for the namespaces they select).
fn add_cluster_quotas(
    inputs: &Inputs,
    current: &Current,
    state: &mut whatif::Current,
    errors: &mut Vec<String>,
) -> BTreeMap<String, KarmadaClusterQuota> {
    let mut clusters: BTreeMap<String, KarmadaClusterQuota> = current
        .cluster_quotas
        .iter()
        .map(|q| (q.metadata.name.clone().unwrap_or_default(), q.clone()))
        .collect();
    for q in &inputs.cluster_quotas {
        let name = q.metadata.name.clone().unwrap_or_default();
        let status = clusters.get(&name).and_then(|c| c.status.clone());
        let mut q = q.clone();
        q.status = status;
        clusters.insert(name, q);
    }
    for (name, q) in &clusters {
        match cluster_quota_state(q) {
            Ok(s) => state.cluster_quotas.push(s),
            Err(e) => {
                let e: Vec<String> = e.iter().map(ToString::to_string).collect();
                errors.push(format!("KarmadaClusterQuota {name}: {}", e.join("; ")));
            }
        }
    }
    clusters
}

/// For each template's namespace not yet known, the cluster quotas that select it.
fn select_namespaces(
    inputs: &Inputs,
    current: &Current,
    clusters: &BTreeMap<String, KarmadaClusterQuota>,
    state: &mut whatif::Current,
) {
    for t in &inputs.templates {
        let ns = &t.metadata.namespace;
        if ns.is_empty() || state.selected.contains_key(ns) {
            continue;
        }
        let names: Vec<String> = clusters
            .iter()
            .filter(|(_, q)| selects(q, ns, current.namespace_labels.get(ns)))
            .map(|(name, _)| name.clone())
            .collect();
        if !names.is_empty() {
            state.selected.insert(ns.clone(), names);
        }
    }
}

/// The what-if's outcome as the verdict: each quota the change touches or the manifests
/// define, the refusals, and what was not selected, noted or failed.
fn report_outcome(inputs: &Inputs, outcome: whatif::Outcome, report: &mut Verdict) {
    let defined = |ns: &str, name: &str| {
        if ns.is_empty() {
            inputs
                .cluster_quotas
                .iter()
                .any(|m| m.metadata.name.as_deref() == Some(name))
        } else {
            inputs
                .quotas
                .iter()
                .any(|m| key(m) == (ns.to_owned(), name.to_owned()))
        }
    };
    for c in &outcome.quotas {
        let touched = !c.added.is_empty() || c.refused;
        if !touched && !defined(&c.namespace, &c.name) {
            continue;
        }
        report.quotas.push(QuotaOutcome {
            namespace: c.namespace.clone(),
            cluster: c.cluster,
            name: c.name.clone(),
            current: strings(&c.current),
            added: strings(&c.added),
            after: strings(&c.after()),
            hard: strings(&c.hard),
            fits: c.fits(),
        });
    }
    report.refused = outcome
        .refused
        .iter()
        .map(|r| Refusal {
            template: r.template.clone(),
            quota: if r.denial.cluster {
                r.denial.quota.clone()
            } else {
                format!("{}/{}", r.namespace, r.denial.quota)
            },
            message: r.denial.message.clone(),
            charge: strings(&r.charge),
        })
        .collect();
    report.unselected = outcome.unselected;
    report.notes = outcome.notes;
    report.errors.extend(outcome.errors);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A Deployment `web` of 3 replicas whose pods ask 2 cpu: at pod level
    /// (`spec.resources`, containers asking nothing) or in its container.
    fn deployment(pod_level: bool) -> Value {
        let (pod, container) = if pod_level {
            (json!({"requests": {"cpu": "2"}}), json!({}))
        } else {
            (json!(null), json!({"requests": {"cpu": "2"}}))
        };
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"replicas": 3, "template": {"spec": {
                "resources": pod,
                "containers": [{"name": "app", "image": "app", "resources": container}]
            }}}
        })
    }

    fn inputs(template: Value, hard: Value) -> Inputs {
        let mut inputs = Inputs::default();
        let docs = vec![
            json!({
                "apiVersion": "quota.karmada.io/v1alpha1", "kind": "KarmadaQuota",
                "metadata": {"name": "compute", "namespace": "team-a"},
                "spec": {"hard": hard}
            }),
            json!({
                "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
                "metadata": {"name": "web", "namespace": "team-a"},
                "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}]}
            }),
            template,
        ];
        inputs.add_documents("test", docs).expect("documents");
        inputs
    }

    #[test]
    fn pod_level_requests_are_priced_as_karmadas_binding_carries_them() {
        // Karmada v1.18 fills replicaRequirements from the containers only
        // (AddPodTemplateRequest): the binding of the pod-level Deployment carries no cpu,
        // so the webhook charges its pods alone, and a quota tracking cpu refuses it.
        let hard = json!({"pods": "10", "requests.cpu": "10"});
        let v = check(
            &inputs(deployment(false), hard.clone()),
            &Current::default(),
        );
        assert!(v.fits(), "{v:?}");
        assert_eq!(v.quotas[0].added["pods"], "3");
        assert_eq!(
            v.quotas[0].added["requests.cpu"], "6",
            "3 × 2 in the container"
        );
        assert!(v.notes.is_empty(), "{v:?}");
        let v = check(&inputs(deployment(true), hard), &Current::default());
        assert_eq!(v.refused.len(), 1, "{v:?}");
        let refusal = &v.refused[0];
        assert_eq!(refusal.charge.get("pods").map(String::as_str), Some("3"));
        assert_eq!(refusal.charge.get("requests.cpu"), None, "{refusal:?}");
        assert!(
            refusal.message.contains("must specify"),
            "{}",
            refusal.message
        );
        assert_eq!(v.notes.len(), 1, "{v:?}");
        let text = crate::check_table::render(&v);
        assert!(
            text.contains(
                "note: Deployment team-a/web asks cpu at pod level (spec.resources.requests): \
                 Karmada v1.18 leaves pod-level requests out of the binding, so quotas charge \
                 its containers' requests while the member clusters count the pod level"
            ),
            "{text}"
        );
    }
}
