//! The chart installed on the local control plane, and the binaries run under the
//! identities it creates.
//!
//! ```text
//!  apiserver 1 ("host")                       apiserver 0 ("karmada-apiserver")
//!   helm install <kq>-host                     helm install <kq>-api
//!     karmada.part=host, certs.mode=auto  ──CA──▶ karmada.part=apiserver, certs.caBundle,
//!     Deployments, Services, TLS Secret,        webhook.url=https://127.0.0.1:<port>
//!     PDBs, ServiceAccounts                     CRD, ValidatingWebhookConfiguration,
//!   kubeconfig Secrets  ◀──TokenRequest─────    ServiceAccounts + ClusterRoles/Roles
//!        │
//!        ▼ the installed Deployments' command, args and mounted Secrets, on loopback
//!   karmada-quota-webhook, karmada-quota-controller ──(SA tokens)──▶ apiserver 0
//! ```
//!
//! Every call the binaries make goes through the chart's RBAC: a binding that fits is
//! admitted, one over the limit is denied, status is written, a drift raises an event;
//! SelfSubjectAccessReviews pin each granted verb (and a few that must not be), and
//! SubjectAccessReviews (`kubectl auth can-i --as=…`) the binaries' ServiceAccounts, a
//! quota viewer and a quota admin: nobody but the binaries writes quota status. The
//! webhook requires the client certificate apiserver 0 presents (its AdmissionConfiguration;
//! the chart trusts that CA with webhook.clientAuth.caBundle): a forged review sent
//! straight to the port without it is refused in the TLS handshake. Then `helm uninstall`
//! of the apiserver part removes the webhook configuration.
//!
//! The install pins the image by digest (`image.digest`): the one hack/image.sh recorded
//! for the archive `make image` exported, else hack/image/digest; the Deployments must
//! run `karmada-quota:<appVersion>@<digest>`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karmada_quota_e2e::chart::{Helm, certificate_subject, chart_dir};
use karmada_quota_e2e::controller::{
    ClusterRegistration, MemberCluster, cluster_used_is, condition_is, ensure_namespace,
    member_apis, quota_events, used_is, wait_quota, wait_synced,
};
use karmada_quota_e2e::image::{app_version, image_digest};
use karmada_quota_e2e::install::{
    FromDeployment, client_from_kubeconfig_text, from_deployment, run_id, sa_token, server_of,
    start, token_kubeconfig,
};
use karmada_quota_e2e::own_controlplane::OwnControlPlane;
use karmada_quota_e2e::queue::{unplaced, wait_until_arrivals_fit, waiting};
use karmada_quota_e2e::viewer::Viewer;
use karmada_quota_e2e::webhook::{
    Rb, binding_review, create, create_with, expect_admitted, post_review, quota, review_client,
    review_client_as, seed_used, update,
};
use karmada_quota_e2e::{
    Env, TestNs, accepts, free_port, http_get, http_get_ok, http_get_with, metric_sum,
    try_wait_for, wait_for,
};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

const CRD_NAME: &str = "karmadaquotas.quota.karmada.io";
const CLUSTER_CRD_NAME: &str = "karmadaclusterquotas.quota.karmada.io";
const SHARE_CRD_NAME: &str = "karmadaclusterquotashares.quota.karmada.io";
const BATCH_CRD_NAME: &str = "karmadaquotareservations.quota.karmada.io";
/// Label of the test namespace the installed webhook configuration selects.
const NS_LABEL: &str = "e2e.karmada-quota/chart";
const API_TIMEOUT: Duration = Duration::from_secs(30);

fn step(s: &str) {
    eprintln!("{s}");
}

/// One SelfSubjectAccessReview: whether `verb` on `group`/`resource`[/`sub`] in `ns`
/// (`None`: all namespaces) is `allowed`.
struct Access<'a> {
    allowed: bool,
    verb: &'a str,
    group: &'a str,
    resource: &'a str,
    sub: Option<&'a str>,
    ns: Option<&'a str>,
}

impl<'a> Access<'a> {
    fn new(
        allowed: bool,
        verb: &'a str,
        group: &'a str,
        resource: &'a str,
        sub: Option<&'a str>,
        ns: Option<&'a str>,
    ) -> Self {
        Access {
            allowed,
            verb,
            group,
            resource,
            sub,
            ns,
        }
    }

    /// The verb and resource asked about.
    fn attributes(&self) -> ResourceAttributes {
        ResourceAttributes {
            verb: Some(self.verb.to_owned()),
            group: Some(self.group.to_owned()),
            resource: Some(self.resource.to_owned()),
            subresource: self.sub.map(str::to_owned),
            namespace: self.ns.map(str::to_owned),
            ..Default::default()
        }
    }

    /// What the apiserver answers for the client's identity.
    async fn check(&self, client: &Client) -> Result<bool> {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(self.attributes()),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
            .create(&PostParams::default(), &review)
            .await
            .context("SelfSubjectAccessReview")?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }

    /// What the apiserver answers for `user` (a SubjectAccessReview, as
    /// `kubectl auth can-i --as=<user>` asks): a ServiceAccount's user name gets its groups.
    async fn check_as(&self, admin: &Client, user: &str) -> Result<bool> {
        let mut groups = vec!["system:authenticated".to_owned()];
        if let Some(rest) = user.strip_prefix("system:serviceaccount:") {
            groups.push("system:serviceaccounts".to_owned());
            if let Some((ns, _)) = rest.split_once(':') {
                groups.push(format!("system:serviceaccounts:{ns}"));
            }
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.to_owned()),
                groups: Some(groups),
                resource_attributes: Some(self.attributes()),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = Api::<SubjectAccessReview>::all(admin.clone())
            .create(&PostParams::default(), &review)
            .await
            .with_context(|| format!("SubjectAccessReview for {user}"))?;
        Ok(answer.status.is_some_and(|s| s.allowed))
    }
}

/// A user holding `<fullname>-view` in the test namespace.
const VIEWER: &str = "chart-quota-viewer";
/// A user holding the built-in `admin` in the test namespace and `<fullname>-admin`
/// cluster-wide.
const QUOTA_ADMIN: &str = "chart-quota-admin";

/// The bindings that give [`VIEWER`] and [`QUOTA_ADMIN`] the chart's roles (the
/// RoleBindings go with the test namespace; the ClusterRoleBinding is deleted).
struct PeopleBindings {
    cluster: String,
}

impl PeopleBindings {
    async fn create(admin: &Client, fullname: &str, ns: &str) -> Result<PeopleBindings> {
        let user = |name: &str| json!([{"kind": "User", "name": name, "apiGroup": "rbac.authorization.k8s.io"}]);
        let role = |name: &str| json!({"kind": "ClusterRole", "name": name, "apiGroup": "rbac.authorization.k8s.io"});
        let cluster = format!("{fullname}-chart-quota-admin");
        let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
        crbs.create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": cluster},
                "roleRef": role(&format!("{fullname}-admin")),
                "subjects": user(QUOTA_ADMIN),
            }))?,
        )
        .await
        .with_context(|| format!("creating ClusterRoleBinding {cluster}"))?;
        let rbs: Api<RoleBinding> = Api::namespaced(admin.clone(), ns);
        for (name, role_name, who) in [
            ("chart-quota-viewer", format!("{fullname}-view"), VIEWER),
            ("chart-namespace-admin", "admin".to_owned(), QUOTA_ADMIN),
        ] {
            rbs.create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": ns},
                    "roleRef": role(&role_name),
                    "subjects": user(who),
                }))?,
            )
            .await
            .with_context(|| format!("creating RoleBinding {ns}/{name}"))?;
        }
        Ok(PeopleBindings { cluster })
    }

    async fn delete(self, admin: &Client) -> Result<()> {
        Api::<ClusterRoleBinding>::all(admin.clone())
            .delete(&self.cluster, &Default::default())
            .await
            .with_context(|| format!("deleting ClusterRoleBinding {}", self.cluster))?;
        Ok(())
    }
}

impl std::fmt::Display for Access<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}/{}", self.verb, self.group, self.resource)?;
        if let Some(sub) = self.sub {
            write!(f, "/{sub}")?;
        }
        write!(f, " in {}", self.ns.unwrap_or("(all namespaces)"))
    }
}

fn verdict(allowed: bool) -> &'static str {
    if allowed { "allowed" } else { "denied" }
}

/// The client certificate apiserver 0 presents to webhooks (controlplane.sh writes it and
/// names its files in DIR/env as WEBHOOK_CLIENT_CA, _CERT, _KEY).
struct ApiserverClientCert {
    ca_pem: String,
    cn: String,
    cert: std::path::PathBuf,
    key: std::path::PathBuf,
}

impl ApiserverClientCert {
    async fn of(env: &Env) -> Result<ApiserverClientCert> {
        let dir = env.cp_dir().ok_or_else(|| {
            anyhow!("the chart install test needs a controlplane.sh control plane")
        })?;
        let vars = std::fs::read_to_string(dir.join("env"))
            .with_context(|| format!("reading {}/env", dir.display()))?;
        let var = |name: &str| {
            vars.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(|v| std::path::PathBuf::from(v.trim()))
                .ok_or_else(|| {
                    anyhow!(
                        "{}/env has no {name}: this control plane's apiserver 0 presents no webhook client certificate",
                        dir.display()
                    )
                })
        };
        let ca = var("WEBHOOK_CLIENT_CA")?;
        let cert = var("WEBHOOK_CLIENT_CERT")?;
        let ca_pem =
            std::fs::read_to_string(&ca).with_context(|| format!("reading {}", ca.display()))?;
        let pem = std::fs::read(&cert).with_context(|| format!("reading {}", cert.display()))?;
        let subject = certificate_subject(&pem).await?;
        let cn = subject
            .split(',')
            .find_map(|p| p.strip_prefix("CN="))
            .ok_or_else(|| anyhow!("{}: no CN in {subject}", cert.display()))?
            .to_owned();
        Ok(ApiserverClientCert {
            ca_pem,
            cn,
            cert,
            key: var("WEBHOOK_CLIENT_KEY")?,
        })
    }

    /// A client of the webhook at `base` presenting this certificate, as the apiserver does.
    fn review_client(&self, base: &str, serving_ca: &Path) -> Result<Client> {
        review_client_as(base, serving_ca, &self.cert, &self.key)
    }
}

/// A pod requesting `cpu`, created in a member behind Karmada's back.
fn member_pod(ns: &str, name: &str, cpu: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"containers": [{"name": "app", "image": "app:1",
                                 "resources": {"requests": {"cpu": cpu}}}]}
    })
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn chart_installs_into_karmada_and_its_identities_run_the_binaries() -> Result<()> {
    let env = Env::get().await?;
    let karmada = env.client()?;
    let members = member_apis(env, 2)?;
    let host_kubeconfig = env.member_kubeconfigs()[0].clone();
    let host = env.member_clients()?.remove(0);
    let member = env.member_clients()?.remove(1);

    let id = run_id();
    let fullname = format!("kq-{id}");
    let api_release = format!("{fullname}-api");
    let host_release = format!("{fullname}-host");
    let system_ns = format!("{fullname}-system");
    let host_ns = format!("{fullname}-host");
    let lease_ns = format!("{fullname}-leases");
    let ns = TestNs::new(&karmada, "chart_install").await?;
    let work = env.log_dir().join(format!("chart-{fullname}"));
    std::fs::create_dir_all(&work)?;
    let webhook_port = free_port()?;
    let webhook_admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let controller_admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let dashboard_admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();
    let dashboard: SocketAddr = ([127, 0, 0, 1], free_port()?).into();

    let apiserver_client = ApiserverClientCert::of(env).await?;
    // The pods pull the image make image built, by its digest.
    let (digest, digest_source) = image_digest()?;
    let image_ref = format!("karmada-quota:{}@{digest}", app_version()?);
    eprintln!("image.digest {digest} (from {digest_source})");
    // One values file for both parts, as an admin would keep it.
    let values = json!({
        "installMode": "karmada",
        "fullnameOverride": fullname,
        "image": {"digest": digest},
        "logFormat": "plain",
        "logLevel": "info,karmada_quota_webhook=debug,karmada_quota_controller=debug",
        "certs": {"mode": "auto", "extraIPs": ["127.0.0.1"]},
        "karmada": {"hostNamespace": host_ns},
        // The two parts live in different namespaces: both must name the batches' one.
        "reservationNamespace": system_ns,
        "webhook": {
            "replicas": 1,
            "url": format!("https://127.0.0.1:{webhook_port}"),
            "reservationTTL": "10m",
            "namespaceSelector": {"matchLabels": {NS_LABEL: fullname}},
            // Cluster-scoped KarmadaClusterQuotas skip the namespaceSelector: without this,
            // every other test's cluster quota would be sent to this install's webhook.
            "clusterQuotaObjectSelector": {"matchLabels": {NS_LABEL: fullname}},
            // Apiserver 0 presents the control plane's webhook client certificate to every
            // webhook (its AdmissionConfiguration): the chart trusts that CA (bring your
            // own) and only that certificate's name.
            "clientAuth": {"caBundle": apiserver_client.ca_pem, "allowedNames": [apiserver_client.cn]},
            // The controller watches one namespace (the control plane is shared), and the
            // waiting-line labels need one that sees every quota: the chart refuses both.
            "queueing": {"labelNamespaces": false},
        },
        "controller": {
            "replicas": 1,
            "watchNamespace": ns.name(),
            "leaderElection": {"namespace": lease_ns, "createNamespace": true},
        },
    });
    let values_file = work.join("values.yaml");
    std::fs::write(&values_file, serde_json::to_string_pretty(&values)?)?;
    let helm = Helm::new()?;
    let helm0 = helm.with_kubeconfig(env.kubeconfig());
    let helm1 = helm.with_kubeconfig(&host_kubeconfig);
    let chart = chart_dir().display().to_string();

    step("[Create] helm install the host part into apiserver 1 (certs.mode=auto)");
    let out = helm1
        .run(&[
            "install".into(),
            host_release.clone(),
            chart.clone(),
            "--namespace".into(),
            host_ns.clone(),
            "--create-namespace".into(),
            "-f".into(),
            values_file.display().to_string(),
            "--set".into(),
            "karmada.part=host".into(),
        ])
        .await?;
    eprintln!(
        "$ helm install {host_release} charts/karmada-quota -n {host_ns} --create-namespace -f values.yaml --set karmada.part=host\n{out}"
    );
    for component in ["webhook", "controller"] {
        let d = Api::<Deployment>::namespaced(host.clone(), &host_ns)
            .get(&format!("{fullname}-{component}"))
            .await
            .with_context(|| format!("reading Deployment {fullname}-{component}"))?;
        let image = d
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|p| p.containers.into_iter().next())
            .and_then(|c| c.image);
        ensure!(
            image.as_deref() == Some(image_ref.as_str()),
            "Deployment {fullname}-{component} runs {image:?}, not {image_ref}"
        );
    }
    let tls = Api::<Secret>::namespaced(host.clone(), &host_ns)
        .get(&format!("{fullname}-webhook-tls"))
        .await
        .context("the host part's TLS Secret")?;
    let tls_data = tls.data.unwrap_or_default();
    let ca_pem = tls_data
        .get("ca.crt")
        .map(|b| b.0.clone())
        .ok_or_else(|| anyhow!("the TLS Secret has no ca.crt"))?;
    let ca_file = work.join("ca.crt");
    std::fs::write(&ca_file, &ca_pem)?;

    step("[Create] helm install the apiserver part into apiserver 0, caBundle = the host's CA");
    // Karmada-cluster holds the members' Secrets (the controller's Role lives there).
    ensure_namespace(&karmada, "karmada-cluster").await?;
    // The control plane came up with the CRDs applied by hand: let the release adopt them.
    for crd in [CRD_NAME, CLUSTER_CRD_NAME, SHARE_CRD_NAME, BATCH_CRD_NAME] {
        Api::<CustomResourceDefinition>::all(karmada.clone())
            .patch(
                crd,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {
                    "labels": {"app.kubernetes.io/managed-by": "Helm"},
                    "annotations": {"meta.helm.sh/release-name": api_release,
                                    "meta.helm.sh/release-namespace": system_ns}}})),
            )
            .await
            .with_context(|| format!("marking the CRD {crd} for adoption by the release"))?;
    }
    let out = helm0
        .run(&[
            "install".into(),
            api_release.clone(),
            chart.clone(),
            "--namespace".into(),
            system_ns.clone(),
            "--create-namespace".into(),
            "-f".into(),
            values_file.display().to_string(),
            "--set".into(),
            "karmada.part=apiserver".into(),
            "--set-file".into(),
            format!("certs.caBundle={}", ca_file.display()),
        ])
        .await?;
    eprintln!(
        "$ helm install {api_release} charts/karmada-quota -n {system_ns} --create-namespace -f values.yaml --set karmada.part=apiserver --set-file certs.caBundle=ca.crt\n{out}"
    );

    step("the CRD is Established and owned by the release");
    let crds: Api<CustomResourceDefinition> = Api::all(karmada.clone());
    wait_for("the CRD Established", API_TIMEOUT, || {
        let crds = crds.clone();
        let api_release = api_release.clone();
        async move {
            let crd = crds.get_opt(CRD_NAME).await.ok()??;
            let owned = crd.annotations().get("meta.helm.sh/release-name") == Some(&api_release);
            let established = crd
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            (owned && established).then_some(())
        }
    })
    .await?;

    step("the webhook configuration calls the loopback URL and trusts exactly the chart's CA");
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(karmada.clone());
    let vwc = vwcs.get(&fullname).await?;
    let hooks = vwc.webhooks.unwrap_or_default();
    ensure!(hooks.len() == 5, "{} webhooks", hooks.len());
    for h in &hooks {
        let cc = &h.client_config;
        ensure!(
            cc.ca_bundle.as_ref().map(|b| b.0.as_slice()) == Some(ca_pem.as_slice()),
            "{}: caBundle is not the host Secret's ca.crt",
            h.name
        );
        let url = cc.url.as_deref().unwrap_or_default();
        ensure!(
            url.starts_with(&format!("https://127.0.0.1:{webhook_port}/validate/")),
            "{}: url {url}",
            h.name
        );
        // Bindings and quotas: Fail (nothing over quota slips through). Policies: Ignore
        // (the policy check is advisory by default).
        let want = if h.name.contains("propagationpolicies") {
            "Ignore"
        } else {
            "Fail"
        };
        ensure!(
            h.failure_policy.as_deref() == Some(want),
            "{}: failurePolicy {:?}",
            h.name,
            h.failure_policy
        );
    }

    step("[Create] tokens of the chart's ServiceAccounts → kubeconfig Secrets in the host");
    let (server, ca_data) = server_of(env.kubeconfig())?;
    let mut identities = BTreeMap::new();
    for component in ["webhook", "controller", "dashboard"] {
        let sa = format!("{fullname}-{component}");
        let token = sa_token(&karmada, &system_ns, &sa).await?;
        let kubeconfig = token_kubeconfig(&server, ca_data.as_deref(), &token);
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": format!("{sa}-kubeconfig"), "namespace": host_ns},
            "stringData": {"kubeconfig": kubeconfig},
        });
        Api::<Secret>::namespaced(host.clone(), &host_ns)
            .create(&PostParams::default(), &serde_json::from_value(secret)?)
            .await
            .with_context(|| format!("creating the {component}'s kubeconfig Secret"))?;
        identities.insert(component, client_from_kubeconfig_text(&kubeconfig).await?);
    }

    step("each identity holds exactly the verbs the chart README lists");
    let t = ns.name();
    let q = "quota.karmada.io";
    let lease = lease_ns.as_str();
    // The reservation batches' namespace (reservationNamespace).
    let kqr = "karmadaquotareservations";
    let batches = system_ns.as_str();
    #[rustfmt::skip]
    let webhook_table = [
        Access::new(true, "get", q, "karmadaquotas", None, Some(t)),
        Access::new(true, "list", q, "karmadaquotas", None, None),
        Access::new(true, "watch", q, "karmadaquotas", None, None),
        // The previous release's webhook pods, during an upgrade (chart rbac.yaml).
        Access::new(true, "update", q, "karmadaquotas", Some("status"), Some(t)),
        Access::new(true, "create", "events.k8s.io", "events", None, Some(t)),
        Access::new(true, "patch", "events.k8s.io", "events", None, Some(t)),
        Access::new(false, "update", q, "karmadaquotas", None, Some(t)),
        Access::new(false, "delete", q, "karmadaquotas", None, Some(t)),
        Access::new(true, "get", q, "karmadaclusterquotas", None, None),
        Access::new(true, "watch", q, "karmadaclusterquotas", None, None),
        Access::new(true, "update", q, "karmadaclusterquotas", Some("status"), None),
        Access::new(false, "update", q, "karmadaclusterquotas", None, None),
        Access::new(true, "list", "", "namespaces", None, None),
        Access::new(true, "watch", "", "namespaces", None, None),
        Access::new(true, "list", "work.karmada.io", "resourcebindings", None, None),
        Access::new(true, "list", "cluster.karmada.io", "clusters", None, None),
        Access::new(true, "list", "apps", "deployments", None, None),
        Access::new(true, "get", "batch", "jobs", None, Some(t)),
        Access::new(false, "watch", "work.karmada.io", "resourcebindings", None, None),
        Access::new(false, "list", "", "secrets", None, None),
        Access::new(false, "get", "", "secrets", None, Some("karmada-cluster")),
        Access::new(false, "update", "coordination.k8s.io", "leases", None, Some(lease)),
        Access::new(false, "create", "authentication.k8s.io", "tokenreviews", None, None),
        Access::new(false, "create", "authorization.k8s.io", "subjectaccessreviews", None, None),
        // Reservation batches: created (the compare-and-swap) and read in their namespace
        // only; never deleted (a withdrawn batch is the controller's to fold and delete).
        Access::new(true, "create", q, kqr, None, Some(batches)),
        Access::new(true, "get", q, kqr, None, Some(batches)),
        Access::new(true, "list", q, kqr, None, Some(batches)),
        Access::new(true, "watch", q, kqr, None, Some(batches)),
        // Only the controller deletes batches (docs/reservations.md R8).
        Access::new(false, "delete", q, kqr, None, Some(batches)),
        Access::new(false, "delete", q, kqr, None, Some(t)),
        Access::new(false, "update", q, kqr, None, Some(batches)),
        Access::new(false, "create", q, kqr, None, Some(t)),
        Access::new(false, "list", q, kqr, None, None),
    ];
    #[rustfmt::skip]
    let controller_table = [
        Access::new(true, "get", q, "karmadaquotas", None, Some(t)),
        Access::new(true, "list", q, "karmadaquotas", None, None),
        Access::new(true, "watch", q, "karmadaquotas", None, None),
        Access::new(true, "update", q, "karmadaquotas", Some("status"), Some(t)),
        Access::new(true, "list", q, "karmadaclusterquotas", None, None),
        Access::new(true, "update", q, "karmadaclusterquotas", Some("status"), None),
        Access::new(false, "delete", q, "karmadaclusterquotas", None, None),
        // The KarmadaClusterQuotaShare mirrors (controller.clusterQuotaShares).
        Access::new(true, "watch", q, "karmadaclusterquotashares", None, None),
        Access::new(true, "patch", q, "karmadaclusterquotashares", None, Some(t)),
        Access::new(true, "patch", q, "karmadaclusterquotashares", Some("status"), Some(t)),
        Access::new(true, "delete", q, "karmadaclusterquotashares", None, Some(t)),
        Access::new(true, "list", "work.karmada.io", "resourcebindings", None, None),
        Access::new(true, "watch", "work.karmada.io", "resourcebindings", None, None),
        // The read of an expired entry's binding before the entry is dropped.
        Access::new(true, "get", "work.karmada.io", "resourcebindings", None, Some(t)),
        Access::new(true, "list", "cluster.karmada.io", "clusters", None, None),
        Access::new(true, "watch", "cluster.karmada.io", "clusters", None, None),
        Access::new(true, "get", "", "secrets", None, Some("karmada-cluster")),
        Access::new(true, "get", "coordination.k8s.io", "leases", None, Some(lease)),
        Access::new(true, "create", "coordination.k8s.io", "leases", None, Some(lease)),
        Access::new(true, "update", "coordination.k8s.io", "leases", None, Some(lease)),
        Access::new(true, "create", "events.k8s.io", "events", None, Some(t)),
        Access::new(true, "patch", "events.k8s.io", "events", None, Some(t)),
        Access::new(true, "list", "", "namespaces", None, None),
        Access::new(true, "watch", "", "namespaces", None, None),
        Access::new(false, "get", "", "namespaces", None, None),
        Access::new(false, "update", q, "karmadaquotas", None, Some(t)),
        Access::new(false, "create", "work.karmada.io", "resourcebindings", None, Some(t)),
        Access::new(false, "list", "", "secrets", None, Some("karmada-cluster")),
        Access::new(false, "get", "", "secrets", None, Some(t)),
        Access::new(false, "delete", "coordination.k8s.io", "leases", None, Some(lease)),
        Access::new(false, "update", "coordination.k8s.io", "leases", None, Some(t)),
        // The dashboard runs on its own (dashboard.separate): no viewer reviews, no feed.
        Access::new(false, "create", "authentication.k8s.io", "tokenreviews", None, None),
        Access::new(false, "create", "authorization.k8s.io", "subjectaccessreviews", None, None),
        Access::new(false, "list", "", "events", None, None),
        // Reservation batches: watched, deleted once folded and created only empty (the
        // newest number re-seeded), in their namespace only.
        Access::new(true, "get", q, kqr, None, Some(batches)),
        Access::new(true, "list", q, kqr, None, Some(batches)),
        Access::new(true, "watch", q, kqr, None, Some(batches)),
        Access::new(true, "delete", q, kqr, None, Some(batches)),
        Access::new(true, "create", q, kqr, None, Some(batches)),
        Access::new(false, "create", q, kqr, None, Some(t)),
        Access::new(false, "delete", q, kqr, None, Some(t)),
        Access::new(false, "list", q, kqr, None, None),
    ];
    #[rustfmt::skip]
    let dashboard_table = [
        Access::new(true, "get", q, "karmadaquotas", None, Some(t)),
        Access::new(true, "list", q, "karmadaquotas", None, None),
        Access::new(true, "watch", q, "karmadaquotas", None, None),
        Access::new(true, "watch", q, "karmadaclusterquotas", None, None),
        Access::new(true, "list", "work.karmada.io", "resourcebindings", None, None),
        Access::new(true, "watch", "work.karmada.io", "resourcebindings", None, None),
        Access::new(true, "list", "", "namespaces", None, None),
        Access::new(true, "watch", "", "events", None, None),
        // dashboard.auth=kubernetes (the default): the viewers' TokenReviews and SARs.
        Access::new(true, "create", "authentication.k8s.io", "tokenreviews", None, None),
        Access::new(true, "create", "authorization.k8s.io", "subjectaccessreviews", None, None),
        // No member credential: no Secret anywhere, no Cluster (its secretRef).
        Access::new(false, "get", "", "secrets", None, Some("karmada-cluster")),
        Access::new(false, "list", "", "secrets", None, None),
        Access::new(false, "list", "cluster.karmada.io", "clusters", None, None),
        // Writes nothing.
        Access::new(false, "update", q, "karmadaquotas", Some("status"), Some(t)),
        Access::new(false, "update", q, "karmadaclusterquotas", Some("status"), None),
        Access::new(false, "update", q, "karmadaquotas", None, Some(t)),
        Access::new(false, "patch", q, "karmadaclusterquotashares", None, Some(t)),
        Access::new(false, "create", "events.k8s.io", "events", None, Some(t)),
        Access::new(false, "create", "coordination.k8s.io", "leases", None, Some(lease)),
        // The batches name bindings of every namespace: not the dashboard's to read.
        Access::new(false, "list", q, kqr, None, Some(batches)),
    ];
    let mut wrong = Vec::new();
    for (who, table) in [
        ("webhook", &webhook_table[..]),
        ("controller", &controller_table[..]),
        ("dashboard", &dashboard_table[..]),
    ] {
        for a in table {
            let got = a.check(&identities[who]).await?;
            if got != a.allowed {
                wrong.push(format!(
                    "{who} {a}: {} (want {})",
                    verdict(got),
                    verdict(a.allowed)
                ));
            }
        }
    }
    ensure!(
        wrong.is_empty(),
        "RBAC differs from the list:\n  {}",
        wrong.join("\n  ")
    );

    step(
        "people: view reads quotas, the quota admin writes them, nobody but the binaries writes status",
    );
    let people = PeopleBindings::create(&karmada, &fullname, t).await?;
    let sa = |c: &str| format!("system:serviceaccount:{system_ns}:{fullname}-{c}");
    let (webhook_sa, controller_sa) = (sa("webhook"), sa("controller"));
    #[rustfmt::skip]
    let people_table = [
        // `kubectl auth can-i --as=system:serviceaccount:…` for the binaries' identities.
        (webhook_sa.as_str(), Access::new(true, "update", q, "karmadaquotas", Some("status"), Some(t))),
        (webhook_sa.as_str(), Access::new(false, "get", "", "secrets", None, Some(t))),
        (webhook_sa.as_str(), Access::new(false, "get", "", "secrets", None, Some("karmada-cluster"))),
        (controller_sa.as_str(), Access::new(true, "update", q, "karmadaclusterquotas", Some("status"), None)),
        (controller_sa.as_str(), Access::new(false, "get", "", "secrets", None, Some(t))),
        // A viewer (<fullname>-view in the namespace): reads, never writes.
        (VIEWER, Access::new(true, "list", q, "karmadaquotas", None, Some(t))),
        (VIEWER, Access::new(true, "get", q, "karmadaquotas", None, Some(t))),
        (VIEWER, Access::new(false, "create", q, "karmadaquotas", None, Some(t))),
        (VIEWER, Access::new(false, "update", q, "karmadaquotas", Some("status"), Some(t))),
        (VIEWER, Access::new(false, "list", q, "karmadaquotas", None, None)),
        // Its namespace's shares of the cluster quotas over it: read, never written.
        (VIEWER, Access::new(true, "get", q, "karmadaclusterquotashares", None, Some(t))),
        (VIEWER, Access::new(false, "patch", q, "karmadaclusterquotashares", None, Some(t))),
        // The namespace's admin (built-in admin) and the quota admin (<fullname>-admin):
        // set quotas, never reservations or usage.
        (QUOTA_ADMIN, Access::new(true, "update", q, "karmadaquotas", None, Some(t))),
        (QUOTA_ADMIN, Access::new(true, "create", q, "karmadaclusterquotas", None, None)),
        (QUOTA_ADMIN, Access::new(false, "update", q, "karmadaquotas", Some("status"), Some(t))),
        (QUOTA_ADMIN, Access::new(false, "patch", q, "karmadaquotas", Some("status"), Some(t))),
        (QUOTA_ADMIN, Access::new(false, "update", q, "karmadaclusterquotas", Some("status"), None)),
        // The shares are the controller's alone.
        (QUOTA_ADMIN, Access::new(false, "update", q, "karmadaclusterquotashares", None, Some(t))),
        (QUOTA_ADMIN, Access::new(false, "patch", q, "karmadaclusterquotashares", Some("status"), Some(t))),
        // Reservation batches hold other namespaces' bindings: a viewer or a quota admin
        // reads none of them, and cannot forge one (an entry would count against a quota).
        (VIEWER, Access::new(false, "list", q, kqr, None, Some(batches))),
        (VIEWER, Access::new(false, "get", q, kqr, None, Some(batches))),
        (VIEWER, Access::new(false, "list", q, kqr, None, Some(t))),
        (QUOTA_ADMIN, Access::new(false, "list", q, kqr, None, Some(batches))),
        (QUOTA_ADMIN, Access::new(false, "create", q, kqr, None, Some(batches))),
        (QUOTA_ADMIN, Access::new(false, "delete", q, kqr, None, Some(batches))),
    ];
    let mut wrong = Vec::new();
    for (user, a) in &people_table {
        let got = a.check_as(&karmada, user).await?;
        if got != a.allowed {
            wrong.push(format!(
                "{user} {a}: {} (want {})",
                verdict(got),
                verdict(a.allowed)
            ));
        }
    }
    people.delete(&karmada).await?;
    ensure!(
        wrong.is_empty(),
        "people's RBAC differs from the README:\n  {}",
        wrong.join("\n  ")
    );

    step(
        "[Create] the webhook, the controller and the dashboard from the installed Deployments, on loopback",
    );
    let webhook_spec = from_deployment(
        &host,
        &host_ns,
        &format!("{fullname}-webhook"),
        &format!("{fullname}-webhook-local-0"),
        &work.join("webhook"),
        &[
            ("--listen", format!("127.0.0.1:{webhook_port}")),
            ("--admin-listen", webhook_admin.to_string()),
        ],
    )
    .await?;
    let controller_spec = from_deployment(
        &host,
        &host_ns,
        &format!("{fullname}-controller"),
        &format!("{fullname}-controller-local-0"),
        &work.join("controller"),
        &[("--admin-listen", controller_admin.to_string())],
    )
    .await?;
    let dashboard_spec = from_deployment(
        &host,
        &host_ns,
        &format!("{fullname}-dashboard"),
        &format!("{fullname}-dashboard-local-0"),
        &work.join("dashboard"),
        &[
            ("--admin-listen", dashboard_admin.to_string()),
            ("--dashboard-listen", dashboard.to_string()),
        ],
    )
    .await?;
    let webhook = start(env, &webhook_spec, webhook_admin).await?;
    let controller = start(env, &controller_spec, controller_admin).await?;
    let dashboard_process = start(env, &dashboard_spec, dashboard_admin).await?;

    step("[Create] member cluster (apiserver 2) registered as Karmada stores it");
    let member_name = format!("{}-member", ns.name());
    let clusters = ClusterRegistration::register(
        &karmada,
        ns.name(),
        &[MemberCluster::new(&member_name, &members[1])],
    )
    .await?;

    step("the apiserver calls the installed webhook (a KarmadaQuota it must refuse, dry run)");
    let quotas = reviewed_quotas(&karmada, ns.name(), &fullname).await?;
    let bad = quota(ns.name(), "bad", &[("requests.nvidia.com/gpu", "1.5")]);
    let bad: kube::api::DynamicObject = serde_json::from_value(bad)?;
    let refusal = try_wait_for(
        "the KarmadaQuota webhook to answer",
        API_TIMEOUT,
        || async {
            let pp = PostParams {
                dry_run: true,
                ..PostParams::default()
            };
            Ok::<_, anyhow::Error>(match quotas.create(&pp, &bad).await {
                Err(kube::Error::Api(s))
                    if s.message.contains("karmadaquotas.quota.karmada.io") =>
                {
                    Some(s.message)
                }
                _ => None,
            })
        },
    )
    .await?;
    eprintln!("refused: {refusal}");

    step("[Create] a quota of 2 CPUs; the controller (leader via its Lease) syncs it");
    accepts(
        &karmada,
        &quota(
            ns.name(),
            "compute",
            &[("requests.cpu", "2"), ("pods", "10")],
        ),
    )
    .await?;
    wait_synced(&karmada, ns.name(), "compute").await?;

    step("[Create] a binding that fits is admitted");
    let fits = Rb::deployment("fits", 1)
        .request("cpu", "1")
        .clusters(&[(&member_name, 1)])
        .json(ns.name());
    let admitted = expect_admitted(create(&karmada, &fits).await?)?;
    eprintln!("admitted {}", admitted.name_any());

    step("[Create] a binding over the limit is denied");
    let too_big = Rb::deployment("too-big", 2)
        .request("cpu", "1")
        .clusters(&[(&member_name, 2)])
        .json(ns.name());
    match create_with(&karmada, &too_big, false).await? {
        Ok(o) => bail!("{} was admitted over the limit", o.name_any()),
        Err(s) => {
            ensure!(
                s.code == 403 && s.message.contains("exceeded quota: compute"),
                "refused, but not for the quota: {} {}",
                s.code,
                s.message
            );
            eprintln!("denied: {}", s.message);
        }
    }
    let metrics = http_get_ok(webhook_admin, "/metrics").await?;
    ensure!(
        metric_sum(
            &metrics,
            "kq_webhook_reservation_batch_creates_total",
            &["result=\"ok\""]
        ) >= 1,
        "the webhook made no reservation durable:\n{metrics}"
    );

    step(
        "[Attack] a forged AdmissionReview straight to the webhook's port: refused in the TLS handshake without the apiserver's client certificate",
    );
    let base = format!("https://127.0.0.1:{webhook_port}");
    let forged = Rb::deployment("forged", 1)
        .request("cpu", "1")
        .clusters(&[(&member_name, 1)])
        .json(ns.name());
    let review = binding_review(&forged, "forged-uid", true);
    let anonymous = review_client(&base, &ca_file)?;
    match post_review(&anonymous, "/validate/resourcebinding", &review).await {
        Ok(answer) => bail!("the webhook answered a caller without a client certificate: {answer}"),
        Err(e) => eprintln!("refused without a client certificate: {e:#}"),
    }
    let with_cert = apiserver_client.review_client(&base, &ca_file)?;
    let answer = post_review(&with_cert, "/validate/resourcebinding", &review).await?;
    ensure!(
        answer["allowed"].is_boolean(),
        "the apiserver's certificate got no decision: {answer}"
    );

    step("status written by the controller: used and the member's share");
    wait_quota(
        &karmada,
        ns.name(),
        "compute",
        "status.used requests.cpu=1 placed on the member",
        API_TIMEOUT,
        |q| {
            used_is(q, &[("requests.cpu", "1")])
                && cluster_used_is(q, &member_name, &[("requests.cpu", "1")])
        },
    )
    .await?;

    step(
        "[Get] the dashboard (dashboard.auth=kubernetes by default): 401 without a token; a viewer sees only what RBAC lets it list",
    );
    ensure!(
        dashboard_spec
            .args
            .iter()
            .any(|a| a == "--dashboard-auth=kubernetes")
            && dashboard_spec.args.iter().any(|a| a == "--role=dashboard"),
        "the chart runs the dashboard on its own, auth on: {:?}",
        dashboard_spec.args
    );
    let (code, body) = http_get(dashboard, "/api/v1/overview").await?;
    ensure!(code == 401, "no token: {code} {body}");
    let viewer = Viewer::create(&karmada, ns.name(), "viewer", &[ns.name()]).await?;
    let outsider = Viewer::create(&karmada, ns.name(), "outsider", &[]).await?;
    let key = format!("\"key\":\"{}/compute\"", ns.name());
    let seen = wait_for("the viewer sees the quota", API_TIMEOUT, || {
        let (bearer, key) = (viewer.bearer(), key.clone());
        async move {
            let (code, body) =
                http_get_with(dashboard, "/api/v1/overview", &[("Authorization", &bearer)])
                    .await
                    .ok()?;
            (code == 200 && body.contains(&key)).then_some(body)
        }
    })
    .await?;
    eprintln!("viewer {}: {} bytes of overview", viewer.user, seen.len());
    let (code, body) = http_get_with(
        dashboard,
        "/api/v1/overview",
        &[("Authorization", &outsider.bearer())],
    )
    .await?;
    ensure!(
        code == 200 && !body.contains(&key),
        "a viewer without RBAC sees the quota: {code} {body}"
    );
    let (code, _) = http_get_with(
        dashboard,
        &format!("/api/v1/quotas/{}/compute", ns.name()),
        &[("Authorization", &outsider.bearer())],
    )
    .await?;
    ensure!(code == 404, "the outsider's quota page: {code}");

    step("[Create] pods behind Karmada's back in the member: Drift, and an event");
    ensure_namespace(&member, ns.name()).await?;
    for i in 0..2 {
        accepts(&member, &member_pod(ns.name(), &format!("rogue-{i}"), "1")).await?;
    }
    wait_quota(
        &karmada,
        ns.name(),
        "compute",
        "Drift=True",
        API_TIMEOUT,
        |q| condition_is(q, "Drift", "True"),
    )
    .await?;
    let events = wait_for(
        "a DriftDetected event on the quota",
        API_TIMEOUT,
        || async {
            let evs = quota_events(&karmada, ns.name(), "compute").await.ok()?;
            evs.iter().any(|(r, _)| r == "DriftDetected").then_some(evs)
        },
    )
    .await?;
    eprintln!("events: {events:?}");
    step(
        "[Get] the dashboard, holding no member credential, shows what the controller measured in the member",
    );
    let path = format!("/api/v1/quotas/{}/compute", ns.name());
    let measured = wait_for(
        "the member's observed usage on the dashboard",
        API_TIMEOUT,
        || {
            let (bearer, path, member_name) = (viewer.bearer(), path.clone(), member_name.clone());
            async move {
                let (code, body) = http_get_with(dashboard, &path, &[("Authorization", &bearer)])
                    .await
                    .ok()?;
                let v: serde_json::Value = serde_json::from_str(&body).ok()?;
                let member = v["quota"]["clusters"]
                    .as_array()?
                    .iter()
                    .find(|c| c["name"] == member_name.as_str())?
                    .clone();
                (code == 200 && member["observed"]["requests.cpu"] == "2").then_some(member)
            }
        },
    )
    .await?;
    eprintln!("the dashboard shows {measured}");

    step("[Update] helm upgrade of the host part keeps the generated certificate (lookup)");
    let out = helm1
        .run(&[
            "upgrade".into(),
            host_release.clone(),
            chart.clone(),
            "--namespace".into(),
            host_ns.clone(),
            "-f".into(),
            values_file.display().to_string(),
            "--set".into(),
            "karmada.part=host".into(),
        ])
        .await?;
    ensure!(out.contains("REVISION: 2"), "helm upgrade: {out}");
    let after = Api::<Secret>::namespaced(host.clone(), &host_ns)
        .get(&format!("{fullname}-webhook-tls"))
        .await?
        .data
        .unwrap_or_default();
    for key in ["ca.crt", "tls.crt", "tls.key"] {
        ensure!(
            after.get(key) == tls_data.get(key),
            "helm upgrade replaced {key} of the webhook's certificate"
        );
    }

    step(
        "[Delete] helm uninstall the apiserver part: the webhook configuration goes, the CRD stays",
    );
    let out = helm0
        .run(&[
            "uninstall".into(),
            api_release.clone(),
            "--namespace".into(),
            system_ns.clone(),
        ])
        .await?;
    eprintln!("$ helm uninstall {api_release} -n {system_ns}\n{out}");
    ensure!(
        vwcs.get_opt(&fullname).await?.is_none(),
        "ValidatingWebhookConfiguration {fullname} is still there"
    );
    ensure!(
        crds.get_opt(CRD_NAME).await?.is_some(),
        "the CRD was deleted (resource-policy keep)"
    );
    let out = helm1
        .run(&[
            "uninstall".into(),
            host_release.clone(),
            "--namespace".into(),
            host_ns.clone(),
        ])
        .await?;
    eprintln!("$ helm uninstall {host_release} -n {host_ns}\n{out}");
    ensure!(
        Api::<Deployment>::namespaced(host.clone(), &host_ns)
            .get_opt(&format!("{fullname}-webhook"))
            .await?
            .is_none(),
        "the webhook Deployment is still in the host"
    );

    drop(webhook);
    drop(controller);
    drop(dashboard_process);
    clusters.cleanup().await?;
    ns.delete(&karmada).await?;
    Ok(())
}

/// Labels namespace `ns` so that install `fullname`'s webhooks review it; its KarmadaQuotas.
async fn reviewed_quotas(
    client: &Client,
    ns: &str,
    fullname: &str,
) -> Result<Api<kube::api::DynamicObject>> {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NS_LABEL: fullname}}})),
        )
        .await
        .with_context(|| format!("labelling namespace {ns} for {fullname}'s webhooks"))?;
    Ok(Api::namespaced_with(
        client.clone(),
        ns,
        &kube::discovery::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk("quota.karmada.io", "v1alpha1", "KarmadaQuota"),
            "karmadaquotas",
        ),
    ))
}

/// `data` of a rendered Secret or ConfigMap, decoded: key → bytes.
fn rendered_data(obj: &Value) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for (k, v) in obj["data"].as_object().into_iter().flatten() {
        let text = v
            .as_str()
            .ok_or_else(|| anyhow!("{}: data {k} is not a string", obj["metadata"]["name"]))?;
        let bytes = if obj["kind"] == "Secret" {
            serde_json::from_value::<ByteString>(json!(text))
                .with_context(|| format!("{}: data {k}", obj["metadata"]["name"]))?
                .0
        } else {
            text.as_bytes().to_vec()
        };
        out.insert(k.clone(), bytes);
    }
    Ok(out)
}

/// The rendered object of `kind` named `name`.
fn rendered<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| anyhow!("helm template rendered no {kind} {name}"))
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_kube_apiserver_given_the_charts_admission_configuration_passes_client_authentication()
-> Result<()> {
    let env = Env::get().await?;
    let id = run_id();
    let fullname = format!("kq-adm-{id}");
    let work = env.log_dir().join(format!("chart-admission-{fullname}"));
    let admission_dir = work.join("admission");
    std::fs::create_dir_all(&admission_dir)?;
    let webhook_port = free_port()?;
    let webhook_admin: SocketAddr = ([127, 0, 0, 1], free_port()?).into();

    step(
        "[Create] helm template, standalone, certs.mode=auto: webhook, client certificate, AdmissionConfiguration",
    );
    let values = json!({
        "installMode": "standalone",
        "fullnameOverride": fullname,
        "logFormat": "plain",
        "certs": {"mode": "auto", "extraIPs": ["127.0.0.1"]},
        "networkPolicy": {"apiserver": {"ipBlocks": ["127.0.0.1/32"]}},
        "webhook": {
            "replicas": 1,
            "url": format!("https://127.0.0.1:{webhook_port}"),
            "namespaceSelector": {"matchLabels": {NS_LABEL: fullname}},
            "clusterQuotaObjectSelector": {"matchLabels": {NS_LABEL: fullname}},
            "clientAuth": {"apiserverConfig": {"mountPath": admission_dir.display().to_string()}},
        },
        "controller": {"replicas": 1},
    });
    let values_file = work.join("values.yaml");
    std::fs::write(&values_file, serde_json::to_string_pretty(&values)?)?;
    let objects = Helm::new()?
        .template("kq", "kq-admission", &[&values_file], &[], &[])
        .await?;

    step(
        "the operator's part: the ConfigMap and the client Secret, as one projected volume, into the apiserver",
    );
    let config = rendered_data(rendered(
        &objects,
        "ConfigMap",
        &format!("{fullname}-apiserver-admission"),
    )?)?;
    let client = rendered_data(rendered(
        &objects,
        "Secret",
        &format!("{fullname}-apiserver-client"),
    )?)?;
    for (key, bytes) in config.iter().chain(
        client
            .iter()
            .filter(|(k, _)| k.as_str() == "tls.crt" || k.as_str() == "tls.key"),
    ) {
        std::fs::write(admission_dir.join(key), bytes)?;
    }
    let admission_config = admission_dir.join("admission-configuration.yaml");
    ensure!(
        admission_config.is_file(),
        "the ConfigMap has no admission-configuration.yaml"
    );
    let apiserver = OwnControlPlane::up(
        &work.join("cp"),
        1,
        &format!(
            "--admission-control-config-file={}",
            admission_config.display()
        ),
    )
    .await?;
    let kube =
        client_from_kubeconfig_text(&std::fs::read_to_string(apiserver.kubeconfig(0))?).await?;

    step(
        "[Create] the webhook from the rendered Deployment (client CA = the rendered Secret's ca.crt)",
    );
    let d = rendered(&objects, "Deployment", &format!("{fullname}-webhook"))?;
    let pod = &d["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let mut args: Vec<String> = c["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect();
    ensure!(
        args.iter().any(|a| a.starts_with("--client-ca-file=")),
        "the rendered webhook does not require a client certificate: {args:?}"
    );
    for m in c["volumeMounts"].as_array().into_iter().flatten() {
        let mount = m["mountPath"].as_str().unwrap_or_default();
        let v = pod["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == m["name"])
            .ok_or_else(|| anyhow!("volumeMount {} has no volume", m["name"]))?;
        let secret = rendered(
            &objects,
            "Secret",
            v["secret"]["secretName"].as_str().unwrap_or_default(),
        )?;
        let data = rendered_data(secret)?;
        let local = work.join("webhook").join(mount.trim_start_matches('/'));
        std::fs::create_dir_all(&local)?;
        // A projection (`items`) mounts only the keys it lists.
        let keys: Vec<String> = match v["secret"]["items"].as_array() {
            Some(items) => items
                .iter()
                .filter_map(|i| i["key"].as_str().map(str::to_owned))
                .collect(),
            None => data.keys().cloned().collect(),
        };
        for key in keys {
            let bytes = data
                .get(&key)
                .ok_or_else(|| anyhow!("Secret {} has no {key}", secret["metadata"]["name"]))?;
            std::fs::write(local.join(&key), bytes)?;
        }
        let prefix = format!("{}/", mount.trim_end_matches('/'));
        let local_prefix = format!("{}/", local.display());
        for a in &mut args {
            *a = a.replace(&prefix, &local_prefix);
        }
    }
    for (flag, value) in [
        ("--listen", format!("127.0.0.1:{webhook_port}")),
        ("--admin-listen", webhook_admin.to_string()),
    ] {
        let key = format!("{flag}=");
        let a = args
            .iter_mut()
            .find(|a| a.starts_with(&key))
            .ok_or_else(|| anyhow!("the chart renders no {flag}="))?;
        *a = format!("{key}{value}");
    }
    // Standalone pods use their in-cluster identity; here, the own apiserver's admin.
    args.push(format!(
        "--kubeconfig={}",
        apiserver.kubeconfig(0).display()
    ));
    // The reservation batches' namespace the chart gives (the release namespace), as an
    // install into this apiserver would have it.
    let batch_ns = c["env"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["name"] == "KQ_RESERVATION_NAMESPACE")
        .and_then(|e| e["value"].as_str())
        .ok_or_else(|| anyhow!("the chart renders no KQ_RESERVATION_NAMESPACE"))?
        .to_owned();
    karmada_quota_e2e::controller::ensure_namespace(&kube, &batch_ns).await?;
    let spec = FromDeployment {
        binary: "karmada-quota-webhook".to_owned(),
        args,
        envs: vec![
            ("NO_COLOR".to_owned(), "1".to_owned()),
            ("KQ_RESERVATION_NAMESPACE".to_owned(), batch_ns),
        ],
        bin_dir: None,
    };
    let webhook = start(env, &spec, webhook_admin).await?;

    step(
        "[Create] the rendered ValidatingWebhookConfiguration; a KarmadaQuota it must refuse (dry run)",
    );
    let vwc = rendered(&objects, "ValidatingWebhookConfiguration", &fullname)?.clone();
    karmada_quota_e2e::apply_json(&kube, "", vwc).await?;
    let ns = TestNs::new(&kube, "chart_admission").await?;
    let quotas = reviewed_quotas(&kube, ns.name(), &fullname).await?;
    let bad: kube::api::DynamicObject = serde_json::from_value(quota(
        ns.name(),
        "bad",
        &[("requests.nvidia.com/gpu", "1.5")],
    ))?;
    // "denied the request": the webhook decided, so the apiserver got through its TLS
    // handshake with the chart's client certificate ("failed calling webhook" otherwise).
    let denial = try_wait_for(
        "the webhook to decide the apiserver's review",
        API_TIMEOUT,
        || {
            let (quotas, bad) = (quotas.clone(), bad.clone());
            async move {
                let pp = PostParams {
                    dry_run: true,
                    ..PostParams::default()
                };
                match quotas.create(&pp, &bad).await {
                    Err(kube::Error::Api(s)) if s.message.contains("denied the request") => {
                        Ok(Some(s.message))
                    }
                    Err(e) => Err(anyhow!("{e}")),
                    Ok(_) => Err(anyhow!("the invalid KarmadaQuota was admitted")),
                }
            }
        },
    )
    .await?;
    eprintln!("denied through client authentication: {denial}");
    let metrics = http_get_ok(webhook_admin, "/metrics").await?;
    eprintln!(
        "kq_webhook_client_auth_required: {}",
        metric_sum(&metrics, "kq_webhook_client_auth_required", &[])
    );

    bindings_through_both_webhooks(&kube, &objects, &fullname, ns.name()).await?;

    Api::<ValidatingWebhookConfiguration>::all(kube.clone())
        .delete(&fullname, &Default::default())
        .await?;
    Api::<MutatingWebhookConfiguration>::all(kube.clone())
        .delete(&fullname, &Default::default())
        .await?;
    ns.delete(&kube).await?;
    drop(webhook);
    drop(apiserver);
    Ok(())
}

/// The chart's two binding webhooks, called by an apiserver that authenticates with the
/// rendered AdmissionConfiguration: the waiting line's arrivals (mutating) and the checks
/// (validating). A binding that fits is created and placed, one that would not fit waits,
/// and a scale-up past the quota is refused — each answer a decision of the webhook, so the
/// apiserver presented its client certificate to both.
async fn bindings_through_both_webhooks(
    kube: &Client,
    objects: &[Value],
    fullname: &str,
    ns: &str,
) -> Result<()> {
    step(
        "[Create] the rendered MutatingWebhookConfiguration (the waiting line's arrivals), a Queue quota of 1 cpu",
    );
    let mwc = rendered(objects, "MutatingWebhookConfiguration", fullname)?.clone();
    // webhook.queueing.labelNamespaces (the default): only where the controller keeps the
    // waiting-line label.
    let line_term = json!({
        "key": karmada_quota_core::queue::LABEL_WAITING_LINE,
        "operator": "In",
        "values": [karmada_quota_core::queue::LABEL_WAITING_LINE_VALUE],
    });
    ensure!(
        mwc["webhooks"][0]["namespaceSelector"]["matchExpressions"]
            .as_array()
            .is_some_and(|terms| terms.contains(&line_term)),
        "the rendered arrivals webhook does not select the waiting-line label: {}",
        mwc["webhooks"][0]["namespaceSelector"]
    );
    karmada_quota_e2e::apply_json(kube, "", mwc).await?;
    let mut q = quota(ns, "line", &[("requests.cpu", "1")]);
    q["spec"]["admission"] = json!({"mode": "Queue", "order": "BestEffortFIFO"});
    accepts(kube, &q).await?;
    // What the controller (--label-line-namespaces) does for a Queue quota; there is none
    // in this test (queue::the_arrivals_review_runs_only_where_… runs it).
    Api::<k8s_openapi::api::core::v1::Namespace>::all(kube.clone())
        .patch(
            ns,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {
                karmada_quota_core::queue::LABEL_WAITING_LINE:
                    karmada_quota_core::queue::LABEL_WAITING_LINE_VALUE
            }}})),
        )
        .await?;
    // What the controller writes first; there is none in this test.
    seed_used(kube, ns, "line", &[("requests.cpu", "0")]).await?;
    wait_until_arrivals_fit(kube, ns).await?;

    step("[Create] binding a (600m, unplaced): through both webhooks, admitted, not waiting");
    let a = expect_admitted(create(kube, &unplaced(ns, "a", "600m", 0)).await?)?;
    ensure!(
        !waiting(&serde_json::to_value(&a)?),
        "binding a fits the quota but was held: {a:?}"
    );

    step("[Update] binding a placed on member1: the validating webhook admits the UPDATE");
    let placed = Rb::deployment("a", 1)
        .request("cpu", "600m")
        .clusters(&[("member1", 1)])
        .json(ns);
    expect_admitted(update(kube, &placed).await?)?;

    step("[Update] binding a scaled to 2 replicas (1200m of 1 cpu): refused by the check");
    let scaled = Rb::deployment("a", 2)
        .request("cpu", "600m")
        .clusters(&[("member1", 2)])
        .json(ns);
    match update(kube, &scaled).await? {
        Ok(o) => bail!("a scale-up past the quota was admitted: {o:?}"),
        Err(s) => ensure!(
            s.message.contains("denied the request") && s.message.contains("requests.cpu"),
            "the scale-up was refused, but not by the webhook's quota check: {} {}",
            s.code,
            s.message
        ),
    }

    step("[Create] binding b (600m, unplaced): does not fit, held in the line by the arrivals");
    let b = expect_admitted(create(kube, &unplaced(ns, "b", "600m", 0)).await?)?;
    ensure!(
        waiting(&serde_json::to_value(&b)?),
        "binding b does not fit but was not held: {b:?}"
    );
    // A check that it is the line that holds b, not a lost refusal: a binding that cannot
    // wait (placed already) is refused outright.
    let c = Rb::deployment("c", 1)
        .request("cpu", "600m")
        .clusters(&[("member1", 1)])
        .json(ns);
    expect_refused_by_quota(create(kube, &c).await?)?;
    Ok(())
}

/// A refusal that names the quota's resource: the webhook decided.
fn expect_refused_by_quota(outcome: karmada_quota_e2e::webhook::Outcome) -> Result<()> {
    match outcome {
        Ok(o) => bail!("expected a quota refusal, {} was stored", o.name_any()),
        Err(s) if s.message.contains("requests.cpu") => Ok(()),
        Err(s) => bail!("refused, but not by the quota: {} {}", s.code, s.message),
    }
}
