//! The control plane's state as the controller needs it, fed by watch events.
//!
//! ```text
//!  watch ResourceBinding ─────────────────► bindings: namespace → uid → {name, generation,
//!      (count name resolved first)                       charge = core BindingCharge,
//!                                                        unpriced count (discovery failed)}
//!                                           deleted:  uid → when the watch saw it go
//!  quorum reads of expired entries' bindings ► reads: (namespace, uid) → what was stored
//!  watch Cluster ─────────────────────────► clusters: name → Cluster (→ members)
//! ```
//!
//! Quotas are not indexed here (the controller reads kube-runtime's reflector store); the
//! index only records that their watch listed once.
//!
//! Like Linkerd's indexes, every kind has apply / delete / reset (a re-list, buffered by
//! [`Relist`] and swapped in at once). A binding's charge is computed once, when its event
//! arrives, so a reconcile only sums charges. Applying a binding event reports the
//! namespaces whose bindings changed, so only those quotas are reconciled. A uid that
//! disappears (watch delete, or missing from a re-list) is remembered for
//! `deleted_memory` so reservations for it can be pruned as deleted. A binding whose kind
//! could not be resolved to a count name is kept *unpriced* (charged for everything but
//! its object count, with its spec kept) until [`Index::price`] succeeds.
//!
//! Kept compact for a million bindings (docs/design.md §6): an entry holds its name (one
//! allocation shared with the name map, [`names`]), its generation and a pointer to its
//! charge; equal charges are stored once ([`charges`]). Each namespace also counts its
//! bindings per distinct charge ([`tally`]), kept in step on every change, so a quota's
//! fold sums each distinct charge once instead of every binding.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use charges::Charges;
use names::Names;
use reads::Reads;
use tally::Tally;

use karmada_quota_core::binding::ResourceBindingSpec;
use karmada_quota_core::complete::CountGap;
use karmada_quota_core::ledger::{Observation, is_expired};
use karmada_quota_core::queue::is_waiting;
use karmada_quota_core::quota::{Reservation, ReservedBy};
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::{Cluster, ResourceBinding};
use karmada_quota_shell::relist::{Relist, Step};
use kube::ResourceExt;
use kube::runtime::watcher::Event;

/// Interned charges.
pub mod charges;
/// Binding name → uid, per namespace.
pub mod names;
pub mod reads;
/// Bindings per distinct charge, per namespace.
pub mod tally;

/// A binding's object-count name as resolved: `Ok(None)` when its kind has none,
/// `Err(reason)` when it could not be resolved (API discovery failed).
pub type CountResolution<'a> = Result<Option<&'a str>, &'a str>;

/// One observed ResourceBinding.
#[derive(Clone, Debug, PartialEq)]
pub struct BindingEntry {
    /// metadata.name (shared with the name map).
    pub name: Arc<str>,
    /// metadata.generation (0 when absent).
    pub generation: i64,
    /// What it costs, computed by core when the event arrived (shared by equal charges).
    pub charge: Arc<BindingCharge>,
    /// Set while the object count could not be priced.
    pub unpriced: Option<Box<Unpriced>>,
    /// metadata.deletionTimestamp is set (finalizers pending): the name will be free soon.
    pub deleting: bool,
}

/// A binding whose object count is unknown: why, and the spec to price it again.
#[derive(Clone, Debug, PartialEq)]
pub struct Unpriced {
    /// Why its count name is unknown.
    pub gap: CountGap,
    /// The binding's spec, to compute the charge once the count name resolves.
    pub spec: ResourceBindingSpec,
}

impl BindingEntry {
    /// The entry of a binding, its charge computed with the resolved `count_name` and
    /// interned in `charges`.
    /// A binding waiting in a quota line (`core::queue::is_waiting`) costs nothing.
    pub fn of(rb: &ResourceBinding, count: CountResolution<'_>, charges: &mut Charges) -> Self {
        let waiting = is_waiting(rb.metadata.annotations.as_ref(), &rb.spec);
        let count = if waiting { Ok(None) } else { count };
        let unpriced = count.err().map(|reason| {
            Box::new(Unpriced {
                gap: CountGap {
                    api_version: rb.spec.resource.api_version.clone(),
                    kind: rb.spec.resource.kind.clone(),
                    reason: reason.to_owned(),
                },
                spec: rb.spec.clone(),
            })
        });
        Self {
            name: rb.name_any().into(),
            generation: rb.metadata.generation.unwrap_or(0),
            charge: charges.intern(if waiting {
                BindingCharge::default()
            } else {
                BindingCharge::compute(&rb.spec, count.ok().flatten())
            }),
            unpriced,
            deleting: rb.metadata.deletion_timestamp.is_some(),
        }
    }
}

/// namespace → uid → entry.
type Bindings = HashMap<String, HashMap<Arc<str>, BindingEntry>>;

/// Namespaces whose bindings changed.
pub type Touched = BTreeSet<String>;

/// An unpriced binding: namespace, uid, template apiVersion and kind.
pub type UnpricedRef = (String, String, String, String);

/// The index; the caller wraps it in a lock.
#[derive(Debug)]
pub struct Index {
    bindings: Bindings,
    /// namespace → binding name → uid, of `bindings` (the entries' own allocations).
    names: Names,
    /// The charges of `bindings` (and of a re-list in progress), each stored once.
    charges: Charges,
    /// namespace → how many of its bindings cost each distinct charge (of `bindings`).
    tallies: HashMap<String, Tally>,
    bindings_relist: Relist<Bindings>,
    bindings_synced: bool,
    /// The fence generation of the newest complete binding list (`None`: none yet;
    /// `crate::fence`).
    bindings_listed_at: Option<u64>,
    /// (namespace, uid) of the entries with `unpriced` set.
    unpriced: BTreeSet<(String, String)>,
    /// uid → Unix seconds when the watch saw it deleted. Entries older than
    /// `deleted_memory` are dropped (by then every reservation for it has expired).
    deleted: HashMap<String, i64>,
    /// What quorum reads found for entries that expired before the watch showed their
    /// binding ([`reads`]).
    reads: Reads,
    deleted_memory: i64,
    last_gc: i64,

    clusters: BTreeMap<String, Arc<Cluster>>,
    clusters_relist: Relist<BTreeMap<String, Arc<Cluster>>>,
    clusters_synced: bool,

    /// Whether the quota watch (whose objects the reflector store holds) listed once.
    /// The `unaccountedWorkloads` policy of a quota that sets none
    /// (`--unaccounted-workloads`, the same as the webhook's).
    pub unaccounted_default: karmada_quota_core::quota::Unaccounted,
    quotas_synced: bool,
    /// [`Index::synced`], published on each change (readiness awaits it: no poll).
    synced_tx: tokio::sync::watch::Sender<bool>,
}

impl Index {
    /// An empty index that remembers deleted binding uids for `deleted_memory_secs`.
    pub fn new(deleted_memory_secs: i64) -> Self {
        Self {
            bindings: Bindings::new(),
            names: Names::default(),
            charges: Charges::default(),
            tallies: HashMap::new(),
            bindings_relist: Relist::default(),
            bindings_synced: false,
            bindings_listed_at: None,
            unpriced: BTreeSet::new(),
            deleted: HashMap::new(),
            reads: Reads::default(),
            deleted_memory: deleted_memory_secs,
            last_gc: 0,
            clusters: BTreeMap::new(),
            clusters_relist: Relist::default(),
            clusters_synced: false,
            quotas_synced: false,
            unaccounted_default: karmada_quota_core::quota::Unaccounted::Deny,
            synced_tx: tokio::sync::watch::Sender::new(false),
        }
    }

    // ---- bindings ---------------------------------------------------------------------

    /// Apply a ResourceBinding watch event whose count name resolved (or that has none).
    pub fn apply_binding_event(
        &mut self,
        ev: &Event<ResourceBinding>,
        count_name: Option<&str>,
        now: i64,
    ) -> Touched {
        self.apply_resolved_binding_event(ev, Ok(count_name), now)
    }

    /// Apply a ResourceBinding watch event; `count` is the resolved count name of the
    /// event's object (ignored for `Init`/`InitDone`). Returns the namespaces whose
    /// bindings changed (a status-only update changes nothing).
    pub fn apply_resolved_binding_event(
        &mut self,
        ev: &Event<ResourceBinding>,
        count: CountResolution<'_>,
        now: i64,
    ) -> Touched {
        self.gc_deleted(now);
        let charges = &mut self.charges;
        let step = self.bindings_relist.step(ev, |buf, rb| {
            if let Some((ns, uid)) = key(rb) {
                buf.entry(ns)
                    .or_default()
                    .insert(uid.into(), BindingEntry::of(rb, count, charges));
            }
        });
        let touched = match step {
            Step::Apply(rb) => self.apply_binding(rb, count),
            Step::Delete(rb) => self.delete_binding(rb, now),
            Step::Buffered => Touched::new(),
            Step::Relisted(all) => {
                self.bindings_synced = true;
                // A complete list: at least generation 0 (the watch tells the one it
                // began at: `bindings_listed`).
                self.bindings_listed_at = self.bindings_listed_at.max(Some(0));
                self.publish_synced();
                self.reset_bindings(all, now)
            }
        };
        self.charges.maybe_sweep();
        touched
    }

    /// Add or update one binding.
    pub fn apply_binding(&mut self, rb: &ResourceBinding, count: CountResolution<'_>) -> Touched {
        let Some((ns, uid)) = key(rb) else {
            return Touched::new();
        };
        let entry = BindingEntry::of(rb, count, &mut self.charges);
        self.deleted.remove(&uid);
        if entry.unpriced.is_some() {
            self.unpriced.insert((ns.clone(), uid.clone()));
        } else {
            self.unpriced.remove(&(ns.clone(), uid.clone()));
        }
        let by_uid = self.bindings.entry(ns.clone()).or_default();
        // One allocation of the uid, shared by both maps.
        let uid: Arc<str> = match by_uid.get_key_value(uid.as_str()) {
            Some((k, _)) => k.clone(),
            None => uid.into(),
        };
        self.names.insert(&ns, entry.name.clone(), uid.clone());
        if by_uid.get(&uid) == Some(&entry) {
            return Touched::new();
        }
        let (charge, name) = (entry.charge.clone(), entry.name.clone());
        let tally = self.tallies.entry(ns.clone()).or_default();
        if let Some(old) = by_uid.insert(uid, entry) {
            tally.remove(&old.charge, &old.name);
        }
        tally.add(&charge, &name);
        Touched::from([ns])
    }

    /// Remove one binding and remember its uid as deleted.
    pub fn delete_binding(&mut self, rb: &ResourceBinding, now: i64) -> Touched {
        let Some((ns, uid)) = key(rb) else {
            return Touched::new();
        };
        self.deleted.insert(uid.clone(), now);
        self.unpriced.remove(&(ns.clone(), uid.clone()));
        let mut touched = Touched::new();
        if let Some(by_uid) = self.bindings.get_mut(&ns) {
            if let Some(gone) = by_uid.remove(uid.as_str()) {
                touched.insert(ns.clone());
                if let Some(tally) = self.tallies.get_mut(&ns) {
                    tally.remove(&gone.charge, &gone.name);
                }
                self.names.remove(&ns, &gone.name, &uid);
            }
            if by_uid.is_empty() {
                self.bindings.remove(&ns);
                self.names.forget(&ns);
                self.tallies.remove(&ns);
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
                    self.deleted.insert(uid.to_string(), now);
                }
            }
            if fresh != Some(old) {
                touched.insert(ns.clone());
            }
        }
        self.unpriced.clear();
        for (ns, fresh) in &new {
            if !self.bindings.contains_key(ns) && !fresh.is_empty() {
                touched.insert(ns.clone());
            }
            for (uid, entry) in fresh {
                self.deleted.remove(&**uid);
                if entry.unpriced.is_some() {
                    self.unpriced.insert((ns.clone(), uid.to_string()));
                }
            }
        }
        self.names = Names::rebuilt(new.iter().flat_map(|(ns, by_uid)| {
            by_uid
                .iter()
                .map(move |(uid, e)| (ns.as_str(), e.name.clone(), uid.clone()))
        }));
        self.tallies = new
            .iter()
            .map(|(ns, by_uid)| {
                let mut tally = Tally::default();
                for entry in by_uid.values() {
                    tally.add(&entry.charge, &entry.name);
                }
                (ns.clone(), tally)
            })
            .collect();
        self.bindings = new;
        touched
    }

    /// The bindings whose object count is not priced yet.
    pub fn unpriced(&self) -> Vec<UnpricedRef> {
        self.unpriced
            .iter()
            .filter_map(|(ns, uid)| {
                let u = self
                    .bindings
                    .get(ns)?
                    .get(uid.as_str())?
                    .unpriced
                    .as_ref()?;
                Some((
                    ns.clone(),
                    uid.clone(),
                    u.gap.api_version.clone(),
                    u.gap.kind.clone(),
                ))
            })
            .collect()
    }

    /// Price the object count of an unpriced binding once its kind resolved: its charge
    /// is computed again from its spec. Touches its namespace when it changed; a
    /// still-failing resolution only refreshes the reason.
    pub fn price(&mut self, namespace: &str, uid: &str, count: CountResolution<'_>) -> Touched {
        let Some(entry) = self
            .bindings
            .get_mut(namespace)
            .and_then(|m| m.get_mut(uid))
        else {
            return Touched::new();
        };
        let Some(unpriced) = entry.unpriced.as_mut() else {
            return Touched::new();
        };
        match count {
            Err(reason) => {
                reason.clone_into(&mut unpriced.gap.reason);
                Touched::new()
            }
            Ok(name) => {
                let charge = self
                    .charges
                    .intern(BindingCharge::compute(&unpriced.spec, name));
                let tally = self.tallies.entry(namespace.to_owned()).or_default();
                tally.remove(&entry.charge, &entry.name);
                tally.add(&charge, &entry.name);
                entry.charge = charge;
                entry.unpriced = None;
                self.unpriced
                    .remove(&(namespace.to_owned(), uid.to_owned()));
                Touched::from([namespace.to_owned()])
            }
        }
    }

    /// Forget deleted uids older than the memory (at most every 10 s).
    fn gc_deleted(&mut self, now: i64) {
        if now - self.last_gc < 10 {
            return;
        }
        self.last_gc = now;
        let horizon = now - self.deleted_memory;
        self.deleted.retain(|_, at| *at > horizon);
        self.reads.forget_before(horizon);
    }

    /// The observed bindings of `namespace`, by uid.
    pub fn bindings_in(&self, namespace: &str) -> impl Iterator<Item = (&str, &BindingEntry)> + '_ {
        self.bindings
            .get(namespace)
            .into_iter()
            .flat_map(|m| m.iter().map(|(uid, e)| (&**uid, e)))
    }

    /// The charges of the observed bindings of `namespace`, one per binding (what the
    /// tests sum for the full recompute the fold must equal).
    #[cfg(test)]
    pub(crate) fn charges_in(&self, namespace: &str) -> impl Iterator<Item = &BindingCharge> + '_ {
        self.bindings_in(namespace).map(|(_, e)| &*e.charge)
    }

    /// The tally of `namespace`'s bindings, if it has any.
    pub fn tally_of(&self, namespace: &str) -> Option<&Tally> {
        self.tallies.get(namespace)
    }

    /// The distinct charges of the observed bindings of `namespace`, each with the number
    /// of bindings that cost it (what a fold sums: O(distinct charges), not O(bindings)).
    pub fn tally_in(&self, namespace: &str) -> impl Iterator<Item = (&BindingCharge, usize)> + '_ {
        self.tallies
            .get(namespace)
            .into_iter()
            .flat_map(Tally::iter)
    }

    /// The unpriced bindings of `namespace`: their charge and why their count is unknown
    /// (looked up through the unpriced set, not by walking the namespace).
    pub fn gaps_in<'a>(
        &'a self,
        namespace: &'a str,
    ) -> impl Iterator<Item = (&'a BindingCharge, &'a CountGap)> + 'a {
        let in_ns = self.bindings.get(namespace);
        self.unpriced
            .range((namespace.to_owned(), String::new())..)
            .take_while(move |(ns, _)| ns == namespace)
            .filter_map(move |(_, uid)| {
                let e = in_ns?.get(uid.as_str())?;
                e.unpriced.as_ref().map(|u| (&*e.charge, &u.gap))
            })
    }

    /// What the controller knows of the binding `by` names in `namespace` (for pruning):
    /// by uid; for a uid never seen, whether its name is served by another binding that is
    /// not being deleted (the CREATE it was admitted for then failed with `already exists`).
    pub fn observation(&self, namespace: &str, by: &ReservedBy) -> Observation {
        let in_ns = self.bindings.get(namespace);
        if let Some(e) = in_ns.and_then(|m| m.get(by.uid.as_str())) {
            Observation::Seen(e.generation)
        } else if self.deleted.contains_key(&by.uid) {
            Observation::Deleted
        } else if self
            .names
            .uid(namespace, &by.name)
            .and_then(|uid| in_ns.and_then(|m| m.get(uid)))
            .is_some_and(|other| !other.deleting)
        {
            Observation::NameTaken
        } else {
            Observation::NotSeen
        }
    }

    /// What the controller knows of `entry`'s binding in `namespace` at `now`, for the
    /// prune: [`Index::observation`], or [`Observation::NotStored`] when the entry has
    /// expired, the watch has not shown its binding at its generation, and a quorum read
    /// made after the expiry found none at that generation or later (R19) — or the entry
    /// names no binding name to read (written by a webhook that did not record names).
    pub fn observation_of(&self, namespace: &str, entry: &Reservation, now: i64) -> Observation {
        let seen = self.observation(namespace, &entry.reserved_by);
        // An entry that names no binding cannot be read: expiry alone lets it go.
        let unreadable = entry.reserved_by.name.is_empty();
        if unshown(seen, entry)
            && is_expired(entry, now)
            && (unreadable || self.reads.not_stored(namespace, entry))
        {
            Observation::NotStored
        } else {
            seen
        }
    }

    /// Whether `entry`'s binding in `namespace` must be read from the apiserver before the
    /// entry can go: it expired, the watch has not shown the binding at the entry's
    /// generation, and no read since the expiry settled it ([`reads::Reads::wanted`]).
    pub fn wants_read(&self, namespace: &str, entry: &Reservation, now: i64) -> bool {
        !entry.reserved_by.name.is_empty()
            && unshown(self.observation(namespace, &entry.reserved_by), entry)
            && self.reads.wanted(namespace, entry, now)
    }

    /// A quorum read at `at` of `namespace`'s binding named by an entry of `uid` found
    /// `stored`: the (uid, generation) under the name, `None` if there is none.
    pub fn record_read(
        &mut self,
        namespace: &str,
        uid: &str,
        stored: Option<(&str, i64)>,
        at: i64,
    ) {
        self.reads.record(namespace, uid, stored, at);
        self.gc_deleted(at);
    }

    /// Number of observed bindings.
    pub fn binding_count(&self) -> usize {
        self.bindings.values().map(HashMap::len).sum()
    }

    /// Number of distinct charges stored for them.
    pub fn distinct_charges(&self) -> usize {
        self.charges.len()
    }

    // ---- clusters ---------------------------------------------------------------------

    /// Apply a Cluster watch event; returns whether the set of clusters (or one of them)
    /// changed.
    pub fn apply_cluster_event(&mut self, ev: &Event<Cluster>) -> bool {
        let step = self.clusters_relist.step(ev, |buf, c| {
            buf.insert(c.name_any(), Arc::new(c.clone()));
        });
        match step {
            Step::Apply(c) => {
                let name = c.name_any();
                let changed = self
                    .clusters
                    .get(&name)
                    .is_none_or(|old| old.spec != c.spec);
                self.clusters.insert(name, Arc::new(c.clone()));
                changed
            }
            Step::Delete(c) => self.clusters.remove(&c.name_any()).is_some(),
            Step::Buffered => false,
            Step::Relisted(all) => {
                self.clusters = all;
                self.clusters_synced = true;
                self.publish_synced();
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
        self.publish_synced();
    }

    // ---- readiness --------------------------------------------------------------------

    /// Whether the binding watch has listed everything once (before that, no usage may be
    /// written: a partial sum would under-count).
    pub fn bindings_synced(&self) -> bool {
        self.bindings_synced
    }

    /// The binding watch's list begun at fence generation `generation` is complete (its
    /// `InitDone` applied; `crate::fence`).
    pub fn bindings_listed(&mut self, generation: u64) {
        if self.bindings_synced {
            self.bindings_listed_at = self.bindings_listed_at.max(Some(generation));
        }
    }

    /// Whether a complete binding list begun at fence generation `generation` or later is
    /// applied.
    pub fn bindings_listed_since(&self, generation: u64) -> bool {
        self.bindings_listed_at.is_some_and(|g| g >= generation)
    }

    /// The quota watch listed everything once.
    pub fn quotas_listed(&mut self) {
        self.quotas_synced = true;
        self.publish_synced();
    }

    /// Whether every watch has listed everything once.
    pub fn synced(&self) -> bool {
        self.quotas_synced && self.bindings_synced && self.clusters_synced
    }

    /// [`Index::synced`] as it changes: the watches' own state, for readiness.
    pub fn synced_changes(&self) -> tokio::sync::watch::Receiver<bool> {
        self.synced_tx.subscribe()
    }

    fn publish_synced(&mut self) {
        let now = self.synced();
        self.synced_tx
            .send_if_modified(|v| std::mem::replace(v, now) != now);
    }
}

/// (namespace, uid) of a binding; `None` for an object without them (never from a watch).
fn key(rb: &ResourceBinding) -> Option<(String, String)> {
    Some((rb.metadata.namespace.clone()?, rb.metadata.uid.clone()?))
}

/// Whether `seen` leaves `entry`'s generation unshown by the watch (never seen, or seen
/// at an older generation).
fn unshown(seen: Observation, entry: &Reservation) -> bool {
    match seen {
        Observation::NotSeen => true,
        Observation::Seen(g) => g < entry.generation,
        _ => false,
    }
}

#[cfg(test)]
mod tests;
