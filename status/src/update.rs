//! The compare-and-swap loop: plan a status from the newest object, replace it with a
//! resourceVersion precondition, and on 409 re-read and plan again.
//!
//! Both writers go through [`update`]; they differ only in their `plan` (what they change
//! in the status): the webhook adds reservation entries, the controller recomputes `used`,
//! `clusters`, conditions and prunes entries.

use karmada_quota_crds::{KarmadaQuota, QuotaObject};

use crate::store::{StatusStore, StoreError};

/// What [`update`] did.
#[derive(Clone, Debug)]
pub enum Outcome<K = KarmadaQuota> {
    /// The plan wanted no change; nothing written.
    Unchanged,
    /// Written; the object the API server returned.
    Written(Box<K>),
    /// The quota was deleted meanwhile.
    Gone,
    /// `may_write` said no before a write; nothing (more) written.
    Stopped,
}

/// The result of [`update`]: the outcome, the last plan computed, and the object it was
/// computed from.
#[derive(Debug)]
pub struct Updated<P, K = KarmadaQuota> {
    /// What happened.
    pub outcome: Outcome<K>,
    /// What the last `plan` call returned besides the status.
    pub plan: P,
    /// The object the last plan was computed from (the status that was replaced).
    pub base: K,
    /// How many 409s were met.
    pub conflicts: u32,
}

/// Why [`update`] gave up.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UpdateError {
    /// Every attempt met a 409.
    #[error("status of {quota}: {attempts} conflicting writes in a row")]
    Conflicts {
        /// `<Kind> namespace/name` (`<Kind> name` for a cluster-scoped one).
        quota: String,
        /// Writes tried.
        attempts: u32,
    },
    /// A read or write failed otherwise.
    #[error("status of {quota}: {source}")]
    Store {
        /// `<Kind> namespace/name` (`<Kind> name` for a cluster-scoped one).
        quota: String,
        /// The API error.
        source: StoreError,
        /// 409s met before it.
        conflicts: u32,
    },
}

impl UpdateError {
    /// Low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            UpdateError::Conflicts { .. } => "conflicts",
            UpdateError::Store { source, .. } => source.metric_label(),
        }
    }

    /// 409s met before giving up.
    pub fn conflicts(&self) -> u32 {
        match self {
            UpdateError::Conflicts { attempts, .. } => *attempts,
            UpdateError::Store { conflicts, .. } => *conflicts,
        }
    }
}

/// Plan the status from `base` and write it when the plan asks for a change, with
/// `base`'s resourceVersion as precondition; on 409 read the quota again and plan from the
/// fresh object, at most `max_attempts` writes. `may_write` is asked before every write
/// (the controller: still the leader?); once it says no, nothing more is written.
///
/// `plan` returns the status to write (`None`: nothing to change) and anything the caller
/// wants back from the last round.
pub async fn update<K, S, P>(
    store: &S,
    base: K,
    mut plan: impl FnMut(&K) -> (Option<K::Status>, P),
    may_write: impl Fn() -> bool,
    max_attempts: u32,
) -> Result<Updated<P, K>, UpdateError>
where
    K: QuotaObject,
    S: StatusStore<K> + ?Sized,
{
    let ns = base.meta().namespace.clone().unwrap_or_default();
    let name = base.meta().name.clone().unwrap_or_default();
    let key = base.key();
    let quota = || format!("{} {key}", K::KIND);
    let mut base = base;
    let mut conflicts = 0;
    loop {
        let (status, p) = plan(&base);
        let done = |outcome, plan, base, conflicts| {
            Ok(Updated {
                outcome,
                plan,
                base,
                conflicts,
            })
        };
        let Some(status) = status else {
            return done(Outcome::Unchanged, p, base, conflicts);
        };
        if !may_write() {
            tracing::debug!(quota = %quota(), "not writing: stopped");
            return done(Outcome::Stopped, p, base, conflicts);
        }
        let mut body = base.clone();
        *body.status_mut() = Some(status);
        // Not needed for a status replace (nil keeps the stored ones), and often the
        // larger part of the object.
        body.meta_mut().managed_fields = None;
        match store.replace_status(&body).await {
            Ok(written) => return done(Outcome::Written(Box::new(written)), p, base, conflicts),
            Err(StoreError::NotFound) => return done(Outcome::Gone, p, base, conflicts),
            Err(StoreError::Conflict) => {
                conflicts += 1;
                if conflicts >= max_attempts.max(1) {
                    return Err(UpdateError::Conflicts {
                        quota: quota(),
                        attempts: conflicts,
                    });
                }
                tracing::debug!(quota = %quota(), conflicts, "status write conflict; re-reading");
                match store.get(&ns, &name).await {
                    Ok(fresh) => base = fresh,
                    Err(StoreError::NotFound) => return done(Outcome::Gone, p, base, conflicts),
                    Err(source) => {
                        return Err(UpdateError::Store {
                            quota: quota(),
                            source,
                            conflicts,
                        });
                    }
                }
            }
            Err(source) => {
                return Err(UpdateError::Store {
                    quota: quota(),
                    source,
                    conflicts,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::sync::atomic::Ordering;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use karmada_quota_crds::{KarmadaQuotaSpec, KarmadaQuotaStatus};

    use super::*;
    use crate::fake::FakeStore;

    fn quota(summary: &str) -> KarmadaQuota {
        let mut q = KarmadaQuota::new("compute", KarmadaQuotaSpec::default());
        q.metadata.namespace = Some("team-a".into());
        q.status = Some(KarmadaQuotaStatus {
            summary: Some(summary.into()),
            ..Default::default()
        });
        q
    }

    /// A plan that sets `used[cpu]` to `cpu` and records which summary it saw.
    fn set_cpu<'a>(
        cpu: &'a str,
        seen: &'a Cell<usize>,
    ) -> impl FnMut(&KarmadaQuota) -> (Option<KarmadaQuotaStatus>, Option<String>) + 'a {
        move |q| {
            seen.set(seen.get() + 1);
            let mut st = q.status.clone().unwrap_or_default();
            let before = st.summary.clone();
            st.used.insert("cpu".into(), Quantity(cpu.into()));
            (Some(st), before)
        }
    }

    #[tokio::test]
    async fn a_conflict_replans_from_the_fresh_object_so_others_changes_survive() {
        let store = FakeStore::with(&[quota("mine")]);
        let base = store.object("team-a", "compute");
        store.intrude(|q| q.status.as_mut().unwrap().summary = Some("theirs".into()));
        let seen = Cell::new(0);
        let u = update(&*store, base, set_cpu("2", &seen), || true, 5)
            .await
            .unwrap();
        assert!(matches!(u.outcome, Outcome::Written(_)));
        assert_eq!((u.conflicts, seen.get()), (1, 2));
        assert_eq!(
            u.plan.as_deref(),
            Some("theirs"),
            "the last plan saw the fresh object"
        );
        let stored = store.object("team-a", "compute").status.unwrap();
        assert_eq!(stored.summary.as_deref(), Some("theirs"));
        assert_eq!(stored.used["cpu"].0, "2");
    }

    #[tokio::test]
    async fn gives_up_after_max_attempts_conflicts() {
        let store = FakeStore::with(&[quota("q")]);
        store.conflict_every.store(1, Ordering::SeqCst);
        let seen = Cell::new(0);
        let base = store.object("team-a", "compute");
        let err = update(&*store, base, set_cpu("1", &seen), || true, 3)
            .await
            .unwrap_err();
        assert_eq!(
            err,
            UpdateError::Conflicts {
                quota: "KarmadaQuota team-a/compute".into(),
                attempts: 3
            }
        );
        assert_eq!(err.conflicts(), 3);
        assert_eq!(store.writes.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn nothing_is_written_when_the_plan_wants_no_change_or_writing_stopped() {
        let store = FakeStore::with(&[quota("q")]);
        let base = store.object("team-a", "compute");
        let u = update(&*store, base.clone(), |_| (None, ()), || true, 3)
            .await
            .unwrap();
        assert!(matches!(u.outcome, Outcome::Unchanged));
        let seen = Cell::new(0);
        let u = update(&*store, base, set_cpu("1", &seen), || false, 3)
            .await
            .unwrap();
        assert!(matches!(u.outcome, Outcome::Stopped));
        assert_eq!(store.writes.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn may_write_is_asked_before_every_attempt() {
        let store = FakeStore::with(&[quota("q")]);
        store.conflict_every.store(1, Ordering::SeqCst);
        let asked = Cell::new(0);
        let seen = Cell::new(0);
        let base = store.object("team-a", "compute");
        let u = update(
            &*store,
            base,
            set_cpu("1", &seen),
            || {
                asked.set(asked.get() + 1);
                asked.get() < 2 // the second attempt finds it may no longer write
            },
            5,
        )
        .await
        .unwrap();
        assert!(matches!(u.outcome, Outcome::Stopped));
        assert_eq!((asked.get(), u.conflicts), (2, 1));
    }

    #[tokio::test]
    async fn a_cluster_quota_is_written_the_same_way_keeping_its_namespaces() {
        use karmada_quota_crds::cluster_quota::NamespaceUsage;
        use karmada_quota_crds::{KarmadaClusterQuota, KarmadaClusterQuotaSpec};
        let mut q = KarmadaClusterQuota::new("business-a", KarmadaClusterQuotaSpec::default());
        q.status = Some(karmada_quota_crds::KarmadaClusterQuotaStatus {
            namespaces: vec![NamespaceUsage {
                name: "team-a-dev".into(),
                used: Default::default(),
            }],
            ..Default::default()
        });
        let store = FakeStore::with(&[q]);
        let base = store.object("", "business-a");
        store.intrude(|q: &mut KarmadaClusterQuota| {
            q.status.as_mut().unwrap().quota.summary = Some("theirs".into());
        });
        let u = update(
            &*store,
            base,
            |q: &KarmadaClusterQuota| {
                let mut st = q.status.clone().unwrap_or_default();
                let seen = st.quota.summary.clone();
                st.quota.used.insert("cpu".into(), Quantity("1".into()));
                (Some(st), seen)
            },
            || true,
            3,
        )
        .await
        .unwrap();
        assert_eq!(u.conflicts, 1);
        assert_eq!(u.plan.as_deref(), Some("theirs"));
        let stored = store.object("", "business-a").status.unwrap();
        assert_eq!(stored.quota.used["cpu"].0, "1");
        assert_eq!(stored.namespaces[0].name, "team-a-dev");

        store.conflict_every.store(1, Ordering::SeqCst);
        let base = store.object("", "business-a");
        let err = update(
            &*store,
            base,
            |q: &KarmadaClusterQuota| (q.status.clone(), ()),
            || true,
            2,
        )
        .await
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "status of KarmadaClusterQuota business-a: 2 conflicting writes in a row"
        );
    }

    #[tokio::test]
    async fn a_deleted_quota_is_gone_and_other_errors_are_returned() {
        let store = FakeStore::with(&[quota("q")]);
        let base = store.object("team-a", "compute");
        store.delete("team-a", "compute");
        let seen = Cell::new(0);
        let u = update(&*store, base.clone(), set_cpu("1", &seen), || true, 3)
            .await
            .unwrap();
        assert!(matches!(u.outcome, Outcome::Gone));

        let store = FakeStore::with(&[quota("q")]);
        store.fail.store(true, Ordering::SeqCst);
        let base = store.object("team-a", "compute");
        let err = update(&*store, base, set_cpu("1", &seen), || true, 3)
            .await
            .unwrap_err();
        assert_eq!(err.metric_label(), "api_error");
        assert!(err.to_string().contains("team-a/compute"), "{err}");
    }
}
