//! AdmissionReviews straight to a webhook, without the apiserver: an HTTPS client that
//! trusts the test CA, a ResourceBinding CREATE review as the apiserver sends it, and the
//! POST that returns its `response` (also used by the `kq-load` bench tool).

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use kube::Client;
use serde_json::{Value, json};

/// An HTTPS client for `base` (`https://127.0.0.1:<port>`) that trusts the CA in
/// `ca_pem` (a file): kube's client (hyper + rustls, ring), HTTP/1.1 with a connection
/// pool, used as a plain HTTPS client.
pub fn review_client(base: &str, ca_pem: &Path) -> Result<Client> {
    Client::try_from(review_config(base, ca_pem)?).context("building the review client")
}

/// [`review_client`] presenting the client certificate `cert` with its key `key` (PEM
/// files), as the apiserver does to a webhook that requires one.
pub fn review_client_as(base: &str, ca_pem: &Path, cert: &Path, key: &Path) -> Result<Client> {
    let mut config = review_config(base, ca_pem)?;
    config.auth_info.client_certificate = Some(cert.display().to_string());
    config.auth_info.client_key = Some(key.display().to_string());
    Client::try_from(config).context("building a review client with a client certificate")
}

fn review_config(base: &str, ca_pem: &Path) -> Result<kube::Config> {
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
    Ok(config)
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
