//! The KarmadaQuota cache: a kube-runtime reflector over all namespaces.
//!
//! ```text
//!  watch KarmadaQuota (all namespaces) ─► CachedQuota::deserialize ─► reflector Store
//!                                          (parse + validate once per event;
//!                                           never fails on spec/status content)
//! ```
//!
//! The stored type is [`CachedQuota`], not `KarmadaQuota`: it deserializes every object
//! whose metadata is readable and keeps either the parsed quota with the engine's
//! [`QuotaState`] or the errors that make it unusable. So one malformed quota can never
//! stall the watch, is never silently skipped (requests in its namespace are refused with
//! its errors), and the per-request work is a lookup, not a parse.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::{FutureExt, StreamExt};
use karmada_quota_core::quota::QuotaState;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::quota_state;
use kube::core::{NamespaceResourceScope, ObjectMeta, Resource};
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Deserialize;

/// A KarmadaQuota as the webhook caches it.
#[derive(Clone, Debug)]
pub struct CachedQuota {
    /// The object's metadata (always readable).
    pub metadata: ObjectMeta,
    /// The quota and its engine view, or why it cannot be enforced (field errors joined
    /// with `; `).
    pub parsed: Result<Parsed, String>,
}

/// A quota that parsed and validated.
#[derive(Clone, Debug)]
pub struct Parsed {
    /// The API object (for status writes).
    pub object: Arc<KarmadaQuota>,
    /// The engine's view (for decisions).
    pub state: QuotaState,
}

impl CachedQuota {
    /// Parse and validate a quota.
    pub fn from_object(object: KarmadaQuota) -> Self {
        let metadata = object.metadata.clone();
        let parsed = match quota_state(&object) {
            Ok(state) => Ok(Parsed {
                object: Arc::new(object),
                state,
            }),
            Err(errors) => Err(errors
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")),
        };
        Self { metadata, parsed }
    }

    /// From JSON; fails only when even `metadata` is unreadable.
    pub fn from_value(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        let metadata: ObjectMeta = match value.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m)?,
            None => ObjectMeta::default(),
        };
        Ok(match serde_json::from_value::<KarmadaQuota>(value) {
            Ok(object) => Self::from_object(object),
            Err(e) => Self {
                metadata,
                parsed: Err(format!("cannot decode the object: {e}")),
            },
        })
    }

    /// `metadata.name` (empty when absent).
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    /// `metadata.namespace` (empty when absent).
    pub fn namespace(&self) -> &str {
        self.metadata.namespace.as_deref().unwrap_or_default()
    }

    /// The parsed resourceVersion, when it is a number (it is, with etcd).
    pub fn resource_version(&self) -> Option<u64> {
        self.metadata.resource_version.as_deref()?.parse().ok()
    }
}

impl<'de> Deserialize<'de> for CachedQuota {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Self::from_value(value).map_err(serde::de::Error::custom)
    }
}

impl Resource for CachedQuota {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        KarmadaQuota::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        KarmadaQuota::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        KarmadaQuota::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        KarmadaQuota::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        KarmadaQuota::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Read side of the cache. Clone freely.
#[derive(Clone)]
pub struct QuotaCache {
    store: Store<CachedQuota>,
    synced: Arc<AtomicBool>,
}

impl std::fmt::Debug for QuotaCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaCache")
            .field("len", &self.store.len())
            .field("synced", &self.synced.load(Ordering::Relaxed))
            .finish()
    }
}

impl QuotaCache {
    /// An empty cache and its writer (the watch task in production; tests apply watcher
    /// events themselves — `Event::InitDone` marks it synced).
    pub fn with_writer() -> (Self, Writer<CachedQuota>) {
        let (store, writer) = reflector::store();
        (
            Self {
                store,
                synced: Arc::default(),
            },
            writer,
        )
    }

    /// The cache and the future that keeps it fed by a watch over all namespaces. The
    /// future runs forever (watch errors are logged and retried with backoff); spawn it.
    pub fn watch(client: kube::Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let (cache, writer) = Self::with_writer();
        let api = kube::Api::<CachedQuota>::all(client);
        let feed = watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
            .for_each(|event| async move {
                match event {
                    Ok(watcher::Event::Apply(q) | watcher::Event::InitApply(q)) => {
                        if let Err(errors) = &q.parsed {
                            tracing::warn!(
                                namespace = q.namespace(),
                                name = q.name(),
                                %errors,
                                "KarmadaQuota cannot be enforced; ResourceBindings in its namespace are refused"
                            );
                        }
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "KarmadaQuota watch failed; retrying"),
                }
            });
        (cache, feed)
    }

    /// The quotas of `namespace`, sorted by name. A snapshot: never a LIST.
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedQuota>> {
        let mut quotas = self
            .store
            .state_filter(|q| q.metadata.namespace.as_deref() == Some(namespace));
        quotas.sort_by(|a, b| a.name().cmp(b.name()));
        quotas
    }

    /// Whether the initial list has completed (the cache can be trusted).
    pub fn is_synced(&self) -> bool {
        if self.synced.load(Ordering::Acquire) {
            return true;
        }
        let ready = matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())));
        if ready {
            self.synced.store(true, Ordering::Release);
        }
        ready
    }

    /// Resolves once the initial list has completed; an error if the writer is gone.
    ///
    /// Polls rather than awaits the store's readiness future: that future keeps only the
    /// waker of its latest poll, and [`Self::is_synced`] (called by every review that
    /// arrives before the sync) polls it too, so an awaiting task was never woken and a
    /// webhook restarted under traffic stayed unready for good.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        loop {
            match self.store.wait_until_ready().now_or_never() {
                Some(Ok(())) => break,
                Some(Err(e)) => return Err(e),
                None => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
            }
        }
        self.synced.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::ObjectList;
    use serde_json::json;

    fn quota(ns: &str, name: &str, hard: serde_json::Value) -> serde_json::Value {
        json!({
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": "7"},
            "spec": {"hard": hard}
        })
    }

    #[test]
    fn a_malformed_quota_does_not_fail_the_list_and_keeps_its_errors() {
        let list: ObjectList<CachedQuota> = serde_json::from_value(json!({
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuotaList",
            "metadata": {"resourceVersion": "9"},
            "items": [
                quota("a", "good", json!({"requests.cpu": "10"})),
                quota("a", "shape", json!("not a map")),
                quota("a", "value", json!({"requests.cpu": "1.1.M"})),
            ]
        }))
        .unwrap();
        let [good, shape, value] = &list.items[..] else {
            panic!("3 items expected")
        };
        assert!(good.parsed.is_ok());
        assert_eq!(good.resource_version(), Some(7));
        assert_eq!(shape.name(), "shape");
        assert!(
            shape
                .parsed
                .as_ref()
                .unwrap_err()
                .starts_with("cannot decode the object:"),
            "{:?}",
            shape.parsed
        );
        assert!(
            value
                .parsed
                .as_ref()
                .unwrap_err()
                .starts_with("spec.hard[requests.cpu]:"),
            "{:?}",
            value.parsed
        );
    }

    #[test]
    fn lookups_are_per_namespace_in_name_order_and_sync_follows_init_done() {
        let (cache, mut writer) = QuotaCache::with_writer();
        assert!(!cache.is_synced());
        writer.apply_watcher_event(&watcher::Event::Init);
        for (ns, name) in [("a", "zeta"), ("b", "other"), ("a", "alpha")] {
            let q = CachedQuota::from_value(quota(ns, name, json!({"pods": "1"}))).unwrap();
            writer.apply_watcher_event(&watcher::Event::InitApply(q));
        }
        assert!(!cache.is_synced());
        writer.apply_watcher_event(&watcher::Event::InitDone);
        assert!(cache.is_synced());
        let names: Vec<String> = cache
            .in_namespace("a")
            .iter()
            .map(|q| q.name().to_owned())
            .collect();
        assert_eq!(names, ["alpha", "zeta"]);
        assert!(cache.in_namespace("c").is_empty());
    }
}
