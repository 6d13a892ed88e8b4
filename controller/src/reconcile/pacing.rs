//! When the controller may write a quota's status: the least interval between two writes,
//! its doubling while the webhook's writes keep meeting ours, and the put-off of fold-only
//! writes. Kept per quota (either kind), keyed by (namespace, name); `""` for a
//! KarmadaClusterQuota.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

use karmada_quota_crds::KarmadaQuotaStatus;
use karmada_quota_shell::backoff::Backoff;

use crate::desired;

/// Entries a quota may hold before a fold-only write is no longer put off.
pub const FOLD_BATCH: usize = 64;

/// A quota's key: (namespace, name).
type Key = (String, String);

/// The write pacing of every quota this replica writes.
#[derive(Debug, Default)]
pub struct Pacing {
    /// Least time between two status writes of one quota (see `Pacing::throttled`).
    pub min_write_interval: Duration,
    /// When this replica last wrote each quota's status (or gave a contended write up).
    pub last_write: Mutex<HashMap<Key, Instant>>,
    /// Longest wait between writes of a contended quota (see `Pacing::throttled`); zero:
    /// no backoff.
    pub max_write_backoff: Duration,
    /// Consecutive turns whose write met a conflict, per quota.
    pub contended: Mutex<HashMap<Key, u32>>,
    /// Longest a fold-only write is put off (see `Pacing::fold_wait`); zero: never.
    pub fold_interval: Duration,
}

impl Pacing {
    /// How long to put off writing `next` over a quota's `current` status (the
    /// KarmadaQuota-shaped part, either kind), if at all: only a write
    /// that folds observed entries into `used` and nothing else (`desired::fold::fold_only`),
    /// while the quota holds fewer than [`FOLD_BATCH`] entries and its last write is less
    /// than `--fold-interval` ago. Effective usage is the same either way; writing less
    /// often leaves the quota to the webhook's admissions.
    pub(crate) fn fold_wait(
        &self,
        key: &Key,
        current: Option<&KarmadaQuotaStatus>,
        next: &KarmadaQuotaStatus,
    ) -> Option<Duration> {
        if self.fold_interval.is_zero() || next.reservations.len() >= FOLD_BATCH {
            return None;
        }
        let elapsed = self.last_write.lock().get(key)?.elapsed();
        let wait = self
            .fold_interval
            .checked_sub(elapsed)
            .filter(|d| !d.is_zero())?;
        let empty = KarmadaQuotaStatus::default();
        desired::fold::fold_only(current.unwrap_or(&empty), next).then_some(wait)
    }

    /// The least time between two writes of `key` now: `--min-write-interval`, doubled for
    /// every consecutive turn whose write met the webhook's (409), up to
    /// `--max-write-backoff`.
    ///
    /// No backoff while the quota holds [`FOLD_BATCH`] entries or more (`pending`): every
    /// write then carries them all, so pruning them soon is what keeps both writers cheap,
    /// and `--max-reservations` must not be reached because the controller held back.
    pub(crate) fn write_interval(&self, key: &Key, pending: usize) -> Duration {
        if pending >= FOLD_BATCH {
            return self.min_write_interval;
        }
        let streak = self.contended.lock().get(key).copied().unwrap_or(0);
        if streak == 0 || self.max_write_backoff.is_zero() {
            return self.min_write_interval;
        }
        // A streak of n contended turns waits the backoff's (n + 1)-th step: the interval
        // doubled n times (at most 16), never below the interval itself.
        Backoff::new(self.min_write_interval, self.max_write_backoff)
            .delay(streak.min(16) + 1)
            .max(self.min_write_interval)
    }

    /// Record how a turn's write went: `conflicted` when it met a 409 (written after a
    /// re-read, or given up); also starts the interval when it was given up.
    pub(crate) fn paced(&self, key: &Key, conflicted: bool, gave_up: bool) {
        let mut contended = self.contended.lock();
        if conflicted {
            *contended.entry(key.clone()).or_insert(0) += 1;
        } else {
            contended.remove(key);
        }
        drop(contended);
        if gave_up {
            self.wrote(key);
        }
    }

    /// Start `key`'s interval now (its status was just written).
    pub(crate) fn wrote(&self, key: &Key) {
        self.last_write.lock().insert(key.clone(), Instant::now());
    }

    /// How long to wait before this quota's status may be written again, if at all.
    ///
    /// During a burst of admissions the webhook rewrites the quota's status many times a
    /// second, and every rewrite is a watch event that asks for a reconcile. Writing after
    /// each one would make the controller and the webhook conflict on nearly every write.
    /// So the first write goes out at once and later ones at most once per interval
    /// (leading edge: unlike a trailing debounce, a steady stream of events can never
    /// postpone the controller's write, and so its pruning, for good).
    ///
    /// While the quota's writes keep meeting the webhook's, the interval doubles (see
    /// [`Pacing::write_interval`]): the webhook's writes are the admissions waiting, the
    /// controller's only move `used` and prune, which can wait a little longer.
    pub(crate) fn throttled(&self, key: &Key, pending: usize) -> Option<Duration> {
        let interval = self.write_interval(key, pending);
        let last = self.last_write.lock();
        let elapsed = last.get(key)?.elapsed();
        interval.checked_sub(elapsed).filter(|d| !d.is_zero())
    }

    /// Drop what is kept about a deleted quota.
    pub(crate) fn forget(&self, key: &Key) {
        self.last_write.lock().remove(key);
        self.contended.lock().remove(key);
    }
}
