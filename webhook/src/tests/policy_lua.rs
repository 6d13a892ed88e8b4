//! The PropagationPolicy review of a custom kind priced by a ResourceInterpreterCustomization's
//! Lua: the template read from the API gets the Lua's replicas and requirements, and the
//! review warns with the numbers the Lua gave; a failing script skips the check naming the
//! customization.

use std::sync::Arc;

use karmada_quota_interpreter::{Customization, Customizations};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::*;
use crate::policy::{Enforcement, FakeWorld, Skip, interpreted_template};

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("example.io", "v1", "Widget"))
}

/// A Widget as the API lists it (no apiVersion/kind on the item): `size` × 1 cpu.
fn widget(size: i64) -> DynamicObject {
    serde_json::from_value(json!({
        "metadata": {"name": "w", "namespace": NS},
        "spec": {"size": size, "podTemplate": {"spec": {"containers": [
            {"resources": {"requests": {"cpu": "1"}}}
        ]}}}
    }))
    .unwrap()
}

fn customizations(script: &str) -> Customizations {
    Customizations::new(vec![Customization {
        name: "widgets".into(),
        api_version: "example.io/v1".into(),
        kind: "Widget".into(),
        replica_script: script.into(),
        ..Default::default()
    }])
}

const GET_REPLICAS: &str = r#"
local kube = require("kube")
function GetReplicas(obj)
  return obj.spec.size, kube.accuratePodRequirements(obj.spec.podTemplate)
end
"#;

fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(5)
}

#[test]
fn a_listed_custom_kind_is_priced_by_its_customization() {
    let t = interpreted_template(
        &widget_resource(),
        widget(3),
        &customizations(GET_REPLICAS),
        later(),
    )
    .unwrap();
    let b = t.binding().unwrap();
    assert_eq!(b.replicas, 3);
    assert_eq!(
        b.replica_requirements.unwrap().resource_request.to_string(),
        "cpu=1"
    );
    // Without the customization the Widget has no replicas (an unpriced workload).
    let plain = crate::policy::to_template(&widget_resource(), widget(3)).unwrap();
    assert_eq!(plain.binding().unwrap().replicas, 0);
}

#[test]
fn a_failing_or_runaway_script_skips_naming_the_customization() {
    for (script, says) in [
        ("function GetReplicas(o) error('broken') end", "broken"),
        ("function GetReplicas(o) while true do end end", "stopped:"),
    ] {
        let Err(Skip(why)) = interpreted_template(
            &widget_resource(),
            widget(3),
            &customizations(script),
            later(),
        ) else {
            panic!("{script}: priced");
        };
        assert!(
            why.starts_with(&format!(
                "cannot price Widget {NS}/w: ResourceInterpreterCustomization widgets: GetReplicas: "
            )),
            "{why}"
        );
        assert!(why.contains(says), "{why}");
    }
    // The review's budget spent: skipped without running the script.
    let Err(Skip(why)) = interpreted_template(
        &widget_resource(),
        widget(3),
        &customizations(GET_REPLICAS),
        std::time::Instant::now(),
    ) else {
        panic!("priced after the budget");
    };
    assert!(why.contains("ran longer than"), "{why}");
}

#[tokio::test]
async fn the_review_warns_with_the_charge_the_lua_gives() {
    let t = interpreted_template(
        &widget_resource(),
        widget(3),
        &customizations(GET_REPLICAS),
        later(),
    )
    .unwrap();
    let mut h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "8")],
    )]);
    h.state.policies = Some(Arc::new(FakeWorld {
        templates: vec![t],
        ..Default::default()
    }));
    h.state.settings.policy_enforcement = Enforcement::Warn;
    let policy = json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "widgets", "namespace": NS},
        "spec": {
            "resourceSelectors": [{"apiVersion": "example.io/v1", "kind": "Widget"}],
            "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}}
        }
    });
    let body = mk_review(
        "CREATE",
        ("policy.karmada.io", "v1alpha1", "PropagationPolicy"),
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
    let r: Value = response["response"].clone();
    assert_eq!(r["allowed"], true);
    assert_eq!(
        r["warnings"],
        json!([format!(
            "this policy would exceed quota {NS}/compute with Widget {NS}/w: exceeded quota: \
             compute, requested: requests.cpu=3, used: requests.cpu=8, limited: requests.cpu=10"
        )])
    );
}
