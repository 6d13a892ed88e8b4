//! `cluster_quota`: a KarmadaClusterQuota AdmissionReview as the webhook decodes it
//! ([`decode_cluster_quota_review`]) and validates it (`crds::convert::validate_cluster_spec`,
//! its `namespaceSelector` converted and checked), then the selector matched against
//! namespace labels from the input — the selection that decides which namespaces' bindings
//! the quota is charged with.
//!
//! Input: `<AdmissionReview JSON> 0xFF <{"<namespace>": {"<label>": "<value>"}} JSON>`.
//!
//! Laws:
//! - a decoded review is a request for a KarmadaClusterQuota; any other answer is an allow
//!   (another kind) or a 400 with a message;
//! - a valid spec has a non-empty selector whose operators are `In`/`NotIn`/`Exists`/
//!   `DoesNotExist`, with values exactly for `In`/`NotIn`; errors name `spec.` fields;
//! - the selector matches a namespace exactly when Kubernetes' rules say so (checked
//!   against a separate statement of them), a namespace of unknown labels never;
//! - without a status the quota's state is the validated one, covering by that selector.

use std::collections::BTreeMap;

use karmada_quota_core::placement::LabelSelector;
use karmada_quota_core::selection::Covers;
use karmada_quota_crds::convert::{cluster_quota_state, validate_cluster_spec};
use karmada_quota_webhook::admission::{REASON_BAD_REQUEST, decode_cluster_quota_review};

use crate::parts::{check_refusal, split};

type Labels = BTreeMap<String, String>;

/// Runs one input.
pub fn run(data: &[u8]) {
    let [review, namespaces] = split::<2>(data);
    let namespaces: BTreeMap<String, Labels> =
        serde_json::from_slice(namespaces).unwrap_or_default();
    let req = match decode_cluster_quota_review(review) {
        Ok(req) => req,
        Err(answer) => return check_refusal(&answer, REASON_BAD_REQUEST),
    };
    assert_eq!(
        (req.kind.group.as_str(), req.kind.kind.as_str()),
        ("quota.karmada.io", "KarmadaClusterQuota")
    );
    let Some(quota) = &req.object else { return };
    let selector = match validate_cluster_spec(quota) {
        Ok((selector, _)) => selector,
        Err(errors) => {
            assert!(!errors.is_empty(), "refused without an error");
            for e in &errors {
                assert!(e.field.starts_with("spec."), "error outside spec: {e}");
            }
            return;
        }
    };
    assert!(
        !selector.match_labels.is_empty() || !selector.match_expressions.is_empty(),
        "an empty selector was accepted"
    );
    for r in &selector.match_expressions {
        match r.operator.as_str() {
            "In" | "NotIn" => assert!(!r.values.is_empty(), "{} without values", r.operator),
            "Exists" | "DoesNotExist" => {
                assert!(r.values.is_empty(), "{} with values", r.operator);
            }
            other => panic!("operator {other:?} accepted"),
        }
    }
    let covers = Covers::Selected(selector.clone());
    for (ns, labels) in &namespaces {
        assert_eq!(
            selector.matches(labels),
            kubernetes_matches(&selector, labels),
            "selector {selector:?} on namespace {ns} labels {labels:?}"
        );
        assert_eq!(covers.covers(ns, Some(labels)), selector.matches(labels));
        assert!(
            !covers.covers(ns, None),
            "a namespace of unknown labels is covered"
        );
    }
    if quota.status.is_none() {
        let state = cluster_quota_state(quota).expect("a valid spec without status is a state");
        assert_eq!(state.covers, covers);
    }
}

/// Kubernetes' `LabelSelectorAsSelector`, stated separately: every `matchLabels` pair is
/// an `In` of one value; `In` needs the label with a listed value, `NotIn` its absence or
/// an unlisted value, `Exists` / `DoesNotExist` its presence / absence.
fn kubernetes_matches(selector: &LabelSelector, labels: &Labels) -> bool {
    let pairs = selector
        .match_labels
        .iter()
        .map(|(k, v)| (k.as_str(), "In", std::slice::from_ref(v)));
    let expressions = selector
        .match_expressions
        .iter()
        .map(|r| (r.key.as_str(), r.operator.as_str(), r.values.as_slice()));
    pairs.chain(expressions).all(|(key, op, values)| {
        let value = labels.get(key);
        match op {
            "In" => value.is_some_and(|v| values.contains(v)),
            "NotIn" => value.is_none_or(|v| !values.contains(v)),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    })
}
