//! The simulated apiserver: the objects of the three kinds the protocol touches and, per
//! kind, the ordered log of their changes that every watch reads.
//!
//! - KarmadaQuotas live in `status::fake::FakeStore` (resourceVersions, compare-and-swap
//!   of the status); every change that succeeds is appended to the quota log.
//! - Reservation batches live in `status::batch_store::FakeBatchStore` (the create as the
//!   compare-and-swap, uids, delete preconditions); its change feed is the batch log.
//! - ResourceBindings are the simulation's own (what the apiserver stored after the
//!   webhook allowed them).
//!
//! A log keeps every change, so a list can be served as of any earlier position: the
//! current one (a consistent list) or an older one (another apiserver's watch cache).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaReservation, ResourceBinding};
use karmada_quota_status::batch_store::{FakeBatchStore, FakeChange};
use karmada_quota_status::fake::FakeStore;
use tokio::sync::Notify;

use crate::clock;

/// Lock `m`, ignoring poison (a panic already fails the run).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

/// One change of one object.
#[derive(Clone, Debug)]
pub enum Change<T> {
    /// Created or modified: its new state.
    Put(T),
    /// Deleted: its last state.
    Gone(T),
}

/// One entry of a kind's log.
#[derive(Clone, Debug)]
pub struct Entry<T> {
    /// When it happened (simulated ms).
    pub at: u64,
    /// The object's key (namespace/name).
    pub key: String,
    /// What happened.
    pub change: Change<T>,
}

/// A kind's changes, in the order of their writes.
#[derive(Debug)]
pub struct Log<T> {
    entries: Vec<Entry<T>>,
    /// Changes from before the run (the objects it starts with): no list is older.
    base: usize,
    /// The watches to wake when the log grows, in the order they subscribed (a tokio
    /// `watch` channel would wake them in a random order).
    subscribers: Vec<Arc<Notify>>,
}

impl<T: Clone> Default for Log<T> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
            base: 0,
            subscribers: Vec::new(),
        }
    }
}

impl<T: Clone> Log<T> {
    /// Append a change (watchers are woken).
    pub fn push(&mut self, key: String, change: Change<T>) {
        self.entries.push(Entry {
            at: clock::now_ms(),
            key,
            change,
        });
        for s in &self.subscribers {
            s.notify_one();
        }
    }

    /// How many changes there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Change `i`.
    pub fn get(&self, i: usize) -> Option<Entry<T>> {
        self.entries.get(i).cloned()
    }

    /// The first position whose change happened at or after `ms` (never before the
    /// objects the run starts with).
    pub fn position_at(&self, ms: u64) -> usize {
        self.entries.partition_point(|e| e.at < ms).max(self.base)
    }

    /// The changes so far are the state the run starts with.
    pub fn settle(&mut self) {
        self.base = self.entries.len();
    }

    /// The objects after the first `upto` changes, in key order (a list at that point).
    pub fn snapshot(&self, upto: usize) -> Vec<T> {
        let mut objects = BTreeMap::new();
        for e in &self.entries[..upto.min(self.entries.len())] {
            match &e.change {
                Change::Put(o) => {
                    objects.insert(e.key.clone(), o.clone());
                }
                Change::Gone(_) => {
                    objects.remove(&e.key);
                }
            }
        }
        objects.into_values().collect()
    }

    /// Wake `waker` whenever the log grows.
    pub fn subscribe(&mut self, waker: Arc<Notify>) {
        self.subscribers.push(waker);
    }
}

/// The logs, shared with the watches.
pub type Shared<T> = Arc<Mutex<Log<T>>>;

/// The simulated apiserver.
pub struct Apiserver {
    /// KarmadaQuotas.
    pub quotas: Arc<FakeStore>,
    /// Their changes.
    pub quota_log: Shared<KarmadaQuota>,
    /// Reservation batches.
    pub batches: Arc<FakeBatchStore>,
    /// Their changes.
    pub batch_log: Shared<KarmadaQuotaReservation>,
    /// ResourceBindings by namespace/name.
    bindings: Mutex<BTreeMap<String, ResourceBinding>>,
    /// Their changes.
    pub binding_log: Shared<ResourceBinding>,
}

/// `namespace/name`.
pub fn key_of(meta: &kube::core::ObjectMeta) -> String {
    format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or_default(),
        meta.name.as_deref().unwrap_or_default()
    )
}

impl Apiserver {
    /// An apiserver holding `quotas`.
    pub fn new(quotas: &[KarmadaQuota]) -> Self {
        let batches = Arc::new(FakeBatchStore::new());
        let batch_log: Shared<KarmadaQuotaReservation> = Arc::default();
        let feed = batch_log.clone();
        batches.on_change(move |change| {
            let (key, change) = match change {
                FakeChange::Created(b) => (key_of(&b.metadata), Change::Put(b.clone())),
                FakeChange::Deleted(b) => (key_of(&b.metadata), Change::Gone(b.clone())),
            };
            lock(&feed).push(key, change);
        });
        let api = Self {
            quotas: FakeStore::with(&[]),
            quota_log: Arc::default(),
            batches,
            batch_log,
            bindings: Mutex::default(),
            binding_log: Arc::default(),
        };
        for q in quotas {
            api.create_quota(q.clone());
        }
        lock(&api.quota_log).settle();
        api
    }

    /// A status write succeeded: its object is the quota's newest change.
    pub fn quota_written(&self, q: &KarmadaQuota) {
        lock(&self.quota_log).push(key_of(&q.metadata), Change::Put(q.clone()));
    }

    /// Create a quota (before the run, or while it goes on): the newest change of the
    /// quota log.
    pub fn create_quota(&self, q: KarmadaQuota) {
        let (namespace, name) = (
            q.metadata.namespace.clone().unwrap_or_default(),
            q.metadata.name.clone().unwrap_or_default(),
        );
        self.quotas.put(q);
        let stored = self.quotas.object(&namespace, &name);
        self.quota_written(&stored);
    }

    /// Change a quota's spec (an edit by its owner): a new resourceVersion.
    pub fn edit_quota(&self, namespace: &str, name: &str, edit: impl FnOnce(&mut KarmadaQuota)) {
        let mut q = self.quotas.object(namespace, name);
        edit(&mut q);
        self.quotas.put(q);
        let stored = self.quotas.object(namespace, name);
        self.quota_written(&stored);
    }

    /// Store a binding (created or updated).
    pub fn put_binding(&self, rb: ResourceBinding) {
        let key = key_of(&rb.metadata);
        lock(&self.bindings).insert(key.clone(), rb.clone());
        lock(&self.binding_log).push(key, Change::Put(rb));
    }

    /// Delete a binding; its last state, if it was stored.
    pub fn delete_binding(&self, namespace: &str, name: &str) -> Option<ResourceBinding> {
        let key = format!("{namespace}/{name}");
        let gone = lock(&self.bindings).remove(&key)?;
        lock(&self.binding_log).push(key, Change::Gone(gone.clone()));
        Some(gone)
    }

    /// Every stored binding, by namespace/name.
    pub fn bindings(&self) -> Vec<ResourceBinding> {
        lock(&self.bindings).values().cloned().collect()
    }

    /// The stored binding namespace/name.
    pub fn binding(&self, namespace: &str, name: &str) -> Option<ResourceBinding> {
        lock(&self.bindings)
            .get(&format!("{namespace}/{name}"))
            .cloned()
    }
}
