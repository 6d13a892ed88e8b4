//! The Report page: usage for billing (average, peak, resource-hours per team, namespace,
//! member cluster) from the controller's series in Prometheus, with a CSV download.
//!
//! ```text
//!  GET /report?from=-24h&to=now&step=&by=team&source=placed   the form and the table
//!  GET /report.csv?…                                          the same rows as CSV
//!  GET /api/v1/report?…                                       the same report as JSON
//!      │ Form::request (core::billing::window: the plugin's time syntax)
//!      ▼
//!  core::billing::Request ─► queries() ─► RangeQuery (the controller's Prometheus client,
//!      ▲                                  --dashboard-prometheus) ─► compute() ─► Report
//!      └── the plugin's `kubectl karmada-quota report` runs the same two steps
//! ```
//!
//! Without a Prometheus (`Settings::prometheus` is `None`) the page says how to turn it
//! on, and the CSV and JSON answer 404.
//!
//! With `--dashboard-auth=kubernetes` every route takes the [`Visible`] viewer like the
//! other pages, and the series are cut to the namespaces the viewer may `list
//! karmadaquotas` in *before* the arithmetic: a team, cluster or quota row sums only what
//! the viewer may see.

use std::collections::BTreeSet;

use askama::Template;
use askama_web::WebTemplate;
use axum::Json;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use karmada_quota_billing::window::{parse_duration, parse_time};
use karmada_quota_billing::{self as billing, Key, Report, Request, Series, Source, Window};
use serde::Deserialize;

use crate::Dashboard;
use crate::pages::Chrome;
pub use crate::prometheus::{Prometheus, RangeQuery, fetch};
use crate::report_cache::FetchError;
use crate::visible::Visible;

/// The form's default window start.
pub const DEFAULT_FROM: &str = "-24h";
/// The form's default window end.
pub const DEFAULT_TO: &str = "now";
/// The form's default grouping.
pub const DEFAULT_BY: &str = "team";

/// The groupings the form offers (any `--by` list works in the URL).
const BY_CHOICES: [&str; 6] = [
    "team",
    "namespace",
    "cluster",
    "team,namespace",
    "team,cluster",
    "team,namespace,cluster",
];

/// The form (query string); empty fields take the defaults.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Form {
    /// Start: RFC 3339, a date, Unix seconds, `now`, `-24h`.
    #[serde(default)]
    pub from: String,
    /// End (exclusive), same syntax.
    #[serde(default)]
    pub to: String,
    /// Seconds between samples (`5m`); empty: about 1,000 points, at least a minute.
    #[serde(default)]
    pub step: String,
    /// Group keys, comma-separated.
    #[serde(default)]
    pub by: String,
    /// `placed` (default) or `observed`.
    #[serde(default)]
    pub source: String,
}

fn or<'a>(value: &'a str, default: &'a str) -> &'a str {
    let v = value.trim();
    if v.is_empty() { default } else { v }
}

impl Form {
    fn from(&self) -> &str {
        or(&self.from, DEFAULT_FROM)
    }
    fn to(&self) -> &str {
        or(&self.to, DEFAULT_TO)
    }
    fn by(&self) -> &str {
        or(&self.by, DEFAULT_BY)
    }
    fn source(&self) -> &str {
        or(&self.source, Source::Placed.as_str())
    }

    /// The report this form asks for, with `now` for relative times.
    pub fn request(&self, team_label: &str, now: i64) -> Result<Request, String> {
        let from = parse_time(self.from(), now).map_err(|e| format!("from: {e}"))?;
        let to = parse_time(self.to(), now).map_err(|e| format!("to: {e}"))?;
        let step = match self.step.trim() {
            "" => None,
            s => Some(parse_duration(s).map_err(|e| format!("step: {e}"))?),
        };
        let window = Window::new(from, to, step).map_err(|e| e.to_string())?;
        let by = Key::parse_list(self.by())?;
        let source = match self.source() {
            "placed" => Source::Placed,
            "observed" => Source::Observed,
            other => {
                return Err(format!(
                    "invalid source {other:?}: expected placed or observed"
                ));
            }
        };
        Ok(Request {
            window,
            by,
            source,
            team_label: team_label.to_owned(),
        })
    }

    /// The form as a query string (for the CSV and JSON links).
    pub fn query_string(&self) -> String {
        [
            ("from", self.from()),
            ("to", self.to()),
            ("step", self.step.trim()),
            ("by", self.by()),
            ("source", self.source()),
        ]
        .iter()
        .map(|(k, v)| format!("{k}={}", billing::query_value(v)))
        .collect::<Vec<_>>()
        .join("&")
    }
}

/// Of `namespaces`, those the request's viewer may list KarmadaQuotas in (all of them
/// without auth, or for a viewer allowed cluster-wide).
async fn visible_of(d: &Dashboard, v: &Visible, namespaces: BTreeSet<String>) -> BTreeSet<String> {
    let (Some(access), Some(viewer)) = (&d.access, &v.viewer) else {
        return namespaces;
    };
    if access.may_list(&viewer.user, None).await {
        return namespaces;
    }
    let mut allowed = BTreeSet::new();
    for ns in namespaces {
        if access.may_list(&viewer.user, Some(&ns)).await {
            allowed.insert(ns);
        }
    }
    allowed
}

/// The `/report` routes.
pub fn routes() -> Vec<(&'static str, MethodRouter<Dashboard>)> {
    vec![
        ("/report", get(page)),
        ("/report.csv", get(csv)),
        ("/api/v1/report", get(json)),
    ]
}

/// One choice of the `by` selector.
#[derive(Clone, Debug)]
pub struct Choice {
    /// The value.
    pub value: String,
    /// Whether it is the current one.
    pub selected: bool,
}

/// A report as the page's table.
#[derive(Clone, Debug)]
pub struct Table {
    /// Column headers.
    pub columns: Vec<String>,
    /// Cells, row by row.
    pub rows: Vec<Vec<String>>,
    /// The report's warnings.
    pub warnings: Vec<String>,
    /// `from` to `to` every `step`.
    pub window: String,
}

/// Decimals shown on the page.
const PAGE_DECIMALS: usize = 3;

impl Table {
    /// The table of `r`.
    pub fn of(r: &Report) -> Self {
        let mut columns: Vec<String> = r.by.iter().map(|k| k.as_str().to_owned()).collect();
        columns.extend(
            ["resource", "average", "peak", "resource-hours"]
                .iter()
                .map(|s| (*s).to_owned()),
        );
        let rows = r
            .rows
            .iter()
            .map(|row| billing::csv::table_cells(&r.by, row, PAGE_DECIMALS))
            .collect();
        Self {
            columns,
            rows,
            warnings: r.warnings.clone(),
            window: format!("{} to {} every {}s", r.from, r.to, r.step),
        }
    }
}

/// The Report page.
#[derive(Template, WebTemplate)]
#[template(path = "report.html")]
pub struct ReportPage {
    /// Around.
    pub chrome: Chrome,
    /// The Prometheus URL, when configured.
    pub prometheus: Option<String>,
    /// The form's values.
    pub from: String,
    /// See `from`.
    pub to: String,
    /// See `from`.
    pub step: String,
    /// The `by` choices.
    pub by: Vec<Choice>,
    /// Whether `observed` is chosen.
    pub observed: bool,
    /// The team label key.
    pub team_label: String,
    /// What went wrong.
    pub error: Option<String>,
    /// The report.
    pub table: Option<Table>,
    /// The form's query string (CSV and JSON links).
    pub query: String,
}

/// `GET /report`.
pub async fn page(State(d): State<Dashboard>, v: Visible, Query(form): Query<Form>) -> Response {
    let s = v.snapshot.clone();
    let mut by: Vec<Choice> = BY_CHOICES
        .iter()
        .map(|c| Choice {
            value: (*c).to_owned(),
            selected: *c == form.by(),
        })
        .collect();
    if !by.iter().any(|c| c.selected) {
        by.push(Choice {
            value: form.by().to_owned(),
            selected: true,
        });
    }
    let mut chrome = Chrome::new("Report", "report", &s, &d.settings);
    chrome.viewer(&v);
    let mut page = ReportPage {
        chrome,
        prometheus: d.settings.prometheus.as_ref().map(|p| p.url.clone()),
        from: form.from().to_owned(),
        to: form.to().to_owned(),
        step: form.step.trim().to_owned(),
        by,
        observed: form.source() == Source::Observed.as_str(),
        team_label: d.settings.team_label.clone(),
        error: None,
        table: None,
        query: form.query_string(),
    };
    let Some(prometheus) = &d.settings.prometheus else {
        return page.into_response();
    };
    let status = match answer(prometheus, &form, &d, &v).await {
        Ok(report) => {
            page.table = Some(Table::of(&report));
            StatusCode::OK
        }
        Err((status, message)) => {
            page.error = Some(message);
            status
        }
    };
    (status, page).into_response()
}

/// The report of `form`, or the status and message of why not (400 bad input, 502 when
/// Prometheus fails, 503 when every query turn stays taken). The series come through the
/// cache ([`ReportFetches`](crate::report_cache::ReportFetches)): one fetch per form and
/// TTL, whoever asks.
async fn answer(
    prometheus: &Prometheus,
    form: &Form,
    d: &Dashboard,
    v: &Visible,
) -> Result<Report, (StatusCode, String)> {
    let now = jiff::Timestamp::now().as_second();
    let request = form
        .request(&d.settings.team_label, now)
        .map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    let fetched = d
        .reports
        .get(&form.query_string(), request, prometheus)
        .await
        .map_err(|e| match e {
            FetchError::Busy(_) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
            FetchError::Prometheus(e) => {
                (StatusCode::BAD_GATEWAY, format!("{}: {e}", prometheus.url))
            }
        })?;
    let namespaces = fetched
        .usage
        .iter()
        .chain(&fetched.teams)
        .map(|s| s.label("namespace").to_owned())
        .collect();
    let allowed = visible_of(d, v, namespaces).await;
    let seen = |s: &&Series| allowed.contains(s.label("namespace"));
    let usage: Vec<Series> = fetched.usage.iter().filter(seen).cloned().collect();
    let teams: Vec<Series> = fetched.teams.iter().filter(seen).cloned().collect();
    // The same arithmetic as the plugin's.
    Ok(fetched.request.compute(&usage, &teams))
}

const NOT_CONFIGURED: &str = "no Prometheus configured: start the controller with \
    --dashboard-prometheus=URL (env KQ_DASHBOARD_PROMETHEUS)";

/// `GET /report.csv`.
pub async fn csv(State(d): State<Dashboard>, v: Visible, Query(form): Query<Form>) -> Response {
    let Some(prometheus) = &d.settings.prometheus else {
        return (StatusCode::NOT_FOUND, format!("{NOT_CONFIGURED}\n")).into_response();
    };
    match answer(prometheus, &form, &d, &v).await {
        Ok(report) => (
            [
                (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
                (
                    header::CONTENT_DISPOSITION,
                    "attachment; filename=\"karmada-quota-report.csv\"",
                ),
            ],
            billing::csv::render(&report),
        )
            .into_response(),
        Err((status, message)) => (status, format!("{message}\n")).into_response(),
    }
}

/// `GET /api/v1/report`.
pub async fn json(State(d): State<Dashboard>, v: Visible, Query(form): Query<Form>) -> Response {
    let Some(prometheus) = &d.settings.prometheus else {
        return (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "error": NOT_CONFIGURED })),
        )
            .into_response();
    };
    match answer(prometheus, &form, &d, &v).await {
        Ok(report) => Json(report).into_response(),
        Err((status, message)) => {
            (status, Json(serde_json::json!({ "error": message }))).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use futures::future::BoxFuture;

    use axum::body::Body;
    use axum::http::Request as HttpRequest;
    use http_body_util::BodyExt;
    use tokio::sync::watch;
    use tower::ServiceExt;

    use super::*;
    use crate::{Settings, router};

    const T0: f64 = 1_767_225_600.0;

    type Fake = crate::tests::FakePrometheus;

    fn series(labels: &[(&str, &str)], values: &[f64]) -> Series {
        Series {
            metric: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            values: values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    (
                        T0 + 1800.0 * f64::from(u8::try_from(i).unwrap()),
                        v.to_string(),
                    )
                })
                .collect(),
        }
    }

    /// A Prometheus stand-in: one hour at a 30-minute step; team-a (alpha) holds 2 cpu then
    /// 4 in member1, web (no team) 1 GiB; or, `fail`ing, refused.
    fn fake(fail: bool) -> Fake {
        Fake::new(move |query, _| {
            if fail {
                Err("connection refused <b>".to_owned())
            } else if query.contains("kq_namespace_labels") {
                Ok(vec![series(
                    &[
                        ("namespace", "team-a"),
                        ("label_karmada_quota_io_team", "alpha"),
                    ],
                    &[1.0, 1.0],
                )])
            } else {
                Ok(vec![
                    series(
                        &[
                            ("namespace", "team-a"),
                            ("quota", "q"),
                            ("cluster", "member1"),
                            ("resource", "requests.cpu"),
                        ],
                        &[2.0, 4.0],
                    ),
                    series(
                        &[
                            ("namespace", "web"),
                            ("quota", "w"),
                            ("cluster", "member2"),
                            ("resource", "requests.memory"),
                        ],
                        &[1_073_741_824.0, 1_073_741_824.0],
                    ),
                ])
            }
        })
    }

    fn dashboard(fake: Option<Arc<Fake>>) -> Dashboard {
        let (_tx, rx) = watch::channel(Arc::new(crate::tests::snapshot()));
        let settings = Settings {
            prometheus: fake.map(|f| Prometheus {
                url: "http://127.0.0.1:9090".into(),
                api: f,
            }),
            ..Settings::default()
        };
        Dashboard::new(rx, settings).unwrap()
    }

    async fn get(d: &Dashboard, path: &str) -> (StatusCode, String, String) {
        let resp = router(d.clone())
            .oneshot(HttpRequest::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let code = resp.status();
        let disposition = resp
            .headers()
            .get(header::CONTENT_DISPOSITION)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (code, disposition, String::from_utf8(body.to_vec()).unwrap())
    }

    const WINDOW: &str = "from=2026-01-01T00:00:00Z&to=2026-01-01T01:00:00Z&step=30m";

    #[tokio::test]
    async fn without_prometheus_the_page_says_how_to_turn_it_on() {
        let d = dashboard(None);
        let (code, _, html) = get(&d, "/report").await;
        assert_eq!(code, StatusCode::OK);
        assert!(html.contains("--dashboard-prometheus"), "{html}");
        assert!(html.contains("KQ_DASHBOARD_PROMETHEUS"));
        assert!(
            html.contains(r#"<a href="/report" class="active">Report</a>"#),
            "{html}"
        );
        let (code, _, text) = get(&d, "/report.csv").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(text.contains("--dashboard-prometheus"));
        let (code, _, text) = get(&d, "/api/v1/report").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
        assert!(text.contains("\"error\""));
    }

    #[tokio::test]
    async fn the_page_shows_the_core_numbers_and_links_the_same_csv() {
        let fake = Arc::new(fake(false));
        let d = dashboard(Some(fake.clone()));
        let (code, _, html) = get(&d, &format!("/report?{WINDOW}&by=team")).await;
        assert_eq!(code, StatusCode::OK, "{html}");
        // alpha: 2 cpu for 30 min + 4 for 30 min = 3 core-hours, average 3, peak 4.
        assert!(
            html.contains(
                "<tr><td>alpha</td><td>requests.cpu</td><td>3 cores</td><td>4 cores</td><td>3 core-hours</td></tr>"
            ),
            "{html}"
        );
        assert!(html.contains(
            "<tr><td>__unallocated__</td><td>requests.memory</td><td>1 GiB</td><td>1 GiB</td><td>1 GiB-hours</td></tr>"
        ));
        assert!(html.contains(r#"<option value="team" selected>team</option>"#));
        let link = "/report.csv?from=2026-01-01T00%3A00%3A00Z&amp;to=2026-01-01T01%3A00%3A00Z&amp;step=30m&amp;by=team&amp;source=placed";
        assert!(
            html.contains(link) || html.contains(&link.replace("&amp;", "&#38;")),
            "{html}"
        );
        // One window for both queries: from, the last instant before `to`, the step.
        let asked = fake.asked.lock().clone();
        assert_eq!(asked.len(), 2);
        assert_eq!(
            asked[0].1,
            Window::new(1_767_225_600, 1_767_229_200, Some(1800)).unwrap()
        );

        let (code, disposition, csv) = get(&d, &format!("/report.csv?{WINDOW}&by=team")).await;
        assert_eq!(code, StatusCode::OK);
        assert!(disposition.contains("attachment"), "{disposition}");
        assert_eq!(
            csv,
            "team,resource,unit,average,peak,hours,hours_unit\n\
             __unallocated__,requests.memory,GiB,1,1,1,GiB-hours\n\
             alpha,requests.cpu,cores,3,4,3,core-hours\n"
        );
        let (code, _, json) = get(&d, &format!("/api/v1/report?{WINDOW}&by=cluster")).await;
        assert_eq!(code, StatusCode::OK);
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["rows"][0]["cluster"], "member1");
        assert_eq!(v["rows"][0]["hours"], 3.0);
        // The CSV of the page's form came from the cache; the JSON, not grouped by team,
        // ran only the usage query.
        assert_eq!(fake.asked.lock().len(), 3);
    }

    #[tokio::test]
    async fn bad_input_is_400_and_a_failing_prometheus_502_both_explained() {
        let d = dashboard(Some(Arc::new(fake(false))));
        let (code, _, html) = get(&d, "/report?from=yesterday").await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(html.contains("from: invalid time"), "{html}");
        assert!(
            html.contains(r#"value="yesterday""#),
            "the form keeps what was typed"
        );
        let (code, _, text) = get(&d, &format!("/report.csv?{WINDOW}&by=tenant")).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(text.contains("invalid --by"), "{text}");
        let (code, _, html) = get(&d, &format!("/report?{WINDOW}&source=guessed")).await;
        assert_eq!(code, StatusCode::BAD_REQUEST);
        assert!(html.contains("invalid source"), "{html}");

        let failing = Arc::new(fake(true));
        let d = dashboard(Some(failing));
        let (code, _, html) = get(&d, &format!("/report?{WINDOW}")).await;
        assert_eq!(code, StatusCode::BAD_GATEWAY);
        assert!(
            html.contains("connection refused &#60;b&#62;")
                || html.contains("connection refused &lt;b&gt;"),
            "{html}"
        );
    }

    #[tokio::test]
    async fn with_auth_a_viewer_is_billed_only_their_namespaces() {
        use crate::auth::fake::FakeReviewer;
        use crate::auth::{Access, CachePolicy};
        let fake = Arc::new(fake(false));
        let access = Access::new(Arc::new(FakeReviewer::teams()), CachePolicy::default());
        let d = dashboard(Some(fake)).with_access(access);
        let ask = |token: Option<&'static str>| {
            let d = d.clone();
            async move {
                let mut req = HttpRequest::get(format!("/api/v1/report?{WINDOW}&by=namespace"));
                if let Some(t) = token {
                    req = req.header(header::AUTHORIZATION, format!("Bearer {t}"));
                }
                let resp = router(d)
                    .oneshot(req.body(Body::empty()).unwrap())
                    .await
                    .unwrap();
                let code = resp.status();
                let body = resp.into_body().collect().await.unwrap().to_bytes();
                (
                    code,
                    serde_json::from_slice::<serde_json::Value>(&body).unwrap(),
                )
            }
        };
        let namespaces = |v: &serde_json::Value| -> Vec<String> {
            v["rows"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["namespace"].as_str().unwrap().to_owned())
                .collect()
        };
        let (code, _) = ask(None).await;
        assert_eq!(code, StatusCode::UNAUTHORIZED);
        // team-b may list only in `web`: team-a's cpu is not in its report.
        let (code, v) = ask(Some("tb")).await;
        assert_eq!(code, StatusCode::OK, "{v}");
        assert_eq!(namespaces(&v), ["web"]);
        // An admin allowed cluster-wide is billed both.
        let (_, v) = ask(Some("adm")).await;
        let mut all = namespaces(&v);
        all.dedup();
        assert_eq!(all, ["team-a", "web"]);
    }

    /// A Prometheus that takes 50 ms per query and records the most queries in flight.
    #[derive(Default)]
    struct Slow {
        now: std::sync::atomic::AtomicUsize,
        most: std::sync::atomic::AtomicUsize,
        total: std::sync::atomic::AtomicUsize,
    }

    impl RangeQuery for Slow {
        fn query_range<'a>(
            &'a self,
            _query: &'a str,
            _window: Window,
        ) -> BoxFuture<'a, Result<Vec<Series>, String>> {
            use std::sync::atomic::Ordering::SeqCst;
            Box::pin(async move {
                self.total.fetch_add(1, SeqCst);
                let n = self.now.fetch_add(1, SeqCst) + 1;
                self.most.fetch_max(n, SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                self.now.fetch_sub(1, SeqCst);
                Ok(Vec::new())
            })
        }
    }

    #[tokio::test]
    async fn repeated_reports_share_one_fetch_and_fetches_are_limited() {
        use std::sync::atomic::Ordering::SeqCst;
        let fake = Arc::new(fake(false));
        let d = dashboard(Some(fake.clone()));
        // 20 viewers at once, then 20 more, asking the same report: one pair of queries.
        for _ in 0..2 {
            let path = format!("/report.csv?{WINDOW}&by=team");
            let asks = (0..20).map(|_| get(&d, &path));
            for (code, _, _) in futures::future::join_all(asks).await {
                assert_eq!(code, StatusCode::OK);
            }
        }
        assert_eq!(fake.asked.lock().len(), 2, "usage + teams, once");

        // 12 different windows at once: never more than 2 fetches against Prometheus.
        let slow = Arc::new(Slow::default());
        let (_tx, rx) = watch::channel(Arc::new(crate::tests::snapshot()));
        let d = Dashboard::new(
            rx,
            Settings {
                prometheus: Some(Prometheus {
                    url: "http://127.0.0.1:9090".into(),
                    api: slow.clone(),
                }),
                ..Settings::default()
            },
        )
        .unwrap();
        let asks = (0..12).map(|i| {
            let path = format!("/api/v1/report?from=-{}h&by=namespace", i + 1);
            let d = d.clone();
            async move { get(&d, &path).await.0 }
        });
        for code in futures::future::join_all(asks).await {
            assert_eq!(code, StatusCode::OK);
        }
        assert_eq!(slow.total.load(SeqCst), 12);
        assert!(
            slow.most.load(SeqCst) <= 2,
            "{} at once",
            slow.most.load(SeqCst)
        );
        assert!(d.reports.cached() <= crate::ReportLimits::default().max_entries);
    }

    #[test]
    fn empty_form_fields_take_the_defaults() {
        let f = Form::default();
        let r = f.request("karmada-quota.io/team", 1_767_225_600).unwrap();
        assert_eq!(r.window.from, 1_767_225_600 - 86_400);
        assert_eq!(r.window.to, 1_767_225_600);
        assert_eq!(r.window.step, 87);
        assert_eq!(r.by, vec![Key::Team]);
        assert_eq!(r.source, Source::Placed);
        assert_eq!(
            f.query_string(),
            "from=-24h&to=now&step=&by=team&source=placed"
        );
    }
}
