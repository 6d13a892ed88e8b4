//! The read step of a reconcile (the leader's): before a quota is planned, the bindings of
//! its expired entries that the watch has not shown are read from the apiserver with a
//! quorum read, and what was found goes into the index (`index::reads`). The prune then
//! drops such an entry only when the read says its request was not stored (R19 in
//! docs/reservations.md): a binding watch that lags past an entry's expiry does not make
//! the entry's charge vanish while its binding is stored.
//!
//! ```text
//!  quota status entries ─► Index::wants_read (expired, not shown, not settled)
//!        │ at most MAX_READS per turn, READ_CONCURRENCY at a time
//!        ▼
//!  BindingReads::get(namespace, name) ── quorum GET ──► Index::record_read(uid, found, at)
//!        └─ failed: nothing recorded, the entry stays (fail closed) and is read next turn
//! ```

use parking_lot::RwLock;

use futures::StreamExt;
use futures::future::BoxFuture;
use karmada_quota_core::quota::Reservation;
use karmada_quota_crds::ResourceBinding;
use karmada_quota_crds::convert::parse_status;
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::index::Index;

/// At most this many bindings are read for one quota in one turn (the rest the next).
pub const MAX_READS: usize = 64;
/// Reads in flight at once for one quota.
const READ_CONCURRENCY: usize = 8;

/// What a read found: the (uid, generation) stored under the name, `None` when there is
/// none; an error when the read failed.
pub type Found = Result<Option<(String, i64)>, String>;

/// A quorum read of one binding: the (uid, generation) stored under `namespace/name`,
/// `None` when there is none.
pub trait BindingReads: Send + Sync {
    /// Read `namespace/name`.
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, Found>;
}

impl BindingReads for Client {
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> BoxFuture<'a, Found> {
        Box::pin(async move {
            // No resourceVersion: the apiserver reads etcd (a quorum read), never its cache.
            let found = Api::<ResourceBinding>::namespaced(self.clone(), namespace)
                .get_opt(name)
                .await
                .map_err(|e| e.to_string())?;
            Ok(found.map(|rb| {
                let generation = rb.metadata.generation.unwrap_or(0);
                (rb.uid().unwrap_or_default(), generation)
            }))
        })
    }
}

/// One binding to read: the namespace, name and uid an entry names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    /// The binding's namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The uid the entry names.
    pub uid: String,
}

/// The bindings to read before `entries` (a quota's stored entries; `own`: the namespace
/// of those that name none) are pruned at `now`; each once, at most [`MAX_READS`].
pub fn wanted(index: &Index, own: &str, entries: &[Reservation], now: i64) -> Vec<Wanted> {
    let mut out: Vec<Wanted> = Vec::new();
    for e in entries {
        let namespace = e.reserved_by.namespace_or(own);
        let w = Wanted {
            namespace: namespace.to_owned(),
            name: e.reserved_by.name.clone(),
            uid: e.reserved_by.uid.clone(),
        };
        if index.wants_read(namespace, e, now) && !out.contains(&w) {
            out.push(w);
            if out.len() == MAX_READS {
                break;
            }
        }
    }
    out
}

/// What one read step found, read by read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// No binding of the entry's uid at its generation: the entry goes.
    pub not_stored: usize,
    /// Stored: the entry stays until the watch shows the binding.
    pub stored: usize,
    /// The read failed: the entry stays and is read again next turn.
    pub failed: usize,
}

/// Read the bindings `wanted` names at `now` and record what was found in `index`.
pub async fn read(
    index: &RwLock<Index>,
    reads: &dyn BindingReads,
    wanted: Vec<Wanted>,
    now: i64,
) -> Outcome {
    let results: Vec<(Wanted, Found)> = futures::stream::iter(wanted)
        .map(|w| async move {
            let found = reads.get(&w.namespace, &w.name).await;
            (w, found)
        })
        .buffer_unordered(READ_CONCURRENCY)
        .collect()
        .await;
    let mut outcome = Outcome::default();
    let mut index = index.write();
    for (w, found) in results {
        match found {
            Ok(found) => {
                let stored = found.as_ref().map(|(uid, g)| (uid.as_str(), *g));
                if stored.is_some_and(|(uid, _)| uid == w.uid) {
                    outcome.stored += 1;
                } else {
                    outcome.not_stored += 1;
                }
                index.record_read(&w.namespace, &w.uid, stored, now);
            }
            Err(error) => {
                outcome.failed += 1;
                tracing::debug!(binding = %format!("{}/{}", w.namespace, w.name), %error, "reading the binding of an expired entry failed; the entry stays");
            }
        }
    }
    outcome
}

/// The read step for one quota object of either kind: its stored entries' bindings that
/// must be read at `now`, read and recorded.
pub async fn read_for<K: karmada_quota_crds::QuotaObject>(
    index: &RwLock<Index>,
    reads: &dyn BindingReads,
    object: &K,
    now: i64,
) -> Outcome {
    let Some(status) = object.quota_status() else {
        return Outcome::default();
    };
    if status.reservations.is_empty() {
        return Outcome::default();
    }
    let entries = parse_status(Some(status)).reservations;
    let own = object.namespace().unwrap_or_default();
    let wanted = {
        let index = index.read();
        wanted(&index, &own, &entries, now)
    };
    if wanted.is_empty() {
        return Outcome::default();
    }
    read(index, reads, wanted, now).await
}

#[cfg(test)]
mod tests;
