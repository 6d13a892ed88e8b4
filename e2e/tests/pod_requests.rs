//! A member pod's observed usage against a real member apiserver: a pod asking its cpu at
//! pod level (`spec.resources`, a sidecar beside its container) and a pod the kubelet
//! resized up (its container status `allocatedResources` and `resources` above its spec),
//! written straight into member1 — no kubelet runs on loopback, the test writes the status.
//!
//! The loopback members run kube-apiserver 1.20, which stores none of it: a create drops
//! `spec.resources` and `initContainers[].restartPolicy`, a status write drops
//! `containerStatuses[].allocatedResources` and `resources` (fields of 1.27 and later).
//! The test reads back what the apiserver stored and expects the usage Kubernetes 1.35
//! gives that stored pod: on 1.20, the container-level requests. What 1.35 would store is
//! priced by core's pod_requests table (docs/decisions/0002-pod-requests.md).

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Pod;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_e2e::controller::{
    Controller, cluster_observed_is, ensure_namespace, member_apis, wait_quota, wait_synced,
};
use karmada_quota_e2e::webhook::quota;
use karmada_quota_e2e::{Env, TestNs, accepts};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// "Within seconds": how long the status may take to follow a change.
const FOLLOW: Duration = Duration::from_secs(10);

fn step(s: &str) {
    eprintln!("{s}");
}

/// A pod asking 2 cpu at pod level, its container 500m and a sidecar 100m.
fn pod_level_pod(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "pod-level", "namespace": ns},
        "spec": {
            "resources": {"requests": {"cpu": "2"}},
            "initContainers": [{
                "name": "proxy", "image": "registry.k8s.io/pause:3.9",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "100m"}},
            }],
            "containers": [{
                "name": "app", "image": "registry.k8s.io/pause:3.9",
                "resources": {"requests": {"cpu": "500m"}},
            }],
        },
    })
}

/// A pod whose container asks 500m.
fn resized_pod(ns: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "resized", "namespace": ns},
        "spec": {"containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": {"cpu": "500m"}},
        }]},
    })
}

/// The status a kubelet writes after resizing `resized` up to 2 cpu.
fn resized_status() -> Value {
    json!({"status": {
        "phase": "Running",
        "containerStatuses": [{
            "name": "app", "image": "registry.k8s.io/pause:3.9", "imageID": "",
            "ready": true, "restartCount": 0, "state": {"running": {}},
            "allocatedResources": {"cpu": "2"},
            "resources": {"requests": {"cpu": "2"}},
        }],
    }})
}

/// Creates `obj` with a plain POST (server-side apply refuses a field the apiserver does
/// not know; a create drops it, as it does for any client) and returns what is stored.
async fn create_pod(client: &Client, ns: &str, obj: Value) -> Result<Pod> {
    let pod: Pod = serde_json::from_value(obj).context("pod")?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .context("creating a member pod")
}

/// What the quota observes in member1 for the two pods, by what the apiserver stored:
/// (requests.cpu, why).
fn expected(pod_level: &Pod, resized: &Pod) -> (String, String) {
    let spec = pod_level.spec.as_ref();
    let kept_pod_level = spec.is_some_and(|s| s.resources.is_some());
    let kept_sidecar = spec
        .and_then(|s| s.init_containers.as_ref())
        .is_some_and(|ics| ics.iter().any(|c| c.restart_policy.is_some()));
    let kept_allocation = resized
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.resources.is_some()));
    // pod-level: 2 kept, else the container (500m) over the init container (100m), plus
    // the sidecar when it is one; resized: 2 kept, else the spec.
    let first = match (kept_pod_level, kept_sidecar) {
        (true, _) => 2000,
        (false, true) => 600,
        (false, false) => 500,
    };
    let second = if kept_allocation { 2000 } else { 500 };
    let why = format!(
        "stored: spec.resources {kept_pod_level}, sidecar restartPolicy {kept_sidecar}, \
         container status resources {kept_allocation}"
    );
    (format!("{}m", first + second), why)
}

fn cpu_is(milli: &str) -> impl Fn(&KarmadaQuota) -> bool + '_ {
    move |q| {
        cluster_observed_is(q, "member1", &[("requests.cpu", milli), ("pods", "2")])
            && cluster_observed_is(q, "member2", &[("pods", "0")])
    }
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn pod_level_and_resized_pods_are_observed_as_the_apiserver_stores_them() -> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    member_apis(env, 2)?;
    let ns = TestNs::new(&client, "pod_requests::observed").await?;
    let members = env.member_clients()?;
    for m in &members {
        ensure_namespace(m, ns.name()).await?;
    }
    let ctl = Controller::builder()
        .namespace(ns.name())
        .env_members(env)
        .start(env)
        .await?;
    accepts(
        &client,
        &quota(ns.name(), "q", &[("requests.cpu", "10"), ("pods", "20")]),
    )
    .await?;
    wait_synced(&client, ns.name(), "q").await?;

    step("[Create] in member1: pod-level (2 cpu at pod level) and resized (500m)");
    let pod_level = create_pod(&members[0], ns.name(), pod_level_pod(ns.name())).await?;
    create_pod(&members[0], ns.name(), resized_pod(ns.name())).await?;
    step("[Update] resized's status: allocated and running with 2 cpu");
    let resized = Api::<Pod>::namespaced(members[0].clone(), ns.name())
        .patch_status(
            "resized",
            &PatchParams::default(),
            &Patch::Merge(resized_status()),
        )
        .await
        .context("writing the resized status")?;
    let (cpu, why) = expected(&pod_level, &resized);
    step(&format!("    {why}: member1 observes requests.cpu {cpu}"));
    let q = wait_quota(
        &client,
        ns.name(),
        "q",
        "member1 observed = the stored pods' requests",
        FOLLOW,
        cpu_is(&cpu),
    )
    .await?;
    eprintln!(
        "    ✓ observed {:?}",
        q.status.as_ref().map(|s| &s.clusters)
    );

    drop(ctl);
    ns.delete(&client).await
}
