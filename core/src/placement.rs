//! Karmada's Placement (policy.karmada.io/v1alpha1), as a binding carries it in
//! `spec.placement`: a tolerant view, and which clusters it names before scheduling.
//!
//! Field names exactly as Karmada's `pkg/apis/policy/v1alpha1/propagation_types.go`;
//! unknown fields are ignored. Karmada copies the policy's placement into every binding it
//! creates, so the webhook sees it on the detector's CREATE, before the scheduler has
//! filled `spec.clusters`.
//!
//! Which of the known member clusters a placement can choose (a policy's dry run) is not
//! the engine's: it is `karmada_quota_interpreter::clusters`.

use std::collections::BTreeMap;

/// `spec.placement`: only the fields quota reads.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Placement {
    /// Which clusters may be chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster_affinity: Option<ClusterAffinity>,
    /// Several affinity groups, tried in order (then `cluster_affinity` is ignored).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_affinities: Vec<ClusterAffinityTerm>,
    /// Spread constraints (they can narrow the chosen clusters).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub spread_constraints: Vec<SpreadConstraint>,
    /// Duplicated or Divided; absent = Duplicated (Karmada's `Placement.ReplicaSchedulingType`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replica_scheduling: Option<ReplicaScheduling>,
}

/// `placement.clusterAffinity`: every condition must hold for a cluster to be chosen.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterAffinity {
    /// Cluster labels to match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Cluster fields (provider, region, zone) to match.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<FieldSelector>,
    /// The clusters that may be chosen (empty: any).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cluster_names: Vec<String>,
    /// Clusters never chosen.
    #[serde(rename = "exclude", skip_serializing_if = "Vec::is_empty")]
    pub exclude_clusters: Vec<String>,
}

/// `placement.clusterAffinities[]`: a named affinity group.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterAffinityTerm {
    /// The group's name.
    pub affinity_name: String,
    /// Its conditions.
    #[serde(flatten)]
    pub affinity: ClusterAffinity,
}

/// A Kubernetes label selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct LabelSelector {
    /// Labels that must be equal.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Set-based requirements (In, NotIn, Exists, DoesNotExist).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// One set-based requirement of a label (or field) selector.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SelectorRequirement {
    /// The label key (or field name).
    pub key: String,
    /// `In`, `NotIn`, `Exists`, `DoesNotExist`.
    pub operator: String,
    /// Values for `In` / `NotIn`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// `clusterAffinity.fieldSelector`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct FieldSelector {
    /// Requirements on `provider`, `region`, `zone`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<SelectorRequirement>,
}

/// `placement.spreadConstraints[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SpreadConstraint {
    /// `cluster`, `region`, `zone` or `provider`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub spread_by_field: String,
    /// A cluster label to spread by.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub spread_by_label: String,
    /// At most this many groups.
    #[serde(deserialize_with = "crate::int32::saturating")]
    pub max_groups: i32,
    /// At least this many groups.
    #[serde(deserialize_with = "crate::int32::saturating")]
    pub min_groups: i32,
}

/// `placement.replicaScheduling`.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaScheduling {
    /// `Duplicated` or `Divided` (the CRD defaults an empty one to `Divided`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub replica_scheduling_type: String,
}

/// `Duplicated`: every chosen cluster runs all replicas.
pub const DUPLICATED: &str = "Duplicated";

impl LabelSelector {
    /// Whether `labels` satisfy every condition (Kubernetes' `LabelSelectorAsSelector`
    /// semantics; an unknown operator matches nothing).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self
                .match_expressions
                .iter()
                .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
    }
}

impl SelectorRequirement {
    /// Whether a label (or field) with value `value` (`None`: absent) satisfies it.
    pub fn matches(&self, value: Option<&str>) -> bool {
        let listed = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator.as_str() {
            "In" => value.is_some_and(listed),
            "NotIn" => !value.is_some_and(listed),
            "Exists" => value.is_some(),
            "DoesNotExist" => value.is_none(),
            _ => false,
        }
    }
}

impl Placement {
    /// Whether every chosen cluster runs all replicas: `replicaScheduling` absent, or of
    /// type `Duplicated` (Karmada's `Placement.ReplicaSchedulingType`; an empty type in a
    /// present `replicaScheduling` is the CRD's default, `Divided`).
    pub fn is_duplicated(&self) -> bool {
        self.replica_scheduling
            .as_ref()
            .is_none_or(|r| r.replica_scheduling_type == DUPLICATED)
    }

    /// The clusters a Duplicated placement will run on, when they are known before
    /// scheduling: `clusterAffinity.clusterNames` minus `exclude`, with no label or field
    /// selector, no affinity groups and no spread constraint that could narrow them
    /// (sorted, without duplicates). `None` when the clusters are known only once the
    /// scheduler has chosen (then the binding is charged its replicas once until the
    /// scheduler's update names the clusters). A named cluster with no Cluster object is
    /// counted too: the webhook does not know which clusters exist, so it charges what the
    /// placement asks for.
    pub fn named_duplicated_clusters(&self) -> Option<Vec<&str>> {
        if !self.is_duplicated() {
            return None;
        }
        self.named_clusters()
    }

    /// The clusters this placement names by `clusterAffinity.clusterNames` alone (no
    /// selector, no affinity groups, no spread constraints), minus those it excludes,
    /// whatever its replica scheduling (sorted, without duplicates); `None` otherwise.
    /// A multi-template workload runs every component in each cluster it is placed on
    /// unless the scheduler splits the components, so before scheduling this is how many
    /// copies of each component the placement may ask for.
    pub fn named_clusters(&self) -> Option<Vec<&str>> {
        if !self.cluster_affinities.is_empty() || !self.spread_constraints.is_empty() {
            return None;
        }
        let affinity = self.cluster_affinity.as_ref()?;
        if affinity.label_selector.is_some() || affinity.field_selector.is_some() {
            return None;
        }
        let mut names: Vec<&str> = affinity
            .cluster_names
            .iter()
            .map(String::as_str)
            .filter(|n| !n.is_empty() && !affinity.exclude_clusters.iter().any(|x| x == n))
            .collect();
        names.sort_unstable();
        names.dedup();
        (!names.is_empty()).then_some(names)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(yaml: &str) -> Placement {
        serde_saphyr::from_str(yaml).expect("placement")
    }

    #[test]
    fn absent_replica_scheduling_is_duplicated_and_an_empty_type_is_divided() {
        assert!(placement("{}").is_duplicated());
        assert!(
            placement("replicaScheduling: {replicaSchedulingType: Duplicated}").is_duplicated()
        );
        assert!(!placement("replicaScheduling: {replicaSchedulingType: Divided}").is_duplicated());
        assert!(!placement("replicaScheduling: {}").is_duplicated());
    }

    #[test]
    fn named_duplicated_clusters_only_when_the_names_decide() {
        // (placement, clusters known before scheduling)
        let table: [(&str, Option<&[&str]>); 8] = [
            (
                "clusterAffinity: {clusterNames: [member2, member1, member1]}",
                Some(&["member1", "member2"]),
            ),
            (
                "clusterAffinity: {clusterNames: [m1, m2, m3], exclude: [m2]}",
                Some(&["m1", "m3"]),
            ),
            ("clusterAffinity: {clusterNames: [m1], exclude: [m1]}", None),
            // Divided: the replicas are split, charged once whatever the clusters.
            (
                "{clusterAffinity: {clusterNames: [m1, m2]}, replicaScheduling: {replicaSchedulingType: Divided}}",
                None,
            ),
            // Any selector, group or spread constraint may narrow the names: the
            // scheduler decides.
            (
                "clusterAffinity: {clusterNames: [m1, m2], labelSelector: {matchLabels: {env: prod}}}",
                None,
            ),
            (
                "clusterAffinity: {clusterNames: [m1, m2], fieldSelector: {matchExpressions: [{key: region, operator: In, values: [eu]}]}}",
                None,
            ),
            (
                "{clusterAffinity: {clusterNames: [m1, m2]}, spreadConstraints: [{spreadByField: cluster, maxGroups: 1}]}",
                None,
            ),
            (
                "clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}",
                None,
            ),
        ];
        for (yaml, want) in table {
            let p = placement(yaml);
            assert_eq!(p.named_duplicated_clusters().as_deref(), want, "{yaml}");
        }
        assert_eq!(placement("{}").named_duplicated_clusters(), None);
    }

    #[test]
    fn affinity_groups_leave_the_choice_to_the_scheduler() {
        let p = placement(
            "clusterAffinities: [{affinityName: primary, clusterNames: [m1]}, {affinityName: backup, clusterNames: [m2]}]",
        );
        assert_eq!(p.cluster_affinities[1].affinity.cluster_names, ["m2"]);
        assert_eq!(p.named_duplicated_clusters(), None);
    }
}
