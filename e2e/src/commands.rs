//! The command-line tools the tests run against the Env: the kubectl plugin and
//! `kubectl apply -f -`, each returning its whole output.

use std::process::Output;

use anyhow::{Context, Result};

use crate::{Binary, Env};

/// The plugin binary's name in the target directory.
pub const PLUGIN: &str = "kubectl-karmada_quota";

/// Runs the plugin with `--kubeconfig <env's>` and `args`.
pub async fn plugin(env: &Env, args: &[&str]) -> Result<Output> {
    plugin_with(env.kubeconfig(), args).await
}

/// The kubectl plugin with `args` and `--kubeconfig <kubeconfig>` (another identity than
/// the Env's admin).
pub async fn plugin_with(kubeconfig: &std::path::Path, args: &[&str]) -> Result<Output> {
    let path = Binary::path(PLUGIN)?;
    tokio::process::Command::new(&path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("NO_COLOR", "1")
        .output()
        .await
        .with_context(|| format!("running {}", path.display()))
}

/// `kubectl apply -f -` of `yaml` against the Env (warnings are on stderr).
pub async fn kubectl_apply(env: &Env, yaml: &str) -> Result<Output> {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running kubectl")?;
    let mut stdin = child.stdin.take().context("kubectl stdin")?;
    stdin.write_all(yaml.as_bytes()).await?;
    drop(stdin);
    Ok(child.wait_with_output().await?)
}

/// stdout then stderr, as text.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}
