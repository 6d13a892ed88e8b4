//! The API calls on reservation batches (`KarmadaQuotaReservation`, docs/design.md §5
//! "Reservation batches"): the webhook creates and reads them, the controller deletes
//! them. Behind a trait so that tests run against the in-memory [`FakeBatchStore`].

#[cfg(any(test, feature = "fake"))]
use parking_lot::Mutex;
#[cfg(any(test, feature = "fake"))]
use std::collections::BTreeMap;
#[cfg(any(test, feature = "fake"))]
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use futures::future::BoxFuture;
use karmada_quota_crds::KarmadaQuotaReservation;
use kube::api::{DeleteParams, PostParams, Preconditions};

use crate::store::StoreError;

/// Create, read and delete the batches of one namespace.
pub trait BatchStore: Send + Sync + 'static {
    /// Create `batch` (named by its sequence number): [`StoreError::Conflict`] when a
    /// batch of that name exists (another writer took the number: the compare-and-swap).
    fn create<'a>(
        &'a self,
        batch: &'a KarmadaQuotaReservation,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>>;

    /// The stored batch `name` (a quorum read).
    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>>;

    /// Delete batch `name` — with `uid`, only if the stored batch is that one (a
    /// precondition: [`StoreError::Conflict`] when another batch holds the name now);
    /// [`StoreError::NotFound`] when it is already gone.
    fn delete<'a>(
        &'a self,
        name: &'a str,
        uid: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), StoreError>>;
}

/// [`BatchStore`] over the Kubernetes API, in one namespace.
#[derive(Clone)]
pub struct KubeBatchStore {
    api: kube::Api<KarmadaQuotaReservation>,
}

impl KubeBatchStore {
    /// The batches of `namespace`, through `client`.
    pub fn new(client: kube::Client, namespace: &str) -> Self {
        Self {
            api: kube::Api::namespaced(client, namespace),
        }
    }
}

/// What a create's error means. A 404 on a create is never the batch: the namespace is
/// missing (or the CRD is), which no retry mends, so the error says what to fix.
fn create_error(e: kube::Error, namespace: &str) -> StoreError {
    match e {
        kube::Error::Api(s) if s.is_already_exists() || s.is_conflict() => StoreError::Conflict,
        kube::Error::Api(s) if s.is_not_found() => StoreError::Api(format!(
            "namespace {namespace} does not exist, or the KarmadaQuotaReservation CRD is not \
             installed: create it, or point --reservation-namespace (env \
             KQ_RESERVATION_NAMESPACE) of the webhook and the controller at an existing one \
             (the apiserver said: {})",
            s.message
        )),
        other => other.into(),
    }
}

impl BatchStore for KubeBatchStore {
    fn create<'a>(
        &'a self,
        batch: &'a KarmadaQuotaReservation,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async move {
            self.api
                .create(&PostParams::default(), batch)
                .await
                .map_err(|e| create_error(e, self.api.namespace().unwrap_or_default()))
        })
    }

    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async move { Ok(self.api.get(name).await?) })
    }

    fn delete<'a>(
        &'a self,
        name: &'a str,
        uid: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut params = DeleteParams::default();
            if let Some(uid) = uid {
                params = params.preconditions(Preconditions {
                    uid: Some(uid.to_owned()),
                    resource_version: None,
                });
            }
            self.api.delete(name, &params).await?;
            Ok(())
        })
    }
}

/// A change of a [`FakeBatchStore`], as a watch of it would show it.
#[cfg(any(test, feature = "fake"))]
#[derive(Clone, Debug)]
pub enum FakeChange {
    /// A batch was created.
    Created(KarmadaQuotaReservation),
    /// A batch was deleted (its last state).
    Deleted(KarmadaQuotaReservation),
}

/// Who is told of a [`FakeBatchStore`]'s changes.
#[cfg(any(test, feature = "fake"))]
type Watcher = Box<dyn Fn(&FakeChange) + Send + Sync>;

/// An in-memory [`BatchStore`] with fault injection, for the binaries' tests. Its creates
/// and deletes are shown, in order, to every watcher ([`Self::on_change`]) — at once, or,
/// while [`Self::lag`] is set, once it is released ([`Self::catch_up`]).
#[cfg(any(test, feature = "fake"))]
#[derive(Default)]
pub struct FakeBatchStore {
    batches: Mutex<BTreeMap<String, KarmadaQuotaReservation>>,
    watchers: Mutex<Vec<Watcher>>,
    /// Changes held back while lagging.
    held: Mutex<Vec<FakeChange>>,
    /// Watchers are shown changes only at [`Self::catch_up`] (a watch that lags).
    pub lag: AtomicBool,
    /// Successful creates.
    pub creates: AtomicUsize,
    /// Creates refused because the name was taken.
    pub conflicts: AtomicUsize,
    /// Every create fails with an API error (nothing stored).
    pub fail: AtomicBool,
    /// Every create waits forever (an apiserver that does not answer; nothing stored).
    pub hang: AtomicBool,
    /// Every create is stored but answered with an API error (the outcome a timeout
    /// leaves unknown).
    pub fail_after_store: AtomicBool,
}

#[cfg(any(test, feature = "fake"))]
impl FakeBatchStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Store `batch` as another writer would have (no call counted).
    pub fn put(&self, batch: KarmadaQuotaReservation) {
        let name = batch.metadata.name.clone().unwrap_or_default();
        self.lock().insert(name, batch);
    }

    /// Every stored batch, by name.
    pub fn all(&self) -> Vec<KarmadaQuotaReservation> {
        self.lock().values().cloned().collect()
    }

    /// Show every later create and delete to `f` (a watch of the store).
    pub fn on_change(&self, f: impl Fn(&FakeChange) + Send + Sync + 'static) {
        self.watchers.lock().push(Box::new(f));
    }

    /// Show the changes held back while lagging (under the store's lock, so that no later
    /// write is shown before them).
    pub fn catch_up(&self) {
        let _writes = self.lock();
        let held = std::mem::take(&mut *self.held.lock());
        for change in &held {
            self.show(change);
        }
    }

    fn changed(&self, change: FakeChange) {
        if self.lag.load(Ordering::SeqCst) {
            self.held.lock().push(change);
        } else {
            self.show(&change);
        }
    }

    fn show(&self, change: &FakeChange) {
        for w in self.watchers.lock().iter() {
            w(change);
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeMap<String, KarmadaQuotaReservation>> {
        self.batches.lock()
    }
}

#[cfg(any(test, feature = "fake"))]
impl BatchStore for FakeBatchStore {
    fn create<'a>(
        &'a self,
        batch: &'a KarmadaQuotaReservation,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async move {
            if self.fail.load(Ordering::SeqCst) {
                return Err(StoreError::Api(crate::fake::INJECTED_FAILURE.into()));
            }
            if self.hang.load(Ordering::SeqCst) {
                futures::future::pending::<()>().await;
            }
            let name = batch.metadata.name.clone().unwrap_or_default();
            let mut all = self.lock();
            if all.contains_key(&name) {
                self.conflicts.fetch_add(1, Ordering::SeqCst);
                return Err(StoreError::Conflict);
            }
            // A uid of its own, as the apiserver gives every object it stores.
            let n = self.creates.fetch_add(1, Ordering::SeqCst);
            let mut batch = batch.clone();
            batch
                .metadata
                .uid
                .get_or_insert_with(|| format!("fake-batch-{n}"));
            all.insert(name, batch.clone());
            // Shown under the store's lock: in the order of the writes, as a watch.
            self.changed(FakeChange::Created(batch.clone()));
            drop(all);
            if self.fail_after_store.load(Ordering::SeqCst) {
                return Err(StoreError::Api(crate::fake::INJECTED_FAILURE.into()));
            }
            Ok(batch)
        })
    }

    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async move { self.lock().get(name).cloned().ok_or(StoreError::NotFound) })
    }

    fn delete<'a>(
        &'a self,
        name: &'a str,
        uid: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let mut all = self.lock();
            let stored = all.get(name).ok_or(StoreError::NotFound)?;
            if uid.is_some_and(|uid| stored.metadata.uid.as_deref() != Some(uid)) {
                return Err(StoreError::Conflict);
            }
            let gone = all.remove(name).ok_or(StoreError::NotFound)?;
            self.changed(FakeChange::Deleted(gone));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_crds::reservation_batch::{batch_name, batch_object};

    fn api_error(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_create_answered_404_names_the_missing_namespace_and_the_flag() {
        let e = create_error(
            api_error(
                404,
                "NotFound",
                "namespaces \"karmada-quota-system\" not found",
            ),
            "karmada-quota-system",
        );
        let StoreError::Api(message) = e else {
            panic!("a missing namespace is not the batch's absence: {e:?}");
        };
        for part in [
            "namespace karmada-quota-system does not exist",
            "--reservation-namespace",
            "KQ_RESERVATION_NAMESPACE",
            "namespaces \"karmada-quota-system\" not found",
        ] {
            assert!(message.contains(part), "{part:?} missing from {message:?}");
        }
        assert!(matches!(
            create_error(api_error(409, "AlreadyExists", "taken"), "ns"),
            StoreError::Conflict
        ));
    }

    #[tokio::test]
    async fn a_delete_by_uid_takes_only_that_batch() {
        let store = FakeBatchStore::new();
        let first = store
            .create(&batch_object("ns", 1, Vec::new()))
            .await
            .unwrap();
        let first_uid = first.metadata.uid.clone().expect("a uid");
        store
            .delete(&batch_name(1), Some(&first_uid))
            .await
            .unwrap();
        let second = store
            .create(&batch_object("ns", 1, Vec::new()))
            .await
            .unwrap();
        assert_ne!(second.metadata.uid.as_deref(), Some(first_uid.as_str()));
        assert!(matches!(
            store.delete(&batch_name(1), Some(&first_uid)).await,
            Err(StoreError::Conflict)
        ));
        assert_eq!(store.all().len(), 1, "the second batch stays");
        store.delete(&batch_name(1), None).await.unwrap();
        assert!(matches!(
            store.delete(&batch_name(1), None).await,
            Err(StoreError::NotFound)
        ));
    }
}
