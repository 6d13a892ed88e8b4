//! Members reached without verification (docs/security.md, threat 8): a Cluster that asks for
//! `spec.insecureSkipTLSVerification`, an `http://` apiEndpoint, or a `--member-kubeconfig`
//! with `insecure-skip-tls-verify` would have the controller send the member's bearer token
//! to whoever answers at that address. They are refused unless `--allow-insecure-members`
//! names them; an allowed one is connected and named in `MembersReachable`.
//!
//! Each unverified member is put behind its own [`TcpProxy`], which counts the connections
//! the controller opens: a refused member must get none (its token never leaves).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use karmada_quota_crds::Cluster;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::quota::CONDITION_MEMBERS_REACHABLE;
use karmada_quota_e2e::controller::{
    ClusterRegistration, Controller, MemberApi, MemberCluster, cluster_observed_is, condition,
    ensure_namespace, member_apis, member_pod as pod, wait_quota, wait_synced,
};
use karmada_quota_e2e::proxy::TcpProxy;
use karmada_quota_e2e::setup::step;
use karmada_quota_e2e::webhook::quota;
use karmada_quota_e2e::{Env, TestNs, accepts, apply_json, free_port};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

/// How long the status may take to say what the member tasks found.
const FOLLOW: Duration = Duration::from_secs(30);

/// Sets `spec.insecureSkipTLSVerification` of Cluster `name` (Karmada's field).
async fn skip_verification(client: &Client, name: &str, endpoint: &str) -> Result<()> {
    Api::<Cluster>::all(client.clone())
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"insecureSkipTLSVerification": true, "apiEndpoint": endpoint}}),
            ),
        )
        .await
        .with_context(|| format!("patching Cluster {name}"))?;
    Ok(())
}

/// A kubeconfig for `api` at `server` that skips TLS verification.
fn insecure_kubeconfig(api: &MemberApi, server: &str, path: &std::path::Path) -> Result<()> {
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: member\n  cluster:\n    server: {server}\n    insecure-skip-tls-verify: true\n\
         users:\n- name: admin\n  user:\n    token: {}\ncontexts:\n- name: member\n  context:\n    cluster: member\n    user: admin\n\
         current-context: member\n",
        api.token
    );
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

/// The MembersReachable condition's (status, reason, message).
fn members(q: &KarmadaQuota) -> (String, String, String) {
    condition(q, CONDITION_MEMBERS_REACHABLE).map_or_else(Default::default, |c| {
        (c.status.clone(), c.reason.clone(), c.message.clone())
    })
}

/// The value of `kq_controller_member_reachable{cluster="<member>"}`, if exported.
fn reachable_gauge(metrics: &str, member: &str) -> Option<String> {
    let series = format!("kq_controller_member_reachable{{cluster=\"{member}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series).map(str::to_owned))
}

/// The test's namespace in the control plane and in both member apiservers.
async fn setup(test: &str) -> Result<(&'static Env, Client, TestNs, Vec<MemberApi>)> {
    let env = Env::get().await?;
    let client = env.client()?;
    let apis = member_apis(env, 2)?;
    let ns = TestNs::new(&client, test).await?;
    for m in env.member_clients()? {
        ensure_namespace(&m, ns.name()).await?;
    }
    Ok((env, client, ns, apis))
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn unverified_members_are_refused_and_never_sent_their_token() -> Result<()> {
    let (env, client, ns, apis) = setup("attacks_members::refused").await?;
    let ns_name = ns.name().to_owned();
    let verified = format!("{ns_name}-verified");
    let skip = format!("{ns_name}-skip");
    let http = format!("{ns_name}-http");
    let kubeconfig = format!("{ns_name}-kubeconfig");
    // Each unverified member's "apiserver" counts the connections it is sent.
    let skip_proxy = TcpProxy::start(apis[1].addr).await?;
    let http_proxy = TcpProxy::start(apis[1].addr).await?;
    let kc_proxy = TcpProxy::start(apis[1].addr).await?;
    step(&format!(
        "[Create] Clusters {verified} (CA verified), {skip} (insecureSkipTLSVerification, at {}), \
         {http} (http://{}); --member-kubeconfig {kubeconfig} (insecure-skip-tls-verify, at {})",
        skip_proxy.url(),
        http_proxy.addr(),
        kc_proxy.url()
    ));
    let clusters = ClusterRegistration::register(
        &client,
        &ns_name,
        &[
            MemberCluster::new(&verified, &apis[0]),
            // Registered (verified) at a closed port first, then pointed at its proxy in
            // the same patch that sets insecureSkipTLSVerification: Clusters are
            // cluster-scoped, so every controller of the concurrent tests sees this one,
            // and a verified connection in between must not count.
            MemberCluster::new(&skip, &apis[1]).via(&format!("https://127.0.0.1:{}", free_port()?)),
            MemberCluster::new(&http, &apis[1]).via(&format!("http://{}", http_proxy.addr())),
        ],
    )
    .await?;
    skip_verification(&client, &skip, &skip_proxy.url()).await?;
    let kc_path = std::env::temp_dir().join(format!("{ns_name}-insecure.kubeconfig"));
    insecure_kubeconfig(&apis[1], &kc_proxy.url(), &kc_path)?;

    let mut ctl = Controller::builder()
        .namespace(&ns_name)
        .member_kubeconfig(&kubeconfig, &kc_path)
        .start(env)
        .await?;
    let members_client = env.member_clients()?;
    apply_json(&members_client[0], &ns_name, pod(&ns_name, "web-0", "500m")).await?;
    accepts(&client, &quota(&ns_name, "q", &[("requests.cpu", "10")])).await?;
    wait_synced(&client, &ns_name, "q").await?;

    let refused = |q: &KarmadaQuota, member: &str| {
        members(q)
            .2
            .contains(&format!("{member} unreachable: refused: "))
    };
    let q = wait_quota(
        &client,
        &ns_name,
        "q",
        "MembersReachable=False naming the three unverified members as refused",
        FOLLOW,
        |q| {
            members(q).0 == "False"
                && refused(q, &skip)
                && refused(q, &http)
                && refused(q, &kubeconfig)
                && cluster_observed_is(q, &verified, &[("requests.cpu", "500m")])
        },
    )
    .await?;
    let (status, reason, message) = members(&q);
    step(&format!(
        "    ✓ MembersReachable={status} {reason}: {message}"
    ));
    ensure!(!refused(&q, &verified), "{verified} is verified: {message}");
    for (member, why) in [
        (&skip, "spec.insecureSkipTLSVerification"),
        (&http, "plain http://"),
        (&kubeconfig, "insecure-skip-tls-verify"),
    ] {
        let part = message
            .split("; ")
            .find(|p| p.starts_with(&format!("{member} unreachable: ")))
            .with_context(|| format!("{member} not in {message}"))?;
        ensure!(
            part.contains(why),
            "{member}'s reason must say {why}: {part}"
        );
        ensure!(
            part.contains(&format!("--allow-insecure-members={member}")),
            "{member}'s reason must say how to allow it: {part}"
        );
    }

    // Several retries later (backoff ≤ 2 s): still nothing sent, logged once.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (member, proxy) in [
        (&skip, &skip_proxy),
        (&http, &http_proxy),
        (&kubeconfig, &kc_proxy),
    ] {
        ensure!(
            proxy.connections() == 0,
            "{member}: the controller opened {} connection(s) to a member it must refuse",
            proxy.connections()
        );
    }
    let metrics = ctl.metrics().await?;
    for member in [&skip, &http, &kubeconfig] {
        ensure!(
            reachable_gauge(&metrics, member).as_deref() == Some("0"),
            "kq_controller_member_reachable of {member}: {:?}",
            reachable_gauge(&metrics, member)
        );
    }
    let log = std::fs::read_to_string(ctl.binary().log_path())?;
    for member in [&skip, &http, &kubeconfig] {
        let lines = log
            .lines()
            .filter(|l| l.contains(&format!("member cluster {member} refused")))
            .count();
        ensure!(
            lines == 1,
            "{member}: refusal logged {lines} times, not once"
        );
    }
    ctl.binary()
        .check_running()
        .context("the controller must not crash")?;

    drop(ctl);
    let _ = std::fs::remove_file(&kc_path);
    clusters.cleanup().await?;
    ns.delete(&client).await
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn allowed_insecure_members_are_connected_and_named_in_the_condition() -> Result<()> {
    let (env, client, ns, apis) = setup("attacks_members::allowed").await?;
    let ns_name = ns.name().to_owned();
    let verified = format!("{ns_name}-verified");
    let skip = format!("{ns_name}-skip");
    let kubeconfig = format!("{ns_name}-kubeconfig");
    let skip_proxy = TcpProxy::start(apis[1].addr).await?;
    step(&format!(
        "[Create] Clusters {verified} (verified), {skip} (insecureSkipTLSVerification); \
         --member-kubeconfig {kubeconfig} (insecure); --allow-insecure-members={skip},{kubeconfig}"
    ));
    let clusters = ClusterRegistration::register(
        &client,
        &ns_name,
        &[
            MemberCluster::new(&verified, &apis[0]),
            MemberCluster::new(&skip, &apis[1]).via(&skip_proxy.url()),
        ],
    )
    .await?;
    skip_verification(&client, &skip, &skip_proxy.url()).await?;
    let kc_path = std::env::temp_dir().join(format!("{ns_name}-insecure.kubeconfig"));
    insecure_kubeconfig(&apis[1], &apis[1].server, &kc_path)?;

    let mut ctl = Controller::builder()
        .namespace(&ns_name)
        .member_kubeconfig(&kubeconfig, &kc_path)
        .arg(format!("--allow-insecure-members={skip},{kubeconfig}"))
        .start(env)
        .await?;
    let members_client = env.member_clients()?;
    apply_json(&members_client[0], &ns_name, pod(&ns_name, "web-0", "500m")).await?;
    apply_json(&members_client[1], &ns_name, pod(&ns_name, "web-1", "250m")).await?;
    accepts(&client, &quota(&ns_name, "q", &[("requests.cpu", "10")])).await?;
    wait_synced(&client, &ns_name, "q").await?;

    let q = wait_quota(
        &client,
        &ns_name,
        "q",
        "MembersReachable=True ReachableUnverified naming both allowed members",
        FOLLOW,
        |q| {
            let (status, reason, message) = members(q);
            status == "True"
                && reason == "ReachableUnverified"
                && message.contains(&format!("{skip} ("))
                && message.contains(&format!("{kubeconfig} ("))
                && cluster_observed_is(q, &skip, &[("requests.cpu", "250m")])
                && cluster_observed_is(q, &kubeconfig, &[("requests.cpu", "250m")])
                && cluster_observed_is(q, &verified, &[("requests.cpu", "500m")])
        },
    )
    .await?;
    let (status, reason, message) = members(&q);
    step(&format!(
        "    ✓ MembersReachable={status} {reason}: {message}"
    ));
    let unverified = message
        .split_once("reached WITHOUT TLS verification")
        .map(|(_, list)| list)
        .with_context(|| format!("no list of unverified members in {message}"))?;
    ensure!(
        !unverified.contains(&format!("{verified} (")),
        "{verified} is verified and must not be listed: {message}"
    );
    ensure!(
        unverified.contains("spec.insecureSkipTLSVerification")
            && unverified.contains("insecure-skip-tls-verify"),
        "each allowed member's reason: {message}"
    );
    ensure!(
        skip_proxy.connections() > 0,
        "{skip} was allowed but never connected"
    );
    let metrics = ctl.metrics().await?;
    ensure!(
        reachable_gauge(&metrics, &skip).as_deref() == Some("1"),
        "kq_controller_member_reachable of {skip}: {:?}",
        reachable_gauge(&metrics, &skip)
    );
    let log = std::fs::read_to_string(ctl.binary().log_path())?;
    ensure!(
        log.lines().any(|l| l.contains(&format!(
            "member cluster {skip} is reached WITHOUT TLS verification"
        ))),
        "the allowed insecure member must be logged"
    );

    drop(ctl);
    let _ = std::fs::remove_file(&kc_path);
    clusters.cleanup().await?;
    ns.delete(&client).await
}
