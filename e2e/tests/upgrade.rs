//! `helm upgrade` from the previous release of the chart (0.2.0, packaged in
//! testdata/charts from this repository's own history by hack/previous-release.sh) to this
//! checkout's chart, with quotas, pending reservations and bindings live and creates
//! continuing the whole time, on a control plane of the test's own (the previous CRDs must
//! replace the current ones, which the shared control plane's other tests rely on).
//!
//! ```text
//!  own control plane: apiserver 0 (Karmada), apiserver 1 (host); project CRDs removed
//!  N   = testdata/charts/karmada-quota-0.2.0.tgz   host part + apiserver part (its CRDs)
//!        reservationStore: status (0.2.0's default: each admission a compare-and-swap
//!        on the quota's status), client authentication on
//!        webhook-old-0 ◀── Service 127.0.0.1:<port> ◀── apiserver 0 (webhook.url)
//!        controller-old-0 (Lease holder)
//!        KarmadaQuota compute (cpu 4), KarmadaClusterQuota over the namespace (cpu 100)
//!  load: a create every 100 ms (1 × 100m; every 10th asks 5 cpu: must be refused), the
//!        oldest deleted past 24 live; sampler every 250 ms: used + reservations ≥ what the
//!        stored bindings need, ≤ hard
//!  N+1 = charts/karmada-quota, the operator's order (docs/upgrade.md):
//!    1. helm upgrade the apiserver part: CRDs (templates, so Helm applies them), RBAC
//!       (the batches' Roles), webhook configuration
//!    2. helm upgrade the host part (values: `reservationStore` dropped, the batches'
//!       namespace named), then the rollout as the Deployment controller does it
//!       (maxSurge 1, maxUnavailable 0): the new pod's process started from the upgraded
//!       Deployment, ready, added to the Service; the old one removed and sent SIGTERM.
//!       Webhook and controller roll at once; the old controller releases the Lease on
//!       SIGTERM and the new one takes it
//!  then: the load goes on, stops; the quota converges (no reservation left, used = need);
//!        both quotas hold the reservation-store fence; the new CRD schema holds for the
//!        N-era quota
//! ```
//!
//! Checked: every create admitted or refused for the quota (none refused because the
//! webhook was unreachable, none without an answer) but for two answers that are the
//! design's: 504 while the CRDs change, and 503 `no reservation-store fence yet` from the
//! new webhook between its start and the new controller's fence (docs/reservations.md
//! R22: the old webhooks reserve in the quotas' status, the new ones in batches, and the
//! fence keeps them from admitting side by side: from the fence on, an old webhook refuses
//! every increase for quota); no sample with an admitted binding uncounted or usage over
//! hard, in the namespace's quota or the cluster quota (the sampler counts status entries
//! and batch entries alike); both old and new webhook processes served; the Lease changed
//! hands and the new controller wrote status, fenced both quotas and folded every
//! reservation; stored objects read by the new binaries, the new CRD schema applied to
//! them.
//!
//! **What runs as N.** `KQ_UPGRADE_FROM_BIN_DIR` names a directory holding the 0.2.0
//! binaries (`make test` builds them from testdata/previous-release, the source of
//! 6a3b0bb; docs/upgrade.md); the N processes run them, exactly the N Deployments'
//! command, args and Secrets, under N's RBAC, CRDs and webhook configuration. Without it
//! the test fails unless `KQ_ALLOW_SKIP` names `previous-release` (e2e/src/skip.rs); then
//! the skip is recorded and nothing runs: this checkout's binaries cannot stand in for
//! N's (they reserve in batches, and refuse 0.2.0's `--reservation-store=status`).
//! upgrade_checks.rs shows the checks bite.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karmada_quota_core::Quantity;
use karmada_quota_crds::quota::MAX_SCOPE_EXPRESSIONS;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use karmada_quota_e2e::chart::{Helm, chart_dir};
use karmada_quota_e2e::controller::ensure_namespace;
use karmada_quota_e2e::install::{
    FromDeployment, from_deployment, run_id, sa_token, server_of, start, token_kubeconfig,
};
use karmada_quota_e2e::load::{Attempt, CPU, Load, LoadSpec, Sampler, Verdict, needed_cpu_milli};
use karmada_quota_e2e::own_controlplane::OwnControlPlane;
use karmada_quota_e2e::quota_status::fenced;
use karmada_quota_e2e::service::Service;
use karmada_quota_e2e::skip::{PREVIOUS_RELEASE, prerequisite};
use karmada_quota_e2e::webhook::{
    Rb, binding_review, post_review, quota, quota_usage, review_client_as,
};
use karmada_quota_e2e::{
    Binary, Env, WebhookClientCert, accepts, free_port, http_get_ok, metric_sum, wait_for,
};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The previous release, packaged (hack/previous-release.sh 6a3b0bb).
const PREVIOUS_CHART: &str = "testdata/charts/karmada-quota-0.2.0.tgz";
/// A directory holding the previous release's binaries, to run them as N.
const ENV_FROM_BIN_DIR: &str = "KQ_UPGRADE_FROM_BIN_DIR";
const QUOTA_CRDS: [&str; 4] = [
    "karmadaquotas.quota.karmada.io",
    "karmadaclusterquotas.quota.karmada.io",
    "karmadaclusterquotashares.quota.karmada.io",
    "karmadaquotareservations.quota.karmada.io",
];
const LEASE_NAME: &str = "karmada-quota-controller";
const CLUSTER: &str = "member1";
/// Label of the load's namespace the cluster quota selects.
const TEAM_LABEL: &str = "e2e.karmada-quota/upgrade-team";
const API_TIMEOUT: Duration = Duration::from_secs(60);
/// Both webhook processes in the Service before the old one leaves.
const OVERLAP: Duration = Duration::from_secs(3);
/// What the kubelet gives a pod between SIGTERM and SIGKILL (terminationGracePeriodSeconds).
const GRACE: Duration = Duration::from_secs(30);

fn step(s: &str) {
    eprintln!("{s}");
}

/// A process of one pod, with its admin address.
struct Pod {
    name: String,
    binary: Binary,
    admin: SocketAddr,
}

impl Pod {
    /// The sum of metric `name`'s samples on its admin port.
    async fn metric(&self, name: &str) -> Result<u64> {
        Ok(metric_sum(
            &http_get_ok(self.admin, "/metrics").await?,
            name,
            &[],
        ))
    }

    /// Stops it as the kubelet stops a pod (SIGTERM, at most [`GRACE`]).
    async fn terminate(self) -> Result<()> {
        let status = self.binary.terminate(GRACE).await?;
        eprintln!("{} exited: {status}", self.name);
        Ok(())
    }
}

/// One part of the install (a release in one apiserver).
struct Part {
    helm: Helm,
    release: String,
    namespace: String,
}

impl Part {
    /// `helm <verb> <release> <chart> -n <ns> -f <values> [extra]`; helm's output.
    async fn helm(
        &self,
        verb: &str,
        chart: &str,
        values: &Path,
        extra: &[String],
    ) -> Result<String> {
        let mut args = vec![
            verb.to_owned(),
            self.release.clone(),
            chart.to_owned(),
            "--namespace".into(),
            self.namespace.clone(),
            "-f".into(),
            values.display().to_string(),
            "--wait=false".into(),
        ];
        if verb == "install" {
            args.push("--create-namespace".into());
        }
        args.extend(extra.iter().cloned());
        let out = self.helm.run(&args).await?;
        eprintln!("$ helm {}\n{out}", args.join(" "));
        Ok(out)
    }
}

/// The values an operator keeps for N (what 0.2.0's schema accepts): the webhook requires
/// the client certificate the apiserver presents (bring your own CA), and reserves in the
/// quotas' status, 0.2.0's default, named as an operator may have named it.
fn values_n(
    fullname: &str,
    host_ns: &str,
    lease_ns: &str,
    webhook_url: &str,
    client: &WebhookClientCert,
) -> Result<Value> {
    let ca = std::fs::read_to_string(&client.ca)
        .with_context(|| format!("reading {}", client.ca.display()))?;
    Ok(json!({
        "installMode": "karmada",
        "fullnameOverride": fullname,
        "logFormat": "plain",
        "logLevel": "info,karmada_quota_webhook=debug,karmada_quota_controller=debug",
        "certs": {"mode": "auto", "extraIPs": ["127.0.0.1"]},
        "karmada": {"hostNamespace": host_ns},
        "reservationStore": "status",
        "webhook": {
            "replicas": 1,
            "url": webhook_url,
            "reservationTTL": "10m",
            "clientAuth": {"caBundle": ca, "allowedNames": [WebhookClientCert::CN]},
        },
        "controller": {
            "replicas": 1,
            "leaderElection": {"namespace": lease_ns, "createNamespace": true},
        },
    }))
}

/// The same values edited for N+1 (docs/upgrade.md, "One reservation store"): the store
/// is no longer named (`status` fails the chart's schema), and both parts name the
/// apiserver part's namespace, `system_ns`, as the reservation batches' (the host part
/// cannot know it).
fn values_n1(n: &Value, system_ns: &str) -> Value {
    let mut v = n.clone();
    if let Some(top) = v.as_object_mut() {
        top.remove("reservationStore");
    }
    v["reservationNamespace"] = json!(system_ns);
    v
}

/// Where N's binaries come from: `KQ_UPGRADE_FROM_BIN_DIR`, else today's (stand-ins).
fn from_bin_dir() -> Option<PathBuf> {
    std::env::var_os(ENV_FROM_BIN_DIR)
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// What a kubelet reads to run a pod: the installed Deployments of the host part.
struct Kubelet<'a> {
    host: &'a Client,
    ns: &'a str,
    fullname: &'a str,
    work: &'a Path,
}

impl Kubelet<'_> {
    /// The process for pod `pod` of Deployment `<fullname>-<component>`, on loopback.
    async fn spec(
        &self,
        component: &str,
        pod: &str,
        listen: &[(&str, String)],
    ) -> Result<FromDeployment> {
        from_deployment(
            self.host,
            self.ns,
            &format!("{}-{component}", self.fullname),
            pod,
            &self.work.join(pod),
            listen,
        )
        .await
    }

    /// A webhook pod on free loopback ports: its process, serving and admin addresses.
    async fn webhook(&self, pod: &str) -> Result<(FromDeployment, SocketAddr, SocketAddr)> {
        let serving = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let spec = self
            .spec(
                "webhook",
                pod,
                &[
                    ("--listen", serving.to_string()),
                    ("--admin-listen", admin.to_string()),
                ],
            )
            .await?;
        Ok((spec, serving, admin))
    }
}

async fn start_pod(env: &Env, name: &str, spec: &FromDeployment, admin: SocketAddr) -> Result<Pod> {
    let binary = start(env, spec, admin)
        .await
        .with_context(|| format!("starting pod {name}"))?;
    Ok(Pod {
        name: name.to_owned(),
        binary,
        admin,
    })
}

/// A token of ServiceAccount `<fullname>-<component>` as the kubeconfig Secret the host
/// part mounts.
async fn kubeconfig_secret(
    karmada: &Client,
    host: &Client,
    kubeconfig0: &Path,
    system_ns: &str,
    host_ns: &str,
    fullname: &str,
    component: &str,
) -> Result<()> {
    let (server, ca_data) = server_of(kubeconfig0)?;
    let sa = format!("{fullname}-{component}");
    let token = sa_token(karmada, system_ns, &sa).await?;
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": format!("{sa}-kubeconfig"), "namespace": host_ns},
        "stringData": {"kubeconfig": token_kubeconfig(&server, ca_data.as_deref(), &token)},
    });
    Api::<Secret>::namespaced(host.clone(), host_ns)
        .create(&PostParams::default(), &serde_json::from_value(secret)?)
        .await
        .with_context(|| format!("creating the {component}'s kubeconfig Secret"))?;
    Ok(())
}

/// The holder of the controller's Lease.
async fn lease_holder(karmada: &Client, lease_ns: &str) -> Result<Option<String>> {
    Ok(Api::<Lease>::namespaced(karmada.clone(), lease_ns)
        .get_opt(LEASE_NAME)
        .await
        .with_context(|| format!("reading Lease {lease_ns}/{LEASE_NAME}"))?
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty()))
}

async fn wait_holder(karmada: &Client, lease_ns: &str, want: &str) -> Result<()> {
    wait_for(
        &format!("Lease {LEASE_NAME} held by {want}"),
        API_TIMEOUT,
        || async {
            (lease_holder(karmada, lease_ns).await.ok()?.as_deref() == Some(want)).then_some(())
        },
    )
    .await
}

/// The schema of CRD `crd` at `path` (property names under spec.versions[0]'s
/// openAPIV3Schema; null where absent).
async fn crd_schema_at(karmada: &Client, crd: &str, path: &[&str]) -> Result<Value> {
    let c = Api::<CustomResourceDefinition>::all(karmada.clone())
        .get(crd)
        .await
        .with_context(|| format!("reading CRD {crd}"))?;
    let v = serde_json::to_value(&c.spec.versions)?;
    let mut at = &v[0]["schema"]["openAPIV3Schema"];
    for p in path {
        at = &at["properties"][*p];
    }
    Ok(at.clone())
}

/// Where the KarmadaQuota CRD of N+1 differs from N's: a bound on the scope selector's
/// expressions (`maxItems`, crds::quota::MAX_SCOPE_EXPRESSIONS).
const SCOPE_EXPRESSIONS: [&str; 3] = ["spec", "scopeSelector", "matchExpressions"];

/// Whether the KarmadaQuota CRD served is N+1's (it bounds the scope expressions).
async fn serves_new_quota_crd(karmada: &Client) -> Result<bool> {
    let at = crd_schema_at(karmada, QUOTA_CRDS[0], &SCOPE_EXPRESSIONS).await?;
    Ok(at["maxItems"].as_u64() == Some(MAX_SCOPE_EXPRESSIONS as u64))
}

/// R22 on 0.2.0's own code: once the new controller has fenced `<ns>/compute`, the old
/// webhook (out of the Service, still running) refuses any increase there. Asked
/// straight, as the apiserver asks (its client certificate), as a dry run (nothing is
/// reserved), until its quota watch shows the fence; its answer's message.
async fn old_webhook_refuses_once_fenced(
    (karmada, old, serving_ca, client, ns): (&Client, SocketAddr, &Path, &WebhookClientCert, &str),
) -> Result<String> {
    wait_for(
        &format!("the new controller's fence in {ns}/compute"),
        API_TIMEOUT,
        || async {
            let q = Api::<KarmadaQuota>::namespaced(karmada.clone(), ns)
                .get("compute")
                .await
                .ok()?;
            fenced(&q.status?).then_some(())
        },
    )
    .await?;
    let reviews = review_client_as(
        &format!("https://{old}"),
        serving_ca,
        &client.cert,
        &client.key,
    )?;
    let binding = Rb::deployment("fence-probe", 1)
        .request(CPU, "100m")
        .json(ns);
    let review = binding_review(&binding, "fence-probe-0000", true);
    // The fence reserves core's largest quantity, 2⁶³−1 units, of every name; a usage
    // that counts it reads as those digits, the last few moved by what else it adds.
    let max = Quantity::MAX_UNITS.to_string();
    let fence_digits = &max[..max.len() - 3];
    wait_for(
        "webhook-old-0 to refuse an increase of the fenced quota",
        OLD_SEES_FENCE,
        || async {
            let r = post_review(&reviews, "/validate/resourcebinding", &review)
                .await
                .ok()?;
            let message = r["status"]["message"].as_str().unwrap_or_default();
            // Refused for the fence, not for a quota the load filled: the usage it
            // reports holds the fence's saturated quantity.
            (r["allowed"] == false && r["status"]["code"] == 403 && message.contains(fence_digits))
                .then(|| message.to_owned())
        },
    )
    .await
}

/// How long the old webhook's quota watch may take to show the fence.
const OLD_SEES_FENCE: Duration = Duration::from_secs(15);

/// How long after the new CRDs are Established a create caught in their storage swap may
/// still be answered (the chart's webhook.timeoutSeconds).
const CRD_SWAP_SLACK: Duration = Duration::from_secs(3);

/// The webhook's answer when its decision (a status write) did not finish in time.
fn is_decision_timeout(a: &Attempt) -> bool {
    matches!(&a.verdict, Verdict::Refused { code: 504, message } if message.contains("no quota decision within"))
}

/// The new webhook's answer for a quota the new controller has not fenced yet
/// (docs/reservations.md R22).
fn is_not_fenced_yet(a: &Attempt) -> bool {
    matches!(&a.verdict, Verdict::Refused { code: 503, message } if message.contains("no reservation-store fence yet"))
}

/// How long after the new controller took the Lease its first writes (the fences) may
/// take to reach the new webhook's cache.
const FENCE_SLACK: Duration = Duration::from_secs(5);

/// Notes `what` at the load's clock.
fn mark(timeline: &mut Vec<(Duration, String)>, load: &Load, what: &str) {
    eprintln!("[{:>6.1?}] {what}", load.elapsed());
    timeline.push((load.elapsed(), what.to_owned()));
}

fn summary(attempts: &[Attempt]) -> (usize, usize, Vec<&Attempt>) {
    let admitted = attempts
        .iter()
        .filter(|a| a.verdict == Verdict::Admitted)
        .count();
    let quota = attempts
        .iter()
        .filter(|a| a.verdict == Verdict::QuotaRefused)
        .count();
    let other = attempts
        .iter()
        .filter(|a| !matches!(a.verdict, Verdict::Admitted | Verdict::QuotaRefused))
        .collect();
    (admitted, quota, other)
}

#[tokio::test]
#[ignore = "needs the loopback control plane and helm: make test runs it"]
async fn helm_upgrade_from_the_previous_release_under_load_keeps_every_reservation() -> Result<()> {
    let shared = Env::get().await?;
    let id = run_id();
    let fullname = format!("kq-up-{id}");
    let work = shared.log_dir().join(format!("upgrade-{fullname}"));
    std::fs::create_dir_all(&work)?;
    let previous = Env::repo_root().join(PREVIOUS_CHART);
    ensure!(
        previous.is_file(),
        "{} is missing (hack/previous-release.sh makes it)",
        previous.display()
    );
    let Some(old_bins) = from_bin_dir() else {
        prerequisite(
            PREVIOUS_RELEASE,
            format!(
                "0.2.0's own binaries as the old pods: {ENV_FROM_BIN_DIR} names none, and \
                 this checkout's cannot stand in (they reserve in batches and refuse \
                 0.2.0's --reservation-store=status); docs/upgrade.md builds 0.2.0's"
            ),
        )?;
        return Ok(());
    };
    eprintln!("N runs the binaries in {}", old_bins.display());

    step("[Create] a control plane of the test's own: apiserver 0 (Karmada), 1 (host)");
    let cp = OwnControlPlane::up(&work.join("cp"), 2, "").await?;
    let env = cp.env();
    let karmada = env.client()?;
    let host = env.member_clients()?.remove(0);
    let client_cert = env
        .webhook_client()
        .ok_or_else(|| anyhow!("the control plane's apiserver 0 presents no client certificate"))?
        .clone();
    let crds: Api<CustomResourceDefinition> = Api::all(karmada.clone());
    for crd in QUOTA_CRDS {
        crds.delete(crd, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting today's CRD {crd} (N brings its own)"))?;
    }
    wait_for("today's CRDs gone", API_TIMEOUT, || async {
        for crd in QUOTA_CRDS {
            if crds.get_opt(crd).await.ok()?.is_some() {
                return None;
            }
        }
        Some(())
    })
    .await?;

    let host_ns = format!("{fullname}-host");
    let system_ns = format!("{fullname}-system");
    let lease_ns = format!("{fullname}-leases");
    let service = Service::start(Vec::new()).await?;
    let webhook_url = format!("https://{}", service.addr());
    let values = values_n(&fullname, &host_ns, &lease_ns, &webhook_url, &client_cert)?;
    let values_file_n = work.join("values-n.yaml");
    std::fs::write(&values_file_n, serde_json::to_string_pretty(&values)?)?;
    let values_file_n1 = work.join("values-n1.yaml");
    std::fs::write(
        &values_file_n1,
        serde_json::to_string_pretty(&values_n1(&values, &system_ns))?,
    )?;
    let helm = Helm::new()?;
    let host_part = Part {
        helm: helm.with_kubeconfig(&cp.kubeconfig(1)),
        release: format!("{fullname}-host"),
        namespace: host_ns.clone(),
    };
    let api_part = Part {
        helm: helm.with_kubeconfig(&cp.kubeconfig(0)),
        release: format!("{fullname}-api"),
        namespace: system_ns.clone(),
    };
    let chart_n = previous.display().to_string();
    let chart_n1 = chart_dir().display().to_string();
    let host_set = vec!["--set".to_owned(), "karmada.part=host".to_owned()];

    step("[Create] helm install 0.2.0: the host part, then the apiserver part (its CRDs)");
    host_part
        .helm("install", &chart_n, &values_file_n, &host_set)
        .await?;
    let tls = Api::<Secret>::namespaced(host.clone(), &host_ns)
        .get(&format!("{fullname}-webhook-tls"))
        .await
        .context("the host part's TLS Secret")?
        .data
        .unwrap_or_default();
    let ca_file = work.join("ca.crt");
    std::fs::write(
        &ca_file,
        &tls.get("ca.crt")
            .ok_or_else(|| anyhow!("the TLS Secret has no ca.crt"))?
            .0,
    )?;
    let tls_before = tls.clone();
    let api_set = vec![
        "--set".to_owned(),
        "karmada.part=apiserver".to_owned(),
        "--set-file".to_owned(),
        format!("certs.caBundle={}", ca_file.display()),
    ];
    ensure_namespace(&karmada, "karmada-cluster").await?;
    api_part
        .helm("install", &chart_n, &values_file_n, &api_set)
        .await?;
    // What the operator does for each component's identity (chart README, "Credentials").
    let kubeconfig0 = cp.kubeconfig(0);
    let identity = |component: &'static str| {
        kubeconfig_secret(
            &karmada,
            &host,
            &kubeconfig0,
            &system_ns,
            &host_ns,
            &fullname,
            component,
        )
    };
    for component in ["webhook", "controller", "dashboard"] {
        identity(component).await?;
    }
    ensure!(
        !serves_new_quota_crd(&karmada).await?,
        "the control plane serves today's CRDs, not 0.2.0's"
    );

    // N's dashboard (a Deployment of its own since 0.2.0) is not in the admission path and
    // is not run; the new one is, from the upgraded Deployment.
    step("[Create] the 0.2.0 pods: webhook-old-0 behind the Service, controller-old-0");
    let kubelet = Kubelet {
        host: &host,
        ns: &host_ns,
        fullname: &fullname,
        work: &work,
    };
    let (webhook_old, webhook_old_addr) = {
        let (mut spec, serving, admin) = kubelet.webhook("webhook-old-0").await?;
        spec.bin_dir = Some(old_bins.clone());
        let pod = start_pod(env, "webhook-old-0", &spec, admin).await?;
        service.set_endpoints(vec![serving]);
        (pod, serving)
    };
    let controller_old = {
        let admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let mut spec = kubelet
            .spec(
                "controller",
                "controller-old-0",
                &[("--admin-listen", admin.to_string())],
            )
            .await?;
        spec.bin_dir = Some(old_bins.clone());
        start_pod(env, "controller-old-0", &spec, admin).await?
    };
    wait_holder(&karmada, &lease_ns, "controller-old-0").await?;

    step("[Create] a namespace, its KarmadaQuota (cpu 4) and a KarmadaClusterQuota over it");
    let ns = format!("{fullname}-load");
    accepts(
        &karmada,
        &json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns, "labels": {TEAM_LABEL: fullname}}}),
    )
    .await?;
    accepts(
        &karmada,
        &quota(&ns, "compute", &[(CPU, "4"), ("pods", "1000")]),
    )
    .await?;
    let cluster_quota = format!("{fullname}-team");
    accepts(
        &karmada,
        &json!({
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaClusterQuota",
            "metadata": {"name": cluster_quota},
            "spec": {
                "namespaceSelector": {"matchLabels": {TEAM_LABEL: fullname}},
                "hard": {CPU: "100"},
            },
        }),
    )
    .await?;
    wait_for(
        "the 0.2.0 controller to sync both quotas",
        API_TIMEOUT,
        || async {
            let q = Api::<KarmadaQuota>::namespaced(karmada.clone(), &ns)
                .get("compute")
                .await
                .ok()?;
            let c = Api::<KarmadaClusterQuota>::all(karmada.clone())
                .get(&cluster_quota)
                .await
                .ok()?;
            (q.status?.used.contains_key(CPU) && c.status?.quota.used.contains_key(CPU))
                .then_some(())
        },
    )
    .await?;

    step("[Create] the load (a create every 100 ms, bounded) and the invariant sampler");
    let load = Load::start(
        karmada.clone(),
        LoadSpec {
            ns: ns.clone(),
            cluster: CLUSTER.to_owned(),
            period: Duration::from_millis(100),
            max_creates: 2000,
            small_cpu: "100m".to_owned(),
            big_every: 10,
            big_cpu: "5".to_owned(),
            keep_live: 24,
            scale_every: 0,
        },
    );
    let sampler = Sampler::start(
        karmada.clone(),
        (&ns, "compute"),
        Some(&cluster_quota),
        &system_ns,
        load.churn_lock(),
        Duration::from_millis(250),
    );
    let mut timeline: Vec<(Duration, String)> = Vec::new();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (admitted, _, _) = summary(&load.attempts());
    ensure!(admitted > 0, "nothing admitted under 0.2.0");
    mark(&mut timeline, &load, "steady under 0.2.0");

    step(
        "[Update] 1. helm upgrade the apiserver part to this chart (CRDs, RBAC, webhook configuration)",
    );
    let api_upgrade_start = load.elapsed();
    mark(&mut timeline, &load, "apiserver part upgrade starts");
    api_part
        .helm("upgrade", &chart_n1, &values_file_n1, &api_set)
        .await?;
    mark(&mut timeline, &load, "apiserver part upgraded");
    wait_for("the new CRDs served", API_TIMEOUT, || async {
        serves_new_quota_crd(&karmada).await.ok()?.then_some(())
    })
    .await?;
    let crds_established = load.elapsed();
    mark(&mut timeline, &load, "new CRDs established");
    let pending_before = quota_usage(&karmada, &ns, "compute").await?.reservations;
    eprintln!(
        "pending reservations before the rollout: {}",
        pending_before.len()
    );

    step("[Update] 2. helm upgrade the host part; the Deployments roll (surge 1, unavailable 0)");
    mark(&mut timeline, &load, "host part upgrade starts");
    host_part
        .helm("upgrade", &chart_n1, &values_file_n1, &host_set)
        .await?;
    mark(&mut timeline, &load, "host part upgraded");
    let tls_after = Api::<Secret>::namespaced(host.clone(), &host_ns)
        .get(&format!("{fullname}-webhook-tls"))
        .await?
        .data
        .unwrap_or_default();
    ensure!(
        tls_after == tls_before,
        "the upgrade replaced the webhook's serving certificate (the apiserver part's caBundle would no longer match)"
    );
    let (webhook_new_spec, webhook_new_addr, webhook_new_admin) =
        kubelet.webhook("webhook-new-0").await?;
    ensure!(
        webhook_new_spec
            .args
            .iter()
            .any(|a| a.starts_with("--client-ca-file=")),
        "the upgraded webhook does not require the apiserver's client certificate: {:?}",
        webhook_new_spec.args
    );
    let controller_new_admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let controller_new_spec = kubelet
        .spec(
            "controller",
            "controller-new-0",
            &[("--admin-listen", controller_new_admin.to_string())],
        )
        .await?;
    let dashboard_admin = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let dashboard_spec = kubelet
        .spec(
            "dashboard",
            "dashboard-new-0",
            &[
                ("--admin-listen", dashboard_admin.to_string()),
                ("--dashboard-listen", format!("127.0.0.1:{}", free_port()?)),
            ],
        )
        .await?;
    let started = load.elapsed();
    let (svc, ld, kd, lns) = (&service, &load, &karmada, lease_ns.as_str());
    let lns_quota = (ns.as_str(), "compute");
    let (wn_spec, cn_spec) = (&webhook_new_spec, &controller_new_spec);
    let webhook_roll = async move {
        let new = start_pod(env, "webhook-new-0", wn_spec, webhook_new_admin).await?;
        let ready = ld.elapsed();
        svc.set_endpoints(vec![webhook_old_addr, webhook_new_addr]);
        tokio::time::sleep(OVERLAP).await;
        svc.set_endpoints(vec![webhook_new_addr]);
        let removed = ld.elapsed();
        let probe = (
            kd,
            webhook_old_addr,
            ca_file.as_path(),
            &client_cert,
            lns_quota.0,
        );
        let refusal = old_webhook_refuses_once_fenced(probe).await?;
        let fenced = ld.elapsed();
        let old_decisions = webhook_old.metric("kq_webhook_decisions_total").await?;
        webhook_old.terminate().await?;
        let gone = ld.elapsed();
        Ok::<_, anyhow::Error>((new, ready, removed, fenced, refusal, gone, old_decisions))
    };
    let controller_roll = async move {
        let new = start_pod(env, "controller-new-0", cn_spec, controller_new_admin).await?;
        let ready = ld.elapsed();
        let old_writes = controller_old
            .metric("kq_controller_status_writes_total")
            .await?;
        controller_old.terminate().await?;
        let gone = ld.elapsed();
        wait_holder(kd, lns, "controller-new-0").await?;
        let led = ld.elapsed();
        // What the new leader inherits: reservations no controller has folded yet.
        let inherited = quota_usage(kd, lns_quota.0, lns_quota.1)
            .await?
            .reservations
            .len();
        Ok::<_, anyhow::Error>((new, ready, gone, led, old_writes, inherited))
    };
    let dashboard_roll = start_pod(env, "dashboard-new-0", &dashboard_spec, dashboard_admin);
    let (w, c, d) = tokio::join!(webhook_roll, controller_roll, dashboard_roll);
    let (webhook_new, w_ready, w_removed, w_fenced, refusal, w_gone, old_decisions) = w?;
    eprintln!("webhook-old-0 (0.2.0) on the fenced quota: {refusal}");
    let (controller_new, c_ready, c_gone, c_led, old_writes, inherited) = c?;
    let _dashboard = d?;
    let rollout = [
        (started, "rollout starts"),
        (w_ready, "webhook-new-0 ready, added to the Service"),
        (w_removed, "webhook-old-0 removed from the Service"),
        (
            w_fenced,
            "webhook-old-0 refuses an increase of the fenced quota, SIGTERM",
        ),
        (w_gone, "webhook-old-0 exited"),
        (
            c_ready,
            "controller-new-0 ready (follower), controller-old-0 SIGTERM",
        ),
        (c_gone, "controller-old-0 exited (Lease released)"),
        (c_led, "controller-new-0 holds the Lease"),
    ];
    for (at, what) in rollout {
        timeline.push((at, what.to_owned()));
    }
    mark(&mut timeline, &load, "rollout done");
    ensure!(old_decisions > 0, "webhook-old-0 decided nothing");
    ensure!(old_writes > 0, "controller-old-0 wrote no status");

    step("the load goes on under this release for 5 s, then stops");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after_rollout = load.elapsed();
    let attempts = load.stop().await?;
    let samples = sampler.stop().await?;
    timeline.sort();
    eprintln!("timeline:");
    for (at, what) in &timeline {
        eprintln!("  {at:>8.1?}  {what}");
    }
    let (admitted, quota_refused, other) = summary(&attempts);
    let big_admitted: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.big && a.verdict == Verdict::Admitted)
        .collect();
    let admitted_after = attempts
        .iter()
        .filter(|a| a.at > c_led && a.verdict == Verdict::Admitted)
        .count();
    let admitted_leaderless = attempts
        .iter()
        .filter(|a| a.at > c_gone && a.at < c_led && a.verdict == Verdict::Admitted)
        .count();
    eprintln!(
        "hand-over: {admitted_leaderless} admitted while no controller led ({:.1?}..{:.1?}); \
         the new leader found {inherited} pending reservation(s)",
        c_gone, c_led
    );
    eprintln!(
        "creates: {} ({admitted} admitted, {quota_refused} refused for the quota, {} otherwise); \
         {admitted_after} admitted after the hand-over",
        attempts.len(),
        other.len()
    );
    eprintln!(
        "samples: {} ({} violations, {} unanswered, {} unreadable), most pending reservations {}, \
         most effective {}m, most needed {}m of 4000m",
        samples.count,
        samples.violations.len(),
        samples.read_errors.len(),
        samples.unreadable.len(),
        samples.max_pending,
        samples.max_effective_milli,
        samples.max_need_milli
    );
    eprintln!(
        "Service: {} connections to webhook-old-0, {} to webhook-new-0, {} without an endpoint",
        service.connections_to(webhook_old_addr),
        service.connections_to(webhook_new_addr),
        service.connections_without_endpoint()
    );
    // A CRD change makes the apiserver build the resource's storage anew; a status write
    // caught in that swap waits, and the webhook refuses (504, retryable) at its decision
    // timeout rather than admit without a reservation. Tolerated only as that answer and
    // only while the apiserver part's CRDs change; anything else is a failure.
    let swap = (api_upgrade_start, crds_established + CRD_SWAP_SLACK);
    let (in_swap, unexplained): (Vec<&Attempt>, Vec<&Attempt>) = other
        .iter()
        .partition(|a| is_decision_timeout(a) && a.at >= swap.0 && a.at <= swap.1);
    // Until the new controller fenced the quotas, the new webhook refuses (503) rather
    // than admit beside the old one; only from its start to the fence.
    let fencing = (started, c_led + FENCE_SLACK);
    let (before_fence, unexplained): (Vec<&Attempt>, Vec<&Attempt>) = unexplained
        .into_iter()
        .partition(|a| is_not_fenced_yet(a) && a.at >= fencing.0 && a.at <= fencing.1);
    let show = |list: &[&Attempt]| {
        list.iter()
            .map(|a| format!("{:.1?} {} {:?}", a.at, a.name, a.verdict))
            .collect::<Vec<_>>()
            .join("\n  ")
    };
    // One line per allowed answer: its window, how many, and which.
    let allowed = |what: &str, (from, to): (Duration, Duration), list: &[&Attempt]| {
        let which = if list.is_empty() {
            String::new()
        } else {
            format!("\n  {}", show(list))
        };
        eprintln!("{what} ({from:.1?}..{to:.1?}): {}{which}", list.len());
    };
    allowed(
        "refused by the decision timeout while the CRDs changed",
        swap,
        &in_swap,
    );
    allowed(
        "refused by the new webhook until the new controller's fence",
        fencing,
        &before_fence,
    );
    ensure!(
        unexplained.is_empty(),
        "{} creates were refused for another reason than the quota (or got no answer):\n  {}",
        unexplained.len(),
        show(&unexplained)
    );
    ensure!(
        big_admitted.is_empty(),
        "bindings over hard were admitted: {big_admitted:?}"
    );
    ensure!(
        samples.violations.is_empty(),
        "invariants broken:\n  {}",
        samples.violations.join("\n  ")
    );
    ensure!(
        samples.unreadable.is_empty(),
        "the quotas could not be read with the new types:\n  {}",
        samples.unreadable.join("\n  ")
    );
    ensure!(
        samples.read_errors.len() * 4 <= samples.count,
        "the apiserver did not answer most samples ({} taken):\n  {}",
        samples.count,
        samples.read_errors.join("\n  ")
    );
    ensure!(samples.count >= 40, "only {} samples", samples.count);
    ensure!(
        quota_refused > 0 && admitted_after > 0,
        "the load must both fill the quota and be admitted after the hand-over \
         ({quota_refused} quota refusals, {admitted_after} admitted after)"
    );
    ensure!(
        samples.max_pending > 0,
        "no sample saw a pending reservation: the hand-over was not tested with any"
    );
    ensure!(
        service.connections_to(webhook_old_addr) > 0
            && service.connections_to(webhook_new_addr) > 0,
        "both webhook processes must have been called"
    );
    let new_decisions = webhook_new.metric("kq_webhook_decisions_total").await?;
    ensure!(new_decisions > 0, "webhook-new-0 decided nothing");
    ensure!(
        after_rollout > c_led,
        "the load must run past the hand-over"
    );

    step(
        "the quotas converge under this release: no reservation left, used = what the bindings need",
    );
    let need = needed_cpu_milli(&karmada, &ns).await?;
    wait_for(
        "the new controller to fold every reservation",
        API_TIMEOUT,
        || async {
            let u = quota_usage(&karmada, &ns, "compute").await.ok()?;
            (u.reservations.is_empty() && u.used.get_or_zero(CPU).milli_value() == need)
                .then_some(())
        },
    )
    .await
    .with_context(|| format!("{ns}/compute never reached used = {need}m, no reservation"))?;
    let new_writes = controller_new
        .metric("kq_controller_status_writes_total")
        .await?;
    ensure!(new_writes > 0, "controller-new-0 wrote no status");
    eprintln!(
        "{} pending reservation(s) before the rollout, all folded into used ({need}m) by controller-new-0 ({new_writes} status writes)",
        pending_before.len()
    );
    wait_for("the cluster quota to converge", API_TIMEOUT, || async {
        let c = Api::<KarmadaClusterQuota>::all(karmada.clone())
            .get(&cluster_quota)
            .await
            .ok()?;
        let s = c.status?;
        let used = s.quota.used.get(CPU)?;
        (karmada_quota_e2e::quota_status::pending(&s.quota).is_empty()
            && Quantity::read(&used.0).ok()?.milli_value() == need)
            .then_some(())
    })
    .await?;

    step("the 0.2.0-era objects under this release: fenced, the new schema applies");
    // R22: the new controller keeps the fence in both quotas' status, so a 0.2.0 webhook
    // that still served would see no room for any increase.
    let q = Api::<KarmadaQuota>::namespaced(karmada.clone(), &ns)
        .get("compute")
        .await?;
    let c = Api::<KarmadaClusterQuota>::all(karmada.clone())
        .get(&cluster_quota)
        .await?;
    ensure!(
        q.status.as_ref().is_some_and(fenced)
            && c.status.as_ref().is_some_and(|s| fenced(&s.quota)),
        "the new controller left a quota without the reservation-store fence: {ns}/compute {:?}, {cluster_quota} {:?}",
        q.status.map(|s| s.reservations),
        c.status.map(|s| s.quota.reservations)
    );
    // The 0.2.0-era quota is validated by this release's schema: one scope expression
    // over the bound is refused by the apiserver.
    let expressions: Vec<Value> = (0..=MAX_SCOPE_EXPRESSIONS)
        .map(|_| json!({"scopeName": "PriorityClass", "operator": "Exists"}))
        .collect();
    let over = Api::<KarmadaQuota>::namespaced(karmada.clone(), &ns)
        .patch(
            "compute",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"scopeSelector": {"matchExpressions": expressions}}})),
        )
        .await;
    ensure!(
        matches!(&over, Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains("at most 32 items")),
        "{} scope expressions on the 0.2.0-era quota: want 422 from the new schema, got {over:?}",
        MAX_SCOPE_EXPRESSIONS + 1
    );
    karmada_quota_e2e::controller::wait_synced(&karmada, &ns, "compute").await?;

    drop(webhook_new);
    drop(controller_new);
    drop(cp);
    Ok(())
}
