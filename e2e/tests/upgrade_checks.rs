//! The upgrade test's checks are not vacuous: the same load and sampler
//! (`karmada_quota_e2e::load`), run against a webhook with no controller, must report a
//! reservation removed from a quota's status as lost, a `used` pushed over hard as an
//! over-commit, and creates refused because the webhook is gone as refusals that are not
//! the quota's. Without these, a passing upgrade test could mean a checker that never looks.

use std::time::Duration;

use anyhow::{Result, ensure};
use karmada_quota_e2e::load::{CPU, Load, LoadSpec, Sampler, Verdict};
use karmada_quota_e2e::replace_quota_status;
use karmada_quota_e2e::setup::{WebhookSetup, step, synced_quota};
use karmada_quota_e2e::wait_for;
use karmada_quota_e2e::webhook::{Rb, quota_usage, seed_used, wait_until_status_seen};

const SETTLE: Duration = Duration::from_secs(20);

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn the_sampler_reports_a_lost_reservation_an_overcommit_and_a_refusal_not_for_the_quota()
-> Result<()> {
    let s = WebhookSetup::new("upgrade_checks").await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    step("[Create] KarmadaQuota compute: cpu 4, synced; no controller (reservations stay)");
    synced_quota(&c, &ns, "compute", &[(CPU, "4"), ("pods", "1000")]).await?;
    wait_until_status_seen(
        &c,
        &Rb::deployment("probe", 1).request("cpu", "100m").json(&ns),
    )
    .await?;

    let load = Load::start(
        c.clone(),
        LoadSpec {
            ns: ns.clone(),
            cluster: "member1".to_owned(),
            period: Duration::from_millis(200),
            max_creates: 200,
            small_cpu: "100m".to_owned(),
            big_every: 4,
            big_cpu: "5".to_owned(),
            keep_live: 1000,
            scale_every: 0,
        },
    );
    let sampler = Sampler::start(
        c.clone(),
        &ns,
        "compute",
        None,
        load.churn_lock(),
        Duration::from_millis(100),
    );
    wait_for("3 admitted creates", SETTLE, || async {
        let n = load
            .attempts()
            .iter()
            .filter(|a| a.verdict == Verdict::Admitted)
            .count();
        (n >= 3).then_some(())
    })
    .await?;

    step("[Attack] one pending reservation removed from the status: a lost charge");
    replace_quota_status(&c, &ns, "compute", "dropping a reservation", |_, st| {
        st.reservations.pop();
    })
    .await?;
    let lost_at = load.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;

    step("[Attack] status.used pushed to 5 cpu, over hard 4: an over-commit");
    let reservations = quota_usage(&c, &ns, "compute").await?.reservations;
    seed_used(&c, &ns, "compute", &[(CPU, "5"), ("pods", "0")]).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure!(
        !reservations.is_empty(),
        "no reservation left to check the over-commit against"
    );

    step(
        "[Attack] the webhook killed: the apiserver refuses (failurePolicy Fail), not for the quota",
    );
    let WebhookSetup {
        client,
        namespaces,
        webhook,
        registration,
        ..
    } = s;
    // From the moment the kill is sent: a create in flight then meets the dying process
    // (EOF) before kill() has reaped it.
    let killed_at = load.elapsed();
    webhook.kill().await?;
    wait_for(
        "a create refused by the missing webhook",
        SETTLE,
        || async {
            load.attempts()
                .iter()
                .any(|a| a.answered > killed_at && matches!(a.verdict, Verdict::Refused { .. }))
                .then_some(())
        },
    )
    .await?;
    let attempts = load.stop().await?;
    let samples = sampler.stop().await?;
    registration.cleanup().await?;
    for n in namespaces {
        n.delete(&client).await?;
    }

    eprintln!(
        "{} samples, violations:\n  {}",
        samples.count,
        samples.violations.join("\n  ")
    );
    ensure!(
        samples.violations.iter().any(|v| v.contains("lost:")),
        "the sampler did not report the reservation removed at {lost_at:.1?}"
    );
    ensure!(
        samples.violations.iter().any(|v| v.contains("overcommit:")),
        "the sampler did not report used over hard"
    );
    let refused: Vec<_> = attempts
        .iter()
        .filter(|a| matches!(a.verdict, Verdict::Refused { .. } | Verdict::Error(_)))
        .collect();
    // A create sent before the kill and answered after it met the dying process (EOF):
    // what counts is when the refusal came.
    ensure!(
        !refused.is_empty() && refused.iter().all(|a| a.answered > killed_at),
        "refusals that are not the quota's: {refused:?} (the webhook was killed at {killed_at:?})"
    );
    eprintln!("refused without the webhook: {:?}", refused[0].verdict);
    ensure!(
        attempts
            .iter()
            .any(|a| a.big && a.verdict == Verdict::QuotaRefused),
        "the bindings over hard were not refused for the quota: {attempts:?}"
    );
    Ok(())
}
