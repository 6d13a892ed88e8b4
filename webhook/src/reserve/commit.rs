//! Steps 1–4 of a batch (docs/reservations.md): decide the open requests against the newest
//! quota copies, each quota's entries completed with the batch entries its status does
//! not account for yet ([`super::Inner::enforced`]); make the admitted entries durable by
//! *creating* one `KarmadaQuotaReservation` numbered with the next sequence number; answer.
//!
//! - The create is the compare-and-swap: when another writer (a second replica) took the
//!   number, the requests wait until this webhook's batch watch has shown that number
//!   (every batch of it, in order) and are decided again under the next number (at most
//!   `max_attempts` rounds).
//! - No request is allowed before the create succeeded *and* this webhook's batch watch
//!   showed the new batch first of its number and above (`crate::ledger`'s
//!   confirmations); a batch it does not confirm is withdrawn (not counted here, deleted)
//!   and its requests get 503. A refused request writes nothing (its entry is never in a
//!   created batch), so nothing else is rolled back.
//! - A create whose outcome is unknown (an API error, the deadline) fails its requests;
//!   if it was stored after all, its entries count (toward nothing that was admitted)
//!   until the controller drops them at their expiration. The next batch then finds the
//!   number taken and counts it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use karmada_quota_core::decision::Decision;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::reservation_batch::{batch_entry, batch_name, batch_object};
use karmada_quota_status::StoreError;
use tokio::time::Instant;
use tracing::Span;
use tracing::field::Empty;

use super::Inner;
use super::batch::Slot;
use super::copy::QuotaCopy;
use super::newest::refusal_covering;
use crate::error::{Error, Result};
use crate::ledger::{Expectation, Ledger, Outcome};

/// How often a request waits for the batch watch to catch up after its number was taken
/// by a batch already deleted.
const CATCH_UP_POLL: Duration = Duration::from_millis(10);

/// The greatest batch number (`reservation_batch::LAST_SEQUENCE`).
const MAX_SEQUENCE: u64 = karmada_quota_crds::reservation_batch::LAST_SEQUENCE;

/// The time a request keeps, after waiting for the ledger, for its quota reads, its create
/// and the watch's confirmation.
const READY_MARGIN: Duration = Duration::from_millis(500);

/// How long the delete of a withdrawn batch may take.
const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(2);

/// How one round of a commit ended.
enum Round {
    /// Every request is answered (or will be by the caller's timeout).
    Done,
    /// The number was taken or moved on: decide again under the next one.
    Again,
}

/// The batch one round created, as its outcome is handled.
struct Created {
    sequence: u64,
    name: String,
    writer: String,
    /// How many requests it holds entries of.
    requests: usize,
    deadline: Instant,
}

/// What the create of a batch answered (`Err(_)`: the deadline passed first).
type CreateResult = std::result::Result<
    std::result::Result<karmada_quota_crds::KarmadaQuotaReservation, StoreError>,
    tokio::time::error::Elapsed,
>;

impl Inner {
    /// Decide and commit `slots` (every one is answered): at most `max_attempts` rounds,
    /// each under the next number.
    #[tracing::instrument(name = "batch_commit", skip_all, fields(batch = Empty, attempts = Empty))]
    pub(super) async fn commit(&self, mut slots: Vec<Slot>) {
        let ledger = &*self.ledger;
        let attempts = self.config.max_attempts.max(1);
        for attempt in 1..=attempts {
            Span::current().record("attempts", attempt);
            if attempt > 1 {
                self.metrics.retries.inc();
            }
            if let Round::Done = self.round(ledger, &mut slots).await {
                return;
            }
        }
        fail_open(&mut slots, || Error::BatchContended {
            namespace: ledger.namespace().to_owned(),
            attempts,
        });
    }

    /// One round: decide the open requests under the next number and create its batch
    /// (once the ledger counts again, if it can within the requests' time:
    /// [`Ledger::wait_ready`]).
    async fn round(&self, ledger: &Ledger, slots: &mut [Slot]) -> Round {
        if let Some(until) = ready_by(slots) {
            ledger.wait_ready(until).await;
        }
        let Some(deadline) = start_round(slots) else {
            return Round::Done;
        };
        let planned = match self.copies(ledger, slots, deadline).await {
            Ok((namespaces, copies)) => self.plan(ledger, &namespaces, &copies, slots),
            Err(e) => Err(e),
        };
        let sequence = match planned {
            Ok(next) => next,
            Err(e) => {
                fail_open(slots, || e.clone());
                return Round::Done;
            }
        };
        let planned: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].open()).collect();
        let entries: Vec<_> = planned
            .iter()
            .flat_map(|&i| slots[i].written.iter())
            .map(|(key, r)| batch_entry(key, r))
            .collect();
        if entries.is_empty() {
            answer_planned(slots);
            return Round::Done;
        }
        let created = Created {
            sequence,
            name: batch_name(sequence),
            writer: ledger.writer_token(),
            requests: planned.len(),
            deadline,
        };
        Span::current().record("batch", created.name.as_str());
        let mut batch = batch_object(ledger.namespace(), sequence, entries);
        batch.spec.writer = Some(created.writer.clone());
        // Registered before the create: its watch event may come before the answer.
        let expectation = match ledger.expect(sequence, &created.writer) {
            Ok(Some(e)) => e,
            // The view moved past the number since the plan: decide again.
            Ok(None) => return Round::Again,
            Err(e) => {
                fail_open(slots, || e.clone());
                return Round::Done;
            }
        };
        let result = tokio::time::timeout_at(deadline, ledger.store().create(&batch)).await;
        self.after_create(ledger, &created, expectation, result, slots)
            .await
    }

    /// What the create of `created`'s batch answered decides the round.
    async fn after_create(
        &self,
        ledger: &Ledger,
        created: &Created,
        expectation: Expectation<'_>,
        result: CreateResult,
        slots: &mut [Slot],
    ) -> Round {
        match result {
            Ok(Ok(object)) if cfg!(feature = "sim-revert-cb8f985") => {
                // The simulation's revert: allowed on the create alone.
                drop(expectation);
                ledger.insert_object(&object);
                answer_planned(slots);
            }
            Ok(Ok(object)) => {
                self.metrics.batch_create("ok");
                self.confirm(ledger, created, expectation, &object, slots)
                    .await;
            }
            Ok(Err(StoreError::Conflict)) => {
                self.metrics.batch_create("conflict");
                match self
                    .wait_taken(ledger, created.sequence, created.deadline)
                    .await
                {
                    Ok(()) => return Round::Again,
                    Err(e) => fail_open(slots, || e.clone()),
                }
            }
            Ok(Err(source)) => {
                self.metrics.batch_create("error");
                tracing::warn!(batch = %created.name, error = %source, "reservation batch create failed");
                fail_open(slots, || Error::Batch {
                    namespace: ledger.namespace().to_owned(),
                    name: created.name.clone(),
                    source: source.clone(),
                });
            }
            Err(_) => {
                self.metrics.batch_create("timeout");
                fail_open(slots, || Error::Timeout);
            }
        }
        Round::Done
    }

    /// The batch was created: its requests are allowed once this webhook's batch watch
    /// confirms it (R5), else it is withdrawn and they fail (R6).
    async fn confirm(
        &self,
        ledger: &Ledger,
        created: &Created,
        mut expectation: Expectation<'_>,
        object: &karmada_quota_crds::KarmadaQuotaReservation,
        slots: &mut [Slot],
    ) {
        let waited = Instant::now();
        let outcome = tokio::time::timeout_at(created.deadline, expectation.outcome()).await;
        self.metrics
            .batch_confirm
            .observe(waited.elapsed().as_secs_f64());
        drop(expectation);
        let why = match outcome {
            Ok(Outcome::Confirmed) => {
                // The watch applied it to the view before answering.
                tracing::debug!(batch = %created.name, requests = created.requests, "reservation batch created");
                answer_planned(slots);
                return;
            }
            Ok(Outcome::Reused { by }) => format!(
                "showed batch {by} before it: the number was used before, while the watch lagged"
            ),
            Ok(Outcome::Unverified) => "re-listed before it showed it, so the order cannot \
                                        tell whether the number was used before"
                .to_owned(),
            Err(_) => "did not show it before the request's deadline".to_owned(),
        };
        // Not counted here from now on.
        ledger.withdraw(created.sequence, &created.writer);
        tracing::warn!(batch = %created.name, why = %why, "reservation batch withdrawn: this webhook's batch watch did not confirm it");
        fail_open(slots, || Error::BatchUnconfirmed {
            namespace: ledger.namespace().to_owned(),
            name: created.name.clone(),
            why: why.clone(),
        });
        // The batch stays in the store: the controller folds it and deletes it as any
        // other (docs/reservations.md R7).
        if cfg!(feature = "sim-revert-92fc912") {
            let uid = object.metadata.uid.as_deref();
            self.delete_withdrawn(ledger, &created.name, uid).await;
        }
    }

    /// Step 1: the namespaces of the open requests and the newest copies of the quota
    /// objects they answer to, each read from etcd once before its first use
    /// ([`super::verified`]).
    async fn copies(
        &self,
        ledger: &Ledger,
        slots: &[Slot],
        deadline: Instant,
    ) -> Result<(BTreeSet<String>, BTreeMap<QuotaKey, QuotaCopy>)> {
        // Before the quota copies are read: a hold the check lifts (the quota kinds
        // listed again) must be lifted for copies read after it, and a tombstone settled
        // by the cache's fold must not meet an older copy.
        if !cfg!(feature = "sim-revert-3dee4c6") {
            ledger.check()?;
        }
        ledger.settle(&self.cache, (self.clock)());
        let namespaces: BTreeSet<String> = slots
            .iter()
            .filter(|s| s.open())
            .map(|s| s.request.namespace.clone())
            .collect();
        let cached = self.newest_copies(&namespaces);
        Ok((namespaces, self.verified(cached, deadline).await?))
    }

    /// Step 2: decide every open request against `copies`; an admitted one gets its
    /// entries in `written`, a refused one its answer. Returns the number the batch must
    /// take: read before the view is counted, so that the decision counted every batch
    /// below it (a batch that arrives after is counted too, and takes the number first:
    /// the create conflicts, or the expectation finds the view past it, and the requests
    /// are decided again).
    ///
    /// Read after the count instead, a batch of another replica arriving in between would
    /// push the number past one the decision never counted.
    fn plan(
        &self,
        ledger: &Ledger,
        namespaces: &BTreeSet<String>,
        copies: &BTreeMap<QuotaKey, QuotaCopy>,
        slots: &mut [Slot],
    ) -> Result<u64> {
        // A quota that shows a fold of a batch this view never saw proves the view behind
        // (a watch lagging or dead without an error): the next number may be one that was
        // used and deleted, and a batch created on it would count for no one.
        let next = ledger.next_sequence();
        if next > MAX_SEQUENCE {
            return Err(exhausted(ledger, next - 1));
        }
        if let Some(folded) = copies.values().filter_map(QuotaCopy::folded_through).max()
            && folded >= next
            && !cfg!(feature = "sim-revert-3dee4c6")
        {
            return Err(Error::BatchesBehind {
                namespace: ledger.namespace().to_owned(),
                folded_through: folded,
                newest: next - 1,
            });
        }
        let labels = self.labels(namespaces.iter().map(String::as_str));
        for s in slots.iter_mut() {
            if s.open()
                && let Some(e) = refusal_covering(copies, &s.request.namespace, &labels)
            {
                s.answer(Err(e));
            }
        }
        let mut states = self.enforced(copies)?;
        for (i, decision) in self.decide_open(&mut states, slots, &labels) {
            match decision {
                Decision::Deny(d) => slots[i].answer(Ok(Decision::Deny(d))),
                Decision::Allow(entries) => slots[i].written = entries,
            }
        }
        if cfg!(feature = "sim-revert-052809a-number") {
            // The simulation's revert: the number read after the view was counted.
            return Ok(ledger.next_sequence());
        }
        Ok(next)
    }

    /// The number `sequence` was taken: wait until this webhook's batch watch has shown
    /// it, until `deadline`. The watch shows every batch of that number in order (A2), the
    /// first one first — its create, and its delete if it was folded and deleted — so a
    /// batch of `sequence` that holds entries no quota copy of this webhook accounts for
    /// yet is in the view (live, or a tombstone until the quotas' fold is in view) before
    /// the requests are decided again.
    ///
    /// Reading the batch that holds the name now would not do: a name freed by a delete
    /// can be taken again (A1) by a writer whose view lagged, and the batch read is then
    /// that later one, which says nothing of the batch it replaced.
    async fn wait_taken(&self, ledger: &Ledger, sequence: u64, deadline: Instant) -> Result<()> {
        while ledger.newest() < Some(sequence) {
            if Instant::now() + CATCH_UP_POLL > deadline {
                return Err(Error::Timeout);
            }
            tokio::time::sleep(CATCH_UP_POLL).await;
        }
        ledger.check()
    }

    /// The simulation's revert of R7 (bench/sim.md): delete withdrawn batch `name` at
    /// once — by the `uid` its create returned, or by name with the revert of 382f6f6 —
    /// so that replicas that counted it keep a tombstone no fold settles, and the store
    /// may lose its newest number. Bounded by [`WITHDRAW_TIMEOUT`].
    async fn delete_withdrawn(&self, ledger: &Ledger, name: &str, uid: Option<&str>) {
        let uid = if cfg!(feature = "sim-revert-382f6f6") {
            None
        } else {
            uid
        };
        // Its outcome changes nothing here: the simulation checks what the store holds.
        let _ = tokio::time::timeout(WITHDRAW_TIMEOUT, ledger.store().delete(name, uid)).await;
    }
}

/// The refusal when the newest number seen, `newest`, leaves none after it: a batch no
/// webhook numbers (one made by hand) took the last one. Created anyway, the next batch's
/// name would not parse and would refuse every admission in every replica, across
/// restarts, until deleted too.
fn exhausted(ledger: &Ledger, newest: u64) -> Error {
    let name = batch_name(newest);
    tracing::error!(namespace = %ledger.namespace(), batch = %name, "reservation batch numbers exhausted: the newest batch takes the last number; refusing admissions");
    Error::InvalidBatch {
        namespace: ledger.namespace().to_owned(),
        name,
        errors: "it takes the last batch number (kqr-<12 digits>), so no batch can follow \
                 it; no webhook numbers this far: a batch made by hand"
            .to_owned(),
    }
}

/// Until when a round may wait for the ledger: the earliest open request's deadline less
/// [`READY_MARGIN`] (`None`: no open request has that much time left).
fn ready_by(slots: &[Slot]) -> Option<Instant> {
    let earliest = slots
        .iter()
        .filter(|s| s.open())
        .map(|s| s.deadline)
        .min()?;
    earliest.checked_sub(READY_MARGIN)
}

/// The start of a round: requests past their deadline are answered 504, every entry
/// planned in an earlier round forgotten; the latest deadline of the open requests
/// (`None`: none is open).
fn start_round(slots: &mut [Slot]) -> Option<Instant> {
    let now = Instant::now();
    for s in slots.iter_mut() {
        if s.open() && s.deadline <= now {
            s.answer(Err(Error::Timeout));
        }
        s.written.clear();
    }
    slots.iter().filter(|s| s.open()).map(|s| s.deadline).max()
}

/// Answer every open, planned request with its admission.
fn answer_planned(slots: &mut [Slot]) {
    for s in slots {
        if s.open() {
            let written = std::mem::take(&mut s.written);
            s.answer(Ok(Decision::Allow(written)));
        }
    }
}

/// Answer every open request with `error()`.
fn fail_open(slots: &mut [Slot], error: impl Fn() -> Error) {
    for s in slots {
        if s.open() {
            s.answer(Err(error()));
        }
    }
}
