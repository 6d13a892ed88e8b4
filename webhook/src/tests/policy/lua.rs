//! The PropagationPolicy review of a custom kind priced by a ResourceInterpreterCustomization's
//! Lua: the template read from the API gets the Lua's replicas and requirements, and the
//! review warns with the numbers the Lua gave; a failing script skips the check naming the
//! customization.

use karmada_quota_interpreter::{Customization, Customizations};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

use super::{NS, harness, review_of};
use crate::policy::{Enforcement, FakeWorld, Skip, interpreted_template};
use karmada_quota_interpreter::template::Template;

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

/// Widget of `size` read as the review reads it, with `script` as the customization's
/// GetReplicas and `end` as the end of the review's Lua budget.
fn priced(size: i64, script: &str, end: std::time::Instant) -> Result<Template, Skip> {
    interpreted_template(
        &widget_resource(),
        widget(size),
        &customizations(script),
        end,
    )
}

fn later() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(5)
}

#[test]
fn a_listed_custom_kind_is_priced_by_its_customization() {
    let t = priced(3, GET_REPLICAS, later()).unwrap();
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
        let Err(Skip(why)) = priced(3, script, later()) else {
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
    let Err(Skip(why)) = priced(3, GET_REPLICAS, std::time::Instant::now()) else {
        panic!("priced after the budget");
    };
    assert!(why.contains("ran longer than"), "{why}");
}

#[tokio::test]
async fn the_review_warns_with_the_charge_the_lua_gives() {
    let world = FakeWorld {
        templates: vec![priced(3, GET_REPLICAS, later()).unwrap()],
        ..Default::default()
    };
    // compute: 8 of 10 cpu used; 3 widgets × 1 cpu.
    let h = harness(world, Enforcement::Warn);
    let policy = json!({
        "apiVersion": "policy.karmada.io/v1alpha1", "kind": "PropagationPolicy",
        "metadata": {"name": "widgets", "namespace": NS},
        "spec": {
            "resourceSelectors": [{"apiVersion": "example.io/v1", "kind": "Widget"}],
            "placement": {"replicaScheduling": {"replicaSchedulingType": "Divided"}}
        }
    });
    let r = review_of(&h, policy).await;
    assert_eq!(r["allowed"], true);
    let warnings = r["warnings"].as_array().cloned().unwrap_or_default();
    let want = format!(
        "this policy would exceed quota {NS}/compute with Widget {NS}/w: exceeded quota: \
         compute, requested: requests.cpu=3, used: requests.cpu=8, limited: requests.cpu=10"
    );
    assert_eq!(warnings, vec![Value::String(want)], "{r}");
}
