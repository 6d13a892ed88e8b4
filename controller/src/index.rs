//! The control plane's state as the controller needs it, fed by watch events.
//!
//! ```text
//!  watch KarmadaQuota ──apply/delete/init──► quotas:   namespace → {quota names}
//!  watch ResourceBinding ─────────────────► bindings: namespace → uid → {name, generation,
//!      (count name resolved first)                       charge = core BindingCharge}
//!                                           deleted:  uid → when the watch saw it go
//!  watch Cluster ─────────────────────────► clusters: name → Cluster (→ members)
//! ```
//!
//! Like Linkerd's indexes, every kind has apply / delete / reset (a re-list: `Init`,
//! `InitApply`…, `InitDone` replaces the kind's state at once). A binding's charge is
//! computed once, when its event arrives, so a reconcile only sums charges. Applying a
//! binding event reports the namespaces whose bindings changed, so only those quotas are
//! reconciled. A uid that disappears (watch delete, or missing from a re-list) is
//! remembered for `deleted_memory` so reservations for it can be pruned as deleted.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use karmada_quota_core::ledger::Observation;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::{Cluster, KarmadaQuota, ResourceBinding};
use kube::ResourceExt;
use kube::runtime::watcher::Event;

/// One observed ResourceBinding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingEntry {
    /// metadata.name.
    pub name: String,
    /// metadata.generation (0 when absent).
    pub generation: i64,
    /// What it costs, computed by core when the event arrived.
    pub charge: BindingCharge,
}

impl BindingEntry {
    /// The entry of a binding, its charge computed with the resolved `count_name`.
    pub fn of(rb: &ResourceBinding, count_name: Option<&str>) -> Self {
        Self {
            name: rb.name_any(),
            generation: rb.metadata.generation.unwrap_or(0),
            charge: BindingCharge::compute(&rb.spec, count_name),
        }
    }
}

/// namespace → uid → entry.
type Bindings = HashMap<String, HashMap<String, BindingEntry>>;
/// namespace → quota names.
type Quotas = BTreeMap<String, BTreeSet<String>>;

/// Namespaces whose bindings changed.
pub type Touched = BTreeSet<String>;

/// The index; the caller wraps it in a lock.
#[derive(Debug)]
pub struct Index {
    quotas: Quotas,
    quotas_init: Option<Quotas>,
    quotas_synced: bool,

    bindings: Bindings,
    bindings_init: Option<Bindings>,
    bindings_synced: bool,
    /// uid → Unix seconds when the watch saw it deleted. Entries older than
    /// `deleted_memory` are dropped (by then every reservation for it has expired).
    deleted: HashMap<String, i64>,
    deleted_memory: i64,
    last_gc: i64,

    clusters: BTreeMap<String, Arc<Cluster>>,
    clusters_init: Option<BTreeMap<String, Arc<Cluster>>>,
    clusters_synced: bool,
}

impl Index {
    /// An empty index that remembers deleted binding uids for `deleted_memory_secs`.
    pub fn new(deleted_memory_secs: i64) -> Self {
        Self {
            quotas: Quotas::new(),
            quotas_init: None,
            quotas_synced: false,
            bindings: Bindings::new(),
            bindings_init: None,
            bindings_synced: false,
            deleted: HashMap::new(),
            deleted_memory: deleted_memory_secs,
            last_gc: 0,
            clusters: BTreeMap::new(),
            clusters_init: None,
            clusters_synced: false,
        }
    }

    // ---- quotas -----------------------------------------------------------------------

    /// Apply a KarmadaQuota watch event.
    pub fn apply_quota_event(&mut self, ev: &Event<KarmadaQuota>) {
        match ev {
            Event::Apply(q) => {
                if let Some(ns) = q.namespace() {
                    self.quotas.entry(ns).or_default().insert(q.name_any());
                }
            }
            Event::Delete(q) => {
                if let Some(ns) = q.namespace() {
                    remove_quota(&mut self.quotas, &ns, &q.name_any());
                }
            }
            Event::Init => self.quotas_init = Some(Quotas::new()),
            Event::InitApply(q) => {
                if let (Some(buf), Some(ns)) = (self.quotas_init.as_mut(), q.namespace()) {
                    buf.entry(ns).or_default().insert(q.name_any());
                }
            }
            Event::InitDone => {
                if let Some(buf) = self.quotas_init.take() {
                    self.quotas = buf;
                }
                self.quotas_synced = true;
            }
        }
    }

    /// Names of the quotas in `namespace`.
    pub fn quotas_in(&self, namespace: &str) -> impl Iterator<Item = &str> + '_ {
        self.quotas
            .get(namespace)
            .into_iter()
            .flat_map(|names| names.iter().map(String::as_str))
    }

    /// Whether `namespace` has at least one quota.
    pub fn has_quotas(&self, namespace: &str) -> bool {
        self.quotas.get(namespace).is_some_and(|s| !s.is_empty())
    }

    /// Number of quotas.
    pub fn quota_count(&self) -> usize {
        self.quotas.values().map(BTreeSet::len).sum()
    }

    // ---- bindings ---------------------------------------------------------------------

    /// Apply a ResourceBinding watch event; `count_name` is the resolved count name of the
    /// event's object (ignored for `Init`/`InitDone`). Returns the namespaces whose bindings
    /// changed (a status-only update changes nothing).
    pub fn apply_binding_event(
        &mut self,
        ev: &Event<ResourceBinding>,
        count_name: Option<&str>,
        now: i64,
    ) -> Touched {
        self.gc_deleted(now);
        match ev {
            Event::Apply(rb) => self.apply_binding(rb, count_name),
            Event::Delete(rb) => self.delete_binding(rb, now),
            Event::Init => {
                self.bindings_init = Some(Bindings::new());
                Touched::new()
            }
            Event::InitApply(rb) => {
                if let (Some(buf), Some((ns, uid))) = (self.bindings_init.as_mut(), key(rb)) {
                    buf.entry(ns)
                        .or_default()
                        .insert(uid, BindingEntry::of(rb, count_name));
                }
                Touched::new()
            }
            Event::InitDone => {
                let touched = match self.bindings_init.take() {
                    Some(buf) => self.reset_bindings(buf, now),
                    None => Touched::new(),
                };
                self.bindings_synced = true;
                touched
            }
        }
    }

    /// Add or update one binding.
    pub fn apply_binding(&mut self, rb: &ResourceBinding, count_name: Option<&str>) -> Touched {
        let Some((ns, uid)) = key(rb) else {
            return Touched::new();
        };
        let entry = BindingEntry::of(rb, count_name);
        self.deleted.remove(&uid);
        let by_uid = self.bindings.entry(ns.clone()).or_default();
        if by_uid.get(&uid) == Some(&entry) {
            return Touched::new();
        }
        by_uid.insert(uid, entry);
        Touched::from([ns])
    }

    /// Remove one binding and remember its uid as deleted.
    pub fn delete_binding(&mut self, rb: &ResourceBinding, now: i64) -> Touched {
        let Some((ns, uid)) = key(rb) else {
            return Touched::new();
        };
        self.deleted.insert(uid.clone(), now);
        let mut touched = Touched::new();
        if let Some(by_uid) = self.bindings.get_mut(&ns) {
            if by_uid.remove(&uid).is_some() {
                touched.insert(ns.clone());
            }
            if by_uid.is_empty() {
                self.bindings.remove(&ns);
            }
        }
        touched
    }

    /// Replace all bindings by a re-list; uids that are gone count as deleted.
    fn reset_bindings(&mut self, new: Bindings, now: i64) -> Touched {
        let mut touched = Touched::new();
        for (ns, old) in &self.bindings {
            let fresh = new.get(ns);
            for uid in old.keys() {
                if fresh.is_none_or(|f| !f.contains_key(uid)) {
                    self.deleted.insert(uid.clone(), now);
                }
            }
            if fresh != Some(old) {
                touched.insert(ns.clone());
            }
        }
        for (ns, fresh) in &new {
            if !self.bindings.contains_key(ns) && !fresh.is_empty() {
                touched.insert(ns.clone());
            }
            for uid in fresh.keys() {
                self.deleted.remove(uid);
            }
        }
        self.bindings = new;
        touched
    }

    /// Forget deleted uids older than the memory (at most every 10 s).
    fn gc_deleted(&mut self, now: i64) {
        if now - self.last_gc < 10 {
            return;
        }
        self.last_gc = now;
        let horizon = now - self.deleted_memory;
        self.deleted.retain(|_, at| *at > horizon);
    }

    /// The observed bindings of `namespace`, by uid.
    pub fn bindings_in(&self, namespace: &str) -> impl Iterator<Item = (&str, &BindingEntry)> + '_ {
        self.bindings
            .get(namespace)
            .into_iter()
            .flat_map(|m| m.iter().map(|(uid, e)| (uid.as_str(), e)))
    }

    /// The charges of the observed bindings of `namespace`.
    pub fn charges_in(&self, namespace: &str) -> impl Iterator<Item = &BindingCharge> + '_ {
        self.bindings_in(namespace).map(|(_, e)| &e.charge)
    }

    /// What the controller knows of binding `uid` in `namespace` (for pruning).
    pub fn observation(&self, namespace: &str, uid: &str) -> Observation {
        if let Some(e) = self.bindings.get(namespace).and_then(|m| m.get(uid)) {
            Observation::Seen(e.generation)
        } else if self.deleted.contains_key(uid) {
            Observation::Deleted
        } else {
            Observation::NotSeen
        }
    }

    /// Number of observed bindings.
    pub fn binding_count(&self) -> usize {
        self.bindings.values().map(HashMap::len).sum()
    }

    /// Number of remembered deletions.
    pub fn deleted_count(&self) -> usize {
        self.deleted.len()
    }

    // ---- clusters ---------------------------------------------------------------------

    /// Apply a Cluster watch event; returns whether the set of clusters (or one of them)
    /// changed.
    pub fn apply_cluster_event(&mut self, ev: &Event<Cluster>) -> bool {
        match ev {
            Event::Apply(c) => {
                let name = c.name_any();
                let changed = self
                    .clusters
                    .get(&name)
                    .is_none_or(|old| old.spec != c.spec);
                self.clusters.insert(name, Arc::new(c.clone()));
                changed
            }
            Event::Delete(c) => self.clusters.remove(&c.name_any()).is_some(),
            Event::Init => {
                self.clusters_init = Some(BTreeMap::new());
                false
            }
            Event::InitApply(c) => {
                if let Some(buf) = self.clusters_init.as_mut() {
                    buf.insert(c.name_any(), Arc::new(c.clone()));
                }
                false
            }
            Event::InitDone => {
                if let Some(buf) = self.clusters_init.take() {
                    self.clusters = buf;
                }
                self.clusters_synced = true;
                true
            }
        }
    }

    /// The known Cluster objects, by name.
    pub fn clusters(&self) -> &BTreeMap<String, Arc<Cluster>> {
        &self.clusters
    }

    /// Mark the Cluster watch as synced without running one (`--member-clusters-from-api=false`).
    pub fn skip_clusters(&mut self) {
        self.clusters_synced = true;
    }

    // ---- readiness --------------------------------------------------------------------

    /// Whether the binding watch has listed everything once (before that, no usage may be
    /// written: a partial sum would under-count).
    pub fn bindings_synced(&self) -> bool {
        self.bindings_synced
    }

    /// Whether every watch has listed everything once.
    pub fn synced(&self) -> bool {
        self.quotas_synced && self.bindings_synced && self.clusters_synced
    }
}

fn remove_quota(quotas: &mut Quotas, ns: &str, name: &str) {
    if let Some(names) = quotas.get_mut(ns) {
        names.remove(name);
        if names.is_empty() {
            quotas.remove(ns);
        }
    }
}

/// (namespace, uid) of a binding; `None` for an object without them (never from a watch).
fn key(rb: &ResourceBinding) -> Option<(String, String)> {
    Some((rb.metadata.namespace.clone()?, rb.metadata.uid.clone()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    const NOW: i64 = 1_000_000;

    fn idx() -> Index {
        Index::new(600)
    }

    #[test]
    fn apply_computes_the_charge_once_and_touches_only_its_namespace() {
        let mut i = idx();
        let rb = mk_binding("team-a", "web", "uid-1", 1, 3, "500m", &[("member1", 3)]);
        let touched = i.apply_binding_event(
            &Event::Apply(rb.clone()),
            Some("count/deployments.apps"),
            NOW,
        );
        assert_eq!(touched, Touched::from(["team-a".to_owned()]));
        let entries: Vec<_> = i.bindings_in("team-a").collect();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].0, "uid-1");
        assert_eq!(entries[0].1.generation, 1);
        assert_eq!(
            entries[0].1.charge,
            BindingCharge::compute(&rb.spec, Some("count/deployments.apps"))
        );
        assert_eq!(i.bindings_in("team-b").count(), 0);
    }

    #[test]
    fn unchanged_binding_touches_nothing() {
        let mut i = idx();
        let rb = mk_binding("team-a", "web", "uid-1", 1, 3, "500m", &[]);
        i.apply_binding_event(&Event::Apply(rb.clone()), None, NOW);
        let mut status_only = rb.clone();
        status_only.metadata.resource_version = Some("99".into());
        assert!(
            i.apply_binding_event(&Event::Apply(status_only), None, NOW)
                .is_empty()
        );
        let mut scaled = rb;
        scaled.spec.replicas = 5;
        scaled.metadata.generation = Some(2);
        assert_eq!(
            i.apply_binding_event(&Event::Apply(scaled), None, NOW)
                .len(),
            1
        );
        assert_eq!(i.observation("team-a", "uid-1"), Observation::Seen(2));
    }

    #[test]
    fn delete_is_remembered_for_pruning_then_forgotten() {
        let mut i = idx();
        let rb = mk_binding("team-a", "web", "uid-1", 4, 3, "500m", &[]);
        assert_eq!(i.observation("team-a", "uid-1"), Observation::NotSeen);
        i.apply_binding_event(&Event::Apply(rb.clone()), None, NOW);
        assert_eq!(i.observation("team-a", "uid-1"), Observation::Seen(4));
        let touched = i.apply_binding_event(&Event::Delete(rb), None, NOW);
        assert_eq!(touched.len(), 1);
        assert_eq!(i.observation("team-a", "uid-1"), Observation::Deleted);
        assert_eq!(i.binding_count(), 0);
        // Still remembered just before the memory runs out, forgotten after (GC runs at
        // most every 10 s).
        i.apply_binding_event(&Event::Init, None, NOW + 599);
        assert_eq!(i.observation("team-a", "uid-1"), Observation::Deleted);
        i.apply_binding_event(&Event::Init, None, NOW + 610);
        assert_eq!(i.observation("team-a", "uid-1"), Observation::NotSeen);
    }

    #[test]
    fn relist_replaces_state_and_marks_missing_uids_deleted() {
        let mut i = idx();
        let a = mk_binding("team-a", "a", "uid-a", 1, 1, "1", &[]);
        let b = mk_binding("team-b", "b", "uid-b", 1, 1, "1", &[]);
        let c = mk_binding("team-c", "c", "uid-c", 1, 1, "1", &[]);
        for ev in [
            Event::Init,
            Event::InitApply(a.clone()),
            Event::InitApply(b.clone()),
            Event::InitDone,
        ] {
            i.apply_binding_event(&ev, None, NOW);
        }
        assert!(i.bindings_synced());
        assert_eq!(i.binding_count(), 2);
        // The watch restarts: `a` is gone, `b` unchanged, `c` is new.
        i.apply_binding_event(&Event::Init, None, NOW);
        // During the re-list the old state still answers.
        assert_eq!(i.binding_count(), 2);
        i.apply_binding_event(&Event::InitApply(b), None, NOW);
        i.apply_binding_event(&Event::InitApply(c), None, NOW);
        let touched = i.apply_binding_event(&Event::InitDone, None, NOW);
        assert_eq!(
            touched,
            Touched::from(["team-a".to_owned(), "team-c".to_owned()])
        );
        assert_eq!(i.observation("team-a", "uid-a"), Observation::Deleted);
        assert_eq!(i.observation("team-b", "uid-b"), Observation::Seen(1));
        assert_eq!(i.observation("team-c", "uid-c"), Observation::Seen(1));
    }

    #[test]
    fn quotas_are_indexed_by_namespace() {
        let mut i = idx();
        let q1 = mk_quota("team-a", "q1", &[("pods", "10")]);
        let q2 = mk_quota("team-a", "q2", &[("pods", "10")]);
        let q3 = mk_quota("team-b", "q3", &[("pods", "10")]);
        for ev in [
            Event::Init,
            Event::InitApply(q1.clone()),
            Event::InitApply(q3),
            Event::InitDone,
        ] {
            i.apply_quota_event(&ev);
        }
        i.apply_quota_event(&Event::Apply(q2));
        assert_eq!(i.quotas_in("team-a").collect::<Vec<_>>(), ["q1", "q2"]);
        assert!(i.has_quotas("team-b"));
        i.apply_quota_event(&Event::Delete(q1));
        assert_eq!(i.quotas_in("team-a").collect::<Vec<_>>(), ["q2"]);
        assert_eq!(i.quota_count(), 2);
        assert!(!i.has_quotas("team-c"));
    }

    #[test]
    fn clusters_report_spec_changes_only() {
        let mut i = idx();
        let c = mk_cluster(
            "member1",
            Some("https://127.0.0.1:6443"),
            Some(("karmada-cluster", "member1")),
        );
        assert!(i.apply_cluster_event(&Event::Apply(c.clone())));
        let mut relabelled = c.clone();
        relabelled.metadata.labels = Some([("x".to_owned(), "y".to_owned())].into());
        assert!(!i.apply_cluster_event(&Event::Apply(relabelled)));
        let mut moved = c.clone();
        moved.spec.api_endpoint = Some("https://127.0.0.1:7443".into());
        assert!(i.apply_cluster_event(&Event::Apply(moved)));
        assert!(i.apply_cluster_event(&Event::Delete(c)));
        assert!(i.clusters().is_empty());
    }

    #[test]
    fn synced_only_after_every_watch_listed() {
        let mut i = idx();
        assert!(!i.synced());
        i.apply_quota_event(&Event::Init);
        i.apply_quota_event(&Event::InitDone);
        i.apply_binding_event(&Event::Init, None, NOW);
        i.apply_binding_event(&Event::InitDone, None, NOW);
        assert!(!i.synced());
        i.skip_clusters();
        assert!(i.synced());
    }
}
