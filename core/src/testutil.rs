//! Fixture builders shared by the unit tests (`mk_*`), and the example objects of
//! `testdata/` at the repository root.

use std::collections::BTreeMap;

use crate::binding::{
    Component, ComponentReplicaRequirements, ObjectReference, ReplicaRequirements,
    ResourceBindingSpec, TargetCluster,
};
use crate::quantity::Quantity;
use crate::resources::ResourceList;
use crate::scope::{PRIORITY_CLASS, RawRequirement, ScopeSelector};
use crate::usage::{BindingCharge, builtin_plural, count_name};

/// Four example ResourceBindings (Divided, Duplicated, multi-component, non-workload).
pub const RESOURCEBINDINGS_YAML: &str = include_str!("../../testdata/resourcebindings.yaml");
/// An example KarmadaQuota with a full status.
pub const KARMADAQUOTA_YAML: &str = include_str!("../../testdata/karmadaquota.yaml");

pub fn q(s: &str) -> Quantity {
    Quantity::parse(s).expect("test quantity")
}

pub fn mk_list(entries: &[(&str, &str)]) -> ResourceList {
    ResourceList::parse_map(entries.iter().copied()).expect("test list")
}

/// A Deployment binding: `replicas` of `request` each, class, placement.
pub fn mk_deployment(
    replicas: i32,
    request: &[(&str, &str)],
    class: &str,
    clusters: &[(&str, i32)],
) -> ResourceBindingSpec {
    ResourceBindingSpec {
        resource: ObjectReference {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team-a".into(),
            name: "web".into(),
            ..Default::default()
        },
        replicas,
        replica_requirements: Some(ReplicaRequirements {
            resource_request: mk_list(request),
            priority_class_name: class.into(),
            ..Default::default()
        }),
        components: Vec::new(),
        clusters: clusters
            .iter()
            .map(|(name, replicas)| TargetCluster {
                name: (*name).into(),
                replicas: *replicas,
                ..Default::default()
            })
            .collect(),
        placement: None,
        ..Default::default()
    }
}

/// One component for [`mk_components`]: (name, replicas, request, class).
pub type ComponentFixture<'a> = (&'a str, i32, &'a [(&'a str, &'a str)], &'a str);

/// A multi-component binding.
pub fn mk_components(
    components: &[ComponentFixture<'_>],
    clusters: &[&str],
) -> ResourceBindingSpec {
    ResourceBindingSpec {
        resource: ObjectReference {
            api_version: "flink.apache.org/v1beta1".into(),
            kind: "FlinkDeployment".into(),
            name: "analytics".into(),
            ..Default::default()
        },
        components: components
            .iter()
            .map(|(name, replicas, request, class)| Component {
                name: (*name).into(),
                replicas: *replicas,
                replica_requirements: Some(ComponentReplicaRequirements {
                    resource_request: mk_list(request),
                    priority_class_name: (*class).into(),
                }),
            })
            .collect(),
        clusters: clusters
            .iter()
            .map(|name| TargetCluster {
                name: (*name).into(),
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The charge of `spec`, its count name resolved from the built-in table.
pub fn mk_charge(spec: &ResourceBindingSpec) -> BindingCharge {
    let r = &spec.resource;
    let count = builtin_plural(&r.api_version, &r.kind).map(|p| count_name(&r.api_version, p));
    BindingCharge::compute(spec, count.as_deref())
}

/// A single-cpu-request Deployment charge: `replicas` × `cpu`, no placement.
pub fn mk_cpu_charge(replicas: i32, cpu: &str) -> BindingCharge {
    mk_charge(&mk_deployment(replicas, &[("cpu", cpu)], "", &[]))
}

#[derive(serde::Deserialize)]
pub struct Metadata {
    pub name: String,
}

#[derive(serde::Deserialize)]
pub struct ExampleBinding {
    pub metadata: Metadata,
    pub spec: ResourceBindingSpec,
}

/// The four example bindings, by metadata.name.
pub fn example_bindings() -> BTreeMap<String, ResourceBindingSpec> {
    let docs: Vec<ExampleBinding> =
        serde_saphyr::from_multiple(RESOURCEBINDINGS_YAML).expect("example parses");
    docs.into_iter()
        .map(|d| (d.metadata.name, d.spec))
        .collect()
}

/// The charge of one example binding.
pub fn example_charge(name: &str) -> BindingCharge {
    let bindings = example_bindings();
    mk_charge(bindings.get(name).expect("example binding"))
}

/// A one-requirement PriorityClass scope, e.g. `mk_scope("NotIn", &["batch"])`.
pub fn mk_scope(operator: &str, values: &[&str]) -> ScopeSelector {
    let values: Vec<String> = values.iter().map(|v| (*v).to_owned()).collect();
    let raw = [RawRequirement {
        scope_name: PRIORITY_CLASS,
        operator,
        values: &values,
    }];
    ScopeSelector::parse(&raw, "spec.scopeSelector").expect("valid scope")
}
