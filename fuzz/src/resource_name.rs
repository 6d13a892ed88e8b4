//! `resource_name`: [`classify`] and the name rules around it on any UTF-8 text (the keys
//! of spec.hard and of a binding's resource requests).
//!
//! Laws:
//! - an accepted name is a Kubernetes qualified name: non-empty ASCII, at most one `/`, a
//!   name part of at most 63 characters, a prefix of at most 253;
//! - its kind agrees with its spelling (`pods`, `limits.…`, `requests.…`, `count/…`, a bare
//!   extended name has a `/`), and object counts are integer resources;
//! - `validate_spec` with the name and `1` succeeds exactly when the kind may be
//!   enforced (not `limits.*`, not a bare extended name), and otherwise names the field
//!   `spec.hard[<name>]`;
//! - expanding a request of that name yields only `<name>` and `requests.<name>`.

use karmada_quota_core::quota::validate_spec;
use karmada_quota_core::resources::{NameKind, classify, expand_request, is_integer_resource};
use karmada_quota_core::{Quantity, ResourceList};

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(name) = std::str::from_utf8(data) else {
        return;
    };
    let kind = classify(name);
    let integer = is_integer_resource(name);
    let spec = validate_spec([(name, "1")], &[]);
    match &kind {
        Ok(kind) => {
            assert!(
                !name.is_empty() && name.is_ascii(),
                "{name:?} accepted as {kind:?}"
            );
            let (prefix, part) = name.split_once('/').unwrap_or(("", name));
            assert!(
                !part.contains('/'),
                "{name:?} accepted with two '/' as {kind:?}"
            );
            assert!(
                part.len() <= 63 && prefix.len() <= 253,
                "{name:?} accepted although too long"
            );
            let spelled = match kind {
                NameKind::Pods => name == "pods",
                NameKind::Limits => name.starts_with("limits."),
                NameKind::Requests => name.starts_with("requests."),
                NameKind::ObjectCount => name.starts_with("count/") && integer,
                NameKind::LegacyObjectCount => integer,
                NameKind::BareExtended => name.contains('/'),
                NameKind::Compute => !integer,
            };
            assert!(spelled, "{name:?} classified as {kind:?}");
            let enforceable = !matches!(kind, NameKind::Limits | NameKind::BareExtended);
            assert_eq!(
                spec.is_ok(),
                enforceable,
                "{name:?} ({kind:?}): validate_spec says {spec:?}"
            );
        }
        Err(e) => {
            assert!(!e.0.is_empty(), "{name:?} refused without a reason");
            let errors = spec.expect_err("a refused name must fail validation");
            let field = format!("spec.hard[{name}]");
            assert!(
                errors.iter().any(|f| f.field == field),
                "{name:?}: no error names {field}: {errors:?}"
            );
        }
    }
    let mut request = ResourceList::new();
    request.insert(name, Quantity::from_units(1, Default::default()));
    let expanded = expand_request(&request);
    let requests = format!("requests.{name}");
    assert!(
        expanded.names().all(|n| n == name || n == requests),
        "{name:?} expands to {expanded}"
    );
    assert!(!expanded.is_empty(), "{name:?} expands to nothing");
}

#[cfg(test)]
mod tests {
    use super::run;

    #[test]
    fn keeps_its_laws_on_typical_and_odd_names() {
        for s in [
            "cpu",
            "requests.cpu",
            "limits.memory",
            "pods",
            "count/deployments.apps",
            "services",
            "nvidia.com/gpu",
            "requests.nvidia.com/gpu",
            "kubernetes.io/foo",
            "hugepages-2Mi",
            "a/b/c",
            "",
            "/",
            "count/",
            "requests.",
            "x.storageclass.storage.k8s.io/requests.storage",
        ] {
            run(s.as_bytes());
        }
    }
}
