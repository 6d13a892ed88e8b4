//! The dashboard's Report page reads Prometheus (`--dashboard-prometheus`) through the
//! runtime's client: this adapter is the page's [`RangeQuery`].

use std::sync::Arc;

use futures::future::BoxFuture;
use karmada_quota_billing::prometheus::{DEFAULT_TIMEOUT, Prometheus};
use karmada_quota_billing::{Series, Window};
use karmada_quota_dashboard::report::{Prometheus as PageSource, RangeQuery};

impl RangeQuery for PrometheusQueries {
    fn query_range<'a>(
        &'a self,
        query: &'a str,
        window: Window,
    ) -> BoxFuture<'a, Result<Vec<Series>, String>> {
        Box::pin(async move {
            self.0
                .query_range(query, window)
                .await
                .map_err(|e| e.to_string())
        })
    }
}

/// Range queries against one Prometheus.
struct PrometheusQueries(Prometheus);

/// The Report page's source for `url`, or why the URL cannot be used (logged by the caller:
/// the controller runs on without the page).
pub fn page_source(
    url: &str,
    access: &karmada_quota_billing::prometheus_access::PrometheusAccess,
) -> Result<PageSource, String> {
    let prometheus =
        Prometheus::with_access(url, DEFAULT_TIMEOUT, access).map_err(|e| e.to_string())?;
    Ok(PageSource {
        url: prometheus.url().to_owned(),
        api: Arc::new(PrometheusQueries(prometheus)),
    })
}
