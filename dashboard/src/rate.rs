//! Token buckets: how often something may happen, with a burst. [`Bucket`] is one rate
//! (the TokenReviews of tokens not seen before, over all requests); [`Buckets`] is one
//! bucket per key (logins per user), bounded in the number of keys it remembers.
//!
//! ```text
//!  take(now): tokens += elapsed × per_second (at most burst); one token? take it : refuse
//! ```
//!
//! A key whose bucket has refilled to its burst is the same as a key never seen, so a
//! full [`Buckets`] forgets those first; still full, it forgets every key (which can only
//! happen when more distinct keys than `max_keys` were refused within one refill time).

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A rate: `per_second` on average, `burst` at once.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rate {
    /// Tokens added per second.
    pub per_second: f64,
    /// Tokens held at most (and at first).
    pub burst: u32,
}

impl Rate {
    /// `n` per minute, all of them at once.
    pub fn per_minute(n: u32) -> Self {
        Self {
            per_second: f64::from(n) / 60.0,
            burst: n,
        }
    }

    /// `n` per second, all of them at once.
    pub fn per_second(n: u32) -> Self {
        Self {
            per_second: f64::from(n),
            burst: n,
        }
    }

    /// How long until one token is back after the bucket ran dry.
    pub fn one_in(&self) -> Duration {
        if self.per_second > 0.0 {
            Duration::from_secs_f64(1.0 / self.per_second)
        } else {
            Duration::MAX
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct State {
    tokens: f64,
    at: Instant,
}

impl State {
    fn full(rate: Rate, now: Instant) -> Self {
        Self {
            tokens: f64::from(rate.burst),
            at: now,
        }
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst));
        self.at = now;
    }

    fn take(&mut self, rate: Rate, now: Instant) -> bool {
        self.refill(rate, now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// One token bucket.
#[derive(Debug)]
pub struct Bucket {
    rate: Rate,
    state: Mutex<State>,
}

impl Bucket {
    /// A full bucket.
    pub fn new(rate: Rate) -> Self {
        Self {
            rate,
            state: Mutex::new(State::full(rate, Instant::now())),
        }
    }

    /// Takes a token at `now`: whether there was one.
    pub fn take_at(&self, now: Instant) -> bool {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        st.take(self.rate, now)
    }

    /// Takes a token now: whether there was one.
    pub fn take(&self) -> bool {
        self.take_at(Instant::now())
    }

    /// The rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }
}

/// One token bucket per key, at most `max_keys` remembered.
#[derive(Debug)]
pub struct Buckets<K> {
    rate: Rate,
    max_keys: usize,
    map: Mutex<HashMap<K, State>>,
}

impl<K: Eq + Hash + Clone> Buckets<K> {
    /// Empty buckets (a key first met has a full one).
    pub fn new(rate: Rate, max_keys: usize) -> Self {
        Self {
            rate,
            max_keys: max_keys.max(1),
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Takes a token of `key`'s bucket at `now`: whether there was one.
    pub fn take_at(&self, key: &K, now: Instant) -> bool {
        let rate = self.rate;
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if !map.contains_key(key) && map.len() >= self.max_keys {
            map.retain(|_, st| {
                st.refill(rate, now);
                st.tokens < f64::from(rate.burst)
            });
            if map.len() >= self.max_keys {
                map.clear();
            }
        }
        map.entry(key.clone())
            .or_insert_with(|| State::full(rate, now))
            .take(rate, now)
    }

    /// Takes a token of `key`'s bucket now: whether there was one.
    pub fn take(&self, key: &K) -> bool {
        self.take_at(key, Instant::now())
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.map.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no key is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rate of each key.
    pub fn rate(&self) -> Rate {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_gives_its_burst_then_its_rate() {
        let t0 = Instant::now();
        let b = Bucket::new(Rate::per_second(10));
        let given = (0..1_000).filter(|_| b.take_at(t0)).count();
        assert_eq!(given, 10, "the burst at once");
        assert!(!b.take_at(t0 + Duration::from_millis(50)));
        assert!(b.take_at(t0 + Duration::from_millis(100)), "one per 100 ms");
        let later = t0 + Duration::from_secs(60);
        assert_eq!(
            (0..1_000).filter(|_| b.take_at(later)).count(),
            10,
            "never more than the burst"
        );
    }

    #[test]
    fn keys_have_their_own_buckets_and_the_map_stays_bounded() {
        let t0 = Instant::now();
        let b: Buckets<String> = Buckets::new(Rate::per_minute(3), 4);
        let a = "a".to_owned();
        assert_eq!((0..10).filter(|_| b.take_at(&a, t0)).count(), 3);
        assert!(
            b.take_at(&"b".to_owned(), t0),
            "another key is not limited by a's"
        );
        assert!(!b.take_at(&a, t0 + Duration::from_secs(10)));
        assert!(b.take_at(&a, t0 + Duration::from_secs(20)), "one per 20 s");
        for i in 0..100 {
            b.take_at(&format!("k{i}"), t0);
            assert!(b.len() <= 4, "{}", b.len());
        }
    }

    #[test]
    fn refilled_keys_are_forgotten_first() {
        let t0 = Instant::now();
        let b = Buckets::new(Rate::per_minute(2), 2);
        assert!(b.take_at(&1, t0) && b.take_at(&1, t0));
        assert!(b.take_at(&2, t0));
        // Key 2 refills within 30 s; key 1 (empty) is kept.
        let t1 = t0 + Duration::from_secs(31);
        assert!(b.take_at(&3, t1));
        assert!(b.take_at(&1, t1), "key 1 has refilled one token");
        assert!(!b.take_at(&1, t1), "and only one: it was remembered");
    }
}
