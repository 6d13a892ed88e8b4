//! The controller's admin port: /metrics, /livez and /readyz, and nothing else (no quota
//! data: that is the dashboard's, behind its login), served by the shell's listener.

use parking_lot::Mutex;
use std::sync::Arc;

use karmada_quota_shell::listener::Limits;
use karmada_quota_shell::{Readiness, admin_router, serve_admin};
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

use crate::error::Error;
use crate::stop::Stop;

/// Where the admin server listens, and its listener's bounds.
pub(crate) struct AdminConfig {
    /// `--admin-listen`.
    pub(crate) listen: std::net::SocketAddr,
    /// The listener's bounds (shared with the dashboard's).
    pub(crate) limits: Limits,
}

/// The admin server: /metrics, /livez, /readyz and nothing else (no quota data: that is
/// the dashboard's, behind its login).
pub(crate) fn start(
    config: AdminConfig,
    registry: Arc<Mutex<Registry>>,
    ready: &Readiness,
    stop: &Stop,
) -> JoinHandle<anyhow::Result<()>> {
    tokio::spawn(serve_admin(
        config.listen,
        config.limits,
        admin_app(registry, ready),
        stop.requested(),
    ))
}

/// The admin port's routes: health, readiness, metrics.
pub fn admin_app(registry: Arc<Mutex<Registry>>, ready: &Readiness) -> axum::Router {
    admin_router(registry, ready.clone())
}

/// The admin server task's end as the controller's result.
pub(crate) fn flatten(
    res: Result<anyhow::Result<()>, tokio::task::JoinError>,
) -> Result<(), Error> {
    match res {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Admin(format!("{e:#}"))),
        Err(e) => Err(Error::Admin(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::*;

    /// The admin port serves health, readiness and metrics, and 404 for everything else:
    /// the old quota JSON and every dashboard route.
    #[tokio::test]
    async fn the_admin_port_serves_no_quota_data() {
        let (_, registry) = crate::register_metrics();
        let ready = Readiness::default();
        ready.set_ready();
        let app = admin_app(registry, &ready);
        let status = |path: String| {
            let app = app.clone();
            async move {
                let req = Request::get(&path).body(Body::empty()).unwrap();
                (app.oneshot(req).await.unwrap().status(), path)
            }
        };
        for path in ["/livez", "/readyz", "/metrics"] {
            assert_eq!(status(path.into()).await.0, StatusCode::OK, "{path}");
        }
        let mut paths: Vec<String> = karmada_quota_dashboard::route_paths()
            .iter()
            .map(|p| p.replace("{namespace}", "team-b").replace("{name}", "q"))
            .collect();
        paths.extend(
            [
                "/api/v1/quotas",
                "/api/v1/quotas/team-b",
                "/api/v1/quotas/team-b/q",
            ]
            .map(String::from),
        );
        for path in paths {
            let (code, path) = status(path).await;
            assert_eq!(code, StatusCode::NOT_FOUND, "{path} on the admin port");
        }
    }
}
