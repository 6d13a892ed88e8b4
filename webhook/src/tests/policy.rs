//! PropagationPolicy admission through the router: fits silently, warns (or denies) when a
//! selected template's binding would exceed a quota, and says when the check was skipped.

use std::sync::Arc;
use std::time::Duration;

use karmada_quota_interpreter::template::Template;
use serde_json::{Value, json};

use super::*;
use crate::policy::{Enforcement, FakeWorld};

/// Custom kinds priced by a ResourceInterpreterCustomization's Lua.
mod listing;
mod lua;

const PP: (&str, &str, &str) = ("policy.karmada.io", "v1alpha1", "PropagationPolicy");

/// A Deployment in the test namespace: `replicas` × `cpu`.
fn deployment(name: &str, replicas: i32, cpu: &str) -> Template {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "template": {"spec": {"containers": [
            {"resources": {"requests": {"cpu": cpu}}}
        ]}}}
    }))
    .unwrap()
}

fn policy(placement: Value) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {
            "resourceSelectors": [{"apiVersion": "apps/v1", "kind": "Deployment"}],
            "placement": placement
        }
    })
}

fn harness(world: FakeWorld, enforcement: Enforcement) -> Harness {
    let mut h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "8")],
    )]);
    h.state.policies = Some(Arc::new(world));
    h.state.settings.policy_enforcement = enforcement;
    h
}

async fn review(h: &Harness, placement: Value) -> Value {
    review_of(h, policy(placement)).await
}

/// The router's answer to the CREATE of PropagationPolicy `policy`.
async fn review_of(h: &Harness, policy: Value) -> Value {
    let body = mk_review(
        "CREATE",
        PP,
        "propagationpolicies",
        Some(policy),
        None,
        false,
    );
    let (status, response) = h
        .post(
            crate::policy::PROPAGATIONPOLICY_PATH,
            serde_json::to_vec(&body).unwrap(),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    response["response"].clone()
}

fn divided() -> Value {
    json!({"replicaScheduling": {"replicaSchedulingType": "Divided"}})
}

#[tokio::test]
async fn a_policy_that_fits_is_admitted_silently() {
    let world = FakeWorld {
        templates: vec![deployment("web", 2, "1")], // 2 of the 2 cpu left
        ..Default::default()
    };
    let r = review(&harness(world, Enforcement::Warn), divided()).await;
    assert_eq!(r["allowed"], true);
    assert!(r.get("warnings").is_none_or(Value::is_null), "{r}");
}

#[tokio::test]
async fn a_policy_that_would_exceed_gets_a_warning_naming_quota_template_and_numbers() {
    let world = FakeWorld {
        templates: vec![deployment("web", 3, "1"), deployment("api", 1, "500m")],
        ..Default::default()
    };
    let r = review(&harness(world, Enforcement::Warn), divided()).await;
    assert_eq!(r["allowed"], true);
    assert_eq!(
        r["warnings"],
        json!([format!(
            "this policy would exceed quota {NS}/compute with Deployment {NS}/web: exceeded quota: \
             compute, requested: requests.cpu=3, used: requests.cpu=8, limited: requests.cpu=10"
        )]),
        "api (500m) still fits after web is refused"
    );
}

#[tokio::test]
async fn deny_mode_refuses_and_duplicated_counts_every_cluster() {
    let cluster = |name: &str| karmada_quota_interpreter::clusters::ClusterFacts {
        name: name.into(),
        ..Default::default()
    };
    // 1 × 1 cpu Duplicated on 3 clusters = 3 > 2 left.
    let world = FakeWorld {
        templates: vec![deployment("web", 1, "1")],
        clusters: vec![cluster("m1"), cluster("m2"), cluster("m3")],
        ..Default::default()
    };
    let r = review(&harness(world, Enforcement::Deny), json!({})).await;
    assert_eq!(r["allowed"], false);
    assert_eq!(r["status"]["code"], 403);
    assert_eq!(r["status"]["reason"], "QuotaExceeded");
    let message = r["status"]["message"].as_str().unwrap();
    assert!(
        message.starts_with(&format!(
            "PropagationPolicy {NS}/web: this policy would exceed quota {NS}/compute"
        )),
        "{message}"
    );
    assert!(message.contains("requested: requests.cpu=3"), "{message}");
}

#[tokio::test]
async fn a_check_that_cannot_be_made_in_time_or_in_size_allows_with_a_warning() {
    let slow = FakeWorld {
        templates: vec![deployment("web", 30, "1")],
        latency: Duration::from_secs(5),
        ..Default::default()
    };
    let mut h = harness(slow, Enforcement::Deny);
    h.state.settings.decision_timeout = Duration::from_millis(100);
    let r = review(&h, divided()).await;
    assert_eq!(
        r["allowed"], true,
        "never slower than the decision timeout, never a refusal"
    );
    assert_eq!(
        r["warnings"][0],
        "karmada-quota: the quota check of this policy was skipped: the quota check did not \
         finish within the decision timeout"
    );

    let many = FakeWorld {
        templates: (0..5)
            .map(|i| deployment(&format!("d{i}"), 1, "1"))
            .collect(),
        ..Default::default()
    };
    let mut h = harness(many, Enforcement::Deny);
    h.state.settings.policy_max_templates = 3;
    let r = review(&h, divided()).await;
    assert_eq!(r["allowed"], true);
    assert!(
        r["warnings"][0].as_str().unwrap().contains("more than 3"),
        "{}",
        r["warnings"]
    );
}

#[tokio::test]
async fn the_increase_over_an_existing_binding_is_what_counts() {
    // web runs 2 × 1 cpu already (in used); scaling the policy's view to 3 adds 1: fits.
    let mut running = karmada_quota_core::binding::ResourceBindingSpec {
        replicas: 2,
        ..Default::default()
    };
    running.resource.api_version = "apps/v1".into();
    running.resource.kind = "Deployment".into();
    running.resource.name = "web".into();
    running.replica_requirements = Some(karmada_quota_core::binding::ReplicaRequirements {
        resource_request: karmada_quota_core::ResourceList::parse_map([("cpu", "1")]).unwrap(),
        ..Default::default()
    });
    let world = FakeWorld {
        templates: vec![deployment("web", 3, "1")],
        bindings: [(NS.to_owned(), vec![running])].into(),
        ..Default::default()
    };
    let r = review(&harness(world, Enforcement::Deny), divided()).await;
    assert_eq!(r["allowed"], true, "{r}");
}

/// A Deployment whose pods ask `cpu` at pod level (`spec.resources`), its container
/// asking nothing.
fn pod_level_deployment(name: &str, replicas: i32, cpu: &str) -> Template {
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"replicas": replicas, "template": {"spec": {
            "resources": {"requests": {"cpu": cpu}},
            "containers": [{"resources": {}}]
        }}}
    }))
    .unwrap()
}

#[tokio::test]
async fn pod_level_requests_are_reviewed_as_karmadas_binding_carries_them() {
    // 1 × 2 cpu would fit the 2 cpu left, but Karmada v1.18 fills the binding from the
    // containers only: it carries no cpu, and the compute quota refuses a binding that
    // does not say its cpu, as the webhook will when Karmada creates it.
    let world = FakeWorld {
        templates: vec![pod_level_deployment("web", 1, "2")],
        ..Default::default()
    };
    let r = review(&harness(world, Enforcement::Warn), divided()).await;
    assert_eq!(r["allowed"], true);
    let warning = r["warnings"][0].as_str().unwrap_or_default();
    assert!(
        warning.contains(&format!("Deployment {NS}/web: must specify cpu")),
        "{r}"
    );
    let container = FakeWorld {
        templates: vec![deployment("web", 1, "2")],
        ..Default::default()
    };
    let r = review(&harness(container, Enforcement::Warn), divided()).await;
    assert!(r.get("warnings").is_none_or(Value::is_null), "{r}");
}

/// Items of a LIST of a built-in kind carry no apiVersion/kind (a policy that
/// selects by label or by kind alone must still be warned): the template read from one gets
/// the listed resource's, and a label or kind-only selector then selects it.
#[test]
fn a_listed_item_without_type_is_selected_by_label_and_by_kind() {
    use karmada_quota_interpreter::policy::ResourceSelector;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
    let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"));
    // As the API server lists it: no apiVersion, no kind on the item.
    let item: DynamicObject = serde_json::from_value(json!({
        "metadata": {"name": "dep5", "namespace": NS, "labels": {"pp": "later-d5"}},
        "spec": {"replicas": 4, "template": {"spec": {"containers": [
            {"resources": {"requests": {"cpu": "500m"}}}
        ]}}}
    }))
    .unwrap();
    assert!(item.types.is_none(), "the fixture must be typeless");
    let t = crate::policy::to_template(&ar, item).unwrap();
    assert_eq!(
        (t.api_version.as_str(), t.kind.as_str()),
        ("apps/v1", "Deployment")
    );
    let by_label: ResourceSelector = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "labelSelector": {"matchLabels": {"pp": "later-d5"}}
    }))
    .unwrap();
    let by_kind: ResourceSelector =
        serde_json::from_value(json!({"apiVersion": "apps/v1", "kind": "Deployment"})).unwrap();
    let other_label: ResourceSelector = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "labelSelector": {"matchLabels": {"pp": "other"}}
    }))
    .unwrap();
    assert!(by_label.selects(&t));
    assert!(by_kind.selects(&t));
    assert!(!other_label.selects(&t));
    assert_eq!(t.binding().unwrap().replicas, 4);
}
