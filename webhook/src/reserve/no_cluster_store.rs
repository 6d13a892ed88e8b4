//! The cluster quota store of a batcher built without one ([`super::Batcher::new`]): every
//! call fails, naming the quota (no cluster quota can then be written; the cache of such a
//! batcher has none either).

use futures::future::BoxFuture;
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_status::{StatusStore, StoreError};

/// See the module doc.
pub(super) struct NoClusterStore;

impl StatusStore<KarmadaClusterQuota> for NoClusterStore {
    fn get<'a>(
        &'a self,
        _: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, std::result::Result<KarmadaClusterQuota, StoreError>> {
        Box::pin(async move {
            Err(StoreError::Api(format!(
                "no store for KarmadaClusterQuota {name}"
            )))
        })
    }
    fn replace_status<'a>(
        &'a self,
        q: &'a KarmadaClusterQuota,
    ) -> BoxFuture<'a, std::result::Result<KarmadaClusterQuota, StoreError>> {
        let name = q.metadata.name.clone().unwrap_or_default();
        Box::pin(async move {
            Err(StoreError::Api(format!(
                "no store for KarmadaClusterQuota {name}"
            )))
        })
    }
}
