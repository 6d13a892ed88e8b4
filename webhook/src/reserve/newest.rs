//! The newest copy of each quota object a batch or a dry run decides against: the cache's,
//! or the object our own last write (or re-read after a conflict) returned while the
//! cache has not caught up with it ([`Inner::overlay`], kept per batch group); and which
//! of them can be enforced (a covering quota that cannot be parsed refuses its
//! namespace's requests, naming it).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use karmada_quota_core::fence;
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::selection::{Labels, QuotaKey};

use super::copy::QuotaCopy;
use super::{BatcherConfig, Inner, lock};
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

    /// The newest copies of the quota objects of `ns` (the cache's `quotas` and
    /// `clusters`, or our own newer writes) and the namespace's labels; the error of the
    /// first covering quota that cannot be enforced.
    pub(super) fn newest(
        &self,
        ns: &str,
        quotas: &[Arc<CachedQuota>],
        clusters: &[Arc<CachedClusterQuota>],
    ) -> Result<(BTreeMap<QuotaKey, QuotaCopy>, HashMap<String, Labels>)> {
        let group = self.cache.batch_group(ns);
        let mut cached = BTreeMap::new();
        add_copies(&mut cached, quotas, clusters);
        let copies = self.overlay(&group, cached);
        let labels = self.labels(std::iter::once(ns));
        let batches = self.ledger.get().is_some();
        if let Some(bad) = refusal_covering(&copies, ns, &labels, batches) {
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

    /// The quota objects `namespaces` answer to (their KarmadaQuotas and the cluster
    /// quotas selecting them), by key, each replaced by the group's own copy when that is
    /// newer; `gone` = quotas found deleted during this batch.
    pub(super) fn newest_copies(
        &self,
        group: &str,
        namespaces: &BTreeSet<String>,
        gone: &HashSet<QuotaKey>,
    ) -> BTreeMap<QuotaKey, QuotaCopy> {
        let mut cached: BTreeMap<QuotaKey, QuotaCopy> = BTreeMap::new();
        for ns in namespaces {
            let quotas = self.cache.in_namespace(ns);
            let clusters = self.cache.cluster_quotas_covering(ns);
            add_copies(&mut cached, &quotas, &clusters);
        }
        cached.retain(|key, _| !gone.contains(key));
        self.overlay(group, cached)
    }

    /// `cached`, each replaced by the group's own copy when that is newer.
    pub(super) fn overlay(
        &self,
        group: &str,
        mut cached: BTreeMap<QuotaKey, QuotaCopy>,
    ) -> BTreeMap<QuotaKey, QuotaCopy> {
        let mut groups = lock(&self.groups);
        let Some(g) = groups.get_mut(group) else {
            return cached;
        };
        for (key, c) in &mut cached {
            match g.newest.get(key) {
                Some(own) if own.is_newer(c) => *c = own.clone(),
                Some(_) => {
                    g.newest.remove(key);
                }
                None => {}
            }
        }
        cached
    }

    /// Keep `copy` (of an object returned by a write or a re-read) as the newest copy.
    pub(super) fn remember(&self, group: &str, copy: QuotaCopy) {
        if let Some(g) = lock(&self.groups).get_mut(group) {
            g.newest.insert(copy.key(), copy);
        }
    }

    /// Drop our copy of a quota whose state is unknown now (failed or timed-out write).
    pub(super) fn forget(&self, group: &str, key: &QuotaKey) {
        if let Some(g) = lock(&self.groups).get_mut(group) {
            g.newest.remove(key);
        }
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
/// covering it that cannot be enforced (its status does not parse), else the first the
/// reservation-store fence keeps from this store (docs/reservations.md R22: with the
/// batch store, `batches`, a quota whose fence does not cover its `hard`; with the
/// status store, a fenced one).
pub(super) fn refusal_covering(
    copies: &BTreeMap<QuotaKey, QuotaCopy>,
    namespace: &str,
    labels: &HashMap<String, Labels>,
    batches: bool,
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
        .or_else(|| covering().find_map(|c| fence_error(&c.key(), c.state().ok()?, batches)))
}

/// The fence's refusal for one quota's `state` (see [`refusal_covering`]).
pub(super) fn fence_error(key: &QuotaKey, state: &QuotaState, batches: bool) -> Option<Error> {
    let (namespace, name) = (
        key.namespace().unwrap_or_default().to_owned(),
        key.name().to_owned(),
    );
    if batches && !fence::covers(&state.reservations, &state.spec.hard) {
        Some(Error::StoreNotFenced { namespace, name })
    } else if !batches && fence::fenced_for(&state.reservations) {
        Some(Error::StoreFenced { namespace, name })
    } else {
        None
    }
}

fn invalid_quota(key: &QuotaKey, errors: &str) -> Error {
    Error::InvalidQuota {
        namespace: key.namespace().unwrap_or_default().to_owned(),
        name: key.name().to_owned(),
        errors: errors.to_owned(),
    }
}
