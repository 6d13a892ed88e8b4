//! The watch after a list: each request resumes from the newest resourceVersion it was
//! given (the list's, then events' and bookmarks'), until the watch fails. Objects'
//! resourceVersions also move the bound of the next list ([`Seen`]); bookmarks' do not.

use futures::{Stream, StreamExt};
use kube::api::{Api, WatchEvent, WatchParams};
use kube::runtime::watcher::Event;

use super::bound::Seen;
use super::{Failure, Object, Out};

/// Server-side timeout of one watch request (then it is resumed from its resourceVersion).
pub(super) const WATCH_TIMEOUT_SECS: u32 = 290;

/// Watch from `rv` until the watch fails.
pub(super) async fn watch<K: Object>(
    api: &Api<K>,
    what: &'static str,
    mut rv: String,
    seen: &mut Seen,
    tx: &Out<K>,
) -> Failure {
    let params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
    loop {
        let stream = match api.watch(&params, &rv).await {
            Ok(s) => s,
            Err(e) => return e.into(),
        };
        if let Some(failure) = follow(stream, what, &mut rv, seen, tx).await {
            return failure;
        }
    }
}

/// Hand on one watch response's events until it ends (`None`: resume it from `rv`) or
/// fails.
pub(super) async fn follow<K: Object>(
    stream: impl Stream<Item = kube::Result<WatchEvent<K>>>,
    what: &'static str,
    rv: &mut String,
    seen: &mut Seen,
    tx: &Out<K>,
) -> Option<Failure> {
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        let event = match ev {
            Ok(WatchEvent::Added(o) | WatchEvent::Modified(o)) => {
                saw(rv, seen, &o);
                Event::Apply(o)
            }
            Ok(WatchEvent::Deleted(o)) => {
                saw(rv, seen, &o);
                Event::Delete(o)
            }
            Ok(WatchEvent::Bookmark(b)) => {
                if !b.metadata.resource_version.is_empty() {
                    *rv = b.metadata.resource_version;
                }
                continue;
            }
            Ok(WatchEvent::Error(e)) => return Some(Failure::Api(kube::Error::Api(e))),
            Err(e) => {
                // One object that does not decode: skipped, the watch goes on.
                tracing::warn!(watch = what, error = %e, "a watch event did not decode; skipped");
                continue;
            }
        };
        if tx.send(event).await.is_err() {
            return Some(Failure::Closed);
        }
    }
    None
}

fn saw<K: Object>(rv: &mut String, seen: &mut Seen, o: &K) {
    if let Some(v) = o
        .meta()
        .resource_version
        .as_deref()
        .filter(|v| !v.is_empty())
    {
        v.clone_into(rv);
        seen.saw(v);
    }
}
