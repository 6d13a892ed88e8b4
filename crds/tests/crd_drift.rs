//! The checked-in CRD must be exactly what the Rust types generate.

use std::path::Path;

#[test]
fn checked_in_crd_matches_the_rust_types() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("quota.karmada.io_karmadaquotas.yaml");
    let generated = karmada_quota_crds::crd_yaml();
    if std::env::var_os("KQ_UPDATE_CRD").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is out of date with crds/src/quota.rs; regenerate it with\n  \
         cargo run -q -p karmada-quota-crds --bin crdgen > crds/quota.karmada.io_karmadaquotas.yaml",
        path.display()
    );
}

#[test]
fn crd_declares_names_scope_status_and_printer_columns() {
    use kube::CustomResourceExt;
    let crd = karmada_quota_crds::KarmadaQuota::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("karmadaquotas.quota.karmada.io")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(crd.spec.names.short_names, Some(vec!["kquota".to_owned()]));
    assert_eq!(
        crd.spec.names.categories,
        Some(vec!["karmada-io".to_owned()])
    );
    let v = &crd.spec.versions[0];
    assert_eq!(v.name, "v1alpha1");
    assert!(
        v.subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some()
    );
    let cols: Vec<_> = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(cols, ["Usage", "Ready", "Drift", "Age"]);
}
