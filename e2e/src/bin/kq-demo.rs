//! `kq-demo`: the one-command demo (`make demo`). A local Karmada-like control plane with two
//! member clusters, the quota webhook and controller running against it, and the samples of
//! `examples/` applied; it prints what the controller computed and where everything is, and
//! runs until Ctrl-C, then stops everything it started.
//!
//! ```text
//!  Env::get()            own control plane (etcd + 3 kube-apiservers, CRDs), or the one
//!                        E2E_CONTROLPLANE_DIR names (then only the demo namespace is touched)
//!  webhook               started, registered for the demo namespace
//!  Cluster member1/2     + Secret {token, caBundle} in karmada-cluster, as Karmada stores them
//!  controller            all namespaces (own control plane), leader election on
//!  examples/             quotas → (status synced) → business quota over <ns> and <ns>-batch
//!                        → member pods → bindings via the webhook → one over-limit
//!                        binding refused
//!  print                 kubectl get kquota -o wide, per-cluster table, endpoints
//!  Ctrl-C / SIGTERM      children killed, Clusters and registration removed, control plane down
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use clap::Parser;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_e2e::controller::{
    ClusterRegistration, Controller, LEASE_NAMESPACE, MemberCluster, ensure_namespace, get_quota,
    member_apis, wait_synced,
};
use karmada_quota_e2e::webhook::{Rb, Registration, Webhook, create, wait_until_status_seen};
use karmada_quota_e2e::{Env, EnvSource, apply_yaml, wait_for, yaml_documents};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

/// The label of the demo's cluster quota (its namespace), which a shared control plane's
/// extra controller selects on.
const DEMO_LABEL: &str = "kq-demo/namespace";

/// How long the controller may take to count every sample binding.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// A local Karmada-like control plane with karmada-quota's webhook and controller and the
/// samples of examples/; runs until Ctrl-C.
#[derive(Debug, Parser)]
#[command(
    name = "kq-demo",
    about = "A local Karmada-like control plane (etcd + 3 kube-apiservers: the control plane \
             and two members) with the karmada-quota webhook and controller and the samples of \
             examples/. Runs until Ctrl-C, then stops everything it started.",
    long_about = None,
    after_help = "Environment: E2E_CONTROLPLANE_DIR=DIR uses a control plane `controlplane.sh up DIR 3` \
                  brought up (then only --namespace is touched and the controller is limited to it); \
                  otherwise kq-demo starts its own and brings it down on exit."
)]
struct Args {
    /// Set everything up, print it, clean up and exit (CI and tests), instead of waiting
    /// for Ctrl-C.
    #[arg(long, env = "KQ_DEMO_EXIT_AFTER_SETUP")]
    exit_after_setup: bool,

    /// The namespace the samples go into (created when missing).
    #[arg(long, env = "KQ_DEMO_NAMESPACE", default_value = "team-a")]
    namespace: String,

    /// The samples' directory.
    #[arg(long, env = "KQ_DEMO_EXAMPLES")]
    examples: Option<PathBuf>,
}

/// What was started, for the cleanup.
#[derive(Default)]
struct Started {
    webhook: Option<Webhook>,
    registration: Option<Registration>,
    controller: Option<Controller>,
    /// On a shared control plane: the controller of the demo's cluster quota.
    business_controller: Option<Controller>,
    clusters: Option<ClusterRegistration>,
    namespace: Option<String>,
    /// The business namespace and cluster quota.
    business: Option<(String, String)>,
}

/// The label naming a namespace's team (business): the business quota selects on it and
/// the dashboard groups by it.
const TEAM_LABEL: &str = "karmada-quota.io/team";

fn say(s: &str) {
    println!("{s}");
}

fn heading(s: &str) {
    println!("\n== {s}");
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    // The variables Env::get() reads (see the harness): neither set → it starts its own.
    let owned = ["E2E_CONTROLPLANE_DIR", "E2E_KUBECONFIG"]
        .iter()
        .all(|v| std::env::var_os(v).is_none_or(|v| v.is_empty()));
    if owned {
        heading(
            "Starting a local control plane: etcd + 3 kube-apiservers (Karmada, member1, member2)",
        );
    }
    let env = Env::get().await?;
    let mut started = Started::default();
    let result = tokio::select! {
        r = run(env, &args, &mut started) => r.map(|()| !args.exit_after_setup),
        () = shutdown_signal() => {
            say("\ninterrupted during setup");
            Ok(false)
        }
    };
    let wait = match result {
        Ok(wait) => wait,
        Err(e) => {
            eprintln!("\nkq-demo failed: {e:#}");
            cleanup(env, started).await;
            std::process::exit(1);
        }
    };
    if wait {
        say("\nRunning. Press Ctrl-C to stop everything.");
        shutdown_signal().await;
        say("\nCtrl-C: stopping");
    }
    cleanup(env, started).await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// The demo's setting: the control plane, the namespaces and names it uses, the samples.
struct Demo {
    env: &'static Env,
    /// A control plane the demo did not start: only its namespaces are touched.
    shared: bool,
    apis: Vec<karmada_quota_e2e::controller::MemberApi>,
    client: kube::Client,
    members: Vec<kube::Client>,
    ns: String,
    batch_ns: String,
    business: String,
    examples: PathBuf,
}

impl Demo {
    fn new(env: &'static Env, args: &Args) -> Result<Demo> {
        let ns = args.namespace.clone();
        Ok(Demo {
            env,
            shared: *env.source() != EnvSource::Owned,
            apis: member_apis(env, 2)?,
            client: env.client()?,
            members: env.member_clients()?,
            batch_ns: format!("{ns}-batch"),
            business: format!("business-{ns}"),
            examples: args
                .examples
                .clone()
                .unwrap_or_else(|| Env::repo_root().join("examples")),
            ns,
        })
    }

    /// The demo's KarmadaClusterQuota as stored now (`None`: not readable).
    async fn business_now(&self) -> Option<KarmadaClusterQuota> {
        Api::<KarmadaClusterQuota>::all(self.client.clone())
            .get(&self.business)
            .await
            .ok()
    }

    /// The sample file `file` of the examples directory.
    fn read(&self, file: &str) -> Result<String> {
        let path = self.examples.join(file);
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
    }
}

/// Sets everything up and prints it (the module doc's order); what it started goes into
/// `started` as it starts, for the cleanup.
async fn run(env: &'static Env, args: &Args, started: &mut Started) -> Result<()> {
    let demo = Demo::new(env, args)?;
    demo.describe();
    demo.namespaces(started).await?;
    let url = demo.webhook(started).await?;
    demo.member_clusters(started).await?;
    demo.controllers(started).await?;
    let quota_names = demo.quotas().await?;
    demo.business_quota(started).await?;
    demo.samples().await?;
    let compute = demo.settle(&quota_names).await?;
    demo.tables().await?;
    let controller = started.controller.as_ref().context("controller")?;
    demo.per_member(controller, &compute, &quota_names[0])
        .await?;
    demo.endpoints(started, &url)
}

impl Demo {
    /// Where the control plane and the members are.
    fn describe(&self) {
        let env = self.env;
        say(&format!(
            "control plane: {} ({})",
            env.kubeconfig().display(),
            match env.source() {
                EnvSource::Owned => "started by kq-demo",
                EnvSource::ControlPlaneDir => "E2E_CONTROLPLANE_DIR",
                EnvSource::Kubeconfig => "E2E_KUBECONFIG",
            }
        ));
        for a in &self.apis {
            say(&format!(
                "member{}: {} ({})",
                a.index,
                a.server,
                a.kubeconfig.display()
            ));
        }
    }

    /// The demo namespace and the business's second one, in the control plane and both
    /// members, labelled with the team.
    async fn namespaces(&self, started: &mut Started) -> Result<()> {
        let (client, ns, batch_ns) = (&self.client, self.ns.as_str(), self.batch_ns.as_str());
        heading(&format!(
            "Namespace {ns} in the control plane and both members"
        ));
        fresh_namespace(client, ns).await?;
        started.namespace = Some(ns.to_owned());
        fresh_namespace(client, batch_ns).await?;
        started.business = Some((batch_ns.to_owned(), self.business.clone()));
        for m in &self.members {
            ensure_namespace(m, ns).await?;
            ensure_namespace(m, batch_ns).await?;
        }
        for n in [ns, batch_ns] {
            Api::<Namespace>::all(client.clone())
                .patch(
                    n,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {TEAM_LABEL: ns}}})),
                )
                .await
                .with_context(|| format!("labelling namespace {n}"))?;
        }
        say(&format!("{ns} and {batch_ns} labelled {TEAM_LABEL}={ns}"));
        Ok(())
    }

    /// The webhook, started and registered for both namespaces; its URL.
    async fn webhook(&self, started: &mut Started) -> Result<String> {
        heading("Webhook");
        let webhook = Webhook::start(self.env).await?;
        let url = webhook.url();
        let registration = Registration::register(
            &self.client,
            &url,
            &[self.ns.as_str(), self.batch_ns.as_str()],
            &[&webhook],
        )
        .await;
        started.webhook = Some(webhook);
        started.registration = Some(registration?);
        say(&format!(
            "karmada-quota-webhook {url} registered for namespace {} (ValidatingWebhookConfiguration {})",
            self.ns,
            started
                .registration
                .as_ref()
                .map(Registration::name)
                .unwrap_or_default()
        ));
        Ok(url)
    }

    /// The two members as Karmada stores them.
    async fn member_clusters(&self, started: &mut Started) -> Result<()> {
        heading("Member clusters as Karmada stores them: Cluster + Secret {token, caBundle}");
        let member_clusters: Vec<MemberCluster> = self
            .apis
            .iter()
            .map(|a| MemberCluster::new(&format!("member{}", a.index), a))
            .collect();
        started.clusters =
            Some(ClusterRegistration::register(&self.client, "kq-demo", &member_clusters).await?);
        for m in &member_clusters {
            say(&format!(
                "Cluster {} apiEndpoint {} secretRef karmada-cluster/{}",
                m.name, m.endpoint, m.name
            ));
        }
        Ok(())
    }

    /// The controller, leading; on a shared control plane a second one for the demo's
    /// cluster quota.
    async fn controllers(&self, started: &mut Started) -> Result<()> {
        let (ns, shared) = (self.ns.as_str(), self.shared);
        heading("Controller");
        // On a shared control plane a Lease of its own per namespace: a killed earlier
        // run's Lease would otherwise delay leadership by the lease duration.
        let lease = if shared {
            format!("kq-demo-{ns}")
        } else {
            "karmada-quota-controller".to_owned()
        };
        let mut builder = Controller::builder().lease_name(&lease);
        if shared {
            builder = builder.namespace(ns);
        }
        let controller = started.controller.insert(builder.start(self.env).await?);
        say(&format!(
            "karmada-quota-controller {} for {} (Lease {LEASE_NAMESPACE}/{}, namespace created \
             as an install would), ready",
            controller.admin_url(),
            if shared { ns } else { "all namespaces" },
            controller.lease_name()
        ));
        let leader = wait_leader(controller).await?;
        say(&format!("leader: {leader}"));
        if shared {
            // The namespace-restricted controller reconciles no cluster quota: one more for
            // the demo's own (selected by its label), and nothing else.
            let c = Controller::builder()
                .lease_name(&format!("kq-demo-business-{ns}"))
                .arg(format!("--cluster-quota-selector={DEMO_LABEL}={ns}"))
                .arg("--namespaced-quotas=false")
                .start(self.env)
                .await?;
            say(&format!(
                "karmada-quota-controller {} for KarmadaClusterQuota {} only",
                c.admin_url(),
                self.business
            ));
            started.business_controller = Some(c);
        }
        Ok(())
    }

    /// examples/quotas.yaml, synced and seen by the webhook; the quotas' names.
    async fn quotas(&self) -> Result<Vec<String>> {
        let (client, ns) = (&self.client, self.ns.as_str());
        heading("examples/quotas.yaml");
        let quotas = apply_yaml(client, ns, &self.read("quotas.yaml")?).await?;
        let quota_names: Vec<String> = quotas
            .iter()
            .filter_map(|q| q.metadata.name.clone())
            .collect();
        for name in &quota_names {
            wait_synced(client, ns, name).await?;
            say(&format!(
                "KarmadaQuota {ns}/{name}: status synced by the controller"
            ));
        }
        // The webhook decides only once it sees a synced status (else `status unknown`).
        wait_until_status_seen(client, &probe(ns)).await?;
        Ok(quota_names)
    }

    /// examples/business-quota.yaml over both namespaces, synced and seen by the webhook.
    async fn business_quota(&self, started: &Started) -> Result<()> {
        let (client, ns, batch_ns, business) = (
            &self.client,
            self.ns.as_str(),
            self.batch_ns.as_str(),
            self.business.as_str(),
        );
        heading(&format!(
            "examples/business-quota.yaml: one KarmadaClusterQuota over {ns} and {batch_ns}"
        ));
        let mut business_quota =
            yaml_documents(&self.read("business-quota.yaml")?.replace("team-a", ns))?
                .into_iter()
                .next()
                .context("business-quota.yaml is empty")?;
        business_quota["metadata"]["name"] = Value::from(business);
        business_quota["metadata"]["labels"] = json!({
            DEMO_LABEL: ns,
            karmada_quota_e2e::webhook::NS_LABEL: started.registration.as_ref().map(Registration::name).unwrap_or_default(),
        });
        let _ = Api::<KarmadaClusterQuota>::all(client.clone())
            .delete(business, &DeleteParams::default())
            .await;
        karmada_quota_e2e::accepts(client, &business_quota)
            .await
            .with_context(|| format!("creating KarmadaClusterQuota {business}"))?;
        wait_for(
            &format!("KarmadaClusterQuota {business} synced by the controller"),
            SETTLE_TIMEOUT,
            || async {
                let q = self.business_now().await?;
                let st = q.status?;
                (st.quota.used.len() == q.spec.quota.hard.len() && st.namespaces.len() == 2)
                    .then_some(())
            },
        )
        .await?;
        say(&format!(
            "KarmadaClusterQuota {business}: status synced over {ns}, {batch_ns}"
        ));
        for n in [ns, batch_ns] {
            wait_until_status_seen(client, &probe(n)).await?;
        }
        Ok(())
    }

    /// The member pods, the bindings through the webhook, and one binding it must refuse.
    async fn samples(&self) -> Result<()> {
        let (client, ns, batch_ns) = (&self.client, self.ns.as_str(), self.batch_ns.as_str());
        heading(
            "examples/member1-pods.yaml, examples/member2-pods.yaml (straight into the members)",
        );
        for (i, m) in self.members.iter().enumerate().take(2) {
            let file = format!("member{}-pods.yaml", i + 1);
            let applied = apply_yaml(m, ns, &self.read(&file)?).await?;
            let pods = applied
                .iter()
                .filter(|o| o.types.as_ref().is_some_and(|t| t.kind == "Pod"))
                .count();
            say(&format!("member{}: {pods} pods", i + 1));
        }

        heading("examples/bindings.yaml (through the webhook)");
        self.admitted(ns, "bindings.yaml", "").await?;
        heading(&format!(
            "examples/business-binding.yaml in {batch_ns} (through the webhook, charged to {})",
            self.business
        ));
        self.admitted(batch_ns, "business-binding.yaml", &format!("{batch_ns}/"))
            .await?;

        heading("examples/over-limit-binding.yaml (must be refused)");
        let mut over = yaml_documents(&self.read("over-limit-binding.yaml")?)?
            .into_iter()
            .next()
            .context("over-limit-binding.yaml is empty")?;
        over["metadata"]["namespace"] = Value::from(ns);
        match create(client, &over).await? {
            Err(status) => say(&format!(
                "ResourceBinding {}: refused ({} {}):\n  {}",
                over["metadata"]["name"].as_str().unwrap_or("?"),
                status.code,
                status.reason,
                status.message
            )),
            Ok(_) => bail!("the over-limit binding was admitted"),
        }
        Ok(())
    }

    /// Every binding of sample `file`, created in `ns` through the webhook (each must be
    /// admitted); `label` prefixes the names printed.
    async fn admitted(&self, ns: &str, file: &str, label: &str) -> Result<()> {
        for doc in yaml_documents(&self.read(file)?)? {
            let name = doc["metadata"]["name"].as_str().unwrap_or("?").to_owned();
            karmada_quota_e2e::apply_json(&self.client, ns, doc)
                .await
                .with_context(|| format!("ResourceBinding {name} was not admitted"))?;
            say(&format!("ResourceBinding {label}{name}: admitted"));
        }
        Ok(())
    }

    /// Until the controller counted every binding (no entry left, in the status or in a
    /// reservation batch) and measured both members; the first quota as it then stands.
    async fn settle(&self, quota_names: &[String]) -> Result<karmada_quota_crds::KarmadaQuota> {
        let (client, ns) = (&self.client, self.ns.as_str());
        heading("Waiting for the controller to count every binding and measure both members");
        for name in quota_names {
            wait_for(
                &format!("{ns}/{name}: every reservation folded, both members measured"),
                SETTLE_TIMEOUT,
                || async {
                    let u = karmada_quota_e2e::webhook::quota_usage(client, ns, name)
                        .await
                        .ok()?;
                    let s = u.object.status.as_ref()?;
                    (u.reservations.is_empty()
                        && ["member1", "member2"].iter().all(|m| {
                            s.clusters
                                .iter()
                                .any(|c| c.name == *m && c.observed.is_some())
                        }))
                    .then_some(())
                },
            )
            .await?;
        }
        // The Drift condition follows the member pods in the same pass.
        let compute = get_quota(client, ns, &quota_names[0]).await?;
        say(&format!(
            "{ns}/{}: {}",
            quota_names[0],
            compute
                .status
                .as_ref()
                .and_then(|s| s.summary.clone())
                .unwrap_or_default()
        ));
        Ok(compute)
    }

    /// `kubectl get kquota` and the business: its table and its namespaces' usage.
    async fn tables(&self) -> Result<()> {
        let (env, client, ns, business) = (
            self.env,
            &self.client,
            self.ns.as_str(),
            self.business.as_str(),
        );
        heading(&format!(
            "kubectl get kquota {} -o wide",
            if self.shared {
                format!("-n {ns}")
            } else {
                "-A".to_owned()
            }
        ));
        let table = if self.shared {
            env.kubectl(&["get", "kquota", "-n", ns, "-o", "wide"])
                .await?
        } else {
            env.kubectl(&["get", "kquota", "-A", "-o", "wide"]).await?
        };
        print!("{table}");

        heading(&format!(
            "The business: KarmadaClusterQuota {business} over {ns} and {}",
            self.batch_ns
        ));
        wait_for(
            &format!("{business}: every reservation folded"),
            SETTLE_TIMEOUT,
            || async {
                let s = self.business_now().await?.status?;
                let unfolded = karmada_quota_e2e::webhook::unfolded_entries(
                    client,
                    None,
                    business,
                    s.quota.folded_through,
                )
                .await
                .ok()?;
                (karmada_quota_e2e::quota_status::pending(&s.quota).is_empty()
                    && unfolded.is_empty()
                    && s.quota.summary.is_some())
                .then_some(s.quota.summary)
            },
        )
        .await?;
        print!(
            "{}",
            env.kubectl(&["get", "kcquota", business, "-o", "wide"])
                .await?
        );
        let q = Api::<KarmadaClusterQuota>::all(client.clone())
            .get(business)
            .await?;
        for n in q.status.map(|s| s.namespaces).unwrap_or_default() {
            let used: Vec<String> = n.used.iter().map(|(k, v)| format!("{k}={}", v.0)).collect();
            say(&format!("  namespace {:<24} {}", n.name, used.join(", ")));
        }
        Ok(())
    }

    /// The dashboard's view of quota `first` per member cluster, once it shows what
    /// `compute`'s status holds.
    async fn per_member(
        &self,
        controller: &Controller,
        compute: &karmada_quota_crds::KarmadaQuota,
        first: &str,
    ) -> Result<()> {
        let ns = self.ns.as_str();
        heading(&format!(
            "Per member cluster, placed / observed ({}/api/v1/snapshot)",
            controller.dashboard_url()
        ));
        // The dashboard is fed once a second: wait until its view of the first quota has
        // what the status printed above has, per member cluster.
        let settled: Vec<(String, Value)> = compute
            .status
            .as_ref()
            .map(|s| {
                s.clusters
                    .iter()
                    .map(|c| (c.name.clone(), json!(c.used)))
                    .collect()
            })
            .unwrap_or_default();
        let view = wait_for(
            "the dashboard's view to show the settled usage",
            SETTLE_TIMEOUT,
            || async {
                let view = controller.snapshot().await.ok()?;
                let item = view["quotas"]
                    .as_array()?
                    .iter()
                    .find(|i| i["namespace"] == ns && i["name"] == first)?
                    .clone();
                let caught_up = settled.iter().all(|(name, used)| {
                    item["clusters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| c["name"] == name.as_str() && c["placed"] == *used)
                });
                caught_up.then_some(view)
            },
        )
        .await?;
        print_clusters(&view, ns);
        Ok(())
    }

    /// Where everything is, and what to try.
    fn endpoints(&self, started: &mut Started, url: &str) -> Result<()> {
        let (env, ns) = (self.env, self.ns.as_str());
        heading("Endpoints");
        let webhook = started.webhook.as_mut().context("webhook")?;
        let webhook_admin = webhook.admin_addr();
        let webhook_log = webhook.binary().log_path().to_path_buf();
        let controller = started.controller.as_mut().context("controller")?;
        let controller_log = controller.binary().log_path().to_path_buf();
        say(&format!(
            "webhook     {url}/validate/resourcebinding, {url}/validate/karmadaquota, \
             {url}/validate/karmadaclusterquota"
        ));
        say(&format!(
            "            metrics http://{webhook_admin}/metrics, readiness http://{webhook_admin}/readyz"
        ));
        say(&format!("            log {}", webhook_log.display()));
        let admin = controller.admin_url();
        let dashboard = controller.dashboard_url();
        say(&format!(
            "dashboard   {dashboard}/, JSON view {dashboard}/api/v1/snapshot"
        ));
        say(&format!(
            "controller  metrics {admin}/metrics, readiness {admin}/readyz"
        ));
        say(&format!("            log {}", controller_log.display()));
        say(&format!("kubeconfig  {}", env.kubeconfig().display()));
        for a in &self.apis {
            say(&format!(
                "            member{}: {}",
                a.index,
                a.kubeconfig.display()
            ));
        }
        let kubeconfig = env.kubeconfig().display();
        say(&format!(
            "try         kubectl --kubeconfig {kubeconfig} get kquota -A -o wide"
        ));
        say(&format!(
            "            kubectl --kubeconfig {kubeconfig} get kcquota -o wide"
        ));
        say(&format!(
            "            kubectl --kubeconfig {kubeconfig} -n {ns} get resourcebindings"
        ));
        say(&format!("            curl -s {dashboard}/api/v1/overview"));
        Ok(())
    }
}

/// The dry-run probe a namespace's quotas are seen through: 1m cpu.
fn probe(ns: &str) -> Value {
    Rb::deployment("kq-demo-probe", 1)
        .request("cpu", "1m")
        .json(ns)
}

/// Creates namespace `ns`, or reuses it if it exists and is not being deleted.
async fn fresh_namespace(client: &kube::Client, ns: &str) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    if let Some(existing) = api.get_opt(ns).await? {
        if existing.metadata.deletion_timestamp.is_some() {
            bail!(
                "namespace {ns} is being deleted (a control plane without controller-manager never \
                 finishes that): pass another --namespace"
            );
        }
        return Ok(());
    }
    ensure_namespace(client, ns).await
}

async fn wait_leader(controller: &Controller) -> Result<&'static str> {
    for _ in 0..100 {
        if controller.is_leader().await.unwrap_or(false) {
            return Ok("this controller holds the Lease");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(anyhow!("the controller did not become leader within 10 s"))
}

/// One table per quota: a row per member cluster, a column per resource of `hard`, cells
/// `placed/observed` (`-` where not measured).
fn print_clusters(view: &Value, ns: &str) {
    let Some(items) = view["quotas"].as_array() else {
        say("(no quotas in the view)");
        return;
    };
    for item in items.iter().filter(|i| i["namespace"] == ns) {
        let name = item["name"].as_str().unwrap_or("?");
        let hard: Vec<&str> = item["hard"]
            .as_object()
            .map(|m| m.keys().map(String::as_str).collect())
            .unwrap_or_default();
        let drift = item["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Drift"))
            .map(|c| {
                format!(
                    "Drift={} {}",
                    c["status"].as_str().unwrap_or("?"),
                    c["message"].as_str().unwrap_or("")
                )
            })
            .unwrap_or_default();
        say(&format!("{ns}/{name}  {drift}"));
        let mut rows = vec![
            std::iter::once("CLUSTER".to_owned())
                .chain(hard.iter().map(|h| h.to_uppercase()))
                .collect::<Vec<_>>(),
        ];
        for c in item["clusters"].as_array().into_iter().flatten() {
            let mut row = vec![c["name"].as_str().unwrap_or("?").to_owned()];
            for h in &hard {
                let used = c["placed"][h].as_str().unwrap_or("0");
                let observed = if c["observed"].is_null() {
                    "-"
                } else {
                    c["observed"][h].as_str().unwrap_or("0")
                };
                row.push(format!("{used}/{observed}"));
            }
            rows.push(row);
        }
        let total = std::iter::once("TOTAL used/hard".to_owned())
            .chain(hard.iter().map(|h| {
                format!(
                    "{}/{}",
                    item["used"][h].as_str().unwrap_or("0"),
                    item["hard"][h].as_str().unwrap_or("?")
                )
            }))
            .collect();
        rows.push(total);
        let widths: Vec<usize> = (0..rows[0].len())
            .map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0))
            .collect();
        for row in rows {
            let line: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            say(&format!("  {}", line.join("   ").trim_end()));
        }
    }
}

/// Stops what `run` started, newest first; errors are reported, never fatal.
async fn cleanup(env: &'static Env, mut started: Started) {
    heading("Cleaning up");
    if let Some(c) = started.controller.take() {
        let _ = c.kill().await;
        say("controller stopped");
    }
    if let Some(c) = started.business_controller.take() {
        let _ = c.kill().await;
        say("business quota controller stopped");
    }
    if let Some(r) = started.registration.take() {
        match r.cleanup().await {
            Ok(()) => say("webhook registration deleted"),
            Err(e) => eprintln!("deleting the webhook registration: {e:#}"),
        }
    }
    if let Some(w) = started.webhook.take() {
        let _ = w.kill().await;
        say("webhook stopped");
    }
    if let Some(c) = started.clusters.take() {
        match c.cleanup().await {
            Ok(()) => say("Clusters member1, member2 and their Secrets deleted"),
            Err(e) => eprintln!("deleting the Clusters: {e:#}"),
        }
    }
    if *env.source() == EnvSource::Owned {
        // The whole control plane goes: nothing inside it needs deleting.
        if let Some(dir) = env.cp_dir() {
            control_plane_down(dir).await;
        }
        return;
    }
    if let Some((batch_ns, business)) = started.business.take()
        && let Ok(client) = env.client()
    {
        let _ = Api::<KarmadaClusterQuota>::all(client.clone())
            .delete(&business, &DeleteParams::default())
            .await;
        let _ = Api::<Namespace>::all(client)
            .delete(&batch_ns, &DeleteParams::background())
            .await;
        say(&format!(
            "KarmadaClusterQuota {business} and namespace {batch_ns} deleted"
        ));
    }
    if let Some(ns) = started.namespace.take()
        && let Ok(client) = env.client()
    {
        let _ = Api::<Namespace>::all(client)
            .delete(&ns, &DeleteParams::background())
            .await;
        say(&format!("namespace {ns} deleted"));
    }
}

async fn control_plane_down(dir: &Path) {
    let script = Env::repo_root().join("e2e/controlplane/controlplane.sh");
    let out = tokio::process::Command::new("bash")
        .arg(&script)
        .arg("down")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .output()
        .await;
    match out {
        Ok(o) if o.status.success() => {
            say(&format!("control plane down ({})", dir.display()));
            let _ = std::fs::remove_dir_all(dir);
        }
        Ok(o) => eprintln!(
            "controlplane.sh down {} failed: {}",
            dir.display(),
            String::from_utf8_lossy(&o.stderr)
        ),
        Err(e) => eprintln!("running controlplane.sh down: {e}"),
    }
}
