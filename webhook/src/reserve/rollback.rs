//! Rolling back the entries written for requests that did not end admitted (refused,
//! failed, or timed out): best effort, counted; what cannot be removed is left for the
//! controller to expire.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use karmada_quota_core::quota::Reservation;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_status::{self as status, Outcome, entries};

use super::copy::Kind;
use super::{Inner, lock};

/// Longest a rollback may take (it delays its batch group's next batch).
const ROLLBACK_TIMEOUT: Duration = Duration::from_secs(2);

impl Inner {
    /// Remove `entries` (written for requests that did not end admitted) from `quota`,
    /// best effort: what cannot be removed is left for the controller to expire.
    #[tracing::instrument(
        name = "rollback",
        skip_all,
        fields(quota = %quota, entries = entries.len())
    )]
    pub(super) async fn roll_back<K: Kind>(
        &self,
        group: &str,
        quota: &QuotaKey,
        entries: &[Reservation],
    ) {
        let namespace = quota.namespace().unwrap_or_default();
        let name = quota.name();
        let own = lock(&self.groups)
            .get(group)
            .and_then(|g| g.newest.get(quota).cloned());
        let copy = own.or_else(|| self.cached(quota)).and_then(|c| {
            K::object(&c).and_then(|c| c.parsed.as_ref().ok().map(|p| (*p.object).clone()))
        });
        let base = match copy {
            Some(object) => object,
            None => match K::store(self).get(namespace, name).await {
                Ok(object) => object,
                Err(_) => {
                    self.metrics.rolled_back("failed", entries.len());
                    return;
                }
            },
        };
        let removed = AtomicUsize::new(0);
        let plan = |object: &K| {
            let mut status = object.status().cloned().unwrap_or_default();
            let n = entries::roll_back(K::quota_part_mut(&mut status), entries);
            removed.store(n, Ordering::Relaxed);
            ((n > 0).then_some(status), ())
        };
        let within = self.config.reservation_ttl.min(ROLLBACK_TIMEOUT);
        match tokio::time::timeout(
            within,
            status::update(
                K::store(self),
                base,
                plan,
                || true,
                self.config.max_attempts,
            ),
        )
        .await
        {
            Ok(Ok(updated)) => {
                if let Outcome::Written(object) = updated.outcome {
                    self.remember(group, K::copy(*object));
                }
                self.metrics
                    .rolled_back("ok", removed.load(Ordering::Relaxed));
                self.metrics.rolled_back(
                    "failed",
                    entries
                        .len()
                        .saturating_sub(removed.load(Ordering::Relaxed)),
                );
                tracing::debug!(
                    removed = removed.load(Ordering::Relaxed),
                    "rolled back reservations"
                );
            }
            Ok(Err(e)) => {
                self.forget(group, quota);
                self.metrics.rolled_back("failed", entries.len());
                tracing::warn!(error = %e, "could not roll back reservations; the controller will expire them");
            }
            Err(_) => {
                self.forget(group, quota);
                self.metrics.rolled_back("failed", entries.len());
                tracing::warn!(
                    "rolling back reservations timed out; the controller will expire them"
                );
            }
        }
    }
}
