//! An installed chart's processes run on loopback, as the kubelet would run its pods:
//! identities from the chart's ServiceAccounts (TokenRequest → kubeconfig Secret in the
//! host), and a process per pod from the installed Deployment's command, args, env and
//! mounted Secrets.
//!
//! ```text
//!  sa_token(apiserver 0, ns, sa) ─▶ token_kubeconfig(server, ca, token) ─▶ Secret in the host
//!  from_deployment(host, ns, Deployment, pod name, root, listen overrides)
//!    ─▶ FromDeployment {binary, args (mounts under root, listeners on loopback), envs}
//!    ─▶ start(env, spec, admin)  a Binary, ready (/readyz 200)
//! ```
//!
//! There is no kubelet: a Deployment's rolling update is the test starting the new pod's
//! process, waiting for it to be ready, then stopping the old one (SIGTERM).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kube::api::PostParams;
use kube::{Api, Client, Config};

use crate::{Binary, Env, yaml_documents};

/// How long a process started from a Deployment may take to answer /readyz.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// A name unique to this run (cluster-scoped objects and release names).
pub fn run_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{:x}", (std::process::id() << 12) ^ nanos)
        .chars()
        .rev()
        .take(6)
        .collect()
}

/// `server` and `certificate-authority-data` of a kubeconfig the harness wrote.
pub fn server_of(kubeconfig: &Path) -> Result<(String, Option<String>)> {
    let text = std::fs::read_to_string(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let doc = yaml_documents(&text)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} is empty", kubeconfig.display()))?;
    let cluster = &doc["clusters"][0]["cluster"];
    Ok((
        cluster["server"]
            .as_str()
            .ok_or_else(|| anyhow!("no server in {}", kubeconfig.display()))?
            .to_owned(),
        cluster["certificate-authority-data"]
            .as_str()
            .map(str::to_owned),
    ))
}

/// A kubeconfig for `server` authenticating with `token`, as an admin writes into the
/// host's kubeconfig Secret.
pub fn token_kubeconfig(server: &str, ca_data: Option<&str>, token: &str) -> String {
    let tls = match ca_data {
        Some(ca) => format!("    certificate-authority-data: {ca}"),
        None => "    insecure-skip-tls-verify: true".to_owned(),
    };
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: karmada\n  cluster:\n    server: {server}\n{tls}\n\
         users:\n- name: sa\n  user:\n    token: {token}\ncontexts:\n- name: karmada\n  context:\n    cluster: karmada\n    user: sa\n\
         current-context: karmada\n"
    )
}

/// A token of ServiceAccount `ns/name` (TokenRequest API; no controller-manager needed).
pub async fn sa_token(client: &Client, ns: &str, name: &str) -> Result<String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let tr = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api
        .create_token_request(name, &PostParams::default(), &tr)
        .await
        .with_context(|| format!("TokenRequest for ServiceAccount {ns}/{name}"))?;
    answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .ok_or_else(|| anyhow!("TokenRequest for {ns}/{name} returned no token"))
}

/// A client from a kubeconfig's text.
pub async fn client_from_kubeconfig_text(text: &str) -> Result<Client> {
    let kc = kube::config::Kubeconfig::from_yaml(text)?;
    let config =
        Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// One process started from an installed Deployment: its first container's command and
/// args, every Secret volume it mounts materialised under `root` (mount paths in the args
/// rewritten to match), the listen addresses moved to loopback.
#[derive(Clone, Debug)]
pub struct FromDeployment {
    /// The binary's file name (the command's last path segment).
    pub binary: String,
    /// The container's args, rewritten for loopback.
    pub args: Vec<String>,
    /// The container's env, with `metadata.name` references resolved to the pod's name.
    pub envs: Vec<(String, String)>,
    /// Where the binary is taken from (`None`: the test's own, [`Binary::path`]).
    pub bin_dir: Option<std::path::PathBuf>,
}

/// The process the kubelet would run for pod `pod` of Deployment `ns/name` in the host;
/// `listen` replaces the value of each `--flag=` given (listeners on loopback).
pub async fn from_deployment(
    host: &Client,
    ns: &str,
    name: &str,
    pod: &str,
    root: &Path,
    listen: &[(&str, String)],
) -> Result<FromDeployment> {
    let d = Api::<Deployment>::namespaced(host.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("reading Deployment {ns}/{name} from the host"))?;
    let pod_spec = d
        .spec
        .and_then(|s| s.template.spec)
        .ok_or_else(|| anyhow!("Deployment {name} has no pod spec"))?;
    let c = pod_spec
        .containers
        .first()
        .ok_or_else(|| anyhow!("Deployment {name} has no container"))?;
    let command = c
        .command
        .as_ref()
        .and_then(|c| c.first())
        .ok_or_else(|| anyhow!("Deployment {name}'s container has no command"))?;
    let binary = Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("command {command:?}"))?
        .to_owned();
    let mut args = c.args.clone().unwrap_or_default();
    let volumes = pod_spec.volumes.unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(host.clone(), ns);
    for m in c.volume_mounts.iter().flatten() {
        let v = volumes
            .iter()
            .find(|v| v.name == m.name)
            .ok_or_else(|| anyhow!("{name}: volumeMount {} has no volume", m.name))?;
        let secret_name = v
            .secret
            .as_ref()
            .and_then(|s| s.secret_name.as_deref())
            .ok_or_else(|| anyhow!("{name}: volume {} is not a Secret", m.name))?;
        let secret = secrets
            .get(secret_name)
            .await
            .with_context(|| format!("reading Secret {ns}/{secret_name} mounted by {name}"))?;
        let local = root.join(m.mount_path.trim_start_matches('/'));
        std::fs::create_dir_all(&local)?;
        for (key, ByteString(bytes)) in secret.data.unwrap_or_default() {
            std::fs::write(local.join(&key), bytes)?;
        }
        let prefix = format!("{}/", m.mount_path.trim_end_matches('/'));
        let local_prefix = format!("{}/", local.display());
        for a in &mut args {
            *a = a.replace(&prefix, &local_prefix);
        }
    }
    for (flag, value) in listen {
        let key = format!("{flag}=");
        let a = args
            .iter_mut()
            .find(|a| a.starts_with(&key))
            .ok_or_else(|| anyhow!("{name}: the chart renders no {flag}="))?;
        *a = format!("{key}{value}");
    }
    let mut envs = vec![("NO_COLOR".to_owned(), "1".to_owned())];
    for e in c.env.iter().flatten() {
        match (&e.value, &e.value_from) {
            (Some(v), _) => envs.push((e.name.clone(), v.clone())),
            // The pod name (the Lease identity): what the pod would get.
            (None, Some(from))
                if from
                    .field_ref
                    .as_ref()
                    .is_some_and(|f| f.field_path == "metadata.name") =>
            {
                envs.push((e.name.clone(), pod.to_owned()));
            }
            _ => bail!("{name}: env {} cannot be reproduced locally", e.name),
        }
    }
    Ok(FromDeployment {
        binary,
        args,
        envs,
        bin_dir: None,
    })
}

/// Starts `spec` and waits until its admin port `admin` answers /readyz.
pub async fn start(env: &Env, spec: &FromDeployment, admin: SocketAddr) -> Result<Binary> {
    eprintln!("{} {}", spec.binary, spec.args.join(" "));
    let mut b = Binary::builder(&spec.binary).args(&spec.args);
    if let Some(dir) = &spec.bin_dir {
        b = b.dir(dir);
    }
    for (k, v) in &spec.envs {
        b = b.env(k, v);
    }
    let mut binary = b.start(env)?;
    binary.wait_admin(admin, "/readyz", READY_TIMEOUT).await?;
    Ok(binary)
}
