//! One test's ValidatingWebhookConfiguration: the manifest's webhooks pointed at a
//! test's webhook URL and limited to the test's namespaces (labelled [`NS_LABEL`]),
//! registered until the apiserver really calls them, deleted by `cleanup()` or on drop;
//! the webhooks' names, as the apiserver quotes them in every refusal.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

use super::objects::Rb;
use super::outcome::create_with;
use super::process::Webhook;
use super::tls::WebhookTls;
use crate::env::cleanup_from_drop;
use crate::{Env, try_wait_for, yaml_documents};

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

/// The apiserver's webhook-configuration informer lags about a second; a loaded machine
/// can make it several.
const REGISTER_TIMEOUT: Duration = Duration::from_secs(30);

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
