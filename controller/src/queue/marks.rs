//! The namespaces where a line can form carry core's `quota.karmada.io/waiting-line=true`
//! (`--label-line-namespaces`): the leader adds it to every namespace a quota in `Queue`
//! mode covers and removes it from every other, so that the chart registers the arrivals
//! review only where it can hold a binding, and a binding elsewhere costs the apiserver
//! one review fewer (docs/queueing.md, "Where the arrivals review runs").
//!
//! ```text
//!  every MARK_ROUND, each namespace change, leadership
//!    └─ leader, quotas and namespaces listed, and QuotaSource::version moved, a change
//!       sent is due again or a failed one is due a retry: core::queue::line_namespaces
//!         └─ changes(): the namespaces whose label differs, less those sent lately
//!              └─ merge patch of metadata.labels (add "true" / remove)
//! ```
//!
//! Until a namespace carries the label, a binding there is not reviewed by the arrivals
//! webhook; the validating webhook then refuses one that a `Queue` quota would hold
//! (`webhook::admission::binding::arrival_guard`), and Karmada's detector retries it.
//! Nothing here decides an admission: a label late or missing delays the line, never
//! over-commits.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_core::queue::{LABEL_WAITING_LINE, LABEL_WAITING_LINE_VALUE, line_namespaces};
use karmada_quota_core::selection::Labels;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tokio::sync::watch;
use tokio::time::Instant;

use super::metrics::{QueueMetrics, ResultLabel};
use super::quotas::QuotaSource;

/// A round without a wake-up at least this often (a quota's mode changed: the quota
/// watches do not wake this loop). A round in which no quota and no namespace changed
/// and nothing is due again reads only the version (no quota is parsed).
pub const MARK_ROUND: Duration = Duration::from_millis(250);
/// A label sent is not sent again for this long unless the namespace's labels show the
/// other value by then (the namespace watch lags the patch).
const RESEND_AFTER: Duration = Duration::from_secs(10);
/// A patch the apiserver refused is tried again after this long (a controller without
/// `patch` on namespaces sends one a second per namespace, not one a round).
const RETRY_FAILED: Duration = Duration::from_secs(1);
/// Field manager of the label patch.
const FIELD_MANAGER: &str = "karmada-quota-controller";

/// What the loop needs.
pub struct Marker {
    /// The quotas and the namespaces' labels (nothing is marked before they were listed,
    /// the cluster quotas included: without them a cluster quota's namespaces would lose
    /// their label).
    pub quotas: Arc<dyn QuotaSource>,
    /// Each namespace change.
    pub namespace_changes: watch::Receiver<u64>,
    /// Whether this replica leads.
    pub leader: watch::Receiver<bool>,
    /// API client (namespace patches).
    pub client: Client,
    /// `kq_waiting_line_label_patches_total`.
    pub metrics: Arc<QueueMetrics>,
}

/// One label change: the namespace, and whether it gets the label (`true`) or loses it.
pub type Change = (String, bool);

/// The namespaces whose label differs from `want`, less those whose same change was sent
/// less than [`RESEND_AFTER`] before `now` (`sent`, pruned here).
pub fn changes(
    namespaces: &[(String, Labels)],
    want: &BTreeSet<&str>,
    sent: &mut HashMap<String, (bool, Instant)>,
    now: Instant,
) -> Vec<Change> {
    sent.retain(|_, (_, at)| now.duration_since(*at) < RESEND_AFTER);
    namespaces
        .iter()
        .filter_map(|(name, labels)| {
            let has = labels.get(LABEL_WAITING_LINE).map(String::as_str)
                == Some(LABEL_WAITING_LINE_VALUE);
            let should = want.contains(name.as_str());
            if has == should {
                sent.remove(name);
                return None;
            }
            if sent.get(name).is_some_and(|(value, _)| *value == should) {
                return None;
            }
            Some((name.clone(), should))
        })
        .collect()
}

/// Whether a round plans again: the quotas or namespaces changed since the last plan
/// (`planned`: its version, `None` before the first), or something is [`due`].
pub fn replan(planned: Option<u64>, version: u64, due: bool) -> bool {
    due || planned != Some(version)
}

/// Whether a change sent and not seen yet may be sent again ([`RESEND_AFTER`]), or a
/// failed one may be tried again ([`RETRY_FAILED`]).
pub fn due(
    sent: &HashMap<String, (bool, Instant)>,
    failed: &HashMap<String, Instant>,
    now: Instant,
) -> bool {
    sent.values()
        .any(|(_, at)| now.duration_since(*at) >= RESEND_AFTER)
        || failed
            .values()
            .any(|at| now.duration_since(*at) >= RETRY_FAILED)
}

impl Marker {
    /// Run until the process ends.
    pub async fn run(mut self) {
        let mut round = tokio::time::interval(MARK_ROUND);
        round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sent: HashMap<String, (bool, Instant)> = HashMap::new();
        // Namespaces whose patch failed, and when: not tried again before RETRY_FAILED.
        let mut failed: HashMap<String, Instant> = HashMap::new();
        // The quotas' version the last plan was made from.
        let mut planned: Option<u64> = None;
        let (mut leader_live, mut namespaces_live) = (true, true);
        loop {
            tokio::select! {
                _ = round.tick() => {}
                changed = self.namespace_changes.changed(), if namespaces_live => namespaces_live = changed.is_ok(),
                changed = self.leader.changed(), if leader_live => leader_live = changed.is_ok(),
            }
            if !*self.leader.borrow() {
                sent.clear();
                failed.clear();
                planned = None;
                continue;
            }
            if !self.quotas.listed() {
                continue;
            }
            let version = self.quotas.version();
            let now = Instant::now();
            if !replan(planned, version, due(&sent, &failed, now)) {
                continue;
            }
            planned = Some(version);
            failed.retain(|_, at| now.duration_since(*at) < RETRY_FAILED);
            let (states, namespaces) = self.quotas.states();
            let want = line_namespaces(&states, &namespaces);
            for (namespace, on) in changes(&namespaces, &want, &mut sent, now) {
                if failed.contains_key(&namespace) {
                    continue;
                }
                if self.patch(&namespace, on).await {
                    sent.insert(namespace, (on, Instant::now()));
                } else {
                    failed.insert(namespace, Instant::now());
                }
            }
        }
    }

    /// Add (`on`) or remove the label of `namespace`; whether the apiserver took it.
    async fn patch(&self, namespace: &str, on: bool) -> bool {
        let value = on.then_some(LABEL_WAITING_LINE_VALUE);
        let patch = json!({"metadata": {"labels": {LABEL_WAITING_LINE: value}}});
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match Api::<Namespace>::all(self.client.clone())
            .patch(namespace, &params, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                let result = if on { "added" } else { "removed" };
                self.metrics
                    .labels
                    .get_or_create(&ResultLabel { result })
                    .inc();
                tracing::info!(
                    namespace,
                    label = LABEL_WAITING_LINE,
                    added = on,
                    "waiting-line label {}",
                    if on { "added" } else { "removed" }
                );
                true
            }
            Err(e) => {
                self.metrics
                    .labels
                    .get_or_create(&ResultLabel { result: "failed" })
                    .inc();
                tracing::warn!(
                    namespace,
                    label = LABEL_WAITING_LINE,
                    error = %e,
                    "cannot {} the waiting-line label (the controller needs patch on \
                     namespaces for --label-line-namespaces); tried again next round",
                    if on { "add" } else { "remove" }
                );
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, marked: Option<&str>) -> (String, Labels) {
        let mut labels = Labels::from([("team".to_owned(), name.to_owned())]);
        if let Some(v) = marked {
            labels.insert(LABEL_WAITING_LINE.to_owned(), v.to_owned());
        }
        (name.to_owned(), labels)
    }

    #[test]
    fn a_round_plans_again_only_after_a_change_or_when_a_resend_or_a_retry_is_due() {
        assert!(replan(None, 7, false), "no plan yet");
        assert!(!replan(Some(7), 7, false), "nothing changed, nothing due");
        assert!(replan(Some(7), 8, false), "a quota or a namespace changed");
        assert!(replan(Some(7), 7, true), "a resend or a retry is due");

        let t0 = Instant::now();
        let mut sent = HashMap::from([("a".to_owned(), (true, t0))]);
        let mut failed = HashMap::new();
        assert!(
            !due(&sent, &failed, t0),
            "a label just sent waits for the watch"
        );
        assert!(
            due(&sent, &failed, t0 + RESEND_AFTER),
            "…and is sent again once RESEND_AFTER passed"
        );
        sent.clear();
        failed.insert("b".to_owned(), t0);
        assert!(
            !due(&sent, &failed, t0 + MARK_ROUND),
            "a refused patch is not sent every round"
        );
        assert!(
            due(&sent, &failed, t0 + RETRY_FAILED),
            "…but again after RETRY_FAILED"
        );
    }

    #[test]
    fn only_namespaces_whose_label_differs_change_and_a_change_is_not_sent_twice() {
        let namespaces = vec![
            ns("a", None),
            ns("b", Some("true")),
            ns("c", Some("true")),
            ns("d", Some("yes")),
        ];
        let want = BTreeSet::from(["a", "b", "d"]);
        let mut sent = HashMap::new();
        let t0 = Instant::now();
        let got = changes(&namespaces, &want, &mut sent, t0);
        // a gains it, c loses it, d's other value is made "true"; b is as it should be.
        assert_eq!(
            got,
            [("a".into(), true), ("c".into(), false), ("d".into(), true)]
        );
        for (name, on) in &got {
            sent.insert(name.clone(), (*on, t0));
        }
        // The watch has not shown the patches yet: nothing is sent again…
        assert!(changes(&namespaces, &want, &mut sent, t0 + Duration::from_secs(1)).is_empty());
        // …unless the wish turned meanwhile (a quota left Queue mode),
        let none = BTreeSet::new();
        let got = changes(&namespaces, &none, &mut sent, t0 + Duration::from_secs(2));
        // (a and d need nothing now; c's removal is on its way)
        assert_eq!(got, [("b".to_owned(), false)]);
        // …or the patch was lost: sent again after RESEND_AFTER.
        let got = changes(&namespaces, &want, &mut sent, t0 + RESEND_AFTER);
        assert_eq!(
            got,
            [("a".into(), true), ("c".into(), false), ("d".into(), true)]
        );
    }
}
