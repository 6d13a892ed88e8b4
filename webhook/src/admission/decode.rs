//! Reading a review: the kind a path checks ([`Target`]), the typed request or the answer
//! given without one ([`decode`]: 400 for a malformed review or object, an allow for a
//! review of another kind), and how messages name the object under review
//! ([`object_key`], lengths bounded). The pure `decode_*_review` entry points are what
//! the fuzz targets drive.

use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, ResourceBinding};
use karmada_quota_shell::untrusted::{self, clip, within};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::{DynamicObject, GroupVersionKind, Resource};
use serde::de::DeserializeOwned;

use super::answer::{Answer, allowed, bad_request, bad_review};
use super::{KARMADACLUSTERQUOTA_PATH, KARMADAQUOTA_PATH, RESOURCEBINDING_PATH};

/// The kind a path checks.
pub(super) struct Target {
    group: &'static str,
    /// The kind's name, as messages say it.
    pub(super) kind: &'static str,
}

/// What `/validate/resourcebinding` and `/mutate/resourcebinding` check.
pub(super) const BINDING: Target = Target {
    group: karmada_quota_crds::resourcebinding::GROUP,
    kind: karmada_quota_crds::resourcebinding::KIND,
};

/// What `/validate/karmadaquota` checks.
pub(super) const QUOTA: Target = Target {
    group: karmada_quota_crds::quota::GROUP,
    kind: "KarmadaQuota",
};

/// What `/validate/karmadaclusterquota` checks.
pub(super) const CLUSTER_QUOTA: Target = Target {
    group: karmada_quota_crds::quota::GROUP,
    kind: "KarmadaClusterQuota",
};

impl Target {
    fn matches(&self, gvk: &GroupVersionKind) -> bool {
        gvk.group == self.group && gvk.kind == self.kind
    }
}

/// A decoded review: the request, or the answer that ends it here.
pub(super) enum Decoded<T: Resource> {
    Request(Box<AdmissionRequest<T>>),
    Answer(Box<Answer>),
}

/// `ns/name` of the object under review, from the object when it has them.
pub(super) fn object_key<T: Resource>(
    req: &AdmissionRequest<T>,
    meta: Option<&kube::core::ObjectMeta>,
) -> String {
    let ns = meta
        .and_then(|m| m.namespace.as_deref())
        .filter(|s| !s.is_empty())
        .or(req.namespace.as_deref())
        .unwrap_or_default();
    let name = meta
        .and_then(|m| m.name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or(&req.name);
    format!(
        "{}/{}",
        within(ns, untrusted::MAX_NAMESPACE_LEN),
        within(name, untrusted::MAX_NAME_LEN)
    )
}

/// Decode a review of `target`'s kind. Fast path: straight into the typed object. When
/// that fails, decode generically to say precisely what is wrong and with which object
/// (or to let a review of another kind through); a broken `oldObject` is dropped (the
/// request is then charged like a CREATE, never less).
pub(super) fn decode<T>(body: &[u8], path: &str, target: &Target) -> Decoded<T>
where
    T: Resource + DeserializeOwned + Clone,
{
    match serde_json::from_slice::<AdmissionReview<T>>(body) {
        Ok(review) => match TryInto::<AdmissionRequest<T>>::try_into(review) {
            Err(_) => Decoded::Answer(Box::new(bad_review("AdmissionReview has no request"))),
            Ok(req) if !target.matches(&req.kind) => {
                Decoded::Answer(Box::new(other_kind(&req, path)))
            }
            Ok(req) => Decoded::Request(Box::new(req)),
        },
        Err(_) => decode_slow(body, path, target),
    }
}

/// The ResourceBinding review in `body` as the webhook reads it before it looks at any
/// quota: the request, or the answer given without one (400 for a malformed review, an
/// allow for a review of another kind). Pure: no cache, no clock, no I/O.
pub fn decode_binding_review(
    body: &[u8],
) -> Result<Box<AdmissionRequest<ResourceBinding>>, Box<AdmissionResponse>> {
    match decode::<ResourceBinding>(body, RESOURCEBINDING_PATH, &BINDING) {
        Decoded::Request(r) => Ok(r),
        Decoded::Answer(a) => Err(Box::new(a.response)),
    }
}

/// The KarmadaQuota review in `body`, like [`decode_binding_review`].
pub fn decode_quota_review(
    body: &[u8],
) -> Result<Box<AdmissionRequest<KarmadaQuota>>, Box<AdmissionResponse>> {
    match decode::<KarmadaQuota>(body, KARMADAQUOTA_PATH, &QUOTA) {
        Decoded::Request(r) => Ok(r),
        Decoded::Answer(a) => Err(Box::new(a.response)),
    }
}

/// The KarmadaClusterQuota review in `body`, like [`decode_binding_review`].
pub fn decode_cluster_quota_review(
    body: &[u8],
) -> Result<Box<AdmissionRequest<KarmadaClusterQuota>>, Box<AdmissionResponse>> {
    match decode::<KarmadaClusterQuota>(body, KARMADACLUSTERQUOTA_PATH, &CLUSTER_QUOTA) {
        Decoded::Request(r) => Ok(r),
        Decoded::Answer(a) => Err(Box::new(a.response)),
    }
}

/// [`decode`]'s slow path: generically, then into `T`, naming what does not decode.
fn decode_slow<T>(body: &[u8], path: &str, target: &Target) -> Decoded<T>
where
    T: Resource + DeserializeOwned + Clone,
{
    let review = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(r) => r,
        Err(e) => {
            return Decoded::Answer(Box::new(bad_review(&format!(
                "malformed AdmissionReview: {}",
                clip(&e.to_string())
            ))));
        }
    };
    let req: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(_) => return Decoded::Answer(Box::new(bad_review("AdmissionReview has no request"))),
    };
    if !target.matches(&req.kind) {
        return Decoded::Answer(Box::new(other_kind(&req, path)));
    }
    let typed = |o: &DynamicObject| serde_json::to_value(o).and_then(serde_json::from_value::<T>);
    let object = match req.object.as_ref().map(typed).transpose() {
        Ok(o) => o,
        Err(e) => {
            let key = object_key(&req, req.object.as_ref().map(|o| &o.metadata));
            return Decoded::Answer(Box::new(bad_request(
                &req,
                &format!(
                    "{} {key} is not a valid {}: {}",
                    target.kind,
                    target.kind,
                    clip(&e.to_string())
                ),
            )));
        }
    };
    let old_object = match req.old_object.as_ref().map(typed).transpose() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(
                object = object_key(&req, req.old_object.as_ref().map(|o| &o.metadata)),
                error = %clip(&e.to_string()),
                "the stored {} does not decode; checking the request as a CREATE",
                target.kind
            );
            None
        }
    };
    Decoded::Request(Box::new(AdmissionRequest {
        types: req.types,
        uid: req.uid,
        kind: req.kind,
        resource: req.resource,
        sub_resource: req.sub_resource,
        request_kind: req.request_kind,
        request_resource: req.request_resource,
        request_sub_resource: req.request_sub_resource,
        name: req.name,
        namespace: req.namespace,
        operation: req.operation,
        user_info: req.user_info,
        object,
        old_object,
        dry_run: req.dry_run,
        options: req.options,
    }))
}

/// The allow of a review of another kind on `path` (the webhook configuration is wrong,
/// not the request), logged.
pub(super) fn other_kind<T: Resource>(req: &AdmissionRequest<T>, path: &str) -> Answer {
    tracing::warn!(
        %path,
        group = %clip(&req.kind.group),
        kind = %clip(&req.kind.kind),
        name = %clip(&req.name),
        "review of another kind on this path: allowed; check the ValidatingWebhookConfiguration"
    );
    allowed(req, "OtherKind")
}
