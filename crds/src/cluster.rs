//! Karmada's Cluster (cluster.karmada.io/v1alpha1), reduced to how to reach the member.

use std::borrow::Cow;

use kube::core::{ClusterResourceScope, ObjectMeta, Resource, TypeMeta};
use serde::{Deserialize, Serialize};

/// A Karmada member cluster. In a real Karmada the API is served by
/// karmada-aggregated-apiserver; tests use a stand-in CRD with the same fields.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Cluster {
    /// `apiVersion` and `kind`, when the object came with them.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub types: Option<TypeMeta>,
    /// Standard object metadata; the name is the member cluster's name in bindings.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// How to reach the member.
    #[serde(default)]
    pub spec: ClusterSpec,
}

/// The part of a Cluster's spec needed to read the member's pods.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct ClusterSpec {
    /// `Push` or `Pull`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sync_mode: Option<String>,
    /// The member's API server URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,
    /// A Secret (in the Karmada control plane) holding `token` and `caBundle`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalSecretReference>,
    /// Skip TLS verification of the member's API server (not recommended). Karmada spells
    /// it `insecureSkipTLSVerification`, which camelCase would not.
    #[serde(rename = "insecureSkipTLSVerification")]
    pub insecure_skip_tls_verification: bool,
}

/// Namespace and name of a Secret.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LocalSecretReference {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
}

impl Resource for Cluster {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("Cluster")
    }
    fn group(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("cluster.karmada.io")
    }
    fn version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("v1alpha1")
    }
    fn api_version(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("cluster.karmada.io/v1alpha1")
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Cow::Borrowed("clusters")
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
    fn reads_karmadas_field_names() {
        let cluster: Cluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.karmada.io/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "member1"},
            "spec": {
                "syncMode": "Push",
                "apiEndpoint": "https://127.0.0.1:6443",
                "secretRef": {"namespace": "karmada-cluster", "name": "member1"},
                "insecureSkipTLSVerification": true,
                "taints": []
            }
        }))
        .unwrap();
        let spec = &cluster.spec;
        assert_eq!(spec.sync_mode.as_deref(), Some("Push"));
        assert_eq!(spec.api_endpoint.as_deref(), Some("https://127.0.0.1:6443"));
        let secret = spec.secret_ref.as_ref().unwrap();
        assert_eq!(
            (&*secret.namespace, &*secret.name),
            ("karmada-cluster", "member1")
        );
        assert!(spec.insecure_skip_tls_verification);
        let back = serde_json::to_value(spec).unwrap();
        assert_eq!(back["insecureSkipTLSVerification"], true);
    }
}
