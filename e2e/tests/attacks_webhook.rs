//! The webhook's listeners under attack, on the loopback control plane: only the apiserver
//! (its client certificate, presented through apiserver 0's AdmissionConfiguration) may
//! ask, and no listener can be held open or flooded past its bounds.
//!
//! Every test here failed on the code before the hardened listener: a forged review was
//! admitted and reserved quota, dripping and held connections stayed open, and a flood of
//! held 3 MiB bodies grew the webhook by hundreds of MiB.

use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use karmada_quota_e2e::attack::{
    self, FloodConn, MIB, drip, flood, foreign_client_cert, post, raw_request, tls_connector,
};
use karmada_quota_e2e::setup::{WebhookSetup, step, synced_quota};
use karmada_quota_e2e::webhook::{
    NS_LABEL, Rb, Webhook, WebhookBuilder, WebhookTls, binding_review, bindings, create,
    expect_admitted, quota_usage, vwc_from_manifest, wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, WebhookClientCert, try_wait_for};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, PostParams};
use tokio_rustls::TlsConnector;

/// Size of each flood body: the webhook's --max-body-bytes default (3 MiB), sent one
/// byte short.
const FLOOD_BODY: usize = 3 * 1024 * 1024;
/// Connections of each flood.
const FLOOD_CONNS: usize = 90;
/// The connection cap the flood tests run the webhook with.
const FLOOD_CAP: usize = 64;
/// The memory bound the floods must stay under: peak RSS over the RSS before the flood.
/// The listener's body budget is 32 MiB (--max-body-bytes-in-flight) plus per-connection
/// buffers; the code before it grew by ~280 MiB under the same flood.
const FLOOD_BOUND_MIB: f64 = 64.0;
/// Slack over a timeout before a connection must be closed (a loaded 2-core machine).
const SLACK: Duration = Duration::from_secs(3);

fn client_identity(env: &Env) -> Result<&WebhookClientCert> {
    env.webhook_client().ok_or_else(|| {
        anyhow!(
            "the control plane has no webhook client certificate (WEBHOOK_CLIENT_* in its \
             env file): bring it up with this tree's controlplane.sh"
        )
    })
}

/// A webhook that requires the apiserver's client certificate (its CN the one allowed
/// name unless `extra` names others), with `extra` flags.
fn mtls_webhook(id: &WebhookClientCert, extra: &[&str]) -> WebhookBuilder {
    let mut b = Webhook::builder().arg(format!("--client-ca-file={}", id.ca.display()));
    if !extra
        .iter()
        .any(|a| a.starts_with("--client-allowed-names"))
    {
        b = b.arg(format!("--client-allowed-names={}", WebhookClientCert::CN));
    }
    for a in extra {
        b = b.arg(*a);
    }
    b
}

/// A client CA without allowed names would trust every certificate it signed (with
/// Karmada's own CA: every component and every pull-mode agent, each able to reserve
/// quota): the webhook refuses to start so, naming the flags that fix it.
#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_client_ca_without_allowed_names_refuses_to_start() -> Result<()> {
    let env = Env::get().await?;
    let id = client_identity(env)?;
    step("[Create] the webhook with --client-ca-file and no --client-allowed-names");
    let message = Webhook::builder()
        .arg(format!("--client-ca-file={}", id.ca.display()))
        .refused(env)
        .await?;
    step(&format!("[Result] {message}"));
    ensure!(
        message.contains("--client-allowed-names") && message.contains("--client-allow-any-name"),
        "the webhook did not say why it refused: {message}"
    );
    step("[Create] the same with --client-allow-any-name: it starts");
    let accepted = Webhook::builder()
        .arg(format!("--client-ca-file={}", id.ca.display()))
        .arg("--client-allow-any-name")
        .start(env)
        .await?;
    drop(accepted);
    Ok(())
}

/// Clients of the webhook's HTTPS port: (no certificate, the apiserver's certificate).
async fn connectors(env: &Env) -> Result<(TlsConnector, TlsConnector)> {
    let tls = WebhookTls::get(env).await?;
    let id = client_identity(env)?;
    Ok((
        tls_connector(&tls.ca_cert, None)?,
        tls_connector(&tls.ca_cert, Some((&id.cert, &id.key)))?,
    ))
}

/// A forged AdmissionReview: the CREATE of a 4-cpu binding that will never exist, to
/// `path` (the validating or the mutating endpoint).
fn forged_review_to(ns: &str, path: &str) -> Vec<u8> {
    let obj = Rb::deployment("never-exists", 1)
        .request("cpu", "4")
        .json(ns);
    let review = binding_review(&obj, "00000000-0000-4000-8000-00000000f0f0", false);
    post(path, &serde_json::to_vec(&review).unwrap_or_default())
}

/// [`forged_review_to`] the validating endpoint.
fn forged_review(ns: &str) -> Vec<u8> {
    forged_review_to(ns, "/validate/resourcebinding")
}

/// A forged review POSTed to the webhook without a client certificate, or with one from
/// another CA, is refused during the TLS handshake and reserves nothing; a real create
/// through apiserver 0 (which presents its certificate) is admitted and reserved.
#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn forged_reviews_are_refused_at_the_handshake_while_the_apiserver_passes() -> Result<()> {
    let env = Env::get().await?;
    let id = client_identity(env)?;
    // Registration waits until the apiserver's reviews reach the webhook: the apiserver
    // path passes the client-certificate check.
    let s = WebhookSetup::with_webhook("forged_review", mtls_webhook(id, &[])).await?;
    let (c, ns) = (&s.client, s.ns());
    synced_quota(c, ns, "q", &[("requests.cpu", "10")]).await?;
    wait_until_status_seen(c, &Rb::deployment("probe", 1).request("cpu", "1").json(ns)).await?;

    let (anonymous, _) = connectors(env).await?;
    let decided_before = s.webhook.decisions(&[]).await?;
    step("[Attack] a forged CREATE review straight to the webhook, no client certificate");
    let refused = raw_request(s.webhook.addr(), Some(&anonymous), &forged_review(ns)).await;
    step(&format!(
        "[Result] {}",
        refused
            .as_ref()
            .map_or_else(|e| format!("refused: {e:#}"), |a| format!("answered: {a}"))
    ));
    let err = format!(
        "{:#}",
        refused
            .err()
            .context("a review without a certificate was answered")?
    );
    ensure!(
        err.to_ascii_lowercase().contains("certificate"),
        "refused, but not by the certificate check: {err}"
    );

    step(
        "[Attack] a forged CREATE review to the mutating endpoint (the waiting line), no client certificate",
    );
    let refused = raw_request(
        s.webhook.addr(),
        Some(&anonymous),
        &forged_review_to(ns, "/mutate/resourcebinding"),
    )
    .await;
    let err = format!(
        "{:#}",
        refused
            .err()
            .context("a mutating review without a certificate was answered")?
    );
    ensure!(
        err.to_ascii_lowercase().contains("certificate"),
        "the mutating review was refused, but not by the certificate check: {err}"
    );

    step("[Attack] the same with a client certificate of another CA (the apiserver's CN)");
    let dir = env
        .log_dir()
        .join(format!("foreign-client-{}", std::process::id()));
    let (_, cert, key) = foreign_client_cert(&dir, WebhookClientCert::CN).await?;
    let stranger = tls_connector(&WebhookTls::get(env).await?.ca_cert, Some((&cert, &key)))?;
    let refused = raw_request(s.webhook.addr(), Some(&stranger), &forged_review(ns)).await;
    step(&format!(
        "[Result] {}",
        refused
            .as_ref()
            .map_or_else(|e| format!("refused: {e:#}"), |a| format!("answered: {a}"))
    ));
    ensure!(
        refused.is_err(),
        "a certificate of another CA was answered: {refused:?}"
    );

    step("[Check] nothing was decided, nothing was reserved");
    let decided = s.webhook.decisions(&[]).await? - decided_before;
    ensure!(decided == 0, "the webhook decided {decided} forged reviews");
    let usage = quota_usage(c, ns, "q").await?;
    ensure!(
        usage.reservations.is_empty() && usage.effective_of("requests.cpu") == 0,
        "the forged reviews reserved quota: {:?}",
        usage.reservations
    );

    step("[Create] a real 4-cpu binding through apiserver 0: admitted and reserved");
    let real =
        expect_admitted(create(c, &Rb::deployment("real", 1).request("cpu", "4").json(ns)).await?)?;
    let uid = real.uid().unwrap_or_default();
    let usage = quota_usage(c, ns, "q").await?;
    ensure!(
        usage.reservation_of(&uid).is_some() && usage.effective_of("requests.cpu") == 4,
        "the real binding {uid} is not reserved: {:?}",
        usage.reservations
    );
    let _ = std::fs::remove_dir_all(&dir);
    s.teardown().await
}

/// With --client-allowed-names naming someone else, the apiserver's own certificate (CN
/// karmada-apiserver-webhook-client) is refused too: its call fails, and failurePolicy
/// Fail refuses the create.
#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_certificate_without_an_allowed_name_is_refused() -> Result<()> {
    let env = Env::get().await?;
    let id = client_identity(env)?;
    let c = env.client()?;
    let ns = TestNs::new(&c, "allowed_names").await?;
    let mut webhook = mtls_webhook(id, &["--client-allowed-names=someone-else,other.example"])
        .start(env)
        .await?;
    synced_quota(&c, ns.name(), "q", &[("requests.cpu", "10")]).await?;
    let tls = WebhookTls::get(env).await?;
    let name = format!("kq-e2e-{}", ns.name());
    // Routed to this test's namespace only (NS_LABEL), like Registration does; not
    // Registration itself, which waits for a call that must fail here.
    let vwc = vwc_from_manifest(&name, &webhook.url(), &tls.ca_bundle, &name)?;
    Api::<k8s_openapi::api::core::v1::Namespace>::all(c.clone())
        .patch(
            ns.name(),
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(
                serde_json::json!({"metadata": {"labels": {NS_LABEL: &name}}}),
            ),
        )
        .await?;
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(c.clone());
    vwcs.create(&PostParams::default(), &vwc).await?;

    step("[Create] a binding through apiserver 0: its webhook call must fail the name check");
    let obj = Rb::deployment("real", 1)
        .request("cpu", "4")
        .json(ns.name());
    let refusal = try_wait_for(
        "the apiserver's call to fail the client-name check",
        Duration::from_secs(30),
        || async {
            match create(&c, &obj).await? {
                Err(s) if s.message.contains("failed calling webhook") => Ok(Some(s)),
                Err(s) => bail!("refused for another reason: {} {}", s.code, s.message),
                Ok(o) => {
                    // Admitted before the apiserver saw the configuration: try again.
                    bindings(&c, ns.name())
                        .delete(&o.name_any(), &DeleteParams::default())
                        .await?;
                    Ok(None)
                }
            }
        },
    )
    .await;
    let _ = vwcs.delete(&name, &DeleteParams::default()).await;
    let refusal = refusal?;
    step(&format!("[Result] {} {}", refusal.code, refusal.message));
    // The apiserver names the certificate when it reads the webhook's TLS alert; when
    // its request write races the alert, it sees the connection cut instead (broken
    // pipe, reset, EOF). Then the webhook's own log must say why it cut it.
    if !refusal.message.contains("certificate") {
        let cut = ["broken pipe", "connection reset", "EOF"]
            .iter()
            .any(|m| refusal.message.contains(m));
        let log = webhook.binary().log_tail(400);
        ensure!(
            cut && log.contains("TLS handshake failed") && log.contains("NotValidForName"),
            "the call failed, but not on the certificate: {}\nwebhook log:\n{log}",
            refusal.message
        );
    }
    let decided = webhook.decisions(&[]).await?;
    ensure!(
        decided == 0,
        "the webhook decided {decided} reviews past the name check"
    );
    let usage = quota_usage(&c, ns.name(), "q").await?;
    ensure!(usage.reservations.is_empty(), "{:?}", usage.reservations);
    drop(webhook);
    ns.delete(&c).await
}

/// Headers dripped one byte a second are cut at --header-read-timeout (HTTPS and admin
/// ports), and a body sent one byte short is answered 408 and closed at
/// --body-read-timeout.
#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn dripping_headers_and_held_bodies_are_cut_at_their_timeouts() -> Result<()> {
    let env = Env::get().await?;
    let id = client_identity(env)?;
    let webhook = mtls_webhook(id, &["--header-read-timeout=1s", "--body-read-timeout=2s"])
        .start(env)
        .await?;
    let (_, apiserver) = connectors(env).await?;
    let head =
        b"POST /validate/resourcebinding HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 10\r\n\r\n";
    let header_bound = Duration::from_secs(1) + SLACK;

    for (port, tls) in [("HTTPS", Some(&apiserver)), ("admin", None)] {
        let addr = if tls.is_some() {
            webhook.addr()
        } else {
            webhook.admin_addr()
        };
        step(&format!(
            "[Attack] {port}: request headers dripped one byte per second"
        ));
        let closed = drip(
            addr,
            tls,
            head,
            Duration::from_secs(1),
            Duration::from_secs(20),
        )
        .await?;
        step(&format!("[Result] closed after {closed:?}"));
        let closed = closed
            .with_context(|| format!("{port}: the dripping connection is still open after 20 s"))?;
        ensure!(
            closed <= header_bound,
            "{port}: closed only after {closed:?} (bound {header_bound:?})"
        );
    }

    step("[Attack] HTTPS: a 10-byte body sent one byte short and held");
    let mut io = attack::connect(webhook.addr(), Some(&apiserver)).await?;
    let started = std::time::Instant::now();
    tokio::io::AsyncWriteExt::write_all(&mut io, head).await?;
    tokio::io::AsyncWriteExt::write_all(&mut io, b"{\"a\":1234").await?;
    let (answer, closed, _) = attack::read_until_closed(&mut io, Duration::from_secs(20)).await;
    let took = started.elapsed();
    step(&format!(
        "[Result] {:?} after {took:?}",
        answer.lines().next()
    ));
    ensure!(
        closed,
        "the held body's connection is still open after 20 s"
    );
    ensure!(answer.starts_with("HTTP/1.1 408"), "answered {answer:?}");
    ensure!(
        took <= Duration::from_secs(2) + SLACK,
        "closed only after {took:?}"
    );
    Ok(())
}

/// 90 TLS connections with the apiserver's certificate, each sending a 3 MiB review one
/// byte short: connections over --max-connections are closed at once, the webhook's RSS
/// stays within FLOOD_BOUND_MIB of its RSS before, and it still admits a real binding.
/// The same flood (plain HTTP) against the admin port is bounded alike.
#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn floods_of_held_bodies_stay_bounded() -> Result<()> {
    let env = Env::get().await?;
    let id = client_identity(env)?;
    let cap = format!("--max-connections={FLOOD_CAP}");
    let mut s = WebhookSetup::with_webhook("flood", mtls_webhook(id, &[&cap])).await?;
    let (c, ns) = (s.client.clone(), s.ns().to_owned());
    synced_quota(&c, &ns, "q", &[("requests.cpu", "10")]).await?;
    wait_until_status_seen(
        &c,
        &Rb::deployment("probe", 1).request("cpu", "1").json(&ns),
    )
    .await?;
    expect_admitted(
        create(
            &c,
            &Rb::deployment("before", 1).request("cpu", "1").json(&ns),
        )
        .await?,
    )?;
    let pid = s
        .webhook
        .binary()
        .pid()
        .ok_or_else(|| anyhow!("the webhook is not running"))?;
    let (_, apiserver) = connectors(env).await?;

    for (port, addr, tls, path) in [
        (
            "HTTPS",
            s.webhook.addr(),
            Some(&apiserver),
            "/validate/resourcebinding",
        ),
        ("admin", s.webhook.admin_addr(), None, "/metrics"),
    ] {
        step(&format!(
            "[Attack] {port}: {FLOOD_CONNS} connections, each a {} MiB body one byte short, held",
            FLOOD_BODY / MIB as usize
        ));
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n\
             content-length: {FLOOD_BODY}\r\n\r\n"
        );
        let f = flood(
            addr,
            tls,
            FLOOD_CONNS,
            &head,
            FLOOD_BODY,
            Duration::from_secs(4),
            pid,
        )
        .await?;
        let answered: Vec<&FloodConn> = f
            .conns
            .iter()
            .filter(|c| matches!(c, FloodConn::Answered(_)))
            .collect();
        step(&format!(
            "[Result] {port}: RSS {:.1} MiB before, {:.1} MiB peak (+{:.1} MiB); {} closed at \
             once, {} answered ({:?}…), {} held",
            f.rss_before as f64 / MIB as f64,
            f.rss_peak as f64 / MIB as f64,
            f.growth_mib(),
            f.closed_at_once(),
            answered.len(),
            answered.iter().take(3).collect::<Vec<_>>(),
            f.count(|c| *c == FloodConn::Held),
        ));
        ensure!(
            f.growth_mib() <= FLOOD_BOUND_MIB,
            "{port}: RSS grew by {:.1} MiB (bound {FLOOD_BOUND_MIB} MiB)",
            f.growth_mib()
        );
        ensure!(
            f.closed_at_once() >= FLOOD_CONNS - FLOOD_CAP,
            "{port}: only {} of {FLOOD_CONNS} connections were closed at once (cap {FLOOD_CAP})",
            f.closed_at_once()
        );
        ensure!(
            FLOOD_CONNS - f.closed_at_once() <= FLOOD_CAP,
            "{port}: more connections than the cap were taken"
        );
        s.webhook.binary().check_running()?;
    }

    step("[Create] after the floods, a real binding through apiserver 0 is still admitted");
    let after = try_wait_for(
        "a real create to be admitted after the flood",
        Duration::from_secs(20),
        || async {
            Ok::<_, anyhow::Error>(
                create(
                    &c,
                    &Rb::deployment("after", 1).request("cpu", "1").json(&ns),
                )
                .await?
                .ok(),
            )
        },
    )
    .await?;
    let usage = quota_usage(&c, &ns, "q").await?;
    ensure!(
        usage
            .reservation_of(&after.uid().unwrap_or_default())
            .is_some(),
        "{:?}",
        usage.reservations
    );
    s.teardown().await
}
