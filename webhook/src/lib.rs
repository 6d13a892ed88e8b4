//! The KarmadaQuota admission webhook (docs/design.md §5): a thin I/O shell around
//! `karmada-quota-core`.
//!
//! ```text
//!  apiserver ──HTTPS POST AdmissionReview──► admission::app (axum Router)
//!                                              │ /validate/karmadaquota: crds::convert::validate_spec
//!                                              │ /validate/resourcebinding:
//!                                              │   decode ─► BindingCharge::compute (core, plural
//!                                              │   from shell::plurals) ─► dry-run? decide now
//!                                              ▼
//!   cache::QuotaCache ◄── watches: KarmadaQuota, KarmadaClusterQuota, Namespace
//!        │ (quotas parsed once per watch event)          ledger::Ledger ◄── watch
//!        ▼                                                (KarmadaQuotaReservation)
//!   reserve::Batcher: one queue for every namespace, one worker
//!        │ each quota read from etcd once per read generation (verified copies)
//!        │ core::decision::decide_batch_selected ─► Allow(entries) / Deny, each quota's
//!        │ entries completed with the batches its status does not account for yet
//!        │ create batch kqr-<next number> (409 → wait for the number, decide again)
//!        │ allowed once this webhook's batch watch confirms the batch
//!        ▼
//!   karmada_quota_status::BatchStore (kube create / delete; its fake in tests)
//! ```
//!
//! A denial is also logged (rate-limited) and, off the admission path, becomes events on
//! the resource template and the quota (`denials` → `events`).
//!
//! Every decision comes from core; this crate only decodes, looks up, batches, creates
//! reservation batches and encodes. It never answers "allowed" on an internal error or a timeout.

pub mod admission;
pub mod args;
pub mod cache;
pub mod denials;
pub mod error;
pub mod events;
pub mod ledger;
pub mod metrics;
pub mod policy;
pub mod reserve;
pub mod selection;
pub mod server;
pub mod tenancy;

#[cfg(test)]
mod tests;

pub use admission::{AppState, Settings, app};
pub use args::Args;
pub use cache::{CachedQuota, QuotaCache};
pub use denials::Denials;
pub use error::{Error, Result, quota_ref};
pub use karmada_quota_status::{KubeStore, StatusStore, StoreError};
pub use metrics::Metrics;
pub use reserve::{Batcher, BatcherConfig, BindingRequest, Stores};
