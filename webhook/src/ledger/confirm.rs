//! Confirmations: an admission is allowed only once this webhook's own batch watch shows
//! the batch it created, with no batch of its number or above before it (docs/design.md
//! §5, "An admission waits for its own batch in its watch").
//!
//! A create of number s is a compare-and-swap only against batches that still exist: a
//! batch s created, folded and deleted before, unseen by a view that lags without an
//! error, frees its name, and the create succeeds on a used number that the quotas
//! already count as folded (so the new batch would count for no one). One watch delivers
//! one kind's events in the order of their writes, so it shows the earlier batch (its
//! create, or its delete) — or any batch above s, which was created knowing s — before
//! the new one. Each pending create is keyed by its number and the writer token it
//! carries (`spec.writer`):
//!
//! ```text
//!   event of batch t from the watch      pending s (token w)
//!   t < s                                nothing
//!   t = s, token w, created              Confirmed
//!   t = s, another token, or t > s       Reused { by: t }
//!   a re-list (no order to rely on)      Unverified
//! ```
//!
//! Pure bookkeeping; the ledger calls it under its lock, before it applies the event to
//! its view, so registration ([`Confirmations::expect`] checks the view's newest) and
//! events are ordered.

use std::collections::BTreeMap;

use tokio::sync::oneshot;

/// What the watch showed of a pending create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The batch, first of its number and above.
    Confirmed,
    /// Batch `by` (the same number by another writer, or a higher one) came first: the
    /// number was used before.
    Reused {
        /// The number of the batch that came first.
        by: u64,
    },
    /// The watch re-listed before the batch came: its order cannot tell.
    Unverified,
}

/// Outcomes resolved by one event, to send once the event is applied.
#[must_use = "send the answers once the event is applied"]
#[derive(Debug, Default)]
pub struct Answers(Vec<(oneshot::Sender<Outcome>, Outcome)>);

impl Answers {
    /// Answer the waiting creates.
    pub fn send(self) {
        for (tx, outcome) in self.0 {
            let _ = tx.send(outcome);
        }
    }
}

#[derive(Debug)]
struct Pending {
    writer: String,
    tx: oneshot::Sender<Outcome>,
}

/// The creates waiting for their batch in the watch, by number.
#[derive(Debug, Default)]
pub struct Confirmations {
    pending: BTreeMap<u64, Pending>,
}

impl Confirmations {
    /// Wait for batch `sequence` written by `writer`. `None` when the view already holds
    /// that number or a higher one (`newest`: the create would not be the first of it),
    /// or another create waits for it.
    pub fn expect(
        &mut self,
        sequence: u64,
        writer: &str,
        newest: Option<u64>,
    ) -> Option<oneshot::Receiver<Outcome>> {
        if newest >= Some(sequence) || self.pending.contains_key(&sequence) {
            return None;
        }
        let (tx, rx) = oneshot::channel();
        self.pending.insert(
            sequence,
            Pending {
                writer: writer.to_owned(),
                tx,
            },
        );
        Some(rx)
    }

    /// Stop waiting for `sequence` by `writer` (its create failed or was given up).
    pub fn cancel(&mut self, sequence: u64, writer: &str) {
        if self
            .pending
            .get(&sequence)
            .is_some_and(|p| p.writer == writer)
        {
            self.pending.remove(&sequence);
        }
    }

    /// The watch showed batch `sequence` (created or changed: `created`; or deleted),
    /// written by `writer` (`None`: no token, or the object did not parse). The answers
    /// are sent by the caller once the event is applied to its view ([`Answers::send`]),
    /// so a confirmed create's batch is in the view when its requests are answered.
    pub fn witness(&mut self, sequence: u64, writer: Option<&str>, created: bool) -> Answers {
        let mut resolved = Vec::new();
        for (&s, p) in self.pending.range(..=sequence) {
            let outcome = if s < sequence || writer != Some(p.writer.as_str()) {
                Outcome::Reused { by: sequence }
            } else if created {
                Outcome::Confirmed
            } else {
                // Its delete before its create: not an order a watch gives.
                Outcome::Unverified
            };
            resolved.push((s, outcome));
        }
        Answers(
            resolved
                .into_iter()
                .filter_map(|(s, outcome)| self.pending.remove(&s).map(|p| (p.tx, outcome)))
                .collect(),
        )
    }

    /// The watch (re-)lists: every pending create is unverified.
    pub fn relisted(&mut self) {
        for (_, p) in std::mem::take(&mut self.pending) {
            let _ = p.tx.send(Outcome::Unverified);
        }
    }

    /// How many creates are waiting.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether none is waiting.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now(rx: &mut oneshot::Receiver<Outcome>) -> Option<Outcome> {
        rx.try_recv().ok()
    }

    #[test]
    fn its_own_batch_first_confirms_and_lower_numbers_change_nothing() {
        let mut c = Confirmations::default();
        let mut rx = c.expect(5, "w1", Some(4)).unwrap();
        c.witness(3, Some("other"), false).send();
        c.witness(4, Some("other"), true).send();
        assert_eq!(now(&mut rx), None);
        c.witness(5, Some("w1"), true).send();
        assert_eq!(now(&mut rx), Some(Outcome::Confirmed));
        assert!(c.is_empty());
    }

    #[test]
    fn the_same_number_by_another_writer_or_a_higher_one_first_is_a_reuse() {
        let mut c = Confirmations::default();
        // The used batch 5's create, seen late.
        let mut rx = c.expect(5, "w1", Some(4)).unwrap();
        c.witness(5, Some("w0"), true).send();
        assert_eq!(now(&mut rx), Some(Outcome::Reused { by: 5 }));
        // Its delete, or a batch above it, seen first: the same.
        let mut rx = c.expect(5, "w1", Some(4)).unwrap();
        c.witness(5, Some("w0"), false).send();
        assert_eq!(now(&mut rx), Some(Outcome::Reused { by: 5 }));
        let mut rx = c.expect(5, "w1", Some(4)).unwrap();
        c.witness(7, None, true).send();
        assert_eq!(now(&mut rx), Some(Outcome::Reused { by: 7 }));
        // Its own token after the reuse changes nothing (already answered).
        c.witness(5, Some("w1"), true).send();
        assert!(c.is_empty());
    }

    #[test]
    fn a_number_the_view_already_passed_is_not_expected_and_a_relist_unverifies() {
        let mut c = Confirmations::default();
        assert!(c.expect(5, "w1", Some(5)).is_none());
        assert!(c.expect(5, "w1", Some(9)).is_none());
        let mut first = c.expect(1, "w1", None).unwrap();
        c.relisted();
        assert_eq!(now(&mut first), Some(Outcome::Unverified));
        let mut rx = c.expect(6, "w1", Some(5)).unwrap();
        assert!(
            c.expect(6, "w2", Some(5)).is_none(),
            "one create per number"
        );
        c.cancel(6, "w2");
        assert_eq!(c.len(), 1, "another writer's cancel");
        c.cancel(6, "w1");
        assert!(c.is_empty());
        assert!(rx.try_recv().is_err(), "cancelled: the sender is gone");
    }
}
