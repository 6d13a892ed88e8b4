//! One process's connection to the simulated apiserver: every call takes a simulated
//! round trip (the request, then the answer), and may fail before it reaches the store,
//! or succeed and lose its answer. A process that crashed stops at its next hop: a call
//! it had sent may still land, its answer is never read. Reads of bindings (the
//! controller's read step, R19) are served from the stored bindings, quorum reads.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use karmada_quota_controller::expired::BindingReads;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaReservation};
use karmada_quota_status::{BatchStore, StatusStore, StoreError};

use crate::world::World;

/// Chance of a failed call (per mille) when store errors are on.
const FAIL: u32 = 40;
/// Chance of a lost answer (per mille) when lost answers are on.
const LOST: u32 = 40;

/// A process's connection.
#[derive(Clone)]
pub struct Conn {
    world: Arc<World>,
    /// Who calls (for the trace).
    who: String,
    /// The calling process is alive.
    alive: Arc<AtomicBool>,
}

impl Conn {
    /// The connection of `who`, alive while `alive` is set.
    pub fn new(world: Arc<World>, who: String, alive: Arc<AtomicBool>) -> Self {
        Self { world, who, alive }
    }

    /// One way of a round trip: a few ms; a dead process never goes on.
    async fn hop(&self) {
        let ms = self.world.rng(|r| r.between(1, 4));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if !self.alive.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    fn failed(&self, what: &str) -> Option<StoreError> {
        self.world
            .fault(self.world.faults.store_errors, FAIL)
            .then(|| {
                self.world
                    .trace(format!("{}: {what} fails (injected)", self.who));
                StoreError::Api("injected: etcdserver: request timed out".into())
            })
    }

    fn lost<T>(&self, what: &str, result: Result<T, StoreError>) -> Result<T, StoreError> {
        if result.is_ok() && self.world.fault(self.world.faults.lost_answers, LOST) {
            self.world.trace(format!(
                "{}: {what} succeeded, its answer is lost (injected)",
                self.who
            ));
            return Err(StoreError::Api("injected: the answer was lost".into()));
        }
        result
    }
}

impl BatchStore for Conn {
    fn create<'a>(
        &'a self,
        batch: &'a KarmadaQuotaReservation,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async move {
            let name = batch.metadata.name.clone().unwrap_or_default();
            let what = format!("create {name}");
            self.hop().await;
            if let Some(e) = self.failed(&what) {
                self.hop().await;
                return Err(e);
            }
            let result = self.world.api.batches.create(batch).await;
            let entries = batch.spec.entries.len();
            self.world.trace(match &result {
                Ok(b) => format!(
                    "{}: created {name} ({entries} entries, uid {})",
                    self.who,
                    b.metadata.uid.as_deref().unwrap_or_default()
                ),
                Err(e) => format!("{}: create {name}: {e}", self.who),
            });
            let result = self.lost(&what, result);
            self.hop().await;
            result
        })
    }

    fn get<'a>(
        &'a self,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuotaReservation, StoreError>> {
        Box::pin(async move {
            self.hop().await;
            if let Some(e) = self.failed(&format!("get {name}")) {
                self.hop().await;
                return Err(e);
            }
            let result = self.world.api.batches.get(name).await;
            self.hop().await;
            result
        })
    }

    fn delete<'a>(
        &'a self,
        name: &'a str,
        uid: Option<&'a str>,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async move {
            let what = format!("delete {name}");
            self.hop().await;
            if let Some(e) = self.failed(&what) {
                self.hop().await;
                return Err(e);
            }
            let result = self.world.api.batches.delete(name, uid).await;
            self.world.trace(match &result {
                Ok(()) => format!("{}: deleted {name}", self.who),
                Err(e) => format!("{}: delete {name}: {e}", self.who),
            });
            let result = self.lost(&what, result);
            self.hop().await;
            result
        })
    }
}

impl BindingReads for Conn {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<(String, i64)>, String>> {
        Box::pin(async move {
            let what = format!("get binding {namespace}/{name}");
            self.hop().await;
            if let Some(e) = self.failed(&what) {
                self.hop().await;
                return Err(e.to_string());
            }
            let found = self.world.api.binding(namespace, name).map(|rb| {
                (
                    rb.metadata.uid.clone().unwrap_or_default(),
                    rb.metadata.generation.unwrap_or(1),
                )
            });
            self.world.trace(format!(
                "{}: {what}: {}",
                self.who,
                found
                    .as_ref()
                    .map_or("none".to_owned(), |(u, g)| format!("{u} gen {g}"))
            ));
            let result = self.lost(&what, Ok(found)).map_err(|e| e.to_string());
            if let Ok(found) = &result {
                let uid = found.as_ref().map(|(u, _)| u.as_str());
                crate::apiserver::lock(&self.world.truth).read(namespace, name, uid);
            }
            self.hop().await;
            result
        })
    }
}

impl StatusStore<KarmadaQuota> for Conn {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            self.hop().await;
            if let Some(e) = self.failed(&format!("get quota {namespace}/{name}")) {
                self.hop().await;
                return Err(e);
            }
            let result = StatusStore::get(&*self.world.api.quotas, namespace, name).await;
            self.hop().await;
            result
        })
    }

    fn replace_status<'a>(
        &'a self,
        quota: &'a KarmadaQuota,
    ) -> BoxFuture<'a, Result<KarmadaQuota, StoreError>> {
        Box::pin(async move {
            let key = crate::apiserver::key_of(&quota.metadata);
            let what = format!("status write {key}");
            self.hop().await;
            if let Some(e) = self.failed(&what) {
                self.hop().await;
                return Err(e);
            }
            let result = self.world.api.quotas.replace_status(quota).await;
            match &result {
                Ok(written) => {
                    self.world.api.quota_written(written);
                    let st = written.status.clone().unwrap_or_default();
                    self.world.trace(format!(
                        "{}: wrote {key} rv {} used {} foldedThrough {:?} entries {}",
                        self.who,
                        written
                            .metadata
                            .resource_version
                            .as_deref()
                            .unwrap_or_default(),
                        st.used.get("requests.cpu").map_or("-", |q| q.0.as_str()),
                        st.folded_through,
                        st.reservations.len()
                    ));
                }
                Err(e) => self.world.trace(format!("{}: {what}: {e}", self.who)),
            }
            let result = self.lost(&what, result);
            self.hop().await;
            result
        })
    }
}
