//! Prometheus metrics of the webhook (prometheus-client), served by the runtime's admin
//! router on `/metrics`.

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

/// Labels of `kq_webhook_status_writes_total`.
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
    /// Status replaces by result.
    pub status_writes: Family<WriteLabels, Counter>,
    /// Status replaces refused with 409 Conflict (someone else wrote the quota first).
    pub conflicts: Counter,
    /// Decision rounds re-run after a conflict.
    pub retries: Counter,
    /// Requests decided together in one batch.
    pub batch_size: Histogram,
    /// Entries removed again because their request ended refused, failed or timed out,
    /// by result (`ok`: removed; `failed`: left for the controller to expire).
    pub rollbacks: Family<WriteLabels, Counter>,
    /// Denial events and decision log lines.
    pub events: EventMetrics,
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
            "status_writes",
            "KarmadaQuota status replaces by result",
            m.status_writes.clone(),
        );
        reg.register(
            "status_write_conflicts",
            "KarmadaQuota status replaces refused with 409 Conflict",
            m.conflicts.clone(),
        );
        reg.register(
            "decision_retries",
            "Decision rounds re-run after a status write conflict",
            m.retries.clone(),
        );
        reg.register(
            "batch_size",
            "ResourceBinding requests of one namespace decided together",
            m.batch_size.clone(),
        );
        reg.register(
            "rollbacks",
            "Reservation entries removed again because their request did not end admitted, \
             by result (failed: left for the controller to expire)",
            m.rollbacks.clone(),
        );
        reg.register(
            "client_auth_required",
            "1 when the admission listener requires a client certificate signed by \
             --client-ca-file; 0 when anyone who reaches it can send reviews",
            m.client_auth_required.clone(),
        );
        m.events.register(reg);
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

    /// Count `n` rolled-back entries.
    pub fn rolled_back(&self, result: &'static str, n: usize) {
        self.rollbacks
            .get_or_create(&WriteLabels { result })
            .inc_by(n as u64);
    }

    /// Count one status write.
    pub fn write(&self, result: &'static str) {
        self.status_writes
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
            status_writes: Family::default(),
            conflicts: Counter::default(),
            retries: Counter::default(),
            // 1 … 512
            batch_size: Histogram::new(exponential_buckets(1.0, 2.0, 10)),
            rollbacks: Family::default(),
            events: EventMetrics::default(),
            client_auth_required: Gauge::default(),
        }
    }
}

/// Labels of `kq_webhook_events_written_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventWriteLabels {
    /// `create` (a new series) or `patch` (its count).
    pub op: &'static str,
}

/// Labels of `kq_webhook_events_failed_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventFailureLabels {
    /// `create` or `patch`.
    pub op: &'static str,
    /// `api_error`, `timeout`, `not_found` (a patch of an event the apiserver expired).
    pub error: &'static str,
}

/// Labels of `kq_webhook_events_dropped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventDropLabels {
    /// `queue_full` (the writer's queue), `evicted` (unwritten occurrences of a series
    /// forgotten to bound memory), `overload` (a new series refused while most tracked
    /// ones are unwritten), `writer_stopped`.
    pub cause: &'static str,
}

/// Metrics of denial events (`events`) and decision log lines (`denial_log`).
#[derive(Debug, Default)]
pub struct EventMetrics {
    /// Event API writes that succeeded, by operation.
    pub written: Family<EventWriteLabels, Counter>,
    /// Event API writes that failed, by operation and error.
    pub failed: Family<EventFailureLabels, Counter>,
    /// Denials (or occurrences) that never reached the API, by cause.
    pub dropped: Family<EventDropLabels, Counter>,
    /// Occurrences counted into an existing event series instead of a new event.
    pub aggregated: Counter,
    /// Denial log lines suppressed by the per-binding rate limit.
    pub logs_suppressed: Counter,
}

impl EventMetrics {
    fn register(&self, reg: &mut Registry) {
        reg.register(
            "events_written",
            "Denial events written to the API, by operation (create, patch)",
            self.written.clone(),
        );
        reg.register(
            "events_failed",
            "Denial event writes that failed, by operation and error",
            self.failed.clone(),
        );
        reg.register(
            "events_dropped",
            "Denial events dropped before any write, by cause",
            self.dropped.clone(),
        );
        reg.register(
            "events_aggregated",
            "Denials counted into an existing event series",
            self.aggregated.clone(),
        );
        reg.register(
            "denial_logs_suppressed",
            "Denial log lines suppressed by the per-binding rate limit",
            self.logs_suppressed.clone(),
        );
    }

    /// Count one successful write.
    pub fn written(&self, op: &'static str) {
        self.written.get_or_create(&EventWriteLabels { op }).inc();
    }

    /// Count one failed write.
    pub fn failed(&self, op: &'static str, error: &'static str) {
        self.failed
            .get_or_create(&EventFailureLabels { op, error })
            .inc();
    }

    /// Count `n` dropped denials.
    pub fn dropped(&self, cause: &'static str, n: u64) {
        self.dropped
            .get_or_create(&EventDropLabels { cause })
            .inc_by(n);
    }

    /// Successful writes of `op` so far.
    #[cfg(test)]
    pub fn written_count(&self, op: &'static str) -> u64 {
        self.written.get_or_create(&EventWriteLabels { op }).get()
    }

    /// Failed writes of `op` with `error` so far.
    #[cfg(test)]
    pub fn failed_count(&self, op: &'static str, error: &'static str) -> u64 {
        self.failed
            .get_or_create(&EventFailureLabels { op, error })
            .get()
    }

    /// Denials dropped for `cause` so far.
    #[cfg(test)]
    pub fn dropped_count(&self, cause: &'static str) -> u64 {
        self.dropped.get_or_create(&EventDropLabels { cause }).get()
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
        m.write("conflict");
        m.conflicts.inc();
        m.batch_size.observe(3.0);
        m.events.written("create");
        m.events.dropped("queue_full", 2);
        m.events.logs_suppressed.inc();
        m.client_auth_required.set(1);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        for name in [
            "kq_webhook_decisions_total{kind=\"resourcebinding\",result=\"denied\",reason=\"QuotaExceeded\"} 1",
            "kq_webhook_status_writes_total{result=\"conflict\"} 1",
            "kq_webhook_status_write_conflicts_total 1",
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
