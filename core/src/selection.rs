//! Which namespaces a quota object covers: a KarmadaQuota its own, a KarmadaClusterQuota
//! every namespace its `spec.namespaceSelector` matches (docs/design.md §2b).
//!
//! ```text
//!  QuotaState.covers ─ Namespace(ns)      ─► covers(ns′, labels) = ns′ == ns
//!                    └ Selected(selector) ─► covers(ns′, labels) = selector.matches(labels)
//!  QuotaKey: Namespaced{ns, name} < Cluster{name}  (the order decisions take quotas in)
//! ```
//!
//! A binding in namespace N is charged against every quota object that covers N; the
//! decision and the controller's sums are the same code for both kinds
//! ([`crate::decision`], [`crate::status`]), only the selection differs. The label
//! selector is placement's ([`LabelSelector`], Kubernetes' semantics); this module adds
//! its validation for a namespace selector and the per-namespace usage of a cluster quota.

use std::collections::BTreeMap;

use crate::field::FieldError;
use crate::placement::LabelSelector;
use crate::resources::ResourceList;
use crate::scope::ScopeSelector;
use crate::usage::{BindingCharge, ScopedUsage};

/// A namespace's labels (`metadata.labels`).
pub type Labels = BTreeMap<String, String>;

/// Which namespaces a quota object covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Covers {
    /// A KarmadaQuota: its own namespace.
    Namespace(String),
    /// A KarmadaClusterQuota: the namespaces whose labels its selector matches.
    Selected(LabelSelector),
}

impl Default for Covers {
    fn default() -> Self {
        Covers::Namespace(String::new())
    }
}

impl Covers {
    /// Whether a binding in `namespace`, whose labels are `labels`, is charged against it.
    /// A namespace whose labels are unknown (`None`) is matched by no selector.
    pub fn covers(&self, namespace: &str, labels: Option<&Labels>) -> bool {
        match self {
            Covers::Namespace(ns) => ns == namespace,
            Covers::Selected(selector) => labels.is_some_and(|l| selector.matches(l)),
        }
    }

    /// Whether this is a cluster-scoped quota object.
    pub fn is_cluster(&self) -> bool {
        matches!(self, Covers::Selected(_))
    }

    /// The word messages use for the kind: `quota` or `cluster quota`.
    pub fn noun(&self) -> &'static str {
        if self.is_cluster() {
            "cluster quota"
        } else {
            "quota"
        }
    }
}

/// Identity of a quota object across kinds. Ordered: a namespace's KarmadaQuotas (by
/// namespace, then name) before the KarmadaClusterQuotas (by name).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum QuotaKey {
    /// A KarmadaQuota.
    Namespaced {
        /// metadata.namespace.
        namespace: String,
        /// metadata.name.
        name: String,
    },
    /// A KarmadaClusterQuota.
    Cluster {
        /// metadata.name.
        name: String,
    },
}

impl QuotaKey {
    /// metadata.name.
    pub fn name(&self) -> &str {
        match self {
            QuotaKey::Namespaced { name, .. } | QuotaKey::Cluster { name } => name,
        }
    }

    /// metadata.namespace; `None` for a cluster quota.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            QuotaKey::Namespaced { namespace, .. } => Some(namespace),
            QuotaKey::Cluster { .. } => None,
        }
    }

    /// Whether it names a KarmadaClusterQuota.
    pub fn is_cluster(&self) -> bool {
        matches!(self, QuotaKey::Cluster { .. })
    }

    /// The word messages use for the kind: `quota` or `cluster quota`.
    pub fn noun(&self) -> &'static str {
        if self.is_cluster() {
            "cluster quota"
        } else {
            "quota"
        }
    }
}

impl std::fmt::Display for QuotaKey {
    /// `namespace/name` for a KarmadaQuota, `name` for a KarmadaClusterQuota.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            QuotaKey::Namespaced { namespace, name } => write!(f, "{namespace}/{name}"),
            QuotaKey::Cluster { name } => f.write_str(name),
        }
    }
}

/// The errors of a namespace selector at `field` (Kubernetes' `ValidateLabelSelector`,
/// plus the two rules of a cluster quota): it is required; an empty one is refused (it
/// would select every namespace); `matchLabels` keys are qualified names and values label
/// values; each expression has a qualified-name key, an operator among `In`, `NotIn`,
/// `Exists`, `DoesNotExist`, values for `In`/`NotIn` (each a label value) and none for
/// the other two.
pub fn validate_namespace_selector(
    selector: Option<&LabelSelector>,
    field: &str,
) -> Vec<FieldError> {
    let Some(selector) = selector else {
        return vec![FieldError {
            field: field.to_owned(),
            message: "Required value: a cluster quota must select its namespaces".to_owned(),
        }];
    };
    if selector.match_labels.is_empty() && selector.match_expressions.is_empty() {
        return vec![FieldError::invalid(
            field,
            "{}",
            "an empty selector would select every namespace; name the labels of the \
             namespaces this quota covers",
        )];
    }
    let mut errors = Vec::new();
    for (key, value) in &selector.match_labels {
        let at = format!("{field}.matchLabels");
        if let Err(why) = check_qualified_name(key) {
            errors.push(FieldError::invalid(&at, key, why));
        }
        if let Err(why) = check_label_value(value) {
            errors.push(FieldError::invalid(format!("{at}[{key}]"), value, why));
        }
    }
    for (i, r) in selector.match_expressions.iter().enumerate() {
        let path = |child: &str| format!("{field}.matchExpressions[{i}].{child}");
        if let Err(why) = check_qualified_name(&r.key) {
            errors.push(FieldError::invalid(path("key"), &r.key, why));
        }
        match r.operator.as_str() {
            "In" | "NotIn" if r.values.is_empty() => errors.push(FieldError {
                field: path("values"),
                message: format!(
                    "Required value: must be specified when `operator` is '{}'",
                    r.operator
                ),
            }),
            "In" | "NotIn" => {
                for (j, v) in r.values.iter().enumerate() {
                    if let Err(why) = check_label_value(v) {
                        errors.push(FieldError::invalid(path(&format!("values[{j}]")), v, why));
                    }
                }
            }
            "Exists" | "DoesNotExist" if !r.values.is_empty() => errors.push(FieldError {
                field: path("values"),
                message: format!(
                    "Forbidden: may not be specified when `operator` is '{}'",
                    r.operator
                ),
            }),
            "Exists" | "DoesNotExist" => {}
            other => errors.push(FieldError {
                field: path("operator"),
                message: format!(
                    "Unsupported value: {other:?}: supported values: \"In\", \"NotIn\", \
                     \"Exists\", \"DoesNotExist\""
                ),
            }),
        }
    }
    errors
}

/// Kubernetes' label value: empty, or at most 63 characters of `[A-Za-z0-9._-]` beginning
/// and ending with an alphanumeric.
fn check_label_value(value: &str) -> Result<(), String> {
    if value.is_empty() {
        return Ok(());
    }
    check_name_segment(value, 63)
}

/// `[A-Za-z0-9._-]`, alphanumeric at both ends, at most `max` characters.
fn check_name_segment(s: &str, max: usize) -> Result<(), String> {
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends = s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if s.len() > max {
        Err(format!("must be no more than {max} characters"))
    } else if !ok_chars || !ends {
        Err(
            "a valid label must consist of alphanumeric characters, '-', '_' or '.', and \
             must start and end with an alphanumeric character"
                .to_owned(),
        )
    } else {
        Ok(())
    }
}

/// Kubernetes' qualified name: `[prefix/]name`, the name a label value that is not empty,
/// the prefix a DNS subdomain.
fn check_qualified_name(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let dns = !prefix.is_empty()
            && prefix.len() <= 253
            && prefix.split('.').all(|label| {
                !label.is_empty()
                    && label
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && !label.starts_with('-')
                    && !label.ends_with('-')
            });
        if !dns {
            return Err("the prefix must be a lowercase DNS subdomain".to_owned());
        }
    }
    if name.is_empty() {
        return Err("name part must be non-empty".to_owned());
    }
    check_name_segment(name, 63)
}

/// A cluster quota's usage per covered namespace: for each `(namespace, charges)` the
/// scoped usage of its bindings, given as distinct charges each with the number of
/// bindings that cost it, restricted to `hard`'s names (every hard name present, zero when
/// nothing uses it). The namespaces come out in the order given; the sum over them is what
/// [`crate::status::compute`] gives for the union of the bindings.
pub fn namespace_usage<'a, B>(
    hard: &ResourceList,
    scope: &ScopeSelector,
    namespaces: impl IntoIterator<Item = (&'a str, B)>,
) -> Vec<(String, ResourceList)>
where
    B: IntoIterator<Item = (&'a BindingCharge, usize)>,
{
    namespaces
        .into_iter()
        .map(|(ns, charges)| {
            let mut acc = ScopedUsage::default();
            for (charge, n) in charges {
                if n > 0 {
                    charge.add_scoped_times_to(
                        scope,
                        &mut acc,
                        i64::try_from(n).unwrap_or(i64::MAX),
                    );
                }
            }
            let used = hard
                .names()
                .map(|name| (name.to_owned(), acc.total.get_or_zero(name)))
                .collect();
            (ns.to_owned(), used)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::{AdmissionRequest, Decision, decide, decide_batch_selected};
    use crate::placement::SelectorRequirement;
    use crate::quota::{QuotaSpec, QuotaState, validate_cluster_spec};
    use crate::testutil::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn selector(yaml: &str) -> LabelSelector {
        serde_saphyr::from_str(yaml).expect("a selector")
    }

    fn business(name: &str, hard: &[(&str, &str)], used: &[(&str, &str)]) -> QuotaState {
        QuotaState {
            clusters: Vec::new(),
            name: name.into(),
            covers: Covers::Selected(selector("{matchLabels: {business: a}}")),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: mk_list(hard),
                scope: ScopeSelector::default(),
            },
            used: Some(mk_list(used)),
            reservations: Vec::new(),
        }
    }

    fn namespaced(
        ns: &str,
        name: &str,
        hard: &[(&str, &str)],
        used: &[(&str, &str)],
    ) -> QuotaState {
        QuotaState {
            clusters: Vec::new(),
            covers: Covers::Namespace(ns.into()),
            ..business(name, hard, used)
        }
    }

    fn req<'a>(ns: &'a str, uid: &'a str, new: &'a BindingCharge) -> AdmissionRequest<'a> {
        AdmissionRequest {
            namespace: ns,
            name: uid,
            uid,
            generation: 1,
            old: None,
            new,
            now: 1_000,
            reservation_ttl: 60,
            max_reservations: 1000,
        }
    }

    #[test]
    fn a_selector_covers_the_namespaces_whose_labels_it_matches() {
        let covers = Covers::Selected(selector(
            "{matchLabels: {business: a}, matchExpressions: [{key: env, operator: NotIn, values: [sandbox]}]}",
        ));
        let dev = labels(&[("business", "a"), ("env", "dev")]);
        assert!(covers.covers("team-a-dev", Some(&dev)));
        assert!(covers.covers("team-a-batch", Some(&labels(&[("business", "a")]))));
        let sandbox = labels(&[("business", "a"), ("env", "sandbox")]);
        assert!(!covers.covers("team-a-sandbox", Some(&sandbox)));
        assert!(!covers.covers("team-b", Some(&labels(&[("business", "b")]))));
        // A namespace the webhook has not seen has no labels: no selector matches it.
        assert!(!covers.covers("team-a-dev", None));
        // A KarmadaQuota covers its own namespace only, labels or not.
        let own = Covers::Namespace("team-a-dev".into());
        assert!(own.covers("team-a-dev", None));
        assert!(!own.covers("team-a-prod", Some(&dev)));
    }

    #[test]
    fn exists_and_does_not_exist_select_on_the_key_alone() {
        let exists = Covers::Selected(selector(
            "{matchExpressions: [{key: business, operator: Exists}]}",
        ));
        let absent = Covers::Selected(selector(
            "{matchExpressions: [{key: business, operator: DoesNotExist}]}",
        ));
        let any = labels(&[("business", "")]);
        assert!(exists.covers("x", Some(&any)));
        assert!(!absent.covers("x", Some(&any)));
        assert!(absent.covers("x", Some(&Labels::new())));
    }

    #[test]
    fn keys_order_the_namespace_quotas_before_the_cluster_quotas() {
        let mut keys = [
            QuotaKey::Cluster { name: "a".into() },
            QuotaKey::Namespaced {
                namespace: "ns".into(),
                name: "z".into(),
            },
        ];
        keys.sort();
        assert_eq!(keys[0].to_string(), "ns/z");
        assert_eq!(keys[1].to_string(), "a");
        assert_eq!(keys[1].noun(), "cluster quota");
        assert_eq!(keys[0].namespace(), Some("ns"));
    }

    fn errors(selector: Option<&LabelSelector>) -> Vec<String> {
        validate_namespace_selector(selector, "spec.namespaceSelector")
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_namespace_selector_is_required_and_may_not_be_empty() {
        assert_eq!(
            errors(None),
            ["spec.namespaceSelector: Required value: a cluster quota must select its namespaces"]
        );
        assert_eq!(
            errors(Some(&LabelSelector::default())),
            [
                "spec.namespaceSelector: Invalid value: \"{}\": an empty selector would select \
                 every namespace; name the labels of the namespaces this quota covers"
            ]
        );
        assert!(errors(Some(&selector("{matchLabels: {business: a}}"))).is_empty());
        assert!(
            errors(Some(&selector(
                "{matchExpressions: [{key: example.com/business, operator: In, values: [a, b]}]}"
            )))
            .is_empty()
        );
    }

    #[test]
    fn a_namespace_selector_names_each_bad_field() {
        let bad = LabelSelector {
            match_labels: [("bad key!".to_owned(), "-x".to_owned())].into(),
            match_expressions: vec![
                SelectorRequirement {
                    key: "env".into(),
                    operator: "In".into(),
                    values: vec![],
                },
                SelectorRequirement {
                    key: "env".into(),
                    operator: "Exists".into(),
                    values: vec!["x".into()],
                },
                SelectorRequirement {
                    key: "Upper.Case/x".into(),
                    operator: "Gt".into(),
                    values: vec![],
                },
            ],
        };
        let fields: Vec<String> = validate_namespace_selector(Some(&bad), "spec.namespaceSelector")
            .into_iter()
            .map(|e| e.field)
            .collect();
        assert_eq!(
            fields,
            [
                "spec.namespaceSelector.matchLabels",
                "spec.namespaceSelector.matchLabels[bad key!]",
                "spec.namespaceSelector.matchExpressions[0].values",
                "spec.namespaceSelector.matchExpressions[1].values",
                "spec.namespaceSelector.matchExpressions[2].key",
                "spec.namespaceSelector.matchExpressions[2].operator",
            ]
        );
    }

    #[test]
    fn a_cluster_spec_reports_selector_and_hard_errors_together() {
        let errs = validate_cluster_spec(None, [("limits.cpu", "1")], &[]).unwrap_err();
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["spec.namespaceSelector", "spec.hard[limits.cpu]"]);
        let sel = selector("{matchLabels: {business: a}}");
        let (got, spec) =
            validate_cluster_spec(Some(&sel), [("requests.cpu", "50")], &[]).expect("valid");
        assert_eq!(got, sel);
        assert_eq!(spec.hard, mk_list(&[("requests.cpu", "50")]));
    }

    #[test]
    fn a_batch_over_three_namespaces_shares_one_cluster_quota() {
        let ns_labels: BTreeMap<&str, Labels> = [
            ("a-dev", labels(&[("business", "a")])),
            ("a-prod", labels(&[("business", "a")])),
            ("a-batch", labels(&[("business", "a")])),
            ("b", labels(&[("business", "b")])),
        ]
        .into();
        let mut quotas = vec![business(
            "biz-a",
            &[("requests.cpu", "5")],
            &[("requests.cpu", "2")],
        )];
        let one = mk_charge(&mk_deployment(1, &[("cpu", "1")], "", &[]));
        let uids: Vec<String> = (0..6).map(|i| format!("u{i}")).collect();
        let nss = ["a-dev", "a-prod", "a-batch", "b", "a-dev", "a-prod"];
        let reqs: Vec<AdmissionRequest<'_>> = nss
            .iter()
            .zip(&uids)
            .map(|(ns, uid)| req(ns, uid, &one))
            .collect();
        let decisions = decide_batch_selected(&mut quotas, &reqs, |ns| ns_labels.get(ns));
        let outcome: Vec<&str> = decisions
            .iter()
            .map(|d| match d {
                Decision::Allow(e) if e.is_empty() => "free",
                Decision::Allow(_) => "charged",
                Decision::Deny(_) => "denied",
            })
            .collect();
        // 2 used + 3 admitted = 5; namespace b is not selected, so it is not charged.
        assert_eq!(
            outcome,
            ["charged", "charged", "charged", "free", "denied", "denied"]
        );
        let Decision::Deny(denial) = &decisions[4] else {
            unreachable!()
        };
        assert!(denial.cluster);
        assert_eq!(
            denial.message,
            "exceeded cluster quota: biz-a, requested: requests.cpu=1, used: requests.cpu=5, \
             limited: requests.cpu=5"
        );
        // Each entry names its binding's namespace: the controller prunes it there.
        let ns_of_entries: Vec<&str> = quotas[0]
            .reservations
            .iter()
            .map(|r| r.reserved_by.namespace.as_str())
            .collect();
        assert_eq!(ns_of_entries, ["a-dev", "a-prod", "a-batch"]);
    }

    #[test]
    fn a_binding_must_fit_its_namespace_quota_and_every_cluster_quota() {
        let one = mk_charge(&mk_deployment(1, &[("cpu", "1")], "", &[]));
        let a = labels(&[("business", "a")]);
        let both = |ns_used: &str, biz_used: &str| {
            vec![
                business(
                    "biz-a",
                    &[("requests.cpu", "10")],
                    &[("requests.cpu", biz_used)],
                ),
                namespaced(
                    "a-dev",
                    "dev",
                    &[("requests.cpu", "4")],
                    &[("requests.cpu", ns_used)],
                ),
                // Another namespace's quota of the batch's union never applies here.
                namespaced(
                    "a-prod",
                    "prod",
                    &[("requests.cpu", "0")],
                    &[("requests.cpu", "0")],
                ),
            ]
        };
        let run = |mut quotas: Vec<QuotaState>| {
            decide_batch_selected(&mut quotas, &[req("a-dev", "u", &one)], |_| Some(&a)).remove(0)
        };
        let Decision::Allow(entries) = run(both("0", "0")) else {
            panic!("fits both")
        };
        let keys: Vec<String> = entries.iter().map(|(k, _)| k.to_string()).collect();
        assert_eq!(keys, ["a-dev/dev", "biz-a"]);
        assert_eq!(entries[0].1.reserved_by.namespace, "");
        assert_eq!(entries[1].1.reserved_by.namespace, "a-dev");
        let Decision::Deny(d) = run(both("4", "0")) else {
            panic!("the namespace quota is full")
        };
        assert!(
            d.message.starts_with("exceeded quota: dev,"),
            "{}",
            d.message
        );
        let Decision::Deny(d) = run(both("0", "10")) else {
            panic!("the cluster quota is full")
        };
        assert!(
            d.message.starts_with("exceeded cluster quota: biz-a,"),
            "{}",
            d.message
        );
        // `decide` alone takes the quotas as given (they all apply).
        assert!(decide(&both("0", "10")[1..2], &req("a-dev", "u", &one)).is_allowed());
    }

    #[test]
    fn per_namespace_usage_sums_to_the_union() {
        let hard = mk_list(&[("requests.cpu", "50"), ("pods", "100")]);
        let dev = [
            mk_charge(&mk_deployment(2, &[("cpu", "1")], "", &[])),
            mk_charge(&mk_deployment(1, &[("cpu", "500m")], "", &[])),
        ];
        let prod = [mk_charge(&mk_deployment(3, &[("cpu", "2")], "high", &[]))];
        let rows = namespace_usage(
            &hard,
            &ScopeSelector::default(),
            [
                ("a-dev", vec![(&dev[0], 1), (&dev[1], 1)]),
                ("a-prod", vec![(&prod[0], 1)]),
                ("a-batch", Vec::new()),
            ],
        );
        let shown: Vec<(String, String)> = rows
            .iter()
            .map(|(ns, l)| (ns.clone(), l.to_string()))
            .collect();
        assert_eq!(
            shown,
            [
                ("a-dev".to_owned(), "pods=3,requests.cpu=2500m".to_owned()),
                ("a-prod".to_owned(), "pods=3,requests.cpu=6".to_owned()),
                ("a-batch".to_owned(), "pods=0,requests.cpu=0".to_owned()),
            ]
        );
        let state = QuotaState {
            clusters: Vec::new(),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: hard.clone(),
                scope: ScopeSelector::default(),
            },
            ..business("biz-a", &[], &[])
        };
        let view = crate::status::compute(
            "",
            &state,
            dev.iter().chain(prod.iter()),
            |_| crate::ledger::Observation::NotSeen,
            &crate::status::ObservedPods::new(),
            0,
        );
        let mut sum = ResourceList::new();
        for (_, l) in &rows {
            sum.add_assign(l);
        }
        assert_eq!(view.used, sum);
        // A scope applies per namespace too.
        let high = namespace_usage(
            &hard,
            &mk_scope("In", &["high"]),
            [("a-dev", dev.iter().map(|c| (c, 1)))],
        );
        assert_eq!(high[0].1.to_string(), "pods=0,requests.cpu=0");
        // A charge counted n times is n of it.
        let twice = namespace_usage(
            &hard,
            &ScopeSelector::default(),
            [("a-prod", [(&prod[0], 2), (&dev[0], 0)])],
        );
        assert_eq!(twice[0].1.to_string(), "pods=6,requests.cpu=12");
    }
}
