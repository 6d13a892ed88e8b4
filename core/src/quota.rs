//! KarmadaQuota in the engine's terms: validated spec and status state.

pub use crate::field::FieldError;
use crate::placement::LabelSelector;
use crate::quantity::Quantity;
use crate::resources::{NameKind, REQUESTS_PREFIX, ResourceList, classify, is_integer_resource};
use crate::scope::{RawRequirement, ScopeSelector};
use crate::selection::{Covers, QuotaKey, validate_namespace_selector};

/// `spec.admission.mode`: what a quota does with a binding that does not fit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AdmissionMode {
    /// Refuse it (the default; the behaviour before queueing existed).
    #[default]
    Refuse,
    /// Hold it: admitted with scheduling suspended, released in order once it fits.
    Queue,
}

/// `spec.admission.order`: may later work pass a head of the line that does not fit?
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QueueOrder {
    /// Nothing passes the head: work starts strictly in line order.
    StrictFifo,
    /// A later binding that fits may start while the head does not (Kueue's default).
    #[default]
    BestEffortFifo,
}

/// A quota's `spec.admission`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Admission {
    /// Refuse or queue.
    pub mode: AdmissionMode,
    /// The line's order rule.
    pub order: QueueOrder,
}

/// A validated quota spec.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QuotaSpec {
    /// What the quota decides beyond `hard` (observed usage, uncountable workloads).
    pub policy: QuotaPolicy,
    /// Global hard limits.
    pub hard: ResourceList,
    /// Which bindings the quota applies to.
    pub scope: ScopeSelector,
}

/// A quota's admission policy beyond its limits (docs/design.md §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuotaPolicy {
    /// Whether what the members run counts at admission.
    pub observed: ObservedLimit,
    /// What a binding costs whose template runs pods nothing can count; `None`: the
    /// webhook's default (`--unaccounted-workloads`).
    pub unaccounted: Option<Unaccounted>,
    /// Whether replicas draining after a failover count in `used`.
    pub draining: DrainingReplicas,
    /// What it does with a binding that does not fit: refuse it, or hold it in a line
    /// (`spec.admission`, [`crate::queue`]).
    pub admission: Admission,
}

/// `spec.drainingReplicas`: do the replicas Karmada left draining in a member it moved a
/// workload off (`gracefulEvictionTasks`, [`crate::failover`]) count against `hard`?
/// Either way admission never refuses the failover itself: the binding's charge does not
/// change, and an update whose charge does not increase is always admitted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DrainingReplicas {
    /// Shown per member (`status.clusters[].draining`), not counted (the default):
    /// rescheduling never makes room scarce for others.
    #[default]
    Show,
    /// Also added to `used` while they drain: other increases are refused until the old
    /// replicas are gone, so the real footprint stays within `hard`.
    Count,
}

/// `spec.observedLimit`: while the usage the members observe exceeds `hard` for a
/// resource, are admissions that increase it refused?
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ObservedLimit {
    /// Refused (the default): drift past the limit stops growth.
    #[default]
    Enforce,
    /// Only reported (the Drift condition): for federations that run pods outside Karmada
    /// on purpose.
    Ignore,
}

/// `spec.unaccountedWorkloads`: a binding whose template runs pods but carries no replica
/// requirements (a DaemonSet, a CronJob, a custom kind Karmada has no interpreter for),
/// under a quota that tracks compute.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Unaccounted {
    /// Refused, naming the kind and how to allow it (the safe default).
    #[default]
    Deny,
    /// Admitted; charged, in `used`, by the pods the members run for it (the controller
    /// attributes pods to the workload by their owner).
    Observed,
    /// Admitted with its object count only, as before this policy existed.
    Allow,
}

/// One member's row of the stored status, as admission reads it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberUsage {
    /// Member cluster name.
    pub name: String,
    /// What Karmada placed there (`status.clusters[].used`).
    pub placed: ResourceList,
    /// What the member runs (`status.clusters[].observed`); `None`: not measured.
    pub observed: Option<ResourceList>,
}

/// Who holds a reservation (`status.reservations[].reservedBy`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReservedBy {
    /// `work.karmada.io/v1alpha2`.
    pub api_version: String,
    /// `ResourceBinding`.
    pub kind: String,
    /// The binding's namespace: set in the entries of a cluster quota (they come from
    /// several namespaces); empty in a KarmadaQuota's (its own namespace).
    pub namespace: String,
    /// The binding's name.
    pub name: String,
    /// The binding's uid: the key, with the generation, of an entry.
    pub uid: String,
}

impl ReservedBy {
    /// The binding's namespace: the one the entry names, else `own` (the quota's, for a
    /// KarmadaQuota's entries, which name none).
    pub fn namespace_or<'a>(&'a self, own: &'a str) -> &'a str {
        if self.namespace.is_empty() {
            own
        } else {
            &self.namespace
        }
    }
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

/// One quota object as the decision and the controller see it: validated spec + status.
/// A KarmadaQuota and a KarmadaClusterQuota differ only in `covers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaState {
    /// metadata.name.
    pub name: String,
    /// The namespaces whose bindings it is charged with.
    pub covers: Covers,
    /// The validated spec.
    pub spec: QuotaSpec,
    /// `status.used`; `None` (or a missing name) until the controller has synced it.
    pub used: Option<ResourceList>,
    /// `status.reservations`.
    pub reservations: Vec<Reservation>,
    /// `status.clusters`: placed and observed usage per member.
    pub clusters: Vec<MemberUsage>,
}

impl QuotaState {
    /// Its identity across kinds (`covers` says which kind).
    pub fn key(&self) -> QuotaKey {
        match &self.covers {
            Covers::Namespace(namespace) => QuotaKey::Namespaced {
                namespace: namespace.clone(),
                name: self.name.clone(),
            },
            Covers::Selected(_) => QuotaKey::Cluster {
                name: self.name.clone(),
            },
        }
    }
}

/// Why a `limits.*` name is refused (docs/design.md §5).
pub const LIMITS_REASON: &str =
    "a ResourceBinding carries requests only; limits cannot be enforced";

/// Validate a KarmadaQuota spec (docs/design.md §2, §5): every error at once.
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
            policy: QuotaPolicy::default(),
            hard: limits,
            scope,
        })
    } else {
        Err(errors)
    }
}

/// Validate a KarmadaClusterQuota spec: the KarmadaQuota rules for `hard` and
/// `scopeSelector` ([`validate_spec`]), and a namespace selector that is present and
/// selects something less than every namespace ([`crate::selection::validate_namespace_selector`]). Every
/// error at once; the selector's come first.
pub fn validate_cluster_spec<'a>(
    selector: Option<&LabelSelector>,
    hard: impl IntoIterator<Item = (&'a str, &'a str)>,
    scope: &[RawRequirement<'_>],
) -> Result<(LabelSelector, QuotaSpec), Vec<FieldError>> {
    let mut errors = validate_namespace_selector(selector, "spec.namespaceSelector");
    match validate_spec(hard, scope) {
        Ok(spec) if errors.is_empty() => Ok((selector.cloned().unwrap_or_default(), spec)),
        Ok(_) => Err(errors),
        Err(mut e) => {
            errors.append(&mut e);
            Err(errors)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scope::{Operator, PRIORITY_CLASS};

    fn mk_errors(hard: &[(&str, &str)]) -> Vec<String> {
        validate_spec(hard.iter().copied(), &[])
            .expect_err("invalid spec")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn accepts_the_example_quota() {
        let values = vec!["batch".to_owned()];
        let scope = [RawRequirement {
            scope_name: PRIORITY_CLASS,
            operator: "NotIn",
            values: &values,
        }];
        let spec = validate_spec(
            [
                ("requests.cpu", "100"),
                ("requests.memory", "200Gi"),
                ("requests.nvidia.com/gpu", "8"),
                ("pods", "500"),
                ("count/deployments.apps", "50"),
            ],
            &scope,
        )
        .expect("valid spec");
        assert_eq!(
            spec.hard.to_string(),
            "count/deployments.apps=50,pods=500,requests.cpu=100,requests.memory=200Gi,\
             requests.nvidia.com/gpu=8"
        );
        assert_eq!(spec.scope.requirements.len(), 1);
        assert_eq!(spec.scope.requirements[0].operator, Operator::NotIn);
    }

    #[test]
    fn refuses_limits_with_the_reason() {
        assert_eq!(
            mk_errors(&[("limits.cpu", "2")]),
            [
                "spec.hard[limits.cpu]: Invalid value: \"limits.cpu\": a ResourceBinding carries \
                 requests only; limits cannot be enforced"
            ]
        );
    }

    #[test]
    fn refuses_a_bare_extended_name_with_the_name_to_use() {
        assert_eq!(
            mk_errors(&[("nvidia.com/gpu", "8")]),
            [
                "spec.hard[nvidia.com/gpu]: Invalid value: \"nvidia.com/gpu\": an extended \
                 resource is limited through its requests: use requests.nvidia.com/gpu"
            ]
        );
    }

    #[test]
    fn refuses_invalid_names() {
        assert_eq!(
            mk_errors(&[("foo", "1")]),
            ["spec.hard[foo]: Invalid value: \"foo\": must be a standard resource for quota"]
        );
    }

    #[test]
    fn refuses_bad_negative_and_fractional_quantities() {
        assert_eq!(
            mk_errors(&[("cpu", "1.1.M")]),
            [
                "spec.hard[cpu]: Invalid value: \"1.1.M\": quantities must match the regular \
                 expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            ]
        );
        assert_eq!(
            mk_errors(&[("memory", "-1Gi")]),
            ["spec.hard[memory]: Invalid value: \"-1Gi\": must be greater than or equal to 0"]
        );
        assert_eq!(
            mk_errors(&[("pods", "1500m")]),
            ["spec.hard[pods]: Invalid value: \"1500m\": must be an integer"]
        );
        assert_eq!(
            mk_errors(&[("requests.nvidia.com/gpu", "0.5")]),
            ["spec.hard[requests.nvidia.com/gpu]: Invalid value: \"0.5\": must be an integer"]
        );
    }

    #[test]
    fn reports_every_error_at_once() {
        let none: Vec<String> = Vec::new();
        let scope = [RawRequirement {
            scope_name: PRIORITY_CLASS,
            operator: "In",
            values: &none,
        }];
        let errors = validate_spec(
            [
                ("limits.memory", "1Gi"),
                ("cpu", "x"),
                ("count/jobs.batch", "1.5"),
                ("pods", "2"),
            ],
            &scope,
        )
        .expect_err("invalid");
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "spec.hard[limits.memory]",
                "spec.hard[cpu]",
                "spec.hard[count/jobs.batch]",
                "spec.scopeSelector.matchExpressions[0].values",
            ]
        );
    }
}
