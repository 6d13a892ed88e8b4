//! The reservation-store fence (docs/decisions/0009-upgrade-fence-in-the-quota-status.md,
//! docs/reservations.md R22): one entry in a quota's `status.reservations` that names no
//! binding (`reservedBy.kind: ReservationStoreFence`) and reserves the largest quantity
//! Kubernetes has of every resource in `hard`.
//!
//! - A webhook of 0.2.0's status store counts every entry, so it sees no room for any
//!   increase: the fence stops it without any change to its code.
//! - This version does not count it ([`is_fence`]: `ledger::counts` skips it), and admits
//!   against a quota only once its fence covers every name of `hard` ([`covers`]): until
//!   then a 0.2.0 webhook may still write status entries that no batch create conflicts
//!   with.
//! - The controller writes it and keeps it ([`ensure`]); the prune never drops it.

use crate::quantity::{Format, Quantity};
use crate::quota::{Reservation, ReservedBy};
use crate::resources::ResourceList;

/// `reservedBy.kind` of the fence.
pub const FENCE_KIND: &str = "ReservationStoreFence";
/// `reservedBy.name` and `reservedBy.uid` of the fence (no binding has that uid: a
/// binding's is a UUID).
pub const FENCE_NAME: &str = "reservation-store-fence";
/// The fence's `expirationTime`: 9999-12-30T22:00:00Z, the latest whole second the
/// timestamps of both binaries hold (jiff's range), so it reads back as written; no
/// controller ever sees it pass.
pub const FENCE_EXPIRES: i64 = 253_402_207_200;

/// Whether `entry` is the fence.
pub fn is_fence(entry: &Reservation) -> bool {
    entry.reserved_by.kind == FENCE_KIND
}

/// The fence of a quota whose `hard` is `hard`: every name at 2⁶³−1 units.
pub fn fence_entry(hard: &ResourceList) -> Reservation {
    let mut reserved = ResourceList::new();
    for name in hard.0.keys() {
        reserved.insert(
            name.clone(),
            Quantity::from_units(Quantity::MAX_UNITS, Format::DecimalSI),
        );
    }
    Reservation {
        reserved_by: ReservedBy {
            api_version: "quota.karmada.io/v1alpha1".into(),
            kind: FENCE_KIND.into(),
            namespace: String::new(),
            name: FENCE_NAME.into(),
            uid: FENCE_NAME.into(),
        },
        generation: 0,
        reserved,
        expiration_time: FENCE_EXPIRES,
    }
}

/// Whether `reservations` hold a fence reserving the largest quantity of every name of
/// `hard`.
pub fn covers(reservations: &[Reservation], hard: &ResourceList) -> bool {
    let max = Quantity::from_units(Quantity::MAX_UNITS, Format::DecimalSI);
    reservations.iter().filter(|e| is_fence(e)).any(|f| {
        hard.0
            .keys()
            .all(|name| f.reserved.0.get(name).is_some_and(|q| *q >= max))
    })
}

/// The entries of `reservations` that stand for admissions: every one but the fence.
pub fn pending(reservations: &[Reservation]) -> impl Iterator<Item = &Reservation> {
    reservations.iter().filter(|e| !is_fence(e))
}

/// Make `reservations` hold one fence covering `hard`: kept when it does, replaced
/// otherwise (a `hard` that gained a name). Whether anything changed.
pub fn ensure(reservations: &mut Vec<Reservation>, hard: &ResourceList) -> bool {
    let fences = reservations.iter().filter(|e| is_fence(e)).count();
    if fences == 1 && covers(reservations, hard) {
        return false;
    }
    reservations.retain(|e| !is_fence(e));
    reservations.push(fence_entry(hard));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{Observation, effective_usage, prune};
    use crate::testutil::*;

    #[test]
    fn the_fence_covers_hard_counts_for_no_one_here_and_is_replaced_when_hard_grows() {
        let hard = mk_list(&[("requests.cpu", "10"), ("pods", "20")]);
        let mut entries = vec![];
        assert!(!covers(&entries, &hard));
        assert!(ensure(&mut entries, &hard));
        assert!(covers(&entries, &hard));
        assert_eq!(entries.iter().filter(|e| is_fence(e)).count(), 1);
        assert!(!ensure(&mut entries, &hard), "kept as it is");
        assert!(
            jiff::Timestamp::from_second(FENCE_EXPIRES).is_ok(),
            "reads back as written"
        );
        assert_eq!(entries.len(), 1);
        // The prune keeps it, whatever the controller knows of a binding of its name.
        for seen in [
            Observation::Deleted,
            Observation::NameTaken,
            Observation::NotStored,
        ] {
            assert_eq!(prune(&entries, |_| seen, FENCE_EXPIRES + 1), entries);
        }
        // Counted for no one by this version.
        let used = mk_list(&[("requests.cpu", "3")]);
        assert_eq!(effective_usage(&used, &entries, None), used);
        // hard gains a name: the fence no longer covers it, and is replaced.
        let grown = mk_list(&[
            ("requests.cpu", "10"),
            ("pods", "20"),
            ("requests.memory", "1Gi"),
        ]);
        assert!(!covers(&entries, &grown));
        assert!(ensure(&mut entries, &grown));
        assert!(covers(&entries, &grown));
        assert_eq!(entries.iter().filter(|e| is_fence(e)).count(), 1);
    }

    /// What a webhook that counts every entry (0.2.0's status store) makes of a fenced
    /// quota: used + every entry + the smallest request is above `hard`, whatever `hard`
    /// (up to the largest quantity) and `used` are — sums saturate, they do not wrap.
    #[test]
    fn a_decision_counting_every_entry_sees_no_room_in_a_fenced_quota() {
        for (hard, used) in [("10", "0"), ("9223372036854775807", "0"), ("1Ei", "1Ei")] {
            let hard = mk_list(&[("requests.cpu", hard)]);
            let mut total = mk_list(&[("requests.cpu", used)]);
            total.add_assign(&fence_entry(&hard).reserved);
            total.add_assign(&mk_list(&[("requests.cpu", "1m")]));
            assert!(total.0["requests.cpu"] > hard.0["requests.cpu"], "{hard:?}");
        }
    }
}
