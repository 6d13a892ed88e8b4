//! The newest number re-seeded (docs/reservations.md R20): when the store holds no batch
//! numbered at or above the greatest `status.foldedThrough` of the quotas this controller
//! holds — nor the newest number it has seen — the leader creates an empty batch with that
//! number, so that a webhook that lists the batches numbers above every fold again.
//!
//! Within the protocol's model the store always holds a batch at least as high as every
//! number ever created (R7, R18), so a create here is either refused (409: the number is
//! held) or lands on a number already used and freed (the controller's lists lag): an
//! empty batch counts nothing for anyone and only repeats a number every view has passed
//! or will pass. It matters after a hand took the newest batch away (docs/reservations.md
//! §6, "Hand edits").

use karmada_quota_crds::reservation_batch::{batch_name, seed_batch};
use karmada_quota_status::{BatchStore, StoreError};

use super::Batches;

/// What one re-seed did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seeded {
    /// The store holds a batch at or above the number: nothing to do.
    Held,
    /// An empty batch of this number was created.
    Created(u64),
    /// Someone holds this number already (409): fine, the store has it.
    Taken(u64),
    /// The create of this number failed (tried again at the next sweep).
    Failed(u64),
}

/// Create the missing newest batch (`reservation_batch::seed_batch`: empty, written by
/// `SEED_WRITER`) in `namespace`, if [`Batches::missing_newest`] names one for
/// `greatest_fold` (the greatest `status.foldedThrough` in this controller's quota stores;
/// `None`: none recorded). The controller's watch shows the batch like any other.
pub async fn seed_once(
    batches: &Batches,
    store: &dyn BatchStore,
    namespace: &str,
    greatest_fold: Option<u64>,
) -> Seeded {
    let Some(sequence) = batches.missing_newest(greatest_fold) else {
        return Seeded::Held;
    };
    match store.create(&seed_batch(namespace, sequence)).await {
        Ok(_) => {
            batches.metrics().seeded();
            tracing::warn!(
                batch = %batch_name(sequence),
                "no reservation batch at or above the quotas' foldedThrough (the newest taken away by hand?): created an empty one with that number"
            );
            Seeded::Created(sequence)
        }
        Err(StoreError::Conflict) => Seeded::Taken(sequence),
        Err(e) => {
            tracing::warn!(batch = %batch_name(sequence), error = %e, "could not re-seed the newest reservation batch; retrying at the next sweep");
            Seeded::Failed(sequence)
        }
    }
}
