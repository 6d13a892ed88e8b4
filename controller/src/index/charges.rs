//! Interned binding charges: bindings that cost the same share one `Arc<BindingCharge>`.
//!
//! The index holds a charge for every binding it watches. Most bindings of a namespace
//! are priced alike (the same template shape, replicas and placement), so storing each
//! charge once turns the largest part of a binding's entry (its resource lists, ~1.5 KB)
//! into a pointer. Charges are compared by value (core's `PartialEq`); a charge no entry
//! uses any more is dropped by [`Charges::sweep`].

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use karmada_quota_core::usage::BindingCharge;

/// The set of charges in use, by a hash of their value.
#[derive(Debug, Default)]
pub struct Charges {
    by_hash: HashMap<u64, Vec<Arc<BindingCharge>>>,
    /// Distinct charges held.
    len: usize,
    /// `len` after the last sweep (the next one runs once it has doubled).
    swept_at: usize,
}

/// A hash of everything `BindingCharge`'s equality looks at.
fn hash_of(charge: &BindingCharge) -> u64 {
    let mut h = DefaultHasher::new();
    charge.workload.hash(&mut h);
    charge.parts.len().hash(&mut h);
    for part in &charge.parts {
        part.component.hash(&mut h);
        part.priority_class.hash(&mut h);
        part.per_replica.0.len().hash(&mut h);
        for (name, q) in part.per_replica.iter() {
            name.hash(&mut h);
            q.hash(&mut h);
        }
        part.replicas.hash(&mut h);
        part.placement.hash(&mut h);
        part.missing_requests.hash(&mut h);
        part.draining.hash(&mut h);
    }
    charge.objects.0.len().hash(&mut h);
    for (name, q) in charge.objects.iter() {
        name.hash(&mut h);
        q.hash(&mut h);
    }
    h.finish()
}

impl Charges {
    /// The shared copy of `charge` (added when new).
    pub fn intern(&mut self, charge: BindingCharge) -> Arc<BindingCharge> {
        let bucket = self.by_hash.entry(hash_of(&charge)).or_default();
        if let Some(shared) = bucket.iter().find(|c| ***c == charge) {
            return shared.clone();
        }
        let shared = Arc::new(charge);
        bucket.push(shared.clone());
        self.len += 1;
        shared
    }

    /// Drop the charges no entry holds any more, when their number has doubled since the
    /// last sweep (so sweeping stays amortised O(1) per intern).
    pub fn maybe_sweep(&mut self) {
        if self.len >= 2 * self.swept_at.max(1024) {
            self.sweep();
        }
    }

    /// Drop every charge no entry holds any more.
    pub fn sweep(&mut self) {
        self.by_hash.retain(|_, bucket| {
            bucket.retain(|c| Arc::strong_count(c) > 1);
            !bucket.is_empty()
        });
        self.len = self.by_hash.values().map(Vec::len).sum();
        self.swept_at = self.len;
    }

    /// Distinct charges held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether none is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karmada_quota_core::usage::ChargePart;

    fn charge(cpu: &str, replicas: i64) -> BindingCharge {
        BindingCharge {
            workload: true,
            parts: vec![ChargePart {
                per_replica: karmada_quota_core::ResourceList::parse_map([("cpu", cpu)]).unwrap(),
                replicas,
                placement: vec![("member1".into(), replicas)],
                ..ChargePart::default()
            }],
            objects: karmada_quota_core::ResourceList::default(),
            unaccounted: None,
        }
    }

    #[test]
    fn equal_charges_share_one_copy_and_unused_ones_are_swept() {
        let mut c = Charges::default();
        let a = c.intern(charge("1", 2));
        let b = c.intern(charge("1000m", 2)); // the same value
        let other = c.intern(charge("1", 3));
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &other));
        assert_eq!(c.len(), 2);
        drop(other);
        c.sweep();
        assert_eq!(c.len(), 1, "only the charge still held stays");
        drop((a, b));
        c.sweep();
        assert!(c.is_empty());
    }
}
