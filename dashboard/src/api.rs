//! The dashboard's data as JSON under `/api/v1/…` (documented in docs/dashboard.md) and the
//! overview as CSV. The same derived numbers as the pages (shares, levels, drift).
//!
//! - `GET /api/v1/snapshot`: the raw [`Snapshot`](crate::Snapshot)
//! - `GET /api/v1/overview`: the overview's groups with every resource row
//! - `GET /api/v1/overview.csv`: one line per quota resource
//! - `GET /api/v1/quotas/{namespace}/{name}`: one quota with its per-cluster comparison
//! - `GET /api/v1/clusters`: every member with its share of every quota
//!
//! Each answers what the request's viewer may see ([`Visible`]).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use serde::Serialize;

use crate::model::{Quota, Snapshot};
use crate::view::{self, ClusterView, Group, MemberView, QuotaCard, TopBindingView};
use crate::{Dashboard, Visible};

/// The `/api/v1` routes.
pub fn routes() -> Vec<(&'static str, MethodRouter<Dashboard>)> {
    vec![
        ("/api/v1/snapshot", get(snapshot)),
        ("/api/v1/overview", get(overview)),
        ("/api/v1/overview.csv", get(overview_csv)),
        ("/api/v1/quotas/{namespace}/{name}", get(quota)),
        ("/api/v1/cluster-quotas/{name}", get(cluster_quota)),
        ("/api/v1/clusters", get(clusters)),
    ]
}

async fn snapshot(v: Visible) -> Json<Snapshot> {
    Json(v.snapshot.as_ref().clone())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Overview {
    generated_at: i64,
    leader: bool,
    banners: Vec<String>,
    groups: Vec<Group>,
}

async fn overview(State(d): State<Dashboard>, v: Visible) -> Json<serde_json::Value> {
    let s = v.snapshot;
    let o = Overview {
        generated_at: s.generated_at,
        leader: s.leader,
        banners: view::banners(&s, &d.settings),
        groups: view::groups(&s),
    };
    Json(serde_json::to_value(o).unwrap_or_default())
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct QuotaDetail<'a> {
    #[serde(flatten)]
    card: QuotaCard,
    quota: &'a Quota,
    clusters: Vec<ClusterView>,
    top_bindings: Vec<TopBindingView>,
}

async fn quota(v: Visible, Path((namespace, name)): Path<(String, String)>) -> Response {
    let s = v.snapshot;
    match s.quota(&namespace, &name) {
        Some(q) => Json(QuotaDetail {
            card: QuotaCard::of(q, s.team(&namespace)),
            quota: q,
            clusters: view::quota_clusters(&s, q),
            top_bindings: view::top_bindings(q),
        })
        .into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error": format!("no {} computed", crate::view::quota_kind_title(&namespace, &name))})),
        )
            .into_response(),
    }
}

/// A KarmadaClusterQuota: the same detail, under its name alone.
async fn cluster_quota(v: Visible, Path(name): Path<String>) -> Response {
    quota(v, Path((String::new(), name))).await
}

async fn clusters(State(d): State<Dashboard>, v: Visible) -> Json<Vec<MemberView>> {
    Json(view::members(&v.snapshot, &d.settings))
}

async fn overview_csv(v: Visible) -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "attachment; filename=\"karmada-quotas.csv\"",
            ),
        ],
        csv(&v.snapshot),
    )
        .into_response()
}

/// The overview as CSV: `team,namespace,name,resource,used,reserved,hard,free,percent,level`,
/// one line per quota resource, in the overview's order.
pub fn csv(s: &Snapshot) -> String {
    let mut out =
        String::from("team,namespace,name,resource,used,reserved,hard,free,percent,level\n");
    for g in view::groups(s) {
        for q in &g.quotas {
            for r in &q.rows {
                let fields = [
                    q.team.clone().unwrap_or_default(),
                    q.namespace.clone(),
                    q.name.clone(),
                    r.resource.clone(),
                    r.used.clone(),
                    r.reserved.clone(),
                    r.hard.clone(),
                    r.free.clone(),
                    r.percent.map(|p| p.to_string()).unwrap_or_default(),
                    r.level.as_str().to_owned(),
                ];
                let line: Vec<String> = fields.iter().map(|f| csv_field(f)).collect();
                out.push_str(&line.join(","));
                out.push('\n');
            }
        }
    }
    out
}

/// A CSV field, quoted when it holds a comma, quote or line break.
fn csv_field(f: &str) -> String {
    if f.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_owned()
    }
}
