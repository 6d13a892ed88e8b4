//! The quota page's waiting line (docs/queueing.md) in a real browser, against
//! the webhook (with the arrivals' mutating configuration) and a controller on the
//! loopback control plane.
//!
//! ```text
//!  bindings ──► apiserver ── /mutate (suspend, mark) ──► webhook
//!                  ▲ status.queue                         │
//!  controller ─────┘ release loop ── snapshot ──► dashboard ◄── chromium: /quotas/{ns}/q
//! ```
//!
//! The page is opened once and never reloaded: it shows an empty line, then two waiting
//! bindings in the line's order (priority first) with what each waits for, then the line
//! shrinking as room frees and the controller releases them one by one.

use anyhow::{Result, ensure};
use fantoccini::Client as Browser;
use karmada_quota_e2e::controller::{Controller, milli, wait_quota};
use karmada_quota_e2e::queue::{Arrivals, unplaced, wait_until_arrivals_fit, waiting};
use karmada_quota_e2e::setup::WebhookSetup;
use karmada_quota_e2e::webhook::{bindings, create, expect_admitted, quota};
use karmada_quota_e2e::{accepts, wait_for};
use kube::Client;
use kube::api::DeleteParams;
use serde_json::json;

use super::{FOLLOW, in_browser, screenshot, step, text_of, wait_text};

/// The waiting line's rows as the page shows them: (position, binding).
async fn rows(b: &Browser) -> Result<Vec<(String, String)>> {
    let v = b
        .execute(
            "return Array.from(document.querySelectorAll('#waiting tbody tr')).map(function (r) {\n\
               return [r.querySelector('.v-position').textContent, r.getAttribute('data-waiting')];\n\
             });",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// Waits until the line's rows are `want`.
async fn wait_rows(b: &Browser, want: &[(&str, &str)]) -> Result<()> {
    let want: Vec<(String, String)> = want
        .iter()
        .map(|(p, n)| ((*p).to_owned(), (*n).to_owned()))
        .collect();
    let res = wait_for(&format!("the waiting line shows {want:?}"), FOLLOW, || {
        let want = want.clone();
        async move { (rows(b).await.ok()? == want).then_some(()) }
    })
    .await;
    if res.is_err() {
        let got = rows(b).await?;
        anyhow::bail!("waiting line: want {want:?}, the page shows {got:?}");
    }
    Ok(())
}

async fn used_cpu(client: &Client, ns: &str, cores: i128) -> Result<()> {
    wait_quota(
        client,
        ns,
        "q",
        &format!("used requests.cpu={cores}"),
        FOLLOW,
        |q| {
            q.status
                .as_ref()
                .is_some_and(|s| milli(&s.used, "requests.cpu") == cores * 1000)
        },
    )
    .await?;
    Ok(())
}

async fn submit(client: &Client, ns: &str, name: &str, priority: i32) -> Result<bool> {
    let created = expect_admitted(create(client, &unplaced(ns, name, "1", priority)).await?)?;
    Ok(waiting(&serde_json::to_value(&created)?))
}

async fn run(client: &Client, ns: &str, b: &Browser, dash: &str) -> Result<()> {
    step("[Get] the quota page: queueing, StrictFIFO, nobody waits");
    b.goto(&format!("{dash}/quotas/{ns}/q")).await?;
    wait_text(b, "#line .empty", "Nobody waits.").await?;
    // Set on the page once: still there at the end proves it was never reloaded.
    b.execute("window.kqLineMarker = 'kept'; return null;", vec![])
        .await?;

    step("[Create] fill-1, fill-2: 1 cpu each, admitted (2 of 2 used)");
    for name in ["fill-1", "fill-2"] {
        ensure!(!submit(client, ns, name, 0).await?, "{name} must not wait");
    }
    used_cpu(client, ns, 2).await?;

    step("[Create] late (priority 0), then urgent (priority 10): both wait");
    ensure!(submit(client, ns, "late", 0).await?, "late must wait");
    ensure!(submit(client, ns, "urgent", 10).await?, "urgent must wait");
    step("[Browser] the line shows urgent first (higher priority), then late; no reload");
    wait_rows(b, &[("1", "urgent"), ("2", "late")]).await?;
    wait_text(
        b,
        r#"#waiting tr[data-waiting="urgent"] .v-waits"#,
        "requests.cpu=1 more free",
    )
    .await?;
    wait_text(b, ".quota-head a.waiting", "2 waiting").await?;
    b.execute(
        "document.getElementById('line').scrollIntoView(); window.scrollBy(0, -60); return null;",
        vec![],
    )
    .await?;
    screenshot(b, "dashboard-queue.png").await?;

    step("[Delete] fill-1: urgent is released, late moves up");
    let api = bindings(client, ns);
    api.delete("fill-1", &DeleteParams::default()).await?;
    wait_rows(b, &[("1", "late")]).await?;
    wait_text(b, ".quota-head a.waiting", "1 waiting").await?;

    step("[Delete] fill-2: late is released, nobody waits");
    api.delete("fill-2", &DeleteParams::default()).await?;
    wait_text(b, "#line .empty", "Nobody waits.").await?;
    ensure!(
        text_of(b, ".quota-head a.waiting").await.is_none(),
        "the head still counts waiting bindings"
    );
    let marker = b
        .execute("return window.kqLineMarker || null;", vec![])
        .await?;
    ensure!(
        marker == json!("kept"),
        "the page was reloaded (marker {marker})"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane and hack/tools.sh's chromium: make test runs it"]
async fn the_quota_page_shows_the_waiting_line_live_in_order_until_it_empties() -> Result<()> {
    let s = WebhookSetup::new("dash-line").await?;
    let arrivals = Arrivals::register(&s.client, &s).await?;
    let mut q = quota(s.ns(), "q", &[("requests.cpu", "2")]);
    q["spec"]["admission"] = json!({"mode": "Queue", "order": "StrictFIFO"});
    accepts(&s.client, &q).await?;
    let ctl = Controller::builder()
        .namespace(s.ns())
        .clusters_from_api(false)
        .start(s.env)
        .await?;
    used_cpu(&s.client, s.ns(), 0).await?;
    wait_until_arrivals_fit(&s.client, s.ns()).await?;
    let dash = ctl.dashboard_url();
    step(&format!(
        "[Setup] quota q: requests.cpu=2, Queue, StrictFIFO; dashboard at {dash}/"
    ));
    let (c, ns) = (&s.client, s.ns().to_owned());
    let res = in_browser(&ns, |b| {
        let ns = ns.clone();
        let dash = dash.clone();
        async move { run(c, &ns, &b, &dash).await }
    })
    .await;
    drop(ctl);
    arrivals.cleanup().await?;
    s.teardown().await?;
    res
}
