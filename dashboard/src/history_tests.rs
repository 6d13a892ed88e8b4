//! The history API (`/api/v1/quotas/{ns}/{name}/history`): validation, visibility, the
//! in-memory window as the source, Prometheus as the source, and the fallback when
//! Prometheus fails or has nothing.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use karmada_quota_billing::Series;
use karmada_quota_billing::history::{Bounds, Store};
use parking_lot::RwLock;
use serde_json::Value;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::auth::fake::FakeReviewer;
use crate::auth::{Access, CachePolicy};
use crate::history::{Recent, record};
use crate::model::Snapshot;
use crate::report::{Prometheus, RangeQuery};
use crate::tests::{FakePrometheus, snapshot};
use crate::{Dashboard, Settings, router};

/// The window filled from `s` at `now - 120`, `now - 60` and `now` (gpus' used GPUs 5,
/// then 7, then 7), every quota of the snapshot.
fn recent(s: &Snapshot, now: i64) -> Recent {
    let recent: Recent = Arc::new(RwLock::new(Store::new(Bounds {
        window: 3600,
        step: 15,
        max_quotas: 100,
    })));
    let mut early = s.clone();
    early.quotas[1].used = crate::tests::rl(&[("requests.nvidia.com/gpu", "5")]);
    for (t, snap) in [(now - 120, &early), (now - 60, s), (now, s)] {
        record(&recent, snap, t);
    }
    recent
}

fn dashboard(prometheus: Option<Arc<dyn RangeQuery>>) -> Dashboard {
    let s = snapshot();
    let now = jiff::Timestamp::now().as_second();
    let history = recent(&s, now);
    let (_tx, rx) = watch::channel(Arc::new(s));
    let settings = Settings {
        prometheus: prometheus.map(|api| Prometheus {
            url: "http://127.0.0.1:9090".into(),
            api,
        }),
        ..Settings::default()
    };
    Dashboard::new(rx, settings).unwrap().with_history(history)
}

async fn get(d: &Dashboard, path: &str, token: Option<&str>) -> (StatusCode, Value) {
    let mut req = Request::get(path);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let resp = router(d.clone())
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let code = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

const GPUS: &str = "/api/v1/quotas/ml-train/gpus/history";

fn line<'a>(v: &'a Value, resource: &str, kind: &str) -> &'a Vec<Value> {
    v["chart"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resource"] == resource)
        .unwrap_or_else(|| panic!("no {resource} in {v}"))[kind]
        .as_array()
        .unwrap()
}

#[tokio::test]
async fn without_prometheus_the_chart_is_the_controllers_window() {
    let d = dashboard(None);
    let (code, v) = get(&d, GPUS, None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["source"], "memory");
    assert!(
        v["sourceText"]
            .as_str()
            .unwrap()
            .contains("in-memory window (the last 60m, a sample every 15s"),
        "{v}"
    );
    assert_eq!(v["range"], "1h");
    assert_eq!(v["ranges"], serde_json::json!(["15m", "1h", "6h", "24h"]));
    let used: Vec<f64> = line(&v, "requests.nvidia.com/gpu", "used")
        .iter()
        .map(|p| p[1].as_f64().unwrap())
        .collect();
    assert_eq!(used, [5.0, 7.0, 7.0]);
    let hard = line(&v, "requests.nvidia.com/gpu", "hard");
    assert_eq!(hard.last().unwrap()[1], 8.0);
    assert!(v["note"].is_null(), "{v}");
    // No cluster lines unless asked; then member1 and member2.
    assert!(v["chart"]["resources"][0].get("clusters").is_none());
    let (_, v) = get(&d, &format!("{GPUS}?clusters=true&range=15m"), None).await;
    let gpu = line(&v, "requests.nvidia.com/gpu", "clusters");
    let names: Vec<&str> = gpu.iter().map(|c| c["cluster"].as_str().unwrap()).collect();
    assert_eq!(names, ["member1", "member2"]);
    assert_eq!(gpu[0]["used"][0][1], 4.0);
    // A range longer than the window says so.
    let (_, v) = get(&d, &format!("{GPUS}?range=24h"), None).await;
    assert!(
        v["note"].as_str().unwrap().contains("--history-window"),
        "{v}"
    );
    // Memory is in GiB.
    let (_, v) = get(&d, "/api/v1/quotas/web/frontend/history", None).await;
    assert_eq!(line(&v, "requests.memory", "hard")[0][1], 10.0);
}

#[tokio::test]
async fn a_bad_range_or_flag_is_400_and_says_what_is_expected() {
    let d = dashboard(None);
    for (query, want) in [
        (
            "range=2d",
            "invalid range \"2d\": expected one of 15m, 1h, 6h, 24h",
        ),
        ("range=-1h", "invalid range"),
        (
            "clusters=yes",
            "invalid clusters \"yes\": expected true or false",
        ),
    ] {
        let (code, v) = get(&d, &format!("{GPUS}?{query}"), None).await;
        assert_eq!(code, StatusCode::BAD_REQUEST, "{query}");
        assert!(v["error"].as_str().unwrap().contains(want), "{query}: {v}");
    }
    let (code, v) = get(&d, "/api/v1/quotas/ml-train/nope/history", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(v["error"].as_str().unwrap().contains("ml-train/nope"));
}

#[tokio::test]
async fn a_tenant_gets_no_history_of_another_teams_quota() {
    let access = Access::new(Arc::new(FakeReviewer::teams()), CachePolicy::default());
    let d = dashboard(None).with_access(access);
    let (code, _) = get(&d, GPUS, None).await;
    assert_eq!(code, StatusCode::UNAUTHORIZED);
    // team-b may list in `web` only: ml-train's history is as absent as the quota.
    let (code, v) = get(&d, GPUS, Some("tb")).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "{v}");
    assert!(!v.to_string().contains("requests.nvidia.com/gpu"), "{v}");
    let (code, _) = get(&d, "/api/v1/quotas/web/frontend/history", Some("tb")).await;
    assert_eq!(code, StatusCode::OK);
    let (code, v) = get(&d, GPUS, Some("ta")).await;
    assert_eq!(code, StatusCode::OK, "{v}");
}

/// A Prometheus stand-in answering each metric with one series of two points (hard 8,
/// member clusters 2, the rest 6), or failing, or with no series.
fn fake(fail: bool, empty: bool) -> FakePrometheus {
    FakePrometheus::new(move |query, window| {
        let value = if query.contains("kq_quota_hard") {
            "8"
        } else if query.contains("kq_quota_cluster_used") {
            "2"
        } else {
            "6"
        };
        let mut metric = std::collections::BTreeMap::new();
        metric.insert("resource".to_owned(), "requests.nvidia.com/gpu".to_owned());
        if query.contains("cluster") {
            metric.insert("cluster".to_owned(), "member1".to_owned());
        }
        #[allow(clippy::cast_precision_loss)]
        let values = vec![
            (window.from as f64, value.to_owned()),
            ((window.from + 60) as f64, value.to_owned()),
        ];
        if fail {
            Err("connection refused".to_owned())
        } else if empty {
            Ok(Vec::new())
        } else {
            Ok(vec![Series { metric, values }])
        }
    })
}

#[tokio::test]
async fn with_prometheus_the_chart_reads_the_controllers_series_there() {
    let fake = Arc::new(fake(false, false));
    let d = dashboard(Some(fake.clone()));
    let (code, v) = get(&d, &format!("{GPUS}?range=6h&clusters=true"), None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["source"], "prometheus");
    assert_eq!(v["sourceText"], "Prometheus at http://127.0.0.1:9090");
    assert_eq!(line(&v, "requests.nvidia.com/gpu", "used")[0][1], 6.0);
    assert_eq!(line(&v, "requests.nvidia.com/gpu", "hard")[0][1], 8.0);
    let clusters = line(&v, "requests.nvidia.com/gpu", "clusters");
    assert_eq!(clusters[0]["cluster"], "member1");
    let asked = fake.asked.lock().clone();
    assert_eq!(asked.len(), 4, "used, reserved, hard, clusters");
    assert!(
        asked
            .iter()
            .all(|(q, _)| q.contains(r#"{namespace="ml-train",quota="gpus"}"#)),
        "{asked:?}"
    );
    // 6 h in 240 points: a 90 s step, each point the peak over its step.
    assert_eq!(asked[0].1.step, 90);
    assert!(asked[0].0.contains("max_over_time"), "{}", asked[0].0);
    // A second viewer within the TTL shares the fetch.
    let (code, _) = get(&d, &format!("{GPUS}?range=6h&clusters=true"), None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(fake.asked.lock().len(), 4);
}

#[tokio::test]
async fn when_prometheus_fails_or_has_nothing_the_window_answers_with_a_note() {
    let failing = Arc::new(fake(true, false));
    let d = dashboard(Some(failing));
    let (code, v) = get(&d, GPUS, None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["source"], "memory");
    let note = v["note"].as_str().unwrap();
    assert!(
        note.contains("Prometheus failed (http://127.0.0.1:9090: connection refused)"),
        "{note}"
    );
    assert_eq!(
        line(&v, "requests.nvidia.com/gpu", "used").last().unwrap()[1],
        7.0
    );

    let empty = Arc::new(fake(false, true));
    let d = dashboard(Some(empty));
    let (_, v) = get(&d, GPUS, None).await;
    assert_eq!(v["source"], "memory");
    assert!(
        v["note"]
            .as_str()
            .unwrap()
            .contains("has no series of this quota"),
        "{v}"
    );
}

#[tokio::test]
async fn the_quota_page_carries_the_chart_and_its_script() {
    let d = dashboard(None);
    let resp = router(d.clone())
        .oneshot(
            Request::get("/quotas/ml-train/gpus")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let html = String::from_utf8(
        resp.into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec(),
    )
    .unwrap();
    assert!(
        html.contains(r#"id="history" data-history="/api/v1/quotas/ml-train/gpus/history""#),
        "{html}"
    );
    assert!(html.contains(
        r#"<button type="button" class="range" data-range="1h" aria-pressed="true">1h</button>"#
    ));
    assert!(html.contains(r#"<script src="/assets/history.js" defer></script>"#));
    // The chart lives outside the parts the live updates replace.
    let fragment = html.find(r#"data-fragment="quota""#).unwrap();
    let chart = html.find(r#"id="history""#).unwrap();
    let rest = html.find(r#"data-fragment="quota-rest""#).unwrap();
    let closes = html[fragment..chart].matches("<div").count()
        <= html[fragment..chart].matches("</div>").count();
    assert!(fragment < chart && chart < rest && closes, "{html}");
    let resp = router(d)
        .oneshot(
            Request::get("/assets/history.js")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let js = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(String::from_utf8_lossy(&js).contains("createElementNS"));
}

#[tokio::test]
async fn a_cluster_quota_has_its_history_under_its_name() {
    let mut s = snapshot();
    let mut business = s.quotas[1].clone();
    business.namespace = String::new();
    business.name = "business-a".into();
    s.quotas.push(business);
    let now = jiff::Timestamp::now().as_second();
    let history = recent(&s, now);
    let fake = Arc::new(fake(false, false));
    let (_tx, rx) = watch::channel(Arc::new(s));
    let memory = Dashboard::new(rx.clone(), Settings::default())
        .unwrap()
        .with_history(history.clone());
    let (code, v) = get(&memory, "/api/v1/cluster-quotas/business-a/history", None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["quota"], "business-a");
    assert_eq!(
        line(&v, "requests.nvidia.com/gpu", "used").last().unwrap()[1],
        7.0
    );
    let (code, _) = get(&memory, "/api/v1/cluster-quotas/nope/history", None).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    let page = router(memory.clone())
        .oneshot(
            Request::get("/cluster-quotas/business-a")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let html = page.into_body().collect().await.unwrap().to_bytes();
    assert!(
        String::from_utf8_lossy(&html)
            .contains(r#"data-history="/api/v1/cluster-quotas/business-a/history""#)
    );
    // From Prometheus: its series carry no namespace.
    let settings = Settings {
        prometheus: Some(Prometheus {
            url: "http://127.0.0.1:9090".into(),
            api: fake.clone(),
        }),
        ..Settings::default()
    };
    let prom = Dashboard::new(rx, settings).unwrap().with_history(history);
    let (code, v) = get(&prom, "/api/v1/cluster-quotas/business-a/history", None).await;
    assert_eq!(code, StatusCode::OK, "{v}");
    assert_eq!(v["source"], "prometheus");
    let asked = fake.asked.lock().clone();
    assert!(
        asked[0].0.contains(r#"{namespace="",quota="business-a"}"#),
        "{asked:?}"
    );
}
