//! The Helm chart and the image, checked without a cluster: `helm lint --strict` and
//! `helm template` of every `ci/*-values.yaml`, the rendered objects validated strictly
//! against the Kubernetes version the chart claims, each part rendering exactly its
//! kinds, the alert rules through promtool, the dashboard JSON, and the Dockerfile through
//! hadolint and against the chart's image reference.
//!
//! The tools come from `hack/tools.sh install` (make test runs it first); a missing tool
//! fails these tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail, ensure};
use karmada_quota_e2e::Env;
use karmada_quota_e2e::chart::{
    HELM_TOOLS, Helm, certificate_subject, chart_dir, chart_min_kube_version, chart_yaml,
    ci_values_files, container_args, deployment, file_name, find, kind_counts, run_tool, tool,
    verify_client_certificate,
};
use serde_json::{Value, json};

/// Kinds of other projects' CRDs (cert-manager, Prometheus Operator) the chart may render:
/// kubernetes-validate has no schema for them and says so; any other kind without a schema
/// is a failure.
const FOREIGN_KINDS: &[&str] = &["Certificate", "Issuer", "PrometheusRule", "ServiceMonitor"];

/// Every combination of install mode, part and certificate source has a CI values file.
const EXPECTED_CI_FILES: &[&str] = &[
    "karmada-apiserver-auto-values.yaml",
    "karmada-apiserver-certmanager-values.yaml",
    "karmada-apiserver-custom-values.yaml",
    "karmada-apiserver-existingsecret-values.yaml",
    "karmada-host-auto-values.yaml",
    "karmada-host-certmanager-values.yaml",
    "karmada-host-custom-values.yaml",
    "karmada-host-existingsecret-values.yaml",
    "standalone-auto-values.yaml",
    "standalone-certmanager-values.yaml",
    "standalone-custom-values.yaml",
    "standalone-existingsecret-values.yaml",
];

/// The kinds of the host part: workloads and what serves or watches them.
const HOST_KINDS: &[&str] = &[
    "Certificate",
    "ConfigMap",
    "Deployment",
    "Ingress",
    "Issuer",
    "NetworkPolicy",
    "PodDisruptionBudget",
    "PrometheusRule",
    "Secret",
    "Service",
    "ServiceAccount",
    "ServiceMonitor",
];
/// The kinds of the apiserver part: API objects of the Karmada control plane.
const APISERVER_KINDS: &[&str] = &[
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "MutatingWebhookConfiguration",
    "Namespace",
    "Role",
    "RoleBinding",
    "ServiceAccount",
    "ValidatingWebhookConfiguration",
];

fn ci_file(name: &str) -> PathBuf {
    chart_dir().join("ci").join(name)
}

async fn render(values: &str) -> Result<Vec<Value>> {
    let kube = chart_min_kube_version()?;
    Helm::new()?
        .template(
            "kq",
            "karmada-system",
            &[&ci_file(values)],
            &[],
            &["--kube-version", &kube],
        )
        .await
}

/// `helm template` of the values file `f` for Kubernetes `kube`.
async fn render_for(helm: &Helm, f: &Path, kube: &str) -> Result<Vec<Value>> {
    helm.template("kq", "karmada-system", &[f], &[], &["--kube-version", kube])
        .await
        .with_context(|| {
            format!(
                "{} template --kube-version {kube} -f ci/{}",
                helm.name(),
                file_name(f)
            )
        })
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn every_ci_values_file_passes_helm_lint_strict() -> Result<()> {
    let files = ci_values_files()?;
    let names: BTreeSet<&str> = files.iter().map(|f| file_name(f)).collect();
    let expected: BTreeSet<&str> = EXPECTED_CI_FILES.iter().copied().collect();
    ensure!(
        names == expected,
        "ci/ must hold one values file per mode, part and certs mode.\n  want: {expected:?}\n  got:  {names:?}"
    );
    // Both helms: 3.10 lints the rendering against its own, newer Kubernetes (a removed
    // API such as policy/v1beta1 fails --strict there).
    for name in HELM_TOOLS {
        let helm = Helm::named(name)?;
        for f in &files {
            helm.lint_strict(&[f])
                .await
                .with_context(|| format!("{name} lint --strict -f {}", file_name(f)))?;
            eprintln!("{name} lint --strict -f ci/{}: ok", file_name(f));
        }
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn schema_refuses_bad_values() -> Result<()> {
    let helm = Helm::new()?;
    for (set, fragment) in [
        ("installMode=both", "installMode"),
        ("certs.mode=selfSigned", "certs.mode"),
        ("webhook.failurePolicy=Maybe", "failurePolicy"),
        ("webhook.reservationTTL=60", "reservationTTL"),
        ("webhook.timeoutSeconds=60", "timeoutSeconds"),
        ("logFormat=xml", "logFormat"),
        ("reservationStore=etcd", "reservationStore"),
        ("dashboard.auth=basic", "auth"),
        ("podAntiAffinity=hard", "podAntiAffinity"),
        ("webhook.pdb.maxUnavailable=0", "maxUnavailable"),
        ("networkPolicy.apiserver.ipBlocks={10.0.0.1}", "ipBlocks"),
        ("listenerLimits.headerReadTimeout=5", "headerReadTimeout"),
        ("unknownValue=1", "unknownValue"),
        // One namespace's controller cannot keep the waiting-line labels.
        (
            "controller.watchNamespace=team-a",
            "webhook.queueing.labelNamespaces",
        ),
    ] {
        let err = helm
            .template(
                "kq",
                "karmada-system",
                &[],
                &[(
                    set.split_once('=').unwrap().0,
                    set.split_once('=').unwrap().1,
                )],
                &[],
            )
            .await
            .err()
            .ok_or_else(|| anyhow!("--set {set} rendered; the schema must refuse it"))?;
        ensure!(
            format!("{err:#}").contains(fragment),
            "--set {set}: the error does not name {fragment}: {err:#}"
        );
    }
    // The apiserver part cannot read the host's generated CA: it must be told.
    let err = helm
        .template(
            "kq",
            "karmada-system",
            &[],
            &[("karmada.part", "apiserver")],
            &[],
        )
        .await
        .err()
        .ok_or_else(|| anyhow!("the apiserver part rendered without a caBundle"))?;
    ensure!(
        format!("{err:#}").contains("certs.caBundle is required"),
        "{err:#}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn every_rendering_validates_strictly_against_the_claimed_kubernetes_version() -> Result<()> {
    let kube = chart_min_kube_version()?;
    let validate = tool("kubernetes-validate")?;
    let dir = std::env::temp_dir().join(format!("kq-chart-validate-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let helm = Helm::new()?;
    // The renderings share most objects: each distinct object is validated once, in a
    // file of its own, by one kubernetes-validate run.
    let mut distinct: BTreeMap<String, PathBuf> = BTreeMap::new();
    let mut renderings = Vec::new();
    for f in ci_values_files()? {
        let objects = render_for(&helm, &f, &kube).await?;
        let mut files = Vec::new();
        for o in &objects {
            let key = serde_json::to_string(o)?;
            let n = distinct.len();
            let path = distinct
                .entry(key.clone())
                .or_insert_with(|| dir.join(format!("object-{n}.yaml")))
                .clone();
            if !path.exists() {
                std::fs::write(&path, &key)?;
            }
            let kind = o["kind"].as_str().unwrap_or("").to_owned();
            files.push((path, kind));
        }
        renderings.push((f, files));
    }
    let mut args = vec!["--strict".to_owned(), "-k".to_owned(), kube.clone()];
    args.extend(distinct.values().map(|p| p.display().to_string()));
    let out = run_tool(&validate, &args, &[]).await?;
    // One line per object: passed, or no schema for a foreign CRD kind.
    let line_of = |path: &Path| {
        let shown = format!(" {} ", path.display());
        out.lines().find(|l| l.contains(&shown)).map(str::to_owned)
    };
    for (f, files) in &renderings {
        let (mut passed, mut foreign) = (0, 0);
        for (path, kind) in files {
            let line = line_of(path)
                .ok_or_else(|| anyhow!("ci/{}: no verdict on a {kind}:\n{out}", file_name(f)))?;
            if line.starts_with("INFO") && line.contains(" passed for resource ") {
                passed += 1;
            } else if line.starts_with("WARN")
                && FOREIGN_KINDS.contains(&kind.as_str())
                && line.contains(&format!("schema for kind {kind} "))
            {
                foreign += 1;
            } else {
                bail!("ci/{}: {kind}: {line}", file_name(f));
            }
        }
        ensure!(passed > 0, "ci/{}: nothing validated", file_name(f));
        eprintln!(
            "kubernetes-validate --strict -k {kube} ci/{}: {passed} passed, {foreign} foreign CRD kinds",
            file_name(f)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The Kubernetes versions the chart is rendered for: its minimum, the release that made
/// policy/v1 GA, and the kube-apiserver of Karmada v1.14 and v1.18 (their
/// KubeDefaultVersion).
const KUBE_VERSIONS: &[&str] = &["1.20.0", "1.21.0", "1.31.3", "1.35.2"];

/// Built-in APIs and the minor release that stopped serving them (Kubernetes' deprecated
/// API migration guide), for the groups a chart could use.
const REMOVED_APIS: &[(&str, u32)] = &[
    ("extensions/v1beta1", 16),
    ("apps/v1beta1", 16),
    ("apps/v1beta2", 16),
    ("admissionregistration.k8s.io/v1beta1", 22),
    ("apiextensions.k8s.io/v1beta1", 22),
    ("apiregistration.k8s.io/v1beta1", 22),
    ("authentication.k8s.io/v1beta1", 22),
    ("authorization.k8s.io/v1beta1", 22),
    ("certificates.k8s.io/v1beta1", 22),
    ("coordination.k8s.io/v1beta1", 22),
    ("networking.k8s.io/v1beta1", 22),
    ("rbac.authorization.k8s.io/v1beta1", 22),
    ("scheduling.k8s.io/v1beta1", 22),
    ("batch/v1beta1", 25),
    ("discovery.k8s.io/v1beta1", 25),
    ("events.k8s.io/v1beta1", 25),
    ("autoscaling/v2beta1", 25),
    ("policy/v1beta1", 25),
    ("node.k8s.io/v1beta1", 25),
    ("flowcontrol.apiserver.k8s.io/v1beta1", 26),
    ("autoscaling/v2beta2", 26),
    ("flowcontrol.apiserver.k8s.io/v1beta2", 29),
    ("flowcontrol.apiserver.k8s.io/v1beta3", 32),
];

/// Built-in APIs the chart uses that arrived after its minimum (1.20), and the minor that
/// first served them.
const ADDED_APIS: &[(&str, &str, u32)] = &[("policy/v1", "PodDisruptionBudget", 21)];

/// Why `apiVersion`/`kind` would not be served by Kubernetes 1.`minor`, if so.
fn unserved(api: &str, kind: &str, minor: u32) -> Option<String> {
    if let Some((_, gone)) = REMOVED_APIS
        .iter()
        .find(|(a, gone)| *a == api && minor >= *gone)
    {
        return Some(format!("{api} is no longer served from 1.{gone}"));
    }
    if let Some((_, _, from)) = ADDED_APIS
        .iter()
        .find(|(a, k, from)| *a == api && *k == kind && minor < *from)
    {
        return Some(format!("{api} {kind} is served only from 1.{from}"));
    }
    None
}

fn minor_of(version: &str) -> Result<u32> {
    version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .ok_or_else(|| anyhow!("not a Kubernetes version: {version}"))
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn every_api_version_is_served_by_each_kubernetes_version_with_both_helms() -> Result<()> {
    for name in HELM_TOOLS {
        let helm = Helm::named(name)?;
        for kube in KUBE_VERSIONS {
            let minor = minor_of(kube)?;
            let mut pdb_versions = BTreeSet::new();
            for f in ci_values_files()? {
                let objects = render_for(&helm, &f, kube).await?;
                for o in &objects {
                    let (api, kind) = (
                        o["apiVersion"].as_str().unwrap_or_default(),
                        o["kind"].as_str().unwrap_or_default(),
                    );
                    if let Some(why) = unserved(api, kind, minor) {
                        bail!(
                            "{name}, Kubernetes {kube}, ci/{}: {kind} {}: {why}",
                            file_name(&f),
                            o["metadata"]["name"]
                        );
                    }
                    if kind == "PodDisruptionBudget" {
                        pdb_versions.insert(api.to_owned());
                    }
                }
            }
            let want = if minor >= 21 {
                "policy/v1"
            } else {
                "policy/v1beta1"
            };
            ensure!(
                pdb_versions.iter().all(|v| v == want) && !pdb_versions.is_empty(),
                "{name}, Kubernetes {kube}: PodDisruptionBudgets as {pdb_versions:?}, want {want}"
            );
            eprintln!("{name} --kube-version {kube}: every object served; PDB {want}");
        }
        // Offline, no --kube-version: helm assumes a version of its own (3.6: 1.20; 3.10:
        // its client's, past 1.25). What it renders must be served there and lint clean.
        let objects = helm
            .template(
                "kq",
                "karmada-system",
                &[&ci_file("karmada-host-auto-values.yaml")],
                &[],
                &[],
            )
            .await?;
        let pdb = objects
            .iter()
            .find(|o| o["kind"] == "PodDisruptionBudget")
            .ok_or_else(|| anyhow!("{name}: karmada-host-auto renders no PodDisruptionBudget"))?;
        eprintln!(
            "{name} offline (helm's own default version): PDB {}",
            pdb["apiVersion"]
        );
        if *name == "helm-3.10" {
            ensure!(
                pdb["apiVersion"] == "policy/v1",
                "{name} renders offline for Kubernetes past 1.25, yet the PDB is {}",
                pdb["apiVersion"]
            );
        }
    }
    Ok(())
}

fn counts(pairs: &[(&str, usize)]) -> BTreeMap<String, usize> {
    pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn each_part_renders_exactly_its_kinds() -> Result<()> {
    // Exact inventories of the fullest renderings.
    let host = kind_counts(&render("karmada-host-auto-values.yaml").await?);
    ensure!(
        host == counts(&[
            // The Grafana dashboard; the apiserver's AdmissionConfiguration.
            ("ConfigMap", 2),
            // webhook, controller, dashboard (dashboard.separate, the default).
            ("Deployment", 3),
            ("Ingress", 1),
            ("NetworkPolicy", 3),
            ("PodDisruptionBudget", 2),
            ("PrometheusRule", 1),
            // The webhook's serving certificate; the apiserver's client certificate.
            ("Secret", 2),
            ("Service", 3),
            ("ServiceAccount", 3),
            ("ServiceMonitor", 1),
        ]),
        "host part: {host:?}"
    );
    let api = kind_counts(&render("karmada-apiserver-auto-values.yaml").await?);
    ensure!(
        api == counts(&[
            // webhook, controller, dashboard, the aggregated view role, the quota admin role.
            ("ClusterRole", 5),
            ("ClusterRoleBinding", 3),
            // KarmadaQuota, KarmadaClusterQuota, its shares, the reservation batches.
            ("CustomResourceDefinition", 4),
            // The waiting line's arrivals (webhook.queueing.enabled).
            ("MutatingWebhookConfiguration", 1),
            ("Namespace", 1),
            // Cluster Secrets, leader election, and each binary's reservation batches.
            ("Role", 4),
            ("RoleBinding", 4),
            ("ServiceAccount", 3),
            ("ValidatingWebhookConfiguration", 1),
        ]),
        "apiserver part: {api:?}"
    );
    // Every file: a part never renders the other's kinds; standalone renders both halves.
    for f in ci_values_files()? {
        let name = file_name(&f);
        let objects = render(name).await?;
        let kinds: BTreeSet<String> = kind_counts(&objects).into_keys().collect();
        let (allowed, must): (Vec<&str>, &[&str]) = if name.starts_with("karmada-host-") {
            (HOST_KINDS.to_vec(), &["Deployment", "Service"])
        } else if name.starts_with("karmada-apiserver-") {
            (
                APISERVER_KINDS.to_vec(),
                &["ValidatingWebhookConfiguration", "ClusterRole"],
            )
        } else {
            (
                HOST_KINDS.iter().chain(APISERVER_KINDS).copied().collect(),
                &[
                    "Deployment",
                    "Service",
                    "ValidatingWebhookConfiguration",
                    "ClusterRole",
                    "CustomResourceDefinition",
                ],
            )
        };
        let stray: Vec<&String> = kinds
            .iter()
            .filter(|k| !allowed.contains(&k.as_str()))
            .collect();
        ensure!(
            stray.is_empty(),
            "ci/{name} renders {stray:?}, not of its part"
        );
        for k in must {
            ensure!(kinds.contains(*k), "ci/{name} renders no {k}: {kinds:?}");
        }
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn chart_crd_is_the_generated_crd() -> Result<()> {
    let generated = read(&Env::repo_root().join(karmada_quota_crds::CRD_PATH))?;
    let copy = read(&chart_dir().join("files/quota.karmada.io_karmadaquotas.yaml"))?;
    ensure!(
        generated == copy,
        "charts/karmada-quota/files/quota.karmada.io_karmadaquotas.yaml differs from {}: run `make crds`",
        karmada_quota_crds::CRD_PATH
    );
    let cluster = read(&Env::repo_root().join(karmada_quota_crds::CLUSTER_CRD_PATH))?;
    let cluster_copy = read(&chart_dir().join("files/quota.karmada.io_karmadaclusterquotas.yaml"))?;
    ensure!(
        cluster == cluster_copy,
        "charts/karmada-quota/files/quota.karmada.io_karmadaclusterquotas.yaml differs from {}: run `make crds`",
        karmada_quota_crds::CLUSTER_CRD_PATH
    );
    let share = read(&Env::repo_root().join(karmada_quota_crds::SHARE_CRD_PATH))?;
    let share_copy =
        read(&chart_dir().join("files/quota.karmada.io_karmadaclusterquotashares.yaml"))?;
    ensure!(
        share == share_copy,
        "charts/karmada-quota/files/quota.karmada.io_karmadaclusterquotashares.yaml differs from {}: run `make crds`",
        karmada_quota_crds::SHARE_CRD_PATH
    );
    let batch = read(&Env::repo_root().join(karmada_quota_crds::BATCH_CRD_PATH))?;
    let batch_copy =
        read(&chart_dir().join("files/quota.karmada.io_karmadaquotareservations.yaml"))?;
    ensure!(
        batch == batch_copy,
        "charts/karmada-quota/files/quota.karmada.io_karmadaquotareservations.yaml differs from {}: run `make crds`",
        karmada_quota_crds::BATCH_CRD_PATH
    );
    // And the apiserver part installs it as is, kept on uninstall (for an apiserver that
    // evaluates its validation rules; older ones get it without them:
    // cel_features_render_only_for_apiservers_that_evaluate_them).
    let objects = render_for(
        &Helm::new()?,
        &ci_file("karmada-apiserver-auto-values.yaml"),
        "1.30.0",
    )
    .await?;
    let crd = find(
        &objects,
        "CustomResourceDefinition",
        "karmadaquotas.quota.karmada.io",
    )?;
    let want = karmada_quota_e2e::yaml_documents(&generated)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("empty CRD"))?;
    ensure!(
        crd["spec"] == want["spec"],
        "the rendered CRD's spec differs"
    );
    ensure!(
        crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep",
        "{}",
        crd["metadata"]
    );
    let cluster_crd = find(
        &objects,
        "CustomResourceDefinition",
        "karmadaclusterquotas.quota.karmada.io",
    )?;
    let want = karmada_quota_e2e::yaml_documents(&cluster)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("empty CRD"))?;
    ensure!(
        cluster_crd["spec"] == want["spec"],
        "the rendered KarmadaClusterQuota CRD's spec differs"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn alert_rules_pass_promtool() -> Result<()> {
    let objects = render("karmada-host-auto-values.yaml").await?;
    let rule = objects
        .iter()
        .find(|o| o["kind"] == "PrometheusRule")
        .ok_or_else(|| anyhow!("no PrometheusRule rendered"))?;
    let groups = &rule["spec"]["groups"];
    let alerts: BTreeSet<&str> = groups
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|g| g["rules"].as_array().into_iter().flatten())
        .filter_map(|r| r["alert"].as_str())
        .collect();
    let want: BTreeSet<&str> = [
        "KarmadaQuotaAlmostFull",
        "KarmadaQuotaDrift",
        "KarmadaQuotaNoLeader",
        "KarmadaQuotaReservationsFull",
        "KarmadaQuotaWaitingLineLabelFailing",
        "KarmadaQuotaWebhookErrors",
        "KarmadaQuotaWebhookSlow",
    ]
    .into_iter()
    .collect();
    ensure!(alerts == want, "alerts: {alerts:?}");
    let text = serde_json::to_string_pretty(&rule["spec"]["groups"][0]["rules"])?;
    ensure!(
        !text.contains("${"),
        "a threshold placeholder was left unsubstituted"
    );
    ensure!(text.contains(">= 0.9"), "the usage threshold is not 0.9");
    let out = promtool_check_rules("alerts", &json!({"groups": groups})).await?;
    ensure!(out.contains("SUCCESS: 7 rules found"), "{out}");
    Ok(())
}

/// `promtool check rules` on `rules` (a rules file as JSON, which is YAML).
async fn promtool_check_rules(name: &str, rules: &Value) -> Result<String> {
    let path = std::env::temp_dir().join(format!("kq-{name}-{}.rules.yaml", std::process::id()));
    std::fs::write(&path, serde_json::to_string_pretty(rules)?)?;
    let out = run_tool(
        &tool("promtool")?,
        &["check".into(), "rules".into(), path.display().to_string()],
        &[],
    )
    .await;
    let _ = std::fs::remove_file(&path);
    out
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn grafana_dashboard_is_valid_json_with_valid_queries() -> Result<()> {
    let objects = render("karmada-host-auto-values.yaml").await?;
    let cm = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1")
        .ok_or_else(|| anyhow!("no ConfigMap labelled grafana_dashboard=1"))?;
    let text = cm["data"]["karmada-quota.json"]
        .as_str()
        .ok_or_else(|| anyhow!("the ConfigMap has no karmada-quota.json"))?;
    let dash: Value = serde_json::from_str(text).context("the dashboard is not JSON")?;
    ensure!(
        dash["uid"] == "karmada-quota" && dash["title"].is_string(),
        "uid/title"
    );
    let panels = dash["panels"]
        .as_array()
        .ok_or_else(|| anyhow!("no panels"))?;
    let mut ids = BTreeSet::new();
    let mut exprs = Vec::new();
    for p in panels {
        ensure!(
            ids.insert(p["id"].as_i64().unwrap_or(-1)),
            "duplicate panel id: {p}"
        );
        let targets = p["targets"].as_array().filter(|t| !t.is_empty());
        let targets = targets.ok_or_else(|| anyhow!("panel {} has no targets", p["title"]))?;
        for t in targets {
            exprs.push(
                t["expr"]
                    .as_str()
                    .ok_or_else(|| anyhow!("panel {}: a target without expr", p["title"]))?
                    .to_owned(),
            );
        }
    }
    let all = exprs.join("\n");
    for metric in [
        "kq_quota_used",
        "kq_quota_hard",
        "kq_quota_cluster_used",
        "kq_quota_cluster_observed",
        "kq_webhook_decisions_total",
        "kq_webhook_decision_duration_seconds_bucket",
    ] {
        ensure!(all.contains(metric), "no panel shows {metric}");
    }
    // Every query parses: promtool checks them as recording rules, Grafana's variables
    // replaced by a match-all regex.
    let rules: Vec<Value> = exprs
        .iter()
        .enumerate()
        .map(|(i, e)| {
            json!({"record": format!("kq:dashboard_query_{i}"),
                   "expr": e.replace("$namespace", ".*").replace("$quota", ".*")})
        })
        .collect();
    let out = promtool_check_rules(
        "dashboard",
        &json!({"groups": [{"name": "dashboard", "rules": rules}]}),
    )
    .await?;
    ensure!(
        out.contains(&format!("SUCCESS: {} rules found", exprs.len())),
        "{out}"
    );
    Ok(())
}

/// `KEY = "value"` of a TOML or Dockerfile-ish line.
fn quoted_after<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|l| {
        let rest = l.trim().strip_prefix(key)?.trim_start();
        let rest = rest.strip_prefix('=')?.trim_start().strip_prefix('"')?;
        rest.split('"').next()
    })
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn dockerfile_passes_hadolint_and_matches_the_chart() -> Result<()> {
    let root = Env::repo_root();
    let dockerfile = root.join("Dockerfile");
    let out = run_tool(&tool("hadolint")?, &[dockerfile.display().to_string()], &[]).await?;
    ensure!(out.trim().is_empty(), "hadolint: {out}");
    let text = read(&dockerfile)?;

    // No Rust base image and no toolchain in the build: the binaries come from the host's
    // build (hack/image.sh: --release --locked, static, the rust-toolchain.toml toolchain).
    let froms: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("FROM "))
        .collect();
    ensure!(froms == ["scratch"], "the image builds FROM {froms:?}");
    let instructions: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    ensure!(
        !instructions
            .iter()
            .any(|l| l.contains("cargo ") || l.starts_with("RUN ")),
        "the Dockerfile builds something itself; it must only copy the host's build"
    );
    let script = read(&root.join("hack/image.sh"))?;
    ensure!(
        script.contains("cargo build --release --locked")
            && script.contains("target-feature=+crt-static"),
        "hack/image.sh does not build static release binaries with --locked"
    );
    ensure!(
        !script.contains("cargo +"),
        "hack/image.sh overrides the rust-toolchain.toml toolchain"
    );
    let user = text
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("USER "))
        .ok_or_else(|| anyhow!("the runtime stage sets no USER"))?;
    ensure!(
        !matches!(user.split(':').next(), Some("0" | "root")),
        "runs as {user}"
    );
    ensure!(
        text.lines().any(|l| l.trim() == "FROM scratch"),
        "the runtime stage is not an empty base"
    );

    // The image's version label, the chart's appVersion and the workspace version agree,
    // and the chart's default image is karmada-quota:<that version>.
    let chart = chart_yaml()?;
    let app_version = chart["appVersion"]
        .as_str()
        .ok_or_else(|| anyhow!("Chart.yaml has no appVersion"))?;
    let cargo = read(&root.join("Cargo.toml"))?;
    let workspace_version =
        quoted_after(&cargo, "version").ok_or_else(|| anyhow!("Cargo.toml has no version"))?;
    ensure!(
        app_version == workspace_version,
        "Chart appVersion {app_version} != workspace version {workspace_version}"
    );
    ensure!(
        text.contains(&format!(
            "org.opencontainers.image.version=\"{app_version}\""
        )),
        "the Dockerfile's version label is not {app_version}"
    );
    for engine in ["docker build", "buildah --storage-driver vfs bud"] {
        ensure!(
            text.lines()
                .any(|l| l.contains(engine)
                    && l.contains(&format!("-t karmada-quota:{app_version} "))),
            "the Dockerfile's {engine} command does not tag karmada-quota:{app_version}"
        );
    }
    let objects = render("standalone-auto-values.yaml").await?;
    for (deployment, binary) in [
        ("karmada-quota-webhook", "karmada-quota-webhook"),
        ("karmada-quota-controller", "karmada-quota-controller"),
    ] {
        let d = find(&objects, "Deployment", deployment)?;
        let c = &d["spec"]["template"]["spec"]["containers"][0];
        ensure!(
            c["image"] == format!("karmada-quota:{app_version}"),
            "{deployment} runs image {}",
            c["image"]
        );
        let path = format!("/usr/local/bin/{binary}");
        ensure!(
            c["command"] == json!([path]),
            "{deployment} command {}",
            c["command"]
        );
        ensure!(
            text.lines().any(|l| {
                let l = l.trim();
                l.starts_with("COPY ") && l.contains(binary) && l.ends_with(" /usr/local/bin/")
            }),
            "the image does not install {path}"
        );
    }
    Ok(())
}

/// The rules of `component`'s ClusterRole that grant `create` on `group`/`resource`.
fn grants_create(objects: &[Value], component: &str, group: &str, resource: &str) -> usize {
    let suffix = format!("-{component}");
    objects
        .iter()
        .filter(|o| {
            o["kind"] == "ClusterRole"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(&suffix))
        })
        .flat_map(|o| o["rules"].as_array().cloned().unwrap_or_default())
        .filter(|r| {
            r["apiGroups"] == json!([group])
                && r["resources"] == json!([resource])
                && r["verbs"] == json!(["create"])
        })
        .count()
}

/// The container flags of `component`'s Deployment.
fn component_args(objects: &[Value], component: &str) -> Vec<String> {
    let suffix = format!("-{component}");
    objects
        .iter()
        .filter(|o| {
            o["kind"] == "Deployment"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(&suffix))
        })
        .flat_map(|d| {
            d["spec"]["template"]["spec"]["containers"][0]["args"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn the_dashboard_needs_a_kubernetes_token_by_default() -> Result<()> {
    let on = render("standalone-auto-values.yaml").await?;
    ensure!(
        component_args(&on, "dashboard").contains(&"--dashboard-auth=kubernetes".to_owned()),
        "dashboard args: {:?}",
        component_args(&on, "dashboard")
    );
    ensure!(grants_create(&on, "dashboard", "authentication.k8s.io", "tokenreviews") == 1);
    ensure!(
        grants_create(
            &on,
            "dashboard",
            "authorization.k8s.io",
            "subjectaccessreviews"
        ) == 1
    );
    // The controller serves no dashboard: it needs no review rights.
    ensure!(grants_create(&on, "controller", "authentication.k8s.io", "tokenreviews") == 0);
    let kube = chart_min_kube_version()?;
    let off = Helm::new()?
        .template(
            "kq",
            "karmada-system",
            &[&ci_file("standalone-auto-values.yaml")],
            &[
                ("dashboard.auth", "none"),
                ("dashboard.allowUnauthenticatedRemote", "true"),
            ],
            &["--kube-version", &kube],
        )
        .await?;
    ensure!(component_args(&off, "dashboard").contains(&"--dashboard-auth=none".to_owned()));
    ensure!(
        grants_create(&off, "dashboard", "authentication.k8s.io", "tokenreviews") == 0
            && grants_create(
                &off,
                "dashboard",
                "authorization.k8s.io",
                "subjectaccessreviews"
            ) == 0,
        "no review rights without auth"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn the_cluster_quota_webhook_takes_its_own_object_selector() -> Result<()> {
    let kube = chart_min_kube_version()?;
    let objects = Helm::new()?
        .template(
            "kq",
            "karmada-system",
            &[&ci_file("standalone-auto-values.yaml")],
            &[
                ("webhook.objectSelector.matchLabels.a", "all"),
                (
                    "webhook.clusterQuotaObjectSelector.matchLabels.business",
                    "yes",
                ),
            ],
            &["--kube-version", &kube],
        )
        .await?;
    let vwc = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .ok_or_else(|| anyhow!("no ValidatingWebhookConfiguration rendered"))?;
    let hooks = vwc["webhooks"].as_array().cloned().unwrap_or_default();
    ensure!(hooks.len() >= 3, "webhooks: {hooks:?}");
    for hook in &hooks {
        let want = if hook["name"] == "karmadaclusterquotas.quota.karmada.io" {
            serde_json::json!({"matchLabels": {"business": "yes"}})
        } else {
            serde_json::json!({"matchLabels": {"a": "all"}})
        };
        ensure!(
            hook["objectSelector"] == want,
            "{}: {}",
            hook["name"],
            hook["objectSelector"]
        );
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn rendered_pods_are_hardened() -> Result<()> {
    let objects = render("standalone-auto-values.yaml").await?;
    for d in objects.iter().filter(|o| o["kind"] == "Deployment") {
        let spec = &d["spec"]["template"]["spec"];
        let name = &d["metadata"]["name"];
        ensure!(
            spec["securityContext"]["runAsNonRoot"] == true,
            "{name}: runAsNonRoot"
        );
        ensure!(
            spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault",
            "{name}: seccomp"
        );
        let c = &spec["containers"][0]["securityContext"];
        ensure!(
            c["readOnlyRootFilesystem"] == true,
            "{name}: readOnlyRootFilesystem"
        );
        ensure!(
            c["allowPrivilegeEscalation"] == false,
            "{name}: allowPrivilegeEscalation"
        );
        ensure!(
            c["capabilities"]["drop"] == json!(["ALL"]),
            "{name}: drop ALL"
        );
    }
    let host = render("karmada-host-custom-values.yaml").await?;
    for d in host.iter().filter(|o| o["kind"] == "Deployment") {
        // In karmada mode the host's token is not mounted: the binaries only talk to the
        // karmada-apiserver, with the kubeconfig Secret.
        ensure!(
            d["spec"]["template"]["spec"]["automountServiceAccountToken"] == false,
            "{}",
            d["metadata"]["name"]
        );
    }
    Ok(())
}

/// Leaf paths of a values tree (`webhook.pdb.enabled`); maps named in `opaque` (free-form
/// Kubernetes objects) and empty maps are leaves.
fn value_paths(v: &Value, prefix: &str, opaque: &[&str], out: &mut Vec<String>) {
    for (k, x) in v.as_object().into_iter().flatten() {
        let path = format!("{prefix}{k}");
        match x.as_object() {
            Some(m) if !m.is_empty() && !opaque.contains(&k.as_str()) => {
                value_paths(x, &format!("{path}."), opaque, out);
            }
            _ => out.push(path),
        }
    }
}

/// The env value `name` of Deployment `d`'s container.
fn env_value<'a>(d: &'a Value, name: &str) -> Option<&'a str> {
    d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

/// The rules of every (Cluster)Role rendered that name `resource`, by role name.
fn rules_on(objects: &[Value], resource: &str) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for o in objects
        .iter()
        .filter(|o| o["kind"] == "Role" || o["kind"] == "ClusterRole")
    {
        for r in o["rules"].as_array().into_iter().flatten() {
            let named = r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == resource || x == "*"));
            if named {
                let name = format!(
                    "{} {}",
                    o["kind"].as_str().unwrap_or_default(),
                    o["metadata"]["name"].as_str().unwrap_or_default()
                );
                out.entry(name).or_default().push(r["verbs"].clone());
            }
        }
    }
    out
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn the_reservation_namespace_reaches_both_binaries_and_only_they_get_the_batches()
-> Result<()> {
    // Default: the batches' namespace is the release namespace; no store to choose.
    let objects = render("standalone-auto-values.yaml").await?;
    for component in ["webhook", "controller"] {
        let d = deployment(&objects, component)?;
        ensure!(
            env_value(d, "KQ_RESERVATION_NAMESPACE") == Some("karmada-system"),
            "{component}"
        );
        ensure!(
            env_value(d, "KQ_RESERVATION_STORE").is_none(),
            "{component}: batches are the one store"
        );
    }
    ensure!(
        env_value(
            deployment(&objects, "dashboard")?,
            "KQ_RESERVATION_NAMESPACE"
        )
        .is_none(),
        "the dashboard neither reads nor writes batches"
    );
    // 0.2.0's values name a store: `batches` still validates, `status` (gone) does not.
    let refused = render_fails(
        "standalone-auto-values.yaml",
        &[("reservationStore", "status")],
    )
    .await?;
    ensure!(refused.contains("reservationStore"), "{refused}");
    let objects = render_with(
        "standalone-auto-values.yaml",
        &[
            ("reservationStore", "batches"),
            ("reservationNamespace", "kq-batches"),
        ],
        &[],
    )
    .await?;
    for component in ["webhook", "controller"] {
        let d = deployment(&objects, component)?;
        ensure!(env_value(d, "KQ_RESERVATION_NAMESPACE") == Some("kq-batches"));
    }
    // Exactly two Roles in that namespace grant anything on the batches, and no
    // ClusterRole does: the batches name bindings of every namespace, tenants and viewers
    // must not read them (the install test checks the same through the apiserver).
    let rules = rules_on(&objects, "karmadaquotareservations");
    let want: BTreeMap<String, Vec<Value>> = [
        (
            "Role karmada-quota-controller-reservations".to_owned(),
            vec![json!(["create", "get", "list", "watch", "delete"])],
        ),
        (
            "Role karmada-quota-webhook-reservations".to_owned(),
            vec![json!(["create", "get", "list", "watch"])],
        ),
    ]
    .into();
    ensure!(
        rules == want,
        "rules on karmadaquotareservations: {rules:?}"
    );
    for name in [
        "karmada-quota-controller-reservations",
        "karmada-quota-webhook-reservations",
    ] {
        let role = find(&objects, "Role", name)?;
        ensure!(
            role["metadata"]["namespace"] == "kq-batches",
            "{name}: {role}"
        );
        let binding = find(&objects, "RoleBinding", name)?;
        ensure!(binding["metadata"]["namespace"] == "kq-batches");
        ensure!(binding["roleRef"]["name"] == name);
        let sa = binding["subjects"][0]["name"].as_str().unwrap_or_default();
        ensure!(
            name.starts_with(sa) && binding["subjects"][0]["namespace"] == "karmada-system",
            "{name} is bound to {sa}"
        );
    }
    Ok(())
}

#[test]
fn readme_documents_every_value() -> Result<()> {
    let values = karmada_quota_e2e::yaml_documents(&read(&chart_dir().join("values.yaml"))?)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("values.yaml is empty"))?;
    let mut paths = Vec::new();
    value_paths(
        &values,
        "",
        &[
            "resources",
            "podSecurityContext",
            "securityContext",
            "labels",
        ],
        &mut paths,
    );
    ensure!(paths.len() > 50, "only {} values found", paths.len());
    let readme = read(&chart_dir().join("README.md"))?;
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !readme.contains(&format!("| `{p}` |")))
        .collect();
    ensure!(
        missing.is_empty(),
        "charts/karmada-quota/README.md's values table lacks {missing:?}"
    );
    // And every value has a schema entry.
    let schema: Value = serde_json::from_str(&read(&chart_dir().join("values.schema.json"))?)?;
    for p in &paths {
        let mut node = &schema;
        for part in p.split('.') {
            node = &node["properties"][part];
        }
        ensure!(!node.is_null(), "values.schema.json has no entry for {p}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// Safe in the critical path (docs/security/chart.md): what the chart turns on by default, and what it
// refuses to render.
// ---------------------------------------------------------------------------------------

/// `helm template` of ci file `values` with `--set` pairs, at the chart's lowest
/// Kubernetes version unless `extra` names another.
async fn render_with(values: &str, sets: &[(&str, &str)], extra: &[&str]) -> Result<Vec<Value>> {
    let kube = chart_min_kube_version()?;
    let mut flags: Vec<&str> = extra.to_vec();
    if !extra.contains(&"--kube-version") {
        flags.extend(["--kube-version", &kube]);
    }
    Helm::new()?
        .template("kq", "karmada-system", &[&ci_file(values)], sets, &flags)
        .await
}

/// The error of a render that must fail; an error when it rendered.
async fn render_fails(values: &str, sets: &[(&str, &str)]) -> Result<String> {
    match render_with(values, sets, &[]).await {
        Ok(_) => bail!("ci/{values} with {sets:?} rendered; the chart must refuse it"),
        Err(e) => Ok(format!("{e:#}")),
    }
}

/// The value of `--flag=value` among `args`.
fn flag<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    let key = format!("{name}=");
    args.iter().find_map(|a| a.strip_prefix(&key))
}

/// The volume of Deployment `d` mounted at `path`.
fn volume_at<'a>(d: &'a Value, path: &str) -> Option<&'a Value> {
    let spec = &d["spec"]["template"]["spec"];
    let mount = spec["containers"][0]["volumeMounts"]
        .as_array()?
        .iter()
        .find(|m| m["mountPath"] == path)?;
    spec["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == mount["name"])
}

/// Every Secret name Deployment `d`'s pods mount.
fn mounted_secrets(d: &Value) -> BTreeSet<String> {
    d["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["secret"]["secretName"].as_str().map(str::to_owned))
        .collect()
}

/// A Secret's `data` value (base64), decoded as the apiserver would.
fn decode_b64(text: &str) -> Result<Vec<u8>> {
    let bytes: k8s_openapi::ByteString =
        serde_json::from_value(json!(text)).context("a Secret's data is not base64")?;
    Ok(bytes.0)
}

/// host[:port] of an https URL.
fn url_host(url: &str) -> Result<&str> {
    let rest = url
        .strip_prefix("https://")
        .ok_or_else(|| anyhow!("{url} is not https"))?;
    Ok(rest.split('/').next().unwrap_or(rest))
}

const CLIENT_CA_DIR: &str = "/etc/karmada-quota/client-ca";

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn the_webhook_admits_only_the_apiservers_client_certificate_in_every_certs_mode()
-> Result<()> {
    // The webhook URL the apiserver part registers: the host:port the apiserver's
    // kubeconfig must name for its client certificate to be presented.
    let api = render("karmada-apiserver-auto-values.yaml").await?;
    let vwc = api
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .ok_or_else(|| anyhow!("no ValidatingWebhookConfiguration"))?;
    let karmada_host = url_host(
        vwc["webhooks"][0]["clientConfig"]["url"]
            .as_str()
            .ok_or_else(|| anyhow!("the webhook has no url"))?,
    )?
    .to_owned();
    ensure!(
        karmada_host == "karmada-quota-webhook.karmada-system.svc:443",
        "{karmada_host}"
    );
    let mut checked = 0;
    for f in ci_values_files()? {
        let name = file_name(&f).to_owned();
        if name.starts_with("karmada-apiserver-") {
            continue;
        }
        let objects = render(&name).await?;
        let webhook = deployment(&objects, "webhook")?;
        let args = container_args(webhook);
        if name == "standalone-custom-values.yaml" {
            // This fixture turns client authentication off: nothing of it is rendered.
            ensure!(
                flag(&args, "--client-ca-file").is_none()
                    && volume_at(webhook, CLIENT_CA_DIR).is_none(),
                "ci/{name}: clientAuth.enabled=false still wires a client CA: {args:?}"
            );
            continue;
        }
        ensure!(
            flag(&args, "--client-ca-file") == Some(&format!("{CLIENT_CA_DIR}/ca.crt")),
            "ci/{name}: the webhook does not require a client certificate: {args:?}"
        );
        // The webhook mounts the CA of the client Secret, and nothing else of it (the key
        // is the apiserver's).
        let vol = volume_at(webhook, CLIENT_CA_DIR)
            .ok_or_else(|| anyhow!("ci/{name}: nothing mounted at {CLIENT_CA_DIR}"))?;
        ensure!(
            vol["secret"]["items"] == json!([{"key": "ca.crt", "path": "ca.crt"}]),
            "ci/{name}: the webhook mounts more than ca.crt of the client Secret: {vol}"
        );
        let secret_name = vol["secret"]["secretName"].as_str().unwrap_or_default();
        let allowed: Vec<&str> = flag(&args, "--client-allowed-names")
            .map(|n| n.split(',').collect())
            .unwrap_or_default();
        if name.contains("existingsecret") {
            ensure!(secret_name == "my-apiserver-client", "ci/{name}: {vol}");
        } else if name.contains("certmanager") {
            let cert = find(&objects, "Certificate", secret_name)?;
            let usages = cert["spec"]["usages"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            ensure!(
                usages.contains(&json!("client auth")) && !usages.contains(&json!("server auth")),
                "ci/{name}: the client Certificate's usages: {usages:?}"
            );
            let cn = cert["spec"]["commonName"].as_str().unwrap_or_default();
            ensure!(
                allowed == [cn],
                "ci/{name}: --client-allowed-names {allowed:?}, certificate CN {cn}"
            );
        } else {
            // auto and custom: the certificate the apiserver will present passes the
            // webhook's client verification, and its name is allowed.
            let secret = find(&objects, "Secret", secret_name)?;
            let data = |k: &str| -> Result<Vec<u8>> {
                decode_b64(
                    secret["data"][k]
                        .as_str()
                        .ok_or_else(|| anyhow!("ci/{name}: Secret {secret_name} has no {k}"))?,
                )
            };
            let (ca, crt) = (data("ca.crt")?, data("tls.crt")?);
            ensure!(!data("tls.key")?.is_empty(), "ci/{name}: no tls.key");
            verify_client_certificate(&ca, &crt)
                .with_context(|| format!("ci/{name}: Secret {secret_name}"))?;
            let subject = certificate_subject(&crt).await?;
            let cn = subject
                .split(',')
                .find_map(|p| p.strip_prefix("CN="))
                .unwrap_or_default();
            if name.contains("auto") {
                ensure!(
                    allowed.contains(&cn),
                    "ci/{name}: --client-allowed-names {allowed:?} lacks the issued CN {cn}"
                );
            }
            // The webhook's own serving certificate is no client certificate of that CA.
            let tls = find(&objects, "Secret", "karmada-quota-webhook-tls")?;
            let serving = decode_b64(tls["data"]["tls.crt"].as_str().unwrap_or_default())?;
            ensure!(
                verify_client_certificate(&ca, &serving).is_err(),
                "ci/{name}: the webhook's serving certificate passes as the apiserver's client"
            );
        }
        // The apiserver's AdmissionConfiguration names the client certificate for the
        // webhook's exact host:port.
        let cm = find(&objects, "ConfigMap", "karmada-quota-apiserver-admission")?;
        let admission = karmada_quota_e2e::yaml_documents(
            cm["data"]["admission-configuration.yaml"]
                .as_str()
                .unwrap_or_default(),
        )?;
        // One entry per admission plugin the chart registers a webhook for: the validating
        // configuration, and the mutating one of the waiting line (webhook.queueing). A
        // plugin left out presents no certificate, and every call of its webhooks fails.
        for plugin_name in ["ValidatingAdmissionWebhook", "MutatingAdmissionWebhook"] {
            let plugin = admission[0]["plugins"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == plugin_name)
                .ok_or_else(|| anyhow!("ci/{name}: no {plugin_name} plugin"))?;
            ensure!(
                admission[0]["kind"] == "AdmissionConfiguration"
                    && plugin["configuration"]["kind"] == "WebhookAdmissionConfiguration"
                    && plugin["configuration"]["kubeConfigFile"]
                        == "/etc/karmada-quota/admission/webhook-kubeconfig.yaml",
                "ci/{name}: {plugin}"
            );
        }
        let kubeconfig = karmada_quota_e2e::yaml_documents(
            cm["data"]["webhook-kubeconfig.yaml"]
                .as_str()
                .unwrap_or_default(),
        )?;
        let user = &kubeconfig[0]["users"][0];
        let want_host = if name.starts_with("standalone-") {
            let vwc = objects
                .iter()
                .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
                .ok_or_else(|| anyhow!("ci/{name}: no ValidatingWebhookConfiguration"))?;
            url_host(
                vwc["webhooks"][0]["clientConfig"]["url"]
                    .as_str()
                    .unwrap_or_default(),
            )?
            .to_owned()
        } else {
            karmada_host.clone()
        };
        ensure!(
            user["name"] == want_host.as_str()
                && user["user"]["client-certificate"] == "/etc/karmada-quota/admission/tls.crt"
                && user["user"]["client-key"] == "/etc/karmada-quota/admission/tls.key",
            "ci/{name}: the apiserver's kubeconfig user {user} is not for {want_host}"
        );
        checked += 1;
    }
    ensure!(checked == 7, "{checked} host renderings checked");
    // Bring your own CA (any certs.mode): trusted instead, nothing issued.
    let byo_ca = read(&chart_dir().join("ci/standalone-custom-values.yaml"))?;
    let byo_ca = karmada_quota_e2e::yaml_documents(&byo_ca)?[0]["certs"]["custom"]["clientCaCert"]
        .as_str()
        .ok_or_else(|| anyhow!("no clientCaCert in ci/standalone-custom-values.yaml"))?
        .to_owned();
    let objects = render_with(
        "karmada-host-certmanager-values.yaml",
        &[
            ("webhook.clientAuth.caBundle", byo_ca.as_str()),
            ("webhook.clientAuth.allowedNames", "{karmada-apiserver}"),
        ],
        &[],
    )
    .await?;
    let webhook = deployment(&objects, "webhook")?;
    let args = container_args(webhook);
    ensure!(
        flag(&args, "--client-allowed-names") == Some("karmada-apiserver"),
        "{args:?}"
    );
    let vol = volume_at(webhook, CLIENT_CA_DIR).ok_or_else(|| anyhow!("no client CA"))?;
    let secret = find(
        &objects,
        "Secret",
        vol["secret"]["secretName"].as_str().unwrap_or_default(),
    )?;
    ensure!(
        decode_b64(secret["data"]["ca.crt"].as_str().unwrap_or_default())? == byo_ca.as_bytes()
            && secret["data"]["tls.key"].is_null(),
        "the bring-your-own CA Secret: {secret}"
    );
    ensure!(
        find(&objects, "Certificate", "karmada-quota-apiserver-client").is_err(),
        "a client certificate was issued although the CA is the operator's"
    );
    // Without what client authentication needs, the chart says so rather than render a
    // webhook nobody can call.
    for (values, sets, fragment) in [
        (
            "karmada-host-existingsecret-values.yaml",
            &[("certs.existingSecret.clientSecretName", "")][..],
            "certs.existingSecret.clientSecretName is required",
        ),
        (
            "karmada-host-custom-values.yaml",
            &[("certs.custom.clientCaCert", "")][..],
            "certs.custom.clientCaCert is required",
        ),
        // A CA the operator brings may sign other clients too (Karmada's own CA signs
        // every component and every pull-mode agent): names are required.
        (
            "karmada-host-custom-values.yaml",
            &[("webhook.clientAuth.allowedNames", "{}")][..],
            "webhook.clientAuth.allowedNames is empty",
        ),
        (
            "karmada-host-existingsecret-values.yaml",
            &[("webhook.clientAuth.allowedNames", "{}")][..],
            "webhook.clientAuth.allowedNames is empty",
        ),
        (
            "karmada-host-certmanager-values.yaml",
            &[("webhook.clientAuth.caBundle", byo_ca.as_str())][..],
            "webhook.clientAuth.allowedNames is empty",
        ),
    ] {
        let err = render_fails(values, sets).await?;
        ensure!(err.contains(fragment), "{values}: {err}");
    }
    // Unless told: every certificate of the CA, by name of the flag.
    let objects = render_with(
        "karmada-host-custom-values.yaml",
        &[
            ("webhook.clientAuth.allowedNames", "{}"),
            ("webhook.clientAuth.allowAnyName", "true"),
        ],
        &[],
    )
    .await?;
    let args = container_args(deployment(&objects, "webhook")?);
    ensure!(
        args.iter().any(|a| a == "--client-allow-any-name")
            && flag(&args, "--client-allowed-names").is_none(),
        "{args:?}"
    );
    // Client authentication off: the webhook is told it may serve reviews unauthenticated
    // on the pod's address (it refuses to start otherwise).
    let objects = render("standalone-custom-values.yaml").await?;
    let args = container_args(deployment(&objects, "webhook")?);
    ensure!(
        args.iter().any(|a| a == "--allow-unauthenticated-reviews")
            && flag(&args, "--client-ca-file").is_none(),
        "{args:?}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn listeners_are_given_explicitly_and_an_open_dashboard_must_be_asked_for() -> Result<()> {
    let objects = render("karmada-host-existingsecret-values.yaml").await?;
    let webhook = container_args(deployment(&objects, "webhook")?);
    let controller = container_args(deployment(&objects, "controller")?);
    let dashboard = container_args(deployment(&objects, "dashboard")?);
    // The binaries bind loopback by default; the pods must listen on their own address.
    for (args, name, want) in [
        (&webhook, "--listen", "0.0.0.0:9443"),
        (&webhook, "--admin-listen", "0.0.0.0:8080"),
        (&controller, "--admin-listen", "0.0.0.0:8080"),
        (&controller, "--role", "controller"),
        (&dashboard, "--role", "dashboard"),
        (&dashboard, "--admin-listen", "0.0.0.0:8080"),
        (&dashboard, "--dashboard-listen", "0.0.0.0:8081"),
        (&dashboard, "--dashboard-auth", "kubernetes"),
    ] {
        ensure!(flag(args, name) == Some(want), "{name}: {args:?}");
    }
    ensure!(
        flag(&dashboard, "--dashboard-allow-unauthenticated-remote").is_none()
            && flag(&controller, "--dashboard-listen").is_none(),
        "{dashboard:?} {controller:?}"
    );
    // dashboard.separate=false: the controller serves it, as before.
    let together = render_with(
        "karmada-host-existingsecret-values.yaml",
        &[("dashboard.separate", "false")],
        &[],
    )
    .await?;
    let args = container_args(deployment(&together, "controller")?);
    ensure!(
        flag(&args, "--role") == Some("all")
            && flag(&args, "--dashboard-listen") == Some("0.0.0.0:8081"),
        "{args:?}"
    );
    ensure!(
        deployment(&together, "dashboard").is_err(),
        "a dashboard Deployment beside a controller that serves it"
    );
    // auth=none on a pod address: refused unless asked for.
    let err = render_fails(
        "karmada-host-existingsecret-values.yaml",
        &[("dashboard.auth", "none")],
    )
    .await?;
    ensure!(
        err.contains("dashboard.allowUnauthenticatedRemote"),
        "the refusal does not say how to accept it: {err}"
    );
    let open = render_with(
        "karmada-host-existingsecret-values.yaml",
        &[
            ("dashboard.auth", "none"),
            ("dashboard.allowUnauthenticatedRemote", "true"),
        ],
        &[],
    )
    .await?;
    let args = container_args(deployment(&open, "dashboard")?);
    ensure!(
        flag(&args, "--dashboard-allow-unauthenticated-remote") == Some("true"),
        "{args:?}"
    );
    // On loopback (a sidecar proxy in front) auth=none needs no such consent.
    let local = render_with(
        "karmada-host-existingsecret-values.yaml",
        &[("dashboard.auth", "none"), ("listenHost", "127.0.0.1")],
        &[],
    )
    .await?;
    let args = container_args(deployment(&local, "dashboard")?);
    ensure!(
        flag(&args, "--dashboard-listen") == Some("127.0.0.1:8081"),
        "{args:?}"
    );
    // The dashboard's own TLS, audiences and listener bounds are passed when set.
    let full = render("karmada-host-auto-values.yaml").await?;
    let args = container_args(deployment(&full, "dashboard")?);
    for (name, want) in [
        (
            "--dashboard-tls-cert-file",
            "/etc/karmada-quota/dashboard-tls/tls.crt",
        ),
        (
            "--dashboard-tls-private-key-file",
            "/etc/karmada-quota/dashboard-tls/tls.key",
        ),
        ("--dashboard-token-audiences", "karmada-quota-dashboard"),
        ("--max-connections", "256"),
        ("--header-read-timeout", "5s"),
        ("--body-read-timeout", "10s"),
    ] {
        ensure!(flag(&args, name) == Some(want), "{name}: {args:?}");
    }
    let args = container_args(deployment(&full, "controller")?);
    for (name, want) in [
        ("--allow-insecure-members", "lab-cluster"),
        ("--max-connections", "256"),
    ] {
        ensure!(flag(&args, name) == Some(want), "{name}: {args:?}");
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn an_ingress_without_tls_is_refused_unless_told() -> Result<()> {
    // The fixture has no Ingress tls and says allowInsecure; take that back.
    let err = render_fails(
        "karmada-host-certmanager-values.yaml",
        &[("dashboard.ingress.allowInsecure", "false")],
    )
    .await?;
    ensure!(
        err.contains("dashboard.ingress has no tls") && err.contains("allowInsecure"),
        "{err}"
    );
    let insecure = render("karmada-host-certmanager-values.yaml").await?;
    let ingress = insecure
        .iter()
        .find(|o| o["kind"] == "Ingress")
        .ok_or_else(|| anyhow!("allowInsecure: no Ingress"))?;
    ensure!(ingress["spec"]["tls"].is_null(), "{ingress}");
    let tls = render("karmada-host-auto-values.yaml").await?;
    let ingress = tls
        .iter()
        .find(|o| o["kind"] == "Ingress")
        .ok_or_else(|| anyhow!("no Ingress"))?;
    ensure!(
        ingress["spec"]["tls"][0]["secretName"] == "quota-example-org-tls",
        "{ingress}"
    );
    Ok(())
}

/// The `from` peers of the NetworkPolicy rule of `policy` that opens port `port`.
fn peers_of(policy: &Value, port: &str) -> Option<Value> {
    policy["spec"]["ingress"]
        .as_array()?
        .iter()
        .find(|r| {
            r["ports"]
                .as_array()
                .is_some_and(|ps| ps.iter().any(|p| p["port"] == port))
        })
        .map(|r| r["from"].clone())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn network_policies_let_only_the_apiserver_the_scraper_and_the_ingress_in() -> Result<()> {
    let objects = render("karmada-host-existingsecret-values.yaml").await?;
    let policy = |c: &str| find(&objects, "NetworkPolicy", &format!("karmada-quota-{c}"));
    let (webhook, controller, dashboard) = (
        policy("webhook")?,
        policy("controller")?,
        policy("dashboard")?,
    );
    let apiserver = json!([{"podSelector": {"matchLabels": {"app": "karmada-apiserver"}}}]);
    let scraper = json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}]);
    let ingress = json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}},
                          "podSelector": {"matchLabels": {"app.kubernetes.io/name": "ingress-nginx"}}}]);
    ensure!(peers_of(webhook, "https") == Some(apiserver), "{webhook}");
    ensure!(
        peers_of(webhook, "metrics") == Some(scraper.clone()),
        "{webhook}"
    );
    ensure!(
        peers_of(controller, "metrics") == Some(scraper.clone()),
        "{controller}"
    );
    ensure!(
        peers_of(dashboard, "metrics") == Some(scraper),
        "{dashboard}"
    );
    ensure!(
        peers_of(dashboard, "dashboard") == Some(ingress),
        "{dashboard}"
    );
    ensure!(
        peers_of(controller, "https").is_none()
            && peers_of(webhook, "dashboard").is_none()
            && peers_of(controller, "dashboard").is_none()
            && peers_of(dashboard, "https").is_none(),
        "a port is open that the component does not serve"
    );
    for p in [webhook, controller, dashboard] {
        // No rule without peers (it would admit everyone); egress open by default.
        for rule in p["spec"]["ingress"].as_array().into_iter().flatten() {
            ensure!(
                rule["from"].as_array().is_some_and(|f| !f.is_empty()),
                "a rule open to everyone: {rule}"
            );
        }
        ensure!(p["spec"]["policyTypes"] == json!(["Ingress"]), "{p}");
        // It selects exactly the component's pods.
        let component = p["metadata"]["labels"]["app.kubernetes.io/component"].clone();
        ensure!(
            p["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component,
            "{p}"
        );
    }
    // A host-network apiserver by address; egress restricted on request.
    let full = render("karmada-host-auto-values.yaml").await?;
    let webhook = find(&full, "NetworkPolicy", "karmada-quota-webhook")?;
    let peers = peers_of(webhook, "https").unwrap_or_default();
    ensure!(
        peers
            .as_array()
            .is_some_and(|p| p.contains(&json!({"ipBlock": {"cidr": "10.0.0.0/24"}}))),
        "{peers}"
    );
    ensure!(
        webhook["spec"]["policyTypes"] == json!(["Ingress", "Egress"]),
        "{webhook}"
    );
    // Standalone (a host-network kube-apiserver) without its addresses, or no apiserver
    // peer at all: refused, rather than cutting the apiserver off or letting all in.
    let err = render_fails(
        "standalone-auto-values.yaml",
        &[("networkPolicy.apiserver.ipBlocks", "null")],
    )
    .await?;
    ensure!(err.contains("networkPolicy.apiserver.ipBlocks"), "{err}");
    let err = render_fails(
        "karmada-host-existingsecret-values.yaml",
        &[("networkPolicy.apiserver.from", "null")],
    )
    .await?;
    ensure!(err.contains("lets everyone reach the webhook"), "{err}");
    let off = render_with(
        "karmada-host-existingsecret-values.yaml",
        &[("networkPolicy.enabled", "false")],
        &[],
    )
    .await?;
    ensure!(!kind_counts(&off).contains_key("NetworkPolicy"));
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn the_binding_webhook_skips_the_system_namespaces() -> Result<()> {
    let objects = render_with(
        "karmada-apiserver-custom-values.yaml",
        &[("webhook.extraExcludedNamespaces", "{ops}")],
        &[],
    )
    .await?;
    let vwc = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .ok_or_else(|| anyhow!("no ValidatingWebhookConfiguration"))?;
    for hook in vwc["webhooks"].as_array().into_iter().flatten() {
        let terms = hook["namespaceSelector"]["matchExpressions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let excluded = terms
            .iter()
            .find(|t| t["key"] == "kubernetes.io/metadata.name" && t["operator"] == "NotIn");
        if hook["name"] == "resourcebindings.quota.karmada.io" {
            let values: BTreeSet<&str> = excluded
                .and_then(|t| t["values"].as_array())
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            for ns in ["kube-system", "karmada-system", "karmada-cluster", "ops"] {
                ensure!(values.contains(ns), "{ns} is reviewed: {values:?}");
            }
        } else {
            ensure!(
                excluded.is_none(),
                "{}: excludes namespaces too: {terms:?}",
                hook["name"]
            );
        }
    }
    // A selector of the user's own keeps its terms, and gains the exclusion.
    let objects = render("karmada-apiserver-auto-values.yaml").await?;
    let vwc = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .ok_or_else(|| anyhow!("no ValidatingWebhookConfiguration"))?;
    let rb = vwc["webhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["name"] == "resourcebindings.quota.karmada.io")
        .ok_or_else(|| anyhow!("no ResourceBinding webhook"))?;
    let terms = rb["namespaceSelector"]["matchExpressions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(terms.len() >= 2, "{terms:?}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn replicas_spread_and_no_budget_can_block_a_drain() -> Result<()> {
    let objects = render("karmada-host-existingsecret-values.yaml").await?;
    for component in ["webhook", "controller"] {
        let spec = &deployment(&objects, component)?["spec"]["template"]["spec"];
        let keys: Vec<&str> = spec["topologySpreadConstraints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| {
                c["whenUnsatisfiable"] == "ScheduleAnyway"
                    && c["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
            })
            .filter_map(|c| c["topologyKey"].as_str())
            .collect();
        ensure!(
            keys == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"],
            "{component}: {}",
            spec["topologySpreadConstraints"]
        );
        let anti = &spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
            [0]["podAffinityTerm"];
        ensure!(
            anti["topologyKey"] == "kubernetes.io/hostname"
                && anti["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == component,
            "{component}: {}",
            spec["affinity"]
        );
    }
    // The fixture: webhook 3 replicas with pdb disabled, controller 1 replica: no PDB.
    ensure!(!kind_counts(&objects).contains_key("PodDisruptionBudget"));
    // Two replicas each: maxUnavailable 1; policy/v1beta1 at 1.20, policy/v1 from 1.21.
    for (kube, api) in [("1.20.0", "policy/v1beta1"), ("1.21.0", "policy/v1")] {
        let objects = render_with(
            "karmada-host-custom-values.yaml",
            &[],
            &["--kube-version", kube],
        )
        .await?;
        let pdbs: Vec<&Value> = objects
            .iter()
            .filter(|o| o["kind"] == "PodDisruptionBudget")
            .collect();
        ensure!(pdbs.len() == 2, "{kube}: {} PDBs", pdbs.len());
        for p in pdbs {
            ensure!(
                p["apiVersion"] == api
                    && p["spec"]["maxUnavailable"] == 1
                    && p["spec"]["minAvailable"].is_null(),
                "{kube}: {p}"
            );
        }
    }
    // One replica: a budget could only block; none is rendered.
    let one = render_with(
        "karmada-host-custom-values.yaml",
        &[("controller.replicas", "1")],
        &[],
    )
    .await?;
    ensure!(
        find(&one, "PodDisruptionBudget", "karmada-quota-controller").is_err()
            && find(&one, "PodDisruptionBudget", "karmada-quota-webhook").is_ok(),
        "{:?}",
        kind_counts(&one)
    );
    // minAvailable = replicas would forbid every eviction: refused.
    let err = render_fails(
        "karmada-host-custom-values.yaml",
        &[("webhook.pdb.minAvailable", "2")],
    )
    .await?;
    ensure!(err.contains("would block every node drain"), "{err}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn each_component_gets_its_own_identity_and_never_the_admin_kubeconfig() -> Result<()> {
    let objects = render("karmada-host-existingsecret-values.yaml").await?;
    let webhook = mounted_secrets(deployment(&objects, "webhook")?);
    let controller = mounted_secrets(deployment(&objects, "controller")?);
    let want_webhook: BTreeSet<String> = [
        "karmada-quota-webhook-kubeconfig",
        "my-webhook-tls",
        "my-apiserver-client",
    ]
    .map(str::to_owned)
    .into();
    ensure!(webhook == want_webhook, "webhook mounts {webhook:?}");
    ensure!(
        controller == BTreeSet::from(["karmada-quota-controller-kubeconfig".to_owned()]),
        "controller mounts {controller:?}"
    );
    let dashboard = mounted_secrets(deployment(&objects, "dashboard")?);
    ensure!(
        dashboard == BTreeSet::from(["karmada-quota-dashboard-kubeconfig".to_owned()]),
        "dashboard mounts {dashboard:?}"
    );
    ensure!(
        ![&webhook, &controller, &dashboard]
            .iter()
            .any(|m| m.contains("karmada-kubeconfig")),
        "Karmada's admin kubeconfig is mounted"
    );
    // The dashboard's identity may read no Secret (no member credential) and write
    // nothing: only get/list/watch and the viewers' reviews.
    let api = render("karmada-apiserver-existingsecret-values.yaml").await?;
    let role = find(&api, "ClusterRole", "karmada-quota-dashboard")?;
    for rule in role["rules"].as_array().into_iter().flatten() {
        let resources = rule["resources"].to_string();
        let verbs = rule["verbs"].to_string();
        ensure!(
            !resources.contains("secrets") && !resources.contains("status"),
            "the dashboard's role reaches {resources}"
        );
        let reviews =
            resources.contains("tokenreviews") || resources.contains("subjectaccessreviews");
        ensure!(
            reviews == verbs.contains("create")
                && !["update", "patch", "delete", "\"*\""]
                    .iter()
                    .any(|v| verbs.contains(v)),
            "the dashboard's role may {verbs} {resources}"
        );
    }
    ensure!(
        !api.iter().any(|o| o["kind"] == "RoleBinding"
            && o["subjects"]
                .to_string()
                .contains("karmada-quota-dashboard")),
        "the dashboard is bound to a Role (the members' Secrets live behind one)"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn only_the_project_identities_may_write_quota_status() -> Result<()> {
    let objects = render("karmada-apiserver-auto-values.yaml").await?;
    let view = find(&objects, "ClusterRole", "karmada-quota-view")?;
    for agg in ["view", "edit", "admin"] {
        ensure!(
            view["metadata"]["labels"][format!("rbac.authorization.k8s.io/aggregate-to-{agg}")]
                == "true",
            "the view role is not aggregated into {agg}"
        );
    }
    ensure!(
        view["rules"]
            == json!([{"apiGroups": ["quota.karmada.io"],
                       "resources": ["karmadaquotas", "karmadaclusterquotas",
                                     "karmadaclusterquotashares"],
                       "verbs": ["get", "list", "watch"]}]),
        "{}",
        view["rules"]
    );
    let admin = find(&objects, "ClusterRole", "karmada-quota-admin")?;
    ensure!(
        admin["metadata"]["labels"]
            .as_object()
            .is_some_and(|l| l.keys().all(|k| !k.contains("aggregate-to"))),
        "the quota admin role is aggregated: a namespace admin could raise their own quota"
    );
    // Status only in the webhook's and the controller's roles (the webhook's for the
    // previous release's pods during an upgrade: they reserve in the quotas' status; this
    // release's reserve in batches); no wildcard anywhere.
    for role in objects.iter().filter(|o| o["kind"] == "ClusterRole") {
        let name = role["metadata"]["name"].as_str().unwrap_or_default();
        let writes_status = role["rules"].as_array().into_iter().flatten().any(|r| {
            r["resources"].as_array().is_some_and(|rs| {
                rs.iter().any(|x| {
                    x.as_str()
                        .is_some_and(|x| x.ends_with("/status") || x == "*")
                })
            })
        });
        let wildcard = role["rules"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["verbs"] == json!(["*"]) || r["apiGroups"] == json!(["*"]));
        ensure!(!wildcard, "{name} has a wildcard rule");
        ensure!(
            writes_status == matches!(name, "karmada-quota-webhook" | "karmada-quota-controller"),
            "{name}: writes status {writes_status}"
        );
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn the_quota_webhooks_review_delete_and_never_status() -> Result<()> {
    // Only quota administrators delete quotas, so the quota webhooks see DELETE;
    // status is RBAC's alone (the controller's usage writes), never reviewed.
    let objects = render("karmada-apiserver-auto-values.yaml").await?;
    let vwc = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .ok_or_else(|| anyhow!("no ValidatingWebhookConfiguration rendered"))?;
    let hooks = vwc["webhooks"].as_array().cloned().unwrap_or_default();
    for name in [
        "karmadaquotas.quota.karmada.io",
        "karmadaclusterquotas.quota.karmada.io",
    ] {
        let hook = hooks
            .iter()
            .find(|h| h["name"] == name)
            .ok_or_else(|| anyhow!("no webhook {name}"))?;
        ensure!(
            hook["rules"][0]["operations"] == json!(["CREATE", "UPDATE", "DELETE"]),
            "{name}: {}",
            hook["rules"]
        );
    }
    for hook in &hooks {
        for rule in hook["rules"].as_array().into_iter().flatten() {
            let resources = rule["resources"].as_array().cloned().unwrap_or_default();
            ensure!(
                resources
                    .iter()
                    .all(|r| r.as_str().is_some_and(|r| !r.contains('/') && r != "*")),
                "{}: reviews a subresource: {resources:?}",
                hook["name"]
            );
        }
    }
    Ok(())
}

/// Drops every `x-kubernetes-validations` key of `v`, at any depth; how many it dropped.
fn drop_validation_rules(v: &mut Value) -> usize {
    match v {
        Value::Object(fields) => {
            let own = usize::from(fields.remove("x-kubernetes-validations").is_some());
            own + fields
                .values_mut()
                .map(drop_validation_rules)
                .sum::<usize>()
        }
        Value::Array(items) => items.iter_mut().map(drop_validation_rules).sum(),
        _ => 0,
    }
}

/// Each webhook of the rendered `objects` carries `want` as its matchConditions when it is
/// the ResourceBinding webhook, none otherwise (`at` names the rendering).
fn check_match_conditions(at: &str, objects: &[Value], want: &Value) -> Result<()> {
    let vwc = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .ok_or_else(|| anyhow!("{at}: no ValidatingWebhookConfiguration"))?;
    for hook in vwc["webhooks"].as_array().into_iter().flatten() {
        let expected = if hook["name"] == "resourcebindings.quota.karmada.io" {
            want
        } else {
            &Value::Null
        };
        ensure!(
            hook["matchConditions"] == *expected,
            "{at}: {}: matchConditions {}",
            hook["name"],
            hook["matchConditions"]
        );
    }
    Ok(())
}

/// The four CRDs of the rendered `objects` are files/ as generated (`rules`) or less their
/// validation rules (`at` names the rendering).
fn check_crds(at: &str, objects: &[Value], rules: bool) -> Result<()> {
    let mut crds = 0;
    for o in objects
        .iter()
        .filter(|o| o["kind"] == "CustomResourceDefinition")
    {
        let plural = o["spec"]["names"]["plural"].as_str().unwrap_or_default();
        let file = chart_dir().join(format!("files/quota.karmada.io_{plural}.yaml"));
        let mut generated = karmada_quota_e2e::yaml_documents(&read(&file)?)?.remove(0);
        let rendered = &o["spec"];
        // The reservation batch CRD is schema-less: no rules to carry.
        let has_rules = drop_validation_rules(&mut rendered.clone()) > 0;
        ensure!(
            has_rules == (rules && plural != "karmadaquotareservations"),
            "{at}: {plural}: validation rules rendered: {has_rules}"
        );
        if !rules {
            drop_validation_rules(&mut generated);
        }
        ensure!(
            *rendered == generated["spec"],
            "{at}: {plural}: the rendered CRD is not files/ {}",
            if rules {
                "as generated"
            } else {
                "less its rules"
            }
        );
        crds += 1;
    }
    ensure!(crds == 4, "{at}: {crds} CRDs rendered");
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn cel_features_render_only_for_apiservers_that_evaluate_them() -> Result<()> {
    // matchConditions from 1.28 (the values.yaml expression, on the ResourceBinding webhook
    // alone); CRD validation rules from 1.25, the CRDs otherwise exactly files/ less them.
    let values = karmada_quota_e2e::yaml_documents(&read(&chart_dir().join("values.yaml"))?)?;
    let want = values[0]["webhook"]["validatingWebhooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["name"] == "resourcebindings.quota.karmada.io")
        .map(|h| h["matchConditions"].clone())
        .filter(|c| c.as_array().is_some_and(|c| !c.is_empty()))
        .ok_or_else(|| {
            anyhow!("values.yaml gives the ResourceBinding webhook no matchConditions")
        })?;
    let f = ci_file("karmada-apiserver-auto-values.yaml");
    let off = [("webhook.matchConditions.enabled", "false")];
    for name in HELM_TOOLS {
        let helm = Helm::named(name)?;
        for (kube, sets, conditions, rules) in [
            ("1.20.0", &[][..], false, false),
            ("1.24.0", &[], false, false),
            ("1.25.0", &[], false, true),
            ("1.27.0", &[], false, true),
            ("1.28.0", &[], true, true),
            ("1.30.0", &[], true, true),
            ("1.35.2", &[], true, true),
            ("1.30.0", &off, false, true),
        ] {
            let at = format!("{name} --kube-version {kube} {sets:?}");
            let objects = helm
                .template(
                    "kq",
                    "karmada-system",
                    &[&f],
                    sets,
                    &["--kube-version", kube],
                )
                .await
                .with_context(|| at.clone())?;
            let expected = if conditions {
                want.clone()
            } else {
                Value::Null
            };
            check_match_conditions(&at, &objects, &expected)?;
            check_crds(&at, &objects, rules)?;
        }
        eprintln!("{name}: matchConditions from 1.28, CRD validation rules from 1.25");
    }
    Ok(())
}
