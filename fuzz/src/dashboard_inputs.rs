//! `dashboard_inputs`: what a browser sends the dashboard before any login — the
//! `Cookie` and `Authorization` headers ([`credentials::bearer`], [`credentials::cookie`] for the
//! session and CSRF cookies, a CSRF token checked by [`csrf::Csrf::verify`]), the Report page's query
//! string decoded like axum's `Query` ([`report::Form`], its `request` and
//! `query_string`), and the login form's `next` target ([`login::local_path`]).
//!
//! Input: `<Cookie header> 0xFF <Authorization header> 0xFF <query string> 0xFF <next>`
//! (a header that is not a valid header value is left out, as hyper would refuse it).
//!
//! Laws:
//! - a bearer token is never empty and is the trimmed credentials of `Bearer`; a cookie
//!   value is never empty and is the value of a pair of that name as sent (no `;`);
//! - a CSRF token made up of the input never verifies for the session id or login nonce
//!   the input names (the key is random), and the token the key made does;
//! - a query string that decodes to a valid report request writes itself back
//!   (`query_string`) as one that decodes to the same request (the CSV and JSON links
//!   ask for exactly the page's report);
//! - `next` becomes a local path: `/…`, never `//`, no `\`, no control character, never
//!   the login pages; a local path that is not a login page is kept as is.

use axum::http::{HeaderMap, HeaderValue, header};
use karmada_quota_dashboard::credentials::{self, bearer};
use karmada_quota_dashboard::csrf::{Bound, CSRF_COOKIE, Csrf};
use karmada_quota_dashboard::login::local_path;
use karmada_quota_dashboard::report::Form;
use karmada_quota_dashboard::session::SESSION_COOKIE;

use crate::parts::split;

/// The instant relative times are read at (2026-01-01T00:00:00Z).
const NOW: i64 = 1_767_225_600;

/// Runs one input.
pub fn run(data: &[u8]) {
    let [cookie, authorization, query, next] = split::<4>(data);
    check_token(cookie, authorization);
    check_form(query);
    if let Ok(next) = std::str::from_utf8(next) {
        check_next(next);
    }
}

fn check_token(cookie: &[u8], authorization: &[u8]) {
    let mut headers = HeaderMap::new();
    let cookie = HeaderValue::from_bytes(cookie).ok();
    let authorization = HeaderValue::from_bytes(authorization)
        .ok()
        .filter(|_| !authorization.is_empty());
    if let Some(c) = &cookie {
        headers.insert(header::COOKIE, c.clone());
    }
    if let Some(a) = &authorization {
        headers.insert(header::AUTHORIZATION, a.clone());
    }
    if let Some(token) = bearer(&headers) {
        assert!(!token.is_empty(), "an empty bearer token");
        let sent = authorization
            .as_ref()
            .and_then(|a| a.to_str().ok())
            .expect("a bearer token without an Authorization header");
        let (scheme, rest) = sent.trim().split_once(' ').expect("no scheme");
        assert!(scheme.eq_ignore_ascii_case("bearer"), "not a Bearer scheme");
        assert_eq!(token, rest.trim(), "not the bearer credentials");
    }
    for name in [SESSION_COOKIE, CSRF_COOKIE] {
        let Some(value) = credentials::cookie(&headers, name) else {
            continue;
        };
        let sent = cookie
            .as_ref()
            .and_then(|c| c.to_str().ok())
            .expect("a cookie without a Cookie header");
        assert!(!value.is_empty() && !value.contains(';'), "{value:?}");
        assert!(
            sent.split(';')
                .any(|pair| pair.trim() == format!("{name}={value}")),
            "{value:?} is not the value of a {name} pair of {sent:?}"
        );
        check_csrf(&value);
    }
}

/// A token an attacker makes up never verifies; the key's own token does, for its binding
/// only.
fn check_csrf(value: &str) {
    let Ok(csrf) = Csrf::new() else {
        return;
    };
    for bound in [Bound::Session(value), Bound::Login(value)] {
        assert!(!csrf.verify(bound, value), "a guessed CSRF token verified");
    }
    let token = csrf.token(Bound::Session(value));
    assert!(csrf.verify(Bound::Session(value), &token));
    assert!(
        !csrf.verify(Bound::Login(value), &token),
        "a token crossed bindings"
    );
}

fn check_form(query: &[u8]) {
    let Ok(form) = serde_urlencoded::from_bytes::<Form>(query) else {
        return;
    };
    let Ok(request) = form.request("team", NOW) else {
        return;
    };
    assert!(request.window.from < request.window.to, "an empty window");
    assert!(request.window.step > 0, "a zero step");
    assert!(!request.by.is_empty(), "no grouping");
    let written = form.query_string();
    let again: Form = serde_urlencoded::from_str(&written)
        .unwrap_or_else(|e| panic!("{written:?} does not decode: {e}"));
    assert_eq!(
        again.request("team", NOW).as_ref(),
        Ok(&request),
        "{written:?} asks for another report"
    );
}

fn check_next(next: &str) {
    let path = local_path(next);
    assert!(path.starts_with('/'), "{next:?} → {path:?}");
    assert!(!path.starts_with("//"), "{next:?} → {path:?}");
    assert!(!path.contains('\\'), "{next:?} → {path:?}");
    assert!(!path.chars().any(char::is_control), "{next:?} → {path:?}");
    assert!(
        path == "/" || !(path.starts_with("/login") || path.starts_with("/logout")),
        "{next:?} → {path:?}"
    );
    let local = next.starts_with('/')
        && !next.starts_with("//")
        && !next.contains('\\')
        && !next.chars().any(char::is_control)
        && !next.starts_with("/login")
        && !next.starts_with("/logout");
    if local {
        assert_eq!(path, next, "a local path was changed");
    }
}
