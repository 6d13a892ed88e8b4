//! CSRF tokens for the dashboard's two forms (every POST it takes): each form carries a
//! hidden `csrf` field that is an HMAC-SHA256, under a key drawn at start, of what the
//! form is bound to:
//!
//! - the login form (no session yet): a random nonce the browser also holds in the
//!   `kq_csrf` cookie (HttpOnly, SameSite=Strict, Path=/ so that every login page a
//!   request meets, wherever, reuses it) — a signed double-submit:
//!   another site can neither read the field nor mint one for a nonce it planted;
//! - the logout form: the session id (a per-session synchronizer token that needs no
//!   state beyond the session).
//!
//! A POST whose field does not verify is refused with 403 before anything else happens.

use ring::hmac;
use ring::rand::SystemRandom;

use crate::session::{RandomError, hex, random_hex};

/// The login form's double-submit cookie.
pub const CSRF_COOKIE: &str = "kq_csrf";
/// The hidden form field.
pub const CSRF_FIELD: &str = "csrf";
/// Random bytes of a login nonce.
const NONCE_BYTES: usize = 16;

/// What a token is bound to.
#[derive(Clone, Copy, Debug)]
pub enum Bound<'a> {
    /// The login form, through the nonce of the `kq_csrf` cookie.
    Login(&'a str),
    /// A session's forms, through the session id.
    Session(&'a str),
}

impl Bound<'_> {
    fn message(&self) -> String {
        match self {
            Bound::Login(nonce) => format!("login\0{nonce}"),
            Bound::Session(id) => format!("session\0{id}"),
        }
    }
}

/// The key tokens are signed with (one per process).
pub struct Csrf {
    key: hmac::Key,
}

impl std::fmt::Debug for Csrf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Csrf { key: <secret> }")
    }
}

impl Csrf {
    /// A fresh random key.
    pub fn new() -> Result<Self, RandomError> {
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &SystemRandom::new())
            .map_err(|_| RandomError)?;
        Ok(Self { key })
    }

    /// The token of a form bound to `to`.
    pub fn token(&self, to: Bound<'_>) -> String {
        hex(hmac::sign(&self.key, to.message().as_bytes()).as_ref())
    }

    /// Whether `token` is the token of a form bound to `to` (compared in constant time).
    pub fn verify(&self, to: Bound<'_>, token: &str) -> bool {
        let Some(tag) = unhex(token) else {
            return false;
        };
        hmac::verify(&self.key, to.message().as_bytes(), &tag).is_ok()
    }
}

/// A new login nonce.
pub fn nonce() -> Result<String, RandomError> {
    random_hex(NONCE_BYTES)
}

/// Whether `nonce` has the shape of one [`nonce`] makes.
pub fn well_formed_nonce(nonce: &str) -> bool {
    nonce.len() == NONCE_BYTES * 2 && nonce.bytes().all(|b| b.is_ascii_hexdigit())
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || s.len() > 128 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_verifies_only_for_what_it_is_bound_to_and_this_key() {
        let c = Csrf::new().unwrap();
        let n = nonce().unwrap();
        assert!(well_formed_nonce(&n));
        let t = c.token(Bound::Login(&n));
        assert!(c.verify(Bound::Login(&n), &t));
        assert!(!c.verify(Bound::Session(&n), &t), "login ≠ session");
        assert!(!c.verify(Bound::Login("other"), &t));
        assert!(
            !Csrf::new().unwrap().verify(Bound::Login(&n), &t),
            "other key"
        );
        for bad in [
            "",
            "zz",
            &t[..t.len() - 2],
            &"0".repeat(64),
            &"a".repeat(1000),
        ] {
            assert!(!c.verify(Bound::Login(&n), bad), "{bad}");
        }
    }
}
