//! Router tests with `--dashboard-auth=kubernetes` (a fake reviewer): no token is a 401
//! (the login form for pages, JSON for the API), each team sees only its namespaces on
//! every page, the JSON API, the CSV, the live stream and the denial feed. The login
//! flow, sessions and CSRF are in `security_tests`.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use tokio::sync::watch;
use tower::ServiceExt;

use crate::auth::fake::FakeReviewer;
use crate::auth::{Access, CachePolicy};
use crate::model::Snapshot;
use crate::tests::snapshot;
use crate::{Dashboard, Settings, router};

fn dashboard(reviewer: FakeReviewer) -> (watch::Sender<Arc<Snapshot>>, Dashboard) {
    let (tx, rx) = watch::channel(Arc::new(snapshot()));
    let access = Access::new(Arc::new(reviewer), CachePolicy::default());
    (
        tx,
        Dashboard::new(rx, Settings::default())
            .unwrap()
            .with_access(access),
    )
}

/// A response of the router, read whole (shared with `security_tests`).
pub(crate) struct Answer {
    pub(crate) code: StatusCode,
    pub(crate) headers: axum::http::HeaderMap,
    pub(crate) body: String,
}

/// `req` through the dashboard's router.
pub(crate) async fn send(d: &Dashboard, req: Request<Body>) -> Answer {
    let resp = router(d.clone()).oneshot(req).await.unwrap();
    let code = resp.status();
    let headers = resp.headers().clone();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Answer {
        code,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

async fn get_as(d: &Dashboard, path: &str, token: Option<&str>) -> Answer {
    let mut req = Request::get(path);
    if let Some(t) = token {
        req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
    }
    send(d, req.body(Body::empty()).unwrap()).await
}

const DATA_ROUTES: [&str; 9] = [
    "/",
    "/quotas/ml-train/gpus",
    "/clusters",
    "/events",
    "/api/v1/snapshot",
    "/api/v1/overview",
    "/api/v1/overview.csv",
    "/api/v1/quotas/ml-train/gpus",
    "/api/v1/clusters",
];

#[tokio::test]
async fn without_a_token_every_data_route_is_401() {
    let (_tx, d) = dashboard(FakeReviewer::teams());
    for path in DATA_ROUTES {
        let a = get_as(&d, path, None).await;
        assert_eq!(a.code, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(a.headers[header::WWW_AUTHENTICATE], "Bearer", "{path}");
        assert!(
            !a.body.contains("ml-train/gpus|"),
            "{path} leaks: {}",
            a.body
        );
        if path.starts_with("/api/") || path == "/events" {
            let v: serde_json::Value = serde_json::from_str(&a.body).unwrap();
            assert!(v["error"].as_str().unwrap().contains("/login"), "{path}");
        } else {
            assert!(
                a.body.contains(r#"<form method="post" action="/login""#),
                "{path}"
            );
            assert!(
                a.body.contains(&format!(r#"name="next" value="{path}""#)),
                "{path}: {}",
                a.body
            );
        }
    }
    let a = get_as(&d, "/", Some("wrong")).await;
    assert_eq!(a.code, StatusCode::UNAUTHORIZED);
    assert!(a.body.contains("The API server did not accept the token."));
    // The form and the assets need no token.
    assert_eq!(get_as(&d, "/login", None).await.code, StatusCode::OK);
    assert_eq!(
        get_as(&d, "/assets/dashboard.css", None).await.code,
        StatusCode::OK
    );
}

#[tokio::test]
async fn team_a_never_sees_team_b_on_any_route() {
    let (_tx, d) = dashboard(FakeReviewer::teams());
    let html = get_as(&d, "/", Some("ta")).await;
    assert_eq!(html.code, StatusCode::OK);
    assert!(html.body.contains("ml-train/gpus"));
    assert!(
        html.body
            .contains(r#"signed in as <b id="user">team-a</b>"#)
    );
    for other in ["web/frontend", "ml-serve/serving"] {
        assert!(!html.body.contains(other), "{other} on the overview");
    }
    // Team B's quota page is a 404, in HTML and JSON (its existence is not revealed).
    let page = get_as(&d, "/quotas/web/frontend", Some("ta")).await;
    assert_eq!(page.code, StatusCode::NOT_FOUND);
    assert_eq!(
        get_as(&d, "/api/v1/quotas/web/frontend", Some("ta"))
            .await
            .code,
        StatusCode::NOT_FOUND
    );
    let snap: serde_json::Value =
        serde_json::from_str(&get_as(&d, "/api/v1/snapshot", Some("ta")).await.body).unwrap();
    let keys: Vec<String> = snap["quotas"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| format!("{}/{}", q["namespace"], q["name"]))
        .collect();
    assert_eq!(keys, [r#""ml-train"/"gpus""#]);
    assert_eq!(snap["teams"], serde_json::json!({"ml-train": "ml"}));
    let csv = get_as(&d, "/api/v1/overview.csv", Some("ta")).await.body;
    assert!(
        csv.lines()
            .skip(1)
            .all(|l| l.starts_with("ml,ml-train,gpus,")),
        "{csv}"
    );
    assert_eq!(csv.lines().count(), 3);
    let clusters = get_as(&d, "/api/v1/clusters", Some("ta")).await.body;
    assert!(!clusters.contains("frontend") && clusters.contains("gpus"));

    // Team B: its own quota, nothing of team A's — not the GPU quota, not its denials.
    for path in DATA_ROUTES.iter().filter(|p| **p != "/events") {
        let a = get_as(&d, path, Some("tb")).await;
        // The 404 of team A's quota page names only the path asked for: no data.
        assert!(
            !a.body.contains("requests.nvidia.com/gpu") && !a.body.contains("trainer"),
            "{path} shows team A's quota to team B: {}",
            a.body
        );
        assert!(
            !a.body.contains("exceeded quota"),
            "{path} shows team A's denials"
        );
    }
    let overview = get_as(&d, "/", Some("tb")).await.body;
    assert!(overview.contains("web/frontend"));
}

#[tokio::test]
async fn the_live_stream_is_filtered_per_viewer() {
    let (tx, d) = dashboard(FakeReviewer::teams());
    let resp = router(d)
        .oneshot(
            Request::get("/events")
                .header(header::AUTHORIZATION, "Bearer tb")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let mut body = resp.into_body();
    let first = crate::tests::next_event(&mut body).await;
    assert!(first.contains(r#""quotas":["web/frontend"]"#), "{first}");
    let mut s = snapshot();
    s.generated_at += 5;
    tx.send_replace(Arc::new(s));
    let second = crate::tests::next_event(&mut body).await;
    assert!(
        second.contains("web/frontend") && !second.contains("gpus"),
        "{second}"
    );
}

#[tokio::test]
async fn an_admin_who_may_list_everywhere_sees_everything() {
    let (_tx, d) = dashboard(FakeReviewer::teams());
    let v: serde_json::Value =
        serde_json::from_str(&get_as(&d, "/api/v1/snapshot", Some("adm")).await.body).unwrap();
    assert_eq!(v["quotas"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn an_unreachable_api_server_is_503_not_a_leak() {
    let (_tx, d) = dashboard(FakeReviewer {
        down: true,
        ..FakeReviewer::teams()
    });
    let a = get_as(&d, "/api/v1/overview", Some("ta")).await;
    assert_eq!(a.code, StatusCode::SERVICE_UNAVAILABLE);
    assert!(a.body.contains("connection refused"));
    assert_eq!(
        get_as(&d, "/", Some("ta")).await.code,
        StatusCode::SERVICE_UNAVAILABLE
    );
}

#[tokio::test]
async fn without_auth_the_login_page_says_so() {
    let (_tx, rx) = watch::channel(Arc::new(snapshot()));
    let d = Dashboard::new(rx, Settings::default()).unwrap();
    let a = get_as(&d, "/login", None).await;
    assert!(a.body.contains("--dashboard-auth=none"));
    assert_eq!(get_as(&d, "/", None).await.code, StatusCode::OK);
}
