//! Karmada as users run it today, against real Karmada started by
//! `make e2e-karmada` (see e2e/tests/karmada.rs for the setting):
//!
//! - multi-template workloads (a RayCluster of the project's stand-in CRD; Karmada's own
//!   interpreter customization makes its binding's components when
//!   `MultiplePodTemplatesScheduling` is on — the tests that need it fail when it is off,
//!   unless `karmada-gates` is allowed (`gate_on`; hack/e2e-karmada.sh allows it and names
//!   them among the tests that did not run): a Divided RayCluster over quota naming its clusters is refused at the
//!   detector's CREATE and holds nothing; one that fits is charged exactly what
//!   `kubectl karmada-quota check` predicted before it was applied;
//! - PropagationPolicies that select by label or by kind alone are warned through Karmada's
//!   own admission chain.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use karmada_quota_e2e::Env;
use karmada_quota_e2e::commands::{kubectl_apply, plugin, text};
use karmada_quota_e2e::controller::{used_is, wait_quota};
use karmada_quota_e2e::karmada::{
    KarmadaSetup, MEMBERS, QUOTA, apply, deployment, gate_on, wait_binding, wait_event,
};
use karmada_quota_e2e::setup::step;
use karmada_quota_e2e::webhook::bindings;
use serde_json::{Value, json};

/// 2 cpu, 20 pods: one RayCluster of 1250m fits, two copies do not.
const HARD: &[(&str, &str)] = &[("requests.cpu", "2"), ("pods", "20")];
const SYNC_TIMEOUT: Duration = Duration::from_secs(60);
const GATE: &str = "MultiplePodTemplatesScheduling";

/// RayCluster `name`: head 1 × 500m, workers 3 × 250m (1250m, 4 pods per copy).
fn raycluster(ns: &str, name: &str) -> Value {
    let pod = |cpu: &str| {
        json!({"spec": {"containers": [{"name": "ray", "image": "registry.invalid/ray:2",
                                        "resources": {"requests": {"cpu": cpu}}}]}})
    };
    json!({
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "headGroupSpec": {"rayStartParams": {}, "template": pod("500m")},
            "workerGroupSpecs": [{"groupName": "workers", "replicas": 3, "minReplicas": 0,
                                  "maxReplicas": 3, "rayStartParams": {},
                                  "template": pod("250m")}]
        }
    })
}

/// A PropagationPolicy for RayCluster `name` to `clusters` (Divided).
fn ray_policy(ns: &str, name: &str, clusters: &[&str]) -> Value {
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "resourceSelectors": [{"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": name}],
            "placement": {"clusterAffinity": {"clusterNames": clusters},
                          "replicaScheduling": {"replicaSchedulingType": "Divided"}}
        }
    })
}

#[tokio::test]
#[ignore = "needs real Karmada: make e2e-karmada runs it"]
async fn a_divided_raycluster_over_quota_naming_its_clusters_is_refused_at_create() -> Result<()> {
    if !gate_on(GATE)? {
        return Ok(());
    }
    let k = KarmadaSetup::start("karmada_ray_refused", HARD).await?;
    let (c, ns) = (k.client().clone(), k.ns().to_owned());

    step(
        "[Apply] RayCluster llm (1250m a copy), Divided over clusterNames [member1, member2]: 2500m at CREATE",
    );
    apply(&c, &ns, ray_policy(&ns, "llm", &MEMBERS)).await?;
    apply(&c, &ns, raycluster(&ns, "llm")).await?;
    wait_event(
        &c,
        &ns,
        "RayCluster",
        "llm",
        "ApplyPolicyFailed",
        "exceeded quota: q",
    )
    .await?;
    ensure!(
        bindings(&c, &ns).get_opt("llm-raycluster").await?.is_none(),
        "the refused binding exists"
    );
    step("[Check] quota q holds nothing: used 0, no entry");
    wait_quota(
        &c,
        &ns,
        QUOTA,
        "used requests.cpu=0, no entry",
        SYNC_TIMEOUT,
        |q| {
            used_is(q, &[("requests.cpu", "0")])
                && q.status
                    .as_ref()
                    .is_some_and(|s| karmada_quota_e2e::quota_status::pending(s).is_empty())
        },
    )
    .await?;
    k.teardown().await
}

#[tokio::test]
#[ignore = "needs real Karmada: make e2e-karmada runs it"]
async fn a_raycluster_is_charged_what_check_predicted_before_it_applied() -> Result<()> {
    if !gate_on(GATE)? {
        return Ok(());
    }
    let k = KarmadaSetup::start("karmada_ray_check", HARD).await?;
    let (c, ns) = (k.client().clone(), k.ns().to_owned());
    let env = Env::get().await?;

    step(
        "[Check] kubectl karmada-quota check of the RayCluster and its policy (member1), before applying",
    );
    let dir = env.log_dir().join(format!("ray-check-{ns}"));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("llm.yaml");
    std::fs::write(
        &file,
        format!(
            "{}\n---\n{}\n",
            serde_json::to_string(&ray_policy(&ns, "llm", &MEMBERS[..1]))?,
            serde_json::to_string(&raycluster(&ns, "llm"))?
        ),
    )?;
    let o = plugin(
        env,
        &[
            "check",
            "-f",
            &file.display().to_string(),
            "--usage",
            "cluster",
        ],
    )
    .await?;
    let out = text(&o);
    eprintln!("{out}");
    ensure!(o.status.success(), "check: {out}");
    ensure!(
        out.contains("  adds:   pods=4, requests.cpu=1250m\n"),
        "check predicted otherwise: {out}"
    );

    step(
        "[Apply] the same: Karmada's binding carries components; the webhook charges 1250m, 4 pods",
    );
    apply(&c, &ns, ray_policy(&ns, "llm", &MEMBERS[..1])).await?;
    apply(&c, &ns, raycluster(&ns, "llm")).await?;
    let rb = wait_binding(
        &c,
        &ns,
        "llm-raycluster",
        "components and a placement",
        |rb| {
            rb.data["spec"]["components"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
                && rb.data["spec"]["clusters"]
                    .as_array()
                    .is_some_and(|a| !a.is_empty())
        },
    )
    .await?;
    eprintln!("    components: {}", rb.data["spec"]["components"]);
    wait_quota(
        &c,
        &ns,
        QUOTA,
        "used requests.cpu=1250m, pods=4",
        SYNC_TIMEOUT,
        |q| used_is(q, &[("requests.cpu", "1250m"), ("pods", "4")]),
    )
    .await?;
    std::fs::remove_dir_all(&dir).ok();
    k.teardown().await
}

#[tokio::test]
#[ignore = "needs real Karmada: make e2e-karmada runs it"]
async fn policies_selecting_by_label_or_by_kind_are_warned_through_karmada() -> Result<()> {
    let k = KarmadaSetup::start("karmada_policy_labels", HARD).await?;
    let (c, ns) = (k.client().clone(), k.ns().to_owned());
    let env = Env::get().await?;

    step("[Apply] Deployment dep5 (4 × 1 cpu, label pp=later), no policy yet");
    let mut d = deployment(&ns, "dep5", 4, "1");
    d["metadata"]["labels"]["pp"] = json!("later");
    apply(&c, &ns, d).await?;
    for (name, selector) in [
        (
            "by-label",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "labelSelector": {"matchLabels": {"pp": "later"}}}),
        ),
        (
            "by-kind",
            json!({"apiVersion": "apps/v1", "kind": "Deployment"}),
        ),
    ] {
        step(&format!(
            "[Apply] PropagationPolicy {name}: Duplicated to member1, selecting {selector}"
        ));
        let policy = json!({
            "apiVersion": "policy.karmada.io/v1alpha1",
            "kind": "PropagationPolicy",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"resourceSelectors": [selector],
                     "placement": {"clusterAffinity": {"clusterNames": [MEMBERS[0]]},
                                   "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}}
        });
        let o = kubectl_apply(env, &serde_json::to_string(&policy)?).await?;
        let out = text(&o);
        eprintln!("    kubectl said: {}", out.trim());
        ensure!(o.status.success(), "{out}");
        ensure!(
            out.contains(&format!(
                "Warning: this policy would exceed quota {ns}/q with Deployment {ns}/dep5: \
                 exceeded quota: q, requested: requests.cpu=4"
            )),
            "no warning for the {name} policy: {out}"
        );
        kube::Api::<kube::api::DynamicObject>::namespaced_with(
            c.clone(),
            &ns,
            &kube::api::ApiResource::from_gvk_with_plural(
                &kube::api::GroupVersionKind::gvk(
                    "policy.karmada.io",
                    "v1alpha1",
                    "PropagationPolicy",
                ),
                "propagationpolicies",
            ),
        )
        .delete(name, &Default::default())
        .await
        .with_context(|| format!("deleting policy {name}"))?;
    }
    k.teardown().await
}
