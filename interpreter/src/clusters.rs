//! Which member clusters a placement can choose: a Cluster object as placement reads it
//! ([`ClusterFacts`], [`facts`]), Karmada's `util.ClusterMatches` ([`matches`]) and the
//! candidates of a placement among the known clusters ([`candidate_clusters`]). Used by a
//! policy's dry run ([`crate::policy::Policy::binding_for`]); the binding's own placement
//! type, and the clusters it names before scheduling, are core's
//! (`karmada_quota_core::placement`).

use std::collections::BTreeMap;

use karmada_quota_core::placement::{ClusterAffinity, Placement};

/// A member cluster as placement sees it (Karmada's Cluster: name, labels, and the fields
/// a `fieldSelector` reads).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// metadata.name.
    pub name: String,
    /// metadata.labels.
    pub labels: BTreeMap<String, String>,
    /// spec.provider.
    pub provider: String,
    /// spec.region.
    pub region: String,
    /// spec.zone (or the first of spec.zones).
    pub zone: String,
}

/// What placement reads of a Cluster object (as JSON): name, labels, provider, region
/// and zone (or the first of `zones`). Missing fields are empty.
pub fn facts(doc: &serde_json::Value) -> ClusterFacts {
    let s = |p: &str| {
        doc.pointer(p)
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let zone = s("/spec/zone");
    ClusterFacts {
        name: s("/metadata/name"),
        labels: doc
            .pointer("/metadata/labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default(),
        provider: s("/spec/provider"),
        region: s("/spec/region"),
        zone: if zone.is_empty() {
            s("/spec/zones/0")
        } else {
            zone
        },
    }
}

/// Whether `cluster` may be chosen by `affinity`: not excluded, named (when names are
/// given), and matching the label and field selectors (Karmada's `util.ClusterMatches`).
pub fn matches(affinity: &ClusterAffinity, cluster: &ClusterFacts) -> bool {
    if affinity.exclude_clusters.contains(&cluster.name) {
        return false;
    }
    if !affinity.cluster_names.is_empty() && !affinity.cluster_names.contains(&cluster.name) {
        return false;
    }
    if let Some(selector) = &affinity.label_selector
        && !selector.matches(&cluster.labels)
    {
        return false;
    }
    if let Some(fields) = &affinity.field_selector {
        return fields.match_expressions.iter().all(|r| {
            let value = match r.key.as_str() {
                "provider" => &cluster.provider,
                "region" => &cluster.region,
                "zone" => &cluster.zone,
                _ => return false,
            };
            r.matches((!value.is_empty()).then_some(value.as_str()))
        });
    }
    true
}

/// The clusters of `known` that `placement` can choose, sorted by name: the first
/// affinity group that matches any cluster (the scheduler tries them in order), else
/// `clusterAffinity` (absent: every cluster); at most `maxGroups` of a spread constraint
/// by cluster. What the scheduler finally picks among them (by capacity, taints, other
/// spread constraints) is not modelled: this is the most it can choose.
pub fn candidate_clusters<'a>(
    placement: &Placement,
    known: &'a [ClusterFacts],
) -> Vec<&'a ClusterFacts> {
    let mut chosen: Vec<&ClusterFacts> = if placement.cluster_affinities.is_empty() {
        known
            .iter()
            .filter(|c| {
                placement
                    .cluster_affinity
                    .as_ref()
                    .is_none_or(|a| matches(a, c))
            })
            .collect()
    } else {
        placement
            .cluster_affinities
            .iter()
            .map(|term| {
                known
                    .iter()
                    .filter(|c| matches(&term.affinity, c))
                    .collect::<Vec<_>>()
            })
            .find(|matched| !matched.is_empty())
            .unwrap_or_default()
    };
    chosen.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(max) = placement
        .spread_constraints
        .iter()
        .filter(|s| s.spread_by_field == "cluster" && s.max_groups > 0)
        .map(|s| usize::try_from(s.max_groups).unwrap_or(usize::MAX))
        .min()
    {
        chosen.truncate(max);
    }
    chosen
}
