//! The webhook process under test: `karmada-quota-webhook` started with the fixture's
//! flags ([`Webhook::start`], [`Webhook::builder`] for a fixed port, own certificates or
//! extra flags), ready once `/readyz` answers 200, its admin port read (metrics,
//! decisions), SIGKILLed when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

use super::tls::WebhookTls;
use crate::metrics::metric_sum;
use crate::{Binary, Env, free_port, http_get, http_get_ok};

/// The webhook binary.
pub const WEBHOOK_BIN: &str = "karmada-quota-webhook";

/// How long the webhook may take to become ready (a debug build on a busy 2-core machine
/// starts in well under a second; the cache sync is one LIST).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// Reservation lifetime the tests run the webhook with: far beyond any test's length, so
/// an assertion on `status.reservations` can never race an entry's expiry on a loaded
/// machine (the default, 60 s, is the production value and is not what is under test).
pub const TEST_RESERVATION_TTL: &str = "10m";

/// How to start the webhook; see [`Webhook::builder`].
#[derive(Debug, Default)]
pub struct WebhookBuilder {
    port: Option<u16>,
    tls: Option<(PathBuf, PathBuf)>,
    args: Vec<String>,
}

impl WebhookBuilder {
    /// Listen on this port (e.g. to restart a killed webhook behind the same URL);
    /// default: a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Serve this certificate and key (PEM files the test may rewrite, e.g. to rotate
    /// them); default: the process's shared [`WebhookTls`] files, which a test must
    /// never touch.
    pub fn tls_files(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls = Some((cert.into(), key.into()));
        self
    }

    /// An extra flag (after the fixture's own, so it wins where clap lets the last one).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Starts the webhook and waits until `/readyz` answers 200 (its quota cache synced).
    pub async fn start(self, env: &Env) -> Result<Webhook> {
        let mut webhook = self.spawn(env).await?;
        webhook.wait_until("/readyz", READY_TIMEOUT).await?;
        Ok(webhook)
    }

    /// Starts a webhook that must refuse to start: its exit and whole log once it exits,
    /// within 20 s; an error if it still runs then.
    pub async fn refused(self, env: &Env) -> Result<String> {
        let mut webhook = self.spawn(env).await?;
        webhook.binary().exit_message(Duration::from_secs(20)).await
    }

    /// Starts the webhook without waiting for anything.
    pub async fn spawn(self, env: &Env) -> Result<Webhook> {
        let tls = WebhookTls::get(env).await?;
        let port = match self.port {
            Some(p) => p,
            None => free_port()?,
        };
        let admin_port = free_port()?;
        let (cert, key) = match &self.tls {
            Some((cert, key)) => (cert.as_path(), key.as_path()),
            None => (tls.cert.as_path(), tls.key.as_path()),
        };
        let mut b = Binary::builder(WEBHOOK_BIN);
        if !crate::env::gives_reservation_namespace(&self.args) {
            crate::ns::ensure_namespace(&env.client()?, env.reservation_namespace()).await?;
            b = b.arg(format!(
                "--reservation-namespace={}",
                env.reservation_namespace()
            ));
        }
        let binary = b
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!("--admin-listen=127.0.0.1:{admin_port}"))
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-private-key-file")
            .arg(key)
            .arg(format!("--reservation-ttl={TEST_RESERVATION_TTL}"))
            .arg("--log=info,karmada_quota_webhook=debug")
            .args(&self.args)
            .start(env)?;
        Ok(Webhook {
            binary,
            port,
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
        })
    }
}

/// A running `karmada-quota-webhook`; SIGKILLed when dropped.
#[derive(Debug)]
pub struct Webhook {
    binary: Binary,
    port: u16,
    admin: SocketAddr,
}

impl Webhook {
    /// A start with extra flags or a fixed port.
    pub fn builder() -> WebhookBuilder {
        WebhookBuilder::default()
    }

    /// Starts a webhook with the fixture's flags only.
    pub async fn start(env: &Env) -> Result<Webhook> {
        Self::builder().start(env).await
    }

    /// The HTTPS port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The HTTPS address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `https://127.0.0.1:<port>` (the manifest appends the paths).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The admin address (`/metrics`, `/livez`, `/readyz`).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// Waits until the admin `path` (`/readyz`, `/livez`) answers 200; fails early if the
    /// process exits, and with its log tail on timeout.
    pub async fn wait_until(&mut self, path: &str, timeout: Duration) -> Result<()> {
        self.binary.wait_admin(self.admin, path, timeout).await
    }

    /// Whether `/readyz` answers 200 now.
    pub async fn is_ready(&self) -> bool {
        matches!(http_get(self.admin, "/readyz").await, Ok((200, _)))
    }

    /// The process handle (pid, log).
    pub fn binary(&mut self) -> &mut Binary {
        &mut self.binary
    }

    /// `/metrics` of the admin port, as text.
    pub async fn metrics(&self) -> Result<String> {
        http_get_ok(self.admin, "/metrics").await
    }

    /// Sum of `kq_webhook_decisions_total` over the label sets whose labels contain every
    /// `key="value"` fragment of `labels` (e.g. `kind="resourcebinding"`).
    pub async fn decisions(&self, labels: &[&str]) -> Result<u64> {
        Ok(metric_sum(
            &self.metrics().await?,
            "kq_webhook_decisions_total",
            labels,
        ))
    }

    /// SIGKILLs the webhook (no graceful shutdown) and waits for it.
    pub async fn kill(self) -> Result<()> {
        self.binary.stop().await
    }
}
