//! The streaming list (WatchList): one watch request with `sendInitialEvents=true`, whose
//! `ADDED` events up to the bookmark annotated `k8s.io/initial-events-end: "true"` are the
//! list (`InitApply`…, `InitDone` at the bookmark, its resourceVersion the list's); the
//! same response then goes on as a watch.
//!
//! Its `resourceVersion` is the bound (`NotOlderThan`: the server sends the bookmark once
//! its state is at least that new), or unset before anything was seen: a consistent read,
//! as new as etcd when the request arrived. The initial objects' resourceVersions move the
//! bound; the watch goes on from the end bookmark's.

use futures::{Stream, StreamExt};
use karmada_quota_shell::backoff::Backoff;
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::watcher::Event;

use super::bound::{Seen, older};
use super::watch::{WATCH_TIMEOUT_SECS, follow, watch};
use super::{Failure, Object, Out};

/// The annotation of the bookmark that ends the initial events.
pub(super) const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// A streaming list, then the watch it goes on as, until either fails.
pub(super) async fn list_and_watch<K: Object>(
    api: &Api<K>,
    what: &'static str,
    seen: &mut Seen,
    tx: &Out<K>,
    backoff: &mut Backoff,
) -> Failure {
    let params = WatchParams::default()
        .timeout(WATCH_TIMEOUT_SECS)
        .initial_events();
    let bound = seen.bound().unwrap_or_default().to_owned();
    let stream = match api.watch(&params, &bound).await {
        Ok(s) => s,
        Err(e) => return e.into(),
    };
    let mut stream = std::pin::pin!(stream);
    let mut rv = match initial(&mut stream, what, &bound, seen, tx).await {
        Ok(rv) => rv,
        Err(f) => return f,
    };
    backoff.reset();
    if let Some(f) = follow(stream, what, &mut rv, seen, tx).await {
        return f;
    }
    watch(api, what, rv, seen, tx).await
}

/// The initial events: `Init`, an `InitApply` per object, `InitDone` at the end bookmark;
/// the bookmark's resourceVersion.
async fn initial<K: Object>(
    stream: &mut (impl Stream<Item = kube::Result<WatchEvent<K>>> + Unpin),
    what: &'static str,
    bound: &str,
    seen: &mut Seen,
    tx: &Out<K>,
) -> Result<String, Failure> {
    tx.send(Event::Init).await?;
    while let Some(ev) = stream.next().await {
        let object = match ev {
            Ok(WatchEvent::Added(o)) => o,
            Ok(WatchEvent::Bookmark(b)) => {
                let end = b.metadata.annotations.get(INITIAL_EVENTS_END);
                if end.is_none_or(|v| v != "true") {
                    continue;
                }
                let rv = b.metadata.resource_version;
                if rv.is_empty() {
                    return Err(Failure::NoResourceVersion);
                }
                if older(&rv, bound) {
                    return Err(Failure::Older {
                        list: rv,
                        bound: bound.to_owned(),
                    });
                }
                tx.send(Event::InitDone).await?;
                return Ok(rv);
            }
            Ok(WatchEvent::Error(e)) => return Err(Failure::Api(kube::Error::Api(e))),
            Ok(WatchEvent::Modified(_) | WatchEvent::Deleted(_)) => {
                tracing::warn!(watch = what, "a change among the initial events; skipped");
                continue;
            }
            Err(e) => {
                tracing::warn!(watch = what, error = %e, "a listed object did not decode; skipped");
                continue;
            }
        };
        if let Some(v) = object.meta().resource_version.as_deref() {
            seen.saw(v);
        }
        tx.send(Event::InitApply(object)).await?;
    }
    Err(Failure::Unfinished)
}
