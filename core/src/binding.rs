//! A typed, tolerant view of Karmada's ResourceBinding (work.karmada.io/v1alpha2).
//!
//! Field names exactly as Karmada's `pkg/apis/work/v1alpha2/binding_types.go`; unknown
//! fields are ignored, absent fields default (Karmada omits `replicas` when it is 0).

use crate::placement::Placement;
use crate::resources::ResourceList;

/// `spec` of a ResourceBinding: only the fields quota needs.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceBindingSpec {
    /// The resource template this binding propagates.
    pub resource: ObjectReference,
    /// Desired replicas of the template (0/absent for non-workloads).
    pub replicas: i32,
    /// Per-replica requirements of a single-component workload.
    pub replica_requirements: Option<ReplicaRequirements>,
    /// Components of a multi-component workload (e.g. a FlinkDeployment).
    pub components: Vec<Component>,
    /// Scheduling result: target clusters and their replicas.
    pub clusters: Vec<TargetCluster>,
    /// The placement Karmada copied from the policy (how many clusters a Duplicated
    /// workload will run on, before the scheduler fills `clusters`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

/// Reference to the resource template (`spec.resource`).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ObjectReference {
    /// e.g. `apps/v1`, `v1`.
    pub api_version: String,
    /// e.g. `Deployment`.
    pub kind: String,
    /// Namespace of the template.
    pub namespace: String,
    /// Name of the template.
    pub name: String,
    /// UID of the template.
    pub uid: String,
    /// resourceVersion of the template.
    pub resource_version: String,
}

/// `spec.replicaRequirements`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ReplicaRequirements {
    /// Requests of one replica.
    pub resource_request: ResourceList,
    /// The workload's PriorityClass (scope matching).
    pub priority_class_name: String,
    /// Namespace of the workload (informational).
    pub namespace: String,
}

/// `spec.components[]`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Component {
    /// Component name, unique within the binding.
    pub name: String,
    /// Replicas of this component.
    pub replicas: i32,
    /// Per-replica requirements of this component.
    pub replica_requirements: Option<ComponentReplicaRequirements>,
}

/// `spec.components[].replicaRequirements`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ComponentReplicaRequirements {
    /// Requests of one replica of the component.
    pub resource_request: ResourceList,
    /// The component's PriorityClass.
    pub priority_class_name: String,
}

/// `spec.clusters[]`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct TargetCluster {
    /// Member cluster name.
    pub name: String,
    /// Replicas placed there (0/absent for non-workloads or Duplicated without count).
    pub replicas: i32,
    /// Per-cluster component replicas, when the scheduler split components.
    pub components: Vec<ComponentReplicas>,
}

/// `spec.clusters[].components[]`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ComponentReplicas {
    /// Component name (matches `spec.components[].name`).
    pub name: String,
    /// Replicas of that component in this cluster.
    pub replicas: i32,
}
