//! Prometheus as it is deployed behind a multi-tenant front end (Thanos, Cortex, Mimir
//! style): HTTPS with a private CA, a bearer token, and a tenant header, in front of the
//! test's real Prometheus. Every request without the token gets 401, without the tenant
//! 403 (both with a plain-text reason, as such front ends answer); the rest is forwarded to
//! Prometheus as is.
//!
//! ```text
//!  Gateway::start(dir, upstream, token, tenant)
//!     certs: a CA and a serving certificate for IP 127.0.0.1 in `dir` (ca.pem)
//!     axum-server (rustls) on 127.0.0.1:<free> ── check Authorization, X-Scope-OrgID
//!        └─► GET http://<upstream><path and query> ─► status and body back
//! ```

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::IntoResponse;
use rcgen::{DnType, ExtendedKeyUsagePurpose, SanType};

use crate::certs::{self, Ca};

/// A running gateway; stopped when dropped.
pub struct Gateway {
    addr: SocketAddr,
    ca: PathBuf,
    handle: axum_server::Handle<SocketAddr>,
}

#[derive(Clone)]
struct Guard {
    upstream: SocketAddr,
    token: String,
    tenant: String,
}

impl Gateway {
    /// Starts the gateway with its certificates in `dir`, forwarding to the Prometheus at
    /// `upstream` (plain HTTP on loopback) what carries `Bearer <token>` and
    /// `X-Scope-OrgID: <tenant>`.
    pub async fn start(
        dir: &Path,
        upstream: SocketAddr,
        token: &str,
        tenant: &str,
    ) -> Result<Gateway> {
        std::fs::create_dir_all(dir)?;
        certificates(dir)?;
        let tls = axum_server::tls_rustls::RustlsConfig::from_pem_file(
            dir.join("server.pem"),
            dir.join("server.key"),
        )
        .await
        .context("loading the gateway's certificate")?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let app = axum::Router::new().fallback(forward).with_state(Guard {
            upstream,
            token: token.to_owned(),
            tenant: tenant.to_owned(),
        });
        let handle = axum_server::Handle::new();
        let server = axum_server::from_tcp_rustls(listener, tls)?
            .handle(handle.clone())
            .serve(app.into_make_service());
        tokio::spawn(async move {
            if let Err(e) = server.await {
                eprintln!("prometheus gateway stopped: {e}");
            }
        });
        Ok(Gateway {
            addr,
            ca: dir.join("ca.pem"),
            handle,
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The CA that signs the gateway's certificate.
    pub fn ca(&self) -> &Path {
        &self.ca
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        self.handle.shutdown();
    }
}

async fn forward(State(g): State<Guard>, headers: HeaderMap, uri: Uri) -> axum::response::Response {
    let auth = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if auth != format!("Bearer {}", g.token) {
        return (StatusCode::UNAUTHORIZED, "authentication required\n").into_response();
    }
    let tenant = headers
        .get("x-scope-orgid")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if tenant != g.tenant {
        return (StatusCode::FORBIDDEN, "no org id\n").into_response();
    }
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    match crate::http_get(g.upstream, path).await {
        Ok((code, body)) => (
            StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_GATEWAY),
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => (StatusCode::BAD_GATEWAY, format!("upstream: {e}\n")).into_response(),
    }
}

/// A CA (`CN=kq-e2e-prometheus-ca`) and a serving certificate for IP 127.0.0.1 signed by
/// it (`CN=127.0.0.1`, serial 9, basicConstraints CA:FALSE, extendedKeyUsage serverAuth),
/// both valid for 2 days, in `dir`: ca.pem, server.pem, server.key.
fn certificates(dir: &Path) -> Result<()> {
    let ca = Ca::new("kq-e2e-prometheus-ca", 2)?;
    let mut server = certs::leaf(&[(DnType::CommonName, "127.0.0.1")], 9, 2)?;
    server.subject_alt_names = vec![SanType::IpAddress(Ipv4Addr::LOCALHOST.into())];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    ca.write(&dir.join("ca.pem"))?;
    ca.issue(&server)?
        .write(&dir.join("server.pem"), &dir.join("server.key"))
        .context("the gateway's certificates")
}
