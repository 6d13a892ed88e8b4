//! A custom kind priced through a ResourceInterpreterCustomization's Lua,
//! against real Karmada started by `make e2e-karmada` (see e2e/tests/karmada.rs for
//! the setting; the Widget CRD is the project's, e2e/karmada/workload-crds/): the charge
//! `kubectl karmada-quota check` predicts by running the customization's Lua — read live
//! from the cluster — is the charge the webhook later applies to the binding Karmada's own
//! Lua VM made, and the project's interpreter gives the binding's replicas and
//! replicaRequirements exactly.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use karmada_quota_core::ResourceList;
use karmada_quota_e2e::Env;
use karmada_quota_e2e::commands::{plugin, text};
use karmada_quota_e2e::controller::{used_is, wait_quota};
use karmada_quota_e2e::karmada::{KarmadaSetup, MEMBERS, QUOTA, apply, wait_binding};
use karmada_quota_e2e::setup::step;
use karmada_quota_interpreter::{Customization, Customizations, Limits};
use serde_json::{Value, json};

/// 4 cpu, 20 pods: 3 widgets of 750m (2250m) fit.
const HARD: &[(&str, &str)] = &[("requests.cpu", "4"), ("pods", "20")];
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
const API_VERSION: &str = "e2e.karmada-quota.io/v1";

/// Karmada's style: `spec.size` replicas (absent: 1) of `spec.podTemplate`, by
/// kube.accuratePodRequirements.
const GET_REPLICAS: &str = r#"
function GetReplicas(obj)
  local size = 1
  if obj.spec.size ~= nil then
    size = obj.spec.size
  end
  return size, require("kube").accuratePodRequirements(obj.spec.podTemplate)
end
"#;

fn customization(name: &str) -> Value {
    json!({
        "apiVersion": "config.karmada.io/v1alpha1",
        "kind": "ResourceInterpreterCustomization",
        "metadata": {"name": name},
        "spec": {
            "target": {"apiVersion": API_VERSION, "kind": "Widget"},
            "customizations": {"replicaResource": {"luaScript": GET_REPLICAS}}
        }
    })
}

/// Widget `name`: 3 × (a 500m/128Mi app container, a sidecar with only a 250m limit, a
/// 100m/256Mi init container): per replica cpu 750m (the limit stands in for the request),
/// memory 256Mi (the init container is larger).
fn widget(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": API_VERSION,
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "size": 3,
            "podTemplate": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "registry.invalid/app:1",
                         "resources": {"requests": {"cpu": "500m", "memory": "128Mi"}}},
                        {"name": "sidecar", "image": "registry.invalid/proxy:1",
                         "resources": {"limits": {"cpu": "250m"}}}
                    ],
                    "initContainers": [
                        {"name": "init", "image": "registry.invalid/init:1",
                         "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}}}
                    ]
                }
            }
        }
    })
}

fn policy(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "resourceSelectors": [{"apiVersion": API_VERSION, "kind": "Widget", "name": name}],
            "placement": {"clusterAffinity": {"clusterNames": [MEMBERS[0]]}}
        }
    })
}

/// A ResourceList from a JSON map of quantity strings.
fn list(v: &Value) -> Result<ResourceList> {
    let map = v.as_object().context("not a map")?;
    ResourceList::parse_map(
        map.iter()
            .map(|(k, q)| (k.as_str(), q.as_str().unwrap_or_default())),
    )
    .map_err(|(name, e)| anyhow::anyhow!("{name}: {e}"))
}

#[tokio::test]
#[ignore = "needs real Karmada: make e2e-karmada runs it"]
async fn a_custom_kind_is_charged_what_its_customizations_lua_gives() -> Result<()> {
    let k = KarmadaSetup::start("karmada_interpreter", HARD).await?;
    let (c, ns) = (k.client().clone(), k.ns().to_owned());
    let env = Env::get().await?;
    let ric = format!("widgets-{ns}");

    step(
        "[Apply] ResourceInterpreterCustomization for Widget (GetReplicas by kube.accuratePodRequirements)",
    );
    apply(&c, &ns, customization(&ric)).await?;

    step(
        "[Check] kubectl karmada-quota check of the Widget and its policy, the customization read live",
    );
    // One List document (check unpacks it): the policy and the Widget.
    let manifests = json!({"apiVersion": "v1", "kind": "List",
                           "items": [policy(&ns, "w"), widget(&ns, "w")]});
    let file = env.log_dir().join(format!("widget-check-{ns}.json"));
    std::fs::write(&file, serde_json::to_vec(&manifests)?)?;
    let path = file.display().to_string();
    let args = ["check", "-f", &path, "--usage", "cluster", "-o", "json"];
    let o = plugin(env, &args).await?;
    let out = text(&o);
    eprintln!("{out}");
    ensure!(o.status.success(), "check: {out}");
    let report: Value = serde_json::from_str(&String::from_utf8_lossy(&o.stdout))
        .with_context(|| format!("check's JSON: {out}"))?;
    let added = report["quotas"]
        .as_array()
        .and_then(|qs| qs.iter().find(|q| q["name"] == QUOTA))
        .map(|q| q["added"].clone())
        .with_context(|| format!("no quota {QUOTA} in {report}"))?;
    ensure!(
        added["pods"] == "3" && added["requests.cpu"] == "2250m",
        "check predicted {added} (3 × 750m expected)"
    );

    step(
        "[Apply] the same: Karmada's Lua VM makes the binding; compare with the project's Lua run",
    );
    apply(&c, &ns, policy(&ns, "w")).await?;
    apply(&c, &ns, widget(&ns, "w")).await?;
    let rb = wait_binding(
        &c,
        &ns,
        "w-widget",
        "replicas from the customization",
        |rb| rb.data["spec"]["replicas"].as_i64().is_some_and(|r| r > 0),
    )
    .await?;
    let spec = &rb.data["spec"];
    eprintln!(
        "    binding: replicas {} replicaRequirements {}",
        spec["replicas"], spec["replicaRequirements"]
    );
    let ours = Customizations::new(vec![
        Customization::from_object(&customization(&ric)).map_err(anyhow::Error::msg)?,
    ])
    .interpret(&widget(&ns, "w"), Limits::default())
    .context("the customization targets Widget")??;
    ensure!(
        spec["replicas"].as_i64() == Some(i64::from(ours.replicas)),
        "replicas: Karmada {} vs ours {}",
        spec["replicas"],
        ours.replicas
    );
    let theirs = list(&spec["replicaRequirements"]["resourceRequest"])?;
    let ours_request = ours
        .replica_requirements
        .map(|r| r.resource_request)
        .unwrap_or_default();
    ensure!(
        theirs == ours_request,
        "replicaRequirements.resourceRequest: Karmada {theirs} vs ours {ours_request}"
    );

    step("[Check] the webhook charged what check predicted");
    let want: Vec<(String, String)> = added
        .as_object()
        .context("added")?
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
        .collect();
    let want: Vec<(&str, &str)> = want.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    wait_quota(
        &c,
        &ns,
        QUOTA,
        &format!("used {want:?}"),
        SYNC_TIMEOUT,
        |q| used_is(q, &want),
    )
    .await?;
    // The customization is cluster-scoped: the namespace's teardown does not take it.
    let deleted = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .args([
            "delete",
            "resourceinterpretercustomizations.config.karmada.io",
            &ric,
        ])
        .output()
        .await
        .context("running kubectl delete")?;
    ensure!(
        deleted.status.success(),
        "deleting {ric}: {}",
        text(&deleted)
    );
    std::fs::remove_file(&file).ok();
    k.teardown().await
}
