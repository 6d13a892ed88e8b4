//! What a quota's status should be: pure functions, no client.
//!
//! ```text
//!  KarmadaQuota ─┐
//!  Index ────────┼─► compute ─► Computed::{Valid{view}, Invalid{errors}}
//!  member pods ──┘                    │
//!  member reach ──────────────────────┴─► desired_status ─► Some(new status) | None (unchanged)
//!  batch entries above the stored                  └─► notices (events), next_requeue
//!  foldedThrough (unfolded, batches mode) ─► compute_with: entries upserted, foldedThrough
//! ```
//!
//! All arithmetic is core's (`core::status::compute`, and `core::top` for the bindings
//! that use the most, listed in the report); this module only maps the view onto
//! the API status and keeps conditions' `lastTransitionTime` stable.

mod conditions;
pub mod fold;
mod notices;
pub mod unfolded;

use std::collections::BTreeMap;
use std::time::Duration;

use karmada_quota_core::complete::{self, CONDITION_USAGE_COMPLETE, Incomplete};
use karmada_quota_core::quota::{FieldError, QuotaState};
use karmada_quota_core::status::{self as core_status, ObservedPods, QuotaView};
use karmada_quota_core::top;
use karmada_quota_crds::convert::{
    list_to_api, parse_status, reservation_to_api, stored_list_from_api, summary, validate_spec,
};
use karmada_quota_crds::quota::{
    CONDITION_DRIFT, CONDITION_MEMBERS_REACHABLE, CONDITION_READY, ClusterUsage, Reservation,
};
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaStatus, QuotaObject};
use kube::ResourceExt;

use crate::index::Index;
use crate::index::reads::READ_AGAIN;
use crate::members::Reach;
pub use conditions::unreachable_members;
use conditions::{drift_condition, has_condition, members_condition, plural, set_condition};
pub use notices::{
    EVENT_DRIFT_DETECTED, EVENT_DRIFT_RESOLVED, EVENT_INVALID_SPEC, EVENT_MEMBER_UNREACHABLE,
    EVENT_MEMBERS_REACHABLE, EVENT_USAGE_COMPLETE, EVENT_USAGE_INCOMPLETE, Notice, notices,
};
pub use unfolded::Unfolded;

/// Ready=True: usage was computed.
pub const REASON_SYNCED: &str = "Synced";
/// Ready=False: the spec does not validate; nothing else is computed.
pub const REASON_INVALID_SPEC: &str = "InvalidSpec";
/// Drift=True: a member runs more than Karmada placed there.
pub const REASON_OBSERVED_ABOVE_PLACED: &str = "ObservedAbovePlaced";
/// Drift=False: every measured member runs at most what was placed.
pub const REASON_NO_DRIFT: &str = "NoDrift";
/// Drift=Unknown: no member cluster is measured (none configured or none reachable).
pub const REASON_NOT_MEASURED: &str = "NotMeasured";
/// MembersReachable=True.
pub const REASON_REACHABLE: &str = "Reachable";
/// MembersReachable=True, and at least one member is reached without TLS verification
/// (allowed by `--allow-insecure-members`; the message names them).
pub const REASON_REACHABLE_UNVERIFIED: &str = "ReachableUnverified";
/// MembersReachable=False: at least one member cannot be read.
pub const REASON_UNREACHABLE: &str = "Unreachable";
/// MembersReachable=Unknown: no member cluster to measure.
pub const REASON_NO_MEMBERS: &str = "NoMembers";

/// The outcome of computing one quota.
#[derive(Clone, Debug, PartialEq)]
pub enum Computed {
    /// The spec validated; core's view, plus status entries that did not parse (kept
    /// verbatim until they expire: status is written only by this project, so one is a bug
    /// or a hand edit, and dropping it could under-count).
    Valid {
        /// What core computed.
        view: Box<QuotaView>,
        /// Unparseable, unexpired reservations.
        unparsed: Vec<Reservation>,
        /// Names whose usage could not be computed (their `used` is the last known
        /// value, never lowered): name → why.
        incomplete: Incomplete,
        /// The newest reservation batch this computation accounts for (its entries, and
        /// those of every held batch below it naming the quota, went into the prune):
        /// the `status.foldedThrough` to record. `None`: no batch above the stored one
        /// names the quota, and foldedThrough stays.
        folded_through: Option<u64>,
    },
    /// The spec does not validate.
    Invalid(Vec<FieldError>),
}

impl Computed {
    /// With `on` (a replica that folds batches): the view's entries hold the
    /// reservation-store fence covering `hard` (core's `fence::ensure`; docs/reservations.md
    /// R22), so a 0.2.0 status-store webhook admits nothing more against the quota and
    /// this version's webhooks may.
    #[must_use]
    pub fn fenced(mut self, on: bool) -> Self {
        if let (true, Computed::Valid { view, .. }) = (on, &mut self) {
            let hard = view.hard.clone();
            karmada_quota_core::fence::ensure(&mut view.reservations, &hard);
        }
        self
    }
}

/// Compute one quota from the index and the members' pods, at `now` (Unix seconds).
pub fn compute(
    quota: &KarmadaQuota,
    index: &Index,
    observed_pods: &ObservedPods,
    now: i64,
) -> Computed {
    compute_with(quota, index, observed_pods, now, None)
}

/// [`compute`], with the batch entries its stored status does not account for yet
/// ([`Unfolded`]).
pub fn compute_with(
    quota: &KarmadaQuota,
    index: &Index,
    observed_pods: &ObservedPods,
    now: i64,
    unfolded: Option<&Unfolded>,
) -> Computed {
    let spec = match validate_spec(&quota.spec) {
        Ok(s) => s,
        Err(errors) => return Computed::Invalid(errors),
    };
    let ns = quota.namespace().unwrap_or_default();
    compute_over(
        quota,
        spec,
        std::slice::from_ref(&ns),
        index,
        observed_pods,
        now,
        unfolded,
    )
}

/// Compute a quota object of either kind whose spec validated as `spec`, charged with the
/// bindings of `namespaces` (a KarmadaQuota: its own; a KarmadaClusterQuota: those it
/// selects), from the KarmadaQuota-shaped part of its status. `observed_pods` are those of the same
/// namespaces. A reservation entry is looked up in the namespace it names, else in the
/// first of `namespaces` (a KarmadaQuota's entries name none). `unfolded`: the batch
/// entries the stored status does not account for, upserted into its entries before the
/// prune (their newest batch is then the `foldedThrough` to record).
pub fn compute_over<K: QuotaObject>(
    quota: &K,
    spec: karmada_quota_core::quota::QuotaSpec,
    namespaces: &[String],
    index: &Index,
    observed_pods: &ObservedPods,
    now: i64,
    unfolded: Option<&Unfolded>,
) -> Computed {
    let ns = quota.namespace().unwrap_or_default();
    let own = namespaces.first().map_or("", String::as_str);
    // One parse for both binaries; `used` is recomputed here (the last written one is read
    // only for names whose usage is incomplete), so only the entries matter.
    let stored = parse_status(quota.quota_status());
    let unparsed: Vec<Reservation> = stored
        .unparsed
        .into_iter()
        .filter(|r| r.expiration_time.0.as_second() > now)
        .collect();
    if !unparsed.is_empty() {
        tracing::warn!(quota = %format!("{ns}/{}", quota.name_any()), errors = ?stored.errors, "keeping unparseable reservations until they expire");
    }
    let reservations = match unfolded {
        Some(u) => u.merged_into(stored.reservations, now),
        None => stored.reservations,
    };
    let mut spec = spec;
    spec.policy
        .unaccounted
        .get_or_insert(index.unaccounted_default);
    let state = QuotaState {
        clusters: Vec::new(),
        name: quota.name_any(),
        covers: Default::default(),
        spec,
        used: None,
        reservations,
    };
    let incomplete = complete::incomplete_names(
        &state.spec,
        namespaces.iter().flat_map(|n| index.gaps_in(n)),
    );
    // Each distinct charge once, with the number of bindings that cost it: a fold costs
    // O(distinct charges), not O(bindings) (the same view, see core's `compute_counted`).
    let mut view = core_status::compute_counted(
        &ns,
        &state,
        namespaces.iter().flat_map(|n| index.tally_in(n)),
        |entry| index.observation_of(entry.reserved_by.namespace_or(own), entry, now),
        observed_pods,
        now,
    );
    view.top_bindings = top_bindings(&state.spec, &ns, index);
    if !incomplete.is_empty() {
        let last_known = quota
            .quota_status()
            .and_then(|s| stored_list_from_api(&s.used, "status.used").ok());
        complete::hold_view(&mut view, last_known.as_ref(), &incomplete);
    }
    Computed::Valid {
        view: Box::new(view),
        unparsed,
        incomplete,
        folded_through: unfolded.map(|u| u.through),
    }
}

/// The bindings of `ns` that use the most of `spec` (core's `top::top_bindings`), ranked
/// among the first names of the charges core names candidates only: bindings that share a
/// charge share a share, so names decide among them and no more than the first
/// `TOP_BINDINGS` of each can be listed. The same list as ranking every binding, in
/// O(candidate charges × `TOP_BINDINGS`).
fn top_bindings(
    spec: &karmada_quota_core::quota::QuotaSpec,
    ns: &str,
    index: &Index,
) -> Vec<top::BindingUsage> {
    let Some(tally) = index.tally_of(ns) else {
        return Vec::new();
    };
    let candidates = top::candidates(&spec.hard, &spec.scope, tally.iter(), top::TOP_BINDINGS);
    top::top_bindings(
        &spec.hard,
        &spec.scope,
        candidates.into_iter().flat_map(|charge| {
            tally
                .first_names(charge, top::TOP_BINDINGS)
                .map(move |name| (name, charge))
        }),
        top::TOP_BINDINGS,
    )
}

/// The KarmadaQuota-shaped part of the status a quota of either kind should have, or
/// `None` when its current status already says it.
pub fn desired_status<K: QuotaObject>(
    quota: &K,
    computed: &Computed,
    reach: &BTreeMap<String, Reach>,
    now: jiff::Timestamp,
) -> Option<KarmadaQuotaStatus> {
    let current = quota.quota_status().cloned().unwrap_or_default();
    let at = Stamp {
        generation: quota.meta().generation,
        now,
    };
    let mut next = current.clone();
    match computed {
        Computed::Invalid(errors) => {
            let message = format!(
                "invalid spec: {}",
                errors
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            at.set(
                &mut next,
                CONDITION_READY,
                ("False", REASON_INVALID_SPEC, &message),
            );
        }
        Computed::Valid {
            view,
            unparsed,
            incomplete,
            folded_through,
        } => {
            set_usage(&mut next, view, unparsed, *folded_through);
            set_conditions(&mut next, view, incomplete, reach, at);
        }
    }
    next.observed_generation = at.generation;
    (next != current).then_some(next)
}

/// The quota's generation and the time a status is planned at: what each condition set
/// by the plan carries.
#[derive(Clone, Copy)]
struct Stamp {
    generation: Option<i64>,
    now: jiff::Timestamp,
}

impl Stamp {
    /// Set condition `kind` of `next` to (status, reason, message).
    fn set(
        self,
        next: &mut KarmadaQuotaStatus,
        kind: &str,
        (status, reason, message): (&str, &str, &str),
    ) {
        set_condition(
            &mut next.conditions,
            kind,
            status,
            reason,
            message,
            self.generation,
            self.now,
        );
    }
}

/// `hard`, `used`, the clusters, the entries (the unparsed ones kept verbatim), the fold
/// (never lowered) and the summary of a valid computation.
fn set_usage(
    next: &mut KarmadaQuotaStatus,
    view: &QuotaView,
    unparsed: &[Reservation],
    folded_through: Option<u64>,
) {
    next.hard = list_to_api(&view.hard);
    next.used = list_to_api(&view.used);
    next.clusters = view
        .clusters
        .iter()
        .map(|c| ClusterUsage {
            name: c.name.clone(),
            used: list_to_api(&c.used),
            observed: c.observed.as_ref().map(list_to_api),
            draining: c.draining.as_ref().map(list_to_api),
            draining_unknown: c.draining_unknown,
        })
        .collect();
    next.reservations = view.reservations.iter().map(reservation_to_api).collect();
    next.reservations.extend(unparsed.iter().cloned());
    // Never lowered: a batch at or below the stored value may be deleted already.
    next.folded_through = next.folded_through.max(folded_through);
    next.summary = Some(summary(&view.hard, Some(&view.used)));
}

/// Ready, UsageComplete, Drift and MembersReachable of a valid computation.
fn set_conditions(
    next: &mut KarmadaQuotaStatus,
    view: &QuotaView,
    incomplete: &Incomplete,
    reach: &BTreeMap<String, Reach>,
    at: Stamp,
) {
    let ready = format!(
        "usage computed from {} in {}",
        plural(view.bindings, "binding"),
        plural(view.clusters.len(), "cluster")
    );
    at.set(next, CONDITION_READY, ("True", REASON_SYNCED, &ready));
    let (status, reason, message) = complete::usage_condition(incomplete);
    at.set(next, CONDITION_USAGE_COMPLETE, (status, reason, &message));
    // While a member is still connecting (first list in flight), Drift and
    // MembersReachable are not lowered from what they say: a restart or a re-added
    // member must not flap them (and emit events) for the second it takes to list.
    let connecting = reach.values().any(|r| *r == Reach::Connecting);
    let (status, reason, message) = drift_condition(view);
    if !(connecting && status != "True" && has_condition(&next.conditions, CONDITION_DRIFT)) {
        at.set(next, CONDITION_DRIFT, (status, reason, &message));
    }
    let (status, reason, message) = members_condition(reach);
    if !(connecting
        && status != "False"
        && has_condition(&next.conditions, CONDITION_MEMBERS_REACHABLE))
    {
        at.set(
            next,
            CONDITION_MEMBERS_REACHABLE,
            (status, reason, &message),
        );
    }
}

/// When to reconcile again without an event: one second after the earliest reservation
/// expires (so its binding is read and the entry pruned promptly), [`READ_AGAIN`] while
/// an entry kept past its expiry waits for a read, else after the resync period.
pub fn next_requeue(computed: &Computed, now: i64, resync: Duration) -> Duration {
    let Computed::Valid { view, unparsed, .. } = computed else {
        return resync;
    };
    let earliest = view
        .reservations
        .iter()
        .map(|r| r.expiration_time)
        .chain(unparsed.iter().map(|r| r.expiration_time.0.as_second()))
        .min();
    match earliest {
        // An entry kept past its expiry waits for a read of its binding (R19): the
        // leader reads again after `READ_AGAIN`.
        Some(t) if t <= now => Duration::from_secs(READ_AGAIN.unsigned_abs()).min(resync),
        Some(t) => {
            let secs = u64::try_from(t - now).unwrap_or(0) + 1;
            Duration::from_secs(secs).min(resync)
        }
        None => resync,
    }
}

#[cfg(test)]
mod batch_tests;
#[cfg(test)]
mod fold_tests;
#[cfg(test)]
mod tests;
