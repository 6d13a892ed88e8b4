//! Usage after the fact and over time, apart from the quota engine (`karmada-quota-core`):
//!
//! - billing reports (this module's root): average, peak and resource-hours per team,
//!   namespace, member cluster (and quota), from the controller's Prometheus series;
//! - [`history`]: a bounded window of each quota's numbers, and the dashboard's
//!   usage-over-time chart from either that window or Prometheus;
//! - [`prometheus`] / [`prometheus_access`]: the one Prometheus HTTP API client both use
//!   (the plugin's `report`, the dashboard's Report page and chart), with its flags.
//!
//! Only quantities and resource lists come from core; nothing here decides admission.
//!
//! ## Billing reports
//!
//! Usage reports for billing: average, peak and resource-hours per team, namespace,
//! member cluster (and quota), from the controller's Prometheus series.
//!
//! ```text
//!  Request { window (from, to, step), by, source, team label }
//!     │ .queries()
//!     ▼
//!  two PromQL range queries ──► the caller's HTTP (cli, controller's dashboard)
//!   usage: max by (namespace, quota, cluster, resource) (kq_quota_cluster_used | _observed)
//!   teams: max by (namespace, label_<team label>) (kq_namespace_labels)
//!     │ the `data.result` of /api/v1/query_range ([`series::Series`])
//!     ▼
//!  Request::compute(&usage, &teams) ─► Report { rows: keys, resource, unit, average,
//!                                               peak, hours }  ─► csv::render, JSON, table
//! ```
//!
//! Pure: no HTTP, no clock. Every caller (the plugin's `report`, the dashboard's Report
//! page) runs the same two queries and the same [`compute`], so they print the same numbers.
//! The arithmetic is in [`compute`], the units in [`units`], the window and time syntax in
//! [`window`], Prometheus' response shape in [`series`], CSV in [`csv`].

pub mod compute;
pub mod csv;
pub mod history;
pub mod prometheus;
pub mod prometheus_access;
pub mod series;
pub mod units;
pub mod window;

pub use compute::{Key, Queries, Report, Request, Row, Source};
pub use series::{PromResponse, Series};
pub use window::{Window, WindowError};

/// The team of a namespace without the team label (or with an empty value).
pub const UNALLOCATED: &str = "__unallocated__";

/// The controller's info series of namespace labels (kube-state-metrics'
/// `kube_namespace_labels`): value 1, labels `namespace` and `label_<team label>`.
pub const NAMESPACE_LABELS_METRIC: &str = "kq_namespace_labels";

/// The Prometheus label name of a Kubernetes label key, as kube-state-metrics writes it:
/// `label_` and the key with every character outside `[a-zA-Z0-9_]` replaced by `_`
/// (`karmada-quota.io/team` → `label_karmada_quota_io_team`).
pub fn label_name(key: &str) -> String {
    let sanitized: String = key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("label_{sanitized}")
}

/// Percent-encoding of a URL query-string value (RFC 3986 unreserved characters kept):
/// the report's PromQL and times travel in URLs (Prometheus' API, the Report page's links).
pub fn query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_names_follow_kube_state_metrics() {
        for (key, name) in [
            ("karmada-quota.io/team", "label_karmada_quota_io_team"),
            ("team", "label_team"),
            (
                "app.kubernetes.io/part-of",
                "label_app_kubernetes_io_part_of",
            ),
            ("Team_1", "label_Team_1"),
        ] {
            assert_eq!(label_name(key), name, "{key}");
        }
    }

    #[test]
    fn query_values_are_percent_encoded() {
        assert_eq!(
            query_value("max by (namespace) (kq_quota_cluster_used{a=\"b\"})"),
            "max%20by%20%28namespace%29%20%28kq_quota_cluster_used%7Ba%3D%22b%22%7D%29"
        );
        assert_eq!(query_value("a-b_c.d~é,+&"), "a-b_c.d~%C3%A9%2C%2B%26");
    }
}
