//! Who may do what to quotas, against a real apiserver (docs/security.md, threat 11):
//!
//! - a namespace admin of team A (impersonated: a RoleBinding to `admin` as the
//!   aggregation controller would fill it, plus every verb on KarmadaQuotas in its
//!   namespace, the "namespace admin with `*`") cannot raise `hard` or delete its
//!   quota: the webhook refuses with who, what and the flag that would allow it; the
//!   admin group (`system:masters`, Karmada's admin kubeconfig) can; the tenant's roles
//!   grant no status write;
//! - a KarmadaClusterQuota over team A's namespaces prices `kubectl karmada-quota check`,
//!   `top` and the PropagationPolicy review with its totals;
//! - a tenant with only the chart's view role in its namespace reads the cluster quota
//!   over it through the KarmadaClusterQuotaShare the controller keeps there (`kubectl get
//!   kcqshare`, the plugin's `top` and `get --cluster`), and nothing of another namespace
//!   (item 4).

use std::collections::BTreeSet;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role, RoleBinding};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaClusterQuotaShare, KarmadaQuota};
use karmada_quota_e2e::chart::Helm;
use karmada_quota_e2e::commands::{kubectl_apply, plugin, plugin_with, text};
use karmada_quota_e2e::controller::Controller;
use karmada_quota_e2e::setup::{WebhookSetup, step, synced_quota};
use karmada_quota_e2e::webhook::NS_LABEL;
use karmada_quota_e2e::webhook::Rb;
use karmada_quota_e2e::{Env, TestNs, try_wait_for, wait_for};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::time::Duration;

const TENANT: &str = "team-a-admin";
const TENANT_GROUP: &str = "team-a-admins";

/// A client of apiserver 0 impersonating `user` in `groups`.
fn impersonating(env: &Env, user: &str, groups: &[&str]) -> Result<Client> {
    let mut config = env.config().clone();
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
    Client::try_from(config).context("an impersonating client")
}

/// The rules of ClusterRole `name` as Kubernetes' clusterrole-aggregation controller fills
/// them (the loopback control plane runs no controller-manager): its own, or, with an
/// aggregationRule, those of every ClusterRole its selectors match, recursively.
async fn aggregated_rules(client: &Client, name: &str) -> Result<Vec<PolicyRule>> {
    let api: Api<ClusterRole> = Api::all(client.clone());
    let all = api.list(&Default::default()).await?.items;
    let mut seen = BTreeSet::new();
    let mut rules = Vec::new();
    let mut todo = vec![name.to_owned()];
    while let Some(n) = todo.pop() {
        if !seen.insert(n.clone()) {
            continue;
        }
        let role = all
            .iter()
            .find(|r| r.name_any() == n)
            .with_context(|| format!("no ClusterRole {n}"))?;
        let Some(agg) = &role.aggregation_rule else {
            rules.extend(role.rules.clone().unwrap_or_default());
            continue;
        };
        for selector in agg.cluster_role_selectors.iter().flatten() {
            let wanted = selector.match_labels.clone().unwrap_or_default();
            for r in &all {
                let labels = r.labels();
                if wanted.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                    todo.push(r.name_any());
                }
            }
        }
    }
    Ok(rules)
}

/// The chart's people ClusterRoles (`<fullname>-view`, `<fullname>-admin`) as rendered.
async fn chart_people_roles(fullname: &str) -> Result<Vec<ClusterRole>> {
    let objects = Helm::new()?
        .template(
            "kq-tenancy",
            "kq-tenancy-system",
            &[],
            &[
                ("installMode", "standalone"),
                ("networkPolicy.enabled", "false"),
                ("fullnameOverride", fullname),
            ],
            &["--show-only", "templates/rbac.yaml"],
        )
        .await?;
    let mut roles = Vec::new();
    for o in objects {
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        if o["kind"] == "ClusterRole"
            && (name == format!("{fullname}-view") || name == format!("{fullname}-admin"))
        {
            roles.push(serde_json::from_value(o)?);
        }
    }
    ensure!(roles.len() == 2, "the chart renders no view/admin roles");
    Ok(roles)
}

async fn can_i(
    client: &Client,
    verb: &str,
    resource: &str,
    sub: Option<&str>,
    ns: &str,
) -> Result<bool> {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some("quota.karmada.io".into()),
                resource: Some(resource.into()),
                subresource: sub.map(str::to_owned),
                verb: Some(verb.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SelfSubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The cells of `name`'s row in the plugin's `top` output.
fn top_row<'a>(out: &'a str, name: &str) -> Result<Vec<&'a str>> {
    let row = out
        .lines()
        .find(|l| l.contains(name))
        .with_context(|| format!("no {name} row:\n{out}"))?;
    Ok(row.split_whitespace().collect())
}

/// The refusal of a write, or an error if it went through.
fn refusal<T>(what: &str, r: kube::Result<T>) -> Result<kube::core::Status> {
    match r {
        Ok(_) => bail!("{what} went through"),
        Err(kube::Error::Api(s)) => Ok(*s),
        Err(e) => Err(e).context(what.to_owned()),
    }
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_tenant_cannot_raise_or_delete_its_quota_nor_write_status_while_an_admin_can()
-> Result<()> {
    let s = WebhookSetup::new("tenancy_admins").await?;
    let (admin, ns, env) = (&s.client, s.ns(), s.env);
    let fullname = format!("kq-{}", ns.rsplit('-').next().unwrap_or(ns));

    step("[Setup] the chart's view/admin ClusterRoles; none grants status");
    let roles = chart_people_roles(&fullname).await?;
    let cr: Api<ClusterRole> = Api::all(admin.clone());
    for role in &roles {
        for rule in role.rules.iter().flatten() {
            ensure!(
                rule.resources.iter().flatten().all(|r| !r.contains('/')),
                "{} grants a subresource: {rule:?}",
                role.name_any()
            );
        }
        cr.create(&PostParams::default(), role).await?;
    }
    let view = &roles[0];
    for agg in ["view", "edit", "admin"] {
        let key = format!("rbac.authorization.k8s.io/aggregate-to-{agg}");
        ensure!(
            view.labels().get(&key).map(String::as_str) == Some("true"),
            "{} is not aggregated to {agg}",
            view.name_any()
        );
    }

    step(
        "[Setup] tenant team-a-admin: admin (aggregated) + every verb on karmadaquotas in its namespace",
    );
    let tenant_admin = format!("{fullname}-tenant-admin");
    let rules = aggregated_rules(admin, "admin").await?;
    cr.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": tenant_admin}, "rules": rules}))?,
    )
    .await?;
    let group =
        json!([{"kind": "Group", "name": TENANT_GROUP, "apiGroup": "rbac.authorization.k8s.io"}]);
    let role_ref = |kind: &str, name: &str| json!({"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"});
    Api::<Role>::namespaced(admin.clone(), ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "quota-star"},
                "rules": [{"apiGroups": ["quota.karmada.io"], "resources": ["karmadaquotas"], "verbs": ["*"]}]
            }))?,
        )
        .await?;
    for (binding, role) in [
        ("team-a-admin", role_ref("ClusterRole", &tenant_admin)),
        ("quota-star", role_ref("Role", "quota-star")),
    ] {
        Api::<RoleBinding>::namespaced(admin.clone(), ns)
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "metadata": {"name": binding}, "roleRef": role, "subjects": group
                }))?,
            )
            .await?;
    }
    let tenant = impersonating(env, TENANT, &[TENANT_GROUP])?;

    step("[Create] as the admin group: KarmadaQuota compute, requests.cpu=4");
    synced_quota(admin, ns, "compute", &[("requests.cpu", "4")]).await?;
    let quotas = |c: &Client| Api::<KarmadaQuota>::namespaced(c.clone(), ns);

    step("[Get] the tenant reads its quota (view, aggregated into admin)");
    let got = try_wait_for(
        "the tenant's RBAC",
        std::time::Duration::from_secs(10),
        || async { Ok::<_, anyhow::Error>(quotas(&tenant).get("compute").await.ok()) },
    )
    .await?;
    ensure!(got.spec.hard.contains_key("requests.cpu"));

    step("[Update] the tenant raises hard → refused by the webhook, naming user, object and flag");
    let raise = |cpu: &str| Patch::Merge(json!({"spec": {"hard": {"requests.cpu": cpu}}}));
    let s403 = refusal(
        "the tenant's raise",
        quotas(&tenant)
            .patch("compute", &PatchParams::default(), &raise("40"))
            .await,
    )?;
    eprintln!("    apiserver said: {}", s403.message);
    ensure!(s403.code == 403, "{s403:?}");
    for part in [
        "admission webhook \"karmadaquotas.quota.karmada.io\" denied the request",
        &format!("KarmadaQuota {ns}/compute: user \"{TENANT}\""),
        "may not change its spec",
        "--quota-admin-groups=system:masters",
        &format!("add \"{TENANT}\" to --quota-admin-users"),
    ] {
        ensure!(
            s403.message.contains(part),
            "{}\n lacks {part}",
            s403.message
        );
    }

    step("[Delete] the tenant deletes its quota → refused by the webhook");
    let s403 = refusal(
        "the tenant's delete",
        quotas(&tenant)
            .delete("compute", &DeleteParams::default())
            .await,
    )?;
    eprintln!("    apiserver said: {}", s403.message);
    ensure!(
        s403.code == 403 && s403.message.contains("may not delete it"),
        "{s403:?}"
    );

    step(
        "[Update] the tenant annotates its quota → allowed (annotations are not the admins' alone)",
    );
    quotas(&tenant)
        .patch(
            "compute",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"team-a/owner": "alice"}}})),
        )
        .await
        .context("the tenant's annotation")?;

    step("[Auth] the tenant's roles grant no status write: access review and a real attempt → 403");
    ensure!(can_i(&tenant, "update", "karmadaquotas", None, ns).await?);
    for verb in ["update", "patch"] {
        ensure!(
            !can_i(&tenant, verb, "karmadaquotas", Some("status"), ns).await?,
            "the tenant may {verb} karmadaquotas/status"
        );
    }
    let mut q = quotas(admin).get("compute").await?;
    if let Some(st) = q.status.as_mut() {
        st.reservations.clear();
        st.used.clear();
    }
    let s403 = refusal(
        "the tenant's status write",
        quotas(&tenant)
            .replace_status("compute", &PostParams::default(), &q)
            .await,
    )?;
    ensure!(s403.code == 403, "{s403:?}");
    ensure!(
        s403.message.contains("karmadaquotas/status") || s403.message.contains("status"),
        "{s403:?}"
    );

    step("[Update] [Delete] the admin group raises hard and deletes the quota");
    quotas(admin)
        .patch("compute", &PatchParams::default(), &raise("40"))
        .await
        .context("the admin's raise")?;
    quotas(admin)
        .delete("compute", &DeleteParams::default())
        .await
        .context("the admin's delete")?;

    for role in roles
        .iter()
        .map(ResourceExt::name_any)
        .chain([tenant_admin])
    {
        cr.delete(&role, &DeleteParams::default()).await?;
    }
    s.teardown().await
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn the_plugin_and_the_policy_review_price_the_cluster_quota_over_its_namespaces() -> Result<()>
{
    let s = WebhookSetup::with_namespaces("tenancy_kcq", 2).await?;
    let (admin, env) = (&s.client, s.env);
    let (a, b) = (s.namespaces[0].name(), s.namespaces[1].name());
    let suffix = a.rsplit('-').next().unwrap_or(a);
    let (business, name) = (format!("biz-{suffix}"), format!("kcq-tenancy-{suffix}"));

    step(
        "[Create] KarmadaClusterQuota over both namespaces: requests.cpu=4, 3 used (0.5 in A, 2.5 in B)",
    );
    for ns in [a, b] {
        Api::<Namespace>::all(admin.clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {"e2e.karmada-quota/business": business}}}),
                ),
            )
            .await?;
    }
    let kcqs: Api<KarmadaClusterQuota> = Api::all(admin.clone());
    let q: KarmadaClusterQuota = serde_json::from_value(json!({
        "apiVersion": "quota.karmada.io/v1alpha1", "kind": "KarmadaClusterQuota",
        "metadata": {"name": name, "labels": {NS_LABEL: s.registration.name()}},
        "spec": {"namespaceSelector": {"matchLabels": {"e2e.karmada-quota/business": business}},
                 "hard": {"requests.cpu": "4"}}
    }))?;
    kcqs.create(&PostParams::default(), &q).await?;
    let mut q = kcqs.get(&name).await?;
    q.status = Some(serde_json::from_value(json!({
        "used": {"requests.cpu": "3"},
        "namespaces": [{"name": a, "used": {"requests.cpu": "500m"}},
                       {"name": b, "used": {"requests.cpu": "2500m"}}]
    }))?);
    kcqs.replace_status(&name, &PostParams::default(), &q)
        .await?;

    step("[Create] Deployment web in A: 2 × 1 cpu");
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {a}, labels: {{app: web}}}}\nspec:\n  replicas: 2\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      containers: [{{name: c, image: none, resources: {{requests: {{cpu: '1'}}}}}}]\n"
    );
    let o = kubectl_apply(env, &deployment).await?;
    ensure!(o.status.success(), "{}", text(&o));

    step(
        "[Create] a Divided PropagationPolicy for web → a warning naming the cluster quota and its totals",
    );
    let policy = |n: usize| {
        format!(
            "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: web-{n}, namespace: {a}}}\nspec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment, name: web}}]\n  placement: {{replicaScheduling: {{replicaSchedulingType: Divided}}}}\n"
        )
    };
    let warning = format!(
        "Warning: this policy would exceed cluster quota {name} with Deployment {a}/web: \
         exceeded cluster quota: {name}, requested: requests.cpu=2, used: requests.cpu=3, \
         limited: requests.cpu=4"
    );
    // The webhook's cache sees the seeded status within moments: retry until it does.
    let mut attempt = 0;
    try_wait_for(
        "the policy warning",
        std::time::Duration::from_secs(20),
        || {
            attempt += 1;
            let yaml = policy(attempt);
            let warning = &warning;
            async move {
                let o = kubectl_apply(env, &yaml).await?;
                ensure!(o.status.success(), "{}", text(&o));
                let out = text(&o);
                eprintln!("    kubectl said: {}", out.trim());
                Ok::<_, anyhow::Error>(out.contains(warning.as_str()).then_some(()))
            }
        },
    )
    .await?;

    step("[Top] top -n A lists the cluster quota with its total: 3 of 4 cpu");
    let o = plugin(env, &["top", "-n", a]).await?;
    let out = text(&o);
    ensure!(o.status.success(), "top failed: {out}");
    let cells = top_row(&out, &name)?;
    ensure!(
        cells
            == [
                "(cluster)",
                name.as_str(),
                "requests.cpu",
                "3",
                "0",
                "4",
                "75%"
            ],
        "row {cells:?}\n{out}"
    );

    step("[Check] check of web under the policy: the cluster quota exceeds (exit 1)");
    let dir = env
        .cp_dir()
        .unwrap_or(env.log_dir())
        .join(format!("tenancy-{a}"));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("web.yaml");
    std::fs::write(&file, format!("{}---\n{deployment}", policy(0)))?;
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
    std::fs::remove_dir_all(&dir).ok();
    ensure!(o.status.code() == Some(1), "check: {out}");
    ensure!(
        out.contains(&format!(
            "KarmadaClusterQuota {name} (every namespace it selects): EXCEEDS\n"
        )),
        "{out}"
    );
    ensure!(out.contains("  now:    requests.cpu=3\n"), "{out}");
    ensure!(
        out.contains(&format!(
            "REFUSED Deployment {a}/web by {name}: exceeded cluster quota: {name}, requested: \
             requests.cpu=2, used: requests.cpu=3, limited: requests.cpu=4"
        )),
        "{out}"
    );

    kcqs.delete(&name, &DeleteParams::default()).await?;
    s.teardown().await
}

/// `kubectl --kubeconfig <kubeconfig> <args>`.
async fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> Result<std::process::Output> {
    tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .await
        .context("running kubectl")
}

async fn label_business(c: &Client, ns: &str, business: Option<&str>) -> Result<()> {
    Api::<Namespace>::all(c.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"labels": {"e2e.karmada-quota/business": business}}}),
            ),
        )
        .await
        .with_context(|| format!("labelling namespace {ns}"))?;
    Ok(())
}

/// The share `name` in `ns` as the admin reads it: (total used cpu, this namespace's cpu).
async fn share_cpu(c: &Client, ns: &str, name: &str) -> Option<(String, String)> {
    let s = Api::<KarmadaClusterQuotaShare>::namespaced(c.clone(), ns)
        .get_opt(name)
        .await
        .ok()??;
    let st = s.status?;
    let total = st.cluster_quota.quota.used.get("requests.cpu")?.0.clone();
    let mine = st
        .cluster_quota
        .namespaces
        .first()?
        .used
        .get("requests.cpu")?
        .0
        .clone();
    Some((total, mine))
}

#[tokio::test]
#[ignore = "needs the loopback control plane and the chart tools: make test runs it"]
async fn a_tenant_reads_the_cluster_quota_over_its_namespace_through_its_share() -> Result<()> {
    let env = Env::get().await?;
    let admin = &env.client()?;
    let (ns_a, ns_b) = (
        TestNs::new(admin, "tenancy_share").await?,
        TestNs::new(admin, "tenancy_share").await?,
    );
    let (a, b) = (ns_a.name().to_owned(), ns_b.name().to_owned());
    let suffix = a.rsplit('-').next().unwrap_or(&a).to_owned();
    let (business, name, fullname) = (
        format!("share-{suffix}"),
        format!("kcq-share-{suffix}"),
        format!("kq-share-{suffix}"),
    );
    let selector = format!("e2e.karmada-quota/business={business}");

    step("[Setup] the chart's view ClusterRole, bound to tenant team-a-viewer in namespace A only");
    let roles = chart_people_roles(&fullname).await?;
    let cr: Api<ClusterRole> = Api::all(admin.clone());
    let view = roles
        .iter()
        .find(|r| r.name_any() == format!("{fullname}-view"))
        .context("no view role")?;
    cr.create(&PostParams::default(), view).await?;
    Api::<RoleBinding>::namespaced(admin.clone(), &a)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "team-a-viewer"},
                "roleRef": {"kind": "ClusterRole", "name": view.name_any(),
                            "apiGroup": "rbac.authorization.k8s.io"},
                "subjects": [{"kind": "User", "name": "team-a-viewer",
                              "apiGroup": "rbac.authorization.k8s.io"}]
            }))?,
        )
        .await?;
    let dir = env
        .cp_dir()
        .unwrap_or(env.log_dir())
        .join(format!("tenancy-share-{suffix}"));
    std::fs::create_dir_all(&dir)?;
    let tenant_config = dir.join("tenant.kubeconfig");
    env.kubeconfig_impersonating("team-a-viewer", &["team-a"], &tenant_config)?;

    step(
        "[Setup] a controller for this test's cluster quota; KarmadaClusterQuota over A and B, cpu=10",
    );
    label_business(admin, &a, Some(&business)).await?;
    label_business(admin, &b, Some(&business)).await?;
    let _ctl = Controller::builder()
        .arg(format!("--cluster-quota-selector={selector}"))
        .arg("--namespaced-quotas=false")
        .start(env)
        .await?;
    let kcqs: Api<KarmadaClusterQuota> = Api::all(admin.clone());
    kcqs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "quota.karmada.io/v1alpha1", "kind": "KarmadaClusterQuota",
            "metadata": {"name": name, "labels": {"e2e.karmada-quota/business": business}},
            "spec": {"namespaceSelector": {"matchLabels": {"e2e.karmada-quota/business": business}},
                     "hard": {"requests.cpu": "10"}}
        }))?,
    )
    .await?;
    step("[Create] 1 cpu of bindings in A, 2 in B (no webhook: straight in)");
    for (ns, replicas) in [(&a, 1), (&b, 2)] {
        let rb = Rb::deployment("web", replicas).request("cpu", "1").json(ns);
        karmada_quota_e2e::accepts(admin, &rb).await?;
    }
    let want = Some(("3".to_owned(), "1".to_owned()));
    wait_for(
        "A's share: 3 in total, 1 in A",
        Duration::from_secs(30),
        || async {
            share_cpu(admin, &a, &name)
                .await
                .filter(|v| Some(v) == want.as_ref())
        },
    )
    .await?;
    wait_for("B's share: 2 in B", Duration::from_secs(30), || async {
        share_cpu(admin, &b, &name)
            .await
            .filter(|v| *v == ("3".to_owned(), "2".to_owned()))
    })
    .await?;

    step("[Get] as the tenant: the cluster-scoped KarmadaClusterQuota is forbidden");
    let o = kubectl(&tenant_config, &["get", "karmadaclusterquota", &name]).await?;
    ensure!(
        !o.status.success() && text(&o).contains("forbidden"),
        "the tenant read the cluster quota: {}",
        text(&o)
    );

    step("[Get] as the tenant: kubectl get kcqshare -n A → total 3/10, A's 1; nothing of B");
    let o = kubectl(&tenant_config, &["get", "kcqshare", "-n", &a]).await?;
    let out = text(&o);
    eprintln!("{out}");
    ensure!(o.status.success(), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&name))
        .with_context(|| format!("no {name} row:\n{out}"))?;
    ensure!(
        row.contains("requests.cpu: 3/10")
            && row.contains("requests.cpu: 1")
            && row.contains("True"),
        "row: {row}"
    );
    let o = kubectl(
        &tenant_config,
        &["get", "kcqshare", "-n", &a, &name, "-o", "json"],
    )
    .await?;
    let json_out = text(&o);
    ensure!(o.status.success(), "{json_out}");
    ensure!(
        !json_out.contains(&b) && json_out.contains("\"hard\""),
        "A's share names B or lacks hard: {json_out}"
    );
    let o = kubectl(&tenant_config, &["get", "kcqshare", "-n", &b]).await?;
    ensure!(
        !o.status.success(),
        "the tenant read B's share: {}",
        text(&o)
    );

    step(
        "[Top] as the tenant: the plugin's top -n A lists the cluster quota, read through the share",
    );
    let o = plugin_with(&tenant_config, &["top", "-n", &a]).await?;
    let out = text(&o);
    eprintln!("{out}");
    ensure!(o.status.success(), "top failed: {out}");
    let cells = top_row(&out, &name)?;
    ensure!(
        cells
            == [
                "(cluster)",
                name.as_str(),
                "requests.cpu",
                "3",
                "0",
                "10",
                "30%"
            ],
        "row {cells:?}\n{out}"
    );
    ensure!(
        out.contains(&format!("note: you may not list KarmadaClusterQuotas (403 Forbidden): read through their KarmadaClusterQuotaShares in {a}\n")),
        "no note on stderr: {out}"
    );
    let o = plugin_with(&tenant_config, &["-n", &a, "get", "--cluster", &name]).await?;
    let out = text(&o);
    ensure!(
        o.status.success() && out.contains(&name),
        "get --cluster: {out}"
    );

    step("[Auth] the tenant may not write its share (RBAC: the controller's alone)");
    let tenant = impersonating(env, "team-a-viewer", &["team-a"])?;
    let shares = |c: &Client, ns: &str| Api::<KarmadaClusterQuotaShare>::namespaced(c.clone(), ns);
    let raise = Patch::Merge(json!({"spec": {"hard": {"requests.cpu": "1000"}}}));
    let s403 = refusal(
        "the tenant's share edit",
        shares(&tenant, &a)
            .patch(&name, &PatchParams::default(), &raise)
            .await,
    )?;
    ensure!(s403.code == 403, "{s403:?}");

    step("[Update] an edit of the share by hand (as the admin) is written back");
    shares(admin, &a)
        .patch(&name, &PatchParams::default(), &raise)
        .await?;
    wait_for(
        "the share's hard back at 10",
        Duration::from_secs(30),
        || async {
            shares(admin, &a).get(&name).await.ok().filter(|s| {
                s.spec
                    .cluster_quota
                    .quota
                    .hard
                    .get("requests.cpu")
                    .map(|q| q.0.as_str())
                    == Some("10")
            })
        },
    )
    .await?;

    step("[Label] B leaves the business → its share is deleted; A's total falls to 1");
    label_business(admin, &b, None).await?;
    wait_for("B's share gone", Duration::from_secs(30), || async {
        matches!(shares(admin, &b).get_opt(&name).await, Ok(None)).then_some(())
    })
    .await?;
    wait_for("A's share: 1 in total", Duration::from_secs(30), || async {
        share_cpu(admin, &a, &name)
            .await
            .filter(|v| *v == ("1".to_owned(), "1".to_owned()))
    })
    .await?;

    step("[Delete] the cluster quota → the controller deletes A's share too");
    kcqs.delete(&name, &DeleteParams::default()).await?;
    wait_for("A's share gone", Duration::from_secs(30), || async {
        matches!(shares(admin, &a).get_opt(&name).await, Ok(None)).then_some(())
    })
    .await?;

    cr.delete(&view.name_any(), &DeleteParams::default())
        .await?;
    std::fs::remove_dir_all(&dir).ok();
    ns_a.delete(admin).await?;
    ns_b.delete(admin).await?;
    Ok(())
}
