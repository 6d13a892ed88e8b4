//! KarmadaClusterQuota against a real apiserver: one quota over the namespaces a label
//! selector picks. Admission (validation with field-named messages, a binding checked
//! against its namespace's quotas and every cluster quota selecting it), the concurrency
//! test through two webhook replicas, and the controller moving usage when a namespace is
//! relabelled.
//!
//! Cluster quotas are cluster-scoped, so each test names its own with a unique name and
//! selects its own namespaces by a label value no other test uses.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_e2e::controller::Controller;
use karmada_quota_e2e::proxy::TcpProxy;
use karmada_quota_e2e::setup::{WebhookSetup, step, synced_quota};
use karmada_quota_e2e::viewer::Viewer;
use karmada_quota_e2e::webhook::{
    NS_LABEL, Outcome, Rb, Registration, Webhook, binding_denied, bindings, create,
    expect_admitted, expect_refused, wait_until_status_seen,
};
use karmada_quota_e2e::{Env, TestNs, http_get_with, wait_for};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The label the test's namespaces carry (value: unique per test).
const BUSINESS: &str = "e2e.karmada-quota/business";

/// A cluster quota named `name` over the namespaces labelled `BUSINESS=<business>`,
/// labelled `NS_LABEL=<registration>` so that the test's own webhook judges it.
fn cluster_quota(name: &str, business: &str, registration: &str, hard: &[(&str, &str)]) -> Value {
    let hard: serde_json::Map<String, Value> = hard
        .iter()
        .map(|(k, v)| ((*k).to_owned(), json!(v)))
        .collect();
    json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaClusterQuota",
        "metadata": {"name": name, "labels": {NS_LABEL: registration, BUSINESS: business}},
        "spec": {"namespaceSelector": {"matchLabels": {BUSINESS: business}}, "hard": hard}
    })
}

fn api(c: &Client) -> Api<KarmadaClusterQuota> {
    Api::all(c.clone())
}

/// Creates the cluster quota `obj`; the apiserver's refusal as `Err(status)`.
async fn create_cluster_quota(
    c: &Client,
    obj: &Value,
) -> Result<Result<(), Box<kube::core::Status>>> {
    let q: KarmadaClusterQuota = serde_json::from_value(obj.clone())?;
    match api(c).create(&PostParams::default(), &q).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(s)) => Ok(Err(s)),
        Err(e) => Err(e).context("creating a KarmadaClusterQuota"),
    }
}

/// Writes `status.used` = 0 for every hard name and the reservation-store fence over
/// `hard`, as the controller does at its first sync.
async fn seed_zero(c: &Client, name: &str) -> Result<()> {
    let mut q = api(c).get(name).await?;
    let mut st = q.status.clone().unwrap_or_default();
    st.quota.used = q
        .spec
        .quota
        .hard
        .keys()
        .map(|k| {
            (
                k.clone(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("0".into()),
            )
        })
        .collect();
    karmada_quota_crds::convert::ensure_fence(&mut st.quota.reservations, &q.spec.quota.hard)
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    q.status = Some(st);
    api(c)
        .replace_status(name, &PostParams::default(), &q)
        .await
        .with_context(|| format!("seeding the status of KarmadaClusterQuota {name}"))?;
    Ok(())
}

async fn label_ns(c: &Client, ns: &str, business: Option<&str>) -> Result<()> {
    Api::<Namespace>::all(c.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {BUSINESS: business}}})),
        )
        .await
        .with_context(|| format!("labelling namespace {ns}"))?;
    Ok(())
}

async fn delete_cluster_quota(c: &Client, name: &str) {
    let _ = api(c).delete(name, &DeleteParams::default()).await;
}

/// A name no earlier run on this control plane used.
fn unique(prefix: &str, ns: &str) -> String {
    format!("{prefix}-{}", ns.rsplit('-').next().unwrap_or(ns))
}

/// The admissions' entries of the stored cluster quota: its status's (but the
/// reservation-store fence) and those of the batches it has not folded yet.
async fn entries_of(c: &Client, name: &str) -> Result<Vec<karmada_quota_crds::quota::Reservation>> {
    let q = api(c).get(name).await?;
    let status = q.status.unwrap_or_default().quota;
    let mut entries: Vec<_> = karmada_quota_e2e::quota_status::pending(&status)
        .into_iter()
        .cloned()
        .collect();
    entries.extend(
        karmada_quota_e2e::webhook::unfolded_entries(c, None, name, status.folded_through).await?,
    );
    Ok(entries)
}

/// Effective cpu of the stored cluster quota (used + Σ entries, [`entries_of`]), whole
/// cpus, and how many entries.
async fn effective_cpu(c: &Client, name: &str) -> Result<(i128, usize)> {
    let q = api(c).get(name).await?;
    let st = karmada_quota_crds::convert::cluster_quota_state(&q)
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let entries: Vec<karmada_quota_core::quota::Reservation> = entries_of(c, name)
        .await?
        .iter()
        .map(|r| karmada_quota_crds::convert::reservation_from_api(r, "reservations"))
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let eff =
        karmada_quota_core::ledger::effective_usage(&st.used.unwrap_or_default(), &entries, None);
    let cpu = eff.get_or_zero("requests.cpu").value();
    Ok((cpu, entries.len()))
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_cluster_quota_is_validated_and_charged_with_its_namespaces_quotas() -> Result<()> {
    let s = WebhookSetup::with_namespaces("kcq_admission", 3).await?;
    let c = &s.client;
    let (dev, prod, other) = (
        s.namespaces[0].name(),
        s.namespaces[1].name(),
        s.namespaces[2].name(),
    );
    let business = unique("biz", dev);
    let name = unique("kcq-admission", dev);
    label_ns(c, dev, Some(&business)).await?;
    label_ns(c, prod, Some(&business)).await?;

    step("[Create] a cluster quota without namespaceSelector → refused naming the field");
    let mut no_selector = cluster_quota(
        &name,
        &business,
        s.registration.name(),
        &[("requests.cpu", "3")],
    );
    no_selector["spec"]
        .as_object_mut()
        .unwrap()
        .remove("namespaceSelector");
    let refused = create_cluster_quota(c, &no_selector)
        .await?
        .expect_err("refused");
    ensure!(
        refused.message.contains("spec.namespaceSelector"),
        "{}",
        refused.message
    );
    step(
        "[Create] an empty namespaceSelector and a limits.cpu → 422 from the webhook, both fields named",
    );
    let mut empty = cluster_quota(
        &name,
        &business,
        s.registration.name(),
        &[("limits.cpu", "3")],
    );
    empty["spec"]["namespaceSelector"] = json!({});
    let refused = create_cluster_quota(c, &empty).await?.expect_err("refused");
    ensure!(refused.code == 422, "{refused:?}");
    ensure!(
        refused.message.contains(&format!(
            "KarmadaClusterQuota \"{name}\" is invalid: spec.namespaceSelector: Invalid value: \"{{}}\": an empty selector would select every namespace"
        )) && refused.message.contains("spec.hard[limits.cpu]"),
        "{}",
        refused.message
    );

    step(
        "[Create] cluster quota over dev and prod: requests.cpu=3; dev's own quota requests.cpu=2",
    );
    create_cluster_quota(
        c,
        &cluster_quota(
            &name,
            &business,
            s.registration.name(),
            &[("requests.cpu", "3")],
        ),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    seed_zero(c, &name).await?;
    synced_quota(c, dev, "dev", &[("requests.cpu", "2")]).await?;
    let one = |ns: &str, n: &str| Rb::deployment(n, 1).request("cpu", "1").json(ns);
    // The webhook's caches (cluster quota, its status, the namespace labels) caught up.
    wait_for(
        "the cluster quota applies in prod",
        Duration::from_secs(10),
        || async {
            let probe = one(prod, "probe");
            matches!(
                karmada_quota_e2e::webhook::create_with(c, &probe, true).await,
                Ok(Ok(_))
            )
            .then_some(())
        },
    )
    .await?;
    wait_until_status_seen(c, &one(dev, "probe")).await?;

    step("[Create] dev/a, dev/b (fit both), dev/c → refused by dev's quota");
    expect_admitted(create(c, &one(dev, "a")).await?)?;
    expect_admitted(create(c, &one(dev, "b")).await?)?;
    expect_refused(
        &create(c, &one(dev, "c")).await?,
        403,
        &binding_denied(
            "exceeded quota: dev, requested: requests.cpu=1, used: requests.cpu=2, limited: requests.cpu=2",
        ),
    )?;
    step(
        "[Create] prod/d fits the cluster quota (3 of 3); prod/e → refused naming the cluster quota",
    );
    expect_admitted(create(c, &one(prod, "d")).await?)?;
    expect_refused(
        &create(c, &one(prod, "e")).await?,
        403,
        &binding_denied(&format!(
            "exceeded cluster quota: {name}, requested: requests.cpu=1, used: requests.cpu=3, limited: requests.cpu=3"
        )),
    )?;
    step("[Create] a namespace the selector does not match is not charged");
    for i in 0..4 {
        expect_admitted(create(c, &one(other, &format!("free-{i}"))).await?)?;
    }
    let (cpu, entries) = effective_cpu(c, &name).await?;
    ensure!(
        (cpu, entries) == (3, 3),
        "effective {cpu} with {entries} entries"
    );
    let mut entry_ns: Vec<String> = entries_of(c, &name)
        .await?
        .iter()
        .map(|r| r.reserved_by.namespace.clone())
        .collect();
    entry_ns.sort();
    let mut want = vec![dev.to_owned(), dev.to_owned(), prod.to_owned()];
    want.sort();
    ensure!(
        entry_ns == want,
        "entries name their namespaces: {entry_ns:?}"
    );

    delete_cluster_quota(c, &name).await;
    s.teardown().await
}

const CREATES: usize = 200;
const CONCURRENCY: usize = 32;
const LIMIT: usize = 50;

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn concurrent_creates_over_three_namespaces_fill_a_cluster_quota_exactly_through_two_webhooks()
-> Result<()> {
    let env = Env::get().await?;
    let c = &env.client()?;
    let mut namespaces = Vec::new();
    for _ in 0..3 {
        namespaces.push(TestNs::new(c, "kcq_concurrent").await?);
    }
    let names: Vec<&str> = namespaces.iter().map(TestNs::name).collect();
    let business = unique("biz", names[0]);
    let quota = unique("kcq-concurrent", names[0]);
    for ns in &names {
        label_ns(c, ns, Some(&business)).await?;
    }
    let webhooks = [Webhook::start(env).await?, Webhook::start(env).await?];
    let proxy = TcpProxy::round_robin(webhooks.iter().map(Webhook::addr).collect()).await?;
    let hooks: Vec<&Webhook> = webhooks.iter().collect();
    let registration = Registration::register(c, &proxy.url(), &names, &hooks).await?;
    step(&format!(
        "[Setup] 2 webhooks behind {}, namespaces {}",
        proxy.url(),
        names.join(", ")
    ));
    step("[Create] KarmadaClusterQuota requests.cpu=50 over the three namespaces; used zero");
    create_cluster_quota(
        c,
        &cluster_quota(
            &quota,
            &business,
            registration.name(),
            &[("requests.cpu", "50")],
        ),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    seed_zero(c, &quota).await?;
    let one = |i: usize| {
        Rb::deployment(&format!("rb-{i:03}"), 1)
            .request("cpu", "1")
            .json(names[i % 3])
    };
    // Both replicas see the cluster quota and its status (a dry run is answered by either).
    for ns in 0..3 {
        for _ in 0..4 {
            wait_for(
                "the cluster quota is enforced",
                Duration::from_secs(10),
                || async {
                    matches!(
                        karmada_quota_e2e::webhook::create_with(c, &one(900 + ns), true).await,
                        Ok(Ok(_))
                    )
                    .then_some(())
                },
            )
            .await?;
        }
    }

    step(&format!(
        "[Create] {CREATES} ResourceBindings of 1 cpu over 3 namespaces, {CONCURRENCY} at a time"
    ));
    let started = Instant::now();
    let outcomes: Vec<(usize, Result<Outcome>)> = futures::stream::iter(0..CREATES)
        .map(|i| async move { (i, create(c, &one(i)).await) })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let elapsed = started.elapsed();
    let want = binding_denied(&format!(
        "exceeded cluster quota: {quota}, requested: requests.cpu=1, used: requests.cpu={LIMIT}, limited: requests.cpu={LIMIT}"
    ));
    let (mut admitted, mut denied, mut other) = (0, 0, Vec::new());
    for (i, outcome) in outcomes {
        match outcome {
            Ok(Ok(_)) => admitted += 1,
            Ok(Err(s)) if s.code == 403 && s.message == want => denied += 1,
            Ok(Err(s)) => other.push(format!("rb-{i:03}: {} {}: {}", s.code, s.reason, s.message)),
            Err(e) => other.push(format!("rb-{i:03}: {e:#}")),
        }
    }
    step(&format!(
        "[Result] {admitted} admitted, {denied} denied by quota, {} other errors in {elapsed:.2?}",
        other.len()
    ));
    ensure!(
        other.is_empty(),
        "{} requests failed otherwise than by quota, e.g.:\n{}",
        other.len(),
        other
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(admitted, LIMIT, "admitted");
    assert_eq!(denied, CREATES - LIMIT, "denied by quota");
    let mut stored = 0;
    for ns in &names {
        stored += bindings(c, ns)
            .list(&ListParams::default())
            .await?
            .items
            .len();
    }
    assert_eq!(stored, LIMIT, "bindings stored over the three namespaces");
    let (cpu, entries) = effective_cpu(c, &quota).await?;
    assert_eq!(
        (cpu, entries),
        (LIMIT as i128, LIMIT),
        "effective usage and entries"
    );

    delete_cluster_quota(c, &quota).await;
    registration.cleanup().await?;
    for ns in namespaces {
        ns.delete(c).await?;
    }
    Ok(())
}

/// `status.used[requests.cpu]` and the namespaces listed, as the controller wrote them.
async fn written(c: &Client, name: &str) -> Result<Option<(String, Vec<String>)>> {
    let q = api(c).get(name).await?;
    let Some(st) = q.status else { return Ok(None) };
    let Some(cpu) = st.quota.used.get("requests.cpu") else {
        return Ok(None);
    };
    Ok(Some((
        cpu.0.clone(),
        st.namespaces.iter().map(|n| n.name.clone()).collect(),
    )))
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn a_relabelled_namespace_moves_its_usage_at_the_next_reconcile() -> Result<()> {
    let env = Env::get().await?;
    let c = &env.client()?;
    let mut namespaces = Vec::new();
    for _ in 0..3 {
        namespaces.push(TestNs::new(c, "kcq_relabel").await?);
    }
    let names: Vec<String> = namespaces.iter().map(|n| n.name().to_owned()).collect();
    let business = unique("biz", &names[0]);
    let quota = unique("kcq-relabel", &names[0]);
    label_ns(c, &names[0], Some(&business)).await?;
    label_ns(c, &names[1], Some(&business)).await?;
    step(
        "[Setup] a controller for this test's cluster quotas only (no webhook: bindings go straight in)",
    );
    let selector = format!("{BUSINESS}={business}");
    let ctl = Controller::builder()
        .arg(format!("--cluster-quota-selector={selector}"))
        .arg("--namespaced-quotas=false")
        .start(env)
        .await?;
    create_cluster_quota(
        c,
        &cluster_quota(&quota, &business, "none", &[("requests.cpu", "100")]),
    )
    .await?
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    step("[Create] 1 cpu in ns0, 2 cpu in ns1 (selected), 4 cpu in ns2 (not)");
    for (ns, replicas) in [(&names[0], 1), (&names[1], 2), (&names[2], 4)] {
        let rb = Rb::deployment("web", replicas).request("cpu", "1").json(ns);
        karmada_quota_e2e::accepts(c, &rb).await?;
    }
    let mut sel01 = vec![names[0].clone(), names[1].clone()];
    sel01.sort();
    wait_for(
        "used = 3 over ns0, ns1",
        Duration::from_secs(30),
        || async {
            written(c, &quota)
                .await
                .ok()
                .flatten()
                .filter(|w| *w == ("3".to_owned(), sel01.clone()))
        },
    )
    .await?;
    let q = api(c).get(&quota).await?;
    let st = q.status.unwrap_or_default();
    let per_ns: Vec<(String, String)> = st
        .namespaces
        .iter()
        .map(|n| (n.name.clone(), n.used["requests.cpu"].0.clone()))
        .collect();
    ensure!(
        per_ns.iter().any(|(n, u)| *n == names[1] && u == "2"),
        "{per_ns:?}"
    );
    ensure!(
        st.quota
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True"),
        "{:?}",
        st.quota.conditions
    );

    step("[Label] ns2 joins the business, ns0 leaves it → used = 2 + 4 = 6");
    label_ns(c, &names[2], Some(&business)).await?;
    label_ns(c, &names[0], None).await?;
    let mut sel12 = vec![names[1].clone(), names[2].clone()];
    sel12.sort();
    wait_for(
        "used = 6 over ns1, ns2",
        Duration::from_secs(30),
        || async {
            written(c, &quota)
                .await
                .ok()
                .flatten()
                .filter(|w| *w == ("6".to_owned(), sel12.clone()))
        },
    )
    .await?;
    step("[Get] the dashboard's JSON view lists the cluster quota (empty namespace)");
    // The dashboard is fed once a second: give it a few.
    let _ = wait_for(
        "the dashboard's view to list the cluster quota",
        Duration::from_secs(10),
        || async {
            ctl.snapshot()
                .await
                .ok()
                .filter(|v| v.to_string().contains(&quota))
        },
    )
    .await;
    let view = ctl.report("", &quota).await.ok().flatten();
    let listed = ctl.snapshot().await?;
    ensure!(
        view.is_some() || listed.to_string().contains(&quota),
        "the view lists {quota}: {listed}"
    );

    step(
        "[Get] a viewer of ns1 alone, on a dashboard with logins: ns1's share of the cluster quota, nothing of ns2",
    );
    let viewer = Viewer::create(c, &names[1], "cq-viewer", &[&names[1]]).await?;
    let dash = Controller::builder()
        .arg("--role=dashboard")
        .arg("--dashboard-auth=kubernetes")
        .arg(format!("--cluster-quota-selector={selector}"))
        .arg("--namespaced-quotas=false")
        .start(env)
        .await?;
    let path = format!("/api/v1/cluster-quotas/{quota}");
    let bearer = viewer.bearer();
    let body = wait_for("the viewer's share", Duration::from_secs(20), || async {
        let (code, body) =
            http_get_with(dash.dashboard_addr(), &path, &[("Authorization", &bearer)])
                .await
                .ok()?;
        (code == 200).then_some(body)
    })
    .await?;
    let v: Value = serde_json::from_str(&body)?;
    let q = &v["quota"];
    ensure!(
        q["used"]["requests.cpu"] == "6"
            && q["namespaces"] == json!([names[1]])
            && q["shares"][&names[1]]["requests.cpu"] == "2"
            && q["shares"].as_object().is_some_and(|m| m.len() == 1)
            && !body.contains(&names[2]),
        "the viewer of {} sees: {body}",
        names[1]
    );
    drop(dash);

    delete_cluster_quota(c, &quota).await;
    drop(ctl);
    for ns in namespaces {
        ns.delete(c).await?;
    }
    Ok(())
}
