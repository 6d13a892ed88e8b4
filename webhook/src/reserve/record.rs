//! Recording one quota's entries for a batch: a compare-and-swap update whose plan
//! re-decides the quota's open requests against the object it is given.

use parking_lot::Mutex;

use karmada_quota_core::decision::{AdmissionRequest, Decision, decide_batch};
use karmada_quota_core::quota::{QuotaState, Reservation};
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_status::{self as status, Outcome, UpdateError, Updated, entries};
use tokio::time::timeout_at;

use super::batch::{Slot, Verdict};
use super::copy::Kind;
use super::newest::fence_error;
use super::{Inner, lock, ttl_secs};
use crate::error::Error;

/// What a plan returns besides the status: each live request's verdict, or why the
/// quota refuses them all.
type Plan = Result<Vec<(usize, Verdict)>, Error>;

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
        // The cache parsed `base` already; only a fresh read after a 409 is parsed here.
        let base_version = base.meta().resource_version.clone();
        let live: Vec<usize> = (0..slots.len())
            .filter(|&i| slots[i].open() && slots[i].needed.contains(quota))
            .collect();
        let Some(deadline) = live.iter().map(|&i| slots[i].deadline).max() else {
            return;
        };
        // The entries of the last plan, readable even when the write times out.
        let planned: Mutex<Vec<(usize, Reservation)>> = Mutex::default();
        let plan = |object: &K| -> (Option<K::Status>, Plan) {
            lock(&planned).clear();
            let state = if object.meta().resource_version == base_version {
                base_state.clone()
            } else {
                match parsed(quota, object) {
                    Ok(s) => s,
                    Err(e) => return (None, Err(e)),
                }
            };
            // Fenced for the batch store since the batch was decided (a fresh read after
            // a 409): this replica of the status store admits nothing more (R22).
            if let Some(e) = fence_error(quota, &state, false) {
                return (None, Err(e));
            }
            let verdicts = self.re_decide(state, &live, slots);
            (staged(object, &verdicts, &planned), Ok(verdicts))
        };
        let attempts = self.config.max_attempts;
        let result = timeout_at(
            deadline,
            status::update(K::store(self), base, plan, || true, attempts),
        )
        .await;
        match result {
            Ok(Ok(updated)) => self.recorded(group, quota, updated, &live, slots),
            Ok(Err(e)) => self.not_recorded(group, quota, e, &live, slots),
            Err(_elapsed) => {
                let planned = std::mem::take(&mut *lock(&planned));
                self.timed_out(group, quota, planned, &live, slots);
            }
        }
    }

    /// Re-decide the requests of `live` against `state` (one quota's, as the object being
    /// written holds it): each request's verdict, with the entry to write when admitted.
    fn re_decide(
        &self,
        state: QuotaState,
        live: &[usize],
        slots: &[Slot],
    ) -> Vec<(usize, Verdict)> {
        let (ttl, max) = (
            ttl_secs(self.config.reservation_ttl),
            self.config.max_reservations,
        );
        let now = (self.clock)();
        let reqs: Vec<AdmissionRequest<'_>> = live
            .iter()
            .map(|&i| slots[i].request.as_core(now, ttl, max))
            .collect();
        live.iter()
            .zip(decide_batch(&mut [state], &reqs))
            .map(|(&i, d)| match d {
                Decision::Allow(entries) => (
                    i,
                    Verdict::Admit(entries.into_iter().next().map(|(_, e)| e)),
                ),
                deny @ Decision::Deny(_) => (i, Verdict::Deny(deny)),
            })
            .collect()
    }

    /// The update ended (written, unchanged, stopped, or the quota gone): count its
    /// conflicts, remember the object written, and settle each live request by its
    /// verdict (all of them failed when the plan refused the quota).
    fn recorded<K: Kind>(
        &self,
        group: &str,
        quota: &QuotaKey,
        updated: Updated<Plan, K>,
        live: &[usize],
        slots: &mut [Slot],
    ) {
        for _ in 0..updated.conflicts {
            self.metrics.write("conflict");
            self.metrics.conflicts.inc();
            self.metrics.retries.inc();
        }
        let verdicts = match updated.plan {
            Ok(v) => v,
            Err(e) => {
                tracing::warn!(error = %e, "refusing ResourceBindings");
                for &i in live {
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
                for &i in live {
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

    /// The update gave up (too many conflicts, or the store failed): forget our copy of
    /// the quota, count the conflicts, and fail every live request with the reason.
    fn not_recorded(
        &self,
        group: &str,
        quota: &QuotaKey,
        e: UpdateError,
        live: &[usize],
        slots: &mut [Slot],
    ) {
        let namespace = quota.namespace().unwrap_or_default();
        let name = quota.name();
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
                Error::Store {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    source,
                }
            }
        };
        for &i in live {
            slots[i].fail(Err(error.clone()));
        }
    }

    /// The update outran the batch's deadline: its outcome is unknown, so the entries of
    /// the last plan (`planned`) may have been written; fail every live request.
    fn timed_out(
        &self,
        group: &str,
        quota: &QuotaKey,
        planned: Vec<(usize, Reservation)>,
        live: &[usize],
        slots: &mut [Slot],
    ) {
        self.metrics.write("timeout");
        self.forget(group, quota);
        for (i, e) in planned {
            slots[i].maybe_written.push((quota.clone(), e));
        }
        for &i in live {
            slots[i].fail(Err(Error::Timeout));
        }
    }
}

/// Stage the entries `verdicts` admit in `planned` (it holds the last plan's only), and
/// the status of `object` holding them; `None` when none is admitted (nothing to write).
fn staged<K: Kind>(
    object: &K,
    verdicts: &[(usize, Verdict)],
    planned: &Mutex<Vec<(usize, Reservation)>>,
) -> Option<K::Status> {
    for (i, v) in verdicts {
        if let Verdict::Admit(Some(e)) = v {
            lock(planned).push((*i, e.clone()));
        }
    }
    if lock(planned).is_empty() {
        return None;
    }
    let mut status = object.status().cloned().unwrap_or_default();
    entries::add(
        K::quota_part_mut(&mut status),
        lock(planned).iter().map(|(_, e)| e),
    );
    Some(status)
}

/// The engine's view of `object` (quota `quota`), or why it cannot be enforced.
fn parsed<K: Kind>(quota: &QuotaKey, object: &K) -> Result<QuotaState, Error> {
    object.state().map_err(|errors| Error::InvalidQuota {
        namespace: quota.namespace().unwrap_or_default().to_owned(),
        name: quota.name().to_owned(),
        errors: errors
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join("; "),
    })
}
