//! Reservation batches in the controller (docs/design.md §6
//! "Reservation batches (controller)"): the batches it holds, fed by its watch of
//! `--reservation-namespace`, and the sweep that deletes the folded ones.
//!
//! ```text
//!  watch KarmadaQuotaReservation ─► Batches::apply ─► BatchView (status::batches)
//!    (--reservation-namespace,        │ a batch that does not parse: logged by name,
//!     from the watch cache)           │ counted by nothing, never deleted
//!                                     └─► Triggers::quotas (every quota it names)
//!  reconcile(Q) ─► Batches::unfolded(Q, Q's stored foldedThrough) ─► desired::compute_with
//!  leader, every second ─► sweep: deletable(fold from the quota stores) ─► delete
//!                          (8 at a time; NotFound is done; errors: backoff) ─► remove
//!                        ─► seed: no live batch ≥ the greatest fold (or the newest seen)
//!                           ─► create that number, empty (409 is done)
//! ```
//!
//! Modules: [`watch`] (the watch), [`folds`] (each quota's fold as the sweep reads it),
//! [`sweep`] (the deletions), [`seed`] (the newest number re-seeded), [`metrics`].

pub mod folds;
pub mod metrics;
pub mod seed;
pub mod sweep;
pub mod watch;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use karmada_quota_core::selection::QuotaKey;
use karmada_quota_crds::KarmadaQuotaReservation;
use karmada_quota_crds::reservation_batch::{
    LAST_SEQUENCE, ParsedBatch, batch_sequence, parse_batch,
};
use karmada_quota_status::BatchView;
use karmada_quota_status::batches::Fold;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use parking_lot::RwLock;

use crate::desired::Unfolded;
use metrics::BatchMetrics;

/// The webhook's default `--reservation-ttl`, in seconds: the controller's default too.
pub const DEFAULT_RESERVATION_TTL_SECS: i64 = 60;

/// The batches this controller holds (shared by the watch, the reconciles and the sweep).
pub struct Batches {
    inner: RwLock<Inner>,
    metrics: Arc<BatchMetrics>,
    /// `--reservation-ttl` in seconds: the latest a folded entry may expire after its fold.
    ttl_secs: i64,
}

#[derive(Default)]
struct Inner {
    view: BatchView,
    /// Batches that do not parse: name → why (never counted, never deleted).
    unparsed: BTreeMap<String, String>,
    /// The watch has listed once (before that, nothing is deletable).
    listed: bool,
    /// A re-list in progress, swapped in at its end.
    relist: Option<(BatchView, BTreeMap<String, String>)>,
}

impl Batches {
    /// None held yet.
    pub fn new(metrics: Arc<BatchMetrics>) -> Self {
        Self {
            inner: RwLock::default(),
            metrics,
            ttl_secs: DEFAULT_RESERVATION_TTL_SECS,
        }
    }

    /// With `--reservation-ttl` = `ttl`: a folded entry expires at the fold's now + `ttl`
    /// at the latest ([`Unfolded::merged_into`]).
    #[must_use]
    pub fn with_reservation_ttl(mut self, ttl: std::time::Duration) -> Self {
        self.ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX);
        self
    }

    /// Fold one watch event; returns the quotas to reconcile (those a new batch names;
    /// after a re-list, those every held batch names).
    pub fn apply(&self, ev: &Event<DynamicObject>) -> BTreeSet<QuotaKey> {
        let mut out = BTreeSet::new();
        let mut inner = self.inner.write();
        let inner = &mut *inner;
        match ev {
            Event::Init => inner.relist = Some(Default::default()),
            Event::InitApply(obj) => {
                let (view, unparsed) = inner.relist.get_or_insert_with(Default::default);
                match parse(obj) {
                    Ok(batch) => view.insert(&batch),
                    Err((name, why)) => {
                        if !inner.unparsed.contains_key(&name) {
                            log_unparsed(&name, &why);
                        }
                        unparsed.insert(name, why);
                    }
                }
            }
            Event::InitDone => {
                let (mut view, unparsed) = inner.relist.take().unwrap_or_default();
                // The newest number ever seen stays taken (never deleted, never reused),
                // even if a hand took its batch away.
                if let Some(newest) = inner.view.newest()
                    && !view.holds(newest)
                {
                    view.remove(newest);
                }
                for s in view.live().collect::<Vec<_>>() {
                    out.extend(view.quotas_of(s).cloned());
                }
                inner.view = view;
                inner.unparsed = unparsed;
                inner.listed = true;
            }
            Event::Apply(obj) => match parse(obj) {
                Ok(batch) => {
                    inner.unparsed.remove(&name_of(obj));
                    inner.view.insert(&batch);
                    out.extend(batch.entries.iter().map(|(k, _)| k.clone()));
                }
                Err((name, why)) => {
                    if inner.unparsed.get(&name) != Some(&why) {
                        log_unparsed(&name, &why);
                    }
                    inner.unparsed.insert(name, why);
                }
            },
            Event::Delete(obj) => {
                let name = name_of(obj);
                inner.unparsed.remove(&name);
                if let Some(s) = batch_sequence(&name) {
                    inner.view.remove(s);
                }
            }
        }
        self.metrics
            .set_held(inner.view.len(), inner.unparsed.len());
        out
    }

    /// The entries of `key` above `folded` (its stored `status.foldedThrough`) and the
    /// newest batch naming it; `None` when no held batch above it names the quota.
    pub fn unfolded(&self, key: &QuotaKey, folded: Option<u64>) -> Option<Unfolded> {
        Unfolded::of(&self.inner.read().view, key, folded, self.ttl_secs)
    }

    /// The batches the sweep may delete at `now`, each with the uid this view holds it
    /// by (the delete's precondition: a number freed by a delete can be taken again, by a
    /// batch this view has not seen): none before the first list; else
    /// `BatchView::deletable` (every quota named folded it — or, for a quota `fold` says
    /// is gone, its entries expired — and not the newest number seen), and never the
    /// newest live batch either. A batch that does not parse is not held: never deletable.
    pub fn deletable(
        &self,
        fold: impl Fn(&QuotaKey) -> Fold,
        now: i64,
    ) -> Vec<(u64, Option<String>)> {
        let inner = self.inner.read();
        if !inner.listed {
            return Vec::new();
        }
        let newest_live = inner.view.live().last();
        let mut out = inner.view.deletable(fold, now);
        out.retain(|s| Some(*s) != newest_live);
        out.into_iter()
            .map(|s| (s, inner.view.uid_of(s).map(str::to_owned)))
            .collect()
    }

    /// The number the store lacks (docs/reservations.md R20): the greater of
    /// `greatest_fold` (the greatest `status.foldedThrough` of the quotas this controller
    /// holds) and the newest number it has seen — unless that is [`LAST_SEQUENCE`], which
    /// only a hand makes and which leaves no number after it — when no live batch, nor one
    /// that does not parse, is numbered at or above it. `None` before the first list.
    pub fn missing_newest(&self, greatest_fold: Option<u64>) -> Option<u64> {
        let inner = self.inner.read();
        if !inner.listed {
            return None;
        }
        let seen = inner.view.newest().filter(|n| *n < LAST_SEQUENCE);
        let want = greatest_fold
            .max(seen)
            .filter(|n| (1..=LAST_SEQUENCE).contains(n))?;
        let held = inner.view.live().any(|s| s >= want)
            || inner
                .unparsed
                .keys()
                .filter_map(|name| batch_sequence(name))
                .any(|s| s >= want);
        (!held).then_some(want)
    }

    /// Batch `sequence` of uid `uid` was deleted, or found gone: forget it — unless the
    /// view holds another batch of that number by now (its watch brought the later one
    /// while the delete was under way). `uid` `None`: whichever is held.
    pub fn removed_if(&self, sequence: u64, uid: Option<&str>) {
        let mut inner = self.inner.write();
        if uid.is_none() || inner.view.uid_of(sequence) == uid {
            inner.view.remove(sequence);
        }
        self.metrics
            .set_held(inner.view.len(), inner.unparsed.len());
    }

    /// Batches held (live), in order.
    pub fn live(&self) -> Vec<u64> {
        self.inner.read().view.live().collect()
    }

    /// The names of the batches that do not parse.
    pub fn unparsed(&self) -> Vec<String> {
        self.inner.read().unparsed.keys().cloned().collect()
    }

    /// The metrics.
    pub fn metrics(&self) -> &BatchMetrics {
        &self.metrics
    }
}

fn name_of(obj: &DynamicObject) -> String {
    obj.metadata.name.clone().unwrap_or_default()
}

fn log_unparsed(name: &str, why: &str) {
    tracing::warn!(
        batch = name,
        error = why,
        "reservation batch does not parse: counted by nothing and never deleted (a hand edit or a bug: delete it by hand once understood)"
    );
}

/// A watched object as a batch, or its name and why not. Read as a dynamic object so
/// that one malformed spec cannot stall the watch (a typed list would fail whole).
pub fn parse(obj: &DynamicObject) -> Result<ParsedBatch, (String, String)> {
    let name = name_of(obj);
    let spec = obj.data.get("spec").cloned().unwrap_or_default();
    let spec = serde_json::from_value(spec)
        .map_err(|e| (name.clone(), format!("spec does not decode: {e}")))?;
    let batch = KarmadaQuotaReservation {
        metadata: obj.metadata.clone(),
        spec,
    };
    parse_batch(&batch).map_err(|e| (name, e.to_string()))
}

#[cfg(test)]
mod tests;
