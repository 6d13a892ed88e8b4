//! The deletion sweep: the leader deletes every batch each quota it names has folded
//! (`Batches::deletable`), a few at a time, and forgets it. Never the newest; never one
//! that does not parse; nothing for a quota whose `foldedThrough` (as the controller's
//! quota store shows it, i.e. durably written) is behind. Each delete names the uid the
//! view holds the batch by: a number freed by a delete can be taken again, and a view
//! behind the store (a new leader's, a stalled watch) must not delete the later batch of
//! the number, which no quota may have folded (docs/reservations.md R17). After each
//! sweep, the newest number is re-seeded if the store lacks it ([`super::seed`]).

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, stream};
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::reservation_batch::batch_name;
use karmada_quota_shell::backoff::Backoff;
use karmada_quota_status::batches::Fold;
use karmada_quota_status::{BatchStore, StoreError};
use tokio::sync::watch;

use super::Batches;
use super::folds::Folds;
use super::seed::seed_once;

/// How often the leader sweeps.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// Deletes in flight at once.
pub const DELETE_CONCURRENCY: usize = 8;
/// The wait after a sweep whose deletes failed: 1 s doubling to 30 s, reset by a clean one.
const ERROR_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));

/// What one sweep did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Batches deleted.
    pub deleted: usize,
    /// Batches already gone (404), or whose number another batch holds now (409 on the
    /// uid): forgotten too.
    pub gone: usize,
    /// Deletes that failed (kept, tried again at a later sweep).
    pub failed: usize,
}

/// One sweep at `now` (Unix seconds): delete what `fold` allows, at most
/// [`DELETE_CONCURRENCY`] at once.
pub async fn sweep_once(
    batches: &Batches,
    store: &dyn BatchStore,
    fold: impl Fn(&QuotaKey) -> Fold,
    now: i64,
) -> Swept {
    let doomed = batches.deletable(fold, now);
    let results: Vec<(u64, Option<String>, Result<(), StoreError>)> = stream::iter(doomed)
        .map(|(s, uid)| async move {
            // Reverted for the simulation only (bench/sim.md).
            let precondition = uid
                .as_deref()
                .filter(|_| !cfg!(feature = "sim-revert-sweep-uid"));
            let deleted = store.delete(&batch_name(s), precondition).await;
            (s, uid, deleted)
        })
        .buffer_unordered(DELETE_CONCURRENCY)
        .collect()
        .await;
    let mut swept = Swept::default();
    for (s, uid, result) in results {
        match result {
            Ok(()) => {
                swept.deleted += 1;
                batches.metrics().deleted();
                batches.removed_if(s, uid.as_deref());
            }
            // Gone, or another batch holds its number now (the uid precondition
            // failed): the one this view holds is gone either way; the watch brings the
            // other.
            Err(StoreError::NotFound | StoreError::Conflict) => {
                swept.gone += 1;
                batches.removed_if(s, uid.as_deref());
            }
            Err(e) => {
                swept.failed += 1;
                batches.metrics().delete_failed();
                tracing::warn!(batch = %batch_name(s), error = %e, "could not delete a folded reservation batch; retrying at a later sweep");
            }
        }
    }
    if swept.deleted + swept.gone > 0 {
        tracing::debug!(
            deleted = swept.deleted,
            gone = swept.gone,
            "folded reservation batches deleted"
        );
    }
    swept
}

/// Sweep, then re-seed the newest number if the store (of `namespace`) lacks it, every
/// [`SWEEP_INTERVAL`] while this replica leads, until `stop`; after a sweep with failed
/// deletes, wait with backoff instead.
pub async fn run(
    batches: Arc<Batches>,
    (store, namespace): (Arc<dyn BatchStore>, String),
    folds: impl Folds,
    leader: watch::Receiver<bool>,
    stop: impl Future<Output = ()> + Send + 'static,
) {
    let mut backoff = ERROR_BACKOFF;
    let mut wait = SWEEP_INTERVAL;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(wait) => {}
        }
        wait = SWEEP_INTERVAL;
        if !*leader.borrow() {
            continue;
        }
        let fold = |key: &QuotaKey| folds.fold(key);
        let swept = sweep_once(&batches, &*store, fold, crate::clock::now_secs()).await;
        if let Some(greatest) = folds.greatest() {
            seed_once(&batches, &*store, &namespace, greatest).await;
        }
        if swept.failed > 0 {
            wait = backoff.next_delay();
        } else {
            backoff.reset();
        }
    }
}
