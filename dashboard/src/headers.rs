//! The security headers on every dashboard response: a Content-Security-Policy that lets
//! the pages load only their own script, stylesheet and event stream (no inline script or
//! style: the bars' widths are set by the served script from `data-width`), no framing,
//! no MIME sniffing, no referrer, and `Cache-Control: no-store` on everything but the
//! static assets (pages and APIs carry a viewer's data).

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, header};
use axum::middleware::Next;
use axum::response::Response;

/// The Content-Security-Policy of every response.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; \
    base-uri 'none'; object-src 'none'";

/// Path prefix of the static assets (cacheable: the same for every viewer).
pub const ASSETS: &str = "/assets/";

/// Adds the headers to the response of `req`.
pub async fn secure(req: Request, next: Next) -> Response {
    let asset = req.uri().path().starts_with(ASSETS);
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    let set = |h: &mut axum::http::HeaderMap, name: HeaderName, value: &'static str| {
        h.insert(name, HeaderValue::from_static(value));
    };
    set(h, header::CONTENT_SECURITY_POLICY, CSP);
    set(h, header::X_FRAME_OPTIONS, "DENY");
    set(h, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(h, header::REFERRER_POLICY, "no-referrer");
    if asset {
        set(h, header::CACHE_CONTROL, "public, max-age=300");
    } else {
        set(h, header::CACHE_CONTROL, "no-store");
    }
    resp
}
