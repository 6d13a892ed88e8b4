//! Review of the quota objects themselves: `/validate/karmadaquota` and
//! `/validate/karmadaclusterquota`. First who may make the change (`crate::tenancy`: only
//! quota administrators create, delete or change spec, labels or owners), then field-named
//! refusals from crds' validation; warnings for a namespace's second quota and for a
//! selector that selects nothing yet.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use karmada_quota_crds::convert::{validate_cluster_spec, validate_spec};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use karmada_quota_shell::untrusted::clip;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use kube::core::{DynamicObject, Resource};
use tokio::time::Instant;
use tracing::field::Empty;

use super::answer::{Answer, allowed, bad_request, finish, refused};
use super::decode::{CLUSTER_QUOTA, Decoded, QUOTA, decode, object_key};
use super::review_span::record_quota;
use super::{
    AppState, CODE_INVALID, KARMADACLUSTERQUOTA_PATH, KARMADAQUOTA_PATH, KIND_CLUSTER_QUOTA,
    KIND_QUOTA, REASON_FORBIDDEN, REASON_INVALID,
};
use crate::metrics::DENIED;

/// The 422 refusal of an invalid object: `what` (kind and name) and every error.
fn invalid<T: Resource, E: ToString>(
    req: &AdmissionRequest<T>,
    what: &str,
    errors: &[E],
) -> Answer {
    let joined = errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    refused(
        req,
        CODE_INVALID,
        REASON_INVALID,
        &format!("{what} is invalid: {joined}"),
        DENIED,
        REASON_INVALID,
    )
}

/// The object of a CREATE or UPDATE of the main resource whose spec changed, or the answer
/// that ends its review here: `NotChecked` (CONNECT, subresources — `status` included:
/// written by the controller, guarded by RBAC alone), 403 (a change only quota
/// administrators may make, by someone else: [`crate::tenancy`]), an allowed DELETE (by an
/// administrator; its `oldObject` is not needed), 400 (no object; `key` names it),
/// `Unchanged` (edits of annotations or finalizers of an existing quota are not
/// re-judged).
fn to_judge<'a, T: Resource, S: PartialEq>(
    st: &AppState,
    req: &'a AdmissionRequest<T>,
    kind: &str,
    key: impl Fn(Option<&kube::core::ObjectMeta>) -> String,
    spec: impl Fn(&T) -> &S,
) -> Result<&'a T, Box<Answer>> {
    if !matches!(
        req.operation,
        Operation::Create | Operation::Update | Operation::Delete
    ) || req.sub_resource.as_deref().is_some_and(|s| !s.is_empty())
    {
        return Err(Box::new(allowed(req, "NotChecked")));
    }
    let parts = |o: &'a T| (spec(o), o.meta());
    if let Some(what) = crate::tenancy::guarded(
        &req.operation,
        req.old_object.as_ref().map(parts),
        req.object.as_ref().map(parts),
    ) {
        let admins = &st.settings.quota_admins;
        let user = req.user_info.username.as_deref();
        let groups = req.user_info.groups.as_deref().unwrap_or_default();
        if !admins.admits(user, groups) {
            let meta = req
                .object
                .as_ref()
                .or(req.old_object.as_ref())
                .map(|o| o.meta());
            let message = admins.refusal(&format!("{kind} {}", key(meta)), what, user, groups);
            tracing::info!(%message, "quota object change refused");
            return Err(Box::new(refused(
                req,
                karmada_quota_core::decision::CODE_FORBIDDEN,
                REASON_FORBIDDEN,
                &message,
                DENIED,
                REASON_NOT_QUOTA_ADMIN,
            )));
        }
    }
    if req.operation == Operation::Delete {
        return Err(Box::new(allowed(req, "Allowed")));
    }
    let Some(new) = req.object.as_ref() else {
        return Err(Box::new(bad_request(
            req,
            &format!("{kind} {}: the review has no object", key(None)),
        )));
    };
    if req
        .old_object
        .as_ref()
        .is_some_and(|old| spec(old) == spec(new))
    {
        return Err(Box::new(allowed(req, "Unchanged")));
    }
    Ok(new)
}

/// Metric reason of that refusal.
const REASON_NOT_QUOTA_ADMIN: &str = "NotQuotaAdmin";

/// The KarmadaQuota handler: one review, answered and counted.
#[tracing::instrument(name = "review", skip_all, fields(kind = KIND_QUOTA, quota = Empty))]
pub(super) async fn validate_quota(
    State(st): State<AppState>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let started = Instant::now();
    let answer = review_quota(&st, &body);
    finish(&st, KIND_QUOTA, started, answer)
}

fn review_quota(st: &AppState, body: &[u8]) -> Answer {
    let req = match decode::<KarmadaQuota>(body, KARMADAQUOTA_PATH, &QUOTA) {
        Decoded::Request(r) => r,
        Decoded::Answer(a) => return *a,
    };
    let either = req.object.as_ref().or(req.old_object.as_ref());
    record_quota(&object_key(&req, either.map(|q| &q.metadata)));
    let new = match to_judge(
        st,
        &req,
        "KarmadaQuota",
        |meta| object_key(&req, meta),
        |q| &q.spec,
    ) {
        Ok(new) => new,
        Err(answer) => return *answer,
    };
    let key = object_key(&req, Some(&new.metadata));
    if let Err(errors) = validate_spec(&new.spec) {
        return invalid(&req, &format!("KarmadaQuota \"{key}\""), &errors);
    }
    let namespace = new
        .metadata
        .namespace
        .as_deref()
        .or(req.namespace.as_deref())
        .unwrap_or_default();
    let name = new.metadata.name.as_deref().unwrap_or(&req.name);
    let others: Vec<String> = st
        .cache
        .in_namespace(namespace)
        .iter()
        .filter(|q| q.name() != name)
        .map(|q| format!("\"{}\"", q.name()))
        .collect();
    let mut answer = allowed(&req, "Allowed");
    if !others.is_empty() {
        answer.response.warnings = Some(vec![format!(
            "namespace {namespace} already has KarmadaQuota {}: a ResourceBinding must fit \
             every quota of its namespace",
            others.join(", ")
        )]);
        answer.reason = "AllowedWithWarning";
    }
    answer
}

/// The KarmadaClusterQuota handler: one review, answered and counted.
#[tracing::instrument(name = "review", skip_all, fields(kind = KIND_CLUSTER_QUOTA, quota = Empty))]
pub(super) async fn validate_cluster_quota(
    State(st): State<AppState>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let started = Instant::now();
    let answer = review_cluster_quota(&st, &body);
    finish(&st, KIND_CLUSTER_QUOTA, started, answer)
}

fn review_cluster_quota(st: &AppState, body: &[u8]) -> Answer {
    let req = match decode::<KarmadaClusterQuota>(body, KARMADACLUSTERQUOTA_PATH, &CLUSTER_QUOTA) {
        Decoded::Request(r) => r,
        Decoded::Answer(a) => return *a,
    };
    let either = req.object.as_ref().or(req.old_object.as_ref());
    let name = either
        .and_then(|q| q.metadata.name.as_deref())
        .filter(|n| !n.is_empty())
        .unwrap_or(&req.name);
    record_quota(&clip(name).to_string());
    let new = match to_judge(
        st,
        &req,
        "KarmadaClusterQuota",
        |meta| {
            meta.and_then(|m| m.name.as_deref())
                .filter(|n| !n.is_empty())
                .map_or_else(|| clip(&req.name).to_string(), |n| clip(n).to_string())
        },
        |q| &q.spec,
    ) {
        Ok(new) => new,
        Err(answer) => return *answer,
    };
    let name = new
        .metadata
        .name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(&req.name);
    let selector = match validate_cluster_spec(new) {
        Ok((selector, _)) => selector,
        Err(errors) => {
            return invalid(&req, &format!("KarmadaClusterQuota \"{name}\""), &errors);
        }
    };
    let selects_some = st
        .cache
        .namespace_labels()
        .values()
        .any(|labels| selector.matches(labels));
    let mut answer = allowed(&req, "Allowed");
    if !selects_some && st.cache.is_synced() {
        answer.response.warnings = Some(vec![format!(
            "KarmadaClusterQuota {name}: spec.namespaceSelector matches no namespace yet; it \
             applies to namespaces once their labels match"
        )]);
        answer.reason = "AllowedWithWarning";
    }
    answer
}
