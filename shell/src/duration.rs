//! Human-friendly durations for flags: `2s`, `500ms`, `1m30s`, `1h`, `7d`, read by
//! `humantime` (one parser for every binary's flags), with a bare `0` for zero.

use std::time::Duration;

/// Parse `<number><unit>` groups (`ms`, `s`, `m`, `h`, `d`, … as `humantime` reads them),
/// e.g. `2s`, `500ms`, `1m30s`. A bare `0` is zero; anything else needs a unit.
pub fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration (use e.g. 2s, 500ms, 1m)".to_owned());
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("invalid duration {input:?}: {e} (use e.g. 2s, 500ms, 1m30s)"))
}

/// Render a duration the way [`parse`] reads it (used in messages).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_missing_or_unknown_units() {
        assert!(parse("2").unwrap_err().contains("invalid duration \"2\""));
        assert!(parse("2x").unwrap_err().contains("invalid duration"));
        assert_eq!(parse("2d"), Ok(Duration::from_secs(2 * 86_400)));
        assert!(parse("s").is_err());
        assert!(parse("").is_err());
        assert!(parse("-1s").is_err());
    }

    #[test]
    fn formats_back() {
        assert_eq!(format(Duration::from_secs(2)), "2s");
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
    }
}
