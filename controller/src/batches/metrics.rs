//! The reservation batches' metrics (`kq_controller_batches_*`, batches mode only).

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The batches' series.
#[derive(Default)]
pub struct BatchMetrics {
    held: Gauge,
    unparsed: Gauge,
    deleted: Counter,
    delete_errors: Counter,
    seeded: Counter,
}

impl BatchMetrics {
    /// Create the series and register them in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "kq_controller_batches_held",
            "Reservation batches (KarmadaQuotaReservation) the controller holds: seen, not yet deleted",
            m.held.clone(),
        );
        registry.register(
            "kq_controller_batches_unparsed",
            "Reservation batches that do not parse: counted by nothing here and never deleted (see the log for their names)",
            m.unparsed.clone(),
        );
        registry.register(
            "kq_controller_batches_deleted",
            "Reservation batches deleted once every quota they name folded them",
            m.deleted.clone(),
        );
        registry.register(
            "kq_controller_batch_delete_errors",
            "Failed deletes of reservation batches (retried at a later sweep)",
            m.delete_errors.clone(),
        );
        registry.register(
            "kq_controller_batches_seeded",
            "Empty reservation batches created because the store held none at or above the quotas' foldedThrough (the newest taken away by hand)",
            m.seeded.clone(),
        );
        m
    }

    /// How many batches are held and how many do not parse.
    pub fn set_held(&self, held: usize, unparsed: usize) {
        self.held.set(i64::try_from(held).unwrap_or(i64::MAX));
        self.unparsed
            .set(i64::try_from(unparsed).unwrap_or(i64::MAX));
    }

    /// One batch deleted.
    pub fn deleted(&self) {
        self.deleted.inc();
    }

    /// One empty batch re-seeded the newest number.
    pub fn seeded(&self) {
        self.seeded.inc();
    }

    /// One delete failed.
    pub fn delete_failed(&self) {
        self.delete_errors.inc();
    }
}
