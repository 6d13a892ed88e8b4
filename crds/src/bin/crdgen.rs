//! Prints the KarmadaQuota CRD as YAML (`cargo run -p karmada-quota-crds --bin crdgen`).
fn main() {
    print!("{}", karmada_quota_crds::crd_yaml());
}
