//! Tests: fixtures, an in-memory [`FakeStore`], router tests (AdmissionReview JSON →
//! `app().oneshot()`) and batcher tests (conflicts, concurrency).

mod batcher;
mod router;

use std::collections::{BTreeMap, HashMap, VecDeque};

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karmada_quota_core::ResourceList;
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_crds::convert::quota_state;
use karmada_quota_crds::quota::{ScopeSelector, ScopedResourceSelectorRequirement};
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaSpec, KarmadaQuotaStatus};
use karmada_quota_runtime::plurals::PluralResolver;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::cache::{CachedQuota, QuotaCache};
use crate::reserve::{Batcher, BatcherConfig, QuotaStore, StoreError};
use crate::{AppState, Metrics, Settings, app};

pub const NS: &str = "team-a";
/// A fixed "now" (Unix seconds) so entries never lapse during a test.
pub const NOW: i64 = 1_800_000_000;

fn clock() -> i64 {
    NOW
}

fn list(pairs: &[(&str, &str)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
        .collect()
}

/// A quota in [`NS`] with `hard` and a synced `status.used`, resourceVersion 1.
pub fn mk_quota(name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> KarmadaQuota {
    let mut q = KarmadaQuota::new(
        name,
        KarmadaQuotaSpec {
            hard: list(hard),
            scope_selector: None,
        },
    );
    q.metadata.namespace = Some(NS.to_owned());
    q.metadata.resource_version = Some("1".to_owned());
    q.status = Some(KarmadaQuotaStatus {
        hard: list(hard),
        used: list(used),
        ..KarmadaQuotaStatus::default()
    });
    q
}

/// `q` restricted to PriorityClass `In [classes]`.
pub fn scoped(mut q: KarmadaQuota, classes: &[&str]) -> KarmadaQuota {
    q.spec.scope_selector = Some(ScopeSelector {
        match_expressions: vec![ScopedResourceSelectorRequirement {
            scope_name: "PriorityClass".to_owned(),
            operator: "In".to_owned(),
            values: classes.iter().map(|s| (*s).to_owned()).collect(),
        }],
    });
    q
}

/// A concurrent writer's change, applied to the stored object before the next write.
type Intrusion = Box<dyn FnOnce(&mut KarmadaQuota) + Send>;

/// In-memory [`QuotaStore`] with Kubernetes' resourceVersion semantics.
#[derive(Default)]
pub struct FakeStore {
    objects: Mutex<HashMap<(String, String), KarmadaQuota>>,
    rv: AtomicUsize,
    pub writes: AtomicUsize,
    pub gets: AtomicUsize,
    pub conflicts: AtomicUsize,
    /// Applied (one per write, in order) to the stored object right before a write is
    /// checked: another writer got there first, so that write conflicts.
    intrusions: Mutex<VecDeque<Intrusion>>,
    /// Every write fails with an API error.
    pub fail: AtomicBool,
    /// Writes of this quota fail with an API error.
    pub fail_quota: Mutex<Option<String>>,
    /// Every n-th write call (1st, n+1-th, …) finds that another writer got there first.
    pub conflict_every: AtomicUsize,
    calls: AtomicUsize,
    /// Writes never complete.
    pub hang: AtomicBool,
    /// Latency of each write (lets requests pile up into batches).
    pub write_latency: Mutex<Duration>,
}

impl FakeStore {
    pub fn with(quotas: &[KarmadaQuota]) -> Arc<Self> {
        let s = Self::default();
        s.rv.store(100, Ordering::SeqCst);
        for q in quotas {
            s.objects
                .lock()
                .unwrap()
                .insert((NS.to_owned(), q.metadata.name.clone().unwrap()), q.clone());
        }
        Arc::new(s)
    }

    pub fn object(&self, name: &str) -> KarmadaQuota {
        self.objects.lock().unwrap()[&(NS.to_owned(), name.to_owned())].clone()
    }

    /// Queue a concurrent write (see [`FakeStore::intrusions`]).
    pub fn intrude(&self, f: impl FnOnce(&mut KarmadaQuota) + Send + 'static) {
        self.intrusions.lock().unwrap().push_back(Box::new(f));
    }

    fn next_rv(&self) -> String {
        (self.rv.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }

    /// Effective usage (used + Σ live entries) of a stored quota, by core's ledger.
    pub fn effective(&self, name: &str) -> ResourceList {
        let st = quota_state(&self.object(name)).unwrap();
        effective_usage(&st.used.unwrap_or_default(), &st.reservations, NOW, None)
    }

    pub fn entries(&self, name: &str) -> usize {
        self.object(name).status.map_or(0, |s| s.reservations.len())
    }
}

impl QuotaStore for FakeStore {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            self.gets.fetch_add(1, Ordering::SeqCst);
            self.objects
                .lock()
                .unwrap()
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned()
                .ok_or(StoreError::NotFound)
        })
    }

    fn replace_status<'a>(
        &'a self,
        quota: &'a KarmadaQuota,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            let latency = *self.write_latency.lock().unwrap();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            if self.hang.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let failing = self.fail_quota.lock().unwrap().clone();
            if self.fail.load(Ordering::SeqCst) || failing == quota.metadata.name {
                return Err(StoreError::Api("etcdserver: request timed out".to_owned()));
            }
            let key = (
                quota.metadata.namespace.clone().unwrap_or_default(),
                quota.metadata.name.clone().unwrap_or_default(),
            );
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            let every = self.conflict_every.load(Ordering::SeqCst);
            let intrusion = self.intrusions.lock().unwrap().pop_front().or_else(|| {
                (every > 0 && call.is_multiple_of(every))
                    .then(|| Box::new(|_: &mut KarmadaQuota| {}) as Intrusion)
            });
            let mut objects = self.objects.lock().unwrap();
            let stored = objects.get_mut(&key).ok_or(StoreError::NotFound)?;
            if let Some(f) = intrusion {
                f(stored);
                stored.metadata.resource_version = Some(self.next_rv());
            }
            if stored.metadata.resource_version != quota.metadata.resource_version {
                self.conflicts.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::Conflict);
            }
            self.writes.fetch_add(1, Ordering::SeqCst);
            stored.status = quota.status.clone();
            stored.metadata.resource_version = Some(self.next_rv());
            Ok(stored.clone())
        })
    }
}

/// An app over a cache holding `quotas` (synced) and a [`FakeStore`] holding the same.
pub struct Harness {
    pub state: AppState,
    pub store: Arc<FakeStore>,
    pub writer: Arc<Mutex<Writer<CachedQuota>>>,
}

impl Harness {
    pub fn new(quotas: &[KarmadaQuota]) -> Self {
        Self::with_timeout(quotas, Duration::from_secs(2))
    }

    pub fn with_timeout(quotas: &[KarmadaQuota], timeout: Duration) -> Self {
        let (cache, mut writer) = QuotaCache::with_writer();
        writer.apply_watcher_event(&Event::Init);
        for q in quotas {
            let v = serde_json::to_value(q).unwrap();
            writer.apply_watcher_event(&Event::InitApply(CachedQuota::from_value(v).unwrap()));
        }
        writer.apply_watcher_event(&Event::InitDone);
        let store = FakeStore::with(quotas);
        let metrics = Arc::new(Metrics::default());
        let batcher = Batcher::with_clock(
            store.clone(),
            cache.clone(),
            metrics.clone(),
            BatcherConfig::default(),
            clock,
        );
        Self {
            state: AppState {
                cache,
                batcher,
                plurals: PluralResolver::builtin_only(),
                metrics,
                settings: Settings {
                    decision_timeout: timeout,
                    max_body_bytes: 64 * 1024,
                },
            },
            store,
            writer: Arc::new(Mutex::new(writer)),
        }
    }

    /// POST `body` to `path`; the HTTP status and the JSON body (Null if not JSON).
    pub async fn post(&self, path: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let resp = app(self.state.clone())
            .oneshot(
                Request::post(path)
                    .header("content-type", "application/json")
                    .body(Body::from(body))
                    .unwrap(),
            )
            .await
            .unwrap();
        let status = resp.status();
        let bytes = resp.into_body().collect().await.unwrap().to_bytes();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// POST a review of a ResourceBinding; the `response` part.
    pub async fn review_binding(&self, review: Value) -> Value {
        let (code, body) = self
            .post(
                crate::admission::RESOURCEBINDING_PATH,
                review.to_string().into_bytes(),
            )
            .await;
        assert_eq!(code, StatusCode::OK, "{body}");
        body["response"].clone()
    }

    /// POST a review of a KarmadaQuota; the `response` part.
    pub async fn review_quota(&self, review: Value) -> Value {
        let (code, body) = self
            .post(
                crate::admission::KARMADAQUOTA_PATH,
                review.to_string().into_bytes(),
            )
            .await;
        assert_eq!(code, StatusCode::OK, "{body}");
        body["response"].clone()
    }
}

/// A Deployment's ResourceBinding: `replicas` × `cpu` requested, class `class`.
pub fn mk_binding(
    name: &str,
    uid: &str,
    generation: i64,
    replicas: i32,
    cpu: &str,
    class: &str,
) -> Value {
    json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "generation": generation},
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "namespace": NS},
            "replicas": replicas,
            "replicaRequirements": {
                "resourceRequest": {"cpu": cpu, "memory": "64Mi"},
                "priorityClassName": class
            }
        }
    })
}

/// An AdmissionReview (v1) of `object` (and `old`) for resource `resource` of `gvk`.
pub fn mk_review(
    operation: &str,
    gvk: (&str, &str, &str),
    resource: &str,
    object: Option<Value>,
    old: Option<Value>,
    dry_run: bool,
) -> Value {
    let name = object
        .as_ref()
        .or(old.as_ref())
        .and_then(|o| o["metadata"]["name"].as_str())
        .unwrap_or_default()
        .to_owned();
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": gvk.0, "version": gvk.1, "kind": gvk.2},
            "resource": {"group": gvk.0, "version": gvk.1, "resource": resource},
            "name": name,
            "namespace": NS,
            "operation": operation,
            "userInfo": {"username": "system:serviceaccount:karmada-system:karmada-controller-manager"},
            "object": object,
            "oldObject": old,
            "dryRun": dry_run
        }
    })
}

pub const RB: (&str, &str, &str) = ("work.karmada.io", "v1alpha2", "ResourceBinding");
pub const KQ: (&str, &str, &str) = ("quota.karmada.io", "v1alpha1", "KarmadaQuota");

pub fn create_rb(binding: Value) -> Value {
    mk_review("CREATE", RB, "resourcebindings", Some(binding), None, false)
}

pub fn update_rb(old: Value, new: Value) -> Value {
    mk_review(
        "UPDATE",
        RB,
        "resourcebindings",
        Some(new),
        Some(old),
        false,
    )
}

/// (allowed, code, reason, message) of a `response`.
pub fn verdict(response: &Value) -> (bool, u64, String, String) {
    (
        response["allowed"].as_bool().unwrap(),
        response["status"]["code"].as_u64().unwrap_or(0),
        response["status"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        response["status"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}
