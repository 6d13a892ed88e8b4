//! quota.karmada.io/v1alpha1 KarmadaQuota: one global quota per namespace across every
//! member cluster of a Karmada control plane.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of KarmadaQuota.
pub const GROUP: &str = "quota.karmada.io";
/// API version of KarmadaQuota.
pub const VERSION: &str = "v1alpha1";

/// Condition type: status reflects the current spec and bindings.
pub const CONDITION_READY: &str = "Ready";
/// Condition type: a member cluster runs more than Karmada placed there.
pub const CONDITION_DRIFT: &str = "Drift";
/// Condition type: a member cluster could not be read.
pub const CONDITION_MEMBERS_REACHABLE: &str = "MembersReachable";

/// Global hard limits for a namespace, enforced on every ResourceBinding across all
/// member clusters.
// kube's repeated `printcolumn(...)` attributes are distinct columns, not duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "quota.karmada.io",
    version = "v1alpha1",
    kind = "KarmadaQuota",
    plural = "karmadaquotas",
    shortname = "kquota",
    category = "karmada-io",
    namespaced,
    status = "KarmadaQuotaStatus",
    doc = "One global quota for a namespace of a Karmada control plane: hard limits on the \
           sum of requests of all ResourceBindings, across every member cluster.",
    printcolumn(
        name = "Usage",
        type_ = "string",
        json_path = ".status.summary",
        description = "used/hard per resource, summed over member clusters"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Drift",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Drift\")].status",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KarmadaQuotaSpec {
    /// The global limits: resource name → quantity, summed over all member clusters.
    /// Names: `requests.cpu`/`cpu`, `requests.memory`/`memory`,
    /// `requests.ephemeral-storage`, `hugepages-<size>`, `requests.<extended>` (e.g.
    /// `requests.nvidia.com/gpu`), `pods`, `count/<plural>[.<group>]` and the legacy object
    /// counts. `limits.*` is refused: a ResourceBinding carries requests only.
    #[schemars(schema_with = "resource_map")]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hard: BTreeMap<String, Quantity>,

    /// Restricts the quota to bindings whose PriorityClass matches all expressions.
    /// Absent: the quota applies to every binding in the namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope_selector: Option<ScopeSelector>,

    /// Whether what the member clusters run counts at admission. `Enforce` (absent): while
    /// the pods the members observe exceed `hard` for a resource (pods made around Karmada,
    /// a workload nothing counts), admissions that increase it are refused, naming the
    /// drift per member. `Ignore`: only the Drift condition reports it (for federations
    /// that run pods outside Karmada on purpose).
    #[schemars(extend("enum" = ["Enforce", "Ignore"]))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_limit: Option<String>,

    /// A binding whose template runs pods but carries no replica requirements (a
    /// DaemonSet, ReplicaSet, CronJob, or a custom kind Karmada has no interpreter for),
    /// when this quota tracks compute: `Deny` (refused, naming the kind), `Observed`
    /// (admitted, and charged in `used` by the pods the members run for it) or `Allow`
    /// (admitted with its object count only). Absent: the webhook's
    /// `--unaccounted-workloads` (default `Deny`).
    #[schemars(extend("enum" = ["Deny", "Observed", "Allow"]))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unaccounted_workloads: Option<String>,

    /// Failover: replicas Karmada left draining in a member it moved a workload off
    /// (the binding's `gracefulEvictionTasks`), until the eviction completes. `Show`
    /// (absent): listed per member in `status.clusters[].draining`, not counted.
    /// `Count`: also added to `used` while they drain, so other increases are refused
    /// until the old replicas are gone. Either way the failover itself is never refused
    /// (the binding's charge does not change).
    #[schemars(extend("enum" = ["Show", "Count"]))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining_replicas: Option<String>,

    /// What happens to a ResourceBinding that does not fit (docs/queueing.md). Absent:
    /// it is refused, as always.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionSpec>,
}

/// `spec.admission`: refuse what does not fit, or hold it in a waiting line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionSpec {
    /// `Refuse` (absent): a binding that does not fit is refused. `Queue`: it is admitted
    /// with its scheduling suspended (Karmada's scheduler leaves it alone), charged
    /// nothing, and released — in `order` — once it fits.
    #[schemars(extend("enum" = ["Refuse", "Queue"]))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    /// The line's order: by `spec.schedulePriority` (higher first), then arrival.
    /// `BestEffortFIFO` (absent): a later binding that fits may start while the head does
    /// not. `StrictFIFO`: nothing passes the head.
    #[schemars(extend("enum" = ["StrictFIFO", "BestEffortFIFO"]))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
}

/// A conjunction of scope requirements (Kubernetes' ScopeSelector).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScopeSelector {
    /// All expressions must match (at most 32).
    // The bound keeps the apiserver's cost estimate of each expression's validation rule
    // small (MAX_SCOPE_EXPRESSIONS).
    #[schemars(length(max = MAX_SCOPE_EXPRESSIONS))]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<ScopedResourceSelectorRequirement>,
}

/// Most expressions a scope selector takes (its schema's `maxItems`).
pub const MAX_SCOPE_EXPRESSIONS: usize = 32;

/// One scope requirement: `{scopeName: PriorityClass, operator, values}`.
// The schema says what the webhook checks (core's `ScopeSelector::parse`) as far as a
// schema can: the scope and operator enums, non-empty class names, and a validation rule
// (CEL, evaluated by apiservers 1.25+) for the values each operator takes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",
    "message": "values: In and NotIn need at least one PriorityClass name; Exists and DoesNotExist take none"
}]))]
pub struct ScopedResourceSelectorRequirement {
    /// The scope; only `PriorityClass` is supported.
    #[schemars(extend("enum" = ["PriorityClass"]))]
    pub scope_name: String,
    /// `In` and `NotIn` need values; `Exists` and `DoesNotExist` take none.
    #[schemars(extend("enum" = ["In", "NotIn", "Exists", "DoesNotExist"]))]
    pub operator: String,
    /// PriorityClass names for `In`/`NotIn`, none empty.
    #[schemars(schema_with = "class_names")]
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// PriorityClass names: strings, none empty.
fn class_names(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "array",
        "items": {"type": "string", "minLength": 1}
    })
}

/// Observed state, written by the controller (used, clusters, pruning) and the webhook
/// (new reservations), both with compare-and-swap on resourceVersion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KarmadaQuotaStatus {
    /// The limits in force (mirrors spec.hard once the controller has seen it).
    #[schemars(schema_with = "resource_map")]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hard: BTreeMap<String, Quantity>,

    /// Usage of all observed ResourceBindings, summed over clusters. A name missing here
    /// means usage is not known yet: the webhook refuses increases of it
    /// (`status unknown for quota`).
    #[schemars(schema_with = "resource_map")]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub used: BTreeMap<String, Quantity>,

    /// Admitted changes the controller has not observed yet. Effective usage is used + Σ
    /// reservations.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reservations: Vec<Reservation>,

    /// Usage per member cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterUsage>,

    /// `used/hard` per resource, for `kubectl get kquota`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,

    /// Ready, Drift, MembersReachable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,

    /// The spec generation the status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The newest reservation batch (KarmadaQuotaReservation) this status accounts for:
    /// every entry naming this quota in a batch numbered up to it is in `used` or carried
    /// into `reservations`. Written by the controller; absent: none yet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "sequence_number")]
    pub folded_through: Option<u64>,

    /// The waiting line (`spec.admission.mode: Queue`): bindings admitted suspended
    /// until they fit, in order; written by the controller. Absent: nobody waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueStatus>,
}

/// `status.queue`: the first bindings of the line, and how many wait in all.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// Bindings waiting in this quota's line (all of them; `waiting` may list fewer).
    pub total: i64,
    /// The head of the line, in order (at most 20).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting: Vec<WaitingBinding>,
}

/// One waiting binding.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WaitingBinding {
    /// 1-based place in the line.
    pub position: i64,
    /// The binding's namespace (a KarmadaClusterQuota's line spans namespaces).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// The ResourceBinding's name.
    pub name: String,
    /// Its `spec.schedulePriority.priority`.
    #[serde(default)]
    pub priority: i32,
    /// What it asks of this quota.
    #[schemars(schema_with = "resource_map")]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub asks: BTreeMap<String, Quantity>,
    /// What this quota lacks for it now (empty: it fits here, and waits for another
    /// quota or for those ahead of it).
    #[schemars(schema_with = "resource_map")]
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub short: BTreeMap<String, Quantity>,
    /// When it joined the line.
    pub since: Time,
    /// Why it cannot be released whatever room there is (e.g. a request the quota now
    /// requires), when that is so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stuck: Option<String>,
}

/// An admitted change not yet observed by the controller.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// The ResourceBinding the entry was admitted for.
    pub reserved_by: ReservedBy,
    /// The binding's metadata.generation at admission; (uid, generation) is the key.
    pub generation: i64,
    /// The admitted increase.
    #[schemars(schema_with = "resource_map")]
    pub reserved: BTreeMap<String, Quantity>,
    /// When the entry lapses if the controller never observes the binding.
    pub expiration_time: Time,
}

/// Reference to the object holding a reservation.
///
/// Compact on the wire: `apiVersion` and `kind` are left out when they are a
/// ResourceBinding's (every entry the webhook writes), and read back as such when absent.
/// Every status write carries every entry, so each byte of an entry is paid on every
/// write (docs/design.md §5).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservedBy {
    /// `work.karmada.io/v1alpha2` (the default when absent).
    #[serde(
        default = "binding_api_version",
        skip_serializing_if = "is_binding_api_version"
    )]
    pub api_version: String,
    /// `ResourceBinding` (the default when absent).
    #[serde(default = "binding_kind", skip_serializing_if = "is_binding_kind")]
    pub kind: String,
    /// Namespace of the binding: set in a KarmadaClusterQuota's entries (they come from
    /// several namespaces), absent in a KarmadaQuota's (its own namespace).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// Name of the binding.
    pub name: String,
    /// UID of the binding.
    pub uid: String,
}

impl Default for ReservedBy {
    /// A ResourceBinding's reference with no name or uid yet.
    fn default() -> Self {
        Self {
            api_version: binding_api_version(),
            kind: binding_kind(),
            namespace: String::new(),
            name: String::new(),
            uid: String::new(),
        }
    }
}

/// `work.karmada.io/v1alpha2`: the `apiVersion` of an entry that names none.
fn binding_api_version() -> String {
    crate::resourcebinding::API_VERSION.to_owned()
}

/// `ResourceBinding`: the `kind` of an entry that names none.
fn binding_kind() -> String {
    crate::resourcebinding::KIND.to_owned()
}

fn is_binding_api_version(v: &str) -> bool {
    v == crate::resourcebinding::API_VERSION
}

fn is_binding_kind(v: &str) -> bool {
    v == crate::resourcebinding::KIND
}

/// Usage in one member cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterUsage {
    /// Member cluster name.
    pub name: String,
    /// Usage Karmada placed there (from ResourceBindings).
    #[schemars(schema_with = "resource_map")]
    #[serde(default)]
    pub used: BTreeMap<String, Quantity>,
    /// Usage measured in the member cluster (non-terminal pods' requests), when known.
    #[schemars(schema_with = "optional_resource_map")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed: Option<BTreeMap<String, Quantity>>,
    /// Failover: usage of replicas still draining in this member after Karmada moved
    /// workloads off it (their bindings' `gracefulEvictionTasks`); absent when nothing
    /// drains. Counted in `used` only under `spec.drainingReplicas: Count`.
    #[schemars(schema_with = "optional_resource_map")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draining: Option<BTreeMap<String, Quantity>>,
    /// A graceful-eviction task drains replicas of unknown count in this member (it names
    /// none): they are in neither `draining` nor `used`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub draining_unknown: bool,
}

/// Kubernetes' quantity syntax, as its own ResourceQuota schema states it.
const QUANTITY_PATTERN: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A resource list: name → quantity (a string, or a number).
pub(crate) fn resource_map(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "additionalProperties": {
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
            "x-kubernetes-int-or-string": true
        }
    })
}

/// A reservation batch's sequence number: a plain integer (no `minimum`, which helm's
/// `toYaml` would print as `0` where the generated CRD has `0.0`).
fn sequence_number(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "format": "int64"})
}

/// A resource list that may be absent.
fn optional_resource_map(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut s = resource_map(g);
    s.insert("nullable".to_owned(), true.into());
    s
}
