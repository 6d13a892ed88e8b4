//! Strings the binaries did not write — an AdmissionReview's fields, a template's
//! apiVersion and kind, an error that echoes them — kept in bounds before they reach a
//! log line, an error message or a cache key.
//!
//! ```text
//!  untrusted &str ─► clip(s)                 ─► Display: whole when ≤ LOG_PREFIX_CHARS chars,
//!                                                else the first 128 chars + "…(N bytes)"
//!                 ─► group_version_fits(s)   ─► false past what Kubernetes allows
//!                                                (group ≤ 253, version ≤ 63, "group/version")
//!                 ─► kind_fits / name_fits … ─► the same for the other identifiers
//! ```
//!
//! A value longer than Kubernetes allows for its field cannot name a real object: callers
//! refuse it without a lookup, and never keep it as a key.

use std::borrow::Cow;
use std::fmt;

/// Characters of an untrusted value a log line or message shows before cutting it.
pub const LOG_PREFIX_CHARS: usize = 128;
/// Longest API group (a DNS subdomain).
pub const MAX_GROUP_LEN: usize = 253;
/// Longest API version (a DNS label).
pub const MAX_VERSION_LEN: usize = 63;
/// Longest `group/version`: a group, `/`, a version.
pub const MAX_GROUP_VERSION_LEN: usize = MAX_GROUP_LEN + 1 + MAX_VERSION_LEN;
/// Longest kind (a CRD's kind must lower-case to a DNS label).
pub const MAX_KIND_LEN: usize = 63;
/// Longest object name (a DNS subdomain).
pub const MAX_NAME_LEN: usize = 253;
/// Longest namespace name (a DNS label).
pub const MAX_NAMESPACE_LEN: usize = 63;
/// Longest uid the binaries keep (the apiserver writes 36-byte UUIDs).
pub const MAX_UID_LEN: usize = 128;

/// An untrusted value as a log line shows it; see [`clip`].
#[derive(Clone, Copy, Debug)]
pub struct Clipped<'a>(&'a str);

/// `s` for a log line or a message: whole when it has at most [`LOG_PREFIX_CHARS`]
/// characters, else its first [`LOG_PREFIX_CHARS`] characters and `…(N bytes)`, N being
/// its whole length.
pub fn clip(s: &str) -> Clipped<'_> {
    Clipped(s)
}

impl fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.char_indices().nth(LOG_PREFIX_CHARS) {
            None => f.write_str(self.0),
            Some((cut, _)) => write!(f, "{}…({} bytes)", &self.0[..cut], self.0.len()),
        }
    }
}

/// `s` whole when it has at most `max` bytes (what Kubernetes allows for its field, so a
/// real value is never cut), else [`clip`]ped.
pub fn within(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(clip(s).to_string())
    }
}

/// Whether `api_version` (`v1`, `apps/v1`) is no longer than Kubernetes allows: a group of
/// at most [`MAX_GROUP_LEN`] bytes and a version of at most [`MAX_VERSION_LEN`].
pub fn group_version_fits(api_version: &str) -> bool {
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    group.len() <= MAX_GROUP_LEN && version.len() <= MAX_VERSION_LEN
}

/// Whether `kind` is no longer than [`MAX_KIND_LEN`].
pub fn kind_fits(kind: &str) -> bool {
    kind.len() <= MAX_KIND_LEN
}

/// Why an apiVersion cannot be looked up, when it is longer than any group-version; the
/// message shows it clipped.
pub fn group_version_too_long(api_version: &str) -> Option<String> {
    (!group_version_fits(api_version)).then(|| {
        format!(
            "apiVersion {:?} is {} bytes long; a group-version is at most {MAX_GROUP_VERSION_LEN} \
             (group {MAX_GROUP_LEN}, version {MAX_VERSION_LEN}): not looked up",
            clip(api_version).to_string(),
            api_version.len()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_values_are_shown_whole() {
        assert_eq!(clip("apps/v1").to_string(), "apps/v1");
        let exactly = "x".repeat(LOG_PREFIX_CHARS);
        assert_eq!(clip(&exactly).to_string(), exactly);
    }

    #[test]
    fn long_values_keep_their_prefix_and_say_their_length() {
        let big = "a".repeat(1 << 20);
        let shown = clip(&big).to_string();
        assert_eq!(shown, format!("{}…(1048576 bytes)", "a".repeat(128)));
        assert!(shown.len() < 160, "{}", shown.len());
    }

    #[test]
    fn within_keeps_values_kubernetes_allows_whole() {
        let name = "n".repeat(MAX_NAME_LEN);
        assert_eq!(within(&name, MAX_NAME_LEN), name);
        let forged = "n".repeat(MAX_NAME_LEN + 1);
        assert!(within(&forged, MAX_NAME_LEN).ends_with("…(254 bytes)"));
    }

    #[test]
    fn cuts_on_a_character_boundary() {
        let s = "é".repeat(200);
        let shown = clip(&s).to_string();
        assert!(shown.starts_with(&"é".repeat(128)));
        assert!(shown.ends_with("…(400 bytes)"), "{shown}");
    }

    #[test]
    fn group_versions_longer_than_kubernetes_allows_do_not_fit() {
        assert!(group_version_fits("v1"));
        assert!(group_version_fits("apps/v1"));
        let group = "g".repeat(MAX_GROUP_LEN);
        let version = "v".repeat(MAX_VERSION_LEN);
        assert!(group_version_fits(&format!("{group}/{version}")));
        assert!(!group_version_fits(&format!("{group}g/v1")));
        assert!(!group_version_fits(&format!("{version}v")));
        assert!(!group_version_fits(&"a".repeat(1 << 20)));
        let why = group_version_too_long(&"a".repeat(1 << 20)).unwrap();
        assert!(why.contains("1048576 bytes long"), "{why}");
        assert!(why.len() < 400, "{}", why.len());
        assert_eq!(group_version_too_long("apps/v1"), None);
        assert!(kind_fits("Deployment"));
        assert!(!kind_fits(&"K".repeat(64)));
    }
}
