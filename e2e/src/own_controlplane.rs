//! A control plane of a test's own (etcd and `n` apiservers, `controlplane.sh up` into a
//! directory of the test), for a test that must change what every other test relies on —
//! an apiserver started with flags of its own, or the project's CRDs replaced by an older
//! release's — without touching the shared one. Stopped (`controlplane.sh down`) on drop,
//! and by its watchdog if the test process dies first.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};

use crate::env::{Env, controlplane_script};

/// A control plane brought up by one test; down on drop.
#[derive(Debug)]
pub struct OwnControlPlane {
    dir: PathBuf,
    env: Env,
}

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
        })
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
    }
}
