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
//!   cache::QuotaCache ◄── reflector(watch KarmadaQuota, all namespaces)
//!        │ (namespace's quotas, parsed once per watch event)
//!        ▼
//!   reserve::Batcher: one queue + one worker per batch group (a namespace, or the
//!        │ namespaces sharing cluster quotas; with reservation batches, one for all)
//!        │ newest copy of each quota (cache, or the object our own write/read returned)
//!        │ core::decision::decide_batch ─► Allow(entries) / Deny
//!        │ per quota, name order: status::update (CAS; 409 → re-GET, re-decide that
//!        │ quota's requests; a deny stays a deny); roll back what a request that did
//!        │ not end admitted had written
//!        ▼
//!   karmada_quota_status::StatusStore (kube replace_status / get; its fake in tests)
//! ```
//!
//! A denial is also logged (rate-limited) and, off the admission path, becomes events on
//! the resource template and the quota (`denials` → `events`).
//!
//! Every decision comes from core; this crate only decodes, looks up, batches, writes and
//! encodes. It never answers "allowed" on an internal error or a timeout.

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
pub use reserve::{Batcher, BatcherConfig, BindingRequest};
