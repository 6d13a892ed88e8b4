//! `dashboard.prometheus`: the chart mounts an existing Secret and ConfigMap holding how to
//! reach Prometheus as it is deployed (CA bundle, bearer token, basic auth password,
//! client certificate) and passes the `--prometheus-*` flags naming the mounted files to
//! whoever serves the dashboard (the dashboard Deployment, or the controller with
//! `dashboard.separate=false`) — never to a pod that does not serve it. Checked with both
//! helms (render, `helm lint --strict`), against the controller binary's own flags, and
//! with the combinations the chart must refuse.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result, anyhow, bail, ensure};
use karmada_quota_e2e::Binary;
use karmada_quota_e2e::chart::{
    HELM_TOOLS, Helm, chart_dir, chart_min_kube_version, container_args, deployment,
};
use serde_json::{Value, json};

/// The host part of a Karmada install, the base every case adds its values to.
const BASE: &str = "ci/karmada-host-auto-values.yaml";
const DIR: &str = "/etc/karmada-quota/prometheus";

/// The values files of one test, in a directory of its own that goes when the test ends.
struct ValuesDir(std::path::PathBuf);

impl ValuesDir {
    fn new() -> Result<Self> {
        let dir = std::env::temp_dir().join(format!("kq-chart-prometheus-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        Ok(Self(dir))
    }

    /// Writes `values` to `<name>.yaml` in this directory; its path.
    fn file(&self, name: &str, values: &Value) -> Result<std::path::PathBuf> {
        let path = self.0.join(format!("{name}.yaml"));
        std::fs::write(&path, serde_json::to_string_pretty(values)?)?;
        Ok(path)
    }
}

impl Drop for ValuesDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

async fn render(helm: &Helm, extra: &Path) -> Result<Vec<Value>> {
    let kube = chart_min_kube_version()?;
    helm.template(
        "kq",
        "karmada-system",
        &[&chart_dir().join(BASE), extra],
        &[],
        &["--kube-version", &kube],
    )
    .await
    .with_context(|| format!("{} template -f {BASE} -f {}", helm.name(), extra.display()))
}

/// The `--prometheus-*` flags of a Deployment's container, in order.
fn prometheus_flags(d: &Value) -> Vec<String> {
    container_args(d)
        .into_iter()
        .filter(|a| a.starts_with("--prometheus-"))
        .collect()
}

/// What Deployment `d` mounts under [`DIR`]: file path → (volume kind, object, key).
fn mounted_files(d: &Value) -> Result<BTreeMap<String, (String, String, String)>> {
    let spec = &d["spec"]["template"]["spec"];
    let mut out = BTreeMap::new();
    for m in spec["containers"][0]["volumeMounts"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let path = m["mountPath"].as_str().unwrap_or_default();
        if !path.starts_with(DIR) {
            continue;
        }
        ensure!(m["readOnly"] == true, "{path} is mounted writable");
        let v = spec["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|v| v["name"] == m["name"])
            .ok_or_else(|| anyhow!("volumeMount {} has no volume", m["name"]))?;
        let (kind, object, items) = if v["secret"].is_object() {
            ("Secret", &v["secret"]["secretName"], &v["secret"]["items"])
        } else if v["configMap"].is_object() {
            (
                "ConfigMap",
                &v["configMap"]["name"],
                &v["configMap"]["items"],
            )
        } else {
            bail!("volume {} is neither a Secret nor a ConfigMap", v["name"]);
        };
        // Only the keys named are projected: the rest of the Secret stays out of the pod.
        let items = items
            .as_array()
            .ok_or_else(|| anyhow!("volume {} projects every key of {object}", v["name"]))?;
        for i in items {
            let (key, file) = (
                i["key"].as_str().unwrap_or_default(),
                i["path"].as_str().unwrap_or_default(),
            );
            out.insert(
                format!("{path}/{file}"),
                (
                    kind.to_owned(),
                    object.as_str().unwrap_or_default().to_owned(),
                    key.to_owned(),
                ),
            );
        }
    }
    Ok(out)
}

/// Every file a flag names is mounted, from the object and key expected; the other
/// `--prometheus-*` flags are exactly `plain`.
fn check_files(d: &Value, want: &[(&str, (&str, &str, &str))], plain: &[&str]) -> Result<()> {
    let flags = prometheus_flags(d);
    let files = mounted_files(d)?;
    let mut expected = Vec::new();
    for (flag, (kind, object, key)) in want {
        let path = flags
            .iter()
            .find_map(|f| f.strip_prefix(&format!("{flag}=")))
            .ok_or_else(|| anyhow!("no {flag} among {flags:?}"))?;
        let mounted = files
            .get(path)
            .ok_or_else(|| anyhow!("{flag}={path} is not a mounted file: {files:?}"))?;
        ensure!(
            (mounted.0.as_str(), mounted.1.as_str(), mounted.2.as_str()) == (*kind, *object, *key),
            "{flag}={path} comes from {mounted:?}, not {kind} {object} key {key}"
        );
        expected.push(format!("{flag}={path}"));
    }
    expected.extend(plain.iter().map(|f| (*f).to_owned()));
    let mut got = flags.clone();
    got.sort();
    expected.sort();
    ensure!(
        got == expected,
        "the --prometheus-* flags differ.\n  want: {expected:?}\n  got:  {got:?}"
    );
    ensure!(
        files.len() == want.len(),
        "more is mounted than the flags name: {files:?}"
    );
    Ok(())
}

/// Token, client certificate and tenant header from a Secret, the CA from a ConfigMap.
fn token_values(separate: bool) -> Value {
    json!({
        "dashboard": {
            "separate": separate,
            "prometheusUrl": "https://prometheus.monitoring:9090",
            "prometheus": {
                "secret": {"name": "prom-creds", "bearerTokenKey": "token",
                           "certKey": "tls.crt", "keyKey": "tls.key"},
                "configMap": {"name": "prom-ca", "caKey": "ca.crt"},
                "headers": ["X-Scope-OrgID=team-a"],
            },
        },
    })
}

/// Basic auth, the CA in the same Secret.
fn basic_auth_values() -> Value {
    json!({
        "dashboard": {
            "prometheusUrl": "https://thanos.monitoring:10902/prefix",
            "prometheus": {
                "secret": {"name": "prom-basic", "basicAuthPasswordKey": "password",
                           "caKey": "ca.pem"},
                "basicAuthUser": "karmada-quota",
            },
        },
    })
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn prometheus_credentials_are_mounted_and_passed_to_the_dashboard_with_both_helms()
-> Result<()> {
    let values = ValuesDir::new()?;
    let token = values.file("token", &token_values(true))?;
    let token_in_controller = values.file("token-controller", &token_values(false))?;
    let basic = values.file("basic", &basic_auth_values())?;
    let token_files = [
        (
            "--prometheus-bearer-token-file",
            ("Secret", "prom-creds", "token"),
        ),
        (
            "--prometheus-cert-file",
            ("Secret", "prom-creds", "tls.crt"),
        ),
        ("--prometheus-key-file", ("Secret", "prom-creds", "tls.key")),
        ("--prometheus-ca-file", ("ConfigMap", "prom-ca", "ca.crt")),
    ];
    for name in HELM_TOOLS {
        let helm = Helm::named(name)?;

        let objects = render(&helm, &token).await?;
        check_files(
            deployment(&objects, "dashboard")?,
            &token_files,
            &["--prometheus-header=X-Scope-OrgID=team-a"],
        )
        .with_context(|| format!("{name}: the dashboard Deployment"))?;
        // The controller does not serve the dashboard: no Prometheus credential in it.
        let controller = deployment(&objects, "controller")?;
        ensure!(
            prometheus_flags(controller).is_empty() && mounted_files(controller)?.is_empty(),
            "{name}: the controller got Prometheus credentials it does not use"
        );

        let objects = render(&helm, &token_in_controller).await?;
        check_files(
            deployment(&objects, "controller")?,
            &token_files,
            &["--prometheus-header=X-Scope-OrgID=team-a"],
        )
        .with_context(|| format!("{name}: the controller serving the dashboard"))?;
        ensure!(
            deployment(&objects, "dashboard").is_err(),
            "{name}: a dashboard Deployment with dashboard.separate=false"
        );

        let objects = render(&helm, &basic).await?;
        let dashboard = deployment(&objects, "dashboard")?;
        check_files(
            dashboard,
            &[
                (
                    "--prometheus-basic-auth-password-file",
                    ("Secret", "prom-basic", "password"),
                ),
                ("--prometheus-ca-file", ("Secret", "prom-basic", "ca.pem")),
            ],
            &["--prometheus-basic-auth-user=karmada-quota"],
        )
        .with_context(|| format!("{name}: basic auth"))?;

        for f in [&token, &token_in_controller, &basic] {
            helm.lint_strict(&[&chart_dir().join(BASE), f])
                .await
                .with_context(|| format!("{name} lint --strict -f {}", f.display()))?;
        }
        eprintln!("{name}: dashboard.prometheus renders, mounts and lints");
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh: make test runs it"]
async fn incomplete_or_conflicting_prometheus_credentials_are_refused() -> Result<()> {
    let url = json!("https://prometheus.monitoring:9090");
    let cases = [
        (
            "keys without a Secret",
            json!({"prometheusUrl": url, "prometheus": {"secret": {"bearerTokenKey": "token"}}}),
            "set dashboard.prometheus.secret.name",
        ),
        (
            "a Secret without keys",
            json!({"prometheusUrl": url, "prometheus": {"secret": {"name": "prom"}}}),
            "mounts nothing",
        ),
        (
            "a ConfigMap without its key",
            json!({"prometheusUrl": url, "prometheus": {"configMap": {"name": "prom-ca"}}}),
            "needs both name and caKey",
        ),
        (
            "two CAs",
            json!({"prometheusUrl": url, "prometheus": {
                "secret": {"name": "prom", "caKey": "ca.crt"},
                "configMap": {"name": "prom-ca", "caKey": "ca.crt"}}}),
            "not both",
        ),
        (
            "a certificate without its key",
            json!({"prometheusUrl": url, "prometheus": {"secret": {"name": "prom", "certKey": "tls.crt"}}}),
            "both dashboard.prometheus.secret.certKey and keyKey",
        ),
        (
            "a user without a password",
            json!({"prometheusUrl": url, "prometheus": {"basicAuthUser": "me"}}),
            "basicAuthUser and secret.basicAuthPasswordKey",
        ),
        (
            "a token and basic auth",
            json!({"prometheusUrl": url, "prometheus": {
                "secret": {"name": "prom", "bearerTokenKey": "token", "basicAuthPasswordKey": "pw"},
                "basicAuthUser": "me"}}),
            "two kinds of credentials",
        ),
        (
            "credentials without a Prometheus",
            json!({"prometheus": {"secret": {"name": "prom", "bearerTokenKey": "token"}}}),
            "dashboard.prometheusUrl is empty",
        ),
        // The schema: a header must be NAME=VALUE without a comma (the flag splits on it).
        (
            "a header that is not NAME=VALUE",
            json!({"prometheusUrl": url, "prometheus": {"headers": ["X-Scope-OrgID: a"]}}),
            "headers",
        ),
        (
            "a header with a comma",
            json!({"prometheusUrl": url, "prometheus": {"headers": ["X-Scope-OrgID=a,b"]}}),
            "headers",
        ),
    ];
    let helm = Helm::new()?;
    let values = ValuesDir::new()?;
    for (what, dashboard, message) in cases {
        let f = values.file("refused", &json!({"dashboard": dashboard}))?;
        match render(&helm, &f).await {
            Ok(_) => bail!("{what}: rendered; the chart must refuse it"),
            Err(e) => {
                let e = format!("{e:#}");
                ensure!(
                    e.contains(message),
                    "{what}: refused, but not saying {message:?}: {e}"
                );
                eprintln!("{what}: refused");
            }
        }
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs the chart tools of hack/tools.sh and the binaries: make test runs it"]
async fn every_prometheus_flag_the_chart_renders_is_a_flag_of_the_controller() -> Result<()> {
    let values = ValuesDir::new()?;
    let f = values.file("flags", &token_values(true))?;
    let basic = values.file("flags-basic", &basic_auth_values())?;
    let helm = Helm::new()?;
    let mut names = std::collections::BTreeSet::new();
    for values in [&f, &basic] {
        let objects = render(&helm, values).await?;
        for flag in prometheus_flags(deployment(&objects, "dashboard")?) {
            let name = flag.split('=').next().unwrap_or_default().to_owned();
            names.insert(name);
        }
    }
    ensure!(
        names.len() == 7,
        "the cases render {names:?}, not all seven flags"
    );
    let path = Binary::path("karmada-quota-controller")?;
    let out = tokio::process::Command::new(&path)
        .arg("--help")
        .output()
        .await
        .with_context(|| format!("running {} --help", path.display()))?;
    let help = String::from_utf8_lossy(&out.stdout);
    for name in &names {
        ensure!(
            help.contains(&format!("{name} <")),
            "karmada-quota-controller --help has no {name}"
        );
    }
    Ok(())
}
