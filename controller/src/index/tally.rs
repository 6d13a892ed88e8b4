//! Per namespace, how many bindings cost each distinct charge: the bookkeeping that lets a
//! quota's fold sum each distinct charge once (core's `status::compute_counted`) instead
//! of every binding.
//!
//! Charges are interned (`index::charges`), so bindings that cost the same share one
//! `Arc`; the tally counts them by that pointer. It holds a clone of the `Arc`, so a
//! pointer it counts cannot be freed and reused while counted. The index keeps it in step
//! with its entries on every apply, delete, re-list and price; no arithmetic happens here.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use karmada_quota_core::usage::BindingCharge;

/// A multiset of charges: pointer → (the charge, the names of the bindings that cost it,
/// each with how many bindings of this namespace carry it — one, but for a binding deleted
/// and created again under its name whose delete has not arrived yet).
#[derive(Debug, Default)]
pub struct Tally {
    by_charge: HashMap<usize, Counted>,
}

/// One distinct charge of a namespace.
#[derive(Debug)]
struct Counted {
    charge: Arc<BindingCharge>,
    bindings: usize,
    names: BTreeMap<Arc<str>, usize>,
}

/// The key of an interned charge.
pub fn key_of(charge: &Arc<BindingCharge>) -> usize {
    Arc::as_ptr(charge) as usize
}

impl Tally {
    /// One more binding, named `name`, costs `charge`.
    pub fn add(&mut self, charge: &Arc<BindingCharge>, name: &Arc<str>) {
        let counted = self
            .by_charge
            .entry(key_of(charge))
            .or_insert_with(|| Counted {
                charge: charge.clone(),
                bindings: 0,
                names: BTreeMap::new(),
            });
        counted.bindings += 1;
        *counted.names.entry(name.clone()).or_insert(0) += 1;
    }

    /// One binding less, named `name`, costs `charge` (it is forgotten at zero; a charge
    /// or name never added is ignored).
    pub fn remove(&mut self, charge: &Arc<BindingCharge>, name: &str) {
        let key = key_of(charge);
        let Some(counted) = self.by_charge.get_mut(&key) else {
            return;
        };
        let Some(n) = counted.names.get_mut(name) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            counted.names.remove(name);
        }
        counted.bindings -= 1;
        if counted.bindings == 0 {
            self.by_charge.remove(&key);
        }
    }

    /// Each distinct charge with the number of bindings that cost it.
    pub fn iter(&self) -> impl Iterator<Item = (&BindingCharge, usize)> + '_ {
        self.by_charge.values().map(|c| (&*c.charge, c.bindings))
    }

    /// The first `n` names, in name order, of the bindings that cost `charge` (a name
    /// repeated as often as bindings carry it): all a ranking by share, then name, can
    /// take of bindings that share one charge, and so one share.
    pub fn first_names<'a>(
        &'a self,
        charge: &BindingCharge,
        n: usize,
    ) -> impl Iterator<Item = &'a str> + 'a {
        self.by_charge
            .get(&(std::ptr::from_ref(charge) as usize))
            .into_iter()
            .flat_map(|c| c.names.iter())
            .flat_map(|(name, times)| std::iter::repeat_n(&**name, *times))
            .take(n)
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
        let (x, y, z): (Arc<str>, Arc<str>, Arc<str>) = ("x".into(), "y".into(), "z".into());
        let mut t = Tally::default();
        t.add(&a, &y);
        t.add(&a, &x);
        t.add(&b, &z);
        assert_eq!(t.first_names(&a, 5).collect::<Vec<_>>(), ["x", "y"]);
        assert_eq!(t.first_names(&a, 1).collect::<Vec<_>>(), ["x"]);
        let mut counts: Vec<(bool, usize)> = t.iter().map(|(c, n)| (c.workload, n)).collect();
        counts.sort_unstable();
        assert_eq!(counts, [(false, 1), (true, 2)]);
        t.remove(&a, "x");
        t.remove(&b, "z");
        t.remove(&b, "z"); // not counted any more: ignored
        t.remove(&a, "w"); // never added: ignored
        assert_eq!(t.len(), 1);
        assert_eq!(t.iter().next().map(|(_, n)| n), Some(1));
        assert_eq!(t.first_names(&a, 5).collect::<Vec<_>>(), ["y"]);
        t.remove(&a, "y");
        assert!(t.is_empty());
        assert_eq!(Arc::strong_count(&a), 1, "the tally let go of it");
    }
}
