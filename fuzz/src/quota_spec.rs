//! `quota_spec`: a KarmadaQuota `spec` as JSON (what a user writes: `hard` and the
//! `scopeSelector`) through the crds types and `crds::convert::validate_spec`, which holds
//! the scope-selector conversion (`ScopeSelector::parse`).
//!
//! Laws, for a spec that decodes:
//! - it re-encodes and decodes to the same spec;
//! - valid: every `hard` entry is kept, classified and non-negative; one requirement per
//!   match expression; `In` matches exactly its (non-empty) values, `NotIn` exactly the
//!   rest and a binding without a class, `Exists` any class, `DoesNotExist` none; the
//!   selector matches a class exactly when all its requirements do;
//! - invalid: every error names a field under `spec.hard[…]` or
//!   `spec.scopeSelector.matchExpressions[i]` of an expression that exists, and scope
//!   errors appear exactly when `ScopeSelector::parse` alone refuses the expressions.

use karmada_quota_core::resources::classify;
use karmada_quota_core::scope::{Operator, RawRequirement, ScopeSelector};
use karmada_quota_crds::KarmadaQuotaSpec;
use karmada_quota_crds::convert::validate_spec;

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(spec) = serde_json::from_slice::<KarmadaQuotaSpec>(data) else {
        return;
    };
    let encoded = serde_json::to_vec(&spec).expect("a decoded spec encodes");
    let decoded: KarmadaQuotaSpec =
        serde_json::from_slice(&encoded).expect("an encoded spec decodes");
    assert_eq!(decoded, spec, "spec changes through JSON");

    let expressions: Vec<_> = spec
        .scope_selector
        .iter()
        .flat_map(|s| s.match_expressions.iter())
        .collect();
    let raw: Vec<RawRequirement<'_>> = expressions
        .iter()
        .map(|e| RawRequirement {
            scope_name: &e.scope_name,
            operator: &e.operator,
            values: &e.values,
        })
        .collect();
    let scope_alone = ScopeSelector::parse(&raw, "spec.scopeSelector");

    match validate_spec(&spec) {
        Ok(valid) => {
            assert_eq!(valid.hard.len(), spec.hard.len(), "hard entries dropped");
            for (name, q) in valid.hard.iter() {
                assert!(classify(name).is_ok(), "{name:?} kept but not a valid name");
                assert!(!q.is_negative(), "{name}={q} kept although negative");
            }
            let scope = &valid.scope;
            assert_eq!(
                Ok(scope),
                scope_alone.as_ref(),
                "validate_spec and ScopeSelector::parse disagree"
            );
            assert_eq!(scope.requirements.len(), expressions.len());
            for r in &scope.requirements {
                check_requirement_laws(r);
            }
            let mut probes: Vec<&str> = vec!["", "x"];
            probes.extend(
                scope
                    .requirements
                    .iter()
                    .flat_map(|r| r.values.iter().map(String::as_str)),
            );
            for class in probes {
                assert_eq!(
                    scope.matches(class),
                    scope.requirements.iter().all(|r| r.matches(class)),
                    "selector is not the AND of its requirements for {class:?}"
                );
            }
        }
        Err(errors) => {
            assert!(!errors.is_empty(), "refused without an error");
            let mut scope_errors = 0;
            for e in &errors {
                if let Some(rest) = e.field.strip_prefix("spec.scopeSelector.matchExpressions[") {
                    scope_errors += 1;
                    let index: usize = rest
                        .split(']')
                        .next()
                        .and_then(|i| i.parse().ok())
                        .unwrap_or_else(|| panic!("bad field path {:?}", e.field));
                    assert!(index < expressions.len(), "{} names no expression", e.field);
                } else {
                    let name = e
                        .field
                        .strip_prefix("spec.hard[")
                        .and_then(|r| r.strip_suffix(']'))
                        .unwrap_or_else(|| panic!("unexpected field path {:?}", e.field));
                    assert!(
                        spec.hard.contains_key(name),
                        "{} names no hard entry",
                        e.field
                    );
                }
                assert!(!e.message.is_empty(), "{} without a message", e.field);
            }
            assert_eq!(
                scope_errors > 0,
                scope_alone.is_err(),
                "scope errors of validate_spec and ScopeSelector::parse disagree"
            );
        }
    }
}

/// The truth table of one validated requirement.
fn check_requirement_laws(r: &karmada_quota_core::scope::Requirement) {
    let none = r.matches("");
    match r.operator {
        Operator::In => {
            assert!(!r.values.is_empty() && !none, "{r:?}");
            for v in &r.values {
                assert!(!v.is_empty() && r.matches(v), "{r:?} does not match {v:?}");
            }
        }
        Operator::NotIn => {
            assert!(!r.values.is_empty() && none, "{r:?}");
            for v in &r.values {
                assert!(!r.matches(v), "{r:?} matches {v:?}");
            }
        }
        Operator::Exists => assert!(r.values.is_empty() && !none && r.matches("x"), "{r:?}"),
        Operator::DoesNotExist => {
            assert!(r.values.is_empty() && none && !r.matches("x"), "{r:?}")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::run;

    #[test]
    fn keeps_its_laws_on_valid_and_invalid_specs() {
        for s in [
            r#"{"hard":{"requests.cpu":"100","pods":"5"}}"#,
            r#"{"hard":{"limits.cpu":"1","pods":"0.5","cpu":"-1"}}"#,
            r#"{"hard":{"pods":"1"},"scopeSelector":{"matchExpressions":[
                {"scopeName":"PriorityClass","operator":"In","values":["a","b"]},
                {"scopeName":"PriorityClass","operator":"NotIn","values":["c"]},
                {"scopeName":"PriorityClass","operator":"Exists"}]}}"#,
            r#"{"scopeSelector":{"matchExpressions":[
                {"scopeName":"Terminating","operator":"Nope","values":[""]},
                {"scopeName":"PriorityClass","operator":"DoesNotExist","values":["x"]},
                {"scopeName":"PriorityClass","operator":"In"}]}}"#,
        ] {
            run(s.as_bytes());
        }
    }
}
