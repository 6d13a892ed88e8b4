//! Attacks on the webhook's internal bounds, through the real apiserver
//! (docs/security.md, "The controls"): what a review can make it keep, log, or decide against.
//!
//! - 60 dry-run ResourceBindings whose template `apiVersion` is 1 MB (the apiserver does
//!   not validate a field inside a spec): the plural resolver must not cache or log them
//!   whole. Before the fix: +132 MB RSS, never freed, and 120 MB of log.
//! - 40 dry-run PropagationPolicies whose selector `apiVersion` is 1 MB: the policy check's
//!   kind cache likewise (before: +50 MB, never freed).
//! - The webhook's watches cut (a TCP proxy between it and the apiserver, stopped): /readyz
//!   turns 503 within `--max-cache-staleness` (+ slack), a binding is refused while stale,
//!   and both recover once the proxy listens again.
//!
//! Memory is read as VmRSS of the webhook process (/proc/<pid>/status) before and after;
//! the log as the size of its file.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use karmada_quota_e2e::proxy::apiserver_proxy;
use karmada_quota_e2e::setup::{WebhookSetup, step, synced_quota};
use karmada_quota_e2e::webhook::{
    Rb, Registration, Webhook, create, create_with, expect_admitted, wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, http_get, wait_for};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::json;

/// Size of the forged apiVersions.
const HUGE: usize = 1 << 20;
/// Reviews sent before the first measurement, so one-time allocations (TLS buffers, the
/// allocator's first arenas for 1 MB bodies) are not counted as growth.
const WARMUP: usize = 5;
/// Largest RSS growth accepted over the flood: the bodies are transient; before the fix
/// the binding flood alone grew it by ~132 MB.
const MAX_RSS_GROWTH: u64 = 16 << 20;
/// Largest log growth accepted over the flood: clipped lines, a few hundred bytes each
/// (before: 2 MB per review).
const MAX_LOG_GROWTH: u64 = 256 << 10;

/// VmRSS of process `pid`, in bytes.
fn rss(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS line")?;
    Ok(kb * 1024)
}

fn file_len(path: &Path) -> Result<u64> {
    Ok(std::fs::metadata(path)
        .with_context(|| format!("stat {}", path.display()))?
        .len())
}

/// A group-version of `HUGE` bytes, distinct per `i` (each one a cache miss).
fn huge_api_version(i: usize) -> String {
    let prefix = format!("g{i}.");
    format!("{prefix}{}/v1", "x".repeat(HUGE - prefix.len() - 3))
}

/// (RSS, log size) of the setup's webhook now.
fn measure(s: &mut WebhookSetup) -> Result<(u64, u64)> {
    let bin = s.webhook.binary();
    let pid = bin.pid().context("the webhook exited")?;
    Ok((rss(pid)?, file_len(bin.log_path())?))
}

/// Reports the RSS and log growth of `what`, and fails when either passes its bound.
fn within_bounds(what: &str, before: (u64, u64), after: (u64, u64)) -> Result<()> {
    let rss_growth = after.0.saturating_sub(before.0);
    let log_growth = after.1.saturating_sub(before.1);
    step(&format!(
        "[Measure] {what}: RSS {:.1} → {:.1} MiB (+{:.1} MiB), log +{} KiB",
        before.0 as f64 / 1048576.0,
        after.0 as f64 / 1048576.0,
        rss_growth as f64 / 1048576.0,
        log_growth / 1024
    ));
    ensure!(
        rss_growth < MAX_RSS_GROWTH,
        "RSS grew by {rss_growth} bytes (bound {MAX_RSS_GROWTH})"
    );
    ensure!(
        log_growth < MAX_LOG_GROWTH,
        "the log grew by {log_growth} bytes (bound {MAX_LOG_GROWTH})"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn huge_template_api_versions_grow_neither_the_webhooks_memory_nor_its_log() -> Result<()> {
    let mut s = WebhookSetup::new("bounds_plurals").await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    step("[Create] KarmadaQuota q: requests.cpu=100 (so the template's kind is resolved)");
    synced_quota(&c, &ns, "q", &[("requests.cpu", "100")]).await?;
    let probe = Rb::deployment("probe", 1).request("cpu", "1").json(&ns);
    wait_until_status_seen(&c, &probe).await?;

    let send = |i: usize| {
        let mut rb = Rb::deployment("web", 1).request("cpu", "1").json(&ns);
        rb["spec"]["resource"]["apiVersion"] = json!(huge_api_version(i));
        let c = c.clone();
        async move { create_with(&c, &rb, true).await }
    };
    for i in 0..WARMUP {
        // Not measured; what it answers is checked for the 60 below.
        let _ = send(i).await?;
    }
    let before = measure(&mut s)?;
    step("[Create] 60 dry-run ResourceBindings, template apiVersion 1 MB each, all distinct");
    let mut outcomes = Vec::with_capacity(60);
    for i in WARMUP..WARMUP + 60 {
        outcomes.push(send(i).await?);
    }
    let after = measure(&mut s)?;
    within_bounds("60 × 1 MB template apiVersion", before, after)?;
    for outcome in outcomes {
        let refused = outcome.err().context("a 1 MB apiVersion was admitted")?;
        ensure!(
            refused.code == 400
                && refused.message.contains(&format!(
                    "ResourceBinding {ns}/web: spec.resource.apiVersion"
                )),
            "refused, but not as a bad request naming the binding: {} {}",
            refused.code,
            refused.message.chars().take(300).collect::<String>()
        );
        ensure!(
            refused.message.len() < 2048,
            "the refusal repeats the value"
        );
    }

    step("[Create] a real binding still fits");
    expect_admitted(create(&c, &probe).await?)?;
    s.teardown().await
}

fn propagation_policies(c: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "PropagationPolicy");
    Api::namespaced_with(
        c.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "propagationpolicies"),
    )
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn huge_policy_selector_api_versions_grow_neither_the_webhooks_memory_nor_its_log()
-> Result<()> {
    let mut s = WebhookSetup::new("bounds_policies").await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    synced_quota(&c, &ns, "q", &[("requests.cpu", "100")]).await?;
    let api = propagation_policies(&c, &ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let send = |i: usize| {
        let policy: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": "PropagationPolicy",
            "metadata": {"name": "huge", "namespace": ns},
            "spec": {
                "resourceSelectors": [{"apiVersion": huge_api_version(i), "kind": "Widget"}],
                "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}}
            }
        }))
        .expect("a policy");
        let (api, dry_run) = (api.clone(), dry_run.clone());
        async move {
            api.create(&dry_run, &policy)
                .await
                .context("dry-run create of a PropagationPolicy")
        }
    };
    for i in 0..WARMUP {
        send(i).await?;
    }
    let before = measure(&mut s)?;
    step("[Create] 40 dry-run PropagationPolicies, selector apiVersion 1 MB each, all distinct");
    for i in WARMUP..WARMUP + 40 {
        // Allowed: the check is skipped (with a warning) for a kind that cannot exist.
        send(i).await?;
    }
    let after = measure(&mut s)?;
    within_bounds("40 × 1 MB policy selector apiVersion", before, after)?;
    s.teardown().await
}

/// The staleness bound the test runs the webhook with.
const MAX_STALENESS: Duration = Duration::from_secs(3);
/// Slack over [`MAX_STALENESS`] for turning unready: the readiness check's period (≤ 1 s)
/// and the time the cut takes to surface as a watch error.
const UNREADY_SLACK: Duration = Duration::from_secs(5);
/// How long recovery may take once the proxy listens again: the watch restart backoff
/// (≤ 10 s) and a fresh list.
const RECOVERY: Duration = Duration::from_secs(30);

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_webhook_whose_watches_fail_turns_unready_refuses_bindings_and_recovers() -> Result<()> {
    let env = Env::get().await?;
    let c = env.client()?;
    let ns = TestNs::new(&c, "bounds_stale").await?;
    let (mut proxy, kubeconfig) = apiserver_proxy(env, "bounds-stale").await?;
    step(&format!(
        "[Setup] webhook → proxy {} → apiserver {}; --max-cache-staleness={}s",
        proxy.url(),
        proxy.backend(),
        MAX_STALENESS.as_secs()
    ));
    let mut webhook = Webhook::builder()
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!(
            "--max-cache-staleness={}s",
            MAX_STALENESS.as_secs()
        ))
        .start(env)
        .await?;
    let registration =
        Registration::register(&c, &webhook.url(), &[ns.name()], &[&webhook]).await?;
    synced_quota(&c, ns.name(), "q", &[("requests.cpu", "10")]).await?;
    let first = Rb::deployment("first", 1)
        .request("cpu", "1")
        .json(ns.name());
    wait_until_status_seen(&c, &first).await?;
    expect_admitted(create(&c, &first).await?)?;

    step("[Fault] stop the proxy: every watch of the webhook fails");
    proxy.stop().await;
    let cut = Instant::now();
    wait_for("/readyz 503", MAX_STALENESS + UNREADY_SLACK, || async {
        (!webhook.is_ready().await).then_some(())
    })
    .await?;
    let unready_after = cut.elapsed();
    step(&format!("[Check] unready {unready_after:?} after the cut"));
    ensure!(
        unready_after >= MAX_STALENESS,
        "unready after {unready_after:?}, before the bound"
    );
    let (code, _) = http_get(webhook.admin_addr(), "/readyz").await?;
    ensure!(code == 503, "/readyz answered {code}");
    let metrics = webhook.metrics().await?;
    ensure!(
        metrics.contains("kq_webhook_cache_stale 1"),
        "no stale gauge: {metrics}"
    );

    step("[Create] a binding while stale: refused, retryable, saying why");
    let second = Rb::deployment("second", 1)
        .request("cpu", "1")
        .json(ns.name());
    match create(&c, &second).await? {
        Ok(_) => bail!("a binding was admitted against a stale quota view"),
        Err(s) => ensure!(
            s.code == 503 && s.message.contains("watch has failed"),
            "refused, but not as stale: {} {}",
            s.code,
            s.message
        ),
    }

    step("[Fault] start the proxy again: the watches recover");
    proxy.start_again().await?;
    webhook.wait_until("/readyz", RECOVERY).await?;
    step(&format!(
        "[Check] ready again {:?} after the cut",
        cut.elapsed()
    ));
    wait_for("the binding admitted again", RECOVERY, || async {
        create(&c, &second).await.ok()?.ok().map(|_| ())
    })
    .await?;

    registration.cleanup().await?;
    ns.delete(&c).await?;
    drop(webhook);
    Ok(())
}
