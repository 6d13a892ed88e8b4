//! The waiting line's keeper (docs/design.md §5b): which bindings wait, the line of each
//! quota, and the leader's release loop, which reads the quotas through one port
//! (`quotas::QuotaSource`).
//!
//! ```text
//!  ResourceBinding watch ─► Line::apply: bindings with our mark and suspended (core's
//!                           is_waiting), with their full charge, priority and arrival
//!  quota watches (status changed), binding events, leadership ─► Line::wake
//!  release::run (leader only): core::queue::plan over every quota's state
//!      ├─► released: merge patch clearing spec.suspension.scheduling and the mark, with
//!      │   the binding's resourceVersion; the validating webhook charges it (CAS), a
//!      │   refusal leaves it waiting in its place
//!      └─► each quota's line ─► Line::status_of ─► the quota's status.queue, written by
//!          the reconcilers (the one status writer) at their next turn (triggered here)
//!  marks::Marker (leader only, --label-line-namespaces): the waiting-line label on the
//!      namespaces a Queue-mode quota covers, where the chart registers the arrivals review
//! ```
//!
//! Nothing here is persistent: the line is rebuilt from the bindings' marks after any
//! restart or change of leader (arrival = creationTimestamp, then the mark's time).

pub mod line;
pub mod marks;
pub mod metrics;
pub mod quotas;
pub mod release;

pub use line::Line;
