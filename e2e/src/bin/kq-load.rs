//! `kq-load`: the load tool behind `bench/`.
//!
//! ```text
//!  creates       N ResourceBinding creates through the apiserver, C at a time,
//!                round-robin over one or more namespaces                          (P1)
//!  reviews       N AdmissionReviews POSTed straight to an HTTPS endpoint, C at a time (P2)
//!  bare-server   an HTTPS endpoint on the webhook's stack (axum + axum-server, rustls
//!                with ring) that answers every review "allowed" without work      (P2)
//!  seed-used     writes a KarmadaQuota's status.used as the controller would
//!  wait-webhook  until a dry-run create does (or no longer does) reach the webhook
//!  wait-quota    until the webhook decides a namespace's bindings (no `status unknown`)
//!  free-port     prints a free TCP port on 127.0.0.1
//! ```
//!
//! `creates` and `reviews` print one JSON line (rate, latency percentiles, outcome counts,
//! a few error samples) on stdout and a summary on stderr. Every loop is bounded; the
//! bare server exits by itself after `--max-seconds`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use axum::Json;
use axum::body::Bytes;
use clap::{Parser, Subcommand};
use futures::StreamExt;
use karmada_quota_e2e::webhook::{
    Rb, binding_review, create_with, post_review, review_client, seed_used, wait_until_status_seen,
};
use karmada_quota_e2e::{http_get_ok, metric_sum};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Parser, Debug)]
#[command(name = "kq-load", about = "Load tool for karmada-quota's benchmarks", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Create N ResourceBindings (1 replica, --cpu each) through the apiserver.
    Creates(CreatesArgs),
    /// POST N AdmissionReviews of ResourceBinding CREATEs to an HTTPS endpoint.
    Reviews(ReviewsArgs),
    /// Serve HTTPS on the webhook's stack, answering every POST with an allowed review.
    BareServer {
        /// Address to listen on.
        #[arg(long, default_value = "127.0.0.1:9444")]
        listen: SocketAddr,
        /// PEM certificate.
        #[arg(long)]
        tls_cert_file: PathBuf,
        /// PEM private key.
        #[arg(long)]
        tls_private_key_file: PathBuf,
        /// Exit after this many seconds.
        #[arg(long, default_value_t = 900)]
        max_seconds: u64,
    },
    /// Write status.used (and status.hard = spec.hard, and the reservation-store fence
    /// over it) of a KarmadaQuota, as the controller does.
    SeedUsed {
        /// Kubeconfig of the apiserver.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Namespace of the quota.
        #[arg(long)]
        namespace: String,
        /// Name of the quota.
        #[arg(long)]
        quota: String,
        /// name=quantity pairs, comma-separated.
        #[arg(long, value_delimiter = ',')]
        used: Vec<String>,
    },
    /// Wait until a dry-run ResourceBinding create in the namespace reaches the webhook
    /// (`--called`) or no longer does (`--not-called`), judged by its decision counter.
    WaitWebhook(WaitWebhookArgs),
    /// Wait until a dry-run create of a 1-replica binding (--cpu) in the namespace is no
    /// longer refused with `status unknown` (the webhook's cache has the quota's status).
    WaitQuota {
        /// Kubeconfig of the apiserver.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Namespace with the quota.
        #[arg(long)]
        namespace: String,
        /// cpu request of the probe.
        #[arg(long, default_value = "1m")]
        cpu: String,
    },
    /// Print a free TCP port on 127.0.0.1.
    FreePort,
}

/// The flags of `kq-load creates`.
#[derive(clap::Args, Debug)]
struct CreatesArgs {
    /// Kubeconfig of the apiserver.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Namespace(s) to create into (must exist); comma-separated or repeated, creates
    /// are spread over them round-robin.
    #[arg(long, value_delimiter = ',', required = true)]
    namespace: Vec<String>,
    /// Creates in the run.
    #[arg(long, default_value_t = 2000)]
    count: usize,
    /// Creates in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Binding name prefix (names are <prefix>-<i>).
    #[arg(long, default_value = "rb")]
    prefix: String,
    /// cpu request per replica.
    #[arg(long, default_value = "1m")]
    cpu: String,
    /// A label for the JSON line (e.g. the mode and round).
    #[arg(long, default_value = "")]
    label: String,
}

/// The flags of `kq-load reviews`.
#[derive(clap::Args, Debug)]
struct ReviewsArgs {
    /// Base URL, e.g. https://127.0.0.1:9443.
    #[arg(long)]
    url: String,
    /// Path to POST to.
    #[arg(long, default_value = "/validate/resourcebinding")]
    path: String,
    /// PEM CA that signed the endpoint's certificate.
    #[arg(long)]
    ca: PathBuf,
    /// Namespace named by the reviewed bindings.
    #[arg(long)]
    namespace: String,
    /// Reviews in the run (after the warm-up).
    #[arg(long, default_value_t = 20000)]
    count: usize,
    /// Reviews in flight at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Unmeasured reviews first (opens the connections).
    #[arg(long, default_value_t = 500)]
    warmup: usize,
    /// Send the reviews with dryRun=true (decide, write nothing).
    #[arg(long)]
    dry_run: bool,
    /// cpu request per replica.
    #[arg(long, default_value = "1m")]
    cpu: String,
    /// A label for the JSON line.
    #[arg(long, default_value = "")]
    label: String,
}

/// The flags of `kq-load wait-webhook`.
#[derive(clap::Args, Debug)]
struct WaitWebhookArgs {
    /// Kubeconfig of the apiserver.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Namespace of the probe (must exist).
    #[arg(long)]
    namespace: String,
    /// The webhook's admin address (host:port).
    #[arg(long)]
    admin: SocketAddr,
    /// Wait until the webhook is no longer called.
    #[arg(long)]
    not_called: bool,
    /// Give up after this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

#[tokio::main]
async fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    match Cli::parse().command {
        Command::Creates(a) => creates(a).await,
        Command::Reviews(a) => reviews(a).await,
        Command::BareServer {
            listen,
            tls_cert_file,
            tls_private_key_file,
            max_seconds,
        } => bare_server(listen, tls_cert_file, tls_private_key_file, max_seconds).await,
        Command::SeedUsed {
            kubeconfig,
            namespace,
            quota,
            used,
        } => {
            let client = client(&kubeconfig).await?;
            let pairs: Vec<(&str, &str)> = used
                .iter()
                .map(|p| p.split_once('=').context("--used wants name=quantity"))
                .collect::<Result<_>>()?;
            seed_used(&client, &namespace, &quota, &pairs).await?;
            Ok(())
        }
        Command::WaitQuota {
            kubeconfig,
            namespace,
            cpu,
        } => {
            let client = client(&kubeconfig).await?;
            let probe = Rb::deployment("kq-load-probe", 1)
                .request("cpu", &cpu)
                .json(&namespace);
            wait_until_status_seen(&client, &probe).await
        }
        Command::FreePort => {
            println!("{}", karmada_quota_e2e::free_port()?);
            Ok(())
        }
        Command::WaitWebhook(a) => wait_webhook(a).await,
    }
}

/// `kq-load creates`: the creates, `concurrency` at a time; one JSON line.
async fn creates(a: CreatesArgs) -> Result<()> {
    let CreatesArgs {
        kubeconfig,
        namespace,
        count,
        concurrency,
        prefix,
        cpu,
        label,
    } = a;
    let client = client(&kubeconfig).await?;
    let objects: Vec<Value> = (0..count)
        .map(|i| {
            Rb::deployment(&format!("{prefix}-{i:05}"), 1)
                .request("cpu", &cpu)
                .json(&namespace[i % namespace.len()])
        })
        .collect();
    let started = Instant::now();
    let results: Vec<(Duration, Outcome)> = futures::stream::iter(objects)
        .map(|obj| {
            let client = client.clone();
            async move {
                let t = Instant::now();
                let outcome = match create_with(&client, &obj, false).await {
                    Ok(Ok(_)) => Outcome::Ok,
                    Ok(Err(s)) => {
                        Outcome::Refused(format!("{} {}: {}", s.code, s.reason, s.message))
                    }
                    Err(e) => Outcome::Error(format!("{e:#}")),
                };
                (t.elapsed(), outcome)
            }
        })
        .buffer_unordered(concurrency)
        .collect()
        .await;
    report("creates", &label, concurrency, started.elapsed(), results)
}

/// `kq-load reviews`: the warm-up, then the timed reviews; one JSON line.
async fn reviews(a: ReviewsArgs) -> Result<()> {
    let ReviewsArgs {
        url,
        path,
        ca,
        namespace,
        count,
        concurrency,
        warmup,
        dry_run,
        cpu,
        label,
    } = a;
    let client = review_client(&url, &ca)?;
    let reviews: Vec<Value> = (0..warmup + count)
        .map(|i| {
            let obj = Rb::deployment(&format!("review-{i:06}"), 1)
                .request("cpu", &cpu)
                .json(&namespace);
            binding_review(&obj, &uuid_like(i), dry_run)
        })
        .collect();
    let mut reviews = reviews.into_iter();
    let run = |reviews: Vec<Value>| {
        let (client, path) = (client.clone(), path.clone());
        async move {
            futures::stream::iter(reviews)
                .map(|review| {
                    let (client, path) = (client.clone(), path.clone());
                    async move {
                        let t = Instant::now();
                        let outcome = match post_review(&client, &path, &review).await {
                            Ok(r) if r["allowed"] == true => Outcome::Ok,
                            Ok(r) => Outcome::Refused(format!(
                                "{} {}",
                                r["status"]["code"], r["status"]["message"]
                            )),
                            Err(e) => Outcome::Error(format!("{e:#}")),
                        };
                        (t.elapsed(), outcome)
                    }
                })
                .buffer_unordered(concurrency)
                .collect::<Vec<_>>()
                .await
        }
    };
    let warm: Vec<Value> = reviews.by_ref().take(warmup).collect();
    let warm_errors = run(warm)
        .await
        .into_iter()
        .filter(|(_, o)| !matches!(o, Outcome::Ok))
        .count();
    if warm_errors > 0 {
        eprintln!("warm-up: {warm_errors} reviews not allowed");
    }
    let started = Instant::now();
    let results = run(reviews.collect()).await;
    report("reviews", &label, concurrency, started.elapsed(), results)
}

/// `kq-load wait-webhook`: dry-run creates until the webhook's decision counter says it
/// is (or is no longer) called.
async fn wait_webhook(a: WaitWebhookArgs) -> Result<()> {
    let WaitWebhookArgs {
        kubeconfig,
        namespace,
        admin,
        not_called,
        timeout,
    } = a;
    let client = client(&kubeconfig).await?;
    let probe = Rb::configmap("kq-load-probe").json(&namespace);
    let deadline = Instant::now() + Duration::from_secs(timeout);
    loop {
        let before = decisions(admin).await?;
        let _ = create_with(&client, &probe, true).await?;
        let called = decisions(admin).await? > before;
        if called != not_called {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the webhook was {} called after {timeout}s",
                if not_called { "still" } else { "not" }
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn client(kubeconfig: &std::path::Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(30));
    // Every answer counts as given: kube's default layer would repeat a create refused
    // with 429/503/504 (a new object, a new uid) and hide the refusal from the tally.
    config.default_retry = false;
    Ok(Client::try_from(config)?)
}

async fn decisions(admin: SocketAddr) -> Result<u64> {
    Ok(metric_sum(
        &http_get_ok(admin, "/metrics").await?,
        "kq_webhook_decisions_total",
        &["kind=\"resourcebinding\""],
    ))
}

/// A distinct RFC 4122-shaped uid per request.
fn uuid_like(i: usize) -> String {
    format!("6b1d4c2a-0000-4000-8000-{i:012}")
}

enum Outcome {
    Ok,
    /// An answer that is not a success (a refusal, a denial).
    Refused(String),
    /// No answer (transport, timeout).
    Error(String),
}

#[derive(Serialize)]
struct Summary {
    kind: &'static str,
    label: String,
    count: usize,
    concurrency: usize,
    elapsed_s: f64,
    per_second: f64,
    ok: usize,
    refused: usize,
    errors: usize,
    p50_ms: f64,
    p90_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    samples: Vec<String>,
}

fn report(
    kind: &'static str,
    label: &str,
    concurrency: usize,
    elapsed: Duration,
    results: Vec<(Duration, Outcome)>,
) -> Result<()> {
    let mut latencies: Vec<Duration> = results.iter().map(|(d, _)| *d).collect();
    latencies.sort();
    let pct = |p: f64| {
        if latencies.is_empty() {
            return 0.0;
        }
        let i = ((latencies.len() as f64 * p).ceil() as usize).clamp(1, latencies.len()) - 1;
        latencies[i].as_secs_f64() * 1000.0
    };
    let (mut ok, mut refused, mut errors, mut samples) = (0, 0, 0, Vec::new());
    for (_, o) in &results {
        match o {
            Outcome::Ok => ok += 1,
            Outcome::Refused(m) => {
                refused += 1;
                if samples.len() < 5 {
                    samples.push(m.clone());
                }
            }
            Outcome::Error(m) => {
                errors += 1;
                if samples.len() < 5 {
                    samples.push(m.clone());
                }
            }
        }
    }
    let summary = Summary {
        kind,
        label: label.to_owned(),
        count: results.len(),
        concurrency,
        elapsed_s: elapsed.as_secs_f64(),
        per_second: results.len() as f64 / elapsed.as_secs_f64().max(1e-9),
        ok,
        refused,
        errors,
        p50_ms: pct(0.50),
        p90_ms: pct(0.90),
        p99_ms: pct(0.99),
        max_ms: pct(1.0),
        samples,
    };
    eprintln!(
        "{kind} {label}: {} in {:.2}s = {:.0}/s, ok {ok}, refused {refused}, errors {errors}, \
         p50 {:.1} ms, p99 {:.1} ms",
        summary.count, summary.elapsed_s, summary.per_second, summary.p50_ms, summary.p99_ms
    );
    println!("{}", serde_json::to_string(&summary)?);
    Ok(())
}

/// The floor of any correct webhook on this stack: TLS, HTTP/1.1, read the body, parse
/// the review far enough to echo `request.uid`, answer allowed.
async fn bare_server(
    listen: SocketAddr,
    cert: PathBuf,
    key: PathBuf,
    max_seconds: u64,
) -> Result<()> {
    #[derive(serde::Deserialize)]
    struct Review {
        request: Request,
    }
    #[derive(serde::Deserialize)]
    struct Request {
        uid: String,
    }
    async fn allow(body: Bytes) -> Json<Value> {
        let uid = serde_json::from_slice::<Review>(&body)
            .map(|r| r.request.uid)
            .unwrap_or_default();
        Json(json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": uid, "allowed": true}
        }))
    }
    let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(&cert, &key)
        .await
        .with_context(|| format!("loading {} / {}", cert.display(), key.display()))?;
    let app = axum::Router::new().fallback(axum::routing::post(allow));
    let handle = axum_server::Handle::new();
    tokio::spawn({
        let handle = handle.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(max_seconds)).await;
            handle.shutdown();
        }
    });
    eprintln!("bare server on https://{listen} for at most {max_seconds}s");
    axum_server::bind_rustls(listen, tls)
        .handle(handle)
        .serve(app.into_make_service())
        .await
        .context("serving")
}
