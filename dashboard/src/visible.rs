//! What one request may see: the [`Visible`] extractor every data route (pages, JSON, CSV,
//! the live stream) takes instead of reading the snapshot itself.
//!
//! ```text
//!  --dashboard-auth=none        the whole snapshot
//!  --dashboard-auth=kubernetes  token (Authorization: Bearer …, else the kq_token cookie)
//!       none / refused ─► 401: the login form (HTML) or {"error"} (/api/…, /events)
//!       review failed  ─► 503
//!       a user         ─► Access::restrict(snapshot, user): their namespaces only
//! ```

use std::sync::Arc;

use axum::Json;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::Dashboard;
use crate::auth::User;
use crate::login::LoginPage;
use crate::model::Snapshot;

/// The cookie the login form sets.
pub const COOKIE: &str = "kq_token";

/// A reviewed viewer.
#[derive(Clone, Debug)]
pub struct Viewer {
    /// Who the API server says they are.
    pub user: Arc<User>,
    /// Their token (re-reviewed, through the cache, on every live update).
    pub token: String,
}

/// The snapshot as the request's viewer may see it.
#[derive(Clone, Debug)]
pub struct Visible {
    /// The part of the snapshot the viewer may see (all of it without auth).
    pub snapshot: Arc<Snapshot>,
    /// The viewer, when auth is on.
    pub viewer: Option<Viewer>,
}

impl Visible {
    /// The viewer's name, when auth is on.
    pub fn user_name(&self) -> Option<String> {
        self.viewer.as_ref().map(|v| v.user.name.clone())
    }
}

/// The bearer token of a request: the `Authorization: Bearer` header, else the login
/// cookie.
pub fn token_of(headers: &HeaderMap) -> Option<String> {
    let bearer = headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        });
    bearer.filter(|t| !t.is_empty()).or_else(|| {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, v)| *k == COOKIE && !v.is_empty())
            .map(|(_, v)| v.to_owned())
    })
}

/// Whether a path answers JSON (the API and the event stream) rather than a page.
fn wants_json(path: &str) -> bool {
    path.starts_with("/api/") || path == "/events"
}

/// 401: the login form for a page (returning to `path` after login), a JSON error for
/// the API.
pub fn unauthenticated(path: &str, why: &str) -> Response {
    if wants_json(path) {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
            Json(serde_json::json!({ "error": format!("{why}: send Authorization: Bearer <token>, or log in at /login") })),
        )
            .into_response()
    } else {
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))],
            LoginPage::new(true, path, Some(format!("{why}."))),
        )
            .into_response()
    }
}

/// 503: the API server could not review the token.
pub fn unavailable(path: &str, why: &str) -> Response {
    let msg = format!("cannot review the token with the API server: {why}");
    if wants_json(path) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(serde_json::json!({ "error": msg })),
        )
            .into_response()
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            LoginPage::new(true, path, Some(msg)),
        )
            .into_response()
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
            });
        };
        let path = parts.uri.path();
        let Some(token) = token_of(&parts.headers) else {
            return Err(unauthenticated(path, "Log in to see the quotas"));
        };
        match access.user(&token).await {
            Ok(Some(user)) => Ok(Visible {
                snapshot: Arc::new(access.restrict(&snapshot, &user).await),
                viewer: Some(Viewer { user, token }),
            }),
            Ok(None) => Err(unauthenticated(
                path,
                "The API server did not accept the token",
            )),
            Err(e) => Err(unavailable(path, &e.to_string())),
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
    fn the_header_wins_over_the_cookie() {
        let h = headers(&[
            (header::COOKIE, "a=1; kq_token=from-cookie; b=2"),
            (header::AUTHORIZATION, "Bearer from-header"),
        ]);
        assert_eq!(token_of(&h).as_deref(), Some("from-header"));
        let h = headers(&[(header::COOKIE, "a=1; kq_token=from-cookie")]);
        assert_eq!(token_of(&h).as_deref(), Some("from-cookie"));
        let h = headers(&[(header::AUTHORIZATION, "bearer  x.y.z ")]);
        assert_eq!(token_of(&h).as_deref(), Some("x.y.z"));
    }

    #[test]
    fn no_token_without_bearer_or_cookie() {
        assert_eq!(token_of(&HeaderMap::new()), None);
        let h = headers(&[
            (header::AUTHORIZATION, "Basic dXNlcjpwdw=="),
            (header::COOKIE, "kq_token=; other=1"),
        ]);
        assert_eq!(token_of(&h), None);
    }
}
