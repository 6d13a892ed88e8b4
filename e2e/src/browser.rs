//! A real browser for the e2e tests: Debian's chromium driven headless by chromedriver
//! (WebDriver, with fantoccini) on a free loopback port, a session with a fresh profile
//! and no background connections, and screenshots of what it shows.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use fantoccini::{Client as Browser, ClientBuilder};
use serde_json::json;

use crate::chart::tool;
use crate::{free_port, wait_for};

/// chromedriver on a free loopback port, killed when dropped.
pub struct Driver {
    child: tokio::process::Child,
    port: u16,
}

impl Driver {
    /// Start chromedriver (from `hack/tools.sh install`) on a free loopback port.
    pub async fn start() -> Result<Driver> {
        let bin = tool("chromedriver")?;
        let port = free_port()?;
        let child = tokio::process::Command::new(&bin)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        // chromedriver refuses HTTP/1.0 (the fixtures' http_get): wait for its port.
        wait_for(
            "chromedriver listens",
            Duration::from_secs(20),
            || async move { tokio::net::TcpStream::connect(addr).await.ok().map(|_| ()) },
        )
        .await?;
        Ok(Driver { child, port })
    }

    /// A headless chromium session with a fresh profile and no background connections.
    pub async fn browser(&self, profile: &Path) -> Result<Browser> {
        let chromium = tool("chromium")?;
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium.canonicalize().unwrap_or(chromium),
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    "--disable-dev-shm-usage", "--window-size=1360,1000",
                    "--hide-scrollbars",
                    format!("--user-data-dir={}", profile.display()),
                ],
            }),
        );
        ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(caps)
            .connect(&format!("http://127.0.0.1:{}", self.port))
            .await
            .context("opening a WebDriver session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

/// `dir`, emptied (created when missing): a browser profile of its own.
pub fn fresh_dir(dir: PathBuf) -> Result<PathBuf> {
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| anyhow!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Saves what `b` shows as `dir/name` (and as `docs/img/name` with
/// `KQ_UPDATE_SCREENSHOTS=1`); returns the path saved under `dir`.
pub async fn screenshot(b: &Browser, dir: &Path, name: &str) -> Result<PathBuf> {
    let png = b.screenshot().await.context("screenshot")?;
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join(name), &png)?;
    if std::env::var_os("KQ_UPDATE_SCREENSHOTS").is_some_and(|v| v == "1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/img");
        std::fs::create_dir_all(&docs)?;
        std::fs::write(docs.join(name), &png)?;
    }
    Ok(dir.join(name))
}
