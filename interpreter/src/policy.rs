//! PropagationPolicy and ClusterPropagationPolicy (policy.karmada.io/v1alpha1): which
//! templates a policy selects, and the bindings it would make for them.
//!
//! Selection is Karmada's `util.ResourceMatches`: apiVersion and kind equal; a
//! selector's namespace, when set, equal; then a name, when set, decides alone (the label
//! selector is ignored); else the label selector, when set; else every object of the kind.
//! A PropagationPolicy only ever selects templates of its own namespace.
//!
//! The charge of a selected template (see [`Policy::binding_for`]): the template's
//! binding (`crate::template`) with the policy's placement. Duplicated runs the replicas
//! on every cluster the placement can choose among `known` clusters, so the binding is
//! given those clusters with all replicas each; Divided splits the replicas, so it is
//! charged once with no clusters (the split is the scheduler's).

use karmada_quota_core::binding::{ResourceBindingSpec, TargetCluster};
use karmada_quota_core::placement::{LabelSelector, Placement};

use crate::clusters::{ClusterFacts, candidate_clusters};
use crate::template::{Template, TemplateError};

/// A PropagationPolicy or ClusterPropagationPolicy: only the fields quota reads.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Policy {
    /// `PropagationPolicy` or `ClusterPropagationPolicy`.
    pub kind: String,
    /// Name and namespace.
    pub metadata: PolicyMeta,
    /// Selectors and placement.
    pub spec: PolicySpec,
}

/// `metadata` of a policy.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicyMeta {
    /// metadata.name.
    pub name: String,
    /// metadata.namespace (empty for a ClusterPropagationPolicy).
    pub namespace: String,
}

/// `spec` of a policy.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PolicySpec {
    /// Which templates it propagates.
    pub resource_selectors: Vec<ResourceSelector>,
    /// Where.
    pub placement: Placement,
}

/// `spec.resourceSelectors[]`.
#[derive(Clone, Debug, Default, PartialEq, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceSelector {
    /// Template apiVersion (required).
    pub api_version: String,
    /// Template kind (required).
    pub kind: String,
    /// Template namespace (a ClusterPropagationPolicy may narrow by it).
    pub namespace: String,
    /// Template name; when set, the label selector is ignored.
    pub name: String,
    /// Template labels.
    pub label_selector: Option<LabelSelector>,
}

/// The kind of a namespaced policy.
pub const PROPAGATION_POLICY: &str = "PropagationPolicy";

impl ResourceSelector {
    /// Whether `template` is selected (Karmada's `util.ResourceMatches`).
    pub fn selects(&self, template: &Template) -> bool {
        if template.api_version != self.api_version || template.kind != self.kind {
            return false;
        }
        if !self.namespace.is_empty() && template.metadata.namespace != self.namespace {
            return false;
        }
        if !self.name.is_empty() {
            return template.metadata.name == self.name;
        }
        self.label_selector
            .as_ref()
            .is_none_or(|s| s.matches(&template.metadata.labels))
    }
}

impl Policy {
    /// Whether the policy selects `template`: a PropagationPolicy only in its own
    /// namespace; any of its selectors.
    pub fn selects(&self, template: &Template) -> bool {
        if self.kind == PROPAGATION_POLICY && template.metadata.namespace != self.metadata.namespace
        {
            return false;
        }
        self.spec
            .resource_selectors
            .iter()
            .any(|s| s.selects(template))
    }

    /// The binding this policy would make for `template`, with `known` member clusters:
    /// the template's replicas and requirements, the policy's placement, and for a
    /// Duplicated workload every candidate cluster with all replicas (a Divided one, or a
    /// non-workload, gets no clusters: charged once).
    pub fn binding_for(
        &self,
        template: &Template,
        known: &[ClusterFacts],
    ) -> Result<ResourceBindingSpec, TemplateError> {
        let mut spec = template.binding()?;
        let workload =
            spec.replica_requirements.is_some() || spec.replicas > 0 || !spec.components.is_empty();
        if workload && self.spec.placement.is_duplicated() {
            spec.clusters = candidate_clusters(&self.spec.placement, known)
                .into_iter()
                .map(|c| TargetCluster {
                    name: c.name.clone(),
                    replicas: spec.replicas,
                    ..Default::default()
                })
                .collect();
        }
        spec.placement = Some(self.spec.placement.clone());
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use karmada_quota_core::scope::ScopeSelector;
    use karmada_quota_core::usage::BindingCharge;

    fn policy(yaml: &str) -> Policy {
        serde_saphyr::from_str(yaml).expect("policy")
    }

    fn deployment(name: &str, ns: &str, labels: &[(&str, &str)], replicas: i32) -> Template {
        let mut t: Template = serde_saphyr::from_str(&format!(
            "{{apiVersion: apps/v1, kind: Deployment, spec: {{replicas: {replicas}, template: {{spec: {{containers: [{{resources: {{requests: {{cpu: 500m}}}}}}]}}}}}}}}"
        ))
        .expect("template");
        t.metadata.name = name.into();
        t.metadata.namespace = ns.into();
        t.metadata.labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        t
    }

    fn cluster(name: &str, labels: &[(&str, &str)], region: &str) -> ClusterFacts {
        ClusterFacts {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
            region: region.into(),
            ..Default::default()
        }
    }

    /// Karmada's selector table (util/selector.go): name decides alone; else the label
    /// selector; else everything of the kind; a namespaced policy stays in its namespace.
    #[test]
    fn selection_as_karmadas_resource_matches() {
        let web = deployment("web", "team-a", &[("app", "web")], 2);
        let api = deployment("api", "team-a", &[("app", "api")], 2);
        let other_ns = deployment("web", "team-b", &[("app", "web")], 2);
        let table: [(&str, [bool; 3]); 6] = [
            // name set: labels ignored (case 1)
            (
                "{kind: PropagationPolicy, metadata: {namespace: team-a}, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web, labelSelector: {matchLabels: {app: api}}}]}}",
                [true, false, false],
            ),
            // label selector only (case 3)
            (
                "{kind: PropagationPolicy, metadata: {namespace: team-a}, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, labelSelector: {matchExpressions: [{key: app, operator: In, values: [api]}]}}]}}",
                [false, true, false],
            ),
            // neither: every Deployment of the namespace (case 4)
            (
                "{kind: PropagationPolicy, metadata: {namespace: team-a}, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]}}",
                [true, true, false],
            ),
            // another kind or version selects nothing
            (
                "{kind: PropagationPolicy, metadata: {namespace: team-a}, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: StatefulSet}, {apiVersion: extensions/v1beta1, kind: Deployment}]}}",
                [false, false, false],
            ),
            // a ClusterPropagationPolicy crosses namespaces, narrowed by a selector's namespace
            (
                "{kind: ClusterPropagationPolicy, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, name: web}]}}",
                [true, false, true],
            ),
            (
                "{kind: ClusterPropagationPolicy, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment, namespace: team-b}]}}",
                [false, false, true],
            ),
        ];
        for (yaml, want) in table {
            let p = policy(yaml);
            assert_eq!(
                [p.selects(&web), p.selects(&api), p.selects(&other_ns)],
                want,
                "{yaml}"
            );
        }
    }

    fn charged(p: &Policy, t: &Template, known: &[ClusterFacts]) -> (String, Vec<String>) {
        let spec = p.binding_for(t, known).unwrap();
        let usage = BindingCharge::compute(&spec, None)
            .scoped(&ScopeSelector::default())
            .unwrap();
        (
            usage.total.get("requests.cpu").unwrap().to_string(),
            spec.clusters.into_iter().map(|c| c.name).collect(),
        )
    }

    /// Duplicated charges replicas × the clusters it targets; Divided charges replicas once
    /// (Karmada's replica scheduling types, propagation_types.go; absent = Duplicated).
    #[test]
    fn placement_effect_on_the_charge() {
        let known = [
            cluster("member1", &[("env", "prod")], "eu"),
            cluster("member2", &[("env", "prod")], "us"),
            cluster("member3", &[("env", "dev")], "eu"),
        ];
        let web = deployment("web", "team-a", &[], 4); // 4 × 500m = 2 cpu
        let table: [(&str, &str, &[&str]); 7] = [
            // no replicaScheduling: Duplicated on every cluster
            ("{}", "6", &["member1", "member2", "member3"]),
            (
                "{clusterAffinity: {clusterNames: [member1, member3]}}",
                "4",
                &["member1", "member3"],
            ),
            (
                "{clusterAffinity: {labelSelector: {matchLabels: {env: prod}}}}",
                "4",
                &["member1", "member2"],
            ),
            (
                "{clusterAffinity: {fieldSelector: {matchExpressions: [{key: region, operator: In, values: [eu]}]}, exclude: [member3]}}",
                "2",
                &["member1"],
            ),
            // the first affinity group that matches any cluster
            (
                "{clusterAffinities: [{affinityName: gone, clusterNames: [member9]}, {affinityName: dev, labelSelector: {matchLabels: {env: dev}}}]}",
                "2",
                &["member3"],
            ),
            (
                "{spreadConstraints: [{spreadByField: cluster, maxGroups: 2}]}",
                "4",
                &["member1", "member2"],
            ),
            // Divided: once, the split is the scheduler's
            (
                "{clusterAffinity: {clusterNames: [member1, member2]}, replicaScheduling: {replicaSchedulingType: Divided}}",
                "2",
                &[],
            ),
        ];
        for (placement, cpu, clusters) in table {
            let p = policy(&format!(
                "{{kind: PropagationPolicy, metadata: {{namespace: team-a}}, spec: {{resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment}}], placement: {placement}}}}}"
            ));
            assert_eq!(
                charged(&p, &web, &known),
                (
                    cpu.to_owned(),
                    clusters.iter().map(|c| (*c).to_owned()).collect()
                ),
                "{placement}"
            );
        }
    }

    #[test]
    fn a_non_workload_is_one_object_wherever_it_goes() {
        let cm: Template = serde_saphyr::from_str(
            "{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: a}}",
        )
        .unwrap();
        let p = policy(
            "{kind: PropagationPolicy, metadata: {namespace: a}, spec: {resourceSelectors: [{apiVersion: v1, kind: ConfigMap}]}}",
        );
        let spec = p
            .binding_for(&cm, &[cluster("m1", &[], ""), cluster("m2", &[], "")])
            .unwrap();
        assert!(spec.clusters.is_empty());
        let usage = BindingCharge::compute(&spec, None)
            .scoped(&ScopeSelector::default())
            .unwrap();
        assert_eq!(usage.total.to_string(), "configmaps=1");
    }
}
