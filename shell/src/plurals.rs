//! Kind → plural resolution for object-count quota names (`count/<plural>[.<group>]`).
//!
//! A ResourceBinding names its template by apiVersion and kind, but object-count quota
//! names use the resource's plural. [`PluralResolver::count_name`] answers:
//!
//! ```text
//!  (apiVersion, kind) ──► core's built-in table (common kinds) ──hit──► count name
//!                               │ miss
//!                               ▼
//!                     per group-version cache ──hit──► count name
//!                               │ miss (refetched at most every REFRESH_AFTER_MISS;
//!                               │       after a failure: 1 s, 2 s, 4 s… backoff)
//!                               ▼
//!                     API discovery of that group-version (one request, shared by
//!                     concurrent callers) ──► cache ──► count name, None (unknown kind),
//!                                                       or the discovery error
//! ```
//!
//! Both binaries use it (the webhook to charge a binding, the controller to sum usage), so
//! they resolve the same kinds to the same names. A resolver is cheap to clone (it shares
//! one cache).
//!
//! The apiVersion comes from the template a binding names, i.e. from whoever wrote the
//! binding, so the cache is bounded: an apiVersion longer than any group-version
//! ([`untrusted::MAX_GROUP_VERSION_LEN`]) is an error at once, with no lookup and no
//! entry; at most [`MAX_GROUP_VERSIONS`] group-versions are kept (the least recently used
//! evicted); a group-version whose discovery failed or found nothing is dropped once its
//! retry time has passed; and every logged or returned value is clipped
//! ([`untrusted::clip`]).

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::bounded::LruMap;
use crate::untrusted::{self, clip};

/// A group-version is looked up again on a miss only after this long, so a template of an
/// unknown kind cannot turn every admission into a discovery request, while a CRD installed
/// after the first lookup is still found within a minute.
pub const REFRESH_AFTER_MISS: Duration = Duration::from_secs(60);
/// After a failed discovery: 1 s, 2 s, 4 s … up to [`REFRESH_AFTER_MISS`].
const DISCOVERY_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), REFRESH_AFTER_MISS);
/// Longest wait for one discovery request. The client's own retry layer would keep
/// retrying a 503 (an aggregated API whose server is down) for minutes, holding up the
/// caller; this resolver retries on its own schedule instead.
pub const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(5);
/// Most group-versions cached. A federation serves a few dozen; past the cap the least
/// recently used is evicted (and asked again when next needed).
pub const MAX_GROUP_VERSIONS: usize = 256;

/// The per-group-version cache: capped, its values shared with the callers waiting on them.
type Cache = LruMap<String, Arc<tokio::sync::Mutex<GroupVersion>>>;

/// Resolves a template's kind to its object-count quota name. Clone freely: clones share
/// the cache.
#[derive(Clone)]
pub struct PluralResolver {
    client: Option<kube::Client>,
    /// group-version (`apps/v1`, `v1`) → its kinds; one async lock per group-version so
    /// concurrent misses of one group-version wait for a single discovery request.
    cache: Arc<Mutex<Cache>>,
}

impl std::fmt::Debug for PluralResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluralResolver")
            .field("discovery", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

/// What discovery said about one group-version.
#[derive(Default)]
struct GroupVersion {
    /// kind → plural (top-level resources only, no subresources).
    plurals: HashMap<String, String>,
    /// When discovery was last asked (successfully or not); `None` = never.
    fetched: Option<Instant>,
    /// The last discovery error, while it has not succeeded since.
    error: Option<String>,
    /// Failed discoveries in a row (for the retry backoff).
    failures: u32,
}

impl GroupVersion {
    /// How long after the last request a miss asks discovery again: after a failure,
    /// 1 s, 2 s, 4 s… up to [`REFRESH_AFTER_MISS`]; after an answer, [`REFRESH_AFTER_MISS`].
    fn refresh_after(&self) -> Duration {
        if self.error.is_some() {
            DISCOVERY_BACKOFF.delay(self.failures.max(1))
        } else {
            REFRESH_AFTER_MISS
        }
    }

    /// A failed or empty discovery whose retry time has passed: nothing worth keeping
    /// (the next caller asks discovery again anyway).
    fn is_spent_failure(&self) -> bool {
        self.plurals.is_empty()
            && self
                .fetched
                .is_some_and(|at| at.elapsed() >= self.refresh_after())
    }
}

fn new_cache() -> Arc<Mutex<Cache>> {
    Arc::new(Mutex::new(LruMap::new(MAX_GROUP_VERSIONS)))
}

impl PluralResolver {
    /// A resolver that falls back to API discovery through `client` for kinds outside
    /// core's built-in table.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client: Some(client),
            cache: new_cache(),
        }
    }

    /// A resolver that knows only core's built-in table (for tests and offline tools).
    pub fn builtin_only() -> Self {
        Self {
            client: None,
            cache: new_cache(),
        }
    }

    /// The object-count quota name of a template (`apps/v1`, `Deployment` →
    /// `count/deployments.apps`; `v1`, `ConfigMap` → `count/configmaps`), or `None` when
    /// the kind is unknown to both the built-in table and API discovery, or discovery
    /// failed (see [`Self::count`] to tell the two apart).
    pub async fn count_name(&self, api_version: &str, kind: &str) -> Option<String> {
        self.count(api_version, kind).await.ok().flatten()
    }

    /// Like [`Self::count_name`], but a failed discovery is an error (its message): the
    /// caller cannot know whether the template has a count name. Discovery is asked
    /// again with backoff (1 s, 2 s, 4 s… up to [`REFRESH_AFTER_MISS`]); in between, the
    /// last error is returned without a request.
    pub async fn count(&self, api_version: &str, kind: &str) -> Result<Option<String>, String> {
        Ok(self
            .resolve(api_version, kind)
            .await?
            .map(|plural| karmada_quota_core::usage::count_name(api_version, &plural)))
    }

    /// The plural of `kind` in `api_version`, `None` when unknown or discovery failed.
    pub async fn plural(&self, api_version: &str, kind: &str) -> Option<String> {
        self.resolve(api_version, kind).await.ok().flatten()
    }

    /// The plural of `kind` in `api_version`: `Ok(None)` when the kind is unknown,
    /// `Err` when discovery of its group-version failed.
    async fn resolve(&self, api_version: &str, kind: &str) -> Result<Option<String>, String> {
        if api_version.is_empty() || kind.is_empty() {
            return Ok(None);
        }
        if let Some(why) = untrusted::group_version_too_long(api_version) {
            return Err(why);
        }
        if !untrusted::kind_fits(kind) {
            // No served kind is this long: unknown, without a lookup.
            return Ok(None);
        }
        if let Some(p) = karmada_quota_core::usage::builtin_plural(api_version, kind) {
            return Ok(Some(p.to_owned()));
        }
        let Some(client) = self.client.as_ref() else {
            return Ok(None);
        };
        let entry = self.entry(api_version);
        let mut gv = entry.lock().await;
        if let Some(p) = gv.plurals.get(kind) {
            return Ok(Some(p.clone()));
        }
        let refresh_after = gv.refresh_after();
        let stale = gv.fetched.is_none_or(|at| at.elapsed() >= refresh_after);
        if stale {
            gv.fetched = Some(Instant::now());
            let answer = tokio::time::timeout(DISCOVERY_TIMEOUT, discover(client, api_version))
                .await
                .unwrap_or_else(|_| {
                    Err(kube::Error::Service(
                        format!("no answer within {}s", DISCOVERY_TIMEOUT.as_secs()).into(),
                    ))
                });
            match answer {
                Ok(plurals) => {
                    gv.plurals = plurals;
                    gv.error = None;
                    gv.failures = 0;
                }
                // 404, even with a plain-text body kube cannot parse as a Status.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    tracing::debug!(api_version = %clip(api_version), "group-version not served");
                    gv.error = None;
                    gv.failures = 0;
                }
                Err(e) => {
                    gv.failures = gv.failures.saturating_add(1);
                    let error = format!(
                        "API discovery of {} failed: {}",
                        clip(api_version),
                        clip(&describe(&e))
                    );
                    tracing::warn!(%error, failures = gv.failures, "API discovery failed; retrying with backoff");
                    gv.error = Some(error);
                }
            }
        }
        match (gv.plurals.get(kind), &gv.error) {
            (Some(p), _) => Ok(Some(p.clone())),
            (None, Some(e)) => Err(e.clone()),
            (None, None) => Ok(None),
        }
    }
}

impl PluralResolver {
    /// The cache entry of `api_version`, made when missing. Making one first drops the
    /// failed lookups whose retry time has passed (an entry a caller holds is kept), then
    /// the cap evicts the least recently used.
    fn entry(&self, api_version: &str) -> Arc<tokio::sync::Mutex<GroupVersion>> {
        let mut cache = self.cache.lock();
        if let Some(entry) = cache.get(api_version) {
            return entry.clone();
        }
        cache.retain(|_, e| e.try_lock().map_or(true, |gv| !gv.is_spent_failure()));
        let entry = Arc::<tokio::sync::Mutex<GroupVersion>>::default();
        cache.insert(api_version.to_owned(), entry.clone());
        entry
    }

    /// Group-versions cached now.
    pub fn cached(&self) -> usize {
        self.cache.lock().len()
    }
}

/// A discovery error in one line: the API server's code and message, not a dump.
fn describe(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => format!("{} {}", s.code, s.message.trim()),
        e => e.to_string(),
    }
}

/// kind → plural of the top-level resources of one group-version.
async fn discover(
    client: &kube::Client,
    api_version: &str,
) -> Result<HashMap<String, String>, kube::Error> {
    let list = if api_version.contains('/') {
        client.list_api_group_resources(api_version).await?
    } else {
        client.list_core_api_resources(api_version).await?
    };
    Ok(list
        .resources
        .into_iter()
        .filter(|r| !r.name.contains('/'))
        .map(|r| (r.kind, r.name))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn builtin_kinds_resolve_without_a_client() {
        let r = PluralResolver::builtin_only();
        assert_eq!(
            r.count_name("apps/v1", "Deployment").await.as_deref(),
            Some("count/deployments.apps")
        );
        assert_eq!(
            r.count_name("v1", "ConfigMap").await.as_deref(),
            Some("count/configmaps")
        );
    }

    #[tokio::test]
    async fn failed_discovery_is_an_error_not_an_unknown_kind() {
        // Nothing listens on port 1: every discovery request fails.
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let r = PluralResolver::new(kube::Client::try_from(config).unwrap());
        let first = r.count("example.com/v1", "Widget").await.unwrap_err();
        assert!(first.contains("example.com/v1"), "{first}");
        // Within the backoff the error is answered from the cache.
        assert_eq!(r.count("example.com/v1", "Widget").await, Err(first));
        assert_eq!(r.count_name("example.com/v1", "Widget").await, None);
        // Built-in kinds never need discovery.
        assert_eq!(
            r.count("apps/v1", "Deployment").await,
            Ok(Some("count/deployments.apps".to_owned()))
        );
    }

    /// A resolver whose every discovery request fails at once (nothing listens on port 1).
    fn failing() -> PluralResolver {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        PluralResolver::new(kube::Client::try_from(config).unwrap())
    }

    #[tokio::test]
    async fn an_api_version_longer_than_any_group_version_is_refused_without_a_lookup() {
        let r = failing();
        let huge = format!("{}/v1", "g".repeat(1 << 20));
        let err = r.count(&huge, "Widget").await.unwrap_err();
        assert!(err.contains("not looked up"), "{err}");
        assert!(err.contains(&format!("{} bytes long", huge.len())), "{err}");
        assert!(
            err.len() < 400,
            "the error repeats the value: {} bytes",
            err.len()
        );
        assert_eq!(
            r.cached(),
            0,
            "a too-long apiVersion must not become a cache key"
        );
        // A too-long kind is unknown, also without a lookup.
        assert_eq!(
            r.count("example.com/v1", &"K".repeat(1 << 20)).await,
            Ok(None)
        );
        assert_eq!(r.cached(), 0);
    }

    /// A resolver whose every discovery request fails at once, without a socket: with the
    /// clock paused nothing in a test using it lets time pass, so no failure is spent.
    fn failing_instantly() -> PluralResolver {
        let refuse = tower::service_fn(|_: axum::http::Request<kube::client::Body>| async {
            Err::<axum::http::Response<http_body_util::Empty<axum::body::Bytes>>, _>(
                std::io::Error::other("refused"),
            )
        });
        PluralResolver::new(kube::Client::new(refuse, "default"))
    }

    #[tokio::test(start_paused = true)]
    async fn the_cache_holds_at_most_max_group_versions() {
        // Failed lookups are dropped once their retry time (1 s) has passed: on a loaded
        // machine, a loop of real connection failures outlived the first of them.
        let r = failing_instantly();
        for i in 0..MAX_GROUP_VERSIONS + 40 {
            let gv = format!("g{i}.example.com/v1");
            assert!(r.count(&gv, "Widget").await.is_err());
            assert!(r.cached() <= MAX_GROUP_VERSIONS, "{} cached", r.cached());
        }
        assert_eq!(r.cached(), MAX_GROUP_VERSIONS);
    }

    #[tokio::test]
    async fn a_failed_lookup_is_dropped_once_its_retry_time_has_passed() {
        let r = failing();
        assert!(r.count("a.example.com/v1", "Widget").await.is_err());
        assert_eq!(r.cached(), 1);
        // The first failure is retried after 1 s; past it the entry is not kept.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert!(r.count("b.example.com/v1", "Widget").await.is_err());
        assert_eq!(
            r.cached(),
            1,
            "the spent failure of a.example.com/v1 is still cached"
        );
    }

    #[tokio::test]
    async fn a_discovery_error_is_clipped() {
        let r = failing();
        let long = format!("{}/v1", "g".repeat(250));
        let err = r.count(&long, "Widget").await.unwrap_err();
        assert!(err.contains("…(253 bytes)"), "{err}");
    }

    #[tokio::test]
    async fn unknown_kinds_without_a_client_are_none() {
        let r = PluralResolver::builtin_only();
        assert_eq!(r.count_name("example.com/v1", "Widget").await, None);
        assert_eq!(r.count_name("", "Deployment").await, None);
    }
}
