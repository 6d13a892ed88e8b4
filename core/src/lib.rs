//! The pure quota engine of karmada-quota.
//!
//! Everything a KarmadaQuota decision needs, as plain functions over plain data: no kube
//! client, no HTTP, no tokio. The webhook and the controller are thin I/O shells around
//! this crate, so the two can never disagree on what a ResourceBinding costs.
//!
//! ```text
//!  ResourceBinding (binding::ResourceBindingSpec, tolerant serde view)
//!        │ usage::BindingCharge::compute            (design.md §4: what a binding costs,
//!        ▼                                           scope-independent, per part/cluster)
//!  BindingCharge ── .scoped(&scope) ──► ScopedUsage  (total + per cluster, for one quota)
//!        │                                   │
//!        │ decision::decide (webhook, §4)     │ status::compute (controller, §5)
//!        ▼                                   ▼
//!  Decision::{Allow{entries}, Deny}    QuotaView (used, clusters[], pruned reservations,
//!        │                                         drift) — what status and dashboard show
//!        └──► ledger (reservations: upsert, effective usage, prune)
//!  complete: usage that could not be computed keeps its last known value (never lowered)
//!  top: the bindings that use the largest share of one quota (the dashboard's quota page)
//! ```
//!
//! Before a change (what-if, PropagationPolicy admission), what Karmada would make of a
//! resource template and a policy (its default interpreter, Lua customizations, a policy's
//! placement among the known clusters) is `karmada-quota-interpreter`: it gives the binding
//! Karmada would create, priced here by the same `usage::BindingCharge`.
//!
//! Usage after the fact (billing reports, usage over time, Prometheus) is not here: it is
//! `karmada-quota-billing`, a consumer of this crate's quantities and resource lists.
//!
//! Quantities are exact ([`quantity::Quantity`], Kubernetes semantics); resource lists
//! are [`resources::ResourceList`]; quota specs are validated by [`quota::validate_spec`].

pub mod binding;
pub mod complete;
pub mod decision;
pub mod failover;
pub mod fence;
pub mod field;
pub mod int32;
pub mod ledger;
pub mod placement;
pub mod pod_kinds;
pub mod pod_requests;
pub mod quantity;
pub mod queue;
pub mod quota;
pub mod resources;
pub mod scope;
pub mod selection;
pub mod status;
pub mod top;
pub mod usage;

#[cfg(test)]
mod testutil;

pub use quantity::{Format, Quantity, QuantityError};
pub use resources::ResourceList;
