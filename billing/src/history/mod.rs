//! Usage over time of one quota, for the dashboard's chart: used, reserved and hard per
//! resource (and what Karmada placed in each member cluster), from either source.
//!
//! ```text
//!  controller, every dashboard snapshot and every step
//!     │ Store::record_all(now, readings)          (window: samples, pruned, thinned, bounded)
//!     ▼
//!  Store ─► Store::chart(quota, from, to, points, clusters) ─┐
//!                                                            ├─► Chart { resources: [lines] }
//!  Prometheus ─► promql::queries(quota, window) ─► Series ───┘    (Chart::from_series)
//! ```
//!
//! Pure: no clock, no lock, no HTTP. The values are the controller's computed numbers (the
//! same it exports as `kq_quota_used`, `kq_quota_reserved`, `kq_quota_hard` and
//! `kq_quota_cluster_used`), as floats in the unit a person reads
//! ([`billing::units`](crate::units): cores, GiB, pods…). The store is in
//! [`window`], the chart's shape and the downsampling in [`chart`], the PromQL in
//! [`promql`].

pub mod chart;
pub mod promql;
pub mod window;

pub use chart::{Chart, ClusterLine, Point, ResourceLines};
pub use window::{Bounds, Reading, Store};

/// What a line of a resource shows.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// Usage of the bindings Karmada placed, summed over clusters.
    Used,
    /// Pending reservations (admitted, not yet observed).
    Reserved,
    /// The limit.
    Hard,
    /// What Karmada placed in one member cluster.
    Cluster(String),
}

/// One line: a resource and what of it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LineKey {
    /// Resource name (`requests.cpu`).
    pub resource: String,
    /// Which number.
    pub kind: Kind,
}

/// A quantity as a float in base units (cores, bytes, counts), as the metrics export it.
pub fn base_value(q: &karmada_quota_core::Quantity) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let v = q.nanos() as f64 / 1e9;
    v
}
