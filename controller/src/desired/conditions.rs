//! The Drift and MembersReachable conditions' (status, reason, message), and how a condition is set.
//!
//! MembersReachable also names every member reached without TLS verification (allowed by
//! `--allow-insecure-members`), with reason `ReachableUnverified` when nothing is
//! unreachable: an operator sees on each quota which of its numbers came over an
//! unverified connection.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use karmada_quota_core::status::{self as core_status, QuotaView};

use super::{
    REASON_NO_DRIFT, REASON_NO_MEMBERS, REASON_NOT_MEASURED, REASON_OBSERVED_ABOVE_PLACED,
    REASON_REACHABLE, REASON_REACHABLE_UNVERIFIED, REASON_UNREACHABLE,
};
use crate::members::Reach;

/// Separates a member's name from its error in the MembersReachable message
/// (`member2 unreachable: <error>; member3 unreachable: <error>`).
const UNREACHABLE_SEP: &str = " unreachable: ";

/// The member names a MembersReachable=False message lists.
pub(super) fn unreachable_names(message: &str) -> BTreeSet<&str> {
    unreachable_members(message).into_keys().collect()
}

/// The members a MembersReachable=False message lists, each with its error: how a
/// replica that measures nothing (`--role=dashboard`) learns which members are down.
pub fn unreachable_members(message: &str) -> BTreeMap<&str, &str> {
    message
        .split("; ")
        .filter_map(|part| part.split_once(UNREACHABLE_SEP))
        .filter(|(name, _)| !name.is_empty() && !name.contains(' '))
        .collect()
}

/// Introduces the members reached without verification in the MembersReachable message.
pub const UNVERIFIED_PREFIX: &str =
    "reached WITHOUT TLS verification (allowed by --allow-insecure-members): ";

/// Longest error text of one member in the MembersReachable message.
const MAX_MEMBER_ERROR: usize = 300;

pub(super) fn has_condition(conditions: &[Condition], type_: &str) -> bool {
    conditions.iter().any(|c| c.type_ == type_)
}

pub(super) fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// (status, reason, message) of the Drift condition.
pub(super) fn drift_condition(view: &QuotaView) -> (&'static str, &'static str, String) {
    let measured = view
        .clusters
        .iter()
        .filter(|c| c.observed.is_some())
        .count();
    if !view.drift.is_empty() {
        let message = view
            .clusters
            .iter()
            .filter(|c| view.drift.contains_key(&c.name))
            .filter_map(|c| {
                c.observed
                    .as_ref()
                    .map(|obs| core_status::drift_message(&c.name, obs, &c.expected()))
            })
            .collect::<Vec<_>>()
            .join("; ");
        ("True", REASON_OBSERVED_ABOVE_PLACED, message)
    } else if measured == 0 {
        (
            "Unknown",
            REASON_NOT_MEASURED,
            "no member cluster is measured".to_owned(),
        )
    } else {
        (
            "False",
            REASON_NO_DRIFT,
            format!(
                "{} {} at most what Karmada placed",
                plural(measured, "measured cluster"),
                if measured == 1 { "runs" } else { "run" }
            ),
        )
    }
}

/// (status, reason, message) of the MembersReachable condition.
pub(super) fn members_condition(
    reach: &BTreeMap<String, Reach>,
) -> (&'static str, &'static str, String) {
    if reach.is_empty() {
        return (
            "Unknown",
            REASON_NO_MEMBERS,
            "no member cluster to measure (no Cluster with apiEndpoint and secretRef, no --member-kubeconfig)"
                .to_owned(),
        );
    }
    let unreachable: Vec<String> = reach
        .iter()
        .filter_map(|(name, r)| match r {
            Reach::Unreachable(e) => Some(format!(
                "{name}{UNREACHABLE_SEP}{}",
                truncate(e, MAX_MEMBER_ERROR)
            )),
            _ => None,
        })
        .collect();
    let unverified: Vec<String> = reach
        .iter()
        .filter_map(|(name, r)| match r {
            Reach::Unverified(why) => Some(format!("{name} ({})", truncate(why, MAX_MEMBER_ERROR))),
            _ => None,
        })
        .collect();
    let unverified =
        (!unverified.is_empty()).then(|| format!("{UNVERIFIED_PREFIX}{}", unverified.join(", ")));
    if !unreachable.is_empty() {
        let mut message = unreachable.join("; ");
        if let Some(u) = &unverified {
            message = format!("{message}; {u}");
        }
        return ("False", REASON_UNREACHABLE, message);
    }
    let connecting = reach.values().filter(|r| **r == Reach::Connecting).count();
    let reachable = reach.len() - connecting;
    let mut message = if connecting == 0 {
        format!("{} reachable", plural(reachable, "member cluster"))
    } else {
        format!(
            "{} reachable, {connecting} connecting",
            plural(reachable, "member cluster")
        )
    };
    match unverified {
        Some(u) => {
            message = format!("{message}; {u}");
            ("True", REASON_REACHABLE_UNVERIFIED, message)
        }
        None => ("True", REASON_REACHABLE, message),
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Set a condition; `lastTransitionTime` changes only when the status flips.
pub(super) fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    generation: Option<i64>,
    now: jiff::Timestamp,
) {
    let fresh = |last_transition_time| Condition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let ltt = if c.status == status {
                c.last_transition_time.clone()
            } else {
                Time(now)
            };
            *c = fresh(ltt);
        }
        None => conditions.push(fresh(Time(now))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reach(members: &[(&str, Reach)]) -> BTreeMap<String, Reach> {
        members
            .iter()
            .map(|(n, r)| ((*n).to_owned(), r.clone()))
            .collect()
    }

    #[test]
    fn members_reached_without_verification_are_named() {
        let why = "spec.insecureSkipTLSVerification of its Cluster is true";
        let (status, reason, message) = members_condition(&reach(&[
            ("member1", Reach::Reachable),
            ("member2", Reach::Unverified(why.into())),
        ]));
        assert_eq!((status, reason), ("True", REASON_REACHABLE_UNVERIFIED));
        assert_eq!(
            message,
            format!("2 member clusters reachable; {UNVERIFIED_PREFIX}member2 ({why})")
        );
        // Alongside an unreachable (or refused) member, both are said.
        let (status, reason, message) = members_condition(&reach(&[
            ("member2", Reach::Unverified(why.into())),
            (
                "member3",
                Reach::Unreachable("refused: its endpoint is plain http://".into()),
            ),
        ]));
        assert_eq!((status, reason), ("False", REASON_UNREACHABLE));
        assert!(
            message.starts_with("member3 unreachable: refused: "),
            "{message}"
        );
        assert!(
            message.ends_with(&format!("{UNVERIFIED_PREFIX}member2 ({why})")),
            "{message}"
        );
        assert_eq!(unreachable_names(&message), BTreeSet::from(["member3"]));
        // Verified members only: as before.
        let (_, reason, message) = members_condition(&reach(&[("member1", Reach::Reachable)]));
        assert_eq!(
            (reason, message.as_str()),
            (REASON_REACHABLE, "1 member cluster reachable")
        );
    }
}
