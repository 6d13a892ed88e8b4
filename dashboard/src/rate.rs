//! Token buckets: how often something may happen, with a burst. [`Bucket`] is one rate
//! (the TokenReviews of tokens not seen before, over all requests); [`Buckets`] is one
//! bucket per key (logins per user, login attempts per peer), bounded in the number of
//! keys it remembers.
//!
//! ```text
//!  take(now): tokens += elapsed × per_second (at most burst); one token? take it : refuse
//! ```
//!
//! Forgetting a key gives it back its burst, so a full [`Buckets`] forgets the key that
//! loses least by it: one whose bucket has refilled to its burst (the same as a key never
//! seen), else the one with the most tokens left; ties go to the least recently used.
//! It never forgets everyone: a flood of new keys, each one token short of its burst,
//! displaces only its own kind and never a key drained further; to displace a drained
//! key a flood must first drain `max_keys` keys of its own as far. A [`peer_key`] keys a
//! client address the way the listener counts connections (IPv6 by its /64).

use std::hash::Hash;
use std::net::{IpAddr, Ipv6Addr};
use std::time::{Duration, Instant};

use lru::LruCache;
use parking_lot::Mutex;

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

    /// The tokens at `now`, refilled.
    fn tokens_at(&self, rate: Rate, now: Instant) -> f64 {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        (self.tokens + elapsed * rate.per_second).min(f64::from(rate.burst))
    }

    fn refill(&mut self, rate: Rate, now: Instant) {
        self.tokens = self.tokens_at(rate, now);
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
        let mut st = self.state.lock();
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

/// One token bucket per key, at most `max_keys` remembered (the module docs say which
/// goes when full).
#[derive(Debug)]
pub struct Buckets<K: Eq + Hash> {
    rate: Rate,
    max_keys: usize,
    map: Mutex<LruCache<K, State>>,
}

impl<K: Eq + Hash + Clone> Buckets<K> {
    /// Empty buckets (a key first met has a full one).
    pub fn new(rate: Rate, max_keys: usize) -> Self {
        Self {
            rate,
            max_keys: max_keys.max(1),
            map: Mutex::new(LruCache::unbounded()),
        }
    }

    /// Takes a token of `key`'s bucket at `now`: whether there was one.
    pub fn take_at(&self, key: &K, now: Instant) -> bool {
        let rate = self.rate;
        let mut map = self.map.lock();
        if let Some(st) = map.get_mut(key) {
            return st.take(rate, now);
        }
        if map.len() >= self.max_keys
            && let Some(victim) = least_lost(&map, rate, now)
        {
            map.pop(&victim);
        }
        let mut st = State::full(rate, now);
        let taken = st.take(rate, now);
        map.put(key.clone(), st);
        taken
    }

    /// Takes a token of `key`'s bucket now: whether there was one.
    pub fn take(&self, key: &K) -> bool {
        self.take_at(key, Instant::now())
    }

    /// Keys remembered.
    pub fn len(&self) -> usize {
        self.map.lock().len()
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

/// The key that loses least when forgotten at `now`: the least recently used of those
/// refilled to their burst, else the one with the most tokens (ties: the least recently
/// used). O(keys), only when the map is full and a new key comes.
fn least_lost<K: Eq + Hash + Clone>(
    map: &LruCache<K, State>,
    rate: Rate,
    now: Instant,
) -> Option<K> {
    let full = f64::from(rate.burst);
    let mut best: Option<(&K, f64)> = None;
    for (k, st) in map.iter().rev() {
        let tokens = st.tokens_at(rate, now);
        if tokens >= full {
            return Some(k.clone());
        }
        if best.is_none_or(|(_, most)| tokens > most) {
            best = Some((k, tokens));
        }
    }
    best.map(|(k, _)| k.clone())
}

/// The key a client address is limited under: an IPv4 address as it is, an IPv6 address
/// by its /64 prefix (one host is routinely given a whole /64), an IPv4-mapped IPv6
/// address as its IPv4 — the rule of the listener's connection slots
/// (`karmada_quota_shell::listener`, `--max-connections-per-peer`).
pub fn peer_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(v6.to_bits() & !((1u128 << 64) - 1))),
        },
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

    #[test]
    fn a_flood_of_new_keys_does_not_give_a_drained_key_its_burst_back() {
        let t0 = Instant::now();
        let b: Buckets<String> = Buckets::new(Rate::per_minute(10), 100);
        let user = "alice".to_owned();
        assert_eq!((0..20).filter(|_| b.take_at(&user, t0)).count(), 10);
        // Ten times as many distinct keys as the map holds, each one login.
        for i in 0..1_000 {
            assert!(
                b.take_at(&format!("flood-{i}"), t0),
                "a new key has its burst"
            );
            assert!(b.len() <= 100, "{}", b.len());
        }
        assert!(!b.take_at(&user, t0), "alice is still drained");
        // Seven seconds later alice has refilled one token, and only one.
        let t1 = t0 + Duration::from_secs(7);
        for i in 1_000..2_000 {
            b.take_at(&format!("flood-{i}"), t1);
        }
        assert!(b.take_at(&user, t1));
        assert!(!b.take_at(&user, t1));
    }

    #[test]
    fn a_full_map_forgets_the_key_that_loses_least_and_among_equals_the_least_recent() {
        let t0 = Instant::now();
        let b = Buckets::new(Rate::per_minute(3), 3);
        assert!(b.take_at(&1, t0));
        assert!(b.take_at(&2, t0) && b.take_at(&2, t0));
        assert!(b.take_at(&3, t0));
        // 1 and 3 have two tokens left, 2 one: 1 (the least recently used of the two) goes.
        assert!(b.take_at(&4, t0));
        assert!(b.take_at(&2, t0));
        assert!(!b.take_at(&2, t0), "2 was kept, drained");
        assert!(b.take_at(&3, t0) && b.take_at(&3, t0));
        assert!(!b.take_at(&3, t0), "3 was kept: two tokens, both spent now");
        // 1 comes back with a full bucket (forgotten), 4 goes (the most tokens left).
        assert_eq!((0..5).filter(|_| b.take_at(&1, t0)).count(), 3);
        assert_eq!(b.len(), 3);
    }

    #[test]
    fn peers_are_keyed_by_ipv4_address_or_ipv6_64() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(peer_key(ip("10.0.0.7")), ip("10.0.0.7"));
        assert_eq!(peer_key(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            peer_key(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")),
            peer_key(ip("2001:db8:1:2::5")),
            "one /64, one peer"
        );
        assert_ne!(
            peer_key(ip("2001:db8:1:3::5")),
            peer_key(ip("2001:db8:1:2::5"))
        );
        assert_eq!(peer_key(ip("::ffff:10.0.0.7")), ip("10.0.0.7"));
    }
}
