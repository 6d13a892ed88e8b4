//! quota.karmada.io/v1alpha1 KarmadaClusterQuota: one quota for a whole business — every
//! namespace its `spec.namespaceSelector` matches — across every member cluster.
//!
//! The spec and status are a KarmadaQuota's ([`KarmadaQuotaSpec`], [`KarmadaQuotaStatus`],
//! flattened: the same fields at the same paths) plus the namespace selector and the usage
//! per selected namespace, so the engine, the status writer and the controller treat both
//! kinds alike (`crate::object::QuotaObject`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::quota::{KarmadaQuotaSpec, KarmadaQuotaStatus};

/// Global hard limits for the namespaces a label selector matches, enforced on every
/// ResourceBinding in them across all member clusters.
// kube's repeated `printcolumn(...)` attributes are distinct columns, not duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "quota.karmada.io",
    version = "v1alpha1",
    kind = "KarmadaClusterQuota",
    plural = "karmadaclusterquotas",
    shortname = "kcquota",
    category = "karmada-io",
    status = "KarmadaClusterQuotaStatus",
    doc = "One global quota for several namespaces of a Karmada control plane (those its \
           namespaceSelector matches): hard limits on the sum of requests of all their \
           ResourceBindings, across every member cluster.",
    printcolumn(
        name = "Usage",
        type_ = "string",
        json_path = ".status.summary",
        description = "used/hard per resource, summed over namespaces and member clusters"
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
#[schemars(transform = selector_required)]
pub struct KarmadaClusterQuotaSpec {
    /// The namespaces the quota covers: those whose labels match. Required, and not empty
    /// (an empty selector would select every namespace). A namespace relabelled into or
    /// out of it moves its usage at the controller's next reconcile; what was admitted
    /// stays admitted.
    // Optional in Rust so that an object without it still decodes and the webhook can
    // name the field; required and not nullable in the schema (`selector_schema`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "selector_schema")]
    pub namespace_selector: Option<LabelSelector>,

    /// `hard` and `scopeSelector`, exactly as in a KarmadaQuota.
    #[serde(flatten)]
    pub quota: KarmadaQuotaSpec,
}

/// Observed state: a KarmadaQuota's status (used, reservations, clusters, conditions,
/// summary), summed over the selected namespaces, plus the usage of each.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KarmadaClusterQuotaStatus {
    /// The fields of a KarmadaQuota's status, at the same paths.
    #[serde(flatten)]
    pub quota: KarmadaQuotaStatus,

    /// Usage per selected namespace (every hard name, 0 when nothing uses it), sorted by
    /// namespace; written by the controller.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<NamespaceUsage>,
}

/// One selected namespace's usage.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceUsage {
    /// The namespace.
    pub name: String,
    /// Usage of its ResourceBindings, summed over member clusters.
    #[schemars(schema_with = "crate::quota::resource_map")]
    #[serde(default)]
    pub used: BTreeMap<String, Quantity>,
}

/// A LabelSelector's schema, not an `Option`'s: the generator marks an `Option` field
/// `nullable` after every container transform, and `null` must not pass the apiserver.
/// Plus what the webhook checks (core's `validate_namespace_selector`) as far as a schema
/// can: the operator enum, at most [`MAX_SELECTOR_EXPRESSIONS`] expressions (which keeps
/// the apiserver's cost estimate of their rule small), and validation rules (CEL,
/// evaluated by apiservers 1.25+) for a selector that is not empty and for the values
/// each operator takes. Label key and value syntax stays the webhook's: a regular
/// expression over every value of every expression would exceed the apiserver's cost
/// budget for a rule.
fn selector_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = g.subschema_for::<LabelSelector>();
    let top = schema.ensure_object();
    top.insert(
        "x-kubernetes-validations".to_owned(),
        serde_json::json!([{
            "rule": "(has(self.matchLabels) && size(self.matchLabels) > 0) || (has(self.matchExpressions) && size(self.matchExpressions) > 0)",
            "message": "an empty selector would select every namespace; name the labels of the namespaces this quota covers"
        }]),
    );
    let expressions = top
        .get_mut("properties")
        .and_then(|p| p.get_mut("matchExpressions"))
        .and_then(serde_json::Value::as_object_mut)
        .expect("LabelSelector's schema is inlined with its matchExpressions");
    expressions.insert("maxItems".to_owned(), MAX_SELECTOR_EXPRESSIONS.into());
    let item = expressions
        .get_mut("items")
        .and_then(serde_json::Value::as_object_mut)
        .expect("matchExpressions has an items schema");
    item.insert(
        "x-kubernetes-validations".to_owned(),
        serde_json::json!([{
            "rule": "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",
            "message": "values: must be specified when operator is In or NotIn, and may not be when it is Exists or DoesNotExist"
        }]),
    );
    item["properties"]["operator"]["enum"] =
        serde_json::json!(["In", "NotIn", "Exists", "DoesNotExist"]);
    schema
}

/// Most expressions a namespace selector takes (its schema's `maxItems`).
pub const MAX_SELECTOR_EXPRESSIONS: usize = 64;

/// The schema requires `namespaceSelector` (not nullable: [`selector_schema`]).
fn selector_required(schema: &mut schemars::Schema) {
    let required = schema
        .ensure_object()
        .entry("required")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()));
    if let Some(list) = required.as_array_mut() {
        list.insert(0, "namespaceSelector".into());
    }
}
