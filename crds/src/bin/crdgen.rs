//! Prints the KarmadaQuota CRD as YAML (`cargo run -p karmada-quota-crds --bin crdgen`), or
//! the KarmadaClusterQuota CRD with the argument `cluster`, the KarmadaClusterQuotaShare CRD
//! with `share`, the KarmadaQuotaReservation (reservation batch) CRD with `batch`.
fn main() {
    match std::env::args().nth(1).as_deref() {
        Some("cluster") => print!("{}", karmada_quota_crds::cluster_crd_yaml()),
        Some("share") => print!("{}", karmada_quota_crds::share_crd_yaml()),
        Some("batch") => print!("{}", karmada_quota_crds::batch_crd_yaml()),
        None => print!("{}", karmada_quota_crds::crd_yaml()),
        Some(other) => {
            eprintln!("crdgen: unknown argument {other:?}; usage: crdgen [cluster|share|batch]");
            std::process::exit(2);
        }
    }
}
