//! quota.karmada.io/v1alpha1 KarmadaClusterQuotaShare: a read-only, namespaced mirror of a
//! KarmadaClusterQuota, one in every namespace the cluster quota selects (OpenShift's
//! AppliedClusterResourceQuota in Karmada's terms), so a tenant with ordinary view rights
//! in its namespace reads the business quota that binds it without cluster-scoped rights.
//!
//! Written only by the controller ([`share_of`] is what it writes): the cluster quota's
//! spec, its totals over every namespace (`used`, `clusters`, `summary`, `conditions`) and
//! this namespace's share. Never another namespace's name, usage or reservation: pending
//! reservations are left out (their sum is in `used` once the controller observes their
//! bindings). Nothing reads a share to decide an admission: the webhook prices the cluster
//! quota itself.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{CustomResource, Resource, ResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::cluster_quota::{
    KarmadaClusterQuota, KarmadaClusterQuotaSpec, KarmadaClusterQuotaStatus,
};

/// The label naming the KarmadaClusterQuota a share mirrors (its value: the name).
pub const SHARE_OF_LABEL: &str = "quota.karmada.io/cluster-quota";

/// A KarmadaClusterQuota as seen from one namespace it selects.
// kube's repeated `printcolumn(...)` attributes are distinct columns, not duplicates.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "quota.karmada.io",
    version = "v1alpha1",
    kind = "KarmadaClusterQuotaShare",
    plural = "karmadaclusterquotashares",
    shortname = "kcqshare",
    category = "karmada-io",
    namespaced,
    status = "KarmadaClusterQuotaShareStatus",
    doc = "Read-only mirror, written by the karmada-quota controller, of the \
           KarmadaClusterQuota of the same name in a namespace it selects: its limits, its \
           usage summed over every namespace it selects, and this namespace's share.",
    printcolumn(
        name = "Total",
        type_ = "string",
        json_path = ".status.summary",
        description = "used/hard per resource, summed over every namespace the cluster quota selects"
    ),
    printcolumn(
        name = "This-Namespace",
        type_ = "string",
        json_path = ".status.namespaceSummary",
        description = "this namespace's usage per resource (its share of the total)"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KarmadaClusterQuotaShareSpec {
    /// The cluster quota's spec (`namespaceSelector`, `hard`, `scopeSelector`, policy), as
    /// it was when the controller last mirrored it.
    #[serde(flatten)]
    pub cluster_quota: KarmadaClusterQuotaSpec,
}

/// The cluster quota's status without its reservations, and with only this namespace in
/// `namespaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KarmadaClusterQuotaShareStatus {
    /// The cluster quota's totals (`hard`, `used`, `clusters`, `summary`, `conditions`,
    /// `observedGeneration`) and this namespace's entry of `namespaces`.
    #[serde(flatten)]
    pub cluster_quota: KarmadaClusterQuotaStatus,

    /// This namespace's usage per resource (`name: used`), for `kubectl get`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_summary: Option<String>,
}

/// What the controller writes in namespace `namespace` for cluster quota `cq`: its spec,
/// its status without reservations and other namespaces, labelled with [`SHARE_OF_LABEL`]
/// and owned by `cq` (so garbage collection removes it with the cluster quota).
pub fn share_of(cq: &KarmadaClusterQuota, namespace: &str) -> KarmadaClusterQuotaShare {
    let name = cq.name_any();
    let owner = cq.uid().map(|uid| OwnerReference {
        api_version: KarmadaClusterQuota::api_version(&()).into_owned(),
        kind: KarmadaClusterQuota::kind(&()).into_owned(),
        name: name.clone(),
        uid,
        ..OwnerReference::default()
    });
    let status = cq.status.as_ref().map(|s| {
        let mut quota = s.quota.clone();
        quota.reservations.clear();
        // The line: this namespace's waiting bindings only (their positions and the total
        // stay; another namespace's binding names never reach a share).
        if let Some(line) = quota.queue.as_mut() {
            line.waiting.retain(|w| w.namespace == namespace);
        }
        let namespaces: Vec<_> = s
            .namespaces
            .iter()
            .filter(|n| n.name == namespace)
            .cloned()
            .collect();
        let namespace_summary = namespaces.first().map(|n| {
            n.used
                .iter()
                .map(|(k, v)| format!("{k}: {}", v.0))
                .collect::<Vec<_>>()
                .join(", ")
        });
        KarmadaClusterQuotaShareStatus {
            cluster_quota: KarmadaClusterQuotaStatus { quota, namespaces },
            namespace_summary,
        }
    });
    KarmadaClusterQuotaShare {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(BTreeMap::from([(SHARE_OF_LABEL.to_owned(), name)])),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        spec: KarmadaClusterQuotaShareSpec {
            cluster_quota: cq.spec.clone(),
        },
        status,
    }
}

impl KarmadaClusterQuotaShare {
    /// The cluster quota as this share shows it (what a tenant may know of it): for the
    /// plugin's `top` and `check` when the cluster-scoped object is forbidden to read.
    pub fn as_cluster_quota(&self) -> KarmadaClusterQuota {
        KarmadaClusterQuota {
            metadata: ObjectMeta {
                name: self.metadata.name.clone(),
                labels: self.metadata.labels.clone(),
                ..ObjectMeta::default()
            },
            spec: self.spec.cluster_quota.clone(),
            status: self.status.as_ref().map(|s| s.cluster_quota.clone()),
        }
    }

    /// Whether `self` already says what `desired` says (spec, status, label, owner): the
    /// controller writes only when it does not.
    pub fn mirrors(&self, desired: &KarmadaClusterQuotaShare) -> bool {
        self.spec == desired.spec
            && self.status == desired.status
            && self.labels().get(SHARE_OF_LABEL) == desired.labels().get(SHARE_OF_LABEL)
            && self.owner_references() == desired.owner_references()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cluster_quota() -> KarmadaClusterQuota {
        serde_json::from_value(json!({
            "apiVersion": "quota.karmada.io/v1alpha1", "kind": "KarmadaClusterQuota",
            "metadata": {"name": "biz", "uid": "u-1", "resourceVersion": "7"},
            "spec": {"namespaceSelector": {"matchLabels": {"business": "a"}},
                     "hard": {"requests.cpu": "10"}},
            "status": {
                "hard": {"requests.cpu": "10"},
                "used": {"requests.cpu": "7"},
                "summary": "requests.cpu: 7/10",
                "reservations": [{"reservedBy": {"namespace": "team-b", "name": "secret-rb",
                                                 "uid": "u-2"},
                                  "generation": 1, "reserved": {"requests.cpu": "1"},
                                  "expirationTime": "2026-01-01T00:00:00Z"}],
                "namespaces": [{"name": "team-a", "used": {"requests.cpu": "2"}},
                               {"name": "team-b", "used": {"requests.cpu": "5"}}],
                "queue": {"total": 2, "waiting": [
                    {"position": 1, "namespace": "team-b", "name": "secret-waiting-rb",
                     "since": "2026-01-01T00:00:00Z"},
                    {"position": 2, "namespace": "team-a", "name": "own-rb",
                     "since": "2026-01-01T00:00:01Z"}]}
            }
        }))
        .unwrap()
    }

    #[test]
    fn a_share_carries_the_totals_and_its_namespace_and_nothing_of_another_namespace() {
        let share = share_of(&cluster_quota(), "team-a");
        assert_eq!(share.metadata.namespace.as_deref(), Some("team-a"));
        assert_eq!(share.metadata.name.as_deref(), Some("biz"));
        assert_eq!(
            share.labels().get(SHARE_OF_LABEL).map(String::as_str),
            Some("biz")
        );
        let owner = &share.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("KarmadaClusterQuota", "u-1")
        );
        let status = share.status.as_ref().unwrap();
        assert_eq!(status.cluster_quota.quota.used["requests.cpu"].0, "7");
        assert_eq!(status.namespace_summary.as_deref(), Some("requests.cpu: 2"));
        let text = serde_json::to_string(&share).unwrap();
        let line = status.cluster_quota.quota.queue.as_ref().unwrap();
        assert_eq!((line.total, line.waiting.len()), (2, 1));
        assert_eq!(
            (line.waiting[0].name.as_str(), line.waiting[0].position),
            ("own-rb", 2)
        );
        for secret in [
            "team-b",
            "secret-rb",
            "secret-waiting-rb",
            "u-2",
            "resourceVersion",
        ] {
            assert!(!text.contains(secret), "{secret} leaked into {text}");
        }
    }

    #[test]
    fn a_share_reads_back_as_the_cluster_quota_a_tenant_may_know() {
        let cq = cluster_quota();
        let back = share_of(&cq, "team-a").as_cluster_quota();
        assert_eq!(back.spec, cq.spec);
        assert_eq!(back.metadata.name.as_deref(), Some("biz"));
        let status = back.status.unwrap();
        assert_eq!(status.namespaces.len(), 1);
        assert_eq!(status.namespaces[0].name, "team-a");
        assert!(status.quota.reservations.is_empty());
    }

    #[test]
    fn a_share_mirrors_only_what_says_the_same() {
        let cq = cluster_quota();
        let desired = share_of(&cq, "team-a");
        let mut stored = desired.clone();
        stored.metadata.resource_version = Some("9".into());
        assert!(stored.mirrors(&desired));
        let mut moved = cq.clone();
        moved.status.as_mut().unwrap().namespaces[0].used = BTreeMap::from([(
            "requests.cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("3".into()),
        )]);
        assert!(!stored.mirrors(&share_of(&moved, "team-a")));
        let mut relimited = cq;
        relimited.spec.quota.hard.insert(
            "requests.memory".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1Gi".into()),
        );
        assert!(!stored.mirrors(&share_of(&relimited, "team-a")));
    }
}
