//! An admission webhook served by the test process itself, for tests that need the
//! apiserver to call something of theirs on a write: refuse it (a status writer that
//! fails) or act before answering (another admission in the middle of a release).
//!
//! ```text
//!  TestHook::start(client, env, kind, name, handler, webhook)
//!      serves POST /hook on 127.0.0.1:<free port> with the process's test certificate
//!      (WebhookTls) and registers {Validating,Mutating}WebhookConfiguration `name` with
//!      the one `webhook` entry given, its clientConfig pointed there
//!  TestHook::stop   deletes the configuration, stops serving
//! ```
//!
//! The handler gets each AdmissionReview's `request` and answers with [`allow`] or
//! [`refuse`] (an admission response without patch).

use std::future::Future;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use axum::Json;
use axum::routing::post;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DeleteParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::webhook::WebhookTls;
use crate::{Env, free_port};

/// Path the hook serves.
const PATH: &str = "/hook";

/// Which kind of configuration registers the hook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookKind {
    /// A ValidatingWebhookConfiguration.
    Validating,
    /// A MutatingWebhookConfiguration (runs before every validating webhook).
    Mutating,
}

/// A served and registered test webhook; [`TestHook::stop`] removes it.
pub struct TestHook {
    name: String,
    kind: HookKind,
    client: Client,
    server: tokio::task::JoinHandle<()>,
}

/// The response allowing `request` (no patch).
pub fn allow(request: &Value) -> Value {
    json!({"uid": request["uid"].clone(), "allowed": true})
}

/// The response refusing `request` with 403 and `message`.
pub fn refuse(request: &Value, message: &str) -> Value {
    json!({
        "uid": request["uid"].clone(),
        "allowed": false,
        "status": {"code": 403, "reason": "Forbidden", "message": message},
    })
}

impl TestHook {
    /// Serve `handler` (AdmissionReview `request` → response) and register `webhook` (one
    /// entry of the configuration's `webhooks`, without `clientConfig`) as `name`.
    pub async fn start<H, F>(
        client: &Client,
        env: &Env,
        kind: HookKind,
        name: &str,
        handler: H,
        mut webhook: Value,
    ) -> Result<TestHook>
    where
        H: Fn(Value) -> F + Clone + Send + Sync + 'static,
        F: Future<Output = Value> + Send + 'static,
    {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = WebhookTls::get(env).await?;
        let config = axum_server::tls_rustls::RustlsConfig::from_pem_file(&tls.cert, &tls.key)
            .await
            .context("loading the test certificate")?;
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let app = axum::Router::new().route(
            PATH,
            post(move |Json(review): Json<Value>| {
                let handler = handler.clone();
                async move {
                    let response = handler(review["request"].clone()).await;
                    Json(json!({
                        "apiVersion": "admission.k8s.io/v1",
                        "kind": "AdmissionReview",
                        "response": response,
                    }))
                }
            }),
        );
        let server = tokio::spawn(async move {
            let _ = axum_server::bind_rustls(addr, config)
                .serve(app.into_make_service())
                .await;
        });
        webhook["clientConfig"] = json!({
            "url": format!("https://{addr}{PATH}"),
            "caBundle": tls.ca_bundle,
        });
        let hook = TestHook {
            name: name.to_owned(),
            kind,
            client: client.clone(),
            server,
        };
        let config = json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "metadata": {"name": name},
            "webhooks": [webhook],
        });
        let created = match kind {
            HookKind::Validating => create::<ValidatingWebhookConfiguration>(client, config).await,
            HookKind::Mutating => create::<MutatingWebhookConfiguration>(client, config).await,
        };
        if let Err(e) = created {
            hook.server.abort();
            return Err(e).with_context(|| format!("creating the {kind:?} configuration {name}"));
        }
        Ok(hook)
    }

    /// Delete the configuration and stop serving.
    pub async fn stop(self) -> Result<()> {
        let deleted = match self.kind {
            HookKind::Validating => {
                delete::<ValidatingWebhookConfiguration>(&self.client, &self.name).await
            }
            HookKind::Mutating => {
                delete::<MutatingWebhookConfiguration>(&self.client, &self.name).await
            }
        };
        self.server.abort();
        deleted.with_context(|| format!("deleting {}", self.name))
    }
}

/// Create the configuration `config` (its `kind` is `K`'s).
async fn create<K>(client: &Client, mut config: Value) -> Result<()>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Serialize + Clone + std::fmt::Debug,
{
    config["kind"] = json!(K::kind(&()));
    let obj: K = serde_json::from_value(config)?;
    Api::<K>::all(client.clone())
        .create(&PostParams::default(), &obj)
        .await?;
    Ok(())
}

/// Delete the configuration `name` of kind `K`.
async fn delete<K>(client: &Client, name: &str) -> Result<()>
where
    K: Resource<DynamicType = ()> + DeserializeOwned + Clone + std::fmt::Debug,
{
    Api::<K>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(())
}
