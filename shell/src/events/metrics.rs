//! The event writer's metrics, registered under the binary's prefix (`kq_webhook_events_…`,
//! `kq_controller_events_…`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of `…_events_written_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventWriteLabels {
    /// `create` (a new series) or `patch` (its count).
    pub op: &'static str,
}

/// Labels of `…_events_failed_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventFailureLabels {
    /// `create` or `patch`.
    pub op: &'static str,
    /// `api_error`, `timeout`, `not_found` (a patch of an event the apiserver expired).
    pub error: &'static str,
}

/// Labels of `…_events_dropped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EventDropLabels {
    /// `queue_full` (the writer's queue), `evicted` (unwritten occurrences of a series
    /// forgotten to bound memory), `overload` (a new series refused while most tracked
    /// ones are unwritten), `writer_stopped`.
    pub cause: &'static str,
}

/// Metrics of the event writer.
#[derive(Debug, Default)]
pub struct EventMetrics {
    /// Event API writes that succeeded, by operation.
    pub written: Family<EventWriteLabels, Counter>,
    /// Event API writes that failed, by operation and error.
    pub failed: Family<EventFailureLabels, Counter>,
    /// Occurrences that never reached the API, by cause.
    pub dropped: Family<EventDropLabels, Counter>,
    /// Occurrences counted into an existing event series instead of a new event.
    pub aggregated: Counter,
}

impl EventMetrics {
    /// Register under `reg` (whose prefix names the binary); `what` names the events in
    /// the help texts (`denial events`, `events`).
    pub fn register(&self, reg: &mut Registry, what: &str) {
        reg.register(
            "events_written",
            format!(
                "{} written to the API, by operation (create, patch)",
                capital(what)
            ),
            self.written.clone(),
        );
        reg.register(
            "events_failed",
            format!("Writes of {what} that failed, by operation and error"),
            self.failed.clone(),
        );
        reg.register(
            "events_dropped",
            format!("{} dropped before any write, by cause", capital(what)),
            self.dropped.clone(),
        );
        reg.register(
            "events_aggregated",
            format!("Occurrences of {what} counted into an existing event series"),
            self.aggregated.clone(),
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

    /// Count `n` dropped occurrences.
    pub fn dropped(&self, cause: &'static str, n: u64) {
        self.dropped
            .get_or_create(&EventDropLabels { cause })
            .inc_by(n);
    }
}

/// `what` with its first letter in upper case.
fn capital(what: &str) -> String {
    let mut chars = what.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}
