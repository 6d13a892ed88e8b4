//! The waiting bindings (fed by the binding watch) and the lines the leader last planned.

use std::collections::{BTreeMap, HashMap};
use std::sync::OnceLock;

use parking_lot::RwLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karmada_quota_core::binding::ObjectReference;
use karmada_quota_core::queue::{
    ANNOTATION_QUEUED_AT, Plan, Waiting, is_waiting, line_priority, parse_queued_at,
};
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::convert::list_to_api;
use karmada_quota_crds::quota::{KarmadaQuotaStatus, QueueStatus, WaitingBinding};
use karmada_quota_crds::{KarmadaClusterQuota, ResourceBinding};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use kube::runtime::watcher::Event;
use tokio::sync::Notify;

use crate::namespaces::NamespaceLabels;

/// Most waiting bindings a quota's `status.queue.waiting` lists (the total counts all).
pub const STATUS_MAX: usize = 20;

/// One waiting binding as the keeper holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// The line's view (full charge, priority, arrival).
    pub waiting: Waiting,
    /// Its template (the Events' object).
    pub template: ObjectReference,
    /// The binding's resourceVersion (the release is conditional on it).
    pub resource_version: String,
}

/// namespace/uid → entry.
type Waitings = HashMap<(String, String), Entry>;

/// The keeper's shared state. One per controller process.
#[derive(Default)]
pub struct Line {
    waiting: RwLock<Waitings>,
    /// A re-list in progress: the entries listed so far.
    relist: RwLock<Option<Waitings>>,
    /// Each quota's line as the leader last planned it (`status.queue`).
    lines: RwLock<BTreeMap<QuotaKey, QueueStatus>>,
    /// Something changed that may let a binding go: plan again.
    pub(crate) wake: Notify,
    /// The leader has planned at least once (before, a stored line is kept as it is).
    planned: std::sync::atomic::AtomicBool,
    /// The cluster quotas and the namespaces' labels, once their watches exist.
    pub(crate) cluster_view: OnceLock<(Store<KarmadaClusterQuota>, NamespaceLabels)>,
}

impl std::fmt::Debug for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Line").finish_non_exhaustive()
    }
}

fn read<T>(l: &RwLock<T>) -> parking_lot::RwLockReadGuard<'_, T> {
    l.read()
}

fn write<T>(l: &RwLock<T>) -> parking_lot::RwLockWriteGuard<'_, T> {
    l.write()
}

/// The keeper's entry of `rb`, when it waits; `count` is its template's count name.
pub fn entry_of(rb: &ResourceBinding, count: Option<&str>) -> Option<((String, String), Entry)> {
    if !is_waiting(rb.metadata.annotations.as_ref(), &rb.spec) {
        return None;
    }
    let namespace = rb.namespace()?;
    let uid = rb.uid()?;
    let created = rb
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    let queued_at = rb
        .annotations()
        .get(ANNOTATION_QUEUED_AT)
        .and_then(|v| parse_queued_at(v))
        .unwrap_or(created.saturating_mul(1000));
    let waiting = Waiting {
        namespace: namespace.clone(),
        name: rb.name_any(),
        uid: uid.clone(),
        generation: rb.metadata.generation.unwrap_or(0),
        priority: line_priority(rb.metadata.annotations.as_ref(), &rb.spec),
        created,
        queued_at,
        charge: BindingCharge::compute(&rb.spec, count),
    };
    Some((
        (namespace, uid),
        Entry {
            waiting,
            template: rb.spec.resource.clone(),
            resource_version: rb.resource_version().unwrap_or_default(),
        },
    ))
}

impl Line {
    /// Apply a binding watch event (`count`: the event object's count name). Returns
    /// whether the set of waiting bindings changed (a departure frees nothing, but a
    /// binding deleted while placed does; the caller wakes the planner on every event).
    pub fn apply(&self, ev: &Event<ResourceBinding>, count: Option<&str>) -> bool {
        match ev {
            Event::Init => {
                *write(&self.relist) = Some(Waitings::new());
                false
            }
            Event::InitApply(rb) => {
                if let (Some(buf), Some((k, e))) =
                    (write(&self.relist).as_mut(), entry_of(rb, count))
                {
                    buf.insert(k, e);
                }
                false
            }
            Event::InitDone => {
                if let Some(all) = write(&self.relist).take() {
                    *write(&self.waiting) = all;
                }
                true
            }
            Event::Apply(rb) => {
                let key = (
                    rb.namespace().unwrap_or_default(),
                    rb.uid().unwrap_or_default(),
                );
                let mut w = write(&self.waiting);
                match entry_of(rb, count) {
                    Some((k, e)) => w.insert(k, e.clone()).as_ref() != Some(&e),
                    None => w.remove(&key).is_some(),
                }
            }
            Event::Delete(rb) => {
                let key = (
                    rb.namespace().unwrap_or_default(),
                    rb.uid().unwrap_or_default(),
                );
                write(&self.waiting).remove(&key).is_some()
            }
        }
    }

    /// Ask the planner to look again.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Every waiting binding (a snapshot).
    pub fn entries(&self) -> Vec<Entry> {
        read(&self.waiting).values().cloned().collect()
    }

    /// How many bindings wait.
    pub fn len(&self) -> usize {
        read(&self.waiting).len()
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Record the leader's plan as each quota's `status.queue`; the keys whose line
    /// changed (their quotas are reconciled so that the status shows it).
    pub fn publish(&self, plan: &Plan, entries: &[Entry]) -> Vec<QuotaKey> {
        let mut next: BTreeMap<QuotaKey, QueueStatus> = BTreeMap::new();
        for (key, places) in &plan.lines {
            let cluster = matches!(key, QuotaKey::Cluster { .. });
            let waiting = places
                .iter()
                .take(STATUS_MAX)
                .map(|p| {
                    let w = &entries[p.binding].waiting;
                    WaitingBinding {
                        position: i64::try_from(p.position).unwrap_or(i64::MAX),
                        namespace: if cluster {
                            w.namespace.clone()
                        } else {
                            String::new()
                        },
                        name: w.name.clone(),
                        priority: w.priority,
                        asks: list_to_api(&p.asks),
                        short: list_to_api(&p.short),
                        since: Time(
                            jiff::Timestamp::from_millisecond(w.queued_at)
                                .unwrap_or(jiff::Timestamp::UNIX_EPOCH),
                        ),
                        stuck: p.stuck.clone(),
                    }
                })
                .collect();
            next.insert(
                key.clone(),
                QueueStatus {
                    total: i64::try_from(places.len()).unwrap_or(i64::MAX),
                    waiting,
                },
            );
        }
        self.planned
            .store(true, std::sync::atomic::Ordering::Release);
        let mut lines = write(&self.lines);
        let changed: Vec<QuotaKey> = lines
            .keys()
            .chain(next.keys())
            .filter(|k| lines.get(*k) != next.get(*k))
            .cloned()
            .collect();
        *lines = next;
        changed
    }

    /// The line of quota `key` as its status should show it (`None`: nobody waits).
    pub fn status_of(&self, key: &QuotaKey) -> Option<QueueStatus> {
        read(&self.lines).get(key).cloned()
    }

    /// `next` (the status a reconcile is about to write, `None`: nothing to write) with
    /// the line of `key`; `current` is the stored status. Only the leader's keeper has a
    /// line to show; a follower never writes.
    pub fn with_line(
        &self,
        key: &QuotaKey,
        current: Option<&KarmadaQuotaStatus>,
        next: Option<KarmadaQuotaStatus>,
    ) -> Option<KarmadaQuotaStatus> {
        let stored = current.and_then(|s| s.queue.clone());
        let line = if self.planned.load(std::sync::atomic::Ordering::Acquire) {
            self.status_of(key)
        } else {
            stored.clone()
        };
        match next {
            Some(mut n) => {
                n.queue = line;
                Some(n)
            }
            None if stored != line => {
                let mut n = current.cloned().unwrap_or_default();
                n.queue = line;
                Some(n)
            }
            None => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rb(name: &str, waiting: bool) -> ResourceBinding {
        let mut v = json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("u-{name}"),
                         "resourceVersion": "5", "creationTimestamp": "2026-11-26T03:00:00Z"},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                     "replicas": 2,
                     "replicaRequirements": {"resourceRequest": {"cpu": "1"}},
                     "schedulePriority": {"priority": 3}}
        });
        if waiting {
            v["metadata"]["annotations"] =
                json!({ANNOTATION_QUEUED_AT: "2026-11-26T03:00:00.250Z"});
            v["spec"]["suspension"] = json!({"scheduling": true});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_line_holds_waiting_bindings_only_and_forgets_released_and_deleted_ones() {
        let line = Line::default();
        assert!(!line.apply(&Event::Apply(rb("placed", false)), None));
        assert!(line.apply(&Event::Apply(rb("w", true)), None));
        let e = &line.entries()[0];
        assert_eq!((e.waiting.priority, e.waiting.queued_at % 1000), (3, 250));
        assert_eq!(
            e.waiting.charge.parts.len(),
            1,
            "the full charge, not the waiting one"
        );
        // Released (suspension cleared): leaves the line.
        assert!(line.apply(&Event::Apply(rb("w", false)), None));
        assert!(line.is_empty());
        line.apply(&Event::Apply(rb("w", true)), None);
        assert!(line.apply(&Event::Delete(rb("w", true)), None));
        assert!(line.is_empty());
    }

    #[test]
    fn a_relist_rebuilds_the_line_from_the_marks() {
        let line = Line::default();
        line.apply(&Event::Apply(rb("gone", true)), None);
        line.apply(&Event::Init, None);
        line.apply(&Event::InitApply(rb("a", true)), None);
        line.apply(&Event::InitApply(rb("b", false)), None);
        assert_eq!(
            line.entries()[0].waiting.name,
            "gone",
            "kept until the list is complete"
        );
        line.apply(&Event::InitDone, None);
        let names: Vec<_> = line.entries().into_iter().map(|e| e.waiting.name).collect();
        assert_eq!(names, ["a"]);
    }

    #[test]
    fn a_line_that_empties_is_written_away() {
        let line = Line::default();
        line.publish(&Plan::default(), &[]);
        let key = QuotaKey::Namespaced {
            namespace: "ns".into(),
            name: "q".into(),
        };
        let stored = KarmadaQuotaStatus {
            queue: Some(QueueStatus {
                total: 1,
                waiting: Vec::new(),
            }),
            ..Default::default()
        };
        let next = line.with_line(&key, Some(&stored), None).unwrap();
        assert_eq!(next.queue, None);
        assert_eq!(line.with_line(&key, Some(&next), None), None);
    }
}
