//! A real Prometheus for the usage-report test: Debian's `prometheus` binary (unpacked by
//! `hack/tools.sh install` next to promtool, no service installed) on 127.0.0.1, scraping
//! the given admin ports every second, its data in a fresh directory; killed on drop.
//!
//! ```text
//!  Prometheus::start(env, "report", 127.0.0.1:<free port>, &[controller admin addr])
//!     writes <log dir>/prometheus-<name>-<n>/{prometheus.yml, data/}, starts
//!     prometheus --web.listen-address=127.0.0.1:<free> --storage.tsdb.path=data …
//!     ready when GET /-/ready answers 200
//!  .query(promql) ── GET /api/v1/query (instant), the `data.result` array
//!  .url()         ── for the plugin's --prometheus and the controller's --dashboard-prometheus
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use karmada_quota_billing::query_value;
use serde_json::Value;

use crate::chart::tool;
use crate::{Env, http_get};

/// How often Prometheus scrapes (and evaluates): the report's resolution in the test.
pub const SCRAPE_INTERVAL: Duration = Duration::from_secs(1);
/// How long Prometheus may take to start (replaying an empty WAL).
const READY_TIMEOUT: Duration = Duration::from_secs(30);

static STARTS: AtomicUsize = AtomicUsize::new(0);

/// A running Prometheus; SIGKILLed when dropped.
#[derive(Debug)]
pub struct Prometheus {
    child: tokio::process::Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus on `addr` scraping `/metrics` of every target every
    /// [`SCRAPE_INTERVAL`], and waits until it is ready. (The caller picks `addr`, e.g. with
    /// [`crate::free_port`], so that a target can be told the URL before Prometheus starts.)
    pub async fn start(
        env: &Env,
        name: &str,
        addr: SocketAddr,
        targets: &[SocketAddr],
    ) -> Result<Prometheus> {
        let bin = tool("prometheus")?;
        let dir = env.log_dir().join(format!(
            "prometheus-{name}-{}-{}",
            std::process::id(),
            STARTS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(dir.join("data"))
            .with_context(|| format!("creating {}", dir.display()))?;
        let interval = format!("{}s", SCRAPE_INTERVAL.as_secs());
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: {interval}\n  evaluation_interval: {interval}\n\
             scrape_configs:\n  - job_name: karmada-quota\n    scrape_interval: {interval}\n    \
             scrape_timeout: {interval}\n    static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        );
        let config_path = dir.join("prometheus.yml");
        std::fs::write(&config_path, config)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let child = tokio::process::Command::new(&bin)
            .arg(format!("--config.file={}", config_path.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let mut p = Prometheus { child, addr, dir };
        let started = Instant::now();
        loop {
            if let Some(status) = p.child.try_wait()? {
                bail!(
                    "prometheus exited with {status} before it was ready:\n{}",
                    p.log_tail()
                );
            }
            if let Ok((200, _)) = http_get(p.addr, "/-/ready").await {
                return Ok(p);
            }
            if started.elapsed() > READY_TIMEOUT {
                bail!(
                    "prometheus not ready within {READY_TIMEOUT:?}:\n{}",
                    p.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The end of Prometheus' log.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// An instant query's `data.result`.
    pub async fn query(&self, promql: &str) -> Result<Vec<Value>> {
        let path = format!("/api/v1/query?query={}", query_value(promql));
        let (code, body) = http_get(self.addr, &path).await?;
        let v: Value = serde_json::from_str(&body)
            .with_context(|| format!("query {promql}: HTTP {code}: {body}"))?;
        if v["status"] != "success" {
            bail!("query {promql}: {body}");
        }
        Ok(v["data"]["result"].as_array().cloned().unwrap_or_default())
    }

    /// Waits until `promql` has a result whose value is `want` (as Prometheus prints it).
    pub async fn wait_value(&self, promql: &str, want: &str, timeout: Duration) -> Result<()> {
        let started = Instant::now();
        loop {
            let result = self.query(promql).await?;
            if result.iter().any(|s| s["value"][1] == want) {
                return Ok(());
            }
            if started.elapsed() > timeout {
                bail!(
                    "{promql} did not reach {want} within {timeout:?} (last: {result:?})\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
