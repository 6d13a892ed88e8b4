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

use crate::quota::FieldError;

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
