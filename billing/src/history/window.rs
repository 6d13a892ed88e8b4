//! The in-memory window of recent samples per quota, bounded in time, samples, lines and
//! quotas.
//!
//! ```text
//!  record_all(now, readings)   every quota of one dashboard snapshot
//!    ├─ a quota not in readings ─► dropped (deleted)
//!    ├─ a new quota beyond max_quotas ─► not kept (counted in `untracked`)
//!    └─ per quota: values unchanged and younger than step ─► nothing
//!                  changed, or a step passed ─► a sample (unchanged values share one
//!                                              allocation with the sample before)
//!                  same second ─► replaces the last sample
//!                  older than now − window ─► pruned
//!                  more than max_samples ─► all but the newest half merged into one
//!                                           sample per step, holding each line's peak
//! ```
//!
//! A sample is a time and one value per line (`f64::NAN`: the line did not exist then);
//! the lines of a quota are listed once per quota ([`LineKey`]), at most [`MAX_LINES`]
//! (totals first, then member clusters). So the memory held is at most
//! [`Bounds::max_bytes`], whatever the churn: [`Store::held_bytes`] counts it.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use crate::history::chart::{Chart, ResourceLines, downsample};
use crate::history::{Kind, LineKey, base_value};
use karmada_quota_core::ResourceList;

/// Lines kept per quota: used, reserved and hard of each resource first, then per member
/// cluster; lines beyond are not recorded.
pub const MAX_LINES: usize = 64;

/// How much the store keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// Samples older than this (seconds) are pruned.
    pub window: u64,
    /// An unchanged quota is sampled this often (seconds), so flat lines still draw.
    pub step: u64,
    /// Quotas kept; a new quota beyond it is not recorded.
    pub max_quotas: usize,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            window: 3600,
            step: 15,
            max_quotas: 1000,
        }
    }
}

impl Bounds {
    /// Samples kept per quota: one per step over the window, as many again for changes
    /// between steps; beyond it the older half is thinned.
    pub fn max_samples(&self) -> usize {
        let per_window = self.window.div_ceil(self.step.max(1));
        usize::try_from(per_window)
            .unwrap_or(usize::MAX / 4)
            .saturating_mul(2)
            .saturating_add(2)
    }

    /// The most memory (bytes, allocator overhead aside) the samples of one quota hold:
    /// every sample with values of its own over [`MAX_LINES`] lines.
    pub fn max_bytes_per_quota(&self) -> usize {
        // The deque's capacity grows by doubling past max_samples + 1.
        let slots = (self.max_samples() + 1).next_power_of_two();
        let sample = std::mem::size_of::<Sample>();
        let values = ARC_HEADER + MAX_LINES * std::mem::size_of::<f64>();
        let keys = MAX_LINES * (std::mem::size_of::<LineKey>() + MAX_NAME * 2);
        slots * sample + (self.max_samples() + 1) * values + keys
    }

    /// The most memory (bytes, allocator overhead aside) the whole store holds.
    pub fn max_bytes(&self) -> usize {
        self.max_quotas.saturating_mul(
            self.max_bytes_per_quota() + std::mem::size_of::<Track>() + 2 * MAX_NAME,
        )
    }
}

/// The strong and weak counts in front of an `Arc`'s data.
const ARC_HEADER: usize = 2 * std::mem::size_of::<usize>();
/// Longest name counted (a Kubernetes name: 253 bytes).
const MAX_NAME: usize = 253;

/// One quota at one instant: what the controller computed.
#[derive(Clone, Copy, Debug)]
pub struct Reading<'a> {
    /// Namespace (empty for a KarmadaClusterQuota).
    pub namespace: &'a str,
    /// Name.
    pub name: &'a str,
    /// Limits.
    pub hard: &'a ResourceList,
    /// Used, summed over clusters.
    pub used: &'a ResourceList,
    /// Σ pending reservations.
    pub reserved: &'a ResourceList,
    /// What Karmada placed in each member cluster.
    pub clusters: &'a [(&'a str, &'a ResourceList)],
}

impl Reading<'_> {
    /// Every line with its value: used, reserved, hard of each hard resource, then each
    /// cluster's placed usage of the hard resources.
    fn lines(&self) -> Vec<(LineKey, f64)> {
        let mut out = Vec::new();
        for (resource, hard) in self.hard.iter() {
            let key = |kind| LineKey {
                resource: resource.to_owned(),
                kind,
            };
            out.push((
                key(Kind::Used),
                base_value(&self.used.get_or_zero(resource)),
            ));
            out.push((
                key(Kind::Reserved),
                base_value(&self.reserved.get_or_zero(resource)),
            ));
            out.push((key(Kind::Hard), base_value(hard)));
        }
        for (cluster, placed) in self.clusters {
            for resource in self.hard.names() {
                out.push((
                    LineKey {
                        resource: resource.to_owned(),
                        kind: Kind::Cluster((*cluster).to_owned()),
                    },
                    base_value(&placed.get_or_zero(resource)),
                ));
            }
        }
        out
    }
}

/// The values of one sample, one per line (shared by consecutive equal samples).
type Values = Arc<[f64]>;

/// One sample: when, and a value per line of its track (`NAN`: not there then).
#[derive(Clone, Debug)]
struct Sample {
    t: i64,
    values: Arc<[f64]>,
}

/// The samples of one quota.
#[derive(Clone, Debug, Default)]
struct Track {
    keys: Vec<LineKey>,
    samples: VecDeque<Sample>,
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
}

impl Track {
    /// The values of `lines` in this track's line order, new lines appended (up to
    /// [`MAX_LINES`]).
    fn values(&mut self, lines: Vec<(LineKey, f64)>) -> Vec<f64> {
        let mut values = vec![f64::NAN; self.keys.len()];
        for (key, v) in lines {
            let i = match self.keys.iter().position(|k| *k == key) {
                Some(i) => i,
                None if self.keys.len() < MAX_LINES => {
                    self.keys.push(key);
                    values.push(f64::NAN);
                    self.keys.len() - 1
                }
                None => continue,
            };
            values[i] = v;
        }
        values
    }

    fn record(&mut self, t: i64, lines: Vec<(LineKey, f64)>, b: &Bounds) {
        let values = self.values(lines);
        let step = i64::try_from(b.step).unwrap_or(i64::MAX);
        let shared = match self.samples.back() {
            Some(last) if same(&last.values, &values) => {
                if t.saturating_sub(last.t) < step {
                    return;
                }
                last.values.clone()
            }
            _ => Arc::from(values),
        };
        match self.samples.back_mut() {
            Some(last) if last.t >= t => last.values = shared,
            _ => self.samples.push_back(Sample { t, values: shared }),
        }
        self.prune(t, b);
    }

    fn prune(&mut self, now: i64, b: &Bounds) {
        let oldest = now.saturating_sub(i64::try_from(b.window).unwrap_or(i64::MAX));
        let before = self.samples.len();
        while self.samples.front().is_some_and(|s| s.t < oldest) {
            self.samples.pop_front();
        }
        if self.samples.len() > b.max_samples() {
            self.thin(b);
        }
        // Only what left can free a line (a resource or cluster gone long enough).
        if self.samples.len() < before {
            self.drop_unused_keys();
        }
    }

    /// Keeps the newest half as they are and merges the older ones into one sample per
    /// `step` bucket (aligned to multiples of `step`), at the bucket's first time, each
    /// line at its peak in the bucket: the older part spans at most the window, so it
    /// holds at most `window / step + 1` samples and the whole at most `max_samples`.
    fn thin(&mut self, b: &Bounds) {
        let keep = b.max_samples() / 2;
        let older = self.samples.len().saturating_sub(keep);
        let width = i64::try_from(b.step).unwrap_or(i64::MAX);
        let mut merged: Vec<Sample> = Vec::with_capacity(older);
        for s in self.samples.drain(..older) {
            match merged.last_mut() {
                Some(last) if last.t.div_euclid(width) == s.t.div_euclid(width) => {
                    let n = last.values.len().max(s.values.len());
                    let peak: Vec<f64> = (0..n)
                        .map(|i| {
                            let x = last.values.get(i).copied().unwrap_or(f64::NAN);
                            let y = s.values.get(i).copied().unwrap_or(f64::NAN);
                            // `max` keeps the number when one side is NaN.
                            x.max(y)
                        })
                        .collect();
                    if !same(&peak, &last.values) {
                        last.values = if same(&peak, &s.values) {
                            s.values.clone()
                        } else {
                            Arc::from(peak)
                        };
                    }
                }
                _ => merged.push(s),
            }
        }
        for s in merged.into_iter().rev() {
            self.samples.push_front(s);
        }
    }

    /// Forgets lines no sample holds a number for (a resource or cluster gone), so the
    /// line list follows the quota.
    fn drop_unused_keys(&mut self) {
        let used: Vec<bool> = (0..self.keys.len())
            .map(|i| {
                self.samples
                    .iter()
                    .any(|s| s.values.get(i).is_some_and(|v| !v.is_nan()))
            })
            .collect();
        if used.iter().all(|u| *u) {
            return;
        }
        let keep = |values: &[f64]| -> Arc<[f64]> {
            values
                .iter()
                .enumerate()
                .filter(|(i, _)| used[*i])
                .map(|(_, v)| *v)
                .collect()
        };
        // (a list before, the same list without the unused lines): consecutive samples
        // sharing one list keep sharing it.
        let mut last: Option<(Values, Values)> = None;
        for s in &mut self.samples {
            let next = match &last {
                Some((old, new)) if Arc::ptr_eq(old, &s.values) => new.clone(),
                _ => keep(&s.values),
            };
            last = Some((s.values.clone(), next.clone()));
            s.values = next;
        }
        let mut i = 0;
        self.keys.retain(|_| {
            i += 1;
            used[i - 1]
        });
    }

    fn held_bytes(&self) -> usize {
        let mut bytes = self.keys.capacity() * std::mem::size_of::<LineKey>()
            + self
                .keys
                .iter()
                .map(|k| {
                    k.resource.capacity()
                        + match &k.kind {
                            Kind::Cluster(c) => c.capacity(),
                            _ => 0,
                        }
                })
                .sum::<usize>()
            + self.samples.capacity() * std::mem::size_of::<Sample>();
        let mut last: Option<&Arc<[f64]>> = None;
        for s in &self.samples {
            if !last.is_some_and(|l| Arc::ptr_eq(l, &s.values)) {
                bytes += ARC_HEADER + s.values.len() * std::mem::size_of::<f64>();
            }
            last = Some(&s.values);
        }
        bytes
    }
}

/// The window of every quota, keyed (namespace, name) like the controller's views.
#[derive(Clone, Debug, Default)]
pub struct Store {
    bounds: Bounds,
    tracks: BTreeMap<(String, String), Track>,
    untracked: BTreeSet<(String, String)>,
}

impl Store {
    /// An empty store within `bounds` (a zero step or window counts as one second).
    pub fn new(bounds: Bounds) -> Self {
        Self {
            bounds: Bounds {
                window: bounds.window.max(1),
                step: bounds.step.max(1),
                ..bounds
            },
            tracks: BTreeMap::new(),
            untracked: BTreeSet::new(),
        }
    }

    /// Its bounds.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// Records every quota of one moment (`now`, Unix seconds): a quota not among
    /// `readings` is dropped.
    pub fn record_all<'a>(&mut self, now: i64, readings: impl IntoIterator<Item = Reading<'a>>) {
        let readings: Vec<Reading<'a>> = readings.into_iter().collect();
        let seen: BTreeSet<(&str, &str)> = readings.iter().map(|r| (r.namespace, r.name)).collect();
        self.tracks
            .retain(|(ns, n), _| seen.contains(&(ns.as_str(), n.as_str())));
        self.untracked.clear();
        for r in readings {
            let key = (r.namespace.to_owned(), r.name.to_owned());
            let bounds = self.bounds;
            if !self.tracks.contains_key(&key) && self.tracks.len() >= bounds.max_quotas {
                self.untracked.insert(key);
                continue;
            }
            self.tracks
                .entry(key)
                .or_default()
                .record(now, r.lines(), &bounds);
        }
    }

    /// Whether `namespace/name` is among the quotas not kept (beyond `max_quotas`).
    pub fn untracked(&self, namespace: &str, name: &str) -> bool {
        self.untracked
            .contains(&(namespace.to_owned(), name.to_owned()))
    }

    /// Quotas kept.
    pub fn quotas(&self) -> usize {
        self.tracks.len()
    }

    /// Samples kept for `namespace/name`.
    pub fn samples(&self, namespace: &str, name: &str) -> usize {
        self.tracks
            .get(&(namespace.to_owned(), name.to_owned()))
            .map_or(0, |t| t.samples.len())
    }

    /// Lines kept for `namespace/name`.
    pub fn lines(&self, namespace: &str, name: &str) -> usize {
        self.tracks
            .get(&(namespace.to_owned(), name.to_owned()))
            .map_or(0, |t| t.keys.len())
    }

    /// The memory its samples and line lists hold (bytes, allocator overhead aside; a
    /// value list shared by consecutive samples counted once).
    pub fn held_bytes(&self) -> usize {
        self.tracks
            .iter()
            .map(|((ns, n), t)| {
                std::mem::size_of::<Track>() + ns.capacity() + n.capacity() + t.held_bytes()
            })
            .sum()
    }

    /// The chart of `namespace/name` over `[from, to]` with at most `points` points per
    /// line (peaks kept); member-cluster lines only with `clusters`. `None` when the
    /// quota has no samples.
    pub fn chart(
        &self,
        namespace: &str,
        name: &str,
        (from, to): (i64, i64),
        points: usize,
        clusters: bool,
    ) -> Option<Chart> {
        let track = self.tracks.get(&(namespace.to_owned(), name.to_owned()))?;
        let mut lines: BTreeMap<&LineKey, Vec<(i64, f64)>> = BTreeMap::new();
        for s in track.samples.iter().filter(|s| s.t >= from && s.t <= to) {
            for (i, key) in track.keys.iter().enumerate() {
                if matches!(key.kind, Kind::Cluster(_)) && !clusters {
                    continue;
                }
                if let Some(v) = s.values.get(i).filter(|v| !v.is_nan()) {
                    lines.entry(key).or_default().push((s.t, *v));
                }
            }
        }
        let span = u64::try_from(to.saturating_sub(from)).unwrap_or(0);
        let bucket = span.div_ceil(u64::try_from(points.max(1)).unwrap_or(u64::MAX));
        let bucket = bucket.max(1);
        let mut chart = Chart {
            from,
            to,
            step: bucket,
            resources: Vec::new(),
        };
        for (key, points_of) in lines {
            let thinned = downsample(&points_of, from, bucket, points);
            chart.resource_mut(&key.resource).set(
                &key.kind,
                thinned,
                ResourceLines::scale_of(&key.resource),
            );
        }
        Some(chart)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn rl(entries: &[(&str, &str)]) -> karmada_quota_core::ResourceList {
        karmada_quota_core::ResourceList::parse_map(entries.iter().copied()).expect("test list")
    }

    fn reading<'a>(
        name: &'a str,
        hard: &'a ResourceList,
        used: &'a ResourceList,
        reserved: &'a ResourceList,
        clusters: &'a [(&'a str, &'a ResourceList)],
    ) -> Reading<'a> {
        Reading {
            namespace: "team-a",
            name,
            hard,
            used,
            reserved,
            clusters,
        }
    }

    fn bounds() -> Bounds {
        Bounds {
            window: 600,
            step: 15,
            max_quotas: 3,
        }
    }

    #[test]
    fn a_change_is_sampled_at_once_and_an_unchanged_quota_every_step() {
        let mut s = Store::new(bounds());
        let hard = rl(&[("requests.cpu", "10")]);
        let (one, two) = (rl(&[("requests.cpu", "1")]), rl(&[("requests.cpu", "2")]));
        let none = ResourceList::new();
        for t in 0..15 {
            s.record_all(t, [reading("q", &hard, &one, &none, &[])]);
        }
        assert_eq!(s.samples("team-a", "q"), 1, "unchanged within a step");
        s.record_all(15, [reading("q", &hard, &one, &none, &[])]);
        assert_eq!(s.samples("team-a", "q"), 2, "a step passed");
        s.record_all(16, [reading("q", &hard, &two, &none, &[])]);
        assert_eq!(s.samples("team-a", "q"), 3, "a change");
        // Two changes in one second: the last one stands.
        s.record_all(17, [reading("q", &hard, &one, &none, &[])]);
        s.record_all(17, [reading("q", &hard, &two, &none, &[])]);
        assert_eq!(s.samples("team-a", "q"), 4);
        let c = s.chart("team-a", "q", (0, 17), 100, false).unwrap();
        let cpu = &c.resources[0];
        assert_eq!(cpu.resource, "requests.cpu");
        assert_eq!(cpu.unit, "cores");
        let used: Vec<(i64, f64)> = cpu.used.iter().map(|p| (p.0, p.1)).collect();
        assert_eq!(used, [(0, 1.0), (15, 1.0), (16, 2.0), (17, 2.0)]);
        assert_eq!(cpu.hard.last().map(|p| p.1), Some(10.0));
        assert_eq!(cpu.reserved.last().map(|p| p.1), Some(0.0));
    }

    #[test]
    fn samples_older_than_the_window_are_pruned_and_deleted_quotas_dropped() {
        let mut s = Store::new(bounds());
        let hard = rl(&[("pods", "10")]);
        let used = rl(&[("pods", "1")]);
        let none = ResourceList::new();
        for t in (0..=3000).step_by(15) {
            s.record_all(
                t,
                [
                    reading("q", &hard, &used, &none, &[]),
                    reading("r", &hard, &used, &none, &[]),
                ],
            );
        }
        // 600 s at a 15 s step: 41 samples (both ends in).
        assert_eq!(s.samples("team-a", "q"), 41);
        let c = s.chart("team-a", "q", (0, 3000), 1000, false).unwrap();
        assert_eq!(c.resources[0].used.first().map(|p| p.0), Some(2400));
        s.record_all(3015, [reading("q", &hard, &used, &none, &[])]);
        assert_eq!(s.quotas(), 1, "r was deleted");
        assert_eq!(s.samples("team-a", "r"), 0);
        assert!(s.chart("team-a", "r", (0, 3015), 10, false).is_none());
    }

    #[test]
    fn quotas_beyond_the_cap_are_not_kept_and_say_so() {
        let mut s = Store::new(bounds());
        let hard = rl(&[("pods", "10")]);
        let none = ResourceList::new();
        let names = ["a", "b", "c", "d", "e"];
        s.record_all(0, names.map(|n| reading(n, &hard, &none, &none, &[])));
        assert_eq!(s.quotas(), 3);
        assert!(s.untracked("team-a", "d") && s.untracked("team-a", "e"));
        assert!(!s.untracked("team-a", "a"));
        // One is deleted: the next one gets its place.
        s.record_all(
            1,
            ["a", "b", "d", "e"].map(|n| reading(n, &hard, &none, &none, &[])),
        );
        assert_eq!(s.quotas(), 3);
        assert!(s.samples("team-a", "d") > 0 && s.untracked("team-a", "e"));
    }

    #[test]
    fn a_quota_changing_every_second_stays_within_its_samples_and_keeps_its_peaks() {
        let b = bounds();
        let mut s = Store::new(b);
        let hard = rl(&[("pods", "100")]);
        let none = ResourceList::new();
        let lists: Vec<ResourceList> = (0..10).map(|i| rl(&[("pods", &i.to_string())])).collect();
        let mut most = 0;
        for t in 0..5000_i64 {
            // 0..9 pods, and a single spike of 50 at t = 4700.
            let spike = rl(&[("pods", "50")]);
            let used = if t == 4700 {
                &spike
            } else {
                &lists[usize::try_from(t % 10).unwrap()]
            };
            s.record_all(t, [reading("q", &hard, used, &none, &[])]);
            most = most.max(s.samples("team-a", "q"));
        }
        assert!(most <= b.max_samples(), "{most} > {}", b.max_samples());
        assert!(s.samples("team-a", "q") >= b.max_samples() / 2);
        let c = s.chart("team-a", "q", (4400, 5000), 1000, false).unwrap();
        let used = &c.resources[0].used;
        // Older samples are one per step (a bucket that began before the window went).
        let first = used.first().map_or(i64::MAX, |p| p.0);
        assert!(first <= 4400 + 15, "the window is whole: from {first}");
        let gaps = used.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap();
        assert!(gaps <= 15, "one point per step at least, a gap of {gaps}");
        assert!(
            used.iter().any(|p| p.1 == 50.0),
            "the spike survives thinning"
        );
    }

    #[test]
    fn member_clusters_are_lines_of_their_own_shown_on_demand_and_lines_are_capped() {
        let mut s = Store::new(bounds());
        let hard = rl(&[("requests.cpu", "10"), ("pods", "10")]);
        let used = rl(&[("requests.cpu", "3"), ("pods", "3")]);
        let (m1, m2) = (
            rl(&[("requests.cpu", "2"), ("pods", "2")]),
            rl(&[("requests.cpu", "1"), ("pods", "1")]),
        );
        let none = ResourceList::new();
        let clusters = [("member1", &m1), ("member2", &m2)];
        s.record_all(0, [reading("q", &hard, &used, &none, &clusters)]);
        let c = s.chart("team-a", "q", (0, 10), 10, false).unwrap();
        assert!(c.resources.iter().all(|r| r.clusters.is_empty()));
        let c = s.chart("team-a", "q", (0, 10), 10, true).unwrap();
        let cpu = c
            .resources
            .iter()
            .find(|r| r.resource == "requests.cpu")
            .unwrap();
        let names: Vec<(&str, f64)> = cpu
            .clusters
            .iter()
            .map(|c| (c.cluster.as_str(), c.used[0].1))
            .collect();
        assert_eq!(names, [("member1", 2.0), ("member2", 1.0)]);

        // 100 clusters × 2 resources + 6 totals: only MAX_LINES lines, totals first.
        let many: Vec<(String, ResourceList)> =
            (0..100).map(|i| (format!("m{i:03}"), m1.clone())).collect();
        let many: Vec<(&str, &ResourceList)> = many.iter().map(|(n, l)| (n.as_str(), l)).collect();
        s.record_all(1, [reading("q", &hard, &used, &none, &many)]);
        assert_eq!(s.lines("team-a", "q"), MAX_LINES);
        let c = s.chart("team-a", "q", (0, 10), 10, false).unwrap();
        assert!(
            c.resources
                .iter()
                .all(|r| !r.used.is_empty() && !r.hard.is_empty())
        );
    }

    #[test]
    fn the_memory_held_never_passes_the_bound_whatever_the_churn() {
        let b = Bounds {
            window: 300,
            step: 5,
            max_quotas: 20,
        };
        let mut s = Store::new(b);
        let hard = rl(&[("requests.cpu", "100"), ("requests.memory", "64Gi")]);
        let none = ResourceList::new();
        let names: Vec<String> = (0..30).map(|i| format!("quota-{i}")).collect();
        let mut most = 0;
        for t in 0..1200_i64 {
            let used = rl(&[("requests.cpu", &(t % 97).to_string())]);
            let member = rl(&[("requests.cpu", &(t % 13).to_string())]);
            let clusters: Vec<(String, &ResourceList)> = (0..30)
                .map(|i| (format!("member-{}-{}", i, t % 50), &member))
                .collect();
            let clusters: Vec<(&str, &ResourceList)> =
                clusters.iter().map(|(n, l)| (n.as_str(), *l)).collect();
            s.record_all(
                t,
                names
                    .iter()
                    .map(|n| reading(n, &hard, &used, &none, &clusters)),
            );
            assert!(s.quotas() <= b.max_quotas);
            most = most.max(s.held_bytes());
        }
        assert!(most <= b.max_bytes(), "{most} > {}", b.max_bytes());
        // And a flat quota shares one value list across its samples.
        let mut flat = Store::new(b);
        let used = rl(&[("requests.cpu", "1")]);
        for t in 0..3000 {
            flat.record_all(t, [reading("q", &hard, &used, &none, &[])]);
        }
        assert_eq!(flat.samples("team-a", "q"), 61);
        assert!(flat.held_bytes() < 4096, "{}", flat.held_bytes());
    }
}
