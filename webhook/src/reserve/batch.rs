//! One batch of a group's requests, steps 1–5 of the module diagram of [`super`]:
//! decide them together against the newest copies (core's `decide_batch_selected`), write
//! each quota that gained entries once, in key order ([`super::record`]), answer each
//! request once every quota it needs holds its entry, and roll back what was written for
//! the requests that did not end admitted ([`super::rollback`]). Runs in a
//! `reservation_batch` span (`group`, `requests`, and `namespace` when the batch holds
//! one); each quota's write in a `quota_write` span (`quota`).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use karmada_quota_core::decision::{AdmissionRequest, Decision, decide_batch_selected};
use karmada_quota_core::quota::Reservation;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::Span;
use tracing::field::Empty;

use super::copy::{Kind, QuotaCopy};
use super::newest::{enforced_states, refusal_covering};
use super::{BindingRequest, Inner, ttl_secs};
use crate::error::{Error, Result};

/// A request waiting in its group's queue.
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
    /// Quotas that still have to record this request's entry.
    pub(super) needed: BTreeSet<QuotaKey>,
    /// Entries written so far, with their quota: answered with an Allow, or rolled back.
    pub(super) written: Vec<(QuotaKey, Reservation)>,
    /// Entries that may have been written (the write's outcome is unknown: it timed out).
    pub(super) maybe_written: Vec<(QuotaKey, Reservation)>,
    /// The request ends refused or failed: its answer, sent after the writes of the batch.
    pub(super) failed: Option<Result<Decision>>,
}

impl Slot {
    /// Still waiting for its quotas (not answered, not failed, caller still there).
    pub(super) fn open(&self) -> bool {
        self.failed.is_none() && self.reply.as_ref().is_some_and(|tx| !tx.is_closed())
    }

    pub(super) fn answer(&mut self, result: Result<Decision>) {
        if let Some(tx) = self.reply.take() {
            let _ = tx.send(result);
        }
    }

    /// Refused or failed at some quota; answered once the batch's writes are done.
    pub(super) fn fail(&mut self, result: Result<Decision>) {
        if self.failed.is_none() {
            self.failed = Some(result);
        }
    }
}

/// What the re-decision of one quota said about one request.
pub(super) enum Verdict {
    /// Admitted; the entry to write (`None`: the quota no longer charges it anything).
    Admit(Option<Reservation>),
    /// Refused by this quota now.
    Deny(Decision),
}

impl Inner {
    /// Steps 1–5 for one batch of `group` (see the module doc); every job is answered.
    #[tracing::instrument(
        name = "reservation_batch",
        skip_all,
        fields(group = %group, requests = jobs.len(), namespace = Empty)
    )]
    pub(super) async fn process(&self, group: &str, jobs: Vec<Job>) {
        #[allow(clippy::cast_precision_loss)]
        self.metrics.batch_size.observe(jobs.len() as f64);
        let mut slots = slots_of(jobs);

        // With reservation batches, steps 3–5 are one batch create (`super::commit`).
        if let Some(ledger) = self.ledger.get() {
            self.commit(ledger, group, slots).await;
            return;
        }

        let (copies, quotas) = self.decide_slots(group, &mut slots);
        self.record_all(group, quotas, &copies, &mut slots).await;
        let undo = answer_all(&mut slots);
        for (quota, entries) in undo {
            if quota.is_cluster() {
                self.roll_back::<KarmadaClusterQuota>(group, &quota, &entries)
                    .await;
            } else {
                self.roll_back::<KarmadaQuota>(group, &quota, &entries)
                    .await;
            }
        }
    }

    /// Steps 1–2: decide the batch against the newest copies; a request whose namespace
    /// a quota that cannot be enforced covers is refused with its errors, a denied one is
    /// answered. The copies, and the quotas that gained entries (each admitted slot's
    /// `needed`).
    fn decide_slots(
        &self,
        group: &str,
        slots: &mut [Slot],
    ) -> (BTreeMap<QuotaKey, QuotaCopy>, BTreeSet<QuotaKey>) {
        let namespaces: BTreeSet<String> =
            slots.iter().map(|s| s.request.namespace.clone()).collect();
        if let (1, Some(namespace)) = (namespaces.len(), namespaces.first()) {
            Span::current().record("namespace", namespace.as_str());
        }
        let copies = self.newest_copies(group, &namespaces, &HashSet::new());
        let labels = self.labels(namespaces.iter().map(String::as_str));
        for s in slots.iter_mut() {
            if s.open()
                && let Some(e) = refusal_covering(&copies, &s.request.namespace, &labels, false)
            {
                tracing::warn!(namespace = %s.request.namespace, error = %e, "refusing ResourceBindings");
                s.answer(Err(e));
            }
        }
        let mut states = enforced_states(&copies, &self.config);
        let mut quotas: BTreeSet<QuotaKey> = BTreeSet::new();
        for (i, decision) in self.decide_open(&mut states, slots, &labels) {
            let slot = &mut slots[i];
            match decision {
                Decision::Deny(d) => slot.answer(Ok(Decision::Deny(d))),
                Decision::Allow(entries) => {
                    slot.needed = entries.into_iter().map(|(q, _)| q).collect();
                    quotas.extend(slot.needed.iter().cloned());
                }
            }
        }
        (copies, quotas)
    }

    /// Step 3: per quota object of `quotas`, in key order, record the entries of the
    /// requests still open.
    async fn record_all(
        &self,
        group: &str,
        quotas: BTreeSet<QuotaKey>,
        copies: &BTreeMap<QuotaKey, QuotaCopy>,
        slots: &mut [Slot],
    ) {
        for quota in quotas {
            let Some(copy) = copies.get(&quota) else {
                continue; // unreachable: decisions only name quotas of `copies`
            };
            match copy {
                QuotaCopy::Quota(_) => {
                    self.record_in::<KarmadaQuota>(group, &quota, copy, slots)
                        .await;
                }
                QuotaCopy::Cluster(_) => {
                    self.record_in::<KarmadaClusterQuota>(group, &quota, copy, slots)
                        .await;
                }
            }
        }
    }

    /// Step 2: core's decision of every open slot against `states`, in slot order, with
    /// the slot's index.
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

    /// Step 3 for one quota object of kind `K` (its copy parsed: `states` held it).
    #[tracing::instrument(name = "quota_write", skip_all, fields(quota = %quota))]
    async fn record_in<K: Kind>(
        &self,
        group: &str,
        quota: &QuotaKey,
        copy: &QuotaCopy,
        slots: &mut [Slot],
    ) {
        let Some(parsed) = K::object(copy).and_then(|c| c.parsed.as_ref().ok()) else {
            return; // unreachable: only parsed copies have states
        };
        self.record::<K>(group, quota, (*parsed.object).clone(), &parsed.state, slots)
            .await;
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
            needed: BTreeSet::new(),
            written: Vec::new(),
            maybe_written: Vec::new(),
            failed: None,
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

/// Steps 4–5: answer every slot still waiting. Admitted = every quota it needed holds
/// its entry, and its caller is still waiting for the answer; what was written for a
/// request that did not end admitted (refused, failed, or its caller gone after a
/// timeout) is returned, per quota, to be rolled back.
fn answer_all(slots: &mut [Slot]) -> BTreeMap<QuotaKey, Vec<Reservation>> {
    let mut undo: BTreeMap<QuotaKey, Vec<Reservation>> = BTreeMap::new();
    let mut admitted_count = 0_usize;
    for s in slots {
        let Some(tx) = s.reply.take() else {
            // Denied in the batch decision, or abandoned by a caller that timed out
            // before its writes began: nothing of it was written.
            continue;
        };
        let admitted = match s.failed.take() {
            Some(result) => {
                let _ = tx.send(result);
                false
            }
            None if s.needed.is_empty() => tx.send(Ok(Decision::Allow(s.written.clone()))).is_ok(),
            None => {
                // Every quota it needed was tried, so none can be left. Defensive.
                let _ = tx.send(Err(Error::WorkerGone(s.request.namespace.clone())));
                false
            }
        };
        admitted_count += usize::from(admitted);
        if !admitted {
            for (q, e) in s.written.drain(..).chain(s.maybe_written.drain(..)) {
                undo.entry(q).or_default().push(e);
            }
        }
    }
    tracing::debug!(
        admitted = admitted_count,
        quotas_to_roll_back = undo.len(),
        "reservation batch answered"
    );
    undo
}
