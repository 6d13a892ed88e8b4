//! The HTTPS server: rustls (ring), certificate reloaded when its files change.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use axum::Router;
use axum_server::Handle;
use axum_server::tls_rustls::RustlsConfig;

use crate::{Error, Result};

/// How long in-flight reviews may finish after shutdown was requested.
pub const GRACEFUL_SHUTDOWN: Duration = Duration::from_secs(10);

/// Install ring as rustls' process-wide crypto provider (once; later calls are no-ops).
/// kube's client uses the same provider.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Load the certificate chain and key (PEM).
pub async fn load_tls(cert: &Path, key: &Path) -> Result<RustlsConfig> {
    RustlsConfig::from_pem_file(cert, key)
        .await
        .map_err(|source| tls_error(cert, key, source))
}

fn tls_error(cert: &Path, key: &Path, source: std::io::Error) -> Error {
    Error::Tls {
        cert: cert.display().to_string(),
        key: key.display().to_string(),
        source,
    }
}

async fn mtimes(cert: &Path, key: &Path) -> Option<(SystemTime, SystemTime)> {
    let c = tokio::fs::metadata(cert).await.ok()?.modified().ok()?;
    let k = tokio::fs::metadata(key).await.ok()?.modified().ok()?;
    Some((c, k))
}

/// Poll the files' modification times every `interval` and reload `config` when either
/// changed (mounted Secrets change through a symlink swap; metadata follows it). A reload
/// that fails (e.g. the key is not yet rotated with the certificate) keeps the old
/// certificate and is tried again on the next tick. Runs forever; spawn it.
pub async fn reload_tls_on_change(
    config: RustlsConfig,
    cert: PathBuf,
    key: PathBuf,
    interval: Duration,
) {
    let mut seen = mtimes(&cert, &key).await;
    let mut tick = tokio::time::interval(interval.max(Duration::from_millis(100)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let now = mtimes(&cert, &key).await;
        if now.is_none() || now == seen {
            continue;
        }
        match config.reload_from_pem_file(&cert, &key).await {
            Ok(()) => {
                tracing::info!(cert = %cert.display(), "TLS certificate reloaded");
                seen = now;
            }
            Err(e) => {
                tracing::warn!(error = %tls_error(&cert, &key, e), "TLS reload failed; keeping the current certificate");
            }
        }
    }
}

/// Serve `router` over HTTPS on `addr` until `handle` is told to shut down
/// (`handle.listening()` gives the bound address, e.g. for port 0 in tests).
pub async fn serve_https(
    addr: SocketAddr,
    router: Router,
    tls: RustlsConfig,
    handle: Handle<SocketAddr>,
) -> Result<()> {
    tracing::info!(%addr, "admission webhook listening (HTTPS)");
    axum_server::bind_rustls(addr, tls)
        .handle(handle)
        .serve(router.into_make_service())
        .await
        .map_err(|source| Error::Serve { addr, source })
}
