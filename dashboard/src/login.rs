//! The login form of `--dashboard-auth=kubernetes`: `GET /login` shows it, `POST /login`
//! takes a bearer token, has the API server review it (TokenReview) and, when accepted,
//! starts a server-side session ([`Sessions`](crate::session::Sessions)) whose random id
//! becomes the `kq_session` cookie (HttpOnly, SameSite=Strict, Path=/, Max-Age = the
//! session's lifetime; `Secure` when the dashboard serves TLS or a proxy says
//! `X-Forwarded-Proto: https`). The token never goes back to the browser. `POST /logout`
//! ends the session. A user past its logins a minute
//! ([`SessionPolicy::logins_per_user_per_minute`](crate::SessionPolicy)) gets 429 and
//! no session: its earlier sessions, and everyone else's, stay. A client address past its
//! login attempts a minute (`logins_per_peer_per_minute`, the address the listener gives
//! as `ConnectInfo`) gets 429 before its token is reviewed. Both forms carry a CSRF token ([`csrf`](crate::csrf)); a POST
//! without a valid one is 403. A request refused for want of a login gets the form too
//! ([`unauthenticated`], [`unavailable`]; JSON for the API).

use askama::Template;
use askama_web::WebTemplate;
use axum::Json;
use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{Extensions, HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::Dashboard;
use crate::credentials::cookie;
use crate::csrf::{Bound, CSRF_COOKIE, CSRF_FIELD, nonce, well_formed_nonce};
use crate::session::SESSION_COOKIE;

/// How long the login form's CSRF cookie lives.
const CSRF_MAX_AGE_SECS: u64 = 3600;

/// The login page.
#[derive(Template, WebTemplate)]
#[template(path = "login.html")]
pub struct LoginPage {
    /// Whether auth is on (else the page says there is nothing to log in to).
    pub enabled: bool,
    /// Where to go after logging in (a local path).
    pub next: String,
    /// Why the last attempt failed, or why login is needed.
    pub error: Option<String>,
    /// The form's CSRF token.
    pub csrf: String,
}

/// `next` when it is a path on this server (`/…`, not `//host` or `/\host`), else `/`; the
/// login pages themselves lead back to the overview.
pub fn local_path(next: &str) -> String {
    let local = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control);
    if !local || next.starts_with("/login") || next.starts_with("/logout") {
        "/".to_owned()
    } else {
        next.to_owned()
    }
}

/// Whether cookies of this request must be `Secure`: the dashboard serves TLS itself, or
/// a TLS-terminating proxy says the page was asked for over https.
pub fn secure(d: &Dashboard, headers: &HeaderMap) -> bool {
    d.settings.secure_cookies
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// A `Set-Cookie` value with the dashboard's flags.
pub fn set_cookie(name: &str, value: &str, path: &str, max_age_secs: u64, secure: bool) -> String {
    let secure = if secure { "; Secure" } else { "" };
    format!(
        "{name}={value}; Path={path}; HttpOnly; SameSite=Strict; Max-Age={max_age_secs}{secure}"
    )
}

fn field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

fn append_cookie(resp: &mut Response, cookie: &str) {
    if let Ok(v) = HeaderValue::from_str(cookie) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// The login form answering with `status`, returning to `next` after login, saying
/// `error`: a CSRF token bound to the request's `kq_csrf` nonce (a new nonce, and its
/// cookie, when it has none).
pub fn page(
    d: &Dashboard,
    headers: &HeaderMap,
    status: StatusCode,
    next: &str,
    error: Option<String>,
) -> Response {
    let enabled = d.access.is_some();
    let existing = cookie(headers, CSRF_COOKIE).filter(|n| well_formed_nonce(n));
    let (nonce, fresh) = match existing {
        Some(n) => (n, false),
        None => match nonce() {
            Ok(n) => (n, true),
            Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        },
    };
    let mut resp = (
        status,
        LoginPage {
            enabled,
            next: local_path(next),
            error,
            csrf: d.csrf.token(Bound::Login(&nonce)),
        },
    )
        .into_response();
    if enabled && fresh {
        append_cookie(
            &mut resp,
            &set_cookie(
                CSRF_COOKIE,
                &nonce,
                "/",
                CSRF_MAX_AGE_SECS,
                secure(d, headers),
            ),
        );
    }
    resp
}

/// `GET /login[?next=/path]`.
pub async fn form(State(d): State<Dashboard>, headers: HeaderMap, uri: Uri) -> Response {
    let next = uri
        .query()
        .and_then(|q| field(q.as_bytes(), "next"))
        .unwrap_or_else(|| "/".to_owned());
    page(&d, &headers, StatusCode::OK, &next, None)
}

fn see_other(to: &str) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    resp
}

/// Whether the login form's CSRF field matches the request's `kq_csrf` nonce.
fn login_csrf_ok(d: &Dashboard, headers: &HeaderMap, body: &[u8]) -> bool {
    let (Some(nonce), Some(token)) = (cookie(headers, CSRF_COOKIE), field(body, CSRF_FIELD)) else {
        return false;
    };
    well_formed_nonce(&nonce) && d.csrf.verify(Bound::Login(&nonce), &token)
}

/// 429 for a login past a rate: `why`, and when to come back (60 / `per_minute` s).
fn too_many(
    d: &Dashboard,
    headers: &HeaderMap,
    next: &str,
    why: String,
    per_minute: u32,
) -> Response {
    let mut resp = page(d, headers, StatusCode::TOO_MANY_REQUESTS, next, Some(why));
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from(60u32.div_ceil(per_minute.max(1))),
    );
    resp
}

/// `POST /login` (form: `csrf`, `token`, `next`).
pub async fn submit(
    State(d): State<Dashboard>,
    headers: HeaderMap,
    extensions: Extensions,
    body: Bytes,
) -> Response {
    let next = local_path(&field(&body, "next").unwrap_or_else(|| "/".to_owned()));
    if !login_csrf_ok(&d, &headers, &body) {
        tracing::info!("dashboard login refused: missing or invalid CSRF token");
        return page(
            &d,
            &headers,
            StatusCode::FORBIDDEN,
            &next,
            Some("The form expired or did not come from this dashboard: log in again.".into()),
        );
    }
    let Some(access) = &d.access else {
        return see_other(&next);
    };
    if let Some(ConnectInfo(peer)) = extensions.get::<ConnectInfo<std::net::SocketAddr>>()
        && !d.sessions.may_attempt_from(peer.ip())
    {
        tracing::info!(peer = %peer.ip(), "dashboard login refused: too many login attempts from this address");
        let per_minute = d.sessions.policy().logins_per_peer_per_minute;
        let why = format!(
            "Too many logins from this address (at most {per_minute} a minute, \
             --dashboard-logins-per-peer-per-minute): wait a minute and log in again."
        );
        return too_many(&d, &headers, &next, why, per_minute);
    }
    let token = field(&body, "token").unwrap_or_default();
    let token = token.trim();
    if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return page(
            &d,
            &headers,
            StatusCode::UNAUTHORIZED,
            &next,
            Some("Paste a bearer token.".to_owned()),
        );
    }
    match access.user(token).await {
        Ok(Some(user)) if !d.sessions.may_log_in(&user) => {
            tracing::info!(user = %user.name, "dashboard login refused: too many logins of this user");
            let per_minute = d.sessions.policy().logins_per_user_per_minute;
            let why = format!(
                "Too many logins of {} (at most {per_minute} a minute, \
                 --dashboard-logins-per-user-per-minute): wait a minute and log in again.",
                user.name,
            );
            too_many(&d, &headers, &next, why, per_minute)
        }
        Ok(Some(user)) => {
            // A new id on every login (no fixation); the session the browser had ends.
            if let Some(old) = cookie(&headers, SESSION_COOKIE) {
                d.sessions.remove(&old);
            }
            let id = match d.sessions.create(user.clone(), token.to_owned()) {
                Ok(id) => id,
                Err(e) => {
                    return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response();
                }
            };
            tracing::info!(user = %user.name, sessions = d.sessions.len(), "dashboard login");
            let mut resp = see_other(&next);
            let max_age = d.sessions.policy().max_age.as_secs();
            append_cookie(
                &mut resp,
                &set_cookie(SESSION_COOKIE, &id, "/", max_age, secure(&d, &headers)),
            );
            resp
        }
        Ok(None) => page(
            &d,
            &headers,
            StatusCode::UNAUTHORIZED,
            &next,
            Some("The API server did not accept this token.".to_owned()),
        ),
        Err(e) => unavailable(&d, &headers, "/login", &e.to_string()),
    }
}

/// `POST /logout` (form: `csrf`): end the session and clear its cookie.
pub async fn logout(State(d): State<Dashboard>, headers: HeaderMap, body: Bytes) -> Response {
    let id = cookie(&headers, SESSION_COOKIE);
    let token = field(&body, CSRF_FIELD);
    let Some((id, _)) = id
        .zip(token)
        .filter(|(id, t)| d.csrf.verify(Bound::Session(id), t))
    else {
        return (
            StatusCode::FORBIDDEN,
            "logout refused: missing or invalid CSRF token (log out from the dashboard's own page)\n",
        )
            .into_response();
    };
    d.sessions.remove(&id);
    let mut resp = see_other("/login");
    append_cookie(
        &mut resp,
        &set_cookie(SESSION_COOKIE, "", "/", 0, secure(&d, &headers)),
    );
    resp
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
        page(
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
        page(d, headers, StatusCode::SERVICE_UNAVAILABLE, path, Some(msg))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_server() {
        assert_eq!(local_path("/quotas/a/b"), "/quotas/a/b");
        assert_eq!(local_path("/?x=1"), "/?x=1");
        for bad in [
            "https://evil",
            "//evil",
            "/\\evil",
            "evil",
            "",
            "/login",
            "/logout",
        ] {
            assert_eq!(local_path(bad), "/", "{bad}");
        }
    }

    #[test]
    fn form_fields_are_url_decoded() {
        let body = b"token=a%2Bb.c&next=%2Fquotas%2Fx%2Fy";
        assert_eq!(field(body, "token").as_deref(), Some("a+b.c"));
        assert_eq!(field(body, "next").as_deref(), Some("/quotas/x/y"));
        assert_eq!(field(body, "nope"), None);
    }

    #[test]
    fn cookies_carry_every_flag() {
        assert_eq!(
            set_cookie("kq_session", "ab", "/", 28800, true),
            "kq_session=ab; Path=/; HttpOnly; SameSite=Strict; Max-Age=28800; Secure"
        );
        assert!(!set_cookie("a", "b", "/", 1, false).contains("Secure"));
    }
}
