//! The dashboard as a process and identity of its own (`--role=dashboard`,
//! docs/security.md threat 9a: "the dashboard can run as its own Deployment and identity that holds no
//! member-cluster token"), on the loopback control plane:
//!
//! ```text
//!  controller --role=controller ── member1, member2 (kubeconfigs), member9 (nothing
//!     │                             listens): measures pods, writes status
//!     ▼ status: clusters[].observed, MembersReachable=False "member9 unreachable: …"
//!  dashboard --role=dashboard, as ServiceAccount kq-dashboard: read quotas, bindings,
//!     namespaces, events — no Secret, no status (both proven Forbidden first)
//!     └─► /api/v1: member1 observed = the pods the controller measured; member9
//!         unreachable with the controller's error; the page says "dashboard-only";
//!         it wrote nothing
//!  --role=dashboard --member-kubeconfig … ─► refuses to start, naming the flag
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_e2e::controller::{
    CONTROLLER_BIN, Controller, cluster_observed_is, condition, control_plane_api,
    ensure_namespace, member_apis, member_pod, used_is, wait_quota,
};
use karmada_quota_e2e::viewer::Viewer;
use karmada_quota_e2e::webhook::{Rb, create, expect_admitted, quota};
use karmada_quota_e2e::{
    Binary, Env, TestNs, accepts, apply_json, free_port, http_get, try_wait_for,
};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const FOLLOW: Duration = Duration::from_secs(20);

fn step(s: &str) {
    eprintln!("{s}");
}

fn scratch(name: &str) -> Result<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-only");
    std::fs::create_dir_all(&dir)?;
    Ok(dir.join(name))
}

/// The dashboard's ClusterRole, as the chart grants it: read what it shows, review
/// viewers' tokens; no Secret, no status, no write.
fn dashboard_role(name: &str) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": ["quota.karmada.io"],
             "resources": ["karmadaquotas", "karmadaclusterquotas"],
             "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["work.karmada.io"], "resources": ["resourcebindings"],
             "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["namespaces", "events"],
             "verbs": ["list", "watch"]},
            {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
             "verbs": ["create"]},
            {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
             "verbs": ["create"]},
        ]
    })
}

/// ServiceAccount `ns/kq-dashboard` bound to [`dashboard_role`], and a kubeconfig of it.
async fn dashboard_identity(env: &Env, client: &Client, ns: &str) -> Result<(Client, PathBuf)> {
    let viewer = Viewer::create(client, ns, "kq-dashboard", &[]).await?;
    let role = format!("{ns}-kq-dashboard");
    let pp = PatchParams::apply("karmada-quota-e2e").force();
    Api::<ClusterRole>::all(client.clone())
        .patch(&role, &pp, &Patch::Apply(dashboard_role(&role)))
        .await
        .context("ClusterRole")?;
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(
            &role,
            &pp,
            &Patch::Apply(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": role},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": "kq-dashboard", "namespace": ns}]})),
        )
        .await
        .context("ClusterRoleBinding")?;
    let path = control_plane_api(env)?
        .kubeconfig_as(&viewer.token, &scratch(&format!("{ns}.kubeconfig"))?)?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&path)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok((Client::try_from(config)?, path))
}

async fn remove_identity(client: &Client, ns: &str) -> Result<()> {
    let role = format!("{ns}-kq-dashboard");
    let dp = DeleteParams::default();
    Api::<ClusterRoleBinding>::all(client.clone())
        .delete(&role, &dp)
        .await?;
    Api::<ClusterRole>::all(client.clone())
        .delete(&role, &dp)
        .await?;
    Ok(())
}

fn forbidden<T>(res: kube::Result<T>) -> bool {
    matches!(res, Err(kube::Error::Api(e)) if e.code == 403)
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_dashboard_only_replica_shows_what_the_controller_measured_without_any_member_credential()
-> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    let apis = member_apis(env, 2)?;
    let ns = TestNs::new(&client, "dash-only").await?;
    let n = ns.name().to_owned();
    let members = env.member_clients()?;
    for m in &members {
        ensure_namespace(m, &n).await?;
    }
    let res = run(env, &client, &n, &apis[0], &members[0]).await;
    let cleanup = remove_identity(&client, &n).await;
    res?;
    cleanup?;
    ns.delete(&client).await
}

async fn run(
    env: &'static Env,
    client: &Client,
    n: &str,
    member1: &karmada_quota_e2e::controller::MemberApi,
    member1_client: &Client,
) -> Result<()> {
    step(
        "[Setup] the controller (--role=controller) measures member1, member2 and member9 (nothing listens there)",
    );
    let closed = format!("https://127.0.0.1:{}", free_port()?);
    let member9 = member1.kubeconfig_via(&closed, &scratch(&format!("{n}-member9.kubeconfig"))?)?;
    let ctl = Controller::builder()
        .namespace(n)
        .env_members(env)
        .member_kubeconfig("member9", &member9)
        .arg("--role=controller")
        .start(env)
        .await?;
    ensure!(
        http_get(ctl.dashboard_addr(), "/").await.is_err(),
        "--role=controller serves no dashboard"
    );

    step(
        "[Create] quota q (requests.cpu 10, pods 10), binding web 2 × 500m on member1, 700m of pods running in member1",
    );
    accepts(
        client,
        &quota(n, "q", &[("requests.cpu", "10"), ("pods", "10")]),
    )
    .await?;
    let web = Rb::deployment("web", 2)
        .request("cpu", "500m")
        .clusters(&[("member1", 2)]);
    expect_admitted(create(client, &web.json(n)).await?)?;
    apply_json(member1_client, n, member_pod(n, "web-0", "300m")).await?;
    apply_json(member1_client, n, member_pod(n, "web-1", "400m")).await?;
    let q = wait_quota(
        client,
        n,
        "q",
        "the controller wrote used 1 cpu, member1 observed 700m, member9 unreachable",
        FOLLOW,
        |q: &KarmadaQuota| {
            used_is(q, &[("requests.cpu", "1"), ("pods", "2")])
                && cluster_observed_is(q, "member1", &[("requests.cpu", "700m"), ("pods", "2")])
                && condition(q, "MembersReachable").is_some_and(|c| {
                    c.status == "False" && c.message.contains("member9 unreachable: ")
                })
        },
    )
    .await?;

    step("[Setup] the dashboard's own identity: it may not read a Secret nor write a status");
    let (dash_client, kubeconfig) = dashboard_identity(env, client, n).await?;
    ensure!(
        forbidden(
            Api::<Secret>::namespaced(dash_client.clone(), "karmada-cluster")
                .list(&Default::default())
                .await
        ),
        "the dashboard's identity can list member Secrets"
    );
    ensure!(
        forbidden(
            Api::<Secret>::all(dash_client.clone())
                .list(&Default::default())
                .await
        ),
        "the dashboard's identity can list Secrets"
    );
    let mut copy = q.clone();
    copy.metadata.managed_fields = None;
    ensure!(
        forbidden(
            Api::<KarmadaQuota>::namespaced(dash_client.clone(), n)
                .replace_status("q", &PostParams::default(), &copy,)
                .await
        ),
        "the dashboard's identity can write a quota's status"
    );

    step("[Setup] the dashboard (--role=dashboard) as that identity");
    let dash = Controller::builder()
        .namespace(n)
        .kubeconfig(&kubeconfig)
        .arg("--role=dashboard")
        .start(env)
        .await?;

    step(
        "[Get] its /api/v1 shows the controller's numbers: member1 observed 700m, member9 unreachable",
    );
    let started = Instant::now();
    try_wait_for("the dashboard-only view of q", FOLLOW, || async {
        let Some(r) = dash.report(n, "q").await? else {
            return Ok(None);
        };
        let m1 = r["clusters"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"] == "member1")
            .cloned();
        let ok = r["used"]["requests.cpu"] == "1"
            && m1.as_ref().is_some_and(|c| {
                c["observed"]["requests.cpu"] == "700m" && c["placed"]["requests.cpu"] == "1"
            });
        anyhow::Ok(ok.then_some(r))
    })
    .await?;
    eprintln!("    ✓ shown within {:.1?}", started.elapsed());
    ensure!(
        dash.member_reach("member1").await?.as_deref() == Some("reachable"),
        "member1 is reachable on the dashboard: {}",
        dash.snapshot().await?
    );
    let snapshot = dash.snapshot().await?;
    let m9 = snapshot["members"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["name"] == "member9")
        .cloned()
        .unwrap_or_default();
    ensure!(
        m9["reach"] == "unreachable" && m9["message"].as_str().is_some_and(|m| !m.is_empty()),
        "member9 is shown unreachable with the controller's error: {snapshot}"
    );
    let (_, page) = http_get(dash.dashboard_addr(), "/").await?;
    ensure!(
        page.contains("dashboard-only replica"),
        "the page names its role: {page}"
    );

    step("[Get] it wrote nothing: no status write, the quota's resourceVersion unchanged by it");
    ensure!(
        dash.status_writes().await? == 0,
        "the dashboard wrote a status"
    );
    ensure!(
        Api::<KarmadaQuota>::namespaced(client.clone(), n)
            .get("q")
            .await?
            .status
            .is_some(),
        "quota q lost its status"
    );
    drop(ctl);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = Api::<KarmadaQuota>::namespaced(client.clone(), n)
        .get("q")
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = Api::<KarmadaQuota>::namespaced(client.clone(), n)
        .get("q")
        .await?;
    ensure!(
        after.metadata.resource_version == before.metadata.resource_version,
        "with the controller stopped, something (the dashboard) still writes quota q"
    );
    drop(dash);
    Ok(())
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_dashboard_only_replica_refuses_member_credentials() -> Result<()> {
    let env = Env::get().await?;
    let apis = member_apis(env, 1)?;
    let mut refused = Binary::builder(CONTROLLER_BIN)
        .arg("--kubeconfig")
        .arg(env.kubeconfig())
        .arg(format!("--admin-listen=127.0.0.1:{}", free_port()?))
        .arg(format!("--dashboard-listen=127.0.0.1:{}", free_port()?))
        .arg("--role=dashboard")
        .arg(format!(
            "--member-kubeconfig=member1={}",
            apis[0].kubeconfig.display()
        ))
        .start(env)?;
    let msg = refused.exit_message(Duration::from_secs(20)).await?;
    ensure!(
        msg.contains("--role=dashboard holds no member-cluster credential")
            && msg.contains("--member-kubeconfig (member1)"),
        "the error names the role and the flag: {msg}"
    );
    Ok(())
}
