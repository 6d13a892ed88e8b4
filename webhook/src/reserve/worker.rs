//! The queue's worker: spawned by the first request that finds the queue idle, it waits
//! `linger` for others to join (unless the queue already holds `max_batch`), then takes up
//! to `max_batch` pending requests at a time and processes them as one batch
//! ([`super::batch`]) until the queue is empty, then exits. Only the first batch waits:
//! the requests of the next ones queued while the previous batch was written. A worker
//! that unwinds (a bug) resets the queue.

use std::sync::Arc;

use super::batch::Job;
use super::{Inner, lock};

/// Resets the queue when its worker unwinds (a bug), so later requests get a new worker
/// and the waiting ones an error instead of a hang.
struct WorkerGuard {
    inner: Arc<Inner>,
}

impl Drop for WorkerGuard {
    fn drop(&mut self) {
        if std::thread::panicking() {
            tracing::error!("reservation worker panicked");
            *lock(&self.inner.queue) = super::Queue::default();
        }
    }
}

/// The worker: batches until the queue is empty.
pub(super) async fn worker(inner: Arc<Inner>) {
    let _guard = WorkerGuard {
        inner: inner.clone(),
    };
    let max_batch = inner.config.max_batch.max(1);
    if !inner.config.linger.is_zero() && lock(&inner.queue).pending.len() < max_batch {
        tokio::time::sleep(inner.config.linger).await;
    }
    loop {
        let jobs: Vec<Job> = {
            let mut queue = lock(&inner.queue);
            if queue.pending.is_empty() {
                queue.running = false;
                return;
            }
            let n = queue.pending.len().min(max_batch);
            queue.pending.drain(..n).collect()
        };
        inner.process(jobs).await;
    }
}
