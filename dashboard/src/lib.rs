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
//! ```
//!
//! Every data route takes a [`Visible`] (the snapshot as the request's viewer may see it:
//! all of it without auth, else the namespaces a SubjectAccessReview allows; see
//! [`auth`]), never the unfiltered snapshot.
//!
//! The crate owns its data model ([`model`]) so it does not depend on the controller; the
//! controller maps its computed views into a [`Snapshot`] and sends it on a watch channel.
//! Modules: [`model`] (data and derived numbers), [`view`] (what the pages group and sort),
//! [`pages`] (askama templates), [`api`] (JSON, CSV), [`live`] (SSE), [`auth`] (token and
//! access reviews, cached), [`visible`] (the per-request filter), [`login`] (the form).

pub mod api;
pub mod auth;
pub mod live;
pub mod login;
pub mod model;
pub mod pages;
pub mod report;
pub mod view;
pub mod visible;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::sync::watch;

pub use auth::{Access, CachePolicy, Reviewer, User};
pub use model::Snapshot;
pub use visible::Visible;

/// Errors of the dashboard.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listen address could not be bound.
    #[error("dashboard cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        source: std::io::Error,
    },
    /// The server failed while serving.
    #[error("dashboard server: {0}")]
    Serve(std::io::Error),
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
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            stale_after: Duration::from_secs(60),
            team_label: DEFAULT_TEAM_LABEL.to_owned(),
            prometheus: None,
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
}

impl Dashboard {
    /// A dashboard over `snapshot`, without authentication.
    pub fn new(snapshot: watch::Receiver<Arc<Snapshot>>, settings: Settings) -> Self {
        Self {
            snapshot,
            settings: Arc::new(settings),
            access: None,
        }
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

/// Every route of the dashboard.
pub fn router(dashboard: Dashboard) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/quotas/{namespace}/{name}", get(pages::quota))
        .route("/cluster-quotas/{name}", get(pages::cluster_quota))
        .route("/clusters", get(pages::clusters))
        .route("/events", get(live::events))
        .merge(api::router())
        .route("/login", get(login::form).post(login::submit))
        .route("/logout", post(login::logout))
        .merge(report::router())
        .route(
            "/assets/dashboard.css",
            get(|| async {
                ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], CSS).into_response()
            }),
        )
        .route(
            "/assets/dashboard.js",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/javascript; charset=utf-8")],
                    JS,
                )
                    .into_response()
            }),
        )
        .fallback(pages::not_found)
        .with_state(dashboard)
}

/// Serve the dashboard on `addr` until `shutdown` completes.
pub async fn serve(
    addr: SocketAddr,
    dashboard: Dashboard,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| Error::Bind { addr, source })?;
    tracing::info!(%addr, "dashboard listening");
    axum::serve(listener, router(dashboard))
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(Error::Serve)
}

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod tests;
