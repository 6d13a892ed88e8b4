//! Order statistics of the benches' samples: one percentile rule for every report.

use std::time::Duration;

/// The `p`-th percentile (0 < p ≤ 1) of `sorted` (ascending), in milliseconds, by the
/// nearest-rank rule: the smallest sample with at least `p` of the samples at or below
/// it. 0 for no samples.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let ms = |v: &[u64]| {
            v.iter()
                .map(|m| Duration::from_millis(*m))
                .collect::<Vec<_>>()
        };
        let s = ms(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        assert_eq!(percentile_ms(&s, 0.5), 5.0);
        assert_eq!(percentile_ms(&s, 0.99), 10.0);
        assert_eq!(percentile_ms(&s, 1.0), 10.0);
        assert_eq!(percentile_ms(&s, 0.01), 1.0);
        assert_eq!(percentile_ms(&ms(&[7]), 0.5), 7.0);
        assert_eq!(percentile_ms(&[], 0.5), 0.0);
    }
}
