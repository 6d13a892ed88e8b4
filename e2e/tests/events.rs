//! Denials people see, against a real apiserver: a binding refused again and again (as
//! Karmada's detector retries it) leaves one aggregated Warning event on its Deployment and
//! one on the KarmadaQuota, shown by `kubectl describe`, and rate-limited info lines in the
//! webhook's log.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use k8s_openapi::api::events::v1::Event;
use karmada_quota_e2e::webhook::{
    Rb, Registration, Webhook, binding_denied, create, expect_refused, metric_sum, quota,
    seed_used, wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, accepts, apply_json, try_wait_for};
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};
use serde_json::json;

fn step(s: &str) {
    eprintln!("{s}");
}

/// The webhook's event interval in this test: short, so the test sees a patch or two.
const EVENT_INTERVAL: Duration = Duration::from_secs(2);
/// The webhook's denial log interval in this test.
const LOG_INTERVAL: Duration = Duration::from_secs(5);
/// How many times the detector "retries" the refused binding.
const RETRIES: u32 = 12;
/// Gap between two retries.
const RETRY_GAP: Duration = Duration::from_millis(250);
/// The last patch goes out at most one interval after the last denial; headroom for a
/// loaded machine.
const EVENT_TIMEOUT: Duration = Duration::from_secs(30);

/// The denial events in `ns` about `kind`/`name`.
async fn events_about(c: &Client, ns: &str, kind: &str, name: &str) -> Result<Vec<Event>> {
    let list = Api::<Event>::namespaced(c.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing events.k8s.io events in {ns}"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| {
            e.regarding
                .as_ref()
                .is_some_and(|r| r.kind.as_deref() == Some(kind) && r.name.as_deref() == Some(name))
                && e.reporting_controller.as_deref() == Some("karmada-quota-webhook")
        })
        .collect())
}

fn series_count(e: &Event) -> i32 {
    e.series.as_ref().map_or(1, |s| s.count)
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn repeated_denials_leave_one_counted_event_on_the_deployment_and_the_quota() -> Result<()> {
    let env = Env::get().await?;
    let c = env.client()?;
    let ns = TestNs::new(&c, "events_on_denial").await?;
    let ns_name = ns.name().to_owned();
    let ns_ = ns_name.as_str();
    let mut webhook = Webhook::builder()
        .arg(format!("--event-interval={}s", EVENT_INTERVAL.as_secs()))
        .arg(format!("--denial-log-interval={}s", LOG_INTERVAL.as_secs()))
        .start(env)
        .await?;
    let registration = Registration::register(&c, &webhook.url(), &[ns_], &[&webhook]).await?;

    step("[Create] Deployment web (apps/v1): 2 replicas × 1 cpu, the binding's template");
    let deployment = apply_json(
        &c,
        ns_,
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": ns_},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "web",
                        "image": "nginx",
                        "resources": {"requests": {"cpu": "1"}}
                    }]}
                }
            }
        }),
    )
    .await?;
    let deployment_uid = deployment
        .uid()
        .ok_or_else(|| anyhow!("the Deployment has no uid"))?;

    step("[Create] KarmadaQuota q: requests.cpu=1, status.used requests.cpu=0");
    accepts(&c, &quota(ns_, "q", &[("requests.cpu", "1")])).await?;
    let q = seed_used(&c, ns_, "q", &[("requests.cpu", "0")]).await?;
    let quota_uid = q.uid().ok_or_else(|| anyhow!("the quota has no uid"))?;
    wait_until_status_seen(
        &c,
        &Rb::deployment("probe", 1).request("cpu", "100m").json(ns_),
    )
    .await?;

    step(&format!(
        "[Create ×{RETRIES}] ResourceBinding web-deployment (2 × 1 cpu) → refused each time"
    ));
    let mut binding = Rb::deployment("web-deployment", 2)
        .request("cpu", "1")
        .json(ns_);
    binding["spec"]["resource"]["name"] = json!("web");
    binding["spec"]["resource"]["uid"] = json!(deployment_uid);
    let message = "exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=0, \
                   limited: requests.cpu=1";
    let started = Instant::now();
    for _ in 0..RETRIES {
        expect_refused(&create(&c, &binding).await?, 403, &binding_denied(message))?;
        tokio::time::sleep(RETRY_GAP).await;
    }
    let retry_span = started.elapsed();
    let note = format!("ResourceBinding {ns_}/web-deployment denied: {message}");

    step("[Get] one QuotaExceeded event on Deployment web whose series.count reaches the retries");
    let want = i32::try_from(RETRIES)?;
    let on_deployment = try_wait_for(
        "the Deployment's event to count every retry",
        EVENT_TIMEOUT,
        || async {
            let evs = events_about(&c, ns_, "Deployment", "web").await?;
            ensure!(
                evs.len() <= 1,
                "{} events on the Deployment, want one",
                evs.len()
            );
            Ok(evs.into_iter().find(|e| series_count(e) >= want))
        },
    )
    .await?;
    assert_eq!(series_count(&on_deployment), want, "{on_deployment:#?}");
    assert_eq!(on_deployment.reason.as_deref(), Some("QuotaExceeded"));
    assert_eq!(on_deployment.type_.as_deref(), Some("Warning"));
    assert_eq!(on_deployment.note.as_deref(), Some(note.as_str()));
    let regarding = on_deployment.regarding.clone().unwrap_or_default();
    assert_eq!(regarding.api_version.as_deref(), Some("apps/v1"));
    assert_eq!(regarding.uid.as_deref(), Some(deployment_uid.as_str()));
    assert_eq!(
        on_deployment
            .related
            .as_ref()
            .and_then(|r| r.name.as_deref()),
        Some("q")
    );

    step("[Get] one QuotaExceeded event on KarmadaQuota q, same note and count");
    let on_quota = try_wait_for(
        "the quota's event to count every retry",
        EVENT_TIMEOUT,
        || async {
            let evs = events_about(&c, ns_, "KarmadaQuota", "q").await?;
            ensure!(
                evs.len() <= 1,
                "{} events on the quota, want one",
                evs.len()
            );
            Ok(evs.into_iter().find(|e| series_count(e) >= want))
        },
    )
    .await?;
    assert_eq!(series_count(&on_quota), want);
    assert_eq!(on_quota.reason.as_deref(), Some("QuotaExceeded"));
    assert_eq!(on_quota.note.as_deref(), Some(note.as_str()));
    assert_eq!(
        on_quota.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some(quota_uid.as_str())
    );

    step(
        "[Metrics] writes bounded by the rate limit: 2 creates, ≤ 1 patch per series per interval",
    );
    let text = webhook.metrics().await?;
    let creates = metric_sum(&text, "kq_webhook_events_written_total", &["op=\"create\""]);
    let patches = metric_sum(&text, "kq_webhook_events_written_total", &["op=\"patch\""]);
    let aggregated = metric_sum(&text, "kq_webhook_events_aggregated_total", &[]);
    // Per series: patches only at interval boundaries while denials arrive, plus the last.
    let per_series = retry_span.as_secs_f64() / EVENT_INTERVAL.as_secs_f64() + 2.0;
    step(&format!(
        "    {creates} creates, {patches} patches, {aggregated} denials aggregated over {retry_span:?}"
    ));
    assert_eq!(creates, 2, "{text}");
    ensure!(
        patches >= 2 && (patches as f64) <= 2.0 * per_series,
        "{patches} patches for 2 series over {retry_span:?} (interval {EVENT_INTERVAL:?})"
    );
    assert_eq!(aggregated, 2 * (u64::from(RETRIES) - 1));
    assert_eq!(
        metric_sum(&text, "kq_webhook_events_dropped_total", &[]),
        0,
        "{text}"
    );

    step("[kubectl describe] deployment web shows the event with its count");
    let described = env
        .kubectl(&["describe", "deployment", "web", "-n", ns_])
        .await?;
    let line = described
        .lines()
        .find(|l| l.contains("QuotaExceeded"))
        .ok_or_else(|| anyhow!("no QuotaExceeded event in:\n{described}"))?;
    for fragment in [
        "Warning",
        &format!("(x{RETRIES} over"),
        "karmada-quota-webhook",
        &note,
    ] {
        ensure!(
            line.contains(fragment),
            "{fragment:?} missing from the event line {line:?}"
        );
    }
    step(&format!("    {}", line.trim()));
    let described = env
        .kubectl(&["describe", "karmadaquota", "q", "-n", ns_])
        .await?;
    ensure!(
        described.contains("QuotaExceeded") && described.contains(&format!("(x{RETRIES} over")),
        "kubectl describe karmadaquota shows no counted event:\n{described}"
    );

    step("[Log] the denial is logged at info, rate-limited per binding");
    let log = std::fs::read_to_string(webhook.binary().log_path())?;
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| {
            l.contains(" INFO ")
                && l.contains(&format!("ResourceBinding denied: {message}"))
                && l.contains("web-deployment")
                && l.contains("dry_run=false")
        })
        .collect();
    let first = lines
        .first()
        .ok_or_else(|| anyhow!("no denial line in the webhook's log:\n{log}"))?;
    for fragment in [ns_, "quota=q", "reason=QuotaExceeded", "code=403"] {
        ensure!(
            first.contains(fragment),
            "{fragment:?} missing from {first:?}"
        );
    }
    let max_lines = (retry_span.as_secs_f64() / LOG_INTERVAL.as_secs_f64()).ceil() as usize + 1;
    ensure!(
        lines.len() <= max_lines,
        "{} denial lines for {RETRIES} denials over {retry_span:?}; at most {max_lines} expected",
        lines.len()
    );
    let suppressed = metric_sum(&text, "kq_webhook_denial_logs_suppressed_total", &[]);
    ensure!(
        suppressed as usize >= RETRIES as usize - max_lines,
        "only {suppressed} log lines suppressed"
    );

    registration.cleanup().await?;
    drop(webhook);
    ns.delete(&c).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn an_event_the_api_refuses_changes_no_decision() -> Result<()> {
    let env = Env::get().await?;
    let c = env.client()?;
    let ns = TestNs::new(&c, "events_refused").await?;
    let ns_name = ns.name().to_owned();
    let ns_ = ns_name.as_str();
    let mut webhook = Webhook::builder()
        .arg("--event-interval=1s")
        .start(env)
        .await?;
    let registration = Registration::register(&c, &webhook.url(), &[ns_], &[&webhook]).await?;

    step("[Create] KarmadaQuota q: requests.cpu=1, status.used requests.cpu=0");
    accepts(&c, &quota(ns_, "q", &[("requests.cpu", "1")])).await?;
    seed_used(&c, ns_, "q", &[("requests.cpu", "0")]).await?;
    wait_until_status_seen(
        &c,
        &Rb::deployment("probe", 1).request("cpu", "100m").json(ns_),
    )
    .await?;

    step(
        "[Create ×3] a binding whose template's name makes an event name the API refuses \
         (`ghost..deployment`: not a DNS subdomain) → 403 each time",
    );
    let mut binding = Rb::deployment("ghost-deployment", 2)
        .request("cpu", "1")
        .json(ns_);
    // Not a template in another namespace: the webhook writes no event outside the
    // binding's namespace (docs/security/bounds.md), so that would not reach the API.
    binding["spec"]["resource"]["name"] = json!("ghost..deployment");
    let message = "exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=0, \
                   limited: requests.cpu=1";
    for _ in 0..3 {
        expect_refused(&create(&c, &binding).await?, 403, &binding_denied(message))?;
    }

    step("[Metrics] the template's event failed and was counted; the quota's was written");
    let failed = try_wait_for(
        "the failed event write to be counted",
        EVENT_TIMEOUT,
        || async {
            let text = webhook.metrics().await?;
            let n = metric_sum(&text, "kq_webhook_events_failed_total", &["op=\"create\""]);
            Ok::<_, anyhow::Error>((n >= 1).then_some(n))
        },
    )
    .await?;
    ensure!(failed >= 1);
    let on_quota = try_wait_for("the quota's event", EVENT_TIMEOUT, || async {
        Ok::<_, anyhow::Error>(events_about(&c, ns_, "KarmadaQuota", "q").await?.pop())
    })
    .await?;
    assert_eq!(on_quota.reason.as_deref(), Some("QuotaExceeded"));

    step("[Create] a fitting binding is still admitted, and the failure is logged as a warning");
    let small = Rb::deployment("small", 1).request("cpu", "500m").json(ns_);
    ensure!(
        create(&c, &small).await?.is_ok(),
        "a fitting binding was refused after an event failure"
    );
    let log = std::fs::read_to_string(webhook.binary().log_path())?;
    ensure!(
        log.lines()
            .any(|l| l.contains(" WARN ") && l.contains("cannot write a denial event")),
        "no warning about the failed event write in:\n{log}"
    );

    registration.cleanup().await?;
    drop(webhook);
    ns.delete(&c).await?;
    Ok(())
}
