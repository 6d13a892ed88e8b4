//! A small client of the Prometheus HTTP API for usage reports: `/api/v1/query_range`
//! at a URL the user gives (`--prometheus`, `--dashboard-prometheus`), and the report's two
//! queries run through core's `billing`.
//!
//! ```text
//!  Prometheus::new(url, timeout, access) ── kube's HTTP stack (hyper + rustls, timeouts),
//!       │                  a Config with the URL as its base and `access`'s CA, token,
//!       │                  basic auth, client certificate and headers (prometheus_access)
//!       ▼
//!  query_range(promql, window) ── GET <url>/api/v1/query_range?query=…&start=…&end=…&step=…
//!       │ 2xx or Prometheus' own error JSON ─► billing::PromResponse ─► series
//!       ▼
//!  report(request) = request.queries() ─► two range queries ─► request.compute()
//! ```
//!
//! kube's client is reused as a plain HTTP client because it is already in every binary
//! (TLS, proxies, timeouts configured); nothing Kubernetes-specific is sent.

use std::time::Duration;

use crate::{Key, PromResponse, Report, Request, Series, Window, query_value};

/// How long one query may take (Prometheus' own default query timeout is 2 minutes).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a query got no series.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The URL is not an absolute http(s) URL.
    #[error("invalid Prometheus URL {url:?}: {reason}")]
    Url {
        /// The URL given.
        url: String,
        /// Why.
        reason: String,
    },
    /// The credentials or TLS settings cannot be used (the reason names the flag).
    #[error("Prometheus at {url}: {reason}")]
    Access {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The HTTP client could not be built.
    #[error("Prometheus client for {url}: {source}")]
    Client {
        /// The URL.
        url: String,
        /// Why.
        source: kube::Error,
    },
    /// No answer (refused, timed out, TLS).
    #[error("Prometheus at {url} is unreachable: {source}")]
    Unreachable {
        /// The URL.
        url: String,
        /// Why.
        source: kube::Error,
    },
    /// An answer that is neither a result nor Prometheus' error JSON.
    #[error("Prometheus at {url} answered HTTP {status}: {body}")]
    Http {
        /// The URL.
        url: String,
        /// HTTP status.
        status: u16,
        /// The start of the body.
        body: String,
    },
    /// Prometheus' own error answer, or a result of the wrong type.
    #[error("Prometheus at {url}: {source}")]
    Answer {
        /// The URL.
        url: String,
        /// What Prometheus said.
        source: crate::series::AnswerError,
    },
}

/// A Prometheus HTTP API endpoint.
#[derive(Clone)]
pub struct Prometheus {
    url: String,
    client: kube::Client,
}

impl std::fmt::Debug for Prometheus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prometheus")
            .field("url", &self.url)
            .finish()
    }
}

/// The longest piece of an unexpected answer quoted in an error.
const QUOTED_BODY: usize = 300;

impl Prometheus {
    /// A client of the Prometheus at `url` (`http://127.0.0.1:9090`, or with a path prefix
    /// such as `https://example.org/prometheus`), each query bounded by `timeout`. Must be
    /// called within a tokio runtime.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, Error> {
        Self::with_access(
            url,
            timeout,
            &crate::prometheus_access::PrometheusAccess::default(),
        )
    }

    /// [`Self::new`], reaching Prometheus with `access` (TLS roots, credentials, headers).
    pub fn with_access(
        url: &str,
        timeout: Duration,
        access: &crate::prometheus_access::PrometheusAccess,
    ) -> Result<Self, Error> {
        let trimmed = check_url(url).map_err(|reason| Error::Url {
            url: url.to_owned(),
            reason,
        })?;
        let uri: http::Uri = trimmed
            .parse()
            .map_err(|e: http::uri::InvalidUri| Error::Url {
                url: url.to_owned(),
                reason: e.to_string(),
            })?;
        let mut config = kube::Config::new(uri);
        config.connect_timeout = Some(timeout.min(Duration::from_secs(10)));
        config.read_timeout = Some(timeout);
        // Prometheus answers 503 for a query that timed out: retrying it would only triple
        // the wait. Its answers are final.
        config.default_retry = false;
        access.apply(&mut config).map_err(|reason| Error::Access {
            url: trimmed.to_owned(),
            reason,
        })?;
        let client = kube::Client::try_from(config).map_err(|source| Error::Client {
            url: trimmed.to_owned(),
            source,
        })?;
        Ok(Self {
            url: trimmed.to_owned(),
            client,
        })
    }

    /// The URL queries go to (without a trailing slash).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `query` evaluated at every instant of `window` (start `from`, end its last instant,
    /// its step).
    pub async fn query_range(&self, query: &str, window: Window) -> Result<Vec<Series>, Error> {
        let path = format!(
            "/api/v1/query_range?query={}&start={}&end={}&step={}",
            query_value(query),
            window.from,
            window.last_point(),
            window.step
        );
        let request = http::Request::get(path)
            .header(http::header::ACCEPT, "application/json")
            .body(kube::client::Body::empty())
            .map_err(|e| Error::Url {
                url: self.url.clone(),
                reason: e.to_string(),
            })?;
        let response = self
            .client
            .send(request)
            .await
            .map_err(|source| Error::Unreachable {
                url: self.url.clone(),
                source,
            })?;
        let status = response.status();
        let body = response
            .into_body()
            .collect_bytes()
            .await
            .map_err(|source| Error::Unreachable {
                url: self.url.clone(),
                source,
            })?;
        // Prometheus answers errors (400 bad_data, 422 execution, 503 timeout…) with its
        // JSON too: prefer what it says over the bare status.
        match serde_json::from_slice::<PromResponse>(&body) {
            Ok(answer) => answer.into_matrix().map_err(|source| Error::Answer {
                url: self.url.clone(),
                source,
            }),
            Err(e) => {
                let text = String::from_utf8_lossy(&body);
                let mut quoted: String = text.chars().take(QUOTED_BODY).collect();
                if quoted.trim().is_empty() {
                    quoted = format!("(not Prometheus' JSON: {e})");
                }
                Err(Error::Http {
                    url: self.url.clone(),
                    status: status.as_u16(),
                    body: quoted.trim().to_owned(),
                })
            }
        }
    }

    /// The report of `request`: its two range queries (the team query only when grouping
    /// by team), then core's arithmetic.
    pub async fn report(&self, request: &Request) -> Result<Report, Error> {
        let queries = request.queries();
        let usage = self.query_range(&queries.usage, request.window).await?;
        let teams = if request.by.contains(&Key::Team) {
            self.query_range(&queries.teams, request.window).await?
        } else {
            Vec::new()
        };
        Ok(request.compute(&usage, &teams))
    }
}

/// `url` without surrounding blanks and trailing slashes, if it is an absolute http(s)
/// URL with a host and no query string; else why not (a clap `value_parser` too).
pub fn check_url(url: &str) -> Result<String, String> {
    let trimmed = url.trim().trim_end_matches('/');
    let uri: http::Uri = trimmed
        .parse()
        .map_err(|e: http::uri::InvalidUri| e.to_string())?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err("expected http:// or https://".to_owned()),
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err("no host".to_owned());
    }
    if uri.query().is_some() {
        return Err("no query string expected".to_owned());
    }
    Ok(trimmed.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn urls_must_be_absolute_http() {
        for url in ["", "prometheus:9090", "ftp://x", "http://", "http://x/?q=1"] {
            assert!(
                matches!(
                    Prometheus::new(url, DEFAULT_TIMEOUT),
                    Err(Error::Url { .. })
                ),
                "{url}"
            );
        }
        let p = Prometheus::new("http://127.0.0.1:9090/prom/", DEFAULT_TIMEOUT).unwrap();
        assert_eq!(p.url(), "http://127.0.0.1:9090/prom");
        assert_eq!(
            check_url(" https://p.example:443 ").as_deref(),
            Ok("https://p.example:443")
        );
        assert!(check_url("localhost:9090").unwrap_err().contains("http://"));
    }
}
