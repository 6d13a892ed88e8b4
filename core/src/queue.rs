//! The waiting line (docs/queueing.md, docs/design.md §5b): a quota in `Queue` mode holds a
//! binding that does not fit yet instead of refusing it, and releases it when it fits.
//!
//! ```text
//!  CREATE ── arrival() ──► Admit (charged as usual by the validating webhook)
//!                     └──► Wait: the mutating webhook sets spec.suspension.scheduling
//!                          and our mark (ANNOTATION_QUEUED_AT); the binding is *waiting*:
//!                          charged nothing, never placed (Karmada's scheduler skips it)
//!  controller's leader: plan() over every waiting binding, in line order
//!                     └──► released: UPDATE clearing the suspension and the mark, charged
//!                          by the validating webhook with the usual compare-and-swap
//! ```
//!
//! What *waiting* means is one rule, [`is_waiting`], used by the webhook and the controller:
//! scheduling suspended, our mark present and no cluster chosen yet. A binding suspended
//! by someone else (no mark) is charged as before: we cannot know when its owner resumes
//! it. Whether a waiting binding fits is decided by [`crate::decision`] — the very rule the
//! webhook will apply to its release — so there is no second copy of the arithmetic.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet};

use crate::binding::ResourceBindingSpec;
use crate::decision::{AdmissionRequest, Decision, DenyReason, decide, decide_batch_selected};
use crate::ledger::effective_usage;
use crate::quota::QuotaState;
use crate::resources::ResourceList;
use crate::selection::{Labels, QuotaKey};
use crate::usage::BindingCharge;

/// Our mark on a waiting binding: when it joined the line (RFC 3339, milliseconds),
/// written by the mutating webhook at CREATE. Its presence (with the suspension) makes the
/// binding waiting; its value breaks ties between bindings created in the same second.
pub const ANNOTATION_QUEUED_AT: &str = "quota.karmada.io/queued-at";
/// The quotas a waiting binding did not fit at arrival (comma-separated names; a
/// KarmadaClusterQuota's prefixed `cluster/`), for people; the line itself is recomputed.
pub const ANNOTATION_WAITING_FOR: &str = "quota.karmada.io/waiting-for";
/// The binding's `spec.schedulePriority.priority` when it joined the line, written with
/// [`ANNOTATION_QUEUED_AT`]. The line orders by it ([`line_priority`]): a priority raised
/// while the binding waits does not move it ahead of bindings that waited longer.
pub const ANNOTATION_QUEUED_PRIORITY: &str = "quota.karmada.io/queued-priority";
/// Every annotation of ours on a waiting binding. Only the quota controller (and quota
/// administrators) may change or remove them once the binding waits: the webhook refuses
/// anyone else (`webhook::admission::charge`).
pub const LINE_ANNOTATIONS: [&str; 3] = [
    ANNOTATION_QUEUED_AT,
    ANNOTATION_WAITING_FOR,
    ANNOTATION_QUEUED_PRIORITY,
];

pub use crate::quota::{Admission, AdmissionMode, QueueOrder};

/// The label the controller keeps on every namespace where a binding may have to wait: the
/// namespaces a quota in `Queue` mode covers ([`line_namespaces`]). The chart registers the
/// arrivals review (the mutating webhook) only for namespaces that carry it with
/// [`LABEL_WAITING_LINE_VALUE`], so a binding elsewhere costs the apiserver one review
/// fewer. The controller owns it: it adds it and removes it as quotas change.
pub const LABEL_WAITING_LINE: &str = "quota.karmada.io/waiting-line";
/// The value of [`LABEL_WAITING_LINE`] on a namespace where a line can form.
pub const LABEL_WAITING_LINE_VALUE: &str = "true";

/// The namespaces of `namespaces` (name, labels) that a quota in `Queue` mode covers.
/// A cluster quota's selector is matched against the labels without
/// [`LABEL_WAITING_LINE`]: a selector that names the label cannot select by the
/// controller's own mark, so the result never depends on the last one.
pub fn line_namespaces<'a>(
    quotas: &[QuotaState],
    namespaces: &'a [(String, Labels)],
) -> BTreeSet<&'a str> {
    let queueing: Vec<&QuotaState> = quotas
        .iter()
        .filter(|q| q.spec.policy.admission.mode == AdmissionMode::Queue)
        .collect();
    if queueing.is_empty() {
        return BTreeSet::new();
    }
    namespaces
        .iter()
        .filter(|(name, labels)| {
            let unmarked = (labels.contains_key(LABEL_WAITING_LINE)).then(|| {
                let mut l = labels.clone();
                l.remove(LABEL_WAITING_LINE);
                l
            });
            let labels = unmarked.as_ref().unwrap_or(labels);
            queueing.iter().any(|q| q.covers.covers(name, Some(labels)))
        })
        .map(|(name, _)| name.as_str())
        .collect()
}

/// Whether scheduling of the binding is suspended (by anyone).
pub fn suspended(spec: &ResourceBindingSpec) -> bool {
    spec.suspension.as_ref().and_then(|s| s.scheduling) == Some(true)
}

/// Whether a binding is *waiting* in a quota line: scheduling suspended, our mark present
/// and no cluster chosen. A waiting binding is charged nothing; clearing any of the
/// three (a release, or anyone placing it by hand) makes it charged in full.
pub fn is_waiting(
    annotations: Option<&BTreeMap<String, String>>,
    spec: &ResourceBindingSpec,
) -> bool {
    suspended(spec)
        && spec.clusters.is_empty()
        && annotations.is_some_and(|a| a.contains_key(ANNOTATION_QUEUED_AT))
}

/// The binding's `spec.schedulePriority.priority` (0 when absent).
pub fn priority(spec: &ResourceBindingSpec) -> i32 {
    spec.schedule_priority.as_ref().map_or(0, |p| p.priority)
}

/// The priority a waiting binding holds its place in line with: the one it joined with
/// ([`ANNOTATION_QUEUED_PRIORITY`]), or — for a binding marked before that annotation
/// existed, or whose value does not parse — its `spec.schedulePriority.priority`.
pub fn line_priority(
    annotations: Option<&BTreeMap<String, String>>,
    spec: &ResourceBindingSpec,
) -> i32 {
    annotations
        .and_then(|a| a.get(ANNOTATION_QUEUED_PRIORITY))
        .and_then(|v| v.trim().parse::<i32>().ok())
        .unwrap_or_else(|| priority(spec))
}

/// Milliseconds since the epoch of a `queued-at` value; `None` when it does not parse.
pub fn parse_queued_at(value: &str) -> Option<i64> {
    value
        .parse::<jiff::Timestamp>()
        .ok()
        .map(|t| t.as_millisecond())
}

/// The `queued-at` value for `millis` since the epoch.
pub fn format_queued_at(millis: i64) -> String {
    jiff::Timestamp::from_millisecond(millis)
        .map(|t| format!("{t:.3}"))
        .unwrap_or_default()
}

/// One waiting binding, as the line sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct Waiting {
    /// Binding namespace.
    pub namespace: String,
    /// Binding name.
    pub name: String,
    /// Binding uid.
    pub uid: String,
    /// metadata.generation.
    pub generation: i64,
    /// `spec.schedulePriority.priority`.
    pub priority: i32,
    /// metadata.creationTimestamp, Unix seconds (set by the apiserver).
    pub created: i64,
    /// Our mark, milliseconds (breaks ties within a second); 0 when it does not parse.
    pub queued_at: i64,
    /// What it will cost once released (its full charge).
    pub charge: BindingCharge,
}

impl Waiting {
    /// Line order: higher priority first, then earlier creation, then earlier mark, then
    /// namespace and name.
    pub fn line_cmp(&self, other: &Waiting) -> Ordering {
        let key = |w: &Waiting| (Reverse(w.priority), w.created, w.queued_at);
        key(self)
            .cmp(&key(other))
            .then_with(|| (&self.namespace, &self.name).cmp(&(&other.namespace, &other.name)))
    }

    fn request(&self, now: i64) -> AdmissionRequest<'_> {
        AdmissionRequest {
            namespace: &self.namespace,
            name: &self.name,
            uid: &self.uid,
            generation: self.generation,
            old: None,
            new: &self.charge,
            now,
            reservation_ttl: 0,
            max_reservations: usize::MAX,
        }
    }
}

/// Whether `charge` takes a place in `quota`'s line: the quota's scope matches it and it
/// asks for something the quota limits.
pub fn in_line(quota: &QuotaState, charge: &BindingCharge) -> bool {
    charge.view(&quota.spec.scope).is_some_and(|v| {
        v.entries()
            .iter()
            .any(|(name, q)| !q.is_zero() && quota.spec.hard.contains(name))
    })
}

/// What `charge` asks of `quota` (its scoped usage of the names `hard` limits).
pub fn asks(quota: &QuotaState, charge: &BindingCharge) -> ResourceList {
    let Some(view) = charge.view(&quota.spec.scope) else {
        return ResourceList::new();
    };
    let mut out = ResourceList::new();
    for (name, q) in view.entries() {
        if quota.spec.hard.contains(name) && !q.is_zero() {
            out.insert(name, q);
        }
    }
    out
}

/// What `charge` lacks in `quota` now: per name it asks, `max(0, effective + ask − hard)`
/// (a name without known usage lacks its whole ask).
pub fn short(quota: &QuotaState, charge: &BindingCharge) -> ResourceList {
    let ask = asks(quota, charge);
    let Some(used) = quota.used.as_ref() else {
        return ask;
    };
    let effective = effective_usage(used, &quota.reservations, None);
    let mut out = ResourceList::new();
    for (name, want) in ask.iter() {
        let free = quota
            .spec
            .hard
            .get_or_zero(name)
            .sub_clamped(effective.get_or_zero(name));
        let lack = want.sub_clamped(free);
        if !lack.is_zero() {
            out.insert(name, lack);
        }
    }
    out
}

/// A quota's line as the webhook reads it at a binding's arrival.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineHead {
    /// Bindings waiting in the line.
    pub waiting: usize,
    /// The highest priority among them (the head's).
    pub head_priority: i32,
}

/// What the mutating webhook does with a CREATE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// Admit as usual (the validating webhook charges it).
    Admit,
    /// Suspend it and mark it: it waits in the lines of these quotas (key order).
    Wait(Vec<QuotaKey>),
}

/// Decide a CREATE's arrival against the quotas covering its namespace and the lines the
/// quotas' status shows (`lines`, by key). It waits when a quota in `Queue` mode refuses
/// it for lack of room (`exceeded`, observed over the limit, too many reservations, usage
/// not known yet), or when such a quota has a line that it would jump: in strict order any
/// waiting binding of equal or higher priority, in best-effort order none (a binding that
/// fits may start). Any other refusal (a `Refuse` quota, `must specify`, an uncountable
/// workload) is left to the validating webhook, which refuses it as before.
pub fn arrival(
    quotas: &[QuotaState],
    lines: &BTreeMap<QuotaKey, LineHead>,
    binding: &Waiting,
    now: i64,
) -> Arrival {
    let queueing: Vec<&QuotaState> = quotas
        .iter()
        .filter(|q| {
            q.spec.policy.admission.mode == AdmissionMode::Queue && in_line(q, &binding.charge)
        })
        .collect();
    if queueing.is_empty() {
        return Arrival::Admit;
    }
    // A quota that refuses rather than queues, and that it does not fit: refused as before.
    if quotas.iter().any(|q| {
        q.spec.policy.admission.mode == AdmissionMode::Refuse
            && in_line(q, &binding.charge)
            && !short(q, &binding.charge).is_empty()
    }) {
        return Arrival::Admit;
    }
    let mut waits = jumped_lines(quotas, lines, binding);
    if let Decision::Deny(d) = decide(quotas, &binding.request(now))
        && waits_for_room(d.reason)
    {
        let refusing = quotas
            .iter()
            .find(|q| q.name == d.quota && q.covers.is_cluster() == d.cluster);
        match refusing {
            Some(q) if q.spec.policy.admission.mode == AdmissionMode::Queue => {
                // It waits for every queueing quota it does not fit now.
                waits.extend(
                    queueing
                        .iter()
                        .filter(|q| !short(q, &binding.charge).is_empty() || q.name == d.quota)
                        .map(|q| q.key()),
                );
            }
            // Refused by a quota that does not queue: refused as before.
            _ => return Arrival::Admit,
        }
    }
    if waits.is_empty() {
        Arrival::Admit
    } else {
        Arrival::Wait(waits.into_iter().collect())
    }
}

/// The lines `binding` would jump if it started now: those of the quotas in `Queue` mode
/// and strict order that it takes a place in ([`in_line`]) where a binding of equal or
/// higher priority waits (`lines`, by key). [`arrival`] makes it wait behind them; the
/// validating webhook refuses a CREATE that jumps one without having waited (the arrivals
/// review did not see it).
pub fn jumped_lines(
    quotas: &[QuotaState],
    lines: &BTreeMap<QuotaKey, LineHead>,
    binding: &Waiting,
) -> BTreeSet<QuotaKey> {
    quotas
        .iter()
        .filter(|q| {
            q.spec.policy.admission.mode == AdmissionMode::Queue
                && q.spec.policy.admission.order == QueueOrder::StrictFifo
                && in_line(q, &binding.charge)
                && lines
                    .get(&q.key())
                    .is_some_and(|l| l.waiting > 0 && l.head_priority >= binding.priority)
        })
        .map(QuotaState::key)
        .collect()
}

/// Refusals that room can end (a binding waits through them); the others never pass.
fn waits_for_room(reason: DenyReason) -> bool {
    matches!(
        reason,
        DenyReason::QuotaExceeded
            | DenyReason::ObservedOverLimit
            | DenyReason::TooManyReservations
            | DenyReason::StatusUnknown
    )
}

/// One binding's place in one quota's line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// Index into the `waiting` slice given to [`plan`].
    pub binding: usize,
    /// 1-based position in this quota's line.
    pub position: usize,
    /// What it asks of this quota.
    pub asks: ResourceList,
    /// What it lacks in this quota now (empty: it fits here).
    pub short: ResourceList,
    /// Why it cannot be released at all (a refusal no room ends: `must specify`, …).
    pub stuck: Option<String>,
}

/// The release plan: who goes now, and every line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Indexes into `waiting` of the bindings to release now, in line order.
    pub released: Vec<usize>,
    /// Each quota's line (released bindings excluded), in order.
    pub lines: BTreeMap<QuotaKey, Vec<Place>>,
}

/// Plan the releases: every waiting binding in line order ([`Waiting::line_cmp`]), each
/// decided by [`crate::decision`] against every quota covering its namespace, as if it
/// were a CREATE; a binding that fits is released and its charge taken from the quotas
/// before the next is decided. One that does not fit keeps its place; in a quota whose
/// order is `StrictFifo` nothing behind it may then start. A refusal no room can end (a
/// quota now requiring a request the binding lacks) neither releases nor blocks.
/// `labels` gives a namespace's labels (for the cluster quotas' selectors).
pub fn plan<'l>(
    quotas: &[QuotaState],
    waiting: &[Waiting],
    labels: impl Fn(&str) -> Option<&'l Labels>,
    now: i64,
) -> Plan {
    let mut states = quotas.to_vec();
    let mut order: Vec<usize> = (0..waiting.len()).collect();
    order.sort_by(|a, b| waiting[*a].line_cmp(&waiting[*b]));
    let mut blocked: BTreeSet<QuotaKey> = BTreeSet::new();
    let mut out = Plan::default();
    for i in order {
        let w = &waiting[i];
        let lines: Vec<usize> = (0..states.len())
            .filter(|q| stands_in(&states[*q], w, &labels))
            .collect();
        let held = lines.iter().any(|q| blocked.contains(&states[*q].key()));
        let mut stuck = None;
        if !held {
            let decision = decide_batch_selected(&mut states, &[w.request(now)], &labels);
            match decision.into_iter().next() {
                Some(Decision::Allow(_)) => {
                    out.released.push(i);
                    continue;
                }
                Some(Decision::Deny(d)) if waits_for_room(d.reason) => {
                    for q in &lines {
                        let s = &states[*q];
                        if s.spec.policy.admission.order == QueueOrder::StrictFifo {
                            blocked.insert(s.key());
                        }
                    }
                }
                Some(Decision::Deny(d)) => stuck = Some(d.message),
                None => {}
            }
        }
        for q in lines {
            let s = &states[q];
            let line = out.lines.entry(s.key()).or_default();
            line.push(Place {
                binding: i,
                position: line.len() + 1,
                asks: asks(s, &w.charge),
                short: short(s, &w.charge),
                stuck: stuck.clone(),
            });
        }
    }
    out
}

/// The `StrictFifo` quotas whose line `w` stands in. When the release of `w` planned by
/// [`plan`] does not go through (another admission took the room first), nothing planned
/// after it in these lines may start in that round: it would pass a head that no longer
/// fits. The caller plans again.
pub fn strict_lines<'l>(
    quotas: &[QuotaState],
    w: &Waiting,
    labels: impl Fn(&str) -> Option<&'l Labels>,
) -> BTreeSet<QuotaKey> {
    quotas
        .iter()
        .filter(|s| s.spec.policy.admission.order == QueueOrder::StrictFifo)
        .filter(|s| stands_in(s, w, &labels))
        .map(QuotaState::key)
        .collect()
}

/// Whether `w` stands in `quota`'s line: the quota covers its namespace and limits
/// something it asks ([`in_line`]). The one rule [`plan`] and [`strict_lines`] share.
fn stands_in<'l>(
    quota: &QuotaState,
    w: &Waiting,
    labels: &impl Fn(&str) -> Option<&'l Labels>,
) -> bool {
    quota.covers.covers(&w.namespace, labels(&w.namespace)) && in_line(quota, &w.charge)
}

#[cfg(test)]
mod tests;
