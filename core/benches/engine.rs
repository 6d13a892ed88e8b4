//! Engine benchmarks: the admission decision and the controller's usage sum.
//!
//! `cargo bench -p karmada-quota-core --bench engine -- --warm-up-time 1 --measurement-time 3`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use karmada_quota_core::binding::{
    ObjectReference, ReplicaRequirements, ResourceBindingSpec, TargetCluster,
};
use karmada_quota_core::decision::{AdmissionRequest, decide};
use karmada_quota_core::quota::{QuotaSpec, QuotaState, Reservation, ReservedBy};
use karmada_quota_core::scope::{PRIORITY_CLASS, RawRequirement, ScopeSelector};
use karmada_quota_core::usage::{BindingCharge, ScopedUsage};
use karmada_quota_core::{Quantity, ResourceList};

fn list(entries: &[(&str, &str)]) -> ResourceList {
    ResourceList::parse_map(entries.iter().copied()).expect("bench list")
}

/// 20 names a busy quota might hold.
const HARD: [(&str, &str); 20] = [
    ("cpu", "1000"),
    ("requests.cpu", "1000"),
    ("memory", "4Ti"),
    ("requests.memory", "4Ti"),
    ("ephemeral-storage", "10Ti"),
    ("requests.ephemeral-storage", "10Ti"),
    ("hugepages-2Mi", "64Gi"),
    ("requests.hugepages-2Mi", "64Gi"),
    ("requests.nvidia.com/gpu", "64"),
    ("requests.example.com/fpga", "8"),
    ("pods", "5000"),
    ("count/deployments.apps", "500"),
    ("count/statefulsets.apps", "500"),
    ("count/jobs.batch", "500"),
    ("count/configmaps", "500"),
    ("count/secrets", "500"),
    ("services", "100"),
    ("secrets", "500"),
    ("configmaps", "500"),
    ("persistentvolumeclaims", "100"),
];

fn scope(operator: &str, values: &[String]) -> ScopeSelector {
    let raw = [RawRequirement {
        scope_name: PRIORITY_CLASS,
        operator,
        values,
    }];
    ScopeSelector::parse(&raw, "spec.scopeSelector").expect("bench scope")
}

fn quota(name: &str, scope: ScopeSelector) -> QuotaState {
    let hard = list(&HARD);
    let used = hard
        .scaled(1)
        .sub_clamped(&hard)
        .plus(&list(&[("cpu", "100"), ("pods", "300")]));
    let reservations = (0..10)
        .map(|i| Reservation {
            reserved_by: ReservedBy {
                api_version: "work.karmada.io/v1alpha2".into(),
                kind: "ResourceBinding".into(),
                namespace: String::new(),
                name: format!("rb-{i}"),
                uid: format!("uid-{i}"),
            },
            generation: 1,
            reserved: list(&[("cpu", "1"), ("requests.cpu", "1"), ("pods", "2")]),
            expiration_time: 2_000,
        })
        .collect();
    QuotaState {
        clusters: Vec::new(),
        name: name.into(),
        covers: Default::default(),
        spec: QuotaSpec {
            policy: Default::default(),
            hard,
            scope,
        },
        used: Some(used),
        reservations,
    }
}

fn deployment(replicas: i32, class: &str, clusters: [(&str, i32); 3]) -> ResourceBindingSpec {
    ResourceBindingSpec {
        resource: ObjectReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            ..Default::default()
        },
        replicas,
        replica_requirements: Some(ReplicaRequirements {
            resource_request: list(&[
                ("cpu", "500m"),
                ("memory", "256Mi"),
                ("ephemeral-storage", "1Gi"),
                ("nvidia.com/gpu", "1"),
            ]),
            priority_class_name: class.into(),
            ..Default::default()
        }),
        components: Vec::new(),
        clusters: clusters
            .iter()
            .map(|(name, replicas)| TargetCluster {
                name: (*name).into(),
                replicas: *replicas,
                ..Default::default()
            })
            .collect(),
        placement: None,
        ..Default::default()
    }
}

fn bench_decide(c: &mut Criterion) {
    let batch = vec!["batch".to_owned()];
    let quotas = [
        quota("all", ScopeSelector::default()),
        quota("not-batch", scope("NotIn", &batch)),
        quota("with-class", scope("Exists", &[])),
    ];
    let count = Some("count/deployments.apps");
    let old = BindingCharge::compute(
        &deployment(6, "high", [("m1", 2), ("m2", 2), ("m3", 2)]),
        count,
    );
    let new = BindingCharge::compute(
        &deployment(9, "high", [("m1", 3), ("m2", 3), ("m3", 3)]),
        count,
    );
    let req = AdmissionRequest {
        namespace: "team-a",
        name: "web-deployment",
        uid: "uid-web",
        generation: 2,
        old: Some(&old),
        new: &new,
        now: 1_000,
        reservation_ttl: 60,
        max_reservations: 1000,
    };
    assert!(decide(&quotas, &req).is_allowed());
    c.bench_function("decide UPDATE vs 3 quotas x 20 names", |b| {
        b.iter(|| decide(black_box(&quotas), black_box(&req)))
    });
}

fn bench_usage(c: &mut Criterion) {
    let specs: Vec<ResourceBindingSpec> = (0..100_000i32)
        .map(|i| {
            let r: i32 = i % 7;
            let class = if i % 5 == 0 { "batch" } else { "" };
            deployment(
                3 * r,
                class,
                [("member1", r), ("member2", r), ("member3", r)],
            )
        })
        .collect();
    let batch = vec!["batch".to_owned()];
    let scope = scope("NotIn", &batch);
    c.bench_function("usage of 100k bindings x 3 clusters", |b| {
        b.iter(|| {
            let mut acc = ScopedUsage::default();
            for spec in &specs {
                let charge = BindingCharge::compute(spec, Some("count/deployments.apps"));
                charge.add_scoped_to(&scope, &mut acc);
            }
            black_box(acc.total.get("cpu").copied().unwrap_or(Quantity::ZERO))
        })
    });
}

/// The reconcile-time cost when the controller keeps each binding's charge (computed once
/// per watch event): summing 100k precomputed charges.
fn bench_sum(c: &mut Criterion) {
    let charges: Vec<BindingCharge> = (0..100_000i32)
        .map(|i| {
            let r: i32 = i % 7;
            let class = if i % 5 == 0 { "batch" } else { "" };
            let spec = deployment(
                3 * r,
                class,
                [("member1", r), ("member2", r), ("member3", r)],
            );
            BindingCharge::compute(&spec, Some("count/deployments.apps"))
        })
        .collect();
    let batch = vec!["batch".to_owned()];
    let scope = scope("NotIn", &batch);
    c.bench_function("sum of 100k precomputed charges x 3 clusters", |b| {
        b.iter(|| {
            let mut acc = ScopedUsage::default();
            for charge in &charges {
                charge.add_scoped_to(&scope, &mut acc);
            }
            black_box(acc.total.get("cpu").copied().unwrap_or(Quantity::ZERO))
        })
    });
}

criterion_group! {
    name = engine;
    config = Criterion::default().sample_size(10);
    targets = bench_decide, bench_usage, bench_sum
}
criterion_main!(engine);
