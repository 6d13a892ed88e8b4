//! Denial events (docs/design.md §5 "Events and decision logs"): what a denial makes
//! visible, handed to the shared event writer (`karmada_quota_shell::events`), which
//! aggregates, paces and writes it off the admission path.
//!
//! A denial becomes up to two Warning events: one on the binding's resource template
//! (`spec.resource`, so `kubectl describe deployment x` shows why it is not propagated)
//! and one on the KarmadaQuota that refused it, each naming the other as `related`. The
//! handler only calls [`EventQueue::try_emit`], which never waits: a full queue drops the
//! denial and counts it; nothing here can slow or change a decision.

use karmada_quota_shell::events::{self as writer, EventType, NOTE_LIMIT, truncate};
pub use karmada_quota_shell::events::{
    EventConfig, EventSink, KubeEventSink, ObjectRef, Occurrence, SeriesKey, SinkError,
    WRITE_TIMEOUT, run,
};

/// `reportingController` of every event (`kubectl describe` shows it under "From").
pub const REPORTING_CONTROLLER: &str = "karmada-quota-webhook";
/// `action` of every event: what failed regarding the object.
pub const ACTION: &str = "Admit";
/// Denials waiting for the writer task. A retrying detector sends the same denial many
/// times a second; the writer folds those, so the queue only has to absorb bursts while
/// one API write is in flight.
pub const QUEUE_CAPACITY: usize = 1024;

/// The handler's end of the writer's queue.
pub type EventQueue = writer::EventQueue<DenialEvent>;

/// One denial to make visible: what the handler hands over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenialEvent {
    /// `QuotaExceeded`, … (core's deny reason).
    pub reason: &'static str,
    /// The event's note (truncated to [`NOTE_LIMIT`]).
    pub note: String,
    /// The binding's resource template, when it names one.
    pub template: Option<ObjectRef>,
    /// The KarmadaQuota that refused, when known.
    pub quota: Option<ObjectRef>,
}

impl Occurrence for DenialEvent {
    /// The series it feeds: one per object it is about.
    fn series(self) -> Vec<SeriesKey> {
        let note = truncate(&self.note, NOTE_LIMIT).to_owned();
        let key = |regarding: ObjectRef, related: Option<ObjectRef>, note: String| SeriesKey {
            regarding,
            related,
            type_: EventType::Warning,
            action: ACTION,
            reason: self.reason,
            note,
        };
        let mut keys = Vec::with_capacity(2);
        if let Some(t) = &self.template {
            keys.push(key(t.clone(), self.quota.clone(), note.clone()));
        }
        if let Some(q) = self.quota {
            keys.push(key(q, self.template, note));
        }
        keys
    }
}

#[cfg(test)]
mod tests;
