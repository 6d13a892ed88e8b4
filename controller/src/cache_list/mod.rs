//! A watch whose every (re-)list is streamed, and never older than what the watch has
//! already seen.
//!
//! ```text
//!  streaming list (WatchList)                     list, then watch (servers without it)
//!  GET ?watch=true&sendInitialEvents=true         GET                         (first list:
//!      &resourceVersionMatch=NotOlderThan              consistent, etcd's state)
//!      &allowWatchBookmarks=true                  GET ?resourceVersion=<bound>  (re-lists:
//!      &resourceVersion=<bound, or unset:              &resourceVersionMatch=NotOlderThan
//!                        a consistent read>            the watch cache, once it has the bound)
//!  ADDED… BOOKMARK(k8s.io/initial-events-end)     GET ?watch=true&resourceVersion=<list's>
//!  then the same stream goes on as a watch
//! ```
//!
//! **The bound.** A `resourceVersion=0` list may be served by any apiserver's cache, one
//! older than a list or event this watch had already seen (an apiserver behind a
//! balancer). A binding the watch had seen and the old list lacks would then count as
//! deleted (`Index::reset_bindings`), `used` would fall and the webhooks admit past
//! `hard` (the simulation's `stale_binding_lists`, bench/sim.md finding 2). So the first
//! list of the process is a consistent one (no `resourceVersion`: etcd's state, newer than
//! anything a previous incarnation of the controller saw), and every re-list carries a
//! lower bound ([`bound`]): the newest resourceVersion of an object the watch has handed
//! on. The watch cache serves `NotOlderThan` once it has reached the bound, waiting up to
//! 3 s, else it answers `504 Too large resource version` (checked on kube-apiserver 1.20,
//! e2e `watch_list_protocol`); kube's client retries that, and then the watch backs off
//! and lists consistently, as client-go's reflector does. A list whose own
//! resourceVersion is older than its bound is refused too (a server that ignored the
//! parameter). A binding missing from a list so bounded was deleted, not merely unknown to
//! an old cache.
//!
//! **Streaming lists** ([`stream`]): where the apiserver offers WatchList (`WatchList`
//! feature gate: alpha off 1.27–1.31, beta on from 1.32), the list is the initial events
//! of a watch, one object per line, and the watch goes on in the same response. The
//! choice is the server's answer, not its `/version`: a streaming request is sent first;
//! a server without the feature refuses it before any event (400 / 422: 1.20 says
//! `resourceVersionMatch is forbidden for watch`, 1.27–1.31 with the gate off that
//! `sendInitialEvents` is forbidden), and from then on this watch lists
//! (docs/decisions/0003-apiserver-versions.md). A version number would misjudge a server whose
//! gate is set against its default, and a fleet of mixed versions behind one balancer:
//! one refusal and the watch stays on the list, which every version serves.
//!
//! **The list** ([`list`]): no `limit` (kube-core drops `resourceVersion` from a list that
//! has one, and `watcher::Config::any_semantic()` with its default page size of 500 lists
//! from etcd page after page: at 100,000 bindings that was 70–114 s before the first
//! complete status, bench/RESULTS.md "Cold start"). The one response is read as a stream
//! on a blocking thread: at most the channel's worth of decoded objects exists at any time.
//!
//! **Re-lists asked for** ([`listed_events`]): a new generation on its `relists` channel
//! (the leader's fence, `crate::fence`) drops the list or watch in progress and starts a
//! consistent list at once; each event carries the generation its list began at, and the
//! events of a dropped attempt still in flight are not handed on.
//!
//! The events are kube's ([`Event`]: `Init`, `InitApply`…, `InitDone`, then `Apply` /
//! `Delete`) on both paths, so the consumer is the same as for a kube watcher. An item
//! that does not decode as `K` is skipped and logged (one malformed object must not stall
//! the watch); errors are logged and counted as a restart of `what`, and the list starts
//! over after a backoff (0.5 s doubling to 30 s, reset once a list completes). A watch
//! that expires (410) lists again at once.

mod bound;
mod list;
mod stream;
mod watch;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use karmada_quota_shell::backoff::Backoff;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher::Event;
use serde::de::DeserializeOwned;
use tokio::sync::{mpsc, watch as channel};

use crate::metrics::Metrics;
use bound::Seen;

/// Decoded objects in flight between the parser and the consumer.
const CHANNEL: usize = 1024;
const RESTART_MIN: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);

/// What a watch's objects must be.
pub(crate) trait Object:
    Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

impl<K> Object for K where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static
{
}

/// The events of `api`'s objects: listed (consistently at first, then from the watch
/// cache no older than what was seen; streamed where the server offers it), then watched;
/// listed again — consistently — whenever `relists` changes. Each event comes with the
/// `relists` generation its list began at (0 without `relists`).
pub fn listed_events<K: Object>(
    api: Api<K>,
    what: &'static str,
    metrics: Arc<Metrics>,
    relists: Option<channel::Receiver<u64>>,
) -> BoxStream<'static, (u64, Event<K>)> {
    let (tx, rx) = mpsc::channel(CHANNEL);
    tokio::spawn(run(api, what, metrics, tx, relists));
    current_attempt(rx)
}

/// The events of `rx` but those of an attempt older than the newest `Init` handed on (a
/// dropped attempt's, still in the channel — a list read on a blocking thread goes on
/// for a while after its attempt is dropped).
fn current_attempt<K: Object>(
    rx: mpsc::Receiver<Tagged<K>>,
) -> BoxStream<'static, (u64, Event<K>)> {
    futures::stream::unfold((rx, 0u64), |(mut rx, mut current)| async move {
        loop {
            let t: Tagged<K> = rx.recv().await?;
            if t.attempt < current {
                continue;
            }
            if matches!(t.event, Event::Init) {
                current = t.attempt;
            }
            return Some(((t.generation, t.event), (rx, current)));
        }
    })
    .boxed()
}

/// An event of one list-and-watch attempt.
struct Tagged<K> {
    attempt: u64,
    generation: u64,
    event: Event<K>,
}

/// Where one attempt's events go: the consumer's channel, each tagged with the attempt
/// and the re-list generation the attempt began at.
struct Out<K> {
    tx: mpsc::Sender<Tagged<K>>,
    attempt: u64,
    generation: u64,
}

impl<K> Clone for Out<K> {
    fn clone(&self) -> Self {
        Self {
            tx: self.tx.clone(),
            attempt: self.attempt,
            generation: self.generation,
        }
    }
}

impl<K> Out<K> {
    fn tag(&self, event: Event<K>) -> Tagged<K> {
        Tagged {
            attempt: self.attempt,
            generation: self.generation,
            event,
        }
    }

    /// Hand `event` on; `Failure::Closed` when the consumer is gone.
    async fn send(&self, event: Event<K>) -> Result<(), Failure> {
        self.tx
            .send(self.tag(event))
            .await
            .map_err(|_| Failure::Closed)
    }

    /// Hand `event` on from a blocking thread; `false` when the consumer is gone.
    fn blocking_send(&self, event: Event<K>) -> bool {
        self.tx.blocking_send(self.tag(event)).is_ok()
    }

    /// An attempt's output and a receiver of its bare events (tests).
    #[cfg(test)]
    fn channel(capacity: usize) -> (Self, UntaggedRx<K>) {
        let (tx, rx) = mpsc::channel(capacity);
        (
            Self {
                tx,
                attempt: 1,
                generation: 0,
            },
            UntaggedRx(rx),
        )
    }
}

/// The bare events of [`Out::channel`] (tests).
#[cfg(test)]
struct UntaggedRx<K>(mpsc::Receiver<Tagged<K>>);

#[cfg(test)]
impl<K> UntaggedRx<K> {
    fn try_recv(&mut self) -> Result<Event<K>, mpsc::error::TryRecvError> {
        self.0.try_recv().map(|t| t.event)
    }
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
    #[error("the list is at resourceVersion {list}, older than {bound} already seen")]
    Older { list: String, bound: String },
    #[error("the watch ended before its initial events did")]
    Unfinished,
    #[error("the consumer is gone")]
    Closed,
    #[error("the list's reader failed: {0}")]
    Join(#[from] tokio::task::JoinError),
}

impl Failure {
    /// The apiserver's status code, if it answered with one.
    fn code(&self) -> Option<u16> {
        match self {
            Failure::Api(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }

    /// The server refused the request as malformed (400, 422): it does not know the
    /// streaming list's parameters.
    fn refused(&self) -> bool {
        matches!(self.code(), Some(400 | 422))
    }

    /// The bound is ahead of the server (`504 Too large resource version`).
    fn too_large(&self) -> bool {
        match self {
            Failure::Api(kube::Error::Api(s)) => {
                s.code == 504
                    && (s.message.contains("Too large resource version")
                        || s.details.as_ref().is_some_and(|d| {
                            d.causes
                                .iter()
                                .any(|c| c.reason == "ResourceVersionTooLarge")
                        }))
            }
            _ => false,
        }
    }
}

/// How this watch lists: streamed in a watch until the server refuses that, then by a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Streaming,
    List,
}

async fn run<K: Object>(
    api: Api<K>,
    what: &'static str,
    metrics: Arc<Metrics>,
    tx: mpsc::Sender<Tagged<K>>,
    mut relists: Option<channel::Receiver<u64>>,
) {
    let mut backoff = Backoff::new(RESTART_MIN, RESTART_MAX);
    let mut seen = Seen::default();
    let mut mode = Mode::Streaming;
    let (mut attempt, mut begun) = (0, 0);
    loop {
        attempt += 1;
        let generation = relists.as_mut().map_or(0, |r| *r.borrow_and_update());
        if generation > begun {
            // Asked for: as new as etcd now, not merely as what this watch saw.
            seen.forget();
            begun = generation;
        }
        let out = Out {
            tx: tx.clone(),
            attempt,
            generation,
        };
        let attempted = async {
            match mode {
                Mode::Streaming => {
                    stream::list_and_watch(&api, what, &mut seen, &out, &mut backoff).await
                }
                Mode::List => list_then_watch(&api, what, &mut seen, &out, &mut backoff).await,
            }
        };
        let failure = tokio::select! {
            failure = attempted => failure,
            () = asked(&mut relists) => {
                tracing::info!(watch = what, "re-listing consistently, as asked");
                continue;
            }
        };
        if matches!(failure, Failure::Closed) || tx.is_closed() {
            return;
        }
        if mode == Mode::Streaming && failure.refused() {
            tracing::info!(watch = what, answer = %failure, "the apiserver does not offer streaming lists; listing instead");
            mode = Mode::List;
            continue;
        }
        if failure.code() == Some(410) {
            tracing::debug!(watch = what, "watch expired (410); listing again");
            continue;
        }
        if failure.too_large() {
            // Ahead of this server (its cache did not catch up within its wait, or etcd
            // went back): the next list is a consistent one.
            seen.forget();
        }
        let wait = backoff.next_delay();
        tracing::warn!(watch = what, error = %failure, retry_in = ?wait, "watch error; listing again");
        metrics.watch_restarted(what);
        // A re-list asked for during the backoff starts at once.
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = asked(&mut relists) => {}
        }
    }
}

/// Resolves when a new generation is asked for on `relists` (never without one).
async fn asked(relists: &mut Option<channel::Receiver<u64>>) {
    if let Some(r) = relists.as_mut()
        && r.changed().await.is_ok()
    {
        return;
    }
    std::future::pending::<()>().await;
}

/// A bounded list, then a watch from its resourceVersion until either fails.
async fn list_then_watch<K: Object>(
    api: &Api<K>,
    what: &'static str,
    seen: &mut Seen,
    tx: &Out<K>,
    backoff: &mut Backoff,
) -> Failure {
    match list::list(api, what, seen, tx).await {
        Ok(rv) => {
            backoff.reset();
            watch::watch(api, what, rv, seen, tx).await
        }
        Err(f) => f,
    }
}

#[cfg(test)]
mod tests;
