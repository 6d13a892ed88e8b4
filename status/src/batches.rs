//! The reservation batches a binary has seen (docs/reservations.md) — the one bookkeeping both the webhook and
//! the controller keep of them, pure (the watch that feeds it is the caller's).
//!
//! A batch (`KarmadaQuotaReservation`, numbered in one sequence) holds the entries of one
//! webhook decision. An entry for quota Q in batch s counts toward Q's effective usage
//! while Q's `status.foldedThrough` (the newest batch Q's status accounts for) is below
//! s; from then on Q's status holds it (in `used`, or carried into `reservations`).
//!
//! ```text
//!   webhook creates s ─► live ─► controller writes foldedThrough ≥ s in every quota
//!                                 s names, then deletes s (never the newest)
//!                                   │ watch delete
//!                                   ▼
//!                        webhook: tombstone until its own view of each named quota
//!                        shows foldedThrough ≥ s ([`BatchView::settle`]), so a batch
//!                        deleted before the quota's fold reaches this view is never
//!                        counted zero times
//! ```
//!
//! The sequence has no holes: a writer creates s + 1 only once it has seen s, and the
//! newest batch is never deleted. A watch delivers one kind's events in order, so a view
//! that has seen s has seen every batch below s: one missing below the newest seen was
//! deleted, i.e. folded by every quota it named. A *re-list* breaks that chain: a batch
//! created and deleted while the watch was down is in no event and no list, and its fold
//! may not have reached the reader's quota view yet. [`BatchView::unseen_since`] counts
//! those numbers, so that the reader can hold its decisions until its quota view is read
//! again after the re-list.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use karmada_quota_core::quota::Reservation;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::reservation_batch::ParsedBatch;

/// What a reader knows of a quota's fold: `None` when the quota is not in its view (gone,
/// or not seen yet), else its `status.foldedThrough`.
pub type Fold = Option<Option<u64>>;

/// Whether the status whose `foldedThrough` is `folded` accounts for batch `sequence`.
pub fn folds(folded: Option<u64>, sequence: u64) -> bool {
    folded.is_some_and(|f| f >= sequence)
}

#[derive(Clone, Debug)]
struct Held {
    /// The quotas its entries name.
    quotas: BTreeSet<QuotaKey>,
    /// Deleted (a tombstone: still counted until every named quota folded it).
    deleted: bool,
    /// The latest expiration of its entries (Unix seconds).
    expires: i64,
    /// The attempt that wrote it (`spec.writer`).
    writer: Option<String>,
    /// Its `metadata.uid`, when the reader saw one.
    uid: Option<String>,
}

/// The batches seen, indexed by quota.
#[derive(Clone, Debug, Default)]
pub struct BatchView {
    batches: BTreeMap<u64, Held>,
    by_quota: HashMap<QuotaKey, BTreeMap<u64, Vec<Reservation>>>,
    newest: Option<u64>,
}

impl BatchView {
    /// An empty view.
    pub fn new() -> Self {
        Self::default()
    }

    /// The newest sequence number seen (live, tombstoned or removed).
    pub fn newest(&self) -> Option<u64> {
        self.newest
    }

    /// The number the next batch must take.
    pub fn next_sequence(&self) -> u64 {
        self.newest.map_or(1, |n| n + 1)
    }

    /// Batches held (live and tombstoned).
    pub fn len(&self) -> usize {
        self.batches.len()
    }

    /// Whether no batch is held.
    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// Live batches (not deleted), in order.
    pub fn live(&self) -> impl Iterator<Item = u64> + '_ {
        self.batches
            .iter()
            .filter(|(_, h)| !h.deleted)
            .map(|(s, _)| *s)
    }

    /// Whether batch `sequence` is held (live or tombstoned).
    pub fn holds(&self, sequence: u64) -> bool {
        self.batches.contains_key(&sequence)
    }

    /// How many numbers above `newest_before` (the newest seen before a re-list) and
    /// below the newest seen now this view never held: batches created and deleted while
    /// the watch was down, whose entries this view cannot know. O(batches held).
    pub fn unseen_since(&self, newest_before: Option<u64>) -> u64 {
        let from = newest_before.map_or(1, |n| n.saturating_add(1));
        match self.newest {
            Some(newest) if newest > from => {
                let held = self.batches.range(from..newest).count() as u64;
                (newest - from) - held
            }
            _ => 0,
        }
    }

    /// A batch created (or seen again, e.g. in a re-list): held, its entries counted.
    /// Seeing a held batch again changes nothing (batches are never modified).
    pub fn insert(&mut self, batch: &ParsedBatch) {
        self.newest = self.newest.max(Some(batch.sequence));
        if self.batches.contains_key(&batch.sequence) {
            return;
        }
        let mut quotas = BTreeSet::new();
        let mut expires = i64::MIN;
        for (key, entry) in &batch.entries {
            quotas.insert(key.clone());
            expires = expires.max(entry.expiration_time);
            self.by_quota
                .entry(key.clone())
                .or_default()
                .entry(batch.sequence)
                .or_default()
                .push(entry.clone());
        }
        self.batches.insert(
            batch.sequence,
            Held {
                quotas,
                deleted: false,
                expires,
                writer: batch.writer.clone(),
                uid: batch.uid.clone(),
            },
        );
    }

    /// The uid of the batch held under `sequence` (`None`: not held, or seen without one).
    pub fn uid_of(&self, sequence: u64) -> Option<&str> {
        self.batches.get(&sequence).and_then(|h| h.uid.as_deref())
    }

    /// A batch seen deleted: kept as a tombstone, still counted, until [`Self::settle`]
    /// finds every quota it names folded it (the webhook's rule).
    pub fn tombstone(&mut self, sequence: u64) {
        self.newest = self.newest.max(Some(sequence));
        if let Some(h) = self.batches.get_mut(&sequence) {
            h.deleted = true;
        }
    }

    /// A batch forgotten at once (the controller's rule for the batches it deleted, or a
    /// re-list that no longer holds it).
    pub fn remove(&mut self, sequence: u64) {
        self.newest = self.newest.max(Some(sequence));
        let Some(h) = self.batches.remove(&sequence) else {
            return;
        };
        for key in &h.quotas {
            if let Some(per) = self.by_quota.get_mut(key) {
                per.remove(&sequence);
                if per.is_empty() {
                    self.by_quota.remove(key);
                }
            }
        }
    }

    /// Number `sequence` was seen (a batch this reader does not count): no next batch
    /// takes it again.
    pub fn saw(&mut self, sequence: u64) {
        self.newest = self.newest.max(Some(sequence));
    }

    /// Forget batch `sequence` if the one held under that number was written by `writer`
    /// (a batch its writer withdrew: its requests were refused, so its entries count for
    /// no one); another batch of the number stays. Returns whether it went.
    pub fn withdraw(&mut self, sequence: u64, writer: &str) -> bool {
        let ours = self
            .batches
            .get(&sequence)
            .is_some_and(|h| h.writer.as_deref() == Some(writer));
        if ours {
            self.remove(sequence);
        }
        ours
    }

    /// Forget the tombstones every named quota has folded at `now`; returns how many went.
    /// A quota not in view may be one the view has not caught up with (its fold still to
    /// come): its entries go only once they expired, as the controller's rule
    /// ([`Self::deletable`]).
    pub fn settle(&mut self, fold: impl Fn(&QuotaKey) -> Fold, now: i64) -> usize {
        let done: Vec<u64> = self
            .batches
            .iter()
            .filter(|(s, h)| {
                h.deleted
                    && h.quotas.iter().all(|k| match fold(k) {
                        // Reverted for the simulation only (bench/sim.md).
                        None if cfg!(feature = "sim-revert-5f5c1c5") => true,
                        None => h.expires <= now,
                        Some(f) => folds(f, **s),
                    })
            })
            .map(|(s, _)| *s)
            .collect();
        for s in &done {
            self.remove(*s);
        }
        done.len()
    }

    /// The entries for `key` its status with `foldedThrough` = `folded` does not account
    /// for: those of every held batch (tombstones included) numbered above it.
    pub fn unfolded<'a>(
        &'a self,
        key: &QuotaKey,
        folded: Option<u64>,
    ) -> impl Iterator<Item = (u64, &'a Reservation)> + 'a {
        let from = folded.map_or(0, |f| f.saturating_add(1));
        self.by_quota
            .get(key)
            .into_iter()
            .flat_map(move |per| per.range(from..))
            .flat_map(|(s, entries)| entries.iter().map(move |e| (*s, e)))
    }

    /// The newest held batch naming `key` above `folded`, if any: a status write of `key`
    /// that records it folds every entry of `key` held (the controller's trigger).
    pub fn newest_naming(&self, key: &QuotaKey, folded: Option<u64>) -> Option<u64> {
        let from = folded.map_or(0, |f| f.saturating_add(1));
        self.by_quota
            .get(key)
            .and_then(|per| per.range(from..).next_back().map(|(s, _)| *s))
    }

    /// The quotas batch `sequence` names.
    pub fn quotas_of(&self, sequence: u64) -> impl Iterator<Item = &QuotaKey> {
        self.batches
            .get(&sequence)
            .into_iter()
            .flat_map(|h| h.quotas.iter())
    }

    /// The live batches the controller may delete at `now`: every one but the newest whose
    /// named quotas all folded it — or, for a quota not in view, whose entries all expired
    /// (a quota not in view may be one the view has not caught up with: only an expired
    /// entry may go without its fold, as the prune rule drops it anyway).
    pub fn deletable(&self, fold: impl Fn(&QuotaKey) -> Fold, now: i64) -> Vec<u64> {
        let newest = self.newest;
        self.batches
            .iter()
            .filter(|(s, h)| {
                !h.deleted
                    && Some(**s) != newest
                    && h.quotas.iter().all(|k| match fold(k) {
                        Some(f) => folds(f, **s),
                        None => h.expires <= now,
                    })
            })
            .map(|(s, _)| *s)
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::ResourceList;
    use karmada_quota_core::quota::ReservedBy;

    fn key(ns: &str) -> QuotaKey {
        QuotaKey::Namespaced {
            namespace: ns.into(),
            name: "q".into(),
        }
    }

    fn entry(uid: &str, expires: i64) -> Reservation {
        Reservation {
            reserved_by: ReservedBy {
                api_version: "work.karmada.io/v1alpha2".into(),
                kind: "ResourceBinding".into(),
                namespace: String::new(),
                name: format!("rb-{uid}"),
                uid: uid.into(),
            },
            generation: 1,
            reserved: ResourceList::parse_map([("requests.cpu", "1")]).unwrap(),
            expiration_time: expires,
        }
    }

    #[test]
    fn numbers_neither_listed_nor_seen_before_a_relist_are_unseen() {
        let mut v = BatchView::new();
        assert_eq!(v.unseen_since(None), 0, "nothing seen, nothing missing");
        v.insert(&batch(1, &[("a", "1")]));
        v.insert(&batch(2, &[("a", "2")]));
        assert_eq!(v.unseen_since(Some(2)), 0);
        // The re-list shows 3 and 6: 4 and 5 came and went unseen.
        v.insert(&batch(3, &[("a", "3")]));
        v.insert(&batch(6, &[("a", "6")]));
        assert_eq!(v.unseen_since(Some(2)), 2);
        // Numbers seen before the re-list are not unseen (tombstoned or settled).
        v.tombstone(3);
        assert_eq!(v.unseen_since(Some(3)), 2);
        // The newest itself is never unseen (it is held), and a view that had seen
        // nothing before the re-list misses every number below what it now holds.
        let mut w = BatchView::new();
        w.insert(&batch(4, &[("a", "4")]));
        assert_eq!(w.unseen_since(None), 3);
        assert_eq!(w.unseen_since(Some(4)), 0);
        assert_eq!(
            w.unseen_since(Some(9)),
            0,
            "a re-list that shows nothing newer"
        );
        // A far number (a hand-made kqr-999999999999) is counted, not walked.
        w.insert(&batch(999_999_999_999, &[("a", "far")]));
        assert_eq!(w.unseen_since(Some(4)), 999_999_999_999 - 5);
    }

    fn batch(sequence: u64, entries: &[(&str, &str)]) -> ParsedBatch {
        ParsedBatch {
            sequence,
            entries: entries
                .iter()
                .map(|(ns, uid)| (key(ns), entry(uid, 100)))
                .collect(),
            writer: None,
            uid: None,
        }
    }

    fn uids(view: &BatchView, ns: &str, folded: Option<u64>) -> Vec<String> {
        view.unfolded(&key(ns), folded)
            .map(|(_, e)| e.reserved_by.uid.clone())
            .collect()
    }

    #[test]
    fn entries_count_above_the_quotas_fold_only() {
        let mut v = BatchView::new();
        assert_eq!(v.next_sequence(), 1);
        v.insert(&batch(1, &[("a", "1"), ("b", "2")]));
        v.insert(&batch(2, &[("a", "3")]));
        assert_eq!(v.next_sequence(), 3);
        assert_eq!(uids(&v, "a", None), ["1", "3"]);
        assert_eq!(uids(&v, "a", Some(1)), ["3"]);
        assert_eq!(uids(&v, "a", Some(2)), Vec::<String>::new());
        assert_eq!(uids(&v, "b", Some(0)), ["2"]);
        assert_eq!(v.newest_naming(&key("a"), Some(1)), Some(2));
        assert_eq!(v.newest_naming(&key("b"), Some(1)), None);
        // Seen again (a re-list): nothing changes.
        v.insert(&batch(1, &[("a", "1"), ("b", "2")]));
        assert_eq!(uids(&v, "a", None), ["1", "3"]);
    }

    #[test]
    fn a_tombstone_counts_until_every_quota_it_names_folded_it() {
        let mut v = BatchView::new();
        v.insert(&batch(1, &[("a", "1"), ("b", "2")]));
        v.insert(&batch(2, &[("a", "3")]));
        v.tombstone(1);
        // The quota view has not caught up with the fold: still counted.
        assert_eq!(v.settle(|_| Some(None), 0), 0);
        assert_eq!(uids(&v, "a", None), ["1", "3"]);
        // a folded it, b not yet.
        let fold = |k: &QuotaKey| {
            if *k == key("a") {
                Some(Some(1))
            } else {
                Some(None)
            }
        };
        assert_eq!(v.settle(fold, 0), 0);
        assert_eq!(uids(&v, "b", None), ["2"]);
        // b is not in view (deleted, or not seen yet): counted until its entry expired.
        let fold = |k: &QuotaKey| if *k == key("a") { Some(Some(1)) } else { None };
        assert_eq!(v.settle(fold, 99), 0);
        assert_eq!(uids(&v, "b", None), ["2"]);
        assert_eq!(v.settle(fold, 100), 1);
        assert_eq!(uids(&v, "b", None), Vec::<String>::new());
        assert_eq!(uids(&v, "a", None), ["3"]);
        assert_eq!(v.newest(), Some(2));
        assert_eq!(
            v.next_sequence(),
            3,
            "a removed batch keeps its number taken"
        );
    }

    #[test]
    fn the_controller_deletes_folded_batches_but_never_the_newest() {
        let mut v = BatchView::new();
        v.insert(&batch(1, &[("a", "1")]));
        v.insert(&batch(2, &[("a", "2"), ("b", "3")]));
        v.insert(&batch(3, &[("b", "4")]));
        let all_folded = |_: &QuotaKey| Some(Some(3));
        assert_eq!(v.deletable(all_folded, 0), [1, 2]);
        // b has folded only through 2's predecessor: 2 must stay.
        let fold = |k: &QuotaKey| {
            if *k == key("b") {
                Some(Some(1))
            } else {
                Some(Some(3))
            }
        };
        assert_eq!(v.deletable(fold, 0), [1]);
        // A quota not in view: only once its entries expired (at 100).
        assert_eq!(v.deletable(|_| None, 99), Vec::<u64>::new());
        assert_eq!(v.deletable(|_| None, 100), [1, 2]);
        v.remove(1);
        assert!(!v.holds(1));
        assert_eq!(v.live().collect::<Vec<_>>(), [2, 3]);
        assert_eq!(uids(&v, "a", None), ["2"]);
    }

    #[test]
    fn a_tombstone_is_not_deletable_again_and_removal_is_idempotent() {
        let mut v = BatchView::new();
        v.insert(&batch(1, &[("a", "1")]));
        v.insert(&batch(2, &[("a", "2")]));
        v.tombstone(1);
        assert_eq!(v.deletable(|_| Some(Some(2)), 0), Vec::<u64>::new());
        v.remove(1);
        v.remove(1);
        v.tombstone(7);
        assert_eq!(v.newest(), Some(7));
        assert_eq!(v.len(), 1);
    }

    #[test]
    fn a_withdrawn_batch_goes_only_if_its_writer_holds_the_number_and_a_seen_number_is_not_taken_again()
     {
        let mut w = BatchView::new();
        let mut ours = batch(1, &[("a", "mine")]);
        ours.writer = Some("w1".into());
        w.insert(&ours);
        assert!(!w.withdraw(1, "w2"), "another writer's token");
        assert!(w.holds(1));
        assert!(w.withdraw(1, "w1"));
        assert!(!w.holds(1));
        assert_eq!(uids(&w, "a", None), Vec::<String>::new());
        assert_eq!(w.next_sequence(), 2, "the number stays taken");
        w.saw(7);
        assert_eq!(w.next_sequence(), 8);
        assert!(!w.withdraw(3, "w1"), "nothing held");
    }
}
