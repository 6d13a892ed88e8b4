//! The controller with `--reservation-store=batches` against a real apiserver: it folds
//! the reservation batches (KarmadaQuotaReservation, written here by hand as the webhook
//! would) into the quotas they name, records `status.foldedThrough`, and deletes the
//! batches every named quota folded — never the newest.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::KarmadaQuotaReservation;
use karmada_quota_crds::reservation_batch::{BatchEntry, BatchQuota, batch_name, batch_object};
use karmada_quota_e2e::controller::{
    Controller, reservation, reservation_of, used_is, wait_quota, wait_synced,
};
use karmada_quota_e2e::webhook::{Rb, create, expect_admitted, quota, update};
use karmada_quota_e2e::{Env, TestNs, accepts, wait_for};
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// "Within seconds": how long the status may take to follow a change.
const FOLLOW: Duration = Duration::from_secs(10);

fn step(s: &str) {
    eprintln!("{s}");
}

/// Batch `sequence` in `batch_ns`: entries (binding name, uid, generation, cpu) for quota
/// `ns/q`, expiring in 5 minutes.
async fn create_batch(
    client: &Client,
    batch_ns: &str,
    sequence: u64,
    ns: &str,
    entries: &[(&str, &str, i64, &str)],
) -> Result<()> {
    let entries = entries
        .iter()
        .map(|(name, uid, generation, cpu)| BatchEntry {
            quota: BatchQuota {
                namespace: Some(ns.to_owned()),
                name: "q".into(),
            },
            reservation: reservation(
                name,
                uid,
                *generation,
                &[("requests.cpu", cpu)],
                Duration::from_secs(300),
            ),
        })
        .collect();
    Api::<KarmadaQuotaReservation>::namespaced(client.clone(), batch_ns)
        .create(
            &PostParams::default(),
            &batch_object(batch_ns, sequence, entries),
        )
        .await
        .with_context(|| format!("creating batch {batch_ns}/{}", batch_name(sequence)))?;
    Ok(())
}

/// The names of the batches in `batch_ns`.
async fn batches(client: &Client, batch_ns: &str) -> Result<Vec<String>> {
    let list = Api::<KarmadaQuotaReservation>::namespaced(client.clone(), batch_ns)
        .list(&Default::default())
        .await
        .with_context(|| format!("listing the batches of {batch_ns}"))?;
    let mut names: Vec<String> = list.items.iter().map(ResourceExt::name_any).collect();
    names.sort();
    Ok(names)
}

fn folded_through(q: &KarmadaQuota) -> Option<u64> {
    q.status.as_ref().and_then(|s| s.folded_through)
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn the_controller_folds_batches_into_the_quotas_they_name_and_deletes_the_folded_ones()
-> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    let ns = TestNs::new(&client, "batches::quotas").await?;
    // The batches live in a namespace of their own, as the webhook's (the release's).
    let batch_ns = TestNs::new(&client, "batches::store").await?;
    let (t, b) = (ns.name(), batch_ns.name());
    let ctl = Controller::builder()
        .namespace(t)
        .clusters_from_api(false)
        .arg("--reservation-store=batches")
        .arg(format!("--reservation-namespace={b}"))
        .start(env)
        .await?;
    step(&format!("[Setup] controller for {t}, batches in {b}"));
    accepts(&client, &quota(t, "q", &[("requests.cpu", "10")])).await?;
    wait_synced(&client, t, "q").await?;
    let wait = |desc: &'static str, pred: fn(&KarmadaQuota) -> bool| {
        let client = client.clone();
        async move {
            let started = Instant::now();
            let q = wait_quota(&client, t, "q", desc, FOLLOW, pred).await?;
            eprintln!("    ✓ {desc} ({:.1?})", started.elapsed());
            anyhow::Ok(q)
        }
    };

    step("[Create] binding web: 2 × 500m (generation 1), folded into used as ever");
    let web = expect_admitted(
        create(
            &client,
            &Rb::deployment("web", 2)
                .request("cpu", "500m")
                .clusters(&[("member1", 2)])
                .json(t),
        )
        .await?,
    )?;
    let web_uid = web.uid().context("binding without uid")?;
    wait("used = 1 cpu", |q| used_is(q, &[("requests.cpu", "1")])).await?;

    step(
        "[Create] batch 1: web's scale-up to generation 2 (+500m) and api (never created); batch 2: db (not created yet)",
    );
    let api_uid = format!("api-{t}");
    let db_uid = format!("db-{t}");
    create_batch(
        &client,
        b,
        1,
        t,
        &[("web", &web_uid, 2, "500m"), ("api", &api_uid, 1, "2")],
    )
    .await?;
    create_batch(&client, b, 2, t, &[("db", &db_uid, 1, "1")]).await?;
    let q = wait(
        "foldedThrough = 2 with every unobserved entry carried",
        |q| {
            q.status.as_ref().and_then(|s| s.folded_through) == Some(2)
                && q.status.as_ref().is_some_and(|s| s.reservations.len() == 3)
        },
    )
    .await?;
    for uid in [&web_uid, &api_uid, &db_uid] {
        ensure!(
            reservation_of(&q, uid).is_some(),
            "{uid} not carried: {:?}",
            q.status
        );
    }
    ensure!(
        used_is(&q, &[("requests.cpu", "1")]),
        "used moved before web's scale-up was observed: {:?}",
        q.status
    );

    step("the folded batch 1 is deleted; batch 2, the newest, stays");
    wait_for("batch 1 deleted", FOLLOW, || async {
        let names = batches(&client, b).await.ok()?;
        (names == [batch_name(2)]).then_some(())
    })
    .await?;

    step("[Update] scale web to 3 (generation 2): observed, its entry goes into used");
    expect_admitted(
        update(
            &client,
            &Rb::deployment("web", 3)
                .request("cpu", "500m")
                .clusters(&[("member1", 3)])
                .json(t),
        )
        .await?,
    )?;
    let q = wait(
        "used = 1500m, web's entry gone, api and db still carried",
        |q| {
            used_is(q, &[("requests.cpu", "1500m")])
                && q.status.as_ref().is_some_and(|s| s.reservations.len() == 2)
        },
    )
    .await?;
    ensure!(reservation_of(&q, &web_uid).is_none(), "{:?}", q.status);
    ensure!(
        reservation_of(&q, &api_uid).is_some() && reservation_of(&q, &db_uid).is_some(),
        "{:?}",
        q.status
    );

    step("[Create] batch 3: late (not created); then 2 goes, and 3 stays as the newest");
    let late_uid = format!("late-{t}");
    create_batch(&client, b, 3, t, &[("late", &late_uid, 1, "100m")]).await?;
    let q = wait("foldedThrough = 3", |q| folded_through(q) == Some(3)).await?;
    ensure!(reservation_of(&q, &late_uid).is_some(), "{:?}", q.status);
    wait_for("batch 2 deleted", FOLLOW, || async {
        let names = batches(&client, b).await.ok()?;
        (names == [batch_name(3)]).then_some(())
    })
    .await?;
    // Several sweeps later (one a second) the newest is still there.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        batches(&client, b).await? == [batch_name(3)],
        "the newest batch must stay: {:?}",
        batches(&client, b).await?
    );
    let deleted = ctl
        .metric("kq_controller_batches_deleted_total", &[])
        .await?;
    let held = ctl.metric("kq_controller_batches_held", &[]).await?;
    ensure!((deleted, held) == (2, 1), "deleted {deleted}, held {held}");

    drop(ctl);
    ns.delete(&client).await?;
    batch_ns.delete(&client).await
}
