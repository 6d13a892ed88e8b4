//! What the pages show, derived from a [`Snapshot`]: the overview's groups sorted by
//! pressure, a quota's per-cluster comparison, each member's share of every quota, and the
//! staleness banners. Pure, so the templates only print.

use std::collections::BTreeSet;

use serde::Serialize;

use crate::Settings;
use crate::model::{Level, Member, Quota, Reach, ResourceRow, Snapshot};

/// One quota on the overview.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct QuotaCard {
    /// `namespace/name`.
    pub key: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The namespace's team, if labelled.
    pub team: Option<String>,
    /// The worst share of hard, in percent.
    pub pressure: f64,
    /// The worst level.
    pub level: Level,
    /// Resources.
    pub rows: Vec<ResourceRow>,
    /// Whether a member runs more than placed.
    pub drifting: bool,
    /// Pending reservations.
    pub pending: usize,
    /// Bindings waiting in the quota's line.
    pub waiting: i64,
    /// Bindings matched.
    pub bindings: usize,
    /// Why nothing was computed.
    pub error: Option<String>,
}

/// Where a quota's page is: `/quotas/{namespace}/{name}`, or `/cluster-quotas/{name}` for
/// a KarmadaClusterQuota (no namespace).
pub fn quota_href(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("/cluster-quotas/{name}")
    } else {
        format!("/quotas/{namespace}/{name}")
    }
}

/// How a quota is named on a page: `namespace/name`, or `name (cluster quota)`.
pub fn quota_title(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("{name} (cluster quota)")
    } else {
        format!("{namespace}/{name}")
    }
}

/// The object's kind and name, for messages: `KarmadaQuota ns/name` or
/// `KarmadaClusterQuota name`.
pub fn quota_kind_title(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        format!("KarmadaClusterQuota {name}")
    } else {
        format!("KarmadaQuota {namespace}/{name}")
    }
}

impl QuotaCard {
    /// Its page ([`quota_href`]).
    pub fn href(&self) -> String {
        quota_href(&self.namespace, &self.name)
    }

    /// Its name on a page ([`quota_title`]).
    pub fn title(&self) -> String {
        quota_title(&self.namespace, &self.name)
    }

    /// The card of `q`.
    pub fn of(q: &Quota, team: Option<&str>) -> Self {
        Self {
            key: q.key(),
            namespace: q.namespace.clone(),
            name: q.name.clone(),
            team: team.map(str::to_owned),
            pressure: q.pressure(),
            level: q.level(),
            rows: q.rows(),
            drifting: q.drifting(),
            pending: q.reservations.len(),
            waiting: q.line.as_ref().map_or(0, |l| l.total),
            bindings: q.bindings,
            error: q.error.clone(),
        }
    }

    /// The gauge's filled part (0–100).
    pub fn gauge(&self) -> f64 {
        self.pressure.clamp(0.0, 100.0)
    }

    /// The gauge's label: the pressure rounded to a whole percent.
    pub fn gauge_label(&self) -> String {
        format!("{:.0}%", self.pressure)
    }

    /// Text the filter box searches: namespace, name, team, resources.
    pub fn search_text(&self) -> String {
        let mut s = format!(
            "{} {} {}",
            self.namespace,
            self.name,
            self.team.as_deref().unwrap_or("")
        );
        for r in &self.rows {
            s.push(' ');
            s.push_str(&r.resource);
        }
        s.to_lowercase()
    }
}

/// A group of the overview: a team (several namespaces) or a namespace without a team.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Group {
    /// `team` or `namespace`.
    pub kind: &'static str,
    /// The team or namespace name.
    pub title: String,
    /// Its quotas, highest pressure first.
    pub quotas: Vec<QuotaCard>,
}

impl Group {
    /// The highest pressure in the group.
    pub fn pressure(&self) -> f64 {
        self.quotas.iter().map(|q| q.pressure).fold(0.0, f64::max)
    }
}

/// The overview's groups: by team when the namespace has one, else by namespace; quotas
/// and groups sorted by pressure (highest first), ties by name.
pub fn groups(s: &Snapshot) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for q in &s.quotas {
        let team = s.team_of(q);
        let (kind, title) = match team {
            Some(t) => ("team", t.to_owned()),
            // A cluster quota over namespaces of no (or several) teams: its own group.
            None if q.namespace.is_empty() => ("cluster quota", q.name.clone()),
            None => ("namespace", q.namespace.clone()),
        };
        let card = QuotaCard::of(q, team);
        match groups
            .iter_mut()
            .find(|g| g.kind == kind && g.title == title)
        {
            Some(g) => g.quotas.push(card),
            None => groups.push(Group {
                kind,
                title,
                quotas: vec![card],
            }),
        }
    }
    for g in &mut groups {
        g.quotas.sort_by(|a, b| {
            b.pressure
                .total_cmp(&a.pressure)
                .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
        });
    }
    groups.sort_by(|a, b| {
        b.pressure()
            .total_cmp(&a.pressure())
            .then_with(|| a.title.cmp(&b.title))
    });
    groups
}

/// One resource of a quota in one member cluster.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CellView {
    /// Resource name.
    pub resource: String,
    /// Placed by Karmada.
    pub placed: String,
    /// Observed in the member (`-` when not measured).
    pub observed: String,
    /// Observed exceeds placed.
    pub drift: bool,
    /// Failover: still draining there (`None` when nothing drains in the member).
    pub draining: Option<String>,
    /// Placed there as a share of the quota's hard, in percent (0–100, for the bar).
    pub share: f64,
}

/// A quota's usage in one member cluster.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    /// Member name.
    pub name: String,
    /// Reachability (`reachable`, `connecting`, `unreachable`, `unknown` when not a member).
    pub reach: &'static str,
    /// Per hard resource.
    pub cells: Vec<CellView>,
    /// Any drift.
    pub drift: bool,
    /// Failover: replicas drain there (old replicas Karmada moved off the member).
    pub draining: bool,
    /// Some of them of unknown count.
    pub draining_unknown: bool,
}

fn reach_name(m: Option<&Member>) -> &'static str {
    match m.map(|m| m.reach) {
        Some(Reach::Reachable) => "reachable",
        Some(Reach::Connecting) => "connecting",
        Some(Reach::Unreachable) => "unreachable",
        None => "unknown",
    }
}

/// Per member cluster of `q`: placed vs observed of each hard resource, in the order of
/// the quota's rows (the table's headers), and what drains there after a failover.
pub fn quota_clusters(s: &Snapshot, q: &Quota) -> Vec<ClusterView> {
    let order = q.resource_order();
    q.clusters
        .iter()
        .map(|c| {
            let drift = c.drift();
            let cells = order
                .iter()
                .map(|&(res, hard)| {
                    let placed = c.placed.get_or_zero(res);
                    #[allow(clippy::cast_precision_loss)]
                    let share = if hard.is_zero() {
                        0.0
                    } else {
                        (placed.nanos() as f64 / hard.nanos() as f64 * 100.0).clamp(0.0, 100.0)
                    };
                    CellView {
                        resource: res.to_owned(),
                        placed: placed.to_string(),
                        observed: c
                            .observed
                            .as_ref()
                            .map_or_else(|| "-".to_owned(), |o| o.get_or_zero(res).to_string()),
                        drift: drift.iter().any(|d| d == res),
                        draining: c.draining.as_ref().map(|d| d.get_or_zero(res).to_string()),
                        share: (share * 10.0).round() / 10.0,
                    }
                })
                .collect();
            ClusterView {
                name: c.name.clone(),
                reach: reach_name(s.members.iter().find(|m| m.name == c.name)),
                cells,
                drift: !drift.is_empty(),
                draining: c.draining.is_some() || c.draining_unknown,
                draining_unknown: c.draining_unknown,
            }
        })
        .collect()
}

/// One resource of a binding on the quota page's "bindings that use the most".
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BindingCell {
    /// Resource name.
    pub resource: String,
    /// What the binding uses of it (`0` when none).
    pub usage: String,
    /// As a share of the quota's hard, in percent to a tenth (`None` for a zero limit).
    pub share: Option<f64>,
}

/// A binding that uses much of a quota.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TopBindingView {
    /// The ResourceBinding's name.
    pub name: String,
    /// Its largest share of hard, in percent to a tenth (the rank).
    pub share: f64,
    /// The level of that share.
    pub level: Level,
    /// Per hard resource, in the order of the quota's rows.
    pub cells: Vec<BindingCell>,
    /// Member clusters it is placed on.
    pub clusters: Vec<String>,
}

impl TopBindingView {
    /// The clusters, as text (`-` before scheduling).
    pub fn clusters_text(&self) -> String {
        if self.clusters.is_empty() {
            "-".to_owned()
        } else {
            self.clusters.join(", ")
        }
    }

    /// The bar width of the share (0–100).
    pub fn width(&self) -> f64 {
        self.share.clamp(0.0, 100.0)
    }
}

/// The quota's bindings that use the most, in core's order (highest share first).
pub fn top_bindings(q: &Quota) -> Vec<TopBindingView> {
    let order = q.resource_order();
    q.top_bindings
        .iter()
        .map(|b| {
            let share = tenth(b.share_of(&q.hard));
            TopBindingView {
                name: b.name.clone(),
                share,
                level: Level::of(Some(share)),
                cells: order
                    .iter()
                    .map(|&(res, hard)| {
                        let usage = b.usage.get_or_zero(res);
                        BindingCell {
                            resource: res.to_owned(),
                            usage: usage.to_string(),
                            share: usage.percent_of(*hard).map(tenth),
                        }
                    })
                    .collect(),
                clusters: b.clusters.clone(),
            }
        })
        .collect()
}

fn tenth(p: f64) -> f64 {
    (p * 10.0).round() / 10.0
}

/// A member cluster on the clusters page.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    /// Name.
    pub name: String,
    /// Reachability.
    pub reach: &'static str,
    /// The last error.
    pub message: Option<String>,
    /// Data age in seconds.
    pub age: i64,
    /// Older than the staleness threshold.
    pub stale: bool,
    /// Its share of every quota that placed something there (or whose member it is).
    pub quotas: Vec<MemberQuota>,
}

/// One quota's share in one member.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberQuota {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Per hard resource.
    pub cells: Vec<CellView>,
}

impl MemberQuota {
    /// Its page ([`quota_href`]).
    pub fn href(&self) -> String {
        quota_href(&self.namespace, &self.name)
    }

    /// Its name on a page ([`quota_title`]).
    pub fn title(&self) -> String {
        quota_title(&self.namespace, &self.name)
    }
}

/// Every member cluster (registered, or named by a quota), by name.
pub fn members(s: &Snapshot, settings: &Settings) -> Vec<MemberView> {
    let mut names: BTreeSet<&str> = s.members.iter().map(|m| m.name.as_str()).collect();
    names.extend(
        s.quotas
            .iter()
            .flat_map(|q| q.clusters.iter().map(|c| c.name.as_str())),
    );
    names
        .into_iter()
        .map(|name| {
            let member = s.members.iter().find(|m| m.name == name);
            let age = member.map_or(0, |m| m.age(s.generated_at));
            let quotas = s
                .quotas
                .iter()
                .filter_map(|q| {
                    let view = quota_clusters(s, q).into_iter().find(|c| c.name == name)?;
                    Some(MemberQuota {
                        namespace: q.namespace.clone(),
                        name: q.name.clone(),
                        cells: view.cells,
                    })
                })
                .collect();
            MemberView {
                name: name.to_owned(),
                reach: reach_name(member),
                message: member.and_then(|m| m.message.clone()),
                age,
                stale: is_stale(member, s.generated_at, settings),
                quotas,
            }
        })
        .collect()
}

impl MemberView {
    /// The data age, readable.
    pub fn age_text(&self) -> String {
        human_age(self.age)
    }
}

fn is_stale(m: Option<&Member>, now: i64, settings: &Settings) -> bool {
    let limit = i64::try_from(settings.stale_after.as_secs()).unwrap_or(i64::MAX);
    m.is_some_and(|m| m.stale_since.is_some() && m.age(now) >= limit)
}

/// One banner line per member whose data is older than the threshold.
pub fn banners(s: &Snapshot, settings: &Settings) -> Vec<String> {
    s.members
        .iter()
        .filter(|m| is_stale(Some(m), s.generated_at, settings))
        .map(|m| {
            format!(
                "Member cluster {} is {}: its data is {} old{}",
                m.name,
                reach_name(Some(m)),
                human_age(m.age(s.generated_at)),
                m.message
                    .as_deref()
                    .map(|e| format!(" ({e})"))
                    .unwrap_or_default()
            )
        })
        .collect()
}

/// `requests.cpu=2, pods=1`: a resource list as one line of text.
pub fn list_text(list: &karmada_quota_core::ResourceList) -> String {
    list.0
        .iter()
        .map(|(n, v)| format!("{n}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `45s`, `3m20s`, `2h5m`.
pub fn human_age(secs: i64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{}h{}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ClusterUsage;
    use crate::tests::{rl, snapshot};

    #[test]
    fn a_cluster_quota_joins_the_team_of_its_namespaces_or_stands_alone() {
        let mut s = snapshot();
        let business = Quota {
            name: "business-ml".into(),
            namespaces: vec!["ml-serve".into(), "ml-train".into()],
            hard: rl(&[("pods", "100")]),
            ..Quota::default()
        };
        let mixed = Quota {
            name: "everyone".into(),
            namespaces: vec!["ml-serve".into(), "web".into()],
            ..Quota::default()
        };
        s.quotas.push(business);
        s.quotas.push(mixed);
        let g = groups(&s);
        let ml = g.iter().find(|g| g.title == "ml").expect("the ml team");
        assert!(ml.quotas.iter().any(|c| c.name == "business-ml"), "{ml:?}");
        assert!(
            g.iter()
                .any(|g| g.kind == "cluster quota" && g.title == "everyone"),
            "{g:?}"
        );
    }

    #[test]
    fn groups_by_team_then_namespace_and_sorts_by_pressure() {
        let g = groups(&snapshot());
        let titles: Vec<_> = g.iter().map(|g| (g.kind, g.title.as_str())).collect();
        assert_eq!(titles, [("team", "ml"), ("namespace", "web")]);
        let ml: Vec<_> = g[0].quotas.iter().map(|q| q.namespace.as_str()).collect();
        assert_eq!(ml, ["ml-train", "ml-serve"]);
        assert!(g[0].quotas[0].pressure >= g[0].quotas[1].pressure);
    }

    #[test]
    fn quota_clusters_compare_placed_and_observed() {
        let s = snapshot();
        let q = s.quota("ml-train", "gpus").unwrap();
        let v = quota_clusters(&s, q);
        assert_eq!(v[0].name, "member1");
        assert_eq!(v[0].reach, "reachable");
        let gpu = v[0]
            .cells
            .iter()
            .find(|c| c.resource == "requests.nvidia.com/gpu")
            .unwrap();
        assert_eq!((gpu.placed.as_str(), gpu.observed.as_str()), ("4", "6"));
        assert!(gpu.drift && v[0].drift);
        assert_eq!(gpu.share, 50.0);
        assert_eq!(v[1].reach, "unreachable");
        assert_eq!(v[1].cells[0].observed, "-");
    }

    /// The table's headers come from the quota's rows (extended resources first); every
    /// cell must sit under its own header, whatever order the hard map keeps.
    #[test]
    fn quota_cluster_cells_follow_the_headers_order() {
        let mut s = snapshot();
        let q = &mut s.quotas[0];
        q.hard = rl(&[
            ("pods", "10"),
            ("requests.cpu", "8"),
            ("requests.nvidia.com/gpu", "4"),
            ("count/deployments.apps", "5"),
        ]);
        q.clusters = vec![ClusterUsage {
            name: "member1".into(),
            placed: rl(&[
                ("pods", "7"),
                ("requests.cpu", "3"),
                ("requests.nvidia.com/gpu", "2"),
                ("count/deployments.apps", "1"),
            ]),
            observed: Some(rl(&[("pods", "7")])),
            ..ClusterUsage::default()
        }];
        let q = &s.quotas[0];
        let headers: Vec<String> = q.rows().into_iter().map(|r| r.resource).collect();
        let v = quota_clusters(&s, q);
        let cells: Vec<&str> = v[0].cells.iter().map(|c| c.resource.as_str()).collect();
        assert_eq!(cells, headers);
        for c in &v[0].cells {
            assert_eq!(
                c.placed,
                q.clusters[0].placed.get_or_zero(&c.resource).to_string()
            );
        }
    }

    #[test]
    fn members_include_unregistered_clusters_and_flag_stale_ones() {
        let mut s = snapshot();
        s.quotas[0].clusters.push(ClusterUsage {
            name: "ghost".into(),
            placed: rl(&[("pods", "1")]),
            observed: None,
            ..ClusterUsage::default()
        });
        let m = members(&s, &Settings::default());
        let names: Vec<_> = m.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["ghost", "member1", "member2"]);
        assert_eq!(m[0].reach, "unknown");
        assert!(m[2].stale && m[2].age == 300);
        assert!(!m[1].stale);
        let b = banners(&s, &Settings::default());
        assert_eq!(b.len(), 1);
        assert!(
            b[0].contains("member2 is unreachable: its data is 5m0s old (connection refused)"),
            "{b:?}"
        );
        let lax = Settings {
            stale_after: std::time::Duration::from_secs(600),
            ..Settings::default()
        };
        assert!(banners(&s, &lax).is_empty());
    }

    #[test]
    fn human_age_reads_well() {
        assert_eq!(human_age(5), "5s");
        assert_eq!(human_age(200), "3m20s");
        assert_eq!(human_age(7500), "2h5m");
    }
}
