//! The controller under test: its member clusters, the process, and readers of what it
//! writes (quota status, the dashboard's JSON view, metrics).
//!
//! ```text
//!  member_apis(env)          the member apiservers of the Env (kubeconfig-1, -2, …):
//!       │                    endpoint, admin token, CA data
//!       ▼
//!  ClusterRegistration       Cluster <name> {apiEndpoint, secretRef karmada-cluster/<name>}
//!       │ ::register         + Secret {token, caBundle}, as Karmada stores members; names
//!       │                    are cluster-scoped, so parallel tests use `<ns>-member1` …;
//!       │                    deleted by cleanup() or on drop
//!       ▼
//!  Controller::builder()     target/<profile>/karmada-quota-controller
//!       .namespace(ns)         --kubeconfig <apiserver 0> --admin-listen 127.0.0.1:<free>
//!       .member_kubeconfig()   --namespace <ns> --lease-name <unique> --lease-namespace karmada-system
//!       .start(env)            (+ fast member probes and lease timings for tests; start()
//!                            creates the lease namespace first, as an install would)
//!       │                    ready when GET /readyz on the admin port answers 200
//!       ▼
//!  tests: report() / snapshot() (the dashboard's /api/v1, --dashboard-auth=none on
//!         loopback), is_leader() (the kq_controller_leader gauge), metric(),
//!         wait_quota() on the status, add_reservation() "as the webhook would"
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use karmada_quota_core::Quantity;
use karmada_quota_crds::quota::{ClusterUsage, Reservation, ReservedBy};
use karmada_quota_crds::{Cluster, KarmadaQuota};
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::env::cleanup_from_drop;
use crate::ns::label_value;
use crate::{
    Binary, Env, FIELD_MANAGER, free_port, http_get, http_get_ok, metric_sum, replace_quota_status,
    try_wait_for, wait_for, yaml_documents,
};

/// The controller binary.
pub const CONTROLLER_BIN: &str = "karmada-quota-controller";
/// Namespace of the member Secrets (Karmada's default).
pub const CLUSTER_SECRET_NAMESPACE: &str = "karmada-cluster";
/// Namespace of the tests' leader-election Leases: the controller's default, which an
/// install creates ([`ControllerBuilder::start`] does here).
pub const LEASE_NAMESPACE: &str = "karmada-system";
/// Label on the Clusters and Secrets the fixture creates; its value names the owner
/// (a test namespace, or `kq-demo`).
pub const OWNER_LABEL: &str = "e2e.karmada-quota/owner";
/// How long the controller may take to become ready (a debug build; every watch lists once).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Lease timings the fixture runs with: a killed leader is replaced within seconds.
pub const LEASE_DURATION: &str = "4s";
/// See [`LEASE_DURATION`].
pub const LEASE_RENEW_INTERVAL: &str = "1s";

static LEASES: AtomicUsize = AtomicUsize::new(0);

// ---------------------------------------------------------------------------------------
// Member apiservers
// ---------------------------------------------------------------------------------------

/// One member apiserver of the [`Env`], as its kubeconfig describes it.
#[derive(Clone, Debug)]
pub struct MemberApi {
    /// 1 for `kubeconfig-1`, …: the index among the Env's apiservers.
    pub index: usize,
    /// `https://127.0.0.1:<port>`.
    pub server: String,
    /// Host and port of `server`.
    pub addr: SocketAddr,
    /// The admin bearer token.
    pub token: String,
    /// `certificate-authority-data` (base64 of the PEM: the serving certificate and its CA),
    /// `None` when the kubeconfig skips verification.
    pub ca_data: Option<String>,
    /// The kubeconfig file.
    pub kubeconfig: PathBuf,
}

impl MemberApi {
    /// Writes a copy of this member's kubeconfig whose server is `server` (e.g. a proxy in
    /// front of it) to `path`.
    pub fn kubeconfig_via(&self, server: &str, path: &Path) -> Result<PathBuf> {
        self.kubeconfig_for(server, &self.token, path)
    }

    /// Writes a kubeconfig for this apiserver whose user is `token` (another identity
    /// than the admin) to `path`.
    pub fn kubeconfig_as(&self, token: &str, path: &Path) -> Result<PathBuf> {
        self.kubeconfig_for(&self.server, token, path)
    }

    fn kubeconfig_for(&self, server: &str, token: &str, path: &Path) -> Result<PathBuf> {
        let tls = match &self.ca_data {
            Some(ca) => format!("    certificate-authority-data: {ca}"),
            None => "    insecure-skip-tls-verify: true".to_owned(),
        };
        let text = format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: member\n  cluster:\n    server: {server}\n{tls}\n\
             users:\n- name: admin\n  user:\n    token: {token}\ncontexts:\n- name: member\n  context:\n    cluster: member\n    user: admin\n\
             current-context: member\n"
        );
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path.to_path_buf())
    }
}

/// The member apiservers of `env` (apiservers 1..N); fails when there are fewer than `n`.
pub fn member_apis(env: &Env, n: usize) -> Result<Vec<MemberApi>> {
    let paths = env.member_kubeconfigs();
    if paths.len() < n {
        bail!(
            "this test needs {n} member apiservers, the control plane has {} \
             (E2E_KUBECONFIG has none; use E2E_CONTROLPLANE_DIR or let the harness start one)",
            paths.len()
        );
    }
    paths
        .iter()
        .enumerate()
        .map(|(i, p)| member_api(i + 1, p))
        .collect()
}

/// Apiserver 0 of `env` (the Karmada control plane), described like a member.
pub fn control_plane_api(env: &Env) -> Result<MemberApi> {
    member_api(0, env.kubeconfig())
}

fn member_api(index: usize, path: &Path) -> Result<MemberApi> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let doc = yaml_documents(&text)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} is empty", path.display()))?;
    let cluster = &doc["clusters"][0]["cluster"];
    let server = cluster["server"]
        .as_str()
        .ok_or_else(|| anyhow!("{}: no clusters[0].cluster.server", path.display()))?
        .to_owned();
    let addr: SocketAddr = server
        .strip_prefix("https://")
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| {
            anyhow!(
                "{}: server {server:?} is not https://IP:PORT",
                path.display()
            )
        })?;
    let token = doc["users"][0]["user"]["token"]
        .as_str()
        .ok_or_else(|| anyhow!("{}: no users[0].user.token", path.display()))?
        .to_owned();
    Ok(MemberApi {
        index,
        server,
        addr,
        token,
        ca_data: cluster["certificate-authority-data"]
            .as_str()
            .map(str::to_owned),
        kubeconfig: path.to_path_buf(),
    })
}

// ---------------------------------------------------------------------------------------
// Cluster objects
// ---------------------------------------------------------------------------------------

/// One member to register as a Cluster: its name in bindings, the apiserver behind it, and
/// the endpoint to put in `spec.apiEndpoint` (the apiserver's own, or a proxy's).
#[derive(Clone, Debug)]
pub struct MemberCluster {
    /// The Cluster's name (= `spec.clusters[].name` of bindings).
    pub name: String,
    /// The apiserver whose token and CA the Secret holds.
    pub api: MemberApi,
    /// `spec.apiEndpoint`.
    pub endpoint: String,
}

impl MemberCluster {
    /// `api` registered as `name` at its own endpoint.
    pub fn new(name: &str, api: &MemberApi) -> MemberCluster {
        MemberCluster {
            name: name.to_owned(),
            api: api.clone(),
            endpoint: api.server.clone(),
        }
    }

    /// The same member, reached at `endpoint` instead (e.g. a [`crate::proxy::TcpProxy`]).
    pub fn via(mut self, endpoint: &str) -> MemberCluster {
        self.endpoint = endpoint.to_owned();
        self
    }
}

/// Cluster objects and their Secrets in the control plane, as Karmada stores members.
/// Delete them with [`ClusterRegistration::cleanup`]; if the test panics first, dropping it
/// deletes them (on a thread of its own, since the test's runtime may be gone).
#[derive(Debug)]
pub struct ClusterRegistration {
    names: Vec<String>,
    armed: bool,
}

impl ClusterRegistration {
    /// Creates (or updates) a Secret `karmada-cluster/<name>` with `token` and `caBundle`
    /// and a Cluster `<name>` pointing at it for every member; `owner` labels them.
    pub async fn register(
        client: &Client,
        owner: &str,
        members: &[MemberCluster],
    ) -> Result<ClusterRegistration> {
        ensure_namespace(client, CLUSTER_SECRET_NAMESPACE).await?;
        let mut reg = ClusterRegistration {
            names: Vec::new(),
            armed: true,
        };
        let secrets: Api<Secret> = Api::namespaced(client.clone(), CLUSTER_SECRET_NAMESPACE);
        let clusters: Api<Cluster> = Api::all(client.clone());
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        for m in members {
            reg.names.push(m.name.clone());
            // Secret data is base64 on the wire: the kubeconfig's CA data already is.
            let mut data = json!({ "token": crate::base64::encode(m.api.token.as_bytes()) });
            if let Some(ca) = &m.api.ca_data {
                data["caBundle"] = json!(ca);
            }
            let secret = json!({
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": m.name,
                    "namespace": CLUSTER_SECRET_NAMESPACE,
                    "labels": {OWNER_LABEL: label_value(owner)},
                },
                "type": "Opaque",
                "data": data,
            });
            secrets
                .patch(&m.name, &pp, &Patch::Apply(&secret))
                .await
                .with_context(|| {
                    format!("applying Secret {CLUSTER_SECRET_NAMESPACE}/{}", m.name)
                })?;
            let cluster = json!({
                "apiVersion": "cluster.karmada.io/v1alpha1",
                "kind": "Cluster",
                "metadata": {"name": m.name, "labels": {OWNER_LABEL: label_value(owner)}},
                "spec": {
                    "syncMode": "Push",
                    "apiEndpoint": m.endpoint,
                    "secretRef": {"namespace": CLUSTER_SECRET_NAMESPACE, "name": m.name},
                    "insecureSkipTLSVerification": m.api.ca_data.is_none(),
                },
            });
            clusters
                .patch(&m.name, &pp, &Patch::Apply(&cluster))
                .await
                .with_context(|| format!("applying Cluster {}", m.name))?;
        }
        Ok(reg)
    }

    /// The registered Cluster names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Points Cluster `name` at another `spec.apiEndpoint`.
    pub async fn set_endpoint(client: &Client, name: &str, endpoint: &str) -> Result<()> {
        Api::<Cluster>::all(client.clone())
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"apiEndpoint": endpoint}})),
            )
            .await
            .with_context(|| format!("patching Cluster {name}"))?;
        Ok(())
    }

    /// Deletes the Clusters and their Secrets.
    pub async fn cleanup(mut self) -> Result<()> {
        self.armed = false;
        delete_clusters(&Env::get().await?.client()?, &self.names).await
    }
}

impl Drop for ClusterRegistration {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let names = std::mem::take(&mut self.names);
        cleanup_from_drop("deleting the test's Clusters", move |client| async move {
            delete_clusters(&client, &names).await
        });
    }
}

async fn delete_clusters(client: &Client, names: &[String]) -> Result<()> {
    let clusters: Api<Cluster> = Api::all(client.clone());
    let secrets: Api<Secret> = Api::namespaced(client.clone(), CLUSTER_SECRET_NAMESPACE);
    for name in names {
        for res in [
            clusters
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
            secrets
                .delete(name, &DeleteParams::default())
                .await
                .map(|_| ()),
        ] {
            match res {
                Ok(()) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e).with_context(|| format!("deleting Cluster/Secret {name}")),
            }
        }
    }
    Ok(())
}

pub use crate::ns::ensure_namespace;

// ---------------------------------------------------------------------------------------
// The process
// ---------------------------------------------------------------------------------------

/// How to start the controller; see [`Controller::builder`].
#[derive(Debug, Default)]
pub struct ControllerBuilder {
    namespace: Option<String>,
    lease_namespace: Option<String>,
    lease_name: Option<String>,
    identity: Option<String>,
    leader_election: Option<bool>,
    clusters_from_api: Option<bool>,
    member_kubeconfigs: Vec<(String, PathBuf)>,
    args: Vec<String>,
    admin_port: Option<u16>,
    kubeconfig: Option<PathBuf>,
}

impl ControllerBuilder {
    /// Watch only `ns` (`--namespace`); without it the controller watches all namespaces.
    pub fn namespace(mut self, ns: &str) -> Self {
        self.namespace = Some(ns.to_owned());
        self
    }

    /// The Lease namespace (default: [`LEASE_NAMESPACE`]).
    pub fn lease_namespace(mut self, ns: &str) -> Self {
        self.lease_namespace = Some(ns.to_owned());
        self
    }

    /// The Lease name (default: `kq-e2e-<namespace>-<n>`, unique per start unless given).
    pub fn lease_name(mut self, name: &str) -> Self {
        self.lease_name = Some(name.to_owned());
        self
    }

    /// The replica's identity in the Lease (default: the binary's `<hostname>_<pid>`).
    pub fn identity(mut self, id: &str) -> Self {
        self.identity = Some(id.to_owned());
        self
    }

    /// `--leader-election=<on>` (default on).
    pub fn leader_election(mut self, on: bool) -> Self {
        self.leader_election = Some(on);
        self
    }

    /// `--member-clusters-from-api=<on>`: read members from Cluster objects (default on;
    /// off when only `--member-kubeconfig` members are wanted).
    pub fn clusters_from_api(mut self, on: bool) -> Self {
        self.clusters_from_api = Some(on);
        self
    }

    /// `--member-kubeconfig NAME=PATH`.
    pub fn member_kubeconfig(mut self, name: &str, path: &Path) -> Self {
        self.member_kubeconfigs
            .push((name.to_owned(), path.to_path_buf()));
        self
    }

    /// Every member apiserver of `env` by kubeconfig, as `member1`, `member2`, …, and no
    /// Cluster objects: a test then sees only its own members, whatever other tests register.
    pub fn env_members(mut self, env: &Env) -> Self {
        for (i, path) in env.member_kubeconfigs().iter().enumerate() {
            self.member_kubeconfigs
                .push((format!("member{}", i + 1), path.clone()));
        }
        self.clusters_from_api = Some(false);
        self
    }

    /// An extra flag (after the fixture's own, so it wins where clap lets the last one).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Reach the control plane as the identity of this kubeconfig (default: the Env's
    /// admin kubeconfig).
    pub fn kubeconfig(mut self, path: &Path) -> Self {
        self.kubeconfig = Some(path.to_path_buf());
        self
    }

    /// Serve the admin port here (default: a free port).
    pub fn admin_port(mut self, port: u16) -> Self {
        self.admin_port = Some(port);
        self
    }

    /// Creates the lease namespace (as an install would), starts the controller and waits
    /// until `/readyz` answers 200 (every watch listed, the Lease usable).
    pub async fn start(self, env: &Env) -> Result<Controller> {
        let lease_ns = self.lease_namespace.as_deref().unwrap_or(LEASE_NAMESPACE);
        ensure_namespace(&env.client()?, lease_ns).await?;
        if !crate::env::gives_reservation_namespace(&self.args) {
            ensure_namespace(&env.client()?, env.reservation_namespace()).await?;
        }
        let mut c = self.spawn(env)?;
        c.wait_ready(READY_TIMEOUT).await?;
        Ok(c)
    }

    /// Starts the controller without waiting (and without creating the lease namespace).
    pub fn spawn(self, env: &Env) -> Result<Controller> {
        let admin_port = match self.admin_port {
            Some(p) => p,
            None => free_port()?,
        };
        let lease_name = self.lease_name.clone().unwrap_or_else(|| {
            format!(
                "kq-e2e-{}-{}-{}",
                self.namespace.as_deref().unwrap_or("all"),
                std::process::id(),
                LEASES.fetch_add(1, Ordering::Relaxed)
            )
        });
        let dashboard_port = free_port()?;
        let mut b = Binary::builder(CONTROLLER_BIN)
            .arg("--kubeconfig")
            .arg(self.kubeconfig.as_deref().unwrap_or(env.kubeconfig()))
            .arg(format!("--admin-listen=127.0.0.1:{admin_port}"))
            .arg(format!("--dashboard-listen=127.0.0.1:{dashboard_port}"))
            .arg(format!("--lease-name={lease_name}"))
            .arg(format!(
                "--lease-namespace={}",
                self.lease_namespace.as_deref().unwrap_or(LEASE_NAMESPACE)
            ))
            .arg(format!("--lease-duration={LEASE_DURATION}"))
            .arg(format!("--lease-renew-interval={LEASE_RENEW_INTERVAL}"))
            // A stopped member is noticed within seconds and retried often.
            .arg("--member-probe-interval=1s")
            .arg("--member-connect-timeout=2s")
            .arg("--member-max-backoff=2s")
            .arg("--log=info,karmada_quota_controller=debug")
            // Plain text in the log file (tracing-subscriber colours by default).
            .env("NO_COLOR", "1");
        if let Some(ns) = &self.namespace {
            b = b.arg(format!("--namespace={ns}"));
        }
        if !crate::env::gives_reservation_namespace(&self.args) {
            b = b.arg(format!(
                "--reservation-namespace={}",
                env.reservation_namespace()
            ));
        }
        if let Some(id) = &self.identity {
            b = b.arg(format!("--identity={id}"));
        }
        if let Some(on) = self.leader_election {
            b = b.arg(format!("--leader-election={on}"));
        }
        if let Some(on) = self.clusters_from_api {
            b = b.arg(format!("--member-clusters-from-api={on}"));
        }
        for (name, path) in &self.member_kubeconfigs {
            b = b.arg(format!("--member-kubeconfig={name}={}", path.display()));
        }
        let binary = b.args(&self.args).start(env)?;
        Ok(Controller {
            binary,
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
            dashboard: SocketAddr::from(([127, 0, 0, 1], dashboard_port)),
            lease_name,
        })
    }
}

/// A running `karmada-quota-controller`; SIGKILLed when dropped.
#[derive(Debug)]
pub struct Controller {
    binary: Binary,
    admin: SocketAddr,
    dashboard: SocketAddr,
    lease_name: String,
}

impl Controller {
    /// A start with the fixture's flags, adjusted.
    pub fn builder() -> ControllerBuilder {
        ControllerBuilder::default()
    }

    /// The admin address (`/metrics`, `/livez`, `/readyz`; nothing else).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// `http://127.0.0.1:<admin port>`.
    pub fn admin_url(&self) -> String {
        format!("http://{}", self.admin)
    }

    /// The dashboard's address (pages, and the only JSON view of the quotas).
    pub fn dashboard_addr(&self) -> SocketAddr {
        self.dashboard
    }

    /// `http://127.0.0.1:<dashboard port>` (the browser dashboard).
    pub fn dashboard_url(&self) -> String {
        format!("http://{}", self.dashboard)
    }

    /// The leader-election Lease's name.
    pub fn lease_name(&self) -> &str {
        &self.lease_name
    }

    /// The process handle (pid, log).
    pub fn binary(&mut self) -> &mut Binary {
        &mut self.binary
    }

    /// Waits until `/readyz` answers 200; fails early if the process exits, and with its
    /// log tail on timeout.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        self.binary.wait_admin(self.admin, "/readyz", timeout).await
    }

    /// `/metrics`, as text.
    pub async fn metrics(&self) -> Result<String> {
        http_get_ok(self.admin, "/metrics").await
    }

    /// The sum of metric `name`'s samples whose labels contain every fragment of `labels`.
    pub async fn metric(&self, name: &str, labels: &[&str]) -> Result<u64> {
        Ok(metric_sum(&self.metrics().await?, name, labels))
    }

    /// Status writes this replica made (`kq_controller_status_writes_total`).
    pub async fn status_writes(&self) -> Result<u64> {
        self.metric("kq_controller_status_writes_total", &[]).await
    }

    /// The dashboard's `GET /api/v1/snapshot` (started with the default
    /// `--dashboard-auth=none` on loopback): `{"leader", "members": [{name, reach}],
    /// "quotas": [...], "teams"}`.
    pub async fn snapshot(&self) -> Result<Value> {
        get_json(self.dashboard, "/api/v1/snapshot").await
    }

    /// The dashboard's view of quota `<ns>/<name>` (`ns` empty: a KarmadaClusterQuota):
    /// `{hard, used, reserved, reservations: [{binding, uid, reserved, expires}],
    /// clusters: [{name, placed, observed}], conditions, …}`; `None` before its first
    /// reconcile (and once it is gone). The dashboard is fed once a second.
    pub async fn report(&self, ns: &str, name: &str) -> Result<Option<Value>> {
        let path = if ns.is_empty() {
            format!("/api/v1/cluster-quotas/{name}")
        } else {
            format!("/api/v1/quotas/{ns}/{name}")
        };
        match http_get(self.dashboard, &path).await? {
            (200, body) => {
                let v: Value = serde_json::from_str(&body).context("report JSON")?;
                Ok(Some(v["quota"].clone()))
            }
            (404, _) => Ok(None),
            (code, body) => bail!("GET {path} answered {code}: {body}"),
        }
    }

    /// The reachability the dashboard shows for member `name` (`reachable`,
    /// `unreachable`, `connecting`), if listed.
    pub async fn member_reach(&self, name: &str) -> Result<Option<String>> {
        let s = self.snapshot().await?;
        Ok(s["members"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| m["name"] == name)
            .and_then(|m| m["reach"].as_str().map(str::to_owned)))
    }

    /// Whether this replica says it leads (its `kq_controller_leader` gauge).
    pub async fn is_leader(&self) -> Result<bool> {
        Ok(self.metric("kq_controller_leader", &[]).await? == 1)
    }

    /// SIGKILLs the controller (no graceful shutdown, the Lease is not released).
    pub async fn kill(self) -> Result<()> {
        self.binary.stop().await
    }
}

async fn get_json(addr: SocketAddr, path: &str) -> Result<Value> {
    let body = http_get_ok(addr, path).await?;
    serde_json::from_str(&body).with_context(|| format!("GET {path}: {body}"))
}

// ---------------------------------------------------------------------------------------
// Quota status
// ---------------------------------------------------------------------------------------

/// Reads KarmadaQuota `ns/name`.
pub async fn get_quota(client: &Client, ns: &str, name: &str) -> Result<KarmadaQuota> {
    Api::<KarmadaQuota>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .with_context(|| format!("reading KarmadaQuota {ns}/{name}"))
}

/// Polls KarmadaQuota `ns/name` until `pred` holds; the error shows the last status.
pub async fn wait_quota(
    client: &Client,
    ns: &str,
    name: &str,
    desc: &str,
    timeout: Duration,
    pred: impl Fn(&KarmadaQuota) -> bool,
) -> Result<KarmadaQuota> {
    let last = parking_lot::Mutex::new(None::<KarmadaQuota>);
    let res = try_wait_for(desc, timeout, || async {
        let q = get_quota(client, ns, name).await?;
        let ok = pred(&q);
        *last.lock() = Some(q.clone());
        Ok::<_, anyhow::Error>(ok.then_some(q))
    })
    .await;
    res.map_err(|e| {
        let last = last.lock().take();
        let status = last
            .and_then(|q| q.status)
            .map(|s| serde_json::to_string_pretty(&s).unwrap_or_default())
            .unwrap_or_else(|| "(no status)".to_owned());
        e.context(format!("last status of {ns}/{name}:\n{status}"))
    })
}

/// The condition `type_` of a quota.
pub fn condition<'a>(q: &'a KarmadaQuota, type_: &str) -> Option<&'a Condition> {
    q.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
}

/// Whether condition `type_` has `status`.
pub fn condition_is(q: &KarmadaQuota, type_: &str, status: &str) -> bool {
    condition(q, type_).is_some_and(|c| c.status == status)
}

/// `status.clusters[]` entry `name`.
pub fn cluster_usage<'a>(q: &'a KarmadaQuota, name: &str) -> Option<&'a ClusterUsage> {
    q.status.as_ref()?.clusters.iter().find(|c| c.name == name)
}

/// Milli-units of `name` in a list (absent = 0; unparseable = -1, which matches nothing).
pub fn milli(list: &std::collections::BTreeMap<String, ApiQuantity>, name: &str) -> i128 {
    list.get(name)
        .map(|q| Quantity::read(&q.0).map_or(-1, |q| q.milli_value()))
        .unwrap_or(0)
}

/// Whether `list` holds exactly the `(name, quantity)` pairs given for those names (other
/// names are not looked at), compared as quantities (`1500m` = `1.5`).
pub fn has(list: &std::collections::BTreeMap<String, ApiQuantity>, want: &[(&str, &str)]) -> bool {
    want.iter()
        .all(|(name, q)| Quantity::read(q).is_ok_and(|q| milli(list, name) == q.milli_value()))
}

/// `status.used` holds `want`.
pub fn used_is(q: &KarmadaQuota, want: &[(&str, &str)]) -> bool {
    q.status.as_ref().is_some_and(|s| has(&s.used, want))
}

/// `status.clusters[cluster].used` holds `want`.
pub fn cluster_used_is(q: &KarmadaQuota, cluster: &str, want: &[(&str, &str)]) -> bool {
    cluster_usage(q, cluster).is_some_and(|c| has(&c.used, want))
}

/// `status.clusters[cluster].observed` holds `want`.
pub fn cluster_observed_is(q: &KarmadaQuota, cluster: &str, want: &[(&str, &str)]) -> bool {
    cluster_usage(q, cluster)
        .and_then(|c| c.observed.as_ref())
        .is_some_and(|o| has(o, want))
}

/// The reservation of binding `uid`.
pub fn reservation_of<'a>(q: &'a KarmadaQuota, uid: &str) -> Option<&'a Reservation> {
    q.status
        .as_ref()?
        .reservations
        .iter()
        .find(|r| r.reserved_by.uid == uid)
}

/// Now, Unix seconds.
pub fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A reservation entry as the webhook writes it: binding `name`/`uid` admitted at
/// `generation`, `reserved`, expiring `expires_in` from now.
pub fn reservation(
    name: &str,
    uid: &str,
    generation: i64,
    reserved: &[(&str, &str)],
    expires_in: Duration,
) -> Reservation {
    Reservation {
        reserved_by: ReservedBy {
            api_version: "work.karmada.io/v1alpha2".into(),
            kind: "ResourceBinding".into(),
            namespace: String::new(),
            name: name.to_owned(),
            uid: uid.to_owned(),
        },
        generation,
        reserved: reserved
            .iter()
            .map(|(k, v)| ((*k).to_owned(), ApiQuantity((*v).to_owned())))
            .collect(),
        expiration_time: karmada_quota_crds::convert::unix_to_time(
            now_secs() + i64::try_from(expires_in.as_secs()).unwrap_or(i64::MAX),
        ),
    }
}

/// Adds `entry` to the quota's `status.reservations` the way the webhook does: a status
/// replace with the read resourceVersion, re-read and retried on 409. Returns the object
/// written.
pub async fn add_reservation(
    client: &Client,
    ns: &str,
    quota: &str,
    entry: &Reservation,
) -> Result<KarmadaQuota> {
    replace_quota_status(
        client,
        ns,
        quota,
        &format!("adding a reservation to {ns}/{quota}"),
        |_, status| {
            status
                .reservations
                .retain(|r| r.reserved_by.uid != entry.reserved_by.uid);
            status.reservations.push(entry.clone());
        },
    )
    .await
}

/// Waits until the controller has written a status for the current spec of `ns/name`
/// (`observedGeneration` = generation, Ready=True): from then on the webhook decides.
pub async fn wait_synced(client: &Client, ns: &str, name: &str) -> Result<KarmadaQuota> {
    wait_quota(
        client,
        ns,
        name,
        &format!("the controller to sync {ns}/{name}"),
        Duration::from_secs(20),
        |q| {
            q.status.as_ref().is_some_and(|s| {
                s.observed_generation.is_some() && s.observed_generation == q.metadata.generation
            }) && condition_is(q, karmada_quota_crds::quota::CONDITION_READY, "True")
        },
    )
    .await
}

/// Waits for a Lease's holder to be one of `candidates` and returns it.
pub async fn lease_holder(client: &Client, lease: &str, timeout: Duration) -> Result<String> {
    let api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), LEASE_NAMESPACE);
    wait_for(
        &format!("Lease {LEASE_NAMESPACE}/{lease} held"),
        timeout,
        || {
            let api = api.clone();
            async move {
                api.get_opt(lease)
                    .await
                    .ok()??
                    .spec?
                    .holder_identity
                    .filter(|h| !h.is_empty())
            }
        },
    )
    .await
}

/// The events recorded on quota `ns/quota` (`involvedObject.name`), as (reason, message).
pub async fn quota_events(client: &Client, ns: &str, quota: &str) -> Result<Vec<(String, String)>> {
    let api: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    let list = api
        .list(&kube::api::ListParams::default())
        .await
        .with_context(|| format!("listing events in {ns}"))?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.involved_object.name.as_deref() == Some(quota))
        .map(|e| (e.reason.unwrap_or_default(), e.message.unwrap_or_default()))
        .collect())
}

/// Creates Lease `LEASE_NAMESPACE/name` held by another (pretend) replica for an hour: a
/// controller using it stays a follower, computing every quota and writing nothing.
pub async fn held_lease(client: &Client, name: &str) -> Result<()> {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    ensure_namespace(client, LEASE_NAMESPACE).await?;
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(LEASE_NAMESPACE.to_owned()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("e2e-another-replica".to_owned()),
            lease_duration_seconds: Some(3600),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..Default::default()
        }),
    };
    Api::<Lease>::namespaced(client.clone(), LEASE_NAMESPACE)
        .create(&PostParams::default(), &lease)
        .await
        .with_context(|| format!("Lease {LEASE_NAMESPACE}/{name}"))?;
    Ok(())
}

/// A member pod with one container requesting `cpu`, as a kubelet would run it (it stays
/// Pending on the loopback members: no kubelet, but a non-terminal pod with real requests).
pub fn member_pod(ns: &str, name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{
            "name": "app",
            "image": "registry.k8s.io/pause:3.9",
            "resources": {"requests": {"cpu": cpu}},
        }]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn member_kubeconfigs_parse_and_can_be_pointed_elsewhere() {
        let dir = std::env::temp_dir().join(format!("kq-e2e-member-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let api = MemberApi {
            index: 2,
            server: "https://127.0.0.1:6443".into(),
            addr: "127.0.0.1:6443".parse().unwrap(),
            token: "t0ken".into(),
            ca_data: Some("Q0E=".into()),
            kubeconfig: PathBuf::new(),
        };
        let path = api
            .kubeconfig_via("https://127.0.0.1:7000", &dir.join("kc"))
            .unwrap();
        let back = member_api(2, &path).unwrap();
        assert_eq!(back.server, "https://127.0.0.1:7000");
        assert_eq!(back.addr.port(), 7000);
        assert_eq!(back.token, "t0ken");
        assert_eq!(back.ca_data.as_deref(), Some("Q0E="));
        let insecure = MemberApi {
            ca_data: None,
            ..api
        };
        let path = insecure
            .kubeconfig_via("https://127.0.0.1:7001", &dir.join("kc2"))
            .unwrap();
        assert_eq!(member_api(1, &path).unwrap().ca_data, None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn label_values_are_valid() {
        assert_eq!(label_value("kq-demo"), "kq-demo");
        assert_eq!(label_value("a/b::c"), "a-b--c");
        assert_eq!(label_value(&"x".repeat(70)).len(), 63);
    }
}
