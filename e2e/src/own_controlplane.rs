//! A control plane of a test's own (etcd and `n` apiservers, `controlplane.sh up` into a
//! directory of the test), for a test that must change what every other test relies on —
//! an apiserver started with flags of its own, or the project's CRDs replaced by an older
//! release's — without touching the shared one — or restart its apiserver
//! ([`OwnControlPlane::restart_apiserver`]: etcd and its data kept). Stopped
//! (`controlplane.sh down`) on drop, and by its watchdog if the test process dies first.
//!
//! ```text
//!  restart_apiserver(i)   pid of `apiserver-<i>` from DIR/pids, its command line from
//!                         /proc; SIGTERM, wait for the exit (SIGKILL after 15 s); the same
//!                         command line started again in a session of its own, log appended
//!                         to logs/apiserver-<i>.log, "<pid> apiserver-<i>" appended to
//!                         DIR/pids (so `down` and the watchdog stop it); back once a list answers
//! ```

use std::path::{Path, PathBuf};

use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};

use crate::env::{Env, controlplane_script};

/// A control plane brought up by one test; down on drop.
#[derive(Debug)]
pub struct OwnControlPlane {
    dir: PathBuf,
    env: Env,
    /// Apiservers this process started again (reaped when restarted once more).
    restarted: parking_lot::Mutex<Vec<std::process::Child>>,
}

/// How long an apiserver may take to exit after SIGTERM, and to serve again.
const APISERVER_STOP: Duration = Duration::from_secs(15);
const APISERVER_READY: Duration = Duration::from_secs(90);

impl OwnControlPlane {
    /// `controlplane.sh up dir n --owner-pid <this process>`, with `extra_args` appended to
    /// every apiserver's flags (APISERVER_EXTRA_ARGS; empty for none).
    pub async fn up(dir: &Path, n: usize, extra_args: &str) -> Result<OwnControlPlane> {
        let out = tokio::process::Command::new("bash")
            .arg(controlplane_script())
            .arg("up")
            .arg(dir)
            .arg(n.to_string())
            .arg("--owner-pid")
            .arg(std::process::id().to_string())
            .env("APISERVER_EXTRA_ARGS", extra_args)
            .stdin(std::process::Stdio::null())
            .output()
            .await
            .context("running controlplane.sh up")?;
        // Whatever `up` started goes down with this guard, even when it failed half way.
        let guard = Down(dir.to_path_buf());
        ensure!(
            out.status.success(),
            "controlplane.sh up {} failed:\n{}{}",
            dir.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let env = Env::of_dir(dir).await?;
        std::mem::forget(guard);
        Ok(OwnControlPlane {
            dir: dir.to_path_buf(),
            env,
            restarted: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// Stops apiserver `i` (SIGTERM) and starts it again with the same command line, etcd
    /// and its data untouched; returns once it serves a list again (how long it was away).
    pub async fn restart_apiserver(&self, i: usize) -> Result<Duration> {
        let name = format!("apiserver-{i}");
        let pid = self.pid_of(&name)?;
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"))
            .with_context(|| format!("reading the command line of {name} (pid {pid})"))?;
        let args: Vec<std::ffi::OsString> = cmdline
            .split(|b| *b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(a).to_owned())
            .collect();
        let (program, args) = args
            .split_first()
            .ok_or_else(|| anyhow!("{name} (pid {pid}) has an empty command line"))?;
        let stopped = Instant::now();
        signal(pid, "TERM")?;
        while alive(pid) {
            if stopped.elapsed() > APISERVER_STOP {
                signal(pid, "KILL")?;
            }
            self.reap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let log = self.dir.join("logs").join(format!("{name}.log"));
        let out = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&log)
            .with_context(|| format!("opening {}", log.display()))?;
        let child = std::process::Command::new(program)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {name} again"))?;
        let line = format!("{} {name}\n", child.id());
        std::io::Write::write_all(
            &mut std::fs::OpenOptions::new()
                .append(true)
                .open(self.dir.join("pids"))?,
            line.as_bytes(),
        )?;
        self.restarted.lock().push(child);
        let client = if i == 0 {
            self.env.client()?
        } else {
            self.env.member_clients()?.remove(i - 1)
        };
        crate::try_wait_for(&format!("{name} ready again"), APISERVER_READY, || async {
            let namespaces: kube::Api<k8s_openapi::api::core::v1::Namespace> =
                kube::Api::all(client.clone());
            let listed = namespaces
                .list(&kube::api::ListParams::default().limit(1))
                .await;
            Ok::<_, anyhow::Error>(listed.ok().map(|_| ()))
        })
        .await?;
        Ok(stopped.elapsed())
    }

    /// The newest pid `DIR/pids` records for `name`.
    fn pid_of(&self, name: &str) -> Result<u32> {
        let pids = std::fs::read_to_string(self.dir.join("pids"))?;
        pids.lines()
            .filter_map(|l| l.split_once(' '))
            .filter(|(_, n)| *n == name)
            .filter_map(|(p, _)| p.parse().ok())
            .next_back()
            .ok_or_else(|| anyhow!("no {name} in {}/pids", self.dir.display()))
    }

    /// Waits for the apiservers this process started that have exited (no zombies).
    fn reap(&self) {
        for c in self.restarted.lock().iter_mut() {
            let _ = c.try_wait();
        }
    }

    /// Its configurations and clients, as [`Env`] gives the shared one's (apiserver 0 is
    /// `client()`, apiservers 1.. are `member_clients()`); binaries started with it log
    /// under its directory.
    pub fn env(&self) -> &Env {
        &self.env
    }

    /// Admin kubeconfig of apiserver `i`.
    pub fn kubeconfig(&self, i: usize) -> PathBuf {
        self.dir.join(format!("kubeconfig-{i}"))
    }
}

/// `kill -<sig> <pid>`.
fn signal(pid: u32, sig: &str) -> Result<()> {
    let status = std::process::Command::new("kill")
        .args([format!("-{sig}"), pid.to_string()])
        .status()
        .context("running kill")?;
    if !status.success() {
        bail!("kill -{sig} {pid}: {status}");
    }
    Ok(())
}

/// Whether `pid` runs (a zombie does not).
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| !rest.starts_with('Z')))
        .unwrap_or(false)
}

/// Runs `controlplane.sh down dir` when dropped.
struct Down(PathBuf);

impl Drop for Down {
    fn drop(&mut self) {
        let _ = std::process::Command::new("bash")
            .arg(controlplane_script())
            .arg("down")
            .arg(&self.0)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

impl Drop for OwnControlPlane {
    fn drop(&mut self) {
        drop(Down(self.dir.clone()));
        self.reap();
    }
}
