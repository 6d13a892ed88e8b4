//! Placement-aware charging against a real apiserver: a binding whose Duplicated placement
//! names its clusters is charged for all of them at the detector's CREATE (before the
//! scheduler fills `spec.clusters`), and the scheduler's update then charges nothing.

use anyhow::{Context, Result, ensure};
use karmada_quota_e2e::webhook::{
    Rb, Registration, Webhook, binding_denied, create, expect_admitted, expect_refused, quota,
    quota_usage, seed_used, update, wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, accepts};
use serde_json::{Value, json};

fn step(s: &str) {
    eprintln!("{s}");
}

/// A Deployment's binding as Karmada's detector creates it: `replicas` × 250m, no
/// clusters yet, the policy's placement copied in.
fn detector_create(ns: &str, name: &str, replicas: i32, placement: Value) -> Value {
    let mut obj = Rb::deployment(name, replicas)
        .request("cpu", "250m")
        .clusters(&[])
        .json(ns);
    obj["spec"]["placement"] = placement;
    obj
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_duplicated_placement_naming_its_clusters_is_refused_at_create() -> Result<()> {
    let env = Env::get().await?;
    let c = env.client()?;
    let ns = TestNs::new(&c, "placement_named").await?;
    let n = ns.name();
    let webhook = Webhook::builder().start(env).await?;
    let registration = Registration::register(&c, &webhook.url(), &[n], &[&webhook]).await?;

    step("[Create] KarmadaQuota q: requests.cpu=2 (synced, 0 used)");
    accepts(&c, &quota(n, "q", &[("requests.cpu", "2")])).await?;
    seed_used(&c, n, "q", &[("requests.cpu", "0")]).await?;
    let named = json!({"clusterAffinity": {"clusterNames": ["member1", "member2"]}});
    wait_until_status_seen(&c, &detector_create(n, "probe", 1, named.clone())).await?;

    step("[Create] big: 5 × 250m on each of member1, member2 = 2500m > 2 → refused at CREATE");
    let outcome = create(&c, &detector_create(n, "big-deployment", 5, named.clone())).await?;
    expect_refused(
        &outcome,
        403,
        &binding_denied(
            "exceeded quota: q, requested: requests.cpu=2500m, used: requests.cpu=0, \
             limited: requests.cpu=2",
        ),
    )?;

    step("[Create] fits: 4 × 250m × 2 = 2 → admitted, 2 cpu reserved");
    let created = expect_admitted(
        create(&c, &detector_create(n, "fits-deployment", 4, named.clone())).await?,
    )?;
    let usage = quota_usage(&c, n, "q").await?;
    ensure!(
        usage.effective.to_string() == "requests.cpu=2",
        "effective {}",
        usage.effective
    );

    step("[Update] the scheduler fills spec.clusters (4 + 4): charged nothing more → admitted");
    let mut scheduled = serde_json::to_value(&created)?;
    scheduled["spec"]["clusters"] = json!([
        {"name": "member1", "replicas": 4},
        {"name": "member2", "replicas": 4}
    ]);
    expect_admitted(update(&c, &scheduled).await?).context("the scheduler's update")?;
    let usage = quota_usage(&c, n, "q").await?;
    ensure!(
        usage.reservations.len() == 1 && usage.effective.to_string() == "requests.cpu=2",
        "the update charged again: {:?} effective {}",
        usage.reservations,
        usage.effective
    );

    step(
        "[Create] the same 5 replicas Divided over the same names: charged once (1250m, not 2500m)",
    );
    let divided = json!({
        "clusterAffinity": {"clusterNames": ["member1", "member2"]},
        "replicaScheduling": {"replicaSchedulingType": "Divided"}
    });
    let outcome = create(&c, &detector_create(n, "divided-deployment", 5, divided)).await?;
    expect_refused(
        &outcome,
        403,
        &binding_denied(
            "exceeded quota: q, requested: requests.cpu=1250m, used: requests.cpu=2, \
             limited: requests.cpu=2",
        ),
    )
    .context("Divided is charged once, against what is already used")?;

    registration.cleanup().await?;
    ns.delete(&c).await
}
