//! Tests of the event writer.
use super::*;
use crate::events::metrics::{EventDropLabels, EventFailureLabels, EventWriteLabels};
use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// Records every call; fails creates while `fail` is set; with `gated`, every call
/// waits for a permit of `gate` (an API that hangs).
struct FakeSink {
    calls: Mutex<Vec<String>>,
    created: Mutex<Vec<K8sEvent>>,
    fail: AtomicBool,
    gate: tokio::sync::Semaphore,
    gated: AtomicBool,
}

impl Default for FakeSink {
    fn default() -> Self {
        Self {
            calls: Mutex::default(),
            created: Mutex::default(),
            fail: AtomicBool::new(false),
            gate: tokio::sync::Semaphore::new(0),
            gated: AtomicBool::new(false),
        }
    }
}

impl FakeSink {
    fn calls(&self) -> Vec<String> {
        self.calls.lock().clone()
    }

    async fn wait_gate(&self) {
        if self.gated.load(Ordering::SeqCst) {
            let _permit = self.gate.acquire().await.unwrap();
        }
    }
}

impl EventSink for FakeSink {
    fn create<'a>(&'a self, event: &'a K8sEvent) -> BoxFuture<'a, Result<(), SinkError>> {
        Box::pin(async move {
            self.wait_gate().await;
            let regarding = event.regarding.as_ref().unwrap();
            self.calls.lock().push(format!(
                "create {}/{} {} {} count={}",
                event.metadata.namespace.as_deref().unwrap(),
                regarding.kind.as_deref().unwrap(),
                regarding.name.as_deref().unwrap(),
                event.reason.as_deref().unwrap(),
                event.series.as_ref().map_or(1, |s| s.count),
            ));
            if self.fail.load(Ordering::SeqCst) {
                return Err(SinkError::Api("forbidden".into()));
            }
            self.created.lock().push(event.clone());
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
            self.wait_gate().await;
            let kind = name.split('.').next().unwrap_or_default();
            self.calls
                .lock()
                .push(format!("patch {namespace}/{kind} count={}", series.count));
            Ok(())
        })
    }
}

fn template(name: &str) -> ObjectRef {
    ObjectRef {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        namespace: "team-a".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

fn denial(name: &str) -> Event {
    Event {
        type_: EventType::Warning,
        action: "Admit",
        reason: "QuotaExceeded",
        note: format!("ResourceBinding team-a/{name}-deployment denied: exceeded quota: q"),
        regarding: template(name),
    }
}

fn config(interval: Duration) -> EventConfig {
    EventConfig {
        interval,
        qps: 100.0,
        burst: 100,
        instance: "webhook-0".into(),
        ..EventConfig::new("karmada-quota-test", "test event")
    }
}

fn written_count(m: &EventMetrics, op: &'static str) -> u64 {
    m.written.get_or_create(&EventWriteLabels { op }).get()
}

fn failed_count(m: &EventMetrics, op: &'static str, error: &'static str) -> u64 {
    m.failed
        .get_or_create(&EventFailureLabels { op, error })
        .get()
}

fn dropped_count(m: &EventMetrics, cause: &'static str) -> u64 {
    m.dropped.get_or_create(&EventDropLabels { cause }).get()
}

/// Lets the writer task run until it waits again.
async fn settle() {
    for _ in 0..20 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_event_is_created_with_its_type_action_reporter_and_object() {
    let metrics = Arc::new(EventMetrics::default());
    let sink = Arc::new(FakeSink::default());
    let (queue, rx) = EventQueue::channel(16, metrics.clone());
    let task = tokio::spawn(run(
        rx,
        sink.clone(),
        config(Duration::from_secs(10)),
        metrics.clone(),
    ));

    assert!(queue.try_emit(denial("web")));
    settle().await;
    assert_eq!(
        sink.calls(),
        ["create team-a/Deployment web QuotaExceeded count=1"]
    );
    let created = sink.created.lock().clone();
    let ev = &created[0];
    assert_eq!(ev.type_.as_deref(), Some("Warning"));
    assert_eq!(
        ev.reporting_controller.as_deref(),
        Some("karmada-quota-test")
    );
    assert_eq!(ev.reporting_instance.as_deref(), Some("webhook-0"));
    assert_eq!(ev.action.as_deref(), Some("Admit"));
    assert_eq!(
        ev.note.as_deref(),
        Some("ResourceBinding team-a/web-deployment denied: exceeded quota: q")
    );
    assert!(ev.event_time.is_some() && ev.series.is_none());
    let regarding = ev.regarding.as_ref().unwrap();
    assert_eq!(regarding.uid.as_deref(), Some("uid-web"));
    assert_eq!(regarding.api_version.as_deref(), Some("apps/v1"));
    assert!(ev.related.is_none());
    assert!(ev.metadata.name.as_deref().unwrap().starts_with("web."));
    assert_eq!(written_count(&metrics, "create"), 1);

    drop(queue);
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn retries_aggregate_into_a_rising_series_count_at_the_interval() {
    let metrics = Arc::new(EventMetrics::default());
    let sink = Arc::new(FakeSink::default());
    let (queue, rx) = EventQueue::channel(16, metrics.clone());
    let task = tokio::spawn(run(
        rx,
        sink.clone(),
        config(Duration::from_secs(10)),
        metrics.clone(),
    ));

    // A detector retrying every 300 ms: 70 denials over 21 s. The writer's deadlines
    // (10 s after each write) fall between two retries.
    for _ in 0..70 {
        let ev = denial("web");
        assert!(queue.try_emit(ev));
        settle().await;
        tokio::time::advance(Duration::from_millis(300)).await;
        settle().await;
    }
    // create at 0 s; patches when the clock passes 10 s (retries 0–33 seen) and
    // 20.2 s (0–67).
    assert_eq!(
        sink.calls(),
        [
            "create team-a/Deployment web QuotaExceeded count=1",
            "patch team-a/web count=34",
            "patch team-a/web count=68",
        ]
    );
    tokio::time::advance(Duration::from_secs(10)).await;
    settle().await;
    assert_eq!(sink.calls().last().unwrap(), "patch team-a/web count=70");
    assert_eq!(sink.calls().len(), 4);
    assert_eq!(metrics.aggregated.get(), 69);
    drop(queue);
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_full_queue_drops_and_counts_and_emitting_never_waits() {
    let metrics = Arc::new(EventMetrics::default());
    let sink = Arc::new(FakeSink {
        gated: AtomicBool::new(true),
        ..FakeSink::default()
    });
    let (queue, rx) = EventQueue::channel(4, metrics.clone());
    let task = tokio::spawn(run(
        rx,
        sink.clone(),
        config(Duration::from_secs(10)),
        metrics.clone(),
    ));

    // The first write blocks in the API (the gate has no permits).
    assert!(queue.try_emit(denial("a")));
    settle().await;
    // While it hangs, emitting returns at once: four fit, the rest are dropped.
    let queued = (0..10)
        .filter(|i| queue.try_emit(denial(&format!("b{i}"))))
        .count();
    assert_eq!(queued, 4);
    assert_eq!(dropped_count(&metrics, "queue_full"), 6);

    // The hung write times out (counted as failed), and the writer goes on.
    tokio::time::advance(WRITE_TIMEOUT).await;
    settle().await;
    assert_eq!(failed_count(&metrics, "create", "timeout"), 1);

    sink.gate.add_permits(1000);
    drop(queue);
    tokio::time::advance(Duration::from_secs(60)).await;
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn api_failures_are_counted_and_retried_after_the_interval() {
    let metrics = Arc::new(EventMetrics::default());
    let sink = Arc::new(FakeSink::default());
    sink.fail.store(true, Ordering::SeqCst);
    let (queue, rx) = EventQueue::channel(16, metrics.clone());
    let task = tokio::spawn(run(
        rx,
        sink.clone(),
        config(Duration::from_secs(10)),
        metrics.clone(),
    ));

    let ev = denial("web");
    assert!(queue.try_emit(ev.clone()));
    settle().await;
    assert_eq!(failed_count(&metrics, "create", "api_error"), 1);
    assert!(queue.try_emit(ev));
    settle().await;
    // Not retried before the interval.
    assert_eq!(sink.calls().len(), 1);

    sink.fail.store(false, Ordering::SeqCst);
    tokio::time::advance(Duration::from_secs(10)).await;
    settle().await;
    assert_eq!(
        sink.calls().last().unwrap(),
        "create team-a/Deployment web QuotaExceeded count=2"
    );
    assert_eq!(written_count(&metrics, "create"), 1);
    drop(queue);
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_global_rate_limit_spreads_writes_of_many_series() {
    let metrics = Arc::new(EventMetrics::default());
    let sink = Arc::new(FakeSink::default());
    let (queue, rx) = EventQueue::channel(64, metrics.clone());
    let cfg = EventConfig {
        qps: 2.0,
        burst: 3,
        ..config(Duration::from_secs(10))
    };
    let task = tokio::spawn(run(rx, sink.clone(), cfg, metrics.clone()));

    for i in 0..10 {
        let ev = denial(&format!("w{i}"));
        assert!(queue.try_emit(ev));
    }
    settle().await;
    assert_eq!(sink.calls().len(), 3, "burst");
    for (second, total) in [(1, 5), (2, 7), (3, 9), (4, 10)] {
        tokio::time::advance(Duration::from_secs(1)).await;
        settle().await;
        assert_eq!(sink.calls().len(), total, "2 per second, at {second} s");
    }
    drop(queue);
    task.await.unwrap();
}

#[test]
fn event_names_are_dns_subdomains() {
    let t = Timestamp::from_second(1_700_000_000).unwrap();
    let nanos = 1_700_000_000u128 * 1_000_000_000;
    assert_eq!(event_name("web", t), format!("web.{nanos:x}"));
    assert!(event_name("system:Controller", t).starts_with("system-controller."));
    assert!(event_name(":::", t).starts_with("object."));
    assert!(event_name(&"a".repeat(300), t).len() <= 253);
}

#[test]
fn notes_are_truncated_on_a_char_boundary() {
    assert_eq!(truncate("abc", 10), "abc");
    assert_eq!(truncate("aé", 2), "a");
    let long = Event {
        note: "x".repeat(5000),
        ..denial("web")
    };
    assert!(long.series().iter().all(|k| k.note.len() == NOTE_LIMIT));
}

#[test]
fn an_object_reference_reads_back_as_the_object_it_names() {
    let web = template("web");
    assert_eq!(ObjectRef::from_reference(&object_reference(&web)), web);
    let cluster_scoped = ObjectRef {
        namespace: String::new(),
        uid: String::new(),
        ..template("q")
    };
    let reference = object_reference(&cluster_scoped);
    assert_eq!(
        (reference.namespace.as_deref(), reference.uid.as_deref()),
        (None, None)
    );
    assert_eq!(ObjectRef::from_reference(&reference), cluster_scoped);
}

#[tokio::test(start_paused = true)]
async fn a_normal_event_keeps_its_type_and_action() {
    let metrics = Arc::new(EventMetrics::default());
    let sink = Arc::new(FakeSink::default());
    let (queue, rx) = EventQueue::channel(4, metrics.clone());
    let task = tokio::spawn(run(
        rx,
        sink.clone(),
        config(Duration::from_secs(10)),
        metrics.clone(),
    ));
    assert!(queue.try_emit(Event {
        type_: EventType::Normal,
        action: "Queue",
        reason: "Released",
        note: "released from the quota line".into(),
        regarding: template("web"),
    }));
    settle().await;
    let created = sink.created.lock().clone();
    assert_eq!(created.len(), 1);
    assert_eq!(created[0].type_.as_deref(), Some("Normal"));
    assert_eq!(created[0].action.as_deref(), Some("Queue"));
    assert_eq!(created[0].reason.as_deref(), Some("Released"));
    drop(queue);
    task.await.unwrap();
}
