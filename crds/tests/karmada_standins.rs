//! The stand-in CRDs of `crds/karmada/` against the typed views: the same group, version,
//! kind, plural and scope; every field a view reads is typed in the schema; and every
//! schema is one kube-apiserver 1.20 serves (structural, no CEL).

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use karmada_quota_core::binding::{
    Component, ComponentReplicaRequirements, ComponentReplicas, GracefulEvictionTask,
    ObjectReference, ReplicaRequirements, ResourceBindingSpec, TargetCluster,
};
use karmada_quota_core::placement::{
    ClusterAffinity, ClusterAffinityTerm, FieldSelector, LabelSelector, Placement,
    ReplicaScheduling, SelectorRequirement, SpreadConstraint,
};
use karmada_quota_core::{Quantity, ResourceList};
use karmada_quota_crds::cluster::{ClusterSpec, LocalSecretReference};
use karmada_quota_crds::{Cluster, ResourceBinding};
use kube::Resource;
use serde_json::Value;

/// Every stand-in: file name, whether Karmada's API has a status subresource.
const STANDINS: [(&str, bool); 5] = [
    ("work.karmada.io_resourcebindings.yaml", true),
    ("work.karmada.io_clusterresourcebindings.yaml", true),
    ("cluster.karmada.io_clusters.yaml", true),
    ("policy.karmada.io_propagationpolicies.yaml", false),
    ("policy.karmada.io_clusterpropagationpolicies.yaml", false),
];

fn standin_path(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("karmada")
        .join(file)
}

fn read_json(file: &str) -> Value {
    let path = standin_path(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn read_crd(file: &str) -> CustomResourceDefinition {
    serde_json::from_value(read_json(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The one version of `crd`, served and stored, and its `openAPIV3Schema` as JSON.
fn only_version(file: &str) -> (String, Value) {
    let json = read_json(file);
    let versions = json["spec"]["versions"].as_array().expect("spec.versions");
    assert_eq!(versions.len(), 1, "{file}: one version");
    let v = &versions[0];
    assert_eq!(v["served"], true, "{file}: served");
    assert_eq!(v["storage"], true, "{file}: stored");
    (
        v["name"].as_str().expect("version name").to_owned(),
        v["schema"]["openAPIV3Schema"].clone(),
    )
}

/// Asserts `file` serves exactly the API of the typed view `K`.
fn assert_same_api<K: Resource<DynamicType = ()>>(file: &str, scope: &str) {
    let crd = read_crd(file);
    let (version, _) = only_version(file);
    assert_eq!(crd.spec.group, K::group(&()), "{file}: group");
    assert_eq!(version, K::version(&()), "{file}: version");
    assert_eq!(crd.spec.names.kind, K::kind(&()), "{file}: kind");
    assert_eq!(crd.spec.names.plural, K::plural(&()), "{file}: plural");
    assert_eq!(crd.spec.scope, scope, "{file}: scope");
}

#[test]
fn standins_serve_the_apis_of_the_typed_views() {
    assert_same_api::<ResourceBinding>("work.karmada.io_resourcebindings.yaml", "Namespaced");
    assert_same_api::<Cluster>("cluster.karmada.io_clusters.yaml", "Cluster");
}

#[test]
fn standins_are_named_and_scoped_like_karmadas() {
    let want = [
        ("ResourceBinding", "Namespaced", "v1alpha2"),
        ("ClusterResourceBinding", "Cluster", "v1alpha2"),
        ("Cluster", "Cluster", "v1alpha1"),
        ("PropagationPolicy", "Namespaced", "v1alpha1"),
        ("ClusterPropagationPolicy", "Cluster", "v1alpha1"),
    ];
    for ((file, _), (kind, scope, version)) in STANDINS.iter().zip(want) {
        let crd = read_crd(file);
        let names = &crd.spec.names;
        assert_eq!(names.kind, kind, "{file}");
        assert_eq!(crd.spec.scope, scope, "{file}");
        assert_eq!(only_version(file).0, version, "{file}");
        assert_eq!(names.list_kind.as_deref(), Some(&*format!("{kind}List")));
        assert_eq!(names.singular.as_deref(), Some(&*kind.to_lowercase()));
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some(&*format!("{}.{}", names.plural, crd.spec.group)),
            "{file}: metadata.name is <plural>.<group>"
        );
        assert_eq!(
            *file,
            format!("{}_{}.yaml", crd.spec.group, names.plural),
            "file named <group>_<plural>.yaml"
        );
    }
}

#[test]
fn status_subresource_where_karmada_has_one() {
    for (file, status) in STANDINS {
        let crd = read_crd(file);
        let has = crd.spec.versions[0]
            .subresources
            .as_ref()
            .and_then(|s| s.status.as_ref())
            .is_some();
        assert_eq!(has, status, "{file}: status subresource");
    }
}

/// Structural (every node has a type, or is int-or-string, or keeps unknown fields), and
/// no CEL (`x-kubernetes-validations`, which 1.20 silently drops).
fn assert_structural(file: &str, path: &str, node: &Value) {
    let obj = node
        .as_object()
        .unwrap_or_else(|| panic!("{file}: {path} is not an object"));
    assert!(
        !obj.contains_key("x-kubernetes-validations"),
        "{file}: {path} uses CEL"
    );
    assert!(
        obj.contains_key("type")
            || obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
            || obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true)),
        "{file}: {path} has no type"
    );
    for (name, child) in obj
        .get("properties")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
    {
        assert_structural(file, &format!("{path}.{name}"), child);
    }
    for (key, suffix) in [("items", "[]"), ("additionalProperties", "{}")] {
        if let Some(child) = obj.get(key).filter(|c| c.is_object()) {
            assert_structural(file, &format!("{path}{suffix}"), child);
        }
    }
}

#[test]
fn schemas_are_structural_without_cel() {
    for (file, _) in STANDINS {
        let (_, schema) = only_version(file);
        assert_eq!(schema["type"], "object", "{file}: root type");
        assert_structural(file, "", &schema);
        assert_eq!(
            schema["properties"]["status"]["x-kubernetes-preserve-unknown-fields"],
            if STANDINS.iter().any(|(f, s)| *f == file && *s) {
                Value::Bool(true)
            } else {
                Value::Null
            },
            "{file}: status kept as written where there is one"
        );
    }
}

/// Asserts every field of `value` (a view, serialized with every field set) is typed in
/// `schema`; a field the schema only keeps as an unknown field would go unchecked.
fn assert_typed(file: &str, path: &str, schema: &Value, value: &Value) {
    match value {
        Value::Object(fields) => {
            for (name, v) in fields {
                let child = schema["properties"]
                    .get(name)
                    .or_else(|| schema.get("additionalProperties"))
                    .unwrap_or_else(|| panic!("{file}: {path}.{name} is not typed"));
                assert_typed(file, &format!("{path}.{name}"), child, v);
            }
        }
        Value::Array(items) => {
            for v in items {
                assert_typed(file, &format!("{path}[]"), &schema["items"], v);
            }
        }
        Value::String(_) => assert!(
            schema["type"] == "string" || schema["x-kubernetes-int-or-string"] == true,
            "{file}: {path} is not a string in the schema"
        ),
        Value::Number(_) => assert_eq!(schema["type"], "integer", "{file}: {path}"),
        Value::Bool(_) => assert_eq!(schema["type"], "boolean", "{file}: {path}"),
        Value::Null => panic!("{file}: {path}: the view left a field unset"),
    }
}

fn requests() -> ResourceList {
    let mut list = ResourceList::new();
    list.insert("cpu", Quantity::parse("500m").expect("quantity"));
    list
}

/// A placement with every field the view has set.
fn full_placement() -> Placement {
    let requirement = || SelectorRequirement {
        key: "region".into(),
        operator: "In".into(),
        values: vec!["eu".into()],
    };
    let affinity = || ClusterAffinity {
        label_selector: Some(LabelSelector {
            match_labels: [("env".to_owned(), "prod".to_owned())].into(),
            match_expressions: vec![requirement()],
        }),
        field_selector: Some(FieldSelector {
            match_expressions: vec![requirement()],
        }),
        cluster_names: vec!["member1".into()],
        exclude_clusters: vec!["member2".into()],
    };
    Placement {
        cluster_affinity: Some(affinity()),
        cluster_affinities: vec![ClusterAffinityTerm {
            affinity_name: "primary".into(),
            affinity: affinity(),
        }],
        spread_constraints: vec![SpreadConstraint {
            spread_by_field: "cluster".into(),
            spread_by_label: "zone".into(),
            max_groups: 2,
            min_groups: 1,
        }],
        replica_scheduling: Some(ReplicaScheduling {
            replica_scheduling_type: "Duplicated".into(),
        }),
    }
}

/// A binding spec with every field the view has set.
fn full_binding_spec() -> ResourceBindingSpec {
    let s = |v: &str| v.to_owned();
    ResourceBindingSpec {
        resource: ObjectReference {
            api_version: s("apps/v1"),
            kind: s("Deployment"),
            namespace: s("ns"),
            name: s("web"),
            uid: s("uid"),
            resource_version: s("1"),
        },
        replicas: 3,
        replica_requirements: Some(ReplicaRequirements {
            resource_request: requests(),
            priority_class_name: s("high"),
            namespace: s("ns"),
        }),
        components: vec![Component {
            name: s("main"),
            replicas: 1,
            replica_requirements: Some(ComponentReplicaRequirements {
                resource_request: requests(),
                priority_class_name: s("high"),
            }),
        }],
        clusters: vec![TargetCluster {
            name: s("member1"),
            replicas: 3,
            components: vec![ComponentReplicas {
                name: s("main"),
                replicas: 1,
            }],
        }],
        placement: Some(full_placement()),
        graceful_eviction_tasks: vec![GracefulEvictionTask {
            from_cluster: s("member2"),
            replicas: Some(2),
            purge_mode: s("Gracefully"),
            reason: s("TaintUntolerated"),
            message: s("cluster member2 is not ready"),
            producer: s("taint-manager"),
            grace_period_seconds: Some(600),
            suppress_deletion: Some(false),
            creation_timestamp: Some(s("2026-11-20T10:02:10Z")),
            clusters_before_failover: vec![s("member1"), s("member2")],
        }],
        suspension: Some(karmada_quota_core::binding::Suspension {
            scheduling: Some(true),
        }),
        schedule_priority: Some(karmada_quota_core::binding::SchedulePriority { priority: 7 }),
    }
}

#[test]
fn every_field_of_the_binding_view_is_typed_in_both_binding_standins() {
    let spec = serde_json::to_value(full_binding_spec()).expect("serializes");
    for file in [
        "work.karmada.io_resourcebindings.yaml",
        "work.karmada.io_clusterresourcebindings.yaml",
    ] {
        let (_, schema) = only_version(file);
        assert_typed(file, "spec", &schema["properties"]["spec"], &spec);
    }
}

/// The policy view (`karmada_quota_interpreter::policy::Policy`) only deserializes, so its
/// selectors are written out here field by field; its placement is the binding's type.
#[test]
fn every_field_of_the_policy_view_is_typed_in_both_policy_standins() {
    let spec = serde_json::json!({
        "resourceSelectors": [{
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "namespace": "ns",
            "name": "web",
            "labelSelector": {
                "matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]}]
            }
        }],
        "placement": serde_json::to_value(full_placement()).expect("serializes"),
    });
    let _: karmada_quota_interpreter::policy::PolicySpec =
        serde_json::from_value(spec.clone()).expect("the policy view reads it");
    for file in [
        "policy.karmada.io_propagationpolicies.yaml",
        "policy.karmada.io_clusterpropagationpolicies.yaml",
    ] {
        let (_, schema) = only_version(file);
        assert_typed(file, "spec", &schema["properties"]["spec"], &spec);
    }
}

#[test]
fn every_field_of_the_cluster_view_is_typed_in_the_cluster_standin() {
    let spec = ClusterSpec {
        sync_mode: Some("Push".into()),
        api_endpoint: Some("https://127.0.0.1:6443".into()),
        secret_ref: Some(LocalSecretReference {
            namespace: "karmada-cluster".into(),
            name: "member1".into(),
        }),
        insecure_skip_tls_verification: true,
    };
    let file = "cluster.karmada.io_clusters.yaml";
    let (_, schema) = only_version(file);
    let spec = serde_json::to_value(spec).expect("serializes");
    assert_typed(file, "spec", &schema["properties"]["spec"], &spec);
    // What placement reads of a Cluster (the interpreter's `clusters::facts`, from the JSON).
    let located = serde_json::json!({
        "provider": "aws", "region": "eu", "zone": "eu-1a", "zones": ["eu-1a", "eu-1b"]
    });
    let facts = karmada_quota_interpreter::clusters::facts(&serde_json::json!({"spec": located}));
    assert_eq!((&*facts.provider, &*facts.zone), ("aws", "eu-1a"));
    assert_typed(file, "spec", &schema["properties"]["spec"], &located);
}

#[test]
fn the_typed_check_catches_an_untyped_field() {
    let schema = serde_json::json!({"type": "object", "properties": {"a": {"type": "string"}}});
    let value = serde_json::json!({"a": "x", "b": "y"});
    let caught = std::panic::catch_unwind(|| assert_typed("t", "spec", &schema, &value));
    assert!(caught.is_err(), "spec.b is untyped and must be reported");
}
