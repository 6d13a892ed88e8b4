//! The publish step of a reconcile: once a quota's status is settled (or, in a follower,
//! as stored), the kind's own writes (the leader's), the view the dashboard serves, the
//! quota's metrics, and when to look again. Also the events a write publishes.

use std::sync::Arc;
use std::time::{Duration, Instant};

use karmada_quota_shell::events::{Event, ObjectRef};
use kube::runtime::controller::Action;

use super::{Ctx, KindCtx, QuotaKind};
use crate::desired::{self, Computed, Notice};
use crate::error::Error;

/// A turn to publish: the quota as it stands and how it was computed.
pub(super) struct Turn<K: QuotaKind> {
    /// The quota as it stands (as written, or as stored).
    object: Arc<K>,
    /// The kind's computation.
    computation: K::Plan,
    /// The leader settled its status: the kind's own writes follow.
    settled: bool,
    /// A fold-only change put off this long: look again then at the latest.
    fold_after: Option<Duration>,
}

impl<K: QuotaKind> Turn<K> {
    /// A follower's turn: the stored quota, nothing settled.
    pub(super) fn follower(object: Arc<K>, computation: K::Plan) -> Self {
        Self {
            object,
            computation,
            settled: false,
            fold_after: None,
        }
    }

    /// The leader's turn once its write step settled `object`.
    pub(super) fn leader(object: K, computation: K::Plan, fold_after: Option<Duration>) -> Self {
        Self {
            object: Arc::new(object),
            computation,
            settled: true,
            fold_after,
        }
    }
}

/// Publish `turn` of the quota keyed `key` (reconciled since `started`); when to look
/// again: 1 s after the earliest reservation expiry, else the resync period, sooner for
/// a fold put off.
pub(super) async fn publish<K: QuotaKind>(
    ctx: &KindCtx<K>,
    key: (String, String),
    turn: Turn<K>,
    started: Instant,
) -> Result<Action, Error> {
    let stored = turn.object.status().cloned().unwrap_or_default();
    let view = K::view(ctx, &turn.object, &turn.computation, &stored);
    let mut retry = None;
    if turn.settled && *ctx.leader.borrow() {
        match own_writes(K::after(ctx, &turn.object)).await {
            Some(n) => {
                let n = n?;
                if n > 0 {
                    tracing::debug!(changed = n, "own objects written");
                }
            }
            None => retry = Some(OWN_WRITES_RETRY),
        }
    }
    let (computed, now) = K::computed(&turn.computation);
    if let Computed::Valid { view, .. } = computed {
        ctx.metrics.observe_quota(view);
    }
    ctx.views.publish(key.clone(), view);
    ctx.failures.lock().remove(&key);
    ctx.metrics.reconciled(started.elapsed());
    let next = desired::next_requeue(computed, now.as_second(), ctx.resync);
    let next = [turn.fold_after, retry]
        .into_iter()
        .flatten()
        .fold(next, Duration::min);
    Ok(Action::requeue(next))
}

/// Look again this soon after the kind's own writes went unanswered.
const OWN_WRITES_RETRY: Duration = Duration::from_secs(1);

/// The kind's own writes (a cluster quota's shares), abandoned after the status write's
/// deadline ([`super::WRITE_DEADLINE`]): an apiserver that never answers must not
/// hold the quota's turn, and with it every later reconcile of the quota. `None`: they
/// were abandoned, and are made again next turn.
async fn own_writes<T>(writes: impl std::future::Future<Output = T>) -> Option<T> {
    let deadline = super::WRITE_DEADLINE;
    let done = tokio::time::timeout(deadline, writes).await.ok();
    if done.is_none() {
        tracing::warn!(
            ?deadline,
            "the quota's own writes went unanswered; trying again"
        );
    }
    done
}

/// Emits `notices` as Events of the quota object `reference` (either kind): queued for
/// the event writer, which never makes the reconcile wait (a full queue drops and counts).
pub(crate) async fn emit(
    ctx: &Ctx,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    notices: &[Notice],
) {
    let Some(events) = &ctx.events else {
        return;
    };
    for n in notices {
        let queued = events.try_emit(Event {
            type_: n.type_,
            action: "Reconcile",
            reason: n.reason,
            note: n.note.chars().take(1000).collect(),
            regarding: ObjectRef::from_reference(reference),
        });
        if !queued {
            tracing::warn!(
                reason = n.reason,
                "could not publish event: the event queue is full"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn own_writes_that_never_answer_are_abandoned_at_the_write_deadline() {
        let started = tokio::time::Instant::now();
        assert_eq!(own_writes(std::future::pending::<usize>()).await, None);
        assert_eq!(started.elapsed(), super::super::WRITE_DEADLINE);
        assert_eq!(own_writes(std::future::ready(3)).await, Some(3));
    }
}
