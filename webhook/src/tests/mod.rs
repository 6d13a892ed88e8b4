//! Tests: fixtures over the in-memory stores (`FakeStore` for the quotas, `FakeBatchStore`
//! for the reservation batches, watched by the batcher's ledger), router tests
//! (AdmissionReview JSON → `app().oneshot()`) and batcher tests (replicas, numbers, faults).

mod apiserver_cel;
mod batches;
mod bounds;
mod budget;
mod cluster;
mod early;
mod policy;
mod router;
mod spans;
mod tenancy;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karmada_quota_core::ResourceList;
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_crds::convert::quota_state;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaSpec, KarmadaQuotaStatus};
use karmada_quota_shell::plurals::PluralResolver;
use kube::runtime::watcher::Event;
use parking_lot::Mutex;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::cache::{CachedQuota, QuotaCache, QuotaWriter, relists::Relists};
use karmada_quota_crds::reservation_batch::parse_batch;
use karmada_quota_status::batch_store::{FakeBatchStore, FakeChange};
use karmada_quota_status::fake::FakeStore;

use crate::ledger::Ledger;
use crate::reserve::{Batcher, BatcherConfig, Stores};
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

/// A quota in [`NS`] with `hard` and a synced `status.used`, resourceVersion 1, fenced
/// for the batches as the controller leaves every quota (docs/reservations.md R22).
pub fn mk_quota(name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> KarmadaQuota {
    fenced(mk_unfenced_quota(name, hard, used))
}

/// [`mk_quota`] without the fence: as a 0.2.0 controller (status store) left it.
pub fn mk_unfenced_quota(name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> KarmadaQuota {
    let mut q = KarmadaQuota::new(
        name,
        KarmadaQuotaSpec {
            hard: list(hard),
            scope_selector: None,
            ..Default::default()
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

/// `q` with the reservation-store fence over its `hard` in its status.
pub fn fenced(mut q: KarmadaQuota) -> KarmadaQuota {
    let status = q.status.get_or_insert_with(Default::default);
    karmada_quota_crds::convert::ensure_fence(&mut status.reservations, &q.spec.hard).unwrap();
    q
}

/// The batch namespace of the tests.
pub const BATCH_NS: &str = "kq-system";

/// How long a replica's batch watch takes to show a change.
pub const WATCH_LATENCY: Duration = Duration::from_millis(1);

/// A webhook replica's ledger over `batches`: its list is what the store holds now, its
/// watch the store's changes in order, each after [`WATCH_LATENCY`] (so that replicas
/// race for numbers as they do over the API).
pub fn watching_ledger(batches: &Arc<FakeBatchStore>, relists: &Relists) -> Arc<Ledger> {
    let ledger = Ledger::new(batches.clone(), BATCH_NS, relists.clone());
    ledger.apply(&Event::Init);
    for b in batches.all() {
        ledger.apply(&Event::InitApply(b));
    }
    ledger.apply(&Event::InitDone);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    batches.on_change(move |change| {
        let _ = tx.send(change.clone());
    });
    let watching = Arc::downgrade(&ledger);
    tokio::spawn(async move {
        while let Some(change) = rx.recv().await {
            tokio::time::sleep(WATCH_LATENCY).await;
            let Some(l) = watching.upgrade() else { return };
            match change {
                FakeChange::Created(b) => l.apply(&Event::Apply(b)),
                FakeChange::Deleted(b) => l.apply(&Event::Delete(b)),
            }
        }
    });
    ledger
}

/// An app over a cache holding `quotas` (synced), a [`FakeStore`] holding the same and a
/// [`FakeBatchStore`] its batcher reserves in.
pub struct Harness {
    pub state: AppState,
    pub store: Arc<FakeStore>,
    pub writer: Arc<Mutex<QuotaWriter>>,
    /// The reservation batches the batcher creates (no controller folds them).
    pub batches: Arc<FakeBatchStore>,
}

impl Harness {
    /// The stored quota `name` of [`NS`].
    pub fn quota(&self, name: &str) -> KarmadaQuota {
        self.store.object(NS, name)
    }

    /// The admissions' entries of quota `name` of [`NS`]: its status's (but the fence)
    /// and the batches', in that order.
    /// One entry per admission (binding uid and generation): a later batch's replaces
    /// an earlier one, as the controller's fold and the decisions count them.
    pub fn entries_of(&self, name: &str) -> Vec<karmada_quota_core::quota::Reservation> {
        let st = quota_state(&self.quota(name)).unwrap();
        self.entries_with(&st)
    }

    /// The admissions' entries of the quota `st` is the state of: its status's (but the
    /// fence) and the batches' ([`Self::entries_of`]).
    pub fn entries_with(
        &self,
        st: &karmada_quota_core::quota::QuotaState,
    ) -> Vec<karmada_quota_core::quota::Reservation> {
        let key = st.key();
        let mut entries: Vec<_> = karmada_quota_core::fence::pending(&st.reservations)
            .cloned()
            .collect();
        // Every stored batch counts: no controller folds them here.
        let mut view = karmada_quota_status::BatchView::new();
        for b in self.batches.all() {
            view.insert(&parse_batch(&b).unwrap());
        }
        for (_, e) in view.unfolded(&key, None) {
            karmada_quota_core::ledger::upsert(&mut entries, e.clone());
        }
        entries
    }

    /// How many admissions' entries quota `name` of [`NS`] holds ([`Self::entries_of`]).
    pub fn entries(&self, name: &str) -> usize {
        self.entries_of(name).len()
    }

    /// Effective usage (used + Σ entries) of quota `name` of [`NS`], by core's ledger.
    pub fn effective(&self, name: &str) -> ResourceList {
        let st = quota_state(&self.quota(name)).unwrap();
        effective_usage(&st.used.unwrap_or_default(), &self.entries_of(name), None)
    }

    /// How often the decision counter says `reason` for an allowed ResourceBinding
    /// (`REASON_CHARGE_UNCHANGED`: answered early).
    pub(super) fn allowed_with(&self, reason: &'static str) -> u64 {
        self.state
            .metrics
            .decisions
            .get_or_create(&crate::metrics::DecisionLabels {
                kind: "resourcebinding",
                result: "allowed",
                reason,
            })
            .get()
    }

    /// A harness over a cache its caller filled: bindings reserve in `store` (quotas) and
    /// `cluster_store` (cluster quotas), decided with `settings`.
    pub(super) fn over(
        cache: QuotaCache,
        store: Arc<FakeStore>,
        cluster_store: Arc<FakeStore<karmada_quota_crds::KarmadaClusterQuota>>,
        writer: QuotaWriter,
        settings: Settings,
    ) -> Self {
        let metrics = Arc::new(Metrics::default());
        let batches = Arc::new(FakeBatchStore::new());
        let batcher = Batcher::with_stores(
            Stores {
                quotas: store.clone(),
                cluster_quotas: cluster_store,
                ledger: watching_ledger(&batches, cache.relists()),
            },
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
                metrics: metrics.clone(),
                settings,
                policies: None,
                denials: crate::Denials::new(Duration::from_secs(10), None, metrics),
            },
            store,
            writer: Arc::new(Mutex::new(writer)),
            batches,
        }
    }

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
        let no_cluster_quotas: &[karmada_quota_crds::KarmadaClusterQuota] = &[];
        Self::over(
            cache,
            store,
            FakeStore::with(no_cluster_quotas),
            writer,
            Settings {
                decision_timeout: timeout,
                max_body_bytes: 64 * 1024,
                queue_releasers: vec![CONTROLLER.to_owned()],
                ..Settings::default()
            },
        )
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
    // Karmada's controllers write bindings; the platform's administrator writes quotas.
    let user = if gvk.0 == "quota.karmada.io" {
        json!({"username": "system:admin", "groups": ["system:masters", "system:authenticated"]})
    } else {
        json!({"username": "system:serviceaccount:karmada-system:karmada-controller-manager"})
    };
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
            "userInfo": user,
            "object": object,
            "oldObject": old,
            "dryRun": dry_run
        }
    })
}

/// The quota controller's identity in the tests (`--queue-releasers`).
pub const CONTROLLER: &str = "system:serviceaccount:karmada-system:karmada-quota-controller";

/// `review` sent by `user` in `groups` instead of Karmada's controller-manager.
pub fn as_user(mut review: Value, user: &str, groups: &[&str]) -> Value {
    review["request"]["userInfo"] = json!({"username": user, "groups": groups});
    review
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
