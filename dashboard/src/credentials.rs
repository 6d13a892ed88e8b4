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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

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
