//! A tenant's attacks on the webhook's memory and connection slots, on the loopback
//! control plane. The webhook's resident set (VmRSS, sampled every 50 ms) must peak under
//! [`PEAK_BOUND_MIB`], well under the chart's 256 MiB limit, and the apiserver's own
//! creates must keep passing:
//!
//! - 10 concurrent dry-run PropagationPolicies of ~2.9 MB (725 000 `clusterNames`),
//!   through the apiserver by a tenant who may create policies in its namespace (mTLS on);
//! - 4 concurrent dry-run policies selecting the tenant's own 40 × 1 MB ConfigMaps, twice;
//! - 10 concurrent ~3 MB binding reviews (CREATEs, under a quota) whose `request.options`
//!   is a wide list, straight to the webhook with client auth off, three rounds;
//! - 512 idle TCP connections from 127.0.0.1, each replaced once closed (mTLS on): 6 real
//!   creates through the apiserver, 6 s apart (each on a new connection), pass and /readyz
//!   stays 200.
//!
//! The code before the decode budget, the typed reviews, the paged template reads and the
//! pending-connection slots peaked at 359, 208 and 369 MiB, and failed 4 of 6 creates.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use karmada_quota_e2e::attack::{MIB, RssPeak, post, raw_request, tls_connector, vm_rss};
use karmada_quota_e2e::setup::{WebhookSetup, step, synced_quota};
use karmada_quota_e2e::webhook::{
    Rb, Webhook, WebhookBuilder, WebhookTls, binding_review, create, expect_admitted,
    wait_until_status_seen,
};
use karmada_quota_e2e::{Env, WebhookClientCert, http_get};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

/// The peak RSS every attack must stay under (the chart's limit is 256 MiB).
const PEAK_BOUND_MIB: u64 = 160;

fn client_identity(env: &Env) -> Result<&WebhookClientCert> {
    env.webhook_client().ok_or_else(|| {
        anyhow!(
            "the control plane has no webhook client certificate (WEBHOOK_CLIENT_* in its \
             env file): bring it up with this tree's controlplane.sh"
        )
    })
}

/// A webhook that requires the apiserver's client certificate.
fn mtls_webhook(id: &WebhookClientCert) -> WebhookBuilder {
    Webhook::builder()
        .arg(format!("--client-ca-file={}", id.ca.display()))
        .arg(format!("--client-allowed-names={}", WebhookClientCert::CN))
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MIB as f64
}

/// Runs `attack` while sampling the RSS of the webhook `pid`; prints and returns
/// (before, peak, after), and fails when the peak passes [`PEAK_BOUND_MIB`].
async fn measured<F: std::future::Future<Output = Result<String>>>(
    pid: u32,
    what: &str,
    attack: F,
) -> Result<(u64, u64, u64)> {
    let before = vm_rss(pid)?;
    let sampler = RssPeak::start(pid);
    let outcome = attack.await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (peak, after) = (sampler.peak(), vm_rss(pid)?);
    step(&format!(
        "[Measure] {what}: RSS {:.1} MiB before, {:.1} MiB peak, {:.1} MiB after; {outcome}",
        mib(before),
        mib(peak),
        mib(after)
    ));
    ensure!(
        peak < PEAK_BOUND_MIB * MIB,
        "{what}: the webhook's RSS peaked at {:.1} MiB (bound {PEAK_BOUND_MIB} MiB)",
        mib(peak)
    );
    Ok((before, peak, after))
}

fn pid(s: &mut WebhookSetup) -> Result<u32> {
    s.webhook.binary().pid().context("the webhook exited")
}

/// Policy reviews the webhook answered for `reason` so far.
async fn policy_decisions(webhook: &Webhook, reason: &str) -> Result<u64> {
    webhook
        .decisions(&[
            "kind=\"propagationpolicy\"",
            &format!("reason=\"{reason}\""),
        ])
        .await
}

/// Waits (sampling goes on) until the webhook has answered `n` more policy reviews for
/// `reason` than `before`, or `within` passed: how many it answered. The apiserver may
/// call the webhook long after its client gave up (a loaded apiserver validates 725 000
/// cluster names slowly).
async fn policy_reviews_seen(
    webhook: &Webhook,
    reason: &str,
    before: u64,
    n: u64,
    within: Duration,
) -> Result<u64> {
    let started = Instant::now();
    loop {
        let seen = policy_decisions(webhook, reason).await? - before;
        if seen >= n || started.elapsed() > within {
            return Ok(seen);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn policies(c: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("policy.karmada.io", "v1alpha1", "PropagationPolicy");
    Api::namespaced_with(
        c.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(&gvk, "propagationpolicies"),
    )
}

fn policy(ns: &str, name: &str, selectors: Value, cluster_names: usize) -> Result<DynamicObject> {
    let names = vec!["c"; cluster_names];
    Ok(serde_json::from_value(json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "resourceSelectors": selectors,
            "placement": {"clusterAffinity": {"clusterNames": names},
                          "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}
        }
    }))?)
}

/// `n` dry-run creates of `policy` at once: "ok/failed" counts (a refused or failed one is
/// not an error: the bound is what is tested).
async fn dry_run_policies(api: &Api<DynamicObject>, policy: &DynamicObject, n: usize) -> String {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let runs = (0..n).map(|_| {
        let (api, dry_run, policy) = (api.clone(), dry_run.clone(), policy.clone());
        async move { api.create(&dry_run, &policy).await }
    });
    let results = futures::future::join_all(runs).await;
    let ok = results.iter().filter(|r| r.is_ok()).count();
    let first_err = results
        .iter()
        .find_map(|r| r.as_ref().err().map(|e| e.to_string()));
    format!(
        "{ok} of {n} admitted{}",
        first_err.map_or(String::new(), |e| format!(
            ", first refusal: {}",
            e.chars().take(200).collect::<String>()
        ))
    )
}

/// An AdmissionReview of the dry-run CREATE of `policy`, as the apiserver sends it.
fn policy_review(policy: &DynamicObject) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "00000000-0000-4000-8000-00000000b0b0",
            "kind": {"group": "policy.karmada.io", "version": "v1alpha1", "kind": "PropagationPolicy"},
            "resource": {"group": "policy.karmada.io", "version": "v1alpha1", "resource": "propagationpolicies"},
            "name": policy.metadata.name, "namespace": policy.metadata.namespace,
            "operation": "CREATE", "userInfo": {"username": "tenant"},
            "object": policy, "oldObject": null, "dryRun": true,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"}
        }
    })
}

/// `request` sent `n` times at once to `addr`: how many got 200, and the first status
/// line.
async fn send_all(
    addr: std::net::SocketAddr,
    tls: &tokio_rustls::TlsConnector,
    request: &[u8],
    n: usize,
) -> String {
    let runs = (0..n).map(|_| raw_request(addr, Some(tls), request));
    let answers = futures::future::join_all(runs).await;
    let status = |a: &Result<String>| {
        a.as_ref().map_or_else(
            |e| format!("error {e}"),
            |a| a.lines().next().unwrap_or_default().to_owned(),
        )
    };
    let ok = answers
        .iter()
        .filter(|a| status(a).contains(" 200"))
        .count();
    let mut kinds: Vec<String> = answers.iter().map(status).collect();
    kinds.sort();
    kinds.dedup();
    format!("{ok} of {n} answered 200 ({})", kinds.join(", "))
}

/// A real binding through apiserver 0, admitted.
async fn a_real_create_passes(c: &kube::Client, ns: &str, name: &str) -> Result<()> {
    expect_admitted(create(c, &Rb::deployment(name, 1).request("cpu", "1").json(ns)).await?)
        .map(|_| ())
        .with_context(|| format!("the real create of {name}"))
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn ten_concurrent_3mb_dry_run_policies_stay_under_the_memory_bound() -> Result<()> {
    let env = Env::get().await?;
    let mut s =
        WebhookSetup::with_webhook("mem_policies", mtls_webhook(client_identity(env)?)).await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    synced_quota(&c, &ns, "q", &[("requests.cpu", "100")]).await?;
    wait_until_status_seen(
        &c,
        &Rb::deployment("probe", 1).request("cpu", "1").json(&ns),
    )
    .await?;
    let api = policies(&c, &ns);
    let selectors = json!([{"apiVersion": "apps/v1", "kind": "Deployment"}]);
    let huge = policy(&ns, "huge", selectors.clone(), 725_000)?;
    let size = serde_json::to_vec(&huge)?.len();
    step(&format!(
        "[Attack] 10 concurrent dry-run PropagationPolicies of {:.1} MB (725 000 clusterNames)",
        size as f64 / 1e6
    ));
    let too_large = "BodyTooLarge";
    let mut before = policy_decisions(&s.webhook, too_large).await?;
    dry_run_policies(&api, &huge, 1).await; // warm-up: TLS buffers, first arenas
    before +=
        policy_reviews_seen(&s.webhook, too_large, before, 1, Duration::from_secs(60)).await?;
    let webhook_pid = pid(&mut s)?;
    let webhook = &s.webhook;
    measured(webhook_pid, "10 × 2.9 MB policies", async {
        let created = dry_run_policies(&api, &huge, 10).await;
        let seen =
            policy_reviews_seen(webhook, too_large, before, 10, Duration::from_secs(90)).await?;
        ensure!(seen > 0, "the webhook never saw the policies ({created})");
        Ok(format!(
            "{created}; the webhook refused {seen} of them unread (413)"
        ))
    })
    .await?;
    s.webhook.binary().check_running()?;

    // The apiserver validates 725 000 names slowly and may give up first: the same reviews,
    // and reviews just under the policy path's limit, straight to the webhook as the
    // apiserver sends them (its client certificate).
    let tls = WebhookTls::get(env).await?;
    let id = client_identity(env)?;
    let apiserver = tls_connector(&tls.ca_cert, Some((&id.cert, &id.key)))?;
    let addr = s.webhook.addr();
    for (what, names) in [("2.9 MB", 725_000), ("250 KB", 60_000)] {
        let review = policy_review(&policy(&ns, "direct", selectors.clone(), names)?);
        let request = post("/validate/propagationpolicy", &serde_json::to_vec(&review)?);
        step(&format!(
            "[Attack] 10 concurrent {what} policy reviews ({names} clusterNames) straight to \
             the webhook, 3 rounds"
        ));
        measured(
            webhook_pid,
            &format!("10 × {what} policy reviews, direct"),
            async {
                let mut rounds = Vec::new();
                for _ in 0..3 {
                    rounds.push(send_all(addr, &apiserver, &request, 10).await);
                }
                Ok(rounds.join("; "))
            },
        )
        .await?;
    }
    s.webhook.binary().check_running()?;
    step("[Create] a real policy is still checked, a real binding still admitted");
    let real = policy(&ns, "real", selectors, 3)?;
    ensure!(dry_run_policies(&api, &real, 1).await.starts_with("1 of 1"));
    a_real_create_passes(&c, &ns, "after").await?;
    s.teardown().await
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn policies_selecting_forty_1mb_config_maps_stay_under_the_memory_bound() -> Result<()> {
    let env = Env::get().await?;
    // Pages of 4 objects: each response is ~4 MB, so the byte ceiling (8 MiB) is reached
    // within the decision timeout even on a loaded apiserver.
    let builder = mtls_webhook(client_identity(env)?).arg("--policy-list-page-size=4");
    let mut s = WebhookSetup::with_webhook("mem_configmaps", builder).await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    synced_quota(&c, &ns, "q", &[("requests.cpu", "100")]).await?;
    step("[Create] 40 ConfigMaps of 1 MB each in the tenant's namespace");
    let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(c.clone(), &ns);
    for i in 0..40 {
        let cm = serde_json::from_value(json!({
            "metadata": {"name": format!("big-{i}"), "labels": {"app": "big"}},
            "data": {"blob": "x".repeat(1_000_000)}
        }))?;
        cms.create(&PostParams::default(), &cm)
            .await
            .with_context(|| format!("creating ConfigMap big-{i}"))?;
    }
    let api = policies(&c, &ns);
    let selecting = policy(
        &ns,
        "configs",
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "labelSelector": {"matchLabels": {"app": "big"}}}]),
        1,
    )?;
    dry_run_policies(&api, &selecting, 1).await;
    step("[Attack] 4 concurrent dry-run policies selecting them, twice");
    let skipped = "CheckSkipped";
    let before = policy_decisions(&s.webhook, skipped).await?;
    let webhook_pid = pid(&mut s)?;
    let webhook = &s.webhook;
    measured(
        webhook_pid,
        "4 × policies over 40 × 1 MB ConfigMaps, 2 rounds",
        async {
            let first = dry_run_policies(&api, &selecting, 4).await;
            let second = dry_run_policies(&api, &selecting, 4).await;
            let seen =
                policy_reviews_seen(webhook, skipped, before, 8, Duration::from_secs(30)).await?;
            ensure!(seen > 0, "no policy check was made ({first}; {second})");
            Ok(format!("{first}; {second}; {seen} checks skipped"))
        },
    )
    .await?;
    let log = std::fs::read_to_string(s.webhook.binary().log_path())?;
    let at_ceiling = log.matches("--policy-max-template-bytes").count();
    let timed_out = log
        .matches("did not finish within the decision timeout")
        .count();
    step(&format!(
        "[Result] checks skipped at the byte ceiling: {at_ceiling}, at the decision timeout: {timed_out}"
    ));
    s.webhook.binary().check_running()?;
    a_real_create_passes(&c, &ns, "after").await?;
    s.teardown().await
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn binding_reviews_with_a_wide_options_list_stay_under_the_memory_bound() -> Result<()> {
    let env = Env::get().await?;
    // Client auth off: anyone who reaches the port can send reviews.
    let mut s = WebhookSetup::new("mem_options").await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    // A quota in the namespace: each review is decided by the batcher and its reservation
    // written, so the reviews in flight are held while their writes go on.
    synced_quota(&c, &ns, "q", &[("requests.cpu", "1000")]).await?;
    wait_until_status_seen(
        &c,
        &Rb::deployment("probe", 1).request("cpu", "1").json(&ns),
    )
    .await?;
    let tls = WebhookTls::get(env).await?;
    let anonymous = tls_connector(&tls.ca_cert, None)?;
    let mut review = binding_review(
        &Rb::deployment("wide", 1).request("cpu", "1").json(&ns),
        "00000000-0000-4000-8000-00000000a0a0",
        false,
    );
    // 0 is 2 bytes with its comma: ~1 500 000 of them, just under --max-body-bytes (3 MiB).
    review["request"]["options"]["x"] = json!(vec![json!(0); 1_560_000]);
    let body = serde_json::to_vec(&review)?;
    ensure!(body.len() < 3 * 1024 * 1024, "{} bytes", body.len());
    let request = post("/validate/resourcebinding", &body);
    let addr = s.webhook.addr();
    let send = |n: usize| send_all(addr, &anonymous, &request, n);
    step(&format!(
        "[Attack] 10 concurrent binding reviews of {:.1} MB, request.options a wide list, \
         no client certificate, 3 rounds",
        body.len() as f64 / 1e6
    ));
    send(1).await;
    measured(
        pid(&mut s)?,
        "10 × 3 MB wide-options reviews, 3 rounds",
        async {
            let mut rounds = Vec::new();
            for _ in 0..3 {
                rounds.push(send(10).await);
            }
            Ok(rounds.join("; "))
        },
    )
    .await?;
    s.webhook.binary().check_running()?;
    let answered = send(1).await;
    ensure!(
        answered.starts_with("1 of 1"),
        "a wide-options review is read (options passed over): {answered}"
    );
    s.teardown().await
}

/// Connections the idle flood holds at once.
const IDLE: usize = 512;
/// How long the idle flood lasts.
const IDLE_FOR: Duration = Duration::from_secs(50);
/// Between two real creates: longer than the webhook's keep-alive idle time (the header
/// read timeout, 5 s), so that each create needs a new connection from the apiserver.
const CREATE_EVERY: Duration = Duration::from_secs(6);

/// Whether the server has closed `s` (EOF or an error; nothing to read is open).
fn closed(s: &tokio::net::TcpStream) -> bool {
    let mut one = [0u8; 1];
    match s.try_read(&mut one) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
    }
}

/// Holds up to [`IDLE`] silent connections to `addr` until `stop` or [`IDLE_FOR`]:
/// every 100 ms the closed ones are replaced. How many it opened.
async fn idle_flood(addr: std::net::SocketAddr, stop: tokio::sync::watch::Receiver<bool>) -> usize {
    let started = Instant::now();
    let mut held: Vec<tokio::net::TcpStream> = Vec::with_capacity(IDLE);
    let mut opened = 0usize;
    while started.elapsed() < IDLE_FOR && !*stop.borrow() {
        held.retain(|s| !closed(s));
        while held.len() < IDLE {
            match tokio::net::TcpStream::connect(addr).await {
                Ok(s) => {
                    held.push(s);
                    opened += 1;
                }
                Err(_) => break,
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    opened
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn idle_connections_leave_the_apiservers_creates_passing() -> Result<()> {
    let env = Env::get().await?;
    let mut s =
        WebhookSetup::with_webhook("idle_slots", mtls_webhook(client_identity(env)?)).await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    synced_quota(&c, &ns, "q", &[("requests.cpu", "100")]).await?;
    wait_until_status_seen(
        &c,
        &Rb::deployment("probe", 1).request("cpu", "1").json(&ns),
    )
    .await?;
    let (addr, admin) = (s.webhook.addr(), s.webhook.admin_addr());
    step(&format!(
        "[Attack] {IDLE} idle TCP connections from 127.0.0.1, each replaced as soon as it is \
         closed, for at most {IDLE_FOR:?}; a real create every {CREATE_EVERY:?}"
    ));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let flood = tokio::spawn(idle_flood(addr, stop_rx));
    let mut failed = Vec::new();
    for i in 0..6 {
        tokio::time::sleep(CREATE_EVERY).await;
        let name = format!("during-{i}");
        if let Err(e) = a_real_create_passes(&c, &ns, &name).await {
            failed.push(format!("{name}: {e:#}"));
        }
        let (code, _) = http_get(admin, "/readyz").await?;
        ensure!(code == 200, "/readyz answered {code} during the flood");
    }
    let _ = stop_tx.send(true);
    let opened = flood.await?;
    step(&format!(
        "[Result] {opened} idle connections opened; {} of 6 real creates failed {failed:?}",
        failed.len()
    ));
    // On loopback the attacker and the apiserver share 127.0.0.1, so the per-peer cap
    // cannot tell them apart: under a loaded machine the apiserver's own new connection is
    // sometimes evicted before its ClientHello arrives (1 of 6 in one of four full runs;
    // docs/security.md). In a cluster their addresses differ. Before the slots, 6 of 6 failed.
    ensure!(
        failed.len() <= 1,
        "creates failed during the flood: {failed:?}"
    );
    ensure!(opened >= IDLE, "the flood opened only {opened} connections");
    let evicted = karmada_quota_e2e::metric_sum(
        &s.webhook.metrics().await?,
        "kq_listener_pending_evicted_total",
        &["listener=\"admission webhook\""],
    );
    step(&format!(
        "[Result] kq_listener_pending_evicted_total: {evicted}"
    ));
    ensure!(evicted > 0, "the saturation was not counted");
    s.webhook.binary().check_running()?;
    s.teardown().await
}
