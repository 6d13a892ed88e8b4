//! `report` end to end through the binary against a stand-in Prometheus on 127.0.0.1
//! that answers `/api/v1/query_range` with Prometheus-format fixtures
//! (`fixtures/report/`): golden table, CSV and JSON, and the exit codes (2 bad input, 3
//! Prometheus unreachable or refusing). Run with `UPDATE_GOLDEN=1` to rewrite the golden
//! files after an intended change, then review the diff.
//!
//! The fixtures hold one hour (2026-01-01T00:00Z to 01:00Z) at a 5-minute step: team-a
//! (team alpha) in two quotas on member1 and member2, whose member2 cpu rises from 2.3 to
//! 3.3 halfway and whose batch quota starts halfway at 8 cpu; team-b (beta) on member2;
//! namespace `web` without a team label.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Output;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

const FROM: &str = "2026-01-01T00:00:00Z";
const TO: &str = "2026-01-01T01:00:00Z";
/// The window of the answers recorded from a real Prometheus (Debian's 2.42) scraping
/// `make demo`'s controller every 5 s (`fixtures/report/recorded-*.json`): start, last
/// instant; the window ends one 15 s step after the last instant. At 14:45:02 the binding
/// web-deployment was scaled from 5 to 9 replicas of 500m (member1 3 → 5, member2 2 → 4).
const RECORDED: (&str, &str) = ("1795445025", "1795445175");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/tests/fixtures/report/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).expect("write golden");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (run with UPDATE_GOLDEN=1 to create it)",
            path.display()
        )
    });
    assert_eq!(actual, expected, "{name} differs from its golden file");
}

/// The query strings the stand-in received.
type Seen = Arc<Mutex<Vec<BTreeMap<String, String>>>>;

/// A stand-in Prometheus: the usage query gets `usage.json`, the team query `teams.json`;
/// anything under `/broken` gets Prometheus' error answer.
async fn prometheus() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    async fn range(
        State(seen): State<Seen>,
        Query(q): Query<BTreeMap<String, String>>,
    ) -> impl IntoResponse {
        seen.lock().push(q.clone());
        let query = q.get("query").cloned().unwrap_or_default();
        let body = if query.contains("kq_namespace_labels") {
            fixture("teams.json")
        } else if query.contains("kq_quota_cluster_") {
            fixture("usage.json")
        } else {
            return (StatusCode::BAD_REQUEST, String::new());
        };
        (StatusCode::OK, body)
    }
    async fn recorded(Query(q): Query<BTreeMap<String, String>>) -> impl IntoResponse {
        let query = q.get("query").cloned().unwrap_or_default();
        let name = if query.contains("kq_namespace_labels") {
            "recorded-teams.json"
        } else {
            "recorded-usage.json"
        };
        // The recording holds these instants only.
        let window = (q["start"].as_str(), q["end"].as_str(), q["step"].as_str());
        if window != (RECORDED.0, RECORDED.1, "15") {
            return (StatusCode::BAD_REQUEST, format!("not recorded: {window:?}"));
        }
        (StatusCode::OK, fixture(name))
    }
    async fn broken() -> impl IntoResponse {
        (
            StatusCode::UNPROCESSABLE_ENTITY,
            r#"{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory"}"#,
        )
    }
    let app = Router::new()
        .route("/api/v1/query_range", get(range))
        .route("/broken/api/v1/query_range", get(broken))
        .route("/recorded/api/v1/query_range", get(recorded))
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, seen)
}

async fn plugin(args: &[&str]) -> Output {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_kubectl-karmada_quota"))
        .arg("report")
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KQ_PROMETHEUS")
        .env("HOME", "/nonexistent")
        .output()
        .await
        .expect("run the plugin")
}

fn out(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

async fn report_ok(url: &str, extra: &[&str]) -> String {
    let mut args = vec![
        "--prometheus",
        url,
        "--from",
        FROM,
        "--to",
        TO,
        "--step",
        "5m",
    ];
    args.extend(extra);
    let o = plugin(&args).await;
    let (stdout, stderr) = out(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}{stderr}");
    stdout
}

#[tokio::test]
async fn by_team_table_csv_and_json_match_their_golden_files() {
    let (addr, seen) = prometheus().await;
    let url = format!("http://{addr}");
    golden("report-team.txt", &report_ok(&url, &[]).await);
    golden("report-team.csv", &report_ok(&url, &["-o", "csv"]).await);
    let json = report_ok(&url, &["-o", "json"]).await;
    golden("report-team.json", &json);

    // The numbers, by hand. alpha's cpu: member1 2.8 + member2 2.3 for 30 min then 3.3, plus
    // batch 8 from minute 30: (5.1 × 0.5 h) + (14.1 × 0.5 h) = 9.6 core-hours, peak 14.1.
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    let row = |team: &str, resource: &str| {
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["team"] == team && r["resource"] == resource)
            .unwrap_or_else(|| panic!("no row {team} {resource} in {v}"))
            .clone()
    };
    let close = |a: &serde_json::Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9;
    let cpu = row("alpha", "requests.cpu");
    assert!(close(&cpu["hours"], 9.6), "{cpu}");
    assert!(close(&cpu["average"], 9.6), "{cpu}");
    assert!(close(&cpu["peak"], 14.1), "{cpu}");
    // 3328 MiB + 3 GiB for one hour = 6.25 GiB-hours.
    let mem = row("alpha", "requests.memory");
    assert!(close(&mem["hours"], 6.25), "{mem}");
    assert_eq!(mem["hoursUnit"], "GiB-hours");
    assert!(close(
        &row("alpha", "requests.nvidia.com/gpu")["hours"],
        6.0
    ));
    assert!(close(&row("beta", "count/deployments.apps")["hours"], 3.0));
    assert!(close(&row("__unallocated__", "requests.cpu")["hours"], 0.5));

    // Both queries over the same instants: start, the last instant before `to`, the step.
    let seen = seen.lock();
    let q = &seen[0];
    assert_eq!(
        q["query"],
        "max by (namespace, quota, cluster, resource) (kq_quota_cluster_used)"
    );
    assert_eq!(
        (q["start"].as_str(), q["end"].as_str(), q["step"].as_str()),
        ("1767225600", "1767228900", "300")
    );
    assert!(
        seen.iter().any(|q| q["query"]
            == "max by (namespace, label_karmada_quota_io_team) (kq_namespace_labels)")
    );
}

#[tokio::test]
async fn by_cluster_and_by_team_and_namespace_match_their_golden_files() {
    let (addr, seen) = prometheus().await;
    let url = format!("http://{addr}");
    golden(
        "report-cluster.txt",
        &report_ok(&url, &["--by", "cluster"]).await,
    );
    // Not grouped by team: the team query is not run.
    assert!(
        seen.lock()
            .iter()
            .all(|q| !q["query"].contains("kq_namespace_labels"))
    );
    golden(
        "report-team-namespace-cluster.csv",
        &report_ok(&url, &["--by", "team,namespace,cluster", "-o", "csv"]).await,
    );
    // --source observed reads the members' series.
    report_ok(&url, &["--source", "observed"]).await;
    assert!(
        seen.lock()
            .iter()
            .any(|q| q["query"].contains("kq_quota_cluster_observed"))
    );
}

#[tokio::test]
async fn answers_recorded_from_a_real_prometheus_match_their_golden_file() {
    let (addr, _) = prometheus().await;
    let url = format!("http://{addr}/recorded");
    let args = [
        "--prometheus",
        url.as_str(),
        "--from",
        RECORDED.0,
        "--to",
        "1795445190",
        "--step",
        "15s",
        "--by",
        "team,cluster",
    ];
    let o = plugin(&args).await;
    let (stdout, stderr) = out(&o);
    assert_eq!(o.status.code(), Some(0), "{stdout}{stderr}");
    golden("report-recorded.txt", &stdout);
    // member1's cpu: 2.8 (compute) + 4 (batch) for the 6 instants before the scale-up,
    // then 3.8 + 4 for the 5 after: (6.8 × 90 s + 7.8 × 75 s) / 3600 = 0.333 core-hours.
    let mut json_args = args.to_vec();
    json_args.extend(["-o", "json"]);
    let o = plugin(&json_args).await;
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cpu = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| {
            r["team"] == "ml-platform"
                && r["cluster"] == "member1"
                && r["resource"] == "requests.cpu"
        })
        .unwrap_or_else(|| panic!("{v}"));
    let hours = cpu["hours"].as_f64().unwrap();
    assert!(
        (hours - (6.8 * 90.0 + 7.8 * 75.0) / 3600.0).abs() < 1e-9,
        "{cpu}"
    );
    assert_eq!(cpu["peak"], 7.8);
}

#[tokio::test]
async fn bad_input_exits_2_and_names_the_flag() {
    let (addr, _) = prometheus().await;
    let url = format!("http://{addr}");
    for (args, fragment) in [
        (
            vec!["--from", "yesterday"],
            "--from: invalid time \"yesterday\"",
        ),
        (vec!["--to", "2026-13-01"], "--to: invalid time"),
        (vec!["--step", "5x"], "--step: invalid duration"),
        (vec!["--by", "tenant"], "invalid --by \"tenant\""),
        (vec!["--from", TO, "--to", FROM], "the window is empty"),
        (
            vec!["--from", "-30d", "--step", "1s"],
            "use a larger --step",
        ),
        (vec!["--timeout", "soon"], "--timeout: invalid duration"),
    ] {
        let mut all = vec!["--prometheus", url.as_str()];
        all.extend(args.iter().copied());
        let o = plugin(&all).await;
        let (stdout, stderr) = out(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stdout}{stderr}");
        assert!(stderr.contains(fragment), "{args:?}: {stderr}");
    }
    for url in ["127.0.0.1:9090", "ftp://127.0.0.1"] {
        let o = plugin(&["--prometheus", url]).await;
        let (_, stderr) = out(&o);
        assert_eq!(o.status.code(), Some(2), "{url}: {stderr}");
        assert!(stderr.contains("--prometheus"), "{stderr}");
    }
    let o = plugin(&[]).await;
    assert_eq!(o.status.code(), Some(2));
    assert!(out(&o).1.contains("--prometheus <URL>"), "{}", out(&o).1);
}

#[tokio::test]
async fn prometheus_refusing_or_unreachable_exits_3_with_its_reason() {
    let (addr, _) = prometheus().await;
    let o = plugin(&[
        "--prometheus",
        &format!("http://{addr}/broken"),
        "--from",
        FROM,
        "--to",
        TO,
    ])
    .await;
    let (stdout, stderr) = out(&o);
    assert_eq!(o.status.code(), Some(3), "{stdout}{stderr}");
    assert!(
        stderr.contains("(execution): query processing would load too many samples"),
        "{stderr}"
    );
    // A port nobody listens on.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let o = plugin(&[
        "--prometheus",
        &format!("http://127.0.0.1:{port}"),
        "--from",
        FROM,
        "--to",
        TO,
    ])
    .await;
    let (stdout, stderr) = out(&o);
    assert_eq!(o.status.code(), Some(3), "{stdout}{stderr}");
    assert!(stderr.contains("is unreachable"), "{stderr}");
}

#[tokio::test]
async fn help_explains_the_columns_times_and_exit_codes() {
    let o = plugin(&["--help"]).await;
    let (help, _) = out(&o);
    assert_eq!(o.status.code(), Some(0));
    for fragment in [
        "core-hours",
        "GiB-hours",
        "__unallocated__",
        "-24h",
        "KQ_PROMETHEUS",
        "KQ_TEAM_LABEL",
        "Exit codes: 0",
        "--by team,cluster",
    ] {
        assert!(help.contains(fragment), "{fragment} missing from:\n{help}");
    }
}
