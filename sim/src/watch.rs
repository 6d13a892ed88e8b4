//! A simulated watch: one consumer's list-then-watch of one kind's log.
//!
//! - Events come in the log's order (the apiserver keeps one kind's order), each after a
//!   delay of this watch's own, so two kinds' events reach a consumer reordered.
//! - A stall (the whole process's watches fall silent, no error) holds every event until
//!   it ends.
//! - A watch error (410 Gone, a reset) reports the failure and, after a backoff, lists
//!   again; a list may break off midway (an error between its pages).
//! - A list is served as of the log's head, or — a stale list, from another apiserver's
//!   watch cache that lags by up to [`STALE_MS`] — as of an earlier position, possibly
//!   older than what the consumer had seen; the watch then goes on from that position
//!   (the events after it come again), each no earlier than that cache's lag after it
//!   happened.
//! - A *bounded* watch never lists older than what it has seen. The controller's binding
//!   watch (controller/src/cache_list) bounds every re-list:
//!   `resourceVersionMatch=NotOlderThan` with the newest position it has seen; its first
//!   list is a consistent one (as of the log's head). A cache behind the bound waits
//!   until it has the bound's change, as the apiserver's watch cache does for up to
//!   [`BOUND_WAIT_MS`]; past that the list is refused (`504 Too large resource
//!   version`), the watch fails, and its next list is a consistent one. The webhook's
//!   quota watches list consistently every time (docs/reservations.md R23); the
//!   simulation serves them as bounded watches, whose lists include the consistent one
//!   and older ones down to the bound (more schedules, none that production lacks).
//! - A re-list asked for (the webhook's quota watches, `cache::relists`) starts at once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::Duration;

use tokio::sync::{Notify, watch};

use crate::apiserver::{Change, Shared, lock};
use crate::clock;
use crate::world::World;

/// How old a stale list may be.
pub const STALE_MS: u64 = 5_000;
/// How long a watch cache waits to reach a list's bound before refusing it (the
/// apiserver's 3 s).
pub const BOUND_WAIT_MS: u64 = 3_000;
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
    /// The list just completed began at re-list generation `generation` (the newest asked
    /// for on [`Watch::relisting`]'s channel before it began; 0 without one).
    fn listed_at(&mut self, _generation: u64) {}
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

    fn stalled(&self) -> bool {
        self.0.load(Ordering::SeqCst) > clock::now_ms()
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
    /// Its lists are never older than what it has seen, its first one is consistent.
    pub bounded: bool,
    /// Re-lists asked for (a new value: list again at once); looked at whenever the
    /// watch is woken (the asker wakes it: [`Watch::waker`]).
    pub relists: Option<watch::Receiver<u64>>,
    /// Woken when the log grows or a re-list is asked for.
    wake: Arc<Notify>,
    /// How far behind the cache serving this watch is (ms; 0 after a list at the head).
    lag_ms: u64,
    /// The newest position this watch has seen (lists bounded by it: `bounded`).
    seen: Option<usize>,
    /// The re-list generation the last list began at (a newer one asked for: the next
    /// list is a consistent one, as `cache_list` lists when the fence asks).
    begun: u64,
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
            bounded: false,
            lag_ms: 0,
            seen: None,
            begun: 0,
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
        let max = self.world.config.backoff_max_ms.max(200);
        let ms = self.world.rng(|r| r.between(200, max));
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    /// The feed's position, kept as the newest seen before the feed leaves it.
    fn keep_seen<S>(&mut self, feed: &SharedFeed<S>) {
        if let Some(c) = lock(feed).cursor {
            self.seen = Some(self.seen.map_or(c, |s| s.max(c)));
        }
    }

    /// Where a list is served and how far behind its cache is: `None` when its bound
    /// (the binding watch's) is more than [`BOUND_WAIT_MS`] ahead of the cache (refused,
    /// after that wait).
    async fn serve(&mut self) -> Option<(usize, bool, u64)> {
        let (pos, stale) = self.list_position();
        let lag = {
            let log = lock(&self.log);
            clock::now_ms().saturating_sub(log.get(pos).map_or(clock::now_ms(), |e| e.at))
        };
        if !self.bounded {
            return Some((pos, stale, lag));
        }
        let Some(bound) = self.seen else {
            // Nothing seen (a first list, or one after a refusal): a consistent list.
            if stale {
                self.world.trace(format!(
                    "{}: a consistent list, not the stale cache's at {pos}",
                    self.name
                ));
            }
            return Some((lock(&self.log).len(), false, 0));
        };
        if pos >= bound {
            return Some((pos, stale, lag));
        }
        // The cache has the bound's last change once its lag has passed after it.
        let needed = lock(&self.log).get(bound - 1).map_or(0, |e| e.at) + lag + 1;
        let wait = needed.saturating_sub(clock::now_ms());
        self.world.trace(format!(
            "{}: list at {pos} waits {wait} ms for its bound {bound}",
            self.name
        ));
        if wait > BOUND_WAIT_MS {
            tokio::time::sleep(Duration::from_millis(BOUND_WAIT_MS)).await;
            self.world.trace(format!(
                "{}: list refused (504 Too large resource version {bound})",
                self.name
            ));
            self.seen = None;
            return None;
        }
        tokio::time::sleep(Duration::from_millis(wait)).await;
        let pos = lock(&self.log)
            .position_at(clock::now_ms().saturating_sub(lag) + 1)
            .max(bound);
        Some((pos, stale, lag))
    }

    /// One list; `None` when it broke off or was refused (the failure is reported), else
    /// the position the watch goes on from (set in `feed`).
    async fn list<S: Sink<T>>(&mut self, feed: &SharedFeed<S>) -> Option<usize> {
        self.keep_seen(feed);
        lock(feed).cursor = None;
        let generation = self.relists.as_ref().map_or(0, |r| *r.borrow());
        if generation > self.begun {
            // Asked for: as new as the log's head, not merely as what this watch saw.
            self.seen = None;
            self.begun = generation;
        }
        let Some((pos, stale, lag)) = self.serve().await else {
            lock(feed).sink.failed();
            return None;
        };
        if !self.alive() {
            return None;
        }
        lock(feed).sink.init();
        let objects = lock(&self.log).snapshot(pos);
        self.lag_ms = lag;
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
                lock(feed).sink.failed();
                return None;
            }
            lock(feed).sink.init_apply(object);
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
        let at = done(feed, broken.is_none(), pos);
        if at.is_some() {
            lock(feed).sink.listed_at(generation);
        }
        if at.is_some() {
            self.seen = Some(self.seen.map_or(pos, |s| s.max(pos)));
        }
        at
    }

    /// Wait until the log has an event past the feed's cursor (`false`) or a re-list is
    /// asked for (`true`).
    async fn next_or_relist<S>(&mut self, feed: &SharedFeed<S>) -> bool {
        loop {
            if let Some(r) = self.relists.as_mut()
                && r.has_changed().unwrap_or(false)
            {
                r.borrow_and_update();
                return true;
            }
            let cursor = lock(feed).cursor.unwrap_or(usize::MAX);
            if lock(&self.log).len() > cursor {
                return false;
            }
            self.wake.notified().await;
        }
    }

    /// Wait until the cache serving this watch has the next event (its lag after it).
    async fn behind<S>(&self, feed: &SharedFeed<S>) {
        let Some(cursor) = lock(feed).cursor else {
            return;
        };
        let Some(at) = lock(&self.log).get(cursor).map(|e| e.at) else {
            return;
        };
        // Once the faults stop, every cache has caught up.
        let lag = if self.world.faulting() {
            self.lag_ms
        } else {
            0
        };
        let due = at + lag;
        let now = clock::now_ms();
        if due > now {
            tokio::time::sleep(Duration::from_millis(due - now)).await;
        }
    }

    /// Run until the process dies.
    pub async fn run<S: Sink<T>>(self, sink: S) {
        self.run_shared(Arc::new(Mutex::new(Feed { cursor: None, sink })))
            .await;
    }

    /// Run until the process dies, over a feed others may deliver to early
    /// ([`deliver_early`]).
    pub async fn run_shared<S: Sink<T>>(mut self, feed: SharedFeed<S>) {
        while self.alive() {
            if self.list(&feed).await.is_none() {
                self.backoff().await;
                continue;
            }
            loop {
                if self.next_or_relist(&feed).await {
                    self.world
                        .trace(format!("{}: re-list asked for", self.name));
                    break;
                }
                self.stall.wait().await;
                self.behind(&feed).await;
                tokio::time::sleep(self.delay()).await;
                if !self.alive() {
                    return;
                }
                if self.world.fault(self.world.faults.watch_errors, ERROR) {
                    self.world
                        .trace(format!("{}: watch error (injected)", self.name));
                    self.keep_seen(&feed);
                    {
                        let mut f = lock(&feed);
                        f.cursor = None;
                        f.sink.failed();
                    }
                    self.backoff().await;
                    break;
                }
                deliver_next(&self.log, &feed);
            }
        }
    }
}

/// A watch's place in its log and its consumer, shared with whoever delivers an event
/// early.
pub struct Feed<S> {
    /// The next position to deliver (`None` while listing or after a failure).
    pub cursor: Option<usize>,
    /// The consumer.
    pub sink: S,
}

/// A feed shared by its watch task and early deliveries.
pub type SharedFeed<S> = Arc<Mutex<Feed<S>>>;

/// The end of a list: complete (watch on from `pos`) or broken off.
fn done<T, S: Sink<T>>(feed: &SharedFeed<S>, complete: bool, pos: usize) -> Option<usize> {
    let mut f = lock(feed);
    if !complete {
        f.sink.failed();
        return None;
    }
    f.sink.init_done();
    f.cursor = Some(pos);
    Some(pos)
}

/// Deliver the event at the feed's cursor, if the watch is watching and one is there.
fn deliver_next<T: Clone, S: Sink<T>>(log: &Shared<T>, feed: &SharedFeed<S>) -> bool {
    let mut f = lock(feed);
    let Some(cursor) = f.cursor else { return false };
    let Some(entry) = lock(log).get(cursor) else {
        return false;
    };
    f.cursor = Some(cursor + 1);
    match entry.change {
        Change::Put(o) => f.sink.apply(o),
        Change::Gone(o) => f.sink.delete(o),
    }
    true
}

/// Deliver the next pending event now, ahead of its delay — as the watch's own task
/// would on another thread while the caller's code runs — unless the watch is stalled.
pub fn deliver_early<T: Clone, S: Sink<T>>(
    log: &Shared<T>,
    stall: &Stall,
    feed: &SharedFeed<S>,
) -> bool {
    !stall.stalled() && deliver_next(log, feed)
}
