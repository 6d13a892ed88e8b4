//! The one way to read and write a quota object's status — a KarmadaQuota's or a
//! KarmadaClusterQuota's, generic over `karmada_quota_crds::QuotaObject` — and the
//! reservation batches': the controller writes quota status through it, the webhook reads
//! quotas and creates batches through it (see docs/architecture.md for where it sits).
//!
//! ```text
//!  caller (controller reconcile)
//!     │ update(store, base, plan, may_write, attempts)
//!     ▼
//!  plan(&object) ─► None: nothing to write ─► Unchanged
//!     │ Some(status)
//!     ├─ may_write()? no ─► Stopped
//!     │ store.replace_status(object with status, resourceVersion = base's)  (compare-and-swap)
//!     ├─ 200 ─► Written(returned object)
//!     ├─ 404 ─► Gone
//!     └─ 409 ─► store.get → plan again from the fresh object (what others wrote survives)
//! ```
//!
//! - [`store`]: the two API calls ([`StatusStore`]) over the Kubernetes API.
//! - [`update`]: the compare-and-swap loop with conflict retry.
//! - Parsing a stored status is `karmada_quota_crds::convert::parse_status` (re-exported
//!   here), one parse for both binaries.
//! - [`batches`]: the reservation batches seen: which
//!   entries a quota's status does not account for yet, tombstones, what may be deleted.
//! - [`batch_store`]: the API calls on batches ([`BatchStore`]: create as the
//!   compare-and-swap, get, delete) and an in-memory one (feature `fake`).
//! - `fake` (feature `fake`): an in-memory store with the apiserver's resourceVersion
//!   semantics and fault injection, the one fake both binaries test against.

pub mod batch_store;
pub mod batches;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod store;
pub mod update;

pub use batch_store::{BatchStore, KubeBatchStore};
pub use batches::BatchView;
pub use karmada_quota_crds::convert::{StoredStatus, parse_status, quota_state};
pub use store::{KubeStore, StatusStore, StoreError};
pub use update::{Outcome, UpdateError, Updated, update};
