//! The plan step of a reconcile: what a quota's status should be, from the kind's
//! computation and the quota's waiting line, and whether a fold-only change is put off.
//! Pure over the context's state (the index, members, lines, pacing): nothing is written.

use std::time::Duration;

use super::{KindCtx, QuotaKind};

/// One plan of a quota (either kind), besides the status it should have.
pub struct Plan<K: QuotaKind> {
    /// The kind's computation (`None`: not everything the plan reads was listed).
    pub computation: Option<K::Plan>,
    /// How long a fold-only change is put off ([`super::Pacing`]'s `fold_wait`): then no
    /// status is planned, and the quota is looked at again when the wait is over.
    pub fold_after: Option<Duration>,
}

/// Plan `q`, whose pacing key is `key`: the status it should have (`None`: the stored one
/// stands, unchanged or put off) and the [`Plan`]. The shape `status::update` plans
/// with, again from a fresh copy after a 409.
pub fn plan<K: QuotaKind>(
    ctx: &KindCtx<K>,
    key: &(String, String),
    q: &K,
) -> (Option<K::Status>, Plan<K>) {
    let (next, computation) = plan_with_line(ctx, q);
    let fold_after = next.as_ref().and_then(|n| {
        ctx.pacing
            .fold_wait(key, q.quota_status(), K::quota_part(n))
    });
    let plan = Plan {
        computation,
        fold_after,
    };
    (next.filter(|_| fold_after.is_none()), plan)
}

/// The kind's plan of `q`, with the quota's waiting line (`status.queue`, kept by the
/// leader's release loop) in the KarmadaQuota-shaped part: one place for both kinds.
fn plan_with_line<K: QuotaKind>(ctx: &KindCtx<K>, q: &K) -> (Option<K::Status>, Option<K::Plan>) {
    let (next, plan) = K::plan(ctx, q);
    let quota = ctx.queue.with_line(
        &q.key(),
        q.quota_status(),
        next.as_ref().map(|s| K::quota_part(s).clone()),
    );
    let next = quota.map(|quota| {
        let mut next = next.unwrap_or_else(|| q.status().cloned().unwrap_or_default());
        *K::quota_part_mut(&mut next) = quota;
        next
    });
    (next, plan)
}

#[cfg(test)]
mod tests;
