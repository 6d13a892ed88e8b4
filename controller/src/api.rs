//! The computed view of every quota, per cluster: the [`Views`] the reconciler keeps and
//! the dashboard's feed maps into its snapshot. It is served nowhere by itself: the admin
//! port serves health, readiness and metrics only, and every JSON view of quotas is the
//! dashboard's `/api/v1/…`, behind its authentication and visibility rules.
//!
//! A computed quota carries the bindings that use the most of the quota (`topBindings`). Every
//! replica computes it (followers the same view; only the leader writes it to the quota's
//! status).

use std::collections::BTreeMap;
use std::sync::{Arc, LockResult, RwLock, RwLockReadGuard};

use tokio::sync::watch;

use karmada_quota_core::ResourceList;
use karmada_quota_core::status::ClusterView;
use karmada_quota_core::top::BindingUsage;
use karmada_quota_crds::quota::QueueStatus;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaStatus};
use kube::ResourceExt;
use serde::Serialize;

use crate::changes::Changes;
use crate::desired::Computed;

/// A quota's key in [`Views`]: (namespace, name), `""` for a cluster-scoped one.
pub type ViewKey = (String, String);

/// (namespace, name) → the latest computed quota; each change is published on its
/// [`Changes`] (the dashboard's feed awaits them).
#[derive(Clone, Debug, Default)]
pub struct Views {
    map: Arc<RwLock<BTreeMap<ViewKey, ComputedQuota>>>,
    changes: Changes,
}

impl Views {
    /// Every computed quota, read-locked.
    pub fn read(&self) -> LockResult<RwLockReadGuard<'_, BTreeMap<ViewKey, ComputedQuota>>> {
        self.map.read()
    }

    /// Keep `quota` as `key`'s latest; a change other than its computation time is
    /// published.
    pub fn publish(&self, key: ViewKey, quota: ComputedQuota) {
        let changed = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            let changed = map.get_mut(&key).is_none_or(|old| {
                old.computed_at = quota.computed_at.clone();
                *old != quota
            });
            map.insert(key, quota);
            changed
        };
        if changed {
            self.changes.poke();
        }
    }

    /// Forget the computed quotas of `keys` (a deleted quota); published when one was kept.
    pub fn remove<'a>(&self, keys: impl IntoIterator<Item = &'a ViewKey>) {
        let removed = {
            let mut map = self.map.write().unwrap_or_else(|e| e.into_inner());
            let mut removed = false;
            for key in keys {
                removed |= map.remove(key).is_some();
            }
            removed
        };
        if removed {
            self.changes.poke();
        }
    }

    /// Every later change.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// One quota as the controller last computed it.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComputedQuota {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// metadata.generation it was computed for.
    pub generation: Option<i64>,
    /// Limits (empty for an invalid spec).
    pub hard: ResourceList,
    /// Usage of observed bindings, summed over clusters.
    pub used: ResourceList,
    /// Effective usage = used + Σ pending reservations (what admission checks against).
    pub effective: ResourceList,
    /// Per member cluster: placed `used` and measured `observed` (absent when unknown).
    pub clusters: Vec<ClusterView>,
    /// Pending reservations after pruning.
    pub reservations: Vec<PendingReservation>,
    /// Clusters running more than placed: cluster → the names above.
    pub drift: BTreeMap<String, ResourceList>,
    /// Number of bindings the quota matches.
    pub bindings: usize,
    /// The bindings that use the largest share of hard, highest first (at most
    /// `core::top::TOP_BINDINGS`): name, usage of the hard names, clusters.
    pub top_bindings: Vec<BindingUsage>,
    /// The quota's conditions (as last written by the leader).
    pub conditions: Vec<QuotaCondition>,
    /// A KarmadaClusterQuota (`namespace` empty): the namespaces it selects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// A KarmadaClusterQuota: each selected namespace's usage.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub shares: BTreeMap<String, ResourceList>,
    /// Why nothing was computed (invalid spec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When it was computed (RFC 3339).
    pub computed_at: String,
    /// `spec.admission` with its defaults filled in.
    pub admission: AdmissionSummary,
    /// The waiting line as the leader last wrote it (`status.queue`); absent while
    /// nobody waits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStatus>,
}

/// What a quota does with a binding that does not fit (`spec.admission`, defaults
/// filled in).
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSummary {
    /// `Refuse` or `Queue`.
    pub mode: String,
    /// The line's order: `BestEffortFIFO` or `StrictFIFO`.
    pub order: String,
}

impl Default for AdmissionSummary {
    fn default() -> Self {
        Self {
            mode: "Refuse".into(),
            order: "BestEffortFIFO".into(),
        }
    }
}

impl AdmissionSummary {
    /// The quota's `spec.admission`, as written (a value the validation refuses is
    /// shown as written: the quota's error says why).
    pub fn of(quota: &KarmadaQuota) -> Self {
        let spec = quota.spec.admission.as_ref();
        let d = Self::default();
        Self {
            mode: spec.and_then(|a| a.mode.clone()).unwrap_or(d.mode),
            order: spec.and_then(|a| a.order.clone()).unwrap_or(d.order),
        }
    }

    /// Whether bindings that do not fit wait instead of being refused.
    pub fn queueing(&self) -> bool {
        self.mode == "Queue"
    }
}

impl ComputedQuota {
    /// For a replica that measures no member (`--role=dashboard`): each cluster's
    /// `observed` as the controller wrote it in `status` (clusters only the status lists
    /// are added with its placed usage), and the drift recomputed from them. A value that
    /// does not parse leaves that cluster unmeasured.
    pub fn observed_from_status(&mut self, status: &KarmadaQuotaStatus) {
        // The one parse of `status.clusters` (the webhook's too).
        for m in karmada_quota_crds::convert::members_of(Some(status)) {
            match self.clusters.iter_mut().find(|v| v.name == m.name) {
                Some(view) => view.observed = m.observed,
                None => self.clusters.push(ClusterView {
                    name: m.name,
                    used: m.placed,
                    observed: m.observed,
                    ..ClusterView::default()
                }),
            }
        }
        self.clusters.sort_by(|a, b| a.name.cmp(&b.name));
        self.drift = karmada_quota_core::status::drift(&self.clusters);
    }
}

/// A pending reservation.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PendingReservation {
    /// Binding name.
    pub binding: String,
    /// Binding uid.
    pub uid: String,
    /// Binding generation admitted.
    pub generation: i64,
    /// Admitted increase.
    pub reserved: ResourceList,
    /// When it lapses (RFC 3339).
    pub expiration_time: String,
}

/// A condition, without its bookkeeping fields.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaCondition {
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
    pub last_transition_time: String,
}

impl ComputedQuota {
    /// The view of `quota`, computed as `computed`, whose status now is `status`.
    pub fn new(
        quota: &KarmadaQuota,
        computed: &Computed,
        status: &KarmadaQuotaStatus,
        now: jiff::Timestamp,
    ) -> Self {
        let conditions = status
            .conditions
            .iter()
            .map(|c| QuotaCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.0.to_string(),
            })
            .collect();
        let mut r = Self {
            namespace: quota.namespace().unwrap_or_default(),
            name: quota.name_any(),
            generation: quota.metadata.generation,
            hard: ResourceList::new(),
            used: ResourceList::new(),
            effective: ResourceList::new(),
            clusters: Vec::new(),
            reservations: Vec::new(),
            drift: BTreeMap::new(),
            bindings: 0,
            top_bindings: Vec::new(),
            namespaces: Vec::new(),
            shares: BTreeMap::new(),
            conditions,
            error: None,
            computed_at: now.to_string(),
            admission: AdmissionSummary::of(quota),
            queue: status.queue.clone().filter(|q| q.total > 0),
        };
        match computed {
            Computed::Invalid(errors) => {
                r.error = Some(
                    errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                );
            }
            Computed::Valid { view, .. } => {
                r.hard = view.hard.clone();
                r.used = view.used.clone();
                r.effective = view.effective.clone();
                r.clusters = view.clusters.clone();
                r.drift = view.drift.clone();
                r.bindings = view.bindings;
                r.top_bindings = view.top_bindings.clone();
                r.reservations = view
                    .reservations
                    .iter()
                    .map(|e| PendingReservation {
                        binding: e.reserved_by.name.clone(),
                        uid: e.reserved_by.uid.clone(),
                        generation: e.generation,
                        reserved: e.reserved.clone(),
                        expiration_time: karmada_quota_crds::convert::unix_to_time(
                            e.expiration_time,
                        )
                        .0
                        .to_string(),
                    })
                    .collect();
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::rl;
    use karmada_quota_crds::convert::list_to_api;
    use karmada_quota_crds::quota::ClusterUsage;

    fn view(name: &str, used: &[(&str, &str)], observed: Option<&[(&str, &str)]>) -> ClusterView {
        ClusterView {
            name: name.into(),
            used: rl(used),
            observed: observed.map(rl),
            ..ClusterView::default()
        }
    }

    #[test]
    fn a_dashboard_replica_takes_observed_usage_and_drift_from_the_status() {
        let mut r = ComputedQuota {
            namespace: "team-a".into(),
            name: "q".into(),
            generation: Some(1),
            hard: rl(&[("cpu", "4")]),
            used: rl(&[("cpu", "2")]),
            effective: rl(&[("cpu", "2")]),
            clusters: vec![
                view("m1", &[("cpu", "1")], None),
                view("m2", &[("cpu", "1")], None),
            ],
            reservations: Vec::new(),
            drift: BTreeMap::new(),
            bindings: 1,
            top_bindings: Vec::new(),
            conditions: Vec::new(),
            namespaces: Vec::new(),
            shares: BTreeMap::new(),
            error: None,
            computed_at: "2026-01-01T00:00:00Z".into(),
            admission: AdmissionSummary::default(),
            queue: None,
        };
        let usage =
            |name: &str, used: &[(&str, &str)], observed: Option<&[(&str, &str)]>| ClusterUsage {
                name: name.into(),
                used: list_to_api(&rl(used)),
                observed: observed.map(|o| list_to_api(&rl(o))),
                ..ClusterUsage::default()
            };
        let status = KarmadaQuotaStatus {
            clusters: vec![
                usage("m1", &[("cpu", "1")], Some(&[("cpu", "3")])),
                usage("m2", &[("cpu", "1")], None),
                // Pods run there outside Karmada: only the status knows the member.
                usage("m0", &[("cpu", "0")], Some(&[("cpu", "500m")])),
            ],
            ..KarmadaQuotaStatus::default()
        };
        r.observed_from_status(&status);
        assert_eq!(
            r.clusters,
            vec![
                view("m0", &[("cpu", "0")], Some(&[("cpu", "500m")])),
                view("m1", &[("cpu", "1")], Some(&[("cpu", "3")])),
                view("m2", &[("cpu", "1")], None),
            ]
        );
        assert_eq!(
            r.drift,
            BTreeMap::from([
                ("m0".to_owned(), rl(&[("cpu", "500m")])),
                ("m1".to_owned(), rl(&[("cpu", "3")])),
            ])
        );
    }
}
