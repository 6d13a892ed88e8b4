//! Reading the Karmada API server: quotas, their events, member clusters and bindings.

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Event;
use karmada_quota_crds::{
    KarmadaClusterQuota, KarmadaClusterQuotaShare, KarmadaQuota, ResourceBinding,
};
use karmada_quota_interpreter::clusters::ClusterFacts;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

use crate::args::Global;
use crate::render::EventRow;

/// A client and the namespace to use, from the kubeconfig and flags, as kubectl does.
pub struct Access {
    /// The client.
    pub client: Client,
    /// `-n`, else the context's namespace, else `default`.
    pub namespace: String,
}

impl Access {
    /// Build from `--kubeconfig`/`KUBECONFIG` (else ~/.kube/config, else in-cluster) and
    /// `--context`.
    pub async fn new(global: &Global) -> Result<Access> {
        let options = KubeConfigOptions {
            context: global.context.clone(),
            ..Default::default()
        };
        let config = match &global.kubeconfig {
            Some(path) => {
                let kubeconfig = Kubeconfig::read_from(path)
                    .with_context(|| format!("reading kubeconfig {}", path.display()))?;
                Config::from_custom_kubeconfig(kubeconfig, &options)
                    .await
                    .with_context(|| format!("kubeconfig {}", path.display()))?
            }
            None => match Config::from_kubeconfig(&options).await {
                Ok(c) => c,
                Err(e) => Config::incluster()
                    .map_err(|_| e)
                    .context("no kubeconfig found")?,
            },
        };
        let namespace = global
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config).context("building the API client")?;
        Ok(Access { client, namespace })
    }

    /// Quotas in `namespace` (`None`: all namespaces), by namespace and name.
    pub async fn quotas(&self, namespace: Option<&str>) -> Result<Vec<KarmadaQuota>> {
        let api: Api<KarmadaQuota> = match namespace {
            Some(ns) => Api::namespaced(self.client.clone(), ns),
            None => Api::all(self.client.clone()),
        };
        let mut list = api
            .list(&ListParams::default())
            .await
            .context("listing KarmadaQuotas (quota.karmada.io/v1alpha1)")?
            .items;
        list.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        Ok(list)
    }

    /// Every KarmadaClusterQuota, by name.
    pub async fn cluster_quotas(&self) -> Result<Vec<KarmadaClusterQuota>> {
        let mut list = Api::<KarmadaClusterQuota>::all(self.client.clone())
            .list(&ListParams::default())
            .await
            .context("listing KarmadaClusterQuotas (quota.karmada.io/v1alpha1)")?
            .items;
        list.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(list)
    }

    /// Every KarmadaClusterQuota, or — when listing them is forbidden, as it is to a tenant
    /// — those over `namespaces` as their KarmadaClusterQuotaShares there show them (the
    /// totals and those namespaces' shares), with a note saying so for stderr.
    pub async fn cluster_quotas_for(
        &self,
        namespaces: &[String],
    ) -> Result<(Vec<KarmadaClusterQuota>, Option<String>)> {
        match self.cluster_quotas().await {
            Ok(list) => Ok((list, None)),
            Err(e) if forbidden(&e) && !namespaces.is_empty() => {
                let list = self.cluster_quota_shares(namespaces).await?;
                let note = format!(
                    "note: you may not list KarmadaClusterQuotas (403 Forbidden): read through \
                     their KarmadaClusterQuotaShares in {}",
                    namespaces.join(", ")
                );
                Ok((list, Some(note)))
            }
            Err(e) => Err(e),
        }
    }

    /// The cluster quotas over `namespaces`, from the KarmadaClusterQuotaShares the
    /// controller keeps there: one per name, with the shares of all of `namespaces` it
    /// selects.
    pub async fn cluster_quota_shares(
        &self,
        namespaces: &[String],
    ) -> Result<Vec<KarmadaClusterQuota>> {
        let mut out: Vec<KarmadaClusterQuota> = Vec::new();
        for ns in namespaces {
            let shares = Api::<KarmadaClusterQuotaShare>::namespaced(self.client.clone(), ns)
                .list(&ListParams::default())
                .await
                .with_context(|| {
                    format!("listing KarmadaClusterQuotaShares (quota.karmada.io/v1alpha1) in {ns}")
                })?
                .items;
            for share in shares {
                let q = share.as_cluster_quota();
                match out.iter_mut().find(|o| o.metadata.name == q.metadata.name) {
                    Some(seen) => {
                        if let (Some(into), Some(from)) = (seen.status.as_mut(), q.status) {
                            into.namespaces.extend(from.namespaces);
                            into.namespaces.sort_by(|a, b| a.name.cmp(&b.name));
                        }
                    }
                    None => out.push(q),
                }
            }
        }
        out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        Ok(out)
    }

    /// The labels of namespace `name` (`None`: it does not exist). A tenant may not be
    /// allowed to read Namespaces: callers fall back on the cluster quotas'
    /// `status.namespaces`.
    pub async fn namespace_labels(
        &self,
        name: &str,
    ) -> Result<Option<std::collections::BTreeMap<String, String>>> {
        Ok(
            Api::<k8s_openapi::api::core::v1::Namespace>::all(self.client.clone())
                .get_opt(name)
                .await
                .with_context(|| format!("reading namespace {name}"))?
                .map(|n| n.metadata.labels.unwrap_or_default()),
        )
    }

    /// One KarmadaClusterQuota, `None` when it does not exist; when reading it is
    /// forbidden, its KarmadaClusterQuotaShare in the current namespace (a note for stderr
    /// says so).
    pub async fn cluster_quota(
        &self,
        name: &str,
    ) -> Result<(Option<KarmadaClusterQuota>, Option<String>)> {
        let read = Api::<KarmadaClusterQuota>::all(self.client.clone())
            .get_opt(name)
            .await
            .with_context(|| format!("reading KarmadaClusterQuota {name}"));
        match read {
            Ok(q) => Ok((q, None)),
            Err(e) if forbidden(&e) => {
                let ns = &self.namespace;
                let share = Api::<KarmadaClusterQuotaShare>::namespaced(self.client.clone(), ns)
                    .get_opt(name)
                    .await
                    .with_context(|| format!("reading KarmadaClusterQuotaShare {ns}/{name}"))?;
                let note = format!(
                    "note: you may not read KarmadaClusterQuota {name} (403 Forbidden): read \
                     through its KarmadaClusterQuotaShare in {ns}"
                );
                Ok((share.map(|s| s.as_cluster_quota()), Some(note)))
            }
            Err(e) => Err(e),
        }
    }

    /// One quota, `None` when it does not exist.
    pub async fn quota(&self, namespace: &str, name: &str) -> Result<Option<KarmadaQuota>> {
        Api::<KarmadaQuota>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await
            .with_context(|| format!("reading KarmadaQuota {namespace}/{name}"))
    }

    /// The events of a quota, newest last.
    pub async fn quota_events(&self, namespace: &str, name: &str) -> Result<Vec<EventRow>> {
        self.events_of("KarmadaQuota", namespace, name).await
    }

    /// The events about the object `kind` `name` kept in `namespace`, newest last.
    pub async fn events_of(
        &self,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<EventRow>> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let selector = format!("involvedObject.kind={kind},involvedObject.name={name}");
        let mut events = api
            .list(&ListParams::default().fields(&selector))
            .await
            .with_context(|| format!("listing the events of {kind} {namespace}/{name}"))?
            .items;
        let when = |e: &Event| {
            e.last_timestamp
                .as_ref()
                .map(|t| t.0)
                .or_else(|| e.event_time.as_ref().map(|t| t.0))
                .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0))
        };
        events.sort_by_key(|e| when(e));
        let now = jiff::Timestamp::now();
        Ok(events
            .iter()
            .map(|e| EventRow {
                type_: e.type_.clone().unwrap_or_default(),
                reason: e.reason.clone().unwrap_or_default(),
                age: when(e).map_or_else(|| "<unknown>".to_owned(), |t| age(now, t)),
                count: e
                    .series
                    .as_ref()
                    .and_then(|s| s.count)
                    .or(e.count)
                    .unwrap_or(1),
                message: e.message.clone().unwrap_or_default(),
            })
            .collect())
    }

    /// Member clusters (cluster.karmada.io/v1alpha1 Cluster), empty when the kind is not served.
    pub async fn clusters(&self) -> Result<Vec<ClusterFacts>> {
        let gvk = GroupVersionKind::gvk("cluster.karmada.io", "v1alpha1", "Cluster");
        let api: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, "clusters"),
        );
        match api.list(&ListParams::default()).await {
            Ok(list) => Ok(list
                .items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .map(|v| karmada_quota_interpreter::clusters::facts(&v))
                .collect()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(Vec::new()),
            Err(e) => Err(e).context("listing Clusters (cluster.karmada.io/v1alpha1)"),
        }
    }

    /// The cluster's ResourceInterpreterCustomizations (config.karmada.io/v1alpha1), as
    /// objects; `Ok((empty, note))` when the kind is not served (404) or listing it is
    /// forbidden (403): kinds only they price are then reported as not priced.
    pub async fn customizations(&self) -> Result<(Vec<serde_json::Value>, Option<String>)> {
        use karmada_quota_interpreter::customization::{GROUP, PLURAL};
        let gvk = GroupVersionKind::gvk(GROUP, "v1alpha1", "ResourceInterpreterCustomization");
        let api: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, PLURAL),
        );
        match api.list(&ListParams::default()).await {
            Ok(list) => Ok((
                list.items
                    .iter()
                    .filter_map(|o| serde_json::to_value(o).ok())
                    .collect(),
                None,
            )),
            Err(kube::Error::Api(s)) if s.code == 403 || s.code == 404 => Ok((
                Vec::new(),
                Some(format!(
                    "note: ResourceInterpreterCustomizations not read ({} {}): kinds only \
                     they price are reported as not priced",
                    s.code, s.reason
                )),
            )),
            Err(e) => {
                Err(e).context("listing ResourceInterpreterCustomizations (config.karmada.io)")
            }
        }
    }

    /// The ResourceBindings of `namespace`.
    pub async fn bindings(&self, namespace: &str) -> Result<Vec<ResourceBinding>> {
        Ok(
            Api::<ResourceBinding>::namespaced(self.client.clone(), namespace)
                .list(&ListParams::default())
                .await
                .with_context(|| format!("listing ResourceBindings in {namespace}"))?
                .items,
        )
    }
}

/// kubectl's short age: `45s`, `12m`, `3h`, `2d`.
pub fn age(now: jiff::Timestamp, then: jiff::Timestamp) -> String {
    let secs = now.as_second().saturating_sub(then.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// Whether the API refused the call as forbidden (403): RBAC, not a failure.
fn forbidden(e: &anyhow::Error) -> bool {
    matches!(e.downcast_ref::<kube::Error>(), Some(kube::Error::Api(s)) if s.code == 403)
}
