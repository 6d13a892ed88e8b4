//! `dashboard_inputs`: what a browser sends the dashboard before any login — the
//! `Cookie` and `Authorization` headers ([`visible::token_of`]), the Report page's query
//! string decoded like axum's `Query` ([`report::Form`], its `request` and
//! `query_string`), and the login form's `next` target ([`login::local_path`]).
//!
//! Input: `<Cookie header> 0xFF <Authorization header> 0xFF <query string> 0xFF <next>`
//! (a header that is not a valid header value is left out, as hyper would refuse it).
//!
//! Laws:
//! - a token is never empty; from the cookie it is the value of the dashboard's cookie
//!   pair as sent (no `;`), from `Authorization` the trimmed credentials of `Bearer`;
//! - a query string that decodes to a valid report request writes itself back
//!   (`query_string`) as one that decodes to the same request (the CSV and JSON links
//!   ask for exactly the page's report);
//! - `next` becomes a local path: `/…`, never `//`, no `\`, no control character, never
//!   the login pages; a local path that is not a login page is kept as is.

use axum::http::{HeaderMap, HeaderValue, header};
use karmada_quota_dashboard::login::local_path;
use karmada_quota_dashboard::report::Form;
use karmada_quota_dashboard::visible::{COOKIE, token_of};

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
    let Some(token) = token_of(&headers) else {
        return;
    };
    assert!(!token.is_empty(), "an empty token");
    let bearer = authorization
        .as_ref()
        .and_then(|a| a.to_str().ok())
        .and_then(|a| a.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, t)| t.trim().to_owned())
        .filter(|t| !t.is_empty());
    match bearer {
        Some(b) => assert_eq!(token, b, "not the bearer token"),
        None => {
            let sent = cookie
                .as_ref()
                .and_then(|c| c.to_str().ok())
                .expect("a token without a header that carries one");
            assert!(
                !token.contains(';'),
                "a cookie token spans pairs: {token:?}"
            );
            assert!(
                sent.split(';')
                    .any(|pair| pair.trim() == format!("{COOKIE}={token}")),
                "token {token:?} is not the value of a {COOKIE} pair of {sent:?}"
            );
        }
    }
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
