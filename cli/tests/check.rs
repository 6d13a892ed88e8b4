//! `check` end to end through the binary, offline (`--usage=FILE` / `none`): what the
//! change adds per quota, the verdict, and the exit codes scripts rely on.

use std::process::{Command, Output};

/// Custom kinds priced by a ResourceInterpreterCustomization's Lua.
#[path = "check/lua.rs"]
mod lua;

fn fixture(path: &str) -> String {
    format!("{}/tests/fixtures/check/{path}", env!("CARGO_MANIFEST_DIR"))
}

fn plugin(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kubectl-karmada_quota"))
        .args(args)
        .env_remove("KUBECONFIG")
        .env("HOME", "/nonexistent")
        .output()
        .expect("run the plugin")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn a_change_that_fits_exits_0_and_says_what_it_adds() {
    // 7 cpu in use (6 used + 1 reserved); web adds 2 (Duplicated on 2 prod clusters).
    let o = plugin(&[
        "check",
        "-f",
        &fixture("app"),
        "--usage",
        &fixture("usage.yaml"),
    ]);
    let out = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("KarmadaQuota team-a/compute: fits"), "{out}");
    assert!(out.contains("  now:    pods=7, requests.cpu=7\n"), "{out}");
    assert!(out.contains("  adds:   pods=4, requests.cpu=2\n"), "{out}");
    assert!(out.contains("  after:  pods=11, requests.cpu=9\n"), "{out}");
    assert!(
        out.ends_with("Result: the change fits every quota.\n"),
        "{out}"
    );
}

#[test]
fn a_change_that_exceeds_exits_1_with_the_webhooks_message_and_json_for_bots() {
    // -R adds the Job (app/nested/ sorts before app/web.yaml, so it is decided first):
    // 7 + 2 = 9, then web's 2 more would make 11 > 10: web is refused.
    let o = plugin(&[
        "check",
        "-f",
        &fixture("app"),
        "-R",
        "--usage",
        &fixture("usage.yaml"),
        "-o",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("json");
    assert_eq!(report["quotas"][0]["fits"], false);
    assert_eq!(report["refused"][0]["template"], "Deployment team-a/web");
    assert_eq!(
        report["refused"][0]["message"],
        "exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=9, limited: requests.cpu=10"
    );
    assert_eq!(
        report["quotas"][0]["added"]["requests.cpu"], "2",
        "only the Job was admitted"
    );
}

#[test]
fn without_usage_a_new_quota_in_the_manifests_starts_from_zero() {
    let dir = std::env::temp_dir().join(format!("kq-check-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let quota = dir.join("quota.yaml");
    std::fs::write(
        &quota,
        "apiVersion: quota.karmada.io/v1alpha1\nkind: KarmadaQuota\nmetadata: {name: small, namespace: team-a}\nspec: {hard: {requests.cpu: 1500m}}\n",
    )
    .unwrap();
    // No clusters known: Duplicated on none → the web Deployment charges nothing; the Job
    // (Divided, 2 cpu) exceeds 1500m.
    let o = plugin(&[
        "check",
        "-f",
        quota.to_str().unwrap(),
        "-f",
        &fixture("app"),
        "-R",
        "--usage",
        "none",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("REFUSED Job team-a/crunch by team-a/small: exceeded quota: small, requested: requests.cpu=2, used: requests.cpu=0, limited: requests.cpu=1500m"), "{out}");
    assert!(
        out.contains(
            "  refused: 1 template that would not fit (below), not counted in adds/after\n"
        ),
        "{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn bad_input_exits_2_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("kq-check-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "kind: Deployment\nmetadata: {name: x}\n").unwrap();
    let o = plugin(&["check", "-f", bad.to_str().unwrap(), "--usage", "none"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("bad.yaml: document 1: no apiVersion or kind"),
        "{err}"
    );
    let o = plugin(&["check", "-f", "/nonexistent/dir", "--usage", "none"]);
    assert_eq!(o.status.code(), Some(2));
    let o = plugin(&["get", "--output", "nonsense"]);
    assert_eq!(o.status.code(), Some(2));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn help_and_completion() {
    let o = plugin(&["--help"]);
    assert_eq!(o.status.code(), Some(0));
    let help = stdout(&o);
    assert!(
        help.contains("kubectl karmada-quota check -f deploy/ -R"),
        "{help}"
    );
    assert!(help.contains("Exit codes"), "{help}");
    let o = plugin(&["completion", "bash"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(
        stdout(&o).contains("kubectl-karmada_quota"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_cluster_quota_selecting_the_namespace_prices_the_change_over_all_its_namespaces() {
    // usage.yaml's team-a/compute has room (7 + 2 ≤ 10); business-a (team-a and team-b)
    // holds 3 of 4 cpu in total: web's 2 cpu would make 5 > 4.
    let dir = std::env::temp_dir().join(format!("kq-check-cluster-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let usage = dir.join("usage.yaml");
    std::fs::write(
        &usage,
        format!(
            "{}\n---\n{}",
            std::fs::read_to_string(fixture("usage.yaml")).unwrap(),
            std::fs::read_to_string(fixture("usage-cluster.yaml")).unwrap()
        ),
    )
    .unwrap();
    let o = plugin(&[
        "check",
        "-f",
        &fixture("app/web.yaml"),
        "--usage",
        usage.to_str().unwrap(),
    ]);
    let out = stdout(&o);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains("KarmadaClusterQuota business-a (every namespace it selects): EXCEEDS\n"),
        "{out}"
    );
    assert!(out.contains("  now:    requests.cpu=3\n"), "{out}");
    assert!(out.contains("  hard:   requests.cpu=4\n"), "{out}");
    assert!(
        out.contains(
            "REFUSED Deployment team-a/web by business-a: exceeded cluster quota: business-a, \
             requested: requests.cpu=2, used: requests.cpu=3, limited: requests.cpu=4"
        ),
        "{out}"
    );
}

#[test]
fn a_raycluster_is_priced_by_its_components_not_as_zero() {
    // Head 1 × 1 cpu + workers 3 × (2 cpu, 1 GPU) on member1 = 7 cpu, 3 GPUs, 4 pods:
    // over the 2 GPUs of ai/gpu.
    let o = plugin(&[
        "check",
        "-f",
        &fixture("ai/raycluster.yaml"),
        "--usage",
        "none",
    ]);
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "REFUSED RayCluster ai/llm by ai/gpu: exceeded quota: gpu, requested: \
             requests.nvidia.com/gpu=3, used: requests.nvidia.com/gpu=0, limited: \
             requests.nvidia.com/gpu=2\n  it would add: pods=4, requests.cpu=7, \
             requests.nvidia.com/gpu=3\n"
        ),
        "{out}"
    );
    // With room for the GPUs, it fits and adds the same numbers.
    let dir = std::env::temp_dir().join(format!("kq-check-ray-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let roomy = dir.join("raycluster.yaml");
    std::fs::write(
        &roomy,
        std::fs::read_to_string(fixture("ai/raycluster.yaml"))
            .unwrap()
            .replace(
                "requests.nvidia.com/gpu: \"2\"",
                "requests.nvidia.com/gpu: \"4\"",
            ),
    )
    .unwrap();
    let o = plugin(&["check", "-f", roomy.to_str().unwrap(), "--usage", "none"]);
    let out = stdout(&o);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(
        out.contains("  adds:   pods=4, requests.cpu=7, requests.nvidia.com/gpu=3\n"),
        "{out}"
    );
}
