//! The minimal login form of `--dashboard-auth=kubernetes`: `GET /login` shows it, `POST
//! /login` takes a token, has the API server review it (TokenReview) and, when accepted,
//! sets it as an HttpOnly, SameSite=Strict cookie (`Secure` behind a TLS-terminating
//! proxy that sends `X-Forwarded-Proto: https`), then returns to the page asked for.
//! `POST /logout` clears the cookie. Nothing else is stored: every request is reviewed
//! again (through the cache).

use askama::Template;
use askama_web::WebTemplate;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use crate::Dashboard;
use crate::visible::COOKIE;

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
}

impl LoginPage {
    /// The page, returning to `next` (only a local path is kept; anything else is `/`).
    pub fn new(enabled: bool, next: &str, error: Option<String>) -> Self {
        Self {
            enabled,
            next: local_path(next),
            error,
        }
    }
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

/// Whether `token` can be a cookie value as is (a bearer token always can: base64url,
/// hex, dots, dashes).
fn cookie_safe(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_graphic() && !matches!(b, b'"' | b',' | b';' | b'\\'))
}

fn field(body: &[u8], name: &str) -> Option<String> {
    form_urlencoded::parse(body)
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// `GET /login[?next=/path]`.
pub async fn form(State(d): State<Dashboard>, uri: Uri) -> LoginPage {
    let next = uri
        .query()
        .and_then(|q| field(q.as_bytes(), "next"))
        .unwrap_or_else(|| "/".to_owned());
    LoginPage::new(d.access.is_some(), &next, None)
}

fn see_other(to: &str, cookie: String) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    let h = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(to) {
        h.insert(header::LOCATION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        h.insert(header::SET_COOKIE, v);
    }
    resp
}

fn behind_tls(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("https"))
}

/// `POST /login` (form: `token`, `next`).
pub async fn submit(State(d): State<Dashboard>, headers: HeaderMap, body: Bytes) -> Response {
    let next = local_path(&field(&body, "next").unwrap_or_else(|| "/".to_owned()));
    let Some(access) = &d.access else {
        return see_other(&next, format!("{COOKIE}=; Path=/; Max-Age=0"));
    };
    let token = field(&body, "token").unwrap_or_default();
    let token = token.trim();
    if !cookie_safe(token) {
        return (
            StatusCode::UNAUTHORIZED,
            LoginPage::new(true, &next, Some("Paste a bearer token.".to_owned())),
        )
            .into_response();
    }
    match access.user(token).await {
        Ok(Some(user)) => {
            tracing::info!(user = %user.name, "dashboard login");
            let secure = if behind_tls(&headers) { "; Secure" } else { "" };
            see_other(
                &next,
                format!("{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict{secure}"),
            )
        }
        Ok(None) => (
            StatusCode::UNAUTHORIZED,
            LoginPage::new(
                true,
                &next,
                Some("The API server did not accept this token.".to_owned()),
            ),
        )
            .into_response(),
        Err(e) => crate::visible::unavailable("/login", &e.to_string()),
    }
}

/// `POST /logout`: clear the cookie.
pub async fn logout() -> Response {
    see_other(
        "/login",
        format!("{COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    )
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
    fn only_token_characters_go_into_the_cookie() {
        assert!(cookie_safe("eyJhbGciOi.eyJpc3Mi-_x.sig"));
        assert!(cookie_safe("0123abcdef"));
        for bad in ["", "a b", "a;b", "a,b", "a\"b", "a\nb"] {
            assert!(!cookie_safe(bad), "{bad:?}");
        }
    }

    #[test]
    fn form_fields_are_url_decoded() {
        let body = b"token=a%2Bb.c&next=%2Fquotas%2Fx%2Fy";
        assert_eq!(field(body, "token").as_deref(), Some("a+b.c"));
        assert_eq!(field(body, "next").as_deref(), Some("/quotas/x/y"));
        assert_eq!(field(body, "nope"), None);
    }
}
