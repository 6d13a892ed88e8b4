//! The namespaces where a line can form carry core's `quota.karmada.io/waiting-line=true`
//! (`--label-line-namespaces`): the leader adds it to every namespace a quota in `Queue`
//! mode covers and removes it from every other, so that the chart registers the arrivals
//! review only where it can hold a binding, and a binding elsewhere costs the apiserver
//! one review fewer (docs/queueing.md, "Where the arrivals review runs").
//!
//! ```text
//!  every MARK_ROUND, each namespace change, leadership
//!    └─ leader, quotas and namespaces listed, QuotaSource::version moved (or a change
//!       is on its way): core::queue::line_namespaces
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
/// and no change is on its way reads only the version (no quota is parsed).
pub const MARK_ROUND: Duration = Duration::from_millis(250);
/// A label sent is not sent again for this long unless the namespace's labels show the
/// other value by then (the namespace watch lags the patch).
const RESEND_AFTER: Duration = Duration::from_secs(10);
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
/// (`planned`: its version, `None` when there was none or a patch of it failed), or a
/// change sent is not yet seen in the namespace watch (`in_flight`: it may have to be
/// sent again).
pub fn replan(planned: Option<u64>, version: u64, in_flight: bool) -> bool {
    in_flight || planned != Some(version)
}

impl Marker {
    /// Run until the process ends.
    pub async fn run(mut self) {
        let mut round = tokio::time::interval(MARK_ROUND);
        round.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut sent: HashMap<String, (bool, Instant)> = HashMap::new();
        // The quotas' version the last plan was made from, when all it asked was sent.
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
                planned = None;
                continue;
            }
            if !self.quotas.listed() {
                continue;
            }
            let version = self.quotas.version();
            if !replan(planned, version, !sent.is_empty()) {
                continue;
            }
            let (states, namespaces) = self.quotas.states();
            let want = line_namespaces(&states, &namespaces);
            let mut failed = false;
            for (namespace, on) in changes(&namespaces, &want, &mut sent, Instant::now()) {
                if self.patch(&namespace, on).await {
                    sent.insert(namespace, (on, Instant::now()));
                } else {
                    failed = true;
                }
            }
            // A failed patch is tried again next round, whatever the version.
            planned = (!failed).then_some(version);
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
    fn a_round_plans_again_only_after_a_change_a_failure_or_while_a_change_is_in_flight() {
        assert!(
            replan(None, 7, false),
            "no plan yet, or the last one failed"
        );
        assert!(
            !replan(Some(7), 7, false),
            "nothing changed, nothing in flight"
        );
        assert!(replan(Some(7), 8, false), "a quota or a namespace changed");
        assert!(
            replan(Some(7), 7, true),
            "a label sent is not seen yet: it may be sent again"
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
