//! The queue's worker: spawned by the first request that finds the queue idle, it takes up
//! to `max_batch` pending requests at a time and processes them as one batch
//! ([`super::batch`]) until the queue is empty, then exits. A worker that unwinds (a bug)
//! resets the queue.

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
    loop {
        let jobs: Vec<Job> = {
            let mut queue = lock(&inner.queue);
            if queue.pending.is_empty() {
                queue.running = false;
                return;
            }
            let n = queue.pending.len().min(inner.config.max_batch.max(1));
            queue.pending.drain(..n).collect()
        };
        inner.process(jobs).await;
    }
}
