//! How old the quota view may be: each of the cache's three watches reports here whether it
//! works, and the view counts as stale once one of them has kept failing for longer than
//! `--max-cache-staleness`. Stale, the webhook is not ready and refuses the bindings it
//! would charge (docs/design.md §5 "Readiness").
//!
//! ```text
//!  watch task ── event (InitDone, Apply, Delete) ──► succeeded(watch): failing_since = None
//!             ── error (the watch restarts from a ──► failed(watch, error): failing_since =
//!                fresh list after a backoff)           first failure of the streak
//!  stale(max) ─► the watch failing the longest, when that is longer than max
//!  keep_ready ─► every CHECK_EVERY: /readyz 503 while stale (logged once, with why),
//!                200 again once no watch fails; gauges per watch
//! ```
//!
//! The age is counted from the first failure of a streak, not from the last event: a quiet
//! watch that works sends nothing for minutes, and its view is current all the same. A
//! watch restarts from a fresh list after any error (`run_watch`), so its recovery is always
//! seen (as `InitDone`), even when nothing changed meanwhile.

use parking_lot::Mutex;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;
use std::time::Duration;

use karmada_quota_shell::Readiness;
use karmada_quota_shell::untrusted::clip;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::time::Instant;

use super::QuotaCache;

/// One of the cache's watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Watch {
    /// KarmadaQuotas, all namespaces.
    Quotas = 0,
    /// KarmadaClusterQuotas.
    ClusterQuotas = 1,
    /// Namespaces (metadata).
    Namespaces = 2,
}

impl Watch {
    /// All of them, in label order.
    pub const ALL: [Watch; 3] = [Watch::Quotas, Watch::ClusterQuotas, Watch::Namespaces];

    /// Its name in logs and the metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Watch::Quotas => "karmadaquotas",
            Watch::ClusterQuotas => "karmadaclusterquotas",
            Watch::Namespaces => "namespaces",
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Health {
    /// First failure of the current streak; `None` while the watch works.
    failing_since: Option<Instant>,
    /// The last error of the streak (clipped).
    last_error: String,
}

/// The health of the three watches. Clone freely: clones share it.
#[derive(Clone, Debug, Default)]
pub struct Freshness(Arc<Mutex<[Health; 3]>>);

/// Why the view is stale.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stale {
    /// The watch that has failed the longest.
    pub watch: &'static str,
    /// Since when it fails, i.e. how old the view may be.
    pub age: Duration,
    /// Its last error.
    pub error: String,
}

impl fmt::Display for Stale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the quota view may be {}s old: the {} watch has failed since then (last error: {})",
            self.age.as_secs(),
            self.watch,
            self.error
        )
    }
}

impl Freshness {
    fn lock(&self) -> parking_lot::MutexGuard<'_, [Health; 3]> {
        self.0.lock()
    }

    /// `watch` delivered an event: it works (again).
    pub fn succeeded(&self, watch: Watch) {
        let mut h = self.lock();
        let h = &mut h[watch as usize];
        h.failing_since = None;
        h.last_error.clear();
    }

    /// `watch` failed with `error`; the streak starts now unless it already runs.
    pub fn failed(&self, watch: Watch, error: &dyn fmt::Display) {
        let mut h = self.lock();
        let h = &mut h[watch as usize];
        h.failing_since.get_or_insert_with(Instant::now);
        h.last_error = clip(&error.to_string()).to_string();
    }

    /// How long `watch` has been failing (zero while it works).
    pub fn failing_for(&self, watch: Watch) -> Duration {
        self.lock()[watch as usize]
            .failing_since
            .map_or(Duration::ZERO, |at| at.elapsed())
    }

    /// The watch that has failed the longest, when longer than `max`.
    pub fn stale(&self, max: Duration) -> Option<Stale> {
        let h = self.lock();
        Watch::ALL
            .iter()
            .filter_map(|&w| {
                let health = &h[w as usize];
                let age = health.failing_since?.elapsed();
                (age > max).then(|| Stale {
                    watch: w.as_str(),
                    age,
                    error: health.last_error.clone(),
                })
            })
            .max_by_key(|s| s.age)
    }
}

/// Metric labels of the freshness gauges.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WatchLabels {
    watch: &'static str,
}

/// The freshness gauges, updated by [`keep_ready`].
#[derive(Clone, Debug, Default)]
pub struct FreshnessMetrics {
    failing: Family<WatchLabels, Gauge<i64, AtomicI64>>,
    stale: Gauge<i64, AtomicI64>,
}

impl FreshnessMetrics {
    /// Register `kq_webhook_cache_watch_failing_seconds{watch}` and `kq_webhook_cache_stale`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "kq_webhook_cache_watch_failing_seconds",
            "How long each quota-cache watch has been failing (0 while it works)",
            m.failing.clone(),
        );
        registry.register(
            "kq_webhook_cache_stale",
            "1 while a watch has failed for longer than --max-cache-staleness (not ready; \
             bindings in namespaces with quotas refused)",
            m.stale.clone(),
        );
        m
    }

    fn update(&self, freshness: &Freshness, stale: bool) {
        for w in Watch::ALL {
            let secs = i64::try_from(freshness.failing_for(w).as_secs()).unwrap_or(i64::MAX);
            self.failing
                .get_or_create(&WatchLabels { watch: w.as_str() })
                .set(secs);
        }
        self.stale.set(i64::from(stale));
    }

    /// The stale gauge's value (for tests).
    #[cfg(test)]
    pub fn stale_value(&self) -> i64 {
        self.stale.get()
    }
}

/// How often [`keep_ready`] looks at the watches: at most a second, and often enough to
/// turn unready within a quarter of `max` past it.
fn check_every(max: Duration) -> Duration {
    (max / 4).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Ready once the cache has synced; then unready while it is stale past `max`, ready again
/// once every watch works. Runs until the cache's writers are gone.
pub async fn keep_ready(
    cache: QuotaCache,
    ready: Readiness,
    max: Duration,
    metrics: FreshnessMetrics,
) {
    if cache.wait_until_ready().await.is_err() {
        return;
    }
    tracing::info!("quota cache (KarmadaQuotas, KarmadaClusterQuotas, Namespaces) synced; ready");
    ready.set_ready();
    let every = check_every(max);
    loop {
        tokio::time::sleep(every).await;
        let stale = cache.stale(max);
        metrics.update(cache.freshness(), stale.is_some());
        match stale {
            Some(why) if ready.is_ready() => {
                tracing::warn!(
                    %why,
                    max_cache_staleness = ?max,
                    "quota view stale: not ready; ResourceBindings in namespaces with quotas are \
                     refused until the watch recovers"
                );
                ready.set_not_ready();
            }
            None if !ready.is_ready() => {
                tracing::info!("quota watches recovered; ready again");
                ready.set_ready();
            }
            _ => {}
        }
    }
}
