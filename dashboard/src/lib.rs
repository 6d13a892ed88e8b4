//! The federated usage dashboard: every KarmadaQuota across the member clusters in a
//! browser, read-only.
//!
//! ```text
//!  feeder (the controller) ── watch::Sender<Arc<Snapshot>> ──┐
//!                                                            ▼
//!  GET /                 overview (pages)   ◄── Dashboard { snapshot: watch::Receiver, settings }
//!  GET /quotas/{ns}/{n}  one quota          │
//!  GET /clusters         member clusters    │
//!  GET /events           Server-Sent Events (live): a `snapshot` event per change
//!  GET /api/v1/…         the same data as JSON; /api/v1/overview.csv
//!  GET /assets/…         the page's own CSS and script (nothing fetched elsewhere)
//!  GET|POST /login       the login form (--dashboard-auth=kubernetes); POST /logout
//!  GET /report, /report.csv, /api/v1/report   usage for billing (Prometheus, cached)
//!  GET /api/v1/quotas/{ns}/{n}/history   a quota's usage over time (the quota page's chart:
//!                                        Prometheus, else the controller's in-memory window)
//! ```
//!
//! Every data route takes a [`Visible`] (the snapshot as the request's viewer may see it:
//! all of it without auth, else the namespaces a SubjectAccessReview allows; see
//! [`auth`]), never the unfiltered snapshot. A browser logs in once and holds an opaque
//! [`session`] id; both forms carry a [`csrf`] token; every response carries the
//! [`headers`] (CSP, no framing, no-store); request bodies are capped at
//! [`FORM_BODY_LIMIT`]; live streams are capped ([`streams`]); the Report page's queries
//! are cached and rate-limited ([`report_cache`]); logins per user and reviews of new
//! tokens are rate-limited ([`rate`]); the quota page's chart reads [`history`].
//!
//! The crate owns its data model ([`model`]) so it does not depend on the controller; the
//! controller computes each quota's view as a [`model::Quota`] and sends them in a
//! [`Snapshot`] on a watch channel.
//! Modules: [`model`] (data and derived numbers), [`view`] (what the pages group and sort),
//! [`pages`] (askama templates), [`api`] (JSON, CSV), [`live`] (SSE), [`auth`] (token and
//! access reviews, cached), [`visible`] (the per-request filter), [`login`] (the form),
//! [`session`], [`csrf`], [`headers`], [`streams`], [`rate`], [`report`] and
//! [`report_cache`].

pub mod api;
pub mod auth;
pub mod credentials;
pub mod csrf;
pub mod headers;
pub mod history;
pub mod line;
pub mod live;
pub mod login;
pub mod model;
pub mod pages;
pub mod prometheus;
pub mod rate;
pub mod report;
pub mod report_cache;
pub mod session;
pub mod streams;
pub mod view;
pub mod visible;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{MethodRouter, get, post};
use tokio::sync::watch;

pub use auth::{Access, CachePolicy, Reviewer, User};
pub use model::Snapshot;
pub use report_cache::ReportLimits;
pub use session::SessionPolicy;
pub use streams::StreamLimits;
pub use visible::Visible;

use crate::csrf::Csrf;
use crate::report_cache::ReportFetches;
use crate::session::Sessions;
use crate::streams::Streams;

/// The largest request body any route reads (only the login and logout forms read one):
/// a bearer token of several KiB fits, a flood of large bodies is refused with 413
/// before it is buffered.
pub const FORM_BODY_LIMIT: usize = 8 * 1024;

/// Errors of the dashboard.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system's random source failed (session ids, CSRF key).
    #[error("dashboard: {0}")]
    Random(#[from] session::RandomError),
}

/// How the dashboard presents its data.
#[derive(Clone, Debug)]
pub struct Settings {
    /// A member whose data is older than this gets a staleness banner.
    pub stale_after: Duration,
    /// The namespace label whose value names a team (shown in the overview's groups).
    pub team_label: String,
    /// The Prometheus the Report page reads (`None`: the page says how to turn it on).
    pub prometheus: Option<report::Prometheus>,
    /// The dashboard is served over TLS (by itself or a proxy that always terminates
    /// TLS): every cookie is `Secure`.
    pub secure_cookies: bool,
    /// Login sessions: how many, how long.
    pub sessions: SessionPolicy,
    /// Live streams open at once.
    pub streams: StreamLimits,
    /// The Report page's Prometheus queries: cache and rate limit.
    pub reports: ReportLimits,
    /// Served by a replica that measures no member (`--role=dashboard`): what members run
    /// and their reachability are the controller's, read from the quotas' status.
    pub from_status: bool,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(60),
            team_label: DEFAULT_TEAM_LABEL.to_owned(),
            prometheus: None,
            secure_cookies: false,
            sessions: SessionPolicy::default(),
            streams: StreamLimits::default(),
            reports: ReportLimits::default(),
            from_status: false,
        }
    }
}

/// The default namespace label that names a team.
pub const DEFAULT_TEAM_LABEL: &str = "karmada-quota.io/team";

/// What every route reads.
#[derive(Clone)]
pub struct Dashboard {
    /// The latest snapshot (the feeder sends a new one on every change).
    pub snapshot: watch::Receiver<Arc<Snapshot>>,
    /// Presentation settings.
    pub settings: Arc<Settings>,
    /// With `--dashboard-auth=kubernetes`: who may see what (`None`: everyone sees all).
    pub access: Option<Arc<Access>>,
    /// Login sessions.
    pub sessions: Arc<Sessions>,
    /// The forms' CSRF key.
    pub csrf: Arc<Csrf>,
    /// Open live streams.
    pub streams: Arc<Streams>,
    /// The Report page's fetches.
    pub reports: Arc<ReportFetches>,
    /// The controller's in-memory window of each quota's usage (the chart without
    /// Prometheus, or when it fails).
    pub history: history::Recent,
    /// The chart's Prometheus fetches.
    pub history_fetches: Arc<report_cache::Fetches<karmada_quota_billing::history::Chart>>,
}

impl Dashboard {
    /// A dashboard over `snapshot`, without authentication; fails only when the OS's
    /// random source does (the CSRF key is drawn here).
    pub fn new(
        snapshot: watch::Receiver<Arc<Snapshot>>,
        settings: Settings,
    ) -> Result<Self, Error> {
        Ok(Self {
            snapshot,
            sessions: Arc::new(Sessions::new(settings.sessions)),
            csrf: Arc::new(Csrf::new()?),
            streams: Arc::new(Streams::new(settings.streams)),
            reports: Arc::new(ReportFetches::new(settings.reports)),
            history: history::empty(),
            history_fetches: history::fetches(),
            settings: Arc::new(settings),
            access: None,
        })
    }

    /// The same dashboard, whose charts read `recent` (the window the controller fills).
    #[must_use]
    pub fn with_history(mut self, recent: history::Recent) -> Self {
        self.history = recent;
        self
    }

    /// The same dashboard, where each request must carry a token `access` accepts and
    /// sees only the namespaces it allows.
    #[must_use]
    pub fn with_access(mut self, access: Access) -> Self {
        self.access = Some(Arc::new(access));
        self
    }

    /// The current snapshot, unfiltered: routes take a [`Visible`] instead, which is this
    /// snapshot restricted to what the request's viewer may see.
    pub fn unfiltered(&self) -> Arc<Snapshot> {
        self.snapshot.borrow().clone()
    }
}

const CSS: &str = include_str!("../assets/dashboard.css");
const JS: &str = include_str!("../assets/dashboard.js");
const HISTORY_JS: &str = include_str!("../assets/history.js");

/// Every route of the dashboard, as (path, methods): the one table [`router`] is built
/// from and [`route_paths`] lists (the route-walk tests read it).
pub fn routes() -> Vec<(&'static str, MethodRouter<Dashboard>)> {
    let mut routes = vec![
        ("/", get(pages::overview)),
        ("/quotas/{namespace}/{name}", get(pages::quota)),
        ("/cluster-quotas/{name}", get(pages::cluster_quota)),
        ("/clusters", get(pages::clusters)),
        ("/events", get(live::events)),
        ("/login", get(login::form).post(login::submit)),
        ("/logout", post(login::logout)),
        (
            "/assets/dashboard.css",
            get(|| async {
                ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
            }),
        ),
        (
            "/assets/dashboard.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    JS,
                )
                    .into_response()
            }),
        ),
        (
            "/assets/history.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    HISTORY_JS,
                )
                    .into_response()
            }),
        ),
    ];
    routes.extend(api::routes());
    routes.extend(report::routes());
    routes.extend(history::routes());
    routes
}

/// The path of every route (`{namespace}`, `{name}` are parameters); anything else is the
/// not-found page, which takes the viewer like any page.
pub fn route_paths() -> Vec<&'static str> {
    routes().into_iter().map(|(path, _)| path).collect()
}

/// Every route of the dashboard, with the security headers and the body limit.
pub fn router(dashboard: Dashboard) -> Router {
    routes()
        .into_iter()
        .fold(Router::new(), |r, (path, method)| r.route(path, method))
        .fallback(pages::not_found)
        .layer(DefaultBodyLimit::max(FORM_BODY_LIMIT))
        .layer(axum::middleware::from_fn(headers::secure))
        .with_state(dashboard)
}

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod history_tests;
#[cfg(test)]
mod security_tests;
#[cfg(test)]
mod tests;
