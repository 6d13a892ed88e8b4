//! A simulated watch: one consumer's list-then-watch of one kind's log.
//!
//! - Events come in the log's order (the apiserver keeps one kind's order), each after a
//!   delay of this watch's own, so two kinds' events reach a consumer reordered.
//! - A stall (the whole process's watches fall silent, no error) holds every event until
//!   it ends.
//! - A watch error (410 Gone, a reset) reports the failure and, after a backoff, lists
//!   again; a list may break off midway (an error between its pages).
//! - A list is served as of the log's head, or — a stale list — as of an earlier
//!   position within [`STALE_MS`], possibly older than what the consumer had seen; the
//!   watch then goes on from that position (the events after it come again).
//! - A re-list asked for (the webhook's quota watches, `cache::relists`) starts at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::apiserver::{Change, Shared, lock};
use crate::clock;
use crate::world::World;

/// How old a stale list may be.
pub const STALE_MS: u64 = 5_000;
/// Chance that a list is stale (per mille), when stale lists are on.
const STALE: u32 = 300;
/// Chance that a list breaks off (per mille), when watch errors are on.
const BREAK: u32 = 150;
/// Chance of a watch error before an event (per mille), when watch errors are on.
const ERROR: u32 = 25;

/// What a consumer does with a watch's events (kube's `watcher::Event`s, one by one).
pub trait Sink<T>: Send + 'static {
    /// A list begins.
    fn init(&mut self);
    /// An object of the list.
    fn init_apply(&mut self, object: T);
    /// The list is complete.
    fn init_done(&mut self);
    /// An object was created or changed.
    fn apply(&mut self, object: T);
    /// An object was deleted.
    fn delete(&mut self, object: T);
    /// The watch failed (before a re-list).
    fn failed(&mut self);
}

/// Until when (simulated ms) a process's watches are silent.
#[derive(Debug, Default)]
pub struct Stall(AtomicU64);

impl Stall {
    /// Silence the watches until `until` ms.
    pub fn until(&self, until: u64) {
        self.0.fetch_max(until, Ordering::SeqCst);
    }

    async fn wait(&self) {
        let until = self.0.load(Ordering::SeqCst);
        let now = clock::now_ms();
        if until > now {
            tokio::time::sleep(Duration::from_millis(until - now)).await;
        }
    }
}

/// One watch.
pub struct Watch<T> {
    /// The run.
    pub world: Arc<World>,
    /// Its name in the trace (`r0.batches`).
    pub name: String,
    /// The kind's log.
    pub log: Shared<T>,
    /// The process is alive (the watch ends with it).
    pub alive: Arc<AtomicBool>,
    /// The process's stall.
    pub stall: Arc<Stall>,
    /// Its lists may be stale when `stale_lists` is on (else only with
    /// `stale_binding_lists`: the controller's binding watch).
    pub bindings: bool,
    /// Re-lists asked for (a new value: list again at once); looked at whenever the
    /// watch is woken (the asker wakes it: [`Watch::waker`]).
    pub relists: Option<watch::Receiver<u64>>,
    /// Woken when the log grows or a re-list is asked for.
    wake: Arc<Notify>,
}

/// The process a watch belongs to: its run, liveness and stall.
#[derive(Clone)]
pub struct Process {
    /// The run.
    pub world: Arc<World>,
    /// The process is alive.
    pub alive: Arc<AtomicBool>,
    /// Its stall.
    pub stall: Arc<Stall>,
}

impl Process {
    /// A watch of `log` named `name` in the trace.
    pub fn watch<T: Clone>(&self, name: String, log: Shared<T>) -> Watch<T> {
        let wake = Arc::new(Notify::new());
        lock(&log).subscribe(wake.clone());
        Watch {
            wake,
            world: self.world.clone(),
            name,
            log,
            alive: self.alive.clone(),
            stall: self.stall.clone(),
            relists: None,
            bindings: false,
        }
    }
}

impl<T> Watch<T> {
    /// The watch, listing again at once whenever `relists` changes.
    #[must_use]
    pub fn relisting(mut self, relists: watch::Receiver<u64>) -> Self {
        self.relists = Some(relists);
        self
    }

    /// What wakes the watch (to tell it a re-list was asked for).
    pub fn waker(&self) -> Arc<Notify> {
        self.wake.clone()
    }
}

impl<T: Clone + Send + 'static> Watch<T> {
    fn alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }

    /// The position a list is served at: the head, or an older one.
    fn list_position(&self) -> (usize, bool) {
        let log = lock(&self.log);
        let head = log.len();
        let f = self.world.faults;
        let on = if self.bindings {
            f.stale_binding_lists
        } else {
            f.stale_lists
        };
        if !self.world.fault(on, STALE) {
            return (head, false);
        }
        let oldest = log.position_at(clock::now_ms().saturating_sub(STALE_MS));
        let pos = self.world.rng(|r| r.between(oldest as u64, head as u64)) as usize;
        (pos, pos < head)
    }

    /// The delay before the next event.
    fn delay(&self) -> Duration {
        let ms = if self.world.faults.delays && self.world.faulting() {
            self.world.rng(|r| match r.below(100) {
                0..80 => r.between(0, 5),
                80..95 => r.between(5, 100),
                _ => r.between(100, 1_500),
            })
        } else {
            1
        };
        Duration::from_millis(ms)
    }

    async fn backoff(&self) {
        let ms = self.world.rng(|r| r.between(200, 1_000));
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// One list; `None` when it broke off (the failure is reported), else the position
    /// the watch goes on from.
    async fn list(&mut self, sink: &mut impl Sink<T>) -> Option<usize> {
        sink.init();
        let (pos, stale) = self.list_position();
        let objects = lock(&self.log).snapshot(pos);
        let broken = self
            .world
            .fault(self.world.faults.watch_errors, BREAK)
            .then(|| self.world.rng(|r| r.below(objects.len() as u64 + 1)) as usize);
        self.world.trace(format!(
            "{}: list at {pos}{} ({} objects{})",
            self.name,
            if stale { " (stale)" } else { "" },
            objects.len(),
            broken.map_or(String::new(), |b| format!(", breaks off after {b}"))
        ));
        for (i, object) in objects.into_iter().enumerate() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if !self.alive() {
                return None;
            }
            if broken == Some(i) {
                sink.failed();
                return None;
            }
            sink.init_apply(object);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        if broken.is_some() {
            sink.failed();
            return None;
        }
        sink.init_done();
        Some(pos)
    }

    /// Run until the process dies.
    pub async fn run(mut self, mut sink: impl Sink<T>) {
        while self.alive() {
            let Some(mut cursor) = self.list(&mut sink).await else {
                self.backoff().await;
                continue;
            };
            loop {
                let relist = loop {
                    if let Some(r) = self.relists.as_mut()
                        && r.has_changed().unwrap_or(false)
                    {
                        r.borrow_and_update();
                        break true;
                    }
                    if lock(&self.log).len() > cursor {
                        break false;
                    }
                    self.wake.notified().await;
                };
                if relist {
                    self.world
                        .trace(format!("{}: re-list asked for", self.name));
                    break;
                }
                self.stall.wait().await;
                tokio::time::sleep(self.delay()).await;
                if !self.alive() {
                    return;
                }
                if self.world.fault(self.world.faults.watch_errors, ERROR) {
                    self.world
                        .trace(format!("{}: watch error (injected)", self.name));
                    sink.failed();
                    self.backoff().await;
                    break;
                }
                let Some(entry) = lock(&self.log).get(cursor) else {
                    continue;
                };
                cursor += 1;
                match entry.change {
                    Change::Put(o) => sink.apply(o),
                    Change::Gone(o) => sink.delete(o),
                }
            }
        }
    }
}
