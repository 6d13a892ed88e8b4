//! `prometheus`: what a Prometheus (or anything at its URL) answers to the usage report's
//! two range queries — the JSON `karmada_quota_billing::prometheus::query_range` decodes into core's
//! `billing::PromResponse` and `into_matrix`, then `Request::compute` (averages, peaks,
//! resource-hours by team, namespace and cluster) and the CSV and JSON renderings.
//!
//! Input: `<usage answer JSON> 0xFF <team-label answer JSON>`.
//!
//! Laws:
//! - an answer is a matrix exactly when its status is `success` and its resultType
//!   `matrix`; a refusal keeps Prometheus' error type (or the status);
//! - samples are finite numbers;
//! - every row is one group and resource of the answer, once; its team is a team label
//!   value of the second answer or the unallocated marker; with non-negative samples no
//!   row is negative;
//! - the report renders as CSV and as JSON.

use std::collections::BTreeSet;

use karmada_quota_billing::series::AnswerError;
use karmada_quota_billing::{Key, PromResponse, Request, Series, Source, Window, csv};

use crate::parts::split;

/// The report's team label.
const TEAM_LABEL: &str = "karmada-quota.io/team";

fn matrix(data: &[u8]) -> Option<Vec<Series>> {
    let answer: PromResponse = serde_json::from_slice(data).ok()?;
    let success = answer.status == "success";
    let is_matrix = answer
        .data
        .as_ref()
        .is_some_and(|d| d.result_type == "matrix");
    let status = answer.status.clone();
    let error_type = answer.error_type.clone();
    match answer.into_matrix() {
        Ok(series) => {
            assert!(success && is_matrix, "a matrix from a {status} answer");
            Some(series)
        }
        Err(AnswerError::Refused { error_type: t, .. }) => {
            assert!(!success, "a success refused");
            assert_eq!(t, error_type.unwrap_or(status));
            None
        }
        Err(AnswerError::NotAMatrix(_)) => {
            assert!(success && !is_matrix, "a matrix called not a matrix");
            None
        }
    }
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let [usage, teams] = split::<2>(data);
    let Some(usage) = matrix(usage) else { return };
    let teams = matrix(teams).unwrap_or_default();
    for s in usage.iter().chain(&teams) {
        for (_, v) in s.samples() {
            assert!(v.is_finite(), "a sample {v} is not finite");
        }
    }
    let window = Window::new(1_767_225_600, 1_767_312_000, Some(300)).expect("a window");
    let request = Request {
        window,
        by: vec![Key::Team, Key::Namespace, Key::Cluster],
        source: Source::Placed,
        team_label: TEAM_LABEL.to_owned(),
    };
    let report = request.compute(&usage, &teams);
    let resources: BTreeSet<&str> = usage.iter().map(|s| s.label("resource")).collect();
    let team_values: BTreeSet<&str> = teams
        .iter()
        .flat_map(|s| s.metric.values())
        .map(String::as_str)
        .collect();
    let non_negative = usage.iter().all(|s| s.samples().all(|(_, v)| v >= 0.0));
    let mut groups = BTreeSet::new();
    for row in &report.rows {
        assert!(
            resources.contains(row.resource.as_str()),
            "row of an unknown resource {row:?}"
        );
        let team = row.team.as_deref().expect("grouped by team");
        assert!(
            team == karmada_quota_billing::UNALLOCATED || team_values.contains(team),
            "team {team:?} is no label value"
        );
        assert!(
            groups.insert((&row.team, &row.namespace, &row.cluster, &row.resource)),
            "two rows of one group: {row:?}"
        );
        if non_negative {
            for v in [row.average, row.peak, row.hours] {
                assert!(
                    v.is_nan() || v >= 0.0,
                    "negative {v} from non-negative samples: {row:?}"
                );
            }
        }
    }
    let _ = csv::render(&report);
    serde_json::to_string(&report).expect("a report is JSON");
}
