//! Human-friendly durations for flags: `2s`, `500ms`, `1m30s`, `1h`.

use std::time::Duration;

/// Parse `<number><unit>` groups (units `ms`, `s`, `m`, `h`), e.g. `2s`, `500ms`, `1m30s`.
/// A bare `0` is zero; anything else needs a unit.
pub fn parse(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err("empty duration (use e.g. 2s, 500ms, 1m)".to_owned());
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "invalid duration {input:?}: expected a number before the unit (e.g. 2s, 500ms, 1m)"
            ));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|e| format!("invalid duration {input:?}: {e}"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let part = match unit {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.saturating_mul(60)),
            "h" => Duration::from_secs(n.saturating_mul(3600)),
            "" => {
                return Err(format!(
                    "invalid duration {input:?}: missing unit (ms, s, m or h)"
                ));
            }
            other => {
                return Err(format!(
                    "invalid duration {input:?}: unknown unit {other:?} (ms, s, m or h)"
                ));
            }
        };
        total = total.saturating_add(part);
    }
    Ok(total)
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
        assert!(parse("2").unwrap_err().contains("missing unit"));
        assert!(parse("2d").unwrap_err().contains("unknown unit"));
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
