//! `--reservation-namespace`, the flag both binaries take (they must agree): the namespace
//! of the reservation batches (`KarmadaQuotaReservation` objects, docs/reservations.md)
//! the webhook creates and the controller folds and deletes. `--reservation-store` stays
//! for the command lines of 0.2.0, whose other store is gone: it takes `batches` alone.

/// Where admissions' reservations are stored: in reservation batches, the one store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReservationStore {
    /// Each webhook decision creates one batch object holding its admissions' entries,
    /// for quotas of any namespace (compare-and-swap on the batch's sequence number).
    #[default]
    Batches,
}

/// `--reservation-store`'s value: `batches`; `status` names the store 0.2.0 had.
fn parse_store(value: &str) -> Result<ReservationStore, String> {
    match value {
        "batches" => Ok(ReservationStore::Batches),
        "status" => Err(
            "the status store was removed after 0.2.0: reservations are made \
                         durable in reservation batches only (docs/upgrade.md); drop the \
                         flag or give it `batches`"
                .to_owned(),
        ),
        other => Err(format!(
            "unknown reservation store {other:?}: the one store is `batches`"
        )),
    }
}

/// The reservation flags, flattened into each binary's clap struct.
#[derive(Clone, Debug, clap::Args)]
pub struct ReservationArgs {
    /// Where an admission's reservation is made durable: `batches`, the one store
    /// (KarmadaQuotaReservation objects in --reservation-namespace, one per webhook
    /// decision). Accepted so that 0.2.0's command lines keep parsing; `status` is refused.
    #[arg(
        long,
        env = "KQ_RESERVATION_STORE",
        default_value = "batches",
        value_parser = parse_store
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

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        reservations: ReservationArgs,
    }

    #[test]
    fn batches_is_the_one_store_and_status_is_refused_naming_why() {
        let parse =
            |args: &[&str]| Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()));
        assert_eq!(
            parse(&[]).unwrap().reservations.reservation_store,
            ReservationStore::Batches
        );
        assert!(parse(&["--reservation-store=batches"]).is_ok());
        let err = parse(&["--reservation-store=status"])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the status store was removed after 0.2.0"),
            "{err}"
        );
        let err = parse(&["--reservation-store=etcd"])
            .unwrap_err()
            .to_string();
        assert!(err.contains("the one store is `batches`"), "{err}");
    }
}
