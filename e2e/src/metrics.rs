//! Reading the Prometheus text a binary serves on its admin port's `/metrics`.

/// Sum of the samples of counter `name` whose label set contains every fragment.
pub fn metric_sum(text: &str, name: &str, labels: &[&str]) -> u64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let rest = series.strip_prefix(name)?;
            if !(rest.is_empty() || rest.starts_with('{')) {
                return None;
            }
            labels
                .iter()
                .all(|f| rest.contains(f))
                .then(|| value.parse::<f64>().ok())?
        })
        .map(|v| v as u64)
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sum_adds_matching_series_only() {
        let text = "# HELP kq_webhook_decisions Admission decisions.\n\
            kq_webhook_decisions_total{kind=\"resourcebinding\",result=\"allowed\",reason=\"NoQuota\"} 3\n\
            kq_webhook_decisions_total{kind=\"resourcebinding\",result=\"denied\",reason=\"QuotaExceeded\"} 2\n\
            kq_webhook_decisions_total{kind=\"karmadaquota\",result=\"allowed\",reason=\"Allowed\"} 7\n\
            kq_webhook_decisions_total_other 100\n";
        let name = "kq_webhook_decisions_total";
        assert_eq!(metric_sum(text, name, &[]), 12);
        assert_eq!(metric_sum(text, name, &["kind=\"resourcebinding\""]), 5);
        assert_eq!(
            metric_sum(
                text,
                name,
                &["kind=\"resourcebinding\"", "result=\"denied\""]
            ),
            2
        );
    }
}
