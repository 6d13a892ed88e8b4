//! The event writer of both binaries: Kubernetes Events (events.k8s.io/v1) written off the
//! caller's path, aggregated into series and paced (docs/design.md §5 "Events and
//! decision logs").
//!
//! ```text
//!  caller ──try_emit──► bounded channel (capacity) ──► run() task
//!    never awaits; full → dropped      │                         │
//!    and counted                       ▼                         ▼
//!                              series::Aggregator ─ due writes ─► EventSink
//!                              (one series per object,    token bucket   (events.k8s.io/v1:
//!                               type, action, reason,     over all       create, then merge
//!                               note; one write per       writes)        patch of `series`)
//!                               series per interval)
//! ```
//!
//! What is queued is an [`Occurrence`]: the series it feeds (one [`Event`] feeds one; the
//! webhook's denial feeds one on the template and one on the quota). The caller only calls
//! [`EventQueue::try_emit`], which never waits: a full queue drops the occurrence and
//! counts it. API failures are counted and logged (warn at most once a minute, the rest at
//! debug); nothing here can slow or change what the caller decides.
//!
//! kube's `kube::runtime::events::Recorder` is not used: its series key ignores the note,
//! so a later message would be counted into an event that shows the first one
//! (events.k8s.io/v1 makes the note immutable); it counts publishes, not occurrences; and
//! its cache has no size bound. The writes here are the ones it makes (create, then a
//! merge patch setting `series`), on the same API, with the same RBAC.

pub mod metrics;
pub mod series;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep_until, timeout};

pub use metrics::EventMetrics;
use series::{Aggregator, Observed, Outcome, TokenBucket, Write};
pub use series::{ObjectRef, SeriesKey};

/// Occurrences taken from the queue before the writer looks for due writes again.
const DRAIN_BATCH: usize = 256;
/// kube-apiserver's limit on an event's note (events.k8s.io/v1), in bytes.
pub const NOTE_LIMIT: usize = 1024;
/// Longest time one event write may take before it counts as failed.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often idle series are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(10);
/// Shortest gap between two warnings about failing event writes.
const FAILURE_WARN_INTERVAL: Duration = Duration::from_secs(60);

/// Something that happened, as the series it feeds (each key's note already within
/// [`NOTE_LIMIT`]: use [`truncate`]).
pub trait Occurrence: Send + 'static {
    /// The series this occurrence counts in: one per object it is about.
    fn series(self) -> Vec<SeriesKey>;
}

/// One event about one object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// What was done regarding the object (`Reconcile`, `Queue`, …).
    pub action: &'static str,
    /// CamelCase reason (`DriftDetected`, …).
    pub reason: &'static str,
    /// The message (truncated to [`NOTE_LIMIT`] bytes).
    pub note: String,
    /// The object it is about.
    pub regarding: ObjectRef,
}

impl Occurrence for Event {
    fn series(self) -> Vec<SeriesKey> {
        vec![SeriesKey {
            note: truncate(&self.note, NOTE_LIMIT).to_owned(),
            regarding: self.regarding,
            related: None,
            type_: self.type_,
            action: self.action,
            reason: self.reason,
        }]
    }
}

impl ObjectRef {
    /// The object `r` names (absent fields empty).
    pub fn from_reference(r: &ObjectReference) -> Self {
        let [api_version, kind, namespace, name, uid] =
            [&r.api_version, &r.kind, &r.namespace, &r.name, &r.uid]
                .map(|field| field.clone().unwrap_or_default());
        Self {
            api_version,
            kind,
            namespace,
            name,
            uid,
        }
    }
}

/// The caller's end of the queue. Cheap to clone.
#[derive(Debug)]
pub struct EventQueue<T> {
    tx: mpsc::Sender<T>,
    metrics: Arc<EventMetrics>,
}

impl<T> Clone for EventQueue<T> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

impl<T: Occurrence> EventQueue<T> {
    /// A queue of `capacity` and the receiver [`run`] takes.
    pub fn channel(capacity: usize, metrics: Arc<EventMetrics>) -> (Self, mpsc::Receiver<T>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Self { tx, metrics }, rx)
    }

    /// Queue `occurrence` without waiting; when the queue is full (or the writer is gone)
    /// it is dropped and counted. Returns whether it was queued.
    pub fn try_emit(&self, occurrence: T) -> bool {
        match self.tx.try_send(occurrence) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.metrics.dropped("queue_full", 1);
                false
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                self.metrics.dropped("writer_stopped", 1);
                false
            }
        }
    }
}

/// Why an event write failed.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// 404: the event (or its namespace) does not exist.
    #[error("not found")]
    NotFound,
    /// Any other API or transport error.
    #[error("{0}")]
    Api(String),
}

impl From<kube::Error> for SinkError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.is_not_found() => SinkError::NotFound,
            other => SinkError::Api(other.to_string()),
        }
    }
}

/// The two event API calls the writer makes (a fake in tests).
pub trait EventSink: Send + Sync + 'static {
    /// Create `event` (namespace and name set).
    fn create<'a>(&'a self, event: &'a K8sEvent) -> BoxFuture<'a, Result<(), SinkError>>;

    /// Merge-patch `series` into the event `namespace/name`.
    fn patch_series<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        series: &'a EventSeries,
    ) -> BoxFuture<'a, Result<(), SinkError>>;
}

/// [`EventSink`] over events.k8s.io/v1.
#[derive(Clone)]
pub struct KubeEventSink {
    client: kube::Client,
}

impl KubeEventSink {
    /// A sink that writes through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl EventSink for KubeEventSink {
    fn create<'a>(&'a self, event: &'a K8sEvent) -> BoxFuture<'a, Result<(), SinkError>> {
        Box::pin(async move {
            let ns = event.metadata.namespace.as_deref().unwrap_or("default");
            Api::<K8sEvent>::namespaced(self.client.clone(), ns)
                .create(&PostParams::default(), event)
                .await?;
            Ok(())
        })
    }

    fn patch_series<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        series: &'a EventSeries,
    ) -> BoxFuture<'a, Result<(), SinkError>> {
        Box::pin(async move {
            let patch = serde_json::json!({ "series": series });
            Api::<K8sEvent>::namespaced(self.client.clone(), namespace)
                .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            Ok(())
        })
    }
}

/// How the writer aggregates and paces.
#[derive(Clone, Debug)]
pub struct EventConfig {
    /// `reportingController` of every event (`kubectl describe` shows it under "From").
    pub reporting_controller: &'static str,
    /// What the events are, in the writer's log lines (`denial event`: "cannot write a
    /// denial event").
    pub what: &'static str,
    /// At most one write per series per interval.
    pub interval: Duration,
    /// Writes per second over all series.
    pub qps: f64,
    /// Writes allowed at once before `qps` applies.
    pub burst: u32,
    /// `reportingInstance` (this replica).
    pub instance: String,
}

impl EventConfig {
    /// The defaults (one write per series per 10 s, 5 writes/s, bursts of 25) for
    /// `reporting_controller`, which is also the instance until one is given; `what`
    /// names the events in log lines.
    pub fn new(reporting_controller: &'static str, what: &'static str) -> Self {
        Self {
            reporting_controller,
            what,
            interval: Duration::from_secs(10),
            qps: 5.0,
            burst: 25,
            instance: reporting_controller.to_owned(),
        }
    }
}

/// The writer task: receives occurrences, aggregates them, writes due events, until every
/// [`EventQueue`] is dropped.
pub async fn run<T: Occurrence>(
    mut rx: mpsc::Receiver<T>,
    sink: Arc<dyn EventSink>,
    config: EventConfig,
    metrics: Arc<EventMetrics>,
) {
    let mut series = Aggregator::new(config.interval);
    let mut bucket = TokenBucket::new(config.qps, config.burst, Instant::now());
    let mut failures = FailureLog::default();
    // One timer, re-armed only when the next wake-up moves: a storm of denials wakes this
    // task once per batch, and must not cost a timer registration each time.
    let timer = sleep_until(Instant::now());
    tokio::pin!(timer);
    let mut armed: Option<Instant> = None;
    let mut next_sweep = Instant::now() + SWEEP_EVERY;
    loop {
        let now = Instant::now();
        let wake = series
            .next_due()
            .map(|due| due.max(bucket.next_token_at(now)));
        if let Some(at) = wake
            && armed != Some(at)
        {
            timer.as_mut().reset(at);
            armed = Some(at);
        }
        let first = tokio::select! {
            msg = rx.recv() => match msg {
                Some(ev) => Some(ev),
                None => return,
            },
            () = &mut timer, if wake.is_some() => {
                armed = None;
                None
            }
        };
        let now = Instant::now();
        let wall = Timestamp::now();
        let mut pending = first.into_iter().collect::<Vec<_>>();
        while pending.len() < DRAIN_BATCH {
            match rx.try_recv() {
                Ok(ev) => pending.push(ev),
                Err(_) => break,
            }
        }
        let drained = pending.len();
        for ev in pending {
            for key in ev.series() {
                match series.observe(key, now, wall) {
                    Observed::Aggregated => {
                        metrics.aggregated.inc();
                    }
                    Observed::New { evicted_unwritten } if evicted_unwritten > 0 => {
                        metrics.dropped("evicted", u64::from(evicted_unwritten));
                    }
                    Observed::New { .. } => {}
                    Observed::Refused => metrics.dropped("overload", 1),
                }
            }
        }
        if drained == DRAIN_BATCH {
            // A full batch: let the callers on this worker run first.
            tokio::task::yield_now().await;
        }
        let budget = bucket.available(now);
        for write in series.take_due(now, budget) {
            bucket.spend();
            let outcome = perform(sink.as_ref(), &config, &write, &metrics, &mut failures).await;
            series.finish(&write, outcome, Instant::now());
        }
        let now = Instant::now();
        if now >= next_sweep {
            series.sweep(now);
            next_sweep = now + SWEEP_EVERY;
        }
    }
}

async fn perform(
    sink: &dyn EventSink,
    config: &EventConfig,
    write: &Write,
    metrics: &EventMetrics,
    failures: &mut FailureLog,
) -> Outcome {
    let (op, result, name) = match write {
        Write::Create {
            key,
            count,
            first,
            last,
        } => {
            let event = new_event(key, *count, *first, *last, config);
            let name = event.metadata.name.clone().unwrap_or_default();
            let result = timeout(WRITE_TIMEOUT, sink.create(&event)).await;
            ("create", result, name)
        }
        Write::Patch {
            key,
            name,
            count,
            last,
        } => {
            let series = EventSeries {
                count: i32::try_from(*count).unwrap_or(i32::MAX),
                last_observed_time: MicroTime(*last),
            };
            let ns = event_namespace(&key.regarding);
            let result = timeout(WRITE_TIMEOUT, sink.patch_series(ns, name, &series)).await;
            ("patch", result, name.clone())
        }
    };
    let key = write.key();
    match result {
        Ok(Ok(())) => {
            metrics.written(op);
            tracing::debug!(
                op,
                event = %name,
                regarding = %describe(&key.regarding),
                reason = key.reason,
                count = write.count(),
                "{} written",
                config.what
            );
            Outcome::Written { name }
        }
        Ok(Err(SinkError::NotFound)) if op == "patch" => {
            // The apiserver expired the event: the next write creates a new one.
            metrics.failed(op, "not_found");
            Outcome::Gone
        }
        Ok(Err(e)) => {
            metrics.failed(op, "api_error");
            failures.record(config.what, op, &key.regarding, &e.to_string());
            Outcome::Failed
        }
        Err(_) => {
            metrics.failed(op, "timeout");
            failures.record(config.what, op, &key.regarding, "timed out");
            Outcome::Failed
        }
    }
}

/// Warn about failing writes at most once per [`FAILURE_WARN_INTERVAL`]; debug otherwise.
#[derive(Debug, Default)]
struct FailureLog {
    last_warn: Option<Instant>,
    since_warn: u64,
}

impl FailureLog {
    fn record(&mut self, what: &str, op: &str, regarding: &ObjectRef, error: &str) {
        let now = Instant::now();
        let warn = self
            .last_warn
            .is_none_or(|t| now.saturating_duration_since(t) >= FAILURE_WARN_INTERVAL);
        if warn {
            tracing::warn!(
                op,
                regarding = %describe(regarding),
                error,
                failed_since_last_warning = self.since_warn,
                "cannot write a {what} (decisions are unaffected; check RBAC for \
                 events.k8s.io events create/patch)"
            );
            self.last_warn = Some(now);
            self.since_warn = 0;
        } else {
            self.since_warn += 1;
            tracing::debug!(op, regarding = %describe(regarding), error, "cannot write a {what}");
        }
    }
}

/// `Kind ns/name`.
fn describe(r: &ObjectRef) -> String {
    if r.namespace.is_empty() {
        format!("{} {}", r.kind, r.name)
    } else {
        format!("{} {}/{}", r.kind, r.namespace, r.name)
    }
}

/// Events of a cluster-scoped object go to `default`, as kube's and client-go's recorders do.
fn event_namespace(r: &ObjectRef) -> &str {
    if r.namespace.is_empty() {
        "default"
    } else {
        &r.namespace
    }
}

fn object_reference(r: &ObjectRef) -> ObjectReference {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    ObjectReference {
        api_version: opt(&r.api_version),
        kind: opt(&r.kind),
        namespace: opt(&r.namespace),
        name: opt(&r.name),
        uid: opt(&r.uid),
        ..ObjectReference::default()
    }
}

/// The event a series starts with.
fn new_event(
    key: &SeriesKey,
    count: u32,
    first: Timestamp,
    last: Timestamp,
    config: &EventConfig,
) -> K8sEvent {
    K8sEvent {
        metadata: ObjectMeta {
            namespace: Some(event_namespace(&key.regarding).to_owned()),
            name: Some(event_name(&key.regarding.name, Timestamp::now())),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(first)),
        series: (count >= 2).then(|| EventSeries {
            count: i32::try_from(count).unwrap_or(i32::MAX),
            last_observed_time: MicroTime(last),
        }),
        reporting_controller: Some(config.reporting_controller.to_owned()),
        reporting_instance: Some(truncate(&config.instance, 128).to_owned()),
        action: Some(key.action.to_owned()),
        reason: Some(key.reason.to_owned()),
        note: Some(key.note.clone()),
        type_: Some(type_name(key.type_).to_owned()),
        regarding: Some(object_reference(&key.regarding)),
        related: key.related.as_ref().map(object_reference),
        ..K8sEvent::default()
    }
}

/// `<object name>.<nanoseconds, hex>` as client-go names events, reduced to what a DNS
/// subdomain allows (lowercase alphanumerics, `-`, `.`) and short enough for one.
fn event_name(object: &str, now: Timestamp) -> String {
    let mut base: String = object
        .chars()
        .map(|c| match c.to_ascii_lowercase() {
            c @ ('a'..='z' | '0'..='9' | '-' | '.') => c,
            _ => '-',
        })
        .take(200)
        .collect();
    let trimmed = base
        .trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .len();
    if trimmed == 0 {
        base = "object".to_owned();
    } else {
        base = base
            .trim_matches(|c: char| !c.is_ascii_alphanumeric())
            .to_owned();
    }
    let nanos = u128::try_from(now.as_nanosecond()).unwrap_or_default();
    format!("{base}.{nanos:x}")
}

/// `Normal` or `Warning`, as events.k8s.io/v1 spells it.
fn type_name(t: EventType) -> &'static str {
    match t {
        EventType::Normal => "Normal",
        EventType::Warning => "Warning",
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn truncate(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests;
