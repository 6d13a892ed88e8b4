//! The two API calls a status writer makes on a quota object (a KarmadaQuota or a
//! KarmadaClusterQuota), behind a trait so that tests run against an in-memory store (the
//! crate's `fake` module).

use futures::future::BoxFuture;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, QuotaObject};
use kube::api::PostParams;

/// Why a quota API call failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// 409: the resourceVersion precondition failed (someone wrote the quota first).
    #[error("conflict: the quota was modified concurrently")]
    Conflict,
    /// 404: the quota no longer exists.
    #[error("not found")]
    NotFound,
    /// Any other API or transport error.
    #[error("{0}")]
    Api(String),
}

impl StoreError {
    /// Low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            StoreError::Conflict => "conflict",
            StoreError::NotFound => "not_found",
            StoreError::Api(_) => "api_error",
        }
    }
}

impl From<kube::Error> for StoreError {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.is_conflict() => StoreError::Conflict,
            kube::Error::Api(s) if s.is_not_found() => StoreError::NotFound,
            other => StoreError::Api(other.to_string()),
        }
    }
}

/// Read a quota object of kind `K`, replace its status.
pub trait StatusStore<K: QuotaObject = KarmadaQuota>: Send + Sync + 'static {
    /// The current object (a quorum read: the newest version). `namespace` is empty for a
    /// cluster-scoped kind.
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str)
    -> BoxFuture<'a, Result<K, StoreError>>;

    /// Replace the status subresource of `quota` (its namespace, name and
    /// `metadata.resourceVersion` set: a compare-and-swap); returns the stored object.
    fn replace_status<'a>(&'a self, quota: &'a K) -> BoxFuture<'a, Result<K, StoreError>>;
}

/// [`StatusStore`] over the Kubernetes API.
#[derive(Clone)]
pub struct KubeStore {
    client: kube::Client,
}

impl KubeStore {
    /// A store that talks to the apiserver through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self { client }
    }
}

impl StatusStore<KarmadaClusterQuota> for KubeStore {
    fn get<'a>(
        &'a self,
        _namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaClusterQuota, StoreError>> {
        Box::pin(async move {
            let api = kube::Api::<KarmadaClusterQuota>::all(self.client.clone());
            Ok(api.get(name).await?)
        })
    }

    fn replace_status<'a>(
        &'a self,
        quota: &'a KarmadaClusterQuota,
    ) -> BoxFuture<'a, Result<KarmadaClusterQuota, StoreError>> {
        Box::pin(async move {
            let name = quota.metadata.name.as_deref().unwrap_or_default();
            let api = kube::Api::<KarmadaClusterQuota>::all(self.client.clone());
            Ok(api
                .replace_status(name, &PostParams::default(), quota)
                .await?)
        })
    }
}

impl StatusStore for KubeStore {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            let api = kube::Api::<KarmadaQuota>::namespaced(self.client.clone(), namespace);
            Ok(api.get(name).await?)
        })
    }

    fn replace_status<'a>(
        &'a self,
        quota: &'a KarmadaQuota,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            let namespace = quota.metadata.namespace.as_deref().unwrap_or_default();
            let name = quota.metadata.name.as_deref().unwrap_or_default();
            let api = kube::Api::<KarmadaQuota>::namespaced(self.client.clone(), namespace);
            Ok(api
                .replace_status(name, &PostParams::default(), quota)
                .await?)
        })
    }
}
