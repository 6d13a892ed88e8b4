//! A quota as the controller computed it ([`ComputedQuota`]) mapped into the dashboard's
//! own model ([`Quota`], with its waiting [`Line`]): the one place the two models meet.

use karmada_quota_core::ResourceList;
use karmada_quota_crds::convert::list_from_api;
use karmada_quota_dashboard::model::{
    ClusterUsage, Condition, Denial, Line, Quota, Reservation, Waiting,
};

use crate::api::ComputedQuota;

fn unix(rfc3339: &str) -> i64 {
    rfc3339
        .parse::<jiff::Timestamp>()
        .map_or(0, jiff::Timestamp::as_second)
}

/// The dashboard's quota of a computed one.
pub fn quota(r: &ComputedQuota, denials: Vec<Denial>) -> Quota {
    let mut reserved = ResourceList::new();
    for res in &r.reservations {
        reserved.add_assign(&res.reserved);
    }
    Quota {
        namespace: r.namespace.clone(),
        name: r.name.clone(),
        hard: r.hard.clone(),
        used: r.used.clone(),
        reserved,
        clusters: r
            .clusters
            .iter()
            .map(|c| ClusterUsage {
                name: c.name.clone(),
                placed: c.used.clone(),
                observed: c.observed.clone(),
                draining: c.draining.clone(),
                draining_unknown: c.draining_unknown,
            })
            .collect(),
        reservations: r
            .reservations
            .iter()
            .map(|res| Reservation {
                binding: res.binding.clone(),
                uid: res.uid.clone(),
                reserved: res.reserved.clone(),
                expires: res.expiration_time.clone(),
            })
            .collect(),
        conditions: r
            .conditions
            .iter()
            .map(|c| Condition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                since: c.last_transition_time.clone(),
            })
            .collect(),
        bindings: r.bindings,
        error: r.error.clone(),
        computed_at: unix(&r.computed_at),
        denials,
        top_bindings: r.top_bindings.clone(),
        namespaces: r.namespaces.clone(),
        shares: r.shares.clone(),
        line: line(r),
    }
}

/// The quota's waiting line for the pages: while it queues, or while some still wait.
fn line(r: &ComputedQuota) -> Option<Line> {
    if !r.admission.queueing() && r.queue.is_none() {
        return None;
    }
    // The controller wrote these values: one that does not parse shows as nothing asked.
    let list = |map, field| list_from_api(map, field).unwrap_or_default();
    let queue = r.queue.clone().unwrap_or_default();
    Some(Line {
        queueing: r.admission.queueing(),
        order: r.admission.order.clone(),
        total: queue.total,
        waiting: queue
            .waiting
            .iter()
            .map(|w| Waiting {
                position: w.position,
                namespace: if w.namespace.is_empty() {
                    r.namespace.clone()
                } else {
                    w.namespace.clone()
                },
                name: w.name.clone(),
                priority: w.priority,
                asks: list(&w.asks, "asks"),
                short: list(&w.short, "short"),
                since: w.since.0.as_second(),
                stuck: w.stuck.clone(),
            })
            .collect(),
    })
}
