//! Printing quotas: the `get` table (and `-o wide|csv|json|yaml`), `describe`'s report and
//! `top`'s list. Pure: quota summaries in, text out, so every layout has a golden test.

use comfy_table::{ColumnConstraint, ContentArrangement, Table, presets};

use crate::model::QuotaSummary;

/// Share of hard from which a resource is shown as a warning.
pub const WARNING_PERCENT: f64 = 85.0;
/// Share of hard from which a resource is shown as critical.
pub const CRITICAL_PERCENT: f64 = 95.0;

/// How `get` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// A table, one row per quota resource.
    Table,
    /// The table with one column per member cluster (what Karmada placed there).
    Wide,
    /// Comma-separated, with the wide columns.
    Csv,
    /// The summaries as JSON.
    Json,
    /// The summaries as YAML.
    Yaml,
}

/// Whether to colour the share column (only on a terminal, never with NO_COLOR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// Colour the `%` column.
    pub color: bool,
}

/// `82.5%`, `-` when unknown.
fn percent(p: Option<f64>) -> String {
    p.map_or_else(|| "-".to_owned(), |p| format!("{p}%"))
}

fn colored(text: String, p: Option<f64>, style: Style) -> String {
    match p {
        Some(p) if style.color && p >= CRITICAL_PERCENT => format!("\x1b[31m{text}\x1b[0m"),
        Some(p) if style.color && p >= WARNING_PERCENT => format!("\x1b[33m{text}\x1b[0m"),
        _ => text,
    }
}

/// A kubectl-looking table: no borders, columns three spaces apart, no trailing blanks.
pub(crate) fn table(header: Vec<String>, rows: Vec<Vec<String>>) -> String {
    let mut t = Table::new();
    t.load_style(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled)
        .set_header(header);
    for row in rows {
        t.add_row(row);
    }
    let columns = t.column_count();
    for (i, column) in t.column_iter_mut().enumerate() {
        column.set_padding((0, if i + 1 == columns { 0 } else { 3 }));
        column.set_constraint(ColumnConstraint::ContentWidth);
    }
    let mut out: String = t
        .lines()
        .map(|l| l.trim_end().to_owned())
        .collect::<Vec<_>>()
        .join("\n");
    out.push('\n');
    out
}

/// The union of the member clusters of `quotas`, sorted.
fn all_clusters(quotas: &[QuotaSummary]) -> Vec<String> {
    let mut names: Vec<String> = quotas
        .iter()
        .flat_map(|q| q.cluster_names())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Rows of `get`: NAMESPACE NAME RESOURCE USED RESERVED HARD %, and with `clusters` one
/// column per member (placed there).
fn get_rows(quotas: &[QuotaSummary], clusters: &[String], style: Style) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for q in quotas {
        for r in &q.resources {
            let mut row = vec![
                q.namespace.clone(),
                q.name.clone(),
                r.resource.clone(),
                r.used.clone().unwrap_or_else(|| "?".to_owned()),
                r.reserved.clone(),
                r.hard.clone(),
            ];
            for c in clusters {
                let member = q.clusters.iter().find(|k| k.name == *c);
                let placed = member
                    .and_then(|k| k.placed.get(&r.resource).cloned())
                    .unwrap_or_else(|| "-".to_owned());
                row.push(match member.map(|k| draining_of(k, &r.resource)) {
                    Some(Some(d)) => format!("{placed} (+{d} draining)"),
                    _ => placed,
                });
            }
            row.push(colored(percent(r.percent), r.percent, style));
            rows.push(row);
        }
    }
    rows
}

/// What drains of `resource` in member `c` after a failover: its value, `unknown` when a
/// task names no count, `None` when nothing drains there.
fn draining_of(c: &crate::model::ClusterRow, resource: &str) -> Option<String> {
    match &c.draining {
        Some(d) => Some(d.get(resource).cloned().unwrap_or_else(|| "0".to_owned())),
        None => c.draining_unknown.then(|| "unknown".to_owned()),
    }
}

fn get_header(clusters: &[String]) -> Vec<String> {
    let mut h: Vec<String> = ["NAMESPACE", "NAME", "RESOURCE", "USED", "RESERVED", "HARD"]
        .map(str::to_owned)
        .to_vec();
    h.extend(clusters.iter().map(|c| c.to_uppercase()));
    h.push("%".to_owned());
    h
}

/// The header and rows of `get`; like kubectl, without the NAMESPACE column when every
/// quota is cluster-scoped (KarmadaClusterQuotas).
fn get_table(
    quotas: &[QuotaSummary],
    clusters: &[String],
    style: Style,
) -> (Vec<String>, Vec<Vec<String>>) {
    let (mut header, mut rows) = (get_header(clusters), get_rows(quotas, clusters, style));
    if !quotas.is_empty() && quotas.iter().all(|q| q.namespace.is_empty()) {
        for row in std::iter::once(&mut header).chain(rows.iter_mut()) {
            row.remove(0);
        }
    }
    (header, rows)
}

/// `get` in the chosen output.
pub fn get(quotas: &[QuotaSummary], output: Output, style: Style) -> anyhow::Result<String> {
    Ok(match output {
        Output::Table => {
            let (header, rows) = get_table(quotas, &[], style);
            table(header, rows)
        }
        Output::Wide => {
            let (header, rows) = get_table(quotas, &all_clusters(quotas), style);
            table(header, rows)
        }
        Output::Csv => {
            let clusters = all_clusters(quotas);
            let (header, rows) = get_table(quotas, &clusters, Style { color: false });
            let mut out = String::new();
            for row in std::iter::once(header).chain(rows) {
                let cells: Vec<String> = row.iter().map(|c| csv_cell(c)).collect();
                out.push_str(&cells.join(","));
                out.push('\n');
            }
            out
        }
        Output::Json => {
            let mut s = serde_json::to_string_pretty(quotas)?;
            s.push('\n');
            s
        }
        Output::Yaml => serde_saphyr::to_string(&quotas.to_vec())?,
    })
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

/// An event of the quota, for `describe`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventRow {
    /// Normal / Warning.
    pub type_: String,
    /// Reason.
    pub reason: String,
    /// How long ago it was last seen (`5m`).
    pub age: String,
    /// How many times (`x3` when more than once).
    pub count: i32,
    /// Message.
    pub message: String,
}

/// `describe`: laid out like `kubectl describe resourcequota`.
pub fn describe(q: &QuotaSummary, events: &[EventRow], style: Style) -> String {
    let mut out = String::new();
    describe_header(&mut out, q);
    describe_resources(&mut out, q, style);
    describe_namespaces(&mut out, q);
    describe_clusters(&mut out, q);
    describe_conditions(&mut out, q);
    describe_events(&mut out, events);
    out
}

/// Name, kind or namespace, scopes, draining mode, pending reservations.
fn describe_header(out: &mut String, q: &QuotaSummary) {
    out.push_str(&format!("Name:        {}\n", q.name));
    match &q.selector {
        Some(selector) => {
            out.push_str("Kind:        KarmadaClusterQuota\n");
            out.push_str(&format!("Selector:    {selector}\n"));
        }
        None => out.push_str(&format!("Namespace:   {}\n", q.namespace)),
    }
    out.push_str(&format!(
        "Scopes:      {}\n",
        if q.scopes.is_empty() {
            "<none>".to_owned()
        } else {
            q.scopes.join("; ")
        }
    ));
    if let Some(mode) = &q.draining_replicas {
        out.push_str(&format!(
            "Draining:    {mode} (replicas left draining by a failover{})\n",
            if mode == "Count" {
                " count in Used"
            } else {
                " are shown, not counted"
            }
        ));
    }
    out.push_str(&format!(
        "Pending:     {} reservation{}\n",
        q.pending_reservations,
        if q.pending_reservations == 1 { "" } else { "s" }
    ));
}

/// The Resource / Used / Reserved / Hard / % table.
fn describe_resources(out: &mut String, q: &QuotaSummary, style: Style) {
    let rows = q
        .resources
        .iter()
        .map(|r| {
            vec![
                r.resource.clone(),
                r.used.clone().unwrap_or_else(|| "?".to_owned()),
                r.reserved.clone(),
                r.hard.clone(),
                colored(percent(r.percent), r.percent, style),
            ]
        })
        .collect();
    let mut rows: Vec<Vec<String>> = rows;
    rows.insert(
        0,
        ["--------", "----", "--------", "----", "-"]
            .map(str::to_owned)
            .to_vec(),
    );
    out.push_str(&table(
        ["Resource", "Used", "Reserved", "Hard", "%"]
            .map(str::to_owned)
            .to_vec(),
        rows,
    ));
}

/// A cluster quota's selected namespaces and the usage of each.
fn describe_namespaces(out: &mut String, q: &QuotaSummary) {
    if q.selector.is_some() {
        out.push_str("\nNamespaces (selected; usage of each):\n");
        if q.namespaces.is_empty() {
            out.push_str("  <none yet>\n");
        }
        let mut rows = vec![
            ["---------", "--------", "----"]
                .map(str::to_owned)
                .to_vec(),
        ];
        for n in &q.namespaces {
            for r in &q.resources {
                rows.push(vec![
                    n.name.clone(),
                    r.resource.clone(),
                    n.used
                        .get(&r.resource)
                        .cloned()
                        .unwrap_or_else(|| "0".to_owned()),
                ]);
            }
        }
        if !q.namespaces.is_empty() {
            out.push_str(&table(
                ["Namespace", "Resource", "Used"]
                    .map(str::to_owned)
                    .to_vec(),
                rows,
            ));
        }
    }
}

/// Placed, observed (and draining) usage per member cluster, with drift.
fn describe_clusters(out: &mut String, q: &QuotaSummary) {
    if !q.clusters.is_empty() {
        // The Draining column only when something drains (a failover in progress).
        let draining = q.draining();
        if draining {
            out.push_str(
                "\nMember clusters (placed by Karmada / observed in the member / draining after a failover):\n",
            );
        } else {
            out.push_str("\nMember clusters (placed by Karmada / observed in the member):\n");
        }
        let mut dashes = vec!["-------", "--------", "------", "--------"];
        let mut header = vec!["Cluster", "Resource", "Placed", "Observed"];
        if draining {
            dashes.push("--------");
            header.push("Draining");
        }
        dashes.push("-----");
        header.push("Drift");
        let mut rows = vec![dashes.into_iter().map(str::to_owned).collect::<Vec<_>>()];
        for c in &q.clusters {
            for r in &q.resources {
                let placed = c
                    .placed
                    .get(&r.resource)
                    .cloned()
                    .unwrap_or_else(|| "0".to_owned());
                let observed = match &c.observed {
                    None => "unknown".to_owned(),
                    Some(o) => o
                        .get(&r.resource)
                        .cloned()
                        .unwrap_or_else(|| "0".to_owned()),
                };
                let drift = if c.drift.contains(&r.resource) {
                    "DRIFT"
                } else {
                    ""
                };
                let mut row = vec![c.name.clone(), r.resource.clone(), placed, observed];
                if draining {
                    row.push(draining_of(c, &r.resource).unwrap_or_default());
                }
                row.push(drift.to_owned());
                rows.push(row);
            }
        }
        out.push_str(&table(
            header.into_iter().map(str::to_owned).collect(),
            rows,
        ));
    }
}

/// The conditions, then the errors, if any.
fn describe_conditions(out: &mut String, q: &QuotaSummary) {
    out.push_str("\nConditions:\n");
    if q.conditions.is_empty() {
        out.push_str("  <none>\n");
    } else {
        let rows = q
            .conditions
            .iter()
            .map(|c| {
                vec![
                    format!("  {}", c.type_),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            ["  Type", "Status", "Reason", "Message"]
                .map(str::to_owned)
                .to_vec(),
            rows,
        ));
    }
    if !q.errors.is_empty() {
        out.push_str("\nErrors:\n");
        for e in &q.errors {
            out.push_str(&format!("  {e}\n"));
        }
    }
}

/// The events about the quota.
fn describe_events(out: &mut String, events: &[EventRow]) {
    out.push_str("\nEvents:\n");
    if events.is_empty() {
        out.push_str("  <none>\n");
    } else {
        let rows = events
            .iter()
            .map(|e| {
                vec![
                    format!("  {}", e.type_),
                    e.reason.clone(),
                    if e.count > 1 {
                        format!("{} (x{})", e.age, e.count)
                    } else {
                        e.age.clone()
                    },
                    e.message.clone(),
                ]
            })
            .collect();
        out.push_str(&table(
            ["  Type", "Reason", "Age", "Message"]
                .map(str::to_owned)
                .to_vec(),
            rows,
        ));
    }
}

/// `top`'s NAMESPACE cell of a KarmadaClusterQuota (its numbers are over every namespace
/// it selects).
pub const CLUSTER_SCOPED: &str = "(cluster)";

/// `top`: the quotas closest to their limits, each with its most pressed resource,
/// highest first; at most `limit` rows. A KarmadaClusterQuota's NAMESPACE is
/// [`CLUSTER_SCOPED`].
pub fn top(quotas: &[QuotaSummary], limit: usize, style: Style) -> String {
    let mut pressed: Vec<(&QuotaSummary, &crate::model::ResourceRow)> = quotas
        .iter()
        .filter_map(|q| {
            q.resources
                .iter()
                .filter(|r| r.percent.is_some())
                .max_by(|a, b| {
                    a.percent
                        .partial_cmp(&b.percent)
                        .unwrap_or(std::cmp::Ordering::Equal)
                })
                .map(|r| (q, r))
        })
        .collect();
    pressed.sort_by(|a, b| {
        b.1.percent
            .partial_cmp(&a.1.percent)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| (&a.0.namespace, &a.0.name).cmp(&(&b.0.namespace, &b.0.name)))
    });
    let rows = pressed
        .into_iter()
        .take(limit)
        .map(|(q, r)| {
            vec![
                if q.selector.is_some() {
                    CLUSTER_SCOPED.to_owned()
                } else {
                    q.namespace.clone()
                },
                q.name.clone(),
                r.resource.clone(),
                r.used.clone().unwrap_or_default(),
                r.reserved.clone(),
                r.hard.clone(),
                colored(percent(r.percent), r.percent, style),
            ]
        })
        .collect();
    table(get_header(&[]), rows)
}
