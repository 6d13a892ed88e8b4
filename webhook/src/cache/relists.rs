//! Re-reading the quota kinds on request: the reservation batches' re-list asks for it
//! (`crate::ledger`) when batches were created and deleted while the batch watch was down,
//! and holds decisions until both quota watches have listed again from a list they
//! started after the request. A request, and every list a quota watch begins, also
//! starts a new *read generation* ([`Relists::read_generation`]): every quota is read
//! from etcd again before its next use in a decision (`crate::reserve`'s `verified`),
//! since a list from the watch cache may be older than the request, or than what the
//! cache showed before the list.
//!
//! ```text
//!  ledger (batch re-list found unseen numbers) ── request() ──► generation g
//!  quota watch (KarmadaQuota, KarmadaClusterQuota): sees g change ─► drops its stream,
//!      lists again at once (no backoff) ─► InitDone ─► listed(watch, g)
//!  ledger.check: done(g)?  no ─► 503, retry   yes ─► decide
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use super::freshness::Watch;

/// The quota kinds a relist must cover, by [`Watch`] index.
const KINDS: [Watch; 2] = [Watch::Quotas, Watch::ClusterQuotas];

#[derive(Debug)]
struct Inner {
    /// The newest generation asked for.
    requested: watch::Sender<u64>,
    /// Per quota kind: the newest generation a completed list was started at.
    listed: [AtomicU64; 2],
    /// Lists of the quota kinds begun (any cause: start, failure, request).
    begun: AtomicU64,
}

/// The requests for, and the completed, re-lists of the quota kinds. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Relists(Arc<Inner>);

impl Default for Relists {
    fn default() -> Self {
        Self(Arc::new(Inner {
            requested: watch::Sender::new(0),
            listed: [AtomicU64::new(0), AtomicU64::new(0)],
            begun: AtomicU64::new(0),
        }))
    }
}

impl Relists {
    /// Ask both quota watches to list again; returns the generation to wait for.
    pub fn request(&self) -> u64 {
        let mut generation = 0;
        self.0.requested.send_modify(|g| {
            *g += 1;
            generation = *g;
        });
        generation
    }

    /// The read generation: it changes whenever a re-list is asked for and whenever a
    /// quota watch begins a list. A list from the watch cache may be older than what the
    /// cache showed before it (another apiserver's cache), or than a batch re-list, so the
    /// quota copies read from etcd in an older generation are read again
    /// (`crate::reserve`'s `verified`).
    pub fn read_generation(&self) -> u64 {
        // The simulation's revert: only requests move it (bench/sim.md).
        let begun = if cfg!(feature = "sim-revert-052809a-generation") {
            0
        } else {
            self.0.begun.load(Ordering::Acquire)
        };
        *self.0.requested.borrow() + begun
    }

    /// For a quota watch: a list begins (before its objects replace the cache's). Public
    /// for the deterministic simulation (`karmada-quota-sim`), whose watches are its own.
    pub fn list_begun(&self) {
        self.0.begun.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether both quota kinds completed a list started at `generation` or later.
    pub fn done(&self, generation: u64) -> bool {
        self.0
            .listed
            .iter()
            .all(|l| l.load(Ordering::Acquire) >= generation)
    }

    /// For a quota watch: the requests, to notice a new one (public for the simulation).
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.requested.subscribe()
    }

    /// For a quota watch: its list, started at `generation`, is complete.
    pub fn listed(&self, watch: Watch, generation: u64) {
        if let Some(i) = KINDS.iter().position(|k| *k == watch) {
            self.0.listed[i].fetch_max(generation, Ordering::AcqRel);
        }
    }
}

/// For a quota watch: resolves when a re-list is asked for on `requests` (never without).
pub(crate) async fn asked(requests: &mut Option<watch::Receiver<u64>>) {
    if let Some(r) = requests.as_mut()
        && r.changed().await.is_ok()
    {
        return;
    }
    std::future::pending::<()>().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::collections::HashMap;
    use std::time::Duration;

    use axum::body::{Body, Bytes};

    /// A list the client saw: its path and query.
    type Lists = Arc<Mutex<HashMap<String, Vec<String>>>>;

    /// A client whose lists are empty (recorded per path, with their query) and whose
    /// watches stay open and silent: no apiserver, so only a re-list asked for can make a
    /// second list.
    fn client(lists: Lists) -> kube::Client {
        let service = tower::service_fn(move |req: axum::http::Request<kube::client::Body>| {
            let lists = lists.clone();
            async move {
                let watching = req.uri().query().is_some_and(|q| q.contains("watch=true"));
                let body = if watching {
                    Body::from_stream(futures::stream::pending::<Result<Bytes, std::io::Error>>())
                } else {
                    let query = req.uri().query().unwrap_or_default().to_owned();
                    lists
                        .lock()
                        .entry(req.uri().path().to_owned())
                        .or_default()
                        .push(query);
                    Body::from(Bytes::from_static(
                        br#"{"apiVersion":"v1","kind":"List","metadata":{"resourceVersion":"5"},"items":[]}"#,
                    ))
                };
                Ok::<_, std::io::Error>(axum::http::Response::new(body))
            }
        });
        kube::Client::new(service, "default")
    }

    #[tokio::test]
    async fn a_relist_asked_for_lists_both_quota_kinds_again_consistently_and_reports_it() {
        let lists: Lists = Arc::default();
        let (cache, feed) = crate::QuotaCache::watch(client(lists.clone()));
        let task = tokio::spawn(feed);
        let count = |kind: &str| {
            lists
                .lock()
                .iter()
                .filter(|(p, _)| p.ends_with(kind))
                .map(|(_, q)| q.len())
                .sum::<usize>()
        };
        let waited = tokio::time::timeout(Duration::from_secs(10), async {
            while count("/karmadaquotas") + count("/karmadaclusterquotas") < 2 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            let g = cache.relists().request();
            while !cache.relists().done(g) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        task.abort();
        assert!(waited.is_ok(), "the re-list was never reported: {lists:?}");
        // Two lists begun per quota kind and one request: each moved the read generation.
        assert_eq!(cache.relists().read_generation(), 5);
        assert_eq!(count("/karmadaquotas"), 2, "{lists:?}");
        assert_eq!(count("/karmadaclusterquotas"), 2, "{lists:?}");
        assert_eq!(
            count("/namespaces"),
            1,
            "namespaces are not re-listed: {lists:?}"
        );
        // Every list consistent (docs/reservations.md R23): no resourceVersion, no page.
        for (path, queries) in lists.lock().iter() {
            for q in queries {
                assert!(
                    !q.contains("resourceVersion") && !q.contains("limit"),
                    "{path}?{q} is not a consistent list"
                );
            }
        }
    }

    #[test]
    fn a_request_is_done_once_both_quota_kinds_listed_from_it() {
        let r = Relists::default();
        assert!(r.done(0), "nothing asked");
        let mut rx = r.subscribe();
        let g = r.request();
        assert_eq!(g, 1);
        assert!(rx.has_changed().unwrap(), "the watches notice the request");
        assert_eq!(*rx.borrow_and_update(), 1);
        assert!(!r.done(g));
        r.listed(Watch::Quotas, g);
        assert!(!r.done(g), "the cluster quotas have not listed again");
        r.listed(Watch::Namespaces, g);
        assert!(!r.done(g), "namespaces are no quota kind");
        r.listed(Watch::ClusterQuotas, g);
        assert!(r.done(g));
        // A list started before a newer request does not complete it.
        let g2 = r.request();
        r.listed(Watch::Quotas, g2);
        r.listed(Watch::ClusterQuotas, g);
        assert!(!r.done(g2));
        r.listed(Watch::ClusterQuotas, g2);
        assert!(r.done(g2) && r.done(g));
    }
}
