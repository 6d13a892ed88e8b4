//! `quantity`: [`Quantity::parse`] and [`Quantity::read`] on any UTF-8 text (spec.hard, status,
//! binding requests).
//!
//! Laws, for every input `s` that parses to `q`:
//! - the magnitude is within the cap (|q| ≤ 2⁶³−1 units);
//! - the printed form `p = q.to_string()` parses back to the same value (parse∘format is
//!   the identity on values) and prints as `p` again in `q`'s format (the canonical form
//!   is a fixed point; read back without its format, a BinarySI value that is no multiple
//!   of 1024 becomes DecimalSI, as in Kubernetes, and is a fixed point from then on);
//! - `FromStr`, [`Quantity::read`] and a JSON string deserialize to the same value, and
//!   serializing gives `p`.
//!
//! For input that does not parse because it is past the cap, [`Quantity::read`] (and a JSON
//! string, which is read) keeps it beyond the cap, and what it prints reads back to the
//! same value. For any other input that does not parse, `read` and a JSON string of it are
//! refused too (unless only surrounding whitespace, which JSON decoding trims like
//! Kubernetes, made the difference).

use karmada_quota_core::{Quantity, QuantityError};

/// Nano units per unit.
const NANOS_PER_UNIT: u128 = 1_000_000_000;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let json = serde_json::to_string(s).expect("a string always serializes");
    let from_json = serde_json::from_str::<Quantity>(&json);
    let q = match Quantity::parse(s) {
        Ok(q) => q,
        Err(e) => {
            assert!(
                s.parse::<Quantity>().as_ref() == Err(&e),
                "FromStr disagrees with parse on {s:?}"
            );
            let read = Quantity::read(s);
            if e == QuantityError::OutOfRange {
                let kept = read.unwrap_or_else(|e| panic!("{s:?} past the cap is not read: {e}"));
                assert!(
                    kept.nanos().unsigned_abs() > Quantity::MAX_UNITS as u128 * NANOS_PER_UNIT,
                    "{s:?} is refused as past the cap but reads as {kept}"
                );
                assert_eq!(
                    kept.is_negative(),
                    s.starts_with('-'),
                    "{s:?} reads as {kept}: the sign is lost"
                );
                let printed = kept.to_string();
                assert_eq!(
                    Quantity::read(&printed).map(|k| k.nanos()),
                    Ok(kept.nanos()),
                    "{s:?} reads as {printed:?}, which reads back to another value"
                );
                if s.trim() == s {
                    assert_eq!(
                        from_json.map(|q| q.nanos()).ok(),
                        Some(kept.nanos()),
                        "{s:?} is read but not from JSON"
                    );
                }
            } else {
                assert_eq!(read, Err(e.clone()), "read disagrees with parse on {s:?}");
                if s.trim() == s {
                    assert!(
                        from_json.is_err(),
                        "{s:?} is refused by parse ({e}) but accepted from JSON"
                    );
                }
            }
            return;
        }
    };
    assert!(
        q.nanos().unsigned_abs() <= Quantity::MAX_UNITS as u128 * NANOS_PER_UNIT,
        "{s:?} parsed beyond the cap: {} nanos",
        q.nanos()
    );
    let printed = q.to_string();
    let again = Quantity::parse(&printed)
        .unwrap_or_else(|e| panic!("{s:?} prints as {printed:?}, which does not parse: {e}"));
    assert_eq!(
        again.nanos(),
        q.nanos(),
        "{s:?} prints as {printed:?}, which parses to another value"
    );
    // The printed form is canonical for the format it was printed in. Read back, a BinarySI
    // value that is no multiple of 1024 (`2.9296875Ki` prints `3000`) is DecimalSI and
    // prints as `3k`, exactly like Kubernetes; from there on printing is a fixed point.
    assert_eq!(
        again.with_format(q.format()).to_string(),
        printed,
        "{s:?}: the canonical form {printed:?} is not a fixed point in its format"
    );
    let reprinted = again.to_string();
    let third = Quantity::parse(&reprinted)
        .unwrap_or_else(|e| panic!("{s:?} prints as {reprinted:?}, which does not parse: {e}"));
    assert_eq!(
        third.to_string(),
        reprinted,
        "{s:?}: printing is not a fixed point after one round trip"
    );
    assert_eq!(
        s.parse::<Quantity>().map(|p| p.nanos()),
        Ok(q.nanos()),
        "FromStr disagrees with parse on {s:?}"
    );
    assert_eq!(
        Quantity::read(s).map(|p| p.nanos()),
        Ok(q.nanos()),
        "read disagrees with parse on {s:?}"
    );
    let from_json =
        from_json.unwrap_or_else(|e| panic!("{s:?} parses but not as a JSON string: {e}"));
    assert_eq!(
        from_json.nanos(),
        q.nanos(),
        "JSON decoding of {s:?} differs"
    );
    assert_eq!(
        serde_json::to_string(&q).expect("a quantity serializes"),
        serde_json::to_string(&printed).expect("a string serializes"),
        "{s:?}: serialized form is not the printed form"
    );
}

#[cfg(test)]
mod tests {
    use super::run;

    #[test]
    fn keeps_its_laws_on_kubernetes_edge_cases() {
        for s in [
            "0",
            "1",
            "-1",
            "1.5Gi",
            "0.5Ki",
            "9Ei",
            "-9Ei",
            "1e3",
            "1E-9",
            "0.9n",
            "-0.9n",
            ".",
            "+",
            "-",
            "1e2147483647",
            "1e-2147483647",
            "12E",
            "-12E",
            "1e300",
            "9223372036854775807",
            "9223372036854775808",
            "1.0000000001",
            "100m",
            "1Ki",
            " 1",
            "1 ",
            "\u{e9}",
            // Found by AFL++: BinarySI, whole, no multiple of 1024, a multiple of 1000.
            "337337922203687.5Ki",
            "2.9296875Ki",
        ] {
            run(s.as_bytes());
        }
    }
}
