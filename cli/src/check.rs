//! The offline what-if (`check`): given manifests (quotas, policies, templates, clusters)
//! and the current usage, what would the change add to each quota, and would it fit?
//!
//! ```text
//!  manifests ─► Inputs { quotas, policies, templates, clusters }
//!  usage (cluster | file | none) ─► current quotas (used + reservations), existing bindings
//!        │ each template selected by a policy of the manifests:
//!        │   core::policy::Policy::binding_for (Karmada's interpreter + placement)
//!        │   old charge = its existing binding's (the increase is what counts)
//!        ▼
//!  core::decision::decide_batch per namespace, a dry run — the webhook's own rule
//!        ▼
//!  Report: per quota current / added / after / hard, and the refusals with their message
//! ```

use std::collections::BTreeMap;

use karmada_quota_core::ResourceList;
use karmada_quota_core::binding::ResourceBindingSpec;
use karmada_quota_core::decision::{AdmissionRequest, Decision, decide_batch};
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_core::placement::ClusterFacts;
use karmada_quota_core::policy::{PROPAGATION_POLICY, Policy};
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::template::Template;
use karmada_quota_core::usage::{BindingCharge, builtin_plural, count_name};
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::{parse_status, validate_spec};
use serde::Serialize;
use serde_json::Value;

/// What the manifests hold, sorted by kind.
#[derive(Clone, Debug, Default)]
pub struct Inputs {
    /// KarmadaQuotas (their spec replaces the cluster's).
    pub quotas: Vec<KarmadaQuota>,
    /// PropagationPolicies and ClusterPropagationPolicies.
    pub policies: Vec<Policy>,
    /// Everything else: resource templates.
    pub templates: Vec<Template>,
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
                ("policy.karmada.io", "PropagationPolicy" | "ClusterPropagationPolicy") => self
                    .policies
                    .push(serde_json::from_value(doc).map_err(|e| err(format!("{kind}: {e}")))?),
                ("cluster.karmada.io", "Cluster") => self.clusters.push(cluster_facts(&doc)),
                _ => self
                    .templates
                    .push(serde_json::from_value(doc).map_err(|e| err(format!("{kind}: {e}")))?),
            }
        }
        Ok(())
    }
}

/// A Cluster object's name, labels, provider, region and zone.
pub fn cluster_facts(doc: &Value) -> ClusterFacts {
    let s = |p: &str| {
        doc.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    ClusterFacts {
        name: s("/metadata/name"),
        labels: doc
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default(),
        provider: s("/spec/provider"),
        region: s("/spec/region"),
        zone: {
            let zone = s("/spec/zone");
            if zone.is_empty() {
                s("/spec/zones/0")
            } else {
                zone
            }
        },
    }
}

/// The state the change is checked against.
#[derive(Clone, Debug, Default)]
pub struct Current {
    /// Quotas as they are (status used and reservations; spec when the manifests have none).
    pub quotas: Vec<KarmadaQuota>,
    /// Member clusters.
    pub clusters: Vec<ClusterFacts>,
    /// Existing bindings (namespace → specs), for the increase over what runs.
    pub bindings: BTreeMap<String, Vec<ResourceBindingSpec>>,
}

/// One quota's outcome.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaOutcome {
    /// Namespace.
    pub namespace: String,
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
    /// The quota that refuses it.
    pub quota: String,
    /// The webhook's message.
    pub message: String,
}

/// The whole answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Per quota touched or defined by the change, by namespace and name.
    pub quotas: Vec<QuotaOutcome>,
    /// Templates the webhook would refuse.
    pub refused: Vec<Refusal>,
    /// Templates no policy of the manifests selects (not charged here).
    pub unselected: Vec<String>,
    /// Problems reading a template or quota (each also makes the check fail).
    pub errors: Vec<String>,
}

impl Report {
    /// Whether everything fits.
    pub fn fits(&self) -> bool {
        self.refused.is_empty() && self.errors.is_empty()
    }
}

fn strings(list: &ResourceList) -> BTreeMap<String, String> {
    list.iter()
        .map(|(n, q)| (n.to_owned(), q.to_string()))
        .collect()
}

fn describe(t: &Template) -> String {
    format!("{} {}/{}", t.kind, t.metadata.namespace, t.metadata.name)
}

/// The policy Karmada would apply to `t`: the first PropagationPolicy of its namespace that
/// selects it, else the first ClusterPropagationPolicy (a namespaced policy wins).
fn policy_for<'a>(policies: &'a [Policy], t: &Template) -> Option<&'a Policy> {
    policies
        .iter()
        .find(|p| p.kind == PROPAGATION_POLICY && p.selects(t))
        .or_else(|| {
            policies
                .iter()
                .find(|p| p.kind != PROPAGATION_POLICY && p.selects(t))
        })
}

/// One template's charge: (description, binding name, old charge, new charge).
type Charge = (String, String, Option<BindingCharge>, BindingCharge);

/// Check `inputs` against `current`: a dry run of the webhook's decision per namespace.
pub fn check(inputs: &Inputs, current: &Current) -> Report {
    let mut report = Report::default();
    // Quotas: the manifests' spec wins; status from the current state.
    let mut quotas: BTreeMap<(String, String), KarmadaQuota> = BTreeMap::new();
    for q in &current.quotas {
        let key = (
            q.metadata.namespace.clone().unwrap_or_default(),
            q.metadata.name.clone().unwrap_or_default(),
        );
        quotas.insert(key, q.clone());
    }
    for q in &inputs.quotas {
        let key = (
            q.metadata.namespace.clone().unwrap_or_default(),
            q.metadata.name.clone().unwrap_or_default(),
        );
        let status = quotas.get(&key).and_then(|c| c.status.clone());
        let mut q = q.clone();
        q.status = status;
        quotas.insert(key, q);
    }
    let mut states: BTreeMap<String, Vec<QuotaState>> = BTreeMap::new();
    for ((ns, name), q) in &quotas {
        let spec = match validate_spec(&q.spec) {
            Ok(s) => s,
            Err(errors) => {
                let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
                report
                    .errors
                    .push(format!("KarmadaQuota {ns}/{name}: {}", errors.join("; ")));
                continue;
            }
        };
        let stored = parse_status(q.status.as_ref());
        if !stored.errors.is_empty() {
            let errors: Vec<String> = stored.errors.iter().map(ToString::to_string).collect();
            report
                .errors
                .push(format!("KarmadaQuota {ns}/{name}: {}", errors.join("; ")));
            continue;
        }
        // A quota the controller has not synced yet (or a new one) starts from zero.
        let mut used = stored.used.unwrap_or_default();
        for (n, _) in spec.hard.iter() {
            if used.get(n).is_none() {
                used.insert(n, karmada_quota_core::Quantity::ZERO);
            }
        }
        states.entry(ns.clone()).or_default().push(QuotaState {
            name: name.clone(),
            spec,
            used: Some(used),
            reservations: stored.reservations,
        });
    }
    let before: BTreeMap<(String, String), ResourceList> = states
        .iter()
        .flat_map(|(ns, qs)| {
            qs.iter().map(move |q| {
                (
                    (ns.clone(), q.name.clone()),
                    effective_usage(
                        q.used.as_ref().unwrap_or(&ResourceList::new()),
                        &q.reservations,
                        None,
                    )
                    .restricted_to(&q.spec.hard),
                )
            })
        })
        .collect();

    let mut clusters = current.clusters.clone();
    for c in &inputs.clusters {
        if !clusters.iter().any(|k| k.name == c.name) {
            clusters.push(c.clone());
        }
    }

    // Charges per namespace, in manifest order.
    let mut charges: BTreeMap<String, Vec<Charge>> = BTreeMap::new();
    for t in &inputs.templates {
        let Some(policy) = policy_for(&inputs.policies, t) else {
            report.unselected.push(describe(t));
            continue;
        };
        let spec = match policy.binding_for(t, &clusters) {
            Ok(s) => s,
            Err(e) => {
                report.errors.push(e.to_string());
                continue;
            }
        };
        let count = builtin_plural(&t.api_version, &t.kind).map(|p| count_name(&t.api_version, p));
        let new = BindingCharge::compute(&spec, count.as_deref());
        let old = current
            .bindings
            .get(&t.metadata.namespace)
            .and_then(|specs| {
                specs.iter().find(|b| {
                    b.resource.api_version == t.api_version
                        && b.resource.kind == t.kind
                        && b.resource.name == t.metadata.name
                })
            })
            .map(|b| BindingCharge::compute(b, count.as_deref()));
        let binding = format!("{}-{}", t.metadata.name, t.kind.to_lowercase());
        charges
            .entry(t.metadata.namespace.clone())
            .or_default()
            .push((describe(t), binding, old, new));
    }

    let mut added: BTreeMap<(String, String), ResourceList> = BTreeMap::new();
    let mut refused_by: BTreeMap<(String, String), bool> = BTreeMap::new();
    for (ns, list) in &charges {
        let Some(ns_states) = states.get_mut(ns) else {
            continue; // no quota in the namespace: nothing to check
        };
        let uids: Vec<String> = (0..list.len()).map(|i| format!("what-if-{i}")).collect();
        let reqs: Vec<AdmissionRequest<'_>> = list
            .iter()
            .zip(&uids)
            .map(|((_, binding, old, new), uid)| AdmissionRequest {
                namespace: ns,
                name: binding,
                uid,
                generation: 1,
                old: old.as_ref(),
                new,
                now: 0,
                reservation_ttl: 0,
                max_reservations: usize::MAX,
            })
            .collect();
        for ((template, ..), decision) in list.iter().zip(decide_batch(ns_states, &reqs)) {
            match decision {
                Decision::Allow(entries) => {
                    for (quota, entry) in entries {
                        added
                            .entry((ns.clone(), quota))
                            .or_default()
                            .add_assign(&entry.reserved);
                    }
                }
                Decision::Deny(d) => {
                    refused_by.insert((ns.clone(), d.quota.clone()), true);
                    report.refused.push(Refusal {
                        template: template.clone(),
                        quota: format!("{ns}/{}", d.quota),
                        message: d.message,
                    });
                }
            }
        }
    }

    for ((ns, name), q) in &quotas {
        let key = (ns.clone(), name.clone());
        let Some(current) = before.get(&key) else {
            continue; // invalid: reported
        };
        let touched = added.contains_key(&key) || refused_by.contains_key(&key);
        let defined = inputs.quotas.iter().any(|m| {
            m.metadata.namespace.as_deref() == Some(ns) && m.metadata.name.as_deref() == Some(name)
        });
        if !touched && !defined {
            continue;
        }
        let plus = added.get(&key).cloned().unwrap_or_default();
        let hard = karmada_quota_crds::convert::list_from_api(&q.spec.hard, "spec.hard")
            .unwrap_or_default();
        report.quotas.push(QuotaOutcome {
            namespace: ns.clone(),
            name: name.clone(),
            current: strings(current),
            added: strings(&plus),
            after: strings(&current.plus(&plus)),
            hard: strings(&hard),
            fits: !refused_by.contains_key(&key) && current.plus(&plus).exceeds(&hard).is_empty(),
        });
    }
    report
}
