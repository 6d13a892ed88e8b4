//! The control plane a test process runs against, resolved once per process.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, anyhow, bail};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tokio::sync::OnceCell;

/// Variable naming an existing cluster (e.g. a real Karmada) to test against; no members.
pub const ENV_KUBECONFIG: &str = "E2E_KUBECONFIG";
/// Variable naming a directory written by `controlplane.sh up`.
pub const ENV_CONTROLPLANE_DIR: &str = "E2E_CONTROLPLANE_DIR";
/// Variable naming the kubectl to run (default: `kubectl` on PATH).
pub const ENV_KUBECTL: &str = "E2E_KUBECTL";
/// Apiservers the harness starts when it brings up its own control plane:
/// the Karmada control plane and two members.
const OWN_APISERVERS: usize = 3;

/// Where the control plane came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvSource {
    /// `E2E_KUBECONFIG`: an existing cluster, no member clusters.
    Kubeconfig,
    /// `E2E_CONTROLPLANE_DIR`: a control plane someone else brought up (and will bring down).
    ControlPlaneDir,
    /// Started by this process with `controlplane.sh up --owner-pid`; its watchdog stops it
    /// when the process exits.
    Owned,
}

/// One shared control plane per test process. Holds configurations, never clients (each
/// test has its own tokio runtime; a client belongs to the runtime that built it).
#[derive(Debug)]
pub struct Env {
    source: EnvSource,
    cp_dir: Option<PathBuf>,
    kubeconfig: PathBuf,
    config: Config,
    member_kubeconfigs: Vec<PathBuf>,
    member_configs: Vec<Config>,
    log_dir: PathBuf,
    webhook_client: Option<WebhookClientCert>,
    reservation_namespace: String,
}

/// Tells apart the [`Env`]s of one process (a test may bring up a control plane of its own).
static ENVS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Whether a binary's extra `args` name the reservation batches' namespace (else the
/// fixtures give the env's, [`Env::reservation_namespace`]).
pub(crate) fn gives_reservation_namespace(args: &[String]) -> bool {
    args.iter()
        .any(|a| a.starts_with("--reservation-namespace"))
}

/// The reservation batches' namespace of a new [`Env`]: its own, so that the webhooks and
/// controllers of parallel tests (processes) never share a batch sequence.
fn new_reservation_namespace() -> String {
    format!(
        "kq-rsv-{}-{}",
        std::process::id(),
        ENVS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    )
}

/// The client certificate apiserver 0 presents to every webhook that asks for one
/// (controlplane.sh's AdmissionConfiguration): `WEBHOOK_CLIENT_*` of DIR/env.
#[derive(Debug, Clone)]
pub struct WebhookClientCert {
    /// The CA that signed it: what the webhook's `--client-ca-file` trusts.
    pub ca: PathBuf,
    /// The certificate (CN [`WebhookClientCert::CN`]).
    pub cert: PathBuf,
    /// Its key.
    pub key: PathBuf,
}

impl WebhookClientCert {
    /// The certificate's CN (controlplane.sh's `WEBHOOK_CLIENT_CN`).
    pub const CN: &str = "karmada-apiserver-webhook-client";
}

// The outcome of the first resolution, errors included, so that every test of the process
// reports the same failure instead of each trying to start a control plane again.
static ENV: OnceCell<Result<Env, String>> = OnceCell::const_new();

impl Env {
    /// The process's control plane, resolved (and if need be started) on first use:
    /// `E2E_KUBECONFIG`, else `E2E_CONTROLPLANE_DIR`, else `controlplane.sh up` into
    /// `<target dir>/e2e-cp-<pid>`.
    pub async fn get() -> Result<&'static Env> {
        let env = ENV
            .get_or_init(|| async { Env::resolve().await.map_err(|e| format!("{e:#}")) })
            .await;
        env.as_ref()
            .map_err(|e| anyhow!("e2e control plane unavailable: {e}"))
    }

    async fn resolve() -> Result<Env> {
        if let Some(path) = non_empty_var(ENV_KUBECONFIG) {
            let kubeconfig = PathBuf::from(path);
            let log_dir = target_dir()?.join("e2e-logs");
            std::fs::create_dir_all(&log_dir)
                .with_context(|| format!("creating {}", log_dir.display()))?;
            return Ok(Env {
                source: EnvSource::Kubeconfig,
                cp_dir: None,
                config: load_config(&kubeconfig).await?,
                kubeconfig,
                member_kubeconfigs: Vec::new(),
                member_configs: Vec::new(),
                log_dir,
                webhook_client: None,
                reservation_namespace: new_reservation_namespace(),
            });
        }
        if let Some(dir) = non_empty_var(ENV_CONTROLPLANE_DIR) {
            return Env::from_dir(PathBuf::from(dir), EnvSource::ControlPlaneDir).await;
        }
        let dir = target_dir()?.join(format!("e2e-cp-{}", std::process::id()));
        remove_stale_control_planes(dir.parent().unwrap_or(Path::new("."))).await;
        controlplane(&[
            "up".as_ref(),
            dir.as_os_str(),
            OWN_APISERVERS.to_string().as_ref(),
            "--owner-pid".as_ref(),
            std::process::id().to_string().as_ref(),
        ])
        .await?;
        Env::from_dir(dir, EnvSource::Owned).await
    }

    /// The control plane `controlplane.sh up` wrote into `dir`, for a test that brought
    /// one up of its own ([`crate::own_controlplane::OwnControlPlane`]); not the process's.
    pub async fn of_dir(dir: &Path) -> Result<Env> {
        Env::from_dir(dir.to_path_buf(), EnvSource::ControlPlaneDir).await
    }

    async fn from_dir(dir: PathBuf, source: EnvSource) -> Result<Env> {
        let env_file = dir.join("env");
        let vars = std::fs::read_to_string(&env_file).with_context(|| {
            format!(
                "reading {} (written by controlplane.sh up)",
                env_file.display()
            )
        })?;
        let n: usize = vars
            .lines()
            .find_map(|l| l.strip_prefix("N="))
            .ok_or_else(|| anyhow!("no N= in {}", env_file.display()))?
            .trim()
            .parse()
            .with_context(|| format!("N= in {}", env_file.display()))?;
        if n == 0 {
            bail!("{} says N=0: no apiserver", env_file.display());
        }
        let kubeconfigs: Vec<PathBuf> = (0..n)
            .map(|i| dir.join(format!("kubeconfig-{i}")))
            .collect();
        let mut configs = Vec::with_capacity(n);
        for path in &kubeconfigs {
            configs.push(load_config(path).await?);
        }
        let var = |name: &str| {
            vars.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
                .map(|v| PathBuf::from(v.trim()))
        };
        let webhook_client = match (
            var("WEBHOOK_CLIENT_CA"),
            var("WEBHOOK_CLIENT_CERT"),
            var("WEBHOOK_CLIENT_KEY"),
        ) {
            (Some(ca), Some(cert), Some(key)) => Some(WebhookClientCert { ca, cert, key }),
            _ => None,
        };
        let mut configs = configs.into_iter();
        let mut kubeconfigs = kubeconfigs.into_iter();
        Ok(Env {
            webhook_client,
            source,
            config: configs.next().expect("n > 0"),
            kubeconfig: kubeconfigs.next().expect("n > 0"),
            member_configs: configs.collect(),
            member_kubeconfigs: kubeconfigs.collect(),
            log_dir: dir.join("logs"),
            cp_dir: Some(dir),
            reservation_namespace: new_reservation_namespace(),
        })
    }

    /// The namespace of the reservation batches the webhooks and controllers this test
    /// starts share (`--reservation-namespace`, unless a test gives its own); the
    /// builders create it.
    pub fn reservation_namespace(&self) -> &str {
        &self.reservation_namespace
    }

    /// Where the control plane came from.
    pub fn source(&self) -> &EnvSource {
        &self.source
    }

    /// A client for apiserver 0, the Karmada control plane. Build one per test.
    ///
    /// Every answer is shown as the apiserver gave it: kube's default retry layer (which
    /// silently repeats a request answered 429, 503 or 504, POSTs included) is off. A
    /// webhook refusal such as `status unknown` (429) or a decision timeout (504) must
    /// reach the caller, and a repeated create is a new object with a new uid, so a retry
    /// would also hide reservations left by the first attempt.
    pub fn client(&self) -> Result<Client> {
        client_without_retry(&self.config).context("building a client for apiserver 0")
    }

    /// The configuration behind [`Env::client`].
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Clients for the member clusters (apiservers 1..N), in order, built like
    /// [`Env::client`] (no retry layer); empty for `E2E_KUBECONFIG`.
    pub fn member_clients(&self) -> Result<Vec<Client>> {
        self.member_configs
            .iter()
            .enumerate()
            .map(|(i, c)| {
                client_without_retry(c)
                    .with_context(|| format!("building a client for member apiserver {}", i + 1))
            })
            .collect()
    }

    /// Kubeconfig of apiserver 0, for child processes (`--kubeconfig`, `KUBECONFIG`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// Writes a copy of [`Env::kubeconfig`] (as JSON, which kubectl and kube read as YAML)
    /// whose user impersonates `user` in `groups`, at `path`: another identity, whose
    /// rights are the RBAC a test grants it.
    pub fn kubeconfig_impersonating(
        &self,
        user: &str,
        groups: &[&str],
        path: &Path,
    ) -> Result<PathBuf> {
        let mut config = Kubeconfig::read_from(&self.kubeconfig)?;
        for a in &mut config.auth_infos {
            if let Some(info) = a.auth_info.as_mut() {
                info.impersonate = Some(user.to_owned());
                info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
            }
        }
        std::fs::write(path, serde_json::to_vec(&config)?)
            .with_context(|| format!("writing {}", path.display()))?;
        Ok(path.to_path_buf())
    }

    /// Kubeconfigs of the member clusters, in the order of [`Env::member_clients`].
    pub fn member_kubeconfigs(&self) -> &[PathBuf] {
        &self.member_kubeconfigs
    }

    /// The directory `controlplane.sh up` wrote; `None` for `E2E_KUBECONFIG`.
    pub fn cp_dir(&self) -> Option<&Path> {
        self.cp_dir.as_deref()
    }

    /// The client certificate apiserver 0 presents to webhooks; `None` for
    /// `E2E_KUBECONFIG` or a control plane brought up before controlplane.sh wrote it.
    pub fn webhook_client(&self) -> Option<&WebhookClientCert> {
        self.webhook_client.as_ref()
    }

    /// Where logs of this run go (`<cp dir>/logs`, or `<target dir>/e2e-logs`).
    pub fn log_dir(&self) -> &Path {
        &self.log_dir
    }

    /// The repository root (for CRD YAML and examples).
    pub fn repo_root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("e2e/ has a parent")
            .to_path_buf()
    }

    /// Runs kubectl against apiserver 0 and returns its stdout; fails with stderr when it
    /// exits non-zero.
    pub async fn kubectl(&self, args: &[&str]) -> Result<String> {
        let kubectl = non_empty_var(ENV_KUBECTL).unwrap_or_else(|| "kubectl".into());
        let out = tokio::process::Command::new(&kubectl)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.log_dir.join("kubectl-cache"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .await
            .with_context(|| format!("running {kubectl}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            bail!(
                "kubectl {} failed ({}):\n{}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr),
                stdout
            );
        }
        Ok(stdout)
    }
}

/// The path of `e2e/controlplane/controlplane.sh`.
pub fn controlplane_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("controlplane/controlplane.sh")
}

/// Runs controlplane.sh with `args`; its output becomes the error when it fails.
async fn controlplane(args: &[&std::ffi::OsStr]) -> Result<String> {
    let script = controlplane_script();
    let out = tokio::process::Command::new("bash")
        .arg(&script)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", script.display()))?;
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        let shown: Vec<_> = args.iter().map(|a| a.to_string_lossy()).collect();
        bail!(
            "{} {} failed ({}):\n{log}",
            script.display(),
            shown.join(" "),
            out.status
        );
    }
    Ok(log)
}

/// Control planes of earlier test processes that are gone: their watchdogs stopped them
/// (`down` is run again to be sure), and only their directories remain.
async fn remove_stale_control_planes(target: &Path) {
    let Ok(entries) = std::fs::read_dir(target) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("e2e-cp-")) else {
            continue;
        };
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let dir = entry.path();
        if controlplane(&["down".as_ref(), dir.as_os_str()])
            .await
            .is_ok()
        {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}

/// The cargo target directory of the running test executable
/// (`<target>/<profile>/deps/<test>-<hash>`).
pub(crate) fn target_dir() -> Result<PathBuf> {
    Ok(profile_dir()?
        .parent()
        .ok_or_else(|| anyhow!("profile dir has no parent"))?
        .to_path_buf())
}

/// `<target>/<profile>`, where cargo puts the workspace's binaries.
pub(crate) fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe().context("locating the test executable")?;
    let mut dir = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent", exe.display()))?;
    if dir.ends_with("deps") {
        dir = dir
            .parent()
            .ok_or_else(|| anyhow!("{} has no parent", dir.display()))?;
    }
    Ok(dir.to_path_buf())
}

/// Runs `cleanup` with a client for apiserver 0 from a `Drop` (a fixture dropped while its
/// test panics): on a fresh runtime on a fresh thread, since the test's runtime may be
/// shutting down. Failures are printed as `<what>: <error>`, never raised.
pub(crate) fn cleanup_from_drop<F, Fut>(what: &str, cleanup: F)
where
    F: FnOnce(Client) -> Fut + Send + 'static,
    Fut: Future<Output = Result<()>>,
{
    let done = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        rt.block_on(async { cleanup(Env::get().await?.client()?).await })
    })
    .join();
    match done {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("{what}: {e:#}"),
        Err(_) => eprintln!("{what} panicked"),
    }
}

/// A client for `config` with kube's default retry layer off (see [`Env::client`]).
fn client_without_retry(config: &Config) -> kube::Result<Client> {
    let mut config = config.clone();
    config.default_retry = false;
    Client::try_from(config)
}

fn non_empty_var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

async fn load_config(path: &Path) -> Result<Config> {
    let kubeconfig = Kubeconfig::read_from(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))
}
