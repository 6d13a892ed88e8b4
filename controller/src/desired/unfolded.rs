//! What the reservation batches add to one quota's computation
//! (docs/design.md §6 "Reservation batches (controller)").
//!
//! An entry for quota Q in batch s counts toward Q's effective usage while Q's
//! `status.foldedThrough` (F) is below s. A status write of Q that records
//! foldedThrough = n must therefore account for every entry of Q in a batch numbered up
//! to n: each is either observed (its usage is in `used`) or carried into
//! `status.reservations`. [`Unfolded::of`] gives those entries, and n = the newest held
//! batch naming Q above F; the computation upserts them into the stored entries before
//! the one prune rule runs (`core::ledger::prune`). No batch names Q above F: nothing,
//! and foldedThrough stays F (a quota no batch names is never rewritten for a batch).
//!
//! F is read from the object the plan is computed against (the status writer re-plans
//! from the fresh object after a 409), never from a cache.
//!
//! A folded entry's `expirationTime` is capped at the fold's now + `--reservation-ttl`
//! ([`Unfolded::merged_into`]): a webhook writes now + its TTL, so only an entry written by
//! anyone else (a hand-made batch) or by a clock ahead of the controller's is shortened;
//! an expiration years ahead would otherwise hold the quota's headroom until then.

use karmada_quota_core::ledger;
use karmada_quota_core::quota::Reservation;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_status::BatchView;

/// The batch entries one quota's stored status does not account for yet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unfolded {
    /// The newest batch naming the quota above its stored `foldedThrough`: what the
    /// written status records.
    pub through: u64,
    /// The entries naming the quota in the held batches above its stored
    /// `foldedThrough`, in sequence order.
    pub entries: Vec<Reservation>,
    /// `--reservation-ttl` in seconds: no folded entry expires later than the fold's now
    /// plus this.
    pub ttl_secs: i64,
}

impl Unfolded {
    /// What `view` holds for `key` above `folded` (the stored `status.foldedThrough`);
    /// `None` when no held batch above it names the quota.
    /// `ttl_secs`: `--reservation-ttl` in seconds.
    pub fn of(
        view: &BatchView,
        key: &QuotaKey,
        folded: Option<u64>,
        ttl_secs: i64,
    ) -> Option<Self> {
        let through = view.newest_naming(key, folded)?;
        Some(Self {
            through,
            entries: view.unfolded(key, folded).map(|(_, e)| e.clone()).collect(),
            ttl_secs,
        })
    }

    /// `stored` (the status's parsed entries) with these entries upserted by (uid,
    /// generation): an admission present in both is counted once. Each upserted entry
    /// expires at `now` + the TTL at the latest.
    pub fn merged_into(&self, mut stored: Vec<Reservation>, now: i64) -> Vec<Reservation> {
        let latest = now.saturating_add(self.ttl_secs);
        for entry in &self.entries {
            let mut entry = entry.clone();
            entry.expiration_time = entry.expiration_time.min(latest);
            ledger::upsert(&mut stored, entry);
        }
        stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{mk_entry, quota_key};
    use karmada_quota_crds::reservation_batch::ParsedBatch;

    /// The TTL and the fold's now of these tests: entries expire at 2,000,000,000.
    const TTL: i64 = 60;
    const NOW: i64 = 1_999_999_990;

    fn key(ns: &str) -> QuotaKey {
        quota_key(ns, "q")
    }

    fn entry(uid: &str, generation: i64, cpu: &str) -> Reservation {
        let name = format!("rb-{uid}");
        mk_entry(
            &name,
            uid,
            generation,
            &[("requests.cpu", cpu)],
            2_000_000_000,
        )
    }

    #[test]
    fn the_entries_above_the_fold_and_the_newest_batch_naming_the_quota() {
        let mut view = BatchView::new();
        for (sequence, ns, uid) in [
            (1, "a", "u1"),
            (2, "b", "u2"),
            (3, "a", "u3"),
            (4, "b", "u4"),
        ] {
            view.insert(&ParsedBatch {
                sequence,
                entries: vec![(key(ns), entry(uid, 1, "1"))],
                writer: None,
                uid: None,
            });
        }
        let a = Unfolded::of(&view, &key("a"), None, TTL).unwrap();
        assert_eq!(a.through, 3, "the newest naming a, not the newest overall");
        let uids: Vec<&str> = a
            .entries
            .iter()
            .map(|e| e.reserved_by.uid.as_str())
            .collect();
        assert_eq!(uids, ["u1", "u3"]);
        let a = Unfolded::of(&view, &key("a"), Some(1), TTL).unwrap();
        assert_eq!((a.through, a.entries.len()), (3, 1));
        assert_eq!(Unfolded::of(&view, &key("a"), Some(3), TTL), None);
        assert_eq!(Unfolded::of(&view, &key("c"), None, TTL), None);
    }

    #[test]
    fn an_admission_in_the_status_and_a_batch_is_counted_once() {
        let u = Unfolded {
            through: 1,
            entries: vec![entry("u1", 1, "2"), entry("u2", 1, "1")],
            ttl_secs: TTL,
        };
        let merged = u.merged_into(vec![entry("u1", 1, "2"), entry("u1", 2, "5")], NOW);
        let keys: Vec<(&str, i64)> = merged
            .iter()
            .map(|e| (e.reserved_by.uid.as_str(), e.generation))
            .collect();
        assert_eq!(keys, [("u1", 1), ("u1", 2), ("u2", 1)]);
    }

    #[test]
    fn a_folded_entry_expires_at_now_plus_the_ttl_at_the_latest() {
        // A hand-made batch's entry expiring years ahead, and a webhook's.
        let forged = mk_entry("rb-f", "uf", 1, &[("requests.cpu", "8")], 4_000_000_000);
        let ours = entry("u1", 1, "1");
        let u = Unfolded {
            through: 1,
            entries: vec![forged, ours],
            ttl_secs: TTL,
        };
        let merged = u.merged_into(Vec::new(), NOW);
        let expirations: Vec<(&str, i64)> = merged
            .iter()
            .map(|e| (e.reserved_by.uid.as_str(), e.expiration_time))
            .collect();
        assert_eq!(expirations, [("uf", NOW + TTL), ("u1", 2_000_000_000)]);
    }
}
