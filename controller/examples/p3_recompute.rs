//! Benchmark P3: full recompute of 100k ResourceBindings × 3 clusters in 1k
//! namespaces from a filled index, against only deserializing the same objects.
//!
//! `cargo run --release -p karmada-quota-controller --example p3_recompute [bindings] [namespaces]`
//!
//! Prints the time to deserialize every binding, to fill the index (deserialize + charge
//! with core), to recompute every namespace's quota from the filled index (core's
//! `status::compute` + the desired status), the ratio recompute / deserialize, and the
//! process's peak RSS.

use std::collections::BTreeMap;
use std::time::Instant;

use karmada_quota_controller::desired::{compute, desired_status};
use karmada_quota_controller::index::Index;
use karmada_quota_core::status::ObservedPods;
use karmada_quota_core::usage::{builtin_plural, count_name};
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaSpec, ResourceBinding};
use kube::runtime::watcher::Event;

fn binding_json(ns: usize, i: usize) -> String {
    format!(
        r#"{{"apiVersion":"work.karmada.io/v1alpha2","kind":"ResourceBinding",
"metadata":{{"name":"web-{i}","namespace":"ns-{ns}","uid":"uid-{ns}-{i}","generation":1,"resourceVersion":"{i}"}},
"spec":{{"resource":{{"apiVersion":"apps/v1","kind":"Deployment","name":"web-{i}","namespace":"ns-{ns}","uid":"t-{ns}-{i}"}},
"replicas":6,"replicaRequirements":{{"resourceRequest":{{"cpu":"250m","memory":"512Mi"}}}},
"clusters":[{{"name":"member1","replicas":2}},{{"name":"member2","replicas":2}},{{"name":"member3","replicas":2}}],
"placement":{{"clusterAffinity":{{"clusterNames":["member1","member2","member3"]}}}}}},
"status":{{"conditions":[{{"type":"Scheduled","status":"True","reason":"Success","message":"ok","lastTransitionTime":"2026-11-22T00:00:00Z"}}]}}}}"#
    )
}

fn peak_rss_kib() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let namespaces: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000);
    let per_ns = total / namespaces;

    let raw: Vec<String> = (0..namespaces)
        .flat_map(|ns| (0..per_ns).map(move |i| binding_json(ns, i)))
        .collect();
    println!(
        "{} bindings in {namespaces} namespaces, 3 clusters each",
        raw.len()
    );

    let t = Instant::now();
    let mut n = 0;
    for r in &raw {
        let rb: ResourceBinding = serde_json::from_str(r).expect("valid binding");
        n += usize::from(rb.spec.replicas > 0);
    }
    let deserialize = t.elapsed();
    assert_eq!(n, raw.len());

    let t = Instant::now();
    let mut index = Index::new(600);
    index.apply_binding_event(&Event::Init, None, 0);
    for r in &raw {
        let rb: ResourceBinding = serde_json::from_str(r).expect("valid binding");
        let r = &rb.spec.resource;
        let count = builtin_plural(&r.api_version, &r.kind).map(|p| count_name(&r.api_version, p));
        index.apply_binding_event(&Event::InitApply(rb), count.as_deref(), 0);
    }
    index.apply_binding_event(&Event::InitDone, None, 0);
    let fill = t.elapsed();
    drop(raw);

    let quotas: Vec<KarmadaQuota> = (0..namespaces)
        .map(|ns| {
            let hard: BTreeMap<_, _> = [
                ("requests.cpu", "100k"),
                ("requests.memory", "100Ti"),
                ("pods", "1M"),
                ("count/deployments.apps", "10k"),
            ]
            .into_iter()
            .map(|(k, v)| {
                (
                    k.to_owned(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity(v.to_owned()),
                )
            })
            .collect();
            let mut q = KarmadaQuota::new(
                "q",
                KarmadaQuotaSpec {
                    hard,
                    scope_selector: None,
                    ..Default::default()
                },
            );
            q.metadata.namespace = Some(format!("ns-{ns}"));
            q.metadata.generation = Some(1);
            q
        })
        .collect();
    let observed = ObservedPods::new();
    let reach = BTreeMap::new();
    let now = jiff::Timestamp::now();

    let t = Instant::now();
    let mut written = 0;
    for q in &quotas {
        let c = compute(q, &index, &observed, now.as_second());
        if desired_status(q, &c, &reach, now).is_some() {
            written += 1;
        }
    }
    let recompute = t.elapsed();
    assert_eq!(written, quotas.len());

    println!("deserialize only:        {deserialize:>10.1?}");
    println!("fill index (deser+core): {fill:>10.1?}");
    println!(
        "full recompute:          {recompute:>10.1?}  ({} quotas)",
        quotas.len()
    );
    println!(
        "ratio recompute/deserialize: {:.2}x   (fill/deserialize: {:.2}x)",
        recompute.as_secs_f64() / deserialize.as_secs_f64(),
        fill.as_secs_f64() / deserialize.as_secs_f64()
    );
    if let Some(kib) = peak_rss_kib() {
        println!("peak RSS: {:.1} MiB", kib as f64 / 1024.0);
    }
}
