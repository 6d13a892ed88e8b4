//! What a review may cost before its handler decodes it, in front of every path:
//!
//! ```text
//!  body limit of the path      policy paths --max-policy-body-bytes, quota paths
//!     │                        --max-quota-body-bytes, binding paths --max-body-bytes → 413
//!     ▼
//!  weigh (super::weigh)        one pass, nothing built: a list over --max-list-items → 200
//!     │                        with a 400 answer; the estimated decoded size
//!     ▼
//!  decode budget               the estimate charged to --max-decoded-bytes-in-flight until
//!     │                        the response exists: more than the whole budget → 413,
//!     ▼                        not now → 503 (the apiserver applies the failurePolicy)
//!  the path's handler
//! ```
//!
//! The listener's own budget (`--max-body-bytes-in-flight`) counts body bytes as they
//! arrive; this one counts what they become once decoded, so the two together bound the
//! memory reviews can hold, whatever their shape.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;

use super::answer::bad_review;
use super::weigh::{self, SkipPaths, Unweighable};
use super::{
    AppState, KARMADACLUSTERQUOTA_PATH, KARMADAQUOTA_PATH, KIND_BINDING, KIND_CLUSTER_QUOTA,
    KIND_POLICY, KIND_QUOTA, REASON_BAD_REQUEST, RESOURCEBINDING_PATH,
};
use crate::metrics::{DENIED, ERROR};
use crate::policy::{CLUSTERPROPAGATIONPOLICY_PATH, PROPAGATIONPOLICY_PATH};

/// Metric reason (`result="error"`) of a review refused by the decode budget.
pub const REASON_BUDGET: &str = "DecodeBudget";
/// Metric reason (`result="error"`) of a body over its path's limit (413).
pub const REASON_TOO_LARGE: &str = "BodyTooLarge";

/// The decoded bytes reviews may hold at once (`--max-decoded-bytes-in-flight`); clones
/// share it.
#[derive(Clone, Debug)]
pub struct DecodeBudget {
    permits: Arc<Semaphore>,
    total: usize,
}

impl DecodeBudget {
    /// A budget of `total` bytes (1 to 4 GiB - 1).
    pub fn new(total: usize) -> Self {
        let total = total.clamp(1, u32::MAX as usize);
        Self {
            permits: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Bytes not charged now.
    pub fn available(&self) -> usize {
        self.permits.available_permits()
    }

    /// Charge `n` bytes as a review in flight would (tests).
    #[cfg(test)]
    pub(crate) fn hold(&self, n: u32) -> tokio::sync::OwnedSemaphorePermit {
        self.permits
            .clone()
            .try_acquire_many_owned(n)
            .expect("budget")
    }
}

impl Default for DecodeBudget {
    fn default() -> Self {
        Self::new(DEFAULT_DECODED_BYTES_IN_FLIGHT)
    }
}

/// `--max-decoded-bytes-in-flight`'s default.
pub const DEFAULT_DECODED_BYTES_IN_FLIGHT: usize = 64 * 1024 * 1024;

/// The body limit and the metric kind of the review on `path`.
fn path_limits(st: &AppState, path: &str) -> (usize, &'static str) {
    let s = &st.settings;
    match path {
        PROPAGATIONPOLICY_PATH | CLUSTERPROPAGATIONPOLICY_PATH => {
            (s.max_policy_body_bytes, KIND_POLICY)
        }
        KARMADAQUOTA_PATH => (s.max_quota_body_bytes, KIND_QUOTA),
        KARMADACLUSTERQUOTA_PATH => (s.max_quota_body_bytes, KIND_CLUSTER_QUOTA),
        _ => (s.max_body_bytes, KIND_BINDING),
    }
}

/// The estimated decoded size of the review `body` on `path`, as the router charges it
/// (see [`super::weigh`]); `None` when it is not JSON or holds a list over
/// `max_list_items`.
pub fn decoded_estimate(path: &str, body: &[u8], max_list_items: usize) -> Option<usize> {
    weigh::weigh(body, skip_paths(path), max_list_items).ok()
}

fn skip_paths(path: &str) -> SkipPaths {
    match path {
        RESOURCEBINDING_PATH | super::MUTATE_RESOURCEBINDING_PATH => weigh::SKIP_BINDING,
        _ => weigh::SKIP_OPTIONS,
    }
}

/// `apiVersion`, `kind` and `request.uid` of a review, and nothing else (serde passes
/// over every other field).
#[derive(serde::Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct Envelope {
    api_version: String,
    kind: String,
    request: Option<EnvelopeRequest>,
}

#[derive(serde::Deserialize, Default)]
#[serde(default)]
struct EnvelopeRequest {
    uid: String,
}

/// The 400 of a review refused before decoding, echoing its uid when it can be read.
fn refuse_unread(body: &[u8], message: &str) -> Response {
    let mut answer = bad_review(message);
    if let Ok(e) = serde_json::from_slice::<Envelope>(body) {
        if !e.api_version.is_empty() {
            answer.response.types.api_version = e.api_version;
            answer.response.types.kind = e.kind;
        }
        answer.response.uid = e.request.map(|r| r.uid).unwrap_or_default();
    }
    axum::Json(answer.response.into_review()).into_response()
}

/// The middleware: the path's body limit, the weighing, the charge (see the module doc).
pub(super) async fn admit(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let (limit, kind) = path_limits(&st, req.uri().path());
    let skip = skip_paths(req.uri().path());
    let (parts, bytes) = match read_body(req, limit).await {
        Ok(read) => read,
        Err(refusal) => {
            st.metrics.decision(kind, ERROR, REASON_TOO_LARGE);
            return refusal;
        }
    };
    let estimate = match weigh::weigh(&bytes, skip, st.settings.max_list_items) {
        Ok(n) => n,
        Err(Unweighable::Malformed(_)) => {
            // The handler's decoding answers it with the precise error; nothing it builds
            // outlives the syntax error, so charge the bytes alone.
            bytes.len()
        }
        Err(e @ Unweighable::ListTooLong(_)) => {
            st.metrics.decision(kind, DENIED, REASON_BAD_REQUEST);
            return refuse_unread(&bytes, &e.to_string());
        }
    };
    let budget = &st.settings.decode_budget;
    if estimate > budget.total {
        st.metrics.decision(kind, ERROR, REASON_BUDGET);
        return plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the review would take ~{estimate} bytes decoded, more than \
                 --max-decoded-bytes-in-flight ({})",
                budget.total
            ),
        );
    }
    let Ok(_charge) = budget
        .permits
        .clone()
        .try_acquire_many_owned(u32::try_from(estimate).unwrap_or(u32::MAX))
    else {
        st.metrics.decision(kind, ERROR, REASON_BUDGET);
        return plain(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many decoded review bytes in flight (--max-decoded-bytes-in-flight); retry"
                .to_owned(),
        );
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The request's parts and its whole body, or the 413 of a body over `limit` (declared
/// before a byte is read, or growing past it).
async fn read_body(
    req: Request,
    limit: usize,
) -> Result<(axum::http::request::Parts, Bytes), Response> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large(limit));
    }
    let (parts, body) = req.into_parts();
    match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => Ok((parts, bytes)),
        // Over the limit, or the listener cut the body (its timeout or budget: it answers
        // itself; this response is replaced).
        Err(e) => Err(plain(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("cannot read the body: {e}"),
        )),
    }
}

fn too_large(limit: usize) -> Response {
    plain(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("the body is larger than this path's limit of {limit} bytes"),
    )
}

fn plain(code: StatusCode, message: String) -> Response {
    (code, message).into_response()
}
