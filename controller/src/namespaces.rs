//! The controller's one Namespace watch (metadata only): a reflector store that every
//! reader of namespace labels looks into, and one signal when a namespace changes.
//!
//! ```text
//!  watch PartialObjectMeta<Namespace> ─► reflector store ─┬─ snapshot(): every namespace's labels
//!                                                         │    (KarmadaClusterQuota selection)
//!                                                         └─ teams(label): namespace → team
//!                                                              (dashboard teams, kq_namespace_labels)
//!      every Apply / Delete / InitDone ─► on_change(&store)  (reconcile every cluster quota;
//!                                                             export the team metric)
//! ```
//!
//! Before, the cluster quotas and the dashboard each watched namespaces, and the team metric
//! was copied from the dashboard's map every second.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_core::selection::Labels;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Api, Client};

use crate::changes::Changes;
use crate::metrics::Metrics;
use karmada_quota_shell::watch_cache::from_watch_cache;

/// The namespaces' labels, from the one metadata watch.
#[derive(Clone)]
pub struct NamespaceLabels {
    store: Store<PartialObjectMeta<Namespace>>,
    changes: Changes,
}

impl NamespaceLabels {
    /// Whether the watch has listed every namespace once.
    pub fn ready(&self) -> bool {
        use futures::FutureExt;
        matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    /// Labels of every namespace, by name; `None` until the watch has listed once (a
    /// partial list would under-count a cluster quota).
    pub fn snapshot(&self) -> Option<Vec<(String, Labels)>> {
        if !self.ready() {
            return None;
        }
        Some(
            self.store
                .state()
                .iter()
                .map(|n| {
                    (
                        n.metadata.name.clone().unwrap_or_default(),
                        n.metadata.labels.clone().unwrap_or_default(),
                    )
                })
                .collect(),
        )
    }

    /// Namespace → the value of its `label` (a team), for the namespaces that carry it
    /// with a value; empty until the watch has listed once or when `label` is empty.
    pub fn teams(&self, label: &str) -> BTreeMap<String, String> {
        if label.is_empty() || !self.ready() {
            return BTreeMap::new();
        }
        self.store
            .state()
            .iter()
            .filter_map(|n| {
                let team = n.metadata.labels.as_ref()?.get(label)?;
                let name = n.metadata.name.clone()?;
                (!team.is_empty()).then(|| (name, team.clone()))
            })
            .collect()
    }

    /// How many changes the watch has applied (the count behind [`changes`](Self::changes),
    /// moved after the store took each one): an equal number, the same
    /// [`snapshot`](Self::snapshot).
    pub fn version(&self) -> u64 {
        self.changes.count()
    }

    /// Signal a change, as the watch does after the store applied it (tests that feed the
    /// store through [`with_writer`](Self::with_writer)).
    #[cfg(test)]
    pub fn changed(&self) {
        self.changes.poke();
    }

    /// Every later change (a namespace added, relabelled or deleted; a re-list done).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// A store fed by the caller (tests).
    pub fn with_writer() -> (Self, reflector::store::Writer<PartialObjectMeta<Namespace>>) {
        let (store, writer) = reflector::store();
        (
            Self {
                store,
                changes: Changes::default(),
            },
            writer,
        )
    }
}

/// Start the one Namespace watch; `on_change` runs after the store applied each change
/// (not for each namespace of a re-list: once when it is complete).
pub fn watch_namespaces(
    client: Client,
    metrics: Arc<Metrics>,
    on_change: impl Fn(&NamespaceLabels) + Send + 'static,
) -> NamespaceLabels {
    let (store, writer) = reflector::store();
    let labels = NamespaceLabels {
        store,
        changes: Changes::default(),
    };
    let view = labels.clone();
    let feed = watch(
        Api::<PartialObjectMeta<Namespace>>::all(client),
        from_watch_cache(),
    )
    .default_backoff()
    .reflect(writer)
    .for_each(move |ev| {
        match ev {
            Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => {
                view.changes.poke();
                on_change(&view);
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "Namespace watch error; retrying");
                metrics.watch_restarted("namespaces");
            }
        }
        std::future::ready(())
    });
    tokio::spawn(feed);
    labels
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::api::ObjectMeta;
    use kube::core::PartialObjectMetaExt;

    fn ns(name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
        ObjectMeta {
            name: Some(name.into()),
            labels: Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..Default::default()
        }
        .into_response_partial()
    }

    #[test]
    fn nothing_is_read_before_the_list_is_complete_then_labels_and_teams_follow_it() {
        let (labels, mut writer) = NamespaceLabels::with_writer();
        writer.apply_watcher_event(&Event::Init);
        writer.apply_watcher_event(&Event::InitApply(ns("a", &[("team", "red")])));
        assert!(labels.snapshot().is_none(), "a partial list is not read");
        assert!(labels.teams("team").is_empty());
        writer.apply_watcher_event(&Event::InitApply(ns("b", &[("team", "")])));
        writer.apply_watcher_event(&Event::InitApply(ns("c", &[])));
        writer.apply_watcher_event(&Event::InitDone);
        assert_eq!(labels.snapshot().map(|s| s.len()), Some(3));
        assert_eq!(
            labels.teams("team"),
            BTreeMap::from([("a".to_owned(), "red".to_owned())])
        );
        assert!(labels.teams("").is_empty());
        writer.apply_watcher_event(&Event::Apply(ns("c", &[("team", "blue")])));
        writer.apply_watcher_event(&Event::Delete(ns("a", &[("team", "red")])));
        assert_eq!(
            labels.teams("team"),
            BTreeMap::from([("c".to_owned(), "blue".to_owned())])
        );
    }
}
