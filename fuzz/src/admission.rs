//! `admission`: an AdmissionReview body as the webhook decodes it
//! ([`decode_binding_review`], [`decode_quota_review`]), then what it computes from the
//! request before it looks at any quota: the charge of the binding (core's
//! `BindingCharge::compute`, plural from the built-in table) and the quota's validation.
//!
//! Laws:
//! - a decoded review is a request of the path's kind, or a clear answer: a refusal with
//!   code 400, reason `BadRequest` and a message, or an allow for a review of another kind
//!   (whose `request.kind` is that other kind); the answer encodes as an
//!   AdmissionReview that decodes again with the same verdict;
//! - a binding's charge is never negative, charges `pods` = Σ replicas of its parts, and
//!   its per-cluster split never exceeds the total.

use karmada_quota_core::Quantity;
use karmada_quota_core::binding::ResourceBindingSpec;
use karmada_quota_core::scope::ScopeSelector;
use karmada_quota_core::usage::{BindingCharge, builtin_plural, count_name};
use karmada_quota_crds::convert::validate_spec;
use karmada_quota_webhook::admission::{
    REASON_BAD_REQUEST, decode_binding_review, decode_quota_review,
};
use kube::core::GroupVersionKind;
use kube::core::admission::{AdmissionResponse, Operation};

/// Runs one input.
pub fn run(data: &[u8]) {
    match decode_binding_review(data) {
        Ok(req) => {
            assert_eq!(
                (req.kind.group.as_str(), req.kind.kind.as_str()),
                ("work.karmada.io", "ResourceBinding")
            );
            if matches!(req.operation, Operation::Create | Operation::Update) {
                if let Some(new) = &req.object {
                    check_charge(&new.spec);
                }
                if let Some(old) = &req.old_object {
                    check_charge(&old.spec);
                }
            }
        }
        Err(answer) => check_answer(data, &answer, ("work.karmada.io", "ResourceBinding")),
    }
    match decode_quota_review(data) {
        Ok(req) => {
            assert_eq!(
                (req.kind.group.as_str(), req.kind.kind.as_str()),
                ("quota.karmada.io", "KarmadaQuota")
            );
            if let Some(new) = &req.object {
                let _ = validate_spec(&new.spec);
            }
        }
        Err(answer) => check_answer(data, &answer, ("quota.karmada.io", "KarmadaQuota")),
    }
}

/// The kind of a review's request, and nothing else.
#[derive(serde::Deserialize)]
struct KindOnly {
    request: Option<RequestKind>,
}

#[derive(serde::Deserialize)]
struct RequestKind {
    kind: GroupVersionKind,
}

/// An answer given without a request is a clear refusal, or an allow of another kind.
fn check_answer(body: &[u8], answer: &AdmissionResponse, (group, kind): (&str, &str)) {
    if answer.allowed {
        // Only `request.kind` is read: the rest of a review of another kind (an object of
        // that kind) need not decode.
        let other = serde_json::from_slice::<KindOnly>(body)
            .ok()
            .and_then(|r| r.request)
            .unwrap_or_else(|| panic!("allowed a {kind} review without a request.kind"));
        assert!(
            (other.kind.group.as_str(), other.kind.kind.as_str()) != (group, kind),
            "allowed a {kind} review as another kind"
        );
    }
    crate::parts::check_refusal(answer, REASON_BAD_REQUEST);
}

/// What a binding costs, with the laws of the charge.
fn check_charge(spec: &ResourceBindingSpec) {
    let t = &spec.resource;
    let count = builtin_plural(&t.api_version, &t.kind).map(|p| count_name(&t.api_version, p));
    let charge = BindingCharge::compute(spec, count.as_deref());
    let Some(usage) = charge.scoped(&ScopeSelector::default()) else {
        panic!("the empty scope matches every binding");
    };
    for (name, q) in usage.total.iter() {
        assert!(!q.is_negative(), "binding charged {name}={q}: {spec:?}");
    }
    if charge.workload {
        let replicas: i64 = charge
            .parts
            .iter()
            .fold(0i64, |a, p| a.saturating_add(p.replicas));
        let pods = usage.total.get_or_zero("pods");
        assert_eq!(
            pods,
            Quantity::from_units(replicas, Default::default()),
            "pods charged differ from Σ replicas"
        );
        for (cluster, list) in &usage.clusters {
            for (name, q) in list.iter() {
                assert!(
                    *q <= usage.total.get_or_zero(name),
                    "cluster {cluster} holds {name}={q}, more than the total"
                );
            }
        }
    }
}
