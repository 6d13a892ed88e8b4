//! What quorum reads of bindings said, for entries that expired before the watch showed
//! their binding (docs/reservations.md, R19).
//!
//! An expired entry whose binding the watch has not shown at the entry's generation is
//! dropped only once a read made *after* the expiry found no binding of its uid at that
//! generation or later: the watch may lag past any expiry, the apiserver's quorum read
//! does not. A read that found the binding stored is made again after [`READ_AGAIN`]
//! (the watch lags; once it shows the binding, `used` holds it and the entry goes the
//! ordinary way). Records older than the index's deleted-uid memory are forgotten.

use std::collections::HashMap;

use karmada_quota_core::ledger::is_expired;
use karmada_quota_core::quota::Reservation;

/// How long a read that found the binding stored stands before it is made again.
pub const READ_AGAIN: i64 = 10;

/// One read of a binding by namespace and name, keyed by the uid the entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Read {
    /// The generation stored under the entry's uid (`None`: no binding of that uid).
    generation: Option<i64>,
    /// When (Unix seconds, the controller's clock).
    at: i64,
}

/// (namespace, uid) → the last read.
#[derive(Debug, Default)]
pub struct Reads(HashMap<(String, String), Read>);

impl Reads {
    /// The read of `namespace`'s binding `name` at `at` found `stored`: the (uid,
    /// generation) served under the name (`None`: not found). Recorded for `uid`, the
    /// uid an entry names.
    pub fn record(&mut self, namespace: &str, uid: &str, stored: Option<(&str, i64)>, at: i64) {
        let generation = stored.and_then(|(u, g)| (u == uid).then_some(g));
        self.0.insert(
            (namespace.to_owned(), uid.to_owned()),
            Read { generation, at },
        );
    }

    /// Whether a read made after `entry` expired found no binding of its uid at its
    /// generation or later.
    pub fn not_stored(&self, namespace: &str, entry: &Reservation) -> bool {
        self.after_expiry(namespace, entry)
            .is_some_and(|r| r.generation.is_none_or(|g| g < entry.generation))
    }

    /// Whether `entry` (expired, its binding not shown at its generation by the watch)
    /// needs a read at `now`: none was made after it expired, or the last one found it
    /// stored more than [`READ_AGAIN`] ago.
    pub fn wanted(&self, namespace: &str, entry: &Reservation, now: i64) -> bool {
        if !is_expired(entry, now) {
            return false;
        }
        match self.after_expiry(namespace, entry) {
            None => true,
            Some(r) if r.generation.is_none_or(|g| g < entry.generation) => false,
            Some(r) => now - r.at >= READ_AGAIN,
        }
    }

    fn after_expiry(&self, namespace: &str, entry: &Reservation) -> Option<&Read> {
        self.0
            .get(&(namespace.to_owned(), entry.reserved_by.uid.clone()))
            .filter(|r| r.at >= entry.expiration_time)
    }

    /// Forget reads made before `horizon`.
    pub fn forget_before(&mut self, horizon: i64) {
        self.0.retain(|_, r| r.at > horizon);
    }

    /// How many reads are remembered.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::quota::ReservedBy;

    fn entry(uid: &str, generation: i64, expiration_time: i64) -> Reservation {
        Reservation {
            reserved_by: ReservedBy {
                name: format!("rb-{uid}"),
                uid: uid.into(),
                ..ReservedBy::default()
            },
            generation,
            reserved: Default::default(),
            expiration_time,
        }
    }

    #[test]
    fn only_a_read_after_the_expiry_that_finds_no_binding_at_the_generation_lets_it_go() {
        let e = entry("u1", 2, 100);
        let mut reads = Reads::default();
        assert!(!reads.wanted("a", &e, 99), "not expired yet");
        assert!(reads.wanted("a", &e, 100), "expired, never read");
        assert!(!reads.not_stored("a", &e));

        reads.record("a", "u1", None, 99);
        assert!(
            !reads.not_stored("a", &e),
            "a read before the expiry says nothing"
        );
        assert!(reads.wanted("a", &e, 100));

        reads.record("a", "u1", Some(("u1", 2)), 100);
        assert!(!reads.not_stored("a", &e), "stored at the generation: kept");
        assert!(!reads.wanted("a", &e, 109));
        assert!(reads.wanted("a", &e, 110), "read again after READ_AGAIN");

        reads.record("a", "u1", Some(("u1", 1)), 110);
        assert!(
            reads.not_stored("a", &e),
            "an older generation: the raise was not stored"
        );
        assert!(!reads.wanted("a", &e, 200), "settled: no more reads");

        reads.record("a", "u1", Some(("u9", 5)), 111);
        assert!(reads.not_stored("a", &e), "another uid under the name");
        reads.record("a", "u1", None, 112);
        assert!(reads.not_stored("a", &e), "no binding under the name");
        assert!(!reads.not_stored("b", &e), "reads are per namespace");

        reads.forget_before(112);
        assert!(reads.is_empty());
    }
}
