//! The webhook's reservation batches (docs/design.md §5
//! "Reservation batches"): the view of every batch in `--reservation-namespace`
//! (`karmada_quota_status::BatchView`), fed by one watch, and the store the batcher
//! creates batches through.
//!
//! - A batch seen deleted stays counted as a tombstone until this webhook's quota view
//!   shows every quota it names folded it ([`Ledger::settle`]); a re-list that no longer
//!   holds a batch this view held counts as its deletion (same rule).
//! - The quota watches start only once the batch list is in ([`Ledger::wait_synced`]);
//!   they list from the apiserver's watch cache, which may be older than the batch list,
//!   so a decision reads each quota from etcd before its first use (`crate::reserve`'s
//!   `verified`): a batch deleted before this webhook listed the batches was folded
//!   before, and that read, made later, shows its fold.
//! - A batch that does not parse (a hand edit) holds entries the webhook cannot count: it
//!   refuses every admission, naming the batch, until the batch is fixed or deleted.
//! - While the batch watch is down (from its failure until its re-list is in), the view
//!   may be behind: a batch created, folded and deleted meanwhile frees its number, and a
//!   create of `newest seen + 1` would then succeed on a used number, under a decision that
//!   did not count the batch it replaces. The ledger refuses admissions (503, retry) until
//!   the re-list is in ([`Self::watch_failed`], [`Self::watch_relisted`]). A decision that
//!   finds the watch down cuts its restart backoff short (at most one re-list per
//!   [`NUDGED_MIN`]) and waits for the re-list within its own deadline
//!   ([`Self::wait_ready`]) before it refuses: after an apiserver restart the refusals last
//!   one list, not the backoff of up to 10 s the failures built up.
//! - A re-list (the batch watch failed and started over) that shows numbers this view
//!   never held — batches created, folded and deleted while the watch was down — cannot
//!   know their entries, and the quota view may not show their folds yet (its watch may
//!   have lagged or failed too): the ledger asks both quota watches to list again
//!   (`crate::cache::relists`), which also makes every decision read its quotas from etcd
//!   again, and refuses admissions (503, retry) until they have, so every fold made
//!   before the re-list is in view.
//! - Every re-list of the batches moves the read generation (`crate::cache::relists`):
//!   a number freed by a delete can be taken again by a writer whose view lagged, and a
//!   re-list that shows that later batch holds the number without the first batch of it.
//! - No admission is allowed before this webhook's own batch watch shows the batch its
//!   decision created, first of its number and above ([`confirm`], [`Self::expect`]): a
//!   watch that lags without an error can make a create succeed on a used and deleted
//!   number; its watch shows that batch first, and the decision withdraws its own
//!   ([`Self::withdraw`]) and refuses (503, retry).

mod confirm;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::KarmadaQuotaReservation;
use karmada_quota_crds::reservation_batch::{batch_sequence, parse_batch};
use karmada_quota_shell::backoff::Backoff;
use karmada_quota_shell::untrusted::clip;
use karmada_quota_status::batches::{BatchView, Fold};
use karmada_quota_status::{BatchStore, KubeBatchStore};
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher;
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::{oneshot, watch};

use crate::cache::QuotaCache;
use crate::cache::relists::Relists;
use crate::error::{Error, Result};
use confirm::Confirmations;
pub use confirm::Outcome;

/// Most withdrawn batches remembered (their late watch events are not counted); the
/// oldest is forgotten first.
const MAX_WITHDRAWN: usize = 1024;

/// Batches this view never held, found by a re-list, and the quota re-list that must
/// complete before the ledger counts again.
#[derive(Clone, Copy, Debug)]
struct Unseen {
    batches: u64,
    generation: u64,
}

/// The batches this webhook knows and the store it writes them through.
pub struct Ledger {
    view: Mutex<BatchView>,
    /// Batches that do not parse, by name, with their errors.
    unparsed: Mutex<BTreeMap<String, String>>,
    /// During a (re-)list: the live batches not (yet) seen in it.
    relisting: Mutex<Option<HashSet<u64>>>,
    /// During a re-list (not the first list): the newest number seen before it.
    relist_after: Mutex<Option<Option<u64>>>,
    /// Batches a re-list found unseen, until the quota kinds listed again.
    unseen: Mutex<Option<Unseen>>,
    relists: Relists,
    store: Arc<dyn BatchStore>,
    namespace: String,
    synced: watch::Sender<bool>,
    /// The batch watch is down: from its failure until its re-list is in.
    down: watch::Sender<bool>,
    /// A decision found the watch down: re-list now, not after the backoff.
    nudge: tokio::sync::Notify,
    /// Creates waiting for their batch in the watch. Locked before `view`: an event is
    /// witnessed and applied to the view under it.
    confirms: Mutex<Confirmations>,
    /// Batches this webhook withdrew (number, writer), until the watch shows them deleted.
    withdrawn: Mutex<BTreeSet<(u64, String)>>,
    /// This process's writer tokens: `<random>-<count>`.
    writer_prefix: String,
    writers: AtomicU64,
    /// The deterministic simulation's hook, run before the next number is read: it lets
    /// batch watch events land there, as the watch's task does on another thread in
    /// production (`karmada-quota-sim` runs on one thread).
    #[cfg(feature = "sim")]
    preempt: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock()
}

impl Ledger {
    /// A ledger of the batches of `namespace`, written through `store` (fed by
    /// [`Self::apply`]: the watch of [`Self::watch`] in production, tests directly); it
    /// asks `relists` for quota re-lists (the cache's: `QuotaCache::relists`).
    pub fn new(store: Arc<dyn BatchStore>, namespace: &str, relists: Relists) -> Arc<Self> {
        Self::with_writer_prefix(store, namespace, relists, random_prefix())
    }

    /// [`Self::new`] with the writer tokens' prefix given (`<prefix>-<count>`) instead of
    /// a random one: the deterministic simulation (`karmada-quota-sim`) names its replicas.
    pub fn with_writer_prefix(
        store: Arc<dyn BatchStore>,
        namespace: &str,
        relists: Relists,
        writer_prefix: String,
    ) -> Arc<Self> {
        Arc::new(Self {
            view: Mutex::default(),
            unparsed: Mutex::default(),
            relisting: Mutex::default(),
            relist_after: Mutex::default(),
            unseen: Mutex::default(),
            relists,
            store,
            namespace: namespace.to_owned(),
            synced: watch::Sender::new(false),
            down: watch::Sender::new(false),
            nudge: tokio::sync::Notify::new(),
            confirms: Mutex::default(),
            withdrawn: Mutex::default(),
            writer_prefix,
            writers: AtomicU64::new(0),
            #[cfg(feature = "sim")]
            preempt: std::sync::OnceLock::new(),
        })
    }

    /// A ledger over the API, and the future that feeds it (runs forever; spawn it).
    pub fn watch(
        client: kube::Client,
        namespace: &str,
        relists: Relists,
    ) -> (Arc<Self>, impl Future<Output = ()> + Send + 'static) {
        let ledger = Self::new(
            Arc::new(KubeBatchStore::new(client.clone(), namespace)),
            namespace,
            relists,
        );
        // Read as dynamic objects: one malformed batch must not fail the whole list (it
        // is then remembered as unparsed, and refuses admissions naming it).
        let resource = ApiResource::erase::<KarmadaQuotaReservation>(&());
        let api = kube::Api::<DynamicObject>::namespaced_with(client, namespace, &resource);
        let feed = run(ledger.clone(), api);
        (ledger, feed)
    }

    /// The namespace the batches live in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The store batches are created through.
    pub fn store(&self) -> &dyn BatchStore {
        &*self.store
    }

    /// Wait until the first list of batches is in.
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// Whether the first list is in.
    pub fn is_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Apply one watcher event.
    pub fn apply(&self, event: &watcher::Event<KarmadaQuotaReservation>) {
        match event {
            watcher::Event::Init => {
                // No order to confirm a create by across a re-list.
                lock(&self.confirms).relisted();
                let view = lock(&self.view);
                let live: HashSet<u64> = view.live().collect();
                if self.is_synced() {
                    // A re-list that broke off before its end is taken up by the next:
                    // keep the newest seen before the first of them.
                    if cfg!(feature = "sim-revert-3dee4c6") {
                        *lock(&self.relist_after) = Some(view.newest());
                    } else {
                        lock(&self.relist_after).get_or_insert(view.newest());
                    }
                }
                drop(view);
                *lock(&self.relisting) = Some(live);
                lock(&self.unparsed).clear();
            }
            watcher::Event::InitApply(b) => {
                self.listed(&b.name_any());
                self.insert_object(b);
            }
            watcher::Event::Apply(b) => {
                let name = b.name_any();
                self.listed(&name);
                self.witnessed(
                    batch_sequence(&name),
                    b.spec.writer.as_deref(),
                    true,
                    || {
                        self.insert_object(b);
                    },
                );
            }
            watcher::Event::Delete(b) => self.deleted(&b.name_any(), b.spec.writer.as_deref()),
            watcher::Event::InitDone => {
                // What the re-list no longer holds was deleted meanwhile.
                let gone = lock(&self.relisting).take().unwrap_or_default();
                let mut view = lock(&self.view);
                for s in gone {
                    view.tombstone(s);
                }
                let before = lock(&self.relist_after).take();
                let unseen = before.map_or(0, |before| view.unseen_since(before));
                drop(view);
                // A re-list can hold a later batch of a number freed while the watch was
                // down, never the first one: the next decision reads its quotas from etcd
                // again, after the re-list, so every fold made before it is counted.
                if before.is_some() {
                    self.relists.list_begun();
                }
                // The simulation's revert of the unseen hold (bench/sim.md).
                if unseen > 0 && !cfg!(feature = "sim-revert-7d9a0c5") {
                    self.hold_for_quota_relist(unseen);
                }
                self.synced.send_replace(true);
            }
        }
    }

    /// A (re-)list holds batch `name`.
    fn listed(&self, name: &str) {
        if let Some(seen) = lock(&self.relisting).as_mut()
            && let Some(s) = batch_sequence(name)
        {
            seen.remove(&s);
        }
    }

    /// The watch showed batch `name` (written by `writer`) deleted.
    fn deleted(&self, name: &str, writer: Option<&str>) {
        lock(&self.unparsed).remove(name);
        let Some(s) = batch_sequence(name) else {
            return;
        };
        self.witnessed(Some(s), writer, false, || {
            let ours = writer.is_some_and(|w| lock(&self.withdrawn).remove(&(s, w.to_owned())));
            if ours {
                // Withdrawn by this webhook: never counted here.
                lock(&self.view).saw(s);
            } else {
                lock(&self.view).tombstone(s);
            }
        });
    }

    /// A watch event of batch `sequence` (by `writer`; `created`, or deleted): the waiting
    /// creates are witnessed and `apply` changes the view under one lock, so that
    /// [`Self::expect`] sees both or neither; they are answered once it is applied.
    fn witnessed(
        &self,
        sequence: Option<u64>,
        writer: Option<&str>,
        created: bool,
        apply: impl FnOnce(),
    ) {
        let mut confirms = lock(&self.confirms);
        let answers = sequence.map(|s| confirms.witness(s, writer, created));
        apply();
        drop(confirms);
        if let Some(answers) = answers {
            answers.send();
        }
    }

    /// Count a stored batch (one read after losing its number); one that does not parse
    /// is remembered and refuses admissions ([`Self::check`]). A batch this webhook
    /// withdrew is not counted.
    pub fn insert_object(&self, b: &KarmadaQuotaReservation) {
        match parse_batch(b) {
            Ok(parsed) => {
                let withdrawn = parsed
                    .writer
                    .as_ref()
                    .is_some_and(|w| lock(&self.withdrawn).contains(&(parsed.sequence, w.clone())));
                let mut view = lock(&self.view);
                if withdrawn {
                    view.saw(parsed.sequence);
                } else {
                    view.insert(&parsed);
                }
            }
            Err(e) => {
                let name = b.name_any();
                tracing::error!(
                    namespace = %self.namespace,
                    batch = %clip(&name),
                    error = %e,
                    "reservation batch does not parse; refusing admissions until it is fixed or deleted"
                );
                lock(&self.unparsed).insert(name, e.to_string());
            }
        }
    }

    /// Apply one event of the watch, whose objects are read as dynamic ones: an object that
    /// does not even deserialize as a batch is remembered as unparsed by its name.
    pub fn apply_dynamic(&self, event: &watcher::Event<DynamicObject>) {
        let typed = |d: &DynamicObject| -> Option<KarmadaQuotaReservation> {
            match serde_json::to_value(d).and_then(serde_json::from_value) {
                Ok(b) => Some(b),
                Err(e) => {
                    let name = d.name_any();
                    tracing::error!(
                        namespace = %self.namespace,
                        batch = %clip(&name),
                        error = %e,
                        "reservation batch does not parse; refusing admissions until it is fixed or deleted"
                    );
                    self.listed(&name);
                    lock(&self.unparsed).insert(name, e.to_string());
                    None
                }
            }
        };
        match event {
            watcher::Event::Init => self.apply(&watcher::Event::Init),
            watcher::Event::InitDone => self.apply(&watcher::Event::InitDone),
            watcher::Event::InitApply(d) => {
                if let Some(b) = typed(d) {
                    self.apply(&watcher::Event::InitApply(b));
                }
            }
            watcher::Event::Apply(d) => match typed(d) {
                Some(b) => self.apply(&watcher::Event::Apply(b)),
                None => self.witnessed(batch_sequence(&d.name_any()), None, true, || {}),
            },
            watcher::Event::Delete(d) => {
                let writer = d.data.pointer("/spec/writer").and_then(|w| w.as_str());
                self.deleted(&d.name_any(), writer);
            }
        }
    }

    /// A fresh writer token, for one create (`spec.writer`).
    pub fn writer_token(&self) -> String {
        let n = self.writers.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.writer_prefix)
    }

    /// Wait for batch `sequence`, written by `writer` and about to be created, in the
    /// watch ([`confirm`]). `Ok(None)`: the view already shows that number or a higher one
    /// (the create would not be the first of it: decide again). Refuses while the watch
    /// is down or re-listing.
    pub fn expect(&self, sequence: u64, writer: &str) -> Result<Option<Expectation<'_>>> {
        let mut confirms = lock(&self.confirms);
        if self.watch_failing() || lock(&self.relisting).is_some() {
            return Err(Error::BatchWatchDown {
                namespace: self.namespace.clone(),
            });
        }
        let newest = lock(&self.view).newest();
        Ok(confirms
            .expect(sequence, writer, newest)
            .map(|rx| Expectation {
                ledger: self,
                sequence,
                writer: writer.to_owned(),
                rx,
            }))
    }

    /// This webhook refuses the requests of its batch `sequence` (written by `writer`):
    /// their entries count here for no one, now and when the watch shows it later.
    pub fn withdraw(&self, sequence: u64, writer: &str) {
        let _confirms = lock(&self.confirms);
        let mut withdrawn = lock(&self.withdrawn);
        withdrawn.insert((sequence, writer.to_owned()));
        while withdrawn.len() > MAX_WITHDRAWN {
            withdrawn.pop_first();
        }
        drop(withdrawn);
        lock(&self.view).withdraw(sequence, writer);
    }

    /// The number the next batch must take.
    pub fn next_sequence(&self) -> u64 {
        #[cfg(feature = "sim")]
        if let Some(preempt) = self.preempt.get() {
            preempt();
        }
        lock(&self.view).next_sequence()
    }

    /// Install the simulation's hook (see the `preempt` field); the first one stays.
    #[cfg(feature = "sim")]
    pub fn set_preempt(&self, preempt: impl Fn() + Send + Sync + 'static) {
        let _ = self.preempt.set(Box::new(preempt));
    }

    /// The newest number seen.
    pub fn newest(&self) -> Option<u64> {
        lock(&self.view).newest()
    }

    /// A re-list found `unseen` batches this view never held: ask the quota kinds to list
    /// again, and refuse admissions ([`Self::check`]) until they have.
    fn hold_for_quota_relist(&self, unseen: u64) {
        let generation = self.relists.request();
        let mut held = lock(&self.unseen);
        let batches = held.map_or(0, |u| u.batches).saturating_add(unseen);
        *held = Some(Unseen {
            batches,
            generation,
        });
        tracing::warn!(
            namespace = %self.namespace,
            unseen = batches,
            "the reservation batch watch re-listed and found batches created and deleted \
             while it was down; refusing admissions until the quota watches listed again"
        );
    }

    /// Refuse to decide while the batch watch is down, while a batch cannot be counted, or
    /// while batches a re-list found unseen may not have their folds in the quota view yet.
    pub fn check(&self) -> Result<()> {
        if self.watch_failing() {
            return Err(Error::BatchWatchDown {
                namespace: self.namespace.clone(),
            });
        }
        if let Some((name, errors)) = lock(&self.unparsed).first_key_value() {
            return Err(Error::InvalidBatch {
                namespace: self.namespace.clone(),
                name: name.clone(),
                errors: errors.clone(),
            });
        }
        let mut held = lock(&self.unseen);
        match *held {
            Some(u) if self.relists.done(u.generation) => {
                *held = None;
                tracing::info!(
                    namespace = %self.namespace,
                    "the quota watches listed again after the batch re-list; counting again"
                );
                Ok(())
            }
            Some(u) => Err(Error::BatchesUnseen {
                namespace: self.namespace.clone(),
                batches: u.batches,
            }),
            None => Ok(()),
        }
    }

    /// Run `f` over the view (under its lock: keep it short).
    pub fn with_view<T>(&self, f: impl FnOnce(&BatchView) -> T) -> T {
        f(&lock(&self.view))
    }

    /// Forget the tombstones every quota they name has folded in `cache`'s view at `now`
    /// (Unix seconds); returns how many went.
    pub fn settle(&self, cache: &QuotaCache, now: i64) -> usize {
        let fold = |key: &QuotaKey| -> Fold { cache.folded_through(key) };
        lock(&self.view).settle(fold, now)
    }

    /// Whether the watch has failed since it last worked (for logs and tests).
    pub fn watch_failing(&self) -> bool {
        // The simulation's revert: a watch that is down decides on (bench/sim.md).
        !cfg!(feature = "sim-revert-7d9a0c5") && *self.down.borrow()
    }

    /// The batch watch failed: refuse admissions until its re-list is in.
    pub fn watch_failed(&self) {
        self.down.send_replace(true);
    }

    /// The batch watch's re-list is in (applied: after its `InitDone`).
    pub fn watch_relisted(&self) {
        self.down.send_replace(false);
    }

    /// Wait, until `until` at the latest, while [`Self::check`] refuses for a reason that
    /// passes by itself — the batch watch down or re-listing (its re-list asked for now),
    /// or a re-list's unseen numbers waiting for the quota lists. Decides nothing: the
    /// caller checks again, as a request arriving later would.
    pub async fn wait_ready(&self, until: tokio::time::Instant) {
        loop {
            match self.check() {
                Err(Error::BatchWatchDown { .. }) => self.nudge.notify_one(),
                Err(Error::BatchesUnseen { .. }) => {}
                _ if lock(&self.relisting).is_some() => {}
                _ => return,
            }
            if tokio::time::Instant::now() + READY_POLL > until {
                return;
            }
            tokio::time::sleep(READY_POLL).await;
        }
    }
}

/// A create waiting for its batch in the watch; stops waiting when dropped.
pub struct Expectation<'a> {
    ledger: &'a Ledger,
    sequence: u64,
    writer: String,
    rx: oneshot::Receiver<Outcome>,
}

impl Expectation<'_> {
    /// What the watch showed (waits; bound it by the request's deadline).
    pub async fn outcome(&mut self) -> Outcome {
        (&mut self.rx).await.unwrap_or(Outcome::Unverified)
    }
}

impl Drop for Expectation<'_> {
    fn drop(&mut self) {
        lock(&self.ledger.confirms).cancel(self.sequence, &self.writer);
    }
}

/// A process-unique prefix for writer tokens (the std hasher's random keys).
fn random_prefix() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
}

const RESTART_MIN: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(10);
/// The shortest wait before a re-list a decision asked for ([`Ledger::wait_ready`]):
/// while the apiserver is away, waiting decisions make one list attempt per half second
/// per replica, no more.
pub const NUDGED_MIN: Duration = RESTART_MIN;
/// How often a waiting decision looks at the ledger again.
const READY_POLL: Duration = Duration::from_millis(20);

/// The batch watch, forever: a failure restarts it from a fresh list after a backoff, cut
/// short (to [`NUDGED_MIN`]) when a decision waits for it.
async fn run(ledger: Arc<Ledger>, api: kube::Api<DynamicObject>) {
    let config = karmada_quota_shell::watch_cache::from_watch_cache().timeout(290);
    let mut backoff = Backoff::new(RESTART_MIN, RESTART_MAX);
    loop {
        let mut events = std::pin::pin!(watcher(api.clone(), config.clone()));
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    ledger.apply_dynamic(&event);
                    // Only once the re-list is applied (its unseen numbers held).
                    if matches!(event, watcher::Event::InitDone) {
                        ledger.watch_relisted();
                        backoff.reset();
                    }
                }
                Err(e) => {
                    ledger.watch_failed();
                    tracing::warn!(
                        namespace = %ledger.namespace,
                        error = %clip(&e.to_string()),
                        retry_in = ?backoff.current(),
                        "reservation batch watch failed; restarting it from a fresh list"
                    );
                    break;
                }
            }
        }
        let delay = backoff.next_delay();
        let earliest = tokio::time::Instant::now() + NUDGED_MIN.min(delay);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = async {
                ledger.nudge.notified().await;
                tokio::time::sleep_until(earliest).await;
            } => tracing::debug!(
                namespace = %ledger.namespace,
                "re-listing the reservation batches early: a decision waits for them"
            ),
        }
    }
}

#[cfg(test)]
mod tests;
