//! No way around the quota by workload kind or by running pods around Karmada
//! (docs/design.md, "What the members run"), on the loopback control plane with both member apiservers:
//!
//! ```text
//!  quota q: requests.cpu 4, requests.nvidia.com/gpu 2
//!  DaemonSet gpu-agent (no replicas)      ─► refused: nothing counts its pods (Deny, default)
//!  spec.unaccountedWorkloads: Observed    ─► admitted; its pods in member1 + member2
//!                                            (owner DaemonSet/gpu-agent) charged: gpu 2
//!  Deployment web 2 × 500m                ─► admitted
//!  pods made directly in member2 (4 cpu)  ─► observed cpu 4200m > 4: scaling web up is
//!                                            refused naming the drift; scaling down passes
//!  spec.observedLimit: Ignore             ─► the scale-up passes
//! ```

use std::time::Duration;

use anyhow::{Result, ensure};
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_e2e::controller::{
    Controller, ensure_namespace, member_apis, milli, wait_quota, wait_synced,
};
use karmada_quota_e2e::setup::{WebhookSetup, step};
use karmada_quota_e2e::webhook::{
    Rb, create, expect_admitted, quota, update, wait_until_status_seen,
};
use karmada_quota_e2e::{accepts, apply_json};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const FOLLOW: Duration = Duration::from_secs(20);

/// A pending pod in a member: `cpu` and `gpu` requested, owned by `owner` (kind, name).
fn pod(ns: &str, name: &str, cpu: &str, gpu: &str, owner: Option<(&str, &str)>) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{
            "name": "app", "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": {"cpu": cpu, "nvidia.com/gpu": gpu},
                          "limits": {"nvidia.com/gpu": gpu}},
        }]},
    });
    if let Some((kind, owner)) = owner {
        p["metadata"]["ownerReferences"] = json!([{
            "apiVersion": "apps/v1", "kind": kind, "name": owner,
            "uid": "00000000-0000-0000-0000-000000000001", "controller": true,
        }]);
    }
    p
}

async fn set_spec(client: &kube::Client, ns: &str, field: &str, value: &str) -> Result<()> {
    Api::<KarmadaQuota>::namespaced(client.clone(), ns)
        .patch(
            "q",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {field: value}})),
        )
        .await?;
    Ok(())
}

fn refusal(outcome: &karmada_quota_e2e::webhook::Outcome) -> Option<String> {
    outcome.as_ref().err().map(|s| s.message.clone())
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn uncountable_workloads_and_pods_run_around_karmada_cannot_escape_the_quota() -> Result<()> {
    let s = WebhookSetup::new("unaccounted").await?;
    member_apis(s.env, 2)?;
    let ns = s.ns().to_owned();
    let members = s.env.member_clients()?;
    for m in &members {
        ensure_namespace(m, &ns).await?;
    }
    let ctl = Controller::builder()
        .namespace(&ns)
        .env_members(s.env)
        .start(s.env)
        .await?;
    let res = run(&s, &ns, &members).await;
    drop(ctl);
    res?;
    s.teardown().await
}

async fn run(s: &WebhookSetup, ns: &str, members: &[kube::Client]) -> Result<()> {
    let client = &s.client;
    step("[Create] quota q: requests.cpu 4, requests.nvidia.com/gpu 2");
    accepts(
        client,
        &quota(
            ns,
            "q",
            &[("requests.cpu", "4"), ("requests.nvidia.com/gpu", "2")],
        ),
    )
    .await?;
    wait_synced(client, ns, "q").await?;
    let web = |n: i32| {
        Rb::deployment("web", n)
            .request("cpu", "500m")
            .clusters(&[("member1", n)])
    };
    // The webhook decides once its own watch holds the controller's status (the fence).
    wait_until_status_seen(client, &web(2).json(ns)).await?;

    step("[Create] a DaemonSet's binding (no replicas): refused, nothing counts its pods");
    let ds = Rb::template("gpu-agent", "apps/v1", "DaemonSet")
        .clusters(&[("member1", 0), ("member2", 0)]);
    let outcome = create(client, &ds.json(ns)).await?;
    let message = refusal(&outcome).unwrap_or_default();
    ensure!(
        message.contains(&format!(
            "DaemonSet {ns}/gpu-agent (apps/v1) runs pods that no replica count covers"
        )) && message.contains("spec.unaccountedWorkloads"),
        "the DaemonSet's binding: {outcome:?}"
    );
    eprintln!("    ✓ refused: {message}");

    step(
        "[Update] q: unaccountedWorkloads Observed; the DaemonSet is admitted and charged what its pods use",
    );
    set_spec(client, ns, "unaccountedWorkloads", "Observed").await?;
    let admitted = karmada_quota_e2e::wait_for("the DaemonSet admitted", FOLLOW, || async {
        create(client, &ds.json(ns)).await.ok()?.ok()
    })
    .await?;
    eprintln!("    ✓ admitted {}", kube::ResourceExt::name_any(&admitted));
    for (i, m) in members.iter().enumerate() {
        apply_json(
            m,
            ns,
            pod(
                ns,
                &format!("gpu-agent-{i}"),
                "100m",
                "1",
                Some(("DaemonSet", "gpu-agent")),
            ),
        )
        .await?;
    }
    wait_quota(
        client,
        ns,
        "q",
        "used: 2 GPUs and 200m, one per member, charged to the DaemonSet",
        FOLLOW,
        |q| {
            let used = &q
                .status
                .as_ref()
                .map(|s| s.used.clone())
                .unwrap_or_default();
            milli(used, "requests.nvidia.com/gpu") == 2000 && milli(used, "requests.cpu") == 200
        },
    )
    .await?;

    step("[Create] Deployment web 2 × 500m: admitted");
    expect_admitted(create(client, &web(2).json(ns)).await?)?;

    step("[Create] 2 × 2 cpu of pods made directly in member2: observed cpu 4200m > 4");
    for i in 0..2 {
        apply_json(
            &members[1],
            ns,
            pod(ns, &format!("rogue-{i}"), "2", "0", None),
        )
        .await?;
    }
    wait_quota(client, ns, "q", "member2 observed 4100m", FOLLOW, |q| {
        q.status.as_ref().is_some_and(|s| {
            s.clusters.iter().any(|c| {
                c.name == "member2"
                    && c.observed
                        .as_ref()
                        .is_some_and(|o| milli(o, "requests.cpu") == 4100)
            })
        })
    })
    .await?;

    step("[Update] web to 3: refused, naming the drift; to 1: admitted");
    let outcome = update(client, &web(3).json(ns)).await?;
    let message = refusal(&outcome).unwrap_or_default();
    ensure!(
        message.contains("exceeded quota: q, requested: requests.cpu=500m, observed: requests.cpu=4200m, limited: requests.cpu=4")
            && message.contains("member2: observed requests.cpu=4100m, placed requests.cpu=100m")
            && message.contains("spec.observedLimit"),
        "scaling up: {outcome:?}"
    );
    eprintln!("    ✓ refused: {message}");
    expect_admitted(update(client, &web(1).json(ns)).await?)?;

    step("[Update] q: observedLimit Ignore; web to 3 is admitted");
    set_spec(client, ns, "observedLimit", "Ignore").await?;
    karmada_quota_e2e::wait_for("the scale-up admitted", FOLLOW, || async {
        update(client, &web(3).json(ns)).await.ok()?.ok()
    })
    .await?;
    Ok(())
}
