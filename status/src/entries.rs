//! What each writer may do to `status.reservations` — the reservation lifetime rule.
//!
//! An entry counts toward effective usage (`used` + Σ entries) from the moment the webhook
//! writes it until the controller removes it, whether its `expirationTime` has passed or
//! not. Only the controller removes entries: an observed one when it folds the binding into
//! `used` (in the same status write), a never-seen one once it has expired
//! (`core::ledger::prune`). The expiration time is what lets the controller drop an entry
//! whose binding never appeared; it is not a limit on how long the webhook counts it, so an
//! outage of the controller can never make admitted usage vanish.
//!
//! The webhook therefore only [`add`]s entries, and removes nothing but the entries it
//! wrote itself for a request that ended refused, failed or timed out ([`roll_back`]).
//! When a quota already holds `--max-reservations` entries it refuses new admissions
//! (HTTP 429, `core::decision`), never drops entries to make room.

use karmada_quota_core::quota::Reservation;
use karmada_quota_crds::KarmadaQuotaStatus;
use karmada_quota_crds::convert::reservation_to_api;

/// Upsert `entries` by (uid, generation): the same admission retried never counts twice.
/// Nothing else in the list changes.
pub fn add<'a>(
    status: &mut KarmadaQuotaStatus,
    entries: impl IntoIterator<Item = &'a Reservation>,
) {
    for entry in entries {
        let api = reservation_to_api(entry);
        match status
            .reservations
            .iter_mut()
            .find(|r| r.reserved_by.uid == api.reserved_by.uid && r.generation == api.generation)
        {
            Some(existing) => *existing = api,
            None => status.reservations.push(api),
        }
    }
}

/// Remove `entries` — the ones this writer wrote for a request that did not end admitted.
/// Only an entry equal to one of them in every field goes: if another replica has since
/// upserted the same (uid, generation) with a new expiration, that entry stays. Returns
/// how many were removed.
pub fn roll_back(status: &mut KarmadaQuotaStatus, entries: &[Reservation]) -> usize {
    let ours: Vec<_> = entries.iter().map(reservation_to_api).collect();
    let before = status.reservations.len();
    status.reservations.retain(|r| !ours.contains(r));
    before - status.reservations.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::ResourceList;
    use karmada_quota_core::quota::ReservedBy;

    fn entry(uid: &str, generation: i64, cpu: &str, expiration_time: i64) -> Reservation {
        Reservation {
            reserved_by: ReservedBy {
                api_version: "work.karmada.io/v1alpha2".into(),
                kind: "ResourceBinding".into(),
                namespace: String::new(),
                name: format!("rb-{uid}"),
                uid: uid.into(),
            },
            generation,
            reserved: ResourceList::parse_map([("requests.cpu", cpu)]).unwrap(),
            expiration_time,
        }
    }

    #[test]
    fn add_upserts_by_uid_and_generation_and_keeps_lapsed_entries() {
        let mut status = KarmadaQuotaStatus::default();
        add(&mut status, [&entry("old", 1, "1", 10)]); // long lapsed: still counts
        add(&mut status, [&entry("a", 1, "1", 100)]);
        add(&mut status, [&entry("a", 1, "2", 160)]); // the same admission retried
        add(&mut status, [&entry("a", 2, "1", 170)]); // a later generation: its own entry
        let keys: Vec<_> = status
            .reservations
            .iter()
            .map(|r| {
                (
                    r.reserved_by.uid.as_str(),
                    r.generation,
                    r.reserved["requests.cpu"].0.as_str(),
                )
            })
            .collect();
        assert_eq!(keys, [("old", 1, "1"), ("a", 1, "2"), ("a", 2, "1")]);
    }

    #[test]
    fn roll_back_removes_only_exactly_our_entries() {
        let mut status = KarmadaQuotaStatus::default();
        let ours = entry("a", 1, "1", 100);
        add(&mut status, [&ours, &entry("b", 1, "1", 100)]);
        // Another replica re-admitted c's request with a later expiration.
        add(&mut status, [&entry("c", 1, "1", 130)]);
        let removed = roll_back(&mut status, &[ours.clone(), entry("c", 1, "1", 100)]);
        assert_eq!(removed, 1);
        let left: Vec<_> = status
            .reservations
            .iter()
            .map(|r| r.reserved_by.uid.as_str())
            .collect();
        assert_eq!(left, ["b", "c"]);
        assert_eq!(
            roll_back(&mut status, &[ours]),
            0,
            "already gone: nothing to do"
        );
    }
}
