//! Per namespace, how many bindings cost each distinct charge: the bookkeeping that lets a
//! quota's fold sum each distinct charge once (core's `status::compute_counted`) instead
//! of every binding.
//!
//! Charges are interned ([`super::charges`]), so bindings that cost the same share one
//! `Arc`; the tally counts them by that pointer. It holds a clone of the `Arc`, so a
//! pointer it counts cannot be freed and reused while counted. The index keeps it in step
//! with its entries on every apply, delete, re-list and price; no arithmetic happens here.

use std::collections::HashMap;
use std::sync::Arc;

use karmada_quota_core::usage::BindingCharge;

/// A multiset of charges: pointer → (the charge, how many bindings cost it).
#[derive(Debug, Default)]
pub struct Tally {
    by_charge: HashMap<usize, (Arc<BindingCharge>, usize)>,
}

/// The key of an interned charge.
pub fn key_of(charge: &Arc<BindingCharge>) -> usize {
    Arc::as_ptr(charge) as usize
}

impl Tally {
    /// One more binding costs `charge`.
    pub fn add(&mut self, charge: &Arc<BindingCharge>) {
        self.by_charge
            .entry(key_of(charge))
            .or_insert_with(|| (charge.clone(), 0))
            .1 += 1;
    }

    /// One binding less costs `charge` (it is forgotten at zero; a charge never added is
    /// ignored).
    pub fn remove(&mut self, charge: &Arc<BindingCharge>) {
        let key = key_of(charge);
        if let Some((_, n)) = self.by_charge.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.by_charge.remove(&key);
            }
        }
    }

    /// Each distinct charge with the number of bindings that cost it.
    pub fn iter(&self) -> impl Iterator<Item = (&BindingCharge, usize)> + '_ {
        self.by_charge.values().map(|(c, n)| (&**c, *n))
    }

    /// Distinct charges counted.
    pub fn len(&self) -> usize {
        self.by_charge.len()
    }

    /// Whether no binding is counted.
    pub fn is_empty(&self) -> bool {
        self.by_charge.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn charge(workload: bool) -> Arc<BindingCharge> {
        Arc::new(BindingCharge {
            workload,
            ..BindingCharge::default()
        })
    }

    #[test]
    fn counts_bindings_per_charge_and_forgets_at_zero() {
        let (a, b) = (charge(true), charge(false));
        let mut t = Tally::default();
        t.add(&a);
        t.add(&a);
        t.add(&b);
        let mut counts: Vec<(bool, usize)> = t.iter().map(|(c, n)| (c.workload, n)).collect();
        counts.sort_unstable();
        assert_eq!(counts, [(false, 1), (true, 2)]);
        t.remove(&a);
        t.remove(&b);
        t.remove(&b); // not counted any more: ignored
        assert_eq!(t.len(), 1);
        assert_eq!(t.iter().next().map(|(_, n)| n), Some(1));
        t.remove(&a);
        assert!(t.is_empty());
        assert_eq!(Arc::strong_count(&a), 1, "the tally let go of it");
    }
}
