//! The browser dashboard in a real browser: Debian's chromium driven headless through
//! chromedriver (WebDriver, with fantoccini), against a controller on a real apiserver.
//!
//! ```text
//!  test ── fantoccini ──► chromedriver (127.0.0.1:<free>) ──► chromium --headless
//!    │                                                          │ GET /, /quotas/…, /clusters
//!    │                                                          ▼ EventSource /events
//!    └─ quota + bindings ──► apiserver ◄── controller ── dashboard 127.0.0.1:<free>
//! ```
//!
//! The test checks the numbers the overview shows against the quota's status, sees a bar
//! change without a reload when a binding is created (Server-Sent Events), sees the
//! webhook's denial (its QuotaExceeded event on the quota) appear in the quota's feed, the
//! bindings that use the most, and saves a screenshot of each page under
//! `<target>/tmp/dashboard-screenshots/` (and into `docs/img/` with `KQ_UPDATE_SCREENSHOTS=1`).
//!
//! With `--dashboard-auth=kubernetes`, a second test logs in through the login form as
//! ServiceAccount team-a (RBAC: list karmadaquotas in its namespace only) and checks that
//! team B's quota, its denial and its numbers appear on no page, API or CSV of team A.
//! chromium and chromedriver come from `hack/tools.sh install` (Debian packages). The quota
//! page's usage-over-time chart has its tests in `dashboard/history.rs`, its waiting line in
//! `dashboard/line.rs`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use fantoccini::{Client as Browser, Locator};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Namespace};
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_e2e::browser::{self, Driver};
use karmada_quota_e2e::controller::{
    Controller, LEASE_NAMESPACE, held_lease, used_is, wait_quota, wait_synced,
};
use karmada_quota_e2e::viewer::Viewer;
use karmada_quota_e2e::webhook::{
    Rb, Registration, Webhook, create, expect_admitted, quota, wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, accepts, http_get, http_get_with, wait_for};
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;

/// The quota page's usage-over-time chart.
#[path = "dashboard/history.rs"]
mod history;

/// The quota page's waiting line.
#[path = "dashboard/line.rs"]
mod line;

/// How long the page may take to follow a change (controller + one feed tick + SSE).
const FOLLOW: Duration = Duration::from_secs(20);

fn step(s: &str) {
    eprintln!("{s}");
}

/// The text of the first element matching `css`, if any.
async fn text_of(b: &Browser, css: &str) -> Option<String> {
    let el = b.find(Locator::Css(css)).await.ok()?;
    el.text().await.ok()
}

/// Waits until the element `css` shows `want`.
async fn wait_text(b: &Browser, css: &str, want: &str) -> Result<()> {
    let res = wait_for(&format!("{css} shows {want:?}"), FOLLOW, || async move {
        (text_of(b, css).await.as_deref() == Some(want)).then_some(())
    })
    .await;
    if res.is_err() {
        let got = text_of(b, css).await;
        bail!("{css}: want {want:?}, the page shows {got:?}");
    }
    Ok(())
}

/// Every cell of the page's tables that names its resource (`data-resource`) stands in
/// the column whose header names that resource (the headers follow the quota's rows,
/// extended resources first, not the alphabetical order of `hard`).
async fn cells_sit_under_their_headers(b: &Browser, page: &str) -> Result<()> {
    let js = r#"
        const bad = []; let checked = 0;
        for (const t of document.querySelectorAll('table')) {
          const heads = Array.from(t.querySelectorAll('thead th')).map(h => h.textContent.trim());
          for (const tr of t.querySelectorAll('tbody tr')) {
            Array.from(tr.children).forEach((cell, i) => {
              const r = cell.getAttribute('data-resource');
              if (!r) return;
              checked++;
              if (!(heads[i] || '').startsWith(r)) bad.push(r + ' under ' + heads[i]);
            });
          }
        }
        return {checked: checked, bad: bad};"#;
    let v = b.execute(js, vec![]).await?;
    let checked = v["checked"].as_u64().unwrap_or(0);
    ensure!(
        checked > 0 && v["bad"].as_array().is_some_and(Vec::is_empty),
        "{page}: cells under another resource's header: {} ({checked} checked)",
        v["bad"]
    );
    step(&format!(
        "    {page}: {checked} cells, each under its own header"
    ));
    Ok(())
}

/// `(used + reserved) / hard × 100` to a tenth, as the plugin and the dashboard print it.
fn percent(used: f64, reserved: f64, hard: f64) -> String {
    format!("{}%", ((used + reserved) / hard * 1000.0).round() / 10.0)
}

fn status_value(q: &KarmadaQuota, name: &str) -> Result<String> {
    let s = q.status.as_ref().context("no status")?;
    let v = s
        .used
        .get(name)
        .with_context(|| format!("no status.used[{name}]"))?;
    Ok(v.0.clone())
}

fn screenshots_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-screenshots")
}

async fn screenshot(b: &Browser, name: &str) -> Result<()> {
    let path = browser::screenshot(b, &screenshots_dir(), name).await?;
    step(&format!("    screenshot {}", path.display()));
    Ok(())
}

async fn run(env: &Env, client: &Client, ns: &str, b: &Browser, dash: &str) -> Result<()> {
    step(
        "[Create] quotas compute (cpu, memory, pods), gpus (requests.nvidia.com/gpu), objects (pods)",
    );
    create_compute(client, ns).await?;
    accepts(client, &quota(ns, "objects", &[("pods", "9")])).await?;
    accepts(
        client,
        &quota(
            ns,
            "gpus",
            &[("requests.nvidia.com/gpu", "4"), ("requests.cpu", "40")],
        ),
    )
    .await?;
    wait_synced(client, ns, "compute").await?;
    wait_synced(client, ns, "gpus").await?;
    wait_synced(client, ns, "objects").await?;
    webhook_reads_status(client, ns).await?;

    step(
        "[Create] bindings web (3 × 1 cpu, 2Gi) and train (3 × 1 cpu, 1Gi, 1 GPU), split over both members",
    );
    let web = Rb::deployment("web", 3)
        .request("cpu", "1")
        .request("memory", "2Gi")
        .clusters(&[("member1", 2), ("member2", 1)]);
    expect_admitted(create(client, &web.json(ns)).await?)?;
    let train = Rb::deployment("train", 3)
        .request("cpu", "1")
        .request("memory", "1Gi")
        .request("nvidia.com/gpu", "1")
        .clusters(&[("member1", 2), ("member2", 1)]);
    expect_admitted(create(client, &train.json(ns)).await?)?;
    let q = wait_quota(
        client,
        ns,
        "compute",
        "compute used = 6 cpu, 6 pods",
        FOLLOW,
        |q| used_is(q, &[("requests.cpu", "6"), ("pods", "6")]),
    )
    .await?;
    wait_quota(client, ns, "gpus", "gpus used = 3 GPUs", FOLLOW, |q| {
        used_is(q, &[("requests.nvidia.com/gpu", "3")])
    })
    .await?;

    step("[Get] the overview shows the quota's status: used, hard and the plugin's %");
    b.goto(&format!("{dash}/")).await?;
    let cpu = format!(r#"[data-row="{ns}/compute|requests.cpu"]"#);
    let used = status_value(&q, "requests.cpu")?;
    wait_text(b, &format!("{cpu} .v-used"), &used).await?;
    wait_text(b, &format!("{cpu} .v-hard"), "10").await?;
    wait_text(b, &format!("{cpu} .v-pct"), &percent(6.0, 0.0, 10.0)).await?;
    let pods = format!(r#"[data-row="{ns}/objects|pods"]"#);
    wait_text(b, &format!("{pods} .v-pct"), &percent(6.0, 0.0, 9.0)).await?;
    let gpu = format!(r#"[data-row="{ns}/gpus|requests.nvidia.com/gpu"]"#);
    wait_text(b, &format!("{gpu} .v-used"), "3").await?;
    wait_text(b, &format!("{gpu} .v-pct"), "75%").await?;
    let title = b
        .find(Locator::Css("section.group h2"))
        .await?
        .text()
        .await?;
    ensure!(
        title.ends_with("ml"),
        "the namespace's team label groups it: {title:?}"
    );
    screenshot(b, "overview.png").await?;

    step("[Update] a new binding api (2 × 1 cpu): the bar follows without a reload (SSE)");
    b.execute("window.kqMarker = 'same page'; return null;", vec![])
        .await?;
    let api = Rb::deployment("api", 2)
        .request("cpu", "1")
        .request("memory", "1Gi")
        .clusters(&[("member2", 2)]);
    expect_admitted(create(client, &api.json(ns)).await?)?;
    wait_text(b, &format!("{cpu} .v-used"), "8").await?;
    wait_text(b, &format!("{cpu} .v-pct"), &percent(8.0, 0.0, 10.0)).await?;
    let width = b
        .execute(
            &format!(r#"return document.querySelector('{cpu} .seg.used').style.width;"#),
            vec![],
        )
        .await?;
    ensure!(width == json!("80%"), "used bar width {width}");
    wait_text(b, &format!("{pods} .v-pct"), &percent(8.0, 0.0, 9.0)).await?;
    // Read in one script: the live update may replace the row between a find and a read
    // (WebDriver's "stale element reference").
    let class = b
        .execute(
            &format!(r#"return document.querySelector('{pods}').className;"#),
            vec![],
        )
        .await?;
    ensure!(
        class == json!("res level-warning"),
        "8 of 9 pods is a warning: {class}"
    );
    let marker = b.execute("return window.kqMarker || null;", vec![]).await?;
    ensure!(
        marker == json!("same page"),
        "the page was reloaded (marker {marker})"
    );
    let q = wait_synced(client, ns, "compute").await?;
    ensure!(
        status_value(&q, "requests.cpu")? == "8",
        "status.used follows"
    );

    step("[Get] the filter box hides quotas that do not match");
    let filter = b.find(Locator::Id("filter")).await?;
    filter.send_keys("gpu").await?;
    let hidden = b
        .execute(
            &format!(r#"return document.querySelector('[data-quota="{ns}/compute"]').hidden;"#),
            vec![],
        )
        .await?;
    ensure!(hidden == json!(true), "compute should be filtered out");
    filter.clear().await?;
    b.execute("sessionStorage.clear(); return null;", vec![])
        .await?;

    step(
        "[Get] the quota page: placed vs observed per member, and the webhook's denial appears live",
    );
    step("[Get] the gpus quota's page: every cell of every table sits under its own header");
    b.goto(&format!("{dash}/quotas/{ns}/gpus")).await?;
    wait_text(
        b,
        r#"[data-cluster="member1"] td[data-resource="requests.nvidia.com/gpu"] .v-placed"#,
        "2",
    )
    .await?;
    cells_sit_under_their_headers(b, "gpus").await?;
    b.goto(&format!("{dash}/quotas/{ns}/compute")).await?;
    // cpu: member1 web 2 + train 2; member2 web 1 + train 1 + api 2.
    wait_text(
        b,
        r#"[data-cluster="member1"] td:nth-of-type(1) .v-placed"#,
        "4",
    )
    .await?;
    wait_text(
        b,
        r#"[data-cluster="member2"] td:nth-of-type(1) .v-placed"#,
        "4",
    )
    .await?;
    b.execute("window.kqMarker = 'same page'; return null;", vec![])
        .await?;
    let burst = Rb::deployment("burst", 1)
        .request("cpu", "3")
        .request("memory", "1Gi")
        .clusters(&[("member1", 1)]);
    let refused = create(client, &burst.json(ns)).await?;
    ensure!(refused.is_err(), "3 more cpu over 8 of 10 must be refused");
    let feed = wait_for("the denial in the quota's feed", FOLLOW, || async move {
        text_of(b, "#denials li .msg")
            .await
            .filter(|t| t.starts_with("QuotaExceeded: ") && t.contains("burst"))
    })
    .await
    .with_context(
        || "no QuotaExceeded event on the quota page (the webhook writes one per denial)",
    )?;
    step(&format!("    feed: {feed}"));
    let marker = b.execute("return window.kqMarker || null;", vec![]).await?;
    ensure!(marker == json!("same page"), "the quota page was reloaded");

    step("[Get] the quota page lists the bindings that use the most, largest share first");
    // web: 6Gi of 16Gi = 37.5 %; train: 3 of 10 cpu = 30 %; api: 2 of 10 cpu = 20 %.
    wait_text(b, "#top-bindings tbody tr:nth-of-type(1) th", "web").await?;
    wait_text(b, "#top-bindings tbody tr:nth-of-type(2) th", "train").await?;
    wait_text(b, "#top-bindings tbody tr:nth-of-type(3) th", "api").await?;
    wait_text(
        b,
        r#"[data-binding="web"] td[data-resource="requests.memory"]"#,
        "6Gi (37.5%)",
    )
    .await?;
    wait_text(b, r#"[data-binding="web"] .v-clusters"#, "member1, member2").await?;
    screenshot(b, "quota.png").await?;

    step("[Get] the clusters page: each member's share, reachability");
    b.goto(&format!("{dash}/clusters")).await?;
    wait_text(b, r#"[data-member="member1"] .badge"#, "reachable").await?;
    wait_text(b, r#"[data-member="member2"] .badge"#, "reachable").await?;
    screenshot(b, "clusters.png").await?;
    let _ = env;
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane and hack/tools.sh's chromium: make test runs it"]
async fn the_dashboard_shows_the_quota_status_and_follows_changes_live_in_a_browser() -> Result<()>
{
    let env = Env::get().await?;
    let client = env.client()?;
    let ns = TestNs::new(&client, "dashboard").await?;
    let n = ns.name().to_owned();

    step("[Setup] the namespace carries the team label ml");
    Api::<Namespace>::all(client.clone())
        .patch(
            &n,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"karmada-quota.io/team": "ml"}}})),
        )
        .await?;
    let webhook = Webhook::start(env).await?;
    let registration = Registration::register(&client, &webhook.url(), &[&n], &[&webhook]).await?;
    let ctl = Controller::builder()
        .namespace(&n)
        .env_members(env)
        .start(env)
        .await?;
    let dash = ctl.dashboard_url();
    step(&format!("[Setup] controller with its dashboard at {dash}/"));
    let (c, ns_name, url) = (&client, n.as_str(), dash.as_str());
    in_browser(&n, |b| async move { run(env, c, ns_name, &b, url).await }).await?;
    drop(ctl);
    registration.cleanup().await?;
    drop(webhook);
    ns.delete(&client).await
}

fn tempdir(tag: &str) -> Result<PathBuf> {
    browser::fresh_dir(
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("chromium-profile-{tag}")),
    )
}

/// Runs `f` with a headless chromium on a fresh profile named after `tag`, then closes it
/// and removes the profile, whatever `f` returned.
async fn in_browser<F, Fut>(tag: &str, f: F) -> Result<()>
where
    F: FnOnce(Browser) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let driver = Driver::start().await?;
    let profile = tempdir(tag)?;
    let browser = driver.browser(&profile).await?;
    let res = f(browser.clone()).await;
    let _ = browser.close().await;
    drop(driver);
    let _ = std::fs::remove_dir_all(&profile);
    res
}

/// Quota `compute`: requests.cpu 10, requests.memory 16Gi, pods 20.
async fn create_compute(client: &Client, ns: &str) -> Result<()> {
    accepts(
        client,
        &quota(
            ns,
            "compute",
            &[
                ("requests.cpu", "10"),
                ("requests.memory", "16Gi"),
                ("pods", "20"),
            ],
        ),
    )
    .await?;
    Ok(())
}

/// Waits until the webhook admits against the quotas' status in `ns` (a dry-run probe).
async fn webhook_reads_status(client: &Client, ns: &str) -> Result<()> {
    wait_until_status_seen(
        client,
        &Rb::deployment("probe", 1)
            .request("cpu", "1m")
            .request("memory", "1Mi")
            .json(ns),
    )
    .await
}

/// A Warning event on a quota, as the webhook records a denial.
async fn denial_event(client: &Client, ns: &str, quota: &str, message: &str) -> Result<()> {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    let ev = CoreEvent {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(format!("{quota}.")),
            namespace: Some(ns.to_owned()),
            ..Default::default()
        },
        involved_object: k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("quota.karmada.io/v1alpha1".into()),
            kind: Some("KarmadaQuota".into()),
            namespace: Some(ns.to_owned()),
            name: Some(quota.to_owned()),
            ..Default::default()
        },
        reason: Some("QuotaExceeded".into()),
        message: Some(message.to_owned()),
        type_: Some("Warning".into()),
        count: Some(1),
        first_timestamp: Some(now.clone()),
        last_timestamp: Some(now),
        ..Default::default()
    };
    Api::<CoreEvent>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &ev)
        .await
        .context("creating a Warning event")?;
    Ok(())
}

/// `GET path` on the dashboard as `viewer`: (status, body).
async fn get_as(dash: SocketAddr, path: &str, viewer: &Viewer) -> Result<(u16, String)> {
    http_get_with(dash, path, &[("Authorization", &viewer.bearer())]).await
}

/// What the authentication run works with: the admin's client, the two teams'
/// namespaces and viewers, the dashboard's URL and address.
struct AuthRun<'a> {
    client: &'a Client,
    a: &'a str,
    b_ns: &'a str,
    team_a: &'a Viewer,
    team_b: &'a Viewer,
    dash: &'a str,
    dash_addr: SocketAddr,
}

async fn run_auth(run: AuthRun<'_>, browser: &Browser) -> Result<()> {
    let AuthRun {
        client,
        a,
        b_ns,
        team_a,
        team_b,
        dash,
        dash_addr,
    } = run;
    step("[Get] without a token the API answers 401 and a page shows the login form");
    let (code, body) = http_get(dash_addr, "/api/v1/overview").await?;
    ensure!(code == 401 && body.contains("\"error\""), "{code} {body}");
    browser.goto(&format!("{dash}/")).await?;
    wait_for("the login form", FOLLOW, || async move {
        browser.find(Locator::Id("token")).await.ok().map(|_| ())
    })
    .await?;
    screenshot(browser, "login.png").await?;

    step("[Get] team B's quota and its denial are in team B's view (the data is there)");
    denial_event(
        client,
        b_ns,
        "plans",
        "exceeded quota: plans, requested: requests.cpu=9 (TEAM-B-ONLY)",
    )
    .await?;
    let b_key = format!("{b_ns}/plans");
    let b_api = format!("/api/v1/quotas/{b_key}");
    let b_api = b_api.as_str();
    wait_for("team B sees its quota and denial", FOLLOW, || async move {
        let (code, body) = get_as(dash_addr, b_api, team_b).await.ok()?;
        (code == 200 && body.contains("TEAM-B-ONLY")).then_some(())
    })
    .await?;

    step("[Create] log in as team A through the form");
    let field = browser.find(Locator::Id("token")).await?;
    field.send_keys(&team_a.token).await?;
    browser
        .find(Locator::Id("login-submit"))
        .await?
        .click()
        .await?;
    wait_text(browser, "#user", &team_a.user).await?;

    step("[Get] team A's overview shows its quota, not team B's");
    let cpu = format!(r#"[data-row="{a}/compute|requests.cpu"]"#);
    wait_text(browser, &format!("{cpu} .v-used"), "3").await?;
    wait_text(browser, &format!("{cpu} .v-pct"), "30%").await?;
    let source = browser.source().await?;
    ensure!(
        !source.contains(b_ns),
        "team B's namespace is on team A's overview"
    );

    step("[Update] a new binding of team A: the bar follows live (SSE with the cookie)");
    browser
        .execute("window.kqMarker = 'same page'; return null;", vec![])
        .await?;
    let more = Rb::deployment("more", 2)
        .request("cpu", "1")
        .clusters(&[("member1", 2)]);
    accepts(client, &more.json(a)).await?;
    wait_text(browser, &format!("{cpu} .v-used"), "5").await?;
    let marker = browser
        .execute("return window.kqMarker || null;", vec![])
        .await?;
    ensure!(marker == json!("same page"), "the page was reloaded");
    ensure!(!browser.source().await?.contains(b_ns));

    step("[Get] team B's quota page is a 404 for team A; the API and CSV omit it");
    browser.goto(&format!("{dash}/quotas/{b_key}")).await?;
    let text = browser.find(Locator::Css("main")).await?.text().await?;
    ensure!(
        text.contains(&format!("No KarmadaQuota {b_key} computed.")),
        "{text}"
    );
    let (code, _) = get_as(dash_addr, &format!("/api/v1/quotas/{b_key}"), team_a).await?;
    ensure!(code == 404, "team A reads team B's quota: {code}");
    browser.goto(&format!("{dash}/api/v1/snapshot")).await?;
    let json_text = browser.find(Locator::Css("body")).await?.text().await?;
    ensure!(
        json_text.contains(&format!("\"namespace\":\"{a}\"")) && !json_text.contains(b_ns),
        "the snapshot API (with the login cookie): {json_text}"
    );
    for path in [
        "/api/v1/overview",
        "/api/v1/overview.csv",
        "/api/v1/clusters",
        "/clusters",
    ] {
        let (code, body) = get_as(dash_addr, path, team_a).await?;
        ensure!(code == 200, "{path}: {code}");
        ensure!(
            !body.contains(b_ns) && !body.contains("TEAM-B-ONLY"),
            "{path} shows team B's data to team A: {body}"
        );
        ensure!(body.contains(a), "{path} lacks team A's quota");
    }

    step("[Delete] log out: the pages ask for a token again");
    browser.goto(&format!("{dash}/")).await?;
    browser
        .find(Locator::Css("header form button"))
        .await?
        .click()
        .await?;
    wait_for("the login form after logout", FOLLOW, || async move {
        browser.find(Locator::Id("token")).await.ok().map(|_| ())
    })
    .await?;
    browser.goto(&format!("{dash}/")).await?;
    ensure!(
        browser.find(Locator::Id("token")).await.is_ok(),
        "the overview shows without a token after logout"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane and hack/tools.sh's chromium: make test runs it"]
async fn with_kubernetes_auth_a_team_logs_in_and_sees_only_its_namespaces() -> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    let ns_a = TestNs::new(&client, "dash-team-a").await?;
    let ns_b = TestNs::new(&client, "dash-team-b").await?;
    let (a, b) = (ns_a.name().to_owned(), ns_b.name().to_owned());

    step(
        "[Setup] quotas in both namespaces, a binding in each; ServiceAccounts team-a, team-b with RBAC in their own namespace only",
    );
    accepts(
        &client,
        &quota(&a, "compute", &[("requests.cpu", "10"), ("pods", "20")]),
    )
    .await?;
    accepts(&client, &quota(&b, "plans", &[("requests.cpu", "4")])).await?;
    let web = Rb::deployment("web", 3)
        .request("cpu", "1")
        .clusters(&[("member1", 3)]);
    accepts(&client, &web.json(&a)).await?;
    let job = Rb::deployment("job", 2)
        .request("cpu", "1")
        .clusters(&[("member1", 2)]);
    accepts(&client, &job.json(&b)).await?;
    let team_a = Viewer::create(&client, &a, "team-a", &[&a]).await?;
    let team_b = Viewer::create(&client, &b, "team-b", &[&b]).await?;

    // One dashboard must hold both namespaces: a controller over all namespaces, kept a
    // follower by a Lease another replica holds, so it writes nothing other tests own.
    let lease = format!("kq-e2e-dash-auth-{a}");
    held_lease(&client, &lease).await?;
    step("[Setup] an all-namespace follower controller with --dashboard-auth=kubernetes");
    let ctl = Controller::builder()
        .lease_name(&lease)
        .clusters_from_api(false)
        .arg("--dashboard-auth=kubernetes")
        .start(env)
        .await?;
    let dash = ctl.dashboard_url();
    let dash_addr: SocketAddr = dash.trim_start_matches("http://").parse()?;
    let run = AuthRun {
        client: &client,
        a: a.as_str(),
        b_ns: b.as_str(),
        team_a: &team_a,
        team_b: &team_b,
        dash: dash.as_str(),
        dash_addr,
    };
    in_browser(&a, |browser| async move { run_auth(run, &browser).await }).await?;
    drop(ctl);
    let _ = Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
        .delete(&lease, &Default::default())
        .await;
    ns_a.delete(&client).await?;
    ns_b.delete(&client).await
}
