//! P3 through the apiserver: LIST every ResourceBinding in pages, as the controller's
//! watch does at start, timing the transfer and the typed deserialization of the same
//! bytes separately (the controller's floor for a re-list).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use karmada_quota_crds::ResourceBinding;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::ObjectList;
use serde_json::{Value, json};

pub(crate) async fn client(kubeconfig: &Path) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(120));
    Ok(Client::try_from(config)?)
}

/// List all bindings in pages of `page` (consistent, from etcd), or with `any` in one
/// `resourceVersion=0` list from the apiserver's watch cache (what the controller's
/// watches ask for: `any_semantic`); the JSON report.
pub async fn run(kubeconfig: &Path, page: usize, any: bool) -> Result<Value> {
    let client = client(kubeconfig).await?;
    let (mut transfer, mut deserialize) = (Duration::ZERO, Duration::ZERO);
    let (mut count, mut bytes, mut pages) = (0usize, 0usize, 0usize);
    let mut cont: Option<String> = None;
    loop {
        let mut url = if any {
            "/apis/work.karmada.io/v1alpha2/resourcebindings?resourceVersion=0".to_owned()
        } else {
            format!("/apis/work.karmada.io/v1alpha2/resourcebindings?limit={page}")
        };
        if let Some(c) = &cont {
            url.push_str("&continue=");
            url.push_str(c);
        }
        let t = Instant::now();
        let text = client
            .request_text(axum::http::Request::get(url).body(Vec::new())?)
            .await
            .context("listing ResourceBindings")?;
        transfer += t.elapsed();
        bytes += text.len();
        let t = Instant::now();
        let list: ObjectList<ResourceBinding> = serde_json::from_str(&text)?;
        deserialize += t.elapsed();
        count += list.items.len();
        pages += 1;
        cont = list.metadata.continue_.filter(|c| !c.is_empty());
        if cont.is_none() {
            break;
        }
    }
    Ok(json!({
        "bench": "list-bindings",
        "semantic": if any { "any (watch cache)" } else { "consistent (etcd, paged)" },
        "bindings": count,
        "pages": pages,
        "bytes_per_binding": bytes as f64 / count.max(1) as f64,
        "transfer_s": transfer.as_secs_f64(),
        "deserialize_s": deserialize.as_secs_f64(),
    }))
}
