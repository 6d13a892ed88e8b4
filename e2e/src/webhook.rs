//! The admission webhook under test: certificates, the process, its registration, and the
//! objects and status helpers its e2e tests share.
//!
//! ```text
//!  WebhookTls::get(env)      once per process: openssl → <cp dir>/webhook-tls-<pid>/
//!       │                    ca.pem (caBundle), tls.pem + tls.key (SAN IP:127.0.0.1);
//!       │                    WebhookTls::generate_as(dir, label, serial): another pair
//!       │                    (rotation tests serve their own copies: tls_files(cert, key),
//!       │                    Registration::register_with_ca; served_fingerprint(addr))
//!       ▼
//!  Webhook::start(env)       target/<profile>/karmada-quota-webhook
//!       │                      --listen 127.0.0.1:<free> --admin-listen 127.0.0.1:<free>
//!       │                      --kubeconfig <apiserver 0> --tls-cert-file/--tls-private-key-file
//!       │                    ready when GET /readyz on the admin port answers 200
//!       ▼
//!  Registration::register    ValidatingWebhookConfiguration from
//!       │                    webhook/manifests/validatingwebhookconfiguration.yaml, url =
//!       │                    https://127.0.0.1:<port>, caBundle, name kq-e2e-<ns>,
//!       │                    namespaceSelector {e2e.karmada-quota/webhook: kq-e2e-<ns>}
//!       │                    (the label is put on the test's namespaces only, so parallel
//!       │                    tests never see each other's webhooks); returns once the
//!       │                    apiserver really calls it (a dry-run probe moves the webhook's
//!       │                    decision counter); deleted by cleanup() or on drop
//!       ▼
//!  tests: Env::client() (kube's retry layer off: every refusal is seen as given),
//!         quota()/Rb builders, seed_used() (status.used "as the controller would"),
//!         create()/update() returning the apiserver's refusal, quota_usage(),
//!         wait_until_status_seen(), proxy::TcpProxy::round_robin (two webhooks behind
//!         one URL),
//!         review_client()/binding_review()/post_review() (reviews straight to a webhook,
//!         also used by the `kq-load` bench tool)
//! ```
//!
//! Without a controller nothing fills `status.used`, and the webhook answers
//! `status unknown` to every increase: tests that need a synced quota call [`seed_used`].

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_core::ResourceList;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::{list_from_api, quota_state};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{GroupVersionKind, Status};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::OnceCell;

use crate::env::cleanup_from_drop;
use crate::{
    Binary, Env, free_port, http_get, http_get_ok, replace_quota_status, try_wait_for,
    yaml_documents,
};

/// Also here, beside the webhook fixtures whose metrics it reads.
pub use crate::metrics::metric_sum;

/// The webhook binary.
pub const WEBHOOK_BIN: &str = "karmada-quota-webhook";
/// Name of the ResourceBinding webhook in the configuration (the apiserver quotes it in
/// every refusal: `admission webhook "<name>" denied the request: …`).
pub const BINDING_WEBHOOK: &str = "resourcebindings.quota.karmada.io";
/// Name of the KarmadaQuota webhook in the configuration.
pub const QUOTA_WEBHOOK: &str = "karmadaquotas.quota.karmada.io";
/// Name of the KarmadaClusterQuota webhook in the configuration.
pub const CLUSTER_QUOTA_WEBHOOK: &str = "karmadaclusterquotas.quota.karmada.io";
/// Namespace label the configuration of one test selects on; its value is the
/// configuration's name.
pub const NS_LABEL: &str = "e2e.karmada-quota/webhook";
/// The manifest the tests register, relative to the repository root.
pub const VWC_MANIFEST: &str = "webhook/manifests/validatingwebhookconfiguration.yaml";

/// How long the webhook may take to become ready (a debug build on a busy 2-core machine
/// starts in well under a second; the cache sync is one LIST).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// The apiserver's webhook-configuration informer lags about a second; a loaded machine
/// can make it several.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);
/// The webhook's quota watch delivers a status change in milliseconds; this is headroom.
const STATUS_SEEN_TIMEOUT: Duration = Duration::from_secs(20);
/// Reservation lifetime the tests run the webhook with: far beyond any test's length, so
/// an assertion on `status.reservations` can never race an entry's expiry on a loaded
/// machine (the default, 60 s, is the production value and is not what is under test).
pub const TEST_RESERVATION_TTL: &str = "10m";

/// The whole message the apiserver returns when the ResourceBinding webhook refuses with
/// `message`.
pub fn binding_denied(message: &str) -> String {
    format!("admission webhook \"{BINDING_WEBHOOK}\" denied the request: {message}")
}

/// The whole message the apiserver returns when the KarmadaQuota webhook refuses with
/// `message`.
pub fn quota_denied(message: &str) -> String {
    format!("admission webhook \"{QUOTA_WEBHOOK}\" denied the request: {message}")
}

// ---------------------------------------------------------------------------------------
// TLS
// ---------------------------------------------------------------------------------------

/// A CA and a serving certificate for 127.0.0.1 signed by it, made once per test process.
#[derive(Debug)]
pub struct WebhookTls {
    /// The CA certificate (PEM): what the configuration's caBundle holds.
    pub ca_cert: PathBuf,
    /// The serving certificate (PEM), subjectAltName IP:127.0.0.1.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// base64 of the CA PEM, ready for `clientConfig.caBundle`.
    pub ca_bundle: String,
}

static TLS: OnceCell<Result<WebhookTls, String>> = OnceCell::const_new();

impl WebhookTls {
    /// The process's certificates, generated with `openssl` on first use into
    /// `<cp dir>/webhook-tls-<pid>/` (or the log dir for `E2E_KUBECONFIG`).
    pub async fn get(env: &Env) -> Result<&'static WebhookTls> {
        let tls = TLS
            .get_or_init(|| async {
                let base = env.cp_dir().unwrap_or(env.log_dir());
                let dir = base.join(format!("webhook-tls-{}", std::process::id()));
                WebhookTls::generate(&dir)
                    .await
                    .map_err(|e| format!("{e:#}"))
            })
            .await;
        tls.as_ref()
            .map_err(|e| anyhow!("webhook certificates unavailable: {e}"))
    }

    /// A CA (EC P-256) and a leaf for 127.0.0.1 signed by it, in `dir`. A leaf apart from
    /// its CA satisfies both Go's verifier (the apiserver) and webpki (rustls clients),
    /// which refuses a CA certificate presented as a server's own.
    pub async fn generate(dir: &Path) -> Result<WebhookTls> {
        Self::generate_as(dir, "", 1).await
    }

    /// [`generate`](Self::generate) with `label` in both subjects (CA
    /// `CN=karmada-quota-e2e-ca-<label>`, leaf `O=<label>, CN=127.0.0.1`) and the leaf's
    /// serial `serial`: a second, distinct pair, e.g. to rotate the served certificate.
    /// An empty `label` gives [`generate`](Self::generate)'s subjects.
    pub async fn generate_as(dir: &Path, label: &str, serial: u32) -> Result<WebhookTls> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let (ca_subj, leaf_subj) = if label.is_empty() {
            (
                "/CN=karmada-quota-e2e-ca".to_owned(),
                "/CN=127.0.0.1".to_owned(),
            )
        } else {
            (
                format!("/CN=karmada-quota-e2e-ca-{label}"),
                format!("/O={label}/CN=127.0.0.1"),
            )
        };
        let serial = serial.to_string();
        let p = |f: &str| dir.join(f);
        let ext = p("leaf.ext");
        std::fs::write(
            &ext,
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
        )?;
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509"][..],
                &ec,
                &["-days", "30", "-subj", &ca_subj],
            ]
            .concat(),
            &[("-keyout", p("ca.key")), ("-out", p("ca.pem"))],
        )
        .await?;
        openssl(
            &[&["req"][..], &ec, &["-subj", &leaf_subj]].concat(),
            &[("-keyout", p("tls.key")), ("-out", p("tls.csr"))],
        )
        .await?;
        openssl(
            &["x509", "-req", "-days", "30", "-set_serial", &serial],
            &[
                ("-in", p("tls.csr")),
                ("-CA", p("ca.pem")),
                ("-CAkey", p("ca.key")),
                ("-extfile", ext),
                ("-out", p("tls.pem")),
            ],
        )
        .await?;
        let ca_pem = std::fs::read(p("ca.pem"))?;
        Ok(WebhookTls {
            ca_cert: p("ca.pem"),
            cert: p("tls.pem"),
            key: p("tls.key"),
            ca_bundle: crate::base64::encode(&ca_pem),
        })
    }
}

/// The SHA-256 fingerprint of the PEM certificate in `cert`, as
/// `openssl x509 -fingerprint -sha256` prints it (`AB:CD:…`).
pub async fn cert_fingerprint(cert: &Path) -> Result<String> {
    let out = tokio::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(cert)
        .stdin(Stdio::null())
        .output()
        .await
        .context("running openssl (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "openssl x509 -fingerprint {} failed ({}): {}",
            cert.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_fingerprint(&String::from_utf8_lossy(&out.stdout))
}

/// The SHA-256 fingerprint of the certificate `addr` serves now (a fresh TLS handshake
/// with `openssl s_client`, SNI `127.0.0.1`, nothing verified).
pub async fn served_fingerprint(addr: SocketAddr) -> Result<String> {
    let script = format!(
        "openssl s_client -connect {addr} -servername {ip} </dev/null 2>/dev/null \
         | openssl x509 -noout -fingerprint -sha256",
        ip = addr.ip()
    );
    let out = tokio::process::Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .output()
        .await
        .context("running openssl s_client")?;
    if !out.status.success() {
        bail!(
            "no certificate read from {addr} ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    parse_fingerprint(&String::from_utf8_lossy(&out.stdout))
}

/// `sha256 Fingerprint=AB:CD:…` (OpenSSL 3) or `SHA256 Fingerprint=…` (1.1) → `AB:CD:…`.
fn parse_fingerprint(text: &str) -> Result<String> {
    text.lines()
        .find_map(|l| {
            l.split_once("Fingerprint=")
                .map(|(_, f)| f.trim().to_owned())
        })
        .filter(|f| !f.is_empty())
        .ok_or_else(|| anyhow!("no fingerprint in openssl's output: {text:?}"))
}

async fn openssl(args: &[&str], paths: &[(&str, PathBuf)]) -> Result<()> {
    let mut cmd = tokio::process::Command::new("openssl");
    cmd.args(args);
    for (flag, path) in paths {
        cmd.arg(flag).arg(path);
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .await
        .context("running openssl (is it installed?)")?;
    if !out.status.success() {
        bail!(
            "openssl {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------
// The process
// ---------------------------------------------------------------------------------------

/// How to start the webhook; see [`Webhook::builder`].
#[derive(Debug, Default)]
pub struct WebhookBuilder {
    port: Option<u16>,
    tls: Option<(PathBuf, PathBuf)>,
    args: Vec<String>,
}

impl WebhookBuilder {
    /// Listen on this port (e.g. to restart a killed webhook behind the same URL);
    /// default: a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Serve this certificate and key (PEM files the test may rewrite, e.g. to rotate
    /// them); default: the process's shared [`WebhookTls`] files, which a test must
    /// never touch.
    pub fn tls_files(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.tls = Some((cert.into(), key.into()));
        self
    }

    /// An extra flag (after the fixture's own, so it wins where clap lets the last one).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Starts the webhook and waits until `/readyz` answers 200 (its quota cache synced).
    pub async fn start(self, env: &Env) -> Result<Webhook> {
        let mut webhook = self.spawn(env).await?;
        webhook.wait_until("/readyz", READY_TIMEOUT).await?;
        Ok(webhook)
    }

    /// Starts the webhook without waiting for anything.
    pub async fn spawn(self, env: &Env) -> Result<Webhook> {
        let tls = WebhookTls::get(env).await?;
        let port = match self.port {
            Some(p) => p,
            None => free_port()?,
        };
        let admin_port = free_port()?;
        let (cert, key) = match &self.tls {
            Some((cert, key)) => (cert.as_path(), key.as_path()),
            None => (tls.cert.as_path(), tls.key.as_path()),
        };
        let binary = Binary::builder(WEBHOOK_BIN)
            .arg(format!("--listen=127.0.0.1:{port}"))
            .arg(format!("--admin-listen=127.0.0.1:{admin_port}"))
            .arg("--kubeconfig")
            .arg(env.kubeconfig())
            .arg("--tls-cert-file")
            .arg(cert)
            .arg("--tls-private-key-file")
            .arg(key)
            .arg(format!("--reservation-ttl={TEST_RESERVATION_TTL}"))
            .arg("--log=info,karmada_quota_webhook=debug")
            .args(&self.args)
            .start(env)?;
        Ok(Webhook {
            binary,
            port,
            admin: SocketAddr::from(([127, 0, 0, 1], admin_port)),
        })
    }
}

/// A running `karmada-quota-webhook`; SIGKILLed when dropped.
#[derive(Debug)]
pub struct Webhook {
    binary: Binary,
    port: u16,
    admin: SocketAddr,
}

impl Webhook {
    /// A start with extra flags or a fixed port.
    pub fn builder() -> WebhookBuilder {
        WebhookBuilder::default()
    }

    /// Starts a webhook with the fixture's flags only.
    pub async fn start(env: &Env) -> Result<Webhook> {
        Self::builder().start(env).await
    }

    /// The HTTPS port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The HTTPS address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `https://127.0.0.1:<port>` (the manifest appends the paths).
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The admin address (`/metrics`, `/livez`, `/readyz`).
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin
    }

    /// Waits until the admin `path` (`/readyz`, `/livez`) answers 200; fails early if the
    /// process exits, and with its log tail on timeout.
    pub async fn wait_until(&mut self, path: &str, timeout: Duration) -> Result<()> {
        self.binary.wait_admin(self.admin, path, timeout).await
    }

    /// Whether `/readyz` answers 200 now.
    pub async fn is_ready(&self) -> bool {
        matches!(http_get(self.admin, "/readyz").await, Ok((200, _)))
    }

    /// The process handle (pid, log).
    pub fn binary(&mut self) -> &mut Binary {
        &mut self.binary
    }

    /// `/metrics` of the admin port, as text.
    pub async fn metrics(&self) -> Result<String> {
        http_get_ok(self.admin, "/metrics").await
    }

    /// Sum of `kq_webhook_decisions_total` over the label sets whose labels contain every
    /// `key="value"` fragment of `labels` (e.g. `kind="resourcebinding"`).
    pub async fn decisions(&self, labels: &[&str]) -> Result<u64> {
        Ok(metric_sum(
            &self.metrics().await?,
            "kq_webhook_decisions_total",
            labels,
        ))
    }

    /// SIGKILLs the webhook (no graceful shutdown) and waits for it.
    pub async fn kill(self) -> Result<()> {
        self.binary.stop().await
    }
}

// ---------------------------------------------------------------------------------------
// AdmissionReviews straight to a webhook
// ---------------------------------------------------------------------------------------

/// An HTTPS client for `base` (`https://127.0.0.1:<port>`) that trusts the CA in
/// `ca_pem` (a file): kube's client (hyper + rustls, ring), HTTP/1.1 with a connection
/// pool, used as a plain HTTPS client.
pub fn review_client(base: &str, ca_pem: &Path) -> Result<Client> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let certs = CertificateDer::pem_file_iter(ca_pem)
        .with_context(|| format!("reading {}", ca_pem.display()))?
        .map(|c| c.map(|c| c.as_ref().to_vec()))
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("parsing {}", ca_pem.display()))?;
    let mut config = kube::Config::new(base.parse().with_context(|| format!("url {base}"))?);
    config.root_cert = Some(certs);
    config.read_timeout = Some(Duration::from_secs(10));
    config.default_retry = false;
    Client::try_from(config).context("building the review client")
}

/// An AdmissionReview (admission.k8s.io/v1) of a ResourceBinding CREATE as the apiserver
/// sends it: `obj` with `metadata.uid` and `generation` 1 set, `request.uid` = `uid`.
pub fn binding_review(obj: &Value, uid: &str, dry_run: bool) -> Value {
    let mut object = obj.clone();
    object["metadata"]["uid"] = json!(uid);
    object["metadata"]["generation"] = json!(1);
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "work.karmada.io", "version": "v1alpha2", "kind": "ResourceBinding"},
            "resource": {"group": "work.karmada.io", "version": "v1alpha2", "resource": "resourcebindings"},
            "requestKind": {"group": "work.karmada.io", "version": "v1alpha2", "kind": "ResourceBinding"},
            "requestResource": {"group": "work.karmada.io", "version": "v1alpha2", "resource": "resourcebindings"},
            "name": object["metadata"]["name"],
            "namespace": object["metadata"]["namespace"],
            "operation": "CREATE",
            "userInfo": {"username": "kq-e2e", "groups": ["system:masters"]},
            "object": object,
            "oldObject": null,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        }
    })
}

/// POSTs `review` to `path` and returns the AdmissionReview's `response`.
pub async fn post_review(client: &Client, path: &str, review: &Value) -> Result<Value> {
    let request = axum::http::Request::post(path)
        .header("content-type", "application/json")
        .body(serde_json::to_vec(review)?)?;
    let text = client.request_text(request).await?;
    let answer: Value = serde_json::from_str(&text).with_context(|| format!("answer {text}"))?;
    answer
        .get("response")
        .cloned()
        .ok_or_else(|| anyhow!("an AdmissionReview without response: {text}"))
}

// ---------------------------------------------------------------------------------------
// Registration
// ---------------------------------------------------------------------------------------

static PROBES: AtomicUsize = AtomicUsize::new(0);

/// One test's ValidatingWebhookConfiguration. Delete it with [`Registration::cleanup`];
/// if the test panics first, dropping it deletes it (on a thread of its own, since the
/// test's runtime may be gone).
#[derive(Debug)]
pub struct Registration {
    name: String,
    armed: bool,
}

impl Registration {
    /// Registers the manifest's two webhooks at `url` for the namespaces `namespaces`
    /// (labelled here with [`NS_LABEL`]), and returns once the apiserver calls them: a
    /// dry-run ResourceBinding create in the first namespace must move the decision
    /// counter of one of `webhooks` (the processes behind `url`).
    pub async fn register(
        client: &Client,
        url: &str,
        namespaces: &[&str],
        webhooks: &[&Webhook],
    ) -> Result<Registration> {
        let tls = WebhookTls::get(Env::get().await?).await?;
        Self::register_with_ca(client, url, namespaces, webhooks, &tls.ca_bundle).await
    }

    /// [`register`](Self::register) with `ca_bundle` (base64 PEM, see
    /// [`WebhookTls::ca_bundle`]) as the configuration's caBundle instead of the
    /// process's shared CA: for a webhook serving a certificate of its own.
    pub async fn register_with_ca(
        client: &Client,
        url: &str,
        namespaces: &[&str],
        webhooks: &[&Webhook],
        ca_bundle: &str,
    ) -> Result<Registration> {
        let first = *namespaces
            .first()
            .ok_or_else(|| anyhow!("register: no namespace"))?;
        let name = format!("kq-e2e-{first}");
        let ns_api: Api<Namespace> = Api::all(client.clone());
        for ns in namespaces {
            ns_api
                .patch(
                    ns,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {NS_LABEL: &name}}})),
                )
                .await
                .with_context(|| format!("labelling namespace {ns}"))?;
        }
        let vwc = vwc_from_manifest(&name, url, ca_bundle, &name)?;
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        api.create(&PostParams::default(), &vwc)
            .await
            .with_context(|| format!("creating ValidatingWebhookConfiguration {name}"))?;
        let registration = Registration { name, armed: true };
        wait_called(client, first, webhooks).await?;
        Ok(registration)
    }

    /// The configuration's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the configuration.
    pub async fn cleanup(mut self) -> Result<()> {
        self.armed = false;
        delete_vwc(Env::get().await?.client()?, &self.name).await
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let name = self.name.clone();
        cleanup_from_drop(
            &format!("deleting ValidatingWebhookConfiguration {name}"),
            move |client| async move { delete_vwc(client, &name).await },
        );
    }
}

async fn delete_vwc(client: Client, name: &str) -> Result<()> {
    let api: Api<ValidatingWebhookConfiguration> = Api::all(client);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting ValidatingWebhookConfiguration {name}")),
    }
}

/// The manifest with its placeholders filled, renamed to `name`, each webhook limited to
/// namespaces labelled `NS_LABEL=<selector>` (no selector when `selector` is empty).
pub fn vwc_from_manifest(
    name: &str,
    url: &str,
    ca_bundle: &str,
    selector: &str,
) -> Result<ValidatingWebhookConfiguration> {
    let path = Env::repo_root().join(VWC_MANIFEST);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {}", path.display()))?
        .replace("${WEBHOOK_URL}", url)
        .replace("${CA_BUNDLE}", ca_bundle);
    let mut doc = yaml_documents(&text)?
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("{} is empty", path.display()))?;
    doc["metadata"]["name"] = json!(name);
    if !selector.is_empty() {
        for hook in doc["webhooks"]
            .as_array_mut()
            .ok_or_else(|| anyhow!("{} has no webhooks", path.display()))?
        {
            hook["namespaceSelector"] = json!({"matchLabels": {NS_LABEL: selector}});
            // A cluster-scoped object never skips a webhook for its namespace: the test's
            // KarmadaClusterQuotas carry the label themselves.
            if hook["name"] == CLUSTER_QUOTA_WEBHOOK {
                hook["objectSelector"] = json!({"matchLabels": {NS_LABEL: selector}});
            }
        }
    }
    serde_json::from_value(doc).context("the manifest is not a ValidatingWebhookConfiguration")
}

/// Waits until a dry-run ResourceBinding create in `ns` reaches one of `webhooks` (their
/// summed decision counter moves); the apiserver's configuration informer lags.
pub async fn wait_called(client: &Client, ns: &str, webhooks: &[&Webhook]) -> Result<()> {
    let probe = Rb::configmap(&format!(
        "kq-probe-{}",
        PROBES.fetch_add(1, Ordering::Relaxed)
    ))
    .json(ns);
    try_wait_for(
        "the apiserver to call the webhook",
        REGISTER_TIMEOUT,
        || async {
            let before = sum_decisions(webhooks).await?;
            let _ = create_with(client, &probe, true).await?;
            let after = sum_decisions(webhooks).await?;
            Ok::<_, anyhow::Error>((after > before).then_some(()))
        },
    )
    .await
}

async fn sum_decisions(webhooks: &[&Webhook]) -> Result<u64> {
    let mut sum = 0;
    for w in webhooks {
        sum += w.decisions(&["kind=\"resourcebinding\""]).await?;
    }
    Ok(sum)
}

// ---------------------------------------------------------------------------------------
// Objects
// ---------------------------------------------------------------------------------------

/// The ResourceBinding API resource (no discovery per call: the load loops create many).
pub fn binding_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("work.karmada.io", "v1alpha2", "ResourceBinding"),
        "resourcebindings",
    )
}

/// ResourceBindings of `ns`.
pub fn bindings(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &binding_resource())
}

/// A KarmadaQuota `name` in `ns` with `hard`.
pub fn quota(ns: &str, name: &str, hard: &[(&str, &str)]) -> Value {
    let hard: serde_json::Map<String, Value> = hard
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hard": hard}
    })
}

/// [`quota`] with one PriorityClass scope expression.
pub fn quota_scoped(
    ns: &str,
    name: &str,
    hard: &[(&str, &str)],
    operator: &str,
    values: &[&str],
) -> Value {
    let mut q = quota(ns, name, hard);
    let mut expr = json!({"scopeName": "PriorityClass", "operator": operator});
    if !values.is_empty() {
        expr["values"] = json!(values);
    }
    q["spec"]["scopeSelector"] = json!({"matchExpressions": [expr]});
    q
}

/// A ResourceBinding as Karmada's scheduler leaves it: a template, desired replicas,
/// per-replica requests and a placement.
#[derive(Clone, Debug)]
pub struct Rb {
    name: String,
    api_version: String,
    kind: String,
    replicas: i32,
    request: Vec<(String, String)>,
    priority_class: Option<String>,
    clusters: Option<Vec<(String, i32)>>,
    evictions: Vec<(String, Option<i32>)>,
}

impl Rb {
    /// A Deployment's binding, `replicas` replicas, no requests yet, all in `member1`.
    pub fn deployment(name: &str, replicas: i32) -> Rb {
        Rb {
            name: name.to_owned(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            replicas,
            request: Vec::new(),
            priority_class: None,
            clusters: None,
            evictions: Vec::new(),
        }
    }

    /// A ConfigMap's binding: no replicas, charged object counts only.
    pub fn configmap(name: &str) -> Rb {
        Rb {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            ..Rb::deployment(name, 0)
        }
    }

    /// A binding of any template kind, without replicas (a DaemonSet's, a CronJob's, a
    /// custom kind's that Karmada has no interpreter for).
    pub fn template(name: &str, api_version: &str, kind: &str) -> Rb {
        Rb {
            api_version: api_version.into(),
            kind: kind.into(),
            ..Rb::deployment(name, 0)
        }
    }

    /// Adds a per-replica request (`cpu`, `500m`).
    pub fn request(mut self, name: &str, quantity: &str) -> Rb {
        self.request.push((name.to_owned(), quantity.to_owned()));
        self
    }

    /// Sets the PriorityClass of the workload.
    pub fn priority_class(mut self, class: &str) -> Rb {
        self.priority_class = Some(class.to_owned());
        self
    }

    /// Sets the placement (cluster, replicas); default: all replicas in `member1`.
    pub fn clusters(mut self, clusters: &[(&str, i32)]) -> Rb {
        self.clusters = Some(
            clusters
                .iter()
                .map(|(c, r)| ((*c).to_owned(), *r))
                .collect(),
        );
        self
    }

    /// Adds a graceful-eviction task as Karmada's taint manager writes one on a failover:
    /// the workload left `cluster`, whose old `replicas` (absent: not said) drain there.
    pub fn evicted_from(mut self, cluster: &str, replicas: Option<i32>) -> Rb {
        self.evictions.push((cluster.to_owned(), replicas));
        self
    }

    /// The object, in namespace `ns`.
    pub fn json(&self, ns: &str) -> Value {
        let mut spec = json!({
            "resource": {
                "apiVersion": self.api_version,
                "kind": self.kind,
                "name": self.name,
                "namespace": ns,
            },
        });
        if self.replicas > 0 {
            spec["replicas"] = json!(self.replicas);
        }
        if !self.request.is_empty() || self.priority_class.is_some() {
            let request: serde_json::Map<String, Value> = self
                .request
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            let mut rr = json!({"resourceRequest": request});
            if let Some(pc) = &self.priority_class {
                rr["priorityClassName"] = json!(pc);
            }
            spec["replicaRequirements"] = rr;
        }
        let clusters: Vec<Value> = match &self.clusters {
            Some(cs) => cs
                .iter()
                .map(|(c, r)| json!({"name": c, "replicas": r}))
                .collect(),
            None if self.replicas > 0 => {
                vec![json!({"name": "member1", "replicas": self.replicas})]
            }
            None => vec![json!({"name": "member1"})],
        };
        spec["clusters"] = json!(clusters);
        if !self.evictions.is_empty() {
            let tasks: Vec<Value> = self
                .evictions
                .iter()
                .map(|(from, replicas)| {
                    let mut t = json!({
                        "fromCluster": from,
                        "purgeMode": "Gracefully",
                        "reason": "TaintUntolerated",
                        "message": format!("cluster {from} is not ready"),
                        "producer": "TaintManager",
                        "creationTimestamp": "2026-11-20T10:02:10Z",
                    });
                    if let Some(r) = replicas {
                        t["replicas"] = json!(r);
                    }
                    t
                })
                .collect();
            spec["gracefulEvictionTasks"] = json!(tasks);
        }
        json!({
            "apiVersion": "work.karmada.io/v1alpha2",
            "kind": "ResourceBinding",
            "metadata": {"name": self.name, "namespace": ns},
            "spec": spec,
        })
    }
}

/// What a create or update came to: the stored object, or the apiserver's refusal.
pub type Outcome = std::result::Result<DynamicObject, Box<Status>>;

/// Creates the ResourceBinding `obj` (a POST: admission sees CREATE), optionally as a
/// server-side dry run. An apiserver refusal is `Ok(Err(status))`; a transport failure is
/// an `Err`.
pub async fn create_with(client: &Client, obj: &Value, dry_run: bool) -> Result<Outcome> {
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .ok_or_else(|| anyhow!("binding without metadata.namespace"))?;
    let dynamic: DynamicObject = serde_json::from_value(obj.clone())?;
    let pp = PostParams {
        dry_run,
        ..PostParams::default()
    };
    match bindings(client, ns).create(&pp, &dynamic).await {
        Ok(o) => Ok(Ok(o)),
        Err(kube::Error::Api(s)) => Ok(Err(s)),
        Err(e) => Err(e).context("creating a ResourceBinding"),
    }
}

/// [`create_with`], not a dry run.
pub async fn create(client: &Client, obj: &Value) -> Result<Outcome> {
    create_with(client, obj, false).await
}

/// Replaces the ResourceBinding `obj` (a PUT of the stored object with `obj`'s spec:
/// admission sees UPDATE).
pub async fn update(client: &Client, obj: &Value) -> Result<Outcome> {
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .ok_or_else(|| anyhow!("binding without metadata.namespace"))?;
    let name = obj["metadata"]["name"]
        .as_str()
        .ok_or_else(|| anyhow!("binding without metadata.name"))?;
    let api = bindings(client, ns);
    let mut stored = api.get(name).await?;
    stored.data["spec"] = obj["spec"].clone();
    match api.replace(name, &PostParams::default(), &stored).await {
        Ok(o) => Ok(Ok(o)),
        Err(kube::Error::Api(s)) => Ok(Err(s)),
        Err(e) => Err(e).context("replacing a ResourceBinding"),
    }
}

/// Fails unless the outcome is a refusal with exactly `message` and `code`.
pub fn expect_refused(outcome: &Outcome, code: u16, message: &str) -> Result<()> {
    match outcome {
        Ok(o) => bail!(
            "expected a refusal ({code}: {message}), {} was stored",
            o.name_any()
        ),
        Err(s) if s.code == code && s.message == message => Ok(()),
        Err(s) => bail!(
            "refused, but not as expected.\n  want: {code} {message}\n  got:  {} {} ({})",
            s.code,
            s.message,
            s.reason
        ),
    }
}

/// Fails unless the outcome is a stored object; returns it.
pub fn expect_admitted(outcome: Outcome) -> Result<DynamicObject> {
    outcome.map_err(|s| {
        anyhow!(
            "expected the binding to be admitted; refused ({} {}): {}",
            s.code,
            s.reason,
            s.message
        )
    })
}

// ---------------------------------------------------------------------------------------
// Quota status
// ---------------------------------------------------------------------------------------

/// Writes `status.used` (and `status.hard` = `spec.hard`) of a quota the way the
/// controller does: a status replace with the read resourceVersion, retried on conflict.
/// Reservations are kept as they are.
pub async fn seed_used(
    client: &Client,
    ns: &str,
    quota: &str,
    used: &[(&str, &str)],
) -> Result<KarmadaQuota> {
    let used: std::collections::BTreeMap<_, _> = used
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity((*v).to_owned()),
            )
        })
        .collect();
    replace_quota_status(
        client,
        ns,
        quota,
        &format!("seeding status.used of {ns}/{quota}"),
        |spec, status| {
            status.used = used.clone();
            status.hard = spec.hard.clone();
        },
    )
    .await
}

/// A quota's status in the engine's terms.
#[derive(Clone, Debug)]
pub struct QuotaUsage {
    /// The object as read.
    pub object: KarmadaQuota,
    /// `status.used`.
    pub used: ResourceList,
    /// `status.reservations` (all of them: the tests run with a long TTL).
    pub reservations: Vec<karmada_quota_crds::quota::Reservation>,
    /// `used + Σ reservations`.
    pub effective: ResourceList,
}

impl QuotaUsage {
    /// The effective usage of `name` in whole units (millis rounded up), 0 when absent.
    pub fn effective_of(&self, name: &str) -> i128 {
        self.effective.get_or_zero(name).value()
    }

    /// The reservation entry of binding `uid`, if any.
    pub fn reservation_of(&self, uid: &str) -> Option<&karmada_quota_crds::quota::Reservation> {
        self.reservations.iter().find(|r| r.reserved_by.uid == uid)
    }
}

/// Reads a quota and sums its effective usage.
pub async fn quota_usage(client: &Client, ns: &str, quota: &str) -> Result<QuotaUsage> {
    let object = Api::<KarmadaQuota>::namespaced(client.clone(), ns)
        .get(quota)
        .await
        .with_context(|| format!("reading KarmadaQuota {ns}/{quota}"))?;
    let status = object.status.clone().unwrap_or_default();
    let used = list_from_api(&status.used, "status.used").map_err(|e| anyhow!("{e}"))?;
    // quota_state validates the entries; its errors name the field.
    let state = quota_state(&object).map_err(|errs| {
        anyhow!(
            "{ns}/{quota}: {}",
            errs.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    let effective = karmada_quota_core::ledger::effective_usage(&used, &state.reservations, None);
    Ok(QuotaUsage {
        object,
        used,
        reservations: status.reservations,
        effective,
    })
}

/// Dry-run creates `probe` (a binding the quota charges) until the webhook stops
/// answering `status unknown`: its cache has the seeded `status.used`.
pub async fn wait_until_status_seen(client: &Client, probe: &Value) -> Result<()> {
    try_wait_for(
        "the webhook to see the seeded status.used",
        STATUS_SEEN_TIMEOUT,
        || async {
            let outcome = create_with(client, probe, true).await?;
            Ok::<_, anyhow::Error>(match outcome {
                Err(s) if s.message.contains("status unknown") => None,
                _ => Some(()),
            })
        },
    )
    .await
}

/// Dry-run creates `probe` until the apiserver refuses it with a message containing
/// `fragment`: the webhook's cache has caught up with a spec or status change that makes
/// `probe` fail (e.g. a lowered limit).
pub async fn wait_until_dry_run_refused(
    client: &Client,
    probe: &Value,
    fragment: &str,
) -> Result<()> {
    try_wait_for(
        &format!("a dry-run create refused with {fragment:?}"),
        STATUS_SEEN_TIMEOUT,
        || async {
            let outcome = create_with(client, probe, true).await?;
            Ok::<_, anyhow::Error>(match outcome {
                Err(s) if s.message.contains(fragment) => Some(()),
                _ => None,
            })
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_fingerprint_takes_the_value_after_the_label() {
        assert_eq!(
            parse_fingerprint("sha256 Fingerprint=AB:CD:01\n").unwrap(),
            "AB:CD:01"
        );
        assert_eq!(
            parse_fingerprint("SHA256 Fingerprint=AB:CD\n").unwrap(),
            "AB:CD"
        );
        assert!(parse_fingerprint("").is_err());
        assert!(parse_fingerprint("sha256 Fingerprint=\n").is_err());
    }

    #[test]
    fn bindings_default_to_one_cluster_holding_every_replica() {
        let rb = Rb::deployment("web", 3).request("cpu", "1").json("ns");
        assert_eq!(rb["spec"]["replicas"], 3);
        assert_eq!(
            rb["spec"]["clusters"],
            json!([{"name": "member1", "replicas": 3}])
        );
        assert_eq!(
            rb["spec"]["replicaRequirements"]["resourceRequest"]["cpu"],
            "1"
        );
        let cm = Rb::configmap("settings").json("ns");
        assert!(cm["spec"].get("replicas").is_none());
        assert!(cm["spec"].get("replicaRequirements").is_none());
    }
}
