//! The Drift and MembersReachable conditions' (status, reason, message), and how a condition is set.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use karmada_quota_core::status::{self as core_status, QuotaView};

use super::{
    REASON_NO_DRIFT, REASON_NO_MEMBERS, REASON_NOT_MEASURED, REASON_OBSERVED_ABOVE_PLACED,
    REASON_REACHABLE, REASON_UNREACHABLE,
};
use crate::members::Reach;

/// Separates a member's name from its error in the MembersReachable message
/// (`member2 unreachable: <error>; member3 unreachable: <error>`).
const UNREACHABLE_SEP: &str = " unreachable: ";

/// The member names a MembersReachable=False message lists.
pub(super) fn unreachable_names(message: &str) -> BTreeSet<&str> {
    message
        .split("; ")
        .filter_map(|part| part.split_once(UNREACHABLE_SEP).map(|(name, _)| name))
        .filter(|name| !name.is_empty() && !name.contains(' '))
        .collect()
}

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
                    .map(|obs| core_status::drift_message(&c.name, obs, &c.used))
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
    if !unreachable.is_empty() {
        return ("False", REASON_UNREACHABLE, unreachable.join("; "));
    }
    let connecting = reach.values().filter(|r| **r == Reach::Connecting).count();
    let reachable = reach.len() - connecting;
    let message = if connecting == 0 {
        format!("{} reachable", plural(reachable, "member cluster"))
    } else {
        format!(
            "{} reachable, {connecting} connecting",
            plural(reachable, "member cluster")
        )
    };
    ("True", REASON_REACHABLE, message)
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
