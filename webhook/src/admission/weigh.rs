//! What a review costs once decoded, known before it is decoded: one pass over the body
//! that builds nothing ([`weigh`]) counts its JSON values, refuses a list longer than
//! `--max-list-items`, and passes over the subtrees the typed decoding never reads
//! (`request.options`; a binding's `status`) without counting them.
//!
//! The estimate is `body bytes + values × PER_VALUE`: every string, number, list, object
//! and object key of the body becomes at most [`PER_VALUE`] bytes of decoded structures
//! (a struct field or element slot, the list's spare capacity while it grows, the
//! allocator's smallest chunk, serde's buffered copy under a `flatten`), and string
//! contents are at most the body's bytes. `webhook/tests/decode_memory.rs` measures real
//! decodes of the worst shapes against it (the resident set of a fresh process). The router charges the estimate
//! to the decode budget (`--max-decoded-bytes-in-flight`) before the handler decodes.

use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Decoded bytes charged per JSON value (see the module doc).
pub const PER_VALUE: usize = 256;

/// The paths (object keys from the review's root) whose subtrees are passed over. At most
/// 32 paths; lists end a path (no path goes through a list).
pub(super) type SkipPaths = &'static [&'static [&'static str]];

/// Passed over in every review: nothing reads the request's options.
pub(super) const SKIP_OPTIONS: SkipPaths = &[&["request", "options"]];

/// Passed over in a binding review: the options, and the binding's status (the typed
/// binding has no status field; its decoding skips it).
pub(super) const SKIP_BINDING: SkipPaths = &[
    &["request", "options"],
    &["request", "object", "status"],
    &["request", "oldObject", "status"],
];

/// Why a body was not weighed.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Unweighable {
    /// Not JSON (serde_json's message).
    Malformed(String),
    /// A list longer than the limit.
    ListTooLong(usize),
}

impl fmt::Display for Unweighable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Malformed(e) => write!(f, "malformed AdmissionReview: {e}"),
            Self::ListTooLong(max) => write!(
                f,
                "the review holds a list of more than {max} items (--max-list-items)"
            ),
        }
    }
}

/// The estimated decoded size of `body` (see the module doc), or why it was not weighed.
pub(super) fn weigh(
    body: &[u8],
    skip: SkipPaths,
    max_list_items: usize,
) -> Result<usize, Unweighable> {
    debug_assert!(skip.len() <= 32);
    let mut state = State {
        values: 0,
        max_list_items,
        too_long: false,
        skip,
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let all = (1u32 << skip.len()) - 1;
    let walked = Walk {
        state: &mut state,
        live: all,
        depth: 0,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    if state.too_long {
        return Err(Unweighable::ListTooLong(max_list_items));
    }
    walked.map_err(|e| Unweighable::Malformed(e.to_string()))?;
    Ok(body
        .len()
        .saturating_add(state.values.saturating_mul(PER_VALUE)))
}

struct State {
    values: usize,
    max_list_items: usize,
    too_long: bool,
    skip: SkipPaths,
}

/// One value at `depth`; `live`: the skip paths that its key path so far matches.
struct Walk<'s> {
    state: &'s mut State,
    live: u32,
    depth: usize,
}

impl<'de> DeserializeSeed<'de> for Walk<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl Walk<'_> {
    fn scalar<E>(self) -> Result<(), E> {
        self.state.values += 1;
        Ok(())
    }

    /// The skip paths still matched below `key`, and whether one ends there.
    fn below(&self, key: &str) -> (u32, bool) {
        let (mut live, mut ends) = (0, false);
        for (i, path) in self.state.skip.iter().enumerate() {
            if self.live & (1 << i) != 0 && path.get(self.depth) == Some(&key) {
                live |= 1 << i;
                ends |= path.len() == self.depth + 1;
            }
        }
        (live, ends)
    }
}

impl<'de> Visitor<'de> for Walk<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        self.scalar()
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.scalar()
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        self.scalar()
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        self.scalar()
    }
    fn visit_none<E>(self) -> Result<(), E> {
        self.scalar()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.state.values += 1;
        let mut items = 0usize;
        loop {
            let item = Walk {
                state: &mut *self.state,
                live: 0,
                depth: self.depth + 1,
            };
            if seq.next_element_seed(item)?.is_none() {
                return Ok(());
            }
            items += 1;
            if items > self.state.max_list_items {
                self.state.too_long = true;
                return Err(de::Error::custom("list too long"));
            }
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.state.values += 1;
        while let Some(key) = map.next_key::<Key<'de>>()? {
            self.state.values += 1;
            let (live, ends) = self.below(key.as_str());
            if ends {
                map.next_value::<IgnoredAny>()?;
                self.state.values -= 1; // the key of a skipped member is not decoded either
                continue;
            }
            map.next_value_seed(Walk {
                state: &mut *self.state,
                live,
                depth: self.depth + 1,
            })?;
        }
        Ok(())
    }
}

/// An object key: borrowed from the body unless it holds escapes.
enum Key<'de> {
    Borrowed(&'de str),
    Owned(String),
}

impl Key<'_> {
    fn as_str(&self) -> &str {
        match self {
            Key::Borrowed(s) => s,
            Key::Owned(s) => s,
        }
    }
}

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
                Ok(Key::Borrowed(s))
            }
            fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
                Ok(Key::Owned(s.to_owned()))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(body: &str, skip: SkipPaths) -> usize {
        let bytes = weigh(body.as_bytes(), skip, 100).expect("weighed");
        (bytes - body.len()) / PER_VALUE
    }

    #[test]
    fn counts_every_value_and_key() {
        // object, key a, 1, key b, list, "x", null
        assert_eq!(values(r#"{"a":1,"b":["x",null]}"#, &[]), 7);
    }

    #[test]
    fn skipped_paths_cost_nothing_but_still_must_be_json() {
        let body = r#"{"request":{"uid":"u","options":{"wide":[1,2,3,4,5,6,7,8]}}}"#;
        // object, request key, object, uid key, "u"
        assert_eq!(values(body, SKIP_OPTIONS), 5);
        assert_eq!(values(body, &[]), 17);
        let broken = r#"{"request":{"options":[1,}}"#;
        assert!(matches!(
            weigh(broken.as_bytes(), SKIP_OPTIONS, 100),
            Err(Unweighable::Malformed(_))
        ));
        // The same key elsewhere is counted.
        assert_eq!(values(r#"{"options":[1]}"#, SKIP_OPTIONS), 4);
        let status = r#"{"request":{"object":{"status":[1,2,3]},"oldObject":{"status":{"a":1}}}}"#;
        assert_eq!(values(status, SKIP_BINDING), 7);
    }

    #[test]
    fn a_list_over_the_limit_is_refused_even_nested() {
        let long = format!(r#"{{"a":[{{"b":[{}]}}]}}"#, vec!["1"; 101].join(","));
        assert_eq!(
            weigh(long.as_bytes(), &[], 100),
            Err(Unweighable::ListTooLong(100))
        );
        let fits = format!(r#"{{"a":[{}]}}"#, vec!["1"; 100].join(","));
        assert!(weigh(fits.as_bytes(), &[], 100).is_ok());
        // A skipped list is never looked into.
        let skipped = format!(
            r#"{{"request":{{"options":[{}]}}}}"#,
            vec!["1"; 500].join(",")
        );
        assert!(weigh(skipped.as_bytes(), SKIP_OPTIONS, 100).is_ok());
    }

    #[test]
    fn trailing_garbage_is_malformed() {
        assert!(matches!(
            weigh(b"{} x", &[], 100),
            Err(Unweighable::Malformed(_))
        ));
    }
}
