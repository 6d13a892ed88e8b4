//! The controller's computed view of one quota (what status and the dashboard show).
//!
//! ```text
//!  BindingCharge (each observed binding in the namespace) ──┐
//!  observed pods per member cluster (priority class, usage) ┼─► compute ─► QuotaView
//!  QuotaState (spec, status.reservations) + observe(uid) ───┘      (used, clusters[],
//!                                                                   reservations, drift)
//! ```

use std::collections::BTreeMap;

use crate::ledger::{Observation, prune};
use crate::quantity::Quantity;
use crate::quota::{QuotaState, Reservation};
use crate::resources::{COUNT_PREFIX, LEGACY_COUNTS, PODS, ResourceList};
use crate::usage::{BindingCharge, ScopedUsage};

/// Pods observed in the member clusters, for one namespace: cluster name → the
/// non-terminal pods as (priority class, [`crate::usage::pod_usage`]), or `None` when
/// the member is unreachable or not yet listed.
pub type ObservedPods = BTreeMap<String, Option<Vec<(String, ResourceList)>>>;

/// One member cluster's row.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ClusterView {
    /// Member cluster name.
    pub name: String,
    /// Usage placed there by Karmada (from bindings).
    pub used: ResourceList,
    /// Usage measured in the member (non-terminal pods' requests), when known.
    pub observed: Option<ResourceList>,
}

/// A quota as computed by the controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaView {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Limits in force (= spec.hard).
    pub hard: ResourceList,
    /// Σ usage of observed matching bindings, restricted to hard's names.
    pub used: ResourceList,
    /// Per member cluster.
    pub clusters: Vec<ClusterView>,
    /// Reservations after pruning.
    pub reservations: Vec<Reservation>,
    /// Effective usage = used + Σ reservations.
    pub effective: ResourceList,
    /// Clusters whose observed usage exceeds placed usage: name → the names above.
    pub drift: BTreeMap<String, ResourceList>,
    /// Number of matching bindings.
    pub bindings: usize,
}

/// Compute what one quota's status shows (design §5).
///
/// - `namespace`: the quota's namespace (carried into the view).
/// - `quota`: spec (hard, scope) and `status.reservations`.
/// - `bindings`: the charges of the observed ResourceBindings in the namespace; those the
///   scope does not match are skipped.
/// - `observe`: what the controller knows of a binding uid, for pruning reservations.
/// - `observed_pods`: pods per member cluster (see [`ObservedPods`]).
/// - `now`: Unix seconds.
///
/// `used` holds every hard name (zero when nothing uses it, so the webhook never sees an
/// unknown status for a synced quota). `clusters` are the union of placement and observed
/// members, sorted, each restricted to hard names; where a member is observed, its `used`
/// and `observed` carry the same names (zero-filled). `drift` lists members where an
/// observed value is above the placed one. `effective` = used + Σ pruned reservations.
pub fn compute<'a>(
    namespace: &str,
    quota: &QuotaState,
    bindings: impl IntoIterator<Item = &'a BindingCharge>,
    observe: impl Fn(&str) -> Observation,
    observed_pods: &ObservedPods,
    now: i64,
) -> QuotaView {
    let hard = &quota.spec.hard;
    let scope = &quota.spec.scope;
    let mut acc = ScopedUsage::default();
    let mut matched = 0;
    for charge in bindings {
        if charge.add_scoped_to(scope, &mut acc) {
            matched += 1;
        }
    }
    let used: ResourceList = hard
        .names()
        .map(|name| (name.to_owned(), acc.total.get_or_zero(name)))
        .collect();

    let mut names: Vec<&str> = acc.clusters.keys().map(String::as_str).collect();
    names.extend(observed_pods.keys().map(String::as_str));
    names.sort_unstable();
    names.dedup();

    let mut clusters = Vec::with_capacity(names.len());
    let mut drift = BTreeMap::new();
    for name in names {
        let mut placed = acc
            .clusters
            .get(name)
            .map(|l| l.restricted_to(hard))
            .unwrap_or_default();
        let observed = observed_pods
            .get(name)
            .and_then(Option::as_ref)
            .map(|pods| {
                let mut sum = ResourceList::new();
                for (_, usage) in pods.iter().filter(|(class, _)| scope.matches(class)) {
                    sum.add_assign(usage);
                }
                sum.restricted_to(hard)
            });
        if let Some(mut observed) = observed {
            zero_fill(&mut observed, &placed);
            zero_fill(&mut placed, &observed);
            let above: ResourceList = observed
                .iter()
                .filter(|(n, q)| **q > placed.get_or_zero(n))
                .map(|(n, q)| (n.to_owned(), *q))
                .collect();
            if !above.is_empty() {
                drift.insert(name.to_owned(), above);
            }
            clusters.push(ClusterView {
                name: name.to_owned(),
                used: placed,
                observed: Some(observed),
            });
        } else {
            clusters.push(ClusterView {
                name: name.to_owned(),
                used: placed,
                observed: None,
            });
        }
    }

    let reservations = prune(&quota.reservations, observe, now);
    let mut effective = used.clone();
    for entry in &reservations {
        effective.add_assign(&entry.reserved.restricted_to(hard));
    }

    QuotaView {
        namespace: namespace.to_owned(),
        name: quota.name.clone(),
        hard: hard.clone(),
        used,
        clusters,
        reservations,
        effective,
        drift,
        bindings: matched,
    }
}

/// Give `list` a zero entry for every name of `names_of` it lacks.
fn zero_fill(list: &mut ResourceList, names_of: &ResourceList) {
    for name in names_of.names() {
        if !list.contains(name) {
            list.insert(name, Quantity::ZERO);
        }
    }
}

/// Display order of names in messages meant for people: requests first, then pods, then
/// object counts; alphabetical within a group.
fn display_rank(name: &str) -> u8 {
    if name == PODS {
        1
    } else if name.starts_with(COUNT_PREFIX) || LEGACY_COUNTS.iter().any(|(_, n)| *n == name) {
        2
    } else {
        0
    }
}

/// The Drift condition message for one member: the names whose observed value is above
/// the placed one, e.g.
/// `member2 runs requests.cpu=2300m, pods=7 but Karmada placed requests.cpu=1300m, pods=5`.
pub fn drift_message(cluster: &str, observed: &ResourceList, placed: &ResourceList) -> String {
    let mut above: Vec<(&str, Quantity, Quantity)> = observed
        .iter()
        .map(|(n, q)| (n, *q, placed.get_or_zero(n)))
        .filter(|(_, runs, put)| runs > put)
        .collect();
    above.sort_by(|a, b| (display_rank(a.0), a.0).cmp(&(display_rank(b.0), b.0)));
    let list = |pick: fn(&(&str, Quantity, Quantity)) -> Quantity| {
        above
            .iter()
            .map(|e| format!("{}={}", e.0, pick(e)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "{cluster} runs {} but Karmada placed {}",
        list(|e| e.1),
        list(|e| e.2)
    )
}
