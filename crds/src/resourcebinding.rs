//! Karmada's ResourceBinding (work.karmada.io/v1alpha2) as a typed, tolerant view.

use std::borrow::Cow;

use karmada_quota_core::binding::ResourceBindingSpec;
use kube::core::{NamespaceResourceScope, ObjectMeta, Resource, TypeMeta};
use serde::{Deserialize, Serialize};

/// API group of ResourceBinding.
pub const GROUP: &str = "work.karmada.io";
/// API version of ResourceBinding.
pub const VERSION: &str = "v1alpha2";
/// `apiVersion` of ResourceBinding.
pub const API_VERSION: &str = "work.karmada.io/v1alpha2";
/// Kind.
pub const KIND: &str = "ResourceBinding";

/// A ResourceBinding: Karmada's record of one resource template and where it is placed.
/// Only `metadata` and the quota-relevant part of `spec` are read; `status` and unknown
/// fields are ignored (and so are not written back by anything in this project).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ResourceBinding {
    /// `apiVersion` and `kind`, when the object came with them.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub types: Option<TypeMeta>,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The quota-relevant part of the spec.
    #[serde(default)]
    pub spec: ResourceBindingSpec,
}

impl ResourceBinding {
    /// A binding with `apiVersion`/`kind` set, ready to be created.
    pub fn new(name: &str, spec: ResourceBindingSpec) -> Self {
        Self {
            types: Some(TypeMeta {
                api_version: API_VERSION.to_owned(),
                kind: KIND.to_owned(),
            }),
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }
}

impl Resource for ResourceBinding {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(KIND)
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(GROUP)
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(VERSION)
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed(API_VERSION)
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("resourcebindings")
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deserializes_karmada_json_ignoring_unknown_fields() {
        let rb: ResourceBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "work.karmada.io/v1alpha2",
            "kind": "ResourceBinding",
            "metadata": {"name": "web-deployment", "namespace": "team-a", "generation": 3},
            "spec": {
                "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                "replicas": 5,
                "replicaRequirements": {"resourceRequest": {"cpu": "500m"}, "nodeClaim": {}},
                "clusters": [{"name": "member1", "replicas": 3}],
                "placement": {"clusterAffinity": {}},
                "somethingNew": true
            },
            "status": {"conditions": []}
        }))
        .unwrap();
        assert_eq!(rb.metadata.generation, Some(3));
        assert_eq!(rb.spec.replicas, 5);
        assert_eq!(rb.spec.clusters[0].name, "member1");
        assert_eq!(rb.spec.resource.kind, "Deployment");
        let req = rb.spec.replica_requirements.unwrap();
        assert_eq!(
            req.resource_request.0.get("cpu").unwrap().to_string(),
            "500m"
        );
    }

    #[test]
    fn new_binding_serializes_with_api_version_and_kind() {
        let rb = ResourceBinding::new("x", ResourceBindingSpec::default());
        let v = serde_json::to_value(&rb).unwrap();
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(v["kind"], KIND);
        assert_eq!(v["metadata"]["name"], "x");
    }
}
