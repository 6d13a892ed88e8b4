//! What the webhook does with a quota denial besides answering it: one info log line
//! (rate-limited per binding and reason) and, for the denials a person must act on, the
//! events of [`crate::events`] (queued, never awaited).
//!
//! ```text
//!  review_binding ── Decision::Deny ──► Denials::report
//!                                          ├─ LogGate (namespace, binding, reason):
//!                                          │    first line now, then at most one per
//!                                          │    interval, carrying `suppressed=N`
//!                                          └─ not dry-run and an event-worthy reason:
//!                                               EventQueue::try_emit (template + quota)
//! ```
//!
//! The template reference comes from the binding (`spec.resource`), i.e. from whoever wrote
//! it: an event is written on it only when it lies in the binding's own namespace and each
//! of its fields is no longer than Kubernetes allows ([`template_ref`]); otherwise only the
//! quota's event is written, and the skipped one is counted (`invalid_template`). So no
//! review can make the webhook write into another namespace or key its event series with
//! megabyte strings.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use karmada_quota_core::binding::ObjectReference;
use karmada_quota_core::decision::{Denial, DenyReason};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use karmada_quota_shell::events::ObjectRef;
use karmada_quota_shell::untrusted;
use kube::Resource;
use tokio::time::Instant;

use crate::cache::{CachedClusterQuota, CachedQuota};
use crate::events::{DenialEvent, EventQueue};
use crate::metrics::Metrics;

/// Default gap between two log lines of one (namespace, binding, reason).
pub const DEFAULT_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Most (namespace, binding, reason) windows remembered. Past it, windows that ended are
/// forgotten; if all are current, the line is logged untracked (never suppressed without
/// being counted), so memory stays bounded and nothing is hidden silently.
pub const MAX_LOG_KEYS: usize = 4096;

/// Whether a denial of this kind becomes events. `QuotaStatusUnknown` does not: it is the
/// normal state of a quota until the controller's first status write (well under a
/// second), so the detector's retry succeeds and an event would only alarm; a lasting one
/// shows in the log line and in the quota's own status (no `used`). The others need a
/// person: a template to fix or a quota to raise (`QuotaExceeded`, `MustSpecifyRequests`),
/// or a controller to bring back (`TooManyReservations`, which lasts while it is down).
pub fn deserves_event(reason: DenyReason) -> bool {
    !matches!(reason, DenyReason::StatusUnknown)
}

/// The cached quota that refused `denial` (core names it in every denial), for its uid.
pub fn denying_quota<'q>(
    denial: &Denial,
    quotas: &'q [Arc<CachedQuota>],
) -> Option<&'q Arc<CachedQuota>> {
    quotas.iter().find(|q| q.name() == denial.quota)
}

/// One denial as the handler knows it.
#[derive(Clone, Copy, Debug)]
pub struct Denied<'a> {
    /// `ResourceBinding` (or `ClusterResourceBinding`).
    pub binding_kind: &'static str,
    /// The binding's namespace (empty for a cluster-scoped binding).
    pub namespace: &'a str,
    /// The binding's name.
    pub binding: &'a str,
    /// Its `spec.resource`.
    pub template: &'a ObjectReference,
    /// The quotas the decision was made against (to find the denying one).
    pub quotas: &'a [Arc<CachedQuota>],
    /// The cluster quotas covering the namespace (to find the denying one).
    pub cluster_quotas: &'a [Arc<CachedClusterQuota>],
    /// The decision.
    pub denial: &'a Denial,
    /// A dry run: logged, but no events (the webhook declares NoneOnDryRun).
    pub dry_run: bool,
}

impl Denied<'_> {
    /// `namespace/name` of the binding (`name` for a cluster-scoped one): the `binding`
    /// of the log line (as the `review` span and the controller's fold say it) and of the
    /// events' note.
    pub fn binding_key(&self) -> String {
        if self.namespace.is_empty() {
            self.binding.to_owned()
        } else {
            format!("{}/{}", self.namespace, self.binding)
        }
    }
}

/// The handler's denial reporter. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Denials {
    log: Arc<Mutex<LogGate>>,
    events: Option<EventQueue>,
    metrics: Arc<Metrics>,
}

impl Denials {
    /// Log lines at most once per `log_interval` per (namespace, binding, reason)
    /// (zero: every denial); events through `events` when set.
    pub fn new(log_interval: Duration, events: Option<EventQueue>, metrics: Arc<Metrics>) -> Self {
        Self {
            log: Arc::new(Mutex::new(LogGate::new(log_interval, MAX_LOG_KEYS))),
            events,
            metrics,
        }
    }

    /// Log `d` (rate-limited) and queue its events. Never waits.
    pub fn report(&self, d: &Denied<'_>) {
        let quota_ref = if d.denial.cluster {
            d.cluster_quotas
                .iter()
                .find(|q| q.name() == d.denial.quota)
                .map(|q| ObjectRef {
                    api_version: KarmadaClusterQuota::api_version(&()).into_owned(),
                    kind: KarmadaClusterQuota::kind(&()).into_owned(),
                    namespace: String::new(),
                    name: q.name().to_owned(),
                    uid: q.metadata.uid.clone().unwrap_or_default(),
                })
        } else {
            denying_quota(d.denial, d.quotas).map(|q| ObjectRef {
                api_version: KarmadaQuota::api_version(&()).into_owned(),
                kind: KarmadaQuota::kind(&()).into_owned(),
                namespace: q.namespace().to_owned(),
                name: q.name().to_owned(),
                uid: q.metadata.uid.clone().unwrap_or_default(),
            })
        };
        let reason = d.denial.reason.as_str();
        let verdict = {
            let mut gate = self.log.lock();
            gate.check(
                (d.namespace.to_owned(), d.binding.to_owned(), reason),
                Instant::now(),
            )
        };
        match verdict {
            Verdict::Log { suppressed } => tracing::info!(
                namespace = %d.namespace,
                binding = %d.binding_key(),
                quota = %quota_ref.as_ref().map_or("", |q| q.name.as_str()),
                reason = %reason,
                code = d.denial.code,
                dry_run = d.dry_run,
                suppressed,
                "{} denied: {}",
                d.binding_kind,
                d.denial.message
            ),
            Verdict::Suppress => {
                self.metrics.denial_logs_suppressed.inc();
            }
        }

        let Some(events) = &self.events else {
            return;
        };
        if d.dry_run || !deserves_event(d.denial.reason) {
            return;
        }
        let key = d.binding_key();
        let template = template_ref(d.namespace, d.template);
        if template.is_none() && !d.template.kind.is_empty() && !d.template.name.is_empty() {
            self.metrics.events.dropped("invalid_template", 1);
        }
        events.try_emit(DenialEvent {
            reason,
            note: format!("{} {key} denied: {}", d.binding_kind, d.denial.message),
            template,
            quota: quota_ref,
        });
    }
}

/// The event target for a binding's template: `None` when it names none, lies outside the
/// binding's namespace, or has a field longer than Kubernetes allows (no real object has).
pub fn template_ref(binding_namespace: &str, t: &ObjectReference) -> Option<ObjectRef> {
    let fits = untrusted::group_version_fits(&t.api_version)
        && untrusted::kind_fits(&t.kind)
        && t.name.len() <= untrusted::MAX_NAME_LEN
        && t.uid.len() <= untrusted::MAX_UID_LEN;
    (!t.kind.is_empty() && !t.name.is_empty() && fits && t.namespace == binding_namespace).then(
        || ObjectRef {
            api_version: t.api_version.clone(),
            kind: t.kind.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
            uid: t.uid.clone(),
        },
    )
}

/// (namespace, binding, reason).
type LogKey = (String, String, &'static str);

/// Whether to write a log line now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Write it; `suppressed` lines of the same key were skipped since the last one.
    Log {
        /// Lines skipped since the last one written.
        suppressed: u64,
    },
    /// Skip it (counted).
    Suppress,
}

#[derive(Clone, Copy, Debug)]
struct Window {
    opened: Instant,
    suppressed: u64,
}

/// A fixed-window limiter: one line per key per interval, in bounded memory.
#[derive(Debug)]
pub struct LogGate {
    windows: HashMap<LogKey, Window>,
    interval: Duration,
    max_keys: usize,
}

impl LogGate {
    /// One line per key per `interval`, at most `max_keys` keys tracked.
    pub fn new(interval: Duration, max_keys: usize) -> Self {
        Self {
            windows: HashMap::new(),
            interval,
            max_keys,
        }
    }

    /// Decide for one line of `key` at `now`.
    pub fn check(&mut self, key: LogKey, now: Instant) -> Verdict {
        if self.interval.is_zero() {
            return Verdict::Log { suppressed: 0 };
        }
        if let Some(w) = self.windows.get_mut(&key) {
            if now.saturating_duration_since(w.opened) < self.interval {
                w.suppressed += 1;
                return Verdict::Suppress;
            }
            let suppressed = w.suppressed;
            *w = Window {
                opened: now,
                suppressed: 0,
            };
            return Verdict::Log { suppressed };
        }
        if self.windows.len() >= self.max_keys {
            let interval = self.interval;
            self.windows
                .retain(|_, w| now.saturating_duration_since(w.opened) < interval);
        }
        if self.windows.len() < self.max_keys {
            self.windows.insert(
                key,
                Window {
                    opened: now,
                    suppressed: 0,
                },
            );
        }
        Verdict::Log { suppressed: 0 }
    }

    /// Keys tracked now.
    pub fn len(&self) -> usize {
        self.windows.len()
    }

    /// Whether no key is tracked.
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::decision::{AdmissionRequest, Decision, decide};
    use karmada_quota_core::quantity::Quantity;
    use karmada_quota_core::quota::QuotaState;
    use karmada_quota_core::resources::ResourceList;
    use karmada_quota_core::usage::BindingCharge;

    const SEC: Duration = Duration::from_secs(1);

    fn key(binding: &str) -> LogKey {
        ("team-a".into(), binding.into(), "QuotaExceeded")
    }

    #[test]
    fn one_line_per_binding_and_reason_per_interval_with_the_suppressed_count() {
        let t0 = Instant::now();
        let mut g = LogGate::new(10 * SEC, 100);
        assert_eq!(g.check(key("web"), t0), Verdict::Log { suppressed: 0 });
        for i in 1..=5 {
            assert_eq!(g.check(key("web"), t0 + SEC * i), Verdict::Suppress);
        }
        // Another binding is not held back by the first.
        assert_eq!(
            g.check(key("api"), t0 + SEC),
            Verdict::Log { suppressed: 0 }
        );
        assert_eq!(
            g.check(key("web"), t0 + 10 * SEC),
            Verdict::Log { suppressed: 5 }
        );
        assert_eq!(g.check(key("web"), t0 + 11 * SEC), Verdict::Suppress);
    }

    #[test]
    fn zero_interval_logs_everything() {
        let t0 = Instant::now();
        let mut g = LogGate::new(Duration::ZERO, 100);
        for _ in 0..3 {
            assert_eq!(g.check(key("web"), t0), Verdict::Log { suppressed: 0 });
        }
        assert!(g.is_empty());
    }

    #[test]
    fn memory_is_bounded_and_untracked_keys_are_logged_not_hidden() {
        let t0 = Instant::now();
        let mut g = LogGate::new(10 * SEC, 2);
        g.check(key("a"), t0);
        g.check(key("b"), t0);
        // Full with current windows: "c" is logged every time, untracked.
        assert_eq!(g.check(key("c"), t0), Verdict::Log { suppressed: 0 });
        assert_eq!(g.check(key("c"), t0), Verdict::Log { suppressed: 0 });
        assert_eq!(g.len(), 2);
        // Once the windows ended they make room.
        assert_eq!(
            g.check(key("c"), t0 + 10 * SEC),
            Verdict::Log { suppressed: 0 }
        );
        assert_eq!(g.check(key("c"), t0 + 11 * SEC), Verdict::Suppress);
        assert_eq!(g.len(), 1);
    }

    fn mk_cached(name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> Arc<CachedQuota> {
        let list = |pairs: &[(&str, &str)]| {
            serde_json::Value::Object(
                pairs
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), serde_json::json!(v)))
                    .collect(),
            )
        };
        let value = serde_json::json!({
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": name, "namespace": "team-a", "uid": format!("uid-{name}")},
            "spec": {"hard": list(hard)},
            "status": {"used": list(used)},
        });
        Arc::new(CachedQuota::from_value(value).unwrap())
    }

    fn deny_with(quotas: &[Arc<CachedQuota>], charge: &BindingCharge, max: usize) -> Denial {
        let states: Vec<QuotaState> = quotas
            .iter()
            .map(|q| q.parsed.as_ref().unwrap().state.clone())
            .collect();
        let req = AdmissionRequest {
            namespace: "team-a",
            name: "web",
            uid: "u1",
            generation: 1,
            old: None,
            new: charge,
            now: 0,
            reservation_ttl: 60,
            max_reservations: max,
        };
        match decide(&states, &req) {
            Decision::Deny(d) => d,
            other => panic!("expected a denial, got {other:?}"),
        }
    }

    fn charge(cpu: Option<&str>) -> BindingCharge {
        let mut spec = karmada_quota_core::binding::ResourceBindingSpec {
            replicas: 1,
            ..Default::default()
        };
        let mut request = ResourceList::new();
        if let Some(cpu) = cpu {
            request.insert("cpu", Quantity::parse(cpu).unwrap());
        }
        spec.replica_requirements = Some(karmada_quota_core::binding::ReplicaRequirements {
            resource_request: request,
            ..Default::default()
        });
        spec.clusters = vec![karmada_quota_core::binding::TargetCluster {
            name: "member1".into(),
            replicas: 1,
            ..Default::default()
        }];
        BindingCharge::compute(&spec, None)
    }

    /// The denials come from core's real `decide`: every reason names its quota, which
    /// the cache resolves (with its uid) for the quota's event.
    #[test]
    fn the_denying_quota_is_found_for_every_reason_core_gives() {
        let a = mk_cached(
            "a-quota",
            &[("requests.cpu", "10")],
            &[("requests.cpu", "0")],
        );
        let b = mk_cached(
            "b-quota",
            &[("requests.cpu", "1")],
            &[("requests.cpu", "0")],
        );
        let quotas = vec![a.clone(), b.clone()];

        let exceeded = deny_with(&quotas, &charge(Some("2")), 1000);
        assert_eq!(exceeded.reason, DenyReason::QuotaExceeded);
        let found = denying_quota(&exceeded, &quotas).unwrap();
        assert_eq!(
            (found.name(), found.metadata.uid.as_deref()),
            ("b-quota", Some("uid-b-quota"))
        );

        let unknown_q = mk_cached("fresh", &[("requests.cpu", "10")], &[]);
        let unknown = deny_with(std::slice::from_ref(&unknown_q), &charge(Some("1")), 1000);
        assert_eq!(unknown.reason, DenyReason::StatusUnknown);
        assert_eq!(
            denying_quota(&unknown, std::slice::from_ref(&unknown_q))
                .unwrap()
                .name(),
            "fresh"
        );

        let full = deny_with(std::slice::from_ref(&a), &charge(Some("1")), 0);
        assert_eq!(full.reason, DenyReason::TooManyReservations);
        assert_eq!(
            denying_quota(&full, std::slice::from_ref(&a))
                .unwrap()
                .name(),
            "a-quota"
        );

        let must = deny_with(&quotas, &charge(None), 1000);
        assert_eq!(must.reason, DenyReason::MustSpecify);
        assert_eq!(denying_quota(&must, &quotas).unwrap().name(), "a-quota");

        // A quota the cache no longer holds: no quota event.
        assert!(denying_quota(&exceeded, std::slice::from_ref(&a)).is_none());
    }

    #[test]
    fn status_unknown_is_the_only_denial_without_events() {
        assert!(deserves_event(DenyReason::QuotaExceeded));
        assert!(deserves_event(DenyReason::MustSpecify));
        assert!(deserves_event(DenyReason::TooManyReservations));
        assert!(!deserves_event(DenyReason::StatusUnknown));
    }

    fn template() -> ObjectReference {
        ObjectReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team-a".into(),
            name: "web".into(),
            uid: "uid-web".into(),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn report_queues_template_and_quota_events_but_not_for_dry_run_or_status_unknown() {
        let metrics = Arc::new(Metrics::default());
        let (queue, mut rx) = EventQueue::channel(8, metrics.events.clone());
        let denials = Denials::new(10 * SEC, Some(queue), metrics.clone());
        let q = mk_cached("q", &[("requests.cpu", "1")], &[("requests.cpu", "0")]);
        let quotas = vec![q];
        let denial = deny_with(&quotas, &charge(Some("2")), 1000);
        let t = template();
        let mut d = Denied {
            binding_kind: "ResourceBinding",
            namespace: "team-a",
            binding: "web-deployment",
            template: &t,
            quotas: &quotas,
            cluster_quotas: &[],
            denial: &denial,
            dry_run: false,
        };
        denials.report(&d);
        let ev = rx.try_recv().unwrap();
        assert_eq!(ev.reason, "QuotaExceeded");
        assert_eq!(
            ev.note,
            format!(
                "ResourceBinding team-a/web-deployment denied: {}",
                denial.message
            )
        );
        assert_eq!(ev.template.as_ref().unwrap().uid, "uid-web");
        let quota = ev.quota.unwrap();
        assert_eq!(
            (quota.kind.as_str(), quota.name.as_str(), quota.uid.as_str()),
            ("KarmadaQuota", "q", "uid-q")
        );
        assert_eq!(quota.api_version, "quota.karmada.io/v1alpha1");
        // The repeat is logged no more (suppressed and counted) but still queued.
        denials.report(&d);
        assert!(rx.try_recv().is_ok());
        assert_eq!(metrics.denial_logs_suppressed.get(), 1);

        d.dry_run = true;
        denials.report(&d);
        assert!(rx.try_recv().is_err(), "a dry run queued an event");

        let unknown = Denial {
            reason: DenyReason::StatusUnknown,
            quota: "q".into(),
            cluster: false,
            code: 429,
            message: "status unknown for quota: q, resources: requests.cpu".into(),
        };
        d.dry_run = false;
        d.denial = &unknown;
        denials.report(&d);
        assert!(rx.try_recv().is_err(), "status unknown queued an event");
    }

    /// Through the router: a denied review queues its events, an allowed one and a
    /// denied dry run queue none; the answer is the same as without events.
    #[tokio::test]
    async fn the_binding_handler_reports_denials_and_only_denials() {
        use crate::tests::{Harness, NS, RB, create_rb, mk_binding, mk_quota, mk_review, verdict};
        let mut h = Harness::new(&[mk_quota(
            "compute",
            &[("requests.cpu", "10")],
            &[("requests.cpu", "9")],
        )]);
        let (queue, mut rx) = EventQueue::channel(8, h.state.metrics.events.clone());
        h.state.denials = Denials::new(Duration::ZERO, Some(queue), h.state.metrics.clone());

        let fits = h
            .review_binding(create_rb(mk_binding("small", "uid-s", 1, 1, "500m", "")))
            .await;
        assert!(verdict(&fits).0);
        assert!(rx.try_recv().is_err(), "an allow queued an event");

        let big = mk_binding("web", "uid-web", 1, 2, "1", "");
        let resp = h.review_binding(create_rb(big.clone())).await;
        let (allowed, code, reason, message) = verdict(&resp);
        assert_eq!(
            (allowed, code, reason.as_str()),
            (false, 403, "QuotaExceeded")
        );
        let ev = rx.try_recv().unwrap();
        assert_eq!(
            ev.note,
            format!("ResourceBinding {NS}/web denied: {message}")
        );
        let template = ev.template.unwrap();
        assert_eq!(
            (
                template.kind.as_str(),
                template.name.as_str(),
                template.namespace.as_str()
            ),
            ("Deployment", "web", NS)
        );
        assert_eq!(ev.quota.unwrap().name, "compute");

        let dry = mk_review("CREATE", RB, "resourcebindings", Some(big), None, true);
        assert!(!verdict(&h.review_binding(dry).await).0);
        assert!(rx.try_recv().is_err(), "a dry run queued an event");
    }
}
