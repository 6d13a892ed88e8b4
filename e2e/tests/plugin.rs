//! `kubectl karmada-quota` against a real apiserver: `get`, `describe` and `check` read the
//! quotas, bindings and Clusters the apiserver serves, with kubectl's flags.

use std::path::Path;

use anyhow::{Context, Result, ensure};
use karmada_quota_e2e::commands::{plugin, text};
use karmada_quota_e2e::webhook::{quota, seed_used};
use karmada_quota_e2e::{Env, TestNs, accepts};

fn step(s: &str) {
    eprintln!("{s}");
}

fn write(dir: &Path, name: &str, yaml: &str) -> Result<String> {
    let path = dir.join(name);
    std::fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
    Ok(path.display().to_string())
}

#[tokio::test]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn the_plugin_reads_quotas_and_checks_a_change_against_the_cluster() -> Result<()> {
    let env = Env::get().await?;
    let client = env.client()?;
    let ns = TestNs::new(&client, "plugin").await?;
    let n = ns.name();

    step("[Create] KarmadaQuota compute: requests.cpu=4, pods=10; status.used cpu=3, pods=3");
    accepts(
        &client,
        &quota(n, "compute", &[("requests.cpu", "4"), ("pods", "10")]),
    )
    .await?;
    seed_used(
        &client,
        n,
        "compute",
        &[("requests.cpu", "3"), ("pods", "3")],
    )
    .await?;

    step("[Get] get -n <ns>: one row per resource with USED, RESERVED, HARD and %");
    let o = plugin(env, &["get", "-n", n]).await?;
    let out = text(&o);
    ensure!(o.status.success(), "get failed: {out}");
    let row = out
        .lines()
        .find(|l| l.contains("requests.cpu"))
        .with_context(|| format!("no requests.cpu row:\n{out}"))?;
    let cells: Vec<&str> = row.split_whitespace().collect();
    ensure!(
        cells == [n, "compute", "requests.cpu", "3", "0", "4", "75%"],
        "row {cells:?}\n{out}"
    );

    step("[Get] get -A -o json carries the same numbers; an unknown quota exits 1");
    let o = plugin(env, &["get", "-A", "-o", "json"]).await?;
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).context("get -A -o json")?;
    let mine = all
        .as_array()
        .and_then(|a| a.iter().find(|q| q["namespace"] == n))
        .with_context(|| format!("{n} missing from get -A"))?;
    ensure!(mine["resources"][1]["percent"] == 75.0, "{mine}");
    let o = plugin(env, &["get", "nope", "-n", n]).await?;
    ensure!(o.status.code() == Some(1), "get nope: {}", text(&o));
    ensure!(
        text(&o).contains("karmadaquotas \"nope\" not found"),
        "{}",
        text(&o)
    );

    step("[Describe] describe compute: the Resource/Used/Reserved/Hard table");
    let o = plugin(env, &["describe", "compute", "-n", n]).await?;
    let out = text(&o);
    ensure!(o.status.success(), "describe failed: {out}");
    ensure!(out.contains(&format!("Namespace:   {n}")), "{out}");
    ensure!(
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>()
                == ["requests.cpu", "3", "0", "4", "75%"]),
        "{out}"
    );

    step("[Check] a Deployment of 2 × 500m under a Divided policy: 3 + 1 = 4 fits (exit 0)");
    let dir = env
        .cp_dir()
        .unwrap_or(env.log_dir())
        .join(format!("plugin-{n}"));
    std::fs::create_dir_all(&dir)?;
    let policy = format!(
        "apiVersion: policy.karmada.io/v1alpha1\nkind: PropagationPolicy\nmetadata: {{name: p, namespace: {n}}}\nspec:\n  resourceSelectors: [{{apiVersion: apps/v1, kind: Deployment}}]\n  placement: {{replicaScheduling: {{replicaSchedulingType: Divided}}}}\n"
    );
    let deployment = |replicas: u32| {
        format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web, namespace: {n}}}\nspec:\n  replicas: {replicas}\n  template:\n    spec:\n      containers: [{{name: c, resources: {{requests: {{cpu: 500m}}}}}}]\n"
        )
    };
    let fits = write(
        &dir,
        "fits.yaml",
        &format!("{policy}---\n{}", deployment(2)),
    )?;
    let o = plugin(env, &["check", "-f", &fits, "--usage", "cluster"]).await?;
    let out = text(&o);
    ensure!(o.status.code() == Some(0), "check fits: {out}");
    ensure!(
        out.contains(&format!("KarmadaQuota {n}/compute: fits")),
        "{out}"
    );
    ensure!(out.contains("  adds:   pods=2, requests.cpu=1\n"), "{out}");

    step("[Check] 4 × 500m = 2 cpu would make 5 > 4: exit 1 with the webhook's message");
    let exceeds = write(
        &dir,
        "exceeds.yaml",
        &format!("{policy}---\n{}", deployment(4)),
    )?;
    let o = plugin(env, &["check", "-f", &exceeds]).await?;
    let out = text(&o);
    ensure!(o.status.code() == Some(1), "check exceeds: {out}");
    ensure!(
        out.contains(&format!(
            "REFUSED Deployment {n}/web by {n}/compute: exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=3, limited: requests.cpu=4"
        )),
        "{out}"
    );

    std::fs::remove_dir_all(&dir).ok();
    ns.delete(&client).await
}
