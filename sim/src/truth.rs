//! The ground truth and the safety invariant.
//!
//! A binding is *charged* from the moment the webhook answered its CREATE (or an UPDATE
//! that raises it) allowed, with the charge of that generation. It is *released* — in
//! part or in whole — only once the controller knows it: a scale-down from the first
//! observation of the lower generation on, a delete from the first observation of the
//! delete (the index no longer serves a binding that is gone) or from the controller's
//! first quorum read that finds no binding of its uid under its name (R19's read step).
//! An allowed request the apiserver did not store (another plugin refused it) is released
//! when that happens. Until then the binding counts the highest charge among its
//! generations from the newest observed one on.
//!
//! The invariant, per quota: the charges of its namespace's admitted, not-yet-released
//! bindings never exceed `hard` — leaving out a binding a replica admitted without
//! holding the quota while not every replica held it yet (`Config::early_use`: usage
//! that predates the quota, as far as that replica could know). After every admission it is checked against the highest
//! `hard` the quota had since [`EDIT_GRACE_MS`] before the request was sent (a decision
//! may read a copy that old); after every step, for a quota whose `hard` was never
//! lowered, against the current `hard`.

use std::collections::BTreeMap;

/// How long after a `hard` is lowered a decision may still have read the higher one (a
/// watch behind by that much: the longest stall and stale list the faults make).
pub const EDIT_GRACE_MS: u64 = 30_000;

/// One quota's `hard` over time.
#[derive(Debug)]
struct QuotaTruth {
    /// (since ms, hard cpu).
    hard: Vec<(u64, i64)>,
    lowered: bool,
}

/// One binding as the apiserver and the controller saw it.
#[derive(Debug)]
struct BindingTruth {
    namespace: String,
    name: String,
    /// (generation, charge) admitted or stored and not refused later.
    generations: Vec<(i64, i64)>,
    /// The newest generation the controller observed.
    observed: i64,
    /// Deleted at the apiserver.
    deleted: bool,
    /// The controller observed it gone after it was deleted.
    released: bool,
    /// A replica admitted it without holding the quota, before every replica held it.
    before_quota: bool,
}

impl BindingTruth {
    fn charged(&self) -> i64 {
        if self.released {
            return 0;
        }
        self.generations
            .iter()
            .filter(|(g, _)| *g >= self.observed)
            .map(|(_, c)| *c)
            .max()
            .unwrap_or(0)
    }
}

/// What the controller's index says of one binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Served at this generation.
    At(i64),
    /// Not served.
    Absent,
}

/// The ground truth of a run.
#[derive(Debug, Default)]
pub struct Truth {
    quotas: BTreeMap<String, QuotaTruth>,
    bindings: BTreeMap<String, BindingTruth>,
    /// Every violation found (the run fails with the first).
    pub violations: Vec<String>,
    /// Admissions answered allowed that raised a charge.
    pub admissions: u64,
}

impl Truth {
    /// A quota of `hard` cpu over `namespace`.
    pub fn quota(&mut self, namespace: &str, hard: i64) {
        self.quotas.insert(
            namespace.to_owned(),
            QuotaTruth {
                hard: vec![(0, hard)],
                lowered: false,
            },
        );
    }

    /// The quota of `namespace` has `hard` cpu from `now` on.
    pub fn hard_changed(&mut self, namespace: &str, hard: i64, now: u64) {
        if let Some(q) = self.quotas.get_mut(namespace) {
            let before = q.hard.last().map_or(hard, |(_, h)| *h);
            q.lowered |= hard < before;
            q.hard.push((now, hard));
        }
    }

    /// The current `hard` of `namespace`'s quota.
    pub fn hard(&self, namespace: &str) -> i64 {
        self.quotas
            .get(namespace)
            .and_then(|q| q.hard.last())
            .map_or(0, |(_, h)| *h)
    }

    /// The highest `hard` of `namespace`'s quota from `since` to now.
    fn hard_since(&self, namespace: &str, since: u64) -> i64 {
        let Some(q) = self.quotas.get(namespace) else {
            return 0;
        };
        let first = q
            .hard
            .partition_point(|(at, _)| *at <= since)
            .saturating_sub(1);
        q.hard[first..].iter().map(|(_, h)| *h).max().unwrap_or(0)
    }

    /// The charges of `namespace`'s admitted, not released bindings.
    pub fn charged(&self, namespace: &str) -> i64 {
        self.sum(namespace, |_| true)
    }

    /// What the invariant bounds: [`Truth::charged`] without the bindings admitted
    /// before the quota.
    fn enforced(&self, namespace: &str) -> i64 {
        self.sum(namespace, |b| !b.before_quota)
    }

    /// The charges of `namespace`'s bindings that `keep` keeps.
    fn sum(&self, namespace: &str, keep: impl Fn(&BindingTruth) -> bool) -> i64 {
        self.bindings
            .values()
            .filter(|b| b.namespace == namespace && keep(b))
            .map(BindingTruth::charged)
            .sum()
    }

    /// The webhook answered generation `generation` of binding `uid` allowed, charged
    /// `charge`, for a request sent at `sent`; `before_quota`: by a replica that did not
    /// hold the quota yet, while not every replica did. Checks the invariant; returns a
    /// violation.
    pub fn admitted(
        &mut self,
        (namespace, name, uid): (&str, &str, &str),
        generation: i64,
        charge: i64,
        (sent, before_quota): (u64, bool),
    ) -> Option<String> {
        let b = self
            .bindings
            .entry(uid.to_owned())
            .or_insert_with(|| BindingTruth {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                generations: Vec::new(),
                observed: 0,
                deleted: false,
                released: false,
                before_quota: false,
            });
        b.before_quota |= before_quota;
        let before = b.charged();
        b.generations.push((generation, charge));
        if b.charged() > before {
            self.admissions += 1;
        }
        let (charged, bound) = (
            self.enforced(namespace),
            self.hard_since(namespace, sent.saturating_sub(EDIT_GRACE_MS)),
        );
        (charged > bound).then(|| {
            let v = format!(
                "OVER-COMMIT quota {namespace}/compute: admitted {charged} cpu of {bound} \
                 (binding {name} uid {uid} generation {generation}, {charge} cpu)"
            );
            self.violations.push(v.clone());
            v
        })
    }

    /// Generation `generation` of `uid` was not stored after all.
    pub fn not_stored(&mut self, uid: &str, generation: i64) {
        if let Some(b) = self.bindings.get_mut(uid) {
            b.generations.retain(|(g, _)| *g != generation);
        }
    }

    /// Binding `uid` was deleted at the apiserver.
    pub fn deleted(&mut self, uid: &str) {
        if let Some(b) = self.bindings.get_mut(uid) {
            b.deleted = true;
        }
    }

    /// The bindings not released yet: (namespace, name, uid).
    pub fn unreleased(&self) -> Vec<(String, String, String)> {
        self.bindings
            .iter()
            .filter(|(_, b)| !b.released)
            .map(|(uid, b)| (b.namespace.clone(), b.name.clone(), uid.clone()))
            .collect()
    }

    /// The controller's index says `seen` of binding `uid`.
    pub fn observed(&mut self, uid: &str, seen: Seen) {
        let Some(b) = self.bindings.get_mut(uid) else {
            return;
        };
        match seen {
            Seen::At(g) => b.observed = b.observed.max(g),
            Seen::Absent if b.deleted => b.released = true,
            Seen::Absent => {}
        }
    }

    /// The controller's quorum read of `namespace/name` found `found` (the uid stored under
    /// the name): the controller knows every deleted binding of that name but `found` is
    /// gone, as when its index observes the delete.
    pub fn read(&mut self, namespace: &str, name: &str, found: Option<&str>) {
        for (uid, b) in &mut self.bindings {
            if b.namespace == namespace && b.name == name && b.deleted && found != Some(uid) {
                b.released = true;
            }
        }
    }

    /// After a step: every quota never lowered holds at most its `hard`.
    pub fn check_all(&mut self) -> Option<String> {
        let over: Vec<String> = self
            .quotas
            .iter()
            .filter(|(_, q)| !q.lowered)
            .filter_map(|(ns, q)| {
                let hard = q.hard.last().map_or(0, |(_, h)| *h);
                let charged = self.enforced(ns);
                (charged > hard).then(|| {
                    format!("OVER-COMMIT quota {ns}/compute: {charged} cpu charged of {hard}")
                })
            })
            .collect();
        let first = over.first().cloned();
        self.violations.extend(over);
        first
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_charge_counts_until_its_release_is_observed() {
        let mut t = Truth::default();
        t.quota("a", 4);
        assert_eq!(t.admitted(("a", "x", "u1"), 1, 3, (0, false)), None);
        assert!(
            t.admitted(("a", "y", "u2"), 1, 2, (0, false)).is_some(),
            "5 of 4"
        );
        t.not_stored("u2", 1);
        assert_eq!(t.charged("a"), 3);
        // A scale-down counts the old charge until observed.
        t.observed("u1", Seen::At(1));
        assert_eq!(t.admitted(("a", "x", "u1"), 2, 1, (0, false)), None);
        assert_eq!(t.charged("a"), 3);
        t.observed("u1", Seen::At(2));
        assert_eq!(t.charged("a"), 1);
        // A delete only once observed; absence before the delete releases nothing.
        t.observed("u1", Seen::Absent);
        assert_eq!(t.charged("a"), 1);
        t.deleted("u1");
        assert_eq!(t.charged("a"), 1);
        t.observed("u1", Seen::Absent);
        assert_eq!(t.charged("a"), 0);
    }

    #[test]
    fn a_lowered_hard_binds_admissions_sent_after_the_grace() {
        let mut t = Truth::default();
        t.quota("a", 4);
        t.hard_changed("a", 2, 1000);
        assert_eq!(
            t.admitted(("a", "x", "u1"), 1, 3, (1000, false)),
            None,
            "read before"
        );
        assert!(
            t.admitted(("a", "y", "u2"), 1, 1, (1000 + EDIT_GRACE_MS + 1, false))
                .is_some()
        );
        assert_eq!(
            t.check_all(),
            None,
            "a lowered quota is checked at admissions"
        );
    }

    #[test]
    fn a_binding_admitted_before_the_quota_is_left_out_of_the_bound_but_not_of_the_usage() {
        let mut t = Truth::default();
        t.quota("a", 4);
        // Admitted by a replica that did not hold the quota yet: usage, not an admission on it.
        assert_eq!(t.admitted(("a", "x", "u1"), 1, 3, (0, true)), None);
        assert_eq!(t.admitted(("a", "y", "u2"), 1, 4, (0, false)), None);
        assert_eq!(t.charged("a"), 7, "liveness sees all the usage");
        assert_eq!(t.check_all(), None);
        assert!(
            t.admitted(("a", "z", "u3"), 1, 1, (0, false)).is_some(),
            "5 of 4 on it"
        );
        // Scaled up later by a replica that holds it: still usage from before the quota.
        let mut t = Truth::default();
        t.quota("a", 2);
        assert_eq!(t.admitted(("a", "x", "u1"), 1, 3, (0, true)), None);
        assert_eq!(t.admitted(("a", "x", "u1"), 2, 4, (0, false)), None);
    }
}
