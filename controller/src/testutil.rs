//! `mk_*` fixture builders for the controller's tests.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, PodStatus, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use karmada_quota_core::binding::{
    ObjectReference, ReplicaRequirements, ResourceBindingSpec, TargetCluster,
};
use karmada_quota_core::pod_requests::{ContainerView, PodView, pod_usage};
use karmada_quota_core::{Quantity, ResourceList};
use karmada_quota_crds::cluster::{ClusterSpec, LocalSecretReference};
use karmada_quota_crds::convert::unix_to_time;
use karmada_quota_crds::quota::{
    Reservation, ReservedBy, ScopeSelector, ScopedResourceSelectorRequirement,
};
use karmada_quota_crds::{Cluster, KarmadaQuota, KarmadaQuotaSpec, ResourceBinding};
use kube::api::ObjectMeta;

/// An API resource map from (name, quantity) pairs.
pub fn api_map(pairs: &[(&str, &str)]) -> BTreeMap<String, ApiQuantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), ApiQuantity((*v).to_owned())))
        .collect()
}

/// A resource list from `(name, quantity)` pairs.
pub fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity::parse(v).unwrap()))
        .collect()
}

/// A KarmadaQuota at generation 1 with `hard`, no status.
pub fn mk_quota(ns: &str, name: &str, hard: &[(&str, &str)]) -> KarmadaQuota {
    let mut q = KarmadaQuota::new(
        name,
        KarmadaQuotaSpec {
            hard: api_map(hard),
            scope_selector: None,
            ..Default::default()
        },
    );
    q.metadata.namespace = Some(ns.to_owned());
    q.metadata.generation = Some(1);
    q.metadata.resource_version = Some("1".to_owned());
    q.metadata.uid = Some(format!("quota-{ns}-{name}"));
    q
}

/// `PriorityClass NotIn values`.
pub fn scope_not_in(values: &[&str]) -> ScopeSelector {
    ScopeSelector {
        match_expressions: vec![ScopedResourceSelectorRequirement {
            scope_name: "PriorityClass".into(),
            operator: "NotIn".into(),
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        }],
    }
}

/// A Deployment binding: `replicas` of `cpu` each, placed on `clusters`.
pub fn mk_binding(
    ns: &str,
    name: &str,
    uid: &str,
    generation: i64,
    replicas: i32,
    cpu: &str,
    clusters: &[(&str, i32)],
) -> ResourceBinding {
    let mut rb = ResourceBinding::new(
        name,
        ResourceBindingSpec {
            resource: ObjectReference {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: ns.into(),
                name: name.into(),
                ..ObjectReference::default()
            },
            replicas,
            replica_requirements: Some(ReplicaRequirements {
                resource_request: rl(&[("cpu", cpu)]),
                ..ReplicaRequirements::default()
            }),
            clusters: clusters
                .iter()
                .map(|(n, r)| TargetCluster {
                    name: (*n).to_owned(),
                    replicas: *r,
                    ..TargetCluster::default()
                })
                .collect(),
            ..ResourceBindingSpec::default()
        },
    );
    rb.metadata.namespace = Some(ns.to_owned());
    rb.metadata.uid = Some(uid.to_owned());
    rb.metadata.generation = Some(generation);
    rb
}

/// A Cluster with an optional endpoint and secretRef (namespace, name).
pub fn mk_cluster(name: &str, endpoint: Option<&str>, secret: Option<(&str, &str)>) -> Cluster {
    Cluster {
        types: None,
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: ClusterSpec {
            sync_mode: Some("Push".into()),
            api_endpoint: endpoint.map(str::to_owned),
            secret_ref: secret.map(|(ns, n)| LocalSecretReference {
                namespace: ns.into(),
                name: n.into(),
            }),
            insecure_skip_tls_verification: false,
        },
    }
}

/// A container requesting `cpu`.
pub fn mk_container(name: &str, cpu: &str) -> Container {
    Container {
        name: name.to_owned(),
        resources: Some(ResourceRequirements {
            requests: Some(api_map(&[("cpu", cpu)])),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    }
}

/// A pod with one container per `cpus` entry, in `phase`.
pub fn mk_pod(ns: &str, name: &str, uid: &str, class: &str, cpus: &[&str], phase: &str) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(ns.to_owned()),
            uid: Some(uid.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            priority_class_name: (!class.is_empty()).then(|| class.to_owned()),
            containers: cpus
                .iter()
                .enumerate()
                .map(|(i, c)| mk_container(&format!("c{i}"), c))
                .collect(),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some(phase.to_owned()),
            ..PodStatus::default()
        }),
    }
}

/// What core says a one-container pod requesting `cpu` uses, with its class.
pub fn pod_usage_of(class: &str, cpu: &str) -> karmada_quota_core::status::ObservedPod {
    let view = PodView {
        priority_class: class.to_owned(),
        containers: vec![ContainerView {
            requests: rl(&[("cpu", cpu)]),
            ..ContainerView::default()
        }],
        ..PodView::default()
    };
    karmada_quota_core::status::ObservedPod {
        class: class.to_owned(),
        usage: pod_usage(&view),
        owner: None,
    }
}

/// A reservation entry for binding `name`/`uid` at `generation`, expiring at `exp` (Unix s).
pub fn mk_reservation(
    name: &str,
    uid: &str,
    generation: i64,
    reserved: &[(&str, &str)],
    exp: i64,
) -> Reservation {
    Reservation {
        reserved_by: ReservedBy {
            api_version: "work.karmada.io/v1alpha2".into(),
            kind: "ResourceBinding".into(),
            namespace: String::new(),
            name: name.into(),
            uid: uid.into(),
        },
        generation,
        reserved: api_map(reserved),
        expiration_time: unix_to_time(exp),
    }
}

/// The `reservedBy` of an entry for binding uid `uid` (named after it).
pub fn by_uid(uid: &str) -> karmada_quota_core::quota::ReservedBy {
    karmada_quota_core::quota::ReservedBy {
        api_version: "work.karmada.io/v1alpha2".into(),
        kind: "ResourceBinding".into(),
        namespace: String::new(),
        name: format!("entry-{uid}"),
        uid: uid.into(),
    }
}

/// An admission's entry in the engine's form (a reservation batch's entry): binding
/// `name`/`uid` at `generation`, holding `reserved`, expiring at `exp` (Unix s).
pub fn mk_entry(
    name: &str,
    uid: &str,
    generation: i64,
    reserved: &[(&str, &str)],
    exp: i64,
) -> karmada_quota_core::quota::Reservation {
    karmada_quota_core::quota::Reservation {
        reserved_by: karmada_quota_core::quota::ReservedBy {
            name: name.into(),
            ..by_uid(uid)
        },
        generation,
        reserved: ResourceList::parse_map(reserved.iter().copied()).expect("valid quantities"),
        expiration_time: exp,
    }
}

/// The key of KarmadaQuota `ns`/`name`.
pub fn quota_key(ns: &str, name: &str) -> karmada_quota_core::selection::QuotaKey {
    karmada_quota_core::selection::QuotaKey::Namespaced {
        namespace: ns.into(),
        name: name.into(),
    }
}

/// The shared context over `index`.
pub fn base_ctx(
    index: crate::index::Index,
    leader: bool,
) -> (crate::reconcile::Ctx, tokio::sync::watch::Sender<bool>) {
    let mut reg = prometheus_client::registry::Registry::default();
    let metrics = std::sync::Arc::new(crate::metrics::Metrics::register(&mut reg));
    let (tx, rx) = tokio::sync::watch::channel(leader);
    let c = crate::reconcile::Ctx::new(
        std::sync::Arc::new(parking_lot::RwLock::new(index)),
        crate::members::MemberRegistry::default(),
        crate::api::Views::default(),
        metrics,
        rx,
        None,
        std::time::Duration::from_secs(300),
    );
    (c, tx)
}

/// KarmadaClusterQuota "business-a" at generation 1 over the namespaces labelled
/// `business=a`, with `hard`; no status.
pub fn business_quota(hard: &[(&str, &str)]) -> karmada_quota_crds::KarmadaClusterQuota {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    let mut q = karmada_quota_crds::KarmadaClusterQuota::new(
        "business-a",
        karmada_quota_crds::KarmadaClusterQuotaSpec {
            namespace_selector: Some(LabelSelector {
                match_labels: Some([("business".to_owned(), "a".to_owned())].into()),
                match_expressions: None,
            }),
            quota: KarmadaQuotaSpec {
                hard: api_map(hard),
                ..Default::default()
            },
        },
    );
    q.metadata.generation = Some(1);
    q
}

/// A reservation batch as the batch watch reads it (a dynamic object).
pub fn batch_dynamic(
    batch: &karmada_quota_crds::KarmadaQuotaReservation,
) -> kube::api::DynamicObject {
    let mut v = serde_json::to_value(batch).expect("a batch serializes");
    v["apiVersion"] = "quota.karmada.io/v1alpha1".into();
    v["kind"] = "KarmadaQuotaReservation".into();
    serde_json::from_value(v).expect("a batch is an object")
}

/// The batches held once the batch watch listed `objects`.
pub fn batches_listing(objects: &[kube::api::DynamicObject]) -> crate::batches::Batches {
    use kube::runtime::watcher::Event;
    let b = crate::batches::Batches::new(std::sync::Arc::default());
    b.apply(&Event::Init);
    for o in objects {
        b.apply(&Event::InitApply(o.clone()));
    }
    b.apply(&Event::InitDone);
    b
}
