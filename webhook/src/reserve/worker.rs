//! A batch group's worker: spawned by the first request that finds its group idle, it
//! takes up to `max_batch` pending requests at a time and processes them as one batch
//! ([`super::batch`]) until the queue is empty, then exits, dropping the copies of ours
//! the cache has caught up with. A worker that unwinds (a bug) resets its group.

use std::collections::HashSet;
use std::sync::Arc;

use karmada_quota_core::selection::QuotaKey;

use super::batch::Job;
use super::copy::QuotaCopy;
use super::{Inner, lock};

/// Resets the group when its worker unwinds (a bug), so later requests get a new
/// worker and the waiting ones an error instead of a hang.
struct WorkerGuard {
    inner: Arc<Inner>,
    group: String,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!(group = %self.group, "reservation worker panicked");
            lock(&self.inner.groups).remove(&self.group);
        }
    }
}

/// The worker of `group`: batches until its queue is empty.
pub(super) async fn worker(inner: Arc<Inner>, group: String) {
    let _guard = WorkerGuard {
        inner: inner.clone(),
        group: group.clone(),
    };
    loop {
        let jobs: Vec<Job> = {
            // Our copies, to compare with the cache outside the groups lock.
            let newest: Vec<QuotaCopy> = {
                let groups = lock(&inner.groups);
                let Some(g) = groups.get(&group) else {
                    return;
                };
                if g.pending.is_empty() {
                    g.newest.values().cloned().collect()
                } else {
                    Vec::new()
                }
            };
            // Keep only our copies the cache has not caught up with yet, so a quiet group
            // or a deleted quota does not hold its objects for the process's life.
            let stale: HashSet<QuotaKey> = newest
                .iter()
                .filter(|own| !inner.cached(&own.key()).is_some_and(|c| own.is_newer(&c)))
                .map(QuotaCopy::key)
                .collect();
            let mut groups = lock(&inner.groups);
            let Some(g) = groups.get_mut(&group) else {
                return;
            };
            if g.pending.is_empty() {
                g.running = false;
                g.newest.retain(|key, _| !stale.contains(key));
                if g.newest.is_empty() {
                    groups.remove(&group);
                }
                return;
            }
            let n = g.pending.len().min(inner.config.max_batch.max(1));
            g.pending.drain(..n).collect()
        };
        inner.process(&group, jobs).await;
    }
}
