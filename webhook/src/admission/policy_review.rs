//! The (Cluster)PropagationPolicy review: `/validate/propagationpolicy` and
//! `/validate/clusterpropagationpolicy`. Decodes the policy, dry-runs it against the
//! quotas (`crate::policy::check`) and answers with warnings, or a refusal under
//! `--policy-enforcement=deny`; a stale view skips the check with a warning.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use karmada_quota_shell::untrusted::clip;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use tokio::time::Instant;
use tracing::field::Empty;

use super::answer::{Answer, allowed, bad_request, bad_review, finish, refused};
use super::decode::{object_key, other_kind};
use super::wire::{self, Named};
use super::{AppState, KIND_POLICY};
use crate::metrics::DENIED;
use crate::policy::{Enforcement, POLICY_GROUP, PROPAGATIONPOLICY_PATH, Verdict};

/// What a policy review holds before the dry run: the request and its policy, or the
/// answer given without a dry run.
type PolicyReview = Result<
    (
        AdmissionRequest<DynamicObject>,
        karmada_quota_interpreter::policy::Policy,
        String,
    ),
    Box<Answer>,
>;

/// The PropagationPolicy / ClusterPropagationPolicy review in `body`: the request, the
/// policy (kind from the request, namespace from the request when the object has none)
/// and how messages name it; or the answer given without a dry run (400 for a malformed
/// review or object, an allow for another kind or an operation that is not judged). The
/// review is read as typed fields ([`super::wire`]: no generic tree, `request.options`
/// never read), the policy straight from its slice of the body; the request keeps no
/// object.
fn decode_policy(body: &[u8]) -> PolicyReview {
    let raw = match wire::read(body) {
        Ok(Some(raw)) => raw,
        Ok(None) => return Err(Box::new(bad_review("AdmissionReview has no request"))),
        Err(e) => {
            return Err(Box::new(bad_review(&format!(
                "cannot decode the AdmissionReview: {}",
                clip(&e.to_string())
            ))));
        }
    };
    let req = raw.request;
    if req.kind.group != POLICY_GROUP
        || !matches!(
            req.kind.kind.as_str(),
            "PropagationPolicy" | "ClusterPropagationPolicy"
        )
    {
        return Err(Box::new(other_kind(&req, PROPAGATIONPOLICY_PATH)));
    }
    if !crate::policy::judged(&req) {
        return Err(Box::new(allowed(&req, "NotChecked")));
    }
    let key = object_key(&req, Named::of(raw.object).as_ref());
    let what = format!("{} {}", req.kind.kind, key.trim_start_matches('/'));
    let Some(object) = raw.object else {
        return Err(Box::new(bad_request(
            &req,
            &format!("{what}: the review has no object"),
        )));
    };
    let mut policy: karmada_quota_interpreter::policy::Policy =
        match serde_json::from_str(object.get()) {
            Ok(p) => p,
            Err(e) => {
                return Err(Box::new(bad_request(
                    &req,
                    &format!("{what}: cannot read the policy: {}", clip(&e.to_string())),
                )));
            }
        };
    policy.kind.clone_from(&req.kind.kind);
    if policy.metadata.namespace.is_empty() {
        policy.metadata.namespace = req.namespace.clone().unwrap_or_default();
    }
    Ok((req, policy, what))
}

/// The policy review in `body` as the webhook reads it before its dry run (see
/// [`crate::policy::check`]): the request and its policy, or the answer given without
/// one. Pure: no cache, no clock, no I/O.
pub fn decode_policy_review(
    body: &[u8],
) -> Result<
    (
        Box<AdmissionRequest<DynamicObject>>,
        karmada_quota_interpreter::policy::Policy,
    ),
    Box<AdmissionResponse>,
> {
    decode_policy(body)
        .map(|(req, policy, _)| (Box::new(req), policy))
        .map_err(|a| Box::new(a.response))
}

/// The handler of both policy paths: one review, answered and counted.
#[tracing::instrument(name = "review", skip_all, fields(kind = KIND_POLICY, policy = Empty))]
pub(super) async fn validate_policy(
    State(st): State<AppState>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let started = Instant::now();
    let answer = review_policy(&st, &body, started + st.settings.decision_timeout).await;
    finish(&st, KIND_POLICY, started, answer)
}

/// The PropagationPolicy check (see [`crate::policy`]): a dry run, never a refusal unless
/// `--policy-enforcement=deny` and a template would not fit.
async fn review_policy(st: &AppState, body: &[u8], deadline: Instant) -> Answer {
    let (req, policy, what) = match decode_policy(body) {
        Ok(decoded) => decoded,
        Err(answer) => return *answer,
    };
    tracing::Span::current().record("policy", what.as_str());
    let Some(world) = &st.policies else {
        return allowed(&req, "NotChecked");
    };
    // The namespace's KarmadaQuotas and the KarmadaClusterQuotas selecting it.
    let quotas = |ns: &str| {
        let own = st.cache.in_namespace(ns);
        let clusters = st.cache.cluster_quotas_covering(ns);
        own.iter()
            .filter_map(|c| c.parsed.as_ref().ok().map(|p| p.state.clone()))
            .chain(
                clusters
                    .iter()
                    .filter_map(|c| c.parsed.as_ref().ok().map(|p| p.state.clone())),
            )
            .collect()
    };
    let verdict = match st.cache.stale(st.settings.max_cache_staleness) {
        Some(stale) => Verdict::Skipped(stale.to_string()),
        None => {
            crate::policy::check(
                world.as_ref(),
                &policy,
                quotas,
                st.settings.policy_max_templates,
                deadline,
                &st.settings.pod_less_groups,
            )
            .await
        }
    };
    match verdict {
        Verdict::Fits => allowed(&req, "Fits"),
        Verdict::Skipped(why) => {
            tracing::info!(policy = %what, %why, "quota check of a policy skipped");
            let mut answer = allowed(&req, "CheckSkipped");
            answer.response.warnings = Some(vec![format!(
                "karmada-quota: the quota check of this policy was skipped: {why}"
            )]);
            answer
        }
        Verdict::Exceeds(lines) => match st.settings.policy_enforcement {
            Enforcement::Warn => {
                let mut answer = allowed(&req, "ExceedsWarned");
                answer.response.warnings = Some(lines);
                answer
            }
            Enforcement::Deny => refused(
                &req,
                karmada_quota_core::decision::CODE_FORBIDDEN,
                "QuotaExceeded",
                &format!("{what}: {}", lines.join("; ")),
                DENIED,
                "QuotaExceeded",
            ),
        },
    }
}
