//! Whether a member's connection is verified: a member whose Cluster sets
//! `spec.insecureSkipTLSVerification`, whose endpoint is `http://`, or whose kubeconfig
//! sets `insecure-skip-tls-verify` would receive the member's bearer token over a channel
//! nobody verified. Such a member is refused (never connected, its Secret never read)
//! unless `--allow-insecure-members` names it (or is `*`); an allowed one is reached and
//! reported as reached without verification.
//!
//! ```text
//!  (endpoint, skip verify) ──► weaknesses: [] ─► Verified
//!                                          └──► allowed by name or * ─► Unverified(why)
//!                                               otherwise ────────────► Refused(why + how to allow)
//! ```

use std::collections::BTreeSet;

/// `--allow-insecure-members`: the members that may be reached without TLS verification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum AllowInsecure {
    /// None (the default).
    #[default]
    None,
    /// These members.
    Names(BTreeSet<String>),
    /// Every member (`*`).
    All,
}

impl AllowInsecure {
    /// From the flag's comma-separated values: member names, or `*` for all; blanks are
    /// ignored.
    pub fn from_values<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let names: BTreeSet<String> = values
            .into_iter()
            .map(str::trim)
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
            .collect();
        if names.contains("*") {
            Self::All
        } else if names.is_empty() {
            Self::None
        } else {
            Self::Names(names)
        }
    }

    /// Whether `member` may be reached without verification.
    pub fn allows(&self, member: &str) -> bool {
        match self {
            Self::None => false,
            Self::Names(names) => names.contains(member),
            Self::All => true,
        }
    }
}

/// Whether a member may be connected, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// HTTPS with the server's certificate verified.
    Verified,
    /// Not verified, allowed by `--allow-insecure-members`: why it is not verified.
    Unverified(String),
    /// Not verified and not allowed: why, and how to allow it. Not connected.
    Refused(String),
}

/// The decision for `member` at `endpoint` (its URL) when its configuration asks to skip
/// certificate verification (`skip_verify`); `source` names where that was asked
/// (`spec.insecureSkipTLSVerification` of its Cluster, or its kubeconfig's
/// `insecure-skip-tls-verify`).
pub fn decide(
    member: &str,
    endpoint: &str,
    skip_verify: bool,
    source: &str,
    allow: &AllowInsecure,
) -> Trust {
    let mut why = Vec::new();
    let scheme = endpoint
        .trim()
        .split_once("://")
        .map_or("", |(scheme, _)| scheme);
    if scheme.eq_ignore_ascii_case("http") {
        why.push(format!(
            "its endpoint {endpoint} is plain http:// (the token would travel unencrypted)"
        ));
    }
    if skip_verify {
        why.push(format!(
            "{source} is true (the member's certificate would not be verified)"
        ));
    }
    if why.is_empty() {
        return Trust::Verified;
    }
    let why = why.join(" and ");
    if allow.allows(member) {
        Trust::Unverified(why)
    } else {
        // No "; " inside: the MembersReachable message separates members with it.
        Trust::Refused(format!(
            "refused: {why}, so it is not connected and its credentials are not sent \
             (allow it with --allow-insecure-members={member})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLUSTER: &str = "spec.insecureSkipTLSVerification";

    #[test]
    fn the_decision_table() {
        let none = AllowInsecure::default();
        let named = AllowInsecure::from_values(["member2", " member3 "]);
        let all = AllowInsecure::from_values(["*"]);
        let https = "https://10.0.0.1:6443";
        let http = "http://10.0.0.1:8080";
        // (member, endpoint, skip verify, allow) → verified / unverified / refused
        let cases: [(&str, &str, bool, &AllowInsecure, &str); 10] = [
            ("member1", https, false, &none, "verified"),
            ("member1", https, false, &all, "verified"),
            ("member1", https, true, &none, "refused"),
            ("member1", http, false, &none, "refused"),
            ("member1", "HTTP://10.0.0.1", false, &none, "refused"),
            ("member1", https, true, &named, "refused"),
            ("member2", https, true, &named, "unverified"),
            ("member3", http, false, &named, "unverified"),
            ("member1", https, true, &all, "unverified"),
            ("member1", http, true, &all, "unverified"),
        ];
        for (member, endpoint, skip, allow, want) in cases {
            let got = decide(member, endpoint, skip, CLUSTER, allow);
            let kind = match &got {
                Trust::Verified => "verified",
                Trust::Unverified(_) => "unverified",
                Trust::Refused(_) => "refused",
            };
            assert_eq!(
                kind, want,
                "{member} {endpoint} skip={skip} {allow:?}: {got:?}"
            );
        }
    }

    #[test]
    fn a_refusal_says_why_and_how_to_allow() {
        let Trust::Refused(why) = decide(
            "member1",
            "http://10.0.0.1:8080",
            true,
            CLUSTER,
            &AllowInsecure::None,
        ) else {
            panic!("not refused");
        };
        assert!(why.contains("plain http://"), "{why}");
        assert!(
            why.contains("spec.insecureSkipTLSVerification is true"),
            "{why}"
        );
        assert!(why.contains("--allow-insecure-members=member1"), "{why}");
        assert!(
            !why.contains("; "),
            "the condition separates members with \"; \": {why}"
        );
        let Trust::Unverified(why) = decide(
            "m",
            "https://x",
            true,
            "insecure-skip-tls-verify of its kubeconfig",
            &AllowInsecure::All,
        ) else {
            panic!("not allowed");
        };
        assert_eq!(
            why,
            "insecure-skip-tls-verify of its kubeconfig is true (the member's certificate \
             would not be verified)"
        );
    }

    #[test]
    fn the_flag_values() {
        assert_eq!(AllowInsecure::from_values([]), AllowInsecure::None);
        assert_eq!(AllowInsecure::from_values(["", " "]), AllowInsecure::None);
        assert_eq!(AllowInsecure::from_values(["a", "*"]), AllowInsecure::All);
        let named = AllowInsecure::from_values(["a", "b"]);
        assert!(named.allows("a") && named.allows("b") && !named.allows("c"));
        assert!(!named.allows("*"));
    }
}
