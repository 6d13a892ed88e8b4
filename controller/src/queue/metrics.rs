//! The line's series: `kq_quota_queue_length{namespace, quota}` (bindings waiting in each
//! quota's line; a KarmadaClusterQuota's with `namespace=""`), and
//! `kq_queue_wait_seconds` (how long each released binding waited, from its mark to the
//! release the webhook admitted) and `kq_queue_releases_total{result}`; and
//! `kq_waiting_line_label_patches_total{result}`, the waiting-line labels the leader
//! changed on namespaces (`queue::marks`).

use karmada_quota_core::selection::QuotaKey;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// A quota's labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QuotaLabels {
    /// Its namespace ("" for a cluster quota).
    pub namespace: String,
    /// Its name.
    pub quota: String,
}

impl From<&QuotaKey> for QuotaLabels {
    fn from(k: &QuotaKey) -> Self {
        Self {
            namespace: k.namespace().unwrap_or_default().to_owned(),
            quota: k.name().to_owned(),
        }
    }
}

/// A release's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    /// `released`, `refused` (the webhook: it no longer fits), `changed` (the binding
    /// changed since the plan), `gone`, `error`.
    pub result: &'static str,
}

/// The line's metrics.
#[derive(Debug)]
pub struct QueueMetrics {
    /// Bindings waiting per quota.
    pub length: Family<QuotaLabels, Gauge>,
    /// Seconds from joining the line to release.
    pub wait: Histogram,
    /// Release attempts by outcome.
    pub releases: Family<ResultLabel, Counter>,
    /// Waiting-line label patches of namespaces: `added`, `removed`, `failed`.
    pub labels: Family<ResultLabel, Counter>,
}

impl Default for QueueMetrics {
    fn default() -> Self {
        Self {
            length: Family::default(),
            wait: Histogram::new(exponential_buckets(0.5, 2.0, 16)),
            releases: Family::default(),
            labels: Family::default(),
        }
    }
}

impl QueueMetrics {
    /// Register the series in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register(
            "kq_quota_queue_length",
            "ResourceBindings waiting in the quota's line (spec.admission.mode: Queue)",
            m.length.clone(),
        );
        registry.register(
            "kq_queue_wait_seconds",
            "Seconds a released ResourceBinding waited in a quota's line",
            m.wait.clone(),
        );
        registry.register(
            "kq_queue_releases",
            "Releases of waiting ResourceBindings, by result",
            m.releases.clone(),
        );
        registry.register(
            "kq_waiting_line_label_patches",
            "Patches of the label quota.karmada.io/waiting-line on namespaces (--label-line-namespaces), by result: added, removed, failed",
            m.labels.clone(),
        );
        m
    }
}
