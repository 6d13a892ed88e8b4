//! Aggregation and rate limiting of events, without I/O: which Event to write when, in
//! bounded memory. The writer task in [`crate::events`] drives it.
//!
//! ```text
//!  observe(key) ──► Series { seen, written, next_write }      one per (regarding object,
//!                       │                                      reason, note); at most
//!                       ▼                                      MAX_SERIES, oldest evicted
//!  take_due(now, budget) ──► Write::Create (first time) │ Write::Patch (series.count = seen)
//!                       ▲        at most one per series per interval, at most `budget`
//!  finish(write, outcome)         (the global token bucket) per round
//! ```
//!
//! A series counts every occurrence it observes (`seen`); the API sees one create and then
//! at most one patch per `interval` carrying the newest count, so a detector retrying
//! every few milliseconds costs one write per interval, and the count still says how often
//! the request was refused (or a controller saw the same change). The note is part of the key because events.k8s.io/v1 makes an
//! event's note immutable: a changed message (e.g. a different `used:`) starts a new event.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use kube::runtime::events::EventType;
use tokio::time::Instant;

/// Most series tracked at once. Each holds two object references and a note (≤ 1 KiB),
/// so the map stays within a few MiB; past it the least recently observed series is
/// forgotten (its next occurrence starts a new event).
pub const MAX_SERIES: usize = 4096;

/// A series idle this long (nothing pending) is forgotten: its next occurrence starts a
/// new event. Kept well under kube-apiserver's default event TTL (1 h), so a patch rarely
/// meets an event the apiserver has already deleted.
pub const IDLE_TTL: Duration = Duration::from_secs(15 * 60);

/// The object an event is about (`regarding`) or related to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// `apps/v1`, `quota.karmada.io/v1alpha1`, …
    pub api_version: String,
    /// `Deployment`, `KarmadaQuota`, …
    pub kind: String,
    /// Empty for a cluster-scoped object.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID; empty when unknown (`kubectl describe` matches events on it).
    pub uid: String,
}

/// What one event series is about: the aggregation key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    /// The object the event is attached to.
    pub regarding: ObjectRef,
    /// A second object involved (the quota for a template's event, and vice versa).
    pub related: Option<ObjectRef>,
    /// `Normal` or `Warning`.
    pub type_: EventType,
    /// What was done regarding the object (`Admit`, `Reconcile`, `Queue`).
    pub action: &'static str,
    /// `QuotaExceeded`, `DriftDetected`, … (CamelCase, machine-readable).
    pub reason: &'static str,
    /// The human-readable message (≤ 1 KiB, already truncated).
    pub note: String,
}

/// One API write the writer task must make.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Write {
    /// Create the series' event, with `count` occurrences so far (1: no `series` field).
    Create {
        /// The series.
        key: SeriesKey,
        /// Occurrences so far.
        count: u32,
        /// When the first one was observed (`eventTime`).
        first: Timestamp,
        /// When the last one was observed (`series.lastObservedTime` when count > 1).
        last: Timestamp,
    },
    /// Patch the existing event `name`: `series.count = count`, `lastObservedTime = last`.
    Patch {
        /// The series.
        key: SeriesKey,
        /// The event's name (as created).
        name: String,
        /// Occurrences so far (≥ 2).
        count: u32,
        /// When the last one was observed.
        last: Timestamp,
    },
}

impl Write {
    /// The series this write belongs to.
    pub fn key(&self) -> &SeriesKey {
        match self {
            Write::Create { key, .. } | Write::Patch { key, .. } => key,
        }
    }

    /// The count it writes.
    pub fn count(&self) -> u32 {
        match self {
            Write::Create { count, .. } | Write::Patch { count, .. } => *count,
        }
    }
}

/// How a write ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Written; for a create, the name the event got.
    Written {
        /// The event's name.
        name: String,
    },
    /// A patch found no event (the apiserver's event TTL removed it): the next write
    /// creates a new one carrying the whole count.
    Gone,
    /// Failed (API error, timeout): retried after the interval.
    Failed,
}

#[derive(Clone, Debug)]
struct Series {
    /// Unique per series (orders equal instants in the indexes).
    seq: u64,
    /// Set once the event exists.
    name: Option<String>,
    /// Occurrences observed.
    seen: u32,
    /// Occurrences the API holds (the count of the last successful write).
    written: u32,
    first_seen: Timestamp,
    last_seen: Timestamp,
    last_seen_at: Instant,
    /// No write of this series before this instant.
    next_write: Instant,
    /// A write has been handed out and not finished.
    in_flight: bool,
}

impl Series {
    fn pending(&self) -> bool {
        self.seen > self.written && !self.in_flight
    }
}

/// What `observe` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Observed {
    /// A new series (its first write is due now).
    New {
        /// Occurrences of an evicted series that were never written (lost).
        evicted_unwritten: u32,
    },
    /// Counted into an existing series.
    Aggregated,
    /// Not tracked: the map is full and mostly unwritten (the occurrence is lost).
    Refused,
}

/// An index position: an instant, then the series' `seq`.
type Slot = (Instant, u64);

/// The series of one writer task. Every operation is O(log n) in the number of series
/// (a storm of distinct denials must not cost the writer, and so the handlers sharing its
/// CPU, a scan per denial):
///
/// - `series`: key → state;
/// - `due`: (next_write, seq) → key, for the pending series only (something unwritten,
///   no write in flight);
/// - `recent`: (last_seen_at, seq) → key, every series, least recently observed first
///   (eviction, idle sweep).
#[derive(Debug)]
pub struct Aggregator {
    series: HashMap<Arc<SeriesKey>, Series>,
    due: BTreeMap<Slot, Arc<SeriesKey>>,
    recent: BTreeMap<Slot, Arc<SeriesKey>>,
    next_seq: u64,
    interval: Duration,
    max_series: usize,
    idle_ttl: Duration,
}

impl Aggregator {
    /// At most one write per series per `interval`; [`MAX_SERIES`], [`IDLE_TTL`].
    pub fn new(interval: Duration) -> Self {
        Self::with_limits(interval, MAX_SERIES, IDLE_TTL)
    }

    /// With explicit bounds (tests).
    pub fn with_limits(interval: Duration, max_series: usize, idle_ttl: Duration) -> Self {
        Self {
            series: HashMap::new(),
            due: BTreeMap::new(),
            recent: BTreeMap::new(),
            next_seq: 0,
            interval,
            max_series: max_series.max(1),
            idle_ttl,
        }
    }

    /// Series tracked now.
    pub fn len(&self) -> usize {
        self.series.len()
    }

    /// Whether no series is tracked.
    pub fn is_empty(&self) -> bool {
        self.series.is_empty()
    }

    /// Count one occurrence of `key`, observed at `now` (`wall` for the event's times).
    pub fn observe(&mut self, key: SeriesKey, now: Instant, wall: Timestamp) -> Observed {
        let existing = self.series.get_key_value(&key).map(|(k, _)| Arc::clone(k));
        if let Some(k) = existing
            && let Some(s) = self.series.get_mut(&key)
        {
            let was_pending = s.pending();
            let old_recent = (s.last_seen_at, s.seq);
            s.seen = s.seen.saturating_add(1);
            s.last_seen = wall;
            s.last_seen_at = now;
            self.recent.remove(&old_recent);
            self.recent.insert((now, s.seq), Arc::clone(&k));
            if !was_pending && s.pending() {
                self.due.insert((s.next_write, s.seq), k);
            }
            return Observed::Aggregated;
        }
        let mut evicted_unwritten = 0;
        if self.series.len() >= self.max_series {
            self.sweep(now);
        }
        if self.series.len() >= self.max_series {
            if self.due.len() * 4 >= self.max_series * 3 {
                // Three quarters of the series still wait for a write: the writer is behind
                // (a storm of distinct denials, the token bucket empty). A new series would
                // only push out one just as unwritten; refuse it for one cheap lookup.
                return Observed::Refused;
            }
            evicted_unwritten = self.evict_one();
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = Arc::new(key);
        self.recent.insert((now, seq), Arc::clone(&key));
        self.due.insert((now, seq), Arc::clone(&key));
        self.series.insert(
            key,
            Series {
                seq,
                name: None,
                seen: 1,
                written: 0,
                first_seen: wall,
                last_seen: wall,
                last_seen_at: now,
                next_write: now,
                in_flight: false,
            },
        );
        Observed::New { evicted_unwritten }
    }

    /// Forget the least recently observed series without a write in flight (so that a
    /// write in progress still finds its state); returns its unwritten occurrences.
    fn evict_one(&mut self) -> u32 {
        let victim = self
            .recent
            .values()
            .find(|k| self.series.get(&***k).is_some_and(|s| !s.in_flight))
            .cloned();
        victim.map_or(0, |k| self.remove(&k))
    }

    /// Remove a series from every index; its unwritten occurrences.
    fn remove(&mut self, key: &SeriesKey) -> u32 {
        let Some(s) = self.series.remove(key) else {
            return 0;
        };
        self.recent.remove(&(s.last_seen_at, s.seq));
        self.due.remove(&(s.next_write, s.seq));
        s.seen.saturating_sub(s.written)
    }

    /// Forget series idle for longer than the idle TTL with nothing left to write.
    pub fn sweep(&mut self, now: Instant) {
        let Some(cutoff) = now.checked_sub(self.idle_ttl) else {
            return;
        };
        let idle: Vec<Arc<SeriesKey>> = self
            .recent
            .range(..(cutoff, 0))
            .map(|(_, k)| k)
            .filter(|k| {
                self.series
                    .get(&***k)
                    .is_some_and(|s| !s.in_flight && s.seen <= s.written)
            })
            .cloned()
            .collect();
        for k in idle {
            self.remove(&k);
        }
    }

    /// When the next write is due (None: nothing to write).
    pub fn next_due(&self) -> Option<Instant> {
        self.due.first_key_value().map(|((at, _), _)| *at)
    }

    /// The writes due at `now`, earliest first, at most `budget`; each is in flight until
    /// [`finish`](Self::finish).
    pub fn take_due(&mut self, now: Instant, budget: usize) -> Vec<Write> {
        let mut writes = Vec::new();
        while writes.len() < budget {
            let Some(entry) = self.due.first_entry() else {
                break;
            };
            if entry.key().0 > now {
                break;
            }
            let k = entry.remove();
            let Some(s) = self.series.get_mut(&*k) else {
                continue;
            };
            s.in_flight = true;
            let key = SeriesKey::clone(&k);
            writes.push(match &s.name {
                None => Write::Create {
                    key,
                    count: s.seen,
                    first: s.first_seen,
                    last: s.last_seen,
                },
                Some(name) => Write::Patch {
                    key,
                    name: name.clone(),
                    count: s.seen,
                    last: s.last_seen,
                },
            });
        }
        writes
    }

    /// Record how `write` ended, at `now`. The series' next write waits one interval
    /// whatever the outcome (a failing API is not hammered).
    pub fn finish(&mut self, write: &Write, outcome: Outcome, now: Instant) {
        let Some(k) = self
            .series
            .get_key_value(write.key())
            .map(|(k, _)| Arc::clone(k))
        else {
            return;
        };
        let Some(s) = self.series.get_mut(write.key()) else {
            return;
        };
        s.in_flight = false;
        s.next_write = now + self.interval;
        match outcome {
            Outcome::Written { name } => {
                s.name = Some(name);
                s.written = s.written.max(write.count());
            }
            Outcome::Gone => {
                s.name = None;
                s.written = 0;
            }
            Outcome::Failed => {}
        }
        if s.pending() {
            self.due.insert((s.next_write, s.seq), k);
        }
    }
}

/// A token bucket over all writes: `rate` per second, up to `burst` at once.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    tokens: f64,
    burst: f64,
    rate: f64,
    last: Instant,
}

impl TokenBucket {
    /// Full at `now`. A `rate` ≤ 0 never refills past the burst.
    pub fn new(rate: f64, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            tokens: burst,
            burst,
            rate: rate.max(0.0),
            last: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        self.last = now;
    }

    /// Whole tokens available at `now`.
    pub fn available(&mut self, now: Instant) -> usize {
        self.refill(now);
        self.tokens.floor() as usize
    }

    /// Spend one token (call only after [`available`](Self::available) said there is one).
    pub fn spend(&mut self) {
        self.tokens = (self.tokens - 1.0).max(0.0);
    }

    /// When the next whole token is there (`now` if one is).
    pub fn next_token_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.tokens >= 1.0 || self.rate <= 0.0 {
            return now;
        }
        now + Duration::from_secs_f64((1.0 - self.tokens) / self.rate)
    }
}

#[cfg(test)]
mod tests;
