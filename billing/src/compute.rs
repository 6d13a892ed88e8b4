//! The report's arithmetic: the two range queries to run, then from their series the
//! average, peak and resource-hours of every group (team, namespace, cluster, quota — the
//! keys asked for) and resource.
//!
//! For a group and resource, `u(t)` is the sum of its series' values at instant `t` (each
//! series is one namespace × quota × member cluster; a missing sample counts 0). With `w(t)`
//! the seconds a sample stands for ([`Window::weight`]: the step, cut at `to`):
//!
//! - resource-hours = Σ u(t) · w(t) / 3600, in the resource's unit ([`units`]);
//! - average = Σ u(t) · w(t) / (to − from): over the whole window, so
//!   `average × hours of the window = resource-hours`;
//! - peak = max u(t).
//!
//! The team of a sample is the value of the namespace's team label at the same instant
//! (the `kq_namespace_labels` info series, as PromQL's `group_left` would join it), or
//! [`UNALLOCATED`] when the namespace has no such label then.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::series::Series;
use super::units::unit_of;
use super::window::{Window, rfc3339};
use super::{NAMESPACE_LABELS_METRIC, UNALLOCATED, label_name};

/// What a report groups by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Key {
    /// The namespace's team label (or [`UNALLOCATED`]).
    Team,
    /// The namespace.
    Namespace,
    /// The member cluster.
    Cluster,
    /// The KarmadaQuota.
    Quota,
}

impl Key {
    /// Every key, in the order columns are printed.
    pub const ALL: [Key; 4] = [Key::Team, Key::Namespace, Key::Cluster, Key::Quota];

    /// The key's name (a column header, a `--by` value).
    pub fn as_str(self) -> &'static str {
        match self {
            Key::Team => "team",
            Key::Namespace => "namespace",
            Key::Cluster => "cluster",
            Key::Quota => "quota",
        }
    }

    /// A comma-separated list (`team`, `team,cluster`), in column order, each key once.
    pub fn parse_list(s: &str) -> Result<Vec<Key>, String> {
        let mut keys = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let key = Key::ALL
                .into_iter()
                .find(|k| k.as_str() == part)
                .ok_or_else(|| {
                    format!(
                        "invalid --by {part:?}: expected team, namespace, cluster or quota \
                         (or a comma-separated list of them)"
                    )
                })?;
            keys.push(key);
        }
        if keys.is_empty() {
            return Err("--by needs at least one of team, namespace, cluster, quota".to_owned());
        }
        keys.sort();
        keys.dedup();
        Ok(keys)
    }
}

/// Which usage is billed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// What Karmada placed in each member cluster (the quota's accounting,
    /// `kq_quota_cluster_used`).
    #[default]
    Placed,
    /// What the members' non-terminal pods request (`kq_quota_cluster_observed`).
    Observed,
}

impl Source {
    /// The controller's series of this usage.
    pub fn metric(self) -> &'static str {
        match self {
            Source::Placed => "kq_quota_cluster_used",
            Source::Observed => "kq_quota_cluster_observed",
        }
    }

    /// `placed` or `observed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Placed => "placed",
            Source::Observed => "observed",
        }
    }
}

/// What to report.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    /// The window and step.
    pub window: Window,
    /// Group keys, in column order (see [`Key::parse_list`]).
    pub by: Vec<Key>,
    /// Placed or observed usage.
    pub source: Source,
    /// The namespace label naming a team (`karmada-quota.io/team`).
    pub team_label: String,
}

/// The PromQL of the two range queries, both over [`Request::window`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queries {
    /// Usage per namespace, quota, member cluster and resource. `max by` folds the
    /// identical series of several controller replicas into one.
    pub usage: String,
    /// Each namespace's team label.
    pub teams: String,
}

/// One line of a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// Team (when grouped by team).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// Namespace (when grouped by namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Member cluster (when grouped by cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// Quota (when grouped by quota).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// The quota resource name (`requests.cpu`).
    pub resource: String,
    /// Unit of average and peak (`cores`, `GiB`, `GPUs`, …).
    pub unit: String,
    /// Time-weighted average over the whole window.
    pub average: f64,
    /// Highest value at one instant.
    pub peak: f64,
    /// The time integral in unit-hours.
    pub hours: f64,
    /// Unit of `hours` (`core-hours`, `GiB-hours`, `GPU-hours`, …).
    pub hours_unit: String,
}

impl Row {
    /// The row's value of `key` (`""` when the report is not grouped by it).
    pub fn key(&self, key: Key) -> &str {
        match key {
            Key::Team => &self.team,
            Key::Namespace => &self.namespace,
            Key::Cluster => &self.cluster,
            Key::Quota => &self.quota,
        }
        .as_deref()
        .unwrap_or("")
    }
}

/// A usage report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Start (RFC 3339).
    pub from: String,
    /// End, exclusive (RFC 3339).
    pub to: String,
    /// Seconds between samples.
    pub step: u64,
    /// Placed or observed usage.
    pub source: Source,
    /// Group keys.
    pub by: Vec<Key>,
    /// The namespace label naming a team.
    pub team_label: String,
    /// One row per group and resource, sorted by keys then resource.
    pub rows: Vec<Row>,
    /// What may make the numbers incomplete (Prometheus' warnings, a missing team label).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// A group: the values of team, namespace, cluster, quota (`None` for keys not grouped by).
type GroupKey = [Option<String>; 4];

impl Request {
    /// The two range queries.
    pub fn queries(&self) -> Queries {
        Queries {
            usage: format!(
                "max by (namespace, quota, cluster, resource) ({})",
                self.source.metric()
            ),
            teams: format!(
                "max by (namespace, {}) ({NAMESPACE_LABELS_METRIC})",
                label_name(&self.team_label)
            ),
        }
    }

    /// The report from the answers to [`Request::queries`].
    pub fn compute(&self, usage: &[Series], teams: &[Series]) -> Report {
        let by_team = self.by.contains(&Key::Team);
        let team_of = if by_team {
            team_timeline(teams, &label_name(&self.team_label))
        } else {
            HashMap::new()
        };
        let mut groups: BTreeMap<(GroupKey, String), BTreeMap<i64, f64>> = BTreeMap::new();
        for s in usage {
            let ns = s.label("namespace");
            for (t, v) in s.samples() {
                if self.window.weight(t) == 0.0 {
                    continue;
                }
                let team = team_of
                    .get(ns)
                    .and_then(|m| m.get(&t))
                    .copied()
                    .unwrap_or(UNALLOCATED);
                let key: GroupKey = [
                    by_team.then(|| team.to_owned()),
                    self.by.contains(&Key::Namespace).then(|| ns.to_owned()),
                    self.by
                        .contains(&Key::Cluster)
                        .then(|| s.label("cluster").to_owned()),
                    self.by
                        .contains(&Key::Quota)
                        .then(|| s.label("quota").to_owned()),
                ];
                *groups
                    .entry((key, s.label("resource").to_owned()))
                    .or_default()
                    .entry(t)
                    .or_insert(0.0) += v;
            }
        }
        #[allow(clippy::cast_precision_loss)]
        let seconds = self.window.seconds() as f64;
        let rows = groups
            .into_iter()
            .map(|((key, resource), points)| {
                let unit = unit_of(&resource);
                let integral: f64 = points.iter().map(|(t, v)| v * self.window.weight(*t)).sum();
                let peak = points.values().copied().fold(f64::MIN, f64::max);
                let [team, namespace, cluster, quota] = key;
                Row {
                    team,
                    namespace,
                    cluster,
                    quota,
                    unit: unit.unit.to_owned(),
                    average: integral / seconds * unit.scale,
                    peak: peak * unit.scale,
                    hours: integral / 3600.0 * unit.scale,
                    hours_unit: unit.hours.to_owned(),
                    resource,
                }
            })
            .collect::<Vec<_>>();
        let mut warnings = Vec::new();
        if by_team && !rows.is_empty() && team_of.is_empty() {
            warnings.push(format!(
                "no {NAMESPACE_LABELS_METRIC} series carries {} (the namespace label {:?}): \
                 every namespace counts as {UNALLOCATED}; the controller exports the label \
                 named by its --dashboard-team-label",
                label_name(&self.team_label),
                self.team_label
            ));
        }
        Report {
            from: rfc3339(self.window.from),
            to: rfc3339(self.window.to),
            step: self.window.step,
            source: self.source,
            by: self.by.clone(),
            team_label: self.team_label.clone(),
            rows,
            warnings,
        }
    }
}

/// Namespace → instant (Unix ms) → team, from the info series' non-empty label values.
fn team_timeline<'a>(teams: &'a [Series], label: &str) -> HashMap<&'a str, BTreeMap<i64, &'a str>> {
    let mut out: HashMap<&str, BTreeMap<i64, &str>> = HashMap::new();
    for s in teams {
        let team = s.metric.get(label).map_or("", String::as_str);
        if team.is_empty() {
            continue;
        }
        let at = out.entry(s.label("namespace")).or_default();
        for (t, v) in s.samples() {
            if v != 0.0 {
                at.insert(t, team);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const GI: f64 = 1_073_741_824.0;
    const T0: i64 = 1_767_225_600;

    /// A series with `labels` and one value per step of `step` seconds from T0
    /// (`None`: no sample at that instant).
    fn series(labels: &[(&str, &str)], step: i64, values: &[Option<f64>]) -> Series {
        Series {
            metric: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            values: values
                .iter()
                .enumerate()
                .filter_map(|(i, v)| {
                    let t = T0 + step * i64::try_from(i).unwrap();
                    v.map(|v| (t as f64, v.to_string()))
                })
                .collect(),
        }
    }

    fn usage(
        ns: &str,
        quota: &str,
        cluster: &str,
        resource: &str,
        values: &[Option<f64>],
    ) -> Series {
        series(
            &[
                ("namespace", ns),
                ("quota", quota),
                ("cluster", cluster),
                ("resource", resource),
            ],
            60,
            values,
        )
    }

    fn team(ns: &str, team: &str, values: &[Option<f64>]) -> Series {
        series(
            &[("namespace", ns), ("label_karmada_quota_io_team", team)],
            60,
            values,
        )
    }

    fn request(by: &[Key], minutes: i64) -> Request {
        Request {
            window: Window::new(T0, T0 + minutes * 60, Some(60)).unwrap(),
            by: by.to_vec(),
            source: Source::Placed,
            team_label: "karmada-quota.io/team".into(),
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    /// (keys joined by '/', resource, average, peak, hours) of every row.
    fn summary(r: &Report) -> Vec<(String, String, f64, f64, f64)> {
        r.rows
            .iter()
            .map(|row| {
                let keys: Vec<&str> = r.by.iter().map(|k| row.key(*k)).collect();
                (
                    keys.join("/"),
                    row.resource.clone(),
                    row.average,
                    row.peak,
                    row.hours,
                )
            })
            .collect()
    }

    fn assert_rows(r: &Report, want: &[(&str, &str, f64, f64, f64)]) {
        let got = summary(r);
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                g.0 == w.0 && g.1 == w.1 && close(g.2, w.2) && close(g.3, w.3) && close(g.4, w.4),
                "got {g:?}, want {w:?}"
            );
        }
    }

    #[test]
    fn the_queries_fold_replicas_and_name_the_team_label() {
        let q = request(&[Key::Team], 60).queries();
        assert_eq!(
            q.usage,
            "max by (namespace, quota, cluster, resource) (kq_quota_cluster_used)"
        );
        assert_eq!(
            q.teams,
            "max by (namespace, label_karmada_quota_io_team) (kq_namespace_labels)"
        );
        let mut r = request(&[Key::Team], 60);
        r.source = Source::Observed;
        assert!(r.queries().usage.contains("kq_quota_cluster_observed"));
    }

    #[test]
    fn a_constant_usage_over_an_hour_is_its_value_in_hours() {
        // 2 cores for 60 one-minute steps = 2 core-hours, average 2, peak 2.
        let r = request(&[Key::Team], 60).compute(
            &[usage("a", "q", "m1", "requests.cpu", &[Some(2.0); 60])],
            &[team("a", "alpha", &[Some(1.0); 60])],
        );
        assert_rows(&r, &[("alpha", "requests.cpu", 2.0, 2.0, 2.0)]);
        assert_eq!(r.rows[0].unit, "cores");
        assert_eq!(r.rows[0].hours_unit, "core-hours");
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn a_change_midway_averages_by_time_and_peaks_at_the_top() {
        // 1 core for 30 minutes, then 3 for 30: 2 core-hours, average 2, peak 3.
        let mut v = vec![Some(1.0); 30];
        v.extend([Some(3.0); 30]);
        let r = request(&[Key::Namespace], 60).compute(&[usage("a", "q", "m1", "cpu", &v)], &[]);
        assert_rows(&r, &[("a", "cpu", 2.0, 3.0, 2.0)]);
    }

    #[test]
    fn missing_samples_count_zero_and_stretch_the_average_over_the_window() {
        // Usage only in the first 15 minutes of the hour: 4 GiB × 0.25 h = 1 GiB-hour.
        let mut v = vec![Some(4.0 * GI); 15];
        v.extend([None; 45]);
        let r = request(&[Key::Namespace], 60)
            .compute(&[usage("a", "q", "m1", "requests.memory", &v)], &[]);
        assert_rows(&r, &[("a", "requests.memory", 1.0, 4.0, 1.0)]);
        assert_eq!(r.rows[0].hours_unit, "GiB-hours");
    }

    #[test]
    fn clusters_and_quotas_add_up_per_instant_and_the_peak_is_of_the_sum() {
        // member1 peaks at minute 0, member2 at minute 1: the namespace peaks at 5, not 8.
        let m1 = usage(
            "a",
            "q",
            "m1",
            "requests.nvidia.com/gpu",
            &[Some(4.0), Some(1.0)],
        );
        let m2 = usage(
            "a",
            "q",
            "m2",
            "requests.nvidia.com/gpu",
            &[Some(1.0), Some(4.0)],
        );
        let batch = usage(
            "a",
            "batch",
            "m1",
            "requests.nvidia.com/gpu",
            &[Some(0.0), Some(0.0)],
        );
        let all = [m1, m2, batch];
        let r = request(&[Key::Namespace], 2).compute(&all, &[]);
        // (5 + 5) GPUs × 60 s = 600 GPU-seconds = 1/6 GPU-hour over 2 minutes.
        assert_rows(
            &r,
            &[("a", "requests.nvidia.com/gpu", 5.0, 5.0, 600.0 / 3600.0)],
        );
        assert_eq!(r.rows[0].unit, "GPUs");
        let r = request(&[Key::Cluster], 2).compute(&all, &[]);
        assert_rows(
            &r,
            &[
                ("m1", "requests.nvidia.com/gpu", 2.5, 4.0, 300.0 / 3600.0),
                ("m2", "requests.nvidia.com/gpu", 2.5, 4.0, 300.0 / 3600.0),
            ],
        );
        let r = request(&[Key::Namespace, Key::Cluster, Key::Quota], 2).compute(&all, &[]);
        assert_eq!(
            summary(&r).iter().map(|s| s.0.as_str()).collect::<Vec<_>>(),
            ["a/m1/batch", "a/m1/q", "a/m2/q"]
        );
    }

    #[test]
    fn namespaces_without_the_label_are_unallocated_and_teams_follow_the_label_in_time() {
        // Namespace a belongs to alpha for the first 2 minutes, then to beta; b has no
        // label; c's label is empty.
        let a = usage("a", "q", "m1", "pods", &[Some(1.0); 4]);
        let b = usage("b", "q", "m1", "pods", &[Some(2.0); 4]);
        let c = usage("c", "q", "m1", "pods", &[Some(3.0); 4]);
        let teams = [
            team("a", "alpha", &[Some(1.0), Some(1.0), None, None]),
            team("a", "beta", &[None, None, Some(1.0), Some(1.0)]),
            team("c", "", &[Some(1.0); 4]),
        ];
        let r = request(&[Key::Team], 4).compute(&[a, b, c], &teams);
        assert_rows(
            &r,
            &[
                (UNALLOCATED, "pods", 5.0, 5.0, 20.0 / 60.0),
                ("alpha", "pods", 0.5, 1.0, 2.0 / 60.0),
                ("beta", "pods", 0.5, 1.0, 2.0 / 60.0),
            ],
        );
        assert_eq!(r.rows[0].hours_unit, "pod-hours");
    }

    #[test]
    fn no_team_series_at_all_is_a_warning() {
        let r = request(&[Key::Team], 1)
            .compute(&[usage("a", "q", "m1", "requests.cpu", &[Some(1.0)])], &[]);
        assert_rows(&r, &[(UNALLOCATED, "requests.cpu", 1.0, 1.0, 1.0 / 60.0)]);
        assert_eq!(r.warnings.len(), 1);
        assert!(
            r.warnings[0].contains("label_karmada_quota_io_team"),
            "{:?}",
            r.warnings
        );
        // Not grouped by team: the team series do not matter.
        let r = request(&[Key::Namespace], 1)
            .compute(&[usage("a", "q", "m1", "requests.cpu", &[Some(1.0)])], &[]);
        assert!(r.warnings.is_empty());
    }

    #[test]
    fn samples_outside_the_window_and_a_cut_last_step_are_weighted_right() {
        // Window of 90 s at a 60 s step: instants T0 (60 s) and T0+60 (30 s); a sample at
        // T0+120 is outside.
        let req = Request {
            window: Window::new(T0, T0 + 90, Some(60)).unwrap(),
            ..request(&[Key::Namespace], 1)
        };
        let r = req.compute(
            &[usage(
                "a",
                "q",
                "m1",
                "cpu",
                &[Some(1.0), Some(2.0), Some(100.0)],
            )],
            &[],
        );
        // (1 × 60 + 2 × 30) / 90 = 4/3 average; 120 core-seconds.
        assert_rows(&r, &[("a", "cpu", 4.0 / 3.0, 2.0, 120.0 / 3600.0)]);
    }

    #[test]
    fn the_report_carries_its_window_and_serializes_only_its_keys() {
        let r = request(&[Key::Team, Key::Cluster], 1).compute(
            &[usage("a", "q", "m1", "requests.cpu", &[Some(1.5)])],
            &[team("a", "alpha", &[Some(1.0)])],
        );
        assert_eq!(r.from, "2026-01-01T00:00:00Z");
        assert_eq!(r.to, "2026-01-01T00:01:00Z");
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["by"], serde_json::json!(["team", "cluster"]));
        assert_eq!(
            json["rows"][0],
            serde_json::json!({"team": "alpha", "cluster": "m1", "resource": "requests.cpu",
                "unit": "cores", "average": 1.5, "peak": 1.5, "hours": 0.025,
                "hoursUnit": "core-hours"})
        );
    }

    #[test]
    fn by_lists_parse_in_column_order() {
        assert_eq!(Key::parse_list("team"), Ok(vec![Key::Team]));
        assert_eq!(
            Key::parse_list("cluster, team,cluster"),
            Ok(vec![Key::Team, Key::Cluster])
        );
        assert!(
            Key::parse_list("tenant")
                .unwrap_err()
                .contains("\"tenant\"")
        );
        assert!(Key::parse_list(" , ").is_err());
    }
}
