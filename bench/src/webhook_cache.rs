//! P3: the webhook's quota cache with many quotas — its memory, and the
//! decision latency of a ResourceBinding review through the real router (dry-run: decode,
//! charge, cache lookup, core decision, encode; nothing written).
//!
//! ```text
//!  Q quotas over N namespaces ─► CachedQuota::from_value ─► reflector writer (as the watch)
//!  (--cluster-quotas C: C cluster quotas, each selecting the namespaces labelled
//!   group=g<j>; namespace n is labelled g<n mod 2C>, so half the namespaces are covered)
//!  VmRSS before / after
//!  R reviews, one at a time, random namespaces ─► app().oneshot() ─► latency p50/p99/max
//!  the cache lookup alone (QuotaCache::in_namespace) ─► p50/p99
//!  the cluster quota lookups alone (cluster_quotas_covering) ─► mean
//!  where a quota's bytes go: Q more API objects, engine states, metadata copies ─► VmRSS
//! ```
//!
//! `--managed-fields` gives each quota the `metadata.managedFields` (three managers) and
//! the `last-applied-configuration` annotation an API server returns for an applied quota.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use axum::body::Body;
use axum::http::Request;
use futures::future::BoxFuture;
use http_body_util::BodyExt;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::QuotaObject;
use karmada_quota_crds::reservation_batch::KarmadaQuotaReservation;
use karmada_quota_shell::plurals::PluralResolver;
use karmada_quota_status::BatchStore;
use karmada_quota_webhook::cache::CachedClusterQuota;
use karmada_quota_webhook::ledger::Ledger;
use karmada_quota_webhook::{
    AppState, Batcher, BatcherConfig, CachedQuota, Denials, Metrics, QuotaCache, Settings,
    StatusStore, StoreError, app,
};
use kube::core::{ObjectMeta, PartialObjectMetaExt};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};
use tower::ServiceExt;

use crate::generate::mix;
use crate::rss::{CpuTimer, vm_rss};

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Quotas in the cache.
    pub quotas: usize,
    /// Namespaces they are spread over.
    pub namespaces: usize,
    /// Reviews decided.
    pub reviews: usize,
    /// KarmadaClusterQuotas (each selects the namespaces of one label value).
    pub cluster_quotas: usize,
    /// Give each quota the managedFields and annotation of an applied object.
    pub managed_fields: bool,
}

/// A store that is never called (dry-run reviews write nothing).
struct NoStore;

impl BatchStore for NoStore {
    fn create<'a>(
        &'a self,
        _: &'a KarmadaQuotaReservation,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async { Err(StoreError::Api("the cache bench writes nothing".into())) })
    }
    fn get<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async { Err(StoreError::Api("the cache bench writes nothing".into())) })
    }
    fn delete<'a>(
        &'a self,
        _: &'a str,
        _: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Api("the cache bench writes nothing".into())) })
    }
}

impl StatusStore for NoStore {
    fn get<'a>(
        &'a self,
        _: &'a str,
        _: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async { Err(StoreError::Api("the cache bench writes nothing".into())) })
    }
    fn replace_status<'a>(
        &'a self,
        _: &'a KarmadaQuota,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async { Err(StoreError::Api("the cache bench writes nothing".into())) })
    }
}

pub(crate) fn namespace(n: usize) -> String {
    format!("team-{n:05}")
}

/// Quota `k`: namespace k mod N, cpu/memory/pods/count limits, a synced `status.used` and
/// a few reservation entries, as the controller and the webhook leave it.
pub(crate) fn quota(k: usize, namespaces: usize, managed_fields: bool) -> Value {
    let ns = namespace(k % namespaces);
    let entries: Vec<Value> = (0..3)
        .map(|e| {
            json!({
                "reservedBy": {"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                               "name": format!("web-{k}-{e}"), "uid": crate::generate::uid(k * 8 + e)},
                "generation": 1,
                "reserved": {"requests.cpu": "100m", "pods": "1"},
                "expirationTime": "2099-01-01T00:00:00Z",
            })
        })
        .collect();
    let mut q = json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": format!("q{}", k / namespaces), "namespace": ns,
                     "uid": crate::generate::uid(k), "resourceVersion": (10 + k).to_string(), "generation": 1},
        "spec": {"hard": {"requests.cpu": "1k", "requests.memory": "4Ti", "pods": "10k",
                          "count/deployments.apps": "1k"}},
        "status": {
            "hard": {"requests.cpu": "1k", "requests.memory": "4Ti", "pods": "10k",
                     "count/deployments.apps": "1k"},
            "used": {"requests.cpu": "12", "requests.memory": "48Gi", "pods": "40",
                     "count/deployments.apps": "10"},
            "reservations": entries,
            "summary": "requests.cpu: 12/1k, requests.memory: 48Gi/4Ti, pods: 40/10k",
            "observedGeneration": 1,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Synced",
                            "message": "usage computed", "lastTransitionTime": "2026-11-20T08:00:00Z"}],
        }
    });
    fence(&mut q);
    if managed_fields {
        add_managed_fields(&mut q);
    }
    q
}

/// Adds the reservation-store fence over `spec.hard` to quota JSON `q`'s status, as the
/// controller leaves every quota (docs/reservations.md R22): without it the webhook
/// refuses the quota's namespace.
fn fence(q: &mut Value) {
    let hard: std::collections::BTreeMap<
        String,
        k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    > = serde_json::from_value(q["spec"]["hard"].clone()).unwrap_or_default();
    let mut entries: Vec<karmada_quota_crds::quota::Reservation> =
        serde_json::from_value(q["status"]["reservations"].clone()).unwrap_or_default();
    if karmada_quota_crds::convert::ensure_fence(&mut entries, &hard).is_ok() {
        q["status"]["reservations"] = serde_json::to_value(entries).unwrap_or_default();
    }
}

/// What the API server adds to a quota applied with kubectl and written by the controller
/// and the webhook: the last-applied annotation and one managedFields entry per manager.
fn add_managed_fields(q: &mut Value) {
    let applied = json!({"apiVersion": q["apiVersion"], "kind": q["kind"],
        "metadata": {"name": q["metadata"]["name"], "namespace": q["metadata"]["namespace"]},
        "spec": q["spec"]});
    let hard: serde_json::Map<String, Value> = q["spec"]["hard"]
        .as_object()
        .map(|h| h.keys().map(|k| (format!("f:{k}"), json!({}))).collect())
        .unwrap_or_default();
    let entry = |manager: &str, fields: Value| {
        json!({"manager": manager, "operation": "Update", "apiVersion": "quota.karmada.io/v1alpha1",
               "time": "2026-11-20T08:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": fields})
    };
    q["metadata"]["annotations"] = json!({
        "kubectl.kubernetes.io/last-applied-configuration": format!("{applied}\n"),
    });
    q["metadata"]["managedFields"] = json!([
        entry(
            "kubectl-client-side-apply",
            json!({
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}},
            "f:spec": {".": {}, "f:hard": Value::Object(hard.clone())}})
        ),
        entry(
            "karmada-quota-controller",
            json!({
            "f:status": {".": {}, "f:conditions": {}, "f:hard": Value::Object(hard.clone()),
                         "f:observedGeneration": {}, "f:summary": {},
                         "f:used": Value::Object(hard)}})
        ),
        entry(
            "karmada-quota-webhook",
            json!({"f:status": {"f:reservations": {}}})
        ),
    ]);
}

/// Cluster quota `j`: selects the namespaces labelled `group=g<j>`, limits far above use.
fn cluster_quota(j: usize) -> Value {
    let mut q = json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaClusterQuota",
        "metadata": {"name": format!("cq{j:03}"), "uid": crate::generate::uid(900_000_000 + j),
                     "resourceVersion": (5 + j).to_string(), "generation": 1},
        "spec": {"namespaceSelector": {"matchLabels": {"group": format!("g{j}")}},
                 "hard": {"requests.cpu": "100k", "pods": "1M"}},
        "status": {"hard": {"requests.cpu": "100k", "pods": "1M"},
                   "used": {"requests.cpu": "12", "pods": "40"},
                   "observedGeneration": 1, "namespaces": []},
    });
    fence(&mut q);
    q
}

fn review(i: usize, ns: &str) -> Value {
    let uid = crate::generate::uid(i + 1_000_000_000);
    let object = json!({
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": format!("web-{i}-deployment"), "namespace": ns, "uid": uid, "generation": 1},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "namespace": ns, "name": format!("web-{i}")},
                 "replicas": 2, "replicaRequirements": {"resourceRequest": {"cpu": "250m", "memory": "256Mi"}}},
    });
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "work.karmada.io", "version": "v1alpha2", "kind": "ResourceBinding"},
            "resource": {"group": "work.karmada.io", "version": "v1alpha2", "resource": "resourcebindings"},
            "name": object["metadata"]["name"], "namespace": ns, "operation": "CREATE",
            "userInfo": {"username": "kq-bench"}, "object": object, "oldObject": null,
            "dryRun": true,
        }
    })
}

/// Run the bench; the JSON report.
pub async fn run(cfg: &Config) -> Result<Value> {
    let rss_before = vm_rss();
    let t = CpuTimer::start();
    let cache = filled_cache(cfg)?;
    let fill = t.elapsed();
    let rss_after = vm_rss();
    ensure!(cache.is_synced(), "cache not synced");

    let bodies: Vec<(String, Vec<u8>)> = (0..cfg.reviews)
        .map(|i| {
            let ns = namespace(mix(i as u64) as usize % cfg.namespaces);
            let body = serde_json::to_vec(&review(i, &ns)).unwrap_or_default();
            (ns, body)
        })
        .collect();
    let (latencies, cpu) = timed_reviews(dry_run_router(&cache), &bodies).await?;
    let lookups = timed_lookups(&cache, &bodies);
    let memory = memory_breakdown(cfg);
    let per_review = |n: usize| n as f64 / cfg.reviews.max(1) as f64;
    let ms_per_review = |d: Duration| d.as_secs_f64() * 1e3 / cfg.reviews.max(1) as f64;
    Ok(json!({
        "timing": "latencies: wall clock per review (includes time the shared machine ran other work); cpu: on-CPU time of the bench thread / reviews",
        "bench": "webhook-cache",
        "quotas": cfg.quotas,
        "namespaces": cfg.namespaces,
        "fill_s": fill.as_secs_f64(),
        "rss_before_mib": rss_before as f64 / 1048576.0,
        "rss_after_mib": rss_after as f64 / 1048576.0,
        "rss_bytes_per_quota": rss_after.saturating_sub(rss_before) as f64 / cfg.quotas as f64,
        "reviews": cfg.reviews,
        "decision_p50_ms": crate::stats::percentile_ms(&latencies, 0.5),
        "decision_p99_ms": crate::stats::percentile_ms(&latencies, 0.99),
        "decision_max_ms": crate::stats::percentile_ms(&latencies, 1.0),
        "decision_cpu_mean_ms": ms_per_review(cpu),
        "lookup_cpu_mean_ms": ms_per_review(lookups.cpu),
        "lookup_p50_ms": crate::stats::percentile_ms(&lookups.latencies, 0.5),
        "lookup_p99_ms": crate::stats::percentile_ms(&lookups.latencies, 0.99),
        "quotas_per_lookup": per_review(lookups.found),
        "cluster_quotas": cfg.cluster_quotas,
        "managed_fields": cfg.managed_fields,
        "reviews_in_covered_namespaces": lookups.covered,
        "cluster_quotas_per_lookup": per_review(lookups.covering_found),
        "cluster_lookup_cpu_mean_ms": ms_per_review(lookups.cluster_cpu),
        "bytes_per_quota_of": memory,
    }))
}

/// A quota cache filled as the watches would fill it: `cfg.cluster_quotas` cluster quotas,
/// `cfg.namespaces` namespaces (labelled for them) and `cfg.quotas` quotas.
fn filled_cache(cfg: &Config) -> Result<QuotaCache> {
    let (cache, mut w) = QuotaCache::with_writers();
    w.clusters.apply_watcher_event(&Event::Init);
    for j in 0..cfg.cluster_quotas {
        let q = CachedClusterQuota::from_value(cluster_quota(j)).context("cluster quota JSON")?;
        ensure!(q.parsed.is_ok(), "cluster quota {j} did not parse");
        w.clusters.apply_watcher_event(&Event::InitApply(q));
    }
    w.clusters.apply_watcher_event(&Event::InitDone);
    w.namespaces.apply_watcher_event(&Event::Init);
    for n in 0..cfg.namespaces {
        let labels = (cfg.cluster_quotas > 0).then(|| {
            [(
                "group".to_owned(),
                format!("g{}", n % (2 * cfg.cluster_quotas)),
            )]
            .into()
        });
        let meta = ObjectMeta {
            name: Some(namespace(n)),
            labels,
            ..Default::default()
        };
        w.namespaces
            .apply_watcher_event(&Event::InitApply(meta.into_request_partial::<Namespace>()));
    }
    w.namespaces.apply_watcher_event(&Event::InitDone);
    let writer = &mut w.quotas;
    writer.apply_watcher_event(&Event::Init);
    for k in 0..cfg.quotas {
        let q = CachedQuota::from_value(quota(k, cfg.namespaces, cfg.managed_fields))
            .context("quota JSON")?;
        ensure!(
            q.parsed.is_ok(),
            "quota {k} did not parse: {:?}",
            q.parsed.err()
        );
        writer.apply_watcher_event(&Event::InitApply(q));
    }
    writer.apply_watcher_event(&Event::InitDone);
    Ok(cache)
}

/// The webhook's router over `cache`, for dry-run reviews (nothing is written; an empty
/// batch list, listed: dry runs count no batch).
fn dry_run_router(cache: &QuotaCache) -> axum::Router {
    let metrics = Arc::new(Metrics::default());
    let ledger = Ledger::new(Arc::new(NoStore), "kq-bench", cache.relists().clone());
    ledger.apply(&Event::Init);
    ledger.apply(&Event::InitDone);
    let batcher = Batcher::new(
        Arc::new(NoStore),
        cache.clone(),
        metrics.clone(),
        BatcherConfig::default(),
        ledger,
    );
    app(AppState {
        cache: cache.clone(),
        batcher,
        plurals: PluralResolver::builtin_only(),
        metrics: metrics.clone(),
        settings: Settings::default(),
        denials: Denials::new(Duration::from_secs(10), None, metrics),
        policies: None,
    })
}

/// Each review of `bodies` through `router`, one at a time: their wall-clock latencies,
/// sorted, and the bench thread's on-CPU time for all of them. Every one must be allowed.
async fn timed_reviews(
    router: axum::Router,
    bodies: &[(String, Vec<u8>)],
) -> Result<(Vec<Duration>, Duration)> {
    let mut latencies = Vec::with_capacity(bodies.len());
    let mut allowed = 0;
    let cpu = CpuTimer::start();
    for (_, body) in bodies {
        let t = Instant::now();
        let resp = router
            .clone()
            .oneshot(
                Request::post("/validate/resourcebinding")
                    .header("content-type", "application/json")
                    .body(Body::from(body.clone()))?,
            )
            .await?;
        let bytes = resp.into_body().collect().await?.to_bytes();
        latencies.push(t.elapsed());
        let v: Value = serde_json::from_slice(&bytes)?;
        if v["response"]["allowed"] == true {
            allowed += 1;
        }
    }
    let cpu = cpu.elapsed();
    ensure!(
        allowed == bodies.len(),
        "{} of {} reviews allowed",
        allowed,
        bodies.len()
    );
    latencies.sort();
    Ok((latencies, cpu))
}

/// The cache lookups alone, per review's namespace.
struct Lookups {
    /// Wall clock per namespace lookup, sorted.
    latencies: Vec<Duration>,
    cpu: Duration,
    /// Quotas found, summed.
    found: usize,
    /// Reviews whose namespace a cluster quota covers.
    covered: usize,
    /// Cluster quotas found, summed.
    covering_found: usize,
    cluster_cpu: Duration,
}

/// The namespace and cluster quota lookups of each review's namespace, timed.
fn timed_lookups(cache: &QuotaCache, bodies: &[(String, Vec<u8>)]) -> Lookups {
    let mut latencies = Vec::with_capacity(bodies.len());
    let mut found = 0;
    let cpu = CpuTimer::start();
    for (ns, _) in bodies {
        let t = Instant::now();
        found += cache.in_namespace(ns).len();
        latencies.push(t.elapsed());
    }
    let cpu = cpu.elapsed();
    latencies.sort();
    let (mut covered, mut covering_found) = (0, 0);
    let cluster_cpu = CpuTimer::start();
    for (ns, _) in bodies {
        let covering = cache.cluster_quotas_covering(ns);
        if !covering.is_empty() {
            covered += 1;
        }
        covering_found += covering.len();
    }
    Lookups {
        latencies,
        cpu,
        found,
        covered,
        covering_found,
        cluster_cpu: cluster_cpu.elapsed(),
    }
}

/// VmRSS growth per quota of Q more API objects, then their engine states, then copies of
/// their metadata (what a cached quota holds), all alive together.
fn memory_breakdown(cfg: &Config) -> Value {
    let per = |before: u64| vm_rss().saturating_sub(before) as f64 / cfg.quotas.max(1) as f64;
    let rss = vm_rss();
    let objects: Vec<KarmadaQuota> = (0..cfg.quotas)
        .filter_map(|k| serde_json::from_value(quota(k, cfg.namespaces, cfg.managed_fields)).ok())
        .collect();
    let api_object = per(rss);
    let rss = vm_rss();
    let states: Vec<_> = objects.iter().filter_map(|o| o.state().ok()).collect();
    let state = per(rss);
    let rss = vm_rss();
    let metas: Vec<ObjectMeta> = objects.iter().map(|o| o.metadata.clone()).collect();
    let metadata = per(rss);
    let kept = objects.len() + states.len() + metas.len();
    json!({
        "timing": "VmRSS growth / quotas; allocator slack included",
        "api_object": api_object,
        "engine_state": state,
        "metadata_copy": metadata,
        "kept": kept,
    })
}
