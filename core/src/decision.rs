//! The admission decision (design §4 steps 2–5): one place a reviewer reads the rule.
//!
//! [`decide`] is the rule; [`decide_batch`] applies it to the concurrent requests of one
//! namespace in order, so that later requests see the entries earlier ones were given.

use crate::ledger::{is_live, upsert};
use crate::quantity::Quantity;
use crate::quota::{QuotaState, Reservation, ReservedBy};
use crate::resources::ResourceList;
use crate::usage::{BINDING_API_VERSION, BINDING_KIND, BindingCharge, MUST_SPECIFY, ScopedUsage};

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
}

/// A denial with Kubernetes-style status fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    /// Which rule refused it.
    pub reason: DenyReason,
    /// HTTP code for the AdmissionResponse status (403 quota, 429 retryable, …).
    pub code: u16,
    /// The exact message of design §4.
    pub message: String,
}

/// The outcome for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Admit; write these entries (quota name, entry), in quota-name order, only for
    /// quotas with a non-zero delta. Empty = nothing to write.
    Allow(Vec<(String, Reservation)>),
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
        }
    }
}

impl Decision {
    /// Whether the request is admitted.
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }
}

fn deny(reason: DenyReason, code: u16, message: String) -> Decision {
    Decision::Deny(Denial {
        reason,
        code,
        message,
    })
}

/// Decide one ResourceBinding CREATE/UPDATE against the namespace's quotas.
///
/// The rule (design §4 steps 2–5), in order:
///
/// 1. Identical old and new charge → allow, write nothing.
/// 2. Quotas are taken in name order. A quota *applies* when its scope matches the new
///    binding (per component) and its `hard` shares a name with that scoped usage — or
///    tracks cpu/memory/ephemeral-storage that a matching workload part does not request.
///    No applicable quota → allow.
/// 3. Per applicable quota, `delta` = per hard name, `max(0, scoped_new − scoped_old)`; a
///    quota the old object did not match is charged the full new usage.
/// 4. `must specify`: a matching workload part that lacks cpu (memory, ephemeral-storage)
///    while the quota tracks `cpu`/`requests.cpu` (…) is refused on CREATE, and on an UPDATE
///    whose delta is non-zero. (Design §3 says "any UPDATE that changes replicas, placement
///    or requests"; a change that charges nothing — a scale-down, a re-placement — is let
///    through, as step 3 promises that scale-downs and unrelated edits are always allowed.)
/// 5. Only names the delta increases are checked. A name missing from `status.used` →
///    `status unknown for quota` (retryable). Otherwise
///    `used + Σ live reservations (except this request's own (uid, generation)) + delta`
///    must stay ≤ hard, else `exceeded quota: …` listing only the exceeded names, with
///    `used` = used + Σ reservations.
/// 6. A quota with a non-zero delta already holding `max_reservations` live entries (not
///    counting the one this request would replace) refuses, retryably.
/// 7. The first quota that refuses decides the message. Otherwise allow, with one entry
///    `{reservedBy, generation, reserved = delta (non-zero names), expirationTime = now + ttl}`
///    per quota whose delta is non-zero, in quota-name order.
pub fn decide(quotas: &[QuotaState], req: &AdmissionRequest<'_>) -> Decision {
    if req.old.is_some_and(|old| old == req.new) {
        return Decision::Allow(Vec::new());
    }
    let mut ordered: Vec<&QuotaState> = quotas.iter().collect();
    ordered.sort_by(|a, b| a.name.cmp(&b.name));

    let mut entries = Vec::new();
    for quota in ordered {
        let hard = &quota.spec.hard;
        let Some(new) = req.new.scoped(&quota.spec.scope) else {
            continue;
        };
        let missing = tracked_missing(hard, &new);
        if missing.is_empty() && !new.total.names().any(|n| hard.contains(n)) {
            continue;
        }
        let old = req.old.and_then(|o| o.scoped(&quota.spec.scope));
        let delta = charge_delta(hard, &new.total, old.as_ref().map(|o| &o.total));

        if !missing.is_empty() && (req.old.is_none() || !delta.is_empty()) {
            return deny(
                DenyReason::MustSpecify,
                CODE_FORBIDDEN,
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
        if let Some(denial) = check_quota(quota, &delta, req) {
            return Decision::Deny(denial);
        }
        entries.push((
            quota.name.clone(),
            Reservation {
                reserved_by: ReservedBy {
                    api_version: BINDING_API_VERSION.to_owned(),
                    kind: BINDING_KIND.to_owned(),
                    name: req.name.to_owned(),
                    uid: req.uid.to_owned(),
                },
                generation: req.generation,
                reserved: delta,
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
    reqs.iter()
        .map(|req| {
            let decision = decide(quotas, req);
            if let Decision::Allow(entries) = &decision {
                for (name, entry) in entries {
                    if let Some(quota) = quotas.iter_mut().find(|q| &q.name == name) {
                        upsert(&mut quota.reservations, entry.clone());
                    }
                }
            }
            decision
        })
        .collect()
}

/// Must-specify names (sorted) a matching part lacks while `hard` tracks them.
fn tracked_missing(hard: &ResourceList, usage: &ScopedUsage) -> Vec<&'static str> {
    MUST_SPECIFY
        .iter()
        .filter(|(bare, req)| {
            usage.missing_requests.contains(bare) && (hard.contains(bare) || hard.contains(req))
        })
        .map(|(bare, _)| *bare)
        .collect()
}

/// Per hard name, `max(0, new − old)`, keeping only the names that increase.
fn charge_delta(
    hard: &ResourceList,
    new: &ResourceList,
    old: Option<&ResourceList>,
) -> ResourceList {
    new.iter()
        .filter(|(name, _)| hard.contains(name))
        .filter_map(|(name, q)| {
            let before = old
                .and_then(|o| o.get(name))
                .copied()
                .unwrap_or(Quantity::ZERO);
            let increase = q.sub_clamped(before);
            (!increase.is_zero()).then(|| (name.to_owned(), increase))
        })
        .collect()
}

/// Steps 5–6 for one quota and a non-empty delta: the denial, if any.
fn check_quota(
    quota: &QuotaState,
    delta: &ResourceList,
    req: &AdmissionRequest<'_>,
) -> Option<Denial> {
    let own = |e: &Reservation| e.reserved_by.uid == req.uid && e.generation == req.generation;
    let counted: Vec<&Reservation> = quota
        .reservations
        .iter()
        .filter(|e| is_live(e, req.now) && !own(e))
        .collect();

    let used = quota.used.as_ref();
    let unknown: Vec<&str> = delta
        .names()
        .filter(|n| used.is_none_or(|u| !u.contains(n)))
        .collect();
    if !unknown.is_empty() {
        return Some(Denial {
            reason: DenyReason::StatusUnknown,
            code: CODE_RETRY,
            message: format!(
                "status unknown for quota: {}, resources: {}",
                quota.name,
                unknown.join(",")
            ),
        });
    }

    let (mut requested, mut in_use, mut limited) = (
        ResourceList::new(),
        ResourceList::new(),
        ResourceList::new(),
    );
    for (name, increase) in delta.iter() {
        let Some(hard) = quota.spec.hard.get(name) else {
            continue;
        };
        let current = counted.iter().fold(
            used.map_or(Quantity::ZERO, |u| u.get_or_zero(name)),
            |acc, e| acc.saturating_add(e.reserved.get_or_zero(name)),
        );
        if current.saturating_add(*increase) > *hard {
            requested.insert(name, *increase);
            in_use.insert(name, current);
            limited.insert(name, *hard);
        }
    }
    if !requested.is_empty() {
        return Some(Denial {
            reason: DenyReason::QuotaExceeded,
            code: CODE_FORBIDDEN,
            message: format!(
                "exceeded quota: {}, requested: {requested}, used: {in_use}, limited: {limited}",
                quota.name
            ),
        });
    }

    if counted.len() >= req.max_reservations {
        return Some(Denial {
            reason: DenyReason::TooManyReservations,
            code: CODE_RETRY,
            message: format!(
                "quota {} holds {} pending reservations (the maximum is {}); retry once the \
                 controller has observed them",
                quota.name,
                counted.len(),
                req.max_reservations
            ),
        });
    }
    None
}
