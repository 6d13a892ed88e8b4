//! KarmadaClusterQuotas: one quota over every namespace its selector matches.
//!
//! ```text
//!  watch KarmadaClusterQuota (--cluster-quota-selector) ─► reflector store ─► Controller
//!  watch Namespace (metadata) ─► labels store ─► any change: reconcile every cluster quota
//!  Triggers (namespaces whose bindings or member pods changed) ─► the cluster quotas
//!                                                                selecting them
//!  reconcile(cluster quota) ─► selected namespaces (core's Covers over the labels)
//!      ─► desired::compute_over (the KarmadaQuota computation, over their bindings, pods
//!         and entries) + core::selection::namespace_usage (per namespace)
//!      ─► desired_status of the KarmadaQuota-shaped part + status.namespaces
//!      ─► status::update (CAS; only the leader)
//!      ─► shares: the KarmadaClusterQuotaShare of each selected namespace mirrors it
//!  watch KarmadaClusterQuotaShare ─► store ─► any change: reconcile the cluster quota
//! ```
//!
//! A relabelled namespace moves its usage at the next reconcile (the label change
//! triggers one): its bindings leave one quota's `used` and enter another's. What the
//! webhook admitted before stays admitted; a cluster quota can so end up above its hard
//! limit, and then refuses every increase until usage falls back (as Kubernetes does when a
//! ResourceQuota is lowered). Only a controller watching every namespace reconciles
//! cluster quotas (`--namespace` unset).

mod compute;
mod reconcile;
pub mod shares;

use std::sync::{Arc, RwLock};

use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_core::selection::Labels;
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_status::StatusStore;
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Client, ResourceExt};

pub use compute::{namespaces_selected, observed_in};
pub use reconcile::{ClusterCtx, error_policy, reconcile};

use crate::args::Args;
use crate::index::Index;
use crate::metrics::Metrics;
use crate::reconcile::Ctx;
use crate::triggers::Triggers;

/// The namespaces' labels, from a metadata watch.
#[derive(Clone)]
pub struct NamespaceLabels {
    store: Store<PartialObjectMeta<Namespace>>,
}

impl NamespaceLabels {
    /// Labels of every namespace, by name; `None` until the watch has listed once (a
    /// partial list would under-count a cluster quota).
    pub fn snapshot(&self) -> Option<Vec<(String, Labels)>> {
        use futures::FutureExt;
        if !matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(()))) {
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

    /// A store fed by the caller (tests).
    pub fn with_writer() -> (Self, reflector::store::Writer<PartialObjectMeta<Namespace>>) {
        let (store, writer) = reflector::store();
        (Self { store }, writer)
    }
}

/// Start the namespace watch and the cluster quota controller; the future runs until the
/// base context's controller is asked to stop (`stop`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    args: &Args,
    client: &Client,
    base: Arc<Ctx>,
    cluster_namespaces: impl Stream<Item = String> + Send + 'static,
    cluster_all: impl Stream<Item = ()> + Send + 'static,
    triggers: &Triggers,
    metrics: &Arc<Metrics>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let labels = watch_namespaces(client.clone(), triggers.clone(), metrics.clone());
    let selector = args.cluster_quota_selector.trim().to_owned();
    let mut config = watcher::Config::default().any_semantic();
    if !selector.is_empty() {
        config = config.labels(&selector);
    }
    let (reader, writer) = reflector::store::<KarmadaClusterQuota>();
    // The dashboard-only role writes nothing (and may not read shares): no mirror.
    let (shares, share_changes) = if args.cluster_quota_shares && args.controls() {
        let (shares, changes) = shares::Shares::watch(client, metrics.clone());
        (Some(shares), changes.boxed())
    } else {
        (None, stream::empty().boxed())
    };
    let (errors, forget_ctx) = (metrics.clone(), base.clone());
    let _ = base
        .queue
        .cluster_view
        .set((reader.clone(), labels.clone()));
    let wake = base.queue.clone();
    let forget_shares = shares.clone();
    let store_for_forget = reader.clone();
    let quota_events = watch(
        kube::Api::<KarmadaClusterQuota>::all(client.clone()),
        config,
    )
    .default_backoff()
    .inspect(move |ev| {
        if let Err(e) = ev {
            tracing::warn!(error = %e, "KarmadaClusterQuota watch error; retrying");
            errors.watch_restarted("karmadaclusterquotas");
        }
    })
    .reflect(writer)
    .inspect(move |ev| {
        if let Ok(ev) = ev {
            // A cluster quota's status changed: its line may move.
            wake.wake();
            forget_deleted(ev, &store_for_forget, &forget_ctx);
            if let (Event::Delete(q), Some(shares)) = (ev, &forget_shares) {
                let (shares, name) = (shares.clone(), q.name_any());
                tokio::spawn(async move { shares.forget(&name).await });
            }
        }
    })
    .applied_objects();
    let ctx = Arc::new(ClusterCtx {
        base,
        store: Arc::new(karmada_quota_status::KubeStore::new(client.clone()))
            as Arc<dyn StatusStore<KarmadaClusterQuota>>,
        labels: labels.clone(),
        shares,
    });
    let store = reader.clone();
    let refs = cluster_namespaces
        .map(move |ns| stream::iter(selecting(&store, &labels, &ns)))
        .flatten();
    let refs = stream::select(refs, share_changes.map(shares::Shares::owner));
    let concurrency = args.concurrency;
    Controller::for_stream(quota_events, reader)
        .with_config(controller::Config::default().concurrency(concurrency))
        .reconcile_on(refs)
        .reconcile_all_on(cluster_all)
        .graceful_shutdown_on(stop)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::trace!(quota = %obj, "reconciled"),
                Err(controller::Error::ObjectNotFound(obj)) => {
                    tracing::debug!(quota = %obj, "cluster quota gone before its reconcile");
                }
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!(error = %e, "cluster quota controller error"),
            }
        })
}

/// The cluster quotas of `store` whose selector matches namespace `ns`.
fn selecting(
    store: &Store<KarmadaClusterQuota>,
    labels: &NamespaceLabels,
    ns: &str,
) -> Vec<ObjectRef<KarmadaClusterQuota>> {
    let Some(all) = labels.snapshot() else {
        return Vec::new();
    };
    let Some((_, l)) = all.iter().find(|(name, _)| name == ns) else {
        return Vec::new();
    };
    store
        .state()
        .iter()
        .filter(|q| {
            q.spec
                .namespace_selector
                .as_ref()
                .map(karmada_quota_crds::convert::selector_from_api)
                .is_some_and(|s| {
                    !(s.match_labels.is_empty() && s.match_expressions.is_empty()) && s.matches(l)
                })
        })
        .map(|q| ObjectRef::from_obj(q.as_ref()))
        .collect()
}

/// After the store applied `ev`: forget the views and metrics of cluster quotas it no
/// longer has (keyed with an empty namespace).
fn forget_deleted(ev: &Event<KarmadaClusterQuota>, store: &Store<KarmadaClusterQuota>, ctx: &Ctx) {
    match ev {
        Event::Delete(q) => crate::reconcile::forget(ctx, "", &q.name_any()),
        Event::InitDone => {
            let gone: Vec<String> = ctx
                .views
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .keys()
                .filter(|(ns, name)| ns.is_empty() && store.get(&ObjectRef::new(name)).is_none())
                .map(|(_, name)| name.clone())
                .collect();
            for name in gone {
                crate::reconcile::forget(ctx, "", &name);
            }
        }
        _ => {}
    }
}

/// Watch the namespaces' metadata; any change reconciles every cluster quota (a relabel
/// moves usage between them).
fn watch_namespaces(client: Client, triggers: Triggers, metrics: Arc<Metrics>) -> NamespaceLabels {
    let (store, writer) = reflector::store();
    let feed = watch(
        kube::Api::<PartialObjectMeta<Namespace>>::all(client),
        watcher::Config::default().any_semantic(),
    )
    .default_backoff()
    .reflect(writer)
    .for_each(move |ev| {
        match ev {
            Ok(Event::Apply(_) | Event::Delete(_) | Event::InitDone) => triggers.cluster_all(),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "Namespace watch error; retrying");
                metrics.watch_restarted("namespaces");
            }
        }
        std::future::ready(())
    });
    tokio::spawn(feed);
    NamespaceLabels { store }
}

/// Whether the index has what a cluster quota needs (every binding listed).
pub(crate) fn synced(index: &RwLock<Index>) -> bool {
    index
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .bindings_synced()
}
