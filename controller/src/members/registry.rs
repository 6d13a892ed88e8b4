//! Every member's state (reachability and observed pods), shared by the member tasks and the reconciler; a task writes only under its own epoch.
//!
//! A member whose watch is restarted (its Cluster or Secret changed) gets a new epoch
//! under the registry's lock, before the new task starts. The old task may still deliver
//! an event after it was aborted; the epoch check runs under the same lock as the apply,
//! so such an event is dropped and never lands in the new task's state.

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::changes::Changes;

use k8s_openapi::api::core::v1::Pod;
use karmada_quota_core::status::ObservedPods;
use kube::runtime::watcher::Event;

use crate::index::Touched;
use crate::members::observed::MemberPods;

/// Whether a member can be read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", content = "message", rename_all = "camelCase")]
pub enum Reach {
    /// First list in progress: not measured yet, not reported unreachable yet.
    Connecting,
    /// Pods listed and watched.
    Reachable,
    /// Pods listed and watched over a connection whose TLS is not verified (allowed by
    /// `--allow-insecure-members`): why it is not verified.
    Unverified(String),
    /// The last attempt failed with this error (or the member was refused: the message
    /// says so); retried with backoff.
    Unreachable(String),
}

impl Reach {
    /// Whether the member's pods are listed and watched (verified or not).
    pub fn is_reachable(&self) -> bool {
        matches!(self, Reach::Reachable | Reach::Unverified(_))
    }
}

/// One generation of a member's watch task; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Epoch(u64);

/// One member's state.
#[derive(Debug)]
pub struct MemberState {
    /// Whether it can be read.
    pub reach: Reach,
    /// Its non-terminal pods (meaningful while reachable).
    pub pods: MemberPods,
    /// The task allowed to change it.
    epoch: Epoch,
}

#[derive(Debug, Default)]
struct Members {
    by_name: BTreeMap<String, MemberState>,
    last_epoch: u64,
}

/// Every member's state, shared between the member tasks and the reconciler; a change of
/// reachability (or of the members) is published on its [`Changes`].
#[derive(Clone, Debug, Default)]
pub struct MemberRegistry {
    members: Arc<RwLock<Members>>,
    changes: Changes,
}

impl MemberRegistry {
    fn read(&self) -> parking_lot::RwLockReadGuard<'_, Members> {
        self.members.read()
    }

    fn write(&self) -> parking_lot::RwLockWriteGuard<'_, Members> {
        self.members.write()
    }

    /// Every later change of reachability or of the members.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Pods of `namespace` per member: `None` for a member not (or no longer) reachable.
    pub fn observed_pods(&self, namespace: &str) -> ObservedPods {
        self.read()
            .by_name
            .iter()
            .map(|(name, st)| {
                let pods = st
                    .reach
                    .is_reachable()
                    .then(|| st.pods.in_namespace(namespace));
                (name.clone(), pods)
            })
            .collect()
    }

    /// Every member's reachability.
    pub fn reach(&self) -> BTreeMap<String, Reach> {
        self.read()
            .by_name
            .iter()
            .map(|(n, st)| (n.clone(), st.reach.clone()))
            .collect()
    }

    /// Apply a pod event of `member`'s task `epoch`; the namespaces touched. An event of
    /// an older task is dropped.
    pub fn apply_pod_event(&self, member: &str, epoch: Epoch, ev: &Event<Pod>) -> Touched {
        let mut members = self.write();
        match members.by_name.get_mut(member) {
            Some(st) if st.epoch == epoch => st.pods.apply_event(ev),
            _ => Touched::new(),
        }
    }

    /// Set `member`'s reachability from its task `epoch`; returns whether it changed (an
    /// unreachable member keeps its first error message, so retries do not churn the
    /// status). An older task changes nothing.
    pub fn set_reach(&self, member: &str, epoch: Epoch, reach: Reach) -> bool {
        let mut members = self.write();
        let Some(st) = members
            .by_name
            .get_mut(member)
            .filter(|st| st.epoch == epoch)
        else {
            return false;
        };
        let same = match (&st.reach, &reach) {
            (Reach::Unreachable(_), Reach::Unreachable(_)) => true,
            (a, b) => a == b,
        };
        if !same {
            st.reach = reach;
            drop(members);
            self.changes.poke();
        }
        !same
    }

    /// Start `member` afresh (connecting, no pods) under a new epoch, which the new task
    /// must use; whatever an older task sends from now on is dropped.
    pub fn start(&self, member: &str) -> Epoch {
        let mut members = self.write();
        members.last_epoch += 1;
        let epoch = Epoch(members.last_epoch);
        members.by_name.insert(
            member.to_owned(),
            MemberState {
                reach: Reach::Connecting,
                pods: MemberPods::default(),
                epoch,
            },
        );
        drop(members);
        self.changes.poke();
        epoch
    }

    /// Forget `member`.
    pub fn remove(&self, member: &str) {
        let removed = self.write().by_name.remove(member).is_some();
        if removed {
            self.changes.poke();
        }
    }

    /// Insert a member in a given state (tests).
    #[cfg(test)]
    pub(crate) fn insert_for_test(
        &self,
        member: &str,
        reach: Reach,
        pods: impl IntoIterator<Item = Pod>,
    ) {
        let epoch = self.start(member);
        for p in pods {
            self.apply_pod_event(member, epoch, &Event::Apply(p));
        }
        self.set_reach(member, epoch, reach);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;

    #[test]
    fn unreachable_members_are_not_observed_and_keep_their_first_error() {
        let reg = MemberRegistry::default();
        reg.insert_for_test(
            "member1",
            Reach::Reachable,
            [mk_pod("team-a", "a", "ua", "", &["1"], "Running")],
        );
        let m2 = reg.start("member2");
        let obs = reg.observed_pods("team-a");
        assert_eq!(obs["member1"].as_ref().map(Vec::len), Some(1));
        assert_eq!(obs["member2"], None);
        assert!(reg.set_reach(
            "member2",
            m2,
            Reach::Unreachable("connection refused".into())
        ));
        assert!(!reg.set_reach("member2", m2, Reach::Unreachable("timeout".into())));
        assert_eq!(
            reg.reach()["member2"],
            Reach::Unreachable("connection refused".into())
        );
        assert!(reg.set_reach("member2", m2, Reach::Reachable));
        assert_eq!(reg.reach()["member2"], Reach::Reachable);
        // Reached without verification (allowed): observed like a verified one.
        reg.insert_for_test(
            "member3",
            Reach::Unverified("spec.insecureSkipTLSVerification is true".into()),
            [mk_pod("team-a", "c", "uc", "", &["2"], "Running")],
        );
        assert_eq!(
            reg.observed_pods("team-a")["member3"]
                .as_ref()
                .map(Vec::len),
            Some(1)
        );
    }

    #[test]
    fn a_restarted_member_drops_what_its_old_task_still_sends() {
        let reg = MemberRegistry::default();
        let old = reg.start("member1");
        let pod = mk_pod("team-a", "a", "ua", "", &["1"], "Running");
        assert_eq!(
            reg.apply_pod_event("member1", old, &Event::Apply(pod))
                .len(),
            1
        );
        assert!(reg.set_reach("member1", old, Reach::Reachable));
        // The Cluster or its Secret changed: the member starts afresh under a new epoch.
        let new = reg.start("member1");
        assert_ne!(old, new);
        assert_eq!(reg.reach()["member1"], Reach::Connecting);
        // A late event of the aborted task changes nothing, in pods or reachability.
        let late = mk_pod("team-a", "late", "u-late", "", &["5"], "Running");
        assert!(
            reg.apply_pod_event("member1", old, &Event::Apply(late))
                .is_empty()
        );
        assert!(!reg.set_reach("member1", old, Reach::Reachable));
        assert_eq!(reg.reach()["member1"], Reach::Connecting);
        // The new task's list is what counts.
        let fresh = mk_pod("team-a", "b", "ub", "", &["2"], "Running");
        for ev in [Event::Init, Event::InitApply(fresh), Event::InitDone] {
            reg.apply_pod_event("member1", new, &ev);
        }
        assert!(reg.set_reach("member1", new, Reach::Reachable));
        let pods = reg.observed_pods("team-a")["member1"].clone().unwrap();
        assert_eq!(pods.len(), 1);
        assert_eq!(
            pods[0]
                .usage
                .get("requests.cpu")
                .map(ToString::to_string)
                .as_deref(),
            Some("2")
        );
        // A removed member ignores both.
        reg.remove("member1");
        assert!(!reg.set_reach("member1", new, Reach::Reachable));
        assert!(reg.reach().is_empty());
    }
}
