//! The reservation ledger: effective usage = used + Σ entries; upsert; prune.

/// What the controller knows of the binding an entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observation {
    /// Never seen: keep the entry until it expires (the race reservations exist for).
    NotSeen,
    /// Seen at this metadata.generation.
    Seen(i64),
    /// Seen, then a watch delete of that uid.
    Deleted,
}

use crate::quota::Reservation;
use crate::resources::ResourceList;

/// An entry still counts while `now` is before its expiration time.
pub fn is_live(entry: &Reservation, now: i64) -> bool {
    entry.expiration_time > now
}

/// Whether `entry` is the one for `(uid, generation)`.
fn is_for(entry: &Reservation, uid: &str, generation: i64) -> bool {
    entry.reserved_by.uid == uid && entry.generation == generation
}

/// Effective usage = `used` + Σ live entries, leaving out lapsed entries and the entry
/// of `except` = (uid, generation) — the request being decided, so an apiserver retry
/// is not charged against its own earlier admission.
pub fn effective_usage(
    used: &ResourceList,
    reservations: &[Reservation],
    now: i64,
    except: Option<(&str, i64)>,
) -> ResourceList {
    let mut out = used.clone();
    for entry in reservations {
        let own = except.is_some_and(|(uid, generation)| is_for(entry, uid, generation));
        if is_live(entry, now) && !own {
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

/// The entries the controller keeps (design §5): an entry is dropped when its binding was
/// observed at a generation ≥ the entry's (its usage is now in `used`), when the binding was
/// seen deleted, or when it has expired (`expiration_time ≤ now`). An entry whose binding
/// was never seen is kept until it expires — the race reservations exist for.
pub fn prune(
    reservations: &[Reservation],
    observe: impl Fn(&str) -> Observation,
    now: i64,
) -> Vec<Reservation> {
    reservations
        .iter()
        .filter(|entry| {
            is_live(entry, now)
                && match observe(&entry.reserved_by.uid) {
                    Observation::NotSeen => true,
                    Observation::Seen(generation) => generation < entry.generation,
                    Observation::Deleted => false,
                }
        })
        .cloned()
        .collect()
}
