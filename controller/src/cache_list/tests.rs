//! The watch against a fake apiserver on 127.0.0.1 (axum), scripted request by request:
//! the streaming list where it is offered, the bounded list where it is refused, and the
//! bound carried by every re-list.

use std::sync::Arc;
use std::time::Duration;

use axum::http::{StatusCode, Uri};
use futures::StreamExt;
use karmada_quota_crds::ResourceBinding;
use kube::api::Api;
use kube::runtime::watcher::Event;
use parking_lot::Mutex;

use super::listed_events;
use crate::metrics::Metrics;

fn binding(name: &str) -> String {
    format!(
        r#"{{"apiVersion":"work.karmada.io/v1alpha2","kind":"ResourceBinding",
           "metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"5"}},
           "spec":{{"resource":{{"apiVersion":"apps/v1","kind":"Deployment","name":"{name}"}},"replicas":1}}}}"#
    )
}

fn list_body(rv: &str, names: &[&str]) -> String {
    let items: Vec<String> = names.iter().map(|n| binding(n)).collect();
    format!(
        r#"{{"kind":"ResourceBindingList","apiVersion":"work.karmada.io/v1alpha2","metadata":{{"resourceVersion":"{rv}"}},"items":[{}]}}"#,
        items.join(",")
    )
}

fn watch_line(kind: &str, name: &str, rv: &str) -> String {
    let mut o: serde_json::Value = serde_json::from_str(&binding(name)).unwrap();
    o["metadata"]["resourceVersion"] = rv.into();
    serde_json::json!({"type": kind, "object": o}).to_string()
}

fn name_of(e: &Event<ResourceBinding>) -> String {
    match e {
        Event::Init => "Init".into(),
        Event::InitDone => "InitDone".into(),
        Event::InitApply(o) => {
            format!("InitApply {}", o.metadata.name.clone().unwrap_or_default())
        }
        Event::Apply(o) => format!("Apply {}", o.metadata.name.clone().unwrap_or_default()),
        Event::Delete(o) => format!("Delete {}", o.metadata.name.clone().unwrap_or_default()),
    }
}

/// A bookmark line; `end`: the one that ends a streaming list's initial events.
fn bookmark(rv: &str, end: bool) -> String {
    let annotations = if end {
        serde_json::json!({"k8s.io/initial-events-end": "true"})
    } else {
        serde_json::json!({})
    };
    serde_json::json!({"type": "BOOKMARK", "object": {
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"resourceVersion": rv, "annotations": annotations}}})
    .to_string()
}

fn status(code: u16, reason: &str, message: &str) -> String {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": message, "reason": reason, "code": code})
    .to_string()
}

/// What 1.20 answers a streaming list (checked against it, e2e `watch_list_protocol`).
fn refused_as_1_20() -> Reply {
    Reply::Status(
        422,
        status(
            422,
            "Invalid",
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch",
        ),
    )
}

/// A watch's 410 (an ERROR event).
fn expired() -> String {
    format!(
        r#"{{"type":"ERROR","object":{}}}"#,
        status(410, "Expired", "too old resource version")
    )
}

/// One scripted answer.
enum Reply {
    Body(String),
    Status(u16, String),
    /// No answer (a watch that stays open, quiet).
    Pending,
}

/// A fake apiserver on 127.0.0.1 answering the n-th request with `script[n]` (then
/// `Pending`); the requests' paths and queries.
async fn fake(script: Vec<Reply>) -> (kube::Client, Arc<Mutex<Vec<String>>>) {
    let requests: Arc<Mutex<Vec<String>>> = Arc::default();
    let script = Arc::new(Mutex::new(script.into_iter()));
    let seen = requests.clone();
    let app = axum::Router::new().fallback(move |uri: Uri| {
        let (seen, script) = (seen.clone(), script.clone());
        async move {
            seen.lock().push(uri.to_string());
            let reply = script.lock().next().unwrap_or(Reply::Pending);
            match reply {
                Reply::Body(b) => (StatusCode::OK, b),
                Reply::Status(code, b) => (StatusCode::from_u16(code).unwrap(), b),
                Reply::Pending => std::future::pending().await,
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    // kube's own retry of 429/503/504 (up to 15 times) would hide what this watch does
    // with the answer it finally gets.
    config.default_retry = false;
    (kube::Client::try_from(config).unwrap(), requests)
}

/// The first `n` events of a watch of `client`'s bindings, by name; and its metrics' text.
async fn first_events(client: kube::Client, n: usize) -> (Vec<String>, String) {
    let api: Api<ResourceBinding> = Api::all(client);
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let mut stream = listed_events(api, "resourcebindings", metrics, None).map(|(_, e)| e);
    let mut got = Vec::new();
    while got.len() < n {
        let e = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .unwrap_or_else(|_| panic!("an event within 20 s; so far {got:?}"))
            .expect("the stream goes on");
        got.push(name_of(&e));
    }
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    (got, text)
}

/// The requests once there are at least `n` (the last may trail the events by a moment).
async fn at_least(requests: &Mutex<Vec<String>>, n: usize) -> Vec<String> {
    for _ in 0..100 {
        let r = requests.lock().clone();
        if r.len() >= n {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} requests: {:?}", requests.lock());
}

fn query(uri: &str) -> Vec<(String, String)> {
    let q = uri.split_once('?').map_or("", |(_, q)| q);
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_owned(), v.to_owned())
        })
        .collect()
}

fn param(uri: &str, key: &str) -> Option<String> {
    query(uri)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

/// Where streaming lists are refused (1.20): the first list is a consistent one (no
/// `resourceVersion`, no `limit`); the watch goes on from the list's resourceVersion;
/// after a 410 the re-list is served by the watch cache bounded by the newest object seen
/// (13), not `resourceVersion=0`; the streaming list is not asked again.
#[tokio::test]
async fn where_streaming_lists_are_refused_every_list_is_bounded_by_what_was_seen() {
    let (client, requests) = fake(vec![
        refused_as_1_20(),
        Reply::Body(list_body("11", &["a", "b"])),
        Reply::Body(
            [
                watch_line("ADDED", "c", "12"),
                watch_line("DELETED", "a", "13"),
                expired(),
            ]
            .join("\n"),
        ),
        Reply::Body(list_body("20", &["b", "c"])),
    ])
    .await;
    let (got, metrics) = first_events(client, 10).await;
    assert_eq!(
        got,
        [
            "Init",
            "InitApply a",
            "InitApply b",
            "InitDone",
            "Apply c",
            "Delete a",
            "Init",
            "InitApply b",
            "InitApply c",
            "InitDone",
        ]
    );
    // Neither the refusal nor the 410 is a watch error.
    assert!(!metrics.contains("watch=\"resourcebindings\""), "{metrics}");
    let r = at_least(&requests, 5).await;
    assert_eq!(
        param(&r[0], "sendInitialEvents").as_deref(),
        Some("true"),
        "{}",
        r[0]
    );
    assert_eq!(param(&r[1], "limit"), None, "{}", r[1]);
    assert_eq!(
        param(&r[1], "resourceVersion"),
        None,
        "a consistent list: {}",
        r[1]
    );
    // The re-list after the 410: bounded by the newest binding seen (the delete at 13).
    let (i, bound) = (3, "13");
    assert_eq!(
        param(&r[i], "resourceVersion").as_deref(),
        Some(bound),
        "{}",
        r[i]
    );
    assert_eq!(
        param(&r[i], "resourceVersionMatch").as_deref(),
        Some("NotOlderThan"),
        "{}",
        r[i]
    );
    assert_eq!(param(&r[i], "limit"), None, "{}", r[i]);
    assert_eq!(param(&r[i], "watch"), None, "{}", r[i]);
    assert_eq!(param(&r[2], "watch").as_deref(), Some("true"));
    assert_eq!(param(&r[2], "resourceVersion").as_deref(), Some("11"));
    assert_eq!(param(&r[4], "resourceVersion").as_deref(), Some("20"));
    assert!(
        r.iter()
            .skip(1)
            .all(|u| param(u, "sendInitialEvents").is_none()),
        "{r:?}"
    );
}

/// A list older than its bound (a server that ignored it) is not finished (no
/// `InitDone`) and is asked again; after a `504 Too large resource version` the next list
/// is a consistent one rather than a wait on the same bound for ever.
#[tokio::test]
async fn a_list_older_than_its_bound_is_refused_and_a_bound_too_large_gives_a_consistent_list() {
    let (client, requests) = fake(vec![
        refused_as_1_20(),
        Reply::Body(list_body("31", &["a"])),
        Reply::Body([watch_line("ADDED", "b", "35"), expired()].join("\n")),
        // The re-list, bounded by 35, from an older cache.
        Reply::Body(list_body("33", &["a"])),
        Reply::Status(
            504,
            status(
                504,
                "Timeout",
                "Timeout: Too large resource version: 35, current: 34",
            ),
        ),
        Reply::Body(list_body("34", &["a", "b"])),
    ])
    .await;
    let (got, metrics) = first_events(client, 8).await;
    assert_eq!(
        got,
        [
            "Init",
            "InitApply a",
            "InitDone",
            "Apply b",
            "Init",
            "InitApply a",
            // The stale list ends without InitDone; the next one:
            "Init",
            "InitApply a",
        ]
    );
    let r = at_least(&requests, 6).await;
    for i in [3, 4] {
        assert_eq!(
            param(&r[i], "resourceVersion").as_deref(),
            Some("35"),
            "{}",
            r[i]
        );
    }
    assert_eq!(param(&r[5], "resourceVersion"), None, "{}", r[5]);
    assert_eq!(param(&r[5], "watch"), None, "{}", r[5]);
    assert!(
        metrics.contains("watch=\"resourcebindings\"} 2"),
        "the older list and the 504 are two restarts: {metrics}"
    );
}

/// Where streaming lists are offered: the initial events up to the end bookmark are the
/// list (its resourceVersion the bookmark's), the same response goes on as the watch; the
/// first request has no resourceVersion (a consistent read), a re-list after a 410 asks
/// for the newest object seen (13; a bookmark's 15 only resumes the watch), and no plain
/// list is ever sent.
#[tokio::test]
async fn where_streaming_lists_are_offered_the_list_is_the_watchs_initial_events() {
    let (client, requests) = fake(vec![
        Reply::Body(
            [
                watch_line("ADDED", "a", "3"),
                watch_line("ADDED", "b", "7"),
                bookmark("9", false),
                bookmark("10", true),
                watch_line("ADDED", "c", "12"),
                watch_line("DELETED", "a", "13"),
            ]
            .join("\n"),
        ),
        // The watch resumed from 13, then expired.
        Reply::Body([bookmark("15", false), expired()].join("\n")),
        Reply::Body(
            [
                watch_line("ADDED", "b", "7"),
                watch_line("ADDED", "c", "12"),
                bookmark("16", true),
            ]
            .join("\n"),
        ),
    ])
    .await;
    let (got, metrics) = first_events(client, 10).await;
    assert_eq!(
        got,
        [
            "Init",
            "InitApply a",
            "InitApply b",
            "InitDone",
            "Apply c",
            "Delete a",
            "Init",
            "InitApply b",
            "InitApply c",
            "InitDone",
        ]
    );
    assert!(!metrics.contains("watch=\"resourcebindings\""), "{metrics}");
    let r = at_least(&requests, 4).await;
    for (i, rv) in [(0, ""), (2, "13")] {
        assert_eq!(
            param(&r[i], "sendInitialEvents").as_deref(),
            Some("true"),
            "{}",
            r[i]
        );
        assert_eq!(
            param(&r[i], "allowWatchBookmarks").as_deref(),
            Some("true"),
            "{}",
            r[i]
        );
        assert_eq!(
            param(&r[i], "resourceVersionMatch").as_deref(),
            Some("NotOlderThan"),
            "{}",
            r[i]
        );
        assert_eq!(
            param(&r[i], "resourceVersion").as_deref(),
            Some(rv),
            "{}",
            r[i]
        );
    }
    assert_eq!(
        param(&r[1], "resourceVersion").as_deref(),
        Some("13"),
        "{}",
        r[1]
    );
    assert_eq!(param(&r[1], "sendInitialEvents"), None, "{}", r[1]);
    assert_eq!(
        param(&r[3], "resourceVersion").as_deref(),
        Some("16"),
        "{}",
        r[3]
    );
    assert!(
        r.iter()
            .all(|u| param(u, "watch").as_deref() == Some("true")),
        "{r:?}"
    );
}

/// A re-list asked for (a Lease taken: `crate::fence`) drops the quiet watch at once and
/// lists consistently — no `resourceVersion`, though the watch had a bound — and the new
/// list's events carry the generation asked for, the first list's the one before.
#[tokio::test]
async fn a_relist_asked_for_lists_consistently_at_once_and_tags_its_events() {
    let (client, requests) = fake(vec![
        refused_as_1_20(),
        Reply::Body(list_body("11", &["a"])),
        Reply::Pending,
        Reply::Body(list_body("30", &["a", "b"])),
    ])
    .await;
    let api: Api<ResourceBinding> = Api::all(client);
    let metrics = Arc::new(Metrics::register(
        &mut prometheus_client::registry::Registry::default(),
    ));
    let fence = crate::fence::Fence::default();
    let mut stream = listed_events(api, "resourcebindings", metrics, Some(fence.asked()));
    let mut next = async || {
        let (g, e) = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .expect("an event within 20 s")
            .expect("the stream goes on");
        (g, name_of(&e))
    };
    for want in ["Init", "InitApply a", "InitDone"] {
        assert_eq!(next().await, (0, want.to_owned()));
    }
    // The watch is open and quiet; nothing more comes until a re-list is asked for.
    at_least(&requests, 3).await;
    assert_eq!(fence.took_lease(), 1);
    for want in ["Init", "InitApply a", "InitApply b", "InitDone"] {
        assert_eq!(next().await, (1, want.to_owned()));
    }
    let r = at_least(&requests, 4).await;
    assert!(param(&r[2], "watch").is_some(), "{r:?}");
    assert_eq!(
        param(&r[2], "resourceVersion").as_deref(),
        Some("11"),
        "{r:?}"
    );
    assert_eq!(param(&r[3], "watch"), None, "the re-list is a list: {r:?}");
    assert_eq!(
        param(&r[3], "resourceVersion"),
        None,
        "a consistent list, not one bounded by what was seen: {r:?}"
    );
}

/// Events of a dropped attempt that arrive after the next attempt's `Init` are not handed
/// on; those before it are (the consumer's next `Init` starts over anyway).
#[tokio::test]
async fn a_dropped_attempts_late_events_are_skipped() {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let out = |attempt| super::Out {
        tx: tx.clone(),
        attempt,
        generation: attempt - 1,
    };
    let (first, second) = (out(1), out(2));
    let rb = |n: &str| serde_json::from_str::<ResourceBinding>(&binding(n)).unwrap();
    first.send(Event::Init).await.unwrap();
    first.send(Event::InitApply(rb("a"))).await.unwrap();
    second.send(Event::Init).await.unwrap();
    first.send(Event::InitApply(rb("late"))).await.unwrap();
    first.send(Event::InitDone).await.unwrap();
    second.send(Event::InitApply(rb("b"))).await.unwrap();
    second.send(Event::InitDone).await.unwrap();
    drop((tx, first, second));
    let got: Vec<(u64, String)> = super::current_attempt(rx)
        .map(|(g, e)| (g, name_of(&e)))
        .collect()
        .await;
    let want = [
        (0, "Init"),
        (0, "InitApply a"),
        (1, "Init"),
        (1, "InitApply b"),
        (1, "InitDone"),
    ];
    assert_eq!(got, want.map(|(g, n)| (g, n.to_owned())));
}
