//! Rolling back the entries written for requests that did not end admitted (refused,
//! failed, or timed out): best effort, counted; what cannot be removed is left for the
//! controller to expire.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use karmada_quota_core::quota::Reservation;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_status::{self as status, Outcome, entries};

use super::Inner;

/// Longest a rollback may take (it delays the namespace's next batch).
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(2);

impl Inner {
    /// Remove `entries` (written for requests that did not end admitted) from `quota`,
    /// best effort: what cannot be removed is left for the controller to expire.
    pub(super) async fn roll_back(&self, namespace: &str, quota: &str, entries: &[Reservation]) {
        let copy = self
            .newest_copies(namespace, &HashSet::new())
            .into_iter()
            .find(|c| c.name() == quota)
            .and_then(|c| c.parsed.as_ref().ok().map(|p| (*p.object).clone()));
        let base = match copy {
            Some(object) => object,
            None => match self.store.get(namespace, quota).await {
                Ok(object) => object,
                Err(_) => {
                    self.metrics.rolled_back("failed", entries.len());
                    return;
                }
            },
        };
        let removed = AtomicUsize::new(0);
        let plan = |object: &KarmadaQuota| {
            let mut status = object.status.clone().unwrap_or_default();
            let n = entries::roll_back(&mut status, entries);
            removed.store(n, Ordering::Relaxed);
            ((n > 0).then_some(status), ())
        };
        let within = self.config.reservation_ttl.min(ROLLBACK_TIMEOUT);
        match tokio::time::timeout(
            within,
            status::update(&*self.store, base, plan, || true, self.config.max_attempts),
        )
        .await
        {
            Ok(Ok(updated)) => {
                if let Outcome::Written(object) = updated.outcome {
                    self.remember(namespace, *object);
                }
                self.metrics
                    .rolled_back("ok", removed.load(Ordering::Relaxed));
                self.metrics.rolled_back(
                    "failed",
                    entries
                        .len()
                        .saturating_sub(removed.load(Ordering::Relaxed)),
                );
                tracing::debug!(%namespace, %quota, removed = removed.load(Ordering::Relaxed), "rolled back reservations");
            }
            Ok(Err(e)) => {
                self.forget(namespace, quota);
                self.metrics.rolled_back("failed", entries.len());
                tracing::warn!(%namespace, %quota, error = %e, entries = entries.len(), "could not roll back reservations; the controller will expire them");
            }
            Err(_) => {
                self.forget(namespace, quota);
                self.metrics.rolled_back("failed", entries.len());
                tracing::warn!(%namespace, %quota, entries = entries.len(), "rolling back reservations timed out; the controller will expire them");
            }
        }
    }
}
