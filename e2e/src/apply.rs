//! Creating objects of any kind from YAML or JSON, and admission assertions.

use anyhow::{Context, Result, anyhow, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{GroupVersionKind, TypeMeta};
use kube::discovery::{self, ApiCapabilities, ApiResource, Scope};
use kube::{Client, ResourceExt};
use serde_json::Value;

use crate::FIELD_MANAGER;

/// Splits a (multi-document) YAML string into JSON values, skipping empty documents.
pub fn yaml_documents(yaml: &str) -> Result<Vec<Value>> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).context("parsing YAML")?;
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// The API resource and its capabilities for an object's `apiVersion` and `kind`, by
/// discovery against the apiserver.
pub async fn resolve(client: &Client, obj: &Value) -> Result<(ApiResource, ApiCapabilities)> {
    let types: TypeMeta =
        serde_json::from_value(obj.clone()).context("object without apiVersion and kind")?;
    let gvk = GroupVersionKind::try_from(&types)
        .with_context(|| format!("bad apiVersion {:?}", types.api_version))?;
    discovery::pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {}/{} {}", gvk.group, gvk.version, gvk.kind))
}

/// An `Api` for `obj`'s kind, in `obj`'s namespace if the kind is namespaced.
async fn api_for(client: &Client, obj: &Value) -> Result<Api<DynamicObject>> {
    let (ar, caps) = resolve(client, obj).await?;
    match caps.scope {
        Scope::Namespaced => {
            let ns = obj
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .ok_or_else(|| anyhow!("namespaced {} without metadata.namespace", ar.kind))?;
            Ok(Api::namespaced_with(client.clone(), ns, &ar))
        }
        Scope::Cluster => Ok(Api::all_with(client.clone(), &ar)),
    }
}

fn describe(obj: &Value) -> String {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("?");
    let name = obj
        .pointer("/metadata/name")
        .or_else(|| obj.pointer("/metadata/generateName"))
        .and_then(Value::as_str)
        .unwrap_or("?");
    match obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// Server-side applies every document of `yaml`, namespaced ones into `ns` (their
/// `metadata.namespace` is overwritten), and returns the objects as the apiserver stored
/// them.
pub async fn apply_yaml(client: &Client, ns: &str, yaml: &str) -> Result<Vec<DynamicObject>> {
    let mut applied = Vec::new();
    for doc in yaml_documents(yaml)? {
        applied.push(apply_json(client, ns, doc).await?);
    }
    Ok(applied)
}

/// Server-side applies one object (field manager [`FIELD_MANAGER`], conflicts forced); a
/// namespaced object goes into `ns`.
pub async fn apply_json(client: &Client, ns: &str, mut obj: Value) -> Result<DynamicObject> {
    let what = describe(&obj);
    let (ar, caps) = resolve(client, &obj).await?;
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or_else(|| anyhow!("{what}: server-side apply needs metadata.name"))?
        .to_owned();
    let api: Api<DynamicObject> = match caps.scope {
        Scope::Namespaced => {
            obj.pointer_mut("/metadata")
                .and_then(Value::as_object_mut)
                .ok_or_else(|| anyhow!("{what} has no metadata"))?
                .insert("namespace".into(), ns.into());
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying {}", describe(&obj)))
}

/// Creates `obj` (a POST, so admission sees a CREATE) and returns what the apiserver stored;
/// fails with the apiserver's message if it refused.
pub async fn accepts(client: &Client, obj: &Value) -> Result<DynamicObject> {
    let api = api_for(client, obj).await?;
    let dynamic: DynamicObject =
        serde_json::from_value(obj.clone()).context("object is not a Kubernetes object")?;
    match api.create(&PostParams::default(), &dynamic).await {
        Ok(created) => Ok(created),
        Err(kube::Error::Api(status)) => bail!(
            "expected the apiserver to accept {}, it refused ({} {}): {}",
            describe(obj),
            status.code,
            status.reason,
            status.message
        ),
        Err(e) => Err(e).with_context(|| format!("creating {}", describe(obj))),
    }
}

/// Tries to create `obj` and asserts the apiserver refused it with a message containing
/// `fragment`; returns the whole message. If it was created after all, it is deleted again
/// (without waiting) and the call fails.
pub async fn rejects(client: &Client, obj: &Value, fragment: &str) -> Result<String> {
    let api = api_for(client, obj).await?;
    let dynamic: DynamicObject =
        serde_json::from_value(obj.clone()).context("object is not a Kubernetes object")?;
    match api.create(&PostParams::default(), &dynamic).await {
        Ok(created) => {
            let _ = api.delete(&created.name_any(), &Default::default()).await;
            bail!(
                "expected the apiserver to reject {} (message containing {fragment:?}), \
                 it was created",
                describe(obj)
            )
        }
        Err(kube::Error::Api(status)) => {
            if status.message.contains(fragment) {
                Ok(status.message)
            } else {
                bail!(
                    "{} was rejected, but the message lacks {fragment:?}.\n\
                     Whole message ({} {}):\n{}",
                    describe(obj),
                    status.code,
                    status.reason,
                    status.message
                )
            }
        }
        Err(e) => Err(e).with_context(|| {
            format!(
                "creating {} failed without an apiserver refusal",
                describe(obj)
            )
        }),
    }
}
