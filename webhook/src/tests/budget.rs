//! The body limit of each path, the list cap and the decode budget, in front of every
//! handler: a policy body of a binding's size is refused, a list over `--max-list-items`
//! is a 400 echoing the review's uid, and a review the decode budget cannot hold now is
//! a 503 (one larger than the whole budget a 413), while one that fits is answered.

use serde_json::json;

use super::*;
use crate::admission::{DecodeBudget, KARMADAQUOTA_PATH, RESOURCEBINDING_PATH};
use crate::policy::PROPAGATIONPOLICY_PATH;

const UID: &str = "705ab4f5-6393-11e8-b7cc-42010a800002";

fn harness(settings: Settings) -> Harness {
    let mut h = Harness::new(&[mk_quota(
        "q",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    )]);
    h.state.settings = Settings {
        decision_timeout: h.state.settings.decision_timeout,
        ..settings
    };
    h
}

fn policy_review(cluster_names: Vec<String>) -> Value {
    let policy = json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "p", "namespace": NS},
        "spec": {"resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
                 "placement": {"clusterAffinity": {"clusterNames": cluster_names}}}
    });
    mk_review(
        "CREATE",
        ("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
        "propagationpolicies",
        Some(policy),
        None,
        true,
    )
}

fn names(n: usize, len: usize) -> Vec<String> {
    (0..n).map(|i| format!("{i:0len$}")).collect()
}

#[tokio::test]
async fn each_path_has_its_own_body_limit() {
    let h = harness(Settings {
        max_body_bytes: 3 * 1024 * 1024,
        max_policy_body_bytes: 256 * 1024,
        max_quota_body_bytes: 512 * 1024,
        ..Settings::default()
    });
    // ~400 KiB: over the policy limit, under the binding limit.
    let big = policy_review(names(2_000, 200)).to_string().into_bytes();
    assert!(big.len() > 300 * 1024 && big.len() < 1024 * 1024);
    let (code, _) = h.post(PROPAGATIONPOLICY_PATH, big.clone()).await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    let too_large = h
        .state
        .metrics
        .decisions
        .get_or_create(&crate::metrics::DecisionLabels {
            kind: "propagationpolicy",
            result: crate::metrics::ERROR,
            reason: crate::admission::REASON_TOO_LARGE,
        })
        .get();
    assert_eq!(too_large, 1, "counted");
    let (code, _) = h.post(KARMADAQUOTA_PATH, big.clone()).await;
    assert_eq!(code, StatusCode::OK, "under the quota path's limit");
    let (code, body) = h.post(RESOURCEBINDING_PATH, big).await;
    assert_eq!(code, StatusCode::OK, "the binding path reads it: {body}");
    // A real policy passes.
    let (code, body) = h
        .post(
            PROPAGATIONPOLICY_PATH,
            policy_review(names(50, 12)).to_string().into_bytes(),
        )
        .await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

#[tokio::test]
async fn a_list_over_the_cap_is_a_400_that_names_the_flag_and_echoes_the_uid() {
    let h = harness(Settings {
        max_list_items: 1_000,
        ..Settings::default()
    });
    for (path, review) in [
        (PROPAGATIONPOLICY_PATH, policy_review(names(1_001, 1))),
        (RESOURCEBINDING_PATH, {
            let mut rb = mk_binding("web", "uid-web", 1, 1, "1", "");
            rb["spec"]["clusters"] = json!(
                (0..1_001)
                    .map(|i| json!({"name": format!("m{i}")}))
                    .collect::<Vec<_>>()
            );
            create_rb(rb)
        }),
    ] {
        let (code, body) = h.post(path, review.to_string().into_bytes()).await;
        assert_eq!(code, StatusCode::OK, "{path}");
        let r = &body["response"];
        assert_eq!(r["uid"], UID, "{path}: {body}");
        assert_eq!(r["allowed"], false, "{path}");
        assert_eq!(r["status"]["code"], 400, "{path}");
        assert!(
            r["status"]["message"]
                .as_str()
                .unwrap()
                .contains("--max-list-items"),
            "{path}: {body}"
        );
        assert_eq!(body["apiVersion"], "admission.k8s.io/v1");
    }
    // At the cap: read.
    let (_, body) = h
        .post(
            PROPAGATIONPOLICY_PATH,
            policy_review(names(1_000, 1)).to_string().into_bytes(),
        )
        .await;
    assert_eq!(body["response"]["allowed"], true, "{body}");
}

#[tokio::test]
async fn a_review_the_decode_budget_cannot_hold_is_refused_before_decoding() {
    let budget = DecodeBudget::new(1024 * 1024);
    let h = harness(Settings {
        decode_budget: budget.clone(),
        ..Settings::default()
    });
    let review = create_rb(mk_binding("web", "uid-web", 1, 1, "1", ""));
    let body = review.to_string().into_bytes();
    assert!(verdict(&h.review_binding(review.clone()).await).0);
    assert_eq!(budget.available(), 1024 * 1024, "released after the answer");

    let held = budget.hold(1024 * 1024 - 1024);
    let (code, text) = h.post(RESOURCEBINDING_PATH, body.clone()).await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{text}");
    drop(held);
    let (code, _) = h.post(RESOURCEBINDING_PATH, body).await;
    assert_eq!(code, StatusCode::OK);

    // 9 000 cluster names (~2.3 MB estimated) weigh more than the whole budget.
    let (code, _) = h
        .post(
            PROPAGATIONPOLICY_PATH,
            policy_review(names(9_000, 1)).to_string().into_bytes(),
        )
        .await;
    assert_eq!(code, StatusCode::PAYLOAD_TOO_LARGE);
    let refused = h
        .state
        .metrics
        .decisions
        .get_or_create(&crate::metrics::DecisionLabels {
            kind: "resourcebinding",
            result: crate::metrics::ERROR,
            reason: crate::admission::REASON_BUDGET,
        })
        .get();
    assert_eq!(refused, 1);
}
