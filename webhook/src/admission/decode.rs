//! Reading a review: the kind a path checks ([`Target`]), the typed request or the answer
//! given without one ([`decode`]: 400 for a malformed review or object, an allow for a
//! review of another kind), and how messages name the object under review
//! ([`object_key`], lengths bounded). The pure `decode_*_review` entry points are what
//! the fuzz targets drive.

use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, ResourceBinding};
use karmada_quota_shell::untrusted::{self, clip, within};
use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::{GroupVersionKind, Resource};

use super::answer::{Answer, allowed, bad_request, bad_review};
use super::wire::{self, Named};
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

/// Decode a review of `target`'s kind: the request's fields typed straight from the body
/// (`request.options` never read, see [`super::wire`]), then the object and the old
/// object each into `T` from its own slice of the body. A malformed review is a 400; an
/// object that is not a valid `T` a 400 naming it; a review of another kind an allow; a
/// broken `oldObject` is dropped (the request is then charged like a CREATE, never less).
pub(super) fn decode<T: Object>(body: &[u8], path: &str, target: &Target) -> Decoded<T> {
    let raw = match wire::read(body) {
        Ok(Some(raw)) => raw,
        Ok(None) => return Decoded::Answer(Box::new(bad_review("AdmissionReview has no request"))),
        Err(e) => {
            return Decoded::Answer(Box::new(bad_review(&format!(
                "malformed AdmissionReview: {}",
                clip(&e.to_string())
            ))));
        }
    };
    let req = raw.request;
    if !target.matches(&req.kind) {
        return Decoded::Answer(Box::new(other_kind(&req, path)));
    }
    let object = match raw.object.map(|o| T::decode(o.get())).transpose() {
        Ok(o) => o,
        Err(e) => {
            let key = object_key(&req, Named::of(raw.object).as_ref());
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
    let old_object = match raw.old_object.map(|o| T::decode(o.get())).transpose() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(
                object = object_key(&req, Named::of(raw.old_object).as_ref()),
                error = %clip(&e.to_string()),
                "the stored {} does not decode; checking the request as a CREATE",
                target.kind
            );
            None
        }
    };
    Decoded::Request(Box::new(wire::with_objects(req, object, old_object)))
}

/// An object type a review path decodes.
pub(super) trait Object: Resource + serde::de::DeserializeOwned {
    /// The object in `json` (serde's own decoding unless a type reads itself cheaper).
    fn decode(json: &str) -> serde_json::Result<Self> {
        serde_json::from_str(json)
    }
}

impl Object for KarmadaQuota {}

impl Object for KarmadaClusterQuota {}

/// A ResourceBinding read field by field: `ResourceBinding` itself takes its type meta
/// through a `flatten`, which makes serde buffer the whole object (its status too) as a
/// generic tree first; this reads `apiVersion`, `kind`, `metadata` and `spec` directly and
/// passes over everything else.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindingObject {
    #[serde(default)]
    api_version: Option<String>,
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    metadata: kube::core::ObjectMeta,
    #[serde(default)]
    spec: karmada_quota_core::binding::ResourceBindingSpec,
}

impl Object for ResourceBinding {
    fn decode(json: &str) -> serde_json::Result<Self> {
        let b: BindingObject = serde_json::from_str(json)?;
        let types = match (b.api_version, b.kind) {
            (Some(api_version), Some(kind)) => Some(kube::core::TypeMeta { api_version, kind }),
            _ => None,
        };
        Ok(ResourceBinding {
            types,
            metadata: b.metadata,
            spec: b.spec,
        })
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
