//! A seeded, deterministic simulation of the reservation batch store
//! (docs/design.md §5 "Reservation batches"), in the style
//! of FoundationDB's simulation and TigerBeetle's VOPR: the real code, a simulated world.
//!
//! ```text
//!   workload (creates, scales, deletes, quota edits, crashes, stalls)
//!      │ reviews                          │ stores bindings, edits quotas
//!      ▼                                  ▼
//!   N webhook replicas ──creates/deletes─► apiserver: FakeStore (quotas, rv CAS),
//!   (real Batcher, Ledger, QuotaCache)    FakeBatchStore (batches, uids), bindings;
//!      ▲ simulated watches                one ordered log per kind
//!      │ (delays, stalls, errors,         │
//!      │  stale and broken lists)         ▼
//!   controller (real Index, Batches, fold = desired::compute_with, status::update, sweep)
//!   truth: what was admitted and released; the invariant after every step
//! ```
//!
//! One seed, one run: one thread, tokio's paused clock, one seeded random source
//! ([`rng`]), no real I/O, and no std `HashMap` order in what the simulation decides or
//! traces. [`run`] returns the outcome with the trace's fingerprint; a failing seed is
//! replayed with `cargo run -p karmada-quota-sim -- --seed <seed>`.
//!
//! Modules: [`config`] (a run and its fault kinds), [`clock`], [`apiserver`] (objects and
//! logs), [`conn`] (a process's calls, with faults), [`watch`] (list-then-watch, with
//! faults), [`replica`] (a webhook replica), [`controller`], [`workload`] (clients,
//! operator, fault steps), [`truth`] (ground truth and invariant), [`trace`].

pub mod apiserver;
pub mod clock;
pub mod config;
pub mod conn;
pub mod controller;
pub mod replica;
pub mod rng;
pub mod trace;
pub mod truth;
pub mod watch;
pub mod workload;
pub mod world;

mod run;

pub use config::{Config, Faults};
pub use run::TAIL;
pub use run::{Outcome, run};

/// The protocol fixes this build has reverted (its `revert-*` features), for the replay
/// command.
pub const REVERTS: &[&str] = &[
    #[cfg(feature = "revert-5f5c1c5")]
    "revert-5f5c1c5",
    #[cfg(feature = "revert-7d9a0c5")]
    "revert-7d9a0c5",
    #[cfg(feature = "revert-3dee4c6")]
    "revert-3dee4c6",
    #[cfg(feature = "revert-cb8f985")]
    "revert-cb8f985",
    #[cfg(feature = "revert-92fc912")]
    "revert-92fc912",
    #[cfg(feature = "revert-8ed74ef")]
    "revert-8ed74ef",
    #[cfg(feature = "revert-052809a-generation")]
    "revert-052809a-generation",
    #[cfg(feature = "revert-052809a-number")]
    "revert-052809a-number",
    #[cfg(feature = "revert-382f6f6")]
    "revert-382f6f6",
    #[cfg(feature = "revert-seed")]
    "revert-seed",
    #[cfg(feature = "revert-leader-fence")]
    "revert-leader-fence",
    #[cfg(feature = "revert-consistent-quota-lists")]
    "revert-consistent-quota-lists",
    #[cfg(feature = "revert-sweep-uid")]
    "revert-sweep-uid",
];
