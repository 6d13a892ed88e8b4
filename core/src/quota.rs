//! KarmadaQuota in the engine's terms: validated spec, status state, field errors.

use crate::resources::ResourceList;
use crate::scope::ScopeSelector;

/// A validation error on one field, printed like Kubernetes' field errors:
/// `spec.hard[limits.cpu]: Invalid value: "limits.cpu": <reason>`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.scopeSelector.matchExpressions[0].values`.
    pub field: String,
    /// What is wrong, including the offending value where it helps.
    pub message: String,
}

/// A validated quota spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaSpec {
    /// Global hard limits.
    pub hard: ResourceList,
    /// Which bindings the quota applies to.
    pub scope: ScopeSelector,
}

/// Who holds a reservation (`status.reservations[].reservedBy`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReservedBy {
    /// `work.karmada.io/v1alpha2`.
    pub api_version: String,
    /// `ResourceBinding`.
    pub kind: String,
    /// The binding's name.
    pub name: String,
    /// The binding's uid: the key, with the generation, of an entry.
    pub uid: String,
}

/// An admitted change not yet observed by the controller (`status.reservations[]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    /// The binding.
    pub reserved_by: ReservedBy,
    /// The binding's metadata.generation the admission was for.
    pub generation: i64,
    /// The admitted delta.
    pub reserved: ResourceList,
    /// When the entry lapses, in Unix seconds.
    pub expiration_time: i64,
}

/// One quota as the decision and the controller see it: validated spec + status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaState {
    /// metadata.name.
    pub name: String,
    /// The validated spec.
    pub spec: QuotaSpec,
    /// `status.used`; `None` (or a missing name) until the controller has synced it.
    pub used: Option<ResourceList>,
    /// `status.reservations`.
    pub reservations: Vec<Reservation>,
}

use crate::quantity::Quantity;
use crate::resources::{NameKind, REQUESTS_PREFIX, classify, is_integer_resource};
use crate::scope::RawRequirement;

/// Why a `limits.*` name is refused (design §3).
pub const LIMITS_REASON: &str =
    "a ResourceBinding carries requests only; limits cannot be enforced";

impl FieldError {
    /// `<field>: Invalid value: "<value>": <reason>` (Kubernetes' field.Invalid).
    pub fn invalid(field: impl Into<String>, value: &str, reason: impl std::fmt::Display) -> Self {
        FieldError {
            field: field.into(),
            message: format!("Invalid value: {value:?}: {reason}"),
        }
    }
}

/// Validate a KarmadaQuota spec (design §2, §3): every error at once.
///
/// `hard` is `spec.hard` as written (name → quantity string); `scope` is
/// `spec.scopeSelector.matchExpressions`. Checks: resource names ([`classify`]), `limits.*`
/// refused with its reason, a bare extended name refused with the name it should have,
/// quantities that parse, are non-negative, and whole for integer resources; the scope
/// rules of [`ScopeSelector::parse`]. Field paths look like `spec.hard[limits.cpu]`.
pub fn validate_spec<'a>(
    hard: impl IntoIterator<Item = (&'a str, &'a str)>,
    scope: &[RawRequirement<'_>],
) -> Result<QuotaSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut limits = ResourceList::new();
    for (name, raw) in hard {
        let field = format!("spec.hard[{name}]");
        match classify(name) {
            Err(e) => errors.push(FieldError::invalid(&field, name, e)),
            Ok(NameKind::Limits) => errors.push(FieldError::invalid(&field, name, LIMITS_REASON)),
            Ok(NameKind::BareExtended) => errors.push(FieldError::invalid(
                &field,
                name,
                format_args!(
                    "an extended resource is limited through its requests: use {REQUESTS_PREFIX}{name}"
                ),
            )),
            Ok(_) => {}
        }
        match Quantity::parse(raw) {
            Err(e) => errors.push(FieldError::invalid(&field, raw, e)),
            Ok(q) if q.is_negative() => errors.push(FieldError::invalid(
                &field,
                raw,
                "must be greater than or equal to 0",
            )),
            Ok(q) if is_integer_resource(name) && !q.is_whole() => {
                errors.push(FieldError::invalid(&field, raw, "must be an integer"))
            }
            Ok(q) => {
                limits.insert(name, q);
            }
        }
    }
    let scope = ScopeSelector::parse(scope, "spec.scopeSelector").unwrap_or_else(|mut e| {
        errors.append(&mut e);
        ScopeSelector::default()
    });
    if errors.is_empty() {
        Ok(QuotaSpec {
            hard: limits,
            scope,
        })
    } else {
        Err(errors)
    }
}
