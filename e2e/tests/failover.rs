//! Failover: Karmada moves replicas off a failed member and leaves the
//! old ones draining there (`spec.gracefulEvictionTasks`). The quota shows them per
//! member, never refuses the move, and counts them in `used` only under
//! `spec.drainingReplicas: Count`.
//!
//! Bindings are written the way Karmada writes them in a failover (measured on a v1.18
//! control plane, e2e/tests/karmada_failover.rs): the taint manager removes the failed member from
//! `spec.clusters` and adds a task `{fromCluster, replicas, purgeMode: Gracefully}`; the
//! scheduler then puts the replicas on the remaining member. Pods are created in the member
//! apiservers as their kubelets would run them: the old replicas keep running in member1.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use fantoccini::Locator;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::quota::CONDITION_DRIFT;
use karmada_quota_e2e::browser::{self, Driver};
use karmada_quota_e2e::controller::{
    Controller, cluster_observed_is, cluster_usage, cluster_used_is, condition, condition_is,
    ensure_namespace, has, member_apis, member_pod as pod, quota_events, used_is, wait_quota,
    wait_synced,
};
use karmada_quota_e2e::webhook::{
    Rb, Registration, Webhook, create, create_with, expect_admitted, quota, quota_usage, update,
    wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, accepts, apply_json, wait_for};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::Status;

/// How long the status may take to follow a change.
const FOLLOW: Duration = Duration::from_secs(15);

fn step(s: &str) {
    eprintln!("{s}");
}

/// `web`: 4 × 100m, placed as `clusters`, with the eviction tasks of `evicted`.
fn web(clusters: &[(&str, i32)], evicted: &[(&str, Option<i32>)]) -> Rb {
    evicted.iter().fold(
        Rb::deployment("web", 4)
            .request("cpu", "100m")
            .clusters(clusters),
        |rb, (from, replicas)| rb.evicted_from(from, *replicas),
    )
}

async fn wait(
    client: &Client,
    ns: &str,
    desc: &str,
    pred: impl Fn(&KarmadaQuota) -> bool,
) -> Result<KarmadaQuota> {
    let started = Instant::now();
    let q = wait_quota(client, ns, "q", desc, FOLLOW, pred).await?;
    eprintln!("    ✓ {desc} ({:.1?})", started.elapsed());
    Ok(q)
}

/// Patches the quota's spec with `patch` (a JSON merge patch).
async fn patch_spec(client: &Client, ns: &str, patch: serde_json::Value) -> Result<()> {
    Api::<KarmadaQuota>::namespaced(client.clone(), ns)
        .patch(
            "q",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": patch })),
        )
        .await
        .with_context(|| format!("patching KarmadaQuota {ns}/q"))?;
    Ok(())
}

/// Dry-run creates `obj` until the webhook refuses it (its cache has caught up with the
/// controller's last `used`); the refusal.
async fn refused_once_seen(client: &Client, obj: &serde_json::Value) -> Result<Box<Status>> {
    let started = Instant::now();
    loop {
        match create_with(client, obj, true).await? {
            Err(status) if status.code == 403 => return Ok(status),
            outcome => ensure!(
                started.elapsed() < FOLLOW,
                "still not refused after {FOLLOW:?}: {:?}",
                outcome.map(|o| o.metadata.name)
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Opens the quota page in a headless chromium, waits for member1's Draining badge and
/// its `+200m draining` cell, and saves a screenshot under
/// `<target>/tmp/dashboard-screenshots/quota-failover.png`.
async fn dashboard_shows_draining(dash: &str, ns: &str) -> Result<()> {
    let driver = Driver::start().await?;
    let profile = browser::fresh_dir(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("chromium-profile-{ns}")),
    )?;
    let b = driver.browser(&profile).await?;
    let res = async {
        b.goto(&format!("{dash}/quotas/{ns}/q")).await?;
        let row = r#"tr[data-cluster="member1"]"#;
        let cells = wait_for("member1's Draining badge and cells", FOLLOW, || async {
            let badge = b
                .find(Locator::Css(&format!("{row} .tag.draining")))
                .await
                .ok()?
                .text()
                .await
                .ok()?;
            let mut cells = Vec::new();
            for el in b
                .find_all(Locator::Css(&format!("{row} .v-draining")))
                .await
                .ok()?
            {
                cells.push(el.text().await.ok()?);
            }
            (badge == "Draining" && !cells.is_empty()).then_some(cells)
        })
        .await?;
        ensure!(
            cells.iter().any(|c| c == "+200m draining") && cells.iter().any(|c| c == "+2 draining"),
            "member1's draining cells: {cells:?}"
        );
        let path = browser::screenshot(
            &b,
            &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots"),
            "quota-failover.png",
        )
        .await?;
        eprintln!(
            "    ✓ member1: Draining, {cells:?}; screenshot {}",
            path.display()
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;
    let _ = b.close().await;
    drop(driver);
    let _ = std::fs::remove_dir_all(&profile);
    res
}

/// Whether member `cluster` shows `want` draining.
fn draining_is(q: &KarmadaQuota, cluster: &str, want: &[(&str, &str)]) -> bool {
    cluster_usage(q, cluster)
        .and_then(|c| c.draining.as_ref())
        .is_some_and(|d| has(d, want))
}

/// Whether no member shows anything draining.
fn nothing_drains(q: &KarmadaQuota) -> bool {
    q.status.as_ref().is_some_and(|s| {
        s.clusters
            .iter()
            .all(|c| c.draining.is_none() && !c.draining_unknown)
    })
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_failover_shows_its_draining_replicas_is_never_refused_and_counts_only_under_count()
-> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    member_apis(env, 2)?;
    let test_ns = TestNs::new(&client, "failover::draining").await?;
    let ns_name = test_ns.name().to_owned();
    let members = env.member_clients()?;
    for m in &members {
        ensure_namespace(m, &ns_name).await?;
    }
    let webhook = Webhook::start(env).await?;
    let _registration =
        Registration::register(&client, &webhook.url(), &[&ns_name], &[&webhook]).await?;
    let ctl = Controller::builder()
        .namespace(&ns_name)
        .env_members(env)
        .start(env)
        .await?;
    step(&format!(
        "[Setup] webhook {} and controller (admin {}) for {ns_name}",
        webhook.url(),
        ctl.admin_url()
    ));
    let (c, ns) = (&client, ns_name.as_str());

    // 500m: room for one more 100m replica beside web's 400m, unless the draining 200m
    // count. observedLimit: Ignore, so a refusal below is `used` alone (the members run
    // 600m while the old replicas drain, which Enforce would refuse increases on too).
    step(
        "[Create] quota q: requests.cpu 500m, pods 6, observedLimit Ignore (drainingReplicas absent: Show)",
    );
    let mut q = quota(ns, "q", &[("requests.cpu", "500m"), ("pods", "6")]);
    q["spec"]["observedLimit"] = serde_json::json!("Ignore");
    accepts(c, &q).await?;
    wait_synced(c, ns, "q").await?;
    wait_until_status_seen(
        c,
        &Rb::deployment("probe", 1)
            .request("cpu", "1m")
            .clusters(&[("member1", 1)])
            .json(ns),
    )
    .await?;

    step("[Create] web: 4 × 100m, member1: 2, member2: 2; the members run its pods");
    expect_admitted(create(c, &web(&[("member1", 2), ("member2", 2)], &[]).json(ns)).await?)?;
    for i in 0..2 {
        apply_json(&members[0], ns, pod(ns, &format!("web-old-{i}"), "100m")).await?;
        apply_json(&members[1], ns, pod(ns, &format!("web-{i}"), "100m")).await?;
    }
    let before = wait(
        c,
        ns,
        "used 400m / 4 pods, no reservation, each member observed 200m, Drift=False",
        |q| {
            used_is(q, &[("requests.cpu", "400m"), ("pods", "4")])
                && q.status
                    .as_ref()
                    .is_some_and(|s| karmada_quota_e2e::quota_status::pending(s).is_empty())
                && cluster_observed_is(q, "member1", &[("requests.cpu", "200m")])
                && cluster_observed_is(q, "member2", &[("requests.cpu", "200m")])
                && condition_is(q, CONDITION_DRIFT, "False")
                && nothing_drains(q)
        },
    )
    .await?;
    let drift_since = condition(&before, CONDITION_DRIFT)
        .map(|d| d.last_transition_time.clone())
        .context("no Drift condition")?;

    step(
        "[Failover] taint manager: member1 leaves clusters, a task holds its 2 replicas → admitted",
    );
    let evicted = web(&[("member2", 2)], &[("member1", Some(2))]).json(ns);
    let stored = expect_admitted(update(c, &evicted).await?)?;
    ensure!(
        stored.data["spec"]["gracefulEvictionTasks"][0]["replicas"] == 2,
        "the apiserver kept the task as written: {}",
        stored.data["spec"]
    );
    step("[Failover] scheduler: member2 runs all 4 while member1 drains → admitted");
    expect_admitted(update(c, &web(&[("member2", 4)], &[("member1", Some(2))]).json(ns)).await?)?;
    for i in 2..4 {
        apply_json(&members[1], ns, pod(ns, &format!("web-{i}"), "100m")).await?;
    }
    let u = quota_usage(c, ns, "q").await?;
    ensure!(
        u.reservations.is_empty(),
        "the failover reserved something: {:?}",
        u.reservations
    );
    let shown = wait(
        c,
        ns,
        "member1 shows 200m / 2 pods draining (and runs them); used unchanged (Show); member2 placed and runs 400m",
        |q| {
            draining_is(q, "member1", &[("requests.cpu", "200m"), ("pods", "2")])
                && cluster_used_is(q, "member1", &[("requests.cpu", "0"), ("pods", "0")])
                && cluster_used_is(q, "member2", &[("requests.cpu", "400m"), ("pods", "4")])
                && cluster_observed_is(q, "member1", &[("requests.cpu", "200m")])
                && cluster_observed_is(q, "member2", &[("requests.cpu", "400m")])
                && used_is(q, &[("requests.cpu", "400m"), ("pods", "4")])
        },
    )
    .await?;
    let member2 = cluster_usage(&shown, "member2").context("member2")?;
    ensure!(
        member2.draining.is_none(),
        "member2 drains nothing: {member2:?}"
    );
    // member1 runs 2 pods where Karmada placed none: expected while they drain, not drift.
    let drift = condition(&shown, CONDITION_DRIFT).context("no Drift condition")?;
    ensure!(
        drift.status == "False" && drift.last_transition_time == drift_since,
        "Drift flapped on the failover: {drift:?}"
    );
    let events = quota_events(c, ns, "q").await?;
    ensure!(
        !events.iter().any(|(r, _)| r == "DriftDetected"),
        "a DriftDetected event for draining replicas: {events:?}"
    );
    eprintln!("    ✓ Drift stayed False since {}", drift_since.0);

    step("[Dashboard] the quota page shows member1 draining (a browser; screenshot)");
    dashboard_shows_draining(&ctl.dashboard_url(), ns).await?;

    step("[Show] one more 100m replica fits (400m + 100m ≤ 500m): a dry-run create is admitted");
    let more = Rb::deployment("more", 1)
        .request("cpu", "100m")
        .clusters(&[("member2", 1)])
        .json(ns);
    expect_admitted(create_with(c, &more, true).await?)?;

    step("[Count] spec.drainingReplicas: Count → used includes the draining 200m / 2 pods");
    patch_spec(c, ns, serde_json::json!({"drainingReplicas": "Count"})).await?;
    wait(
        c,
        ns,
        "used 600m / 6 pods (400m placed + 200m draining)",
        |q| {
            used_is(q, &[("requests.cpu", "600m"), ("pods", "6")])
                && draining_is(q, "member1", &[("requests.cpu", "200m")])
        },
    )
    .await?;
    let status = refused_once_seen(c, &more).await?;
    eprintln!(
        "    ✓ the webhook refuses 100m more now ({}): {}",
        status.code, status.message
    );

    step("[Count] Karmada's next write of the binding (unchanged charge) is admitted over hard");
    expect_admitted(update(c, &web(&[("member2", 4)], &[("member1", Some(2))]).json(ns)).await?)?;
    step("[Count] …and so is a task without a replica count (unknown draining)");
    expect_admitted(update(c, &web(&[("member2", 4)], &[("member1", None)]).json(ns)).await?)?;
    wait(
        c,
        ns,
        "member1 drains an unknown count: listed, not counted",
        |q| {
            cluster_usage(q, "member1").is_some_and(|m| m.draining_unknown && m.draining.is_none())
                && used_is(q, &[("requests.cpu", "400m")])
        },
    )
    .await?;
    expect_admitted(update(c, &web(&[("member2", 4)], &[("member1", Some(2))]).json(ns)).await?)?;
    wait(c, ns, "used back at 600m with the task's 2 replicas", |q| {
        used_is(q, &[("requests.cpu", "600m"), ("pods", "6")])
    })
    .await?;
    refused_once_seen(c, &more).await?;

    step("[Count] the same 100m more is refused (not a dry run): the draining replicas count");
    let refused = create(c, &more).await?;
    let status = refused
        .err()
        .context("`more` was admitted while the draining replicas hold the quota")?;
    eprintln!("    ✓ refused ({}): {}", status.code, status.message);
    ensure!(
        status.code == 403 && status.message.contains("exceeded quota"),
        "{status:?}"
    );
    step("[Count] scaling web up to 5 is refused too");
    let scaled = update(c, &web(&[("member2", 5)], &[("member1", Some(2))]).json(ns))
        .await?
        .err()
        .context("web scaled past hard while its old replicas drain")?;
    ensure!(scaled.code == 403, "{scaled:?}");

    step("[Done] the eviction completes: the old pods go, then the task → used 400m again");
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(members[0].clone(), ns);
    for i in 0..2 {
        pods.delete(
            &format!("web-old-{i}"),
            &DeleteParams::default().grace_period(0),
        )
        .await
        .with_context(|| format!("deleting member1 pod web-old-{i}"))?;
    }
    expect_admitted(update(c, &web(&[("member2", 4)], &[]).json(ns)).await?)?;
    wait(c, ns, "used 400m / 4 pods, nothing drains", |q| {
        used_is(q, &[("requests.cpu", "400m"), ("pods", "4")]) && nothing_drains(q)
    })
    .await?;

    test_ns.delete(&client).await
}
