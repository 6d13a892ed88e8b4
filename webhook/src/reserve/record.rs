//! Recording one quota's entries for a batch: a compare-and-swap update whose plan
//! re-decides the quota's open requests against the object it is given.

use std::sync::Mutex;

use karmada_quota_core::decision::{AdmissionRequest, Decision, decide_batch};
use karmada_quota_core::quota::{QuotaState, Reservation};
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_status::{self as status, Outcome, UpdateError, entries};
use tokio::time::timeout_at;

use super::batch::{Slot, Verdict};
use super::copy::Kind;
use super::newest::fence_error;
use super::{Inner, lock, ttl_secs};
use crate::error::Error;

impl Inner {
    /// Record the entries of `slots` still open for `quota` (of kind `K`): one
    /// compare-and-swap update whose plan re-decides those requests against the object it
    /// is given (the copy the batch was decided on first, a fresh read after a 409).
    pub(super) async fn record<K: Kind>(
        &self,
        group: &str,
        quota: &QuotaKey,
        base: K,
        base_state: &QuotaState,
        slots: &mut [Slot],
    ) {
        let namespace = quota.namespace().unwrap_or_default();
        let name = quota.name();
        // The cache parsed `base` already; only a fresh read after a 409 is parsed here.
        let base_version = base.meta().resource_version.clone();
        let live: Vec<usize> = (0..slots.len())
            .filter(|&i| slots[i].open() && slots[i].needed.contains(quota))
            .collect();
        let Some(deadline) = live.iter().map(|&i| slots[i].deadline).max() else {
            return;
        };
        let (ttl, max) = (
            ttl_secs(self.config.reservation_ttl),
            self.config.max_reservations,
        );
        let invalid = |errors: &[karmada_quota_core::field::FieldError]| Error::InvalidQuota {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            errors: errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; "),
        };
        // The entries of the last plan, readable even when the write times out.
        let planned: Mutex<Vec<(usize, Reservation)>> = Mutex::default();
        let plan = |object: &K| {
            lock(&planned).clear();
            let state = if object.meta().resource_version == base_version {
                base_state.clone()
            } else {
                match object.state() {
                    Ok(s) => s,
                    Err(errors) => return (None, Err(invalid(&errors))),
                }
            };
            // Fenced for the batch store since the batch was decided (a fresh read after
            // a 409): this replica of the status store admits nothing more (R22).
            if let Some(e) = fence_error(quota, &state, false) {
                return (None, Err(e));
            }
            let now = (self.clock)();
            let reqs: Vec<AdmissionRequest<'_>> = live
                .iter()
                .map(|&i| slots[i].request.as_core(now, ttl, max))
                .collect();
            let verdicts: Vec<(usize, Verdict)> = live
                .iter()
                .zip(decide_batch(&mut [state], &reqs))
                .map(|(&i, d)| match d {
                    Decision::Allow(entries) => (
                        i,
                        Verdict::Admit(entries.into_iter().next().map(|(_, e)| e)),
                    ),
                    deny @ Decision::Deny(_) => (i, Verdict::Deny(deny)),
                })
                .collect();
            for (i, v) in &verdicts {
                if let Verdict::Admit(Some(e)) = v {
                    lock(&planned).push((*i, e.clone()));
                }
            }
            if lock(&planned).is_empty() {
                return (None, Ok(verdicts));
            }
            let mut status = object.status().cloned().unwrap_or_default();
            entries::add(
                K::quota_part_mut(&mut status),
                lock(&planned).iter().map(|(_, e)| e),
            );
            (Some(status), Ok(verdicts))
        };
        let attempts = self.config.max_attempts;
        let result = timeout_at(
            deadline,
            status::update(K::store(self), base, plan, || true, attempts),
        )
        .await;
        let store_error = |source| Error::Store {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        };
        match result {
            Ok(Ok(updated)) => {
                for _ in 0..updated.conflicts {
                    self.metrics.write("conflict");
                    self.metrics.conflicts.inc();
                    self.metrics.retries.inc();
                }
                let verdicts = match updated.plan {
                    Ok(v) => v,
                    Err(e) => {
                        tracing::warn!(error = %e, "refusing ResourceBindings");
                        for &i in &live {
                            slots[i].fail(Err(e.clone()));
                        }
                        return;
                    }
                };
                match updated.outcome {
                    Outcome::Written(object) => {
                        self.metrics.write("ok");
                        self.remember(group, K::copy(*object));
                    }
                    Outcome::Gone => {
                        // Deleted since the cache saw it: it no longer applies.
                        self.metrics.write("not_found");
                        self.forget(group, quota);
                        for &i in &live {
                            slots[i].needed.remove(quota);
                        }
                        return;
                    }
                    Outcome::Unchanged | Outcome::Stopped => {}
                }
                for (i, verdict) in verdicts {
                    let slot = &mut slots[i];
                    match verdict {
                        Verdict::Admit(entry) => {
                            slot.needed.remove(quota);
                            if let Some(e) = entry {
                                slot.written.push((quota.clone(), e));
                            }
                        }
                        Verdict::Deny(d) => slot.fail(Ok(d)),
                    }
                }
            }
            Ok(Err(e)) => {
                self.forget(group, quota);
                for _ in 0..e.conflicts() {
                    self.metrics.write("conflict");
                    self.metrics.conflicts.inc();
                }
                let error = match e {
                    UpdateError::Conflicts { attempts, .. } => Error::TooManyConflicts {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                        attempts,
                    },
                    UpdateError::Store { source, .. } => {
                        self.metrics.write("error");
                        tracing::warn!(error = %source, "status write failed");
                        store_error(source)
                    }
                };
                for &i in &live {
                    slots[i].fail(Err(error.clone()));
                }
            }
            Err(_elapsed) => {
                self.metrics.write("timeout");
                self.forget(group, quota);
                for (i, e) in std::mem::take(&mut *lock(&planned)) {
                    slots[i].maybe_written.push((quota.clone(), e));
                }
                for &i in &live {
                    slots[i].fail(Err(Error::Timeout));
                }
            }
        }
    }
}
