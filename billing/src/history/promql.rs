//! The PromQL of one quota's history over the controller's own series: `kq_quota_used`,
//! `kq_quota_reserved`, `kq_quota_hard` (labels `namespace`, `quota`, `resource`) and
//! `kq_quota_cluster_used` (and `cluster`). Replicas export the same numbers: `max by`
//! folds them. From a step of a minute, each point is the peak over its step
//! (`max_over_time`), as the in-memory window's downsampling keeps peaks; below, the value
//! at the instant (a scrape interval can be longer than a short step).

/// Steps from this long (seconds) take the peak over the step.
pub const PEAK_FROM_STEP: u64 = 60;

/// The four range queries of one quota.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Queries {
    /// `kq_quota_used` by resource.
    pub used: String,
    /// `kq_quota_reserved` by resource.
    pub reserved: String,
    /// `kq_quota_hard` by resource.
    pub hard: String,
    /// `kq_quota_cluster_used` by resource and cluster.
    pub clusters: String,
}

/// A PromQL string literal of `s` (quotes and backslashes escaped).
pub fn string_literal(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The queries of quota `namespace/name` (`namespace` empty: a KarmadaClusterQuota, whose
/// series carry no namespace) at `step` seconds.
pub fn queries(namespace: &str, name: &str, step: u64) -> Queries {
    let selector = format!(
        "{{namespace={},quota={}}}",
        string_literal(namespace),
        string_literal(name)
    );
    let inner = |metric: &str| {
        if step >= PEAK_FROM_STEP {
            format!("max_over_time({metric}{selector}[{step}s])")
        } else {
            format!("{metric}{selector}")
        }
    };
    Queries {
        used: format!("max by (resource) ({})", inner("kq_quota_used")),
        reserved: format!("max by (resource) ({})", inner("kq_quota_reserved")),
        hard: format!("max by (resource) ({})", inner("kq_quota_hard")),
        clusters: format!(
            "max by (resource, cluster) ({})",
            inner("kq_quota_cluster_used")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quota_is_selected_by_its_labels_and_long_steps_keep_peaks() {
        let q = queries("team-a", "compute", 15);
        assert_eq!(
            q.used,
            r#"max by (resource) (kq_quota_used{namespace="team-a",quota="compute"})"#
        );
        assert_eq!(
            q.clusters,
            r#"max by (resource, cluster) (kq_quota_cluster_used{namespace="team-a",quota="compute"})"#
        );
        let q = queries("", "business", 90);
        assert_eq!(
            q.hard,
            r#"max by (resource) (max_over_time(kq_quota_hard{namespace="",quota="business"}[90s]))"#
        );
    }

    #[test]
    fn label_values_cannot_leave_their_string() {
        assert_eq!(
            string_literal(r#"a"}or vector(1)#\"#),
            r#""a\"}or vector(1)#\\""#
        );
        let q = queries("x\"", "y", 15);
        assert!(q.used.contains(r#"namespace="x\"""#), "{}", q.used);
    }
}
