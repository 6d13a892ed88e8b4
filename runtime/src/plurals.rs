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
//!                               │ miss (refetched at most every REFRESH_AFTER_MISS)
//!                               ▼
//!                     API discovery of that group-version (one request, shared by
//!                     concurrent callers) ──► cache ──► count name, or None
//! ```
//!
//! Both binaries use it (the webhook to charge a binding, the controller to sum usage), so
//! they resolve the same kinds to the same names. A resolver is cheap to clone (it shares
//! one cache).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

/// A group-version is looked up again on a miss only after this long, so a template of an
/// unknown kind cannot turn every admission into a discovery request, while a CRD installed
/// after the first lookup is still found within a minute.
pub const REFRESH_AFTER_MISS: Duration = Duration::from_secs(60);

/// Resolves a template's kind to its object-count quota name. Clone freely: clones share
/// the cache.
#[derive(Clone)]
pub struct PluralResolver {
    client: Option<kube::Client>,
    /// group-version (`apps/v1`, `v1`) → its kinds; one async lock per group-version so
    /// concurrent misses of one group-version wait for a single discovery request.
    cache: Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<GroupVersion>>>>>,
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
}

impl PluralResolver {
    /// A resolver that falls back to API discovery through `client` for kinds outside
    /// core's built-in table.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client: Some(client),
            cache: Arc::default(),
        }
    }

    /// A resolver that knows only core's built-in table (for tests and offline tools).
    pub fn builtin_only() -> Self {
        Self {
            client: None,
            cache: Arc::default(),
        }
    }

    /// The object-count quota name of a template (`apps/v1`, `Deployment` →
    /// `count/deployments.apps`; `v1`, `ConfigMap` → `count/configmaps`), or `None` when
    /// the kind is unknown to both the built-in table and API discovery (or discovery
    /// failed; it is retried after [`REFRESH_AFTER_MISS`]).
    pub async fn count_name(&self, api_version: &str, kind: &str) -> Option<String> {
        self.plural(api_version, kind)
            .await
            .map(|plural| karmada_quota_core::usage::count_name(api_version, &plural))
    }

    /// The plural of `kind` in `api_version` (see [`Self::count_name`]).
    pub async fn plural(&self, api_version: &str, kind: &str) -> Option<String> {
        if api_version.is_empty() || kind.is_empty() {
            return None;
        }
        if let Some(p) = karmada_quota_core::usage::builtin_plural(api_version, kind) {
            return Some(p.to_owned());
        }
        let client = self.client.as_ref()?;
        let entry = {
            let mut cache = self.cache.lock().ok()?;
            cache.entry(api_version.to_owned()).or_default().clone()
        };
        let mut gv = entry.lock().await;
        if let Some(p) = gv.plurals.get(kind) {
            return Some(p.clone());
        }
        let stale = gv
            .fetched
            .is_none_or(|at| at.elapsed() >= REFRESH_AFTER_MISS);
        if !stale {
            return None;
        }
        gv.fetched = Some(Instant::now());
        match discover(client, api_version).await {
            Ok(plurals) => gv.plurals = plurals,
            Err(kube::Error::Api(s)) if s.is_not_found() => {
                tracing::debug!(%api_version, "group-version not served");
            }
            Err(e) => {
                tracing::warn!(%api_version, error = %e, "API discovery failed; retrying after a minute");
            }
        }
        gv.plurals.get(kind).cloned()
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
    async fn unknown_kinds_without_a_client_are_none() {
        let r = PluralResolver::builtin_only();
        assert_eq!(r.count_name("example.com/v1", "Widget").await, None);
        assert_eq!(r.count_name("", "Deployment").await, None);
    }
}
