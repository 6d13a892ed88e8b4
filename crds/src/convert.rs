//! KarmadaQuota and KarmadaClusterQuota (API, strings) ⇄ the engine's types (parsed,
//! validated).
//!
//! The API types keep quantities as strings so that one bad object never fails a whole
//! watch; everything is parsed and validated here, with errors that name the field.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity as ApiQuantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use karmada_quota_core::placement::{LabelSelector, SelectorRequirement};
use karmada_quota_core::queue::{Admission, AdmissionMode, QueueOrder};
use karmada_quota_core::quota::validate_cluster_spec as core_validate_cluster;
use karmada_quota_core::quota::{
    self as cq, DrainingReplicas, FieldError, MemberUsage, ObservedLimit, QuotaPolicy, QuotaSpec,
    QuotaState, Unaccounted,
};
use karmada_quota_core::scope::RawRequirement;
use karmada_quota_core::selection::Covers;
use karmada_quota_core::{Quantity, QuantityError, ResourceList};
use kube::ResourceExt;

use crate::cluster_quota::KarmadaClusterQuota;
use crate::quota::{KarmadaQuota, KarmadaQuotaSpec, KarmadaQuotaStatus, Reservation, ReservedBy};

/// Validate a KarmadaQuota spec with the engine's rules (names, quantities, scopes,
/// the admission policy's values): every error at once.
pub fn validate_spec(spec: &KarmadaQuotaSpec) -> Result<QuotaSpec, Vec<FieldError>> {
    let checked = cq::validate_spec(
        spec.hard.iter().map(|(k, v)| (k.as_str(), v.0.as_str())),
        &raw_scope(spec),
    );
    let (mut q, policy) = both(checked, policy_of(spec))?;
    q.policy = policy;
    Ok(q)
}

/// Validate a KarmadaClusterQuota spec: the namespace selector (required, not empty,
/// well formed), then `hard`, `scopeSelector` and the policy as a KarmadaQuota's.
pub fn validate_cluster_spec(
    cluster: &KarmadaClusterQuota,
) -> Result<(LabelSelector, QuotaSpec), Vec<FieldError>> {
    let spec = &cluster.spec.quota;
    let selector = cluster
        .spec
        .namespace_selector
        .as_ref()
        .map(selector_from_api);
    let checked = core_validate_cluster(
        selector.as_ref(),
        spec.hard.iter().map(|(k, v)| (k.as_str(), v.0.as_str())),
        &raw_scope(spec),
    );
    let ((selector, mut q), policy) = both(checked, policy_of(spec))?;
    q.policy = policy;
    Ok((selector, q))
}

/// Both results, or every error of either.
fn both<A, B>(
    a: Result<A, Vec<FieldError>>,
    b: Result<B, Vec<FieldError>>,
) -> Result<(A, B), Vec<FieldError>> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => Err(e),
        (Err(mut a), Err(mut b)) => {
            a.append(&mut b);
            Err(a)
        }
    }
}

/// `spec.observedLimit`, `spec.unaccountedWorkloads` and `spec.drainingReplicas`; an unknown value is an error
/// naming the field and the values it takes (the schema refuses it too).
fn policy_of(spec: &KarmadaQuotaSpec) -> Result<QuotaPolicy, Vec<FieldError>> {
    let mut errors = Vec::new();
    let observed = match spec.observed_limit.as_deref() {
        None | Some("Enforce") => ObservedLimit::Enforce,
        Some("Ignore") => ObservedLimit::Ignore,
        Some(other) => {
            errors.push(FieldError::invalid(
                "spec.observedLimit",
                other,
                "supported values: \"Enforce\", \"Ignore\"",
            ));
            ObservedLimit::Enforce
        }
    };
    let unaccounted = match spec.unaccounted_workloads.as_deref() {
        None => None,
        Some("Deny") => Some(Unaccounted::Deny),
        Some("Observed") => Some(Unaccounted::Observed),
        Some("Allow") => Some(Unaccounted::Allow),
        Some(other) => {
            errors.push(FieldError::invalid(
                "spec.unaccountedWorkloads",
                other,
                "supported values: \"Deny\", \"Observed\", \"Allow\"",
            ));
            None
        }
    };
    let draining = match spec.draining_replicas.as_deref() {
        None | Some("Show") => DrainingReplicas::Show,
        Some("Count") => DrainingReplicas::Count,
        Some(other) => {
            errors.push(FieldError::invalid(
                "spec.drainingReplicas",
                other,
                "supported values: \"Show\", \"Count\"",
            ));
            DrainingReplicas::Show
        }
    };
    let admission = admission_of(spec, &mut errors);
    if errors.is_empty() {
        Ok(QuotaPolicy {
            observed,
            unaccounted,
            draining,
            admission,
        })
    } else {
        Err(errors)
    }
}

/// `spec.admission` (mode and order); an unknown value is an error naming the field.
fn admission_of(spec: &KarmadaQuotaSpec, errors: &mut Vec<FieldError>) -> Admission {
    let admission = spec.admission.clone().unwrap_or_default();
    let mode = match admission.mode.as_deref() {
        None | Some("Refuse") => AdmissionMode::Refuse,
        Some("Queue") => AdmissionMode::Queue,
        Some(other) => {
            errors.push(FieldError::invalid(
                "spec.admission.mode",
                other,
                "supported values: \"Refuse\", \"Queue\"",
            ));
            AdmissionMode::Refuse
        }
    };
    let order = match admission.order.as_deref() {
        None | Some("BestEffortFIFO") => QueueOrder::BestEffortFifo,
        Some("StrictFIFO") => QueueOrder::StrictFifo,
        Some(other) => {
            errors.push(FieldError::invalid(
                "spec.admission.order",
                other,
                "supported values: \"StrictFIFO\", \"BestEffortFIFO\"",
            ));
            QueueOrder::BestEffortFifo
        }
    };
    Admission { mode, order }
}

/// The API's label selector as core's (same fields, same semantics).
pub fn selector_from_api(
    s: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> LabelSelector {
    LabelSelector {
        match_labels: s.match_labels.clone().unwrap_or_default(),
        match_expressions: s
            .match_expressions
            .iter()
            .flatten()
            .map(|r| SelectorRequirement {
                key: r.key.clone(),
                operator: r.operator.clone(),
                values: r.values.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

/// `spec.scopeSelector.matchExpressions` as the engine reads them.
fn raw_scope(spec: &KarmadaQuotaSpec) -> Vec<RawRequirement<'_>> {
    spec.scope_selector
        .iter()
        .flat_map(|s| s.match_expressions.iter())
        .map(|e| RawRequirement {
            scope_name: &e.scope_name,
            operator: &e.operator,
            values: &e.values,
        })
        .collect()
}

/// A stored status, parsed: what both writers read before they change it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StoredStatus {
    /// `status.used`; `None` while it is empty (not synced by the controller) or when it
    /// does not parse (then an error names it).
    pub used: Option<ResourceList>,
    /// The entries that parse, in stored order.
    pub reservations: Vec<cq::Reservation>,
    /// The entries that do not parse, verbatim (with their errors in `errors`).
    pub unparsed: Vec<Reservation>,
    /// What did not parse, each naming its field (`status.used[cpu]`,
    /// `status.reservations[3].reserved[cpu]`).
    pub errors: Vec<FieldError>,
}

/// Parse a stored status — the one parse both the webhook and the controller use. Status
/// values are written only by this project, so one that does not parse is a bug or a hand
/// edit: the webhook refuses to enforce from a guess ([`quota_state`]), the controller
/// recomputes `used` and keeps an unparseable entry verbatim until it expires.
pub fn parse_status(status: Option<&KarmadaQuotaStatus>) -> StoredStatus {
    let mut out = StoredStatus::default();
    let Some(st) = status else {
        return out;
    };
    if !st.used.is_empty() {
        match usage_from_api(&st.used, "status.used") {
            Ok(l) => out.used = Some(l),
            Err(e) => out.errors.push(e),
        }
    }
    out.reservations.reserve(st.reservations.len());
    for (i, r) in st.reservations.iter().enumerate() {
        match reservation_from_api(r, &format!("status.reservations[{i}]")) {
            Ok(parsed) => out.reservations.push(parsed),
            Err(e) => {
                out.errors.push(e);
                out.unparsed.push(r.clone());
            }
        }
    }
    out
}

/// `status.clusters` as admission reads it (placed and observed usage per member). A row
/// whose values do not parse counts as not measured: observed usage only ever refuses
/// (`spec.observedLimit`), so a row it cannot read refuses nothing.
pub fn members_of(status: Option<&KarmadaQuotaStatus>) -> Vec<MemberUsage> {
    status
        .map(|s| {
            s.clusters
                .iter()
                .map(|c| MemberUsage {
                    name: c.name.clone(),
                    placed: stored_list_from_api(&c.used, "status.clusters.used")
                        .unwrap_or_default(),
                    observed: c
                        .observed
                        .as_ref()
                        .and_then(|o| stored_list_from_api(o, "status.clusters.observed").ok()),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The engine's view of a quota (validated spec + status) for the webhook's decision:
/// any spec or status error refuses it (the quota must not be enforced from a guess).
pub fn quota_state(q: &KarmadaQuota) -> Result<QuotaState, Vec<FieldError>> {
    let spec = validate_spec(&q.spec)?;
    let stored = parse_status(q.status.as_ref());
    if !stored.errors.is_empty() {
        return Err(stored.errors);
    }
    Ok(QuotaState {
        clusters: members_of(q.status.as_ref()),
        name: q.name_any(),
        covers: Covers::Namespace(q.namespace().unwrap_or_default()),
        spec,
        used: stored.used,
        reservations: stored.reservations,
    })
}

/// The engine's view of a cluster quota, like [`quota_state`]: it covers the namespaces
/// its selector matches.
pub fn cluster_quota_state(q: &KarmadaClusterQuota) -> Result<QuotaState, Vec<FieldError>> {
    let (selector, spec) = validate_cluster_spec(q)?;
    let stored = parse_status(q.status.as_ref().map(|s| &s.quota));
    if !stored.errors.is_empty() {
        return Err(stored.errors);
    }
    Ok(QuotaState {
        clusters: members_of(q.status.as_ref().map(|s| &s.quota)),
        name: q.name_any(),
        covers: Covers::Selected(selector),
        spec,
        used: stored.used,
        reservations: stored.reservations,
    })
}

/// Parse an API resource map a user writes (`spec.hard`) with [`Quantity::parse`]; the
/// error names `field[resource]`.
pub fn list_from_api(
    map: &BTreeMap<String, ApiQuantity>,
    field: &str,
) -> Result<ResourceList, FieldError> {
    list_with(map, field, Quantity::parse)
}

/// Parse an API resource map already stored — a status's usage, a pod's requests — with
/// [`Quantity::read`]: a value past the largest quantity this project parses, which
/// Kubernetes stores as given, is kept, so the object is not left unread.
pub fn stored_list_from_api(
    map: &BTreeMap<String, ApiQuantity>,
    field: &str,
) -> Result<ResourceList, FieldError> {
    list_with(map, field, Quantity::read)
}

fn list_with(
    map: &BTreeMap<String, ApiQuantity>,
    field: &str,
    parse: fn(&str) -> Result<Quantity, QuantityError>,
) -> Result<ResourceList, FieldError> {
    let mut out = BTreeMap::new();
    for (name, q) in map {
        let parsed = parse(&q.0).map_err(|e| FieldError {
            field: format!("{field}[{name}]"),
            message: format!("Invalid value: {:?}: {e}", q.0),
        })?;
        out.insert(name.clone(), parsed);
    }
    Ok(ResourceList(out))
}

/// Parse a usage map of the status (`used`, an entry's `reserved`): like [`stored_list_from_api`],
/// and no value may be negative — this project never writes one, and a negative value
/// would lower effective usage (an over-commit), so it is an error naming `field[resource]`.
fn usage_from_api(
    map: &BTreeMap<String, ApiQuantity>,
    field: &str,
) -> Result<ResourceList, FieldError> {
    let list = stored_list_from_api(map, field)?;
    match list.0.keys().find(|name| list.0[*name].is_negative()) {
        Some(name) => Err(FieldError::invalid(
            format!("{field}[{name}]"),
            map.get(name).map_or("", |q| q.0.as_str()),
            "must be greater than or equal to 0",
        )),
        None => Ok(list),
    }
}

/// Render a resource list with canonical quantity strings.
pub fn list_to_api(list: &ResourceList) -> BTreeMap<String, ApiQuantity> {
    list.0
        .iter()
        .map(|(k, v)| (k.clone(), ApiQuantity(v.to_string())))
        .collect()
}

/// API reservation → engine reservation.
pub fn reservation_from_api(r: &Reservation, field: &str) -> Result<cq::Reservation, FieldError> {
    Ok(cq::Reservation {
        reserved_by: cq::ReservedBy {
            api_version: r.reserved_by.api_version.clone(),
            kind: r.reserved_by.kind.clone(),
            namespace: r.reserved_by.namespace.clone(),
            name: r.reserved_by.name.clone(),
            uid: r.reserved_by.uid.clone(),
        },
        generation: r.generation,
        reserved: usage_from_api(&r.reserved, &format!("{field}.reserved"))?,
        expiration_time: r.expiration_time.0.as_second(),
    })
}

/// Engine reservation → API reservation.
pub fn reservation_to_api(r: &cq::Reservation) -> Reservation {
    Reservation {
        reserved_by: ReservedBy {
            api_version: r.reserved_by.api_version.clone(),
            kind: r.reserved_by.kind.clone(),
            namespace: r.reserved_by.namespace.clone(),
            name: r.reserved_by.name.clone(),
            uid: r.reserved_by.uid.clone(),
        },
        generation: r.generation,
        reserved: list_to_api(&r.reserved),
        expiration_time: unix_to_time(r.expiration_time),
    }
}

/// Make the status entries `reservations` hold one reservation-store fence covering
/// `hard` (core's `fence::ensure` on the API types): for a status written outside the
/// controller's plan — tests fencing a quota as the controller would, the simulation's
/// initial quotas.
pub fn ensure_fence(
    reservations: &mut Vec<Reservation>,
    hard: &BTreeMap<String, ApiQuantity>,
) -> Result<(), FieldError> {
    use karmada_quota_core::fence;
    let hard = list_from_api(hard, "spec.hard")?;
    reservations.retain(|r| r.reserved_by.kind != fence::FENCE_KIND);
    reservations.push(reservation_to_api(&fence::fence_entry(&hard)));
    Ok(())
}

/// Whether an API status entry is the reservation-store fence (core's `fence::is_fence`).
pub fn is_fence(r: &Reservation) -> bool {
    r.reserved_by.kind == karmada_quota_core::fence::FENCE_KIND
}

/// Unix seconds → API time (clamped to jiff's range, which no real clock leaves).
pub fn unix_to_time(secs: i64) -> Time {
    let ts = jiff::Timestamp::from_second(secs).unwrap_or(if secs < 0 {
        jiff::Timestamp::MIN
    } else {
        jiff::Timestamp::MAX
    });
    Time(ts)
}

/// `requests.cpu: 3100m/100, pods: 11/500` — the printer column's summary, in hard's
/// name order; a name with no usage yet shows `?`.
pub fn summary(hard: &ResourceList, used: Option<&ResourceList>) -> String {
    hard.0
        .iter()
        .map(|(name, h)| {
            let u = used
                .and_then(|u| u.0.get(name))
                .map_or_else(|| "?".to_owned(), |q| q.to_string());
            format!("{name}: {u}/{h}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../testdata/karmadaquota.yaml");

    fn example() -> KarmadaQuota {
        serde_saphyr::from_str(EXAMPLE).expect("the example parses")
    }

    #[test]
    fn example_quota_converts_with_used_and_reservations() {
        let state = quota_state(&example()).expect("valid");
        assert_eq!(state.name, "team-a-compute");
        assert_eq!(state.spec.hard.0.len(), 5);
        let used = state.used.expect("status.used present");
        assert_eq!(used.0["requests.cpu"].to_string(), "3100m");
        assert_eq!(used.0["requests.memory"].to_string(), "4352Mi");
        assert_eq!(state.reservations.len(), 1);
        let r = &state.reservations[0];
        assert_eq!(r.reserved_by.name, "api-deployment");
        assert_eq!(r.generation, 1);
        assert_eq!(r.reserved.0["requests.memory"].to_string(), "4Gi");
        assert_eq!(
            r.expiration_time,
            "2026-11-22T01:12:40Z"
                .parse::<jiff::Timestamp>()
                .unwrap()
                .as_second()
        );
    }

    #[test]
    fn draining_replicas_is_show_by_default_count_when_asked_and_refuses_other_values() {
        let mut q = example();
        let policy = |q: &KarmadaQuota| validate_spec(&q.spec).map(|s| s.policy.draining);
        assert_eq!(policy(&q), Ok(DrainingReplicas::Show));
        q.spec.draining_replicas = Some("Count".into());
        assert_eq!(policy(&q), Ok(DrainingReplicas::Count));
        q.spec.draining_replicas = Some("Show".into());
        assert_eq!(policy(&q), Ok(DrainingReplicas::Show));
        q.spec.draining_replicas = Some("count".into());
        let errors = policy(&q).expect_err("refused");
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().contains("spec.drainingReplicas"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn example_cluster_quota_converts_with_its_selector_and_namespaced_entries() {
        let q: KarmadaClusterQuota =
            serde_saphyr::from_str(include_str!("../../testdata/karmadaclusterquota.yaml"))
                .expect("the example parses");
        let state = cluster_quota_state(&q).expect("valid");
        assert_eq!(state.name, "business-a");
        assert!(state.covers.is_cluster());
        let labels = [("business".to_owned(), "a".to_owned())].into();
        assert!(state.covers.covers("team-a-dev", Some(&labels)));
        assert_eq!(
            state.used.expect("used").0["requests.cpu"].to_string(),
            "3500m"
        );
        assert_eq!(state.reservations[0].reserved_by.namespace, "team-a-prod");
        let status = q.status.as_ref().unwrap();
        assert_eq!(status.namespaces.len(), 2);
        assert_eq!(status.quota.clusters.len(), 2);
        // The same object serializes back with the KarmadaQuota fields at the same paths.
        let json = serde_json::to_value(&q).unwrap();
        assert_eq!(json["spec"]["hard"]["requests.cpu"], "50");
        assert_eq!(json["status"]["namespaces"][1]["name"], "team-a-prod");
        assert_eq!(json["status"]["used"]["pods"], "7");
    }

    #[test]
    fn a_cluster_quota_without_selector_or_with_an_empty_one_is_refused_naming_the_field() {
        let mut q: KarmadaClusterQuota =
            serde_saphyr::from_str(include_str!("../../testdata/karmadaclusterquota.yaml"))
                .unwrap();
        q.spec.namespace_selector = None;
        let errs = cluster_quota_state(&q).unwrap_err();
        assert_eq!(errs[0].field, "spec.namespaceSelector");
        q.spec.namespace_selector = Some(Default::default());
        let errs = validate_cluster_spec(&q).unwrap_err();
        assert_eq!(errs[0].field, "spec.namespaceSelector");
        assert!(
            errs[0].message.contains("every namespace"),
            "{}",
            errs[0].message
        );
    }

    #[test]
    fn reservation_round_trips_through_the_api_form() {
        let state = quota_state(&example()).unwrap();
        let api = reservation_to_api(&state.reservations[0]);
        let back = reservation_from_api(&api, "x").unwrap();
        assert_eq!(back, state.reservations[0]);
    }

    #[test]
    fn quota_without_status_has_unknown_usage() {
        let mut q = example();
        q.status = None;
        let state = quota_state(&q).unwrap();
        assert!(state.used.is_none());
        assert!(state.reservations.is_empty());
    }

    #[test]
    fn bad_status_value_is_an_error_naming_the_field() {
        let mut q = example();
        let st = q.status.as_mut().unwrap();
        st.used.insert("pods".into(), ApiQuantity("lots".into()));
        let errs = quota_state(&q).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "status.used[pods]");
        assert!(errs[0].message.contains("\"lots\""), "{}", errs[0].message);
    }

    #[test]
    fn negative_status_values_are_errors_naming_the_field() {
        // Found by the quota_status fuzz target: a hand-edited `-1` was accepted, and a
        // negative entry lowers effective usage.
        let q: KarmadaQuota = serde_json::from_value(serde_json::json!({
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaQuota",
            "metadata": {"name": "q", "namespace": "team-a"},
            "spec": {"hard": {"pods": "10", "requests.cpu": "4"}},
            "status": {
                "used": {"pods": "-1", "requests.cpu": "1"},
                "reservations": [{
                    "reservedBy": {"apiVersion": "work.karmada.io/v1alpha2",
                                   "kind": "ResourceBinding", "name": "b", "uid": "u"},
                    "generation": 1,
                    "reserved": {"requests.cpu": "-100m"},
                    "expirationTime": "2026-11-23T11:00:00Z"
                }]
            }
        }))
        .unwrap();
        let errs = quota_state(&q).unwrap_err();
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "status.used[pods]",
                "status.reservations[0].reserved[requests.cpu]"
            ]
        );
        assert!(errs[0].message.contains("\"-1\""), "{}", errs[0].message);
        assert!(errs[1].message.contains("greater than or equal to 0"));
    }

    /// A status whose usage passed the largest quantity `hard` may hold (bindings that
    /// existed before the quota, summed) is read as written, so the quota stays enforced
    /// — full — instead of refused as unreadable; `spec.hard` past it is still refused.
    #[test]
    fn status_usage_past_the_largest_quantity_is_read_and_hard_past_it_is_refused() {
        let mut q = example();
        let st = q.status.as_mut().unwrap();
        st.used
            .insert("requests.cpu".into(), ApiQuantity("12E".into()));
        st.reservations[0]
            .reserved
            .insert("requests.cpu".into(), ApiQuantity("1e21".into()));
        st.clusters = vec![
            serde_json::from_value(serde_json::json!({
                "name": "member1", "used": {"requests.cpu": "13835058055282163712"}
            }))
            .unwrap(),
        ];
        let state = quota_state(&q).expect("a stored usage past the cap is read");
        let used = state.used.expect("used");
        assert_eq!(used.get_or_zero("requests.cpu").to_string(), "12E");
        assert_eq!(
            state.reservations[0]
                .reserved
                .get_or_zero("requests.cpu")
                .to_string(),
            "1e21"
        );
        assert_eq!(
            state.clusters[0]
                .placed
                .get_or_zero("requests.cpu")
                .to_string(),
            "13835058055282163712"
        );
        q.spec
            .hard
            .insert("requests.cpu".into(), ApiQuantity("12E".into()));
        let errs = validate_spec(&q.spec).unwrap_err();
        assert_eq!(errs[0].field, "spec.hard[requests.cpu]", "{errs:?}");
        assert!(errs[0].message.contains("out of range"), "{errs:?}");
        // Read, a negative usage past the cap is still refused as negative.
        let mut q = example();
        let st = q.status.as_mut().unwrap();
        st.used
            .insert("requests.cpu".into(), ApiQuantity("-12E".into()));
        let errs = quota_state(&q).unwrap_err();
        assert_eq!(errs[0].field, "status.used[requests.cpu]", "{errs:?}");
        assert!(
            errs[0].message.contains("greater than or equal to 0"),
            "{errs:?}"
        );
    }

    #[test]
    fn invalid_spec_reports_every_field() {
        let mut q = example();
        q.spec
            .hard
            .insert("limits.cpu".into(), ApiQuantity("1".into()));
        q.spec.hard.insert("pods".into(), ApiQuantity("-1".into()));
        let errs = validate_spec(&q.spec).unwrap_err();
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert!(fields.contains(&"spec.hard[limits.cpu]"), "{errs:?}");
        assert!(fields.contains(&"spec.hard[pods]"), "{errs:?}");
    }

    #[test]
    fn summary_shows_used_over_hard_and_unknown_as_question_mark() {
        let hard = ResourceList::parse_map([("pods", "10"), ("requests.cpu", "4")]).unwrap();
        let used = ResourceList::parse_map([("pods", "3")]).unwrap();
        assert_eq!(summary(&hard, Some(&used)), "pods: 3/10, requests.cpu: ?/4");
        assert_eq!(summary(&hard, None), "pods: ?/10, requests.cpu: ?/4");
    }

    #[test]
    fn unix_time_converts_both_ways() {
        for secs in [0, 1_700_000_000, -86_400, 4_102_444_800] {
            assert_eq!(unix_to_time(secs).0.as_second(), secs);
        }
        // Past jiff's range: clamped, and the clamp reads back as the range's end.
        let max = jiff::Timestamp::MAX.as_second();
        assert_eq!(unix_to_time(i64::MAX).0.as_second(), max);
        assert_eq!(
            unix_to_time(i64::MIN).0.as_second(),
            jiff::Timestamp::MIN.as_second()
        );
    }

    #[test]
    fn a_reservation_converts_to_the_api_and_back_unchanged() {
        let engine = cq::Reservation {
            reserved_by: cq::ReservedBy {
                api_version: "work.karmada.io/v1alpha2".into(),
                kind: "ResourceBinding".into(),
                namespace: "team-a".into(),
                name: "web".into(),
                uid: "u-1".into(),
            },
            generation: 3,
            reserved: ResourceList::parse_map([("requests.cpu", "1500m"), ("pods", "3")]).unwrap(),
            expiration_time: 1_700_000_060,
        };
        let api = reservation_to_api(&engine);
        assert_eq!(api.reserved["requests.cpu"].0, "1500m");
        assert_eq!(api.expiration_time.0.as_second(), 1_700_000_060);
        assert_eq!(reservation_from_api(&api, "r").unwrap(), engine);
        // And from the API side: an API object read back is what was written.
        assert_eq!(
            reservation_to_api(&reservation_from_api(&api, "r").unwrap()),
            api
        );
    }
}
