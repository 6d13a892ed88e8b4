//! What one request may see: the [`Visible`] extractor every data route (pages, JSON, CSV,
//! the live stream) takes instead of reading the snapshot itself.
//!
//! ```text
//!  --dashboard-auth=none        the whole snapshot
//!  --dashboard-auth=kubernetes  Authorization: Bearer <token>  ─► TokenReview (cached)
//!                               else cookie kq_session=<id>    ─► Sessions::get(id) ─► its token,
//!                                                                 re-reviewed (cached; never held
//!                                                                 back by the new-token rate)
//!       none / unknown / expired session / refused ─► 401: the login form (HTML) or {"error"}
//!       review failed  ─► 503
//!       a user         ─► Access::restrict(snapshot, user): their namespaces only
//! ```
//!
//! A cookie is only ever a session id: a bearer token sent as a cookie is no session.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::Response;

use crate::Dashboard;
use crate::auth::User;
use crate::credentials::{bearer, cookie};
use crate::csrf::Bound;
use crate::login::{unauthenticated, unavailable};
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
        // A session's token was accepted at its login: re-reviewed whatever the rate of
        // new tokens.
        let reviewed = if session.is_some() {
            access.known_user(&token).await
        } else {
            access.user(&token).await
        };
        match reviewed {
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
