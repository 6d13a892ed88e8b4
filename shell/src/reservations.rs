//! `--reservation-store` and `--reservation-namespace`, the flags both binaries take (they
//! must agree): where the webhook makes an admission's reservation durable — in each
//! quota's `status.reservations` (the default) or in reservation batches
//! (`KarmadaQuotaReservation` objects, docs/design.md §5 "Reservation batches") — and in
//! which namespace the batches live.

/// Where admissions' reservations are stored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReservationStore {
    /// Each admission rewrites its quotas' status (compare-and-swap on the quota).
    #[default]
    Status,
    /// Each webhook decision creates one batch object holding its admissions' entries,
    /// for quotas of any namespace (compare-and-swap on the batch's sequence number).
    Batches,
}

/// The reservation store flags, flattened into each binary's clap struct.
#[derive(Clone, Debug, clap::Args)]
pub struct ReservationArgs {
    /// Where an admission's reservation is made durable before it is answered: `status`
    /// (each quota's status.reservations) or `batches` (KarmadaQuotaReservation objects in
    /// --reservation-namespace, one per webhook decision, shared across namespaces;
    /// cheaper for the apiserver). The webhook and the controller must agree; switch the
    /// controller first (it folds both kinds of entries).
    #[arg(
        long,
        env = "KQ_RESERVATION_STORE",
        value_enum,
        default_value = "status"
    )]
    pub reservation_store: ReservationStore,
    /// The namespace of the reservation batches (the webhook creates them, the controller
    /// deletes them once folded). Give it to both binaries; only they should write there.
    #[arg(
        long,
        env = "KQ_RESERVATION_NAMESPACE",
        default_value = "karmada-quota-system"
    )]
    pub reservation_namespace: String,
}

impl ReservationArgs {
    /// Whether batches are in use.
    pub fn batches(&self) -> bool {
        self.reservation_store == ReservationStore::Batches
    }
}
