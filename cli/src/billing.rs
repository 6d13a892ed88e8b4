//! `report`: usage for billing. Average, peak and resource-hours per team, namespace,
//! member cluster (or quota) over a window, from the controller's series in Prometheus.
//!
//! ```text
//!  ReportArgs ─► request() (core::billing::window: times, step; keys; bad input → exit 2)
//!       │
//!       ▼
//!  karmada_quota_billing::prometheus::Prometheus::report ─► two range queries (unreachable or refused
//!       │                                      → exit 3) ─► core::billing::Request::compute
//!       ▼
//!  render(): table (people), csv (core::billing::csv, as the dashboard's download), json
//! ```
//!
//! The team is read from Prometheus (the controller's `kq_namespace_labels` series), not
//! from the API server: the report needs no kubeconfig, and a namespace that changed team
//! is billed to each team for the time it belonged to it.

use std::time::Duration;

use karmada_quota_billing::csv::table_cells;
use karmada_quota_billing::prometheus::Prometheus;
use karmada_quota_billing::window::{parse_duration, parse_time};
use karmada_quota_billing::{self as billing, Key, Report, Request, Source, Window};

use crate::args::{ReportArgs, ReportOutput, ReportSource};
use crate::render::table;

/// Decimals in the table (CSV and JSON keep more).
const TABLE_DECIMALS: usize = 3;

/// The report `args` ask for, with `now` (Unix seconds) for relative times.
pub fn request(args: &ReportArgs, now: i64) -> Result<Request, String> {
    let from = parse_time(&args.from, now).map_err(|e| format!("--from: {e}"))?;
    let to = parse_time(&args.to, now).map_err(|e| format!("--to: {e}"))?;
    let step = match args.step.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(s) => Some(parse_duration(s).map_err(|e| format!("--step: {e}"))?),
    };
    let window = Window::new(from, to, step).map_err(|e| e.to_string())?;
    let by = Key::parse_list(&args.by)?;
    if args.team_label.trim().is_empty() && by.contains(&Key::Team) {
        return Err(
            "--team-label is empty: give the namespace label naming a team, or \
                    --by without team"
                .to_owned(),
        );
    }
    Ok(Request {
        window,
        by,
        source: match args.source {
            ReportSource::Placed => Source::Placed,
            ReportSource::Observed => Source::Observed,
        },
        team_label: args.team_label.trim().to_owned(),
    })
}

/// The per-query timeout of `args`.
pub fn timeout(args: &ReportArgs) -> Result<Duration, String> {
    parse_duration(&args.timeout)
        .map(Duration::from_secs)
        .map_err(|e| format!("--timeout: {e}"))
}

/// Run the report's queries against `prometheus`.
pub async fn fetch(
    prometheus: &Prometheus,
    request: &Request,
) -> Result<Report, karmada_quota_billing::prometheus::Error> {
    prometheus.report(request).await
}

/// The report as `output` asks.
pub fn render(report: &Report, output: ReportOutput) -> String {
    match output {
        ReportOutput::Table => render_table(report),
        ReportOutput::Csv => billing::csv::render(report),
        ReportOutput::Json => {
            let mut s = serde_json::to_string_pretty(report).unwrap_or_default();
            s.push('\n');
            s
        }
    }
}

/// The report for people: a line saying what it covers, a kubectl-like table (numbers with
/// their units), then the warnings.
pub fn render_table(report: &Report) -> String {
    let mut out = format!(
        "{} usage from {} to {} (step {}s){}\n",
        match report.source {
            Source::Placed => "Placed",
            Source::Observed => "Observed",
        },
        report.from,
        report.to,
        report.step,
        if report.by.contains(&Key::Team) {
            format!(", team label {}", report.team_label)
        } else {
            String::new()
        }
    );
    if report.rows.is_empty() {
        out.push_str("No usage in this window.\n");
    } else {
        let mut header: Vec<String> = report
            .by
            .iter()
            .map(|k| k.as_str().to_uppercase())
            .collect();
        header.extend(["RESOURCE", "AVERAGE", "PEAK", "RESOURCE-HOURS"].map(str::to_owned));
        let rows = report
            .rows
            .iter()
            .map(|r| table_cells(&report.by, r, TABLE_DECIMALS))
            .collect();
        out.push_str(&table(header, rows));
    }
    for w in &report.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    out
}
