//! One webhook replica, as `webhook/src/main.rs` wires it
//! but over the simulated apiserver: the real `QuotaCache`, `Ledger` and `Batcher`, fed by
//! simulated watches (the batch watch first; the quota watches once the batch list is in,
//! each re-listing at once when the ledger asks). A crash ends the incarnation: its
//! watches stop, its calls never come back, its answers are not delivered; a restart is
//! a fresh incarnation with empty memory.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use karmada_quota_core::decision::Decision;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, KarmadaQuotaReservation};
use karmada_quota_status::fake::FakeStore;
use karmada_quota_webhook::cache::relists::Relists;
use karmada_quota_webhook::cache::{
    CachedClusterQuota, ClusterQuotaWriter, QuotaWriter, Watch as Kind,
};
use karmada_quota_webhook::ledger::Ledger;
use karmada_quota_webhook::{
    Batcher, BatcherConfig, BindingRequest, CachedQuota, Metrics, QuotaCache, Stores,
};
use kube::runtime::watcher::Event;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::apiserver::Shared;
use crate::clock;
use crate::conn::Conn;
use crate::watch::{Feed, Process, Sink, Stall, deliver_early};
use crate::world::World;

/// The namespace of the reservation batches.
pub const BATCH_NS: &str = "kq-system";
/// `--reservation-ttl` in the simulation (short, so the liveness phase need not wait long).
pub const TTL: Duration = Duration::from_secs(10);
/// Chance (per mille) that a pending batch event lands when a decision reads the next
/// number, when `preempt` is on.
const PREEMPT: u32 = 500;
/// `--decision-timeout`.
pub const DECISION_TIMEOUT: Duration = Duration::from_secs(2);

/// A running incarnation of a replica.
#[derive(Clone)]
pub struct Replica {
    /// `r<id>.<incarnation>`.
    pub name: String,
    /// Alive until it crashes.
    pub alive: Arc<AtomicBool>,
    /// Its watches' stall.
    pub stall: Arc<Stall>,
    batcher: Batcher,
    ledger: Arc<Ledger>,
    cache: QuotaCache,
}

/// The batch watch's consumer: the ledger. A re-list it asks for (after a batch re-list
/// that found unseen numbers) wakes the quota watches, which then list again.
struct LedgerSink {
    ledger: Arc<Ledger>,
    requests: watch::Receiver<u64>,
    quota_watches: Vec<Arc<Notify>>,
}

impl LedgerSink {
    fn init_done(&mut self) {
        // As the ledger's own watch loop: relisted only once the re-list is applied.
        self.ledger.apply(&Event::InitDone);
        self.ledger.watch_relisted();
        if self.requests.has_changed().unwrap_or(false) {
            self.requests.borrow_and_update();
            for w in &self.quota_watches {
                w.notify_one();
            }
        }
    }
}

impl Sink<KarmadaQuotaReservation> for LedgerSink {
    fn init(&mut self) {
        self.ledger.apply(&Event::Init);
    }
    fn init_apply(&mut self, b: KarmadaQuotaReservation) {
        self.ledger.apply(&Event::InitApply(b));
    }
    fn init_done(&mut self) {
        LedgerSink::init_done(self);
    }
    fn apply(&mut self, b: KarmadaQuotaReservation) {
        self.ledger.apply(&Event::Apply(b));
    }
    fn delete(&mut self, b: KarmadaQuotaReservation) {
        self.ledger.apply(&Event::Delete(b));
    }
    fn failed(&mut self) {
        self.ledger.watch_failed();
    }
}

/// What the cache's quota watches do besides feeding a writer: report lists to `Relists`
/// (as `cache/watch.rs`'s `run_watch`).
struct QuotaSink<W, C> {
    writer: W,
    cached: std::marker::PhantomData<fn() -> C>,
    relists: Relists,
    requests: watch::Receiver<u64>,
    generation: u64,
    kind: Kind,
}

/// A writer of one quota kind's store.
trait Apply<T>: Send + 'static {
    fn event(&mut self, event: &Event<T>);
}

impl Apply<CachedQuota> for QuotaWriter {
    fn event(&mut self, event: &Event<CachedQuota>) {
        self.apply_watcher_event(event);
    }
}

impl Apply<CachedClusterQuota> for ClusterQuotaWriter {
    fn event(&mut self, event: &Event<CachedClusterQuota>) {
        self.apply_watcher_event(event);
    }
}

/// The API object a cache stores as `C`.
trait Cachable<C>: Clone + Send + 'static {
    fn cached(self) -> C;
}

impl Cachable<CachedQuota> for KarmadaQuota {
    fn cached(self) -> CachedQuota {
        CachedQuota::from_object(self)
    }
}

impl Cachable<CachedClusterQuota> for KarmadaClusterQuota {
    fn cached(self) -> CachedClusterQuota {
        CachedClusterQuota::from_object(self)
    }
}

impl<T: Cachable<C>, C: Send + 'static, W: Apply<C>> Sink<T> for QuotaSink<W, C> {
    fn init(&mut self) {
        self.generation = *self.requests.borrow();
        self.relists.list_begun();
        self.writer.event(&Event::Init);
    }
    fn init_apply(&mut self, q: T) {
        self.writer.event(&Event::InitApply(q.cached()));
    }
    fn init_done(&mut self) {
        self.writer.event(&Event::InitDone);
        self.relists.listed(self.kind, self.generation);
    }
    fn apply(&mut self, q: T) {
        self.writer.event(&Event::Apply(q.cached()));
    }
    fn delete(&mut self, q: T) {
        self.writer.event(&Event::Delete(q.cached()));
    }
    fn failed(&mut self) {}
}

/// While a decision runs, before it reads the next number, the batch watch's next event
/// may land (fault `preempt`). The hook holds the feed weakly: the feed's sink holds the
/// ledger, which holds the hook.
fn preempt(
    name: &str,
    world: &Arc<World>,
    ledger: &Ledger,
    stall: &Arc<Stall>,
    feed: &Arc<Mutex<Feed<LedgerSink>>>,
) {
    let (world, log, stall) = (world.clone(), world.api.batch_log.clone(), stall.clone());
    let feed = Arc::downgrade(feed);
    let line = format!("{name}: a batch event lands during a decision (injected)");
    ledger.set_preempt(move || {
        let Some(feed) = feed.upgrade() else { return };
        if world.fault(world.faults.preempt, PREEMPT) && deliver_early(&log, &stall, &feed) {
            world.trace(line.clone());
        }
    });
}

impl Replica {
    /// Start incarnation `incarnation` of replica `id`.
    pub fn start(
        world: &Arc<World>,
        id: usize,
        incarnation: u32,
        cluster_log: &Shared<KarmadaClusterQuota>,
    ) -> Self {
        let name = format!("r{id}.{incarnation}");
        let alive = Arc::new(AtomicBool::new(true));
        let stall = Arc::new(Stall::default());
        let conn = Conn::new(world.clone(), name.clone(), alive.clone());
        let (cache, writers) = QuotaCache::with_writers();
        let mut namespaces = writers.namespaces;
        namespaces.apply_watcher_event(&Event::Init);
        namespaces.apply_watcher_event(&Event::InitDone);
        let relists = cache.relists().clone();
        let ledger = Ledger::with_writer_prefix(
            Arc::new(conn.clone()),
            BATCH_NS,
            relists.clone(),
            name.clone(),
        );
        let process = Process {
            world: world.clone(),
            alive: alive.clone(),
            stall: stall.clone(),
        };
        let mut quotas = process
            .watch(format!("{name}.quotas"), world.api.quota_log.clone())
            .relisting(relists.subscribe());
        let mut clusters = process
            .watch(format!("{name}.clusterquotas"), cluster_log.clone())
            .relisting(relists.subscribe());
        // Consistent lists (R23), served as bounded ones (crate::watch); reverted for the
        // simulation only (bench/sim.md).
        let bounded = !cfg!(feature = "revert-consistent-quota-lists");
        quotas.bounded = bounded;
        clusters.bounded = bounded;
        let batches = process.watch(format!("{name}.batches"), world.api.batch_log.clone());
        let feed = Arc::new(Mutex::new(Feed {
            cursor: None,
            sink: LedgerSink {
                ledger: ledger.clone(),
                requests: relists.subscribe(),
                quota_watches: vec![quotas.waker(), clusters.waker()],
            },
        }));
        preempt(&name, world, &ledger, &stall, &feed);
        tokio::spawn(batches.run_shared(feed));
        let quota_sink = QuotaSink {
            writer: writers.quotas,
            cached: std::marker::PhantomData,
            relists: relists.clone(),
            requests: relists.subscribe(),
            generation: 0,
            kind: Kind::Quotas,
        };
        let cluster_sink = QuotaSink {
            writer: writers.clusters,
            cached: std::marker::PhantomData,
            relists: relists.clone(),
            requests: relists.subscribe(),
            generation: 0,
            kind: Kind::ClusterQuotas,
        };
        let synced = ledger.clone();
        tokio::spawn(async move {
            // The quota watches start once the batch list is in (webhook main).
            synced.wait_synced().await;
            tokio::spawn(clusters.run(cluster_sink));
            quotas.run(quota_sink).await;
        });
        let config = BatcherConfig {
            reservation_ttl: TTL,
            linger: std::time::Duration::from_millis(world.config.linger_ms),
            ..BatcherConfig::default()
        };
        let no_cluster_quotas: &[KarmadaClusterQuota] = &[];
        let batcher = Batcher::with_stores(
            Stores {
                quotas: Arc::new(conn),
                cluster_quotas: FakeStore::with(no_cluster_quotas),
                ledger: ledger.clone(),
            },
            cache.clone(),
            Arc::new(Metrics::default()),
            config,
            clock::replica_clock(id),
        );
        world.trace(format!("{name}: started"));
        Self {
            name,
            alive,
            stall,
            batcher,
            ledger,
            cache,
        }
    }

    /// What this replica's views hold for the quota `compute` of `namespace` (for a
    /// failure's report): its cached copy and the batch entries it counts.
    pub fn describe(&self, namespace: &str) -> String {
        let key = karmada_quota_core::selection::QuotaKey::Namespaced {
            namespace: namespace.to_owned(),
            name: "compute".to_owned(),
        };
        let cached = self.cache.quota(namespace, "compute");
        let folded = cached.as_ref().and_then(|c| c.folded_through());
        let rv = cached.as_ref().and_then(|c| c.resource_version());
        let counted: Vec<String> = self.ledger.with_view(|v| {
            v.unfolded(&key, folded)
                .map(|(s, e)| {
                    let live = v.live().any(|l| l == s);
                    format!(
                        "{s}{}:{}:{:?}",
                        if live { "" } else { "(tombstone)" },
                        e.reserved_by.name,
                        e.reserved
                    )
                })
                .collect()
        });
        format!(
            "{}: cache rv {rv:?} foldedThrough {folded:?}, newest batch {:?}, counts {counted:?}",
            self.name,
            self.ledger.newest()
        )
    }

    /// Whether this replica's cache holds the quota `compute` of `namespace`.
    pub fn holds_quota(&self, namespace: &str) -> bool {
        self.cache.quota(namespace, "compute").is_some()
    }

    /// Whether this incarnation still runs.
    pub fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// Crash: every task of this incarnation stops at its next step.
    pub fn crash(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }

    /// Review `request` as the admission handler would (503 until both views are
    /// listed); the answer, unless this incarnation died meanwhile (`None`: the
    /// apiserver's call failed).
    pub async fn review(&self, request: BindingRequest) -> Option<Result<Decision, String>> {
        if !self.ledger.is_synced() || !self.cache.is_synced() {
            return Some(Err("503 not ready".into()));
        }
        let deadline = Instant::now() + DECISION_TIMEOUT;
        let answer =
            tokio::time::timeout_at(deadline, self.batcher.submit(request, deadline)).await;
        if !self.is_alive() {
            return None;
        }
        Some(match answer {
            Ok(Ok(d)) => Ok(d),
            Ok(Err(e)) => Err(format!("{} {}", e.code(), e)),
            Err(_) => Err("504 decision timeout".into()),
        })
    }
}
