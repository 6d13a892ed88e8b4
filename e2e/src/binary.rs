//! The project's binaries as child processes of a test.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::env::{Env, profile_dir};

/// Variable naming the directory holding the project's binaries (default: the cargo
/// profile directory of the running test executable, e.g. `target/debug`).
pub const ENV_BIN_DIR: &str = "E2E_BIN_DIR";
/// Lines of a binary's log shown when a test panics while it runs.
const LOG_TAIL_LINES: usize = 50;
/// Lines of a binary's log shown when it does not become ready in time.
const NOT_READY_TAIL_LINES: usize = 30;
/// How often [`Binary::wait_admin`] asks the admin port again.
const ADMIN_POLL_INTERVAL: Duration = Duration::from_millis(50);
/// How long one [`http_get`] may take.
const HTTP_GET_TIMEOUT: Duration = Duration::from_secs(5);

// Distinguishes the logs of several starts of one binary within a test process.
static STARTS: AtomicUsize = AtomicUsize::new(0);
// A directory set by the test itself (the image test's launchers); before ENV_BIN_DIR.
static BIN_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Makes every later start in this process look its binaries up in `dir` (before
/// `E2E_BIN_DIR`); once per process, an error if already set elsewhere.
pub fn use_bin_dir(dir: &Path) -> Result<()> {
    let set = BIN_DIR.get_or_init(|| dir.to_path_buf());
    if set != dir {
        bail!("binaries are already taken from {}", set.display());
    }
    Ok(())
}

/// A plain HTTP/1.0 GET on loopback (a binary's admin port): (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> Result<(u16, String)> {
    http_get_with(addr, path, &[]).await
}

/// [`http_get`] with extra request headers (e.g. `("Authorization", "Bearer …")`).
pub async fn http_get_with(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> Result<(u16, String)> {
    let extra: String = headers
        .iter()
        .map(|(k, v)| format!("{k}: {v}\r\n"))
        .collect();
    let io = async {
        let mut stream = TcpStream::connect(addr).await?;
        stream
            .write_all(format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n{extra}\r\n").as_bytes())
            .await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        Ok::<_, std::io::Error>(raw)
    };
    let raw = tokio::time::timeout(HTTP_GET_TIMEOUT, io)
        .await
        .map_err(|_| anyhow!("GET http://{addr}{path} timed out"))?
        .with_context(|| format!("GET http://{addr}{path}"))?;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow!("GET http://{addr}{path}: no status line in {head:?}"))?;
    Ok((code, body.to_owned()))
}

/// [`http_get`] of a path that must answer 200: its body.
pub async fn http_get_ok(addr: SocketAddr, path: &str) -> Result<String> {
    match http_get(addr, path).await? {
        (200, body) => Ok(body),
        (code, body) => bail!("GET {path} answered {code}: {body}"),
    }
}

/// How to start one of the project's binaries; see [`Binary::builder`].
#[derive(Debug)]
pub struct BinaryBuilder {
    name: String,
    args: Vec<OsString>,
    envs: Vec<(OsString, OsString)>,
    dir: Option<PathBuf>,
}

impl BinaryBuilder {
    /// Takes the binary from `dir` instead of [`Binary::path`]'s (another release's).
    pub fn dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable for the child.
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.envs
            .push((key.as_ref().to_owned(), value.as_ref().to_owned()));
        self
    }

    /// Starts the binary with stdout and stderr appended to
    /// `<log dir>/<name>-<n>.log`. Prints the log's path (test output shows it on failure).
    pub fn start(self, env: &Env) -> Result<Binary> {
        let path = match &self.dir {
            Some(dir) => {
                let path = dir.join(&self.name);
                if !path.is_file() {
                    bail!("{} not found", path.display());
                }
                path
            }
            None => Binary::path(&self.name)?,
        };
        let n = STARTS.fetch_add(1, Ordering::Relaxed);
        std::fs::create_dir_all(env.log_dir())
            .with_context(|| format!("creating {}", env.log_dir().display()))?;
        let log = env
            .log_dir()
            .join(format!("{}-{}-{n}.log", self.name, std::process::id()));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let child = tokio::process::Command::new(&path)
            .args(&self.args)
            .envs(self.envs.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", path.display()))?;
        eprintln!(
            "started {} (pid {}), log: {}",
            self.name,
            child.id().unwrap_or_default(),
            log.display()
        );
        Ok(Binary {
            name: self.name,
            child,
            log,
        })
    }
}

/// A running project binary; killed when dropped. When dropped during a panic, the last
/// lines of its log are printed.
#[derive(Debug)]
pub struct Binary {
    name: String,
    child: tokio::process::Child,
    log: PathBuf,
}

impl Binary {
    /// Describes a start of the workspace binary `name` (e.g. `karmada-quota-webhook`).
    pub fn builder(name: &str) -> BinaryBuilder {
        BinaryBuilder {
            name: name.to_owned(),
            args: Vec::new(),
            envs: Vec::new(),
            dir: None,
        }
    }

    /// Where the binary `name` is looked up: the directory of [`use_bin_dir`], else
    /// `$E2E_BIN_DIR/name`, else next to the test executable's profile directory
    /// (`target/debug/name`). Cargo builds other packages' binaries only when asked, so
    /// the error says how.
    pub fn path(name: &str) -> Result<PathBuf> {
        let dir = match (BIN_DIR.get(), std::env::var_os(ENV_BIN_DIR)) {
            (Some(dir), _) => dir.clone(),
            (None, Some(dir)) if !dir.is_empty() => PathBuf::from(dir),
            _ => profile_dir()?,
        };
        let path = dir.join(name);
        if !path.is_file() {
            bail!(
                "{} not found: build the binaries first with the same profile and target dir \
                 (e.g. `cargo build --bins`), or set {ENV_BIN_DIR}",
                path.display()
            );
        }
        Ok(path)
    }

    /// The binary's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The child's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The log file holding the child's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// Fails if the child has exited (with its status and log tail).
    pub fn check_running(&mut self) -> Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!(
                "{} exited ({status}); last lines of {}:\n{}",
                self.name,
                self.log.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        }
        Ok(())
    }

    /// Waits until the child exits (a start it must refuse), at most `within`: its exit
    /// and its whole log (with RUST_BACKTRACE set, the error is followed by a backtrace
    /// longer than the tail). Fails if it still runs.
    pub async fn exit_message(&mut self, within: Duration) -> Result<String> {
        let started = std::time::Instant::now();
        loop {
            if let Err(e) = self.check_running() {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                return Ok(format!("{e:#}\n{log}"));
            }
            if started.elapsed() >= within {
                bail!("{} still runs after {within:?}", self.name);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until `path` (`/readyz`, `/livez`) on the child's admin address `admin`
    /// answers 200; fails early if the child exits, and with its log tail on timeout.
    pub async fn wait_admin(
        &mut self,
        admin: SocketAddr,
        path: &str,
        timeout: Duration,
    ) -> Result<()> {
        let started = Instant::now();
        loop {
            if let Ok((200, _)) = http_get(admin, path).await {
                return Ok(());
            }
            self.check_running()?;
            if started.elapsed() > timeout {
                bail!(
                    "{}'s {path} did not answer 200 within {timeout:?}; log {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail(NOT_READY_TAIL_LINES)
                );
            }
            tokio::time::sleep(ADMIN_POLL_INTERVAL).await;
        }
    }

    /// Stops the child as the kubelet stops a pod: SIGTERM (`kill -TERM <its pid>`), then
    /// waits for it to exit, at most `grace` (then SIGKILL, an error). Its exit status.
    pub async fn terminate(mut self, grace: Duration) -> Result<std::process::ExitStatus> {
        let pid = self
            .child
            .id()
            .ok_or_else(|| anyhow!("{} has already exited", self.name))?;
        let sent = tokio::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .with_context(|| format!("sending SIGTERM to {} (pid {pid})", self.name))?;
        if !sent.success() {
            bail!("kill -TERM {pid} ({}) failed: {sent}", self.name);
        }
        match tokio::time::timeout(grace, self.child.wait()).await {
            Ok(status) => status.with_context(|| format!("waiting for {}", self.name)),
            Err(_) => {
                let _ = self.child.kill().await;
                bail!(
                    "{} (pid {pid}) did not exit within {grace:?} of SIGTERM; log {}:\n{}",
                    self.name,
                    self.log.display(),
                    self.log_tail(NOT_READY_TAIL_LINES)
                )
            }
        }
    }

    /// Kills the child and waits for it.
    pub async fn stop(mut self) -> Result<()> {
        self.child
            .kill()
            .await
            .with_context(|| format!("killing {}", self.name))
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        // kill_on_drop sends SIGKILL; this only adds the diagnostics.
        if std::thread::panicking() {
            eprintln!(
                "---- {} log {} (last {LOG_TAIL_LINES} lines) ----\n{}\n----",
                self.name,
                self.log.display(),
                self.log_tail(LOG_TAIL_LINES)
            );
        }
    }
}
