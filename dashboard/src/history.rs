//! The quota page's usage over time: used, reserved and hard per resource (and what
//! Karmada placed in each member cluster, on demand) as JSON the page's script draws.
//!
//! ```text
//!  GET /api/v1/quotas/{namespace}/{name}/history?range=1h&clusters=true
//!  GET /api/v1/cluster-quotas/{name}/history?…
//!      │ Visible: the quota must be in the viewer's snapshot (else 404, as the quota's API)
//!      │ range ∈ 15m 1h 6h 24h (400 otherwise), clusters ∈ true/false
//!      ▼
//!  --dashboard-prometheus set ─► query_range over the controller's own series
//!      │                          (core::history::promql; cached, limited: Fetches)
//!      │ fails, times out or has no series ─► the in-memory window, with a note saying why
//!      ▼
//!  the controller's in-memory window (core::history::Store, fed by the controller every
//!  --history-step and on every change, over --history-window)
//!      ▼
//!  { source, sourceText, note, range, chart: core::history::Chart }
//! ```
//!
//! Both sources give the same shape: at most [`POINTS`] points per line, each the peak of
//! its time bucket.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use karmada_quota_billing::Window;
use karmada_quota_billing::history::{Chart, Reading, Store, promql};
use karmada_quota_core::ResourceList;
use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::model::Snapshot;
use crate::prometheus::Prometheus;
use crate::report_cache::{Fetches, ReportLimits};
use crate::{Dashboard, Visible};

/// The controller's in-memory window, shared by the controller (writes) and the
/// dashboard (reads).
pub type Recent = Arc<RwLock<Store>>;

/// Points per line at most (the chart is a few hundred pixels wide).
pub const POINTS: usize = 240;

/// How long the chart waits for Prometheus before it shows the in-memory window.
pub const PROMETHEUS_TIMEOUT: Duration = Duration::from_secs(10);

/// How the history's Prometheus answers are cached and limited: a page polls every
/// few seconds, so viewers of one quota share one fetch per `ttl`.
pub const LIMITS: ReportLimits = ReportLimits {
    ttl: Duration::from_secs(10),
    error_ttl: Duration::from_secs(5),
    concurrency: 2,
    wait: Duration::from_secs(10),
    max_entries: 64,
};

/// The ranges a chart offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Range {
    /// The last 15 minutes.
    Minutes15,
    /// The last hour (the default).
    Hour1,
    /// The last 6 hours.
    Hours6,
    /// The last 24 hours.
    Hours24,
}

impl Range {
    /// Every range, shortest first.
    pub const ALL: [Range; 4] = [
        Range::Minutes15,
        Range::Hour1,
        Range::Hours6,
        Range::Hours24,
    ];

    /// `15m`, `1h`, `6h`, `24h`.
    pub fn as_str(self) -> &'static str {
        match self {
            Range::Minutes15 => "15m",
            Range::Hour1 => "1h",
            Range::Hours6 => "6h",
            Range::Hours24 => "24h",
        }
    }

    /// Its length.
    pub fn seconds(self) -> u64 {
        match self {
            Range::Minutes15 => 900,
            Range::Hour1 => 3600,
            Range::Hours6 => 6 * 3600,
            Range::Hours24 => 24 * 3600,
        }
    }

    /// The range named `s` (empty: an hour), or an error listing the choices.
    pub fn parse(s: &str) -> Result<Range, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(Range::Hour1);
        }
        Range::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| {
                let all: Vec<&str> = Range::ALL.iter().map(|r| r.as_str()).collect();
                format!("invalid range {s:?}: expected one of {}", all.join(", "))
            })
    }
}

/// The query string.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct Params {
    /// `15m`, `1h` (default), `6h`, `24h`.
    #[serde(default)]
    pub range: String,
    /// `true` adds each member cluster's placed usage.
    #[serde(default)]
    pub clusters: String,
}

fn flag(s: &str) -> Result<bool, String> {
    match s.trim() {
        "" | "false" | "0" => Ok(false),
        "true" | "1" => Ok(true),
        other => Err(format!(
            "invalid clusters {other:?}: expected true or false"
        )),
    }
}

/// Where the chart's points came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum Source {
    /// `--dashboard-prometheus`.
    Prometheus,
    /// The controller's in-memory window.
    Memory,
}

/// The answer.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct History {
    /// `namespace/name`, or the name of a KarmadaClusterQuota.
    pub quota: String,
    /// The range shown.
    pub range: &'static str,
    /// The ranges offered.
    pub ranges: Vec<&'static str>,
    /// Whether member-cluster lines are in.
    pub clusters: bool,
    /// Where the points came from.
    pub source: Source,
    /// The same, for people.
    pub source_text: String,
    /// Why the source is not the one configured, or what it lacks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The lines.
    pub chart: Chart,
}

/// The routes.
pub fn routes() -> Vec<(&'static str, MethodRouter<Dashboard>)> {
    vec![
        ("/api/v1/quotas/{namespace}/{name}/history", get(quota)),
        ("/api/v1/cluster-quotas/{name}/history", get(cluster_quota)),
    ]
}

fn error(status: StatusCode, message: String) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

async fn quota(
    State(d): State<Dashboard>,
    v: Visible,
    Path((namespace, name)): Path<(String, String)>,
    Query(params): Query<Params>,
) -> Response {
    answer(&d, &v, &namespace, &name, &params).await
}

async fn cluster_quota(
    State(d): State<Dashboard>,
    v: Visible,
    Path(name): Path<String>,
    Query(params): Query<Params>,
) -> Response {
    answer(&d, &v, "", &name, &params).await
}

/// The history of quota `namespace`/`name` (a KarmadaClusterQuota when `namespace` is
/// empty) for `params`: 400 for a bad range or clusters flag, 404 for a quota not in the
/// viewer's snapshot; Prometheus's chart when configured and it has series, the
/// in-memory window otherwise (with a note saying why).
async fn answer(
    d: &Dashboard,
    v: &Visible,
    namespace: &str,
    name: &str,
    params: &Params,
) -> Response {
    let (range, clusters) = match (Range::parse(&params.range), flag(&params.clusters)) {
        (Ok(r), Ok(c)) => (r, c),
        (Err(e), _) | (_, Err(e)) => return error(StatusCode::BAD_REQUEST, e),
    };
    if v.snapshot.quota(namespace, name).is_none() {
        return error(
            StatusCode::NOT_FOUND,
            format!(
                "no {} computed",
                crate::view::quota_kind_title(namespace, name)
            ),
        );
    }
    let now = jiff::Timestamp::now().as_second();
    let mut note = None;
    if let Some(p) = &d.settings.prometheus {
        match prometheus_chart(d, p, (namespace, name), range, clusters, now).await {
            Ok(chart) => {
                return Json(History {
                    quota: quota_label(namespace, name),
                    range: range.as_str(),
                    ranges: ranges(),
                    clusters,
                    source: Source::Prometheus,
                    source_text: format!("Prometheus at {}", p.url),
                    note: None,
                    chart: chart.as_ref().clone(),
                })
                .into_response();
            }
            Err(why) => note = Some(why),
        }
    }
    Json(from_memory(
        d,
        (namespace, name),
        range,
        clusters,
        now,
        note,
    ))
    .into_response()
}

/// `namespace/name`, or `name` alone for a KarmadaClusterQuota (empty `namespace`).
fn quota_label(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_owned()
    } else {
        format!("{namespace}/{name}")
    }
}

/// Prometheus's chart of `quota` when it has series of it; otherwise the note saying
/// why the in-memory window is shown (no series in the range, or the fetch failed).
async fn prometheus_chart(
    d: &Dashboard,
    p: &Prometheus,
    quota: (&str, &str),
    range: Range,
    clusters: bool,
    now: i64,
) -> Result<Arc<Chart>, String> {
    match from_prometheus(d, p, quota, range, clusters, now).await {
        Ok(chart) if !chart.is_empty() => Ok(chart),
        Ok(_) => Err(format!(
            "Prometheus at {} has no series of this quota in the range (does it scrape \
             the controller's /metrics?): showing the controller's in-memory window.",
            p.url
        )),
        Err(e) => {
            // The client's errors usually name the URL already.
            let why = if e.contains(&p.url) {
                e
            } else {
                format!("{}: {e}", p.url)
            };
            Err(format!(
                "Prometheus failed ({why}): showing the controller's in-memory window."
            ))
        }
    }
}

/// The history of `quota` from the controller's in-memory window, its note `note` (why
/// Prometheus is not shown) followed by what the window lacks: the quota beyond
/// `--history-max-quotas`, no sample yet, or a range longer than the window.
fn from_memory(
    d: &Dashboard,
    (namespace, name): (&str, &str),
    range: Range,
    clusters: bool,
    now: i64,
    note: Option<String>,
) -> History {
    let (chart, bounds, untracked) = {
        let store = d.history.read();
        let from = now.saturating_sub_unsigned(range.seconds());
        (
            store.chart(namespace, name, (from, now), POINTS, clusters),
            store.bounds(),
            store.untracked(namespace, name),
        )
    };
    let mut notes: Vec<String> = note.into_iter().collect();
    if untracked {
        notes.push(format!(
            "The controller keeps the history of {} quotas at most (--history-max-quotas); \
             this one is beyond them.",
            bounds.max_quotas
        ));
    } else if chart.is_none() {
        notes.push("No sample of this quota yet.".to_owned());
    }
    if range.seconds() > bounds.window {
        notes.push(format!(
            "The in-memory window holds the last {} (--history-window); configure \
             --dashboard-prometheus for longer ranges.",
            human(bounds.window)
        ));
    }
    let from = now.saturating_sub_unsigned(range.seconds());
    History {
        quota: quota_label(namespace, name),
        range: range.as_str(),
        ranges: ranges(),
        clusters,
        source: Source::Memory,
        source_text: format!(
            "the controller's in-memory window (the last {}, a sample every {} and on every \
             change)",
            human(bounds.window),
            human(bounds.step)
        ),
        note: (!notes.is_empty()).then(|| notes.join(" ")),
        chart: chart.unwrap_or(Chart {
            from,
            to: now,
            step: 1,
            resources: Vec::new(),
        }),
    }
}

fn ranges() -> Vec<&'static str> {
    Range::ALL.iter().map(|r| r.as_str()).collect()
}

/// `90` → `1m30s`, `3600` → `60m`, `86400` → `24h`.
pub fn human(seconds: u64) -> String {
    match seconds {
        s if s >= 7200 && s % 3600 == 0 => format!("{}h", s / 3600),
        s if s >= 60 && s % 60 == 0 => format!("{}m", s / 60),
        s if s > 60 => format!("{}m{}s", s / 60, s % 60),
        s => format!("{s}s"),
    }
}

/// The chart of `quota` from Prometheus (cached per quota, range and clusters).
async fn from_prometheus(
    d: &Dashboard,
    p: &Prometheus,
    (namespace, name): (&str, &str),
    range: Range,
    clusters: bool,
    now: i64,
) -> Result<Arc<Chart>, String> {
    let step = range
        .seconds()
        .div_ceil(u64::try_from(POINTS).unwrap_or(u64::MAX))
        .max(1);
    let from = now.saturating_sub_unsigned(range.seconds());
    let window = Window::new(from, now + 1, Some(step)).map_err(|e| e.to_string())?;
    let key = format!("{namespace}/{name}|{}|{clusters}", range.as_str());
    d.history_fetches
        .get_with(&key, || async move {
            let q = promql::queries(namespace, name, step);
            let fetch = async {
                let (used, reserved, hard) = futures::try_join!(
                    p.api.query_range(&q.used, window),
                    p.api.query_range(&q.reserved, window),
                    p.api.query_range(&q.hard, window),
                )?;
                let members = if clusters {
                    p.api.query_range(&q.clusters, window).await?
                } else {
                    Vec::new()
                };
                Ok::<_, String>(Chart::from_series(
                    (window.from, now, step),
                    POINTS,
                    &used,
                    &reserved,
                    &hard,
                    &members,
                ))
            };
            tokio::time::timeout(PROMETHEUS_TIMEOUT, fetch)
                .await
                .map_err(|_| format!("no answer within {PROMETHEUS_TIMEOUT:?}"))?
        })
        .await
        .map_err(|e| e.to_string())
}

/// A fresh cache and limiter of the history's Prometheus fetches.
pub fn fetches() -> Arc<Fetches<Chart>> {
    Arc::new(Fetches::new(LIMITS))
}

/// An empty in-memory window with the default bounds (a dashboard nobody feeds).
pub fn empty() -> Recent {
    Arc::new(RwLock::new(Store::new(
        karmada_quota_billing::history::Bounds::default(),
    )))
}

/// Records every quota of `snapshot` at `now` (Unix seconds) in `recent`: its hard, used,
/// reserved and what Karmada placed in each member; a quota not in it is dropped.
pub fn record(recent: &Recent, snapshot: &Snapshot, now: i64) {
    let clusters: Vec<Vec<(&str, &ResourceList)>> = snapshot
        .quotas
        .iter()
        .map(|q| {
            q.clusters
                .iter()
                .map(|c| (c.name.as_str(), &c.placed))
                .collect()
        })
        .collect();
    let readings = snapshot
        .quotas
        .iter()
        .zip(&clusters)
        .map(|(q, members)| Reading {
            namespace: &q.namespace,
            name: &q.name,
            hard: &q.hard,
            used: &q.used,
            reserved: &q.reserved,
            clusters: members,
        });
    recent.write().record_all(now, readings);
}
