//! Router tests (`oneshot` against [`router`](crate::router)) and the fixture snapshot the
//! other modules' tests share.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use karmada_quota_core::top::BindingUsage;
use karmada_quota_core::{Quantity, ResourceList};
use tokio::sync::watch;
use tower::ServiceExt;

use futures::future::BoxFuture;
use karmada_quota_billing::{Series, Window};

use crate::model::*;
use crate::report::RangeQuery;
use crate::{Dashboard, Settings, router};

/// A Prometheus stand-in (the Report page's and the history's tests): answers each range
/// query with `answer(query, window)` and remembers what it was asked.
pub(crate) struct FakePrometheus {
    pub asked: parking_lot::Mutex<Vec<(String, Window)>>,
    answer: Box<Answer>,
}

/// How a [`FakePrometheus`] answers.
type Answer = dyn Fn(&str, Window) -> Result<Vec<Series>, String> + Send + Sync;

impl FakePrometheus {
    pub fn new(
        answer: impl Fn(&str, Window) -> Result<Vec<Series>, String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            asked: parking_lot::Mutex::default(),
            answer: Box::new(answer),
        }
    }
}

impl RangeQuery for FakePrometheus {
    fn query_range<'a>(
        &'a self,
        query: &'a str,
        window: Window,
    ) -> BoxFuture<'a, Result<Vec<Series>, String>> {
        self.asked.lock().push((query.to_owned(), window));
        let answer = (self.answer)(query, window);
        Box::pin(async move { answer })
    }
}

pub(crate) fn rl(pairs: &[(&str, &str)]) -> ResourceList {
    ResourceList(
        pairs
            .iter()
            .map(|(n, v)| ((*n).to_owned(), Quantity::parse(v).unwrap()))
            .collect(),
    )
}

/// Two teams' namespaces (ml-train, ml-serve) and one without a team (web); member1
/// reachable, member2 unreachable for five minutes.
pub(crate) fn snapshot() -> Snapshot {
    let gpus = Quota {
        namespace: "ml-train".into(),
        name: "gpus".into(),
        hard: rl(&[("requests.nvidia.com/gpu", "8"), ("requests.cpu", "100")]),
        used: rl(&[("requests.nvidia.com/gpu", "7"), ("requests.cpu", "20")]),
        reserved: rl(&[("requests.nvidia.com/gpu", "1")]),
        clusters: vec![
            ClusterUsage {
                name: "member1".into(),
                placed: rl(&[("requests.nvidia.com/gpu", "4"), ("requests.cpu", "10")]),
                observed: Some(rl(&[
                    ("requests.nvidia.com/gpu", "6"),
                    ("requests.cpu", "10"),
                ])),
                ..ClusterUsage::default()
            },
            ClusterUsage {
                name: "member2".into(),
                placed: rl(&[("requests.nvidia.com/gpu", "3"), ("requests.cpu", "10")]),
                observed: None,
                ..ClusterUsage::default()
            },
        ],
        reservations: vec![Reservation {
            binding: "trainer-deployment".into(),
            uid: "uid-trainer".into(),
            reserved: rl(&[("requests.nvidia.com/gpu", "1")]),
            expires: "2026-11-23T12:01:00Z".into(),
        }],
        conditions: vec![Condition {
            type_: "Drift".into(),
            status: "True".into(),
            reason: "ObservedExceedsPlaced".into(),
            message: "member1 runs more than placed: requests.nvidia.com/gpu".into(),
            since: "2026-11-23T12:00:00Z".into(),
        }],
        bindings: 2,
        computed_at: 1_700_000_000,
        denials: vec![Denial {
            time: "2026-11-23T12:00:30Z".into(),
            message: "exceeded quota: gpus, requested: requests.nvidia.com/gpu=2 <script>".into(),
            count: 3,
            uid: "e1".into(),
        }],
        error: None,
        top_bindings: vec![
            BindingUsage {
                name: "trainer-deployment".into(),
                usage: rl(&[("requests.nvidia.com/gpu", "6"), ("requests.cpu", "12")]),
                clusters: vec!["member1".into(), "member2".into()],
            },
            BindingUsage {
                name: "eval-<b>".into(),
                usage: rl(&[("requests.cpu", "8")]),
                clusters: vec![],
            },
        ],
        namespaces: vec![],
        shares: BTreeMap::new(),
        line: None,
    };
    let serve = Quota {
        namespace: "ml-serve".into(),
        name: "serving".into(),
        hard: rl(&[("pods", "10")]),
        used: rl(&[("pods", "5")]),
        computed_at: 1_700_000_000,
        ..Quota::default()
    };
    let web = Quota {
        namespace: "web".into(),
        name: "frontend".into(),
        hard: rl(&[("requests.memory", "10Gi"), ("pods", "20")]),
        used: rl(&[("requests.memory", "2Gi"), ("pods", "3")]),
        computed_at: 1_700_000_000,
        ..Quota::default()
    };
    Snapshot {
        generated_at: 1_700_000_300,
        leader: true,
        members: vec![
            Member {
                name: "member1".into(),
                reach: Reach::Reachable,
                message: None,
                stale_since: None,
            },
            Member {
                name: "member2".into(),
                reach: Reach::Unreachable,
                message: Some("connection refused".into()),
                stale_since: Some(1_700_000_000),
            },
        ],
        quotas: vec![serve, gpus, web],
        teams: [
            ("ml-train".to_owned(), "ml".to_owned()),
            ("ml-serve".to_owned(), "ml".to_owned()),
        ]
        .into(),
    }
}

fn dashboard(s: Snapshot) -> (watch::Sender<Arc<Snapshot>>, Dashboard) {
    let (tx, rx) = watch::channel(Arc::new(s));
    (tx, Dashboard::new(rx, Settings::default()).unwrap())
}

async fn get(d: &Dashboard, path: &str) -> (StatusCode, String, String) {
    let resp = router(d.clone())
        .oneshot(Request::get(path).body(Body::empty()).unwrap())
        .await
        .unwrap();
    let code = resp.status();
    let ctype = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (code, ctype, String::from_utf8(body.to_vec()).unwrap())
}

#[tokio::test]
async fn overview_shows_every_quota_grouped_with_the_plugins_numbers() {
    let (_tx, d) = dashboard(snapshot());
    let (code, ctype, html) = get(&d, "/").await;
    assert_eq!(code, StatusCode::OK);
    assert!(ctype.starts_with("text/html"), "{ctype}");
    // Team group first (it holds the 100 % GPU quota), then the namespace without a team.
    let ml = html.find("</span> ml</h2>").unwrap();
    let web = html.find("</span> web</h2>").unwrap();
    assert!(ml < web);
    // Within the team, the fuller quota first.
    assert!(html.find("ml-train/gpus").unwrap() < html.find("ml-serve/serving").unwrap());
    // used 7 + reserved 1 of 8 GPUs = 100 %, critical; cpu 20 of 100 = 20 %.
    assert!(
        html.contains(
            r#"<div class="res level-critical" data-row="ml-train/gpus|requests.nvidia.com/gpu">"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"<b class="v-used">7</b> used · <b class="v-reserved">1</b> reserved · <b class="v-free">0</b> free of <b class="v-hard">8</b>"#));
    assert!(html.contains(r#"<div class="pct v-pct">100%</div>"#));
    assert!(html.contains(r#"<div class="pct v-pct">20%</div>"#));
    assert!(
        html.contains(r#"<span class="seg used" data-width="87.5"></span>"#),
        "used bar: 7 of 8"
    );
    assert!(
        html.contains(r#"data-width="12.5""#),
        "reserved bar: 1 of 8"
    );
    assert!(!html.contains("style="), "no inline style (CSP)");
    // The stale member's banner is on every page.
    assert!(html.contains("Member cluster member2 is unreachable: its data is 5m0s old"));
    assert!(html.contains(r#"<input id="filter""#));
    assert!(html.contains("/assets/dashboard.js"));
    assert!(
        !html.contains("http://") && !html.contains("https://"),
        "nothing fetched from elsewhere"
    );
}

#[tokio::test]
async fn quota_page_compares_clusters_and_escapes_denials() {
    let (_tx, d) = dashboard(snapshot());
    let (code, _, html) = get(&d, "/quotas/ml-train/gpus").await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains(r#"<tr class="drift-row" data-cluster="member1">"#),
        "{html}"
    );
    assert!(html.contains(
        r#"<td class="drift" data-resource="requests.nvidia.com/gpu"><span class="v-placed">4</span> │ <span class="v-observed">6</span>"#
    ));
    assert!(html.contains(r#"<span class="dot unreachable"></span>member2"#));
    assert!(html.contains("trainer-deployment"));
    assert!(html.contains("requests.nvidia.com/gpu=1"));
    assert!(html.contains("ObservedExceedsPlaced"));
    assert!(
        html.contains("requested: requests.nvidia.com/gpu=2 &#60;script&#62;")
            || html.contains("&lt;script&gt;"),
        "denial escaped: {html}"
    );
    assert!(!html.contains("=2 <script>"));
    assert!(html.contains("×3"));
}

#[tokio::test]
async fn quota_page_shows_the_waiting_line_in_order_escaped_and_the_overview_counts_it() {
    use crate::model::{Line, Waiting};
    let mut s = snapshot();
    let gpus = s.quotas.iter_mut().find(|q| q.name == "gpus").unwrap();
    let waiting = |position, name: &str, short: &[(&str, &str)], since| Waiting {
        position,
        namespace: "ml-train".into(),
        name: name.into(),
        priority: 100 - i32::try_from(position).unwrap(),
        asks: rl(&[("requests.nvidia.com/gpu", "4")]),
        short: rl(short),
        since,
        stuck: None,
    };
    gpus.line = Some(Line {
        queueing: true,
        order: "StrictFIFO".into(),
        total: 3,
        waiting: vec![
            waiting(
                1,
                "train-<i>big</i>",
                &[("requests.nvidia.com/gpu", "3")],
                1_700_000_120,
            ),
            waiting(2, "eval", &[], 1_700_000_290),
        ],
    });
    let (_tx, d) = dashboard(s);
    let (code, _, html) = get(&d, "/quotas/ml-train/gpus").await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains(r##"<a href="#line" class="waiting">3 waiting</a>"##),
        "{html}"
    );
    assert!(
        html.contains("<code>StrictFIFO</code>: nothing passes the head"),
        "{html}"
    );
    let head = html
        .find("train-&#60;i&#62;big")
        .or_else(|| html.find("train-&lt;i&gt;big"));
    let second = html.find(r#"data-waiting="eval""#);
    assert!(
        head.is_some() && second.is_some() && head < second,
        "in order, escaped: {html}"
    );
    assert!(!html.contains("<i>big</i>"));
    assert!(
        html.contains("requests.nvidia.com/gpu=3 more free"),
        "{html}"
    );
    // The snapshot was taken 180 s after the head arrived.
    assert!(html.contains(r#"<td class="v-waited">3m0s</td>"#), "{html}");
    assert!(
        html.contains("3 waiting in all; 1 not listed here"),
        "{html}"
    );
    // The JSON API carries the line; the overview's card counts it.
    let (_, _, json) = get(&d, "/api/v1/quotas/ml-train/gpus").await;
    assert!(
        json.contains(r#""line":{"queueing":true,"order":"StrictFIFO","total":3"#),
        "{json}"
    );
    let (_, _, overview) = get(&d, "/").await;
    assert!(
        overview.contains(r#"<span class="waiting">3 waiting</span>"#),
        "{overview}"
    );
    // A quota without a line shows no section.
    let (_, _, other) = get(&d, "/quotas/ml-serve/serving").await;
    assert!(
        !other.contains("Waiting line") && !other.contains("waiting</"),
        "{other}"
    );
}

#[tokio::test]
async fn quota_page_shows_what_drains_in_a_member_after_a_failover_without_drift() {
    // member2 was failed over: Karmada placed nothing there any more, 2 GPUs still drain
    // and the member (back) runs them: a Draining badge and value, not drift.
    let mut s = snapshot();
    let gpus = s.quotas.iter_mut().find(|q| q.name == "gpus").unwrap();
    gpus.clusters[1] = ClusterUsage {
        name: "member2".into(),
        placed: rl(&[("requests.nvidia.com/gpu", "0"), ("requests.cpu", "0")]),
        observed: Some(rl(&[
            ("requests.nvidia.com/gpu", "2"),
            ("requests.cpu", "4"),
        ])),
        draining: Some(rl(&[
            ("requests.nvidia.com/gpu", "2"),
            ("requests.cpu", "4"),
        ])),
        draining_unknown: false,
    };
    let (_tx, d) = dashboard(s);
    let (code, _, html) = get(&d, "/quotas/ml-train/gpus").await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains(r#"<tr class="" data-cluster="member2">"#),
        "member2 is no drift row: {html}"
    );
    assert!(html.contains(r#"<span class="tag draining""#), "{html}");
    assert!(
        html.contains(r#"<span class="v-observed">2</span><br><small class="v-draining draining">+2 draining</small>"#),
        "{html}"
    );
    // The JSON API carries it too.
    let (code, _, json) = get(&d, "/api/v1/quotas/ml-train/gpus").await;
    assert_eq!(code, StatusCode::OK);
    assert!(json.contains(r#""draining":{"#), "{json}");
    // A member without draining shows no badge.
    let (_tx, d) = dashboard(snapshot());
    let (_, _, html) = get(&d, "/quotas/ml-train/gpus").await;
    assert!(!html.contains("v-draining") && !html.contains("tag draining"));
}

#[tokio::test]
async fn quota_page_and_api_list_the_bindings_that_use_the_most() {
    let (_tx, d) = dashboard(snapshot());
    let (_, _, html) = get(&d, "/quotas/ml-train/gpus").await;
    // 6 of 8 GPUs is its largest share: 75 %, below the warning mark.
    let trainer = html
        .find(r#"<tr class="level-ok" data-binding="trainer-deployment">"#)
        .unwrap_or_else(|| panic!("{html}"));
    assert!(
        html.contains(r#"<td data-resource="requests.nvidia.com/gpu">6 <small>(75%)</small></td>"#),
        "{html}"
    );
    assert!(html.contains(r#"<td class="v-clusters">member1, member2</td>"#));
    // Core's order is kept; names are escaped; an unscheduled binding has no clusters.
    let eval = html
        .find(r#"data-binding="eval-&#60;b&#62;""#)
        .or_else(|| html.find(r#"data-binding="eval-&lt;b&gt;""#));
    assert!(eval.is_some_and(|e| e > trainer), "{html}");
    assert!(html.contains(r#"<td class="v-clusters">-</td>"#));

    let (_, _, body) = get(&d, "/api/v1/quotas/ml-train/gpus").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["topBindings"][0]["name"], "trainer-deployment");
    assert_eq!(v["topBindings"][0]["share"], 75.0);
    assert_eq!(v["topBindings"][0]["cells"][0]["usage"], "6");
    assert_eq!(v["topBindings"][1]["cells"][1]["share"], 8.0);
    assert_eq!(v["quota"]["topBindings"][1]["usage"]["requests.cpu"], "8");

    let (_, _, html) = get(&d, "/quotas/web/frontend").await;
    assert!(html.contains("No binding uses this quota."));
}

#[tokio::test]
async fn unknown_quota_and_page_are_404() {
    let (_tx, d) = dashboard(snapshot());
    let (code, _, html) = get(&d, "/quotas/ml-train/nope").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(html.contains("No KarmadaQuota ml-train/nope computed."));
    assert_eq!(get(&d, "/nope").await.0, StatusCode::NOT_FOUND);
    let (code, _, body) = get(&d, "/api/v1/quotas/ml-train/nope").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(body.contains("no KarmadaQuota ml-train/nope computed"));
}

#[tokio::test]
async fn a_cluster_quota_has_its_own_page_and_api_path() {
    let mut s = snapshot();
    let mut business = s.quotas[0].clone();
    business.namespace = String::new();
    business.name = "business-a".into();
    s.quotas.push(business);
    let (_tx, d) = dashboard(s);
    let (code, _, html) = get(&d, "/").await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains(r#"href="/cluster-quotas/business-a">business-a (cluster quota)</a>"#),
        "{html}"
    );
    assert!(!html.contains("/quotas//"), "{html}");
    let (code, _, html) = get(&d, "/cluster-quotas/business-a").await;
    assert_eq!(code, StatusCode::OK, "{html}");
    assert!(
        html.contains("<h1>business-a (cluster quota)</h1>"),
        "{html}"
    );
    let (code, _, body) = get(&d, "/api/v1/cluster-quotas/business-a").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["quota"]["name"], "business-a");
    let (code, _, html) = get(&d, "/cluster-quotas/nope").await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(
        html.contains("No KarmadaClusterQuota nope computed."),
        "{html}"
    );
}

#[tokio::test]
async fn clusters_page_shows_each_members_share_and_staleness() {
    let (_tx, d) = dashboard(snapshot());
    let (code, _, html) = get(&d, "/clusters").await;
    assert_eq!(code, StatusCode::OK);
    assert!(
        html.contains(r#"<article class="card member unreachable stale" data-member="member2">"#),
        "{html}"
    );
    assert!(html.contains("data 5m0s old"));
    assert!(html.contains(r#"<article class="card member reachable" data-member="member1">"#));
    assert!(html.contains("watched live"));
    // member1 holds 4 of the 8 GPUs of ml-train/gpus.
    assert!(html.contains(r#"<rect class="fill" width="50" height="8"></rect></svg> 50%"#));
}

#[tokio::test]
async fn json_api_serves_the_same_numbers() {
    let (_tx, d) = dashboard(snapshot());
    let (code, ctype, body) = get(&d, "/api/v1/overview").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(ctype, "application/json");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["groups"][0]["title"], "ml");
    let gpus = &v["groups"][0]["quotas"][0];
    assert_eq!(gpus["key"], "ml-train/gpus");
    assert_eq!(gpus["rows"][0]["resource"], "requests.nvidia.com/gpu");
    assert_eq!(gpus["rows"][0]["percent"], 100.0);
    assert_eq!(gpus["rows"][0]["level"], "critical");

    let (_, _, body) = get(&d, "/api/v1/quotas/ml-train/gpus").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    // Cells in the order of the quota's rows (extended resources first), as the headers.
    let gpu = &v["clusters"][0]["cells"][0];
    assert_eq!(gpu["resource"], "requests.nvidia.com/gpu");
    assert_eq!(gpu["drift"], true);
    assert_eq!(v["clusters"][0]["cells"][1]["drift"], false);
    assert_eq!(v["quota"]["denials"][0]["count"], 3);

    let (_, _, body) = get(&d, "/api/v1/clusters").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v[1]["name"], "member2");
    assert_eq!(v[1]["stale"], true);

    let (_, _, body) = get(&d, "/api/v1/snapshot").await;
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["quotas"].as_array().unwrap().len(), 3);
    assert_eq!(v["members"][1]["reach"], "unreachable");
}

#[tokio::test]
async fn csv_export_lists_every_resource_in_overview_order() {
    let (_tx, d) = dashboard(snapshot());
    let (code, ctype, body) = get(&d, "/api/v1/overview.csv").await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(ctype, "text/csv; charset=utf-8");
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(
        lines[0],
        "team,namespace,name,resource,used,reserved,hard,free,percent,level"
    );
    assert_eq!(
        lines[1],
        "ml,ml-train,gpus,requests.nvidia.com/gpu,7,1,8,0,100,critical"
    );
    assert_eq!(lines[2], "ml,ml-train,gpus,requests.cpu,20,0,100,80,20,ok");
    assert_eq!(lines[3], "ml,ml-serve,serving,pods,5,0,10,5,50,ok");
    assert_eq!(lines.len(), 6);
}

#[tokio::test]
async fn events_stream_sends_the_rows_at_once_and_on_every_change() {
    let (tx, d) = dashboard(snapshot());
    let resp = router(d)
        .oneshot(Request::get("/events").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/event-stream");
    let mut body = resp.into_body();
    let first = next_event(&mut body).await;
    assert!(first.starts_with("event: snapshot\ndata: "), "{first}");
    assert!(
        first.contains(r#""key":"ml-train/gpus|requests.nvidia.com/gpu","used":"7""#),
        "{first}"
    );

    let mut s = snapshot();
    s.quotas[1].used = rl(&[("requests.nvidia.com/gpu", "5"), ("requests.cpu", "20")]);
    s.generated_at += 5;
    tx.send_replace(Arc::new(s));
    let second = next_event(&mut body).await;
    assert!(second.contains(r#""key":"ml-train/gpus|requests.nvidia.com/gpu","used":"5","reserved":"1","hard":"8","free":"2","percent":"75%""#), "{second}");
}

pub(crate) async fn next_event(body: &mut Body) -> String {
    let mut text = String::new();
    while !text.ends_with("\n\n") {
        let frame = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("an event within 5 s")
            .unwrap()
            .unwrap();
        if let Ok(data) = frame.into_data() {
            text.push_str(std::str::from_utf8(&data).unwrap());
        }
    }
    text
}

#[tokio::test]
async fn assets_are_served_from_the_binary() {
    let (_tx, d) = dashboard(Snapshot::default());
    let (code, ctype, js) = get(&d, "/assets/dashboard.js").await;
    assert_eq!(code, StatusCode::OK);
    assert!(ctype.starts_with("text/javascript"));
    assert!(js.contains("new EventSource(\"/events\")"));
    let (_, ctype, css) = get(&d, "/assets/dashboard.css").await;
    assert!(ctype.starts_with("text/css"));
    assert!(css.contains(".bar"));
    let (_, _, html) = get(&d, "/").await;
    assert!(html.contains("No KarmadaQuota computed yet."));
}
