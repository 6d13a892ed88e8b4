//! A batch's copy of one quota object, of either kind: the cache's, or this webhook's
//! read of it from etcd when that is newer.

use std::sync::Arc;

use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::selection::{Covers, Labels, QuotaKey};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, QuotaObject};
use karmada_quota_status::StatusStore;

use super::Inner;
use crate::cache::{Cached, CachedClusterQuota, CachedQuota, Coverage};

/// One quota object as a batch sees it.
#[derive(Clone, Debug)]
pub(crate) enum QuotaCopy {
    /// A KarmadaQuota.
    Quota(Arc<CachedQuota>),
    /// A KarmadaClusterQuota.
    Cluster(Arc<CachedClusterQuota>),
}

impl QuotaCopy {
    /// Its identity.
    pub(crate) fn key(&self) -> QuotaKey {
        match self {
            QuotaCopy::Quota(c) => c.key(),
            QuotaCopy::Cluster(c) => c.key(),
        }
    }

    /// The engine's view, or why it cannot be enforced.
    pub(crate) fn state(&self) -> Result<&QuotaState, &str> {
        match self {
            QuotaCopy::Quota(c) => c.parsed.as_ref().map(|p| &p.state),
            QuotaCopy::Cluster(c) => c.parsed.as_ref().map(|p| &p.state),
        }
        .map_err(String::as_str)
    }

    /// Its `status.foldedThrough` (the newest reservation batch its status accounts for);
    /// `None` when none or when it does not parse.
    pub(crate) fn folded_through(&self) -> Option<u64> {
        match self {
            QuotaCopy::Quota(c) => c.folded_through(),
            QuotaCopy::Cluster(c) => c.folded_through(),
        }
    }

    /// Whether it covers a binding of `namespace` (labels `labels`), parsed or not.
    pub(crate) fn covers(&self, namespace: &str, labels: Option<&Labels>) -> bool {
        let covers: Option<&Covers> = match self {
            QuotaCopy::Quota(c) => c.covers.as_ref(),
            QuotaCopy::Cluster(c) => c.covers.as_ref(),
        };
        covers.is_some_and(|c| c.covers(namespace, labels))
    }

    fn resource_version(&self) -> (Option<u64>, Option<&str>) {
        match self {
            QuotaCopy::Quota(c) => (c.resource_version(), c.metadata.resource_version.as_deref()),
            QuotaCopy::Cluster(c) => (c.resource_version(), c.metadata.resource_version.as_deref()),
        }
    }

    /// Whether this copy (our own read) is newer than `cached`: by resourceVersion when
    /// both are numbers; otherwise ours (it came from the apiserver after the cache's, or
    /// the cache would not differ).
    pub(crate) fn is_newer(&self, cached: &QuotaCopy) -> bool {
        match (self.resource_version(), cached.resource_version()) {
            ((Some(a), _), (Some(b), _)) => a > b,
            ((_, a), (_, b)) => a != b,
        }
    }
}

/// What the batcher needs of a kind to read it: its store, and its copies.
pub(crate) trait Kind: QuotaObject + Coverage {
    /// The store reading this kind.
    fn store(inner: &Inner) -> &dyn StatusStore<Self>;
    /// A copy of a freshly read object.
    fn copy(object: Self) -> QuotaCopy;
}

impl Kind for KarmadaQuota {
    fn store(inner: &Inner) -> &dyn StatusStore<Self> {
        &*inner.store
    }
    fn copy(object: Self) -> QuotaCopy {
        QuotaCopy::Quota(Arc::new(Cached::from_object(object)))
    }
}

impl Kind for KarmadaClusterQuota {
    fn store(inner: &Inner) -> &dyn StatusStore<Self> {
        &*inner.cluster_store
    }
    fn copy(object: Self) -> QuotaCopy {
        QuotaCopy::Cluster(Arc::new(Cached::from_object(object)))
    }
}
