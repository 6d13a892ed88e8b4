//! Lua's pattern functions within a bound. `string.find`, `string.match`, `string.gmatch`
//! and `string.gsub` match in C, where the sandbox's instruction hook never fires: a
//! backtracking pattern such as `.-.-.-.-b` over a long subject ran 30 s at full CPU past
//! the 1 s limit, and nothing could stop it. The sandbox replaces the four by wrappers
//! that first bound the work a call can do and refuse (a Lua error) a call whose bound
//! passes [`MAX_STEPS`], or whose pattern is longer than [`MAX_PATTERN_BYTES`] (Lua 5.1's
//! matcher recurses once per pattern item, on the thread's stack).
//!
//! The bound is an upper bound of the steps of Lua 5.1's matcher (`lstrlib.c`):
//!
//! ```text
//!  plain find (4th argument true, or a pattern without special characters): n × m
//!  pattern:  m × n^(k + 1) × 2^q    (n^k when anchored with ^)
//!     n  bytes of the subject + 1           m  bytes of the pattern
//!     k  items that backtrack over the subject: a single-character class followed by
//!        *, + or - (except at the pattern's end, where the rest cannot fail), %bxy and
//!        back-references %1–%9
//!     q  items followed by ? (each tries two ways)
//! ```
//!
//! Each backtracking item tries up to n lengths, each followed by the rest of the pattern;
//! an unanchored call tries up to n starting points (`gmatch` and `gsub` resume after
//! each match, so they too try at most n). Patterns over short strings — what a
//! customization reads from a template — stay far below the bound; what is refused is
//! the shape that could run away, before it runs.
//!
//! `string.rep` is the other C loop a script controls: `string.rep('', 2^31 - 1)` adds
//! nothing to its buffer (so the memory limit never stops it) two billion times. Repeating
//! an empty string more than [`MAX_REPEATS`] times is refused; a non-empty string grows
//! the buffer every turn, and the memory limit stops it.

use mlua::{Function, Lua, MultiValue, Table, Value};

/// Most matcher steps one call may be bound to: the bound is the worst case, and the
/// shape closest to it (`(.*)x`) matches about 5 × 10⁸ bound-steps a second in an
/// optimised build, so a call allowed runs at most about 0.1 s of C.
pub const MAX_STEPS: f64 = 5e7;
/// Longest pattern a call may use.
pub const MAX_PATTERN_BYTES: usize = 512;

/// Most repetitions of an empty string one `string.rep` call may ask for.
pub const MAX_REPEATS: f64 = 33_554_432.0;

/// The characters that make a pattern not plain (`lstrlib.c`'s `SPECIALS`).
const SPECIALS: &[u8] = b"^$*+?.([%-";

/// Replace `string.find`, `match`, `gmatch`, `gsub` and `rep` in `string` (the table the
/// string metatable's `__index` is, so `s:find(…)` is covered too) by bounded wrappers.
pub fn install(lua: &Lua, string: &Table) -> mlua::Result<()> {
    for name in ["find", "match", "gmatch", "gsub", "rep"] {
        let original: Function = string.raw_get(name)?;
        let wrapped = lua.create_function(move |_, args: MultiValue| {
            check(name, &args)?;
            original.call::<MultiValue>(args)
        })?;
        string.raw_set(name, wrapped)?;
    }
    Ok(())
}

/// Bytes of a string argument (a number is converted by Lua: a few bytes); `None` for
/// anything else (the original function reports the type error).
fn bytes(v: Option<&Value>) -> Option<Vec<u8>> {
    match v? {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(_) | Value::Number(_) => Some(vec![b'0'; 32]),
        _ => None,
    }
}

fn len(v: Option<&Value>) -> Option<usize> {
    match v? {
        Value::String(s) => Some(s.as_bytes().len()),
        Value::Integer(_) | Value::Number(_) => Some(32),
        _ => None,
    }
}

/// The count of `string.rep(s, n)` as Lua reads it (a number, or a string holding one).
fn count(v: Option<&Value>) -> Option<f64> {
    match v? {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => s.to_str().ok()?.trim().parse().ok(),
        _ => None,
    }
}

/// Refuses the call `function(args…)` when its bound passes the limits.
fn check(function: &str, args: &MultiValue) -> mlua::Result<()> {
    if function == "rep" {
        let empty = matches!(args.front(), Some(Value::String(s)) if s.as_bytes().is_empty());
        return match count(args.get(1)) {
            Some(n) if empty && (n > MAX_REPEATS || n.is_nan()) => {
                Err(mlua::Error::runtime(format!(
                    "string.rep: {n} repetitions of an empty string are refused in the \
                 karmada-quota sandbox (at most {MAX_REPEATS}): Lua repeats in C where the \
                 time limit cannot stop it"
                )))
            }
            _ => Ok(()),
        };
    }
    let (Some(subject), Some(pattern)) = (len(args.front()), bytes(args.get(1))) else {
        return Ok(());
    };
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(mlua::Error::runtime(format!(
            "string.{function}: a pattern of {} bytes is refused in the karmada-quota sandbox \
             (at most {MAX_PATTERN_BYTES})",
            pattern.len()
        )));
    }
    let plain = function == "find"
        && (args
            .get(3)
            .is_some_and(|v| !matches!(v, Value::Nil | Value::Boolean(false)))
            || !pattern.iter().any(|b| SPECIALS.contains(b)));
    let steps = if plain {
        (subject as f64 + 1.0) * (pattern.len() as f64 + 1.0)
    } else {
        bound(&pattern, subject)
    };
    if steps > MAX_STEPS {
        let shown: String = String::from_utf8_lossy(&pattern).chars().take(64).collect();
        return Err(mlua::Error::runtime(format!(
            "string.{function}: the pattern {shown:?} over {subject} bytes could take \
             {steps:.1e} matching steps (more than {MAX_STEPS:.0e}): refused, because Lua \
             matches patterns in C where the sandbox's time limit cannot stop it"
        )));
    }
    Ok(())
}

/// The bound of matching `pattern` over a subject of `subject` bytes (see the module doc).
pub fn bound(pattern: &[u8], subject: usize) -> f64 {
    let anchored = pattern.first() == Some(&b'^');
    let Shape {
        backtracking,
        optional,
    } = shape(pattern);
    let n = subject as f64 + 1.0;
    let starts = if anchored { 0 } else { 1 };
    (pattern.len().max(1) as f64)
        * n.powi(i32::try_from(backtracking + starts).unwrap_or(i32::MAX))
        * 2f64.powi(i32::try_from(optional).unwrap_or(i32::MAX))
}

/// What makes a pattern backtrack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shape {
    /// Items that try up to n lengths each.
    pub backtracking: u32,
    /// Items followed by `?`.
    pub optional: u32,
}

/// The [`Shape`] of `p`, read as `lstrlib.c`'s `match` reads it.
pub fn shape(p: &[u8]) -> Shape {
    let mut s = Shape::default();
    let mut i = usize::from(p.first() == Some(&b'^'));
    while i < p.len() {
        match p[i] {
            b'(' | b')' => {
                i += 1;
                continue;
            }
            b'$' if i + 1 == p.len() => break,
            b'%' => match p.get(i + 1) {
                Some(b'b') => {
                    s.backtracking += 1;
                    i += 4;
                    continue;
                }
                Some(b'f') => {
                    i = set_end(p, i + 2);
                    continue;
                }
                Some(b'0'..=b'9') => {
                    s.backtracking += 1;
                    i += 2;
                    continue;
                }
                _ => i += 2,
            },
            b'[' => i = set_end(p, i),
            _ => i += 1,
        }
        // A single-character class ends at i; its suffix, if any.
        match p.get(i) {
            Some(b'*' | b'+' | b'-') => {
                if !p[i + 1..].iter().all(|&c| c == b')') {
                    s.backtracking += 1;
                }
                i += 1;
            }
            Some(b'?') => {
                s.optional += 1;
                i += 1;
            }
            _ => {}
        }
    }
    s
}

/// The index after the set that starts at `p[i] == '['` (`lstrlib.c`'s `classEnd`: the
/// first character, after an optional `^`, is part of the set even when it is `]`).
fn set_end(p: &[u8], i: usize) -> usize {
    let mut j = i + 1;
    if p.get(j) == Some(&b'^') {
        j += 1;
    }
    loop {
        let Some(&c) = p.get(j) else {
            return p.len();
        };
        j += if c == b'%' { 2 } else { 1 };
        if p.get(j).is_none_or(|&c| c == b']') {
            return (j + 1).min(p.len());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape_of(p: &str) -> (u32, u32) {
        let s = shape(p.as_bytes());
        (s.backtracking, s.optional)
    }

    #[test]
    fn the_shape_counts_what_backtracks() {
        assert_eq!(shape_of("abc"), (0, 0));
        assert_eq!(shape_of("%s+"), (0, 0), "at the end the rest cannot fail");
        assert_eq!(shape_of("(%d+)m$"), (1, 0));
        assert_eq!(shape_of("^%s*(.-)%s*$"), (3, 0));
        assert_eq!(shape_of(".-.-.-.-b"), (4, 0));
        assert_eq!(shape_of("a?b?c"), (0, 2));
        assert_eq!(shape_of("%b()x"), (1, 0));
        assert_eq!(shape_of("(a)%1"), (1, 0));
        assert_eq!(
            shape_of("[]*]x"),
            (0, 0),
            "a set with ] and * in it, then x"
        );
        assert_eq!(shape_of("[^%]]+x"), (1, 0));
        assert_eq!(shape_of("%f[%w]%w+"), (0, 0));
        assert_eq!(shape_of("%%*x"), (1, 0), "an escaped % repeated");
    }

    #[test]
    fn short_subjects_pass_and_catastrophic_shapes_over_long_ones_do_not() {
        for (pattern, subject) in [
            ("^(%d+)m$", 20),
            ("^%s*(.-)%s*$", 150),
            ("%s+", 100_000),
            ("([%w%-%.]+)/([%w%-%.]+):(%w+)", 100),
        ] {
            let b = bound(pattern.as_bytes(), subject);
            assert!(b <= MAX_STEPS, "{pattern} over {subject}: {b:e}");
        }
        for (pattern, subject) in [(".-.-.-.-b", 1_000), ("(.*)(.*)(.*)x", 2_000)] {
            let b = bound(pattern.as_bytes(), subject);
            assert!(b > MAX_STEPS, "{pattern} over {subject}: {b:e}");
        }
    }
}
