//! What one request may see: the [`Visible`] extractor every data route (pages, JSON, CSV,
//! the live stream) takes instead of reading the snapshot itself.
//!
//! ```text
//!  --dashboard-auth=none        the whole snapshot
//!  --dashboard-auth=kubernetes  Authorization: Bearer <token>  ─► TokenReview (cached)
//!                               else cookie kq_session=<id>    ─► Sessions::get(id) ─► its token,
//!                                                                 re-reviewed (cached)
//!       none / unknown / expired session / refused ─► 401: the login form (HTML) or {"error"}
//!       review failed  ─► 503
//!       a user         ─► Access::restrict(snapshot, user): their namespaces only
//! ```
//!
//! A cookie is only ever a session id: a bearer token sent as a cookie is no session.

use std::sync::Arc;

use axum::Json;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::Dashboard;
use crate::auth::User;
use crate::credentials::{bearer, cookie};
use crate::csrf::Bound;
use crate::model::Snapshot;
use crate::session::SESSION_COOKIE;

/// A reviewed viewer.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// Who the API server says they are.
    pub user: Arc<User>,
    /// Their token (re-reviewed, through the cache, on every live update).
    pub token: String,
    /// The session they came with (`None`: an `Authorization` header).
    pub session: Option<String>,
}

/// The snapshot as the request's viewer may see it.
#[derive(Clone, Debug)]
pub struct Visible {
    /// The part of the snapshot the viewer may see (all of it without auth).
    pub snapshot: Arc<Snapshot>,
    /// The viewer, when auth is on.
    pub viewer: Option<Viewer>,
    /// The CSRF token of the viewer's session forms (logout), when they have a session.
    pub csrf: Option<String>,
}

impl Visible {
    /// The viewer's name, when auth is on.
    pub fn user_name(&self) -> Option<String> {
        self.viewer.as_ref().map(|v| v.user.name.clone())
    }
}

/// Whether a path answers JSON (the API and the event stream) rather than a page.
fn wants_json(path: &str) -> bool {
    path.starts_with("/api/") || path == "/events"
}

/// 401: the login form for a page (returning to `path` after login), a JSON error for
/// the API.
pub fn unauthenticated(d: &Dashboard, headers: &HeaderMap, path: &str, why: &str) -> Response {
    let mut resp = if wants_json(path) {
        (
            StatusCode::UNAUTHORIZED,
            Json(serde_json::json!({ "error": format!("{why}: send Authorization: Bearer <token>, or log in at /login") })),
        )
            .into_response()
    } else {
        crate::login::page(
            d,
            headers,
            StatusCode::UNAUTHORIZED,
            path,
            Some(format!("{why}.")),
        )
    };
    resp.headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    resp
}

/// 503: the API server could not review the token.
pub fn unavailable(d: &Dashboard, headers: &HeaderMap, path: &str, why: &str) -> Response {
    let msg = format!("cannot review the token with the API server: {why}");
    if wants_json(path) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": msg })),
        )
            .into_response()
    } else {
        crate::login::page(d, headers, StatusCode::SERVICE_UNAVAILABLE, path, Some(msg))
    }
}

impl FromRequestParts<Dashboard> for Visible {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, d: &Dashboard) -> Result<Self, Response> {
        let snapshot = d.unfiltered();
        let Some(access) = &d.access else {
            return Ok(Visible {
                snapshot,
                viewer: None,
                csrf: None,
            });
        };
        let (path, headers) = (parts.uri.path(), &parts.headers);
        let (token, session) = if let Some(token) = bearer(headers) {
            (token, None)
        } else if let Some(id) = cookie(headers, SESSION_COOKIE) {
            match d.sessions.get(&id) {
                Some(s) => (s.token, Some(id)),
                None => {
                    return Err(unauthenticated(
                        d,
                        headers,
                        path,
                        "Your session ended (or is unknown here): log in again",
                    ));
                }
            }
        } else {
            return Err(unauthenticated(
                d,
                headers,
                path,
                "Log in to see the quotas",
            ));
        };
        match access.user(&token).await {
            Ok(Some(user)) => Ok(Visible {
                snapshot: Arc::new(access.restrict(&snapshot, &user).await),
                csrf: session
                    .as_deref()
                    .map(|id| d.csrf.token(Bound::Session(id))),
                viewer: Some(Viewer {
                    user,
                    token,
                    session,
                }),
            }),
            Ok(None) => {
                if let Some(id) = &session {
                    d.sessions.remove(id);
                }
                Err(unauthenticated(
                    d,
                    headers,
                    path,
                    "The API server did not accept the token",
                ))
            }
            Err(e) => Err(unavailable(d, headers, path, &e.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn bearer_header_and_cookies_are_read_apart() {
        let h = headers(&[
            (header::COOKIE, "a=1; kq_session=abc; b=2"),
            (header::AUTHORIZATION, "Bearer from-header"),
        ]);
        assert_eq!(bearer(&h).as_deref(), Some("from-header"));
        assert_eq!(cookie(&h, "kq_session").as_deref(), Some("abc"));
        let h = headers(&[(header::AUTHORIZATION, "bearer  x.y.z ")]);
        assert_eq!(bearer(&h).as_deref(), Some("x.y.z"));
    }

    #[test]
    fn no_token_without_bearer() {
        assert_eq!(bearer(&HeaderMap::new()), None);
        let h = headers(&[
            (header::AUTHORIZATION, "Basic dXNlcjpwdw=="),
            (header::COOKIE, "kq_session=; other=1"),
        ]);
        assert_eq!(bearer(&h), None);
        assert_eq!(cookie(&h, "kq_session"), None);
    }
}
