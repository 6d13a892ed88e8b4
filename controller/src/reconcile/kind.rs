//! What the one reconciler ([`super::reconcile`]) needs of a quota kind, and the
//! KarmadaQuota's answers. The KarmadaClusterQuota's live with the cluster quotas
//! (`crate::cluster_quotas`): its selection of namespaces and its shares.
//!
//! ```text
//!  QuotaKind ── ready(ctx)            what the plan reads is listed
//!            ── plan(ctx, object)     (the status it should have, or None; the computation)
//!            ── view(ctx, object, …)  the view the dashboard and the API serve
//!            ── after(ctx, object)    the leader's own writes once the status is settled
//! ```
//!
//! Everything else — pacing, compare-and-swap, backoff, events, views, metrics — is the
//! same code for both kinds.

use std::sync::Arc;

use futures::future::BoxFuture;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaStatus, QuotaObject};
use karmada_quota_status::StatusStore;
use kube::ResourceExt;

use super::Ctx;
use crate::desired::{self, Computed};
use crate::error::Error;
use karmada_quota_dashboard::model::Quota;

/// A quota kind the reconciler handles.
pub trait QuotaKind: QuotaObject {
    /// What this kind's plan reads besides the shared context.
    type Own: Send + Sync + 'static;
    /// What a plan computes besides the status (the computation and its time).
    type Plan: Send + 'static;

    /// Refuse an object the reconciler cannot key (default: none).
    fn check(&self) -> Result<(), Error> {
        Ok(())
    }

    /// Whether everything the plan reads has been listed (no plan from a partial list).
    fn ready(ctx: &KindCtx<Self>) -> bool;

    /// The status `object` should have (`None`: as stored) and the computation; no
    /// computation while [`QuotaKind::ready`] would say no.
    fn plan(ctx: &KindCtx<Self>, object: &Self) -> (Option<Self::Status>, Option<Self::Plan>);

    /// The computation of a plan and when it was made.
    fn computed(plan: &Self::Plan) -> (&Computed, jiff::Timestamp);

    /// The view of `object`, computed as `plan`, whose stored status is `stored`.
    fn view(ctx: &KindCtx<Self>, object: &Self, plan: &Self::Plan, stored: &Self::Status) -> Quota;

    /// The leader's own writes after the status is settled (a cluster quota's shares);
    /// `Ok(n)`: n objects changed.
    fn after<'a>(
        _ctx: &'a KindCtx<Self>,
        _object: &'a Self,
    ) -> BoxFuture<'a, Result<usize, Error>> {
        Box::pin(std::future::ready(Ok(0)))
    }
}

/// One quota kind's reconcile context: the shared [`Ctx`], the kind's status store (the
/// only writer of that status in the controller) and what the kind's plan reads besides.
pub struct KindCtx<K: QuotaKind> {
    /// Index, members, views, metrics, leadership, events, pacing, failures.
    pub base: Arc<Ctx>,
    /// Reads and writes the kind's status.
    pub store: Arc<dyn StatusStore<K>>,
    /// The kind's own.
    pub own: K::Own,
}

impl<K: QuotaKind> std::ops::Deref for KindCtx<K> {
    type Target = Ctx;
    fn deref(&self) -> &Ctx {
        &self.base
    }
}

/// A KarmadaQuota's plan: its computation and when it was made.
#[derive(Debug)]
pub struct Planned {
    /// The computation.
    pub computed: Computed,
    /// When.
    pub now: jiff::Timestamp,
}

impl QuotaKind for KarmadaQuota {
    type Own = ();
    type Plan = Planned;

    fn check(&self) -> Result<(), Error> {
        match self.namespace() {
            Some(_) => Ok(()),
            None => Err(Error::MissingNamespace(self.name_any())),
        }
    }

    fn ready(ctx: &KindCtx<Self>) -> bool {
        ctx.bindings_synced()
    }

    fn plan(ctx: &KindCtx<Self>, quota: &Self) -> (Option<KarmadaQuotaStatus>, Option<Planned>) {
        let now = jiff::Timestamp::now();
        let ns = quota.namespace().unwrap_or_default();
        let observed = ctx.members.observed_pods(&ns);
        let reach = ctx.members.reach();
        let unfolded = ctx.unfolded(quota);
        let computed = {
            let index = ctx.index.read();
            desired::compute_with(quota, &index, &observed, now.as_second(), unfolded.as_ref())
                .fenced(ctx.batches.is_some())
        };
        let status = desired::desired_status(quota, &computed, &reach, now);
        (status, Some(Planned { computed, now }))
    }

    fn computed(plan: &Planned) -> (&Computed, jiff::Timestamp) {
        (&plan.computed, plan.now)
    }

    fn view(
        ctx: &KindCtx<Self>,
        quota: &Self,
        plan: &Planned,
        stored: &KarmadaQuotaStatus,
    ) -> Quota {
        ctx.view_of(quota, &plan.computed, stored, plan.now)
    }
}
