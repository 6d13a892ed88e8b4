//! The AdmissionReview as it arrives, typed without a detour: the request's fields
//! straight into structs, the object and the old object kept as borrowed slices of the
//! body until the path's own type reads them, and `request.options` never read (serde
//! passes over a field the struct does not name). kube's `AdmissionReview` would first
//! buffer the whole request as a generic tree (its `flatten`ed type meta) and read the
//! options into a JSON tree; a wide options list made that many times the body.

use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{GroupVersionKind, GroupVersionResource, Resource, TypeMeta};
use serde::Deserialize;
use serde_json::value::RawValue;

/// An AdmissionReview, borrowing from the body.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Review<'a> {
    #[serde(default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(borrow, default)]
    request: Option<Request<'a>>,
}

/// `request` of a review; `options` is not named, so never decoded.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Request<'a> {
    uid: String,
    kind: GroupVersionKind,
    resource: GroupVersionResource,
    #[serde(default)]
    sub_resource: Option<String>,
    #[serde(default)]
    request_kind: Option<GroupVersionKind>,
    #[serde(default)]
    request_resource: Option<GroupVersionResource>,
    #[serde(default)]
    request_sub_resource: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: Option<String>,
    operation: Operation,
    user_info: k8s_openapi::api::authentication::v1::UserInfo,
    #[serde(borrow, default)]
    object: Option<&'a RawValue>,
    #[serde(borrow, default)]
    old_object: Option<&'a RawValue>,
    #[serde(default)]
    dry_run: bool,
}

/// A review's request with its objects still undecoded.
pub(super) struct Raw<'a> {
    /// The request with no objects (and no options).
    pub(super) request: AdmissionRequest<Shell>,
    /// `request.object`, as it came (absent or `null`: `None`).
    pub(super) object: Option<&'a RawValue>,
    /// `request.oldObject`, likewise.
    pub(super) old_object: Option<&'a RawValue>,
}

/// The request of `body`: `Ok(None)` when the review has none; a serde error when it is
/// not an AdmissionReview.
pub(super) fn read(body: &[u8]) -> serde_json::Result<Option<Raw<'_>>> {
    let review: Review<'_> = serde_json::from_slice(body)?;
    let types = TypeMeta {
        api_version: review.api_version,
        kind: review.kind,
    };
    Ok(review.request.map(|r| Raw {
        object: r.object.filter(|o| o.get() != "null"),
        old_object: r.old_object.filter(|o| o.get() != "null"),
        request: AdmissionRequest {
            types,
            uid: r.uid,
            kind: r.kind,
            resource: r.resource,
            sub_resource: r.sub_resource,
            request_kind: r.request_kind,
            request_resource: r.request_resource,
            request_sub_resource: r.request_sub_resource,
            name: r.name,
            namespace: r.namespace,
            operation: r.operation,
            user_info: r.user_info,
            object: None,
            old_object: None,
            dry_run: r.dry_run,
            options: None,
        },
    }))
}

/// Moves the request's fields onto a request of objects of type `T`.
pub(super) fn with_objects<T: Resource>(
    req: AdmissionRequest<Shell>,
    object: Option<T>,
    old_object: Option<T>,
) -> AdmissionRequest<T> {
    AdmissionRequest {
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
        options: None,
    }
}

/// The object type of a request whose objects are not decoded (yet); it holds none.
pub(super) type Shell = kube::core::DynamicObject;

/// Only the name and namespace of an object, for messages.
#[derive(Deserialize, Default)]
pub(super) struct Named {
    #[serde(default)]
    pub(super) metadata: NamedMeta,
}

/// `metadata.name` and `metadata.namespace`.
#[derive(Deserialize, Default)]
pub(super) struct NamedMeta {
    #[serde(default)]
    pub(super) name: Option<String>,
    #[serde(default)]
    pub(super) namespace: Option<String>,
}

impl Named {
    /// Name and namespace of `raw`, as far as they can be read.
    pub(super) fn of(raw: Option<&RawValue>) -> Option<kube::core::ObjectMeta> {
        let named: Named = serde_json::from_str(raw?.get()).ok()?;
        Some(kube::core::ObjectMeta {
            name: named.metadata.name,
            namespace: named.metadata.namespace,
            ..Default::default()
        })
    }
}
