//! Prometheus metrics of the controller (`kq_controller_*`, `kq_quota_*` and
//! `kq_namespace_labels`).
//!
//! The quota series follow kube-state-metrics' habits (`kube_resourcequota`): one series
//! per namespace, quota and resource (and member cluster), values in base units as floats
//! (cores, bytes, counts), labels `namespace`, `quota`, `resource`, `cluster`; namespace
//! labels as an info series (`kube_namespace_labels`), joined by `namespace`. docs/design.md
//! §6 lists them; the usage report (core's `billing`) reads `kq_quota_cluster_used`,
//! `kq_quota_cluster_observed` and `kq_namespace_labels`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;
use std::time::Duration;

use karmada_quota_billing::{NAMESPACE_LABELS_METRIC, label_name};
use karmada_quota_core::Quantity;
#[cfg(test)]
use karmada_quota_core::ResourceList;
use karmada_quota_core::status::{ClusterView, QuotaView};
use karmada_quota_shell::events::EventMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A floating-point gauge (quantities such as `1500m` are fractional).
type FGauge = Gauge<f64, AtomicU64>;

/// One resource of one quota.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QuotaResource {
    /// Quota namespace.
    pub namespace: String,
    /// Quota name.
    pub quota: String,
    /// Resource name (`requests.cpu`, `pods`, …).
    pub resource: String,
}

/// One resource of one quota in one member cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct ClusterResource {
    /// Quota namespace.
    pub namespace: String,
    /// Quota name.
    pub quota: String,
    /// Member cluster.
    pub cluster: String,
    /// Resource name.
    pub resource: String,
}

/// One quota in one member cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct QuotaCluster {
    /// Quota namespace.
    pub namespace: String,
    /// Quota name.
    pub quota: String,
    /// Member cluster.
    pub cluster: String,
}

/// A reconcile failure, by [`crate::error::Error::metric_label`].
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// Error kind.
    pub error: String,
}

/// A watch, by what it watches (`karmadaquotas`, `resourcebindings`, `clusters`,
/// `pods/<member>`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// What the watch watches.
    pub watch: String,
}

/// A read of an expired entry's binding, by what it found (`not_stored`, `stored`,
/// `failed`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReadLabels {
    /// What the read found.
    pub result: String,
}

/// A member cluster.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct MemberLabels {
    /// Member cluster name.
    pub cluster: String,
}

/// `namespace` and `label_<team label>` of one namespace (kube-state-metrics'
/// `kube_namespace_labels` shape; the label key is known only at run time).
type NamespaceLabels = Vec<(String, String)>;

/// The label sets last exported for one quota, so stale ones can be removed.
#[derive(Default)]
struct QuotaSeries {
    resources: BTreeSet<QuotaResource>,
    clusters: BTreeSet<ClusterResource>,
    drift: BTreeSet<QuotaCluster>,
}

/// Every metric of the controller.
pub struct Metrics {
    hard: Family<QuotaResource, FGauge>,
    used: Family<QuotaResource, FGauge>,
    reserved: Family<QuotaResource, FGauge>,
    cluster_used: Family<ClusterResource, FGauge>,
    cluster_observed: Family<ClusterResource, FGauge>,
    drift: Family<QuotaCluster, Gauge>,
    reconciles: Counter,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_duration: Histogram,
    watch_restarts: Family<WatchLabels, Counter>,
    status_writes: Counter,
    status_conflicts: Counter,
    expired_entry_reads: Family<ReadLabels, Counter>,
    member_reachable: Family<MemberLabels, Gauge>,
    leader: Gauge,
    bindings: Gauge,
    series: Mutex<HashMap<(String, String), QuotaSeries>>,
    namespace_labels: Family<NamespaceLabels, Gauge>,
    exported_namespaces: Mutex<BTreeSet<NamespaceLabels>>,
    events: Arc<EventMetrics>,
}

impl Metrics {
    /// Create the metrics and register them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self {
            hard: Family::default(),
            used: Family::default(),
            reserved: Family::default(),
            cluster_used: Family::default(),
            cluster_observed: Family::default(),
            drift: Family::default(),
            reconciles: Counter::default(),
            reconcile_errors: Family::default(),
            reconcile_duration: Histogram::new(exponential_buckets(0.001, 2.0, 14)),
            watch_restarts: Family::default(),
            status_writes: Counter::default(),
            status_conflicts: Counter::default(),
            expired_entry_reads: Family::default(),
            member_reachable: Family::default(),
            leader: Gauge::default(),
            bindings: Gauge::default(),
            series: Mutex::new(HashMap::new()),
            namespace_labels: Family::default(),
            exported_namespaces: Mutex::new(BTreeSet::new()),
            events: Arc::default(),
        };
        m.register_quota_series(registry);
        m.register_controller_series(registry);
        registry.register(
            NAMESPACE_LABELS_METRIC,
            "1 for each namespace carrying the team label (--dashboard-team-label), with its \
             value as label_<key> (kube-state-metrics' kube_namespace_labels)",
            m.namespace_labels.clone(),
        );
        m.events
            .register(registry.sub_registry_with_prefix("kq_controller"), "events");
        m
    }

    /// The per-quota series (`kq_quota_…`).
    fn register_quota_series(&self, registry: &mut Registry) {
        registry.register(
            "kq_quota_hard",
            "Hard limit of a KarmadaQuota resource",
            self.hard.clone(),
        );
        registry.register(
            "kq_quota_used",
            "Usage of a KarmadaQuota resource by observed bindings, summed over member clusters",
            self.used.clone(),
        );
        registry.register(
            "kq_quota_reserved",
            "Admitted but not yet observed usage (sum of status.reservations)",
            self.reserved.clone(),
        );
        registry.register(
            "kq_quota_cluster_used",
            "Usage Karmada placed in a member cluster, per quota resource",
            self.cluster_used.clone(),
        );
        registry.register(
            "kq_quota_cluster_observed",
            "Usage measured in a member cluster (non-terminal pods' requests), per quota resource",
            self.cluster_observed.clone(),
        );
        registry.register(
            "kq_quota_drift",
            "1 when a member cluster runs more than Karmada placed there for the quota",
            self.drift.clone(),
        );
    }

    /// The controller's own series (`kq_controller_…`, but its events').
    fn register_controller_series(&self, registry: &mut Registry) {
        registry.register(
            "kq_controller_reconciles",
            "Quota reconciles",
            self.reconciles.clone(),
        );
        registry.register(
            "kq_controller_reconcile_errors",
            "Failed quota reconciles, by error",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "kq_controller_reconcile_duration_seconds",
            "Duration of a quota reconcile",
            self.reconcile_duration.clone(),
        );
        registry.register(
            "kq_controller_watch_restarts",
            "Watch errors (each followed by a retry with backoff), by watch",
            self.watch_restarts.clone(),
        );
        registry.register(
            "kq_controller_status_writes",
            "Quota status writes",
            self.status_writes.clone(),
        );
        registry.register(
            "kq_controller_status_conflicts",
            "Quota status writes refused with 409 Conflict (re-read and recomputed)",
            self.status_conflicts.clone(),
        );
        registry.register(
            "kq_controller_expired_entry_reads",
            "Quorum reads of the bindings of expired reservation entries the watch has not \
             shown, by result: not_stored (the entry goes), stored (kept: the watch lags), \
             failed (kept, read again)",
            self.expired_entry_reads.clone(),
        );
        registry.register(
            "kq_controller_member_reachable",
            "1 when a member cluster's pods are being watched, 0 when it is unreachable",
            self.member_reachable.clone(),
        );
        registry.register(
            "kq_controller_leader",
            "1 while this replica holds the leader Lease (and so writes status)",
            self.leader.clone(),
        );
        registry.register(
            "kq_controller_bindings",
            "ResourceBindings in the index",
            self.bindings.clone(),
        );
    }

    /// The event writer's metrics (`kq_controller_events_…`).
    pub fn events(&self) -> Arc<EventMetrics> {
        self.events.clone()
    }

    /// Export `label_key` of every namespace in `teams` (namespace → value) as
    /// `kq_namespace_labels{namespace, label_<key>} 1`, dropping namespaces no longer there.
    pub fn set_namespace_labels(&self, label_key: &str, teams: &BTreeMap<String, String>) {
        let name = label_name(label_key);
        let next: BTreeSet<NamespaceLabels> = teams
            .iter()
            .map(|(ns, team)| {
                vec![
                    ("namespace".to_owned(), ns.clone()),
                    (name.clone(), team.clone()),
                ]
            })
            .collect();
        let mut prev = self.exported_namespaces.lock();
        for gone in prev.difference(&next) {
            self.namespace_labels.remove(gone);
        }
        for labels in &next {
            self.namespace_labels.get_or_create(labels).set(1);
        }
        *prev = next;
    }

    /// Count one reconcile that took `elapsed`.
    pub fn reconciled(&self, elapsed: Duration) {
        self.reconciles.inc();
        self.reconcile_duration.observe(elapsed.as_secs_f64());
    }

    /// Count one failed reconcile.
    pub fn reconcile_failed(&self, label: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                error: label.to_owned(),
            })
            .inc();
    }

    /// Count one watch error.
    pub fn watch_restarted(&self, watch: &str) {
        self.watch_restarts
            .get_or_create(&WatchLabels {
                watch: watch.to_owned(),
            })
            .inc();
    }

    /// Count one status write.
    pub fn status_written(&self) {
        self.status_writes.inc();
    }

    /// Count one status write conflict.
    pub fn status_conflict(&self) {
        self.status_conflicts.inc();
    }

    /// Count the reads of one read step.
    pub fn expired_entries_read(&self, reads: &crate::expired::Outcome) {
        for (result, n) in [
            ("not_stored", reads.not_stored),
            ("stored", reads.stored),
            ("failed", reads.failed),
        ] {
            if n > 0 {
                self.expired_entry_reads
                    .get_or_create(&ReadLabels {
                        result: result.to_owned(),
                    })
                    .inc_by(n as u64);
            }
        }
    }

    /// Set whether a member is reachable.
    pub fn set_member_reachable(&self, cluster: &str, reachable: bool) {
        self.member_reachable
            .get_or_create(&MemberLabels {
                cluster: cluster.to_owned(),
            })
            .set(i64::from(reachable));
    }

    /// Forget a member.
    pub fn remove_member(&self, cluster: &str) {
        self.member_reachable.remove(&MemberLabels {
            cluster: cluster.to_owned(),
        });
    }

    /// Set the leader gauge.
    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    /// Set the number of indexed bindings.
    pub fn set_bindings(&self, n: usize) {
        self.bindings.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// Export one quota's computed view (and drop series it no longer has).
    pub fn observe_quota(&self, view: &QuotaView) {
        let (ns, name) = (view.namespace.as_str(), view.name.as_str());
        let qr = |resource: &str| QuotaResource {
            namespace: ns.to_owned(),
            quota: name.to_owned(),
            resource: resource.to_owned(),
        };
        let mut next = QuotaSeries::default();
        for (resource, hard) in view.hard.iter() {
            let l = qr(resource);
            self.hard.get_or_create(&l).set(as_f64(hard));
            self.used
                .get_or_create(&l)
                .set(as_f64(&view.used.get_or_zero(resource)));
            self.reserved
                .get_or_create(&l)
                .set(as_f64(&view.reserved.get_or_zero(resource)));
            next.resources.insert(l);
        }
        for c in &view.clusters {
            self.observe_cluster(view, c, &mut next);
        }
        let mut series = self.series.lock();
        if let Some(prev) = series.insert((ns.to_owned(), name.to_owned()), next) {
            let cur = &series[&(ns.to_owned(), name.to_owned())];
            self.drop_series(&prev, Some(cur));
        }
    }

    /// Export one member cluster `c` of `view`: placed and measured usage, drift; the
    /// series written go into `next`.
    fn observe_cluster(&self, view: &QuotaView, c: &ClusterView, next: &mut QuotaSeries) {
        let (ns, name) = (view.namespace.as_str(), view.name.as_str());
        let cr = |resource: &str| ClusterResource {
            namespace: ns.to_owned(),
            quota: name.to_owned(),
            cluster: c.name.clone(),
            resource: resource.to_owned(),
        };
        for (resource, q) in c.used.iter() {
            let l = cr(resource);
            self.cluster_used.get_or_create(&l).set(as_f64(q));
            next.clusters.insert(l);
        }
        match &c.observed {
            Some(obs) => {
                for (resource, q) in obs.iter() {
                    let l = cr(resource);
                    self.cluster_observed.get_or_create(&l).set(as_f64(q));
                    next.clusters.insert(l);
                }
            }
            None => {
                // Unknown is not zero: drop the series rather than report 0.
                for resource in c.used.names() {
                    self.cluster_observed.remove(&cr(resource));
                }
            }
        }
        let l = QuotaCluster {
            namespace: ns.to_owned(),
            quota: name.to_owned(),
            cluster: c.name.clone(),
        };
        self.drift
            .get_or_create(&l)
            .set(i64::from(view.drift.contains_key(&c.name)));
        next.drift.insert(l);
    }

    /// Drop every series of a deleted quota.
    pub fn forget_quota(&self, namespace: &str, name: &str) {
        let mut series = self.series.lock();
        if let Some(prev) = series.remove(&(namespace.to_owned(), name.to_owned())) {
            self.drop_series(&prev, None);
        }
    }

    fn drop_series(&self, prev: &QuotaSeries, cur: Option<&QuotaSeries>) {
        for l in &prev.resources {
            if cur.is_none_or(|c| !c.resources.contains(l)) {
                self.hard.remove(l);
                self.used.remove(l);
                self.reserved.remove(l);
            }
        }
        for l in &prev.clusters {
            if cur.is_none_or(|c| !c.clusters.contains(l)) {
                self.cluster_used.remove(l);
                self.cluster_observed.remove(l);
            }
        }
        for l in &prev.drift {
            if cur.is_none_or(|c| !c.drift.contains(l)) {
                self.drift.remove(l);
            }
        }
    }
}

/// A quantity as a float, for export only (never for quota arithmetic).
#[allow(clippy::cast_precision_loss)]
fn as_f64(q: &Quantity) -> f64 {
    q.nanos() as f64 / 1e9
}

/// Sum of a list's values as floats (for tests and logs).
#[cfg(test)]
fn total(list: &ResourceList) -> f64 {
    list.iter().map(|(_, q)| as_f64(q)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::status::ClusterView;

    fn rl(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).unwrap()))
            .collect()
    }

    fn encode(reg: &Registry) -> String {
        let mut s = String::new();
        prometheus_client::encoding::text::encode(&mut s, reg).unwrap();
        s
    }

    #[test]
    fn quota_gauges_follow_the_view_and_drop_stale_series() {
        let mut reg = Registry::default();
        let m = Metrics::register(&mut reg);
        let mut view = QuotaView {
            namespace: "team-a".into(),
            name: "q".into(),
            hard: rl(&[("requests.cpu", "10"), ("pods", "5")]),
            used: rl(&[("requests.cpu", "1500m"), ("pods", "2")]),
            reserved: rl(&[("requests.cpu", "1"), ("pods", "1")]),
            effective: rl(&[("requests.cpu", "2500m"), ("pods", "3")]),
            clusters: vec![ClusterView {
                name: "member1".into(),
                used: rl(&[("requests.cpu", "1500m"), ("pods", "2")]),
                observed: Some(rl(&[("requests.cpu", "2"), ("pods", "3")])),
                ..ClusterView::default()
            }],
            drift: [("member1".to_owned(), rl(&[("pods", "3")]))].into(),
            ..QuotaView::default()
        };
        assert!((total(&view.used) - 3.5).abs() < 1e-9);
        m.observe_quota(&view);
        let text = encode(&reg);
        assert!(
            text.contains(
                r#"kq_quota_used{namespace="team-a",quota="q",resource="requests.cpu"} 1.5"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"kq_quota_reserved{namespace="team-a",quota="q",resource="pods"} 1.0"#),
            "{text}"
        );
        assert!(text.contains(r#"kq_quota_cluster_observed{namespace="team-a",quota="q",cluster="member1",resource="requests.cpu"} 2.0"#), "{text}");
        assert!(
            text.contains(r#"kq_quota_drift{namespace="team-a",quota="q",cluster="member1"} 1"#),
            "{text}"
        );

        view.hard = rl(&[("pods", "5")]);
        view.clusters.clear();
        view.drift.clear();
        m.observe_quota(&view);
        let text = encode(&reg);
        assert!(!text.contains(r#"resource="requests.cpu""#), "{text}");
        assert!(!text.contains("kq_quota_drift{"), "{text}");

        m.forget_quota("team-a", "q");
        assert!(!encode(&reg).contains("kq_quota_hard{"));
    }

    #[test]
    fn namespace_labels_are_an_info_series_that_follows_the_teams() {
        let mut reg = Registry::default();
        let m = Metrics::register(&mut reg);
        let teams: BTreeMap<String, String> = [
            ("team-a".to_owned(), "alpha".to_owned()),
            ("team-b".to_owned(), "beta".to_owned()),
        ]
        .into();
        m.set_namespace_labels("karmada-quota.io/team", &teams);
        let text = encode(&reg);
        assert!(
            text.contains(
                r#"kq_namespace_labels{namespace="team-a",label_karmada_quota_io_team="alpha"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"namespace="team-b",label_karmada_quota_io_team="beta""#));
        // team-a changes team, team-b loses its label.
        let teams: BTreeMap<String, String> = [("team-a".to_owned(), "gamma".to_owned())].into();
        m.set_namespace_labels("karmada-quota.io/team", &teams);
        let text = encode(&reg);
        assert!(text.contains(r#"namespace="team-a",label_karmada_quota_io_team="gamma"} 1"#));
        assert!(!text.contains("alpha"), "{text}");
        assert!(!text.contains("team-b"), "{text}");
    }
}
