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

/// `file` (under crds/) is exactly `generated` (from `source`); `KQ_UPDATE_CRD` rewrites it.
fn assert_checked_in(file: &str, generated: &str, source: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    if std::env::var_os("KQ_UPDATE_CRD").is_some() {
        std::fs::write(&path, generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "{} is out of date with {source}; regenerate it with `make crds`",
        path.display()
    );
}

#[test]
fn checked_in_cluster_crd_matches_the_rust_types() {
    assert_checked_in(
        "quota.karmada.io_karmadaclusterquotas.yaml",
        &karmada_quota_crds::cluster_crd_yaml(),
        "crds/src/cluster_quota.rs",
    );
}

#[test]
fn cluster_crd_is_cluster_scoped_requires_a_selector_and_has_printer_columns() {
    use kube::CustomResourceExt;
    let crd = karmada_quota_crds::KarmadaClusterQuota::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("karmadaclusterquotas.quota.karmada.io")
    );
    assert_eq!(crd.spec.scope, "Cluster");
    assert_eq!(crd.spec.names.short_names, Some(vec!["kcquota".to_owned()]));
    let v = &crd.spec.versions[0];
    let cols: Vec<_> = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(cols, ["Usage", "Ready", "Drift", "Age"]);
    let schema = serde_json::to_value(&v.schema).unwrap();
    let spec = &schema["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["required"], serde_json::json!(["namespaceSelector"]));
    // Required and not nullable: the apiserver refuses `namespaceSelector: null` itself.
    let selector = &spec["properties"]["namespaceSelector"];
    assert_eq!(selector["type"], "object", "{selector}");
    assert!(selector.get("nullable").is_none(), "nullable: {selector}");
    // The KarmadaQuota fields sit at the same paths (flattened).
    assert!(spec["properties"]["hard"].is_object());
    assert!(spec["properties"]["scopeSelector"].is_object());
    let status = &schema["openAPIV3Schema"]["properties"]["status"]["properties"];
    for field in [
        "used",
        "reservations",
        "clusters",
        "namespaces",
        "conditions",
        "summary",
    ] {
        assert!(status[field].is_object(), "status.{field} missing");
    }
}

#[test]
fn checked_in_share_crd_matches_the_rust_types() {
    assert_checked_in(
        "quota.karmada.io_karmadaclusterquotashares.yaml",
        &karmada_quota_crds::share_crd_yaml(),
        "crds/src/cluster_quota_share.rs",
    );
}

#[test]
fn share_crd_is_namespaced_with_the_cluster_quota_fields_and_printer_columns() {
    use kube::CustomResourceExt;
    let crd = karmada_quota_crds::KarmadaClusterQuotaShare::crd();
    assert_eq!(
        crd.metadata.name.as_deref(),
        Some("karmadaclusterquotashares.quota.karmada.io")
    );
    assert_eq!(crd.spec.scope, "Namespaced");
    assert_eq!(
        crd.spec.names.short_names,
        Some(vec!["kcqshare".to_owned()])
    );
    let v = &crd.spec.versions[0];
    let cols: Vec<_> = v
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(cols, ["Total", "This-Namespace", "Ready", "Age"]);
    let schema = serde_json::to_value(&v.schema).unwrap();
    let props = &schema["openAPIV3Schema"]["properties"];
    for field in ["namespaceSelector", "hard", "scopeSelector"] {
        assert!(
            props["spec"]["properties"][field].is_object(),
            "spec.{field} missing"
        );
    }
    for field in [
        "used",
        "clusters",
        "namespaces",
        "summary",
        "namespaceSummary",
    ] {
        assert!(
            props["status"]["properties"][field].is_object(),
            "status.{field} missing"
        );
    }
}

#[test]
fn checked_in_batch_crd_matches_the_rust_types() {
    assert_checked_in(
        "quota.karmada.io_karmadaquotareservations.yaml",
        &karmada_quota_crds::batch_crd_yaml(),
        "crds/src/reservation_batch.rs",
    );
}

#[test]
fn batch_crd_is_namespaced_schema_less_and_has_no_subresource() {
    let crd: serde_json::Value =
        serde_saphyr::from_str(&karmada_quota_crds::batch_crd_yaml()).unwrap();
    assert_eq!(
        crd["metadata"]["name"],
        "karmadaquotareservations.quota.karmada.io"
    );
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    let v = &crd["spec"]["versions"][0];
    assert!(v.get("subresources").is_none(), "{v}");
    let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
    assert_eq!(spec["x-kubernetes-preserve-unknown-fields"], true, "{spec}");
    assert!(
        spec.get("properties").is_none(),
        "no per-field validation: {spec}"
    );
}
