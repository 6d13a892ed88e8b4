//! The reservation ledger: effective usage = used + Σ entries; upsert; prune.
//!
//! The lifetime rule: an entry counts from the moment it is written until the controller
//! removes it, lapsed or not. Only the controller removes entries ([`prune`]): an observed
//! one when its usage is folded into `used`, a never-seen one once it has expired *and*
//! the apiserver, read after the expiry, does not store its binding at the entry's
//! generation ([`Observation::NotStored`]). Expiry alone drops nothing: a binding watch
//! that lags past the expiry must not make admitted usage vanish, and neither does an
//! outage of the controller.

/// What the controller knows of the binding an entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Never seen: keep the entry until it expires (the race reservations exist for).
    NotSeen,
    /// Seen at this metadata.generation.
    Seen(i64),
    /// Seen, then a watch delete of that uid.
    Deleted,
    /// Never seen, and the binding's name is served by another uid that is not being
    /// deleted: the CREATE the entry was admitted for cannot have succeeded (the apiserver
    /// answered `already exists` after the webhook admitted it — Karmada's detector sends
    /// such duplicate CREATEs). Its usage is already in `used` under the other uid.
    NameTaken,
    /// Not observed at the entry's generation, and a quorum read of the binding made after
    /// the entry expired found no binding of its uid at that generation or later (none
    /// under the name, another uid, or an older generation): the request the entry stood
    /// for was not stored, and — stored within the TTL of its decision or never
    /// (docs/reservations.md, assumption T) — will not be.
    NotStored,
}

use crate::quota::Reservation;
use crate::resources::ResourceList;

/// Whether the entry's expiration time has passed: from then on the controller may drop
/// it once the apiserver, read after that, does not store its binding
/// ([`Observation::NotStored`]). It still counts until it is dropped.
pub fn is_expired(entry: &Reservation, now: i64) -> bool {
    entry.expiration_time <= now
}

/// Whether `entry` is the one for `(uid, generation)`.
fn is_for(entry: &Reservation, uid: &str, generation: i64) -> bool {
    entry.reserved_by.uid == uid && entry.generation == generation
}

/// Whether `entry` counts toward effective usage for a request of `except` =
/// (uid, generation): every entry does, expired or not, except the request's own — so an
/// apiserver retry is not charged against its own earlier admission — and the
/// reservation-store fence, which is there for 0.2.0's status-store webhooks only
/// ([`crate::fence`]).
pub fn counts(entry: &Reservation, except: Option<(&str, i64)>) -> bool {
    !crate::fence::is_fence(entry)
        && !except.is_some_and(|(uid, generation)| is_for(entry, uid, generation))
}

/// Effective usage = `used` + Σ entries (expired ones included) but the one of `except`.
pub fn effective_usage(
    used: &ResourceList,
    reservations: &[Reservation],
    except: Option<(&str, i64)>,
) -> ResourceList {
    let mut out = used.clone();
    for entry in reservations {
        if counts(entry, except) {
            out.add_assign(&entry.reserved);
        }
    }
    out
}

/// Add `entry`, replacing an entry with the same (uid, generation): the same admission
/// retried never counts twice.
pub fn upsert(reservations: &mut Vec<Reservation>, entry: Reservation) {
    let (uid, generation) = (entry.reserved_by.uid.as_str(), entry.generation);
    match reservations.iter().position(|e| is_for(e, uid, generation)) {
        Some(i) => reservations[i] = entry,
        None => reservations.push(entry),
    }
}

/// The entries the controller keeps — the reservation-store fence always
/// ([`crate::fence`]); any other entry is dropped when its binding was observed at a
/// generation ≥ the entry's (its usage is now in `used`), when the binding was seen
/// deleted, when its name is served by another binding (a duplicate CREATE that failed:
/// [`Observation::NameTaken`]), or when it has expired (`expiration_time ≤ now`) and the
/// apiserver was read not to store it ([`Observation::NotStored`]). Any other entry is
/// kept, expired or not: one whose binding was never seen is the race reservations exist
/// for, and an expired one whose binding the watch has not shown may be stored all the
/// same (the watch lags). `observe` is asked about each entry.
pub fn prune(
    reservations: &[Reservation],
    observe: impl Fn(&Reservation) -> Observation,
    now: i64,
) -> Vec<Reservation> {
    reservations
        .iter()
        .filter(|entry| {
            crate::fence::is_fence(entry)
                || match observe(entry) {
                    Observation::NotSeen => true,
                    Observation::Seen(generation) => generation < entry.generation,
                    Observation::Deleted | Observation::NameTaken => false,
                    Observation::NotStored => !is_expired(entry, now),
                }
        })
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::mk_list;

    fn mk_entry(uid: &str, generation: i64, cpu: &str, expiration_time: i64) -> Reservation {
        Reservation {
            reserved_by: crate::quota::ReservedBy {
                api_version: "work.karmada.io/v1alpha2".into(),
                kind: "ResourceBinding".into(),
                namespace: String::new(),
                name: format!("rb-{uid}"),
                uid: uid.into(),
            },
            generation,
            reserved: mk_list(&[("cpu", cpu)]),
            expiration_time,
        }
    }

    #[test]
    fn effective_usage_counts_every_entry_expired_or_not_except_the_own_one() {
        let used = mk_list(&[("cpu", "1"), ("pods", "2")]);
        let entries = [
            mk_entry("a", 1, "500m", 100),
            mk_entry("b", 3, "250m", 100),
            mk_entry("c", 1, "4", 50), // expired long ago: the controller has not removed it
        ];
        let all = effective_usage(&used, &entries, None);
        assert_eq!(all, mk_list(&[("cpu", "5750m"), ("pods", "2")]));
        let without_b = effective_usage(&used, &entries, Some(("b", 3)));
        assert_eq!(without_b, mk_list(&[("cpu", "5500m"), ("pods", "2")]));
        // Another generation of b is a different entry: still counted.
        let other_generation = effective_usage(&used, &entries, Some(("b", 2)));
        assert_eq!(other_generation, all);
    }

    #[test]
    fn upsert_replaces_the_same_uid_and_generation() {
        let mut entries = vec![mk_entry("a", 1, "1", 100)];
        upsert(&mut entries, mk_entry("a", 1, "2", 160));
        assert_eq!(entries, [mk_entry("a", 1, "2", 160)]);
        upsert(&mut entries, mk_entry("a", 2, "1", 170));
        upsert(&mut entries, mk_entry("b", 1, "1", 170));
        assert_eq!(entries.len(), 3);
    }

    #[test]
    fn prune_drops_observed_deleted_and_expired_entries_read_not_stored() {
        let now = 100;
        // (observation, entry generation, expiration, kept)
        let table = [
            (Observation::Seen(2), 2, 200, false), // observed at the entry's generation
            (Observation::Seen(3), 2, 200, false), // observed later
            (Observation::Seen(1), 2, 200, true),  // observed earlier: not in used yet
            (Observation::Deleted, 2, 200, false),
            (Observation::NameTaken, 1, 200, false), // a duplicate CREATE that failed
            (Observation::NotSeen, 2, 200, true),    // the race reservations exist for
            (Observation::NotSeen, 2, 100, true),    // expired, the watch may lag: kept
            (Observation::Seen(1), 2, 99, true),     // expired, the raise not shown yet: kept
            (Observation::NotStored, 2, 100, false), // expired and read not stored
            (Observation::NotStored, 2, 99, false),
            (Observation::NotStored, 2, 101, true), // not expired: a read says nothing yet
        ];
        for (observation, generation, expiration, kept) in table {
            let entries = [mk_entry("a", generation, "1", expiration)];
            let pruned = prune(&entries, |_| observation, now);
            assert_eq!(
                pruned.len(),
                usize::from(kept),
                "{observation:?} gen {generation} exp {expiration}"
            );
        }
    }

    #[test]
    fn prune_asks_about_each_entry_by_uid() {
        let entries = [mk_entry("seen", 1, "1", 200), mk_entry("new", 1, "1", 200)];
        let pruned = prune(
            &entries,
            |entry| {
                if entry.reserved_by.uid == "seen" {
                    Observation::Seen(1)
                } else {
                    Observation::NotSeen
                }
            },
            100,
        );
        assert_eq!(pruned, [mk_entry("new", 1, "1", 200)]);
    }
}
