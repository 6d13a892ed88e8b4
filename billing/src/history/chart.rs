//! What the dashboard's chart draws: per resource, the used, reserved and hard lines (and
//! each member cluster's placed usage on demand), as `[Unix seconds, value]` points in
//! the resource's unit (cores, GiB, pods…), whichever source they came from; and the
//! downsampling both sources share: at most N points per line, each the peak of its
//! time bucket.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::Series;
use crate::history::Kind;
use crate::units::unit_of;

/// One point: Unix seconds and a value in the resource's unit; `[t, v]` in JSON.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Point(pub i64, pub f64);

/// A chart of one quota.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Chart {
    /// Start (Unix seconds).
    pub from: i64,
    /// End (Unix seconds).
    pub to: i64,
    /// Seconds each point stands for at most (a point is the peak of its bucket).
    pub step: u64,
    /// One entry per resource, by name.
    pub resources: Vec<ResourceLines>,
}

/// The lines of one resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceLines {
    /// Resource name.
    pub resource: String,
    /// The unit of the values (`cores`, `GiB`, `pods`, `GPUs`, `objects`, `units`).
    pub unit: &'static str,
    /// Used.
    pub used: Vec<Point>,
    /// Pending reservations.
    pub reserved: Vec<Point>,
    /// The limit.
    pub hard: Vec<Point>,
    /// Per member cluster (asked for only), by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterLine>,
}

/// What Karmada placed in one member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLine {
    /// Member cluster.
    pub cluster: String,
    /// Placed usage.
    pub used: Vec<Point>,
}

impl ResourceLines {
    /// Shown value = base value × this (1/GiB for memory, 1 for cores and counts).
    pub fn scale_of(resource: &str) -> f64 {
        unit_of(resource).scale
    }

    /// Sets the line `kind` to `points` (base units), scaled to the resource's unit.
    pub fn set(&mut self, kind: &Kind, points: Vec<(i64, f64)>, scale: f64) {
        let line: Vec<Point> = points
            .into_iter()
            .map(|(t, v)| Point(t, v * scale))
            .collect();
        match kind {
            Kind::Used => self.used = line,
            Kind::Reserved => self.reserved = line,
            Kind::Hard => self.hard = line,
            Kind::Cluster(name) => {
                sorted_entry(
                    &mut self.clusters,
                    |c| c.cluster.as_str().cmp(name),
                    || ClusterLine {
                        cluster: name.clone(),
                        used: Vec::new(),
                    },
                )
                .used = line;
            }
        }
    }
}

impl Chart {
    /// The lines of `resource`, added (in name order) when missing.
    pub fn resource_mut(&mut self, resource: &str) -> &mut ResourceLines {
        sorted_entry(
            &mut self.resources,
            |r| r.resource.as_str().cmp(resource),
            || ResourceLines {
                resource: resource.to_owned(),
                unit: unit_of(resource).unit,
                ..ResourceLines::default()
            },
        )
    }

    /// The chart of a Prometheus range answer over `[from, to]` every `step` seconds: one
    /// list of series per kind, each labelled `resource` (and `cluster` for
    /// [`Kind::Cluster`], whose name comes from the label); at most `points` points per
    /// line (peaks kept).
    pub fn from_series(
        (from, to, step): (i64, i64, u64),
        points: usize,
        used: &[Series],
        reserved: &[Series],
        hard: &[Series],
        clusters: &[Series],
    ) -> Chart {
        let mut chart = Chart {
            from,
            to,
            step,
            resources: Vec::new(),
        };
        let mut lines: BTreeMap<(String, Kind), Vec<(i64, f64)>> = BTreeMap::new();
        let kinds = [
            (used, None),
            (reserved, Some(Kind::Reserved)),
            (hard, Some(Kind::Hard)),
        ];
        for (series, kind) in kinds {
            for s in series {
                let kind = kind.clone().unwrap_or(Kind::Used);
                lines
                    .entry((s.label("resource").to_owned(), kind))
                    .or_default()
                    .extend(s.samples().map(|(ms, v)| (ms.div_euclid(1000), v)));
            }
        }
        for s in clusters {
            lines
                .entry((
                    s.label("resource").to_owned(),
                    Kind::Cluster(s.label("cluster").to_owned()),
                ))
                .or_default()
                .extend(s.samples().map(|(ms, v)| (ms.div_euclid(1000), v)));
        }
        for ((resource, kind), mut pts) in lines {
            if resource.is_empty() {
                continue;
            }
            pts.sort_by_key(|p| p.0);
            let thinned = downsample(&pts, from, step.max(1), points);
            chart
                .resource_mut(&resource)
                .set(&kind, thinned, ResourceLines::scale_of(&resource));
        }
        chart
    }

    /// Whether no line has a point.
    pub fn is_empty(&self) -> bool {
        self.resources
            .iter()
            .all(|r| r.used.is_empty() && r.hard.is_empty() && r.reserved.is_empty())
    }
}

/// The entry of a sorted `list` that `cmp` finds, inserted in order from `make` when
/// missing.
fn sorted_entry<T>(
    list: &mut Vec<T>,
    cmp: impl Fn(&T) -> std::cmp::Ordering,
    make: impl FnOnce() -> T,
) -> &mut T {
    let at = list.binary_search_by(cmp).unwrap_or_else(|i| {
        list.insert(i, make());
        i
    });
    &mut list[at]
}

/// At most `max` points of `points` (sorted by time): all of them when they fit, else
/// one per `bucket` seconds from `from`, at the bucket's first time, holding the bucket's
/// largest value (a peak survives).
pub fn downsample(points: &[(i64, f64)], from: i64, bucket: u64, max: usize) -> Vec<(i64, f64)> {
    if points.len() <= max {
        return points.to_vec();
    }
    let width = i64::try_from(bucket.max(1)).unwrap_or(i64::MAX);
    let mut out: Vec<(i64, f64)> = Vec::with_capacity(max.min(points.len()));
    let mut current: Option<i64> = None;
    for &(t, v) in points {
        let b = (t - from).div_euclid(width);
        match (current, out.last_mut()) {
            (Some(c), Some(last)) if c == b => last.1 = last.1.max(v),
            _ => {
                out.push((t, v));
                current = Some(b);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(labels: &[(&str, &str)], values: &[(f64, &str)]) -> Series {
        Series {
            metric: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            values: values.iter().map(|(t, v)| (*t, (*v).to_owned())).collect(),
        }
    }

    #[test]
    fn downsampling_keeps_every_point_that_fits_and_else_the_peak_of_each_bucket() {
        let pts: Vec<(i64, f64)> = (0..10)
            .map(|t| (t, if t == 3 { 9.0 } else { 1.0 }))
            .collect();
        assert_eq!(downsample(&pts, 0, 1, 10), pts);
        let thin = downsample(&pts, 0, 5, 2);
        assert_eq!(thin, [(0, 9.0), (5, 1.0)]);
        // Buckets count from `from`, not from the first point.
        let thin = downsample(&pts, -2, 5, 3);
        assert_eq!(thin, [(0, 1.0), (3, 9.0), (8, 1.0)]);
    }

    #[test]
    fn a_prometheus_answer_becomes_lines_in_the_resources_unit() {
        let gib = "1073741824";
        let used = [
            series(
                &[("resource", "requests.memory")],
                &[(100.0, gib), (110.0, "2147483648")],
            ),
            series(
                &[("resource", "requests.cpu")],
                &[(100.0, "1.5"), (110.0, "NaN")],
            ),
        ];
        let hard = [series(
            &[("resource", "requests.memory")],
            &[(100.0, "4294967296")],
        )];
        let clusters = [
            series(
                &[("resource", "requests.memory"), ("cluster", "member2")],
                &[(100.0, gib)],
            ),
            series(
                &[("resource", "requests.memory"), ("cluster", "member1")],
                &[(100.0, "0")],
            ),
        ];
        let c = Chart::from_series((100, 110, 10), 100, &used, &[], &hard, &clusters);
        let names: Vec<&str> = c.resources.iter().map(|r| r.resource.as_str()).collect();
        assert_eq!(names, ["requests.cpu", "requests.memory"]);
        let mem = &c.resources[1];
        assert_eq!(mem.unit, "GiB");
        assert_eq!(mem.used, [Point(100, 1.0), Point(110, 2.0)]);
        assert_eq!(mem.hard, [Point(100, 4.0)]);
        let members: Vec<&str> = mem.clusters.iter().map(|c| c.cluster.as_str()).collect();
        assert_eq!(members, ["member1", "member2"]);
        assert_eq!(c.resources[0].used, [Point(100, 1.5)], "NaN is no point");
        assert_eq!(
            serde_json::to_value(&c).unwrap()["resources"][1]["used"][1],
            serde_json::json!([110, 2.0])
        );
        assert!(!c.is_empty());
        assert!(Chart::default().is_empty());
    }
}
