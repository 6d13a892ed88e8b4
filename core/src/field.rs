//! A validation error on one field of an API object, printed like Kubernetes' field errors.
//! Quota validation and scope parsing both report these, so it sits below both.

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

impl FieldError {
    /// `<field>: Invalid value: "<value>": <reason>` (Kubernetes' field.Invalid).
    pub fn invalid(field: impl Into<String>, value: &str, reason: impl std::fmt::Display) -> Self {
        FieldError {
            field: field.into(),
            message: format!("Invalid value: {value:?}: {reason}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_prints_field_value_and_reason_like_kubernetes() {
        let e = FieldError::invalid(
            "spec.hard[pods]",
            "-1",
            "must be greater than or equal to 0",
        );
        assert_eq!(e.field, "spec.hard[pods]");
        assert_eq!(
            e.to_string(),
            "spec.hard[pods]: Invalid value: \"-1\": must be greater than or equal to 0"
        );
    }
}
