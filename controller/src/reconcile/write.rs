//! The write step of a reconcile, the leader's alone: the plan written with
//! compare-and-swap (`status::update`, planned again from a fresh copy after a 409),
//! conflicts counted and paced, events for notable changes.

use karmada_quota_status::{self as status, Outcome, UpdateError};
use kube::runtime::controller::Action;

use super::publish::{Turn, emit};
use super::{
    CONTENDED_WRITE_ATTEMPTS, KindCtx, MAX_WRITE_ATTEMPTS, NOT_SYNCED_RETRY, QuotaKind,
    WRITE_DEADLINE, forget, pending, plan,
};
use crate::desired;
use crate::error::Error;

/// How a write step ended.
pub(super) enum Wrote<K: QuotaKind> {
    /// The status is settled (written, unchanged, or leadership lost mid-write): publish.
    Settled(Turn<K>),
    /// Nothing to publish: look again after this.
    Requeue(Action),
}

/// Write `object`'s plan (pacing key `key`).
pub(super) async fn write<K: QuotaKind>(
    ctx: &KindCtx<K>,
    key: &(String, String),
    object: &K,
) -> Result<Wrote<K>, Error> {
    let backoff = !ctx.pacing.max_write_backoff.is_zero();
    let attempts = if backoff {
        CONTENDED_WRITE_ATTEMPTS
    } else {
        MAX_WRITE_ATTEMPTS
    };
    let update = status::update(
        &*ctx.store,
        object.clone(),
        |q| plan(ctx, key, q),
        || ctx.may_write(),
        attempts,
    );
    // A request the apiserver never answers (its connection gone silent, the apiserver
    // restarting behind a proxy) must not hold this quota's reconcile for good: kube
    // runs one reconcile per object at a time, and nothing else would time it out.
    let Ok(updated) = tokio::time::timeout(WRITE_DEADLINE, update).await else {
        tracing::warn!(deadline = ?WRITE_DEADLINE, "status write unanswered; trying again");
        return Ok(Wrote::Requeue(Action::requeue(NOT_SYNCED_RETRY)));
    };
    let w = match updated {
        Ok(w) => w,
        Err(e) => return gave_up(ctx, key, e, backoff, pending(object)),
    };
    for _ in 0..w.conflicts {
        ctx.metrics.status_conflict();
    }
    if backoff && matches!(w.outcome, Outcome::Written(_)) {
        ctx.pacing.paced(key, w.conflicts > 0, false);
    }
    let fold_after = w.plan.fold_after;
    let Some(computation) = w.plan.computation else {
        return Ok(Wrote::Requeue(Action::requeue(NOT_SYNCED_RETRY)));
    };
    let object = match w.outcome {
        Outcome::Gone => {
            forget(ctx, &key.0, &key.1);
            return Ok(Wrote::Requeue(Action::await_change()));
        }
        // Lost leadership mid-write: like a follower, keep the view of what is stored.
        Outcome::Unchanged | Outcome::Stopped => w.base,
        Outcome::Written(written) => {
            wrote(ctx, key, &w.base, &written).await;
            *written
        }
    };
    if let Some(wait) = fold_after {
        tracing::debug!(?wait, "fold-only change put off");
    }
    Ok(Wrote::Settled(Turn::leader(
        object,
        computation,
        fold_after,
    )))
}

/// After `written` replaced `base`'s status: counted, its interval started, events for
/// its notable changes.
async fn wrote<K: QuotaKind>(ctx: &KindCtx<K>, key: &(String, String), base: &K, written: &K) {
    ctx.metrics.status_written();
    ctx.pacing.wrote(key);
    let new = written.quota_status().cloned().unwrap_or_default();
    let notices = desired::notices(base.quota_status(), &new);
    emit(ctx, &written.object_ref(&()), &notices).await;
    tracing::debug!("status written");
}

/// A write that did not go through: its conflicts counted; a contended quota (with a
/// write backoff) is left to the webhook for a while, anything else fails the reconcile.
fn gave_up<K: QuotaKind>(
    ctx: &KindCtx<K>,
    key: &(String, String),
    e: UpdateError,
    backoff: bool,
    pending: usize,
) -> Result<Wrote<K>, Error> {
    for _ in 0..e.conflicts() {
        ctx.metrics.status_conflict();
    }
    if backoff && matches!(e, UpdateError::Conflicts { .. }) {
        // Contended: the next turn plans from the newest copy the watch brings.
        ctx.pacing.paced(key, true, true);
        let wait = ctx.pacing.write_interval(key, pending);
        tracing::debug!(?wait, "status write contended; retrying later");
        return Ok(Wrote::Requeue(Action::requeue(wait)));
    }
    Err(e.into())
}
