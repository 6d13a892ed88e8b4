//! The waiting line with real Karmada (docs/queueing.md): a Deployment over a quota in queueing
//! mode is admitted with its binding's scheduling suspended; Karmada's scheduler leaves it
//! unplaced (its event filter drops suspended bindings) and its detector keeps the
//! suspension when it updates the binding. Once another Deployment is deleted, the
//! controller releases the binding and the scheduler places it, the members running it.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use karmada_quota_e2e::Env;
use karmada_quota_e2e::controller::{milli, wait_quota};
use karmada_quota_e2e::karmada::{
    KarmadaSetup, QUOTA, apply, binding_name, delete_as_gc, deployment, member_placement,
    placement, policy, wait_binding, wait_member_replicas, wait_scheduled,
};
use karmada_quota_e2e::queue::{Arrivals, waiting};
use karmada_quota_e2e::setup::step;
use karmada_quota_e2e::webhook::bindings;
use kube::api::{Patch, PatchParams};
use serde_json::json;

const HARD: &[(&str, &str)] = &[("requests.cpu", "500m"), ("pods", "20")];

#[tokio::test]
#[ignore = "needs real Karmada: make e2e-karmada runs it"]
async fn a_deployment_over_a_queueing_quota_waits_unplaced_and_is_placed_once_room_frees()
-> Result<()> {
    let k = KarmadaSetup::start("karmada_queue", HARD).await?;
    let (c, ns) = (k.client().clone(), k.ns().to_owned());
    let env = Env::get().await?;
    let arrivals = Arrivals::register(&c, &k.setup).await?;
    step("[Patch] quota q: spec.admission {mode: Queue, order: StrictFIFO}");
    kube::Api::<karmada_quota_crds::KarmadaQuota>::namespaced(c.clone(), &ns)
        .patch(
            QUOTA,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"admission": {"mode": "Queue", "order": "StrictFIFO"}}})),
        )
        .await?;
    apply(
        &c,
        &ns,
        policy(&ns, "all", &[], placement::divided_static(1, 1)),
    )
    .await?;

    step("[Apply] Deployment first: 2 × 200m (fits)");
    apply(&c, &ns, deployment(&ns, "first", 2, "200m")).await?;
    wait_scheduled(&c, &ns, &binding_name("first")).await?;

    step("[Apply] Deployment second: 2 × 200m (does not fit: 400m of 500m used)");
    apply(&c, &ns, deployment(&ns, "second", 2, "200m")).await?;
    let rb = wait_binding(
        &c,
        &ns,
        &binding_name("second"),
        "second's binding waits",
        |rb| serde_json::to_value(rb).is_ok_and(|v| waiting(&v)),
    )
    .await?;
    step(&format!(
        "[Check] suspended: {}; annotations {}",
        rb.data["spec"]["suspension"],
        serde_json::to_value(&rb.metadata.annotations)?
    ));
    wait_quota(
        &c,
        &ns,
        QUOTA,
        "status.queue lists second",
        Duration::from_secs(30),
        |q| {
            q.status
                .as_ref()
                .and_then(|s| s.queue.as_ref())
                .is_some_and(|l| l.waiting.iter().any(|w| w.name == binding_name("second")))
        },
    )
    .await?;

    step("[Scale] second to 1 replica while it waits: the detector's update keeps it waiting");
    apply(&c, &ns, deployment(&ns, "second", 1, "200m")).await?;
    let rb = wait_binding(
        &c,
        &ns,
        &binding_name("second"),
        "replicas 1, still waiting",
        |rb| {
            rb.data["spec"]["replicas"] == json!(1)
                && serde_json::to_value(rb).is_ok_and(|v| waiting(&v))
        },
    )
    .await?;
    ensure!(
        rb.data["spec"]["clusters"]
            .as_array()
            .is_none_or(Vec::is_empty)
    );
    step("[Check] 10 s later the scheduler has still not placed it");
    tokio::time::sleep(Duration::from_secs(10)).await;
    let rb = bindings(&c, &ns).get(&binding_name("second")).await?;
    let v = serde_json::to_value(&rb)?;
    ensure!(waiting(&v), "second must still wait: {}", v["spec"]);
    ensure!(
        v["spec"]["clusters"].as_array().is_none_or(Vec::is_empty),
        "a suspended binding was placed: {}",
        v["spec"]["clusters"]
    );

    step("[Delete] Deployment first (and its binding, as the garbage collector would)");
    let started = Instant::now();
    delete_as_gc(&c, &ns, "first").await?;
    let rb = wait_scheduled(&c, &ns, &binding_name("second")).await?;
    let placed_after = started.elapsed();
    step(&format!(
        "[Result] second placed {:?} after the deletion: {}",
        placed_after, rb.data["spec"]["clusters"]
    ));
    let want = member_placement(&rb);
    step(&format!("[Check] the members run {want:?}"));
    wait_member_replicas(env, &ns, "second", &want).await?;
    wait_quota(
        &c,
        &ns,
        QUOTA,
        "used 200m, nobody waits",
        Duration::from_secs(30),
        |q| {
            q.status
                .as_ref()
                .is_some_and(|s| milli(&s.used, "requests.cpu") == 200 && s.queue.is_none())
        },
    )
    .await?;
    ensure!(
        placed_after < Duration::from_secs(10),
        "placed only {placed_after:?} after the room freed"
    );
    arrivals.cleanup().await?;
    k.teardown().await
}
