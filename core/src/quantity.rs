//! Exact resource quantities with Kubernetes' `resource.Quantity` semantics.
//!
//! ```text
//!  "1.5Gi" ──parse──► Quantity { nanos: 1_610_612_736 × 10⁹, format: BinarySI }
//!                        │  + − ×n, Ord, Eq, Hash (by value only)
//!                        ▼
//!                   Display / Serialize ──► "1536Mi"  (Kubernetes' canonical String())
//! ```
//!
//! The grammar, the rounding, the canonical form and the error messages are those of
//! `k8s.io/apimachinery/pkg/api/resource` (`ParseQuantity`, `CanonicalizeBytes`, `Add`,
//! `Sub`, `Cmp`); the unit tests transpose its parse, canonicalisation and reject tables.
//! Where this doc says what Kubernetes does, it was checked against that package at
//! v0.20.2 (the kube-apiserver 1.20.2 the e2e tests run) and at v0.37.0-beta.0, between
//! which `ParseQuantity`, `CanonicalizeBytes` and `ScaledValue` did not change.
//!
//! * **Grammar**: `[+-]digits[.digits]suffix` where the suffix is a binary SI suffix
//!   (`Ki Mi Gi Ti Pi Ei`), a decimal SI suffix (`n u m "" k M G T P E`) or a decimal
//!   exponent (`e3`, `E-2`, exponent within ±(2³¹−1)). Leading/trailing spaces are
//!   rejected; `.`, `+`, `-` alone parse as zero, exactly like Kubernetes.
//! * **Rounding**: a value finer than 10⁻⁹ is rounded *away from zero* to the next nano
//!   unit (`0.9n` → `1n`, `-0.9n` → `-1n`): "if you ask for some resource you get some".
//! * **Format**: remembered from the suffix; a BinarySI value that parses to a magnitude
//!   in (0, 1) becomes DecimalSI. `a + b` and `a - b` keep `a`'s format unless `a` is
//!   zero, then they take `b`'s.
//! * **Canonical form**: no fractional digits, the largest suffix that keeps the mantissa
//!   an integer (DecimalSI: powers of 1000 down to `n`; DecimalExponent: `eN` with N a
//!   multiple of 3; BinarySI: powers of 1024, falling back to DecimalSI below 1024 or
//!   when the value is not a whole number). `1.5` → `1500m`, `1.5Gi` → `1536Mi`,
//!   `1000` → `1k`, `1e3` → `1e3`.
//!
//! # Representation and its cap
//!
//! A value is an `i128` count of nano units (10⁻⁹), so every parsed value is exact.
//! Kubernetes stores an arbitrary-precision `inf.Dec`; we deliberately **cap parsed
//! magnitudes at 2⁶³−1 units** ([`Quantity::MAX_UNITS`], what fits Kubernetes' `int64`
//! `Value()`), i.e. at most 9 223 372 036 854 775 807 × 10⁹ nanos. With that cap, about
//! 18 billion maximal values can be summed before an `i128` would overflow. A stored value
//! read past the cap ([`Quantity::read`]) is kept exactly below 10²⁹ units and saturated at
//! the `i128` bound (≈ 1.7 × 10²⁹ units) beyond; arithmetic saturates at the `i128` bounds
//! instead of wrapping.
//!
//! # Deliberate deviations from Kubernetes
//!
//! 1. A **decimal** quantity (DecimalSI or DecimalExponent) whose magnitude exceeds the cap
//!    is rejected by [`Quantity::parse`] with [`QuantityError::OutOfRange`]; Kubernetes
//!    keeps it (`12E`, `1e21`, `18446744073709551616`). A value already stored is read
//!    with [`Quantity::read`] (serde's `Deserialize` too), which keeps it exactly below
//!    10²⁹ units and saturated beyond: a binding asking `12E` is charged `12E`, not left
//!    unread. A **BinarySI** quantity beyond the cap is clamped to 2⁶³−1 silently by both,
//!    which *is* Kubernetes' behaviour (`9Ei` → `9223372036854775807`). So a BinarySI sum
//!    past the cap that prints with a suffix (`12Ei`) reads back as the cap: still at or
//!    above every `hard` a user may write, so a quota holding it reads as full.
//! 2. Arithmetic saturates at ±(2¹²⁷−1) nanos (≈1.7 × 10²⁹ units); Kubernetes never
//!    saturates. Values beyond the cap (from arithmetic, or read) print with a suffix that
//!    keeps their magnitude: `1e21` for a decimal value past `E`, plain decimal digits for
//!    a BinarySI value past `Ei` (`1Ei` × 1024 → `1180591620717411303424`); such strings
//!    are refused by `parse` and kept by `read` (deviation 1).
//!    Kubernetes 1.20 — and every release up to 1.37.0-beta.0 — ignores the suffix it
//!    cannot find and prints the bare mantissa: 10²¹ in DecimalSI (`1000E`) and 2⁷⁰ in
//!    BinarySI both print `1`. Kubernetes' main branch prints them as this project does
//!    since its `CanonicalizeBytes` falls back to the exponent form (after 1.37.0-beta.0).
//! 3. Values finer than a nano cannot be represented. Parsing rounds up to nano exactly
//!    like Kubernetes, so parsed values are identical; only Go callers of
//!    `NewScaledQuantity(1, -12)` can build what we cannot.
//! 4. [`Quantity::from_nanos`] does not apply the cap (it is a constructor for computed
//!    values, like Kubernetes' `NewQuantity`).
//! 5. Deserializing a bare JSON *number* that is not an integer goes through `f64`
//!    (`serde_json` without `arbitrary_precision`): `1.5` is exact, but a number written
//!    `1e3` becomes DecimalSI `1k` where Kubernetes would keep DecimalExponent `1e3`, and
//!    digits beyond `f64` precision are lost. Integers and JSON strings are exact.
//!    JSON `null` deserializes to zero, as in Kubernetes.
//! 6. Kubernetes' zero value has an empty format; ours ([`Quantity::ZERO`]) is DecimalSI.
//!    Zero always prints `0` in both.
//! 7. This project always prints the canonical form. Kubernetes' `ParseQuantity` keeps the
//!    input string when its fast path takes the input for canonical (a decimal scale that
//!    is a multiple of 3 with no trailing `000` and no leading `0`; a BinarySI mantissa
//!    not divisible by 8), and `String()` and JSON echo it as typed until the value
//!    changes: `9.49e2`, `11.G`, `+1` and `+1Ki` print back unchanged there, here (and in
//!    Kubernetes after any arithmetic) `949`, `11G`, `1` and `1Ki`.
//! 8. [`Quantity::value`] and [`Quantity::milli_value`] round every value away from zero
//!    (−1.5 → −2). Kubernetes' `Value()` and `MilliValue()` do so only for a value held
//!    as an `int64`. A value held as a big decimal (an input with more digits than an
//!    `int64` holds or finer than a nano, or a sum past `int64`) goes through its
//!    `scaledValue`, which truncates toward zero and then adds one for any remainder, and
//!    reads the mantissa as an `int64` without checking: a negative value comes out one
//!    above its integer part or wraps (`-1.50000000000000000000` → `Value()` 0, `-1.5n`
//!    → `Value()` and `MilliValue()` 1, `-9.5000000001Gi` → `Value()` 8246196746).
//!
//! # Why not a crate
//!
//! No maintained crate implements these semantics without the kube stack:
//! `kube_quantity` (0.9) wraps `k8s-openapi` types over `rust_decimal` and does not
//! canonicalise (its docs print `2.5Gi` back as `2.5Gi`; Kubernetes prints `2560Mi`);
//! `k8s_quantity_parser` only converts to integers. This crate must stay free of
//! kube and k8s-openapi, so the semantics are implemented here, with Kubernetes' own
//! test vectors.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::{Add, AddAssign, Neg, Sub, SubAssign};
use std::str::FromStr;

/// The regular expression Kubernetes quotes in its "wrong format" error.
const SPLIT_RE: &str = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$";

/// Nano units per unit.
const NANOS_PER_UNIT: i128 = 1_000_000_000;

/// The largest parsed magnitude, in nanos: [`Quantity::MAX_UNITS`] × 10⁹.
const MAX_NANOS: u128 = (i64::MAX as u128) * (NANOS_PER_UNIT as u128);

/// Decimal digits of [`MAX_NANOS`]: an integer with more digits is certainly beyond it.
const MAX_NANOS_DIGITS: i64 = 28;

/// Integer digits of nanos [`Quantity::read`] keeps exactly: up to 10³⁸ − 1 nanos (10²⁹
/// units), which fits an `i128`; a longer number saturates at the `i128` bound
/// (≈ 1.7 × 10³⁸ nanos), which is close enough above it for a quota.
const READ_NANOS_DIGITS: i64 = 38;

/// What parsing does with a decimal magnitude past [`Quantity::MAX_UNITS`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PastCap {
    /// [`QuantityError::OutOfRange`]: a value a user writes ([`Quantity::parse`]).
    Refuse,
    /// The exact value, saturated at the `i128` bounds: a value already stored
    /// ([`Quantity::read`]).
    Keep,
}

/// How a quantity was written; formatting keeps it (Kubernetes' `Format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Format {
    /// `12e6`: a decimal exponent, printed as a multiple of 3 (`e3`, `e-9`).
    DecimalExponent,
    /// `12Mi`: powers of 1024.
    BinarySI,
    /// `12M`: powers of 1000, and `m`, `u`, `n` for fractions.
    #[default]
    DecimalSI,
}

impl Format {
    /// Kubernetes' name of the format (`"DecimalSI"`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Format::DecimalExponent => "DecimalExponent",
            Format::BinarySI => "BinarySI",
            Format::DecimalSI => "DecimalSI",
        }
    }
}

/// Why a string is not a quantity. Messages are Kubernetes' own, except
/// [`QuantityError::OutOfRange`] which is this crate's cap (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The text does not have the shape of a quantity (Kubernetes' `ErrFormatWrong`):
    /// empty, spaces, stray characters, several dots.
    #[error("quantities must match the regular expression '{}'", SPLIT_RE)]
    FormatWrong,
    /// The number has no digit at all where Kubernetes needs one (`ErrNumeric`), e.g.
    /// `.Pi` or `.e-10`.
    #[error("unable to parse numeric part of quantity")]
    Numeric,
    /// The suffix is not one of the known suffixes, or an exponent is beyond ±(2³¹−1)
    /// (`ErrSuffix`), e.g. `0.1mi`, `1i`, `1e`, `1e4294967297`.
    #[error("unable to parse quantity's suffix")]
    Suffix,
    /// A decimal quantity whose magnitude exceeds [`Quantity::MAX_UNITS`].
    #[error(
        "numeric value of quantity is out of range: its magnitude must not exceed 9223372036854775807 (2^63-1)"
    )]
    OutOfRange,
}

/// An exact quantity: a value in nano units (10⁻⁹) plus the format it was written in.
///
/// Equality, ordering and hashing look at the value only (`1 == 1000m == 1e0`), like
/// Kubernetes' `Cmp`; the format only decides how [`fmt::Display`] prints it.
#[derive(Clone, Copy, Debug)]
pub struct Quantity {
    /// The value in nano units. Parsed values satisfy |nanos| ≤ 2⁶³−1 × 10⁹; arithmetic
    /// may go beyond, up to the `i128` bounds where it saturates.
    nanos: i128,
    /// How to print it.
    format: Format,
}

impl Quantity {
    /// Zero, DecimalSI.
    pub const ZERO: Quantity = Quantity {
        nanos: 0,
        format: Format::DecimalSI,
    };

    /// The largest magnitude [`Quantity::parse`] accepts, in units: 2⁶³−1, what fits
    /// Kubernetes' `int64` accessors. BinarySI inputs beyond it are clamped to it (like
    /// Kubernetes); decimal inputs beyond it are rejected (see the module doc).
    pub const MAX_UNITS: i64 = i64::MAX;

    /// Parses a quantity exactly like Kubernetes' `ParseQuantity` (within the cap): what
    /// a user writes (a quota's `hard`, a flag). A decimal value past the cap is
    /// [`QuantityError::OutOfRange`].
    pub fn parse(s: &str) -> Result<Quantity, QuantityError> {
        parse_quantity(s, PastCap::Refuse)
    }

    /// Reads a quantity already stored (a binding's requests, a pod's, a status's `used`):
    /// like [`Quantity::parse`], except that a decimal value past the cap, which
    /// Kubernetes stores as given, is kept — exactly below 10²⁹ units, saturated at the
    /// `i128` bounds beyond — instead of refused. Refusing it would leave the object it is
    /// part of unread — a binding left out of `used`, a quota not enforced.
    pub fn read(s: &str) -> Result<Quantity, QuantityError> {
        parse_quantity(s, PastCap::Keep)
    }

    /// A quantity of `nanos` × 10⁻⁹ (no cap is applied).
    pub const fn from_nanos(nanos: i128, format: Format) -> Quantity {
        Quantity { nanos, format }
    }

    /// A quantity of whole units, e.g. `pods = 5` (Kubernetes' `NewQuantity`).
    pub const fn from_units(units: i64, format: Format) -> Quantity {
        Quantity {
            nanos: units as i128 * NANOS_PER_UNIT,
            format,
        }
    }

    /// A quantity of `milli` × 10⁻³ (Kubernetes' `NewMilliQuantity`).
    pub const fn from_milli(milli: i64, format: Format) -> Quantity {
        Quantity {
            nanos: milli as i128 * 1_000_000,
            format,
        }
    }

    /// The value in nano units.
    pub const fn nanos(&self) -> i128 {
        self.nanos
    }

    /// The format the quantity prints in.
    pub const fn format(&self) -> Format {
        self.format
    }

    /// The same value, printed in `format`.
    pub const fn with_format(self, format: Format) -> Quantity {
        Quantity {
            nanos: self.nanos,
            format,
        }
    }

    /// True when the value is zero.
    pub const fn is_zero(&self) -> bool {
        self.nanos == 0
    }

    /// True when the value is below zero.
    pub const fn is_negative(&self) -> bool {
        self.nanos < 0
    }

    /// True when the value is above zero.
    pub const fn is_positive(&self) -> bool {
        self.nanos > 0
    }

    /// True when the value is a whole number (no fractional part).
    pub const fn is_whole(&self) -> bool {
        self.nanos % NANOS_PER_UNIT == 0
    }

    /// The value in units, rounded away from zero (Kubernetes' `Value()`, without its
    /// int64 overflow).
    pub const fn value(&self) -> i128 {
        div_away_from_zero(self.nanos, NANOS_PER_UNIT)
    }

    /// The value in milli units, rounded away from zero (Kubernetes' `MilliValue()`,
    /// without its int64 overflow).
    pub const fn milli_value(&self) -> i128 {
        div_away_from_zero(self.nanos, 1_000_000)
    }

    /// This value rounded away from zero to whole milli units ([`Quantity::milli_value`]),
    /// in `format` (Karmada's rounding of cpu). Nothing is cut to an int64: a value past it
    /// stays whole, saturated at the `i128` bounds.
    pub const fn rounded_to_milli(self, format: Format) -> Quantity {
        Quantity {
            nanos: self.milli_value().saturating_mul(1_000_000),
            format,
        }
    }

    /// This value rounded away from zero to whole units ([`Quantity::value`]), in `format`
    /// (Karmada's rounding of every resource but cpu); as [`Quantity::rounded_to_milli`].
    pub const fn rounded_to_units(self, format: Format) -> Quantity {
        Quantity {
            nanos: self.value().saturating_mul(NANOS_PER_UNIT),
            format,
        }
    }

    /// Sum; keeps `self`'s format unless `self` is zero, then takes `other`'s
    /// (Kubernetes' `Add`). Saturates at the `i128` nano bounds.
    pub const fn saturating_add(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_add(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    /// Difference; same format rule as [`Quantity::saturating_add`] (Kubernetes' `Sub`).
    pub const fn saturating_sub(self, other: Quantity) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_sub(other.nanos),
            format: if self.nanos == 0 {
                other.format
            } else {
                self.format
            },
        }
    }

    /// `max(0, self - other)`, in the format [`Quantity::saturating_sub`] would give.
    pub const fn sub_clamped(self, other: Quantity) -> Quantity {
        let d = self.saturating_sub(other);
        if d.nanos < 0 {
            Quantity {
                nanos: 0,
                format: d.format,
            }
        } else {
            d
        }
    }

    /// `self × n` (replicas, clusters); keeps the format, saturates.
    pub const fn saturating_mul(self, n: i64) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_mul(n as i128),
            format: self.format,
        }
    }

    /// The sum, or `None` when it overflows the `i128` nano range. Format rule of
    /// [`Quantity::saturating_add`].
    pub const fn checked_add(self, other: Quantity) -> Option<Quantity> {
        match self.nanos.checked_add(other.nanos) {
            Some(_) => Some(self.saturating_add(other)),
            None => None,
        }
    }

    /// The absolute value (saturating), same format.
    pub const fn abs(self) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_abs(),
            format: self.format,
        }
    }

    /// `self / whole × 100` (a share of a limit, for display), `None` for a zero whole.
    pub fn percent_of(self, whole: Quantity) -> Option<f64> {
        if whole.is_zero() {
            return None;
        }
        #[allow(clippy::cast_precision_loss)]
        Some(self.nanos as f64 / whole.nanos as f64 * 100.0)
    }
}

/// `n / d` rounded away from zero (`d > 0`).
const fn div_away_from_zero(n: i128, d: i128) -> i128 {
    let q = n / d;
    if n % d == 0 {
        q
    } else if n > 0 {
        q + 1
    } else {
        q - 1
    }
}

impl Default for Quantity {
    fn default() -> Self {
        Quantity::ZERO
    }
}

impl PartialEq for Quantity {
    fn eq(&self, other: &Self) -> bool {
        self.nanos == other.nanos
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.nanos.cmp(&other.nanos)
    }
}

impl Hash for Quantity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.nanos.hash(state);
    }
}

impl Add for Quantity {
    type Output = Quantity;
    fn add(self, rhs: Quantity) -> Quantity {
        self.saturating_add(rhs)
    }
}

impl Sub for Quantity {
    type Output = Quantity;
    fn sub(self, rhs: Quantity) -> Quantity {
        self.saturating_sub(rhs)
    }
}

impl AddAssign for Quantity {
    fn add_assign(&mut self, rhs: Quantity) {
        *self = self.saturating_add(rhs);
    }
}

impl SubAssign for Quantity {
    fn sub_assign(&mut self, rhs: Quantity) {
        *self = self.saturating_sub(rhs);
    }
}

impl Neg for Quantity {
    type Output = Quantity;
    /// The negated value (saturating), same format (Kubernetes' `Neg`).
    fn neg(self) -> Quantity {
        Quantity {
            nanos: self.nanos.saturating_neg(),
            format: self.format,
        }
    }
}

impl std::iter::Sum for Quantity {
    /// Folds with `+` from [`Quantity::ZERO`], so the first non-zero term's format wins.
    fn sum<I: Iterator<Item = Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + b)
    }
}

impl<'a> std::iter::Sum<&'a Quantity> for Quantity {
    fn sum<I: Iterator<Item = &'a Quantity>>(iter: I) -> Quantity {
        iter.fold(Quantity::ZERO, |a, b| a + *b)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;
    fn from_str(s: &str) -> Result<Quantity, QuantityError> {
        parse_quantity(s, PastCap::Refuse)
    }
}

// ---------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------

/// What a suffix means: value = number × base^exponent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Base {
    Ten,
    Two,
}

/// Kubernetes' `quantitySuffixer.interpret`.
fn interpret_suffix(suffix: &str) -> Option<(Base, i64, Format)> {
    use Format::*;
    let (base, exp, format) = match suffix {
        "" => (Base::Ten, 0, DecimalSI),
        "n" => (Base::Ten, -9, DecimalSI),
        "u" => (Base::Ten, -6, DecimalSI),
        "m" => (Base::Ten, -3, DecimalSI),
        "k" => (Base::Ten, 3, DecimalSI),
        "M" => (Base::Ten, 6, DecimalSI),
        "G" => (Base::Ten, 9, DecimalSI),
        "T" => (Base::Ten, 12, DecimalSI),
        "P" => (Base::Ten, 15, DecimalSI),
        "E" => (Base::Ten, 18, DecimalSI),
        "Ki" => (Base::Two, 10, BinarySI),
        "Mi" => (Base::Two, 20, BinarySI),
        "Gi" => (Base::Two, 30, BinarySI),
        "Ti" => (Base::Two, 40, BinarySI),
        "Pi" => (Base::Two, 50, BinarySI),
        "Ei" => (Base::Two, 60, BinarySI),
        _ => {
            let rest = suffix
                .strip_prefix('e')
                .or_else(|| suffix.strip_prefix('E'))?;
            // Go's ParseInt(rest, 10, 64): optional sign, then digits only. Kubernetes
            // then refuses what an int32 scale cannot hold: |exp| ≤ 2^31-1.
            let exp: i64 = rest.parse().ok()?;
            if exp.unsigned_abs() > i32::MAX as u64 {
                return None;
            }
            (Base::Ten, exp, DecimalExponent)
        }
    };
    Some((base, exp, format))
}

fn parse_quantity(s: &str, past_cap: PastCap) -> Result<Quantity, QuantityError> {
    let lexed = lex(s)?;
    let (base, exponent, mut format) =
        interpret_suffix(lexed.suffix).ok_or(QuantityError::Suffix)?;

    if lexed.int_digits.is_empty() && lexed.frac_digits.is_empty() {
        // No digit at all ("", ".", "-."): Kubernetes' fast path reads it as 0, but its
        // inf.Dec slow path (taken below nano and for Pi/Ei) fails with ErrNumeric.
        let slow_path = match base {
            Base::Ten => exponent < -9,
            Base::Two => exponent >= 50,
        };
        if slow_path {
            return Err(QuantityError::Numeric);
        }
        return Ok(Quantity { nanos: 0, format });
    }

    let (mut digits, exp10) = significant(&lexed, base, exponent);
    if digits.is_empty() {
        return Ok(Quantity { nanos: 0, format });
    }
    if base == Base::Two {
        multiply_digits(&mut digits, 1u64 << (exponent as u32));
    }
    let max_digits = match past_cap {
        PastCap::Refuse => MAX_NANOS_DIGITS,
        PastCap::Keep => READ_NANOS_DIGITS,
    };
    let magnitude = match (nanos_of(&digits, exp10, max_digits), past_cap) {
        (Some(m), _) if m <= MAX_NANOS => m,
        // Kubernetes caps BinarySI at 2^63-1 silently; decimal is our deviation.
        _ if format == Format::BinarySI => MAX_NANOS,
        (Some(m), PastCap::Keep) => m, // < 10^38 ≤ i128::MAX
        (None, PastCap::Keep) => i128::MAX as u128,
        (_, PastCap::Refuse) => return Err(QuantityError::OutOfRange),
    };
    if format == Format::BinarySI && magnitude < NANOS_PER_UNIT as u128 {
        format = Format::DecimalSI;
    }
    let nanos = magnitude as i128; // ≤ i128::MAX
    Ok(Quantity {
        nanos: if lexed.negative { -nanos } else { nanos },
        format,
    })
}

/// A quantity string taken apart, nothing interpreted yet.
struct Lexed<'a> {
    negative: bool,
    int_digits: &'a [u8],
    frac_digits: &'a [u8],
    /// Suffix letters, an optional sign and digits (ASCII).
    suffix: &'a str,
}

/// Kubernetes' parseQuantityString: sign, integer digits, optional '.' and fraction
/// digits, then a suffix made of suffix letters, an optional sign and digits.
fn lex(s: &str) -> Result<Lexed<'_>, QuantityError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(QuantityError::FormatWrong);
    }
    let digits_from = |mut pos: usize| {
        while pos < b.len() && b[pos].is_ascii_digit() {
            pos += 1;
        }
        pos
    };
    let (negative, int_start) = match b[0] {
        b'-' => (true, 1),
        b'+' => (false, 1),
        _ => (false, 0),
    };
    let mut pos = digits_from(int_start);
    let int_digits = &b[int_start..pos];
    let mut frac_digits: &[u8] = &[];
    if pos < b.len() && b[pos] == b'.' {
        let frac_start = pos + 1;
        pos = digits_from(frac_start);
        frac_digits = &b[frac_start..pos];
    }
    let suffix_start = pos;
    while pos < b.len() && b"eEinumkKMGTP".contains(&b[pos]) {
        pos += 1;
    }
    if pos < b.len() && (b[pos] == b'-' || b[pos] == b'+') {
        pos += 1;
    }
    if digits_from(pos) != b.len() {
        return Err(QuantityError::FormatWrong);
    }
    Ok(Lexed {
        negative,
        int_digits,
        frac_digits,
        // Everything from suffix_start is ASCII, so this slice is on a char boundary.
        suffix: &s[suffix_start..],
    })
}

/// The significant digits, most significant first (no leading or trailing zeros), and the
/// power of ten of the last one (a binary suffix is applied by the caller).
fn significant(lexed: &Lexed<'_>, base: Base, exponent: i64) -> (Vec<u8>, i64) {
    let mut digits: Vec<u8> = lexed
        .int_digits
        .iter()
        .chain(lexed.frac_digits)
        .map(|d| d - b'0')
        .skip_while(|&d| d == 0)
        .collect();
    let mut exp10: i64 = -(lexed.frac_digits.len() as i64);
    if base == Base::Ten {
        exp10 += exponent;
    }
    while digits.last() == Some(&0) {
        digits.pop();
        exp10 += 1;
    }
    (digits, exp10)
}

/// ceil(digits × 10^(exp10 + 9)), computed on the digit string so that any number of
/// fraction digits and any exponent is exact; `None` past `max_digits` integer digits
/// (at most 38, so the result fits an `i128`).
fn nanos_of(digits: &[u8], exp10: i64, max_digits: i64) -> Option<u128> {
    let shift = exp10 + 9;
    let int_len = digits.len() as i64 + shift;
    if int_len > max_digits {
        return None;
    }
    if int_len <= 0 {
        return Some(1); // 0 < value < 1n: rounds up to 1n
    }
    let int_len = int_len as usize;
    let mut n: u128 = 0;
    for i in 0..int_len {
        n = n * 10 + u128::from(digits.get(i).copied().unwrap_or(0));
    }
    let sticky = digits
        .get(int_len..)
        .is_some_and(|r| r.iter().any(|&d| d != 0));
    Some(n + u128::from(sticky))
}

/// Multiplies a big-endian decimal digit string by `factor` (≤ 2^60) in place.
fn multiply_digits(digits: &mut Vec<u8>, factor: u64) {
    let mut carry: u128 = 0;
    for d in digits.iter_mut().rev() {
        let t = u128::from(*d) * u128::from(factor) + carry;
        *d = (t % 10) as u8;
        carry = t / 10;
    }
    let mut head = Vec::new();
    while carry > 0 {
        head.push((carry % 10) as u8);
        carry /= 10;
    }
    head.reverse();
    digits.splice(0..0, head);
}

// ---------------------------------------------------------------------------------------
// Canonical formatting
// ---------------------------------------------------------------------------------------

impl fmt::Display for Quantity {
    /// Kubernetes' canonical `String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nanos == 0 {
            return f.write_str("0");
        }
        let sign = if self.nanos < 0 { "-" } else { "" };
        let mag = self.nanos.unsigned_abs();
        const UNIT: u128 = NANOS_PER_UNIT as u128;
        let format = match self.format {
            Format::BinarySI => {
                // Below 1024 or not whole: printed as DecimalSI ("don't lose precision").
                if mag >= 1024 * UNIT && mag.is_multiple_of(UNIT) {
                    let mut m = mag / UNIT;
                    let mut pow = 0usize;
                    while m.is_multiple_of(1024) {
                        m /= 1024;
                        pow += 1;
                    }
                    const BIN: [&str; 7] = ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];
                    if let Some(suffix) = BIN.get(pow) {
                        return write!(f, "{sign}{m}{suffix}");
                    }
                    // Past Ei (only via arithmetic): current Kubernetes falls back to
                    // the exact decimal form.
                }
                Format::DecimalSI
            }
            other => other,
        };
        // Move all factors of ten into the exponent, then lower it to a multiple of 3.
        let mut m = mag;
        let mut exp: i32 = -9;
        while m.is_multiple_of(10) {
            m /= 10;
            exp += 1;
        }
        let r = exp.rem_euclid(3);
        m *= 10u128.pow(r as u32); // cannot overflow: at least 10^r was divided out
        exp -= r;
        let si = match exp {
            -9 => Some("n"),
            -6 => Some("u"),
            -3 => Some("m"),
            0 => Some(""),
            3 => Some("k"),
            6 => Some("M"),
            9 => Some("G"),
            12 => Some("T"),
            15 => Some("P"),
            18 => Some("E"),
            _ => None,
        };
        match (format, si) {
            (Format::DecimalSI, Some(suffix)) => write!(f, "{sign}{m}{suffix}"),
            // DecimalExponent, or DecimalSI past E (only via arithmetic).
            _ if exp == 0 => write!(f, "{sign}{m}"),
            _ => write!(f, "{sign}{m}e{exp}"),
        }
    }
}

// ---------------------------------------------------------------------------------------
// serde
// ---------------------------------------------------------------------------------------

impl serde::Serialize for Quantity {
    /// The canonical string, like Kubernetes' `MarshalJSON`.
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Quantity {
    /// A string (surrounding whitespace trimmed, like Kubernetes' `UnmarshalJSON`), a
    /// bare number, or null (zero), read with [`Quantity::read`]: what is deserialized was
    /// stored, so a decimal value past the cap is kept, not refused.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(QuantityVisitor)
    }
}

struct QuantityVisitor;

impl QuantityVisitor {
    fn from_text<E: serde::de::Error>(s: &str) -> Result<Quantity, E> {
        Quantity::read(s.trim()).map_err(E::custom)
    }
}

impl serde::de::Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a Kubernetes quantity (a string such as \"500m\" or \"1Gi\", or a number)")
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
        Self::from_text(v)
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
        Self::from_text(&v.to_string())
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
        Self::from_text(&v.to_string())
    }

    fn visit_i128<E: serde::de::Error>(self, v: i128) -> Result<Quantity, E> {
        Self::from_text(&v.to_string())
    }

    fn visit_u128<E: serde::de::Error>(self, v: u128) -> Result<Quantity, E> {
        Self::from_text(&v.to_string())
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
        if !v.is_finite() {
            return Err(E::custom(QuantityError::FormatWrong));
        }
        // Rust prints the shortest string that reads back as `v`, without an exponent.
        Self::from_text(&v.to_string())
    }

    fn visit_unit<E: serde::de::Error>(self) -> Result<Quantity, E> {
        Ok(Quantity::ZERO)
    }

    fn visit_none<E: serde::de::Error>(self) -> Result<Quantity, E> {
        Ok(Quantity::ZERO)
    }
}

#[cfg(test)]
mod tests {
    //! Tables transposed from Kubernetes' `quantity_test.go` (test names in the
    //! comments), then this crate's deviations, then properties and serde.

    use super::*;
    use Format::{BinarySI as Bin, DecimalExponent as DExp, DecimalSI as DSI};
    use proptest::prelude::*;

    /// Kubernetes' `decQuantity(m, exp)`: m × 10^exp units, as nanos.
    const fn dq(m: i128, exp: u32) -> i128 {
        m * 10i128.pow(exp + 9)
    }
    /// m × 10^-exp units, as nanos (exp ≤ 9).
    const fn dq_neg(m: i128, exp: u32) -> i128 {
        m * 10i128.pow(9 - exp)
    }
    const MAX: i128 = MAX_NANOS as i128;

    fn p(s: &str) -> Quantity {
        Quantity::parse(s).unwrap_or_else(|e| panic!("{s:?}: {e}"))
    }

    /// TestQuantityParse's table: input → (nanos, format).
    #[rustfmt::skip]
    const PARSE_TABLE: &[(&str, i128, Format)] = &[
        ("0", 0, DSI), ("0n", 0, DSI), ("0u", 0, DSI), ("0m", 0, DSI),
        ("0Ki", 0, Bin), ("0k", 0, DSI), ("0Mi", 0, Bin), ("0M", 0, DSI),
        ("0Gi", 0, Bin), ("0G", 0, DSI), ("0Ti", 0, Bin), ("0T", 0, DSI),
        // Quantity less numbers are allowed
        ("1", dq(1, 0), DSI),
        // Binary suffixes
        ("1Ki", dq(1024, 0), Bin), ("8Ki", dq(8 * 1024, 0), Bin),
        ("7Mi", dq(7 << 20, 0), Bin), ("6Gi", dq(6 << 30, 0), Bin),
        ("5Ti", dq(5 << 40, 0), Bin), ("4Pi", dq(4 << 50, 0), Bin),
        ("3Ei", dq(3 << 60, 0), Bin), ("10Ti", dq(10 << 40, 0), Bin),
        ("100Ti", dq(100 << 40, 0), Bin),
        // Decimal suffixes
        ("5n", dq_neg(5, 9), DSI), ("4u", dq_neg(4, 6), DSI), ("3m", dq_neg(3, 3), DSI),
        ("9", dq(9, 0), DSI), ("8k", dq(8, 3), DSI), ("50k", dq(5, 4), DSI),
        ("7M", dq(7, 6), DSI), ("6G", dq(6, 9), DSI), ("5T", dq(5, 12), DSI),
        ("40T", dq(4, 13), DSI), ("300T", dq(3, 14), DSI), ("2P", dq(2, 15), DSI),
        ("1E", dq(1, 18), DSI),
        // Decimal exponents
        ("1E-3", dq_neg(1, 3), DExp), ("1e3", dq(1, 3), DExp), ("1E6", dq(1, 6), DExp),
        ("1e9", dq(1, 9), DExp), ("1E12", dq(1, 12), DExp), ("1e15", dq(1, 15), DExp),
        ("1E18", dq(1, 18), DExp),
        // Nonstandard but still parsable
        ("1e14", dq(1, 14), DExp), ("1e13", dq(1, 13), DExp), ("1e3", dq(1, 3), DExp),
        ("100.035k", dq(100035, 0), DSI),
        // Things that look like floating point
        ("0.001", dq_neg(1, 3), DSI), ("0.0005k", dq_neg(5, 1), DSI),
        ("0.005", dq_neg(5, 3), DSI), ("0.05", dq_neg(5, 2), DSI),
        ("0.5", dq_neg(5, 1), DSI), ("0.00050k", dq_neg(5, 1), DSI),
        ("0.00500", dq_neg(5, 3), DSI), ("0.05000", dq_neg(5, 2), DSI),
        ("0.50000", dq_neg(5, 1), DSI), ("0.5e0", dq_neg(5, 1), DExp),
        ("0.5e-1", dq_neg(5, 2), DExp), ("0.5e-2", dq_neg(5, 3), DExp),
        ("0.5e0", dq_neg(5, 1), DExp), ("10.035M", dq(10035, 3), DSI),
        ("1.2e3", dq(12, 2), DExp), ("1.3E+6", dq(13, 5), DExp),
        ("1.40e9", dq(14, 8), DExp), ("1.53E12", dq(153, 10), DExp),
        ("1.6e15", dq(16, 14), DExp), ("1.7E18", dq(17, 17), DExp),
        ("9.01", dq_neg(901, 2), DSI), ("8.1k", dq(81, 2), DSI),
        ("7.123456M", dq(7123456, 0), DSI), ("6.987654321G", dq(6987654321, 0), DSI),
        ("5.444T", dq(5444, 9), DSI), ("40.1T", dq(401, 11), DSI),
        ("300.2T", dq(3002, 11), DSI), ("2.5P", dq(25, 14), DSI),
        ("1.01E", dq(101, 16), DSI),
        // Things that saturate/round
        ("3.001n", dq_neg(4, 9), DSI), ("1.1E-9", dq_neg(2, 9), DExp),
        ("0.0000000001", dq_neg(1, 9), DSI), ("0.0000000005", dq_neg(1, 9), DSI),
        ("0.00000000050", dq_neg(1, 9), DSI), ("0.5e-9", dq_neg(1, 9), DExp),
        ("0.9n", dq_neg(1, 9), DSI), ("0.00000012345", dq_neg(124, 9), DSI),
        ("0.00000012354", dq_neg(124, 9), DSI),
        ("9Ei", MAX, Bin), ("9223372036854775807Ki", MAX, Bin),
        // ("12E", 12e18) is beyond our cap: see rejects_decimal_values_beyond_the_cap.
        // We'll accept fractional binary stuff, too.
        ("100.035Ki", dq_neg(10243584, 2), Bin), ("0.5Mi", dq(512 * 1024, 0), Bin),
        ("0.05Gi", dq_neg(536870912, 1), Bin), ("0.025Ti", dq_neg(274877906944, 1), Bin),
        // Things written by trolls
        ("0.000000000001Ki", dq_neg(2, 9), DSI), // rounds up, changes format
        (".001", dq_neg(1, 3), DSI), (".0001k", dq_neg(100, 3), DSI),
        ("1.", dq(1, 0), DSI), ("1.G", dq(1, 9), DSI),
    ];

    #[test]
    fn parses_kubernetes_quantity_table_with_sign_variants() {
        for &(input, nanos, format) in PARSE_TABLE {
            let want = nanos;
            for (prefix, sign) in [("", 1), ("-", -1), ("+", 1)] {
                let text = format!("{prefix}{input}");
                let got = p(&text);
                assert_eq!(got.nanos(), sign * want, "{text}");
                assert_eq!(got.format(), format, "{text}");
            }
        }
    }

    /// TestQuantityParse's invalid list, TestInterpretExponentInt32Bounds, plus `1e`
    /// variants (derived from Kubernetes' scanner; the error is the one Go returns).
    #[rustfmt::skip]
    const REJECTS: &[(&str, QuantityError)] = &[
        ("", QuantityError::FormatWrong),
        ("1.1.M", QuantityError::FormatWrong), ("1+1.0M", QuantityError::FormatWrong),
        ("0.1mi", QuantityError::Suffix), ("0.1am", QuantityError::FormatWrong),
        ("aoeu", QuantityError::FormatWrong), (".5i", QuantityError::Suffix),
        ("1i", QuantityError::Suffix), ("-3.01i", QuantityError::Suffix),
        ("-3.01e-", QuantityError::Suffix),
        // an exponent outside the int32 scale is rejected rather than truncated
        ("1e4294967297", QuantityError::Suffix),
        // surrounding whitespace is forbidden
        (" 1", QuantityError::FormatWrong), ("1 ", QuantityError::FormatWrong),
        // TestInterpretExponentInt32Bounds' rejected exponents
        ("1E2147483648", QuantityError::Suffix), ("1E-2147483648", QuantityError::Suffix),
        ("1E4294967297", QuantityError::Suffix), ("1E8589934592", QuantityError::Suffix),
        ("1E9223372036854775807", QuantityError::Suffix),
        ("1E9223372036854775808", QuantityError::Suffix),
        ("1E6024865272343", QuantityError::Suffix),
        // "1e" variants
        ("1e", QuantityError::Suffix), ("1e+", QuantityError::Suffix),
        ("1e-", QuantityError::Suffix), ("1E+", QuantityError::Suffix),
        ("1ee3", QuantityError::Suffix), ("1eKi", QuantityError::Suffix),
        ("1Ki3", QuantityError::Suffix), ("1ke3", QuantityError::Suffix),
        ("1e1e", QuantityError::FormatWrong), ("1e1.5", QuantityError::FormatWrong),
        ("1e+-3", QuantityError::FormatWrong), ("1e 3", QuantityError::FormatWrong),
        // other shapes
        ("+-1", QuantityError::Suffix), ("--1", QuantityError::Suffix),
        ("1..", QuantityError::FormatWrong), ("1x", QuantityError::FormatWrong),
        ("Non-Numeric", QuantityError::FormatWrong), ("1\u{b5}", QuantityError::FormatWrong),
        ("\u{ff11}", QuantityError::FormatWrong), ("\t1", QuantityError::FormatWrong),
        ("1\n", QuantityError::FormatWrong), ("1ki", QuantityError::Suffix),
        ("1KI", QuantityError::FormatWrong), ("1K", QuantityError::Suffix),
        ("1mm", QuantityError::Suffix),
    ];

    #[test]
    fn rejects_what_kubernetes_rejects_with_its_error() {
        for (input, want) in REJECTS {
            assert_eq!(Quantity::parse(input).as_ref(), Err(want), "{input:?}");
        }
    }

    #[test]
    fn error_messages_are_kubernetes_messages() {
        assert_eq!(
            QuantityError::FormatWrong.to_string(),
            "quantities must match the regular expression \
             '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        );
        assert_eq!(
            QuantityError::Suffix.to_string(),
            "unable to parse quantity's suffix"
        );
        assert_eq!(
            QuantityError::Numeric.to_string(),
            "unable to parse numeric part of quantity"
        );
        assert!(
            QuantityError::OutOfRange
                .to_string()
                .contains("out of range")
        );
    }

    /// TestInterpretExponentInt32Bounds' accepted exponents, through parse.
    #[test]
    fn accepts_exponents_up_to_int32_max_in_magnitude() {
        assert_eq!(p("1e14"), Quantity::from_units(100_000_000_000_000, DSI));
        assert_eq!(p("0E2147483647").nanos(), 0);
        assert_eq!(p("0E-2147483647").format(), DExp);
        // 10^-(2^31-1) rounds up to one nano; 10^(2^31-1) is beyond our cap.
        assert_eq!(p("1E-2147483647").nanos(), 1);
        assert_eq!(
            Quantity::parse("1E2147483647"),
            Err(QuantityError::OutOfRange)
        );
    }

    /// TestParseQuantityString ("." and "-." are zero) and Kubernetes' digit-less quirk:
    /// its inf.Dec slow path (below nano, Pi, Ei) cannot read a number without digits.
    #[test]
    fn digitless_numbers_are_zero_except_on_kubernetes_slow_path() {
        for zero in [
            ".", "-.", "+.", "+", "-", ".Ki", ".Ti", ".e-9", ".n", "-.E", "00", "-0",
        ] {
            assert!(p(zero).is_zero(), "{zero}");
        }
        assert_eq!(p(".Ki").format(), Bin);
        for numeric in [".Pi", ".Ei", "-.Ei", ".e-10", ".E-2147483647"] {
            assert_eq!(
                Quantity::parse(numeric),
                Err(QuantityError::Numeric),
                "{numeric}"
            );
        }
        // With a digit the slow path reads fine.
        assert_eq!(p("1.Ei"), p("1Ei"));
        assert_eq!(p("0.e-10").nanos(), 0);
    }

    /// TestQuantityParseZero.
    #[test]
    fn zero_prints_as_zero() {
        assert_eq!(p("0").to_string(), "0");
        assert_eq!(Quantity::ZERO.to_string(), "0");
        assert_eq!(p("-0.0Ki").to_string(), "0");
    }

    /// TestQuantityString: (nanos, format, canonical, an alternate spelling).
    #[rustfmt::skip]
    fn string_table() -> Vec<(i128, Format, &'static str, &'static str)> {
        vec![
            (dq(1 << 30, 0), Bin, "1Gi", "1024Mi"),
            (dq(300 << 20, 0), Bin, "300Mi", "307200Ki"),
            (dq(6 * 1024, 0), Bin, "6Ki", ""),
            (dq(1001 << 30, 0), Bin, "1001Gi", "1025024Mi"),
            (dq(1 << 40, 0), Bin, "1Ti", "1024Gi"),
            (dq(5, 0), Bin, "5", "5000m"),
            (dq_neg(500, 3), Bin, "500m", "0.5"),
            (dq(1, 9), DSI, "1G", "1000M"),
            (dq(1000, 6), DSI, "1G", "0.001T"),
            (dq(1000000, 3), DSI, "1G", ""),
            (dq(1000000000, 0), DSI, "1G", ""),
            (dq_neg(1, 3), DSI, "1m", "1000u"),
            (dq_neg(80, 3), DSI, "80m", ""),
            (dq_neg(1080, 3), DSI, "1080m", "1.08"),
            (dq_neg(108, 2), DSI, "1080m", "1080000000n"),
            (dq_neg(1080, 3), DSI, "1080m", ""), // decQuantity(10800, -4)
            (dq(300, 6), DSI, "300M", ""),
            (dq(1, 12), DSI, "1T", ""),
            (dq(1, 18), DSI, "1E", ""),
            // Past `E` and `Ei` (deviation 2): prints_values_beyond_e_in_exponent_form,
            // prints_binary_values_past_ei_as_exact_decimal.
            (dq(1234567, 6), DSI, "1234567M", ""),
            (dq_neg(1234567, 3), Bin, "1234567m", ""),
            (dq(3, 3), DSI, "3k", ""),
            (dq(1025, 0), Bin, "1025", ""),
            (0, DSI, "0", ""),
            (0, Bin, "0", ""),
            (dq(1, 9), DExp, "1e9", ".001e12"),
            (dq_neg(1, 3), DExp, "1e-3", "0.001e0"),
            (dq_neg(1, 9), DExp, "1e-9", "1000e-12"),
            (dq_neg(80, 3), DExp, "80e-3", ""),
            (dq(300, 6), DExp, "300e6", ""),
            (dq(1, 12), DExp, "1e12", ""),
            (dq(1, 3), DExp, "1e3", ""),
            (dq(3, 3), DExp, "3e3", ""),
            (dq(3, 3), DSI, "3k", ""),
            (0, DExp, "0", "00"),
            (dq_neg(1, 9), DSI, "1n", ""),
            (dq_neg(80, 9), DSI, "80n", ""),
            (dq_neg(1080, 9), DSI, "1080n", ""),
            (dq_neg(1080, 9), DSI, "1080n", ""), // decQuantity(108, -8)
            (dq_neg(1080, 9), DSI, "1080n", ""), // decQuantity(10800, -10)
            (dq_neg(1, 6), DSI, "1u", ""),
            (dq_neg(80, 6), DSI, "80u", ""),
            (dq_neg(1080, 6), DSI, "1080u", ""),
        ]
    }

    #[test]
    fn prints_kubernetes_canonical_form_and_reparses_alternates_to_it() {
        for (nanos, format, want, alternate) in string_table() {
            let q = Quantity::from_nanos(nanos, format);
            assert_eq!(q.to_string(), want, "{q:?}");
            assert_eq!(p(want).to_string(), want, "reparse {want}");
            assert_eq!(p(want), q, "reparse value {want}");
            if !alternate.is_empty() {
                assert_eq!(p(alternate).to_string(), want, "alternate {alternate}");
            }
            if nanos != 0 {
                assert_eq!((-q).to_string(), format!("-{want}"), "negated {want}");
            }
        }
    }

    /// TestQuantityParseEmit, with its negative variants.
    #[test]
    fn parse_then_print_is_canonical() {
        #[rustfmt::skip]
        let table = [
            ("1Ki", "1Ki"), ("1Mi", "1Mi"), ("1Gi", "1Gi"), ("1024Mi", "1Gi"), ("1000M", "1G"),
            (".001Ki", "1024m"), (".000001Ki", "1024u"), (".000000001Ki", "1024n"),
            (".000000000001Ki", "2n"),
        ];
        for (input, want) in table {
            assert_eq!(p(input).to_string(), want, "{input}");
            assert_eq!(
                p(&format!("-{input}")).to_string(),
                format!("-{want}"),
                "-{input}"
            );
        }
    }

    /// Deviation 7: inputs Kubernetes echoes as typed right after parsing print in the
    /// canonical form here.
    #[test]
    fn prints_the_canonical_form_where_kubernetes_echoes_the_input() {
        for (input, want) in [
            ("9.49e2", "949"),
            ("11.G", "11G"),
            ("1.G", "1G"),
            ("+1", "1"),
            ("+1Ki", "1Ki"),
        ] {
            let q = p(input);
            assert_eq!(q.to_string(), want, "{input}");
            assert_eq!(serde_json::to_string(&q).unwrap(), format!("\"{want}\""));
        }
    }

    /// The examples of the design doc and the task.
    #[test]
    fn binary_values_off_1024_print_plain_and_read_back_as_decimal() {
        // Kubernetes: ParseQuantity("2.9296875Ki").String() == "3000", which reads back as
        // DecimalSI and prints "3k". Found by the quantity fuzz target's fixed-point law.
        for (binary, plain, decimal) in [
            ("2.9296875Ki", "3000", "3k"),
            (
                "337337922203687.5Ki",
                "345434032336576000",
                "345434032336576k",
            ),
        ] {
            let q = p(binary);
            assert_eq!(q.format(), Format::BinarySI);
            assert_eq!(q.to_string(), plain);
            let back = p(plain);
            assert_eq!(back, q);
            assert_eq!(back.format(), Format::DecimalSI);
            assert_eq!(back.to_string(), decimal);
            assert_eq!(p(decimal).to_string(), decimal);
        }
    }

    #[test]
    fn prints_design_examples() {
        #[rustfmt::skip]
        let table = [
            ("1.5", "1500m"), ("1.5Gi", "1536Mi"), ("1000", "1k"), ("0", "0"), ("100Mi", "100Mi"),
            ("1e3", "1e3"), ("0.000000001", "1n"), ("2.5Gi", "2560Mi"), ("1.1Ki", "1126400m"),
            ("1536Ki", "1536Ki"), ("1048576", "1048576"), ("1048576Ki", "1Gi"),
            ("1.5e3", "1500"), ("1500e-3", "1500e-3"), ("12e6", "12e6"), ("4Ei", "4Ei"),
            ("9.223372036854775807E", "9223372036854775807"), ("8Ei", "9223372036854775807"),
        ];
        for (input, want) in table {
            assert_eq!(p(input).to_string(), want, "{input}");
        }
    }

    /// TestMilliNewSet, TestNewSet, TestNewScaledSet ("invalidFormatDefaultsToExponent"
    /// is DecimalExponent: our enum has no invalid format).
    #[test]
    fn constructors_print_like_kubernetes_new_quantity() {
        let milli = [
            (1, DSI, "1m", true),
            (1000, DSI, "1", true),
            (1234000, DSI, "1234", true),
            (1024, Bin, "1024m", false),
            (1000000, DExp, "1e3", true),
            (1024 * 1024, Bin, "1048576m", false),
        ];
        for (v, format, want, exact) in milli {
            let q = Quantity::from_milli(v, format);
            assert_eq!(q.to_string(), want);
            if exact {
                assert_eq!(p(want).milli_value(), i128::from(v));
            }
        }
        let units = [
            (1, DSI, "1"),
            (1000, DSI, "1k"),
            (1234000, DSI, "1234k"),
            (1024, Bin, "1Ki"),
            (1000000, DExp, "1e6"),
            (1024 * 1024, Bin, "1Mi"),
        ];
        for (v, format, want) in units {
            let q = Quantity::from_units(v, format);
            assert_eq!(q.to_string(), want);
            assert_eq!(p(want).value(), i128::from(v));
        }
        #[rustfmt::skip]
        let scaled = [
            (1, 1, "1n"), (1000, 1, "1u"), (1, 1_000, "1u"), (1000, 1_000, "1m"),
            (1, 1_000_000, "1m"), (1000, 1_000_000, "1"), (1, 1_000_000_000, "1"),
            (0, 1, "0"), (0, 1_000, "0"), (0, 1_000_000, "0"), (0, 1_000_000_000, "0"),
        ];
        for (v, scale, want) in scaled {
            let q = Quantity::from_nanos(v * scale, DSI);
            assert_eq!(q.to_string(), want);
            assert_eq!(p(want), q);
        }
    }

    /// Deviation 8: away from zero for every value, including those Kubernetes holds as a
    /// big decimal (`-.484785E-7466`, `-9.5000000001Gi`, `-1.50000000000000000000`,
    /// `-1.5n`), where its `Value()` returns 1, 8246196746, 0 and 1.
    #[test]
    fn value_and_milli_value_round_away_from_zero() {
        #[rustfmt::skip]
        let table = [
            ("-.484785E-7466", -1, -1), (".484785E-7466", 1, 1),
            ("-.484785E-1", -1, -49), (".484785E-1", 1, 49),
            ("-0.0005", -1, -1), ("0.0005", 1, 1), ("-1500m", -2, -1500), ("1500m", 2, 1500),
            ("-9.5000000001Gi", -10200547329, -10200547328108),
            ("9.5000000001Gi", 10200547329, 10200547328108),
            ("-1", -1, -1000), ("1", 1, 1000), ("0", 0, 0),
            ("-1.5", -2, -1500), ("-1.50000000000000000000", -2, -1500),
            ("-2n", -1, -1), ("-1.5n", -1, -1),
        ];
        for (input, value, milli) in table {
            let q = p(input);
            assert_eq!(q.value(), value, "{input}");
            assert_eq!(q.milli_value(), milli, "{input}");
            assert_eq!(
                q.rounded_to_units(DSI).nanos(),
                value * NANOS_PER_UNIT,
                "{input}"
            );
            assert_eq!(
                q.rounded_to_milli(DSI).nanos(),
                milli * 1_000_000,
                "{input}"
            );
        }
        // Past int64 a rounded value stays whole, its sign kept; saturated at i128.
        for (input, nanos) in [("12E", 12 * 10i128.pow(27)), ("-12E", -12 * 10i128.pow(27))] {
            let q = Quantity::read(input).unwrap();
            assert_eq!(q.rounded_to_milli(DSI).nanos(), nanos, "{input}");
            assert_eq!(q.rounded_to_units(Bin).nanos(), nanos, "{input}");
        }
        let max = Quantity::read("1e300").unwrap();
        assert_eq!(max.rounded_to_units(DSI).nanos(), i128::MAX);
    }

    /// TestQuantityCmp and the nano-representable rows of TestQuantityCmpInt64AndDec.
    #[test]
    fn compares_by_value_like_kubernetes_cmp() {
        use Ordering::*;
        for (x, y, want) in [
            ("0", "0", Equal),
            ("100m", "50m", Greater),
            ("50m", "100m", Less),
            ("10000T", "100Gi", Greater),
        ] {
            assert_eq!(p(x).cmp(&p(y)), want, "{x} vs {y}");
            assert_eq!(p(y).cmp(&p(x)), want.reverse(), "{y} vs {x}");
        }
        let i64max = i128::from(i64::MAX);
        let i64min = i128::from(i64::MIN);
        // intQuantity(1e18, -17) = 10 units = 10^10 nanos
        let ten_units = 1_000_000_000_000_000_000i128 / 100_000_000;
        #[rustfmt::skip]
        let table = [
            (dq_neg(901, 2), dq_neg(901, 2), Equal), (dq_neg(90, 1), dq_neg(901, 2), Less),
            (dq_neg(901, 2), dq_neg(900, 2), Greater), (0, 0, Equal),
            (dq_neg(800, 3), dq(1, 0), Less), (dq_neg(800, 3), dq_neg(79, 2), Greater),
            (dq(i64max, 0), dq_neg(1, 1), Greater), (dq(i64max, 1), dq(1, 0), Greater),
            (dq(i64max, 1), dq(1, 1), Greater), (dq(i64max, 1), 0, Greater),
            (dq(i64min, 0), 0, Less),
            (ten_units, dq(1, 1), Equal), (ten_units, dq(-10, 0), Greater), // (1e18, -17)
            (-ten_units, dq(-10, 0), Equal), (ten_units, dq(1, 0), Greater),
        ];
        for (a, b, want) in table {
            let (a, b) = (Quantity::from_nanos(a, DSI), Quantity::from_nanos(b, Bin));
            assert_eq!(a.cmp(&b), want, "{a:?} vs {b:?}");
            assert_eq!(b.cmp(&a), want.reverse(), "{b:?} vs {a:?}");
            assert_eq!(a == b, want == Equal);
        }
    }

    #[test]
    fn equality_and_hash_ignore_format() {
        use std::collections::HashSet;
        let set: HashSet<Quantity> = ["1", "1000m", "1e0", "1000000000n"].map(p).into();
        assert_eq!(set.len(), 1);
        assert_eq!(p("1Ki"), p("1024"));
        assert_ne!(p("1Ki"), p("1k"));
    }

    /// TestQuantityAddZeroPreservesSuffix and TestQuantitySubZeroPreservesSuffix.
    #[test]
    fn adding_or_subtracting_zero_preserves_the_suffix() {
        for v in ["100m", "1Gi"] {
            let q = p(v);
            assert_eq!((q + Quantity::ZERO).to_string(), v);
            assert_eq!((Quantity::ZERO + q).to_string(), v);
            assert_eq!((q - Quantity::ZERO).to_string(), v);
            assert_eq!((Quantity::ZERO - q).to_string(), (-q).to_string());
        }
        assert_eq!((p("0") - p("1Gi")).to_string(), "-1Gi");
    }

    /// TestAdd and TestSub: values, and the format rule of Kubernetes' Add/Sub.
    #[test]
    fn add_and_sub_keep_the_receivers_format_unless_it_is_zero() {
        let q = |units: i64, f| Quantity::from_units(units, f);
        #[rustfmt::skip]
        let adds = [
            (q(10, DSI), q(10, DSI), q(20, DSI), DSI), (q(10, DSI), q(1, Bin), q(11, DSI), DSI),
            (q(10, Bin), q(1, DSI), q(11, Bin), Bin), (q(0, DSI), q(50, DSI), q(50, DSI), DSI),
            (q(50, DSI), q(0, DSI), q(50, DSI), DSI), (q(0, DSI), q(0, DSI), q(0, DSI), DSI),
            (q(0, DSI), q(1, Bin), q(1, Bin), Bin),
        ];
        for (a, b, want, format) in adds {
            let mut c = a;
            c += b;
            assert_eq!(c, want);
            assert_eq!(c.format(), format);
            assert_eq!(a.saturating_add(b).format(), format);
        }
        #[rustfmt::skip]
        let subs = [
            (q(10, DSI), q(10, DSI), q(0, DSI), DSI), (q(10, DSI), q(1, Bin), q(9, DSI), DSI),
            (q(10, Bin), q(1, DSI), q(9, Bin), Bin), (q(0, DSI), q(50, DSI), q(-50, DSI), DSI),
            (q(50, DSI), q(0, DSI), q(50, DSI), DSI), (q(0, DSI), q(0, DSI), q(0, DSI), DSI),
            (q(0, DSI), q(1, Bin), q(-1, Bin), Bin),
        ];
        for (a, b, want, format) in subs {
            let mut c = a;
            c -= b;
            assert_eq!(c, want);
            assert_eq!(c.format(), format);
        }
    }

    /// TestMul (our products are exact within i128 nanos, so every row holds).
    #[test]
    fn multiplies_exactly_like_kubernetes_mul() {
        let mx = i64::MAX;
        let mn = i64::MIN;
        let u = |v: i128| Quantity::from_nanos(v * NANOS_PER_UNIT, DSI);
        #[rustfmt::skip]
        let table: [(i128, i64, i128); 28] = [
            (10, 10, 100), (10, 1, 10), (10, 1, 10), (0, 50, 0), (50, 0, 0), (0, 0, 0),
            (10, -10, -100), (-10, 1, -10), (10, -1, -10), (-50, 0, 0), (-50, -50, 2500),
            (0, -50, 0), (mx.into(), 0, 0), (mx.into(), 1, mx.into()), (mx.into(), -1, -i128::from(mx)),
            ((mx / 2).into(), 2, i128::from(mx / 2) * 2), ((mx / -2).into(), -2, i128::from(mx / 2) * 2),
            (mx.into(), 2, i128::from(mx) * 2), (mx.into(), 10, i128::from(mx) * 10),
            (mx.into(), -10, -i128::from(mx) * 10), (mn.into(), 0, 0), (mn.into(), 1, mn.into()),
            (mn.into(), -1, -i128::from(mn)), ((mn / 2).into(), 2, mn.into()),
            ((mn / -2).into(), -2, mn.into()), (mn.into(), 2, i128::from(mn) * 2),
            (mn.into(), 10, i128::from(mn) * 10), (mn.into(), -10, -i128::from(mn) * 10),
        ];
        for (a, n, want) in table {
            assert_eq!(u(a).saturating_mul(n), u(want), "{a} × {n}");
        }
        let bin = Quantity::from_units(10, Bin).saturating_mul(-1);
        assert_eq!((bin.nanos(), bin.format()), (dq(-10, 0), Bin));
    }

    /// TestQuantityNeg, TestNeg, TestBinarySIZeroExponentString.
    #[test]
    fn negation_and_plain_binary_integers_print_like_kubernetes() {
        assert_eq!((-p("9.01")).to_string(), "-9010m");
        assert_eq!(-Quantity::ZERO, Quantity::ZERO);
        assert_eq!(-(-p("10")), p("10"));
        for (units, want) in [(2000, "2000"), (-2000, "-2000")] {
            assert_eq!(Quantity::from_units(units, Bin).to_string(), want);
        }
    }

    /// TestNegAndSubAtMostNegative, TestSubMostNegativeCrossScale,
    /// TestZeroSubMostNegativeInheritsFormat: exact past int64 in i128 nanos.
    #[test]
    fn arithmetic_past_int64_stays_exact() {
        let most_negative = Quantity::from_units(i64::MIN, DSI);
        assert_eq!((-most_negative).to_string(), "9223372036854775808");
        assert_eq!(
            (Quantity::ZERO - most_negative).to_string(),
            "9223372036854775808"
        );
        assert_eq!((p("1") - most_negative).to_string(), "9223372036854775809");
        assert_eq!((p("10") - most_negative).to_string(), "9223372036854775818");
        let most_negative_milli = Quantity::from_milli(i64::MIN, DSI);
        assert_eq!((-most_negative_milli).to_string(), "9223372036854775808m");
        assert_eq!(
            (p("1m") - most_negative_milli).to_string(),
            "9223372036854775809m"
        );
        let inherited = Quantity::ZERO - Quantity::from_units(i64::MIN, Bin);
        assert_eq!(inherited.format(), Bin);
        assert_eq!(inherited.to_string(), "8Ei");
        // Kubernetes parses "8Ei" back to 2^63-1 (its BinarySI cap), so do we.
        assert_eq!(p("8Ei").nanos(), MAX);
    }

    /// Deviation 2: printed exactly (Kubernetes up to 1.37.0-beta.0 prints `1`); parsing it
    /// back is beyond our cap (deviation 1).
    #[test]
    fn prints_binary_values_past_ei_as_exact_decimal() {
        let q = p("1Ei").saturating_mul(1024);
        assert_eq!(q.to_string(), "1180591620717411303424");
        assert_eq!(
            serde_json::to_string(&q).unwrap(),
            "\"1180591620717411303424\""
        );
        assert_eq!(
            Quantity::parse(&q.to_string()),
            Err(QuantityError::OutOfRange)
        );
    }

    /// Deviation 2: values past `E` print in exponent form (Kubernetes up to 1.37.0-beta.0
    /// prints the bare mantissa, `1` for 10²¹); they are beyond our parse cap, so they only
    /// arise from arithmetic.
    #[test]
    fn prints_values_beyond_e_in_exponent_form() {
        for (nanos, want, alternate) in [
            (dq(1, 21), "1e21", "1000E"),
            (dq(5, 21), "5e21", "5000E"),
            (dq(1, 24), "1e24", "1000000E"),
        ] {
            let q = Quantity::from_nanos(nanos, DSI);
            assert_eq!(q.to_string(), want);
            assert_eq!((-q).to_string(), format!("-{want}"));
            assert_eq!(Quantity::parse(want), Err(QuantityError::OutOfRange));
            assert_eq!(Quantity::parse(alternate), Err(QuantityError::OutOfRange));
        }
        assert_eq!(
            Quantity::from_nanos(i128::MAX, DSI).to_string(),
            i128::MAX.to_string() + "n"
        );
        assert_eq!(
            Quantity::from_nanos(i128::MIN, Bin).to_string(),
            format!("{}n", i128::MIN)
        );
    }

    #[test]
    fn rejects_decimal_values_beyond_the_cap() {
        assert_eq!(
            p("9223372036854775807"),
            Quantity::from_units(i64::MAX, DSI)
        );
        assert_eq!(
            p("-9223372036854775807"),
            Quantity::from_units(-i64::MAX, DSI)
        );
        for input in [
            "12E", // TestQuantityParse: Kubernetes keeps 12e18
            "9223372036854775808",
            "-9223372036854775808",
            "9223372036854775807.000000001",
            "9223372036854775807.0000000000000001",
            "9.3E",
            "1e19",
            "1e1000",
            "18446744073709551616",
            "100000000000000000000000000000000000000000000000",
        ] {
            assert_eq!(
                Quantity::parse(input),
                Err(QuantityError::OutOfRange),
                "{input}"
            );
        }
    }

    #[test]
    fn clamps_binary_values_beyond_the_cap_like_kubernetes() {
        for input in [
            "8Ei",
            "9Ei",
            "8.5Ei",
            "9223372036854775807Ki",
            "100000000000000Pi",
        ] {
            let q = p(input);
            assert_eq!((q.nanos(), q.format()), (MAX, Bin), "{input}");
            assert_eq!(p(&format!("-{input}")).nanos(), -MAX, "-{input}");
        }
        // Not whole below the cap: printed as DecimalSI ("don't lose precision").
        assert_eq!(
            p("7.99999999Ei").to_string(),
            "9223372025325560761931530240n"
        );
    }

    #[test]
    fn rounds_long_fractions_up_to_the_next_nano_exactly() {
        #[rustfmt::skip]
        let table = [
            ("1.0000000000000000000000000000000000000001", 1_000_000_001, DSI),
            ("-1.0000000000000000000000000000000000000001", -1_000_000_001, DSI),
            ("1.000000000000000000000000000000000000000", 1_000_000_000, DSI),
            ("0.000000000000000000000000000000000000000001", 1, DSI),
            ("100000000000000000000e-20", 1_000_000_000, DExp),
            ("1e-1000", 1, DExp),
            ("1.0000000000000000000000000000000000000001Ki", 1_024_000_000_001, Bin),
            ("0.0000000000000000000000000000000000000001Ei", 1, DSI),
            ("0.00000000000000000000001Ei", 11_530, DSI), // 2^60 × 1e-23 = 11529.215… nanos
            ("1.5Ki", 1_536_000_000_000, Bin),
            ("0.1Ki", 102_400_000_000, Bin),
        ];
        for (input, nanos, format) in table {
            let q = p(input);
            assert_eq!((q.nanos(), q.format()), (nanos, format), "{input}");
        }
    }

    #[test]
    fn law_three_times_333m_is_at_most_one_and_three_times_334m_exceeds_it() {
        let one = p("1");
        assert!(p("333m").saturating_mul(3) <= one);
        assert!(one < p("334m").saturating_mul(3));
    }

    #[test]
    fn sub_clamped_never_goes_below_zero() {
        assert_eq!(p("1").sub_clamped(p("2")), Quantity::ZERO);
        assert_eq!(p("2Gi").sub_clamped(p("1Gi")).to_string(), "1Gi");
        assert_eq!(p("1Gi").sub_clamped(p("2Gi")).format(), Bin);
    }

    #[test]
    fn arithmetic_saturates_at_i128_bounds() {
        let top = Quantity::from_nanos(i128::MAX, DSI);
        assert_eq!((top + p("1n")).nanos(), i128::MAX);
        assert_eq!((-top - p("2n")).nanos(), i128::MIN);
        assert_eq!(top.saturating_mul(2).nanos(), i128::MAX);
        assert_eq!(top.saturating_mul(-2).nanos(), i128::MIN);
        assert_eq!(top.checked_add(p("1n")), None);
        assert_eq!(p("1").checked_add(p("1")), Some(p("2")));
        assert_eq!(
            Quantity::from_nanos(i128::MIN, DSI).abs().nanos(),
            i128::MAX
        );
    }

    #[test]
    fn whole_sign_and_sum_helpers() {
        assert!(p("2").is_whole() && p("2k").is_whole() && !p("1500m").is_whole());
        assert!(p("-1500m").is_negative() && !p("0").is_negative() && p("1n").is_positive());
        let total: Quantity = ["0", "1Gi", "512Mi"].map(p).iter().sum();
        assert_eq!(total.to_string(), "1536Mi");
        let total: Quantity = ["250m", "750m"].map(p).into_iter().sum();
        assert_eq!(total.to_string(), "1");
        assert_eq!("1.5".parse::<Quantity>(), Ok(p("1500m")));
        assert_eq!(Quantity::default(), Quantity::ZERO);
        assert_eq!(Format::default(), DSI);
        assert_eq!(Bin.as_str(), "BinarySI");
        assert_eq!(p("1Ki").with_format(DSI).to_string(), "1024");
    }

    // ---- serde ----------------------------------------------------------------------

    #[test]
    fn serializes_as_the_canonical_string() {
        assert_eq!(serde_json::to_string(&p("1.5")).unwrap(), "\"1500m\"");
        assert_eq!(serde_json::to_string(&p("1.5Gi")).unwrap(), "\"1536Mi\"");
        assert_eq!(serde_json::to_string(&Quantity::ZERO).unwrap(), "\"0\"");
    }

    /// TestJSONWhitespace, plus strings, numbers and null.
    #[test]
    fn deserializes_json_strings_numbers_and_null() {
        #[rustfmt::skip]
        let table = [
            (r#"" 1""#, "1"), (r#""1 ""#, "1"), ("1", "1"), (" 1", "1"), ("1 ", "1"),
            ("10", "10"), ("-1", "-1"), (" -1", "-1"),
            (r#""1.5Gi""#, "1536Mi"), (r#""100m""#, "100m"), ("1.5", "1500m"), ("0.1", "100m"),
            ("-0.25", "-250m"), ("1000", "1k"), ("1e3", "1k"), ("9223372036854775807", "9223372036854775807"),
            ("1e-9", "1n"), ("null", "0"),
        ];
        for (json, want) in table {
            let q: Quantity = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(q.to_string(), want, "{json}");
        }
        for json in [r#""1.1.M""#, r#""""#, "true", "[]"] {
            assert!(serde_json::from_str::<Quantity>(json).is_err(), "{json}");
        }
        // Past the cap: kept (stored values are read, not parsed: `Quantity::read`).
        for (json, nanos) in [
            (
                "18446744073709551615",
                18_446_744_073_709_551_615 * NANOS_PER_UNIT,
            ),
            (r#""12E""#, 12 * 10i128.pow(27)),
            ("1e300", i128::MAX),
            ("-1e300", -i128::MAX),
        ] {
            let q: Quantity = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
            assert_eq!(q.nanos(), nanos, "{json}");
        }
        let err = serde_json::from_str::<Quantity>(r#""0.1mi""#).unwrap_err();
        assert!(
            err.to_string()
                .contains("unable to parse quantity's suffix"),
            "{err}"
        );
    }

    /// What Kubernetes stores past the cap is read, not refused: exactly within the `i128`
    /// bounds, saturated beyond, and what it prints reads back the same. `parse` (what a
    /// user writes) still refuses it; BinarySI is clamped by both, like Kubernetes.
    #[test]
    fn reads_stored_values_past_the_cap_that_parse_refuses() {
        for (text, printed) in [
            ("12E", "12E"),
            ("-12E", "-12E"),
            ("9223372036854775808", "9223372036854775808"),
            ("18446744073709551616", "18446744073709551616"),
            ("13835058055282163712", "13835058055282163712"), // 12Ei summed, printed
            ("1e21", "1e21"),
            ("1.5e28", "15e27"),
        ] {
            assert_eq!(
                Quantity::parse(text),
                Err(QuantityError::OutOfRange),
                "{text}"
            );
            let q = Quantity::read(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(q.to_string(), printed, "{text}");
            assert_eq!(Quantity::read(printed), Ok(q), "{text} reads back");
            assert!(q.nanos().unsigned_abs() > MAX_NANOS, "{text}");
        }
        for text in [
            "1e29",
            "1e30",
            "1e2147483647",
            "999999999999999999999999999999999",
        ] {
            let q = Quantity::read(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(q.nanos(), i128::MAX, "{text} saturates");
            assert_eq!(Quantity::read(&q.to_string()), Ok(q), "{text} reads back");
            assert_eq!(
                Quantity::read(&format!("-{text}")).map(|q| q.nanos()),
                Ok(-i128::MAX)
            );
        }
        for text in [
            "16Ei",
            "1",
            "1.5Gi",
            "9223372036854775807",
            "-9223372036854775807",
        ] {
            assert_eq!(Quantity::read(text), Quantity::parse(text), "{text}");
        }
        for bad in ["", "1.1.M", "0.1mi", "1e"] {
            assert_eq!(Quantity::read(bad), Quantity::parse(bad), "{bad}");
        }
    }

    #[test]
    fn round_trips_through_json_and_yaml() {
        #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
        struct Spec {
            cpu: Quantity,
            memory: Quantity,
            pods: Quantity,
        }
        let spec: Spec = serde_saphyr::from_str("cpu: 1.5\nmemory: 2Gi\npods: 10\n").unwrap();
        assert_eq!(spec.cpu.to_string(), "1500m");
        assert_eq!(spec.memory.to_string(), "2Gi");
        assert_eq!(spec.pods, Quantity::from_units(10, DSI));
        let json = serde_json::to_string(&spec).unwrap();
        assert_eq!(json, r#"{"cpu":"1500m","memory":"2Gi","pods":"10"}"#);
        assert_eq!(serde_json::from_str::<Spec>(&json).unwrap(), spec);
    }

    // ---- properties -----------------------------------------------------------------

    fn arb_nanos() -> impl Strategy<Value = i128> {
        prop_oneof![
            -MAX..=MAX,
            (any::<i32>(), 0u32..=27)
                .prop_map(|(m, k)| { (i128::from(m) * 10i128.pow(k)).clamp(-MAX, MAX) }),
            (-2048i128..2048, 0u32..=5).prop_map(|(m, k)| m * 1024i128.pow(k) * NANOS_PER_UNIT),
            -2_000_000_000i128..2_000_000_000,
        ]
    }

    fn arb_format() -> impl Strategy<Value = Format> {
        prop_oneof![Just(DSI), Just(Bin), Just(DExp)]
    }

    fn arb_quantity() -> impl Strategy<Value = Quantity> {
        (arb_nanos(), arb_format()).prop_map(|(n, f)| Quantity::from_nanos(n, f))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn parse_of_format_round_trips(q in arb_quantity()) {
            let text = q.to_string();
            let back = Quantity::parse(&text).unwrap();
            prop_assert_eq!(back, q, "{}", text);
            // The string is a fixed point after one reparse. Not always at once, as in
            // Kubernetes: BinarySI 10000 prints "10000", which reads back as DecimalSI "10k".
            let again = back.to_string();
            prop_assert_eq!(Quantity::parse(&again).unwrap().to_string(), again.clone());
            if q.format() != Bin || text.ends_with('i') {
                prop_assert_eq!(again, text);
            }
            let json = serde_json::to_string(&q).unwrap();
            prop_assert_eq!(serde_json::from_str::<Quantity>(&json).unwrap(), q);
        }

        #[test]
        fn addition_commutes_and_associates(a in arb_quantity(), b in arb_quantity(), c in arb_quantity()) {
            prop_assert_eq!(a + b, b + a);
            prop_assert_eq!((a + b) + c, a + (b + c));
            prop_assert_eq!((a + b) - b, a);
        }

        #[test]
        fn sub_clamped_is_max_of_zero_and_difference(a in arb_quantity(), b in arb_quantity()) {
            let d = a.sub_clamped(b);
            prop_assert!(d >= Quantity::ZERO);
            prop_assert_eq!(d, std::cmp::max(Quantity::ZERO, a - b));
        }

        #[test]
        fn ordering_follows_nanos(a in arb_quantity(), b in arb_quantity()) {
            prop_assert_eq!(a.cmp(&b), a.nanos().cmp(&b.nanos()));
            prop_assert_eq!(a == b, a.nanos() == b.nanos());
            prop_assert_eq!(a.with_format(Bin), a.with_format(DExp));
        }

        #[test]
        fn multiplication_is_repeated_addition(a in arb_quantity(), n in 0i64..8) {
            let sum: Quantity = std::iter::repeat_n(a, n as usize).sum();
            prop_assert_eq!(a.saturating_mul(n), sum);
        }

        /// Kubernetes' TestAddSubRoundTrip: adds then subs of random scaled values cancel.
        #[test]
        fn adds_then_subs_cancel(values in proptest::collection::vec((any::<i64>(), 0u32..=18), 1..50)) {
            let scaled = |(v, k): (i64, u32)| Quantity::from_nanos(i128::from(v) * 10i128.pow(k), DSI);
            let mut q = Quantity::ZERO;
            for &v in &values { q += scaled(v); }
            for &v in &values { q -= scaled(v); }
            prop_assert!(q.is_zero());
        }

        /// Any string over the grammar's alphabet parses or fails without panicking, and
        /// what parses prints to a string that parses back to the same value.
        #[test]
        fn parses_grammar_like_strings_without_panicking(s in "[-+]?[0-9.]{0,30}[eEinumkKMGTP]{0,3}[-+]?[0-9]{0,12}") {
            if let Ok(q) = Quantity::parse(&s) {
                let text = q.to_string();
                prop_assert_eq!(Quantity::parse(&text).unwrap(), q, "{} -> {}", s, text);
            }
        }

        /// Reading the same value in every decimal spelling gives the same nanos.
        #[test]
        fn decimal_spellings_agree(units in -1_000_000_000i64..1_000_000_000, frac in 0u32..1_000_000_000) {
            let sign = if units < 0 { "-" } else { "" };
            let text = format!("{sign}{}.{frac:09}", units.unsigned_abs());
            let q = Quantity::parse(&text).unwrap();
            let e = Quantity::parse(&format!("{sign}{}{frac:09}e-9", units.unsigned_abs())).unwrap();
            let n = Quantity::parse(&format!("{sign}{}{frac:09}n", units.unsigned_abs())).unwrap();
            prop_assert_eq!(q, e);
            prop_assert_eq!(q, n);
            let magnitude = i128::from(units.unsigned_abs()) * NANOS_PER_UNIT + i128::from(frac);
            prop_assert_eq!(q.nanos(), if units < 0 { -magnitude } else { magnitude });
        }
    }
}
