//! What every request passes before the component's router: the in-flight cap, and a body
//! that must arrive within the body-read timeout and is charged, byte by byte as it
//! arrives, to the listener's body budget until the response is produced.

use parking_lot::Mutex;
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, Request, Response, StatusCode, header};
use http_body::{Frame, SizeHint};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::ServiceExt;

use super::Limits;

/// The per-listener state every request shares.
#[derive(Debug)]
pub(super) struct Guards {
    in_flight: Arc<Semaphore>,
    body_budget: Arc<Semaphore>,
    body_read_timeout: Duration,
}

impl Guards {
    pub(super) fn new(limits: &Limits) -> Self {
        Self {
            in_flight: Arc::new(Semaphore::new(limits.max_requests_in_flight as usize)),
            body_budget: Arc::new(Semaphore::new(limits.max_body_bytes_in_flight as usize)),
            body_read_timeout: limits.body_read_timeout,
        }
    }
}

/// How a request's body ended, as far as the guard is concerned.
const BODY_OK: u8 = 0;
const BODY_TIMED_OUT: u8 = 1;
const BODY_OVER_BUDGET: u8 = 2;

/// Shared by the body (which charges and flags) and the request's task (which answers
/// from the flag and releases the charge once the response exists).
#[derive(Debug)]
struct BodyState {
    outcome: AtomicU8,
    charged: Mutex<Option<OwnedSemaphorePermit>>,
}

impl BodyState {
    fn new() -> Self {
        Self {
            outcome: AtomicU8::new(BODY_OK),
            charged: Mutex::new(None),
        }
    }
}

/// Serve one request through the guards.
pub(super) async fn handle(
    router: Router,
    guards: Arc<Guards>,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    let Ok(_slot) = guards.in_flight.clone().try_acquire_owned() else {
        return Ok(refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests in flight on this listener; retry",
        ));
    };
    let state = Arc::new(BodyState::new());
    let (parts, body) = req.into_parts();
    let body = GuardedBody {
        inner: body,
        deadline: Box::pin(tokio::time::sleep(guards.body_read_timeout)),
        budget: guards.body_budget.clone(),
        state: state.clone(),
        failed: false,
    };
    let response = router
        .oneshot(Request::from_parts(parts, Body::new(body)))
        .await?;
    // The charge is released with `state`, after the handler is done with the bytes.
    Ok(match state.outcome.load(Ordering::Acquire) {
        BODY_TIMED_OUT => refusal(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive within the body read timeout",
        ),
        BODY_OVER_BUDGET => refusal(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many request-body bytes in flight on this listener; retry",
        ),
        _ => response,
    })
}

/// A plain-text refusal that also closes the connection.
fn refusal(code: StatusCode, message: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::from(message));
    *resp.status_mut() = code;
    let headers = resp.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// Why a guarded body stopped early.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    /// The whole body did not arrive within the body-read timeout.
    #[error("the request body did not arrive within the body read timeout")]
    TimedOut,
    /// Holding one more chunk would exceed the listener's body budget.
    #[error("too many request-body bytes in flight on this listener")]
    OverBudget,
    /// The connection failed while the body was read.
    #[error("reading the request body: {0}")]
    Read(#[from] hyper::Error),
}

/// The request body, bounded in time and charged to the budget.
struct GuardedBody {
    inner: hyper::body::Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    budget: Arc<Semaphore>,
    state: Arc<BodyState>,
    /// An error was returned: the body yields nothing more.
    failed: bool,
}

impl GuardedBody {
    fn fail(
        &mut self,
        outcome: u8,
        error: BodyError,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        self.state.outcome.store(outcome, Ordering::Release);
        self.failed = true;
        Poll::Ready(Some(Err(error)))
    }

    /// Charge `n` more bytes; false when the budget cannot hold them.
    fn charge(&self, n: usize) -> bool {
        let Ok(n) = u32::try_from(n) else {
            return false;
        };
        let Ok(permit) = self.budget.clone().try_acquire_many_owned(n) else {
            return false;
        };
        let mut charged = self.state.charged.lock();
        match charged.as_mut() {
            Some(held) => held.merge(permit),
            None => *charged = Some(permit),
        }
        true
    }
}

impl http_body::Body for GuardedBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let len = frame.data_ref().map_or(0, Bytes::len);
                if len > 0 && !this.charge(len) {
                    return this.fail(BODY_OVER_BUDGET, BodyError::OverBudget);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.failed = true;
                Poll::Ready(Some(Err(BodyError::Read(e))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.deadline.as_mut().poll(cx).is_ready() {
                    return this.fail(BODY_TIMED_OUT, BodyError::TimedOut);
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        // Kept: routes refuse a declared Content-Length over their limit (413) before
        // reading a byte.
        self.inner.size_hint()
    }
}
