//! The quota copies a decision may use. The quota kinds are listed from the apiserver's watch cache (10,000 quotas in
//! ~3 s, where a consistent list from etcd takes ~9 s on kube-apiserver 1.20), and such a
//! list may be older than the batch list read before it: a batch folded into a quota and
//! deleted before this webhook listed the batches is then in neither view, and its
//! entries would count for no one. So a decision uses a quota object only once this
//! webhook has read it from etcd (one GET, a quorum read) after its batch view's list —
//! once per quota per *read generation* (`crate::cache::relists`: it moves when a batch
//! re-list that found numbers it never held asks the quota kinds to list again, and when
//! a quota watch begins any list, since a list from the watch cache may be older than
//! what the cache showed before it, whose folds may have settled tombstones) — and then
//! the newer of that copy and the cache's (docs/reservations.md R13). The first decision per
//! quota per generation waits for that read in the webhook's one queue.
//!
//! The copies read are kept (replaced by the cache's own once the cache is as new, so
//! they share its memory) until the generation changes; keys the cache no longer holds
//! are dropped whenever the map has doubled since it was last pruned.

use std::collections::{BTreeMap, HashMap};

use futures::StreamExt;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use karmada_quota_status::StoreError;
use tokio::time::Instant;

use super::copy::{Kind, QuotaCopy};
use super::{Inner, lock};
use crate::error::{Error, Result};

/// Quota reads in flight at once for one decision.
const READ_CONCURRENCY: usize = 16;

/// Rounds of reads when the re-list generation moves during them.
const READ_ROUNDS: usize = 3;

/// Fewest copies kept before the map is pruned.
const PRUNE_MIN: usize = 1024;

/// The quota copies this webhook read from etcd in one re-list generation.
pub(super) struct Verified {
    /// The re-list generation the copies were read in.
    generation: u64,
    /// By key: the copy read, or the cache's once that was as new.
    copies: HashMap<QuotaKey, QuotaCopy>,
    /// Prune keys the cache no longer holds once the map holds this many.
    prune_at: usize,
}

impl Default for Verified {
    fn default() -> Self {
        Self {
            generation: 0,
            copies: HashMap::new(),
            prune_at: PRUNE_MIN,
        }
    }
}

impl Verified {
    /// Forget every copy read in an older generation.
    fn enter(&mut self, generation: u64) {
        if self.generation != generation {
            self.generation = generation;
            self.copies.clear();
        }
    }
}

impl Inner {
    /// `copies` (the cache's, read after the ledger settled its tombstones), each
    /// replaced by this webhook's read of it from etcd when that is newer; a quota not
    /// read yet in this re-list generation is read first (a deleted one is left out).
    /// Reads that do not end by `deadline` fail the decision ([`Error::Timeout`]).
    pub(super) async fn verified(
        &self,
        mut copies: BTreeMap<QuotaKey, QuotaCopy>,
        deadline: Instant,
    ) -> Result<BTreeMap<QuotaKey, QuotaCopy>> {
        if cfg!(feature = "sim-revert-8ed74ef") {
            // The simulation's revert: decide on the cache's copies (bench/sim.md).
            return Ok(copies);
        }
        for _ in 0..READ_ROUNDS {
            let generation = self.cache.relists().read_generation();
            let missing: Vec<QuotaKey> = {
                let mut v = lock(&self.verified);
                v.enter(generation);
                copies
                    .keys()
                    .filter(|k| !v.copies.contains_key(*k))
                    .cloned()
                    .collect()
            };
            // Each read is kept as it lands (a later decision need not read it again
            // when this one runs out of time), unless the generation moved meanwhile.
            let mut gone = Vec::new();
            let reads = futures::stream::iter(missing)
                .map(|key| async move {
                    let read = self.read(&key).await;
                    (key, read)
                })
                .buffer_unordered(READ_CONCURRENCY)
                .map(|(key, read)| {
                    match read? {
                        Some(copy) => {
                            let mut v = lock(&self.verified);
                            if v.generation == generation {
                                v.copies.insert(key, copy);
                            }
                        }
                        // Deleted: the watch will drop it from the cache.
                        None => gone.push(key),
                    }
                    Ok(())
                })
                .collect::<Vec<Result<()>>>();
            let reads = tokio::time::timeout_at(deadline, reads)
                .await
                .map_err(|_| Error::Timeout)?;
            reads.into_iter().collect::<Result<()>>()?;
            let mut v = lock(&self.verified);
            if self.cache.relists().read_generation() != generation {
                // A re-list was asked for or begun during the reads: they may be older
                // than it. Read again.
                continue;
            }
            for key in &gone {
                copies.remove(key);
            }
            for (key, c) in &mut copies {
                match v.copies.get(key) {
                    Some(read) if read.is_newer(c) => *c = read.clone(),
                    // The cache is as new: keep its copy (shared memory).
                    _ => {
                        v.copies.insert(key.clone(), c.clone());
                    }
                }
            }
            if v.copies.len() >= v.prune_at {
                v.copies.retain(|k, _| self.cached(k).is_some());
                v.prune_at = PRUNE_MIN.max(2 * v.copies.len());
            }
            return Ok(copies);
        }
        // The quota watches keep listing (a re-list asked for holds decisions until its
        // lists are in: say so).
        self.ledger.check()?;
        Err(Error::Timeout)
    }

    /// One quota object from etcd; `None` when it is gone.
    async fn read(&self, key: &QuotaKey) -> Result<Option<QuotaCopy>> {
        let (namespace, name) = (key.namespace().unwrap_or_default(), key.name());
        let read = match key {
            QuotaKey::Namespaced { .. } => KarmadaQuota::store(self)
                .get(namespace, name)
                .await
                .map(KarmadaQuota::copy),
            QuotaKey::Cluster { .. } => KarmadaClusterQuota::store(self)
                .get("", name)
                .await
                .map(KarmadaClusterQuota::copy),
        };
        self.metrics.quota_read(match &read {
            Ok(_) => "ok",
            Err(e) => e.metric_label(),
        });
        match read {
            Ok(copy) => Ok(Some(copy)),
            Err(StoreError::NotFound) => Ok(None),
            Err(source) => Err(Error::Store {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            }),
        }
    }
}
