//! A watch whose every (re-)list is served by the apiserver's watch cache and streamed:
//! `GET …?resourceVersion=0` (no `limit`), each item handed on as it is parsed, then a
//! watch from the list's resourceVersion; a watch that expires (410) or fails lists again.
//!
//! Why not kube's `watcher` for the ResourceBinding watch: kube-core drops
//! `resourceVersion=0` from a list that has a `limit` (`ListParams::populate_qp`), so
//! `watcher::Config::any_semantic()` with its default page size of 500 lists consistently
//! from etcd, page after page: at 100,000 bindings that was 70–114 s before the first
//! complete status (bench/RESULTS.md, "Cold start"). Without a page size kube reads the
//! whole list into memory and decodes it at once (every object in full at the same time:
//! hundreds of MB at that scale). Here the one response is read as a stream on a blocking
//! thread: at most the channel's worth of decoded objects exists at any time.
//!
//! The events are kube's ([`Event`]: `Init`, `InitApply`…, `InitDone`, then `Apply` /
//! `Delete`), so the consumer is the same as for a kube watcher. An item that does not
//! decode as `K` is skipped and logged (one malformed object must not stall the watch);
//! errors are logged and counted as a restart of `what`, and the list starts over after a
//! backoff (0.5 s doubling to 30 s, reset once a list completes).

use std::io::Read;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::{AsyncBufRead, AsyncReadExt, StreamExt};
use karmada_quota_shell::backoff::Backoff;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::watcher::Event;
use kube::{Client, Resource};
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use tokio::sync::mpsc;

use crate::metrics::Metrics;

/// Decoded objects in flight between the parser and the consumer.
const CHANNEL: usize = 1024;
/// Server-side timeout of one watch request (then it is resumed from its resourceVersion).
const WATCH_TIMEOUT_SECS: u32 = 290;
const RESTART_MIN: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);

/// The events of `api`'s objects: listed from the watch cache, then watched.
pub fn events<K>(
    api: Api<K>,
    what: &'static str,
    metrics: Arc<Metrics>,
) -> BoxStream<'static, Event<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (tx, rx) = mpsc::channel(CHANNEL);
    tokio::spawn(run(api, what, metrics, tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|e| (e, rx)) }).boxed()
}

/// Why a list or a watch ended.
#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error("{0}")]
    Api(#[from] kube::Error),
    #[error("decoding the list: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("the list has no resourceVersion")]
    NoResourceVersion,
    #[error("the consumer is gone")]
    Closed,
    #[error("the list's reader failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

async fn run<K>(api: Api<K>, what: &'static str, metrics: Arc<Metrics>, tx: mpsc::Sender<Event<K>>)
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let mut backoff = Backoff::new(RESTART_MIN, RESTART_MAX);
    loop {
        let failure = match list(&api, what, &tx).await {
            Ok(rv) => {
                backoff.reset();
                watch(&api, what, rv, &tx).await
            }
            Err(f) => f,
        };
        if matches!(failure, Failure::Closed) || tx.is_closed() {
            return;
        }
        if let Failure::Api(kube::Error::Api(s)) = &failure
            && s.code == 410
        {
            tracing::debug!(watch = what, "watch expired (410); listing again");
            continue;
        }
        let wait = backoff.next_delay();
        tracing::warn!(watch = what, error = %failure, retry_in = ?wait, "watch error; listing again");
        metrics.watch_restarted(what);
        tokio::time::sleep(wait).await;
    }
}

/// One list from the watch cache, streamed into `tx` between `Init` and `InitDone`; its
/// resourceVersion.
async fn list<K>(
    api: &Api<K>,
    what: &'static str,
    tx: &mpsc::Sender<Event<K>>,
) -> Result<String, Failure>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let client: Client = api.clone().into_client();
    let url = format!("{}?resourceVersion=0", api.resource_url());
    let request = axum::http::Request::get(url)
        .body(Vec::new())
        .map_err(|e| Failure::Api(kube::Error::HttpError(e)))?;
    let body = client.request_stream(request).await?;
    tx.send(Event::Init).await.map_err(|_| Failure::Closed)?;
    let items = tx.clone();
    let rv = tokio::task::spawn_blocking(move || {
        let reader = std::io::BufReader::with_capacity(64 * 1024, Blocking(Box::pin(body)));
        let mut de = serde_json::Deserializer::from_reader(reader);
        let rv = ListSeed {
            tx: items,
            what,
            kind: PhantomData,
        }
        .deserialize(&mut de)?;
        de.end()?;
        Ok::<_, Failure>(rv)
    })
    .await??;
    let rv = rv
        .filter(|rv| !rv.is_empty())
        .ok_or(Failure::NoResourceVersion)?;
    tx.send(Event::InitDone)
        .await
        .map_err(|_| Failure::Closed)?;
    Ok(rv)
}

/// Watch from `rv` until the watch fails; each request resumes from the last
/// resourceVersion seen (bookmarks included).
async fn watch<K>(
    api: &Api<K>,
    what: &'static str,
    mut rv: String,
    tx: &mpsc::Sender<Event<K>>,
) -> Failure
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
    loop {
        let stream = match api.watch(&params, &rv).await {
            Ok(s) => s,
            Err(e) => return e.into(),
        };
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let event = match ev {
                Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                    remember(&mut rv, &o);
                    Event::Apply(o)
                }
                Ok(WatchEvent::Deleted(o)) => {
                    remember(&mut rv, &o);
                    Event::Delete(o)
                }
                Ok(WatchEvent::Bookmark(b)) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                Ok(WatchEvent::Error(e)) => {
                    return Failure::Api(kube::Error::Api(e));
                }
                Err(e) => {
                    // One object that does not decode: skipped, the watch goes on.
                    tracing::warn!(watch = what, error = %e, "a watch event did not decode; skipped");
                    continue;
                }
            };
            if tx.send(event).await.is_err() {
                return Failure::Closed;
            }
        }
    }
}

fn remember<K: Resource>(rv: &mut String, o: &K) {
    if let Some(v) = o.meta().resource_version.as_ref().filter(|v| !v.is_empty()) {
        v.clone_into(rv);
    }
}

/// A blocking `Read` over the response body (on a `spawn_blocking` thread).
struct Blocking<R>(std::pin::Pin<Box<R>>);

impl<R: AsyncBufRead> Read for Blocking<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        futures::executor::block_on(self.0.as_mut().read(buf))
    }
}

/// The list object: its `metadata.resourceVersion` kept, each of its `items` sent as it
/// is parsed, every other field skipped.
struct ListSeed<K> {
    tx: mpsc::Sender<Event<K>>,
    what: &'static str,
    kind: PhantomData<K>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    resource_version: Option<String>,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for ListSeed<K> {
    type Value = Option<String>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for ListSeed<K> {
    type Value = Option<String>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut rv = None;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => rv = map.next_value::<ListMeta>()?.resource_version,
                "items" => map.next_value_seed(Items {
                    tx: &self.tx,
                    what: self.what,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(rv)
    }
}

/// The `items` array: each item decoded on its own (one that is not a `K` is skipped)
/// and sent as an `InitApply`.
struct Items<'a, K> {
    tx: &'a mpsc::Sender<Event<K>>,
    what: &'static str,
}

impl<'de, K: DeserializeOwned> DeserializeSeed<'de> for Items<'_, K> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, K: DeserializeOwned> Visitor<'de> for Items<'_, K> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("the list's items")
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(v) = seq.next_element::<serde_json::Value>()? {
            match serde_json::from_value::<K>(v) {
                Ok(o) => {
                    if self.tx.blocking_send(Event::InitApply(o)).is_err() {
                        return Err(serde::de::Error::custom("the consumer is gone"));
                    }
                }
                Err(e) => {
                    tracing::warn!(watch = self.what, error = %e, "a listed object did not decode; skipped");
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_crds::ResourceBinding;

    fn parse(json: &str) -> (Option<String>, Vec<Event<ResourceBinding>>) {
        let (tx, mut rx) = mpsc::channel(16);
        let rv = std::thread::scope(|s| {
            s.spawn(|| {
                let mut de = serde_json::Deserializer::from_reader(json.as_bytes());
                let rv = ListSeed {
                    tx,
                    what: "test",
                    kind: PhantomData,
                }
                .deserialize(&mut de)
                .expect("the list parses");
                de.end().expect("nothing after the list");
                rv
            })
            .join()
            .expect("the parser thread")
        });
        let mut events = Vec::new();
        while let Ok(e) = rx.try_recv() {
            events.push(e);
        }
        (rv, events)
    }

    fn binding(name: &str) -> String {
        format!(
            r#"{{"apiVersion":"work.karmada.io/v1alpha2","kind":"ResourceBinding",
               "metadata":{{"name":"{name}","namespace":"ns","uid":"u-{name}","resourceVersion":"5"}},
               "spec":{{"resource":{{"apiVersion":"apps/v1","kind":"Deployment","name":"{name}"}},"replicas":1}}}}"#
        )
    }

    #[test]
    fn items_are_sent_in_order_and_the_resource_version_is_kept_wherever_metadata_comes() {
        for list in [
            format!(
                r#"{{"kind":"ResourceBindingList","apiVersion":"work.karmada.io/v1alpha2",
                    "metadata":{{"resourceVersion":"42","continue":""}},"items":[{},{}]}}"#,
                binding("a"),
                binding("b")
            ),
            format!(
                r#"{{"items":[{},{}],"metadata":{{"resourceVersion":"42"}}}}"#,
                binding("a"),
                binding("b")
            ),
        ] {
            let (rv, events) = parse(&list);
            assert_eq!(rv.as_deref(), Some("42"));
            let names: Vec<String> = events
                .iter()
                .map(|e| match e {
                    Event::InitApply(o) => o.metadata.name.clone().unwrap_or_default(),
                    other => panic!("only InitApply while listing: {other:?}"),
                })
                .collect();
            assert_eq!(names, ["a", "b"]);
        }
    }

    #[test]
    fn an_item_that_is_not_a_binding_is_skipped_and_the_rest_still_arrive() {
        let list = format!(
            r#"{{"metadata":{{"resourceVersion":"7"}},"items":[{},{{"metadata":"not an object"}},{}]}}"#,
            binding("a"),
            binding("c")
        );
        let (rv, events) = parse(&list);
        assert_eq!(rv.as_deref(), Some("7"));
        assert_eq!(events.len(), 2);
    }

    #[test]
    fn an_empty_or_null_item_list_sends_nothing() {
        for list in [
            r#"{"metadata":{"resourceVersion":"9"},"items":[]}"#,
            r#"{"metadata":{"resourceVersion":"9"},"items":null}"#,
        ] {
            let (rv, events) = parse(list);
            assert_eq!(rv.as_deref(), Some("9"));
            assert!(events.is_empty());
        }
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

    /// Against a fake apiserver: a list from the watch cache (`resourceVersion=0`, no
    /// limit), a watch from the list's version, and on 410 a new list, not a resumed watch.
    #[tokio::test]
    async fn lists_from_the_cache_watches_from_the_lists_version_and_lists_again_after_410() {
        use std::sync::Mutex;
        let requests: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = requests.clone();
        let apiserver = tower::service_fn(move |req: axum::http::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                let uri = req.uri().to_string();
                let n = {
                    let mut r = seen.lock().unwrap();
                    r.push(uri.clone());
                    r.len()
                };
                let body = match n {
                    1 => list_body("11", &["a", "b"]),
                    2 => [
                        watch_line("ADDED", "c", "12"),
                        watch_line("DELETED", "a", "13"),
                        r#"{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}"#.to_owned(),
                    ]
                    .join("\n"),
                    3 => list_body("20", &["b", "c"]),
                    // The last watch stays open (quiet).
                    _ => std::future::pending().await,
                };
                Ok::<_, std::convert::Infallible>(axum::http::Response::new(
                    http_body_util::Full::new(axum::body::Bytes::from(body)),
                ))
            }
        });
        let api: Api<ResourceBinding> = Api::all(kube::Client::new(apiserver, "default"));
        let mut registry = prometheus_client::registry::Registry::default();
        let metrics = Arc::new(Metrics::register(&mut registry));
        let mut stream = events(api, "resourcebindings", metrics);
        let mut got = Vec::new();
        while got.len() < 10 {
            let e = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .expect("an event within 10 s")
                .expect("the stream goes on");
            got.push(name_of(&e));
        }
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
        // A 410 is the watch's version expiring, not an error: no restart counted.
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            !text.contains("watch=\"resourcebindings\""),
            "a 410 counted as a watch error:\n{text}"
        );
        let requests = requests.lock().unwrap().clone();
        assert!(
            requests[0].ends_with("/resourcebindings?resourceVersion=0"),
            "{}",
            requests[0]
        );
        assert!(!requests[0].contains("limit"), "{}", requests[0]);
        assert!(
            requests[1].contains("watch=true") && requests[1].contains("resourceVersion=11"),
            "{}",
            requests[1]
        );
        assert!(
            requests[2].ends_with("/resourcebindings?resourceVersion=0"),
            "a 410 lists again: {}",
            requests[2]
        );
        assert!(
            requests[3].contains("watch=true") && requests[3].contains("resourceVersion=20"),
            "{}",
            requests[3]
        );
    }
}
