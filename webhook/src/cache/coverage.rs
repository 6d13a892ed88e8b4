//! Which KarmadaClusterQuotas cover each namespace ([`crate::selection`]): kept beside the cluster quota and Namespace stores, fed by the
//! same watcher events under one lock, so a request's lookup is a hash lookup instead of a
//! scan of namespaces × cluster quotas.
//!
//! ```text
//!  cluster quota event ─► ClusterQuotaWriter ─┐  (coverage write lock held throughout:
//!  Namespace event ─────► NamespaceWriter ────┤   store first, then the rows)
//!                                             ▼
//!   rows: namespace → names of the cluster quotas covering it (non-empty rows only)
//!     cluster quota Apply  → its column over every namespace (skipped when its selector
//!                            is unchanged, as on a status write)
//!     Namespace Apply      → its row over every cluster quota (skipped when its labels
//!                            are unchanged)
//!     Delete               → its column / row removed
//!     InitDone (re-list)   → every row rebuilt from both stores
//! ```

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_core::selection::{Covers, Labels};
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

use super::CachedClusterQuota;

/// The coverage of one state of the two stores.
#[derive(Debug, Default)]
pub(crate) struct Coverage {
    /// Namespace → names of the cluster quotas covering it (only non-empty rows).
    rows: HashMap<String, BTreeSet<String>>,
}

/// Shared by the two writers and the readers.
pub(crate) type SharedCoverage = Arc<RwLock<Coverage>>;

fn read(c: &RwLock<Coverage>) -> RwLockReadGuard<'_, Coverage> {
    c.read()
}

fn write(c: &RwLock<Coverage>) -> RwLockWriteGuard<'_, Coverage> {
    c.write()
}

fn ns_name(n: &PartialObjectMeta<Namespace>) -> &str {
    n.metadata.name.as_deref().unwrap_or_default()
}

fn ns_labels(n: &PartialObjectMeta<Namespace>) -> Labels {
    n.metadata.labels.clone().unwrap_or_default()
}

fn covers(covers: Option<&Covers>, namespace: &str, labels: &Labels) -> bool {
    covers.is_some_and(|c| c.covers(namespace, Some(labels)))
}

impl Coverage {
    fn set_row(&mut self, namespace: &str, row: BTreeSet<String>) {
        let changed = if row.is_empty() {
            self.rows.remove(namespace).is_some()
        } else if self.rows.get(namespace) == Some(&row) {
            false
        } else {
            self.rows.insert(namespace.to_owned(), row);
            true
        };
        if changed {}
    }

    /// Cluster quota `name` now covers what `how` says, over `namespaces`.
    fn set_column(
        &mut self,
        name: &str,
        how: Option<&Covers>,
        namespaces: &[Arc<PartialObjectMeta<Namespace>>],
    ) {
        let mut changed = false;
        for n in namespaces {
            let ns = ns_name(n);
            let wanted = covers(how, ns, &ns_labels(n));
            let has = self.rows.get(ns).is_some_and(|r| r.contains(name));
            if wanted && !has {
                self.rows
                    .entry(ns.to_owned())
                    .or_default()
                    .insert(name.to_owned());
                changed = true;
            } else if !wanted && has {
                self.remove_from(ns, name);
                changed = true;
            }
        }
        if changed {}
    }

    fn remove_from(&mut self, namespace: &str, name: &str) {
        if let Some(row) = self.rows.get_mut(namespace) {
            row.remove(name);
            if row.is_empty() {
                self.rows.remove(namespace);
            }
        }
    }

    fn remove_column(&mut self, name: &str) {
        let mut changed = false;
        self.rows.retain(|_, row| {
            changed |= row.remove(name);
            !row.is_empty()
        });
        if changed {}
    }

    fn namespace_row(
        namespace: &str,
        labels: &Labels,
        clusters: &[Arc<CachedClusterQuota>],
    ) -> BTreeSet<String> {
        clusters
            .iter()
            .filter(|q| covers(q.covers.as_ref(), namespace, labels))
            .map(|q| q.name().to_owned())
            .collect()
    }

    fn rebuild(
        &mut self,
        clusters: &[Arc<CachedClusterQuota>],
        namespaces: &[Arc<PartialObjectMeta<Namespace>>],
    ) {
        self.rows = namespaces
            .iter()
            .filter_map(|n| {
                let row = Self::namespace_row(ns_name(n), &ns_labels(n), clusters);
                (!row.is_empty()).then(|| (ns_name(n).to_owned(), row))
            })
            .collect();
    }
}

/// The writer of the KarmadaClusterQuota store and the coverage.
pub struct ClusterQuotaWriter {
    writer: Writer<CachedClusterQuota>,
    clusters: Store<CachedClusterQuota>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    coverage: SharedCoverage,
}

/// The writer of the Namespace store and the coverage.
pub struct NamespaceWriter {
    writer: Writer<PartialObjectMeta<Namespace>>,
    clusters: Store<CachedClusterQuota>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    coverage: SharedCoverage,
}

impl std::fmt::Debug for ClusterQuotaWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterQuotaWriter").finish_non_exhaustive()
    }
}

impl std::fmt::Debug for NamespaceWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamespaceWriter").finish_non_exhaustive()
    }
}

/// The two writers over the two stores' writers, sharing `coverage`.
pub(crate) fn writers(
    clusters: Writer<CachedClusterQuota>,
    namespaces: Writer<PartialObjectMeta<Namespace>>,
    coverage: &SharedCoverage,
) -> (ClusterQuotaWriter, NamespaceWriter) {
    let (c, n) = (clusters.as_reader(), namespaces.as_reader());
    (
        ClusterQuotaWriter {
            writer: clusters,
            clusters: c.clone(),
            namespaces: n.clone(),
            coverage: coverage.clone(),
        },
        NamespaceWriter {
            writer: namespaces,
            clusters: c,
            namespaces: n,
            coverage: coverage.clone(),
        },
    )
}

impl ClusterQuotaWriter {
    /// Applies one watcher event to the store and the coverage, as kube's reflector does
    /// to the store alone.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<CachedClusterQuota>) {
        let mut coverage = write(&self.coverage);
        let before = match event {
            watcher::Event::Apply(q) => self
                .clusters
                .get(&ObjectRef::from_obj(q))
                .map(|old| old.covers.clone()),
            _ => None,
        };
        self.writer.apply_watcher_event(event);
        match event {
            watcher::Event::Apply(q) => {
                if before.as_ref() != Some(&q.covers) {
                    coverage.set_column(q.name(), q.covers.as_ref(), &self.namespaces.state());
                }
            }
            watcher::Event::Delete(q) => coverage.remove_column(q.name()),
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => {
                coverage.rebuild(&self.clusters.state(), &self.namespaces.state());
            }
        }
    }
}

impl NamespaceWriter {
    /// Applies one watcher event to the store and the coverage, as kube's reflector does
    /// to the store alone.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<PartialObjectMeta<Namespace>>) {
        let mut coverage = write(&self.coverage);
        let before = match event {
            watcher::Event::Apply(n) => self
                .namespaces
                .get(&ObjectRef::from_obj(n))
                .map(|old| ns_labels(&old)),
            _ => None,
        };
        self.writer.apply_watcher_event(event);
        match event {
            watcher::Event::Apply(n) => {
                let labels = ns_labels(n);
                if before.as_ref() != Some(&labels) {
                    let row = Coverage::namespace_row(ns_name(n), &labels, &self.clusters.state());
                    coverage.set_row(ns_name(n), row);
                }
            }
            watcher::Event::Delete(n) => coverage.set_row(ns_name(n), BTreeSet::new()),
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => {
                coverage.rebuild(&self.clusters.state(), &self.namespaces.state());
            }
        }
    }
}

impl super::QuotaCache {
    /// The cluster quotas covering `namespace`, by name.
    pub(crate) fn covering(&self, namespace: &str) -> Vec<Arc<CachedClusterQuota>> {
        let coverage = read(&self.coverage);
        coverage.rows.get(namespace).map_or_else(Vec::new, |names| {
            names.iter().filter_map(|n| self.cluster_quota(n)).collect()
        })
    }
}
