//! Who may change a quota (docs/design.md §5, "Who may change a quota"), and who may
//! change a binding waiting in a quota's line ([`line_change`]).
//!
//! Only quota administrators — the users of `--quota-admin-users` and the members of the
//! groups of `--quota-admin-groups` — may create or delete a KarmadaQuota or a
//! KarmadaClusterQuota, or change its `spec`, its labels or its ownerReferences. Anyone
//! RBAC lets update the object may change its annotations and finalizers. The `status`
//! subresource is not reviewed at all: every reservation is a status write, and RBAC
//! grants it to the project's own ServiceAccounts only.
//!
//! The line belongs to the quota: only the controller (`--queue-releasers`) and the quota
//! administrators may release a waiting binding (clear its suspension or our mark, or
//! place it) or change the line's annotations on it; anyone else is refused (403). A
//! priority raised while a binding waits is allowed but does not move it: the line orders
//! by the priority it joined with (`core::queue::line_priority`).
//!
//! Pure: the caller passes the request's user and what the request changes.

use std::collections::BTreeMap;

use karmada_quota_core::queue::LINE_ANNOTATIONS;
use kube::core::ObjectMeta;
use kube::core::admission::Operation;

/// The flag that lists admin users.
pub const USERS_FLAG: &str = "--quota-admin-users";
/// The flag that lists admin groups.
pub const GROUPS_FLAG: &str = "--quota-admin-groups";

/// The default admin groups: Kubernetes' superusers. Karmada's admin kubeconfig
/// (`karmadactl init`, the Helm chart, `hack/deploy-karmada.sh`) authenticates as
/// `system:admin` in `system:masters`.
pub const DEFAULT_GROUPS: &str = "system:masters";
/// The default admin users: the kube-controller-manager's namespace controller and
/// garbage collector (with and without `--use-service-account-credentials`), so that a
/// deleted namespace takes its quotas with it and an admin's ownerReferences are honoured.
pub const DEFAULT_USERS: &str = "system:serviceaccount:kube-system:namespace-controller,\
system:serviceaccount:kube-system:generic-garbage-collector,system:kube-controller-manager";

/// The configured quota administrators.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaAdmins {
    /// User names (`--quota-admin-users`).
    pub users: Vec<String>,
    /// Group names (`--quota-admin-groups`).
    pub groups: Vec<String>,
}

impl Default for QuotaAdmins {
    fn default() -> Self {
        Self::new(
            DEFAULT_USERS.split(',').map(str::to_owned),
            DEFAULT_GROUPS.split(',').map(str::to_owned),
        )
    }
}

/// What a request does to a quota object that only an administrator may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guarded {
    /// CREATE.
    Create,
    /// DELETE.
    Delete,
    /// An UPDATE that changes `spec`.
    Spec,
    /// An UPDATE that changes `metadata.labels` (a webhook's objectSelector reads them).
    Labels,
    /// An UPDATE that changes `metadata.ownerReferences` (the garbage collector deletes
    /// an object whose owners are gone).
    Owners,
}

impl Guarded {
    fn describe(self) -> &'static str {
        match self {
            Guarded::Create => "create it",
            Guarded::Delete => "delete it",
            Guarded::Spec => "change its spec",
            Guarded::Labels => "change its labels",
            Guarded::Owners => "change its ownerReferences",
        }
    }
}

/// What `operation` does that needs an administrator, given the old and new spec and
/// metadata (`None` when the review lacks them). An UPDATE whose old object is missing
/// is taken as a spec change (never let through on a guess).
pub fn guarded<S: PartialEq>(
    operation: &Operation,
    old: Option<(&S, &ObjectMeta)>,
    new: Option<(&S, &ObjectMeta)>,
) -> Option<Guarded> {
    match operation {
        Operation::Create => Some(Guarded::Create),
        Operation::Delete => Some(Guarded::Delete),
        Operation::Update => {
            let (Some((old_spec, old_meta)), Some((new_spec, new_meta))) = (old, new) else {
                return Some(Guarded::Spec);
            };
            if old_spec != new_spec {
                Some(Guarded::Spec)
            } else if old_meta.labels.clone().unwrap_or_default()
                != new_meta.labels.clone().unwrap_or_default()
            {
                Some(Guarded::Labels)
            } else if old_meta.owner_references.clone().unwrap_or_default()
                != new_meta.owner_references.clone().unwrap_or_default()
            {
                Some(Guarded::Owners)
            } else {
                None
            }
        }
        Operation::Connect => None,
    }
}

/// What an UPDATE of a binding waiting in a quota's line (`old`'s annotations) does that
/// only its owners may do, as the refusal words it: leave the line (`still_waiting`
/// false) or change one of the line's annotations; `None` when it does neither.
pub fn line_change(
    still_waiting: bool,
    old: Option<&BTreeMap<String, String>>,
    new: Option<&BTreeMap<String, String>>,
) -> Option<String> {
    if !still_waiting {
        return Some(
            "release it (clear its suspension or the line's mark, or place it)".to_owned(),
        );
    }
    LINE_ANNOTATIONS
        .into_iter()
        .find(|k| old.and_then(|a| a.get(*k)) != new.and_then(|a| a.get(*k)))
        .map(|k| format!("change its annotation {k}"))
}

/// A list of user or group names from a flag: trimmed, empty entries (as `--flag=`
/// gives) dropped.
pub fn names(list: impl IntoIterator<Item = String>) -> Vec<String> {
    list.into_iter()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty())
        .collect()
}

impl QuotaAdmins {
    /// Admins from lists (empty entries, as `--quota-admin-users=` gives, are dropped).
    pub fn new(
        users: impl IntoIterator<Item = String>,
        groups: impl IntoIterator<Item = String>,
    ) -> Self {
        Self {
            users: names(users),
            groups: names(groups),
        }
    }

    /// Whether `user` (with `groups`) is an administrator. A request without a user name
    /// never is.
    pub fn admits(&self, user: Option<&str>, groups: &[String]) -> bool {
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            return false;
        };
        self.users.iter().any(|u| u == user) || groups.iter().any(|g| self.groups.contains(g))
    }

    /// Whether `user` may release a waiting binding or change its line's annotations: a
    /// quota administrator, or one of `releasers` (`--queue-releasers`).
    pub fn may_change_line(
        &self,
        releasers: &[String],
        user: Option<&str>,
        groups: &[String],
    ) -> bool {
        self.admits(user, groups) || user.is_some_and(|u| releasers.iter().any(|r| r == u))
    }

    /// The refusal of `user` doing `what` to `object` (`KarmadaQuota team-a/compute`):
    /// who, what, and the flag that would allow it.
    pub fn refusal(
        &self,
        object: &str,
        what: Guarded,
        user: Option<&str>,
        groups: &[String],
    ) -> String {
        let list = |v: &[String]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.join(",")
            }
        };
        let who = match user.filter(|u| !u.is_empty()) {
            Some(u) => {
                let u = karmada_quota_shell::untrusted::clip(u);
                let gs: Vec<String> = groups
                    .iter()
                    .map(|g| karmada_quota_shell::untrusted::clip(g).to_string())
                    .collect();
                format!("user \"{u}\" (groups: {})", list(&gs))
            }
            None => "a request without a user".to_owned(),
        };
        let allow = match user.filter(|u| !u.is_empty()) {
            Some(u) => format!(
                "to allow it, add \"{}\" to {USERS_FLAG} or one of its groups to {GROUPS_FLAG}",
                karmada_quota_shell::untrusted::clip(u)
            ),
            None => "the API server always names the user: check who sends this review".to_owned(),
        };
        format!(
            "{object}: {who} may not {}: only quota administrators may create, delete or \
             change the spec, labels or ownerReferences of a quota ({GROUPS_FLAG}={}, \
             {USERS_FLAG}={}); {allow}",
            what.describe(),
            list(&self.groups),
            list(&self.users),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(labels: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn defaults_fit_a_karmada_install() {
        let a = QuotaAdmins::default();
        assert_eq!(a.groups, ["system:masters"]);
        assert!(a.admits(Some("system:admin"), &["system:masters".to_owned()]));
        assert!(a.admits(
            Some("system:serviceaccount:kube-system:namespace-controller"),
            &[]
        ));
        assert!(!a.admits(
            Some("system:serviceaccount:karmada-system:karmada-quota-controller"),
            &["system:serviceaccounts".to_owned()]
        ));
        assert!(!a.admits(None, &["system:masters".to_owned()]));
        assert!(!a.admits(Some(""), &["system:masters".to_owned()]));
    }

    #[test]
    fn a_waiting_binding_may_not_leave_the_line_nor_change_its_annotations() {
        use karmada_quota_core::queue::{ANNOTATION_QUEUED_AT, ANNOTATION_QUEUED_PRIORITY};
        let a = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        let old = a(&[
            (ANNOTATION_QUEUED_AT, "t1"),
            (ANNOTATION_QUEUED_PRIORITY, "5"),
        ]);
        assert!(
            line_change(false, Some(&old), Some(&old))
                .unwrap()
                .starts_with("release")
        );
        assert_eq!(line_change(true, Some(&old), Some(&old)), None);
        let mut other = old.clone();
        other.insert("unrelated".into(), "x".into());
        assert_eq!(line_change(true, Some(&old), Some(&other)), None);
        let raised = a(&[
            (ANNOTATION_QUEUED_AT, "t1"),
            (ANNOTATION_QUEUED_PRIORITY, "9"),
        ]);
        assert_eq!(
            line_change(true, Some(&old), Some(&raised)),
            Some(format!(
                "change its annotation {ANNOTATION_QUEUED_PRIORITY}"
            ))
        );
        assert!(line_change(true, Some(&old), None).is_some());
        let admins = QuotaAdmins::default();
        let releasers = ["controller".to_owned()];
        assert!(admins.may_change_line(&releasers, Some("controller"), &[]));
        assert!(admins.may_change_line(&[], Some("root"), &["system:masters".to_owned()]));
        assert!(!admins.may_change_line(&releasers, Some("tenant"), &[]));
        assert!(!admins.may_change_line(&releasers, None, &[]));
    }

    #[test]
    fn empty_entries_are_dropped() {
        let a = QuotaAdmins::new([String::new()], [" ops ".to_owned(), String::new()]);
        assert!(a.users.is_empty());
        assert_eq!(a.groups, ["ops"]);
    }

    #[test]
    fn what_is_guarded() {
        let (s1, s2) = (1, 2);
        let (m, labelled) = (meta(&[]), meta(&[("a", "b")]));
        let up = Operation::Update;
        assert_eq!(
            guarded::<i32>(&Operation::Create, None, Some((&s1, &m))),
            Some(Guarded::Create)
        );
        assert_eq!(
            guarded::<i32>(&Operation::Delete, None, None),
            Some(Guarded::Delete)
        );
        assert_eq!(
            guarded(&up, Some((&s1, &m)), Some((&s2, &m))),
            Some(Guarded::Spec)
        );
        assert_eq!(
            guarded(&up, Some((&s1, &m)), Some((&s1, &labelled))),
            Some(Guarded::Labels)
        );
        assert_eq!(guarded(&up, None, Some((&s1, &m))), Some(Guarded::Spec));
        let mut annotated = m.clone();
        annotated.annotations = Some([("x".to_owned(), "y".to_owned())].into());
        annotated.finalizers = Some(vec!["example.com/keep".to_owned()]);
        assert_eq!(guarded(&up, Some((&s1, &m)), Some((&s1, &annotated))), None);
        // An absent and an empty label map are the same.
        assert_eq!(
            guarded(&up, Some((&s1, &ObjectMeta::default())), Some((&s1, &m))),
            None
        );
    }
}
