//! One batch of the queue's requests: each request in a [`Slot`] until it is answered,
//! core's decision of the open ones against the quota states, and the hand-over to
//! [`super::commit`]. Runs in a `reservation_batch` span (`requests`, and `namespace` when
//! the batch holds one).

use std::collections::BTreeSet;

use karmada_quota_core::decision::{AdmissionRequest, Decision, decide_batch_selected};
use karmada_quota_core::quota::Reservation;
use karmada_quota_core::selection::QuotaKey;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Span;
use tracing::field::Empty;

use super::{BindingRequest, Inner, ttl_secs};
use crate::error::{Error, Result};

/// A request waiting in the queue.
pub(super) struct Job {
    pub(super) request: BindingRequest,
    pub(super) deadline: Instant,
    pub(super) reply: oneshot::Sender<Result<Decision>>,
}

/// A request inside a batch.
pub(super) struct Slot {
    pub(super) request: BindingRequest,
    pub(super) deadline: Instant,
    /// `None` once answered (or abandoned by its caller).
    pub(super) reply: Option<oneshot::Sender<Result<Decision>>>,
    /// The entries this round's decision admitted it with, by quota (the batch's
    /// content; answered with the Allow once the batch is confirmed).
    pub(super) written: Vec<(QuotaKey, Reservation)>,
}

impl Slot {
    /// Still waiting for its answer (caller still there).
    pub(super) fn open(&self) -> bool {
        self.reply.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    pub(super) fn answer(&mut self, result: Result<Decision>) {
        if let Some(tx) = self.reply.take() {
            let _ = tx.send(result);
        }
    }
}

impl Inner {
    /// One batch: every job is answered.
    #[tracing::instrument(
        name = "reservation_batch",
        skip_all,
        fields(requests = jobs.len(), namespace = Empty)
    )]
    pub(super) async fn process(&self, jobs: Vec<Job>) {
        #[allow(clippy::cast_precision_loss)]
        self.metrics.batch_size.observe(jobs.len() as f64);
        let slots = slots_of(jobs);
        let namespaces: BTreeSet<&str> =
            slots.iter().map(|s| s.request.namespace.as_str()).collect();
        if let (1, Some(namespace)) = (namespaces.len(), namespaces.first()) {
            Span::current().record("namespace", *namespace);
        }
        self.commit(slots).await;
    }

    /// Core's decision of every open slot against `states`, in slot order, with the
    /// slot's index.
    pub(super) fn decide_open(
        &self,
        states: &mut [karmada_quota_core::quota::QuotaState],
        slots: &[Slot],
        labels: &std::collections::HashMap<String, karmada_quota_core::selection::Labels>,
    ) -> Vec<(usize, Decision)> {
        let now = (self.clock)();
        let (ttl, max) = (
            ttl_secs(self.config.reservation_ttl),
            self.config.max_reservations,
        );
        let open: Vec<usize> = (0..slots.len()).filter(|&i| slots[i].open()).collect();
        let reqs: Vec<AdmissionRequest<'_>> = open
            .iter()
            .map(|&i| slots[i].request.as_core(now, ttl, max))
            .collect();
        let decisions = decide_batch_selected(states, &reqs, |ns| labels.get(ns));
        open.into_iter().zip(decisions).collect()
    }
}

/// The batch's slots, one per job in order; a job whose deadline has passed is answered
/// with a timeout at once.
fn slots_of(jobs: Vec<Job>) -> Vec<Slot> {
    let mut slots: Vec<Slot> = jobs
        .into_iter()
        .map(|j| Slot {
            request: j.request,
            deadline: j.deadline,
            reply: Some(j.reply),
            written: Vec::new(),
        })
        .collect();
    let started = Instant::now();
    for s in &mut slots {
        if s.deadline <= started {
            s.answer(Err(Error::Timeout));
        }
    }
    slots
}
