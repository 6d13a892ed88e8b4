//! The usage report against a real Prometheus (Debian's `prometheus`, from
//! `hack/tools.sh install`) scraping the controller every second on loopback: a known
//! usage for a fixed window with one change midway, then `kubectl karmada-quota report`
//! over that window must give the core-hours, average and peak that ran, within the scrape
//! resolution; the dashboard's Report page (`--dashboard-prometheus`) gives the same CSV.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, ensure};
use fantoccini::Locator;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_billing::query_value as encode;
use karmada_quota_e2e::browser::{self, Driver};
use karmada_quota_e2e::controller::{
    Controller, ensure_namespace, member_apis, used_is, wait_quota,
};
use karmada_quota_e2e::prometheus::{Prometheus, SCRAPE_INTERVAL};
use karmada_quota_e2e::webhook::{Rb, create, expect_admitted, quota, update};
use karmada_quota_e2e::{Binary, Env, TestNs, accepts, free_port, http_get_ok, metric_sum};
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

const PLUGIN: &str = "kubectl-karmada_quota";
const TEAM_LABEL: &str = "karmada-quota.io/team";
/// How long each usage level runs.
const PHASE: Duration = Duration::from_secs(12);
/// How long the controller may take to follow a change.
const FOLLOW: Duration = Duration::from_secs(15);

fn step(s: &str) {
    eprintln!("{s}");
}

fn now_secs() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Sleeps until Unix second `t`.
async fn sleep_until(t: f64) {
    let left = t - now_secs();
    if left > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(left)).await;
    }
}

async fn plugin(args: &[String]) -> Result<String> {
    let path = Binary::path(PLUGIN)?;
    let o = tokio::process::Command::new(&path)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .await
        .with_context(|| format!("running {}", path.display()))?;
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    ensure!(
        o.status.success(),
        "{PLUGIN} {args:?} exited {:?}: {stdout}{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    Ok(stdout)
}

/// Waits until the controller's own `/metrics` shows `value` for the series.
async fn wait_metric(c: &Controller, name: &str, labels: &[&str], value: u64) -> Result<()> {
    let started = Instant::now();
    loop {
        let text = c.metrics().await?;
        if metric_sum(&text, name, labels) == value {
            return Ok(());
        }
        ensure!(
            started.elapsed() < FOLLOW,
            "{name}{labels:?} did not reach {value} within {FOLLOW:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The member1 row of `resource`.
fn row<'a>(report: &'a Value, resource: &str) -> Result<&'a Value> {
    report["rows"]
        .as_array()
        .and_then(|rows| {
            rows.iter()
                .find(|r| r["resource"] == resource && r["cluster"] == "member1")
        })
        .with_context(|| format!("no member1 {resource} row in {report}"))
}

fn num(v: &Value, field: &str) -> Result<f64> {
    v[field]
        .as_f64()
        .with_context(|| format!("no number {field} in {v}"))
}

#[tokio::test]
#[ignore = "needs the loopback control plane and hack/tools.sh: make test runs it"]
async fn the_report_matches_the_usage_prometheus_scraped_from_the_controller() -> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    member_apis(env, 2)?;
    let ns = TestNs::new(&client, "report").await?;
    let n = ns.name().to_owned();
    let team = format!("billing-{}", &n[n.len().saturating_sub(5)..]);
    for m in env.member_clients()? {
        ensure_namespace(&m, &n).await?;
    }

    step(&format!(
        "[Update] namespace {n}: label {TEAM_LABEL}={team}"
    ));
    Api::<Namespace>::all(client.clone())
        .patch(
            &n,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {TEAM_LABEL: team}}})),
        )
        .await?;

    let prom_addr = std::net::SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let prom_url = format!("http://{prom_addr}");
    let ctl = Controller::builder()
        .namespace(&n)
        .env_members(env)
        .arg(format!("--dashboard-prometheus={prom_url}"))
        .start(env)
        .await?;
    step(&format!(
        "[Setup] controller {} (dashboard {}, Report page on {prom_url})",
        ctl.admin_url(),
        ctl.dashboard_url()
    ));

    step("[Create] quota q: requests.cpu 100, pods 100; binding web: 2 × 500m in member1");
    accepts(
        &client,
        &quota(&n, "q", &[("requests.cpu", "100"), ("pods", "100")]),
    )
    .await?;
    let web = |replicas| {
        Rb::deployment("web", replicas)
            .request("cpu", "500m")
            .clusters(&[("member1", replicas)])
            .json(&n)
    };
    expect_admitted(create(&client, &web(2)).await?)?;
    wait_quota(&client, &n, "q", "used = 1 cpu, 2 pods", FOLLOW, |q| {
        used_is(q, &[("requests.cpu", "1"), ("pods", "2")])
    })
    .await?;
    let ns_label = format!("namespace=\"{n}\"");
    wait_metric(
        &ctl,
        "kq_quota_cluster_used",
        &[&ns_label, "resource=\"requests.cpu\""],
        1,
    )
    .await?;

    step(&format!(
        "[Setup] prometheus on {prom_url} scraping the controller every {SCRAPE_INTERVAL:?}"
    ));
    let prom = Prometheus::start(env, "report", prom_addr, &[ctl.admin_addr()]).await?;
    prom.wait_value(
        &format!(
            "kq_quota_cluster_used{{{ns_label},resource=\"requests.cpu\",cluster=\"member1\"}}"
        ),
        "1",
        Duration::from_secs(20),
    )
    .await?;
    prom.wait_value(
        &format!("kq_namespace_labels{{{ns_label},label_karmada_quota_io_team=\"{team}\"}}"),
        "1",
        Duration::from_secs(20),
    )
    .await?;

    // The window starts on a whole second after both series are in Prometheus.
    let t0 = now_secs().ceil() + 1.0;
    step(&format!("[Run] 1 cpu from {t0} for {PHASE:?}"));
    sleep_until(t0 + PHASE.as_secs_f64()).await;

    step("[Update] scale web to 6 replicas: 3 cpu, 6 pods");
    let ta = now_secs();
    expect_admitted(update(&client, &web(6)).await?)?;
    wait_metric(
        &ctl,
        "kq_quota_cluster_used",
        &[&ns_label, "resource=\"requests.cpu\""],
        3,
    )
    .await?;
    let tb = now_secs();
    step(&format!(
        "    ✓ the controller exports 3 cpu ({:.1}s after the update)",
        tb - ta
    ));
    let t1 = (tb + PHASE.as_secs_f64()).ceil();
    sleep_until(t1).await;
    // Prometheus has samples past the window's end.
    prom.wait_value(
        &format!(
            "timestamp(kq_quota_cluster_used{{{ns_label},resource=\"requests.cpu\"}}) > bool {t1}"
        ),
        "1",
        Duration::from_secs(10),
    )
    .await?;

    step(&format!(
        "[Report] kubectl karmada-quota report --from {t0} --to {t1} --step 1s --by team,cluster"
    ));
    let args = |output: &str| -> Vec<String> {
        [
            "report",
            "--prometheus",
            &prom_url,
            "--from",
            &format!("{t0}"),
            "--to",
            &format!("{t1}"),
            "--step",
            "1s",
            "--by",
            "team,cluster",
            "-o",
            output,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect()
    };
    let json_text = plugin(&args("json")).await?;
    let report: Value = serde_json::from_str(&json_text)?;
    eprintln!("{}", plugin(&args("table")).await?);

    // What ran: 1 cpu from t0 until the change reached Prometheus, then 3 cpu until t1. The
    // change is in Prometheus' data from the first scrape after the update was sent (ta) and
    // at the latest one scrape after the controller exported it (tb); one step of slack on
    // each side for the sampling.
    let slack = SCRAPE_INTERVAL.as_secs_f64();
    let core_seconds = |tc: f64| 1.0 * (tc - t0) + 3.0 * (t1 - tc);
    let most = core_seconds(ta) + 3.0 * slack;
    let least = core_seconds(tb + slack) - 3.0 * slack;
    let rows = report["rows"].as_array().context("rows")?;
    // The quota has a (zero) series for member2 too: Karmada placed nothing there.
    ensure!(
        rows.iter().all(|r| r["team"] == team.as_str()
            && (r["cluster"] == "member1" || r["hours"] == 0.0 && r["peak"] == 0.0)),
        "every row is the team's, and only member1 holds usage: {report}"
    );
    let cpu = row(&report, "requests.cpu")?;
    let hours = num(cpu, "hours")?;
    step(&format!(
        "    requests.cpu: {hours:.6} core-hours, expected {:.6}..{:.6}",
        least / 3600.0,
        most / 3600.0
    ));
    ensure!(
        (least / 3600.0..=most / 3600.0).contains(&hours),
        "core-hours {hours} outside {}..{} ({report})",
        least / 3600.0,
        most / 3600.0
    );
    ensure!(cpu["hoursUnit"] == "core-hours", "{cpu}");
    ensure!((num(cpu, "peak")? - 3.0).abs() < 1e-9, "peak {cpu}");
    let average = num(cpu, "average")?;
    ensure!(
        (average * (t1 - t0) - hours * 3600.0).abs() < 1e-6,
        "average × window ≠ core-hours: {cpu}"
    );
    // Pods: 2 then 6, the same instants.
    let pods = row(&report, "pods")?;
    let pod_seconds = num(pods, "hours")? * 3600.0;
    ensure!(
        (2.0 * (tb + slack - t0) + 6.0 * (t1 - tb - slack) - 6.0 * slack
            ..=2.0 * (ta - t0) + 6.0 * (t1 - ta) + 6.0 * slack)
            .contains(&pod_seconds),
        "pod-seconds {pod_seconds} ({report})"
    );
    ensure!(pods["hoursUnit"] == "pod-hours", "{pods}");

    step("[Report] the dashboard's Report page and its CSV give the same numbers");
    let query = format!(
        "from={}&to={}&step=1s&by={}",
        encode(&format!("{t0}")),
        encode(&format!("{t1}")),
        encode("team,cluster")
    );
    let dash = ctl
        .dashboard_url()
        .strip_prefix("http://")
        .and_then(|a| a.parse().ok())
        .context("dashboard address")?;
    let csv = http_get_ok(dash, &format!("/report.csv?{query}")).await?;
    ensure!(
        csv == plugin(&args("csv")).await?,
        "the dashboard's CSV differs from the plugin's:\n{csv}"
    );
    let page = http_get_ok(dash, &format!("/report?{query}")).await?;
    ensure!(
        page.contains(&team) && page.contains("core-hours"),
        "the Report page lacks the team or its core-hours:\n{page}"
    );

    step(
        "[Report] through an HTTPS front end that wants a bearer token and a tenant (X-Scope-OrgID): the same CSV with --prometheus-ca-file, --prometheus-bearer-token-file, --prometheus-header; refused without them",
    );
    let gw_dir = env
        .log_dir()
        .join(format!("prometheus-gateway-{}", ns.name()));
    let gateway = karmada_quota_e2e::prometheus_gateway::Gateway::start(
        &gw_dir,
        prom_addr,
        "t0ken-of-team",
        team.as_str(),
    )
    .await?;
    let token_file = gw_dir.join("token");
    std::fs::write(&token_file, "t0ken-of-team\n")?;
    let through = |extra: &[String]| -> Vec<String> {
        let mut a = args("csv");
        a[2] = gateway.url();
        a.extend(extra.iter().cloned());
        a
    };
    let access = [
        format!("--prometheus-ca-file={}", gateway.ca().display()),
        format!("--prometheus-bearer-token-file={}", token_file.display()),
        format!("--prometheus-header=X-Scope-OrgID={team}"),
    ];
    ensure!(
        plugin(&through(&access)).await? == csv,
        "the report through the front end differs from the direct one"
    );
    for (missing, want) in [
        (1, "HTTP 401: authentication required"),
        (2, "HTTP 403: no org id"),
        (0, "unreachable"),
    ] {
        let partial: Vec<String> = access
            .iter()
            .enumerate()
            .filter(|(i, _)| *i != missing)
            .map(|(_, a)| a.clone())
            .collect();
        let err = plugin(&through(&partial))
            .await
            .err()
            .with_context(|| format!("the report went through without {}", access[missing]))?;
        let text = format!("{err:#}");
        ensure!(
            text.contains("exited Some(3)") && text.contains(want),
            "without {}: {text}",
            access[missing]
        );
        step(&format!("    ✓ without {}: {want}", access[missing]));
    }
    drop(gateway);
    std::fs::remove_dir_all(&gw_dir).ok();

    step("[Browser] the Report page in headless chromium shows the team's core-hours");
    let driver = Driver::start().await?;
    let profile = browser::fresh_dir(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("chromium-profile-{}", ns.name())),
    )?;
    let b = driver.browser(&profile).await?;
    let shown = async {
        b.goto(&format!("{}/report?{query}", ctl.dashboard_url()))
            .await?;
        let text = b.find(Locator::Css("body")).await?.text().await?;
        ensure!(
            text.contains(&team) && text.contains("core-hours"),
            "the browser shows no row of {team} in core-hours:\n{text}"
        );
        let path = browser::screenshot(
            &b,
            &PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots"),
            "report.png",
        )
        .await?;
        step(&format!("    screenshot {}", path.display()));
        Ok(())
    }
    .await;
    let _ = b.close().await;
    drop(driver);
    let _ = std::fs::remove_dir_all(&profile);
    shown?;

    drop(prom);
    ns.delete(&client).await
}
