//! The Report page's Prometheus queries, cached and rate-limited: repeated Report, CSV
//! and JSON requests for the same form share one pair of range queries for `ttl`, at most
//! `concurrency` fetches run against Prometheus at once, and a request that cannot get a
//! turn within `wait` is answered 503.
//!
//! ```text
//!  form (normalised query string) ─► cache hit (younger than ttl) ─► the same series
//!                                  └► miss ─► one fetch, every concurrent asker waits on it
//!                                             (semaphore: `concurrency` at once)
//!  series (every namespace) ─► cut to the viewer's namespaces ─► compute   (report.rs)
//! ```
//!
//! The cache holds the series of every namespace once per form (at most `max_entries`
//! forms, the oldest goes first); each request then cuts them to what its viewer may see
//! before any arithmetic, so sharing the fetch never shares data across viewers.
//!
//! The cache and limiter are generic ([`Fetches`]): the quota page's history chart
//! ([`history`](crate::history)) keeps its Prometheus answers in one of its own.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use karmada_quota_billing::{Request, Series};
use parking_lot::Mutex;
use tokio::sync::{OnceCell, Semaphore};

use crate::prometheus::{Prometheus, fetch};

/// How the Report page's queries are cached and limited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportLimits {
    /// A fetched form is served from the cache for this long.
    pub ttl: Duration,
    /// A failed fetch is remembered this long (so a failing Prometheus is not hammered).
    pub error_ttl: Duration,
    /// Fetches against Prometheus at once.
    pub concurrency: usize,
    /// Longest wait for a turn; then 503.
    pub wait: Duration,
    /// Forms cached at most.
    pub max_entries: usize,
}

impl Default for ReportLimits {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(60),
            error_ttl: Duration::from_secs(5),
            concurrency: 2,
            wait: Duration::from_secs(20),
            max_entries: 16,
        }
    }
}

/// The series of one form, as fetched.
#[derive(Debug)]
pub struct Fetched {
    /// The request they answer (its window was fixed when they were fetched).
    pub request: Request,
    /// Usage series of every namespace.
    pub usage: Vec<Series>,
    /// Team-label series (empty unless grouped by team).
    pub teams: Vec<Series>,
}

/// Why there are no series.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FetchError {
    /// Prometheus answered an error or could not be reached.
    #[error("{0}")]
    Prometheus(String),
    /// Every turn was taken for longer than the wait.
    #[error("the dashboard is busy ({0} queries running against Prometheus); try again shortly")]
    Busy(usize),
}

type Answer<V = Fetched> = Result<Arc<V>, FetchError>;

struct Entry<V> {
    at: Instant,
    cell: Arc<OnceCell<Answer<V>>>,
}

/// A cache and a limiter of fetches from Prometheus, answers of type `V` by key.
pub struct Fetches<V> {
    limits: ReportLimits,
    turns: Semaphore,
    entries: Mutex<HashMap<String, Entry<V>>>,
}

/// The Report page's cache and limiter.
pub type ReportFetches = Fetches<Fetched>;

impl<V> std::fmt::Debug for Fetches<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportFetches")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl ReportFetches {
    /// The series of `request` (cached under `key`, the normalised form), fetched from
    /// `prometheus` when not cached.
    pub async fn get(&self, key: &str, request: Request, prometheus: &Prometheus) -> Answer {
        self.get_with(key, || async move {
            let (usage, teams) = fetch(prometheus, &request).await?;
            Ok(Fetched {
                request,
                usage,
                teams,
            })
        })
        .await
    }
}

impl<V> Fetches<V> {
    /// Empty, limited by `limits`.
    pub fn new(limits: ReportLimits) -> Self {
        let limits = ReportLimits {
            concurrency: limits.concurrency.max(1),
            max_entries: limits.max_entries.max(1),
            ..limits
        };
        Self {
            limits,
            turns: Semaphore::new(limits.concurrency),
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// The cell of `key`: the cached one while fresh, else a new one.
    fn cell(&self, key: &str) -> Arc<OnceCell<Answer<V>>> {
        let now = Instant::now();
        let mut map = self.entries.lock();
        let limits = self.limits;
        map.retain(|_, e| {
            let age = now.duration_since(e.at);
            match e.cell.get() {
                None => true,
                Some(Ok(_)) => age < limits.ttl,
                Some(Err(_)) => age < limits.error_ttl,
            }
        });
        if let Some(e) = map.get(key) {
            return e.cell.clone();
        }
        while map.len() >= limits.max_entries {
            let Some(oldest) = map.iter().min_by_key(|(_, e)| e.at).map(|(k, _)| k.clone()) else {
                break;
            };
            map.remove(&oldest);
        }
        let cell = Arc::new(OnceCell::new());
        map.insert(
            key.to_owned(),
            Entry {
                at: now,
                cell: cell.clone(),
            },
        );
        cell
    }

    /// The answer cached under `key` while fresh, else `fetch`'s (run when a turn is
    /// free; every concurrent asker of `key` waits on the same one).
    pub async fn get_with<F>(&self, key: &str, fetch: impl FnOnce() -> F) -> Answer<V>
    where
        F: Future<Output = Result<V, String>>,
    {
        let cell = self.cell(key);
        cell.get_or_init(|| async move {
            let turn = tokio::time::timeout(self.limits.wait, self.turns.acquire()).await;
            let Ok(Ok(_turn)) = turn else {
                return Err(FetchError::Busy(self.limits.concurrency));
            };
            fetch().await.map(Arc::new).map_err(FetchError::Prometheus)
        })
        .await
        .clone()
    }

    /// Answers cached now.
    pub fn cached(&self) -> usize {
        self.entries.lock().len()
    }
}
