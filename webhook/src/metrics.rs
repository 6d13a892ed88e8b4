//! Prometheus metrics of the webhook (prometheus-client), served by the runtime's admin
//! router on `/metrics`.

use std::sync::Arc;

use karmada_quota_shell::events::EventMetrics;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Result label: the request was admitted.
pub const ALLOWED: &str = "allowed";
/// Result label: the request was refused by a rule (quota, validation, bad input).
pub const DENIED: &str = "denied";
/// Result label: the request was refused because of an internal error or a timeout.
pub const ERROR: &str = "error";

/// Labels of `kq_webhook_decisions_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DecisionLabels {
    /// `resourcebinding` or `karmadaquota`.
    pub kind: &'static str,
    /// [`ALLOWED`], [`DENIED`] or [`ERROR`].
    pub result: &'static str,
    /// Why: a core deny reason (`QuotaExceeded`, …), `Invalid`, `BadRequest`,
    /// an error's metric label, or `Allowed`.
    pub reason: &'static str,
}

/// Labels of a counter by result (`kq_webhook_reservation_batch_creates_total`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    /// `ok`, `conflict`, `not_found`, `error`, `timeout`.
    pub result: &'static str,
}

/// The webhook's metrics. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    /// Admission decisions by kind, result and reason.
    pub decisions: Family<DecisionLabels, Counter>,
    /// Time from receiving a review to answering it, seconds.
    pub decision_duration: Histogram,
    /// Reservation batch creates by result (`ok`,
    /// `conflict`: the number was taken, `error`, `timeout`).
    pub batch_creates: Family<WriteLabels, Counter>,
    /// Time from a batch create's answer until this webhook's batch watch confirmed it,
    /// seconds.
    pub batch_confirm: Histogram,
    /// Quota objects read from etcd before their first use in a decision
    ///, by result (`ok`, `not_found`, `error`, …).
    pub quota_reads: Family<WriteLabels, Counter>,
    /// Decision rounds re-run after their batch number was taken.
    pub retries: Counter,
    /// Requests decided together in one batch.
    pub batch_size: Histogram,
    /// Denial events (the shared event writer's metrics).
    pub events: Arc<EventMetrics>,
    /// Denial log lines suppressed by the per-binding rate limit.
    pub denial_logs_suppressed: Counter,
    /// 1 when the HTTPS listener requires a client certificate (`--client-ca-file`), 0
    /// when anyone who reaches it may send reviews.
    pub client_auth_required: Gauge,
}

impl Metrics {
    /// Create the metrics and register them under the `kq_webhook` prefix.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        let reg = registry.sub_registry_with_prefix("kq_webhook");
        reg.register(
            "decisions",
            "Admission decisions by kind, result and reason",
            m.decisions.clone(),
        );
        reg.register(
            "decision_duration_seconds",
            "Time to answer one admission review",
            m.decision_duration.clone(),
        );
        reg.register(
            "reservation_batch_creates",
            "Reservation batch (KarmadaQuotaReservation) creates by result; conflict: another \
             writer took the number first",
            m.batch_creates.clone(),
        );
        reg.register(
            "reservation_batch_confirm_seconds",
            "Time from a reservation batch create's answer until this webhook's batch watch \
             showed the batch (an admission waits for it)",
            m.batch_confirm.clone(),
        );
        reg.register(
            "quota_reads",
            "Quota objects read from etcd before their first use in a decision (the quota \
             lists come from the watch cache), by result",
            m.quota_reads.clone(),
        );
        reg.register(
            "decision_retries",
            "Decision rounds re-run after their reservation batch number was taken",
            m.retries.clone(),
        );
        reg.register(
            "batch_size",
            "ResourceBinding requests decided together in one reservation batch",
            m.batch_size.clone(),
        );
        reg.register(
            "client_auth_required",
            "1 when the admission listener requires a client certificate signed by \
             --client-ca-file; 0 when anyone who reaches it can send reviews",
            m.client_auth_required.clone(),
        );
        m.events.register(reg, "denial events");
        reg.register(
            "denial_logs_suppressed",
            "Denial log lines suppressed by the per-binding rate limit",
            m.denial_logs_suppressed.clone(),
        );
        m
    }

    /// Count one decision.
    pub fn decision(&self, kind: &'static str, result: &'static str, reason: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabels {
                kind,
                result,
                reason,
            })
            .inc();
    }

    /// Count one reservation batch create.
    pub fn batch_create(&self, result: &'static str) {
        self.batch_creates
            .get_or_create(&WriteLabels { result })
            .inc();
    }

    /// Count one quota read from etcd.
    pub fn quota_read(&self, result: &'static str) {
        self.quota_reads
            .get_or_create(&WriteLabels { result })
            .inc();
    }
}

impl Default for Metrics {
    /// Metrics not registered anywhere (the tests and bench/src/webhook_cache.rs).
    fn default() -> Self {
        Self {
            decisions: Family::default(),
            // 0.5 ms … ~4 s
            decision_duration: Histogram::new(exponential_buckets(0.0005, 2.0, 14)),
            batch_creates: Family::default(),
            // 0.1 ms … ~1.6 s
            batch_confirm: Histogram::new(exponential_buckets(0.0001, 2.0, 15)),
            quota_reads: Family::default(),
            retries: Counter::default(),
            // 1 … 512
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            events: Arc::default(),
            denial_logs_suppressed: Counter::default(),
            client_auth_required: Gauge::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registers_under_the_kq_webhook_prefix() {
        let mut reg = Registry::default();
        let m = Metrics::register(&mut reg);
        m.decision("resourcebinding", DENIED, "QuotaExceeded");
        m.batch_create("conflict");
        m.batch_size.observe(3.0);
        m.events.written("create");
        m.events.dropped("queue_full", 2);
        m.denial_logs_suppressed.inc();
        m.client_auth_required.set(1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        for name in [
            "kq_webhook_decisions_total{kind=\"resourcebinding\",result=\"denied\",reason=\"QuotaExceeded\"} 1",
            "kq_webhook_reservation_batch_creates_total{result=\"conflict\"} 1",
            "kq_webhook_decision_retries_total 0",
            "kq_webhook_batch_size_count 1",
            "kq_webhook_decision_duration_seconds_count 0",
            "kq_webhook_events_written_total{op=\"create\"} 1",
            "kq_webhook_events_dropped_total{cause=\"queue_full\"} 2",
            "kq_webhook_events_aggregated_total 0",
            "kq_webhook_denial_logs_suppressed_total 1",
            "kq_webhook_client_auth_required 1",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
    }
}
