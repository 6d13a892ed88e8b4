//! The leader's release loop: plan (core), publish the lines, release who fits.
//!
//! Woken by every binding event, every quota (status) event and leadership; a safety
//! round runs every [`SAFETY_ROUND`] in case a wake-up was missed. A release is a JSON
//! merge patch of the binding that clears `spec.suspension.scheduling` and the mark,
//! conditional on the resourceVersion the plan saw: the validating webhook charges it
//! with the usual compare-and-swap reservation; a refusal (it no longer fits: another
//! admission took the room first) leaves it waiting in its place, and a conflict (the
//! binding changed meanwhile) is planned again with the new object.

use std::sync::Arc;
use std::time::Duration;

use karmada_quota_core::queue::{
    ANNOTATION_QUEUED_AT, ANNOTATION_WAITING_FOR, Plan, plan, strict_lines,
};
use karmada_quota_core::quota::{QuotaState, Unaccounted};
use karmada_quota_core::selection::{Labels, QuotaKey};
use karmada_quota_crds::ResourceBinding;
use karmada_quota_shell::backoff::Backoff;
use karmada_quota_shell::events::{Event, EventQueue, EventType, ObjectRef};
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::watch;

use super::line::{Entry, Line};
use super::metrics::{QueueMetrics, ResultLabel};
use super::quotas::QuotaSource;
use crate::triggers::Triggers;

/// A round without a wake-up at least this often.
pub const SAFETY_ROUND: Duration = Duration::from_secs(5);
/// After a release the webhook refused (its view of the quota may lag the controller's by
/// a watch event), try again this soon, doubling up to [`SAFETY_ROUND`].
pub const RETRY_MIN: Duration = Duration::from_millis(100);
/// Field manager of the release patch.
const FIELD_MANAGER: &str = "karmada-quota-controller";

/// What the loop needs.
pub struct Releaser {
    /// The waiting bindings and lines.
    pub line: Arc<Line>,
    /// The quotas (nothing is planned before they and the bindings were listed).
    pub quotas: Arc<dyn QuotaSource>,
    /// Whether this replica leads.
    pub leader: watch::Receiver<bool>,
    /// Reconciles the quotas whose line changed.
    pub triggers: Triggers,
    /// The `unaccountedWorkloads` of a quota that sets none (as the webhook's).
    pub unaccounted_default: Unaccounted,
    /// The line's metrics.
    pub metrics: Arc<QueueMetrics>,
    /// API client (binding patches).
    pub client: Client,
    /// The event writer's queue: events on the templates (`None` in tests).
    pub events: Option<EventQueue<Event>>,
}

impl Releaser {
    /// Run until the process ends.
    pub async fn run(mut self) {
        let mut safety = tokio::time::interval(SAFETY_ROUND);
        safety.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut known: std::collections::HashSet<String> = Default::default();
        let mut retry = Backoff::new(RETRY_MIN, SAFETY_ROUND);
        let mut again: Option<tokio::time::Instant> = None;
        // Without leader election nobody sends on the channel (its sender is gone): the
        // value it holds is final, and the line is still released.
        let mut leader_live = true;
        loop {
            let retry_at = again;
            tokio::select! {
                () = self.line.wake.notified() => {}
                _ = safety.tick() => {}
                () = crate::clock::sleep_until_opt(retry_at) => {}
                changed = self.leader.changed(), if leader_live => leader_live = changed.is_ok(),
            }
            again = None;
            if !*self.leader.borrow() || !self.synced() {
                continue;
            }
            if self.round(&mut known).await {
                again = Some(tokio::time::Instant::now() + retry.next_delay());
            } else {
                retry.reset();
            }
        }
    }

    /// Whether every quota and binding was listed (seen right after a controller
    /// restart: the bindings listed, the KarmadaQuotas not yet).
    fn synced(&self) -> bool {
        self.quotas.listed()
    }

    /// The engine's view of every quota (those that parse), the webhook's defaults set.
    fn states(&self) -> (Vec<QuotaState>, Vec<(String, Labels)>) {
        let (mut states, labels) = self.quotas.states();
        for s in &mut states {
            s.spec
                .policy
                .unaccounted
                .get_or_insert(self.unaccounted_default);
        }
        (states, labels)
    }

    /// One round: plan, publish the lines, release, report. Whether a release did not go
    /// through (to be tried again soon).
    async fn round(&self, known: &mut std::collections::HashSet<String>) -> bool {
        let entries = self.line.entries();
        let (states, labels) = self.states();
        let waiting: Vec<_> = entries.iter().map(|e| e.waiting.clone()).collect();
        let now = jiff::Timestamp::now();
        let p: Plan = plan(
            &states,
            &waiting,
            |ns| labels.iter().find(|(n, _)| n == ns).map(|(_, l)| l),
            now.as_second(),
        );
        self.report_lengths(&states, &p);
        let changed = self.line.publish(&p, &entries);
        self.reconcile(&changed);
        let mut still = self.announce_joined(&p, &entries, known).await;
        let again = self
            .release_planned(&p, &entries, (&states, &labels), now, (known, &mut still))
            .await;
        known.retain(|uid| still.contains(uid));
        again
    }

    /// A Queued event for each binding that joined a line since the last round (`known`:
    /// those announced before). The uids still waiting.
    async fn announce_joined(
        &self,
        p: &Plan,
        entries: &[Entry],
        known: &mut std::collections::HashSet<String>,
    ) -> std::collections::HashSet<String> {
        let mut still: std::collections::HashSet<String> = Default::default();
        for (key, places) in &p.lines {
            for place in places {
                let e = &entries[place.binding];
                still.insert(e.waiting.uid.clone());
                if known.insert(e.waiting.uid.clone()) {
                    let needs = if place.short.is_empty() {
                        "fits here".to_owned()
                    } else {
                        format!("needs {}", render(&place.short))
                    };
                    let note = format!(
                        "waiting for {} {}: asks {}, {needs}, {} ahead",
                        key.noun(),
                        key.name(),
                        render(&place.asks),
                        place.position - 1
                    );
                    self.event(e, "Queued", note).await;
                }
            }
        }
        still
    }

    /// Release what `p` releases, in its order; the released leave `known` and `still`.
    /// Whether a release did not go through (to be tried again soon).
    async fn release_planned(
        &self,
        p: &Plan,
        entries: &[Entry],
        (states, labels): (&[QuotaState], &[(String, Labels)]),
        now: jiff::Timestamp,
        (known, still): (
            &mut std::collections::HashSet<String>,
            &mut std::collections::HashSet<String>,
        ),
    ) -> bool {
        let mut again = false;
        // StrictFIFO lines whose planned release did not go through: nothing planned
        // behind it there may start this round (it would pass the head); planned again.
        let mut held: std::collections::BTreeSet<QuotaKey> = Default::default();
        let covering = |e: &Entry| {
            strict_lines(states, &e.waiting, |ns| {
                labels.iter().find(|(n, _)| n == ns).map(|(_, l)| l)
            })
        };
        for i in &p.released {
            let e = &entries[*i];
            let lines = covering(e);
            if lines.iter().any(|k| held.contains(k)) {
                tracing::debug!(binding = %format!("{}/{}", e.waiting.namespace, e.waiting.name), "release put off: a head before it in a strict line was refused");
                still.insert(e.waiting.uid.clone());
                again = true;
                continue;
            }
            if self.release(e, now).await {
                still.remove(&e.waiting.uid);
                known.remove(&e.waiting.uid);
            } else {
                held.extend(lines);
                still.insert(e.waiting.uid.clone());
                again = true;
            }
        }
        again
    }

    fn report_lengths(&self, states: &[QuotaState], p: &Plan) {
        for s in states {
            let key = s.key();
            let n = p.lines.get(&key).map_or(0, Vec::len);
            self.metrics
                .length
                .get_or_create(&(&key).into())
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Reconcile the quotas whose line changed, so that their status shows it.
    fn reconcile(&self, changed: &[QuotaKey]) {
        let mut namespaces = Vec::new();
        for key in changed {
            match key {
                QuotaKey::Namespaced { namespace, .. } => namespaces.push(namespace.clone()),
                QuotaKey::Cluster { .. } => self.triggers.cluster_all(),
            }
        }
        self.triggers.namespaces(namespaces);
    }

    /// Clear the suspension and the mark of `e`, if its resourceVersion is still the
    /// one planned; the webhook charges it. Whether it was released.
    async fn release(&self, e: &Entry, now: jiff::Timestamp) -> bool {
        let w = &e.waiting;
        let api: Api<ResourceBinding> = Api::namespaced(self.client.clone(), &w.namespace);
        let patch = json!({
            "metadata": {
                "resourceVersion": e.resource_version,
                "annotations": {ANNOTATION_QUEUED_AT: null, ANNOTATION_WAITING_FOR: null}
            },
            "spec": {"suspension": {"scheduling": null}}
        });
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        // The outcome is counted before the event is published, so that the series agree
        // with the binding the moment it is released (an event write can be slow).
        let (result, waited) = match api.patch(&w.name, &params, &Patch::Merge(&patch)).await {
            Ok(_) => {
                let waited = (now.as_millisecond() - w.queued_at).max(0) as f64 / 1000.0;
                self.metrics.wait.observe(waited);
                tracing::info!(namespace = %w.namespace, binding = %w.name, waited_seconds = waited, "released from the quota line");
                ("released", Some(waited))
            }
            Err(kube::Error::Api(s)) if s.code == 403 => {
                tracing::debug!(namespace = %w.namespace, binding = %w.name, message = %s.message, "release refused by the webhook; it keeps its place");
                ("refused", None)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => ("changed", None),
            Err(kube::Error::Api(s)) if s.code == 404 => ("gone", None),
            Err(err) => {
                tracing::warn!(namespace = %w.namespace, binding = %w.name, error = %err, "could not release a waiting binding; retrying");
                ("error", None)
            }
        };
        self.metrics
            .releases
            .get_or_create(&ResultLabel { result })
            .inc();
        let Some(waited) = waited else {
            return false;
        };
        self.event(
            e,
            "Released",
            format!("released from the quota line after {waited:.1}s: its quotas have room"),
        )
        .await;
        true
    }

    /// A Normal event on the binding's template.
    async fn event(&self, e: &Entry, reason: &'static str, note: String) {
        let Some(events) = &self.events else {
            return;
        };
        let t = &e.template;
        let regarding = ObjectRef {
            api_version: t.api_version.clone(),
            kind: t.kind.clone(),
            namespace: if t.namespace.is_empty() {
                e.waiting.namespace.clone()
            } else {
                t.namespace.clone()
            },
            name: t.name.clone(),
            uid: t.uid.clone(),
        };
        let queued = events.try_emit(Event {
            type_: EventType::Normal,
            action: "Queue",
            reason,
            note: note.chars().take(1000).collect(),
            regarding,
        });
        if !queued {
            tracing::debug!(
                reason,
                "could not publish a queue event: the event queue is full"
            );
        }
    }
}

/// `requests.cpu=4, pods=1`.
fn render(list: &karmada_quota_core::ResourceList) -> String {
    list.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}
