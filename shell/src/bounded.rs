//! A map with a cap on its entries: past the cap, inserting evicts the entry used least
//! recently. For caches whose keys come from requests (a template's apiVersion and kind),
//! so that no sender can grow them without bound.
//!
//! ```text
//!  get(k)     ─► hit: the entry becomes the most recently used
//!  insert(k)  ─► full: evict the least recently used entry, then insert
//!  retain(f)  ─► drop what f refuses (e.g. failed lookups past their short lifetime)
//! ```
//!
//! The `lru` crate keeps the order (O(1) per get and insert); this type adds the
//! `retain` the caches need and a cap of at least one.

use std::borrow::Borrow;
use std::hash::Hash;
use std::num::NonZeroUsize;

use lru::LruCache;

/// A map of at most `cap` entries, evicting the least recently used.
#[derive(Debug)]
pub struct LruMap<K: Hash + Eq, V> {
    entries: LruCache<K, V>,
}

impl<K: Hash + Eq + Clone, V> LruMap<K, V> {
    /// An empty map holding at most `cap` entries (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            entries: LruCache::new(NonZeroUsize::new(cap).unwrap_or(NonZeroUsize::MIN)),
        }
    }

    /// The value of `key`, marked as just used.
    pub fn get<Q>(&mut self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.entries.get(key)
    }

    /// Insert (or replace) `key`; when the map is full and `key` is new, the least recently
    /// used entry is evicted first.
    pub fn insert(&mut self, key: K, value: V) {
        self.entries.put(key, value);
    }

    /// Keep only the entries `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&K, &V) -> bool) {
        let gone: Vec<K> = self
            .entries
            .iter()
            .filter(|(k, v)| !keep(k, v))
            .map(|(k, _)| k.clone())
            .collect();
        for k in gone {
            self.entries.pop(&k);
        }
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
        self.entries.cap().get()
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
