//! The dashboard's own data model: a [`Snapshot`] of every quota and member cluster, fed by
//! whoever runs the dashboard (the controller computes each quota's view as this
//! [`Quota`]: one model from its reconcile to the page), and the derived numbers every
//! page, the JSON API and the CSV export share.
//!
//! The share of a resource is `(used + reserved) / hard`, rounded to a tenth of a percent —
//! the same number `kubectl karmada-quota get` prints for the quota's status.

use std::collections::BTreeMap;

use karmada_quota_core::top::BindingUsage;
use karmada_quota_core::{Quantity, ResourceList};
use serde::Serialize;

/// Share of hard from which a resource is shown as a warning.
pub const WARNING_PERCENT: f64 = 85.0;
/// Share of hard from which a resource is shown as critical.
pub const CRITICAL_PERCENT: f64 = 95.0;

/// Everything the dashboard shows, as of one moment.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    /// When the snapshot was taken (Unix seconds).
    pub generated_at: i64,
    /// Whether the replica serving it holds the leader Lease (followers compute the same).
    pub leader: bool,
    /// Member clusters, by name.
    pub members: Vec<Member>,
    /// Quotas, by namespace then name.
    pub quotas: Vec<Quota>,
    /// Namespace → team (the value of the team label on the namespace), when known.
    pub teams: BTreeMap<String, String>,
}

/// Whether a member cluster can be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Reach {
    /// First list in progress.
    Connecting,
    /// Pods listed and watched.
    Reachable,
    /// The last attempt failed; retried with backoff.
    Unreachable,
}

/// One member cluster.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Member {
    /// Member cluster name.
    pub name: String,
    /// Reachability.
    pub reach: Reach,
    /// The error of the last failed attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Since when (Unix seconds) the data of the member is no longer fresh: `None` while it
    /// is watched live, else the last moment it was seen reachable (or when it was first
    /// seen, if never).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale_since: Option<i64>,
}

impl Member {
    /// How old the member's data is at `now` (seconds; 0 while watched live).
    pub fn age(&self, now: i64) -> i64 {
        self.stale_since.map_or(0, |s| (now - s).max(0))
    }
}

/// One quota as computed.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Limits.
    pub hard: ResourceList,
    /// Usage of the bindings Karmada placed, summed over clusters.
    pub used: ResourceList,
    /// Σ pending reservations (admitted, not yet observed).
    pub reserved: ResourceList,
    /// Per member cluster.
    pub clusters: Vec<ClusterUsage>,
    /// Pending reservations.
    pub reservations: Vec<Reservation>,
    /// Conditions.
    pub conditions: Vec<Condition>,
    /// Number of bindings the quota matches.
    pub bindings: usize,
    /// Why nothing was computed (an invalid spec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it was computed (Unix seconds).
    pub computed_at: i64,
    /// Recent admission denials against the quota, newest first.
    pub denials: Vec<Denial>,
    /// The bindings that use the largest share of hard, highest first (core ranks them).
    pub top_bindings: Vec<BindingUsage>,
    /// A KarmadaClusterQuota (`namespace` empty): the namespaces it selects, sorted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// A KarmadaClusterQuota: each selected namespace's share of `used`.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shares: BTreeMap<String, ResourceList>,
    /// The waiting line: present while the quota queues what does not fit
    /// (`spec.admission.mode: Queue`) or bindings still wait in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<Line>,
}

/// A quota's waiting line (docs/queueing.md), as the leader last wrote it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Line {
    /// Whether the quota queues now (`false`: switched back to refusal while some wait).
    pub queueing: bool,
    /// `StrictFIFO` or `BestEffortFIFO`.
    pub order: String,
    /// How many wait in all (`waiting` lists the head of the line only).
    pub total: i64,
    /// The head of the line, in order.
    pub waiting: Vec<Waiting>,
}

/// One binding waiting in a line.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Waiting {
    /// 1-based place in the line.
    pub position: i64,
    /// The binding's namespace.
    pub namespace: String,
    /// The ResourceBinding's name.
    pub name: String,
    /// Its scheduling priority.
    pub priority: i32,
    /// What it asks of the quota.
    pub asks: ResourceList,
    /// What the quota lacks for it now (empty: it fits here and waits for those ahead or
    /// for another quota).
    pub short: ResourceList,
    /// When it joined the line (Unix seconds).
    pub since: i64,
    /// Why it cannot be released whatever room there is, when that is so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck: Option<String>,
}

impl Quota {
    /// What a viewer allowed in some of the namespaces a cluster quota selects sees of
    /// it: its limits and totals, the shares of `allowed` namespaces only, and nothing that
    /// names another namespace's objects (reservations, top bindings, denials, waiting
    /// bindings: the line keeps its total and the positions of those shown). `None`
    /// when it selects none of them.
    pub fn share_for(&self, allowed: impl Fn(&str) -> bool) -> Option<Quota> {
        let namespaces: Vec<String> = self
            .namespaces
            .iter()
            .filter(|ns| allowed(ns))
            .cloned()
            .collect();
        if namespaces.is_empty() {
            return None;
        }
        Some(Quota {
            shares: self
                .shares
                .iter()
                .filter(|(ns, _)| allowed(ns))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            line: self.line.as_ref().map(|line| Line {
                waiting: line
                    .waiting
                    .iter()
                    .filter(|w| allowed(&w.namespace))
                    .cloned()
                    .collect(),
                ..line.clone()
            }),
            namespaces,
            reservations: Vec::new(),
            top_bindings: Vec::new(),
            denials: Vec::new(),
            ..self.clone()
        })
    }
}

/// A quota's usage in one member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUsage {
    /// Member cluster name.
    pub name: String,
    /// What Karmada placed there.
    pub placed: ResourceList,
    /// What the member really runs (`None`: not measured).
    pub observed: Option<ResourceList>,
    /// Failover: what still drains there after Karmada moved workloads off the member
    /// (`None`: nothing drains).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<ResourceList>,
    /// Replicas of unknown count drain there (an eviction task that names none).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draining_unknown: bool,
}

impl ClusterUsage {
    /// The resources the member runs more of than Karmada placed there plus what drains
    /// there (old replicas of a failover are expected); none where an unknown count drains.
    pub fn drift(&self) -> Vec<String> {
        karmada_quota_core::status::member_drift(
            &self.placed,
            self.observed.as_ref(),
            self.draining.as_ref(),
            self.draining_unknown,
        )
        .names()
        .map(str::to_owned)
        .collect()
    }
}

/// A pending reservation.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// The binding admitted.
    pub binding: String,
    /// The binding's uid.
    pub uid: String,
    /// The admitted increase.
    pub reserved: ResourceList,
    /// When it lapses (RFC 3339).
    pub expires: String,
}

/// A condition of the quota.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// True / False / Unknown.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Last flip (RFC 3339).
    pub since: String,
}

/// A Warning event on the quota: an admission denial (reason `QuotaExceeded`), drift, an
/// unreachable member…
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Denial {
    /// When (RFC 3339).
    pub time: String,
    /// The event's message (what was refused and why).
    pub message: String,
    /// How many times it repeated.
    pub count: u32,
    /// The event's uid (a repeated event updates its entry), not shown.
    #[serde(skip)]
    pub uid: String,
}

/// How close a resource is to its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Level {
    /// Below the warning threshold (or no limit).
    Ok,
    /// At or above [`WARNING_PERCENT`].
    Warning,
    /// At or above [`CRITICAL_PERCENT`].
    Critical,
}

impl Level {
    /// The level of a share of hard.
    pub fn of(percent: Option<f64>) -> Level {
        match percent {
            Some(p) if p >= CRITICAL_PERCENT => Level::Critical,
            Some(p) if p >= WARNING_PERCENT => Level::Warning,
            _ => Level::Ok,
        }
    }

    /// CSS class / JSON name.
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Ok => "ok",
            Level::Warning => "warning",
            Level::Critical => "critical",
        }
    }
}

/// One resource of a quota with its derived numbers.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRow {
    /// Resource name (`requests.cpu`, `requests.nvidia.com/gpu`).
    pub resource: String,
    /// Used (placed bindings).
    pub used: String,
    /// Pending reservations.
    pub reserved: String,
    /// Limit.
    pub hard: String,
    /// `max(0, hard − used − reserved)`.
    pub free: String,
    /// `(used + reserved) / hard × 100`, to a tenth; `None` for a zero limit.
    pub percent: Option<f64>,
    /// Bar width of used, in percent of the bar (0–100).
    pub used_width: f64,
    /// Bar width of reserved, in percent of the bar (0–100 − used_width).
    pub reserved_width: f64,
    /// Warning level of `percent`.
    pub level: Level,
    /// An extended resource (a GPU or any other `domain/name`).
    pub extended: bool,
}

impl ResourceRow {
    /// The `%` text: `82.5%`, `-` without a limit.
    pub fn percent_text(&self) -> String {
        self.percent
            .map_or_else(|| "-".to_owned(), |p| format!("{p}%"))
    }
}

/// `part / whole × 100` unrounded (core's share); `None` for a zero whole.
fn ratio(part: Quantity, whole: Quantity) -> Option<f64> {
    part.percent_of(whole)
}

/// Rounded to a tenth (as the plugin prints).
fn tenth(p: f64) -> f64 {
    (p * 10.0).round() / 10.0
}

/// Whether a resource name is an extended resource (`nvidia.com/gpu`,
/// `requests.example.com/fpga`) rather than a built-in one.
pub fn is_extended(resource: &str) -> bool {
    resource.contains('/')
}

impl Quota {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The hard resources in the order every table of the quota shows them: extended
    /// resources (GPUs…) first, then by name.
    pub fn resource_order(&self) -> Vec<(&str, &Quantity)> {
        let mut order: Vec<(&str, &Quantity)> =
            self.hard.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
        order.sort_by(|(a, _), (b, _)| is_extended(b).cmp(&is_extended(a)).then_with(|| a.cmp(b)));
        order
    }

    /// One row per hard resource, in [`Self::resource_order`].
    pub fn rows(&self) -> Vec<ResourceRow> {
        self.resource_order()
            .into_iter()
            .map(|(name, hard)| {
                let used = self.used.get_or_zero(name);
                let reserved = self.reserved.get_or_zero(name);
                let taken = used.saturating_add(reserved);
                let used_width = ratio(used, *hard).unwrap_or(0.0).clamp(0.0, 100.0);
                let reserved_width =
                    ratio(taken, *hard).unwrap_or(0.0).clamp(0.0, 100.0) - used_width;
                let percent = ratio(taken, *hard).map(tenth);
                ResourceRow {
                    resource: name.to_owned(),
                    used: used.to_string(),
                    reserved: reserved.to_string(),
                    hard: hard.to_string(),
                    free: hard.sub_clamped(taken).to_string(),
                    percent,
                    used_width: tenth(used_width),
                    reserved_width: tenth(reserved_width.max(0.0)),
                    level: Level::of(percent),
                    extended: is_extended(name),
                }
            })
            .collect()
    }

    /// The largest share of hard in use over the quota's resources (0 when none).
    pub fn pressure(&self) -> f64 {
        self.rows()
            .iter()
            .filter_map(|r| r.percent)
            .fold(0.0, f64::max)
    }

    /// The worst level over the quota's resources.
    pub fn level(&self) -> Level {
        Level::of(Some(self.pressure()))
    }

    /// Whether any member cluster runs more than Karmada placed there.
    pub fn drifting(&self) -> bool {
        self.clusters.iter().any(|c| !c.drift().is_empty())
    }
}

impl Snapshot {
    /// The quota `namespace/name`.
    pub fn quota(&self, namespace: &str, name: &str) -> Option<&Quota> {
        self.quotas
            .iter()
            .find(|q| q.namespace == namespace && q.name == name)
    }

    /// The team of a namespace, when its namespace carries the team label.
    pub fn team(&self, namespace: &str) -> Option<&str> {
        self.teams.get(namespace).map(String::as_str)
    }

    /// The team of a quota: its namespace's; for a KarmadaClusterQuota, the team every
    /// namespace it selects belongs to (a business quota over one team's namespaces), if
    /// they share one.
    pub fn team_of(&self, q: &Quota) -> Option<&str> {
        if !q.namespace.is_empty() {
            return self.team(&q.namespace);
        }
        let mut teams = q.namespaces.iter().map(|ns| self.team(ns));
        let first = teams.next()??;
        teams.all(|t| t == Some(first)).then_some(first)
    }

    /// Only the quotas of the namespaces `allowed` accepts (what one viewer may see).
    pub fn restricted(&self, allowed: impl Fn(&str) -> bool) -> Snapshot {
        Snapshot {
            quotas: self
                .quotas
                .iter()
                .filter_map(|q| {
                    if q.namespace.is_empty() {
                        // A cluster quota: the share of the viewer's namespaces it selects.
                        q.share_for(&allowed)
                    } else {
                        allowed(&q.namespace).then(|| q.clone())
                    }
                })
                .collect(),
            teams: self
                .teams
                .iter()
                .filter(|(ns, _)| allowed(ns))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn rl(pairs: &[(&str, &str)]) -> ResourceList {
        ResourceList(
            pairs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), Quantity::parse(v).unwrap()))
                .collect(),
        )
    }

    fn quota() -> Quota {
        Quota {
            namespace: "team-a".into(),
            name: "q".into(),
            hard: rl(&[
                ("requests.cpu", "10"),
                ("requests.nvidia.com/gpu", "4"),
                ("pods", "0"),
            ]),
            used: rl(&[("requests.cpu", "8"), ("requests.nvidia.com/gpu", "4")]),
            reserved: rl(&[("requests.cpu", "500m")]),
            ..Quota::default()
        }
    }

    #[test]
    fn rows_put_extended_resources_first_and_compute_the_plugins_share() {
        let rows = quota().rows();
        let names: Vec<_> = rows.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(names, ["requests.nvidia.com/gpu", "pods", "requests.cpu"]);
        let cpu = &rows[2];
        assert_eq!(cpu.percent, Some(85.0));
        assert_eq!(cpu.level, Level::Warning);
        assert_eq!(cpu.used_width, 80.0);
        assert_eq!(cpu.reserved_width, 5.0);
        assert_eq!(cpu.free, "1500m");
        assert_eq!(rows[0].level, Level::Critical);
        assert_eq!(rows[1].percent, None);
        assert_eq!(rows[1].percent_text(), "-");
        assert_eq!(rows[1].level, Level::Ok);
    }

    #[test]
    fn bars_never_overflow_when_over_the_limit() {
        let q = Quota {
            hard: rl(&[("pods", "4")]),
            used: rl(&[("pods", "5")]),
            reserved: rl(&[("pods", "1")]),
            ..Quota::default()
        };
        let r = &q.rows()[0];
        assert_eq!(r.percent, Some(150.0));
        assert_eq!(r.used_width, 100.0);
        assert_eq!(r.reserved_width, 0.0);
        assert_eq!(r.free, "0");
    }

    #[test]
    fn pressure_is_the_worst_resource_and_drift_is_observed_over_placed() {
        let mut q = quota();
        assert_eq!(q.pressure(), 100.0);
        assert_eq!(q.level(), Level::Critical);
        q.clusters = vec![
            ClusterUsage {
                name: "m1".into(),
                placed: rl(&[("pods", "2")]),
                observed: Some(rl(&[("pods", "3")])),
                ..ClusterUsage::default()
            },
            ClusterUsage {
                name: "m2".into(),
                placed: rl(&[("pods", "2")]),
                observed: None,
                ..ClusterUsage::default()
            },
        ];
        assert_eq!(q.clusters[0].drift(), ["pods"]);
        assert!(q.clusters[1].drift().is_empty());
        assert!(q.drifting());
    }

    #[test]
    fn member_age_counts_from_when_it_went_stale() {
        let m = Member {
            name: "m".into(),
            reach: Reach::Unreachable,
            message: None,
            stale_since: Some(100),
        };
        assert_eq!(m.age(160), 60);
        assert_eq!(
            Member {
                stale_since: None,
                ..m
            }
            .age(160),
            0
        );
    }

    #[test]
    fn restricted_keeps_only_allowed_namespaces() {
        let s = Snapshot {
            quotas: vec![
                quota(),
                Quota {
                    namespace: "team-b".into(),
                    ..quota()
                },
            ],
            teams: [
                ("team-a".to_owned(), "a".to_owned()),
                ("team-b".to_owned(), "b".to_owned()),
            ]
            .into(),
            ..Snapshot::default()
        };
        let r = s.restricted(|ns| ns == "team-a");
        assert_eq!(r.quotas.len(), 1);
        assert_eq!(r.quotas[0].namespace, "team-a");
        assert_eq!(r.teams.len(), 1);
    }
}
