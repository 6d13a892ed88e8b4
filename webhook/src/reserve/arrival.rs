//! Does a CREATE wait (docs/design.md §5b)? The arrival rule is core's
//! ([`karmada_quota_core::queue::arrival`]), decided against the same newest copies a
//! dry run decides against, and against each quota's line: what the controller last wrote
//! in `status.queue`, plus the bindings this webhook suspended since (the controller
//! shows them within a status write; until then a newcomer must not jump them).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use karmada_quota_core::queue::{
    AdmissionMode, Arrival, LineHead, QueueOrder, Waiting, arrival, jumped_lines,
};
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::QuotaObject;

use super::copy::QuotaCopy;
use super::{Batcher, lock};
use crate::cache::{CachedClusterQuota, CachedQuota};
use crate::error::Result;

/// The newest copy of each quota object, by key.
type Copies = BTreeMap<QuotaKey, QuotaCopy>;

/// How long a suspension of ours counts in a quota's line without the controller's status
/// showing it (its status write follows the binding's creation within about a second).
const RECENT_FOR: Duration = Duration::from_secs(10);
/// Most recent suspensions remembered in all; past it the oldest are forgotten (the
/// controller's `status.queue` still shows them once written).
const RECENT_MAX: usize = 4096;

/// The bindings this webhook suspended lately, per quota: (priority, when).
#[derive(Default)]
pub(crate) struct Recent {
    by_quota: HashMap<QuotaKey, Vec<(i32, Instant)>>,
    len: usize,
}

impl Recent {
    fn forget_old(&mut self, now: Instant) {
        let mut len = 0;
        self.by_quota.retain(|_, v| {
            v.retain(|(_, at)| now.duration_since(*at) < RECENT_FOR);
            len += v.len();
            !v.is_empty()
        });
        self.len = len;
    }

    fn add(&mut self, keys: &[QuotaKey], priority: i32, now: Instant) {
        self.forget_old(now);
        if self.len + keys.len() > RECENT_MAX {
            self.by_quota.clear();
            self.len = 0;
        }
        for key in keys {
            self.by_quota
                .entry(key.clone())
                .or_default()
                .push((priority, now));
            self.len += 1;
        }
    }

    /// Each quota's line: what its copy's `status.queue` shows, widened by what this
    /// webhook suspended lately.
    fn lines(
        &self,
        states: &[QuotaState],
        copies: &Copies,
        now: Instant,
    ) -> BTreeMap<QuotaKey, LineHead> {
        states
            .iter()
            .filter_map(|s| {
                let key = s.key();
                let shown = copies.get(&key).and_then(line_of);
                self.widen(&key, shown, now).map(|l| (key, l))
            })
            .collect()
    }

    /// `line` widened by what this webhook suspended lately in the same quota.
    fn widen(&self, key: &QuotaKey, line: Option<LineHead>, now: Instant) -> Option<LineHead> {
        let recent: Vec<i32> = self
            .by_quota
            .get(key)
            .into_iter()
            .flatten()
            .filter(|(_, at)| now.duration_since(*at) < RECENT_FOR)
            .map(|(p, _)| *p)
            .collect();
        let Some(top) = recent.iter().max().copied() else {
            return line;
        };
        let mut head = line.unwrap_or(LineHead {
            waiting: 0,
            head_priority: top,
        });
        head.waiting += recent.len();
        head.head_priority = head.head_priority.max(top);
        Some(head)
    }
}

/// The line `status.queue` shows for a quota copy: how many wait, and the head's priority.
fn line_of(copy: &QuotaCopy) -> Option<LineHead> {
    let status = match copy {
        QuotaCopy::Quota(c) => c.parsed.as_ref().ok()?.object.quota_status().cloned(),
        QuotaCopy::Cluster(c) => c.parsed.as_ref().ok()?.object.quota_status().cloned(),
    }?;
    let line = status.queue?;
    let waiting = usize::try_from(line.total).unwrap_or(0);
    (waiting > 0).then(|| LineHead {
        waiting,
        head_priority: line
            .waiting
            .iter()
            .map(|w| w.priority)
            .max()
            .unwrap_or(i32::MAX),
    })
}

impl Batcher {
    /// Whether `binding` (a CREATE, priced in full) waits, against the newest copies of
    /// the quota objects of its namespace the caller read from the cache. A `Wait` is
    /// remembered (unless `dry_run`) so that the next arrival does not jump it.
    pub fn arrival(
        &self,
        binding: &Waiting,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
        dry_run: bool,
    ) -> Result<Arrival> {
        let (states, copies) = self.covering(binding, quotas, clusters)?;
        let now = Instant::now();
        // Held until the Wait is remembered: one replica's arrivals are decided one at a
        // time, each against the suspensions before it.
        let mut recent = lock(&self.inner.arrivals);
        let lines = recent.lines(&states, &copies, now);
        let out = arrival(&states, &lines, binding, (self.inner.clock)());
        if let Arrival::Wait(keys) = &out
            && !dry_run
        {
            recent.add(keys, binding.priority, now);
        }
        Ok(out)
    }

    /// The strict lines the binding `binding()` gives (a CREATE that is not waiting) would
    /// jump, against the same copies and lines as [`Batcher::arrival`]; none without a
    /// quota in `Queue` mode and strict order, and then neither the binding is priced nor
    /// anything copied (every CREATE comes here).
    pub fn jumped_lines(
        &self,
        binding: impl FnOnce() -> Waiting,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
    ) -> Result<Vec<QuotaKey>> {
        if !quotas.iter().any(strict_line) && !clusters.iter().any(strict_line) {
            return Ok(Vec::new());
        }
        let binding = binding();
        let (states, copies) = self.covering(&binding, quotas, clusters)?;
        let lines = lock(&self.inner.arrivals).lines(&states, &copies, Instant::now());
        Ok(jumped_lines(&states, &lines, &binding)
            .into_iter()
            .collect())
    }

    /// The engine's view of the quotas covering `binding`'s namespace, from the newest
    /// copies (also returned: their status shows the lines).
    fn covering(
        &self,
        binding: &Waiting,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
    ) -> Result<(Vec<QuotaState>, Copies)> {
        let ns = &binding.namespace;
        let (copies, labels) = self.inner.newest(ns, quotas, clusters)?;
        let states: Vec<QuotaState> = self
            .inner
            .enforced(&copies)?
            .into_iter()
            .filter(|s| s.covers.covers(ns, labels.get(ns)))
            .collect();
        Ok((states, copies))
    }
}

/// Whether a cached quota object queues in strict order (its cached copy; the newest copy
/// decides).
fn strict_line<K>(cached: &Arc<crate::cache::Cached<K>>) -> bool {
    cached.parsed.as_ref().is_ok_and(|p| {
        let admission = &p.state.spec.policy.admission;
        admission.mode == AdmissionMode::Queue && admission.order == QueueOrder::StrictFifo
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_suspensions_widen_the_line_and_are_forgotten() {
        let key = QuotaKey::Namespaced {
            namespace: "ns".into(),
            name: "q".into(),
        };
        let mut r = Recent::default();
        let t0 = Instant::now();
        r.add(std::slice::from_ref(&key), 3, t0);
        let head = r.widen(&key, None, t0).unwrap();
        assert_eq!((head.waiting, head.head_priority), (1, 3));
        let shown = LineHead {
            waiting: 2,
            head_priority: 5,
        };
        let head = r.widen(&key, Some(shown), t0).unwrap();
        assert_eq!((head.waiting, head.head_priority), (3, 5));
        assert_eq!(r.widen(&key, None, t0 + RECENT_FOR), None);
    }
}
