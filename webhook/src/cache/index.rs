//! The KarmadaQuotas by namespace: an index beside the reflector store, fed by the same
//! watcher events under one lock, so a namespace's quotas are found in O(its quotas)
//! instead of a filter over every quota.
//!
//! ```text
//!  watcher::Event ─► QuotaWriter::apply_watcher_event  (index write lock held throughout)
//!                      1. kube's Writer: the Store (Init/InitApply buffer, InitDone swaps)
//!                      2. the index:  Apply  → that object's entry = the Store's own Arc
//!                                     Delete → that object's entry removed
//!                                     Init / InitApply → nothing (the Store is unchanged)
//!                                     InitDone → rebuilt from the Store (the re-list)
//! ```
//!
//! Readers take the index's read lock, so they see the index of one Store state: it never
//! disagrees with the Store, and it holds the Store's own `Arc`s (no second copy).

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::collections::HashMap;
use std::sync::Arc;

use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use kube::runtime::watcher;

use super::CachedQuota;

/// Namespace → its quotas, sorted by name (only namespaces with at least one quota). A
/// sorted `Vec` rather than a map: a namespace holds a few quotas, and a map's node costs
/// more than the quota's `Arc`.
pub(crate) type ByNamespace = HashMap<String, Vec<Arc<CachedQuota>>>;

/// Where quota `name` is, or would be inserted, in a namespace's sorted quotas.
pub(crate) fn position(quotas: &[Arc<CachedQuota>], name: &str) -> Result<usize, usize> {
    quotas.binary_search_by(|q| q.name().cmp(name))
}

/// The index of one Store state, shared by the writer and the readers.
pub(crate) type SharedIndex = Arc<RwLock<ByNamespace>>;

pub(crate) fn read(index: &RwLock<ByNamespace>) -> RwLockReadGuard<'_, ByNamespace> {
    index.read()
}

fn write(index: &RwLock<ByNamespace>) -> RwLockWriteGuard<'_, ByNamespace> {
    index.write()
}

/// The writer of the KarmadaQuota store and its namespace index (the watch task in
/// production; tests apply watcher events themselves).
pub struct QuotaWriter {
    writer: Writer<CachedQuota>,
    store: Store<CachedQuota>,
    index: SharedIndex,
}

impl std::fmt::Debug for QuotaWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuotaWriter").finish_non_exhaustive()
    }
}

impl QuotaWriter {
    pub(crate) fn new(writer: Writer<CachedQuota>, index: SharedIndex) -> Self {
        let store = writer.as_reader();
        Self {
            writer,
            store,
            index,
        }
    }

    /// Applies one watcher event to the store and the index, as kube's reflector does to
    /// the store alone.
    pub fn apply_watcher_event(&mut self, event: &watcher::Event<CachedQuota>) {
        let mut index = write(&self.index);
        self.writer.apply_watcher_event(event);
        match event {
            watcher::Event::Apply(q) => {
                let Some(ns) = q.metadata.namespace.as_deref() else {
                    return; // not namespaced: no namespace's quota
                };
                let Some(stored) = self.store.get(&ObjectRef::from_obj(q)) else {
                    return; // unreachable: the store has just taken it
                };
                let Some(quotas) = index.get_mut(ns) else {
                    index.insert(ns.to_owned(), vec![stored]);
                    return;
                };
                match position(quotas, q.name()) {
                    Ok(i) => quotas[i] = stored,
                    Err(i) => quotas.insert(i, stored),
                }
            }
            watcher::Event::Delete(q) => {
                let Some(ns) = q.metadata.namespace.as_deref() else {
                    return;
                };
                if let Some(quotas) = index.get_mut(ns) {
                    if let Ok(i) = position(quotas, q.name()) {
                        quotas.remove(i);
                    }
                    if quotas.is_empty() {
                        index.remove(ns);
                    }
                }
            }
            watcher::Event::Init | watcher::Event::InitApply(_) => {}
            watcher::Event::InitDone => *index = build(self.store.state()),
        }
    }
}

/// The index of `quotas` (a Store's whole state).
fn build(quotas: Vec<Arc<CachedQuota>>) -> ByNamespace {
    let mut index = ByNamespace::new();
    for q in quotas {
        if let Some(ns) = q.metadata.namespace.clone() {
            index.entry(ns).or_default().push(q);
        }
    }
    for quotas in index.values_mut() {
        quotas.sort_by(|a, b| a.name().cmp(b.name()));
        quotas.shrink_to_fit();
    }
    index
}
