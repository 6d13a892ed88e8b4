//! PriorityClass scope selectors with Kubernetes' semantics.
//!
//! All expressions must match (AND). `In`/`NotIn`/`DoesNotExist` evaluate over
//! `{PriorityClass: name}`, or `{}` when the binding has no class; `Exists` = non-empty
//! class. So `NotIn` and `DoesNotExist` match a binding without a class.

/// The only scope name a KarmadaQuota accepts.
pub const PRIORITY_CLASS: &str = "PriorityClass";

/// Operator of a scope requirement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    /// The class is one of `values`.
    In,
    /// The class is none of `values` (or absent).
    NotIn,
    /// The binding has a (non-empty) class.
    Exists,
    /// The binding has no class.
    DoesNotExist,
}

/// One validated requirement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    /// The operator.
    pub operator: Operator,
    /// Values for In/NotIn (non-empty); empty for Exists/DoesNotExist.
    pub values: Vec<String>,
}

/// A validated scope selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScopeSelector {
    /// All must match.
    pub requirements: Vec<Requirement>,
}

/// A requirement as written in the API object (unvalidated strings).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawRequirement<'a> {
    /// `scopeName`.
    pub scope_name: &'a str,
    /// `operator`.
    pub operator: &'a str,
    /// `values`.
    pub values: &'a [String],
}

use crate::field::FieldError;

impl Operator {
    /// The operator as written in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "In",
            Operator::NotIn => "NotIn",
            Operator::Exists => "Exists",
            Operator::DoesNotExist => "DoesNotExist",
        }
    }

    fn parse(raw: &str) -> Option<Operator> {
        [
            Operator::In,
            Operator::NotIn,
            Operator::Exists,
            Operator::DoesNotExist,
        ]
        .into_iter()
        .find(|op| op.as_str() == raw)
    }
}

impl Requirement {
    /// Whether a binding of `priority_class` (empty = none) satisfies this requirement.
    pub fn matches(&self, priority_class: &str) -> bool {
        let has_class = !priority_class.is_empty();
        let listed = || self.values.iter().any(|v| v == priority_class);
        match self.operator {
            Operator::In => has_class && listed(),
            Operator::NotIn => !has_class || !listed(),
            Operator::Exists => has_class,
            Operator::DoesNotExist => !has_class,
        }
    }
}

impl ScopeSelector {
    /// Validate the raw `matchExpressions`; every error at once. `field_prefix` is the path
    /// of the selector (e.g. `spec.scopeSelector`); errors name
    /// `<prefix>.matchExpressions[i].scopeName|operator|values`.
    pub fn parse(
        raw: &[RawRequirement<'_>],
        field_prefix: &str,
    ) -> Result<ScopeSelector, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut requirements = Vec::with_capacity(raw.len());
        for (i, r) in raw.iter().enumerate() {
            let path = |child: &str| format!("{field_prefix}.matchExpressions[{i}].{child}");
            if r.scope_name != PRIORITY_CLASS {
                errors.push(FieldError {
                    field: path("scopeName"),
                    message: format!(
                        "Unsupported value: {:?}: supported values: {PRIORITY_CLASS:?}",
                        r.scope_name
                    ),
                });
            }
            let Some(operator) = Operator::parse(r.operator) else {
                errors.push(FieldError {
                    field: path("operator"),
                    message: format!(
                        "Unsupported value: {:?}: supported values: \"In\", \"NotIn\", \
                         \"Exists\", \"DoesNotExist\"",
                        r.operator
                    ),
                });
                continue;
            };
            match operator {
                Operator::In | Operator::NotIn if r.values.is_empty() => errors.push(FieldError {
                    field: path("values"),
                    message: format!(
                        "Required value: must be at least one value when `operator` is '{}'",
                        operator.as_str()
                    ),
                }),
                Operator::Exists | Operator::DoesNotExist if !r.values.is_empty() => {
                    errors.push(FieldError {
                        field: path("values"),
                        message: format!(
                            "Invalid value: {:?}: must be no value when `operator` is '{}'",
                            r.values,
                            operator.as_str()
                        ),
                    })
                }
                _ => {}
            }
            if let Some(empty) = r.values.iter().position(String::is_empty) {
                errors.push(FieldError {
                    field: format!("{}[{empty}]", path("values")),
                    message: "Invalid value: \"\": a PriorityClass name must be non-empty".into(),
                });
            }
            requirements.push(Requirement {
                operator,
                values: r.values.to_vec(),
            });
        }
        if errors.is_empty() {
            Ok(ScopeSelector { requirements })
        } else {
            Err(errors)
        }
    }

    /// Whether a binding (or component, or pod) of `priority_class` is in scope; the empty
    /// string means "no class". All requirements must match; the empty selector matches all.
    pub fn matches(&self, priority_class: &str) -> bool {
        self.requirements.iter().all(|r| r.matches(priority_class))
    }

    /// No requirements: matches everything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mk_values(values: &[&str]) -> Vec<String> {
        values.iter().map(|v| (*v).to_owned()).collect()
    }

    fn mk_selector(exprs: &[(&str, &[&str])]) -> ScopeSelector {
        let values: Vec<Vec<String>> = exprs.iter().map(|(_, v)| mk_values(v)).collect();
        let raw: Vec<RawRequirement<'_>> = exprs
            .iter()
            .zip(&values)
            .map(|((op, _), values)| RawRequirement {
                scope_name: PRIORITY_CLASS,
                operator: op,
                values,
            })
            .collect();
        ScopeSelector::parse(&raw, "spec.scopeSelector").expect("valid selector")
    }

    #[test]
    fn operators_follow_kubernetes_semantics() {
        // (operator, values, priority class, matches)
        let table: [(&str, &[&str], &str, bool); 12] = [
            ("In", &["high"], "high", true),
            ("In", &["high"], "low", false),
            ("In", &["high"], "", false),
            ("NotIn", &["batch"], "high", true),
            ("NotIn", &["batch"], "batch", false),
            ("NotIn", &["batch"], "", true),
            ("Exists", &[], "high", true),
            ("Exists", &[], "", false),
            ("DoesNotExist", &[], "", true),
            ("DoesNotExist", &[], "high", false),
            ("In", &["high", "low"], "low", true),
            ("NotIn", &["high", "low"], "low", false),
        ];
        for (op, values, class, expected) in table {
            let selector = mk_selector(&[(op, values)]);
            assert_eq!(
                selector.matches(class),
                expected,
                "{op} {values:?} on {class:?}"
            );
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        let selector = mk_selector(&[]);
        assert!(selector.is_empty());
        assert!(selector.matches(""));
        assert!(selector.matches("batch"));
    }

    #[test]
    fn all_requirements_must_match() {
        let selector = mk_selector(&[("Exists", &[]), ("NotIn", &["batch"])]);
        assert!(!selector.is_empty());
        assert!(selector.matches("high"));
        assert!(!selector.matches("batch"));
        assert!(!selector.matches(""));
    }

    #[test]
    fn parse_reports_every_error_with_its_field() {
        let none: Vec<String> = Vec::new();
        let some = mk_values(&["high"]);
        let empty = mk_values(&[""]);
        let raw = [
            RawRequirement {
                scope_name: "Terminating",
                operator: "In",
                values: &some,
            },
            RawRequirement {
                scope_name: PRIORITY_CLASS,
                operator: "Gt",
                values: &some,
            },
            RawRequirement {
                scope_name: PRIORITY_CLASS,
                operator: "NotIn",
                values: &none,
            },
            RawRequirement {
                scope_name: PRIORITY_CLASS,
                operator: "Exists",
                values: &some,
            },
            RawRequirement {
                scope_name: PRIORITY_CLASS,
                operator: "In",
                values: &empty,
            },
        ];
        let errors = ScopeSelector::parse(&raw, "spec.scopeSelector").expect_err("invalid");
        let rendered: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            rendered,
            [
                "spec.scopeSelector.matchExpressions[0].scopeName: Unsupported value: \
                 \"Terminating\": supported values: \"PriorityClass\"",
                "spec.scopeSelector.matchExpressions[1].operator: Unsupported value: \"Gt\": \
                 supported values: \"In\", \"NotIn\", \"Exists\", \"DoesNotExist\"",
                "spec.scopeSelector.matchExpressions[2].values: Required value: must be at \
                 least one value when `operator` is 'NotIn'",
                "spec.scopeSelector.matchExpressions[3].values: Invalid value: [\"high\"]: \
                 must be no value when `operator` is 'Exists'",
                "spec.scopeSelector.matchExpressions[4].values[0]: Invalid value: \"\": a \
                 PriorityClass name must be non-empty",
            ]
        );
    }
}
