//! KarmadaClusterQuotas: one quota over every namespace its selector matches.
//!
//! ```text
//!  watch KarmadaClusterQuota (--cluster-quota-selector) ─► reflector store ─► Controller
//!  the one Namespace watch (crate::namespaces) ─► any change: reconcile every cluster quota
//!  Triggers (namespaces whose bindings or member pods changed) ─► the cluster quotas
//!                                                                selecting them
//!  Triggers (cluster quotas a reservation batch names) ─► those
//!  reconcile(cluster quota) ─► selected namespaces (core's Covers over the labels)
//!      ─► desired::compute_over (the KarmadaQuota computation, over their bindings, pods
//!         and entries) + core::selection::namespace_usage (per namespace)
//!      ─► desired_status of the KarmadaQuota-shaped part + status.namespaces
//!      ─► the one reconciler (crate::reconcile, QuotaKind): pacing, status::update (CAS;
//!         only the leader), events
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

use std::sync::Arc;

use futures::{Stream, StreamExt, stream};
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_status::StatusStore;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Client, ResourceExt};

pub use crate::namespaces::NamespaceLabels;
pub use compute::{namespaces_selected, observed_in};
pub use reconcile::{ClusterCtx, ClusterOwn};

use crate::args::Args;
use crate::metrics::Metrics;
use crate::reconcile::Ctx;
use karmada_quota_shell::watch_cache::from_watch_cache;

/// Start the cluster quota controller over `labels` (the one Namespace watch, whose every
/// change reconciles every cluster quota); the future runs until `stop`. `named`: cluster
/// quotas to reconcile by name (a reservation batch names them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run(
    args: &Args,
    client: &Client,
    base: Arc<Ctx>,
    cluster_namespaces: impl Stream<Item = String> + Send + 'static,
    cluster_all: impl Stream<Item = ()> + Send + 'static,
    named: impl Stream<Item = String> + Send + 'static,
    labels: NamespaceLabels,
    metrics: &Arc<Metrics>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let selector = args.cluster_quota_selector.trim().to_owned();
    let mut config = from_watch_cache();
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
        own: ClusterOwn {
            labels: labels.clone(),
            shares,
        },
    });
    let store = reader.clone();
    let refs = cluster_namespaces
        .map(move |ns| stream::iter(selecting(&store, &labels, &ns)))
        .flatten();
    let refs = stream::select(refs, share_changes.map(shares::Shares::owner));
    let refs = stream::select(refs, named.map(|name| ObjectRef::new(&name)));
    let concurrency = args.concurrency;
    Controller::for_stream(quota_events, reader)
        .with_config(controller::Config::default().concurrency(concurrency))
        .reconcile_on(refs)
        .reconcile_all_on(cluster_all)
        .graceful_shutdown_on(stop)
        .run(
            crate::reconcile::reconcile,
            crate::reconcile::error_policy,
            ctx,
        )
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
