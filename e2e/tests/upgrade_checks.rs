//! The upgrade test's checks are not vacuous: the same load and sampler
//! (`karmada_quota_e2e::load`), run against a webhook with no controller, must report a
//! reservation batch deleted before any fold as lost, a binding stored past the webhook over
//! hard as an over-commit, and creates refused because the webhook is gone as refusals that are not
//! the quota's. Without these, a passing upgrade test could mean a checker that never looks.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_crds::KarmadaQuotaReservation;
use karmada_quota_e2e::load::{CPU, Load, LoadSpec, Sampler, Verdict};
use karmada_quota_e2e::setup::{WebhookSetup, step, synced_quota};
use karmada_quota_e2e::wait_for;
use karmada_quota_e2e::webhook::{NS_LABEL, Rb, create, wait_until_status_seen};
use kube::api::{Api, DeleteParams};
use kube::api::{Patch, PatchParams};
use serde_json::{Value, json};

const SETTLE: Duration = Duration::from_secs(20);

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn the_sampler_reports_a_lost_reservation_an_overcommit_and_a_refusal_not_for_the_quota()
-> Result<()> {
    let s = WebhookSetup::new("upgrade_checks").await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    step("[Create] KarmadaQuota compute: cpu 4, synced; no controller (batches stay)");
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
    let batch_ns = s.env.reservation_namespace().to_owned();
    let sampler = Sampler::start(
        c.clone(),
        (&ns, "compute"),
        None,
        &batch_ns,
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

    step("[Attack] the oldest reservation batch deleted, never folded: a lost charge");
    let batches = Api::<KarmadaQuotaReservation>::namespaced(c.clone(), &batch_ns);
    let mut names: Vec<String> = batches
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect();
    names.sort();
    let oldest = names.first().cloned().unwrap_or_default();
    batches.delete(&oldest, &DeleteParams::default()).await?;
    let lost_at = load.elapsed();
    tokio::time::sleep(Duration::from_millis(500)).await;

    step("[Attack] a 5-cpu binding (over hard 4) stored past the webhook: an over-commit");
    let namespaces_api = Api::<Namespace>::all(c.clone());
    let label = |value: Value| json!({"metadata": {"labels": {NS_LABEL: value}}});
    let registered = namespaces_api
        .get(&ns)
        .await?
        .metadata
        .labels
        .unwrap_or_default();
    let registered = registered.get(NS_LABEL).cloned().unwrap_or_default();
    namespaces_api
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(label(Value::Null)),
        )
        .await?;
    let bypass = Rb::deployment("bypass", 1).request("cpu", "5").json(&ns);
    wait_for(
        "a create the webhook is no longer asked about",
        SETTLE,
        || async { create(&c, &bypass).await.ok()?.ok().map(drop) },
    )
    .await?;
    namespaces_api
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(label(Value::String(registered))),
        )
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

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
        "the sampler did not report the binding stored over hard"
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
