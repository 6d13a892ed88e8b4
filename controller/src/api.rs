//! The computed view of every quota: the [`Views`] the reconciler keeps. One model from
//! the reconcile to the page: a view is the dashboard's [`Quota`] ([`computed_quota`]),
//! which the dashboard's feed serves as it is (adding the quota's recent denials) — its
//! `/api/v1/…` JSON and its pages, behind its authentication and visibility rules. The
//! admin port serves health, readiness and metrics only.
//!
//! A view carries the bindings that use the most of the quota (`topBindings`). Every
//! replica computes it (followers the same view; only the leader writes it to the quota's
//! status).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{RwLock, RwLockReadGuard};

use tokio::sync::watch;

use karmada_quota_core::status::ClusterView;
use karmada_quota_crds::convert::stored_list_from_api;
use karmada_quota_crds::{KarmadaQuotaStatus, QuotaObject};
use karmada_quota_dashboard::model::{ClusterUsage, Condition, Line, Quota, Reservation, Waiting};
use kube::ResourceExt;

use crate::changes::Changes;
use crate::desired::Computed;

/// A quota's key in [`Views`]: (namespace, name), `""` for a cluster-scoped one.
pub type ViewKey = (String, String);

/// (namespace, name) → the latest computed quota; each change is published on its
/// [`Changes`] (the dashboard's feed awaits them).
#[derive(Clone, Debug, Default)]
pub struct Views {
    map: Arc<RwLock<BTreeMap<ViewKey, Quota>>>,
    changes: Changes,
}

impl Views {
    /// Every computed quota, read-locked.
    pub fn read(&self) -> RwLockReadGuard<'_, BTreeMap<ViewKey, Quota>> {
        self.map.read()
    }

    /// Keep `quota` as `key`'s latest; a change other than its computation time is
    /// published.
    pub fn publish(&self, key: ViewKey, quota: Quota) {
        let changed = {
            let mut map = self.map.write();
            let changed = map.get_mut(&key).is_none_or(|old| {
                old.computed_at = quota.computed_at;
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
            let mut map = self.map.write();
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

/// Build the one view of `quota` (the dashboard's [`Quota`], served as it is by the
/// dashboard's JSON API and pages), computed as `computed`, whose status now is `status`.
/// `denials` are left empty: the dashboard's feed adds the quota's recent ones.
pub fn computed_quota<K: QuotaObject>(
    quota: &K,
    computed: &Computed,
    status: &KarmadaQuotaStatus,
    now: jiff::Timestamp,
) -> Quota {
    let conditions = status
        .conditions
        .iter()
        .map(|c| Condition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
            since: c.last_transition_time.0.to_string(),
        })
        .collect();
    let namespace = quota.namespace().unwrap_or_default();
    let mut q = Quota {
        line: line(quota, status, &namespace),
        namespace,
        name: quota.name_any(),
        conditions,
        computed_at: now.as_second(),
        ..Quota::default()
    };
    match computed {
        Computed::Invalid(errors) => {
            q.error = Some(
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; "),
            );
        }
        Computed::Valid { view, .. } => {
            q.hard = view.hard.clone();
            q.used = view.used.clone();
            q.clusters = view.clusters.iter().map(cluster_usage).collect();
            q.bindings = view.bindings;
            q.top_bindings = view.top_bindings.clone();
            // Core sums the entries (the reservation-store fence counts for no one) and
            // `fence::pending` lists them without it.
            q.reserved = karmada_quota_core::ledger::effective_usage(
                &karmada_quota_core::ResourceList::new(),
                &view.reservations,
                None,
            );
            for e in karmada_quota_core::fence::pending(&view.reservations) {
                q.reservations.push(Reservation {
                    binding: e.reserved_by.name.clone(),
                    uid: e.reserved_by.uid.clone(),
                    reserved: e.reserved.clone(),
                    expires: karmada_quota_crds::convert::unix_to_time(e.expiration_time)
                        .0
                        .to_string(),
                });
            }
        }
    }
    q
}

fn cluster_usage(c: &ClusterView) -> ClusterUsage {
    ClusterUsage {
        name: c.name.clone(),
        placed: c.used.clone(),
        observed: c.observed.clone(),
        draining: c.draining.clone(),
        draining_unknown: c.draining_unknown,
    }
}

/// The quota's waiting line: while it queues (`spec.admission.mode: Queue`), or while
/// some still wait in `status.queue` (switched back to refusal).
fn line<K: QuotaObject>(quota: &K, status: &KarmadaQuotaStatus, namespace: &str) -> Option<Line> {
    let admission = quota.quota_spec().admission.as_ref();
    let queueing = admission.and_then(|a| a.mode.as_deref()) == Some("Queue");
    let queue = status.queue.as_ref().filter(|q| q.total > 0);
    if !queueing && queue.is_none() {
        return None;
    }
    // The controller wrote these values: one that does not parse shows as nothing asked.
    let list = |map, field| stored_list_from_api(map, field).unwrap_or_default();
    let queue = queue.cloned().unwrap_or_default();
    Some(Line {
        queueing,
        order: admission
            .and_then(|a| a.order.clone())
            .unwrap_or_else(|| "BestEffortFIFO".into()),
        total: queue.total,
        waiting: queue
            .waiting
            .iter()
            .map(|w| Waiting {
                position: w.position,
                // A KarmadaQuota's line leaves the namespace out: it is the quota's.
                namespace: if w.namespace.is_empty() {
                    namespace.to_owned()
                } else {
                    w.namespace.clone()
                },
                name: w.name.clone(),
                priority: w.priority,
                asks: list(&w.asks, "asks"),
                short: list(&w.short, "short"),
                since: w.since.0.as_second(),
                stuck: w.stuck.clone(),
            })
            .collect(),
    })
}

/// For a replica that measures no member (`--role=dashboard`): each cluster's `observed`
/// as the controller wrote it in `status` (clusters only the status lists are added with
/// their placed usage). A value that does not parse leaves that cluster unmeasured.
pub fn observed_from_status(q: &mut Quota, status: &KarmadaQuotaStatus) {
    // The one parse of `status.clusters` (the webhook's too).
    for m in karmada_quota_crds::convert::members_of(Some(status)) {
        match q.clusters.iter_mut().find(|c| c.name == m.name) {
            Some(c) => c.observed = m.observed,
            None => q.clusters.push(ClusterUsage {
                name: m.name,
                placed: m.placed,
                observed: m.observed,
                ..ClusterUsage::default()
            }),
        }
    }
    q.clusters.sort_by(|a, b| a.name.cmp(&b.name));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::mk_quota;
    use crate::testutil::rl;
    use karmada_quota_core::quota::{Reservation as CoreReservation, ReservedBy};
    use karmada_quota_core::status::QuotaView;
    use karmada_quota_crds::convert::list_to_api;
    use karmada_quota_crds::quota::ClusterUsage as StatusClusterUsage;

    fn usage(
        name: &str,
        placed: &[(&str, &str)],
        observed: Option<&[(&str, &str)]>,
    ) -> ClusterUsage {
        ClusterUsage {
            name: name.into(),
            placed: rl(placed),
            observed: observed.map(rl),
            ..ClusterUsage::default()
        }
    }

    #[test]
    fn a_dashboard_replica_takes_observed_usage_and_drift_from_the_status() {
        let mut q = Quota {
            namespace: "team-a".into(),
            name: "q".into(),
            hard: rl(&[("cpu", "4")]),
            used: rl(&[("cpu", "2")]),
            clusters: vec![
                usage("m1", &[("cpu", "1")], None),
                usage("m2", &[("cpu", "1")], None),
            ],
            bindings: 1,
            ..Quota::default()
        };
        let status_usage =
            |name: &str, used: &[(&str, &str)], observed: Option<&[(&str, &str)]>| {
                StatusClusterUsage {
                    name: name.into(),
                    used: list_to_api(&rl(used)),
                    observed: observed.map(|o| list_to_api(&rl(o))),
                    ..StatusClusterUsage::default()
                }
            };
        let status = KarmadaQuotaStatus {
            clusters: vec![
                status_usage("m1", &[("cpu", "1")], Some(&[("cpu", "3")])),
                status_usage("m2", &[("cpu", "1")], None),
                // Pods run there outside Karmada: only the status knows the member.
                status_usage("m0", &[("cpu", "0")], Some(&[("cpu", "500m")])),
            ],
            ..KarmadaQuotaStatus::default()
        };
        observed_from_status(&mut q, &status);
        assert_eq!(
            q.clusters,
            vec![
                usage("m0", &[("cpu", "0")], Some(&[("cpu", "500m")])),
                usage("m1", &[("cpu", "1")], Some(&[("cpu", "3")])),
                usage("m2", &[("cpu", "1")], None),
            ]
        );
        // The page's drift (what runs above what Karmada placed) follows from them.
        let drifting: Vec<&str> = q
            .clusters
            .iter()
            .filter(|c| !c.drift().is_empty())
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(drifting, ["m0", "m1"]);
    }

    fn valid(view: QuotaView) -> Computed {
        Computed::Valid {
            view: Box::new(view),
            unparsed: Vec::new(),
            incomplete: Default::default(),
            folded_through: None,
        }
    }

    fn computed_view() -> QuotaView {
        QuotaView {
            namespace: "team-a".into(),
            name: "q".into(),
            hard: rl(&[("pods", "10")]),
            used: rl(&[("pods", "3")]),
            clusters: vec![ClusterView {
                name: "m1".into(),
                used: rl(&[("pods", "3")]),
                observed: Some(rl(&[("pods", "4")])),
                ..ClusterView::default()
            }],
            reservations: vec![
                CoreReservation {
                    reserved_by: ReservedBy {
                        name: "b".into(),
                        uid: "u".into(),
                        ..ReservedBy::default()
                    },
                    generation: 1,
                    reserved: rl(&[("pods", "2")]),
                    expiration_time: 1_767_225_600,
                },
                // The batch store's fence: no one's reservation, neither listed nor summed.
                karmada_quota_core::fence::fence_entry(&rl(&[("pods", "10")])),
            ],
            bindings: 2,
            top_bindings: vec![karmada_quota_core::top::BindingUsage {
                name: "web".into(),
                usage: rl(&[("pods", "2")]),
                clusters: vec!["m1".into()],
            }],
            ..QuotaView::default()
        }
    }

    #[test]
    fn the_view_holds_reserved_as_the_sum_of_reservations_and_the_page_reads_it() {
        let quota = mk_quota("team-a", "q", &[("pods", "10")]);
        let now: jiff::Timestamp = "2026-01-01T00:00:10Z".parse().unwrap();
        let q = computed_quota(
            &quota,
            &valid(computed_view()),
            &KarmadaQuotaStatus::default(),
            now,
        );
        assert_eq!((q.namespace.as_str(), q.name.as_str()), ("team-a", "q"));
        assert_eq!(q.reserved, rl(&[("pods", "2")]));
        assert_eq!(q.reservations.len(), 1);
        assert_eq!(q.reservations[0].binding, "b");
        assert_eq!(q.reservations[0].expires, "2026-01-01T00:00:00Z");
        assert_eq!(q.used, rl(&[("pods", "3")]));
        assert_eq!(q.clusters[0].placed, rl(&[("pods", "3")]));
        assert_eq!(q.clusters[0].observed, Some(rl(&[("pods", "4")])));
        assert_eq!(q.clusters[0].drift(), ["pods"]);
        assert_eq!(q.computed_at, 1_767_225_610);
        assert_eq!(q.rows()[0].percent, Some(50.0));
        assert_eq!(q.top_bindings[0].name, "web");
        assert!(q.denials.is_empty() && q.line.is_none() && q.error.is_none());
    }

    #[test]
    fn an_invalid_spec_is_a_view_with_its_error_and_no_numbers() {
        let quota = mk_quota("team-a", "q", &[("pods", "10")]);
        let invalid = Computed::Invalid(vec![karmada_quota_core::quota::FieldError {
            field: "spec.hard.pods".into(),
            message: "must be a quantity".into(),
        }]);
        let q = computed_quota(
            &quota,
            &invalid,
            &KarmadaQuotaStatus::default(),
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert!(
            q.error
                .as_deref()
                .is_some_and(|e| e.contains("spec.hard.pods")),
            "{:?}",
            q.error
        );
        assert!(q.hard.is_empty() && q.clusters.is_empty());
    }

    #[test]
    fn the_waiting_line_is_shown_while_the_quota_queues_or_some_still_wait() {
        use karmada_quota_crds::quota::{AdmissionSpec, QueueStatus, WaitingBinding};
        let now = jiff::Timestamp::UNIX_EPOCH;
        let computed = valid(computed_view());
        let mut quota = mk_quota("team-a", "q", &[("pods", "10")]);
        let mut status = KarmadaQuotaStatus::default();
        // Refusing, nobody waiting: no line.
        assert_eq!(computed_quota(&quota, &computed, &status, now).line, None);
        // Queueing, nobody waiting: an empty line (the page says so).
        quota.spec.admission = Some(AdmissionSpec {
            mode: Some("Queue".into()),
            order: Some("StrictFIFO".into()),
        });
        let empty = computed_quota(&quota, &computed, &status, now)
            .line
            .unwrap();
        assert!(empty.queueing && empty.total == 0 && empty.waiting.is_empty());
        assert_eq!(empty.order, "StrictFIFO");
        // Two waiting of three; the head short of one pod.
        status.queue = Some(QueueStatus {
            total: 3,
            waiting: vec![
                WaitingBinding {
                    position: 1,
                    namespace: String::new(),
                    name: "train".into(),
                    priority: 100,
                    asks: list_to_api(&rl(&[("pods", "4")])),
                    short: list_to_api(&rl(&[("pods", "1")])),
                    since: karmada_quota_crds::convert::unix_to_time(1_767_225_600),
                    stuck: None,
                },
                WaitingBinding {
                    position: 2,
                    namespace: "team-b".into(),
                    name: "etl".into(),
                    priority: 0,
                    asks: list_to_api(&rl(&[("pods", "1")])),
                    short: Default::default(),
                    since: karmada_quota_crds::convert::unix_to_time(1_767_225_605),
                    stuck: Some("requests.cpu is required".into()),
                },
            ],
        });
        let line = computed_quota(&quota, &computed, &status, now)
            .line
            .unwrap();
        assert_eq!(line.total, 3);
        let head = &line.waiting[0];
        // A KarmadaQuota's line leaves the namespace out: it is the quota's.
        assert_eq!(
            (head.namespace.as_str(), head.name.as_str()),
            ("team-a", "train")
        );
        assert_eq!((head.priority, head.since), (100, 1_767_225_600));
        assert_eq!(head.asks, rl(&[("pods", "4")]));
        assert_eq!(head.short, rl(&[("pods", "1")]));
        assert_eq!(line.waiting[1].namespace, "team-b");
        assert_eq!(
            line.waiting[1].stuck.as_deref(),
            Some("requests.cpu is required")
        );
        // Switched back to refusal with some still waiting: shown, not queueing.
        quota.spec.admission = None;
        let left = computed_quota(&quota, &computed, &status, now)
            .line
            .unwrap();
        assert!(!left.queueing && left.total == 3);
        assert_eq!(left.order, "BestEffortFIFO");
    }
}
