//! The admission decision (docs/design.md §5): one place a reviewer reads the rule.
//!
//! [`decide`] is the rule; [`decide_batch`] applies it to the concurrent requests of one
//! namespace in order, so that later requests see the entries earlier ones were given;
//! [`decide_batch_selected`] does the same for requests of several namespaces against the
//! union of their quota objects, each request against those that cover its namespace
//! (its KarmadaQuotas and the KarmadaClusterQuotas selecting it, [`crate::selection`]).

use crate::ledger::{counts, upsert};
use crate::quantity::Quantity;
use crate::quota::{ObservedLimit, QuotaState, Reservation, ReservedBy, Unaccounted};
use crate::resources::{PODS, ResourceList, is_object_count};
use crate::selection::{Labels, QuotaKey};
use crate::usage::{BINDING_API_VERSION, BINDING_KIND, BindingCharge, MUST_SPECIFY};

/// HTTP code of a policy denial (`exceeded quota`, `must specify`).
pub const CODE_FORBIDDEN: u16 = 403;
/// HTTP code of a denial the client should retry later (status not synced yet, too many
/// pending reservations).
pub const CODE_RETRY: u16 = 429;

/// What the webhook knows about one ResourceBinding CREATE/UPDATE.
#[derive(Clone, Debug)]
pub struct AdmissionRequest<'a> {
    /// Binding namespace (for messages).
    pub namespace: &'a str,
    /// Binding name.
    pub name: &'a str,
    /// metadata.uid (set on CREATE too).
    pub uid: &'a str,
    /// metadata.generation of the new object.
    pub generation: i64,
    /// The stored object's charge on UPDATE; `None` on CREATE.
    pub old: Option<&'a BindingCharge>,
    /// The new object's charge.
    pub new: &'a BindingCharge,
    /// Now, Unix seconds (for expirationTime and for ignoring lapsed entries).
    pub now: i64,
    /// Lifetime of a reservation entry, seconds.
    pub reservation_ttl: i64,
    /// A quota holding this many entries refuses new ones (retryable).
    pub max_reservations: usize,
}

/// Why a request is denied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DenyReason {
    /// `exceeded quota: …` (HTTP 403, reason QuotaExceeded).
    QuotaExceeded,
    /// `status unknown for quota: …` (retryable; the controller has not synced it).
    StatusUnknown,
    /// `must specify cpu for ResourceBinding ns/name`.
    MustSpecify,
    /// The quota holds `max_reservations` pending entries (retryable).
    TooManyReservations,
    /// The members already run more than `hard` of a resource the request increases
    /// (`spec.observedLimit: Enforce`).
    ObservedOverLimit,
    /// A workload whose pods nothing counts, under a quota that tracks compute
    /// (`spec.unaccountedWorkloads: Deny`).
    Unaccounted,
}

/// A denial with Kubernetes-style status fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// Which rule refused it.
    pub reason: DenyReason,
    /// The quota that refused it (metadata.name).
    pub quota: String,
    /// Whether that quota is a KarmadaClusterQuota (else a KarmadaQuota of the binding's
    /// namespace).
    pub cluster: bool,
    /// HTTP code for the AdmissionResponse status (403 quota, 429 retryable, …).
    pub code: u16,
    /// The exact message of docs/design.md §5.
    pub message: String,
}

/// The outcome for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admit; write these entries (quota object, entry), in [`QuotaKey`] order (the
    /// namespace's quotas by name, then cluster quotas by name), only for quotas with a
    /// non-zero delta. Empty = nothing to write.
    Allow(Vec<(QuotaKey, Reservation)>),
    /// Refuse.
    Deny(Denial),
}

impl DenyReason {
    /// The Kubernetes-style `status.reason` string for the AdmissionResponse.
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::QuotaExceeded => "QuotaExceeded",
            DenyReason::StatusUnknown => "QuotaStatusUnknown",
            DenyReason::MustSpecify => "MustSpecifyRequests",
            DenyReason::TooManyReservations => "TooManyReservations",
            DenyReason::ObservedOverLimit => "ObservedOverLimit",
            DenyReason::Unaccounted => "UnaccountedWorkload",
        }
    }
}

impl Decision {
    /// Whether the request is admitted.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }
}

fn deny(reason: DenyReason, code: u16, quota: &QuotaState, message: String) -> Decision {
    Decision::Deny(Denial {
        reason,
        quota: quota.name.clone(),
        cluster: quota.covers.is_cluster(),
        code,
        message,
    })
}

/// Decide one ResourceBinding CREATE/UPDATE against the namespace's quotas.
///
/// The rule (docs/design.md §5), in order:
///
/// 1. Identical old and new charge → allow, write nothing.
/// 2. Quotas are taken in [`QuotaKey`] order: the namespace's KarmadaQuotas by name, then
///    the KarmadaClusterQuotas covering it by name. (`quotas` are those that cover the
///    binding's namespace; [`decide_batch_selected`] selects them.) A quota *applies* when its scope matches the new
///    binding (per component) and its `hard` shares a name with that scoped usage — or
///    tracks cpu/memory/ephemeral-storage that a matching workload part does not request.
///    No applicable quota → allow.
/// 3. Per applicable quota, `delta` = per hard name, `max(0, scoped_new − scoped_old)`; a
///    quota the old object did not match is charged the full new usage.
/// 4. `must specify`: a matching workload part that lacks cpu (memory, ephemeral-storage)
///    while the quota tracks `cpu`/`requests.cpu` (…) is refused on CREATE, and on an UPDATE
///    whose delta is non-zero or whose scoped replicas (`pods`) grow — whether or not the
///    quota tracks `pods`. (Design §3 says "any UPDATE that changes replicas, placement
///    or requests"; a change that charges nothing — a scale-down, a re-placement — is let
///    through, as step 3 promises that scale-downs and unrelated edits are always allowed.)
/// 5. Only names the delta increases are checked. A name missing from `status.used` →
///    `status unknown for quota` (retryable). Otherwise
///    `used + Σ live reservations (except this request's own (uid, generation)) + delta`
///    must stay ≤ hard, else `exceeded quota: …` (`exceeded cluster quota: …` for a
///    KarmadaClusterQuota) listing only the exceeded names, with `used` = used + Σ
///    reservations.
/// 6. A quota with a non-zero delta already holding `max_reservations` live entries (not
///    counting the one this request would replace) refuses, retryably.
/// 7. The first quota that refuses decides the message. Otherwise allow, with one entry
///    `{reservedBy, generation, reserved = delta (non-zero names), expirationTime = now + ttl}`
///    per quota whose delta is non-zero, in key order. A cluster quota's entry names the
///    binding's namespace too (`reservedBy.namespace`).
pub fn decide(quotas: &[QuotaState], req: &AdmissionRequest<'_>) -> Decision {
    decide_among(quotas.iter().collect(), req)
}

/// [`decide`] over references (the quotas covering the request's namespace).
fn decide_among(mut ordered: Vec<&QuotaState>, req: &AdmissionRequest<'_>) -> Decision {
    if req.old.is_some_and(|old| old == req.new) {
        return Decision::Allow(Vec::new());
    }
    ordered.sort_by_cached_key(|q| q.key());

    let mut entries = Vec::new();
    for quota in ordered {
        let hard = &quota.spec.hard;
        let Some(new) = req.new.view(&quota.spec.scope) else {
            continue;
        };
        if let Some(denial) = unaccounted(quota, req) {
            return Decision::Deny(denial);
        }
        let old = req.old.and_then(|o| o.view(&quota.spec.scope));
        let (delta, shares_a_name) = charge_delta(
            hard,
            &new.entries(),
            &old.as_ref().map(|o| o.entries()).unwrap_or_default(),
        );
        let missing = tracked_missing(hard, &new.missing_requests());
        if missing.is_empty() && !shares_a_name {
            continue;
        }

        // A binding that lacks a request charges nothing for it, so the delta alone would
        // let it scale up freely under a quota that tracks only that resource: more
        // replicas (scoped pods) count as an increase too.
        let replicas_grow = {
            let before = old
                .as_ref()
                .and_then(|o| o.get(PODS))
                .unwrap_or(Quantity::ZERO);
            new.get(PODS).is_some_and(|now| now > before)
        };
        if !missing.is_empty() && (req.old.is_none() || !delta.is_empty() || replicas_grow) {
            return deny(
                DenyReason::MustSpecify,
                CODE_FORBIDDEN,
                quota,
                format!(
                    "must specify {} for ResourceBinding {}/{}",
                    missing.join(","),
                    req.namespace,
                    req.name
                ),
            );
        }
        if delta.is_empty() {
            continue;
        }
        if let Some(denial) = observed_over_limit(quota, &delta) {
            return Decision::Deny(denial);
        }
        if let Some(denial) = check_quota(quota, &delta, req) {
            return Decision::Deny(denial);
        }
        let cluster = quota.covers.is_cluster();
        entries.push((
            quota.key(),
            Reservation {
                reserved_by: ReservedBy {
                    api_version: BINDING_API_VERSION.to_owned(),
                    kind: BINDING_KIND.to_owned(),
                    namespace: if cluster {
                        req.namespace.to_owned()
                    } else {
                        String::new()
                    },
                    name: req.name.to_owned(),
                    uid: req.uid.to_owned(),
                },
                generation: req.generation,
                reserved: delta
                    .iter()
                    .map(|d| (d.name.to_owned(), d.increase))
                    .collect(),
                expiration_time: req.now.saturating_add(req.reservation_ttl),
            },
        ));
    }
    Decision::Allow(entries)
}

/// Decide `reqs` in order against `quotas`, upserting each admitted request's entries into
/// the states, so later requests see earlier ones. The webhook batches the concurrent
/// requests of one namespace this way and writes each quota's status once.
pub fn decide_batch(quotas: &mut [QuotaState], reqs: &[AdmissionRequest<'_>]) -> Vec<Decision> {
    decide_batch_with(quotas, reqs, |_, _| true)
}

/// Decide `reqs` — of any namespaces — in order against the union `quotas` of their quota
/// objects, each request against the quotas that cover its namespace
/// ([`crate::selection::Covers::covers`]; `labels` gives a namespace's labels, `None` when
/// unknown: then no cluster quota selects it). Like [`decide_batch`], each admitted
/// request's entries are upserted into the states, so a later request of another
/// namespace sees what an earlier one took from a cluster quota they share.
pub fn decide_batch_selected<'l>(
    quotas: &mut [QuotaState],
    reqs: &[AdmissionRequest<'_>],
    labels: impl Fn(&str) -> Option<&'l Labels>,
) -> Vec<Decision> {
    decide_batch_with(quotas, reqs, |q, req| {
        q.covers.covers(req.namespace, labels(req.namespace))
    })
}

fn decide_batch_with(
    quotas: &mut [QuotaState],
    reqs: &[AdmissionRequest<'_>],
    applies: impl Fn(&QuotaState, &AdmissionRequest<'_>) -> bool,
) -> Vec<Decision> {
    reqs.iter()
        .map(|req| {
            let decision = decide_among(quotas.iter().filter(|q| applies(q, req)).collect(), req);
            if let Decision::Allow(entries) = &decision {
                for (key, entry) in entries {
                    if let Some(quota) = quotas.iter_mut().find(|q| q.key() == *key) {
                        upsert(&mut quota.reservations, entry.clone());
                    }
                }
            }
            decision
        })
        .collect()
}

/// Must-specify names (sorted) a matching part lacks while `hard` tracks them.
fn tracked_missing(hard: &ResourceList, missing: &[&'static str]) -> Vec<&'static str> {
    MUST_SPECIFY
        .iter()
        .filter(|(bare, req)| missing.contains(bare) && (hard.contains(bare) || hard.contains(req)))
        .map(|(bare, _)| *bare)
        .collect()
}

/// One name a request increases, for one quota.
#[derive(Clone, Copy, Debug)]
struct Increase<'q> {
    /// The resource name (borrowed from the quota's hard).
    name: &'q str,
    /// `scoped_new − scoped_old` (> 0).
    increase: Quantity,
    /// The quota's hard limit for the name.
    hard: Quantity,
}

/// Per hard name, `max(0, new − old)`, keeping only the names that increase (sorted by
/// name); and whether `hard` shares a name with the new usage at all. `new` and `old` are
/// sorted by name ([`crate::usage::ScopedView::entries`]), so one merge walk does it.
fn charge_delta<'q>(
    hard: &'q ResourceList,
    new: &[(&str, Quantity)],
    old: &[(&str, Quantity)],
) -> (Vec<Increase<'q>>, bool) {
    let mut delta = Vec::new();
    let mut shares_a_name = false;
    let mut hard = hard.iter().peekable();
    let mut old = old.iter().peekable();
    for (name, now) in new {
        while hard.next_if(|(h, _)| h < name).is_some() {}
        let Some((hard_name, limit)) = hard.next_if(|(h, _)| h == name) else {
            continue;
        };
        shares_a_name = true;
        while old.next_if(|(o, _)| o < name).is_some() {}
        let before = old
            .next_if(|(o, _)| o == name)
            .map_or(Quantity::ZERO, |(_, q)| *q);
        let increase = now.sub_clamped(before);
        if !increase.is_zero() {
            delta.push(Increase {
                name: hard_name,
                increase,
                hard: *limit,
            });
        }
    }
    (delta, shares_a_name)
}

/// Steps 5–6 for one quota and a non-empty delta (sorted by name): the denial, if any.
/// `spec.unaccountedWorkloads: Deny` (the default): a binding whose template runs pods
/// nothing counts is refused by a quota that tracks compute — on CREATE, and on an UPDATE
/// that makes it uncountable (one admitted before stays admitted).
fn unaccounted(quota: &QuotaState, req: &AdmissionRequest<'_>) -> Option<Denial> {
    let t = req.new.unaccounted.as_ref()?;
    if quota.spec.policy.unaccounted.unwrap_or_default() != Unaccounted::Deny
        || req.old.is_some_and(|o| o.unaccounted.is_some())
    {
        return None;
    }
    let compute: Vec<&str> = quota
        .spec
        .hard
        .names()
        .filter(|n| !is_object_count(n))
        .collect();
    if compute.is_empty() {
        return None;
    }
    let group = crate::pod_kinds::group_of(&t.api_version);
    let pod_less = if group.is_empty() || !group.contains('.') {
        String::new()
    } else {
        format!(
            "; if {} runs no pods, list {group} in the webhook's --pod-less-groups",
            t.kind
        )
    };
    Some(Denial {
        reason: DenyReason::Unaccounted,
        quota: quota.name.clone(),
        cluster: quota.covers.is_cluster(),
        code: CODE_FORBIDDEN,
        message: format!(
            "{kind} {ns}/{name} ({api}) runs pods that no replica count covers (ResourceBinding \
             {ns}/{binding} has no replicaRequirements), and {noun} {quota} tracks {compute}: \
             refused by its unaccountedWorkloads policy (Deny). Set spec.unaccountedWorkloads \
             to Observed (charged by the pods the members run for it) or Allow (not charged), \
             or give Karmada a replica interpreter for {kind}{pod_less}",
            kind = t.kind,
            ns = req.namespace,
            name = t.name,
            api = t.api_version,
            binding = req.name,
            noun = quota.covers.noun(),
            quota = quota.name,
            compute = compute.join(","),
        ),
    })
}

/// `spec.observedLimit: Enforce` (the default): while the members run more than `hard` of
/// a name the request increases, refuse, naming the drift per member (observed vs placed).
fn observed_over_limit(quota: &QuotaState, delta: &[Increase<'_>]) -> Option<Denial> {
    if quota.spec.policy.observed != ObservedLimit::Enforce {
        return None;
    }
    let mut observed = ResourceList::new();
    for c in &quota.clusters {
        if let Some(o) = &c.observed {
            observed.add_assign(o);
        }
    }
    let (mut requested, mut over, mut limited) = (
        ResourceList::new(),
        ResourceList::new(),
        ResourceList::new(),
    );
    for row in delta {
        let seen = observed.get_or_zero(row.name);
        if seen > row.hard {
            requested.insert(row.name, row.increase);
            over.insert(row.name, seen);
            limited.insert(row.name, row.hard);
        }
    }
    if requested.is_empty() {
        return None;
    }
    let members = quota
        .clusters
        .iter()
        .filter_map(|c| {
            let o = c.observed.as_ref()?.select(over.names());
            let p = c.placed.select(over.names());
            (!o.is_empty()).then(|| format!("{}: observed {o}, placed {p}", c.name))
        })
        .collect::<Vec<_>>()
        .join("; ");
    Some(Denial {
        reason: DenyReason::ObservedOverLimit,
        quota: quota.name.clone(),
        cluster: quota.covers.is_cluster(),
        code: CODE_FORBIDDEN,
        message: format!(
            "exceeded {}: {}, requested: {requested}, observed: {over}, limited: {limited}: the \
             member clusters already run more than the quota allows ({members}); scale down or \
             remove what runs outside Karmada, or set spec.observedLimit to Ignore",
            quota.covers.noun(),
            quota.name
        ),
    })
}

fn check_quota(
    quota: &QuotaState,
    delta: &[Increase<'_>],
    req: &AdmissionRequest<'_>,
) -> Option<Denial> {
    let counted: Vec<&Reservation> = quota
        .reservations
        .iter()
        .filter(|e| counts(e, Some((req.uid, req.generation))))
        .collect();

    // used + Σ counted reservations, per increased name (None: status unknown).
    let mut current: Vec<Option<Quantity>> = vec![None; delta.len()];
    if let Some(used) = &quota.used {
        let mut used = used.iter().peekable();
        for (row, slot) in delta.iter().zip(current.iter_mut()) {
            while used.next_if(|(n, _)| *n < row.name).is_some() {}
            *slot = used.next_if(|(n, _)| *n == row.name).map(|(_, q)| *q);
        }
    }
    let unknown: Vec<&str> = delta
        .iter()
        .zip(&current)
        .filter(|(_, c)| c.is_none())
        .map(|(row, _)| row.name)
        .collect();
    if !unknown.is_empty() {
        return Some(Denial {
            reason: DenyReason::StatusUnknown,
            quota: quota.name.clone(),
            cluster: quota.covers.is_cluster(),
            code: CODE_RETRY,
            message: format!(
                "status unknown for {}: {}, resources: {}",
                quota.covers.noun(),
                quota.name,
                unknown.join(",")
            ),
        });
    }
    let mut current: Vec<Quantity> = current.into_iter().flatten().collect();
    for entry in &counted {
        // Both sorted by name: one merge walk per entry.
        let mut rows = delta.iter().zip(current.iter_mut()).peekable();
        for (name, reserved) in entry.reserved.iter() {
            while rows.next_if(|(row, _)| row.name < name).is_some() {}
            if let Some((_, slot)) = rows.next_if(|(row, _)| row.name == name) {
                *slot = slot.saturating_add(*reserved);
            }
        }
    }

    let (mut requested, mut in_use, mut limited) = (
        ResourceList::new(),
        ResourceList::new(),
        ResourceList::new(),
    );
    for (row, current) in delta.iter().zip(current) {
        if current.saturating_add(row.increase) > row.hard {
            requested.insert(row.name, row.increase);
            in_use.insert(row.name, current);
            limited.insert(row.name, row.hard);
        }
    }
    if !requested.is_empty() {
        return Some(Denial {
            reason: DenyReason::QuotaExceeded,
            quota: quota.name.clone(),
            cluster: quota.covers.is_cluster(),
            code: CODE_FORBIDDEN,
            message: format!(
                "exceeded {}: {}, requested: {requested}, used: {in_use}, limited: {limited}",
                quota.covers.noun(),
                quota.name
            ),
        });
    }

    if counted.len() >= req.max_reservations {
        return Some(Denial {
            reason: DenyReason::TooManyReservations,
            quota: quota.name.clone(),
            cluster: quota.covers.is_cluster(),
            code: CODE_RETRY,
            message: format!(
                "{} {} holds {} pending reservations (the maximum is {}): the quota \
                 controller has not caught up with them; retry later",
                quota.covers.noun(),
                quota.name,
                counted.len(),
                req.max_reservations
            ),
        });
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::binding::ResourceBindingSpec;
    use crate::quota::{MemberUsage, QuotaSpec};
    use crate::scope::ScopeSelector;
    use crate::testutil::*;

    const NOW: i64 = 1_000;
    const TTL: i64 = 60;

    fn mk_quota(name: &str, hard: &[(&str, &str)], used: Option<&[(&str, &str)]>) -> QuotaState {
        QuotaState {
            clusters: Vec::new(),
            name: name.into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: mk_list(hard),
                scope: ScopeSelector::default(),
            },
            used: used.map(mk_list),
            reservations: Vec::new(),
        }
    }

    fn mk_req<'a>(old: Option<&'a BindingCharge>, new: &'a BindingCharge) -> AdmissionRequest<'a> {
        AdmissionRequest {
            namespace: "team-a",
            name: "web-deployment",
            uid: "uid-1",
            generation: 1,
            old,
            new,
            now: NOW,
            reservation_ttl: TTL,
            max_reservations: 1000,
        }
    }

    fn mk_entry(
        uid: &str,
        generation: i64,
        reserved: &[(&str, &str)],
        expiration_time: i64,
    ) -> Reservation {
        Reservation {
            reserved_by: ReservedBy {
                api_version: BINDING_API_VERSION.into(),
                kind: BINDING_KIND.into(),
                namespace: String::new(),
                name: format!("rb-{uid}"),
                uid: uid.into(),
            },
            generation,
            reserved: mk_list(reserved),
            expiration_time,
        }
    }

    fn denial(decision: &Decision) -> &Denial {
        match decision {
            Decision::Deny(d) => d,
            Decision::Allow(e) => panic!("expected a denial, got Allow({e:?})"),
        }
    }

    fn entries(decision: &Decision) -> &[(QuotaKey, Reservation)] {
        match decision {
            Decision::Allow(e) => e,
            Decision::Deny(d) => panic!("expected Allow, got {d:?}"),
        }
    }

    // --- failover: Karmada moving replicas is never refused ---

    #[test]
    fn a_failover_update_is_admitted_even_over_hard_and_a_later_increase_is_refused() {
        let task = |replicas| crate::binding::GracefulEvictionTask {
            from_cluster: "member1".into(),
            replicas,
            purge_mode: "Gracefully".into(),
            ..Default::default()
        };
        let before = mk_charge(&mk_deployment(
            4,
            &[("cpu", "100m")],
            "",
            &[("member1", 2), ("member2", 2)],
        ));
        // The taint manager's write: member1 left `clusters`, a task holds its 2 replicas.
        let mut evicted = mk_deployment(4, &[("cpu", "100m")], "", &[("member2", 2)]);
        evicted.graceful_eviction_tasks = vec![task(Some(2))];
        let evicted = mk_charge(&evicted);
        // The scheduler's write: member2 runs all 4 while member1 drains.
        let mut moved = mk_deployment(4, &[("cpu", "100m")], "", &[("member2", 4)]);
        moved.graceful_eviction_tasks = vec![task(Some(2))];
        let moved = mk_charge(&moved);
        // A task without a count (unknown draining) changes nothing either.
        let mut unknown = mk_deployment(4, &[("cpu", "100m")], "", &[("member2", 4)]);
        unknown.graceful_eviction_tasks = vec![task(None)];
        let unknown = mk_charge(&unknown);
        // The quota counts draining replicas (used 600m of 400m) and member1 is back,
        // running its old pods (observed over hard, observedLimit Enforce).
        let mut quota = mk_quota(
            "compute",
            &[("requests.cpu", "400m"), ("pods", "4")],
            Some(&[("requests.cpu", "600m"), ("pods", "6")]),
        );
        quota.spec.policy.draining = crate::quota::DrainingReplicas::Count;
        quota.clusters = vec![
            member("member1", &[], &[("requests.cpu", "200m"), ("pods", "2")]),
            member(
                "member2",
                &[("requests.cpu", "400m"), ("pods", "4")],
                &[("requests.cpu", "400m"), ("pods", "4")],
            ),
        ];
        for (old, new) in [
            (&before, &evicted),
            (&evicted, &moved),
            (&moved, &unknown),
            (&moved, &before),
        ] {
            let d = decide(std::slice::from_ref(&quota), &mk_req(Some(old), new));
            assert!(entries(&d).is_empty(), "{old:?} -> {new:?}: {d:?}");
        }
        // Scaling up while the old replicas still count is refused.
        let mut bigger = mk_deployment(5, &[("cpu", "100m")], "", &[("member2", 5)]);
        bigger.graceful_eviction_tasks = vec![task(Some(2))];
        let bigger = mk_charge(&bigger);
        let d = decide(std::slice::from_ref(&quota), &mk_req(Some(&moved), &bigger));
        assert_eq!(denial(&d).reason, DenyReason::ObservedOverLimit);
        quota.spec.policy.observed = crate::quota::ObservedLimit::Ignore;
        let d = decide(std::slice::from_ref(&quota), &mk_req(Some(&moved), &bigger));
        assert_eq!(denial(&d).reason, DenyReason::QuotaExceeded);
    }

    // --- what the members run, and what nothing counts ---

    fn member(name: &str, placed: &[(&str, &str)], observed: &[(&str, &str)]) -> MemberUsage {
        MemberUsage {
            name: name.into(),
            placed: mk_list(placed),
            observed: Some(mk_list(observed)),
        }
    }

    #[test]
    fn observed_usage_over_hard_stops_growth_and_lets_decreases_and_other_names_pass() {
        let mut quota = mk_quota("compute", &[("cpu", "4")], Some(&[("cpu", "2")]));
        // Pods made around Karmada: member1 runs 3 cpu where 1 is placed, member2 2 of 1.
        quota.clusters = vec![
            member(
                "member1",
                &[("cpu", "1")],
                &[("cpu", "3"), ("memory", "1Gi")],
            ),
            member("member2", &[("cpu", "1")], &[("cpu", "2")]),
            MemberUsage {
                name: "member3".into(),
                placed: mk_list(&[("cpu", "0")]),
                observed: None,
            },
        ];
        let small = mk_cpu_charge(1, "100m");
        let d = decide(std::slice::from_ref(&quota), &mk_req(None, &small));
        assert_eq!(
            denial(&d).message,
            "exceeded quota: compute, requested: cpu=100m, observed: cpu=5, limited: cpu=4: the \
             member clusters already run more than the quota allows (member1: observed cpu=3, \
             placed cpu=1; member2: observed cpu=2, placed cpu=1); scale down or remove what \
             runs outside Karmada, or set spec.observedLimit to Ignore"
        );
        assert_eq!(denial(&d).reason, DenyReason::ObservedOverLimit);
        assert_eq!(denial(&d).code, CODE_FORBIDDEN);
        // A scale-down passes.
        let big = mk_cpu_charge(2, "500m");
        assert!(decide(std::slice::from_ref(&quota), &mk_req(Some(&big), &small)).is_allowed());
        // Memory is not over: a memory-only increase passes.
        let mut mem = mk_quota("mem", &[("memory", "8Gi")], Some(&[("memory", "1Gi")]));
        mem.clusters = quota.clusters.clone();
        let charge = mk_charge(&ResourceBindingSpec {
            replicas: 1,
            replica_requirements: Some(crate::binding::ReplicaRequirements {
                resource_request: mk_list(&[("memory", "1Gi")]),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(decide(&[mem], &mk_req(None, &charge)).is_allowed());
        // The off switch.
        quota.spec.policy.observed = ObservedLimit::Ignore;
        assert!(decide(&[quota], &mk_req(None, &small)).is_allowed());
    }

    fn daemonset() -> BindingCharge {
        mk_charge(&ResourceBindingSpec {
            resource: crate::binding::ObjectReference {
                api_version: "apps/v1".into(),
                kind: "DaemonSet".into(),
                name: "gpu-agent".into(),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_workload_nothing_counts_is_refused_by_a_compute_quota_unless_its_policy_admits_it() {
        let ds = daemonset();
        assert_eq!(
            ds.unaccounted.as_ref().map(|t| t.kind.as_str()),
            Some("DaemonSet")
        );
        let mut gpu = mk_quota(
            "gpus",
            &[("requests.nvidia.com/gpu", "8")],
            Some(&[("requests.nvidia.com/gpu", "0")]),
        );
        let d = decide(std::slice::from_ref(&gpu), &mk_req(None, &ds));
        assert_eq!(denial(&d).reason, DenyReason::Unaccounted);
        assert_eq!(
            denial(&d).message,
            "DaemonSet team-a/gpu-agent (apps/v1) runs pods that no replica count covers \
             (ResourceBinding team-a/web-deployment has no replicaRequirements), and quota gpus \
             tracks requests.nvidia.com/gpu: refused by its unaccountedWorkloads policy (Deny). \
             Set spec.unaccountedWorkloads to Observed (charged by the pods the members run for \
             it) or Allow (not charged), or give Karmada a replica interpreter for DaemonSet"
        );
        // Already admitted (an UPDATE of an uncountable binding) stays admitted.
        assert!(decide(std::slice::from_ref(&gpu), &mk_req(Some(&ds), &ds)).is_allowed());
        // A quota of object counts only does not care.
        let objects = mk_quota(
            "objects",
            &[("count/daemonsets.apps", "5")],
            Some(&[("count/daemonsets.apps", "0")]),
        );
        assert!(decide(&[objects], &mk_req(None, &ds)).is_allowed());
        for policy in [Unaccounted::Observed, Unaccounted::Allow] {
            gpu.spec.policy.unaccounted = Some(policy);
            assert!(
                decide(std::slice::from_ref(&gpu), &mk_req(None, &ds)).is_allowed(),
                "{policy:?}"
            );
        }
        // A custom kind's refusal says how to declare it pod-less.
        let cr = mk_charge(&ResourceBindingSpec {
            resource: crate::binding::ObjectReference {
                api_version: "example.io/v1".into(),
                kind: "Widget".into(),
                name: "w".into(),
                ..Default::default()
            },
            ..Default::default()
        });
        gpu.spec.policy.unaccounted = None;
        let d = decide(&[gpu], &mk_req(None, &cr));
        assert!(
            denial(&d).message.ends_with(
                "; if Widget runs no pods, list example.io in the webhook's --pod-less-groups"
            ),
            "{}",
            denial(&d).message
        );
    }

    // --- Karmada's webhook cases, transposed (values in cpu) ---

    #[test]
    fn denies_create_over_hard() {
        let quota = mk_quota("compute", &[("cpu", "150m")], Some(&[("cpu", "0")]));
        let new = mk_cpu_charge(1, "200m");
        let decision = decide(&[quota], &mk_req(None, &new));
        assert_eq!(
            denial(&decision),
            &Denial {
                cluster: false,
                reason: DenyReason::QuotaExceeded,
                quota: "compute".into(),
                code: 403,
                message:
                    "exceeded quota: compute, requested: cpu=200m, used: cpu=0, limited: cpu=150m"
                        .into(),
            }
        );
    }

    #[test]
    fn allows_update_within_hard_and_reserves_the_increase() {
        let quota = mk_quota("compute", &[("cpu", "200m")], Some(&[("cpu", "100m")]));
        let (old, new) = (mk_cpu_charge(1, "50m"), mk_cpu_charge(1, "100m"));
        let decision = decide(&[quota], &mk_req(Some(&old), &new));
        assert_eq!(
            entries(&decision),
            [(
                QuotaKey::Namespaced {
                    namespace: String::new(),
                    name: "compute".into()
                },
                Reservation {
                    reserved_by: ReservedBy {
                        api_version: "work.karmada.io/v1alpha2".into(),
                        kind: "ResourceBinding".into(),
                        namespace: String::new(),
                        name: "web-deployment".into(),
                        uid: "uid-1".into(),
                    },
                    generation: 1,
                    reserved: mk_list(&[("cpu", "50m")]),
                    expiration_time: NOW + TTL,
                }
            )]
        );
    }

    #[test]
    fn denies_update_whose_increase_exceeds_hard() {
        let quota = mk_quota("compute", &[("cpu", "100m")], Some(&[("cpu", "0")]));
        let (old, new) = (mk_cpu_charge(1, "50m"), mk_cpu_charge(2, "80m"));
        let decision = decide(&[quota], &mk_req(Some(&old), &new));
        assert_eq!(
            denial(&decision).message,
            "exceeded quota: compute, requested: cpu=110m, used: cpu=0, limited: cpu=100m"
        );
    }

    #[test]
    fn charges_components_on_every_target_cluster() {
        let spec = mk_components(
            &[
                ("a", 2, &[("cpu", "25m")], ""),
                ("b", 1, &[("cpu", "30m")], ""),
            ],
            &["member1", "member2"],
        );
        let new = mk_charge(&spec);
        let roomy = mk_quota("compute", &[("cpu", "200m")], Some(&[("cpu", "0")]));
        let allowed = decide(&[roomy], &mk_req(None, &new));
        assert_eq!(entries(&allowed)[0].1.reserved, mk_list(&[("cpu", "160m")]));
        let tight = mk_quota("compute", &[("cpu", "150m")], Some(&[("cpu", "0")]));
        let denied = decide(&[tight], &mk_req(None, &new));
        assert_eq!(
            denial(&denied).message,
            "exceeded quota: compute, requested: cpu=160m, used: cpu=0, limited: cpu=150m"
        );
    }

    #[test]
    fn allows_scale_down_while_used_is_above_a_lowered_hard() {
        let quota = mk_quota(
            "compute",
            &[("cpu", "100m"), ("pods", "1")],
            Some(&[("cpu", "300m"), ("pods", "3")]),
        );
        let (old, new) = (mk_cpu_charge(3, "100m"), mk_cpu_charge(1, "100m"));
        assert_eq!(
            decide(&[quota], &mk_req(Some(&old), &new)),
            Decision::Allow(Vec::new())
        );
    }

    #[test]
    fn allows_when_the_namespace_has_no_quota() {
        let new = mk_cpu_charge(100, "8");
        assert_eq!(
            decide(&[], &mk_req(None, &new)),
            Decision::Allow(Vec::new())
        );
    }

    #[test]
    fn allows_identical_old_and_new_without_reservation() {
        let quota = mk_quota("compute", &[("cpu", "100m")], Some(&[("cpu", "5")]));
        let (old, new) = (mk_cpu_charge(3, "1"), mk_cpu_charge(3, "1"));
        assert_eq!(
            decide(&[quota], &mk_req(Some(&old), &new)),
            Decision::Allow(Vec::new())
        );
    }

    // --- status unknown, must specify ---

    #[test]
    fn denies_retryably_while_status_is_unknown() {
        let new = mk_cpu_charge(1, "1");
        let unsynced = mk_quota("compute", &[("cpu", "10"), ("pods", "10")], None);
        let d = decide(&[unsynced], &mk_req(None, &new));
        assert_eq!(
            denial(&d),
            &Denial {
                cluster: false,
                reason: DenyReason::StatusUnknown,
                quota: "compute".into(),
                code: 429,
                message: "status unknown for quota: compute, resources: cpu,pods".into(),
            }
        );
        let partly = mk_quota(
            "compute",
            &[("cpu", "10"), ("pods", "10")],
            Some(&[("cpu", "0")]),
        );
        let d = decide(&[partly], &mk_req(None, &new));
        assert_eq!(
            denial(&d).message,
            "status unknown for quota: compute, resources: pods"
        );
    }

    #[test]
    fn denies_a_workload_that_lacks_a_tracked_request() {
        let new = mk_cpu_charge(1, "1");
        let quota = mk_quota(
            "mem",
            &[("requests.memory", "10Gi")],
            Some(&[("requests.memory", "0")]),
        );
        let d = decide(&[quota], &mk_req(None, &new));
        assert_eq!(
            denial(&d),
            &Denial {
                cluster: false,
                reason: DenyReason::MustSpecify,
                quota: "mem".into(),
                code: 403,
                message: "must specify memory for ResourceBinding team-a/web-deployment".into(),
            }
        );
        let mut bare = mk_deployment(2, &[], "", &[]);
        bare.replica_requirements = None;
        let bare = mk_charge(&bare);
        let both = mk_quota(
            "both",
            &[("cpu", "10"), ("memory", "10Gi")],
            Some(&[("cpu", "0"), ("memory", "0")]),
        );
        let d = decide(&[both], &mk_req(None, &bare));
        assert_eq!(
            denial(&d).message,
            "must specify cpu,memory for ResourceBinding team-a/web-deployment"
        );
    }

    #[test]
    fn does_not_require_requests_a_quota_does_not_track() {
        let new = mk_cpu_charge(1, "1");
        let pods = mk_quota("pods", &[("pods", "10")], Some(&[("pods", "0")]));
        assert!(decide(&[pods], &mk_req(None, &new)).is_allowed());
    }

    #[test]
    fn must_specify_only_when_an_update_charges_something() {
        let quota = || {
            mk_quota(
                "compute",
                &[("cpu", "10"), ("pods", "10")],
                Some(&[("cpu", "0"), ("pods", "3")]),
            )
        };
        let mk = |replicas, placement: &[(&str, i32)]| {
            let mut spec = mk_deployment(replicas, &[], "", placement);
            spec.replica_requirements = None;
            mk_charge(&spec)
        };
        let three = mk(3, &[("m1", 3)]);
        let moved = mk(3, &[("m2", 3)]);
        let fewer = mk(2, &[("m1", 2)]);
        let more = mk(4, &[("m1", 4)]);
        let same = mk(3, &[("m1", 3)]);
        assert_eq!(
            decide(&[quota()], &mk_req(Some(&three), &same)),
            Decision::Allow(Vec::new())
        );
        assert_eq!(
            decide(&[quota()], &mk_req(Some(&three), &moved)),
            Decision::Allow(Vec::new())
        );
        assert_eq!(
            decide(&[quota()], &mk_req(Some(&three), &fewer)),
            Decision::Allow(Vec::new())
        );
        let d = decide(&[quota()], &mk_req(Some(&three), &more));
        assert_eq!(denial(&d).reason, DenyReason::MustSpecify);
    }

    #[test]
    fn must_specify_stops_a_scale_up_under_a_quota_on_cpu_alone() {
        // The headline quota ("100 cpu") does not track pods: a binding without a cpu
        // request charges no cpu, so only its growing replica count can give it away.
        let quota = mk_quota(
            "compute",
            &[("requests.cpu", "10")],
            Some(&[("requests.cpu", "0")]),
        );
        let mk = |replicas| {
            let mut spec = mk_deployment(replicas, &[], "", &[("m1", replicas)]);
            spec.replica_requirements = None;
            mk_charge(&spec)
        };
        let (three, more, fewer) = (mk(3), mk(300), mk(2));
        let d = decide(std::slice::from_ref(&quota), &mk_req(Some(&three), &more));
        assert_eq!(denial(&d).reason, DenyReason::MustSpecify);
        assert_eq!(
            decide(std::slice::from_ref(&quota), &mk_req(Some(&three), &fewer)),
            Decision::Allow(Vec::new())
        );
    }

    // --- reservations ---

    #[test]
    fn the_same_uid_and_generation_twice_replaces_its_entry() {
        let mut quotas = [mk_quota("compute", &[("cpu", "1")], Some(&[("cpu", "0")]))];
        let new = mk_cpu_charge(1, "1");
        let decisions = decide_batch(&mut quotas, &[mk_req(None, &new), mk_req(None, &new)]);
        assert!(decisions.iter().all(Decision::is_allowed), "{decisions:?}");
        assert_eq!(quotas[0].reservations.len(), 1);
    }

    #[test]
    fn leaves_the_requests_own_entry_out_of_the_sum() {
        let mut quota = mk_quota("compute", &[("cpu", "1")], Some(&[("cpu", "0")]));
        quota
            .reservations
            .push(mk_entry("uid-1", 1, &[("cpu", "1")], NOW + 30));
        let new = mk_cpu_charge(1, "1");
        assert!(decide(std::slice::from_ref(&quota), &mk_req(None, &new)).is_allowed());
        let other = AdmissionRequest {
            uid: "uid-2",
            ..mk_req(None, &new)
        };
        let d = decide(&[quota], &other);
        assert_eq!(
            denial(&d).message,
            "exceeded quota: compute, requested: cpu=1, used: cpu=1, limited: cpu=1"
        );
    }

    #[test]
    fn counts_expired_reservations_until_the_controller_removes_them() {
        // The controller is down: the entry expired long ago but was never folded into
        // used. Ignoring it would admit past hard.
        let mut quota = mk_quota("compute", &[("cpu", "1")], Some(&[("cpu", "0")]));
        quota
            .reservations
            .push(mk_entry("old", 1, &[("cpu", "1")], NOW - 3600));
        let new = mk_cpu_charge(1, "1");
        assert_eq!(
            denial(&decide(&[quota], &mk_req(None, &new))).message,
            "exceeded quota: compute, requested: cpu=1, used: cpu=1, limited: cpu=1"
        );
    }

    #[test]
    fn a_named_duplicated_placement_is_refused_at_create_and_its_scheduling_charges_nothing() {
        let placement =
            |spec: crate::binding::ResourceBindingSpec| crate::binding::ResourceBindingSpec {
                placement: Some(
                    serde_saphyr::from_str("clusterAffinity: {clusterNames: [member1, member2]}")
                        .unwrap(),
                ),
                ..spec
            };
        let quota = mk_quota("compute", &[("cpu", "2")], Some(&[("cpu", "0")]));
        // 5 × 250m on each of 2 clusters = 2500m > 2: refused at the detector's CREATE.
        let big = mk_charge(&placement(mk_deployment(5, &[("cpu", "250m")], "", &[])));
        assert_eq!(
            denial(&decide(std::slice::from_ref(&quota), &mk_req(None, &big))).message,
            "exceeded quota: compute, requested: cpu=2500m, used: cpu=0, limited: cpu=2"
        );
        // 4 × 250m × 2 = 2 fits; the scheduler's update (clusters filled) charges nothing.
        let create = mk_charge(&placement(mk_deployment(4, &[("cpu", "250m")], "", &[])));
        assert_eq!(
            entries(&decide(
                std::slice::from_ref(&quota),
                &mk_req(None, &create)
            ))[0]
                .1
                .reserved,
            mk_list(&[("cpu", "2")])
        );
        let scheduled = mk_charge(&placement(mk_deployment(
            4,
            &[("cpu", "250m")],
            "",
            &[("member1", 4), ("member2", 4)],
        )));
        assert_eq!(
            decide(&[quota], &mk_req(Some(&create), &scheduled)),
            Decision::Allow(Vec::new())
        );
    }

    #[test]
    fn charges_a_binding_newly_entering_scope_in_full() {
        let mut quota = mk_quota("high", &[("cpu", "10")], Some(&[("cpu", "0")]));
        quota.spec.scope = mk_scope("In", &["high"]);
        let old = mk_charge(&mk_deployment(2, &[("cpu", "1")], "", &[]));
        let new = mk_charge(&mk_deployment(2, &[("cpu", "1")], "high", &[]));
        let d = decide(std::slice::from_ref(&quota), &mk_req(Some(&old), &new));
        assert_eq!(entries(&d)[0].1.reserved, mk_list(&[("cpu", "2")]));
        // Leaving the scope charges nothing.
        assert_eq!(
            decide(&[quota], &mk_req(Some(&new), &old)),
            Decision::Allow(Vec::new())
        );
    }

    #[test]
    fn the_first_failing_quota_by_name_decides_the_message() {
        let new = mk_cpu_charge(1, "2");
        let wide = mk_quota("a-wide", &[("cpu", "10")], Some(&[("cpu", "0")]));
        let tight = mk_quota("b-tight", &[("cpu", "1")], Some(&[("cpu", "0")]));
        let d = decide(&[tight.clone(), wide], &mk_req(None, &new));
        assert!(
            denial(&d).message.starts_with("exceeded quota: b-tight,"),
            "{d:?}"
        );
        let also_tight = mk_quota("a-tight", &[("cpu", "1")], Some(&[("cpu", "0")]));
        let d = decide(&[tight, also_tight], &mk_req(None, &new));
        assert!(
            denial(&d).message.starts_with("exceeded quota: a-tight,"),
            "{d:?}"
        );
    }

    #[test]
    fn writes_entries_in_quota_name_order_only_for_non_zero_deltas() {
        let quotas = [
            mk_quota(
                "z-cpu",
                &[("cpu", "10"), ("memory", "1Gi")],
                Some(&[("cpu", "0"), ("memory", "0")]),
            ),
            mk_quota("m-pods", &[("pods", "10")], Some(&[("pods", "1")])),
            mk_quota(
                "a-cpu",
                &[("requests.cpu", "10")],
                Some(&[("requests.cpu", "0")]),
            ),
        ];
        let old = mk_charge(&mk_deployment(
            1,
            &[("cpu", "1"), ("memory", "1Gi")],
            "",
            &[],
        ));
        let new = mk_charge(&mk_deployment(
            1,
            &[("cpu", "2"), ("memory", "1Gi")],
            "",
            &[],
        ));
        let d = decide(&quotas, &mk_req(Some(&old), &new));
        let written: Vec<(&str, String)> = entries(&d)
            .iter()
            .map(|(q, e)| (q.name(), e.reserved.to_string()))
            .collect();
        assert_eq!(
            written,
            [
                ("a-cpu", "requests.cpu=1".to_owned()),
                ("z-cpu", "cpu=1".to_owned())
            ]
        );
    }

    #[test]
    fn refuses_new_entries_at_max_reservations() {
        let mut quota = mk_quota("compute", &[("cpu", "10")], Some(&[("cpu", "0")]));
        quota.reservations = vec![
            mk_entry("x", 1, &[("cpu", "1")], NOW + 10),
            mk_entry("y", 1, &[("cpu", "1")], NOW + 10),
            mk_entry("expired", 1, &[("cpu", "1")], NOW - 1), // counts until removed
        ];
        let new = mk_cpu_charge(1, "1");
        let at_max = AdmissionRequest {
            max_reservations: 3,
            ..mk_req(None, &new)
        };
        let d = decide(std::slice::from_ref(&quota), &at_max);
        assert_eq!(
            denial(&d),
            &Denial {
                cluster: false,
                reason: DenyReason::TooManyReservations,
                code: 429,
                quota: "compute".into(),
                message: "quota compute holds 3 pending reservations (the maximum is 3): the \
                          quota controller has not caught up with them; retry later"
                    .into(),
            }
        );
        // Replacing its own entry does not grow the list.
        quota.reservations[1] = mk_entry("uid-1", 1, &[("cpu", "1")], NOW + 10);
        assert!(decide(&[quota], &at_max).is_allowed());
    }

    #[test]
    fn batch_admits_until_hard_then_denies() {
        let mut quotas = [mk_quota("compute", &[("cpu", "2")], Some(&[("cpu", "0")]))];
        let new = mk_cpu_charge(1, "1");
        let reqs = [
            AdmissionRequest {
                uid: "u1",
                name: "rb1",
                ..mk_req(None, &new)
            },
            AdmissionRequest {
                uid: "u2",
                name: "rb2",
                ..mk_req(None, &new)
            },
            AdmissionRequest {
                uid: "u3",
                name: "rb3",
                ..mk_req(None, &new)
            },
        ];
        let decisions = decide_batch(&mut quotas, &reqs);
        assert!(decisions[0].is_allowed());
        assert!(decisions[1].is_allowed());
        assert_eq!(
            denial(&decisions[2]).message,
            "exceeded quota: compute, requested: cpu=1, used: cpu=2, limited: cpu=2"
        );
        assert_eq!(quotas[0].reservations.len(), 2);
    }

    #[test]
    fn deny_reasons_have_status_strings() {
        assert_eq!(DenyReason::QuotaExceeded.as_str(), "QuotaExceeded");
        assert_eq!(
            DenyReason::TooManyReservations.as_str(),
            "TooManyReservations"
        );
    }

    mod properties {
        use super::*;
        use crate::ledger::effective_usage;
        use crate::quantity::Format;
        use proptest::prelude::*;

        fn milli(m: i64) -> String {
            format!("{m}m")
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(128))]

            #[test]
            fn a_pure_scale_down_is_never_charged(
                cpu in 1i64..4000, old_r in 0i32..50, shrink in 0i32..50,
                hard in 0i64..10_000, used in 0i64..20_000, split in 0i32..50,
            ) {
                let new_r = old_r - shrink.min(old_r);
                let split_old = split.min(old_r);
                let split_new = split_old.min(new_r);
                let old = mk_charge(&mk_deployment(old_r, &[("cpu", &milli(cpu))], "", &[("m1", split_old), ("m2", old_r - split_old)]));
                let new = mk_charge(&mk_deployment(new_r, &[("cpu", &milli(cpu))], "", &[("m1", split_new), ("m2", new_r - split_new)]));
                let quota = mk_quota("q", &[("cpu", &milli(hard)), ("pods", "1")], Some(&[("cpu", &milli(used)), ("pods", "9")]));
                prop_assert_eq!(decide(&[quota], &mk_req(Some(&old), &new)), Decision::Allow(Vec::new()));
            }

            #[test]
            fn a_batch_never_lets_effective_usage_exceed_hard(
                hard in 0i64..10_000, used_pct in 0i64..=100,
                reqs in proptest::collection::vec((1i64..3000, 1i32..5, any::<bool>()), 1..12),
            ) {
                let used = hard * used_pct / 100;
                let mut quotas = [mk_quota("q", &[("cpu", &milli(hard))], Some(&[("cpu", &milli(used))]))];
                let charges: Vec<(BindingCharge, BindingCharge)> = reqs
                    .iter()
                    .map(|(cpu, r, _)| (mk_cpu_charge(*r, &milli(*cpu)), mk_cpu_charge(r + 1, &milli(*cpu))))
                    .collect();
                let uids: Vec<String> = (0..reqs.len()).map(|i| format!("uid-{i}")).collect();
                let batch: Vec<AdmissionRequest<'_>> = charges
                    .iter()
                    .zip(&reqs)
                    .zip(&uids)
                    .map(|(((small, big), (_, _, update)), uid)| AdmissionRequest {
                        uid,
                        ..if *update { mk_req(Some(small), big) } else { mk_req(None, small) }
                    })
                    .collect();
                decide_batch(&mut quotas, &batch);
                let effective = effective_usage(&mk_list(&[("cpu", &milli(used))]), &quotas[0].reservations, None);
                let limit = Quantity::from_milli(hard, Format::DecimalSI);
                prop_assert!(effective.get_or_zero("cpu") <= limit, "{} > {}", effective, limit);
            }
        }
    }
}
