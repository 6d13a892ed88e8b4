//! Where a request carries its credentials: the `Authorization: Bearer` header and the
//! cookies (the session id, the CSRF token). Read by [`crate::visible`] (who is asking)
//! and [`crate::login`] (the login form's CSRF cookie); nothing here decides anything.

use axum::http::{HeaderMap, header};

/// The `Authorization: Bearer` token of a request.
pub fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_owned())
        })
        .filter(|t| !t.is_empty())
}

/// The value of cookie `name`, when present and not empty.
pub fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, v)| *k == name && !v.is_empty())
        .map(|(_, v)| v.to_owned())
}
