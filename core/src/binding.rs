//! A typed, tolerant view of Karmada's ResourceBinding (work.karmada.io/v1alpha2).
//!
//! Field names exactly as Karmada's `pkg/apis/work/v1alpha2/binding_types.go`; unknown
//! fields are ignored, absent fields default (Karmada omits `replicas` when it is 0), and
//! its `int32` fields read any integer, saturated ([`crate::int32`]).

use crate::placement::Placement;
use crate::resources::ResourceList;

/// `spec` of a ResourceBinding: only the fields quota needs.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ResourceBindingSpec {
    /// The resource template this binding propagates.
    pub resource: ObjectReference,
    /// Desired replicas of the template (0/absent for non-workloads).
    #[serde(deserialize_with = "crate::int32::saturating")]
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
    /// Failover: members Karmada moved the workload off whose old replicas may still run
    /// there until the eviction completes (`spec.gracefulEvictionTasks`; see
    /// [`crate::failover`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub graceful_eviction_tasks: Vec<GracefulEvictionTask>,
    /// `spec.suspension`: only `scheduling` is read (since Karmada v1.13 the scheduler
    /// does not place a binding whose scheduling is suspended; see [`crate::queue`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suspension: Option<Suspension>,
    /// `spec.schedulePriority`, which the detector copies from the policy's priority
    /// class: the order of a quota's waiting line ([`crate::queue`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_priority: Option<SchedulePriority>,
}

/// `spec.suspension` of a ResourceBinding (the policy's part, `dispatching`, is not read).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Suspension {
    /// `true`: the scheduler leaves the binding alone until it is cleared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scheduling: Option<bool>,
}

/// `spec.schedulePriority` of a ResourceBinding.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SchedulePriority {
    /// Higher values first; 0 when absent.
    #[serde(deserialize_with = "crate::int32::saturating")]
    pub priority: i32,
}

/// `spec.gracefulEvictionTasks[]`: a member Karmada evicted the workload from (its
/// taint manager on a failed member, an application failover, a manual eviction). The
/// member left `spec.clusters`; its old replicas are kept until the workload is healthy
/// on its new members or the grace period ends (`--graceful-eviction-timeout`, 10 min by
/// default), for ever with `purgeMode: Never` or `suppressDeletion`.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GracefulEvictionTask {
    /// The member the workload is evicted from.
    pub from_cluster: String,
    /// Replicas that ran in `fromCluster` when it was evicted. Karmada sets it whenever
    /// that member held replicas of a single-template workload; absent otherwise (a
    /// non-workload, a multi-template workload, or a producer that did not say).
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::int32::saturating_option"
    )]
    pub replicas: Option<i32>,
    /// `Directly`, `Gracefully` or `Never`.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub purge_mode: String,
    /// Programmatic reason (e.g. `TaintUntolerated`, `ApplicationFailure`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// Human-readable details.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The controller that created the task.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub producer: String,
    /// Longest wait before the old replicas are removed (overrides Karmada's timeout).
    #[serde(
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::int32::saturating_option"
    )]
    pub grace_period_seconds: Option<i32>,
    /// The old replicas are kept until someone stops it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub suppress_deletion: Option<bool>,
    /// When the task was created (RFC 3339), as Karmada wrote it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<String>,
    /// The members the workload ran on before the failover.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub clusters_before_failover: Vec<String>,
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
    #[serde(deserialize_with = "crate::int32::saturating")]
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
    #[serde(deserialize_with = "crate::int32::saturating")]
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
    #[serde(deserialize_with = "crate::int32::saturating")]
    pub replicas: i32,
}
