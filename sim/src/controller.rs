//! The controller of the simulation: the real binding `Index`, the real `Batches` (its
//! batch view), the real fold (`desired::compute_with` with `Batches::unfolded`, then
//! `desired::desired_status`, written through `status::update`, the compare-and-swap
//! with re-plan after a 409, after the real read step of expired entries' bindings,
//! `expired::read_for`) and the real sweep (`batches::sweep::sweep_once`, its folds
//! read from the controller's own watch-fed quota copies, as `batches::folds`). It leads
//! alone; it reconciles every quota it holds every few hundred ms and sweeps every
//! second. A crash ends the incarnation; a restart starts with empty memory.
//!
//! After each binding event, the ground truth learns what the index now observes of the
//! bindings not yet released (`truth::Seen`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use parking_lot::RwLock;
use std::time::Duration;

use karmada_quota_controller::batches::folds::Scope;
use karmada_quota_controller::batches::{Batches, sweep};
use karmada_quota_controller::fence::Fence;
use karmada_quota_controller::index::Index;
use karmada_quota_controller::{desired, expired};
use karmada_quota_core::ledger::Observation;
use karmada_quota_core::quota::ReservedBy;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaReservation, QuotaObject, ResourceBinding};
use karmada_quota_status::batches::Fold;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;

use crate::apiserver::{key_of, lock};
use crate::clock;
use crate::conn::Conn;
use crate::truth::Seen;
use crate::watch::{Process, Sink, Stall};
use crate::world::World;

/// The count name of the bindings' template kind (Deployments).
pub const COUNT_NAME: &str = "count/deployments.apps";
/// Status writes per reconcile (first plus retries after 409s).
const WRITE_ATTEMPTS: u32 = 5;

/// The controller's quota copies, as its reflector store holds them.
#[derive(Debug, Default)]
struct QuotaView {
    listed: bool,
    objects: BTreeMap<String, KarmadaQuota>,
    relist: Option<BTreeMap<String, KarmadaQuota>>,
}

/// A running incarnation of the controller.
#[derive(Clone)]
pub struct Controller {
    /// `c.<incarnation>`.
    pub name: String,
    /// Alive until it crashes.
    pub alive: Arc<AtomicBool>,
    /// Its watches' stall.
    pub stall: Arc<Stall>,
    world: Arc<World>,
    index: Arc<RwLock<Index>>,
    batches: Arc<Batches>,
    quotas: Arc<Mutex<QuotaView>>,
    conn: Conn,
    /// Whether it holds the lease.
    leads: Arc<AtomicBool>,
    fence: Arc<Fence>,
    /// Wakes the binding watch (to see a re-list the fence asked for).
    binding_wake: Arc<tokio::sync::Notify>,
}

struct QuotaSink(Arc<Mutex<QuotaView>>);

impl Sink<KarmadaQuota> for QuotaSink {
    fn init(&mut self) {
        lock(&self.0).relist = Some(BTreeMap::new());
    }
    fn init_apply(&mut self, q: KarmadaQuota) {
        if let Some(r) = lock(&self.0).relist.as_mut() {
            r.insert(key_of(&q.metadata), q);
        }
    }
    fn init_done(&mut self) {
        let mut v = lock(&self.0);
        v.objects = v.relist.take().unwrap_or_default();
        v.listed = true;
    }
    fn apply(&mut self, q: KarmadaQuota) {
        lock(&self.0).objects.insert(key_of(&q.metadata), q);
    }
    fn delete(&mut self, q: KarmadaQuota) {
        lock(&self.0).objects.remove(&key_of(&q.metadata));
    }
    fn failed(&mut self) {}
}

struct BatchSink(Arc<Batches>);

/// A batch as the controller's watch reads it (a dynamic object).
fn dynamic(b: KarmadaQuotaReservation) -> DynamicObject {
    let mut v = serde_json::to_value(b).expect("a batch serializes");
    v["apiVersion"] = "quota.karmada.io/v1alpha1".into();
    v["kind"] = "KarmadaQuotaReservation".into();
    serde_json::from_value(v).expect("a batch is an object")
}

impl Sink<KarmadaQuotaReservation> for BatchSink {
    fn init(&mut self) {
        self.0.apply(&Event::Init);
    }
    fn init_apply(&mut self, b: KarmadaQuotaReservation) {
        self.0.apply(&Event::InitApply(dynamic(b)));
    }
    fn init_done(&mut self) {
        self.0.apply(&Event::InitDone);
    }
    fn apply(&mut self, b: KarmadaQuotaReservation) {
        self.0.apply(&Event::Apply(dynamic(b)));
    }
    fn delete(&mut self, b: KarmadaQuotaReservation) {
        self.0.apply(&Event::Delete(dynamic(b)));
    }
    fn failed(&mut self) {}
}

struct BindingSink {
    world: Arc<World>,
    index: Arc<RwLock<Index>>,
}

impl BindingSink {
    fn event(&self, ev: &Event<ResourceBinding>) {
        let mut index = self.index.write();
        index.apply_binding_event(ev, Some(COUNT_NAME), clock::unix_now());
        let mut truth = lock(&self.world.truth);
        for (namespace, name, uid) in truth.unreleased() {
            let by = ReservedBy {
                name,
                uid: uid.clone(),
                ..ReservedBy::default()
            };
            let seen = match index.observation(&namespace, &by) {
                Observation::Seen(g) => Seen::At(g),
                _ => Seen::Absent,
            };
            truth.observed(&uid, seen);
        }
    }
}

impl Sink<ResourceBinding> for BindingSink {
    fn init(&mut self) {
        self.event(&Event::Init);
    }
    fn init_apply(&mut self, rb: ResourceBinding) {
        self.event(&Event::InitApply(rb));
    }
    fn init_done(&mut self) {
        self.event(&Event::InitDone);
    }
    fn listed_at(&mut self, generation: u64) {
        self.index.write().bindings_listed(generation);
    }
    fn apply(&mut self, rb: ResourceBinding) {
        self.event(&Event::Apply(rb));
    }
    fn delete(&mut self, rb: ResourceBinding) {
        self.event(&Event::Delete(rb));
    }
    fn failed(&mut self) {}
}

impl Controller {
    /// Start incarnation `incarnation`: its three watches, its reconcile and sweep loops;
    /// it takes the lease at once when `leads`.
    pub fn start(world: &Arc<World>, incarnation: u32, leads: bool) -> Self {
        let name = format!("c.{incarnation}");
        let alive = Arc::new(AtomicBool::new(true));
        let stall = Arc::new(Stall::default());
        let index = Arc::new(RwLock::new(Index::new(600)));
        let fence = Arc::new(Fence::default());
        let process = Process {
            world: world.clone(),
            alive: alive.clone(),
            stall: stall.clone(),
        };
        let quota_watch = process.watch(format!("{name}.quotas"), world.api.quota_log.clone());
        let batch_watch = process.watch(format!("{name}.batches"), world.api.batch_log.clone());
        let mut binding_watch =
            process.watch(format!("{name}.bindings"), world.api.binding_log.clone());
        binding_watch.bindings = true;
        binding_watch.bounded = true;
        let binding_watch = binding_watch.relisting(fence.asked());
        let c = Self {
            conn: Conn::new(world.clone(), name.clone(), alive.clone()),
            name,
            alive,
            stall,
            world: world.clone(),
            index: index.clone(),
            batches: Arc::new(
                Batches::new(Arc::default()).with_reservation_ttl(crate::replica::TTL),
            ),
            quotas: Arc::default(),
            leads: Arc::default(),
            fence,
            binding_wake: binding_watch.waker(),
        };
        if leads {
            c.take_lease();
        }
        tokio::spawn(quota_watch.run(QuotaSink(c.quotas.clone())));
        tokio::spawn(batch_watch.run(BatchSink(c.batches.clone())));
        tokio::spawn(binding_watch.run(BindingSink {
            world: world.clone(),
            index,
        }));
        tokio::spawn(c.clone().reconcile_loop());
        tokio::spawn(c.clone().sweep_loop());
        world.trace(format!("{}: started", c.name));
        c
    }

    /// Whether this incarnation still runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Crash: every task of this incarnation stops at its next step.
    pub fn crash(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }

    /// Take the lease: the fence moves (the binding watch is told), then it leads.
    pub fn take_lease(&self) {
        let generation = self.fence.took_lease();
        self.binding_wake.notify_one();
        self.leads.store(true, Ordering::SeqCst);
        self.world.trace(format!(
            "{}: takes the lease (fence {generation})",
            self.name
        ));
    }

    /// Lose the lease (deposed while alive): it stops writing and sweeping.
    pub fn lose_lease(&self) {
        self.leads.store(false, Ordering::SeqCst);
        self.world.trace(format!("{}: loses the lease", self.name));
    }

    fn leads(&self) -> bool {
        self.is_alive() && self.leads.load(Ordering::SeqCst)
    }

    /// Whether it may write status now: it leads, past its fence.
    fn may_write(&self) -> bool {
        self.leads() && self.fence.allows(&self.index.read())
    }

    async fn reconcile_loop(self) {
        while self.is_alive() {
            let ms = self.world.rng(|r| r.between(100, 600));
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let ready = self.index.read().bindings_synced() && self.may_write();
            let quotas: Vec<KarmadaQuota> = {
                let v = lock(&self.quotas);
                if !v.listed || !ready {
                    continue;
                }
                v.objects.values().cloned().collect()
            };
            for q in quotas {
                if !self.is_alive() {
                    return;
                }
                if !self.may_write() {
                    break;
                }
                self.reconcile(q).await;
            }
        }
    }

    /// The plan of `q`: its status with the batches above its `foldedThrough` folded.
    fn plan(&self, q: &KarmadaQuota) -> (Option<karmada_quota_crds::KarmadaQuotaStatus>, ()) {
        let now = clock::unix_now();
        let folded = q.quota_status().and_then(|s| s.folded_through);
        let unfolded = self.batches.unfolded(&q.key(), folded);
        let computed = {
            let index = self.index.read();
            desired::compute_with(q, &index, &BTreeMap::new(), now, unfolded.as_ref()).fenced(true)
        };
        let at = jiff::Timestamp::from_second(now).unwrap_or_default();
        (
            desired::desired_status(q, &computed, &BTreeMap::new(), at),
            (),
        )
    }

    async fn reconcile(&self, q: KarmadaQuota) {
        // The leader's read step (controller/src/expired.rs), as the real reconcile runs it.
        expired::read_for(&self.index, &self.conn, &q, clock::unix_now()).await;
        let alive = || self.may_write();
        let written =
            karmada_quota_status::update(&self.conn, q, |q| self.plan(q), alive, WRITE_ATTEMPTS)
                .await;
        if let Err(e) = written {
            self.world
                .trace(format!("{}: reconcile failed: {e}", self.name));
        }
    }

    /// The fold of `key` as the sweep reads it: from the controller's own quota copies.
    fn fold(&self, key: &QuotaKey) -> Fold {
        let scope = Scope {
            namespaced: true,
            namespace: None,
            clusters: true,
            cluster_selector: false,
        };
        let held = match key {
            QuotaKey::Namespaced { namespace, name } => lock(&self.quotas)
                .objects
                .get(&format!("{namespace}/{name}"))
                .map(|q| q.status.as_ref().and_then(|s| s.folded_through)),
            QuotaKey::Cluster { .. } => None,
        };
        scope.fold(key, held)
    }

    async fn sweep_loop(self) {
        while self.is_alive() {
            tokio::time::sleep(sweep::SWEEP_INTERVAL).await;
            if !self.leads() || !lock(&self.quotas).listed {
                continue;
            }
            let swept = sweep::sweep_once(
                &self.batches,
                &self.conn,
                |k| self.fold(k),
                clock::unix_now(),
            )
            .await;
            if swept.deleted + swept.gone + swept.failed > 0 {
                self.world.trace(format!("{}: swept {swept:?}", self.name));
            }
            self.seed().await;
        }
    }

    /// The re-seed of a missing newest number after the sweep (docs/reservations.md R20),
    /// the greatest fold read from the controller's own quota copies.
    async fn seed(&self) {
        use karmada_quota_controller::batches::seed::{Seeded, seed_once};
        if cfg!(feature = "revert-seed") {
            return;
        }
        let greatest = lock(&self.quotas)
            .objects
            .values()
            .filter_map(|q| q.status.as_ref().and_then(|s| s.folded_through))
            .max();
        let seeded = seed_once(
            &self.batches,
            &self.conn,
            crate::replica::BATCH_NS,
            greatest,
        )
        .await;
        if seeded != Seeded::Held {
            self.world.trace(format!("{}: seed {seeded:?}", self.name));
        }
    }
}
