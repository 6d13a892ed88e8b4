//! A report as text: CSV (the plugin's `-o csv` and the dashboard's download are this one
//! function: the group keys, then `resource,unit,average,peak,hours,hours_unit`), and the
//! cells of a table row (the plugin's table and the dashboard's page).

use super::compute::{Key, Report, Row};

/// Numbers in CSV and tables: at most `decimals` decimals, trailing zeros dropped.
pub fn number(x: f64, decimals: usize) -> String {
    let s = format!("{x:.decimals$}");
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        s
    };
    if s == "-0" { "0".to_owned() } else { s }
}

/// Decimals kept in CSV (a millionth of a core-hour is far below any price).
pub const CSV_DECIMALS: usize = 6;

/// The report as CSV, one line per row, with a header line.
pub fn render(report: &Report) -> String {
    let mut header: Vec<&str> = report.by.iter().map(|k| k.as_str()).collect();
    header.extend(["resource", "unit", "average", "peak", "hours", "hours_unit"]);
    let mut out = header.join(",");
    out.push('\n');
    for row in &report.rows {
        let mut fields: Vec<String> = report.by.iter().map(|k| field(row.key(*k))).collect();
        fields.extend([
            field(&row.resource),
            field(&row.unit),
            number(row.average, CSV_DECIMALS),
            number(row.peak, CSV_DECIMALS),
            number(row.hours, CSV_DECIMALS),
            field(&row.hours_unit),
        ]);
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// The cells of `row` in a table: its keys in `by`'s order, the resource, then average,
/// peak and resource-hours each with its unit, numbers to `decimals` decimals.
pub fn table_cells(by: &[Key], row: &Row, decimals: usize) -> Vec<String> {
    let mut cells: Vec<String> = by.iter().map(|k| row.key(*k).to_owned()).collect();
    cells.extend([
        row.resource.clone(),
        format!("{} {}", number(row.average, decimals), row.unit),
        format!("{} {}", number(row.peak, decimals), row.unit),
        format!("{} {}", number(row.hours, decimals), row.hours_unit),
    ]);
    cells
}

/// A CSV field, quoted when it holds a comma, quote or line break.
pub fn field(f: &str) -> String {
    if f.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", f.replace('"', "\"\""))
    } else {
        f.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compute::{Key, Row, Source};

    #[test]
    fn numbers_drop_trailing_zeros() {
        for (x, d, want) in [
            (2.0, 6, "2"),
            (0.025, 6, "0.025"),
            (1.0 / 3.0, 6, "0.333333"),
            (1.0 / 3.0, 3, "0.333"),
            (-0.000_000_1, 3, "0"),
            (1234.4, 0, "1234"),
        ] {
            assert_eq!(number(x, d), want, "{x}");
        }
    }

    #[test]
    fn csv_has_the_keys_then_the_numbers_and_quotes_what_needs_it() {
        let r = Report {
            from: String::new(),
            to: String::new(),
            step: 60,
            source: Source::Placed,
            by: vec![Key::Team, Key::Cluster],
            team_label: String::new(),
            rows: vec![Row {
                team: Some("a,b".into()),
                namespace: None,
                cluster: Some("m1".into()),
                quota: None,
                resource: "requests.cpu".into(),
                unit: "cores".into(),
                average: 1.5,
                peak: 2.0,
                hours: 36.0,
                hours_unit: "core-hours".into(),
            }],
            warnings: vec![],
        };
        assert_eq!(
            render(&r),
            "team,cluster,resource,unit,average,peak,hours,hours_unit\n\
             \"a,b\",m1,requests.cpu,cores,1.5,2,36,core-hours\n"
        );
    }
}
