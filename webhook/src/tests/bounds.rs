//! Bounds on what a review can make the webhook keep or say, and fail-closed readiness:
//! oversized identifiers and apiVersions refused without a lookup, the policy check's kind
//! cache capped, template events only in the binding's namespace, a stale view refusing
//! what it would charge, and a namespace the cache does not know refused while cluster
//! quotas exist.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_core::binding::ObjectReference;
use karmada_quota_interpreter::policy::ResourceSelector;
use karmada_quota_shell::Readiness;
use karmada_quota_status::fake::FakeStore;
use kube::api::ObjectMeta;
use kube::core::{PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::watcher::Event;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio::time::Instant;

use super::cluster::{create_in, mk_cluster_quota};
use super::*;
use crate::cache::freshness::{self, FreshnessMetrics};
use crate::cache::{CachedClusterQuota, NamespaceWriter, Watch};
use crate::policy::{KubePolicyWorld, MAX_KINDS, PolicyWorld};

/// A Namespace as the metadata watch delivers it, labelled `business=<business>`.
fn namespace(name: &str, business: &str) -> PartialObjectMeta<Namespace> {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: Some(BTreeMap::from([(
            "business".to_owned(),
            business.to_owned(),
        )])),
        ..Default::default()
    }
    .into_request_partial::<Namespace>()
}

/// An app whose cache holds cluster quota `business-a` (namespaces labelled `business=a`,
/// 10 cpu, none used), no KarmadaQuota, and namespace `a-dev`; the Namespace writer is
/// handed back so a test can add namespaces later.
fn cluster_quota_app() -> (Harness, NamespaceWriter) {
    let (cache, mut w) = QuotaCache::with_writers();
    for ev in [Event::Init, Event::InitDone] {
        w.quotas.apply_watcher_event(&ev);
    }
    let cq = mk_cluster_quota(
        "business-a",
        "a",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    );
    w.clusters.apply_watcher_event(&Event::Init);
    w.clusters.apply_watcher_event(&Event::InitApply(
        CachedClusterQuota::from_value(serde_json::to_value(&cq).unwrap()).unwrap(),
    ));
    w.clusters.apply_watcher_event(&Event::InitDone);
    w.namespaces.apply_watcher_event(&Event::Init);
    w.namespaces
        .apply_watcher_event(&Event::InitApply(namespace("a-dev", "a")));
    w.namespaces.apply_watcher_event(&Event::InitDone);
    let h = Harness::over(
        cache,
        FakeStore::with(&[]),
        FakeStore::with(&[cq]),
        w.quotas,
        Settings {
            decision_timeout: Duration::from_secs(5),
            ..Settings::default()
        },
    );
    (h, w.namespaces)
}

#[tokio::test]
async fn a_namespace_the_cache_does_not_know_is_refused_while_cluster_quotas_exist() {
    let (h, _namespaces) = cluster_quota_app();
    let started = Instant::now();
    let r = h.review_binding(create_in("new-ns", "web", "1")).await;
    let (allowed, code, reason, message) = verdict(&r);
    assert!(
        !allowed,
        "admitted without knowing which cluster quotas select it: {r}"
    );
    assert_eq!((code, reason.as_str()), (503, "ServiceUnavailable"), "{r}");
    assert!(
        message.contains("namespace new-ns is not in the webhook's Namespace cache"),
        "{message}"
    );
    // It waited for the namespace first, within the decision timeout.
    assert!(started.elapsed() >= crate::admission::NAMESPACE_GRACE);
    assert!(started.elapsed() < Duration::from_secs(5));
    // A namespace the cache knows is decided as usual.
    let r = h.review_binding(create_in("a-dev", "web", "1")).await;
    assert!(verdict(&r).0, "{r}");
}

#[tokio::test]
async fn a_namespace_arriving_within_the_grace_is_decided_and_charged() {
    let (h, mut namespaces) = cluster_quota_app();
    let late = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        namespaces.apply_watcher_event(&Event::Apply(namespace("a-late", "a")));
        namespaces
    });
    // 11 cpu in a namespace business-a selects: refused by the cluster quota (10), which
    // shows the namespace was placed once it arrived, not admitted uncharged.
    let r = h.review_binding(create_in("a-late", "big", "11")).await;
    let (allowed, code, _, message) = verdict(&r);
    assert!(!allowed, "{r}");
    assert_eq!(code, 403, "{message}");
    assert!(message.contains("business-a"), "{message}");
    let _namespaces = late.await.unwrap();
    let r = h.review_binding(create_in("a-late", "small", "1")).await;
    assert!(verdict(&r).0, "{r}");
}

/// [`Harness::new`] with one quota of 10 cpu (none used) in [`NS`], and views older than
/// `max` counted as stale.
fn stale_after(max: Duration) -> Harness {
    let mut h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    )]);
    h.state.settings.max_cache_staleness = max;
    h
}

#[tokio::test]
async fn a_stale_view_refuses_what_it_would_charge_until_the_watch_works_again() {
    // Within the bound: still decided (a bound no review on a loaded machine reaches).
    let within = stale_after(Duration::from_secs(30));
    within
        .state
        .cache
        .freshness()
        .failed(Watch::Quotas, &"connection refused");
    let r = within
        .review_binding(create_rb(mk_binding("web", "uid-1", 1, 1, "1", "")))
        .await;
    assert!(verdict(&r).0, "{r}");
    assert_eq!(within.entries("compute"), 1);
    // Past the bound (20 ms, then 40 ms of failing): refused.
    let h = stale_after(Duration::from_millis(20));
    let fresh = h.state.cache.freshness().clone();
    fresh.failed(Watch::Quotas, &"connection refused");
    tokio::time::sleep(Duration::from_millis(40)).await;
    let r = h
        .review_binding(create_rb(mk_binding("web2", "uid-2", 1, 1, "1", "")))
        .await;
    let (allowed, code, reason, message) = verdict(&r);
    assert!(!allowed, "admitted against a stale view: {r}");
    assert_eq!((code, reason.as_str()), (503, "ServiceUnavailable"));
    assert!(
        message.contains("the karmadaquotas watch has failed")
            && message.contains("connection refused"),
        "{message}"
    );
    assert_eq!(h.entries("compute"), 0, "the stale request reserved");
    // A namespace without quota is charged nothing: still allowed.
    let r = h.review_binding(create_in("no-quota", "web", "1")).await;
    assert!(verdict(&r).0, "{r}");
    // The watch works again.
    fresh.succeeded(Watch::Quotas);
    let r = h
        .review_binding(create_rb(mk_binding("web2", "uid-2", 1, 1, "1", "")))
        .await;
    assert!(verdict(&r).0, "{r}");
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn readiness_follows_the_watches_past_the_staleness_bound() {
    let (cache, mut writer) = QuotaCache::with_writer();
    for ev in [Event::Init, Event::InitDone] {
        writer.apply_watcher_event(&ev);
    }
    let ready = Readiness::default();
    let metrics = FreshnessMetrics::register(&mut Registry::default());
    let max = Duration::from_millis(150);
    let task = tokio::spawn(freshness::keep_ready(
        cache.clone(),
        ready.clone(),
        max,
        metrics.clone(),
    ));
    wait_for("ready once synced", || ready.is_ready()).await;
    let failed_at = Instant::now();
    cache
        .freshness()
        .failed(Watch::Namespaces, &"watch stream ended");
    wait_for("unready while stale", || !ready.is_ready()).await;
    assert!(failed_at.elapsed() >= max, "unready before the bound");
    assert_eq!(metrics.stale_value(), 1);
    let stale = cache.stale(max).unwrap();
    assert_eq!(stale.watch, "namespaces");
    cache.freshness().succeeded(Watch::Namespaces);
    wait_for("ready again", || ready.is_ready()).await;
    assert_eq!(metrics.stale_value(), 0);
    task.abort();
}

#[test]
fn staleness_is_counted_from_the_first_failure_of_a_streak() {
    let f = crate::cache::Freshness::default();
    assert_eq!(f.stale(Duration::ZERO), None);
    f.failed(Watch::ClusterQuotas, &"first");
    std::thread::sleep(Duration::from_millis(20));
    f.failed(Watch::ClusterQuotas, &"second");
    let s = f.stale(Duration::from_millis(10)).unwrap();
    assert!(s.age >= Duration::from_millis(20), "{s:?}");
    assert_eq!(s.error, "second");
    // A long error is kept clipped.
    f.failed(Watch::Quotas, &"e".repeat(1 << 20));
    let s = f.stale(Duration::ZERO).unwrap();
    assert_eq!(s.watch, "karmadaclusterquotas", "the longest failing one");
    f.succeeded(Watch::ClusterQuotas);
    let s = f.stale(Duration::ZERO).unwrap();
    assert_eq!(s.watch, "karmadaquotas");
    assert!(s.error.len() < 200, "{}", s.error.len());
}

#[tokio::test]
async fn a_template_api_version_longer_than_any_group_version_is_refused_naming_the_binding() {
    let mut h = stale_after(Duration::from_secs(60));
    h.state.settings.max_body_bytes = 3 * 1024 * 1024;
    let mut b = mk_binding("web", "uid-1", 1, 1, "1", "");
    b["spec"]["resource"]["apiVersion"] = json!(format!("{}/v1", "g".repeat(1 << 20)));
    let r = h.review_binding(create_rb(b)).await;
    let (allowed, code, _, message) = verdict(&r);
    assert!(!allowed, "{r}");
    assert_eq!(code, 400);
    assert!(
        message.starts_with("ResourceBinding team-a/web: spec.resource.apiVersion"),
        "{message}"
    );
    assert!(message.contains("1048579 bytes long"), "{message}");
    assert!(
        message.len() < 600,
        "the message repeats the value: {} bytes",
        message.len()
    );
    assert_eq!(h.entries("compute"), 0);
}

#[tokio::test]
async fn identifiers_longer_than_kubernetes_allows_are_refused_before_any_lookup() {
    let h = stale_after(Duration::from_secs(60));
    let long_name = "n".repeat(300);
    let r = h
        .review_binding(create_rb(mk_binding(&long_name, "uid-1", 1, 1, "1", "")))
        .await;
    let (allowed, code, _, message) = verdict(&r);
    assert!(!allowed, "{r}");
    assert_eq!(code, 400);
    assert!(
        message.contains("metadata.name is longer than Kubernetes allows"),
        "{message}"
    );
    assert!(message.contains("…(300 bytes)"), "{message}");
    let r = h
        .review_binding(create_rb(mk_binding(
            "web",
            &"u".repeat(200),
            1,
            1,
            "1",
            "",
        )))
        .await;
    assert!(verdict(&r).3.contains("metadata.uid"), "{r}");
    assert_eq!(h.entries("compute"), 0);
}

fn template(namespace: &str, name: &str, api_version: &str) -> ObjectReference {
    ObjectReference {
        api_version: api_version.to_owned(),
        kind: "Deployment".to_owned(),
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: "u".to_owned(),
        resource_version: String::new(),
    }
}

#[test]
fn template_events_only_in_the_bindings_namespace_and_only_for_real_references() {
    use crate::denials::template_ref;
    assert!(template_ref(NS, &template(NS, "web", "apps/v1")).is_some());
    // Another namespace: a review must not make the webhook write events there.
    assert!(template_ref(NS, &template("kube-system", "web", "apps/v1")).is_none());
    assert!(template_ref(NS, &template("", "web", "apps/v1")).is_none());
    // No object has such a name or apiVersion: no event series keyed by it.
    assert!(template_ref(NS, &template(NS, &"n".repeat(1 << 20), "apps/v1")).is_none());
    assert!(template_ref(NS, &template(NS, "web", &"g".repeat(1 << 20))).is_none());
}

fn selector(api_version: &str, kind: &str) -> ResourceSelector {
    serde_json::from_value(json!({"apiVersion": api_version, "kind": kind})).unwrap()
}

#[tokio::test]
async fn the_policy_checks_kind_cache_is_bounded_and_refuses_oversized_keys() {
    // Nothing listens on port 1: every discovery fails at once.
    let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
    let world = KubePolicyWorld::new(kube::Client::try_from(config).unwrap());
    let huge = selector(&format!("{}/v1", "g".repeat(1 << 20)), "Widget");
    let Err(skip) = world.templates(&huge, Some(NS), 10).await else {
        panic!("a 1 MB apiVersion was looked up")
    };
    assert!(skip.0.contains("not looked up"), "{}", skip.0);
    assert!(skip.0.len() < 500, "{}", skip.0.len());
    let long_kind = selector("apps/v1", &"K".repeat(1 << 20));
    assert!(world.templates(&long_kind, Some(NS), 10).await.is_err());
    assert_eq!(world.cached_kinds(), 0);
    for i in 0..MAX_KINDS + 50 {
        let s = selector(&format!("g{i}.example.com/v1"), "Widget");
        assert!(world.templates(&s, Some(NS), 10).await.is_err());
        assert!(
            world.cached_kinds() <= MAX_KINDS,
            "{}",
            world.cached_kinds()
        );
    }
    assert_eq!(world.cached_kinds(), MAX_KINDS);
}
