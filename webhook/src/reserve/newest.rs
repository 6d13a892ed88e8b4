//! The quota objects a batch or a dry run decides against, as the cache holds them (a
//! batch then replaces each by this webhook's newer read from etcd, [`super::verified`]);
//! and which of them can be enforced: a covering quota that cannot be parsed refuses its
//! namespace's requests, naming it, and so does one without the reservation-store fence
//! over its `hard` (docs/reservations.md R22).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use karmada_quota_core::fence;
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::selection::{Labels, QuotaKey};

use super::copy::QuotaCopy;
use super::{BatcherConfig, Inner};
use crate::cache::{CachedClusterQuota, CachedQuota};
use crate::error::{Error, Result};

impl Inner {
    /// The cache's copy of one quota object.
    pub(super) fn cached(&self, key: &QuotaKey) -> Option<QuotaCopy> {
        match key {
            QuotaKey::Namespaced { namespace, name } => {
                self.cache.quota(namespace, name).map(QuotaCopy::Quota)
            }
            QuotaKey::Cluster { name } => self.cache.cluster_quota(name).map(QuotaCopy::Cluster),
        }
    }

    /// The copies of the quota objects of `ns` (the cache's `quotas` and `clusters`) and
    /// the namespace's labels; the error of the first covering quota that cannot be
    /// enforced.
    pub(super) fn newest(
        &self,
        ns: &str,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
    ) -> Result<(BTreeMap<QuotaKey, QuotaCopy>, HashMap<String, Labels>)> {
        let mut copies = BTreeMap::new();
        add_copies(&mut copies, quotas, clusters);
        let labels = self.labels(std::iter::once(ns));
        if let Some(bad) = refusal_covering(&copies, ns, &labels) {
            return Err(bad);
        }
        Ok((copies, labels))
    }

    /// The labels of `namespaces` the cache knows.
    pub(super) fn labels<'a>(
        &self,
        namespaces: impl Iterator<Item = &'a str>,
    ) -> HashMap<String, Labels> {
        namespaces
            .filter_map(|ns| self.cache.labels_of(ns).map(|l| (ns.to_owned(), l)))
            .collect()
    }

    /// The cache's copies of the quota objects `namespaces` answer to (their
    /// KarmadaQuotas and the cluster quotas selecting them), by key.
    pub(super) fn newest_copies(
        &self,
        namespaces: &BTreeSet<String>,
    ) -> BTreeMap<QuotaKey, QuotaCopy> {
        let mut cached: BTreeMap<QuotaKey, QuotaCopy> = BTreeMap::new();
        for ns in namespaces {
            let quotas = self.cache.in_namespace(ns);
            let clusters = self.cache.cluster_quotas_covering(ns);
            add_copies(&mut cached, &quotas, &clusters);
        }
        cached
    }
}

/// The states the decision enforces: every quota that parses, a policy it leaves unset
/// given the webhook's default.
pub(super) fn enforced_states(
    copies: &BTreeMap<QuotaKey, QuotaCopy>,
    c: &BatcherConfig,
) -> Vec<QuotaState> {
    copies
        .values()
        .filter_map(|q| q.state().ok().cloned())
        .map(|mut s| {
            s.spec
                .policy
                .unaccounted
                .get_or_insert(c.unaccounted_default);
            s
        })
        .collect()
}

/// The cache's copies of `quotas` and `clusters`, by key.
fn add_copies(
    copies: &mut BTreeMap<QuotaKey, QuotaCopy>,
    quotas: &[Arc<CachedQuota>],
    clusters: &[Arc<CachedClusterQuota>],
) {
    for c in quotas {
        copies.insert(c.key(), QuotaCopy::Quota(c.clone()));
    }
    for c in clusters {
        copies.insert(c.key(), QuotaCopy::Cluster(c.clone()));
    }
}

/// The error refusing a request of `namespace` before any decision: the first quota
/// covering it that cannot be enforced (its status does not parse), else the first whose
/// reservation-store fence does not cover its `hard` (docs/reservations.md R22).
pub(super) fn refusal_covering(
    copies: &BTreeMap<QuotaKey, QuotaCopy>,
    namespace: &str,
    labels: &HashMap<String, Labels>,
) -> Option<Error> {
    let covering = || {
        copies
            .values()
            .filter(|c| c.covers(namespace, labels.get(namespace)))
    };
    covering()
        .find_map(|c| {
            c.state()
                .err()
                .map(|errors| invalid_quota(&c.key(), errors))
        })
        .or_else(|| covering().find_map(|c| fence_error(&c.key(), c.state().ok()?)))
}

/// The fence's refusal for one quota's `state` (see [`refusal_covering`]).
fn fence_error(key: &QuotaKey, state: &QuotaState) -> Option<Error> {
    (!fence::covers(&state.reservations, &state.spec.hard)).then(|| Error::StoreNotFenced {
        namespace: key.namespace().unwrap_or_default().to_owned(),
        name: key.name().to_owned(),
    })
}

fn invalid_quota(key: &QuotaKey, errors: &str) -> Error {
    Error::InvalidQuota {
        namespace: key.namespace().unwrap_or_default().to_owned(),
        name: key.name().to_owned(),
        errors: errors.to_owned(),
    }
}
