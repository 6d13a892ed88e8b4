//! A ResourceBinding create or update through the apiserver, and what it came to
//! ([`Outcome`]: the stored object, or the apiserver's refusal as given), with the checks
//! the tests make of it.

use anyhow::{Context, Result, anyhow, bail};
use kube::api::{DynamicObject, PostParams};
use kube::core::Status;
use kube::{Client, ResourceExt};
use serde_json::Value;

use super::objects::bindings;

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
