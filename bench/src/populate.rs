//! P3 cold start: fills an apiserver with many KarmadaQuotas — Q quotas over
//! N namespaces, each with a synced status as the controller and the webhook leave it (the
//! same objects as the in-process `webhook-cache` bench) — through the API, many requests
//! in flight, so that a webhook or controller can then be started cold against them.

use std::path::Path;

use anyhow::{Context, Result};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_crds::KarmadaQuota;
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use serde_json::{Value, json};

/// Create `namespaces` namespaces (`team-NNNNN`) and `quotas` quotas over them, then write
/// each quota's status; `concurrency` requests in flight. The JSON report.
pub async fn run(
    kubeconfig: &Path,
    quotas: usize,
    namespaces: usize,
    concurrency: usize,
) -> Result<Value> {
    let client = crate::list_bindings::client(kubeconfig).await?;
    let started = std::time::Instant::now();
    let ns_api: Api<Namespace> = Api::all(client.clone());
    futures::stream::iter(0..namespaces)
        .map(|n| {
            let api = ns_api.clone();
            async move {
                let ns = Namespace {
                    metadata: ObjectMeta {
                        name: Some(crate::webhook_cache::namespace(n)),
                        ..ObjectMeta::default()
                    },
                    ..Namespace::default()
                };
                match api.create(&PostParams::default(), &ns).await {
                    Ok(_) => Ok(()),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                    Err(e) => Err(e).with_context(|| format!("creating namespace {n}")),
                }
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    let namespaced_s = started.elapsed().as_secs_f64();
    futures::stream::iter(0..quotas)
        .map(|k| {
            let client = client.clone();
            async move {
                let mut v = crate::webhook_cache::quota(k, namespaces, false);
                let status = v["status"].take();
                let meta = v["metadata"].as_object_mut().context("metadata")?;
                meta.remove("uid");
                meta.remove("resourceVersion");
                meta.remove("generation");
                v.as_object_mut().context("quota")?.remove("status");
                let q: KarmadaQuota = serde_json::from_value(v)?;
                let ns = q.metadata.namespace.clone().unwrap_or_default();
                let name = q.metadata.name.clone().unwrap_or_default();
                let api: Api<KarmadaQuota> = Api::namespaced(client, &ns);
                let mut created = match api.create(&PostParams::default(), &q).await {
                    Ok(c) => c,
                    Err(kube::Error::Api(s)) if s.code == 409 => api.get(&name).await?,
                    Err(e) => {
                        return Err(e)
                            .with_context(|| format!("creating KarmadaQuota {ns}/{name}"));
                    }
                };
                created.status = Some(serde_json::from_value(status)?);
                created.metadata.managed_fields = None;
                api.replace_status(&name, &PostParams::default(), &created)
                    .await
                    .with_context(|| format!("writing the status of KarmadaQuota {ns}/{name}"))?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(json!({
        "bench": "populate-quotas",
        "quotas": quotas,
        "namespaces": namespaces,
        "namespaces_s": namespaced_s,
        "total_s": started.elapsed().as_secs_f64(),
    }))
}

#[cfg(test)]
mod tests {
    /// The status written must decode as the CRD's status type: what it does not know
    /// the apiserver would prune, and the bench would measure smaller quotas.
    #[test]
    fn the_generated_status_decodes_as_the_crds_status() {
        let mut v = crate::webhook_cache::quota(7, 5, false);
        let status = v["status"].take();
        let s: karmada_quota_crds::KarmadaQuotaStatus =
            serde_json::from_value(status).expect("status decodes");
        // Three admissions' entries and the reservation-store fence.
        assert_eq!(s.reservations.len(), 4);
    }
}
