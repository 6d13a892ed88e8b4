//! The computed view of every quota, per cluster, as JSON on the admin port — what the
//! dashboard and `kubectl karmada-quota` read.
//!
//! - `GET /api/v1/quotas`: `{"leader", "members": {name: reach}, "items": [QuotaReport…]}`
//! - `GET /api/v1/quotas/{namespace}`: the same, one namespace
//! - `GET /api/v1/quotas/{namespace}/{name}`: one `QuotaReport`, or 404
//!
//! A report carries the bindings that use the most of the quota (`topBindings`).
//!
//! Every replica serves it (followers compute the same view; only the leader writes it to
//! the quota's status).

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use karmada_quota_core::ResourceList;
use karmada_quota_core::status::ClusterView;
use karmada_quota_core::top::BindingUsage;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaStatus};
use kube::ResourceExt;
use serde::Serialize;
use tokio::sync::watch;

use crate::desired::Computed;
use crate::members::{MemberRegistry, Reach};

/// (namespace, name) → the latest computed report.
pub type Views = Arc<RwLock<BTreeMap<(String, String), QuotaReport>>>;

/// One quota as the controller last computed it.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct QuotaReport {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// metadata.generation the report is for.
    pub generation: Option<i64>,
    /// Limits (empty for an invalid spec).
    pub hard: ResourceList,
    /// Usage of observed bindings, summed over clusters.
    pub used: ResourceList,
    /// Effective usage = used + Σ pending reservations (what admission checks against).
    pub effective: ResourceList,
    /// Per member cluster: placed `used` and measured `observed` (absent when unknown).
    pub clusters: Vec<ClusterView>,
    /// Pending reservations after pruning.
    pub reservations: Vec<ReservationReport>,
    /// Clusters running more than placed: cluster → the names above.
    pub drift: BTreeMap<String, ResourceList>,
    /// Number of bindings the quota matches.
    pub bindings: usize,
    /// The bindings that use the largest share of hard, highest first (at most
    /// `core::top::TOP_BINDINGS`): name, usage of the hard names, clusters.
    pub top_bindings: Vec<BindingUsage>,
    /// The quota's conditions (as last written by the leader).
    pub conditions: Vec<ConditionReport>,
    /// A KarmadaClusterQuota (`namespace` empty): the namespaces it selects.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Why nothing was computed (invalid spec).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When this report was computed (RFC 3339).
    pub computed_at: String,
}

/// A pending reservation.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ReservationReport {
    /// Binding name.
    pub binding: String,
    /// Binding uid.
    pub uid: String,
    /// Binding generation admitted.
    pub generation: i64,
    /// Admitted increase.
    pub reserved: ResourceList,
    /// When it lapses (RFC 3339).
    pub expiration_time: String,
}

/// A condition, without its bookkeeping fields.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    /// Type.
    #[serde(rename = "type")]
    pub type_: String,
    /// True / False / Unknown.
    pub status: String,
    /// Reason.
    pub reason: String,
    /// Message.
    pub message: String,
    /// Last flip (RFC 3339).
    pub last_transition_time: String,
}

impl QuotaReport {
    /// The report of `quota`, computed as `computed`, whose status now is `status`.
    pub fn new(
        quota: &KarmadaQuota,
        computed: &Computed,
        status: &KarmadaQuotaStatus,
        now: jiff::Timestamp,
    ) -> Self {
        let conditions = status
            .conditions
            .iter()
            .map(|c| ConditionReport {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                message: c.message.clone(),
                last_transition_time: c.last_transition_time.0.to_string(),
            })
            .collect();
        let mut r = Self {
            namespace: quota.namespace().unwrap_or_default(),
            name: quota.name_any(),
            generation: quota.metadata.generation,
            hard: ResourceList::new(),
            used: ResourceList::new(),
            effective: ResourceList::new(),
            clusters: Vec::new(),
            reservations: Vec::new(),
            drift: BTreeMap::new(),
            bindings: 0,
            top_bindings: Vec::new(),
            namespaces: Vec::new(),
            conditions,
            error: None,
            computed_at: now.to_string(),
        };
        match computed {
            Computed::Invalid(errors) => {
                r.error = Some(
                    errors
                        .iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join("; "),
                );
            }
            Computed::Valid { view, .. } => {
                r.hard = view.hard.clone();
                r.used = view.used.clone();
                r.effective = view.effective.clone();
                r.clusters = view.clusters.clone();
                r.drift = view.drift.clone();
                r.bindings = view.bindings;
                r.top_bindings = view.top_bindings.clone();
                r.reservations = view
                    .reservations
                    .iter()
                    .map(|e| ReservationReport {
                        binding: e.reserved_by.name.clone(),
                        uid: e.reserved_by.uid.clone(),
                        generation: e.generation,
                        reserved: e.reserved.clone(),
                        expiration_time: karmada_quota_crds::convert::unix_to_time(
                            e.expiration_time,
                        )
                        .0
                        .to_string(),
                    })
                    .collect();
            }
        }
        r
    }
}

/// What the JSON routes read.
#[derive(Clone)]
pub struct ApiState {
    /// Reports.
    pub views: Views,
    /// Members' reachability.
    pub members: MemberRegistry,
    /// Leadership.
    pub leader: watch::Receiver<bool>,
}

#[derive(Serialize)]
struct ListResponse {
    leader: bool,
    members: BTreeMap<String, Reach>,
    items: Vec<QuotaReport>,
}

/// The `/api/v1/quotas` routes, to merge into the admin router.
pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/api/v1/quotas", get(list_all))
        .route("/api/v1/quotas/{namespace}", get(list_namespace))
        .route("/api/v1/quotas/{namespace}/{name}", get(get_one))
        .with_state(state)
}

fn list(st: &ApiState, namespace: Option<&str>) -> ListResponse {
    let views = st.views.read().unwrap_or_else(|e| e.into_inner());
    ListResponse {
        leader: *st.leader.borrow(),
        members: st.members.reach(),
        items: views
            .values()
            .filter(|r| namespace.is_none_or(|ns| r.namespace == ns))
            .cloned()
            .collect(),
    }
}

async fn list_all(State(st): State<ApiState>) -> Json<ListResponse> {
    Json(list(&st, None))
}

async fn list_namespace(
    State(st): State<ApiState>,
    Path(namespace): Path<String>,
) -> Json<ListResponse> {
    Json(list(&st, Some(&namespace)))
}

async fn get_one(
    State(st): State<ApiState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    let views = st.views.read().unwrap_or_else(|e| e.into_inner());
    match views.get(&(namespace.clone(), name.clone())) {
        Some(r) => Json(r.clone()).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({"error": format!("no KarmadaQuota {namespace}/{name} computed")})),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use karmada_quota_core::status::QuotaView;
    use tower::ServiceExt;

    async fn get_json(router: Router, path: &str) -> (StatusCode, serde_json::Value) {
        let resp = router
            .oneshot(Request::get(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let code = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (code, serde_json::from_slice(&body).unwrap())
    }

    fn state() -> ApiState {
        let views = Views::default();
        let q = mk_quota("team-a", "q", &[("pods", "10")]);
        let view = QuotaView {
            namespace: "team-a".into(),
            name: "q".into(),
            hard: rl(&[("pods", "10")]),
            used: rl(&[("pods", "3")]),
            effective: rl(&[("pods", "5")]),
            clusters: vec![ClusterView {
                name: "member1".into(),
                used: rl(&[("pods", "3")]),
                observed: None,
            }],
            bindings: 1,
            top_bindings: vec![BindingUsage {
                name: "web".into(),
                usage: rl(&[("pods", "3")]),
                clusters: vec!["member1".into()],
            }],
            ..QuotaView::default()
        };
        let report = QuotaReport::new(
            &q,
            &Computed::Valid {
                view: Box::new(view),
                unparsed: vec![],
                incomplete: Default::default(),
            },
            &KarmadaQuotaStatus::default(),
            jiff::Timestamp::UNIX_EPOCH,
        );
        views
            .write()
            .unwrap()
            .insert(("team-a".into(), "q".into()), report);
        let members = MemberRegistry::default();
        members.insert_for_test("member1", Reach::Unreachable("refused".into()), []);
        ApiState {
            views,
            members,
            leader: watch::channel(true).1,
        }
    }

    #[tokio::test]
    async fn lists_every_quota_with_clusters_and_members() {
        let (code, v) = get_json(router(state()), "/api/v1/quotas").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(v["leader"], true);
        assert_eq!(v["members"]["member1"]["state"], "unreachable");
        assert_eq!(v["items"][0]["used"]["pods"], "3");
        assert_eq!(v["items"][0]["effective"]["pods"], "5");
        assert_eq!(v["items"][0]["clusters"][0]["name"], "member1");
        assert!(v["items"][0]["clusters"][0]["observed"].is_null());
        let top = &v["items"][0]["topBindings"][0];
        assert_eq!(top["name"], "web");
        assert_eq!(top["usage"]["pods"], "3");
        assert_eq!(top["clusters"][0], "member1");
    }

    #[tokio::test]
    async fn filters_by_namespace_and_404s_unknown_quotas() {
        let (_, v) = get_json(router(state()), "/api/v1/quotas/team-b").await;
        assert_eq!(v["items"].as_array().unwrap().len(), 0);
        let (code, v) = get_json(router(state()), "/api/v1/quotas/team-a/q").await;
        assert_eq!(code, StatusCode::OK);
        assert_eq!(v["hard"]["pods"], "10");
        let (code, _) = get_json(router(state()), "/api/v1/quotas/team-a/nope").await;
        assert_eq!(code, StatusCode::NOT_FOUND);
    }
}
