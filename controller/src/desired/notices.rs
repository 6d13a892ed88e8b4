//! Events for notable status changes: drift raised or cleared, a member unreachable or all back, usage incomplete or complete again, an invalid spec.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use karmada_quota_core::complete::CONDITION_USAGE_COMPLETE;
use karmada_quota_crds::KarmadaQuotaStatus;
use karmada_quota_crds::quota::{CONDITION_DRIFT, CONDITION_MEMBERS_REACHABLE, CONDITION_READY};
use kube::runtime::events::EventType;

use super::REASON_INVALID_SPEC;
use super::conditions::unreachable_names;

/// Event reason: Drift became True.
pub const EVENT_DRIFT_DETECTED: &str = "DriftDetected";
/// Event reason: Drift became False.
pub const EVENT_DRIFT_RESOLVED: &str = "DriftResolved";
/// Event reason: a member became unreachable.
pub const EVENT_MEMBER_UNREACHABLE: &str = "MemberUnreachable";
/// Event reason: every member is reachable again.
pub const EVENT_MEMBERS_REACHABLE: &str = "MembersReachable";
/// Event reason: the spec is invalid.
pub const EVENT_INVALID_SPEC: &str = "InvalidSpec";
/// Event reason: some usage could not be computed (last known values kept).
pub const EVENT_USAGE_INCOMPLETE: &str = "UsageIncomplete";
/// Event reason: every tracked resource's usage is computed again.
pub const EVENT_USAGE_COMPLETE: &str = "UsageComplete";

/// A notable change, published as a Kubernetes event on the quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Notice {
    /// Normal or Warning.
    pub type_: EventType,
    /// Event reason (one of the `EVENT_*` constants).
    pub reason: &'static str,
    /// Human-readable note.
    pub note: String,
}

fn condition<'a>(status: Option<&'a KarmadaQuotaStatus>, type_: &str) -> Option<&'a Condition> {
    status.and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
}

/// The notable changes from `old` to `new`: drift raised/cleared, a member unreachable /
/// all reachable again, an invalid spec.
pub fn notices(old: Option<&KarmadaQuotaStatus>, new: &KarmadaQuotaStatus) -> Vec<Notice> {
    let mut out = Vec::new();
    let (old_drift, new_drift) = (
        condition(old, CONDITION_DRIFT),
        condition(Some(new), CONDITION_DRIFT),
    );
    match (old_drift.map(|c| c.status.as_str()), new_drift) {
        (o, Some(n)) if n.status == "True" && o != Some("True") => out.push(Notice {
            type_: EventType::Warning,
            reason: EVENT_DRIFT_DETECTED,
            note: n.message.clone(),
        }),
        (Some("True"), Some(n)) if n.status == "False" => out.push(Notice {
            type_: EventType::Normal,
            reason: EVENT_DRIFT_RESOLVED,
            note: n.message.clone(),
        }),
        _ => {}
    }
    let (old_m, new_m) = (
        condition(old, CONDITION_MEMBERS_REACHABLE),
        condition(Some(new), CONDITION_MEMBERS_REACHABLE),
    );
    match (old_m, new_m) {
        (o, Some(n))
            if n.status == "False"
                && o.is_none_or(|o| {
                    o.status != "False"
                        || !unreachable_names(&n.message).is_subset(&unreachable_names(&o.message))
                }) =>
        {
            out.push(Notice {
                type_: EventType::Warning,
                reason: EVENT_MEMBER_UNREACHABLE,
                note: n.message.clone(),
            });
        }
        (Some(o), Some(n)) if o.status == "False" && n.status == "True" => out.push(Notice {
            type_: EventType::Normal,
            reason: EVENT_MEMBERS_REACHABLE,
            note: n.message.clone(),
        }),
        _ => {}
    }
    let (old_r, new_r) = (
        condition(old, CONDITION_READY),
        condition(Some(new), CONDITION_READY),
    );
    let (old_u, new_u) = (
        condition(old, CONDITION_USAGE_COMPLETE),
        condition(Some(new), CONDITION_USAGE_COMPLETE),
    );
    match (old_u, new_u) {
        // Raised, or the affected names or reasons changed.
        (o, Some(n))
            if n.status == "False"
                && o.is_none_or(|o| o.status != "False" || o.message != n.message) =>
        {
            out.push(Notice {
                type_: EventType::Warning,
                reason: EVENT_USAGE_INCOMPLETE,
                note: n.message.clone(),
            });
        }
        (Some(o), Some(n)) if o.status == "False" && n.status == "True" => out.push(Notice {
            type_: EventType::Normal,
            reason: EVENT_USAGE_COMPLETE,
            note: n.message.clone(),
        }),
        _ => {}
    }
    if let Some(n) = new_r
        && n.reason == REASON_INVALID_SPEC
        && old_r.is_none_or(|o| o.reason != REASON_INVALID_SPEC || o.message != n.message)
    {
        out.push(Notice {
            type_: EventType::Warning,
            reason: EVENT_INVALID_SPEC,
            note: n.message.clone(),
        });
    }
    out
}
