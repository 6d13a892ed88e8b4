//! The admission HTTPS listener: the runtime's hardened listener (connection cap,
//! header/body read timeouts, budgets) with rustls (ring), the serving certificate and the
//! client CA reloaded when their files change, and — with `--client-ca-file` — a client
//! certificate required during the TLS handshake.

use std::net::SocketAddr;

use axum::Router;
use karmada_quota_shell::listener::{self, Limits, ServerTls, TlsFiles};

use crate::error::{Error, Result};

/// Install ring as rustls' process-wide crypto provider (once; later calls are no-ops).
/// kube's client uses the same provider.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Load the TLS configuration (certificate, key, client CA).
pub fn load_tls(files: TlsFiles) -> Result<ServerTls> {
    Ok(ServerTls::load(files)?)
}

/// Serve `router` over HTTPS on `addr` within `limits` until `shutdown` resolves.
pub async fn serve_https(
    addr: SocketAddr,
    router: Router,
    tls: ServerTls,
    limits: Limits,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    let serve = async {
        let tcp = listener::bind(addr, "admission webhook").await?;
        listener::serve(
            "admission webhook",
            tcp,
            router,
            limits,
            Some(tls),
            shutdown,
        )
        .await
    };
    serve.await.map_err(|source| Error::Serve {
        addr,
        source: std::sync::Arc::new(source),
    })
}
