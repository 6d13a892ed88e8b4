//! A webhook test's setting: its namespaces, a `karmada-quota-webhook` routed to them by
//! its own registration, and the small steps every such test takes.

use anyhow::Result;
use kube::Client;

use crate::webhook::{Registration, Webhook, WebhookBuilder, quota, seed_used};
use crate::{Env, TestNs, accepts};

/// Prints a test step (`[Create] …`) to the test's output.
pub fn step(s: &str) {
    eprintln!("{s}");
}

/// A test's namespaces, its webhook and the registration that routes them to it.
pub struct WebhookSetup {
    /// The environment.
    pub env: &'static Env,
    /// A client for apiserver 0.
    pub client: Client,
    /// The test's namespaces (the first is [`WebhookSetup::ns`]).
    pub namespaces: Vec<TestNs>,
    /// The webhook process.
    pub webhook: Webhook,
    /// Its registration.
    pub registration: Registration,
}

impl WebhookSetup {
    /// One namespace, one webhook.
    pub async fn new(test: &str) -> Result<WebhookSetup> {
        Self::start(test, 1, Webhook::builder()).await
    }

    /// `n` namespaces sharing one webhook and one registration.
    pub async fn with_namespaces(test: &str, n: usize) -> Result<WebhookSetup> {
        Self::start(test, n, Webhook::builder()).await
    }

    /// One namespace, one webhook started by `builder` (extra flags).
    pub async fn with_webhook(test: &str, builder: WebhookBuilder) -> Result<WebhookSetup> {
        Self::start(test, 1, builder).await
    }

    async fn start(test: &str, n: usize, builder: WebhookBuilder) -> Result<WebhookSetup> {
        let env = Env::get().await?;
        let client = env.client()?;
        let mut namespaces = Vec::with_capacity(n);
        for _ in 0..n {
            namespaces.push(TestNs::new(&client, test).await?);
        }
        let webhook = builder.start(env).await?;
        let names: Vec<&str> = namespaces.iter().map(TestNs::name).collect();
        let registration =
            Registration::register(&client, &webhook.url(), &names, &[&webhook]).await?;
        step(&format!(
            "[Setup] webhook {} registered as {} for {}",
            webhook.url(),
            registration.name(),
            names.join(", ")
        ));
        Ok(WebhookSetup {
            env,
            client,
            namespaces,
            webhook,
            registration,
        })
    }

    /// The first namespace.
    pub fn ns(&self) -> &str {
        self.namespaces[0].name()
    }

    /// Unregisters the webhook, deletes the namespaces, stops the webhook.
    pub async fn teardown(self) -> Result<()> {
        self.registration.cleanup().await?;
        for ns in self.namespaces {
            ns.delete(&self.client).await?;
        }
        drop(self.webhook);
        Ok(())
    }
}

/// Creates a quota and seeds `status.used` to zero for each of its hard names (what the
/// controller writes when it first syncs an empty namespace).
pub async fn synced_quota(c: &Client, ns: &str, name: &str, hard: &[(&str, &str)]) -> Result<()> {
    accepts(c, &quota(ns, name, hard)).await?;
    let zeros: Vec<(&str, &str)> = hard.iter().map(|(k, _)| (*k, "0")).collect();
    seed_used(c, ns, name, &zeros).await?;
    Ok(())
}
