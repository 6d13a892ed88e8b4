//! The decode budget's estimate bounds what decoding a review really takes: each review
//! below (the shapes that decode largest per body byte) is decoded as its path decodes it
//! once, in a fresh child process of this test binary, and the rise of its resident set
//! over the decode (VmHWM after − VmRSS before) must stay under the estimate the router
//! charges (`decoded_estimate`). A wide `request.options`
//! and a binding's status are passed over: they must cost next to nothing.

use std::path::PathBuf;
use std::process::Command;

use karmada_quota_webhook::admission::{
    KARMADAQUOTA_PATH, RESOURCEBINDING_PATH, decode_binding_review, decode_policy_review,
    decode_quota_review, decoded_estimate,
};
use karmada_quota_webhook::policy::PROPAGATIONPOLICY_PATH;
use serde_json::{Value, json};

/// A field of /proc/self/status, in bytes.
fn proc_status(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a kB field");
    kb * 1024
}

/// Child mode: decode the body in `file` as `path` decodes it, once, in this fresh
/// process, and print how far the resident set rose over it (VmHWM after − VmRSS
/// before): every page the decode touched beyond what was resident.
fn child(path: &str, file: &str) {
    let body = std::fs::read(file).expect("the body");
    let before = proc_status("VmRSS:");
    decode(path, &body);
    let peak = proc_status("VmHWM:");
    println!("PEAK {}", peak.saturating_sub(before));
}

/// The peak growth of decoding `body` as `path`, measured in a child process.
fn peak_in_child(name: &str, path: &str, body: &[u8]) -> usize {
    let file: PathBuf = std::env::temp_dir().join(format!(
        "kq-decode-memory-{}-{}.json",
        std::process::id(),
        name.replace(|c: char| !c.is_ascii_alphanumeric(), "-")
    ));
    std::fs::write(&file, body).expect("write the body");
    let out = Command::new(std::env::current_exe().expect("the test binary"))
        .args([
            "--exact",
            "decoding_stays_under_the_charged_estimate",
            "--nocapture",
        ])
        .env(CHILD_PATH, path)
        .env(CHILD_FILE, &file)
        .output()
        .expect("run the child");
    let _ = std::fs::remove_file(&file);
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("PEAK "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name}: no PEAK line from the child: {stdout}"))
}

const CHILD_PATH: &str = "KQ_DECODE_MEMORY_PATH";
const CHILD_FILE: &str = "KQ_DECODE_MEMORY_FILE";

fn review(kind: (&str, &str, &str), resource: &str, object: Value, extra: Value) -> Vec<u8> {
    let mut request = json!({
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": kind.0, "version": kind.1, "kind": kind.2},
        "resource": {"group": kind.0, "version": kind.1, "resource": resource},
        "name": "x", "namespace": "team-a", "operation": "UPDATE",
        "userInfo": {"username": "alice"},
        "object": object.clone(), "oldObject": object,
    });
    if let (Some(r), Some(e)) = (request.as_object_mut(), extra.as_object()) {
        r.extend(e.clone());
    }
    serde_json::to_vec(&json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request
    }))
    .unwrap()
}

fn binding(spec: Value, meta: Value, status: Value) -> Value {
    let mut metadata = json!({"name": "x", "namespace": "team-a", "uid": "u", "generation": 1});
    if let (Some(m), Some(e)) = (metadata.as_object_mut(), meta.as_object()) {
        m.extend(e.clone());
    }
    json!({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
           "metadata": metadata, "spec": spec, "status": status})
}

fn binding_review(object: Value, extra: Value) -> Vec<u8> {
    review(
        ("work.karmada.io", "v1alpha2", "ResourceBinding"),
        "resourcebindings",
        object,
        extra,
    )
}

const N: usize = 9_000;

fn resource() -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "namespace": "team-a", "name": "w"})
}

/// (name, path, body) of each shape measured.
fn shapes() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let labels: serde_json::Map<String, Value> =
        (0..N).map(|i| (format!("{i:x}"), json!(""))).collect();
    let tiny_strings: Vec<Value> = (0..N).map(|_| json!("a")).collect();
    let empty_objects: Vec<Value> = (0..N).map(|_| json!({})).collect();
    let components: Vec<Value> = (0..N)
        .map(|_| json!({"replicaRequirements": {"resourceRequest": {}}}))
        .collect();
    let deep: Value = (0..100).fold(json!({}), |acc, i| json!({format!("f:{i}"): acc}));
    let wide_fields: serde_json::Map<String, Value> =
        (0..N).map(|i| (format!("f:{i}"), json!({}))).collect();
    let mut out = vec![
        (
            "binding: labels of tiny distinct keys",
            RESOURCEBINDING_PATH,
            binding_review(
                binding(
                    json!({"resource": resource()}),
                    json!({"labels": labels}),
                    json!({}),
                ),
                json!({}),
            ),
        ),
        (
            "binding: spec.clusters of empty objects",
            RESOURCEBINDING_PATH,
            binding_review(
                binding(
                    json!({"resource": resource(), "clusters": empty_objects}),
                    json!({}),
                    json!({}),
                ),
                json!({}),
            ),
        ),
        (
            "binding: spec.components with requirements",
            RESOURCEBINDING_PATH,
            binding_review(
                binding(
                    json!({"resource": resource(), "components": components}),
                    json!({}),
                    json!({}),
                ),
                json!({}),
            ),
        ),
        (
            "binding: managedFields, wide and deep",
            RESOURCEBINDING_PATH,
            binding_review(
                binding(
                    json!({"resource": resource()}),
                    json!({"managedFields": [{"manager": "m", "operation": "Update",
                        "fieldsType": "FieldsV1", "fieldsV1": {"wide": wide_fields, "deep": deep}}]}),
                    json!({}),
                ),
                json!({}),
            ),
        ),
        (
            "binding: finalizers of tiny strings",
            RESOURCEBINDING_PATH,
            binding_review(
                binding(
                    json!({"resource": resource()}),
                    json!({"finalizers": tiny_strings}),
                    json!({}),
                ),
                json!({}),
            ),
        ),
        (
            "binding: userInfo.extra",
            RESOURCEBINDING_PATH,
            binding_review(
                binding(json!({"resource": resource()}), json!({}), json!({})),
                json!({"userInfo": {"username": "a", "extra": {"k": tiny_strings}}}),
            ),
        ),
        (
            "policy: clusterNames of tiny strings",
            PROPAGATIONPOLICY_PATH,
            review(
                ("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
                "propagationpolicies",
                json!({"metadata": {"name": "p", "namespace": "team-a"}, "spec": {
                    "resourceSelectors": [{"apiVersion": "v1", "kind": "ConfigMap"}],
                    "placement": {"clusterAffinity": {"clusterNames": tiny_strings}}}}),
                json!({}),
            ),
        ),
        (
            "policy: clusterAffinities (flattened terms)",
            PROPAGATIONPOLICY_PATH,
            review(
                ("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
                "propagationpolicies",
                json!({"metadata": {"name": "p", "namespace": "team-a"}, "spec": {
                    "placement": {"clusterAffinities": (0..N).map(|_| json!({"clusterNames": ["a"]})).collect::<Vec<_>>()}}}),
                json!({}),
            ),
        ),
        (
            "policy: selectors of empty objects",
            PROPAGATIONPOLICY_PATH,
            review(
                ("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
                "propagationpolicies",
                json!({"metadata": {"name": "p", "namespace": "team-a"}, "spec": {
                    "resourceSelectors": empty_objects}}),
                json!({}),
            ),
        ),
        (
            "quota: reservations of empty maps",
            KARMADAQUOTA_PATH,
            review(
                ("quota.karmada.io", "v1alpha1", "KarmadaQuota"),
                "karmadaquotas",
                json!({"apiVersion": "quota.karmada.io/v1alpha1", "kind": "KarmadaQuota",
                    "metadata": {"name": "q", "namespace": "team-a"},
                    "spec": {"hard": {"requests.cpu": "1"}},
                    "status": {"reservations": (0..N).map(|i| json!({
                        "reservedBy": {"name": "b", "uid": format!("{i}")}, "generation": 1,
                        "reserved": {}, "expirationTime": "2030-01-01T00:00:00Z"})).collect::<Vec<_>>()}}),
                json!({}),
            ),
        ),
    ];
    out.push((
        "quota: annotations of tiny distinct keys",
        KARMADAQUOTA_PATH,
        review(
            ("quota.karmada.io", "v1alpha1", "KarmadaQuota"),
            "karmadaquotas",
            json!({"metadata": {"name": "q", "namespace": "team-a", "annotations": labels},
                "spec": {"hard": {"requests.cpu": "1"}}}),
            json!({}),
        ),
    ));
    out
}

fn decode(path: &str, body: &[u8]) {
    match path {
        RESOURCEBINDING_PATH => drop(decode_binding_review(body)),
        PROPAGATIONPOLICY_PATH => drop(decode_policy_review(body)),
        _ => drop(decode_quota_review(body)),
    }
}

#[test]
fn decoding_stays_under_the_charged_estimate() {
    if let (Ok(path), Ok(file)) = (std::env::var(CHILD_PATH), std::env::var(CHILD_FILE)) {
        return child(&path, &file);
    }
    let mut worst = 0.0f64;
    for (name, path, body) in shapes() {
        let estimate = decoded_estimate(path, &body, 100_000).expect("weighed");
        let peak = peak_in_child(name, path, &body);
        let ratio = peak as f64 / estimate as f64;
        worst = worst.max(ratio);
        println!(
            "{name}: body {} B, decoded peak {} B ({:.1}× body), estimate {} B ({:.2} of it)",
            body.len(),
            peak,
            peak as f64 / body.len() as f64,
            estimate,
            ratio
        );
        assert!(
            peak <= estimate,
            "{name}: decoding took {peak} bytes, more than the {estimate} charged"
        );
    }
    println!("worst peak / estimate: {worst:.2}");
}

#[test]
fn a_wide_options_list_and_a_binding_status_cost_next_to_nothing() {
    let wide: Vec<Value> = (0..300_000).map(|_| json!([])).collect();
    let small = binding(json!({"resource": resource()}), json!({}), json!({}));
    let plain = binding_review(small.clone(), json!({}));
    let with_options = binding_review(
        small,
        json!({"options": {"kind": "CreateOptions", "x": wide}}),
    );
    let with_status = binding_review(
        binding(
            json!({"resource": resource()}),
            json!({}),
            json!({"aggregatedStatus": wide}),
        ),
        json!({}),
    );
    let base = peak_in_child("plain", RESOURCEBINDING_PATH, &plain);
    for (name, body) in [("options", with_options), ("status", with_status)] {
        assert!(body.len() > 900_000, "the {name} body is not wide");
        let req = decode_binding_review(&body).expect("decoded");
        assert!(req.options.is_none());
        let peak = peak_in_child(name, RESOURCEBINDING_PATH, &body);
        println!(
            "wide {name}: body {} B, decoded peak {peak} B (plain: {base} B)",
            body.len()
        );
        // As a JSON tree, 300 000 empty lists are ~20 MB.
        assert!(
            peak < base + 256 * 1024,
            "a wide {name} cost {peak} bytes to decode (a plain review {base})"
        );
        let estimate = decoded_estimate(RESOURCEBINDING_PATH, &body, 10_000)
            .expect("a skipped list is never counted against --max-list-items");
        assert!(
            estimate < body.len() + 256 * 1024,
            "the {name} was weighed: {estimate}"
        );
    }
}
