//! Following a binding through the JSON logs of both binaries by one field: the webhook
//! admits it in a `review` span and the controller folds its watch event into the index in
//! a `fold` span, each carrying `binding` = `namespace/name` (docs/architecture.md,
//! "Following a binding in the logs"). The query is the one an operator runs on the
//! collected logs: every JSON line whose current span's `binding` is the binding.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use karmada_quota_e2e::controller::Controller;
use karmada_quota_e2e::setup::{WebhookSetup, step};
use karmada_quota_e2e::webhook::{
    Rb, Webhook, create, expect_admitted, quota, wait_until_status_seen,
};
use karmada_quota_e2e::{accepts, wait_for};
use serde_json::Value;

/// How long the two lines may take to be written (the fold follows the watch event).
const LOG_TIMEOUT: Duration = Duration::from_secs(30);

/// The JSON lines of the log at `path` that the query `span.binding == key` selects
/// (lines that are not JSON are not selected: a missing field fails the test).
fn lines_of_binding(path: &Path, key: &str) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["span"]["binding"] == key)
        .collect())
}

/// The first line of `key` in the log at `path` whose message is `message`, once written.
async fn line_of_binding(path: &Path, key: &str, message: &str, what: &str) -> Result<Value> {
    wait_for(what, LOG_TIMEOUT, || async {
        lines_of_binding(path, key)
            .ok()?
            .into_iter()
            .find(|l| l["fields"]["message"] == message)
    })
    .await
}

/// A binding created through the apiserver: the webhook's log has its admission and the
/// controller's log its fold, both found by the one query on `binding`.
#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn one_field_follows_a_binding_from_its_admission_to_its_fold() -> Result<()> {
    let mut s = WebhookSetup::with_webhook(
        "logs_follow_binding",
        Webhook::builder().arg("--log-format=json"),
    )
    .await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    let mut ctl = Controller::builder()
        .namespace(&ns)
        .clusters_from_api(false)
        .arg("--log-format=json")
        .start(s.env)
        .await?;

    step("[Create] KarmadaQuota q: requests.cpu=4; the controller syncs its status");
    accepts(&c, &quota(&ns, "q", &[("requests.cpu", "4")])).await?;
    let one = |name: &str| Rb::deployment(name, 1).request("cpu", "1").json(&ns);
    wait_until_status_seen(&c, &one("probe")).await?;

    step("[Create] rb web (1 cpu): admitted");
    expect_admitted(create(&c, &one("web")).await?)?;
    let key = format!("{ns}/web");

    step(&format!("[Logs] the lines whose span.binding is {key}"));
    let webhook_log = s.webhook.binary().log_path().to_path_buf();
    let admitted = line_of_binding(
        &webhook_log,
        &key,
        "ResourceBinding allowed",
        "the webhook's admission line of the binding",
    )
    .await?;
    ensure!(
        admitted["span"]["name"] == "review"
            && admitted["span"]["namespace"] == ns.as_str()
            && admitted["span"]["operation"] == "Create",
        "the admission line's span: {admitted}"
    );
    let controller_log = ctl.binary().log_path().to_path_buf();
    let folded = line_of_binding(
        &controller_log,
        &key,
        "ResourceBinding folded into the index",
        "the controller's fold line of the binding",
    )
    .await?;
    ensure!(
        folded["span"]["name"] == "fold" && folded["fields"]["event"] == "apply",
        "the fold line: {folded}"
    );
    drop(ctl);
    s.teardown().await
}
