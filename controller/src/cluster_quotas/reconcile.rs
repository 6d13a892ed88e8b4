//! The KarmadaClusterQuota reconciler: the KarmadaQuota reconciler's steps (not synced →
//! requeue; leader → compare-and-swap write, throttled; follower → view only), with the
//! cluster quota's own store, computation and events; then the leader makes its shares
//! (`shares`) mirror what it wrote.

use std::sync::Arc;
use std::time::{Duration, Instant};

use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_status::{self as status, Outcome, StatusStore};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};

use super::NamespaceLabels;
use super::compute::{self, ClusterComputed};
use super::shares::Shares;
use crate::Error;
use crate::desired::{self, Computed};
use crate::reconcile::{Ctx, MAX_WRITE_ATTEMPTS};

/// Wait before reconciling again while the bindings or namespaces are not listed yet.
const NOT_SYNCED_RETRY: Duration = Duration::from_secs(1);
/// Everything a cluster quota reconcile needs: the KarmadaQuota context (index, members,
/// views, metrics, leadership, recorder, throttle) and what is the cluster quotas' own.
pub struct ClusterCtx {
    /// The shared context; views, throttle and failures key a cluster quota by
    /// (`""`, name).
    pub base: Arc<Ctx>,
    /// Reads and writes cluster quota status.
    pub store: Arc<dyn StatusStore<KarmadaClusterQuota>>,
    /// The namespaces' labels.
    pub labels: NamespaceLabels,
    /// The KarmadaClusterQuotaShare mirrors (`None`: --cluster-quota-shares=false).
    pub shares: Option<Shares>,
}

impl ClusterCtx {
    /// Compute `cq` now; `None` while the namespaces are not listed yet.
    fn plan(
        &self,
        cq: &KarmadaClusterQuota,
    ) -> (
        Option<karmada_quota_crds::KarmadaClusterQuotaStatus>,
        Option<(ClusterComputed, jiff::Timestamp)>,
    ) {
        let Some(labels) = self.labels.snapshot() else {
            return (None, None);
        };
        let now = jiff::Timestamp::now();
        let reach = self.base.members.reach();
        let c = {
            let index = self.base.index.read().unwrap_or_else(|e| e.into_inner());
            compute::compute(cq, &labels, &index, &self.base.members, now.as_second())
        };
        let status = compute::desired_status(cq, &c, &reach, now);
        let status = with_line(&self.base.queue, cq, status);
        (status, Some((c, now)))
    }
}

/// `status` (the next status, `None`: nothing to write) with the cluster quota's line.
fn with_line(
    queue: &crate::queue::Line,
    cq: &KarmadaClusterQuota,
    status: Option<karmada_quota_crds::KarmadaClusterQuotaStatus>,
) -> Option<karmada_quota_crds::KarmadaClusterQuotaStatus> {
    let key = karmada_quota_core::selection::QuotaKey::Cluster {
        name: cq.name_any(),
    };
    let current = cq.status.as_ref().map(|s| &s.quota);
    let quota = queue.with_line(&key, current, status.as_ref().map(|s| s.quota.clone()))?;
    let mut next = status.unwrap_or_else(|| cq.status.clone().unwrap_or_default());
    next.quota = quota;
    Some(next)
}

/// Reconcile one cluster quota (idempotent).
pub async fn reconcile(
    cq: Arc<KarmadaClusterQuota>,
    ctx: Arc<ClusterCtx>,
) -> Result<Action, Error> {
    let started = Instant::now();
    let base = &ctx.base;
    let name = cq.name_any();
    if !super::synced(&base.index) || ctx.labels.snapshot().is_none() {
        return Ok(Action::requeue(NOT_SYNCED_RETRY));
    }
    let key = (String::new(), name.clone());
    let leader = *base.leader.borrow();
    let pending = cq.status.as_ref().map_or(0, |s| s.quota.reservations.len());
    if leader && let Some(wait) = base.pacing.throttled(&key, pending) {
        return Ok(Action::requeue(wait));
    }
    let (computed, stored, object) = if leader {
        let w = status::update(
            &*ctx.store,
            (*cq).clone(),
            |q| ctx.plan(q),
            || *base.leader.borrow(),
            MAX_WRITE_ATTEMPTS,
        )
        .await;
        let w = match w {
            Ok(w) => w,
            Err(e) => {
                for _ in 0..e.conflicts() {
                    base.metrics.status_conflict();
                }
                return Err(e.into());
            }
        };
        for _ in 0..w.conflicts {
            base.metrics.status_conflict();
        }
        let Some(computed) = w.plan else {
            return Ok(Action::requeue(NOT_SYNCED_RETRY));
        };
        match w.outcome {
            Outcome::Gone => {
                crate::reconcile::forget(base, "", &name);
                return Ok(Action::await_change());
            }
            Outcome::Unchanged | Outcome::Stopped => {
                let stored = w.base.status.clone().unwrap_or_default();
                (computed, stored, w.base)
            }
            Outcome::Written(written) => {
                base.metrics.status_written();
                base.pacing.wrote(&key);
                let new = written.status.clone().unwrap_or_default();
                let notices =
                    desired::notices(w.base.status.as_ref().map(|s| &s.quota), &new.quota);
                crate::reconcile::publish(base, &written.object_ref(&()), &notices).await;
                tracing::debug!(cluster_quota = %name, "status written");
                (computed, new, *written)
            }
        }
    } else {
        let (_, computed) = ctx.plan(&cq);
        let Some(computed) = computed else {
            return Ok(Action::requeue(NOT_SYNCED_RETRY));
        };
        (
            computed,
            cq.status.clone().unwrap_or_default(),
            (*cq).clone(),
        )
    };
    if leader
        && *base.leader.borrow()
        && let Some(shares) = &ctx.shares
    {
        let n = shares.sync(&object).await?;
        if n > 0 {
            tracing::debug!(cluster_quota = %name, changed = n, "shares mirrored");
        }
    }
    let (c, now) = computed;
    if let Computed::Valid { view, .. } = &c.computed {
        base.metrics.observe_quota(view);
    }
    let mut report = base.report(&compute::shadow(&object), &c.computed, &stored.quota, now);
    report.namespaces = c.namespaces.iter().map(|(n, _)| n.clone()).collect();
    report.shares = c.namespaces.iter().cloned().collect();
    base.views
        .write()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.clone(), report);
    base.failures
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .remove(&key);
    base.metrics.reconciled(started.elapsed());
    Ok(Action::requeue(desired::next_requeue(
        &c.computed,
        now.as_second(),
        base.resync,
    )))
}

/// After a failed reconcile: count it and retry with exponential backoff (1 s … 5 min).
pub fn error_policy(cq: Arc<KarmadaClusterQuota>, error: &Error, ctx: Arc<ClusterCtx>) -> Action {
    let base = &ctx.base;
    base.metrics.reconcile_failed(error.metric_label());
    let key = (String::new(), cq.name_any());
    let (n, delay) = crate::reconcile::count_failure(base, &key);
    tracing::warn!(cluster_quota = %key.1, %error, attempt = n, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}
