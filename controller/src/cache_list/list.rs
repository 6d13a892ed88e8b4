//! The list: `GET …?resourceVersion=<bound>&resourceVersionMatch=NotOlderThan`, served by
//! the watch cache once it has reached the bound, or — with no bound — a consistent list
//! (no `resourceVersion`: etcd's current state); no `limit`. Read as a stream on a
//! blocking thread and handed on item by item between `Init` and `InitDone`; each item's
//! resourceVersion moves the bound of the next list.

use std::io::Read;
use std::marker::PhantomData;

use futures::{AsyncBufRead, AsyncReadExt};
use kube::Resource;
use kube::api::{Api, ListParams, VersionMatch};
use kube::runtime::watcher::Event;
use serde::de::{DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::bound::{Seen, older};
use super::{Failure, Object, Out};

/// The list request: the watch cache's state at `bound` or later, or with no bound a
/// consistent list; no `limit`.
pub(super) fn request(
    collection: &str,
    bound: Option<&str>,
) -> Result<axum::http::Request<Vec<u8>>, Failure> {
    let params = ListParams {
        resource_version: bound.map(str::to_owned),
        version_match: bound.map(|_| VersionMatch::NotOlderThan),
        ..ListParams::default()
    };
    kube::core::Request::new(collection)
        .list(&params)
        .map_err(|e| Failure::Api(kube::Error::BuildRequest(e)))
}

/// One list not older than `seen`'s bound, streamed into `tx` between `Init` and
/// `InitDone`; its resourceVersion. `seen` takes its items' resourceVersions.
pub(super) async fn list<K: Object>(
    api: &Api<K>,
    what: &'static str,
    seen: &mut Seen,
    tx: &Out<K>,
) -> Result<String, Failure> {
    let bound = seen.bound().map(str::to_owned);
    let client: kube::Client = api.clone().into_client();
    let request = request(api.resource_url(), bound.as_deref())?;
    let body = client.request_stream(request).await?;
    tx.send(Event::Init).await?;
    let items = tx.clone();
    let (rv, newest) = tokio::task::spawn_blocking(move || {
        let reader = std::io::BufReader::with_capacity(64 * 1024, Blocking(Box::pin(body)));
        let mut de = serde_json::Deserializer::from_reader(reader);
        let listed = ListSeed {
            tx: items,
            what,
            kind: PhantomData,
        }
        .deserialize(&mut de)?;
        de.end()?;
        Ok::<_, Failure>(listed)
    })
    .await??;
    let rv = rv
        .filter(|rv| !rv.is_empty())
        .ok_or(Failure::NoResourceVersion)?;
    if let Some(bound) = bound.filter(|b| older(&rv, b)) {
        // Its items went out as InitApply; without an InitDone the consumer keeps what it
        // had, and the next Init starts a new list.
        return Err(Failure::Older { list: rv, bound });
    }
    if let Some(newest) = newest.bound() {
        seen.saw(newest);
    }
    tx.send(Event::InitDone).await?;
    Ok(rv)
}

/// A blocking `Read` over the response body (on a `spawn_blocking` thread).
struct Blocking<R>(std::pin::Pin<Box<R>>);

impl<R: AsyncBufRead> Read for Blocking<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        futures::executor::block_on(self.0.as_mut().read(buf))
    }
}

/// The list object: its `metadata.resourceVersion` kept, each of its `items` sent as it
/// is parsed (the newest of their resourceVersions kept), every other field skipped.
struct ListSeed<K> {
    tx: Out<K>,
    what: &'static str,
    kind: PhantomData<K>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ListMeta {
    resource_version: Option<String>,
}

impl<'de, K: DeserializeOwned + Resource> DeserializeSeed<'de> for ListSeed<K> {
    type Value = (Option<String>, Seen);

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, K: DeserializeOwned + Resource> Visitor<'de> for ListSeed<K> {
    type Value = (Option<String>, Seen);

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a Kubernetes list object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let (mut rv, mut newest) = (None, Seen::default());
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "metadata" => rv = map.next_value::<ListMeta>()?.resource_version,
                "items" => map.next_value_seed(Items {
                    tx: &self.tx,
                    what: self.what,
                    newest: &mut newest,
                })?,
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok((rv, newest))
    }
}

/// The `items` array: each item decoded on its own (one that is not a `K` is skipped)
/// and sent as an `InitApply`.
struct Items<'a, K> {
    tx: &'a Out<K>,
    what: &'static str,
    newest: &'a mut Seen,
}

impl<'de, K: DeserializeOwned + Resource> DeserializeSeed<'de> for Items<'_, K> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, K: DeserializeOwned + Resource> Visitor<'de> for Items<'_, K> {
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
                    if let Some(v) = o.meta().resource_version.as_deref() {
                        self.newest.saw(v);
                    }
                    if !self.tx.blocking_send(Event::InitApply(o)) {
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
        let (tx, mut rx) = super::super::Out::channel(16);
        let rv = std::thread::scope(|s| {
            s.spawn(|| {
                let mut de = serde_json::Deserializer::from_reader(json.as_bytes());
                let rv = ListSeed {
                    tx,
                    what: "test",
                    kind: PhantomData,
                }
                .deserialize(&mut de)
                .expect("the list parses")
                .0;
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
}
