//! The quota page's usage-over-time chart in a real browser (headless chromium, with the
//! helpers of dashboard.rs), against a controller on the loopback control plane.
//!
//! ```text
//!  bindings admitted / deleted ──► apiserver ◄── webhook (reservations)
//!                                     ▲
//!  controller ── snapshot ──► in-memory history (--history-step=2s) ──► /api/v1/…/history
//!       │ /metrics ──► prometheus (second test) ──────── query_range ──┘      │
//!       └── dashboard ◄── chromium: /quotas/{ns}/compute, history.js draws ◄──┘
//! ```
//!
//! The first test changes a quota's usage a few times and waits until the chart's lines
//! carry those steps (each line's `data-steps`, `data-last` attributes, and the fallback
//! table), switches the range and the per-cluster view, checks a bad range is refused,
//! and saves `dashboard-history.png` and `dashboard-history-clusters.png` (into `docs/img/`
//! with `KQ_UPDATE_SCREENSHOTS=1`). The second reads the history from a real Prometheus
//! scraping the controller, and sees the page fall back to the in-memory window, saying
//! so, when that Prometheus is gone.

use std::net::SocketAddr;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use fantoccini::{Client as Browser, Locator};
use karmada_quota_e2e::controller::{Controller, used_is, wait_quota, wait_synced};
use karmada_quota_e2e::prometheus::Prometheus;
use karmada_quota_e2e::webhook::{
    Rb, Registration, Webhook, bindings, create, expect_admitted, quota, update,
};
use karmada_quota_e2e::{Env, TestNs, accepts, free_port, http_get, wait_for};
use kube::Client;
use serde_json::{Value, json};

/// How long the chart may take to follow a change (controller, a snapshot, a fetch).
const FOLLOW: Duration = Duration::from_secs(30);
/// How long each usage level is held before the next change.
const HOLD: Duration = Duration::from_secs(8);

use super::{create_compute, in_browser, step, webhook_reads_status};

/// A screenshot of the chart's section.
async fn screenshot(b: &Browser, name: &str) -> Result<()> {
    b.execute(
        "document.getElementById('history').scrollIntoView(); window.scrollBy(0, -8); return null;",
        vec![],
    )
    .await?;
    super::screenshot(b, name).await
}

/// An attribute of the chart's line `line` (`used`, `hard`, `reserved`,
/// `cluster:<name>`) of `resource`, when drawn.
async fn line_attr(b: &Browser, resource: &str, line: &str, attr: &str) -> Option<String> {
    let v = b
        .execute(
            "var f = document.querySelector('figure.hchart[data-resource=\"' + arguments[0] + '\"]');\n\
             var p = f && f.querySelector('path[data-line=\"' + arguments[1] + '\"]');\n\
             return p ? p.getAttribute(arguments[2]) : null;",
            vec![json!(resource), json!(line), json!(attr)],
        )
        .await
        .ok()?;
    v.as_str().map(str::to_owned)
}

/// The text of the first element matching `css`, read in one script call: the chart is
/// redrawn (its elements replaced) at any moment, so a found element may go stale.
async fn text(b: &Browser, css: &str) -> Result<String> {
    let v = b
        .execute(
            "var e = document.querySelector(arguments[0]); return e ? e.textContent : null;",
            vec![json!(css)],
        )
        .await?;
    v.as_str()
        .map(str::to_owned)
        .with_context(|| format!("nothing matches {css}"))
}

/// Waits until the line's `data-last` is `want`; returns its `data-steps`.
async fn wait_last(b: &Browser, resource: &str, line: &str, want: &str) -> Result<String> {
    let res = wait_for(
        &format!("the chart's {resource} {line} line ends at {want}"),
        FOLLOW,
        || async move {
            (line_attr(b, resource, line, "data-last").await.as_deref() == Some(want)).then_some(())
        },
    )
    .await;
    if res.is_err() {
        let got = line_attr(b, resource, line, "data-last").await;
        let source = text(b, "#history").await?;
        bail!("{resource} {line}: want the last point {want}, the chart has {got:?}:\n{source}");
    }
    line_attr(b, resource, line, "data-steps")
        .await
        .context("no data-steps")
}

/// The values of a comma-separated `data-steps`.
fn values(steps: &str) -> Vec<f64> {
    steps.split(',').filter_map(|v| v.parse().ok()).collect()
}

/// Whether `want` appears in `got` in order (other values may come between).
fn in_order(got: &[f64], want: &[f64]) -> bool {
    let mut it = got.iter();
    want.iter().all(|w| it.any(|g| g == w))
}

async fn wait_attr(b: &Browser, css: &str, attr: &str, want: &str) -> Result<()> {
    wait_for(&format!("{css} {attr}={want}"), FOLLOW, || async move {
        let el = b.find(Locator::Css(css)).await.ok()?;
        (el.attr(attr).await.ok()??.as_str() == want).then_some(())
    })
    .await
}

async fn run(client: &Client, ns: &str, b: &Browser, dash: &str, addr: SocketAddr) -> Result<()> {
    step("[Create] quota compute: requests.cpu 10, requests.memory 16Gi, pods 20");
    create_compute(client, ns).await?;
    wait_synced(client, ns, "compute").await?;
    webhook_reads_status(client, ns).await?;

    step("[Create] binding web: 2 × (1 cpu, 2Gi), member1 1 + member2 1 (admitted)");
    let web = Rb::deployment("web", 2)
        .request("cpu", "1")
        .request("memory", "2Gi")
        .clusters(&[("member1", 1), ("member2", 1)]);
    expect_admitted(create(client, &web.json(ns)).await?)?;
    wait_quota(client, ns, "compute", "used 2 cpu", FOLLOW, |q| {
        used_is(q, &[("requests.cpu", "2")])
    })
    .await?;

    step("[Get] the quota page draws used 2 of 10 cores");
    b.goto(&format!("{dash}/quotas/{ns}/compute")).await?;
    wait_last(b, "requests.cpu", "used", "2").await?;
    wait_last(b, "requests.cpu", "hard", "10").await?;
    wait_last(b, "requests.memory", "used", "4").await?;
    // Levels a few seconds apart, as a person would see them drawn.
    tokio::time::sleep(HOLD).await;

    step("[Create] binding api: 3 × 1 cpu in member2 → used 5");
    let api = Rb::deployment("api", 3)
        .request("cpu", "1")
        .request("memory", "1Gi")
        .clusters(&[("member2", 3)]);
    expect_admitted(create(client, &api.json(ns)).await?)?;
    wait_last(b, "requests.cpu", "used", "5").await?;
    tokio::time::sleep(HOLD).await;

    step("[Delete] binding web → used 3: the line shows 2, 5, 3 in order");
    bindings(client, ns)
        .delete("web", &Default::default())
        .await
        .context("deleting binding web")?;
    let steps = wait_last(b, "requests.cpu", "used", "3").await?;
    ensure!(
        in_order(&values(&steps), &[2.0, 5.0, 3.0]),
        "the used line's steps are {steps}"
    );
    let points: usize = line_attr(b, "requests.cpu", "used", "data-points")
        .await
        .context("data-points")?
        .parse()?;
    ensure!(points >= 3, "{points} points for three levels");
    wait_last(b, "requests.memory", "used", "3").await?;
    tokio::time::sleep(HOLD).await;
    step(&format!(
        "    ✓ requests.cpu used: {steps} ({points} points)"
    ));

    step("[Get] hard is dashed; the summary, legend and table say the same");
    let dash_array = b
        .execute(
            "return getComputedStyle(document.querySelector('figure[data-resource=\"requests.cpu\"] path[data-line=\"hard\"]')).strokeDasharray;",
            vec![],
        )
        .await?;
    ensure!(
        dash_array.as_str().is_some_and(|d| d != "none"),
        "hard is drawn dashed: {dash_array}"
    );
    let caption = text(
        b,
        r#"figure[data-resource="requests.cpu"] figcaption .summary"#,
    )
    .await?;
    ensure!(
        caption.starts_with("now 3 of 10 cores used") && caption.contains("peak 5"),
        "{caption}"
    );
    let row = b
        .execute(
            "var r = document.querySelector('figure[data-resource=\"requests.cpu\"] tr[data-line=\"used\"]');\n\
             return r ? Array.from(r.children).map(function (c) { return c.textContent; }) : null;",
            vec![],
        )
        .await?;
    ensure!(
        row == json!(["used", "3 cores", "0", "5", points.to_string()])
            || row.get(1) == Some(&json!("3 cores")) && row.get(3) == Some(&json!("5")),
        "the table's used row: {row}"
    );
    let legend = text(b, r#"figure[data-resource="requests.cpu"] .legend"#).await?;
    ensure!(
        legend.contains("used") && legend.contains("hard (limit)"),
        "{legend}"
    );
    let label = text(b, r#"figure[data-resource="requests.cpu"] svg title"#).await?;
    ensure!(
        label.contains("requests.cpu (cores): now 3 of 10"),
        "{label}"
    );
    let source = text(b, "#history-source").await?;
    ensure!(
        source.contains("in-memory window (the last 60m, a sample every 2s"),
        "{source}"
    );
    // The level held since: redraw now (the chart also redraws on its own every 15 s).
    let loads = b
        .execute("return window.kqHistoryLoads || 0;", vec![])
        .await?;
    b.find(Locator::Css(r#"button.range[data-range="1h"]"#))
        .await?
        .click()
        .await?;
    wait_for("the chart redrawn", FOLLOW, || async {
        let now = b
            .execute("return window.kqHistoryLoads || 0;", vec![])
            .await
            .ok()?;
        (now.as_u64() > loads.as_u64()).then_some(())
    })
    .await?;
    screenshot(b, "dashboard-history.png").await?;

    step("[Update] range 15m, then per cluster: member1 0 (web gone), member2 3");
    b.find(Locator::Css(r#"button.range[data-range="15m"]"#))
        .await?
        .click()
        .await?;
    wait_attr(b, "#history", "data-loaded", "15m").await?;
    wait_attr(
        b,
        r#"button.range[data-range="15m"]"#,
        "aria-pressed",
        "true",
    )
    .await?;
    b.find(Locator::Id("history-clusters"))
        .await?
        .click()
        .await?;
    wait_attr(b, "#history", "data-loaded", "15m+clusters").await?;
    let m2 = wait_last(b, "requests.cpu", "cluster:member2", "3").await?;
    ensure!(
        in_order(&values(&m2), &[1.0, 4.0, 3.0]),
        "member2 placed 1, then 4, then 3: {m2}"
    );
    let m1 = wait_last(b, "requests.cpu", "cluster:member1", "0").await?;
    ensure!(in_order(&values(&m1), &[1.0, 0.0]), "member1: {m1}");
    screenshot(b, "dashboard-history-clusters.png").await?;

    step("[Get] the API refuses a range it does not offer");
    let (code, body) = http_get(
        addr,
        &format!("/api/v1/quotas/{ns}/compute/history?range=2d"),
    )
    .await?;
    ensure!(
        code == 400 && body.contains("expected one of 15m, 1h, 6h, 24h"),
        "{code} {body}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane and hack/tools.sh's chromium: make test runs it"]
async fn the_quota_page_charts_usage_over_time_and_follows_each_change() -> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    let ns = TestNs::new(&client, "history").await?;
    let n = ns.name().to_owned();
    let webhook = Webhook::start(env).await?;
    let registration = Registration::register(&client, &webhook.url(), &[&n], &[&webhook]).await?;
    let ctl = Controller::builder()
        .namespace(&n)
        .env_members(env)
        .arg("--history-step=2s")
        .start(env)
        .await?;
    let dash = ctl.dashboard_url();
    step(&format!("[Setup] controller with its dashboard at {dash}/"));
    let (c, ns_name, url, addr) = (&client, n.as_str(), dash.as_str(), ctl.dashboard_addr());
    in_browser(&n, |b| async move { run(c, ns_name, &b, url, addr).await }).await?;
    drop(ctl);
    registration.cleanup().await?;
    drop(webhook);
    ns.delete(&client).await
}

/// The history JSON of `quota`.
async fn history(addr: SocketAddr, ns: &str, quota: &str, query: &str) -> Result<Value> {
    let (code, body) = http_get(
        addr,
        &format!("/api/v1/quotas/{ns}/{quota}/history?{query}"),
    )
    .await?;
    ensure!(code == 200, "history: {code} {body}");
    Ok(serde_json::from_str(&body)?)
}

/// The last value of `resource`'s line `kind` (`used`, `hard`, `reserved`).
fn last(v: &Value, resource: &str, kind: &str) -> Option<f64> {
    v["chart"]["resources"]
        .as_array()?
        .iter()
        .find(|r| r["resource"] == resource)?[kind]
        .as_array()?
        .last()?[1]
        .as_f64()
}

#[tokio::test]
#[ignore = "needs the loopback control plane and hack/tools.sh: make test runs it"]
async fn with_prometheus_the_chart_reads_it_and_falls_back_to_the_window_when_it_goes() -> Result<()>
{
    let env = Env::get().await?;
    let client = env.client()?;
    let ns = TestNs::new(&client, "history-prom").await?;
    let n = ns.name().to_owned();
    let prom_addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let ctl = Controller::builder()
        .namespace(&n)
        .env_members(env)
        .arg(format!("--dashboard-prometheus=http://{prom_addr}"))
        .arg("--history-step=2s")
        .start(env)
        .await?;
    let dash = ctl.dashboard_addr();

    step("[Create] quota q: requests.cpu 4; binding web 2 × 500m in member1");
    accepts(&client, &quota(&n, "q", &[("requests.cpu", "4")])).await?;
    let mut web = Rb::deployment("web", 2)
        .request("cpu", "500m")
        .clusters(&[("member1", 2)]);
    expect_admitted(create(&client, &web.json(&n)).await?)?;
    wait_quota(&client, &n, "q", "used 1 cpu", FOLLOW, |q| {
        used_is(q, &[("requests.cpu", "1")])
    })
    .await?;

    step(&format!(
        "[Setup] prometheus on {prom_addr} scraping the controller"
    ));
    let prom = Prometheus::start(env, "history", prom_addr, &[ctl.admin_addr()]).await?;
    let selector = format!("{{namespace=\"{n}\",quota=\"q\",resource=\"requests.cpu\"}}");
    prom.wait_value(&format!("kq_quota_used{selector}"), "1", FOLLOW)
        .await?;

    step("[Get] the history comes from Prometheus: used 1, hard 4, member1 1");
    let n2 = n.clone();
    let v = wait_for("the history from Prometheus", FOLLOW, || {
        let n = n2.clone();
        async move {
            let v = history(dash, &n, "q", "range=15m&clusters=true")
                .await
                .ok()?;
            (v["source"] == "prometheus" && last(&v, "requests.cpu", "used") == Some(1.0))
                .then_some(v)
        }
    })
    .await?;
    ensure!(last(&v, "requests.cpu", "hard") == Some(4.0), "{v}");
    ensure!(
        v["sourceText"] == format!("Prometheus at http://{prom_addr}"),
        "{v}"
    );
    let member1 = &v["chart"]["resources"][0]["clusters"][0];
    ensure!(
        member1["cluster"] == "member1"
            && member1["used"].as_array().is_some_and(|p| !p.is_empty()),
        "{v}"
    );

    step("[Update] web to 6 replicas: Prometheus and then the chart follow to 3 cpu");
    web = Rb::deployment("web", 6)
        .request("cpu", "500m")
        .clusters(&[("member1", 6)]);
    expect_admitted(update(&client, &web.json(&n)).await?)?;
    prom.wait_value(&format!("kq_quota_used{selector}"), "3", FOLLOW)
        .await?;
    let n2 = n.clone();
    wait_for("the Prometheus history at 3 cpu", FOLLOW, || {
        let n = n2.clone();
        async move {
            let v = history(dash, &n, "q", "range=15m").await.ok()?;
            (v["source"] == "prometheus" && last(&v, "requests.cpu", "used") == Some(3.0))
                .then_some(())
        }
    })
    .await?;

    step("[Browser] the page says the source is Prometheus");
    let page = format!("{}/quotas/{n}/q", ctl.dashboard_url());
    in_browser(&n, |b| async move {
        b.goto(&page).await?;
        wait_attr(&b, "#history", "data-source", "prometheus").await?;
        wait_last(&b, "requests.cpu", "used", "3").await?;
        let source = text(&b, "#history-source").await?;
        ensure!(source.contains("Prometheus at http://"), "{source}");

        step("[Delete] stop Prometheus: the chart falls back to the window and says why");
        drop(prom);
        wait_attr(&b, "#history", "data-source", "memory").await?;
        let note = text(&b, "#history-note").await?;
        ensure!(
            note.starts_with("Prometheus failed (")
                && note.contains(&format!("http://{prom_addr}"))
                && note.contains("in-memory window"),
            "{note}"
        );
        wait_last(&b, "requests.cpu", "used", "3").await?;
        screenshot(&b, "dashboard-history-fallback.png").await?;
        Ok(())
    })
    .await?;
    drop(ctl);
    ns.delete(&client).await
}
