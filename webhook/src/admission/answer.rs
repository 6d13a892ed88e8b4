//! What a review answers and how it is counted: [`Answer`] (the AdmissionResponse with its
//! metric result and reason), the allow / refusal / 400 constructors every path uses, the
//! refusal of an internal error (never an allow), and [`finish`], which counts the answer
//! and wraps it in the AdmissionReview sent back.

use axum::Json;
use karmada_quota_shell::duration;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use kube::core::{DynamicObject, Resource, Status};
use tokio::time::Instant;

use super::{AppState, CODE_BAD_REQUEST, REASON_BAD_REQUEST};
use crate::error::Error;
use crate::metrics::{ALLOWED, DENIED, ERROR};

/// A response and how to count it.
pub(crate) struct Answer {
    /// What the apiserver gets.
    pub(super) response: AdmissionResponse,
    /// Metric `result` (`allowed`, `denied`, `error`).
    pub(super) result: &'static str,
    /// Metric `reason`.
    pub(super) reason: &'static str,
}

/// An allow of `req`, counted with `reason`.
pub(super) fn allowed<T: Resource>(req: &AdmissionRequest<T>, reason: &'static str) -> Answer {
    Answer {
        response: AdmissionResponse::from(req),
        result: ALLOWED,
        reason,
    }
}

/// A refusal of `req`: HTTP `code` and `status_reason` in the response, `message` for the
/// client; counted as `result` with `metric_reason`.
pub(super) fn refused<T: Resource>(
    req: &AdmissionRequest<T>,
    code: u16,
    status_reason: &str,
    message: &str,
    result: &'static str,
    metric_reason: &'static str,
) -> Answer {
    let mut response = AdmissionResponse::from(req);
    response.allowed = false;
    response.result = Status::failure(message, status_reason).with_code(code);
    Answer {
        response,
        result,
        reason: metric_reason,
    }
}

/// The 400 of a malformed object in `req` (`message` names it).
pub(super) fn bad_request<T: Resource>(req: &AdmissionRequest<T>, message: &str) -> Answer {
    refused(
        req,
        CODE_BAD_REQUEST,
        REASON_BAD_REQUEST,
        message,
        DENIED,
        REASON_BAD_REQUEST,
    )
}

/// A 400 for a body we could not read a request from (no uid to echo).
pub(super) fn bad_review(message: &str) -> Answer {
    let mut response = AdmissionResponse::invalid(message);
    response.result = Status::failure(message, REASON_BAD_REQUEST).with_code(CODE_BAD_REQUEST);
    Answer {
        response,
        result: DENIED,
        reason: REASON_BAD_REQUEST,
    }
}

/// The refusal for an internal error `e` while reviewing binding `key` (never an allow).
pub(crate) fn error_answer<T: Resource>(
    st: &AppState,
    req: &AdmissionRequest<T>,
    key: &str,
    e: Error,
) -> Answer {
    let message = match e {
        Error::Timeout => format!(
            "ResourceBinding {key}: no quota decision within {}",
            duration::format(st.settings.decision_timeout)
        ),
        _ => format!("ResourceBinding {key}: {e}"),
    };
    tracing::warn!(%message, "refusing on error");
    refused(req, e.code(), e.reason(), &message, ERROR, e.metric_label())
}

/// Count `answer` (a review of `kind` begun at `started`) and wrap it in the review sent
/// back.
pub(super) fn finish(
    st: &AppState,
    kind: &'static str,
    started: Instant,
    answer: Answer,
) -> Json<AdmissionReview<DynamicObject>> {
    st.metrics.decision(kind, answer.result, answer.reason);
    st.metrics
        .decision_duration
        .observe(started.elapsed().as_secs_f64());
    Json(answer.response.into_review())
}
