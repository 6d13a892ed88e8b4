//! Whether a new status only folds observed entries into `used` — the one kind of change
//! the controller may put off (docs/design.md §6, "folding without fighting").
//!
//! When the controller observes a binding it moves the binding's reservation entry into
//! `used`: `used` grows by what the entry held and the entry goes, so effective usage
//! (`used` + Σ entries, what admission reads) stays the same. Such a write changes nothing
//! admission sees; it only keeps the entry list short. Every other change — a binding
//! gone or scaled down, an expired entry dropped, a new hard name, a condition's status or
//! reason, replicas starting or ending to drain in a member after a failover — moves
//! effective usage or what users read, and is written at once.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_crds::KarmadaQuotaStatus;
use karmada_quota_crds::convert::parse_status;

/// One member's draining: name, `draining`, `drainingUnknown`.
type Draining<'a> = (&'a str, Option<&'a BTreeMap<String, Quantity>>, bool);

/// What drains per member after a failover (`status.clusters[].draining`,
/// `drainingUnknown`), of the members where something drains.
fn draining(s: &KarmadaQuotaStatus) -> Vec<Draining<'_>> {
    s.clusters
        .iter()
        .filter(|c| c.draining.is_some() || c.draining_unknown)
        .map(|c| (c.name.as_str(), c.draining.as_ref(), c.draining_unknown))
        .collect()
}

/// `next` differs from `current` only by folding: the same hard limits, observed
/// generation, effective usage, conditions (type, status, reason), draining members and
/// folded batches (a new `foldedThrough` lets the batches it covers be deleted: written
/// at once); every entry parses in both.
pub fn fold_only(current: &KarmadaQuotaStatus, next: &KarmadaQuotaStatus) -> bool {
    if current.hard != next.hard
        || current.observed_generation != next.observed_generation
        || current.folded_through != next.folded_through
    {
        return false;
    }
    fn key(s: &KarmadaQuotaStatus) -> Vec<(&str, &str, &str)> {
        let mut k: Vec<(&str, &str, &str)> = s
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.reason.as_str()))
            .collect();
        k.sort_unstable();
        k
    }
    if key(current) != key(next) || draining(current) != draining(next) {
        return false;
    }
    let (a, b) = (parse_status(Some(current)), parse_status(Some(next)));
    if !a.errors.is_empty() || !b.errors.is_empty() {
        return false;
    }
    let (Some(used_a), Some(used_b)) = (&a.used, &b.used) else {
        return false;
    };
    effective_usage(used_a, &a.reservations, None) == effective_usage(used_b, &b.reservations, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
    use karmada_quota_crds::convert::unix_to_time;
    use karmada_quota_crds::quota::{Reservation, ReservedBy};

    fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
            .collect()
    }

    fn entry(uid: &str, pods: &str) -> Reservation {
        Reservation {
            reserved_by: ReservedBy {
                name: format!("rb-{uid}"),
                uid: uid.into(),
                ..ReservedBy::default()
            },
            generation: 1,
            reserved: list(&[("pods", pods)]),
            expiration_time: unix_to_time(4_000_000_000),
        }
    }

    fn status(used: &str, entries: &[Reservation], ready_message: &str) -> KarmadaQuotaStatus {
        KarmadaQuotaStatus {
            hard: list(&[("pods", "10")]),
            used: list(&[("pods", used)]),
            reservations: entries.to_vec(),
            conditions: vec![Condition {
                type_: "Ready".into(),
                status: "True".into(),
                reason: "Synced".into(),
                message: ready_message.into(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::UNIX_EPOCH,
                ),
                observed_generation: Some(1),
            }],
            observed_generation: Some(1),
            ..KarmadaQuotaStatus::default()
        }
    }

    #[test]
    fn folding_an_observed_entry_into_used_is_fold_only() {
        let current = status("2", &[entry("a", "1"), entry("b", "3")], "from 2 bindings");
        let folded = status("5", &[entry("a", "1")], "from 3 bindings");
        assert!(fold_only(&current, &folded));
    }

    #[test]
    fn a_change_of_effective_usage_conditions_or_limits_is_not() {
        let current = status("2", &[entry("a", "1")], "m");
        // The binding went (or an expired entry was dropped): effective usage falls.
        assert!(!fold_only(&current, &status("2", &[], "m")));
        assert!(!fold_only(&current, &status("1", &[entry("a", "1")], "m")));
        let mut not_ready = status("2", &[entry("a", "1")], "m");
        not_ready.conditions[0].status = "False".into();
        assert!(!fold_only(&current, &not_ready));
        let mut more = status("2", &[entry("a", "1")], "m");
        more.hard = list(&[("pods", "20")]);
        assert!(!fold_only(&current, &more));
        // A failover: member1 starts draining (effective usage unchanged under Show).
        let mut draining = current.clone();
        draining.clusters = vec![karmada_quota_crds::quota::ClusterUsage {
            name: "member1".into(),
            draining: Some(list(&[("pods", "2")])),
            ..Default::default()
        }];
        assert!(!fold_only(&current, &draining));
        assert!(!fold_only(&draining, &current));
        // Not synced yet: the first used is always written.
        let mut unsynced = current.clone();
        unsynced.used.clear();
        assert!(!fold_only(&unsynced, &current));
    }
}
