//! The HTML pages, rendered on the server by askama templates (`templates/`): the
//! overview, one quota, the member clusters, and a not-found page. Every page shares
//! `base.html` (navigation, live indicator, staleness banners).

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::line::LineView;
use crate::model::{Condition, Denial, Snapshot};
use crate::view::{self, ClusterView, Group, MemberView, QuotaCard, TopBindingView};
use crate::{Dashboard, Settings, Visible};

/// What every page shows around its content.
#[derive(Clone, Debug)]
pub struct Chrome {
    /// Page title.
    pub title: String,
    /// The active navigation entry (`overview`, `quota`, `clusters`).
    pub active: &'static str,
    /// Staleness banners.
    pub banners: Vec<String>,
    /// When the snapshot was taken (RFC 3339).
    pub generated: String,
    /// What the serving replica is: `leader`, `follower`, or `dashboard-only` (numbers
    /// from the quotas' status).
    pub role: &'static str,
    /// Who is logged in (`--dashboard-auth=kubernetes`).
    pub user: Option<String>,
    /// The logout form's CSRF token (only with a session: a viewer who sends an
    /// `Authorization` header has nothing to log out of).
    pub csrf: Option<String>,
}

impl Chrome {
    /// The chrome of a page titled `title` whose navigation entry is `active`.
    pub(crate) fn new(
        title: impl Into<String>,
        active: &'static str,
        s: &Snapshot,
        settings: &Settings,
    ) -> Self {
        Self {
            title: title.into(),
            active,
            banners: view::banners(s, settings),
            generated: rfc3339(s.generated_at),
            role: if settings.from_status {
                "dashboard-only"
            } else if s.leader {
                "leader"
            } else {
                "follower"
            },
            user: None,
            csrf: None,
        }
    }

    /// The viewer's name and their session's CSRF token.
    pub(crate) fn viewer(&mut self, v: &Visible) {
        self.user = v.user_name();
        self.csrf = v.csrf.clone();
    }
}

/// Unix seconds as RFC 3339 (UTC).
pub fn rfc3339(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| secs.to_string(), |t| t.to_string())
}

/// The overview: every quota grouped by team / namespace.
#[derive(Template, WebTemplate)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    /// Around.
    pub chrome: Chrome,
    /// Groups, by pressure.
    pub groups: Vec<Group>,
    /// Number of quotas.
    pub quota_count: usize,
    /// Number of member clusters.
    pub member_count: usize,
    /// The team label key.
    pub team_label: String,
}

impl OverviewPage {
    /// The overview of `s`.
    pub fn of(s: &Snapshot, settings: &Settings) -> Self {
        Self {
            chrome: Chrome::new("Overview", "overview", s, settings),
            groups: view::groups(s),
            quota_count: s.quotas.len(),
            member_count: s.members.len(),
            team_label: settings.team_label.clone(),
        }
    }
}

/// One quota in full.
#[derive(Template, WebTemplate)]
#[template(path = "quota.html")]
pub struct QuotaPage {
    /// Around.
    pub chrome: Chrome,
    /// The quota's card (rows, pressure).
    pub q: QuotaCard,
    /// When it was computed.
    pub computed: String,
    /// Per member cluster.
    pub clusters: Vec<ClusterView>,
    /// Pending reservations, as text.
    pub reservations: Vec<ReservationLine>,
    /// Conditions.
    pub conditions: Vec<Condition>,
    /// Recent denials.
    pub denials: Vec<Denial>,
    /// The bindings that use the most.
    pub top_bindings: Vec<TopBindingView>,
    /// A KarmadaClusterQuota: (namespace, its usage as text), those the viewer may see.
    pub shares: Vec<(String, String)>,
    /// The waiting line, while the quota queues or some still wait.
    pub line: Option<LineView>,
    /// The JSON of the usage-over-time chart (the page's script draws it).
    pub history_api: String,
    /// The chart's ranges, the default first.
    pub ranges: Vec<&'static str>,
    /// The chart's default range.
    pub default_range: &'static str,
}

/// A pending reservation, printed.
#[derive(Clone, Debug)]
pub struct ReservationLine {
    /// Binding.
    pub binding: String,
    /// `requests.cpu=2, pods=1`.
    pub reserved: String,
    /// Expiry.
    pub expires: String,
}

impl QuotaPage {
    /// The page of `namespace/name`, if computed.
    pub fn of(s: &Snapshot, settings: &Settings, namespace: &str, name: &str) -> Option<Self> {
        let quota = s.quota(namespace, name)?;
        Some(Self {
            chrome: Chrome::new(format!("{namespace}/{name}"), "quota", s, settings),
            q: QuotaCard::of(quota, s.team(namespace)),
            computed: rfc3339(quota.computed_at),
            clusters: view::quota_clusters(s, quota),
            reservations: quota
                .reservations
                .iter()
                .map(|r| ReservationLine {
                    binding: r.binding.clone(),
                    reserved: view::list_text(&r.reserved),
                    expires: r.expires.clone(),
                })
                .collect(),
            conditions: quota.conditions.clone(),
            denials: quota.denials.clone(),
            top_bindings: view::top_bindings(quota),
            line: LineView::of(quota, s.generated_at),
            shares: quota
                .shares
                .iter()
                .map(|(ns, used)| (ns.clone(), view::list_text(used)))
                .collect(),
            history_api: if namespace.is_empty() {
                format!("/api/v1/cluster-quotas/{name}/history")
            } else {
                format!("/api/v1/quotas/{namespace}/{name}/history")
            },
            ranges: crate::history::Range::ALL
                .iter()
                .map(|r| r.as_str())
                .collect(),
            default_range: crate::history::Range::Hour1.as_str(),
        })
    }
}

/// The member clusters.
#[derive(Template, WebTemplate)]
#[template(path = "clusters.html")]
pub struct ClustersPage {
    /// Around.
    pub chrome: Chrome,
    /// Members, by name.
    pub members: Vec<MemberView>,
}

impl ClustersPage {
    /// The clusters page of `s`.
    pub fn of(s: &Snapshot, settings: &Settings) -> Self {
        Self {
            chrome: Chrome::new("Member clusters", "clusters", s, settings),
            members: view::members(s, settings),
        }
    }
}

/// Not found.
#[derive(Template, WebTemplate)]
#[template(path = "not_found.html")]
pub struct NotFoundPage {
    /// Around.
    pub chrome: Chrome,
    /// What was not found.
    pub message: String,
}

/// `GET /`.
pub async fn overview(State(d): State<Dashboard>, v: Visible) -> OverviewPage {
    let mut page = OverviewPage::of(&v.snapshot, &d.settings);
    page.chrome.viewer(&v);
    page
}

/// `GET /cluster-quotas/{name}`: a KarmadaClusterQuota's page (the quota page, with no
/// namespace).
pub async fn cluster_quota(
    State(d): State<Dashboard>,
    v: Visible,
    Path(name): Path<String>,
) -> Response {
    quota(State(d), v, Path((String::new(), name))).await
}

/// `GET /quotas/{namespace}/{name}`: 404 too for a quota the viewer may not see.
pub async fn quota(
    State(d): State<Dashboard>,
    v: Visible,
    Path((namespace, name)): Path<(String, String)>,
) -> Response {
    match QuotaPage::of(&v.snapshot, &d.settings, &namespace, &name) {
        Some(mut page) => {
            page.chrome.viewer(&v);
            page.into_response()
        }
        None => not_found_page(
            &v,
            &d.settings,
            format!(
                "No {} computed.",
                crate::view::quota_kind_title(&namespace, &name)
            ),
        ),
    }
}

/// `GET /clusters`.
pub async fn clusters(State(d): State<Dashboard>, v: Visible) -> ClustersPage {
    let mut page = ClustersPage::of(&v.snapshot, &d.settings);
    page.chrome.viewer(&v);
    page
}

/// Any other path.
pub async fn not_found(State(d): State<Dashboard>, v: Visible) -> Response {
    not_found_page(&v, &d.settings, "No such page.".to_owned())
}

fn not_found_page(v: &Visible, settings: &Settings, message: String) -> Response {
    let mut chrome = Chrome::new("Not found", "none", &v.snapshot, settings);
    chrome.viewer(v);
    (StatusCode::NOT_FOUND, NotFoundPage { chrome, message }).into_response()
}
