//! KarmadaClusterQuota: selection by namespace labels, admissions of several namespaces
//! in one batch, the combined decision with KarmadaQuotas, and validation.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use karmada_quota_core::ResourceList;
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_crds::convert::cluster_quota_state;
use karmada_quota_crds::{
    KarmadaClusterQuota, KarmadaClusterQuotaSpec, KarmadaClusterQuotaStatus, KarmadaQuota,
    KarmadaQuotaSpec, KarmadaQuotaStatus,
};
use karmada_quota_status::fake::FakeStore;
use kube::api::ObjectMeta;
use kube::core::PartialObjectMetaExt;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use super::*;
use crate::cache::{CachedClusterQuota, QuotaCache};

/// A cluster quota over namespaces labelled `business=<business>`, synced `used`.
pub(super) fn mk_cluster_quota(
    name: &str,
    business: &str,
    hard: &[(&str, &str)],
    used: &[(&str, &str)],
) -> KarmadaClusterQuota {
    let mut q = KarmadaClusterQuota::new(
        name,
        KarmadaClusterQuotaSpec {
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("business".to_owned(), business.to_owned())].into()),
                match_expressions: None,
            }),
            quota: KarmadaQuotaSpec {
                hard: list(hard),
                scope_selector: None,
                ..Default::default()
            },
        },
    );
    q.metadata.resource_version = Some("1".to_owned());
    q.status = Some(KarmadaClusterQuotaStatus {
        quota: KarmadaQuotaStatus {
            hard: list(hard),
            used: list(used),
            ..Default::default()
        },
        namespaces: Vec::new(),
    });
    let status = &mut q.status.as_mut().unwrap().quota;
    karmada_quota_crds::convert::ensure_fence(&mut status.reservations, &q.spec.quota.hard)
        .unwrap();
    q
}

fn in_ns(mut q: KarmadaQuota, ns: &str) -> KarmadaQuota {
    q.metadata.namespace = Some(ns.to_owned());
    q
}

struct Cluster {
    h: Harness,
    clusters: Arc<FakeStore<KarmadaClusterQuota>>,
}

/// An app over a cache holding `namespaces` (name → business label, `None`: unlabelled),
/// `quotas` and `clusters`, both stores holding the same.
fn cluster_harness(
    namespaces: &[(&str, Option<&str>)],
    quotas: &[KarmadaQuota],
    clusters: &[KarmadaClusterQuota],
) -> Cluster {
    let (cache, mut w) = QuotaCache::with_writers();
    w.quotas.apply_watcher_event(&Event::Init);
    for q in quotas {
        let v = serde_json::to_value(q).unwrap();
        w.quotas
            .apply_watcher_event(&Event::InitApply(CachedQuota::from_value(v).unwrap()));
    }
    w.quotas.apply_watcher_event(&Event::InitDone);
    w.clusters.apply_watcher_event(&Event::Init);
    for q in clusters {
        let v = serde_json::to_value(q).unwrap();
        w.clusters.apply_watcher_event(&Event::InitApply(
            CachedClusterQuota::from_value(v).unwrap(),
        ));
    }
    w.clusters.apply_watcher_event(&Event::InitDone);
    w.namespaces.apply_watcher_event(&Event::Init);
    for (name, business) in namespaces {
        let meta = ObjectMeta {
            name: Some((*name).to_owned()),
            labels: business.map(|b| BTreeMap::from([("business".to_owned(), b.to_owned())])),
            ..Default::default()
        };
        w.namespaces
            .apply_watcher_event(&Event::InitApply(meta.into_request_partial::<Namespace>()));
    }
    w.namespaces.apply_watcher_event(&Event::InitDone);
    let cluster_store = FakeStore::with(clusters);
    let h = Harness::over(
        cache,
        FakeStore::with(quotas),
        cluster_store.clone(),
        w.quotas,
        Settings {
            decision_timeout: Duration::from_secs(5),
            max_body_bytes: 64 * 1024,
            ..Settings::default()
        },
    );
    Cluster {
        h,
        clusters: cluster_store,
    }
}

/// A CREATE review of a 1-replica binding of `cpu` in `ns`.
pub(super) fn create_in(ns: &str, name: &str, cpu: &str) -> Value {
    let mut b = mk_binding(name, &format!("uid-{ns}-{name}"), 1, 1, cpu, "");
    b["metadata"]["namespace"] = json!(ns);
    b["spec"]["resource"]["namespace"] = json!(ns);
    let mut review = create_rb(b);
    review["request"]["namespace"] = json!(ns);
    review
}

/// The admissions' entries of cluster quota `name` (its status's and the batches').
fn cluster_entries(c: &Cluster, name: &str) -> Vec<karmada_quota_core::quota::Reservation> {
    let st = cluster_quota_state(&c.clusters.object("", name)).unwrap();
    c.h.entries_with(&st)
}

fn cluster_effective(c: &Cluster, name: &str) -> ResourceList {
    let st = cluster_quota_state(&c.clusters.object("", name)).unwrap();
    let entries = c.h.entries_with(&st);
    effective_usage(&st.used.unwrap_or_default(), &entries, None)
}

#[tokio::test]
async fn concurrent_creates_over_three_namespaces_fill_the_cluster_quota_exactly() {
    let c = cluster_harness(
        &[
            ("a-dev", Some("a")),
            ("a-prod", Some("a")),
            ("a-batch", Some("a")),
            ("b", Some("b")),
        ],
        &[],
        &[mk_cluster_quota(
            "business-a",
            "a",
            &[("requests.cpu", "20")],
            &[("requests.cpu", "0")],
        )],
    );
    let nss = ["a-dev", "a-prod", "a-batch", "b"];
    let answers = join_all((0..80).map(|i| {
        let ns = nss[i % 4];
        let review = create_in(ns, &format!("rb-{i}"), "1");
        let h = &c.h;
        async move { (ns, verdict(&h.review_binding(review).await)) }
    }))
    .await;
    let mut admitted = 0;
    for (ns, (allowed, code, reason, message)) in &answers {
        if *ns == "b" {
            assert!(*allowed, "namespace b is not selected: {message}");
            continue;
        }
        if *allowed {
            admitted += 1;
        } else {
            // No error but quota denials.
            assert_eq!(
                (*code, reason.as_str()),
                (403, "QuotaExceeded"),
                "{message}"
            );
            assert!(
                message.contains("exceeded cluster quota: business-a, requested: requests.cpu=1"),
                "{message}"
            );
        }
    }
    assert_eq!(admitted, 20);
    assert_eq!(
        cluster_effective(&c, "business-a"),
        ResourceList::parse_map([("requests.cpu", "20")]).unwrap()
    );
    let mut per_ns: BTreeMap<String, usize> = BTreeMap::new();
    for r in &cluster_entries(&c, "business-a") {
        *per_ns.entry(r.reserved_by.namespace.clone()).or_default() += 1;
    }
    assert_eq!(per_ns.values().sum::<usize>(), 20);
    assert!(per_ns.keys().all(|ns| ns.starts_with("a-")), "{per_ns:?}");
    // One worker batches the namespaces: far fewer batches than admissions, never a
    // conflict between them, and no status write.
    let creates = c.h.batches.creates.load(Ordering::SeqCst);
    assert!(creates < 20, "{creates} batches for 20 admissions");
    assert_eq!(c.h.batches.conflicts.load(Ordering::SeqCst), 0);
    assert_eq!(c.clusters.writes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_binding_must_fit_its_namespace_quota_and_the_cluster_quota() {
    let dev = in_ns(
        mk_quota("dev", &[("requests.cpu", "2")], &[("requests.cpu", "0")]),
        "a-dev",
    );
    let c = cluster_harness(
        &[("a-dev", Some("a")), ("a-prod", Some("a"))],
        &[dev],
        &[mk_cluster_quota(
            "business-a",
            "a",
            &[("requests.cpu", "3")],
            &[("requests.cpu", "0")],
        )],
    );
    let run = |ns: &str, name: &str| {
        let review = create_in(ns, name, "1");
        let h = &c.h;
        async move { verdict(&h.review_binding(review).await) }
    };
    assert!(run("a-dev", "one").await.0);
    assert!(run("a-dev", "two").await.0);
    let (allowed, _, _, message) = run("a-dev", "three").await;
    assert!(!allowed);
    assert!(message.contains("exceeded quota: dev,"), "{message}");
    assert!(run("a-prod", "four").await.0);
    let (allowed, _, _, message) = run("a-prod", "five").await;
    assert!(!allowed);
    assert!(
        message.contains("exceeded cluster quota: business-a,"),
        "{message}"
    );
    // Each admitted request holds one entry per quota object it was charged against.
    let dev = quota_state(&c.h.store.object("a-dev", "dev")).unwrap();
    assert_eq!(c.h.entries_with(&dev).len(), 2);
    assert_eq!(cluster_entries(&c, "business-a").len(), 3);
}

#[tokio::test]
async fn an_unselected_namespace_is_not_charged_an_unknown_one_is_refused_and_an_invalid_cluster_quota_refuses()
 {
    let mut broken = mk_cluster_quota("broken", "x", &[("requests.cpu", "3")], &[]);
    broken
        .spec
        .quota
        .hard
        .insert("limits.cpu".into(), Quantity("1".into()));
    let c = cluster_harness(
        &[("plain", None), ("x-ns", Some("x"))],
        &[],
        &[
            mk_cluster_quota(
                "business-a",
                "a",
                &[("requests.cpu", "0")],
                &[("requests.cpu", "0")],
            ),
            broken,
        ],
    );
    assert!(verdict(&c.h.review_binding(create_in("plain", "p", "1")).await).0);
    // Its labels are unknown, so which cluster quotas select it is too: refused
    // (retryable), never admitted uncharged (tests/bounds.rs has the details).
    let (allowed, code, _, _) = verdict(
        &c.h.review_binding(create_in("not-watched-yet", "p", "1"))
            .await,
    );
    assert!(!allowed);
    assert_eq!(code, 503);
    let (allowed, code, _, message) =
        verdict(&c.h.review_binding(create_in("x-ns", "p", "1")).await);
    assert!(!allowed);
    assert_eq!(code, 500);
    assert!(
        message.contains("KarmadaClusterQuota broken cannot be enforced: spec.hard[limits.cpu]"),
        "{message}"
    );
}

const KCQ: (&str, &str, &str) = ("quota.karmada.io", "v1alpha1", "KarmadaClusterQuota");

async fn review_cluster_quota(h: &Harness, object: Value) -> Value {
    let mut review = mk_review(
        "CREATE",
        KCQ,
        "karmadaclusterquotas",
        Some(object),
        None,
        false,
    );
    review["request"]["namespace"] = Value::Null;
    let (code, body) = h
        .post(
            crate::admission::KARMADACLUSTERQUOTA_PATH,
            review.to_string().into_bytes(),
        )
        .await;
    assert_eq!(code, axum::http::StatusCode::OK, "{body}");
    body["response"].clone()
}

#[tokio::test]
async fn the_cluster_quota_is_validated_with_field_named_messages() {
    let c = cluster_harness(&[("a-dev", Some("a"))], &[], &[]);
    let obj = |spec: Value| {
        json!({"apiVersion": "quota.karmada.io/v1alpha1", "kind": "KarmadaClusterQuota",
               "metadata": {"name": "business-a"}, "spec": spec})
    };
    let (allowed, code, reason, message) =
        verdict(&review_cluster_quota(&c.h, obj(json!({"hard": {"requests.cpu": "50"}}))).await);
    assert_eq!((allowed, code, reason.as_str()), (false, 422, "Invalid"));
    assert_eq!(
        message,
        "KarmadaClusterQuota \"business-a\" is invalid: spec.namespaceSelector: Required value: \
         a cluster quota must select its namespaces"
    );
    let (allowed, _, _, message) = verdict(
        &review_cluster_quota(
            &c.h,
            obj(json!({"namespaceSelector": {}, "hard": {"limits.cpu": "1"}})),
        )
        .await,
    );
    assert!(!allowed);
    assert!(
        message.contains("spec.namespaceSelector: Invalid value: \"{}\": an empty selector"),
        "{message}"
    );
    assert!(
        message.contains("; spec.hard[limits.cpu]: Invalid value"),
        "{message}"
    );
    let good = review_cluster_quota(
        &c.h,
        obj(json!({"namespaceSelector": {"matchLabels": {"business": "a"}}, "hard": {"requests.cpu": "50"}})),
    )
    .await;
    assert_eq!(good["allowed"], true);
    assert!(good["warnings"].is_null(), "{good}");
    let nothing = review_cluster_quota(
        &c.h,
        obj(json!({"namespaceSelector": {"matchLabels": {"business": "zz"}}, "hard": {"pods": "5"}})),
    )
    .await;
    assert_eq!(nothing["allowed"], true);
    assert!(
        nothing["warnings"][0]
            .as_str()
            .unwrap()
            .contains("matches no namespace yet"),
        "{nothing}"
    );
}

#[tokio::test]
async fn a_propagation_policy_is_priced_against_the_cluster_quota_selecting_its_namespace() {
    // biz: 4 cpu over a-dev and a-prod, 3 used in total (a-prod's, say); a-dev has no
    // KarmadaQuota of its own. A policy placing 2 × 1 cpu in a-dev exceeds it.
    let mut c = cluster_harness(
        &[("a-dev", Some("a")), ("a-prod", Some("a"))],
        &[],
        &[mk_cluster_quota(
            "biz",
            "a",
            &[("requests.cpu", "4")],
            &[("requests.cpu", "3")],
        )],
    );
    let web: karmada_quota_interpreter::template::Template = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "a-dev"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [
            {"resources": {"requests": {"cpu": "1"}}}
        ]}}}
    }))
    .unwrap();
    c.h.state.policies = Some(Arc::new(crate::policy::FakeWorld {
        templates: vec![web],
        ..Default::default()
    }));
    let policy = json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "web", "namespace": "a-dev"},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}}
        }
    });
    let mut review = mk_review(
        "CREATE",
        ("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
        "propagationpolicies",
        Some(policy),
        None,
        false,
    );
    review["request"]["namespace"] = json!("a-dev");
    let (code, body) =
        c.h.post(
            crate::policy::PROPAGATIONPOLICY_PATH,
            review.to_string().into_bytes(),
        )
        .await;
    assert_eq!(code, axum::http::StatusCode::OK, "{body}");
    let resp = &body["response"];
    assert!(verdict(resp).0, "{resp}");
    assert_eq!(
        resp["warnings"],
        json!([
            "this policy would exceed cluster quota biz with Deployment a-dev/web: exceeded \
             cluster quota: biz, requested: requests.cpu=2, used: requests.cpu=3, limited: \
             requests.cpu=4"
        ]),
        "{resp}"
    );
}
