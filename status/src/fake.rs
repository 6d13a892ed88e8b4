//! An in-memory [`StatusStore`] with the apiserver's resourceVersion semantics and fault
//! injection: the one fake the webhook's and the controller's tests write against.

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use karmada_quota_crds::{KarmadaQuota, QuotaObject};

use crate::store::{StatusStore, StoreError};

/// A change another writer makes to the stored object right before a write is checked.
pub type Intrusion<K = KarmadaQuota> = Box<dyn FnOnce(&mut K) + Send>;

/// The error message of an injected API failure.
pub const INJECTED_FAILURE: &str = "etcdserver: request timed out";

type Key = (String, String);

fn key_of<K: QuotaObject>(q: &K) -> Key {
    (
        q.meta().namespace.clone().unwrap_or_default(),
        q.meta().name.clone().unwrap_or_default(),
    )
}

/// In-memory quota objects of kind `K` keyed by (namespace, name) (namespace empty for a
/// cluster-scoped kind). Every successful status write bumps the resourceVersion; a write
/// whose resourceVersion is not the stored one conflicts.
pub struct FakeStore<K: QuotaObject = KarmadaQuota> {
    objects: Mutex<BTreeMap<Key, K>>,
    rv: AtomicUsize,
    /// Successful status writes.
    pub writes: AtomicUsize,
    /// GET calls.
    pub gets: AtomicUsize,
    /// Writes refused with 409.
    pub conflicts: AtomicUsize,
    /// Every status written, in order.
    written: Mutex<Vec<(Key, K::Status)>>,
    /// Applied (one per write call, in order; a targeted one only to a write of its
    /// quota) to the stored object right before the write is checked: another writer got
    /// there first, so that write conflicts.
    intrusions: Mutex<VecDeque<(Option<Key>, Intrusion<K>)>>,
    /// Every write fails with an API error.
    pub fail: AtomicBool,
    /// Writes of quotas with this name fail with an API error.
    fail_quota: Mutex<Option<String>>,
    /// Reads (GET) of quotas with this name fail with an API error.
    fail_get: Mutex<Option<String>>,
    /// Every n-th write call (1st, n+1-th, …) finds that another writer got there first.
    pub conflict_every: AtomicUsize,
    calls: AtomicUsize,
    /// Writes never complete.
    pub hang: AtomicBool,
    /// Writes of quotas with this name never complete.
    hang_quota: Mutex<Option<String>>,
    /// Latency of each write (lets requests pile up into batches).
    write_latency: Mutex<Duration>,
}

impl<K: QuotaObject> Default for FakeStore<K> {
    fn default() -> Self {
        Self {
            objects: Mutex::default(),
            rv: AtomicUsize::default(),
            writes: AtomicUsize::default(),
            gets: AtomicUsize::default(),
            conflicts: AtomicUsize::default(),
            written: Mutex::default(),
            intrusions: Mutex::default(),
            fail: AtomicBool::default(),
            fail_quota: Mutex::default(),
            fail_get: Mutex::default(),
            conflict_every: AtomicUsize::default(),
            calls: AtomicUsize::default(),
            hang: AtomicBool::default(),
            hang_quota: Mutex::default(),
            write_latency: Mutex::default(),
        }
    }
}

impl<K: QuotaObject> FakeStore<K> {
    /// A store holding `quotas` as they are (each with its namespace (if namespaced) and
    /// name set; a resourceVersion below 100 if any, so later versions are newer).
    pub fn with(quotas: &[K]) -> Arc<Self> {
        let s = Self::default();
        s.rv.store(100, Ordering::SeqCst);
        for q in quotas {
            s.objects.lock().insert(key_of(q), q.clone());
        }
        Arc::new(s)
    }

    /// Store `q` as is (a create or an out-of-band replace), with a new resourceVersion.
    pub fn put(&self, mut q: K) {
        q.meta_mut().resource_version = Some(self.next_rv());
        self.objects.lock().insert(key_of(&q), q);
    }

    /// Delete a quota.
    pub fn delete(&self, namespace: &str, name: &str) {
        self.objects
            .lock()
            .remove(&(namespace.to_owned(), name.to_owned()));
    }

    /// The stored object. Panics when it is absent (a test bug).
    pub fn object(&self, namespace: &str, name: &str) -> K {
        self.objects
            .lock()
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
            .unwrap_or_else(|| panic!("no quota {namespace}/{name} in the fake store"))
    }

    /// Every status written so far for `namespace/name`, in order.
    pub fn written(&self, namespace: &str, name: &str) -> Vec<K::Status> {
        self.written
            .lock()
            .iter()
            .filter(|(k, _)| k.0 == namespace && k.1 == name)
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// Queue a concurrent write before the next write call (see the `intrusions` field).
    pub fn intrude(&self, f: impl FnOnce(&mut K) + Send + 'static) {
        self.intrusions.lock().push_back((None, Box::new(f)));
    }

    /// Queue a concurrent write before the next write of `namespace/name`.
    pub fn intrude_on(&self, namespace: &str, name: &str, f: impl FnOnce(&mut K) + Send + 'static) {
        let key = (namespace.to_owned(), name.to_owned());
        self.intrusions.lock().push_back((Some(key), Box::new(f)));
    }

    /// Make writes of quotas named `name` fail (`None`: none).
    pub fn fail_quota(&self, name: Option<&str>) {
        *self.fail_quota.lock() = name.map(str::to_owned);
    }

    /// Make reads (GET) of quotas named `name` fail (`None`: none).
    pub fn fail_get(&self, name: Option<&str>) {
        *self.fail_get.lock() = name.map(str::to_owned);
    }

    /// Make writes of quotas named `name` never complete (`None`: none).
    pub fn hang_quota(&self, name: Option<&str>) {
        *self.hang_quota.lock() = name.map(str::to_owned);
    }

    /// Delay every write by `latency`.
    pub fn set_write_latency(&self, latency: Duration) {
        *self.write_latency.lock() = latency;
    }

    fn next_rv(&self) -> String {
        (self.rv.fetch_add(1, Ordering::SeqCst) + 1).to_string()
    }
}

impl<K: QuotaObject> StatusStore<K> for FakeStore<K> {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<K, StoreError>> {
        Box::pin(async move {
            self.gets.fetch_add(1, Ordering::SeqCst);
            if self.fail_get.lock().as_deref() == Some(name) {
                return Err(StoreError::Api(INJECTED_FAILURE.to_owned()));
            }
            self.objects
                .lock()
                .get(&(namespace.to_owned(), name.to_owned()))
                .cloned()
                .ok_or(StoreError::NotFound)
        })
    }

    fn replace_status<'a>(&'a self, quota: &'a K) -> BoxFuture<'a, Result<K, StoreError>> {
        Box::pin(async move {
            let latency = *self.write_latency.lock();
            if !latency.is_zero() {
                tokio::time::sleep(latency).await;
            }
            let hanging = self.hang_quota.lock().clone();
            if self.hang.load(Ordering::SeqCst)
                || (hanging.is_some() && hanging == quota.meta().name)
            {
                std::future::pending::<()>().await;
            }
            let failing = self.fail_quota.lock().clone();
            if self.fail.load(Ordering::SeqCst) || failing == quota.meta().name {
                return Err(StoreError::Api(INJECTED_FAILURE.to_owned()));
            }
            let key = key_of(quota);
            let call = self.calls.fetch_add(1, Ordering::SeqCst);
            let every = self.conflict_every.load(Ordering::SeqCst);
            let intrusion = {
                let mut queue = self.intrusions.lock();
                queue
                    .iter()
                    .position(|(k, _)| k.as_ref().is_none_or(|k| *k == key))
                    .and_then(|i| queue.remove(i))
                    .map(|(_, f)| f)
            }
            .or_else(|| {
                (every > 0 && call.is_multiple_of(every))
                    .then(|| Box::new(|_: &mut K| {}) as Intrusion<K>)
            });
            let mut objects = self.objects.lock();
            let stored = objects.get_mut(&key).ok_or(StoreError::NotFound)?;
            if let Some(f) = intrusion {
                f(stored);
                stored.meta_mut().resource_version = Some(self.next_rv());
            }
            if stored.meta().resource_version != quota.meta().resource_version {
                self.conflicts.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::Conflict);
            }
            self.writes.fetch_add(1, Ordering::SeqCst);
            *stored.status_mut() = quota.status().cloned();
            stored.meta_mut().resource_version = Some(self.next_rv());
            self.written
                .lock()
                .push((key, quota.status().cloned().unwrap_or_default()));
            Ok(stored.clone())
        })
    }
}
