//! The report's time window: `[from, to)` sampled every `step` seconds, the instants a
//! Prometheus range query evaluates, how long each sample stands for, and the time syntax
//! of `--from`/`--to`/`--step` (RFC 3339, a date, Unix seconds, `now`, `-24h`).
//!
//! A sample at `t` stands for `[t, t + step)`, cut at `to`: the instants are `from`,
//! `from + step`, … while `< to`, so the weights add up to `to − from` exactly and a
//! resource held at `v` for the whole window comes out as `v × (to − from)`.

use std::fmt;

/// Prometheus refuses a range query of more than 11,000 points per series.
pub const MAX_POINTS: u64 = 11_000;

/// The default step aims at no more than this many points.
const TARGET_POINTS: u64 = 1_000;

/// The default step is never finer than a minute (a usual scrape interval is 15–60 s).
const MIN_DEFAULT_STEP: u64 = 60;

/// A bad `--from`, `--to` or `--step`, or a window that cannot be queried.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// A time that is neither RFC 3339, a date, Unix seconds, `now` nor `now-<duration>`.
    #[error(
        "invalid time {0:?}: expected RFC 3339 (2026-01-31T00:00:00Z), a date (2026-01-31), \
         Unix seconds, now, or a duration before now (-24h, now-7d)"
    )]
    Time(String),
    /// A duration that is not `<n><unit>…` with units s, m, h, d, w.
    #[error("invalid duration {0:?}: expected e.g. 30s, 5m, 1h, 7d, 1h30m")]
    Duration(String),
    /// `from` is not before `to`.
    #[error("the window is empty: --from {from} is not before --to {to}")]
    Empty {
        /// Start (Unix seconds).
        from: i64,
        /// End (Unix seconds).
        to: i64,
    },
    /// A zero step.
    #[error("--step must be at least 1s")]
    ZeroStep,
    /// More points than Prometheus answers.
    #[error(
        "the window has {points} points at a {step}s step; Prometheus answers at most \
         {MAX_POINTS}: use a larger --step (at least {min_step}s)"
    )]
    TooManyPoints {
        /// Points asked for.
        points: u64,
        /// The step.
        step: u64,
        /// The smallest step that fits.
        min_step: u64,
    },
}

/// `[from, to)` sampled every `step` seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start, Unix seconds (inclusive).
    pub from: i64,
    /// End, Unix seconds (exclusive).
    pub to: i64,
    /// Seconds between two samples (≥ 1).
    pub step: u64,
}

impl Window {
    /// A window; `step` `None` takes [`default_step`].
    pub fn new(from: i64, to: i64, step: Option<u64>) -> Result<Self, WindowError> {
        if from >= to {
            return Err(WindowError::Empty { from, to });
        }
        let span = to.abs_diff(from);
        let step = step.unwrap_or_else(|| default_step(span));
        if step == 0 {
            return Err(WindowError::ZeroStep);
        }
        let points = span.div_ceil(step);
        if points > MAX_POINTS {
            return Err(WindowError::TooManyPoints {
                points,
                step,
                min_step: span.div_ceil(MAX_POINTS),
            });
        }
        Ok(Self { from, to, step })
    }

    /// Length in seconds.
    pub fn seconds(&self) -> u64 {
        self.to.abs_diff(self.from)
    }

    /// The last instant Prometheus must evaluate (the `end` of the range query).
    pub fn last_point(&self) -> i64 {
        let points = self.seconds().div_ceil(self.step);
        self.from
            .saturating_add_unsigned((points - 1).saturating_mul(self.step))
    }

    /// How many seconds a sample at `t_ms` (Unix milliseconds) stands for: the step, cut at
    /// `to`; 0 outside the window.
    pub fn weight(&self, t_ms: i64) -> f64 {
        let (from, to) = (self.from.saturating_mul(1000), self.to.saturating_mul(1000));
        if t_ms < from || t_ms >= to {
            return 0.0;
        }
        let step_ms = i64::try_from(self.step)
            .unwrap_or(i64::MAX)
            .saturating_mul(1000);
        #[allow(clippy::cast_precision_loss)]
        let w = step_ms.min(to - t_ms) as f64 / 1000.0;
        w
    }
}

/// The default step for a window of `span` seconds: at most about 1,000 points, never
/// under a minute.
pub fn default_step(span: u64) -> u64 {
    span.div_ceil(TARGET_POINTS).max(MIN_DEFAULT_STEP)
}

/// A duration as `<n><unit>…` (`30s`, `5m`, `1h30m`, `7d`, `2w`, as `humantime` reads
/// them), or bare seconds; whole seconds (a fraction is dropped).
pub fn parse_duration(s: &str) -> Result<u64, WindowError> {
    let t = s.trim();
    if let Ok(n) = t.parse::<u64>() {
        return Ok(n);
    }
    if t.is_empty() || t.starts_with(|c: char| !c.is_ascii_digit()) {
        return Err(WindowError::Duration(s.to_owned()));
    }
    humantime::parse_duration(t)
        .map(|d| d.as_secs())
        .map_err(|_| WindowError::Duration(s.to_owned()))
}

/// A time as Unix seconds: RFC 3339 (`2026-01-31T00:00:00Z`, any offset), a date
/// (`2026-01-31`, midnight UTC), Unix seconds, `now`, or a duration before now (`-24h`,
/// `now-7d`).
pub fn parse_time(s: &str, now: i64) -> Result<i64, WindowError> {
    let t = s.trim();
    let err = || WindowError::Time(s.to_owned());
    if t == "now" {
        return Ok(now);
    }
    if let Some(ago) = t.strip_prefix("now-").or_else(|| t.strip_prefix('-')) {
        let secs = parse_duration(ago).map_err(|_| err())?;
        let secs = i64::try_from(secs).map_err(|_| err())?;
        return now.checked_sub(secs).ok_or_else(err);
    }
    if let Ok(n) = t.parse::<i64>() {
        return Ok(n);
    }
    if let Ok(ts) = t.parse::<jiff::Timestamp>() {
        return Ok(ts.as_second());
    }
    if let Ok(date) = t.parse::<jiff::civil::Date>() {
        return date
            .to_zoned(jiff::tz::TimeZone::UTC)
            .map(|z| z.timestamp().as_second())
            .map_err(|_| err());
    }
    Err(err())
}

/// Unix seconds as RFC 3339 (UTC), for reports.
pub fn rfc3339(secs: i64) -> String {
    jiff::Timestamp::from_second(secs).map_or_else(|_| secs.to_string(), |t| t.to_string())
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} to {} every {}s",
            rfc3339(self.from),
            rfc3339(self.to),
            self.step
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_767_225_600; // 2026-01-01T00:00:00Z

    #[test]
    fn times_parse_in_every_documented_form() {
        for (s, want) in [
            ("now", NOW),
            ("-24h", NOW - 86_400),
            ("now-7d", NOW - 7 * 86_400),
            ("-1h30m", NOW - 5_400),
            ("2026-01-01T00:00:00Z", NOW),
            ("2026-01-01T01:00:00+01:00", NOW),
            ("2026-01-02", NOW + 86_400),
            ("1767225600", NOW),
            (" now ", NOW),
        ] {
            assert_eq!(parse_time(s, NOW), Ok(want), "{s}");
        }
    }

    #[test]
    fn bad_times_and_durations_are_named() {
        for s in ["", "yesterday", "-", "now-", "-24x", "2026-13-01", "now+1h"] {
            let e = parse_time(s, NOW).unwrap_err();
            assert_eq!(e, WindowError::Time(s.to_owned()), "{s}");
            assert!(e.to_string().contains("RFC 3339"), "{e}");
        }
        for s in ["", "5", "5x", "m", "1h5", "99999999999999999999w"] {
            let r = parse_duration(s);
            if s == "5" {
                assert_eq!(r, Ok(5));
            } else {
                assert_eq!(r, Err(WindowError::Duration(s.to_owned())), "{s}");
            }
        }
        assert_eq!(parse_duration("1w1d1h1m1s"), Ok(604_800 + 86_400 + 3_661));
    }

    #[test]
    fn instants_and_weights_cover_the_window_exactly() {
        // 10 s window, 3 s step: instants 0, 3, 6, 9; the last stands for 1 s.
        let w = Window::new(100, 110, Some(3)).unwrap();
        assert_eq!(w.last_point(), 109);
        let weights: Vec<f64> = [100, 103, 106, 109]
            .iter()
            .map(|t| w.weight(t * 1000))
            .collect();
        assert_eq!(weights, [3.0, 3.0, 3.0, 1.0]);
        assert!((weights.iter().sum::<f64>() - 10.0).abs() < 1e-12);
        assert_eq!(w.weight(99_999), 0.0);
        assert_eq!(w.weight(110_000), 0.0);
        // A step that divides the window: the last instant is one step before `to`.
        let w = Window::new(0, 3600, Some(60)).unwrap();
        assert_eq!(w.last_point(), 3540);
        assert_eq!(w.seconds(), 3600);
    }

    #[test]
    fn windows_that_cannot_be_queried_are_refused() {
        assert_eq!(
            Window::new(10, 10, Some(1)),
            Err(WindowError::Empty { from: 10, to: 10 })
        );
        assert_eq!(Window::new(0, 10, Some(0)), Err(WindowError::ZeroStep));
        let e = Window::new(0, 86_400, Some(1)).unwrap_err();
        assert_eq!(
            e,
            WindowError::TooManyPoints {
                points: 86_400,
                step: 1,
                min_step: 8
            }
        );
        assert!(e.to_string().contains("at least 8s"), "{e}");
    }

    #[test]
    fn the_default_step_keeps_about_a_thousand_points() {
        assert_eq!(default_step(3_600), 60);
        assert_eq!(default_step(86_400), 87);
        assert_eq!(default_step(31 * 86_400), 2_679);
        let w = Window::new(0, 31 * 86_400, None).unwrap();
        assert!(w.seconds().div_ceil(w.step) <= 1_000);
    }
}
