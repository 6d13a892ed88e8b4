//! Resource lists and resource-name rules.
//!
//! A [`ResourceList`] is a sorted map name → [`Quantity`]; serde as a JSON object of
//! canonical quantity strings (deserialize accepts strings or numbers).
//!
//! Name rules follow Kubernetes' ResourceQuota validation (a qualified name; an
//! unqualified name must be a standard quota resource), narrowed to what a ResourceBinding
//! can be charged for: [`classify`] says which kind a name is, or why it is not acceptable.

use std::collections::BTreeMap;
use std::fmt;

use crate::quantity::{Quantity, QuantityError};

/// Prefix of request names (`requests.cpu`, `requests.nvidia.com/gpu`).
pub const REQUESTS_PREFIX: &str = "requests.";
/// Prefix of limit names; valid in Kubernetes, refused here (bindings carry requests only).
pub const LIMITS_PREFIX: &str = "limits.";
/// Prefix of object-count names (`count/deployments.apps`).
pub const COUNT_PREFIX: &str = "count/";
/// Prefix of huge-page names (`hugepages-2Mi`).
pub const HUGEPAGES_PREFIX: &str = "hugepages-";
/// The pod count.
pub const PODS: &str = "pods";

/// Compute resources whose bare name means the request (huge pages aside).
const COMPUTE: [&str; 3] = ["cpu", "memory", "ephemeral-storage"];

/// Legacy object-count names, with the core-group kind each counts.
pub(crate) const LEGACY_COUNTS: [(&str, &str); 6] = [
    ("ConfigMap", "configmaps"),
    ("PersistentVolumeClaim", "persistentvolumeclaims"),
    ("ReplicationController", "replicationcontrollers"),
    ("ResourceQuota", "resourcequotas"),
    ("Secret", "secrets"),
    ("Service", "services"),
];

/// Whether `name` counts objects (`count/…` or a legacy name), which are charged per
/// binding, not per member cluster; every other name is compute (what pods use).
pub fn is_object_count(name: &str) -> bool {
    name.starts_with(COUNT_PREFIX) || LEGACY_COUNTS.iter().any(|(_, n)| *n == name)
}

/// Kubernetes' quota names that a ResourceBinding cannot be charged for, and why.
const UNENFORCEABLE: [(&str, &str); 4] = [
    (
        "requests.storage",
        "a ResourceBinding does not carry a PersistentVolumeClaim's storage request",
    ),
    (
        "services.nodeports",
        "a ResourceBinding does not show a Service's type or ports",
    ),
    (
        "services.loadbalancers",
        "a ResourceBinding does not show a Service's type",
    ),
    ("storage", "not a quota resource; use requests.storage"),
];

/// Kubernetes' qualified-name limit for the name part.
const MAX_NAME_PART: usize = 63;
/// Kubernetes' DNS-1123 subdomain limit for the prefix part.
const MAX_PREFIX_PART: usize = 253;

/// A map of resource name → quantity, sorted by name (so formatting is deterministic).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct ResourceList(pub BTreeMap<String, Quantity>);

/// What kind of name a quota may hold (see [`classify`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameKind {
    /// `cpu`, `memory`, `ephemeral-storage`, `hugepages-<size>`: compute resources whose
    /// bare name means the request.
    Compute,
    /// `requests.<compute or extended name>`.
    Requests,
    /// `limits.*`: valid in Kubernetes, but cannot be enforced here (bindings carry requests only).
    Limits,
    /// `pods`.
    Pods,
    /// `count/<plural>` or `count/<plural>.<group>`.
    ObjectCount,
    /// Legacy object-count names: `services`, `secrets`, `configmaps`,
    /// `persistentvolumeclaims`, `replicationcontrollers` (and `resourcequotas`).
    LegacyObjectCount,
    /// A fully qualified extended resource named without `requests.` (e.g. `nvidia.com/gpu`);
    /// a quota must use `requests.<name>`.
    BareExtended,
}

/// Why a resource name is not acceptable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NameError(pub String);

fn err(msg: impl Into<String>) -> NameError {
    NameError(msg.into())
}

/// Classify a resource name as Kubernetes' quota validation would, or say why it is invalid.
///
/// Accepted like Kubernetes: a qualified name (`[prefix/]name`, the prefix a DNS-1123
/// subdomain, the name ≤ 63 alphanumerics, `-`, `_`, `.`); an unqualified name must be a
/// standard quota resource. Refused beyond Kubernetes, because a ResourceBinding cannot be
/// charged for them (nothing is silently ignored): `requests.storage`, the
/// `services.*` counts, per-StorageClass and per-DeviceClass names, and non-standard names
/// in the `kubernetes.io/` namespace. `limits.*` and bare extended names classify (as
/// [`NameKind::Limits`], [`NameKind::BareExtended`]) so the caller can say what to write.
pub fn classify(name: &str) -> Result<NameKind, NameError> {
    check_qualified(name)?;
    if let Some((_, why)) = UNENFORCEABLE.iter().find(|(n, _)| *n == name) {
        return Err(err(format!("cannot be enforced: {why}")));
    }
    if name == PODS {
        return Ok(NameKind::Pods);
    }
    if LEGACY_COUNTS.iter().any(|(_, n)| *n == name) {
        return Ok(NameKind::LegacyObjectCount);
    }
    if is_compute(name) {
        return Ok(NameKind::Compute);
    }
    if let Some(rest) = name.strip_prefix(LIMITS_PREFIX) {
        return if is_compute(rest) || is_extended(rest) {
            Ok(NameKind::Limits)
        } else {
            Err(invalid_for_quota(name))
        };
    }
    if let Some(rest) = name.strip_prefix(COUNT_PREFIX) {
        // check_qualified already validated `rest` as a qualified name part.
        let _ = rest;
        return Ok(NameKind::ObjectCount);
    }
    if let Some(rest) = name.strip_prefix(REQUESTS_PREFIX) {
        if is_compute(rest) || is_extended(rest) {
            return Ok(NameKind::Requests);
        }
        if rest.contains('/') {
            return Err(unenforceable_qualified(rest).unwrap_or_else(|| invalid_for_quota(name)));
        }
        return Err(invalid_for_quota(name));
    }
    if name.contains('/') {
        if let Some(e) = unenforceable_qualified(name) {
            return Err(e);
        }
        return Ok(NameKind::BareExtended);
    }
    Err(invalid_for_quota(name))
}

fn invalid_for_quota(name: &str) -> NameError {
    if name.contains('/') {
        err("must be a standard resource for quota or a fully qualified extended resource")
    } else {
        err("must be a standard resource for quota")
    }
}

/// A qualified name (with `/`) that Kubernetes accepts but a binding cannot be charged for.
fn unenforceable_qualified(name: &str) -> Option<NameError> {
    let (prefix, _) = name.split_once('/')?;
    if prefix.ends_with(".storageclass.storage.k8s.io") {
        return Some(err(
            "cannot be enforced: a ResourceBinding does not carry a PersistentVolumeClaim's \
             storage class or request",
        ));
    }
    if prefix.ends_with(".deviceclass.resource.k8s.io") {
        return Some(err(
            "cannot be enforced: a ResourceBinding does not carry device claims",
        ));
    }
    if is_native_prefix(prefix) {
        return Some(err(
            "names in the kubernetes.io/ namespace must be standard resources; \
             an extended resource needs its own domain",
        ));
    }
    None
}

/// `kubernetes.io` or a subdomain of it: Kubernetes reserves these for native resources.
fn is_native_prefix(prefix: &str) -> bool {
    prefix == "kubernetes.io" || prefix.ends_with(".kubernetes.io")
}

/// `cpu`, `memory`, `ephemeral-storage`, `hugepages-<size>`.
fn is_compute(name: &str) -> bool {
    COMPUTE.contains(&name) || is_hugepages(name)
}

/// `hugepages-<size>`; a size with a `/` is no page size (a pod cannot request it), so such a
/// name is an extended resource like any other qualified name.
fn is_hugepages(name: &str) -> bool {
    name.strip_prefix(HUGEPAGES_PREFIX)
        .is_some_and(|size| !size.is_empty() && !size.contains('/'))
}

/// A fully qualified extended resource name as a pod requests it (`nvidia.com/gpu`): a
/// domain outside `kubernetes.io`, and `requests.<name>` a valid qualified name.
fn is_extended(name: &str) -> bool {
    let Some((prefix, _)) = name.split_once('/') else {
        return false;
    };
    !is_native_prefix(prefix)
        && !name.starts_with(REQUESTS_PREFIX)
        && !name.starts_with(COUNT_PREFIX)
        && check_qualified(&format!("{REQUESTS_PREFIX}{name}")).is_ok()
        && unenforceable_qualified(name).is_none()
}

/// Kubernetes' qualified-name syntax: `[prefix/]name`.
fn check_qualified(value: &str) -> Result<(), NameError> {
    let mut parts = value.split('/');
    let first = parts.next().unwrap_or_default();
    let (prefix, name) = match (parts.next(), parts.next()) {
        (None, _) => (None, first),
        (Some(name), None) => (Some(first), name),
        (Some(_), Some(_)) => {
            return Err(err(
                "a qualified name must be a name with an optional DNS subdomain prefix and a \
                 single '/' (e.g. 'example.com/MyName')",
            ));
        }
    };
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            return Err(err("prefix part must be non-empty"));
        }
        check_dns_subdomain(prefix)?;
    }
    if name.is_empty() {
        return Err(err("name part must be non-empty"));
    }
    if name.len() > MAX_NAME_PART {
        return Err(err(format!(
            "name part must be no more than {MAX_NAME_PART} characters"
        )));
    }
    let bytes = name.as_bytes();
    let inner_ok = bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    let ends_ok = bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes.last().is_some_and(u8::is_ascii_alphanumeric);
    if !inner_ok || !ends_ok {
        return Err(err(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must \
             start and end with an alphanumeric character (e.g. 'MyName', 'my.name', '123-abc')",
        ));
    }
    Ok(())
}

/// DNS-1123 subdomain: lowercase labels of `[a-z0-9-]`, starting and ending alphanumeric.
fn check_dns_subdomain(prefix: &str) -> Result<(), NameError> {
    if prefix.len() > MAX_PREFIX_PART {
        return Err(err(format!(
            "prefix part must be no more than {MAX_PREFIX_PART} characters"
        )));
    }
    let label_ok = |label: &str| {
        let b = label.as_bytes();
        !b.is_empty()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            && b.first().is_some_and(|c| *c != b'-')
            && b.last().is_some_and(|c| *c != b'-')
    };
    if prefix.split('.').all(label_ok) {
        Ok(())
    } else {
        Err(err(
            "prefix part must be a lowercase RFC 1123 subdomain: lowercase alphanumeric \
             characters, '-' or '.', starting and ending with an alphanumeric character \
             (e.g. 'example.com')",
        ))
    }
}

/// True for names whose quantities must be whole numbers (pods, object counts, extended
/// resources).
///
/// Kubernetes' rule (pods, the legacy counts, and every extended-resource-shaped name, which
/// covers `count/…`), extended to `requests.<extended>`: a pod can only request whole units
/// of an extended resource, so a fractional limit would be meaningless.
pub fn is_integer_resource(name: &str) -> bool {
    if name == PODS
        || name == "services.nodeports"
        || name == "services.loadbalancers"
        || LEGACY_COUNTS.iter().any(|(_, n)| *n == name)
        || name.starts_with(COUNT_PREFIX)
    {
        return true;
    }
    let bare = name.strip_prefix(REQUESTS_PREFIX).unwrap_or(name);
    is_extended(bare)
}

/// `requests.<name>`, without the formatting machinery (this runs per binding).
fn requests_name(name: &str) -> String {
    let mut out = String::with_capacity(REQUESTS_PREFIX.len() + name.len());
    out.push_str(REQUESTS_PREFIX);
    out.push_str(name);
    out
}

/// Expand a per-replica request into quota names (docs/design.md §4): `cpu` → `cpu` and
/// `requests.cpu` (likewise memory, ephemeral-storage, `hugepages-<size>`); any other name
/// (extended, e.g. `nvidia.com/gpu`) → `requests.<name>` only; `requests.*` stays as is.
pub fn expand_request(per_replica: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    for (name, q) in per_replica.iter() {
        if name.starts_with(REQUESTS_PREFIX) {
            out.add_one(name, *q);
            continue;
        }
        if is_compute(name) {
            out.add_one(name, *q);
        }
        let requests = requests_name(name);
        match out.0.get_mut(&requests) {
            Some(v) => *v = v.saturating_add(*q),
            None => {
                out.0.insert(requests, *q);
            }
        }
    }
    out
}

impl ResourceList {
    /// An empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// The quantity of `name`, if present.
    pub fn get(&self, name: &str) -> Option<&Quantity> {
        self.0.get(name)
    }

    /// The quantity of `name`, zero when absent.
    pub fn get_or_zero(&self, name: &str) -> Quantity {
        self.0.get(name).copied().unwrap_or(Quantity::ZERO)
    }

    /// Set `name` to `q`, returning the previous value.
    pub fn insert(&mut self, name: impl Into<String>, q: Quantity) -> Option<Quantity> {
        self.0.insert(name.into(), q)
    }

    /// Whether `name` is present (even with a zero value).
    pub fn contains(&self, name: &str) -> bool {
        self.0.contains_key(name)
    }

    /// Entries in name order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Quantity)> + '_ {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Names in order.
    pub fn names(&self) -> impl Iterator<Item = &str> + '_ {
        self.0.keys().map(String::as_str)
    }

    /// Number of names.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No names at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Every value is zero (true for an empty list).
    pub fn is_zero(&self) -> bool {
        self.0.values().all(Quantity::is_zero)
    }

    /// Add `q` to `name` (absent = zero).
    pub fn add_one(&mut self, name: &str, q: Quantity) {
        match self.0.get_mut(name) {
            Some(v) => *v = v.saturating_add(q),
            None => {
                self.0.insert(name.to_owned(), q);
            }
        }
    }

    /// `self += other`, name by name (names only in `other` are added).
    pub fn add_assign(&mut self, other: &ResourceList) {
        self.merge_add(other, |q| q);
    }

    /// `self += other × n`, name by name (names only in `other` are added); saturating.
    pub fn add_scaled(&mut self, other: &ResourceList, n: i64) {
        self.merge_add(other, |q| q.saturating_mul(n));
    }

    /// Add `f(value)` of every entry of `other`. Both maps are sorted, so existing names are
    /// updated in one merge walk instead of a search per name (the controller runs this for
    /// every binding of a namespace).
    fn merge_add(&mut self, other: &ResourceList, f: impl Fn(Quantity) -> Quantity) {
        let mut missing = Vec::new();
        let mut theirs = other.0.iter().peekable();
        for (name, value) in self.0.iter_mut() {
            while let Some((their_name, their_value)) = theirs.peek() {
                match their_name.as_str().cmp(name) {
                    std::cmp::Ordering::Less => missing.extend(theirs.next()),
                    std::cmp::Ordering::Equal => {
                        *value = value.saturating_add(f(**their_value));
                        theirs.next();
                        break;
                    }
                    std::cmp::Ordering::Greater => break,
                }
            }
            if theirs.peek().is_none() {
                break;
            }
        }
        missing.extend(theirs);
        for (name, value) in missing {
            self.0.insert(name.clone(), f(*value));
        }
    }

    /// `self + other`, name by name.
    pub fn plus(&self, other: &ResourceList) -> ResourceList {
        let mut out = self.clone();
        out.add_assign(other);
        out
    }

    /// Per name of `self`: `max(0, self − other)` (absent in `other` = zero).
    pub fn sub_clamped(&self, other: &ResourceList) -> ResourceList {
        let mut out = self.clone();
        for (name, value) in out.0.iter_mut() {
            *value = value.sub_clamped(other.get_or_zero(name));
        }
        out
    }

    /// Per name of either: the larger value (absent = zero).
    pub fn max(&self, other: &ResourceList) -> ResourceList {
        let mut out = self.clone();
        for (name, q) in other.iter() {
            match out.0.get_mut(name) {
                Some(v) => *v = (*v).max(*q),
                None => {
                    out.0.insert(name.to_owned(), *q);
                }
            }
        }
        out
    }

    /// Only the names also present in `names_of` (a mask by name).
    pub fn restricted_to(&self, names_of: &ResourceList) -> ResourceList {
        ResourceList(
            self.0
                .iter()
                .filter(|(k, _)| names_of.contains(k))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        )
    }

    /// Every value multiplied by `n` (saturating).
    pub fn scaled(&self, n: i64) -> ResourceList {
        let mut out = self.clone();
        out.scale(n);
        out
    }

    /// Multiply every value by `n` in place (saturating).
    pub fn scale(&mut self, n: i64) {
        for value in self.0.values_mut() {
            *value = value.saturating_mul(n);
        }
    }

    /// Names (sorted) whose value in `self` is above the value in `hard`; names `hard`
    /// does not have are unlimited.
    pub fn exceeds(&self, hard: &ResourceList) -> Vec<String> {
        self.0
            .iter()
            .filter(|(k, v)| hard.get(k).is_some_and(|h| *v > h))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The entries of `self` above the same name in `other` (a missing name is zero): what
    /// a member runs beyond what was placed there (drift).
    pub fn above(&self, other: &ResourceList) -> ResourceList {
        ResourceList(
            self.0
                .iter()
                .filter(|(k, v)| **v > other.get_or_zero(k))
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        )
    }

    /// Only the named entries (names not present are skipped).
    pub fn select<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> ResourceList {
        ResourceList(
            names
                .into_iter()
                .filter_map(|n| self.0.get(n).map(|v| (n.to_owned(), *v)))
                .collect(),
        )
    }

    /// Drop the names whose value is zero.
    pub fn without_zeros(&self) -> ResourceList {
        ResourceList(
            self.0
                .iter()
                .filter(|(_, v)| !v.is_zero())
                .map(|(k, v)| (k.clone(), *v))
                .collect(),
        )
    }

    /// Parse a map of name → quantity string; the first unparsable entry is returned with
    /// its name.
    pub fn parse_map<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<ResourceList, (String, QuantityError)> {
        let mut out = ResourceList::new();
        for (name, raw) in entries {
            let q = Quantity::parse(raw).map_err(|e| (name.to_owned(), e))?;
            out.insert(name, q);
        }
        Ok(out)
    }
}

impl fmt::Display for ResourceList {
    /// `cpu=2,pods=2`: sorted, canonical values, no spaces (Kubernetes' quota messages).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (name, q)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{name}={q}")?;
        }
        Ok(())
    }
}

impl FromIterator<(String, Quantity)> for ResourceList {
    fn from_iter<T: IntoIterator<Item = (String, Quantity)>>(iter: T) -> Self {
        ResourceList(iter.into_iter().collect())
    }
}

impl<'a> IntoIterator for &'a ResourceList {
    type Item = (&'a String, &'a Quantity);
    type IntoIter = std::collections::btree_map::Iter<'a, String, Quantity>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn above_keeps_only_names_higher_than_the_other_list() {
        let observed =
            ResourceList::parse_map([("cpu", "3"), ("pods", "2"), ("memory", "1Gi")]).unwrap();
        let placed = ResourceList::parse_map([("cpu", "2"), ("pods", "2")]).unwrap();
        assert_eq!(
            observed.above(&placed),
            ResourceList::parse_map([("cpu", "3"), ("memory", "1Gi")]).unwrap()
        );
        let q = |s: &str| Quantity::parse(s).unwrap();
        assert_eq!(q("750m").percent_of(q("1")), Some(75.0));
        assert_eq!(q("1").percent_of(q("0")), None);
    }
    use super::*;

    fn q(s: &str) -> Quantity {
        Quantity::parse(s).expect("test quantity")
    }

    fn mk_list(entries: &[(&str, &str)]) -> ResourceList {
        ResourceList::parse_map(entries.iter().copied()).expect("test list")
    }

    #[test]
    fn classifies_accepted_names() {
        let table = [
            ("cpu", NameKind::Compute),
            ("memory", NameKind::Compute),
            ("ephemeral-storage", NameKind::Compute),
            ("hugepages-2Mi", NameKind::Compute),
            ("requests.cpu", NameKind::Requests),
            ("requests.memory", NameKind::Requests),
            ("requests.ephemeral-storage", NameKind::Requests),
            ("requests.hugepages-1Gi", NameKind::Requests),
            ("requests.nvidia.com/gpu", NameKind::Requests),
            ("limits.cpu", NameKind::Limits),
            ("limits.nvidia.com/gpu", NameKind::Limits),
            ("pods", NameKind::Pods),
            ("count/deployments.apps", NameKind::ObjectCount),
            ("count/pods", NameKind::ObjectCount),
            (
                "count/flinkdeployments.flink.apache.org",
                NameKind::ObjectCount,
            ),
            ("services", NameKind::LegacyObjectCount),
            ("secrets", NameKind::LegacyObjectCount),
            ("configmaps", NameKind::LegacyObjectCount),
            ("persistentvolumeclaims", NameKind::LegacyObjectCount),
            ("replicationcontrollers", NameKind::LegacyObjectCount),
            ("resourcequotas", NameKind::LegacyObjectCount),
            ("nvidia.com/gpu", NameKind::BareExtended),
            ("example.com/foo", NameKind::BareExtended),
        ];
        for (name, kind) in table {
            assert_eq!(classify(name), Ok(kind), "{name}");
        }
    }

    #[test]
    fn hugepages_with_a_slash_is_an_extended_name_not_compute() {
        // Found by the resource_name fuzz target: it classified as Compute (bare name means
        // the request) while counting as an integer extended resource.
        assert_eq!(classify("hugepages-a/b"), Ok(NameKind::BareExtended));
        assert_eq!(classify("requests.hugepages-a/b"), Ok(NameKind::Requests));
        assert!(is_integer_resource("hugepages-a/b"));
        let expanded = expand_request(&mk_list(&[("hugepages-a/b", "1")]));
        assert_eq!(expanded, mk_list(&[("requests.hugepages-a/b", "1")]));
    }

    #[test]
    fn rejects_invalid_names_with_a_reason() {
        let table = [
            ("foo", "must be a standard resource for quota"),
            ("requests.foo", "must be a standard resource for quota"),
            ("limits.foo", "must be a standard resource for quota"),
            (
                "hugepages-",
                "name part must consist of alphanumeric characters",
            ),
            ("storage", "use requests.storage"),
            (
                "requests.storage",
                "does not carry a PersistentVolumeClaim's storage request",
            ),
            ("services.nodeports", "cannot be enforced"),
            ("services.loadbalancers", "cannot be enforced"),
            (
                "gold.storageclass.storage.k8s.io/requests.storage",
                "storage class",
            ),
            ("gpu.deviceclass.resource.k8s.io/devices", "device claims"),
            ("kubernetes.io/foo", "kubernetes.io/ namespace"),
            ("requests.kubernetes.io/foo", "kubernetes.io/ namespace"),
            (
                "requests.node.kubernetes.io/foo",
                "kubernetes.io/ namespace",
            ),
            (
                "Example.com/foo",
                "prefix part must be a lowercase RFC 1123 subdomain",
            ),
            (
                "example..com/foo",
                "prefix part must be a lowercase RFC 1123 subdomain",
            ),
            ("/foo", "prefix part must be non-empty"),
            ("example.com/", "name part must be non-empty"),
            ("a/b/c", "a single '/'"),
            ("cpu ", "name part must consist of alphanumeric characters"),
            ("-cpu", "name part must consist of alphanumeric characters"),
            ("", "name part must be non-empty"),
        ];
        for (name, reason) in table {
            let e = classify(name).expect_err(name);
            assert!(e.0.contains(reason), "{name:?}: {e}");
        }
        let long = format!("example.com/{}", "a".repeat(64));
        assert!(
            classify(&long)
                .expect_err("long")
                .0
                .contains("no more than 63")
        );
    }

    #[test]
    fn integer_resources_are_counts_and_extended_resources() {
        let table = [
            ("pods", true),
            ("services", true),
            ("configmaps", true),
            ("resourcequotas", true),
            ("count/deployments.apps", true),
            ("count/pods", true),
            ("nvidia.com/gpu", true),
            ("requests.nvidia.com/gpu", true),
            ("cpu", false),
            ("requests.cpu", false),
            ("memory", false),
            ("hugepages-2Mi", false),
            ("requests.hugepages-2Mi", false),
            ("ephemeral-storage", false),
            ("limits.cpu", false),
            ("requests.kubernetes.io/foo", false),
        ];
        for (name, integer) in table {
            assert_eq!(is_integer_resource(name), integer, "{name}");
        }
    }

    #[test]
    fn expands_requests_into_quota_names() {
        let per_replica = mk_list(&[
            ("cpu", "500m"),
            ("memory", "256Mi"),
            ("ephemeral-storage", "1Gi"),
            ("hugepages-2Mi", "4Mi"),
            ("nvidia.com/gpu", "1"),
            ("requests.example.com/fpga", "2"),
        ]);
        let expected = mk_list(&[
            ("cpu", "500m"),
            ("requests.cpu", "500m"),
            ("memory", "256Mi"),
            ("requests.memory", "256Mi"),
            ("ephemeral-storage", "1Gi"),
            ("requests.ephemeral-storage", "1Gi"),
            ("hugepages-2Mi", "4Mi"),
            ("requests.hugepages-2Mi", "4Mi"),
            ("requests.nvidia.com/gpu", "1"),
            ("requests.example.com/fpga", "2"),
        ]);
        assert_eq!(expand_request(&per_replica), expected);
    }

    #[test]
    fn formats_sorted_canonical_without_spaces() {
        let list = mk_list(&[("pods", "2"), ("cpu", "2000m"), ("memory", "1.5Gi")]);
        assert_eq!(list.to_string(), "cpu=2,memory=1536Mi,pods=2");
        assert_eq!(ResourceList::new().to_string(), "");
    }

    #[test]
    fn adds_name_by_name() {
        let mut a = mk_list(&[("cpu", "1"), ("pods", "1")]);
        a.add_assign(&mk_list(&[("cpu", "500m"), ("memory", "1Gi")]));
        assert_eq!(
            a,
            mk_list(&[("cpu", "1500m"), ("memory", "1Gi"), ("pods", "1")])
        );
        let b = mk_list(&[("cpu", "1")]).plus(&mk_list(&[("cpu", "1")]));
        assert_eq!(b.get("cpu"), Some(&q("2")));
        let mut c = mk_list(&[("memory", "1Gi"), ("pods", "1")]);
        c.add_scaled(
            &mk_list(&[("cpu", "250m"), ("pods", "1"), ("zz.io/x", "1")]),
            4,
        );
        assert_eq!(
            c,
            mk_list(&[
                ("cpu", "1"),
                ("memory", "1Gi"),
                ("pods", "5"),
                ("zz.io/x", "4")
            ])
        );
    }

    #[test]
    fn subtracts_clamped_at_zero_per_name_of_self() {
        let a = mk_list(&[("cpu", "1"), ("memory", "1Gi"), ("pods", "3")]);
        let b = mk_list(&[("cpu", "2"), ("pods", "1"), ("services", "4")]);
        assert_eq!(
            a.sub_clamped(&b),
            mk_list(&[("cpu", "0"), ("memory", "1Gi"), ("pods", "2")])
        );
    }

    #[test]
    fn max_takes_the_larger_value_of_either() {
        let a = mk_list(&[("cpu", "1"), ("memory", "1Gi")]);
        let b = mk_list(&[("cpu", "2"), ("memory", "512Mi"), ("pods", "1")]);
        assert_eq!(
            a.max(&b),
            mk_list(&[("cpu", "2"), ("memory", "1Gi"), ("pods", "1")])
        );
    }

    #[test]
    fn restricts_scales_and_selects() {
        let a = mk_list(&[("cpu", "250m"), ("memory", "1Gi"), ("pods", "1")]);
        let mask = mk_list(&[("cpu", "0"), ("services", "1")]);
        assert_eq!(a.restricted_to(&mask), mk_list(&[("cpu", "250m")]));
        assert_eq!(
            a.scaled(4),
            mk_list(&[("cpu", "1"), ("memory", "4Gi"), ("pods", "4")])
        );
        assert_eq!(a.select(["pods", "nothing"]), mk_list(&[("pods", "1")]));
        assert_eq!(a.scaled(0).without_zeros(), ResourceList::new());
    }

    #[test]
    fn zero_and_empty() {
        assert!(ResourceList::new().is_zero());
        assert!(ResourceList::new().is_empty());
        let zeros = mk_list(&[("cpu", "0"), ("pods", "0")]);
        assert!(zeros.is_zero());
        assert!(!zeros.is_empty());
        assert_eq!(zeros.len(), 2);
        assert!(!mk_list(&[("cpu", "1n")]).is_zero());
    }

    #[test]
    fn exceeds_lists_names_above_hard_only() {
        let usage = mk_list(&[("cpu", "3"), ("memory", "1Gi"), ("pods", "9")]);
        let hard = mk_list(&[("cpu", "2"), ("memory", "1Gi")]);
        assert_eq!(usage.exceeds(&hard), vec!["cpu".to_owned()]);
    }

    #[test]
    fn parse_map_names_the_bad_entry() {
        let (name, _) =
            ResourceList::parse_map([("cpu", "1"), ("memory", "1.1.M")]).expect_err("bad quantity");
        assert_eq!(name, "memory");
        assert!(ResourceList::parse_map([("cpu", " 1")]).is_err());
    }

    #[test]
    fn accessors_see_names_in_order() {
        let list = mk_list(&[("pods", "1"), ("cpu", "1")]);
        assert!(list.contains("cpu"));
        assert!(!list.contains("memory"));
        assert_eq!(list.names().collect::<Vec<_>>(), ["cpu", "pods"]);
        assert_eq!(list.iter().count(), 2);
        assert_eq!(list.get_or_zero("memory"), Quantity::ZERO);
    }

    #[test]
    fn serde_is_a_map_of_canonical_strings() {
        let list = mk_list(&[("cpu", "1.5"), ("pods", "2")]);
        let json = serde_json::to_string(&list).expect("serialize");
        assert_eq!(json, r#"{"cpu":"1500m","pods":"2"}"#);
        let back: ResourceList = serde_json::from_str(r#"{"cpu":"1500m","pods":2}"#).expect("de");
        assert_eq!(back, list);
    }
}
