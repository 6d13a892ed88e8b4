//! The releaser's and the marker's one port onto the quotas ([`QuotaSource`]): whether
//! everything a plan reads was listed, the engine's view of every quota with the
//! namespaces' labels, and a version that tells whether that view can have changed.
//! [`WatchedQuotas`] answers from this controller's watches.

use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash, Hasher};
use std::sync::Arc;

use parking_lot::RwLock;

use futures::FutureExt;
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::selection::Labels;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::{cluster_quota_state, quota_state};
use kube::runtime::reflector::Store;

use super::line::Line;
use crate::index::Index;

/// What a round of the releaser reads of the quotas.
pub trait QuotaSource: Send + Sync {
    /// Whether every quota and binding was listed: a plan from an empty or partial quota
    /// store would take a waiting binding for one no quota covers and release it, out of
    /// its line's order.
    fn listed(&self) -> bool;

    /// The engine's view of every quota (those that parse; defaults not set) and the
    /// namespaces' labels (for the cluster quotas' selectors).
    fn states(&self) -> (Vec<QuotaState>, Vec<(String, Labels)>);

    /// A number that differs whenever [`states`](Self::states) can answer differently
    /// (a quota of either kind added, changed or deleted; a namespace changed), read
    /// without parsing a quota: a reader may skip the parse while it stays the same.
    fn version(&self) -> u64;
}

/// The order-free fingerprint of a store: the sum of each object's (uid,
/// resourceVersion) hash (the apiserver gives every change a new resourceVersion).
fn fingerprint<'a>(objects: impl Iterator<Item = &'a kube::core::ObjectMeta>) -> u64 {
    let hasher = BuildHasherDefault::<DefaultHasher>::default();
    objects.fold(0u64, |sum, meta| {
        sum.wrapping_add(hasher.hash_one((&meta.uid, &meta.resource_version)))
    })
}

/// The quotas as this controller's watches hold them: the KarmadaQuota store, the
/// cluster quotas' store and the namespaces' labels once their controller runs
/// (`Line::cluster_view`), and the index (whether the bindings and quotas were listed).
pub struct WatchedQuotas {
    /// The KarmadaQuotas.
    pub quotas: Store<KarmadaQuota>,
    /// The line, which holds the cluster quotas' view.
    pub line: Arc<Line>,
    /// The index.
    pub index: Arc<RwLock<Index>>,
    /// A cluster quota controller runs in this process: nothing is listed until its view
    /// exists (`Line::cluster_view`, set when it starts).
    pub cluster_quotas: bool,
}

impl QuotaSource for WatchedQuotas {
    fn listed(&self) -> bool {
        let listed = self.index.read().synced();
        let cluster_quotas = match self.line.cluster_view.get() {
            Some((clusters, labels)) => {
                labels.ready() && matches!(clusters.wait_until_ready().now_or_never(), Some(Ok(())))
            }
            None => !self.cluster_quotas,
        };
        listed && cluster_quotas
    }

    fn states(&self) -> (Vec<QuotaState>, Vec<(String, Labels)>) {
        let mut states: Vec<QuotaState> = self
            .quotas
            .state()
            .iter()
            .filter_map(|q| quota_state(q).ok())
            .collect();
        let mut labels = Vec::new();
        if let Some((clusters, ns_labels)) = self.line.cluster_view.get() {
            states.extend(
                clusters
                    .state()
                    .iter()
                    .filter_map(|q| cluster_quota_state(q).ok()),
            );
            labels = ns_labels.snapshot().unwrap_or_default();
        }
        (states, labels)
    }

    fn version(&self) -> u64 {
        let quotas = self.quotas.state();
        let mut h = DefaultHasher::new();
        fingerprint(quotas.iter().map(|q| &q.metadata)).hash(&mut h);
        if let Some((clusters, labels)) = self.line.cluster_view.get() {
            let clusters = clusters.state();
            fingerprint(clusters.iter().map(|q| &q.metadata)).hash(&mut h);
            labels.version().hash(&mut h);
        }
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::core::PartialObjectMeta;
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::namespaces::NamespaceLabels;
    use crate::testutil::{business_quota, mk_quota};

    fn listed_index() -> Index {
        let mut index = Index::new(600);
        index.apply_binding_event(&Event::Init, None, 0);
        index.apply_binding_event(&Event::InitDone, None, 0);
        index.skip_clusters();
        index.quotas_listed();
        index
    }

    #[test]
    fn nothing_is_listed_before_the_index_and_the_cluster_quotas_are() {
        let (store, _writer) = reflector::store::<KarmadaQuota>();
        let index = Arc::new(RwLock::new(Index::new(600)));
        let line = Arc::new(Line::default());
        let mut watched = WatchedQuotas {
            quotas: store,
            line: line.clone(),
            index: index.clone(),
            cluster_quotas: false,
        };
        assert!(!watched.listed(), "nothing listed yet");
        *index.write() = listed_index();
        assert!(
            watched.listed(),
            "no cluster quota controller: the index decides"
        );
        watched.cluster_quotas = true;
        assert!(
            !watched.listed(),
            "a cluster quota controller that has not started yet"
        );
        let (clusters, mut cluster_writer) = reflector::store();
        let (labels, mut label_writer) = NamespaceLabels::with_writer();
        let _ = line.cluster_view.set((clusters, labels));
        assert!(!watched.listed(), "the cluster quotas are not listed yet");
        for ev in [Event::Init, Event::InitDone] {
            cluster_writer.apply_watcher_event(&ev);
        }
        assert!(!watched.listed(), "the namespaces are not listed yet");
        for ev in [Event::Init, Event::InitDone] {
            label_writer.apply_watcher_event(&ev);
        }
        assert!(watched.listed());
    }

    /// Quotas watched with `quota` listed, a cluster quota controller that has not
    /// started yet, and the writer of the KarmadaQuota store.
    fn watched_with(quota: KarmadaQuota) -> (WatchedQuotas, Writer<KarmadaQuota>) {
        let (store, mut writer) = reflector::store::<KarmadaQuota>();
        for ev in [Event::Init, Event::InitApply(quota), Event::InitDone] {
            writer.apply_watcher_event(&ev);
        }
        let watched = WatchedQuotas {
            quotas: store,
            line: Arc::new(Line::default()),
            index: Arc::new(RwLock::new(listed_index())),
            cluster_quotas: true,
        };
        (watched, writer)
    }

    /// The namespace team-a with `labels`, as the metadata watch holds it.
    fn team_a(labels: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
        let mut ns = PartialObjectMeta::<Namespace>::default();
        ns.metadata.name = Some("team-a".into());
        ns.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        ns
    }

    #[test]
    fn the_states_are_every_quota_of_either_kind_with_the_namespaces_labels() {
        let (watched, _writer) = watched_with(mk_quota("team-a", "q", &[("pods", "10")]));
        let line = watched.line.clone();
        let (states, labels) = watched.states();
        assert_eq!(states.len(), 1);
        assert!(labels.is_empty(), "no cluster quota controller: no labels");
        let (clusters, mut cluster_writer) = reflector::store();
        let (ns_labels, mut label_writer) = NamespaceLabels::with_writer();
        let _ = line.cluster_view.set((clusters, ns_labels));
        for ev in [
            Event::Init,
            Event::InitApply(business_quota(&[("pods", "20")])),
            Event::InitDone,
        ] {
            cluster_writer.apply_watcher_event(&ev);
        }
        let ns = team_a(&[("business", "a")]);
        for ev in [Event::Init, Event::InitApply(ns), Event::InitDone] {
            label_writer.apply_watcher_event(&ev);
        }
        let (states, labels) = watched.states();
        assert_eq!(states.len(), 2, "the cluster quota too");
        assert_eq!(labels.len(), 1);
        assert_eq!(labels[0].0, "team-a");
    }

    #[test]
    fn the_version_moves_with_every_quota_and_namespace_change_and_only_then() {
        let quota = |rv: &str| {
            let mut q = mk_quota("team-a", "q", &[("pods", "10")]);
            q.metadata.uid = Some("u-1".into());
            q.metadata.resource_version = Some(rv.into());
            q
        };
        let (watched, mut writer) = watched_with(quota("1"));
        let line = watched.line.clone();
        let v0 = watched.version();
        assert_eq!(watched.version(), v0, "nothing changed");
        writer.apply_watcher_event(&Event::Apply(quota("2")));
        let v1 = watched.version();
        assert_ne!(v1, v0, "the quota changed (a new resourceVersion)");

        let (clusters, mut cluster_writer) = reflector::store();
        let (ns_labels, mut label_writer) = NamespaceLabels::with_writer();
        let _ = line.cluster_view.set((clusters, ns_labels.clone()));
        for ev in [Event::Init, Event::InitDone] {
            cluster_writer.apply_watcher_event(&ev);
        }
        for ev in [
            Event::Init,
            Event::InitApply(team_a(&[("business", "a")])),
            Event::InitDone,
        ] {
            label_writer.apply_watcher_event(&ev);
        }
        ns_labels.changed();
        let v2 = watched.version();
        assert_ne!(v2, v1, "the cluster quotas and the namespaces were listed");
        let mut business = business_quota(&[("pods", "20")]);
        business.metadata.resource_version = Some("7".into());
        cluster_writer.apply_watcher_event(&Event::Apply(business));
        let v3 = watched.version();
        assert_ne!(v3, v2, "a cluster quota appeared");
        label_writer.apply_watcher_event(&Event::Apply(team_a(&[
            ("business", "a"),
            ("quota.karmada.io/waiting-line", "true"),
        ])));
        ns_labels.changed();
        let v4 = watched.version();
        assert_ne!(v4, v3, "a namespace was relabelled");
        assert_eq!(watched.version(), v4);
    }
}
