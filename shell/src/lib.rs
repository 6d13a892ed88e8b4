//! The I/O shell both karmada-quota binaries share around the engine (`core`), so each
//! `main` stays thin — what a process needs to run against Kubernetes and serve:
//!
//! - [`AdminArgs`] / [`LogArgs`] / [`ClientArgs`]: flags (with env twins) common to both
//!   binaries, flattened into each binary's clap struct;
//! - [`listener`]: the hardened listener every port is served by (connection cap,
//!   header/body timeouts, in-flight and body-byte budgets, optional TLS and client
//!   certificates, graceful shutdown), with its flags [`listener::ListenerArgs`];
//! - [`admin_router`]: the plain-HTTP admin port: `/metrics` (Prometheus text),
//!   `/livez`, `/readyz` (ready only once [`Readiness::set_ready`] was called, i.e. after
//!   the caches synced);
//! - [`init_logging`]: `tracing` to stderr, plain or JSON;
//! - [`client`]: a kube client from `--kubeconfig` or the usual discovery;
//! - [`plurals`]: kind → object-count name; [`relist`]: a watch's re-list swapped in at once;
//!   [`watch_cache`]: watcher configs: lists the apiserver's watch cache serves, or consistent ones;
//! - [`reservations`]: `--reservation-store` / `--reservation-namespace`, where
//!   admissions' reservations are made durable (reservation batches);
//! - [`backoff`]: the one retry backoff (doubling to a cap, reset on success);
//! - [`events`]: the one Kubernetes Event writer (aggregated series, paced, off the
//!   caller's path);
//! - [`untrusted`]: request-borne strings clipped for logs, identifier length limits;
//!   [`bounded`]: a capped map for caches keyed by them.

pub mod backoff;
pub mod bounded;
pub mod duration;
pub mod events;
pub mod listener;
pub mod plurals;
pub mod relist;
pub mod reservations;
pub use reservations::{ReservationArgs, ReservationStore};
pub mod unaccounted;
pub use unaccounted::UnaccountedArg;
pub mod untrusted;
pub mod watch_cache;

use parking_lot::Mutex;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::registry::Registry;

/// Admin endpoint flags.
#[derive(Clone, Debug, clap::Args)]
pub struct AdminArgs {
    /// Plain-HTTP admin address serving /metrics, /livez and /readyz. Loopback by
    /// default: give a routable address (e.g. `0.0.0.0:8080`) for a scraper in another
    /// pod, and restrict who reaches it (NetworkPolicy).
    #[arg(long, env = "KQ_ADMIN_LISTEN", default_value = "127.0.0.1:8080")]
    pub admin_listen: SocketAddr,
}

/// Logging flags.
#[derive(Clone, Debug, clap::Args)]
pub struct LogArgs {
    /// Log filter in tracing's EnvFilter syntax (e.g. `info,kube=warn`).
    #[arg(long, env = "KQ_LOG", default_value = "info")]
    pub log: String,
    /// Log format: `plain` or `json`.
    #[arg(long, env = "KQ_LOG_FORMAT", default_value = "plain", value_parser = ["plain", "json"])]
    pub log_format: String,
}

/// How to reach the Karmada control plane's API server.
#[derive(Clone, Debug, clap::Args)]
pub struct ClientArgs {
    /// Kubeconfig of the Karmada control plane. Default: in-cluster config, then
    /// $KUBECONFIG, then ~/.kube/config.
    #[arg(long, env = "KQ_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
}

/// Install the global tracing subscriber (stderr).
pub fn init_logging(args: &LogArgs) -> anyhow::Result<()> {
    let filter = tracing_subscriber::EnvFilter::try_new(&args.log)
        .map_err(|e| anyhow::anyhow!("invalid --log filter {:?}: {e}", args.log))?;
    // Colours only on a terminal: log files and pod logs stay plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let res = if args.log_format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    res.map_err(|e| anyhow::anyhow!("cannot install the logger: {e}"))
}

/// A kube client from `--kubeconfig`, or inferred (in-cluster, $KUBECONFIG, ~/.kube/config).
pub async fn client(args: &ClientArgs) -> anyhow::Result<kube::Client> {
    let config = match &args.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| anyhow::anyhow!("cannot read kubeconfig {}: {e}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| anyhow::anyhow!("invalid kubeconfig {}: {e}", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| anyhow::anyhow!("no Kubernetes configuration found: {e}"))?,
    };
    Ok(kube::Client::try_from(config)?)
}

/// Readiness shared between the component (which marks itself ready once its caches
/// synced) and `/readyz`.
#[derive(Clone, Debug, Default)]
pub struct Readiness(Arc<AtomicBool>);

impl Readiness {
    /// Mark ready.
    pub fn set_ready(&self) {
        self.0.store(true, Ordering::Release);
    }
    /// Mark not ready (e.g. lost leadership is *not* a reason; a lost cache is).
    pub fn set_not_ready(&self) {
        self.0.store(false, Ordering::Release);
    }
    /// Current state.
    pub fn is_ready(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct AdminState {
    registry: Arc<Mutex<Registry>>,
    ready: Readiness,
}

/// The admin router: `/metrics`, `/livez`, `/readyz`; anything else 404.
pub fn admin_router(registry: Arc<Mutex<Registry>>, ready: Readiness) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(AdminState { registry, ready })
}

async fn metrics(State(st): State<AdminState>) -> impl IntoResponse {
    let mut body = String::new();
    let res = prometheus_client::encoding::text::encode(&mut body, &st.registry.lock());
    match res {
        Ok(()) => (
            StatusCode::OK,
            [(
                header::CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, "cannot encode metrics").into_response(),
    }
}

async fn readyz(State(st): State<AdminState>) -> impl IntoResponse {
    if st.ready.is_ready() {
        (StatusCode::OK, "ok")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "caches not synced")
    }
}

/// Serve the admin router on `addr` (plain HTTP) within `limits` until `shutdown`
/// resolves.
pub async fn serve_admin(
    addr: SocketAddr,
    limits: listener::Limits,
    router: Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let tcp = listener::bind(addr, "admin").await?;
    listener::serve("admin", tcp, router, limits, None, shutdown).await?;
    Ok(())
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use prometheus_client::metrics::counter::Counter;
    use tower::ServiceExt;

    async fn get(router: Router, path: &str) -> (StatusCode, String) {
        let resp = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn readyz_is_503_until_ready_then_200() {
        let ready = Readiness::default();
        let reg = Arc::new(Mutex::new(Registry::default()));
        let (code, _) = get(admin_router(reg.clone(), ready.clone()), "/readyz").await;
        assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE);
        ready.set_ready();
        let (code, _) = get(admin_router(reg, ready), "/readyz").await;
        assert_eq!(code, StatusCode::OK);
    }

    #[tokio::test]
    async fn metrics_serves_registered_counters_and_unknown_paths_404() {
        let mut reg = Registry::default();
        let c = Counter::<u64>::default();
        reg.register("kq_test_events", "test counter", c.clone());
        c.inc_by(3);
        let reg = Arc::new(Mutex::new(reg));
        let (code, body) = get(admin_router(reg.clone(), Readiness::default()), "/metrics").await;
        assert_eq!(code, StatusCode::OK);
        assert!(body.contains("kq_test_events_total 3"), "{body}");
        let (code, _) = get(admin_router(reg, Readiness::default()), "/nope").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
    }
}
