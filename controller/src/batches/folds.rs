//! Each quota's fold as the sweep reads it: `status.foldedThrough` from the controller's
//! quota stores (watch-fed, so never ahead of what is durable), which quotas are this
//! controller's at all, and the greatest fold of them (what the re-seed, `seed`, needs).
//!
//! A quota this controller does not reconcile (`--namespace`, `--namespaced-quotas=false`,
//! a controller that does not reconcile cluster quotas or selects some with
//! `--cluster-quota-selector`) may exist without being in its stores: it counts as "not
//! folded" (`Some(None)`), so a batch naming it is never deleted here. Only a quota this
//! controller would hold, and does not, is gone (`None`: its entries may go once expired).

use std::sync::Arc;

use futures::FutureExt;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota};
use karmada_quota_status::batches::Fold;
use kube::runtime::reflector::{ObjectRef, Store};

use crate::queue::Line;

/// Which quotas this controller reconciles (so would hold in its stores).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// KarmadaQuotas are reconciled (`--namespaced-quotas`).
    pub namespaced: bool,
    /// Only those of this namespace (`--namespace`).
    pub namespace: Option<String>,
    /// KarmadaClusterQuotas are reconciled.
    pub clusters: bool,
    /// Only those a label selector matches (`--cluster-quota-selector`): one not held
    /// may be another controller's.
    pub cluster_selector: bool,
}

impl Scope {
    /// The fold of `key`, given `held`: the `status.foldedThrough` of the quota in this
    /// controller's stores (`None`: not there).
    pub fn fold(&self, key: &QuotaKey, held: Option<Option<u64>>) -> Fold {
        let mine = match key {
            QuotaKey::Namespaced { namespace, .. } => {
                self.namespaced && self.namespace.as_ref().is_none_or(|ns| ns == namespace)
            }
            QuotaKey::Cluster { .. } => self.clusters,
        };
        match (mine, held) {
            (false, _) => Some(None),
            (true, Some(folded)) => Some(folded),
            (true, None) if matches!(key, QuotaKey::Cluster { .. }) && self.cluster_selector => {
                Some(None)
            }
            (true, None) => None,
        }
    }
}

/// What the sweep reads of the quotas' folds.
pub trait Folds: Send + Sync + 'static {
    /// The fold of `key` ([`Scope::fold`]).
    fn fold(&self, key: &QuotaKey) -> Fold;
    /// The greatest `status.foldedThrough` of the quotas held (`Some(None)`: none
    /// recorded); `None` while a store this controller reconciles has not listed.
    fn greatest(&self) -> Option<Option<u64>>;
}

/// The folds of every quota from the controller's stores.
#[derive(Clone)]
pub struct StoreFolds {
    /// The scope.
    pub scope: Scope,
    /// The KarmadaQuota store.
    pub quotas: Store<KarmadaQuota>,
    /// Holds the KarmadaClusterQuota store once its controller runs.
    pub line: Arc<Line>,
}

impl StoreFolds {
    /// The fold of `key` (see the module docs).
    pub fn fold(&self, key: &QuotaKey) -> Fold {
        let held = match key {
            QuotaKey::Namespaced { namespace, name } => self
                .quotas
                .get(&ObjectRef::new(name).within(namespace))
                .map(|q| q.status.as_ref().and_then(|s| s.folded_through)),
            QuotaKey::Cluster { name } => match self.line.cluster_view.get() {
                Some((store, _)) => store
                    .get(&ObjectRef::<KarmadaClusterQuota>::new(name))
                    .map(|q| q.status.as_ref().and_then(|s| s.quota.folded_through)),
                // The cluster quota controller has not started: nothing is known.
                None => return Some(None),
            },
        };
        self.scope.fold(key, held)
    }

    /// The greatest `status.foldedThrough` in the stores of the kinds this controller
    /// reconciles; `None` while one of them has not listed (or, for the cluster quotas,
    /// while their controller has not started).
    pub fn greatest(&self) -> Option<Option<u64>> {
        let mut greatest = None;
        if self.scope.namespaced {
            ready(&self.quotas)?;
            let folds = self.quotas.state();
            let folds = folds
                .iter()
                .filter_map(|q| q.status.as_ref().and_then(|s| s.folded_through));
            greatest = greatest.max(folds.max());
        }
        if self.scope.clusters {
            let (store, _) = self.line.cluster_view.get()?;
            ready(store)?;
            let folds = store.state();
            let folds = folds
                .iter()
                .filter_map(|q| q.status.as_ref().and_then(|s| s.quota.folded_through));
            greatest = greatest.max(folds.max());
        }
        Some(greatest)
    }
}

impl Folds for StoreFolds {
    fn fold(&self, key: &QuotaKey) -> Fold {
        StoreFolds::fold(self, key)
    }

    fn greatest(&self) -> Option<Option<u64>> {
        StoreFolds::greatest(self)
    }
}

/// `Some` once `store` has listed.
fn ready<K>(store: &Store<K>) -> Option<()>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))).then_some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(namespace: &str) -> QuotaKey {
        QuotaKey::Namespaced {
            namespace: namespace.into(),
            name: "q".into(),
        }
    }

    fn cluster() -> QuotaKey {
        QuotaKey::Cluster { name: "b".into() }
    }

    #[test]
    fn a_quota_of_this_controller_is_its_fold_or_gone() {
        let all = Scope {
            namespaced: true,
            namespace: None,
            clusters: true,
            cluster_selector: false,
        };
        assert_eq!(all.fold(&ns("a"), Some(Some(3))), Some(Some(3)));
        assert_eq!(all.fold(&ns("a"), Some(None)), Some(None));
        assert_eq!(all.fold(&ns("a"), None), None);
        assert_eq!(all.fold(&cluster(), Some(Some(2))), Some(Some(2)));
        assert_eq!(all.fold(&cluster(), None), None);
    }

    #[test]
    fn a_quota_another_controller_may_hold_is_never_folded_nor_gone() {
        let one_namespace = Scope {
            namespaced: true,
            namespace: Some("a".into()),
            clusters: false,
            cluster_selector: false,
        };
        assert_eq!(one_namespace.fold(&ns("a"), None), None);
        assert_eq!(one_namespace.fold(&ns("b"), None), Some(None));
        assert_eq!(one_namespace.fold(&cluster(), None), Some(None));
        let selected = Scope {
            namespaced: false,
            namespace: None,
            clusters: true,
            cluster_selector: true,
        };
        assert_eq!(selected.fold(&ns("a"), None), Some(None));
        assert_eq!(selected.fold(&cluster(), None), Some(None));
        assert_eq!(selected.fold(&cluster(), Some(Some(4))), Some(Some(4)));
    }
}
