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

use futures::stream::BoxStream;
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

use crate::metrics::Metrics;
use crate::reconcile::Ctx;
use karmada_quota_shell::watch_cache::from_watch_cache;

/// The cluster quota controller's settings, from the flags.
pub(crate) struct Config {
    /// Only the cluster quotas with these labels (`--cluster-quota-selector`); empty: all.
    pub(crate) selector: String,
    /// Keep the KarmadaClusterQuotaShare mirrors (`--cluster-quota-shares` in a replica
    /// that writes: the dashboard-only role writes nothing, and may not read shares).
    pub(crate) shares: bool,
    /// Reconciles running at once (`--concurrency`).
    pub(crate) concurrency: u16,
}

/// What asks for cluster quotas to be reconciled besides their own watch (the
/// `crate::triggers` streams of this kind).
pub(crate) struct Requests {
    /// Namespaces whose bindings or member pods changed: the cluster quotas selecting them.
    pub(crate) namespaces: BoxStream<'static, String>,
    /// Every cluster quota (a namespace changed, members' reach, a new leader).
    pub(crate) all: BoxStream<'static, ()>,
    /// Cluster quotas by name (a reservation batch names them).
    pub(crate) named: BoxStream<'static, String>,
}

/// Start the cluster quota controller over `labels` (the one Namespace watch, whose every
/// change reconciles every cluster quota); the future runs until `stop`.
pub(crate) fn run(
    config: &Config,
    client: &Client,
    base: Arc<Ctx>,
    requests: Requests,
    labels: NamespaceLabels,
    metrics: &Arc<Metrics>,
    stop: impl Future<Output = ()> + Send + Sync + 'static,
) -> impl Future<Output = ()> + Send + 'static {
    let (reader, writer) = reflector::store::<KarmadaClusterQuota>();
    let (shares, share_changes) = if config.shares {
        let (shares, changes) = shares::Shares::watch(client, metrics.clone());
        (Some(shares), changes.boxed())
    } else {
        (None, stream::empty().boxed())
    };
    // The waiting line's releaser and the batch folds read the cluster quotas too.
    let _ = base
        .queue
        .cluster_view
        .set((reader.clone(), labels.clone()));
    let watched = Watched {
        reader: reader.clone(),
        ctx: base.clone(),
        shares: shares.clone(),
        metrics: metrics.clone(),
    };
    let quota_events = watched.events(client, &config.selector, writer);
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
    let refs = requests
        .namespaces
        .map(move |ns| stream::iter(selecting(&store, &labels, &ns)))
        .flatten();
    let refs = stream::select(refs, share_changes.map(shares::Shares::owner));
    let refs = stream::select(refs, requests.named.map(|name| ObjectRef::new(&name)));
    Controller::for_stream(quota_events, reader)
        .with_config(controller::Config::default().concurrency(config.concurrency))
        .reconcile_on(refs)
        .reconcile_all_on(requests.all)
        .graceful_shutdown_on(stop)
        .run(
            crate::reconcile::reconcile,
            crate::reconcile::error_policy,
            ctx,
        )
        .for_each(|res| async move { crate::reconcile::log_result(res, "cluster quota") })
}

/// What follows every applied event of the cluster quota watch.
struct Watched {
    /// The cluster quotas' store.
    reader: Store<KarmadaClusterQuota>,
    /// The shared reconcile context: its waiting lines and what it keeps per quota.
    ctx: Arc<Ctx>,
    /// The share mirrors, forgotten with their quota.
    shares: Option<shares::Shares>,
    /// Watch restarts are counted.
    metrics: Arc<Metrics>,
}

impl Watched {
    /// The cluster quota watch (`selector`: only those with these labels) into `writer`:
    /// a status change wakes the waiting line, a deleted quota is forgotten (its views,
    /// metrics and shares).
    fn events(
        self,
        client: &Client,
        selector: &str,
        writer: reflector::store::Writer<KarmadaClusterQuota>,
    ) -> impl Stream<Item = Result<KarmadaClusterQuota, watch::Error>> + Send + 'static {
        let selector = selector.trim();
        let mut config = from_watch_cache();
        if !selector.is_empty() {
            config = config.labels(selector);
        }
        let errors = self.metrics.clone();
        watch(
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
                self.applied(ev);
            }
        })
        .applied_objects()
    }

    /// After the store applied `ev`.
    fn applied(&self, ev: &Event<KarmadaClusterQuota>) {
        // A cluster quota's status changed: its line may move.
        self.ctx.queue.wake();
        forget_deleted(ev, &self.reader, &self.ctx);
        if let (Event::Delete(q), Some(shares)) = (ev, &self.shares) {
            let (shares, name) = (shares.clone(), q.name_any());
            tokio::spawn(async move { shares.forget(&name).await });
        }
    }
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
