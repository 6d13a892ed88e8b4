//! The waiting line under test (docs/queueing.md): the arrivals' MutatingWebhookConfiguration
//! beside a test's validating one, waiting bindings as Karmada's detector creates them (no
//! cluster chosen), and readers of who waits and who was released.
//!
//! ```text
//!  Arrivals::register(client, setup)   MutatingWebhookConfiguration kq-e2e-<ns>-arrivals from
//!                                      webhook/manifests/mutatingwebhookconfiguration.yaml,
//!                                      for the setup's namespaces; deleted on cleanup/drop
//!  unplaced(name, cpu, priority)       a Deployment binding without spec.clusters
//!  waiting(obj)                        suspended + our mark (the line's rule, from core)
//!  BindingStates::read(client, ns)     name → (waiting?, cpu asked) for every binding
//! ```
//!
//! There is no Karmada scheduler on the loopback plane: a binding counts as scheduled once
//! its suspension is cleared (the scheduler would then place it).

use std::collections::BTreeMap;

use anyhow::{Context, Result, anyhow};
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use karmada_quota_core::queue::{ANNOTATION_QUEUED_AT, is_waiting};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::{Value, json};

use crate::env::cleanup_from_drop;
use crate::setup::WebhookSetup;
use crate::webhook::{NS_LABEL, Rb, Webhook, WebhookTls, bindings, create_with};
use crate::{Env, try_wait_for, yaml_documents};

/// The arrivals' manifest.
pub const MWC_MANIFEST: &str = "webhook/manifests/mutatingwebhookconfiguration.yaml";

/// One test's MutatingWebhookConfiguration (the arrivals), for the namespaces of its
/// [`WebhookSetup`] (same label selector, same webhook process).
#[derive(Debug)]
pub struct Arrivals {
    name: String,
    armed: bool,
}

impl Arrivals {
    /// Register the arrivals for `setup`'s namespaces at its webhook.
    pub async fn register(client: &Client, setup: &WebhookSetup) -> Result<Arrivals> {
        let arrivals =
            Self::register_where(client, &setup.webhook, setup.registration.name(), &[]).await?;
        arrivals
            .wait_called(client, setup.ns(), &setup.webhook)
            .await?;
        Ok(arrivals)
    }

    /// Register the arrivals at `webhook` for the namespaces labelled
    /// `NS_LABEL=<selector>` that also carry every label of `also` (the chart's
    /// `quota.karmada.io/waiting-line=true`, say), without waiting for the apiserver to
    /// call it ([`Arrivals::wait_called`]).
    pub async fn register_where(
        client: &Client,
        webhook: &Webhook,
        selector: &str,
        also: &[(&str, &str)],
    ) -> Result<Arrivals> {
        let tls = WebhookTls::get(Env::get().await?).await?;
        let name = format!("{selector}-arrivals");
        let path = Env::repo_root().join(MWC_MANIFEST);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?
            .replace("${WEBHOOK_URL}", &webhook.url())
            .replace("${CA_BUNDLE}", &tls.ca_bundle);
        let mut doc = yaml_documents(&text)?
            .into_iter()
            .next()
            .ok_or_else(|| anyhow!("{} is empty", path.display()))?;
        doc["metadata"]["name"] = json!(name);
        let mut labels = serde_json::Map::new();
        labels.insert(NS_LABEL.to_owned(), json!(selector));
        for (k, v) in also {
            labels.insert((*k).to_owned(), json!(v));
        }
        for hook in doc["webhooks"]
            .as_array_mut()
            .ok_or_else(|| anyhow!("{} has no webhooks", path.display()))?
        {
            hook["namespaceSelector"] = json!({"matchLabels": labels});
        }
        let mwc: MutatingWebhookConfiguration = serde_json::from_value(doc)
            .context("the manifest is not a MutatingWebhookConfiguration")?;
        Api::<MutatingWebhookConfiguration>::all(client.clone())
            .create(&PostParams::default(), &mwc)
            .await
            .with_context(|| format!("creating MutatingWebhookConfiguration {name}"))?;
        Ok(Arrivals { name, armed: true })
    }

    /// Wait until a dry-run create in `ns` reaches `webhook`'s arrivals path (the
    /// apiserver's configuration informer lags).
    pub async fn wait_called(&self, client: &Client, ns: &str, webhook: &Webhook) -> Result<()> {
        let probe = Rb::configmap("kq-arrivals-probe").json(ns);
        try_wait_for(
            "the apiserver to call the arrivals webhook",
            std::time::Duration::from_secs(30),
            || async {
                let before = arrival_reviews(webhook).await?;
                let _ = create_with(client, &probe, true).await?;
                let after = arrival_reviews(webhook).await?;
                Ok::<_, anyhow::Error>((after > before).then_some(()))
            },
        )
        .await
    }

    /// Delete the configuration.
    pub async fn cleanup(mut self) -> Result<()> {
        self.armed = false;
        delete_mwc(Env::get().await?.client()?, &self.name).await
    }
}

impl Drop for Arrivals {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let name = self.name.clone();
        cleanup_from_drop(
            &format!("deleting MutatingWebhookConfiguration {name}"),
            move |client| async move { delete_mwc(client, &name).await },
        );
    }
}

async fn delete_mwc(client: Client, name: &str) -> Result<()> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting MutatingWebhookConfiguration {name}")),
    }
}

/// How many arrivals reviews `webhook` has decided.
pub async fn arrival_reviews(webhook: &Webhook) -> Result<u64> {
    webhook
        .decisions(&["kind=\"resourcebinding_arrival\""])
        .await
}

/// A Deployment's binding as the detector creates it: `cpu` cores × 1 replica, no cluster
/// chosen yet, `spec.schedulePriority.priority` = `priority`.
pub fn unplaced(ns: &str, name: &str, cpu: &str, priority: i32) -> Value {
    let mut v = Rb::deployment(name, 1).request("cpu", cpu).json(ns);
    if let Some(spec) = v["spec"].as_object_mut() {
        spec.remove("clusters");
        spec.insert("schedulePriority".into(), json!({"priority": priority}));
    }
    v
}

/// Whether a binding object waits in a line (suspended, marked, unplaced: core's rule).
pub fn waiting(obj: &Value) -> bool {
    let Ok(rb) = serde_json::from_value::<karmada_quota_crds::ResourceBinding>(obj.clone()) else {
        return false;
    };
    is_waiting(rb.metadata.annotations.as_ref(), &rb.spec)
}

/// Whether a binding object carries our mark.
pub fn marked(obj: &Value) -> bool {
    obj["metadata"]["annotations"][ANNOTATION_QUEUED_AT].is_string()
}

/// Every binding of a namespace: name → waiting?
pub async fn binding_states(client: &Client, ns: &str) -> Result<BTreeMap<String, bool>> {
    let list = bindings(client, ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing ResourceBindings in {ns}"))?;
    Ok(states_of(&list.items))
}

/// Whether each of `items` (listed bindings) is waiting, by name.
pub fn states_of(items: &[DynamicObject]) -> BTreeMap<String, bool> {
    items
        .iter()
        .map(|o| {
            let name = o.metadata.name.clone().unwrap_or_default();
            let v = serde_json::to_value(o).unwrap_or_default();
            (name, waiting(&v))
        })
        .collect()
}

/// Dry-run creates a 1m-cpu binding in `ns` until it is admitted without waiting: the
/// webhook's cache has seen the queueing quota's status (before that, an arrival waits for
/// a status it cannot read, and a test's first filler would join the line).
pub async fn wait_until_arrivals_fit(client: &Client, ns: &str) -> Result<()> {
    let probe = unplaced(ns, "probe", "1m", 0);
    try_wait_for(
        "the webhook to admit an arrival that fits without suspending it",
        std::time::Duration::from_secs(30),
        || async {
            let outcome = create_with(client, &probe, true).await?;
            Ok::<_, anyhow::Error>(match outcome {
                Ok(obj) if !waiting(&serde_json::to_value(&obj)?) => Some(()),
                _ => None,
            })
        },
    )
    .await
}
