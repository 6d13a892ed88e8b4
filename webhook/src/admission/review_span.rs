//! The `review` span every admission review runs in, and what it carries so that one log
//! query follows an object through both binaries (docs/architecture.md, "Following a
//! binding in the logs"):
//!
//! - `kind`: the metric label of the path (`resourcebinding`, `karmadaquota`, …), set when
//!   the span opens;
//! - `binding` (`namespace/name`, the value the controller's fold of the same binding
//!   carries), `namespace`, `operation`: for a ResourceBinding review, once it decoded;
//! - `quota` (`namespace/name`, or `name` for a KarmadaClusterQuota: `QuotaKey`'s form, as
//!   the batcher's spans say it): for a quota object's review.
//!
//! Fields not known yet (a review that does not decode) stay empty and are left out of
//! the line. Lines inside the span do not repeat them.

use karmada_quota_crds::ResourceBinding;
use kube::core::admission::AdmissionRequest;
use tracing::Span;

use super::decode::object_key;

/// Fill the current `review` span's `binding`, `namespace` and `operation` from `req`.
pub(super) fn record_binding(req: &AdmissionRequest<ResourceBinding>) {
    let meta = req
        .object
        .as_ref()
        .or(req.old_object.as_ref())
        .map(|o| &o.metadata);
    let key = object_key(req, meta);
    let span = Span::current();
    span.record("binding", key.as_str());
    span.record("namespace", key.split_once('/').map_or("", |(ns, _)| ns));
    span.record("operation", tracing::field::debug(&req.operation));
}

/// Fill the current `review` span's `quota` with `key` (how the review names the quota).
pub(super) fn record_quota(key: &str) {
    Span::current().record("quota", key);
}
