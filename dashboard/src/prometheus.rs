//! The Prometheus the dashboard reads (the Report page and the usage history): where it
//! is, how one range query is run ([`RangeQuery`], behind a trait so tests answer for
//! it), and the two queries of a billing request ([`fetch`]). Nothing here renders.

use std::fmt;
use std::sync::Arc;

use futures::future::BoxFuture;
use karmada_quota_billing::{Key, Request, Series, Window};

/// Runs one PromQL range query (Prometheus' `/api/v1/query_range`).
pub trait RangeQuery: Send + Sync {
    /// The series of `query` over `window` (start `from`, end the window's last instant,
    /// its step), or a message saying why there are none.
    fn query_range<'a>(
        &'a self,
        query: &'a str,
        window: Window,
    ) -> BoxFuture<'a, Result<Vec<Series>, String>>;
}

/// The Prometheus the Report page reads.
#[derive(Clone)]
pub struct Prometheus {
    /// Its URL (shown on the page).
    pub url: String,
    /// How to query it.
    pub api: Arc<dyn RangeQuery>,
}

impl fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Prometheus")
            .field("url", &self.url)
            .finish()
    }
}

/// The series `request` needs (usage, and the namespaces' team labels when grouping by
/// team): the same two queries as the plugin's `report` command.
pub async fn fetch(
    prometheus: &Prometheus,
    request: &Request,
) -> Result<(Vec<Series>, Vec<Series>), String> {
    let queries = request.queries();
    let usage = prometheus
        .api
        .query_range(&queries.usage, request.window)
        .await?;
    let teams = if request.by.contains(&Key::Team) {
        prometheus
            .api
            .query_range(&queries.teams, request.window)
            .await?
    } else {
        Vec::new()
    };
    Ok((usage, teams))
}
