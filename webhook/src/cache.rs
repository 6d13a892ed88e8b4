//! The quota cache: kube-runtime reflectors over KarmadaQuotas (all namespaces),
//! KarmadaClusterQuotas and the Namespaces' labels (which cluster quotas select them).
//!
//! ```text
//!  watch KarmadaQuota (all namespaces) ─► Cached<KarmadaQuota>::deserialize ─► Store
//!  watch KarmadaClusterQuota ───────────► Cached<KarmadaClusterQuota>        ─► Store
//!                                          (parse + validate once per event;
//!                                           never fails on spec/status content)
//!  watch Namespace (metadata only) ─────► Store (labels)
//! ```
//!
//! The stored type is [`Cached`], not the API type: it deserializes every object whose
//! metadata is readable and keeps either the parsed quota with the engine's
//! [`QuotaState`] or the errors that make it unusable. So one malformed quota can never
//! stall the watch, is never silently skipped (requests in the namespaces it covers are
//! refused with its errors), and the per-request work is a lookup, not a parse. Which
//! cluster quotas cover a namespace is [`crate::selection`]'s.
//!
//! Beside the stores, fed by the same events under one lock: the KarmadaQuotas by
//! namespace ([`index`]) and the cluster quotas covering each namespace ([`coverage`]), so a request's lookups cost what its namespace holds, not what
//! the cluster holds.
//!
//! Each watch reports to [`Freshness`] whether it works; a watch that fails is restarted
//! from a fresh list after a backoff (so its recovery shows as `InitDone`), and the view
//! counts as stale once a watch has failed for longer than `--max-cache-staleness`
//! ([`freshness`]).

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::selection::{Covers, Labels, QuotaKey};
use karmada_quota_crds::convert::selector_from_api;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, QuotaObject};
use karmada_quota_shell::watch_cache;
use kube::core::{ObjectMeta, PartialObjectMeta, Resource};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use serde::Deserialize;

/// The cluster quotas covering each namespace.
mod coverage;
/// Whether the watches work; staleness and readiness.
pub mod freshness;
/// The KarmadaQuotas by namespace.
mod index;
pub mod relists;
/// The watch tasks that feed the stores.
mod watch;

pub use coverage::{ClusterQuotaWriter, NamespaceWriter};
pub use freshness::{Freshness, FreshnessMetrics, Stale, Watch};
pub use index::QuotaWriter;

/// Server-side timeout of each watch request: a watch is re-established at least this
/// often, so a connection that died without a reset is noticed within about this long
/// (kube adds a few seconds of client-side idle timeout), not after the default 290 s.
pub const WATCH_TIMEOUT_SECS: u32 = 30;

/// A quota object as the webhook caches it.
#[derive(Clone, Debug)]
pub struct Cached<K> {
    /// The object's metadata (always readable).
    pub metadata: ObjectMeta,
    /// The quota and its engine view, or why it cannot be enforced (field errors joined
    /// with `; `).
    pub parsed: Result<Parsed<K>, String>,
    /// The namespaces it covers, known even when it does not parse (a cluster quota whose
    /// selector reads is still known to cover them, and refuses their bindings); `None`
    /// when not even that is known (it then covers nothing).
    pub covers: Option<Covers>,
}

/// A KarmadaQuota as the webhook caches it.
pub type CachedQuota = Cached<KarmadaQuota>;
/// A KarmadaClusterQuota as the webhook caches it.
pub type CachedClusterQuota = Cached<KarmadaClusterQuota>;

/// A quota that parsed and validated.
#[derive(Clone, Debug)]
pub struct Parsed<K> {
    /// The API object (for status writes).
    pub object: Arc<K>,
    /// The engine's view (for decisions).
    pub state: QuotaState,
}

/// What a kind tells about the namespaces it covers before (and without) parsing.
pub trait Coverage {
    /// The namespaces it covers, from metadata and the raw selector.
    fn raw_covers(&self) -> Option<Covers>;
}

impl Coverage for KarmadaQuota {
    fn raw_covers(&self) -> Option<Covers> {
        self.metadata.namespace.clone().map(Covers::Namespace)
    }
}

impl Coverage for KarmadaClusterQuota {
    fn raw_covers(&self) -> Option<Covers> {
        let selector = selector_from_api(self.spec.namespace_selector.as_ref()?);
        let empty = selector.match_labels.is_empty() && selector.match_expressions.is_empty();
        (!empty).then_some(Covers::Selected(selector))
    }
}

impl<K: QuotaObject + Coverage> Cached<K> {
    /// Parse and validate a quota. Its `metadata.managedFields` are dropped: nothing in
    /// the webhook reads them, its status writes send none (nil keeps the stored ones,
    /// `karmada_quota_status::update`), and they are often the larger part of the object.
    pub fn from_object(mut object: K) -> Self {
        object.meta_mut().managed_fields = None;
        let metadata = object.meta().clone();
        let covers = object.raw_covers();
        let parsed = match object.state() {
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
        Self {
            metadata,
            parsed,
            covers,
        }
    }

    /// From JSON; fails only when even `metadata` is unreadable.
    pub fn from_value(value: serde_json::Value) -> Result<Self, serde_json::Error> {
        let mut metadata: ObjectMeta = match value.get("metadata") {
            Some(m) => ObjectMeta::deserialize(m)?,
            None => ObjectMeta::default(),
        };
        metadata.managed_fields = None;
        Ok(match serde_json::from_value::<K>(value) {
            Ok(object) => Self::from_object(object),
            Err(e) => Self {
                covers: metadata.namespace.clone().map(Covers::Namespace),
                metadata,
                parsed: Err(format!("cannot decode the object: {e}")),
            },
        })
    }

    /// Its identity across kinds.
    pub fn key(&self) -> QuotaKey {
        match self.metadata.namespace.as_deref() {
            Some(ns) if !ns.is_empty() => QuotaKey::Namespaced {
                namespace: ns.to_owned(),
                name: self.name().to_owned(),
            },
            _ => QuotaKey::Cluster {
                name: self.name().to_owned(),
            },
        }
    }
}

impl<K: QuotaObject> Cached<K> {
    /// Its `status.foldedThrough` (the newest reservation batch its status accounts for);
    /// `None` when none, or when it does not parse.
    pub fn folded_through(&self) -> Option<u64> {
        let status = self.parsed.as_ref().ok()?.object.status()?;
        K::quota_part(status).folded_through
    }
}

impl<K> Cached<K> {
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

impl<'de, K: QuotaObject + Coverage> Deserialize<'de> for Cached<K> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let value = serde_json::Value::deserialize(d)?;
        Self::from_value(value).map_err(serde::de::Error::custom)
    }
}

impl<K: QuotaObject> Resource for Cached<K> {
    type DynamicType = ();
    type Scope = K::Scope;

    fn kind(dt: &()) -> Cow<'_, str> {
        K::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        K::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        K::version(dt)
    }
    fn api_version(dt: &()) -> Cow<'_, str> {
        K::api_version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        K::plural(dt)
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
    by_namespace: index::SharedIndex,
    clusters: Store<CachedClusterQuota>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    coverage: coverage::SharedCoverage,
    synced: Arc<AtomicBool>,
    freshness: Freshness,
    relists: relists::Relists,
}

/// The writers of the three stores and their indexes (the watch tasks in production;
/// tests apply watcher events themselves).
#[derive(Debug)]
pub struct Writers {
    /// KarmadaQuotas.
    pub quotas: QuotaWriter,
    /// KarmadaClusterQuotas.
    pub clusters: ClusterQuotaWriter,
    /// Namespaces (metadata).
    pub namespaces: NamespaceWriter,
}

/// A writer that applies watcher events to a store (and the indexes beside it).
pub trait ApplyEvent<K> {
    /// Apply one event, as kube's reflector does.
    fn apply_event(&mut self, event: &watcher::Event<K>);
}

impl ApplyEvent<CachedQuota> for QuotaWriter {
    fn apply_event(&mut self, event: &watcher::Event<CachedQuota>) {
        self.apply_watcher_event(event);
    }
}

impl ApplyEvent<CachedClusterQuota> for ClusterQuotaWriter {
    fn apply_event(&mut self, event: &watcher::Event<CachedClusterQuota>) {
        self.apply_watcher_event(event);
    }
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
    ///
    /// The cluster quota and namespace stores are listed (empty) at once: tests of
    /// KarmadaQuotas alone need not feed them. [`Self::with_writers`] gives all three.
    pub fn with_writer() -> (Self, QuotaWriter) {
        let (cache, mut w) = Self::with_writers();
        for ev in [watcher::Event::Init, watcher::Event::InitDone] {
            w.clusters.apply_watcher_event(&ev);
        }
        for ev in [watcher::Event::Init, watcher::Event::InitDone] {
            w.namespaces.apply_watcher_event(&ev);
        }
        (cache, w.quotas)
    }

    /// An empty cache and the writers of its three stores; it is synced once each has
    /// seen `Event::InitDone`.
    pub fn with_writers() -> (Self, Writers) {
        let (store, quotas) = reflector::store();
        let (clusters_store, clusters) = reflector::store();
        let (namespaces_store, namespaces) = reflector::store();
        let by_namespace = index::SharedIndex::default();
        let coverage = coverage::SharedCoverage::default();
        let (clusters, namespaces) = coverage::writers(clusters, namespaces, &coverage);
        (
            Self {
                store,
                by_namespace: by_namespace.clone(),
                clusters: clusters_store,
                namespaces: namespaces_store,
                coverage,
                synced: Arc::default(),
                freshness: Freshness::default(),
                relists: relists::Relists::default(),
            },
            Writers {
                quotas: QuotaWriter::new(quotas, by_namespace),
                clusters,
                namespaces,
            },
        )
    }

    /// The cache and the future that keeps it fed by its three watches. Every list is
    /// consistent (`watch_cache::consistent`): a list from a cache behind could lack a
    /// quota, or a label selecting a cluster quota, that the watch had shown
    /// (docs/reservations.md R23). The future runs forever (a failed watch is logged,
    /// reported to [`Self::freshness`] and restarted from a fresh list with backoff);
    /// spawn it.
    pub fn watch(client: kube::Client) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let lists = watch_cache::consistent();
        let (cache, writers) = Self::with_writers();
        let fresh = cache.freshness.clone();
        let quotas = watch::watch_quotas(
            client.clone(),
            writers.quotas,
            Watch::Quotas,
            (fresh.clone(), Some(cache.relists.clone())),
            lists.clone(),
        );
        let clusters = watch::watch_quotas(
            client.clone(),
            writers.clusters,
            Watch::ClusterQuotas,
            (fresh.clone(), Some(cache.relists.clone())),
            lists.clone(),
        );
        let mut ns_writer = writers.namespaces;
        let namespaces = watch::run_watch(
            kube::Api::<PartialObjectMeta<Namespace>>::all(client),
            Watch::Namespaces,
            (fresh, None),
            lists,
            move |event| ns_writer.apply_watcher_event(event),
        );
        let feed = async move {
            tokio::join!(quotas, clusters, namespaces);
        };
        (cache, feed)
    }

    /// Whether the watches work (tests report failures through it).
    pub fn freshness(&self) -> &Freshness {
        &self.freshness
    }

    /// The re-lists of the quota kinds asked for and completed (`crate::ledger` asks).
    pub fn relists(&self) -> &relists::Relists {
        &self.relists
    }

    /// Why the view is stale: a watch has failed for longer than `max`.
    pub fn stale(&self, max: Duration) -> Option<Stale> {
        self.freshness.stale(max)
    }

    /// Whether the Namespace cache holds `namespace` (its labels are known).
    pub fn knows_namespace(&self, namespace: &str) -> bool {
        self.namespaces
            .get(&reflector::ObjectRef::new(namespace))
            .is_some()
    }

    /// Whether any KarmadaClusterQuota is cached (a namespace's labels then matter).
    pub fn has_cluster_quotas(&self) -> bool {
        !self.clusters.is_empty()
    }
    /// The KarmadaClusterQuotas, in no particular order. A snapshot: never a LIST.
    pub fn cluster_quotas(&self) -> Vec<Arc<CachedClusterQuota>> {
        self.clusters.state()
    }

    /// The labels of every namespace, by name.
    pub fn namespace_labels(&self) -> std::collections::HashMap<String, Labels> {
        self.namespaces
            .state()
            .iter()
            .map(|n| {
                (
                    n.metadata.name.clone().unwrap_or_default(),
                    n.metadata.labels.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    /// The labels of `namespace`; `None` when the cache does not know it.
    pub fn labels_of(&self, namespace: &str) -> Option<Labels> {
        self.namespaces
            .get(&reflector::ObjectRef::new(namespace))
            .map(|n| n.metadata.labels.clone().unwrap_or_default())
    }

    /// The quotas of `namespace`, sorted by name. A snapshot: never a LIST; O(quotas
    /// in the namespace).
    pub fn in_namespace(&self, namespace: &str) -> Vec<Arc<CachedQuota>> {
        index::read(&self.by_namespace)
            .get(namespace)
            .cloned()
            .unwrap_or_default()
    }

    /// KarmadaQuota `namespace/name`, when cached.
    pub fn quota(&self, namespace: &str, name: &str) -> Option<Arc<CachedQuota>> {
        let index = index::read(&self.by_namespace);
        let quotas = index.get(namespace)?;
        index::position(quotas, name)
            .ok()
            .map(|i| quotas[i].clone())
    }

    /// KarmadaClusterQuota `name`, when cached.
    pub fn cluster_quota(&self, name: &str) -> Option<Arc<CachedClusterQuota>> {
        self.clusters.get(&reflector::ObjectRef::new(name))
    }

    /// What this view knows of a quota's fold of the reservation batches (`None`: not in
    /// view; `Some(None)`: no batch folded, or the quota does not parse).
    pub fn folded_through(&self, key: &QuotaKey) -> karmada_quota_status::batches::Fold {
        match key {
            QuotaKey::Namespaced { namespace, name } => {
                self.quota(namespace, name).map(|c| c.folded_through())
            }
            QuotaKey::Cluster { name } => self.cluster_quota(name).map(|c| c.folded_through()),
        }
    }

    /// Whether the initial list has completed (the cache can be trusted).
    pub fn is_synced(&self) -> bool {
        if self.synced.load(Ordering::Acquire) {
            return true;
        }
        let ready = matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())))
            && matches!(
                self.clusters.wait_until_ready().now_or_never(),
                Some(Ok(()))
            )
            && matches!(
                self.namespaces.wait_until_ready().now_or_never(),
                Some(Ok(()))
            );
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
            let mut ready = 0;
            for r in [
                self.store.wait_until_ready().now_or_never(),
                self.clusters.wait_until_ready().now_or_never(),
                self.namespaces.wait_until_ready().now_or_never(),
            ] {
                match r {
                    Some(Ok(())) => ready += 1,
                    Some(Err(e)) => return Err(e),
                    None => {}
                }
            }
            if ready == 3 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        self.synced.store(true, Ordering::Release);
        Ok(())
    }
}

#[cfg(test)]
mod index_tests;

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
    fn managed_fields_are_not_kept_the_rest_of_the_metadata_is() {
        let mut v = quota("a", "q", json!({"pods": "1"}));
        v["metadata"]["managedFields"] = json!([{"manager": "kubectl", "operation": "Update",
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:hard": {"f:pods": {}}}}}]);
        v["metadata"]["labels"] = json!({"team": "a"});
        let q = CachedQuota::from_value(v.clone()).unwrap();
        let object = &q.parsed.as_ref().unwrap().object;
        assert_eq!(object.metadata.managed_fields, None);
        assert_eq!(q.metadata.managed_fields, None);
        assert_eq!(q.metadata.labels, object.metadata.labels);
        assert_eq!(q.resource_version(), Some(7));
        // Also when the object does not decode.
        v["spec"]["hard"] = json!("not a map");
        let bad = CachedQuota::from_value(v).unwrap();
        assert!(bad.parsed.is_err());
        assert_eq!(bad.metadata.managed_fields, None);
        assert_eq!(bad.name(), "q");
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
