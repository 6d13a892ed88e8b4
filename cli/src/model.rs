//! What the plugin shows of a KarmadaQuota, computed from the object alone (spec and
//! status): per resource used, reserved (Σ pending reservations), hard and the share of
//! hard in use; per member cluster what Karmada placed and what the member runs.

use std::collections::BTreeMap;

use karmada_quota_core::ledger::effective_usage;
use karmada_quota_core::{Quantity, ResourceList};
use karmada_quota_crds::convert::{list_from_api, parse_status, stored_list_from_api};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use kube::ResourceExt;
use serde::Serialize;

/// One quota, ready to print.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaSummary {
    /// metadata.namespace.
    pub namespace: String,
    /// metadata.name.
    pub name: String,
    /// The scope selector, one `PriorityClass <op> (<values>)` per requirement.
    pub scopes: Vec<String>,
    /// One row per hard resource, by name.
    pub resources: Vec<ResourceRow>,
    /// Per member cluster, by name.
    pub clusters: Vec<ClusterRow>,
    /// Pending reservations.
    pub pending_reservations: usize,
    /// Conditions as stored.
    pub conditions: Vec<ConditionRow>,
    /// What could not be read (a status value that does not parse).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// A KarmadaClusterQuota: its namespace selector (`business=a, env notin (dev)`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// A KarmadaClusterQuota: the usage of each selected namespace (`status.namespaces`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceRow>,
    /// `spec.drainingReplicas` when set (`Show` or `Count`): whether replicas draining
    /// after a failover count in `used`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining_replicas: Option<String>,
}

/// One namespace a KarmadaClusterQuota selects.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceRow {
    /// The namespace.
    pub name: String,
    /// Its usage per hard resource.
    pub used: BTreeMap<String, String>,
}

/// One resource of a quota.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRow {
    /// The resource name (`requests.cpu`).
    pub resource: String,
    /// `status.used` (`None`: not computed yet by the controller).
    pub used: Option<String>,
    /// Σ pending reservations of this resource.
    pub reserved: String,
    /// `spec.hard`.
    pub hard: String,
    /// (used + reserved) / hard × 100, when used is known and hard is not zero.
    pub percent: Option<f64>,
}

/// One member cluster of a quota.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRow {
    /// Member cluster name.
    pub name: String,
    /// Per resource: what Karmada placed there.
    pub placed: BTreeMap<String, String>,
    /// Per resource: what the member really runs (`None`: not measured).
    pub observed: Option<BTreeMap<String, String>>,
    /// The resources the member runs more of than Karmada placed there (plus what drains
    /// there after a failover: old replicas are expected while they drain).
    pub drift: Vec<String>,
    /// Failover: per resource, what still drains there after Karmada moved workloads off
    /// the member (`None`: nothing drains).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<BTreeMap<String, String>>,
    /// Replicas of unknown count drain there.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining_unknown: bool,
}

/// A condition of the quota.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionRow {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// True / False / Unknown.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
}

/// `part / whole × 100` rounded to a tenth; `None` for a zero whole.
fn percent(part: Quantity, whole: Quantity) -> Option<f64> {
    part.percent_of(whole).map(|p| (p * 10.0).round() / 10.0)
}

impl QuotaSummary {
    /// Read a quota: spec.hard, status.used, reservations, clusters, conditions. Values
    /// that do not parse are reported in `errors` and shown as they are.
    pub fn of(q: &KarmadaQuota) -> QuotaSummary {
        let mut errors = Vec::new();
        let hard = list_from_api(&q.spec.hard, "spec.hard").unwrap_or_else(|e| {
            errors.push(e.to_string());
            ResourceList::new()
        });
        let stored = parse_status(q.status.as_ref());
        errors.extend(stored.errors.iter().map(ToString::to_string));
        // Σ pending entries: core's effective usage over an empty `used`.
        let reserved = effective_usage(&ResourceList::new(), &stored.reservations, None);
        let resources = hard
            .iter()
            .map(|(name, limit)| {
                let used = stored.used.as_ref().and_then(|u| u.get(name).copied());
                let pending = reserved.get_or_zero(name);
                ResourceRow {
                    resource: name.to_owned(),
                    used: used.map(|u| u.to_string()),
                    reserved: pending.to_string(),
                    hard: limit.to_string(),
                    percent: used.and_then(|u| percent(u.saturating_add(pending), *limit)),
                }
            })
            .collect();
        let status = q.status.clone().unwrap_or_default();
        let clusters = status
            .clusters
            .iter()
            .map(|c| {
                let placed = stored_list_from_api(&c.used, "used").unwrap_or_default();
                let observed = c
                    .observed
                    .as_ref()
                    .map(|o| stored_list_from_api(o, "observed").unwrap_or_default());
                let draining = c
                    .draining
                    .as_ref()
                    .map(|d| stored_list_from_api(d, "draining").unwrap_or_default());
                let drift = karmada_quota_core::status::member_drift(
                    &placed,
                    observed.as_ref(),
                    draining.as_ref(),
                    c.draining_unknown,
                )
                .names()
                .map(str::to_owned)
                .collect();
                ClusterRow {
                    name: c.name.clone(),
                    placed: strings(&placed),
                    observed: observed.as_ref().map(strings),
                    drift,
                    draining: draining.as_ref().map(strings),
                    draining_unknown: c.draining_unknown,
                }
            })
            .collect();
        let scopes = q
            .spec
            .scope_selector
            .iter()
            .flat_map(|s| s.match_expressions.iter())
            .map(|e| {
                if e.values.is_empty() {
                    format!("{} {}", e.scope_name, e.operator)
                } else {
                    format!("{} {} ({})", e.scope_name, e.operator, e.values.join(", "))
                }
            })
            .collect();
        QuotaSummary {
            namespace: q.namespace().unwrap_or_default(),
            name: q.name_any(),
            scopes,
            resources,
            clusters,
            pending_reservations: karmada_quota_core::fence::pending(&stored.reservations).count()
                + stored.unparsed.len(),
            conditions: status
                .conditions
                .iter()
                .map(|c| ConditionRow {
                    type_: c.type_.clone(),
                    status: c.status.clone(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                })
                .collect(),
            errors,
            selector: None,
            namespaces: Vec::new(),
            draining_replicas: q.spec.draining_replicas.clone(),
        }
    }

    /// A KarmadaClusterQuota's summary: as a KarmadaQuota's (its spec and status have the
    /// same fields), no namespace, plus its selector and per-namespace usage.
    pub fn of_cluster(q: &KarmadaClusterQuota) -> QuotaSummary {
        let shape = KarmadaQuota {
            metadata: q.metadata.clone(),
            spec: q.spec.quota.clone(),
            status: q.status.as_ref().map(|s| s.quota.clone()),
        };
        let mut s = Self::of(&shape);
        s.namespace = String::new();
        s.selector = Some(q.spec.namespace_selector.as_ref().map_or_else(
            || "<none>".to_owned(),
            |sel| {
                let sel = karmada_quota_crds::convert::selector_from_api(sel);
                let mut parts: Vec<String> = sel
                    .match_labels
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                parts.extend(sel.match_expressions.iter().map(|r| {
                    if r.values.is_empty() {
                        format!("{} {}", r.key, r.operator)
                    } else {
                        format!("{} {} ({})", r.key, r.operator, r.values.join(", "))
                    }
                }));
                parts.join(", ")
            },
        ));
        s.namespaces = q
            .status
            .iter()
            .flat_map(|st| st.namespaces.iter())
            .map(|n| NamespaceRow {
                name: n.name.clone(),
                used: n
                    .used
                    .iter()
                    .map(|(k, v)| (k.clone(), v.0.clone()))
                    .collect(),
            })
            .collect();
        s
    }

    /// The largest share of hard in use over the quota's resources.
    pub fn pressure(&self) -> Option<f64> {
        self.resources
            .iter()
            .filter_map(|r| r.percent)
            .fold(None, |acc: Option<f64>, p| {
                Some(acc.map_or(p, |a| a.max(p)))
            })
    }

    /// The member clusters' names.
    pub fn cluster_names(&self) -> Vec<&str> {
        self.clusters.iter().map(|c| c.name.as_str()).collect()
    }

    /// Whether anything drains in a member after a failover.
    pub fn draining(&self) -> bool {
        self.clusters
            .iter()
            .any(|c| c.draining.is_some() || c.draining_unknown)
    }
}

fn strings(list: &ResourceList) -> BTreeMap<String, String> {
    list.iter()
        .map(|(n, v)| (n.to_owned(), v.to_string()))
        .collect()
}
