//! The KarmadaClusterQuota as a [`QuotaKind`] of the one reconciler
//! (`crate::reconcile`): its plan computes over the namespaces its selector matches, its
//! view lists them, and once its status is settled the leader makes its shares
//! (`shares`) mirror it. Pacing, writes, backoff and events are the reconciler's.

use futures::future::BoxFuture;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaClusterQuotaStatus};

use super::NamespaceLabels;
use super::compute::{self, ClusterComputed};
use super::shares::Shares;
use crate::desired::Computed;
use crate::error::Error;
use crate::reconcile::{KindCtx, QuotaKind};
use karmada_quota_dashboard::model::Quota;

/// What a cluster quota's plan reads besides the shared context.
pub struct ClusterOwn {
    /// The namespaces' labels.
    pub labels: NamespaceLabels,
    /// The KarmadaClusterQuotaShare mirrors (`None`: --cluster-quota-shares=false).
    pub shares: Option<Shares>,
}

/// A cluster quota's reconcile context.
pub type ClusterCtx = KindCtx<KarmadaClusterQuota>;

/// A cluster quota's plan: its computation and when it was made.
pub struct ClusterPlanned {
    computed: ClusterComputed,
    now: jiff::Timestamp,
}

impl QuotaKind for KarmadaClusterQuota {
    type Own = ClusterOwn;
    type Plan = ClusterPlanned;

    fn ready(ctx: &KindCtx<Self>) -> bool {
        ctx.bindings_synced() && ctx.own.labels.snapshot().is_some()
    }

    fn plan(
        ctx: &KindCtx<Self>,
        cq: &Self,
    ) -> (Option<KarmadaClusterQuotaStatus>, Option<ClusterPlanned>) {
        let Some(labels) = ctx.own.labels.snapshot() else {
            return (None, None);
        };
        let now = jiff::Timestamp::now();
        let reach = ctx.members.reach();
        let unfolded = ctx.unfolded(cq);
        let mut computed = {
            let index = ctx.index.read();
            compute::compute(
                cq,
                &labels,
                &index,
                &ctx.members,
                now.as_second(),
                unfolded.as_ref(),
            )
        };
        computed.computed = computed.computed.fenced(ctx.batches.is_some());
        let status = compute::desired_status(cq, &computed, &reach, now);
        (status, Some(ClusterPlanned { computed, now }))
    }

    fn computed(plan: &ClusterPlanned) -> (&Computed, jiff::Timestamp) {
        (&plan.computed.computed, plan.now)
    }

    fn view(
        ctx: &KindCtx<Self>,
        cq: &Self,
        plan: &ClusterPlanned,
        stored: &KarmadaClusterQuotaStatus,
    ) -> Quota {
        let c = &plan.computed;
        let mut view = ctx.view_of(cq, &c.computed, &stored.quota, plan.now);
        view.namespaces = c.namespaces.iter().map(|(n, _)| n.clone()).collect();
        view.shares = c.namespaces.iter().cloned().collect();
        view
    }

    fn after<'a>(ctx: &'a KindCtx<Self>, cq: &'a Self) -> BoxFuture<'a, Result<usize, Error>> {
        Box::pin(async move {
            match &ctx.own.shares {
                Some(shares) => Ok(shares.sync(cq).await?),
                None => Ok(0),
            }
        })
    }
}

#[cfg(test)]
mod tests;
