//! The router, request by request: AdmissionReview JSON in, `allowed` and `status` out.

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::json;
use tower::ServiceExt;

use super::*;
use crate::admission::RESOURCEBINDING_PATH;

fn cpu_quota(hard: &str, used: &str) -> KarmadaQuota {
    mk_quota(
        "compute",
        &[("requests.cpu", hard)],
        &[("requests.cpu", used)],
    )
}

#[tokio::test]
async fn allows_fitting_create_and_records_one_entry() {
    let h = Harness::new(&[cpu_quota("10", "2")]);
    let resp = h
        .review_binding(create_rb(mk_binding("web", "uid-web", 1, 2, "1", "")))
        .await;
    assert_eq!(resp["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
    assert!(verdict(&resp).0, "{resp}");
    assert_eq!(h.store.writes.load(Ordering::SeqCst), 0, "no status write");
    assert_eq!(h.batches.creates.load(Ordering::SeqCst), 1, "one batch");
    let entries = h.entries_of("compute");
    assert_eq!(entries.len(), 1);
    let entry = &entries[0];
    assert_eq!(entry.reserved_by.uid, "uid-web");
    assert_eq!(entry.reserved_by.name, "web");
    assert_eq!(entry.reserved_by.kind, "ResourceBinding");
    assert_eq!(entry.generation, 1);
    assert_eq!(entry.reserved.to_string(), "requests.cpu=2");
    assert_eq!(entry.expiration_time, NOW + 60);
    assert_eq!(h.effective("compute").to_string(), "requests.cpu=4");
}

#[tokio::test]
async fn denies_over_limit_with_the_exact_message_and_writes_nothing() {
    let h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "10"), ("pods", "5")],
        &[("requests.cpu", "9"), ("pods", "4")],
    )]);
    let resp = h
        .review_binding(create_rb(mk_binding("web", "uid-web", 1, 2, "1", "")))
        .await;
    assert_eq!(
        verdict(&resp),
        (
            false,
            403,
            "QuotaExceeded".to_owned(),
            "exceeded quota: compute, requested: pods=2,requests.cpu=2, used: pods=4,requests.cpu=9, \
             limited: pods=5,requests.cpu=10"
                .to_owned()
        )
    );
    assert_eq!(h.store.writes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn scale_down_is_allowed_even_above_a_lowered_limit() {
    let h = Harness::new(&[cpu_quota("2", "5")]);
    let old = mk_binding("web", "uid-web", 1, 5, "1", "");
    let new = mk_binding("web", "uid-web", 2, 3, "1", "");
    let resp = h.review_binding(update_rb(old, new)).await;
    assert!(verdict(&resp).0, "{resp}");
    assert_eq!(
        h.store.writes.load(Ordering::SeqCst),
        0,
        "a zero delta writes nothing"
    );
}

#[tokio::test]
async fn no_quota_in_the_namespace_is_allowed() {
    let h = Harness::new(&[]);
    let resp = h
        .review_binding(create_rb(mk_binding("web", "uid-web", 1, 200, "64", "")))
        .await;
    assert!(verdict(&resp).0, "{resp}");
}

#[tokio::test]
async fn malformed_json_is_a_400() {
    let h = Harness::new(&[cpu_quota("10", "0")]);
    let (code, body) = h.post(RESOURCEBINDING_PATH, b"{not json".to_vec()).await;
    assert_eq!(code, StatusCode::OK);
    let (allowed, code, reason, message) = verdict(&body["response"]);
    assert!(!allowed);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    assert!(
        message.starts_with("malformed AdmissionReview"),
        "{message}"
    );
    assert_eq!(body["kind"], "AdmissionReview");
    assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
}

#[tokio::test]
async fn review_without_request_is_a_400() {
    let h = Harness::new(&[cpu_quota("10", "0")]);
    let review = json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"});
    let (_, body) = h
        .post(RESOURCEBINDING_PATH, review.to_string().into_bytes())
        .await;
    let (allowed, code, _, message) = verdict(&body["response"]);
    assert!(!allowed);
    assert_eq!(code, 400);
    assert_eq!(message, "AdmissionReview has no request");
}

#[tokio::test]
async fn invalid_binding_is_a_400_naming_it() {
    let h = Harness::new(&[cpu_quota("10", "0")]);
    let mut rb = mk_binding("web", "uid-web", 1, 2, "1", "");
    rb["spec"]["replicaRequirements"]["resourceRequest"]["cpu"] = json!("1.1.M");
    let resp = h.review_binding(create_rb(rb)).await;
    let (allowed, code, reason, message) = verdict(&resp);
    assert!(!allowed);
    assert_eq!((code, reason.as_str()), (400, "BadRequest"));
    assert!(
        message.starts_with("ResourceBinding team-a/web is not a valid ResourceBinding:"),
        "{message}"
    );
    assert_eq!(resp["uid"], "705ab4f5-6393-11e8-b7cc-42010a800002");
}

#[tokio::test]
async fn binding_without_uid_is_a_400() {
    let h = Harness::new(&[cpu_quota("10", "0")]);
    let mut rb = mk_binding("web", "", 1, 2, "1", "");
    rb["metadata"].as_object_mut().unwrap().remove("uid");
    let (allowed, code, _, message) = verdict(&h.review_binding(create_rb(rb)).await);
    assert!(!allowed);
    assert_eq!(code, 400);
    assert_eq!(message, "ResourceBinding team-a/web has no metadata.uid");
}

#[tokio::test]
async fn oversized_body_is_a_413() {
    let h = Harness::new(&[cpu_quota("10", "0")]);
    let mut rb = mk_binding("web", "uid-web", 1, 2, "1", "");
    rb["metadata"]["annotations"] = json!({"big": "x".repeat(100 * 1024)});
    let (code, _) = h
        .post(RESOURCEBINDING_PATH, create_rb(rb).to_string().into_bytes())
        .await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
}

#[tokio::test]
async fn other_paths_are_404() {
    let h = Harness::new(&[]);
    let (code, _) = h.post("/validate/pods", b"{}".to_vec()).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let resp = app(h.state.clone())
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn review_of_another_kind_is_allowed() {
    let h = Harness::new(&[cpu_quota("0", "0")]);
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS},
                     "spec": {"containers": [{"name": "c", "image": "x"}]}});
    let review = mk_review("CREATE", ("", "v1", "Pod"), "pods", Some(pod), None, false);
    assert!(verdict(&h.review_binding(review.clone()).await).0);
    assert!(verdict(&h.review_quota(review).await).0);
    // even when the object would not decode as the path's kind
    let odd = json!({"apiVersion": "v1", "kind": "Odd", "metadata": {"name": "o"}, "spec": {"replicas": "many"}});
    let review = mk_review("CREATE", ("", "v1", "Odd"), "odds", Some(odd), None, false);
    assert!(verdict(&h.review_binding(review).await).0);
}

#[tokio::test]
async fn delete_is_allowed() {
    let h = Harness::new(&[cpu_quota("0", "0")]);
    let rb = mk_binding("web", "uid-web", 1, 2, "1", "");
    let review = mk_review("DELETE", RB, "resourcebindings", None, Some(rb), false);
    assert!(verdict(&h.review_binding(review).await).0);
}

#[tokio::test]
async fn dry_run_decides_and_writes_nothing() {
    let h = Harness::new(&[cpu_quota("3", "0")]);
    let fits = mk_review(
        "CREATE",
        RB,
        "resourcebindings",
        Some(mk_binding("a", "uid-a", 1, 2, "1", "")),
        None,
        true,
    );
    assert!(verdict(&h.review_binding(fits).await).0);
    let over = mk_review(
        "CREATE",
        RB,
        "resourcebindings",
        Some(mk_binding("b", "uid-b", 1, 4, "1", "")),
        None,
        true,
    );
    let (allowed, code, _, message) = verdict(&h.review_binding(over).await);
    assert!(!allowed);
    assert_eq!(code, 403);
    assert!(message.starts_with("exceeded quota: compute"), "{message}");
    assert_eq!(h.store.writes.load(Ordering::SeqCst), 0);
    assert_eq!(h.entries("compute"), 0);
}

#[tokio::test]
async fn apiserver_retry_of_the_same_generation_does_not_double_count() {
    let h = Harness::new(&[cpu_quota("3", "0")]);
    for _ in 0..2 {
        let resp = h
            .review_binding(create_rb(mk_binding("web", "uid-web", 1, 2, "1", "")))
            .await;
        assert!(verdict(&resp).0, "{resp}");
    }
    assert_eq!(h.entries("compute"), 1);
    assert_eq!(h.effective("compute").to_string(), "requests.cpu=2");
}

#[tokio::test]
async fn store_failure_is_never_an_allow() {
    let h = Harness::new(&[cpu_quota("10", "0")]);
    h.batches.fail.store(true, Ordering::SeqCst);
    let (allowed, code, reason, message) = verdict(
        &h.review_binding(create_rb(mk_binding("web", "uid-web", 1, 1, "1", "")))
            .await,
    );
    assert!(!allowed);
    assert_eq!((code, reason.as_str()), (500, "InternalError"));
    assert!(
        message.starts_with(
            "ResourceBinding team-a/web: KarmadaQuotaReservation kq-system/kqr-000000000001:"
        ),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn decision_timeout_is_a_refusal() {
    let h = Harness::with_timeout(&[cpu_quota("10", "0")], Duration::from_millis(500));
    h.batches.hang.store(true, Ordering::SeqCst);
    let (allowed, code, reason, message) = verdict(
        &h.review_binding(create_rb(mk_binding("web", "uid-web", 1, 1, "1", "")))
            .await,
    );
    assert!(!allowed);
    assert_eq!((code, reason.as_str()), (504, "Timeout"));
    assert_eq!(
        message,
        "ResourceBinding team-a/web: no quota decision within 500ms"
    );
}

#[tokio::test]
async fn unsynced_cache_refuses() {
    let h = Harness::new(&[]);
    let (cache, _writer) = QuotaCache::with_writer();
    let mut state = h.state.clone();
    state.cache = cache;
    let h = Harness { state, ..h };
    let (allowed, code, _, message) = verdict(
        &h.review_binding(create_rb(mk_binding("web", "uid-web", 1, 1, "1", "")))
            .await,
    );
    assert!(!allowed);
    assert_eq!(code, 503);
    assert!(message.contains("has not synced"), "{message}");
}

#[tokio::test]
async fn an_invalid_quota_refuses_its_namespace_naming_it() {
    let mut bad = cpu_quota("10", "0");
    bad.metadata.name = Some("broken".to_owned());
    bad.spec.hard = list(&[("limits.cpu", "4")]);
    let h = Harness::new(&[cpu_quota("10", "0"), bad]);
    let (allowed, code, _, message) = verdict(
        &h.review_binding(create_rb(mk_binding("web", "uid-web", 1, 1, "1", "")))
            .await,
    );
    assert!(!allowed);
    assert_eq!(code, 500);
    assert!(
        message.starts_with(
            "ResourceBinding team-a/web: KarmadaQuota team-a/broken cannot be enforced: \
             spec.hard[limits.cpu]:"
        ),
        "{message}"
    );
    assert_eq!(h.store.writes.load(Ordering::SeqCst), 0);
}

fn quota_json(hard: Value, scope: Option<Value>) -> Value {
    let mut q = json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": "new", "namespace": NS},
        "spec": {"hard": hard}
    });
    if let Some(s) = scope {
        q["spec"]["scopeSelector"] = json!({"matchExpressions": [s]});
    }
    q
}

async fn quota_verdict(h: &Harness, q: Value) -> (bool, u64, String, String) {
    let review = mk_review("CREATE", KQ, "karmadaquotas", Some(q), None, false);
    verdict(&h.review_quota(review).await)
}

#[tokio::test]
async fn karmadaquota_validation_names_the_field() {
    let h = Harness::new(&[]);
    let cases = [
        (
            quota_json(
                json!({"requests.cpu": "1"}),
                Some(json!({"scopeName": "PriorityClass", "operator": "Within", "values": ["a"]})),
            ),
            "spec.scopeSelector.matchExpressions[0].operator: Unsupported value: \"Within\"",
        ),
        (
            quota_json(
                json!({"requests.cpu": "1"}),
                Some(json!({"scopeName": "PriorityClass", "operator": "In"})),
            ),
            "spec.scopeSelector.matchExpressions[0].values: Required value",
        ),
        (
            quota_json(json!({"requests.cpu": "-1"}), None),
            "spec.hard[requests.cpu]:",
        ),
        (
            quota_json(json!({"limits.cpu": "4"}), None),
            "spec.hard[limits.cpu]: Invalid value: \"limits.cpu\": a ResourceBinding carries requests only",
        ),
    ];
    for (q, fragment) in cases {
        let (allowed, code, reason, message) = quota_verdict(&h, q).await;
        assert!(!allowed, "{message}");
        assert_eq!((code, reason.as_str()), (422, "Invalid"));
        assert!(
            message.starts_with("KarmadaQuota \"team-a/new\" is invalid: "),
            "{message}"
        );
        assert!(message.contains(fragment), "{message} lacks {fragment}");
    }
}

#[tokio::test]
async fn karmadaquota_errors_are_all_reported_joined() {
    let h = Harness::new(&[]);
    let q = quota_json(json!({"limits.cpu": "4", "pods": "-1"}), None);
    let (_, _, _, message) = quota_verdict(&h, q).await;
    assert!(
        message.contains("spec.hard[limits.cpu]") && message.contains("; spec.hard[pods]"),
        "{message}"
    );
}

#[tokio::test]
async fn valid_karmadaquota_is_allowed_with_a_warning_when_not_alone() {
    let h = Harness::new(&[]);
    let q = quota_json(json!({"requests.cpu": "10"}), None);
    let review = mk_review("CREATE", KQ, "karmadaquotas", Some(q.clone()), None, false);
    let resp = h.review_quota(review.clone()).await;
    assert!(verdict(&resp).0);
    assert!(resp.get("warnings").is_none(), "{resp}");

    let h = Harness::new(&[cpu_quota("10", "0")]);
    let resp = h.review_quota(review).await;
    assert!(verdict(&resp).0);
    let warning = resp["warnings"][0].as_str().unwrap();
    assert!(
        warning.starts_with("namespace team-a already has KarmadaQuota \"compute\""),
        "{warning}"
    );
    // updating the one quota itself is no reason to warn
    let mut own = quota_json(json!({"requests.cpu": "20"}), None);
    own["metadata"]["name"] = json!("compute");
    let review = mk_review("UPDATE", KQ, "karmadaquotas", Some(own), Some(q), false);
    let resp = h.review_quota(review).await;
    assert!(verdict(&resp).0);
    assert!(resp.get("warnings").is_none(), "{resp}");
}

#[tokio::test]
async fn metrics_count_decisions() {
    let h = Harness::new(&[cpu_quota("1", "0")]);
    h.review_binding(create_rb(mk_binding("a", "uid-a", 1, 1, "1", "")))
        .await;
    h.review_binding(create_rb(mk_binding("b", "uid-b", 1, 1, "1", "")))
        .await;
    let get = |result, reason| {
        h.state
            .metrics
            .decisions
            .get_or_create(&crate::metrics::DecisionLabels {
                kind: "resourcebinding",
                result,
                reason,
            })
            .get()
    };
    assert_eq!(get("allowed", "Allowed"), 1);
    assert_eq!(get("denied", "QuotaExceeded"), 1);
}
