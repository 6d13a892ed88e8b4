//! The difference of two Prometheus text scrapes: counters summed over matching series,
//! histograms merged over matching series with their quantiles (linear within a bucket,
//! as Prometheus' `histogram_quantile`). bench/*.sh scrape before and after a run.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

/// One scrape: series (`name{labels}`) → value.
#[derive(Debug, Default)]
pub struct Scrape(BTreeMap<String, f64>);

impl Scrape {
    /// Parse the text exposition format (comments skipped, unparseable lines ignored).
    pub fn parse(text: &str) -> Self {
        let mut out = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.trim().rsplit_once(' ') else {
                continue;
            };
            if let Ok(v) = value.parse::<f64>() {
                *out.entry(series.to_owned()).or_default() += v;
            }
        }
        Self(out)
    }

    /// Σ of the series of metric `name` whose labels contain every `filters` entry.
    pub fn sum(&self, name: &str, filters: &[&str]) -> f64 {
        self.matching(name, filters).map(|(_, v)| v).sum()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        filters: &'a [&'a str],
    ) -> impl Iterator<Item = (&'a str, f64)> + 'a {
        self.0.iter().filter_map(move |(series, v)| {
            let rest = series.strip_prefix(name)?;
            if !(rest.is_empty() || rest.starts_with('{')) {
                return None;
            }
            filters
                .iter()
                .all(|f| rest.contains(f))
                .then_some((rest, *v))
        })
    }

    /// Cumulative bucket counts of histogram `name` (`_bucket` series) by upper bound,
    /// summed over the matching series.
    fn buckets(&self, name: &str, filters: &[&str]) -> BTreeMap<Bound, f64> {
        let bucket = format!("{name}_bucket");
        let mut out = BTreeMap::new();
        for (labels, v) in self.matching(&bucket, filters) {
            if let Some(le) = label(labels, "le") {
                let b = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                };
                *out.entry(Bound(b)).or_default() += v;
            }
        }
        out
    }
}

/// A bucket's upper bound, ordered.
#[derive(Clone, Copy, Debug)]
struct Bound(f64);
impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Bound {}
impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

fn label<'a>(labels: &'a str, key: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{key}=\""))? + key.len() + 2;
    let len = labels[start..].find('"')?;
    Some(&labels[start..start + len])
}

/// Counter `name` (matching `filters`) after minus before.
pub fn counter(before: &Scrape, after: &Scrape, name: &str, filters: &[&str]) -> f64 {
    after.sum(name, filters) - before.sum(name, filters)
}

/// Histogram `name` over the run: count, mean, p50, p90, p99 and the per-bucket counts
/// (not cumulative), as JSON.
pub fn histogram(before: &Scrape, after: &Scrape, name: &str, filters: &[&str]) -> Value {
    let (b, a) = (before.buckets(name, filters), after.buckets(name, filters));
    let cumulative: Vec<(f64, f64)> = a
        .iter()
        .map(|(le, v)| (le.0, v - b.get(le).copied().unwrap_or(0.0)))
        .collect();
    let count = cumulative.last().map_or(0.0, |(_, c)| *c);
    let sum = counter(before, after, &format!("{name}_sum"), filters);
    let mut per_bucket = Map::new();
    let mut below = 0.0;
    for (le, c) in &cumulative {
        let n = c - below;
        below = *c;
        if n > 0.0 {
            let key = if le.is_infinite() {
                "+Inf".to_owned()
            } else {
                format!("le{le}")
            };
            per_bucket.insert(key, json!(n));
        }
    }
    let q = |p: f64| quantile(&cumulative, count, p);
    json!({
        "count": count,
        "mean": if count > 0.0 { sum / count } else { 0.0 },
        "p50": q(0.5),
        "p90": q(0.9),
        "p99": q(0.99),
        "buckets": per_bucket,
    })
}

/// `histogram_quantile`: linear interpolation inside the bucket that holds rank p·count.
fn quantile(cumulative: &[(f64, f64)], count: f64, p: f64) -> f64 {
    if count <= 0.0 {
        return 0.0;
    }
    let rank = p * count;
    let mut lower = (0.0, 0.0);
    for &(le, c) in cumulative {
        if c >= rank {
            if le.is_infinite() {
                return lower.0; // the largest finite bound, as Prometheus answers
            }
            let width = c - lower.1;
            let frac = if width > 0.0 {
                (rank - lower.1) / width
            } else {
                1.0
            };
            return lower.0 + (le - lower.0) * frac;
        }
        lower = (le, c);
    }
    lower.0
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP h x\n\
        h_bucket{a=\"1\",le=\"1.0\"} 1\nh_bucket{a=\"1\",le=\"2.0\"} 1\n\
        h_bucket{a=\"1\",le=\"4.0\"} 1\nh_bucket{a=\"1\",le=\"+Inf\"} 1\n\
        h_sum{a=\"1\"} 1\nh_count{a=\"1\"} 1\nc_total{r=\"ok\"} 5\nc_total{r=\"conflict\"} 1\n";
    const AFTER: &str = "h_bucket{a=\"1\",le=\"1.0\"} 1\nh_bucket{a=\"1\",le=\"2.0\"} 51\n\
        h_bucket{a=\"1\",le=\"4.0\"} 101\nh_bucket{a=\"1\",le=\"+Inf\"} 101\n\
        h_sum{a=\"1\"} 251\nh_count{a=\"1\"} 101\nc_total{r=\"ok\"} 15\nc_total{r=\"conflict\"} 4\n";

    #[test]
    fn counters_and_histograms_are_differences_of_the_two_scrapes() {
        let (b, a) = (Scrape::parse(BEFORE), Scrape::parse(AFTER));
        assert_eq!(counter(&b, &a, "c_total", &[]), 13.0);
        assert_eq!(counter(&b, &a, "c_total", &["r=\"ok\""]), 10.0);
        assert_eq!(counter(&b, &a, "c", &[]), 0.0, "a prefix is not a metric");
        let h = histogram(&b, &a, "h", &[]);
        assert_eq!(h["count"], 100.0);
        assert_eq!(h["mean"], 2.5);
        assert_eq!(h["buckets"]["le2"], 50.0);
        assert_eq!(h["buckets"]["le4"], 50.0);
        // rank 50 of 100 ends the (1, 2] bucket; rank 99 is 49/50 into (2, 4].
        assert_eq!(h["p50"], 2.0);
        assert!((h["p99"].as_f64().unwrap() - 3.96).abs() < 1e-9, "{h}");
        assert_eq!(histogram(&b, &b, "h", &[])["count"], 0.0);
    }
}
