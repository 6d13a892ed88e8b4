//! A map with a cap on its entries: past the cap, inserting evicts the entry used least
//! recently. For caches whose keys come from requests (a template's apiVersion and kind),
//! so that no sender can grow them without bound.
//!
//! ```text
//!  get(k)     ─► hit: the entry's last use = now (a counter, not a clock)
//!  insert(k)  ─► full: evict the entry with the oldest last use, then insert
//!  retain(f)  ─► drop what f refuses (e.g. failed lookups past their short lifetime)
//! ```
//!
//! Eviction scans the entries (O(cap)); caps here are a few hundred.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;

/// A map of at most `cap` entries, evicting the least recently used.
#[derive(Debug)]
pub struct LruMap<K, V> {
    entries: HashMap<K, (V, u64)>,
    clock: u64,
    cap: usize,
}

impl<K: Hash + Eq + Clone, V> LruMap<K, V> {
    /// An empty map holding at most `cap` entries (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            entries: HashMap::new(),
            clock: 0,
            cap: cap.max(1),
        }
    }

    fn tick(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    /// The value of `key`, marked as just used.
    pub fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let now = self.tick();
        let (value, used) = self.entries.get_mut(key)?;
        *used = now;
        Some(value)
    }

    /// Insert (or replace) `key`; when the map is full and `key` is new, the least recently
    /// used entry is evicted first.
    pub fn insert(&mut self, key: K, value: V) {
        let now = self.tick();
        if self.entries.len() >= self.cap && !self.entries.contains_key(&key) {
            let oldest = self
                .entries
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                self.entries.remove(&oldest);
            }
        }
        self.entries.insert(key, (value, now));
    }

    /// Keep only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        self.entries.retain(|k, (v, _)| keep(k, v));
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The cap.
    pub fn cap(&self) -> usize {
        self.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_holds_more_than_its_cap() {
        let mut m = LruMap::new(3);
        for i in 0..1000 {
            m.insert(i, i);
            assert!(m.len() <= 3);
        }
        assert_eq!(m.len(), 3);
        assert_eq!(m.get(&999), Some(&999));
        assert_eq!(m.get(&0), None);
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let mut m = LruMap::new(2);
        m.insert("a", 1);
        m.insert("b", 2);
        assert_eq!(m.get("a"), Some(&1)); // b is now the oldest use
        m.insert("c", 3);
        assert_eq!(m.get("b"), None);
        assert_eq!(m.get("a"), Some(&1));
        assert_eq!(m.get("c"), Some(&3));
    }

    #[test]
    fn replacing_a_key_evicts_nothing_and_retain_drops_what_it_refuses() {
        let mut m = LruMap::new(2);
        m.insert("a", 1);
        m.insert("b", 2);
        m.insert("a", 10);
        assert_eq!(m.len(), 2);
        assert_eq!(m.get("b"), Some(&2));
        m.retain(|_, v| *v > 5);
        assert_eq!(m.len(), 1);
        assert_eq!(m.get("a"), Some(&10));
        assert_eq!(m.cap(), 2);
    }
}
