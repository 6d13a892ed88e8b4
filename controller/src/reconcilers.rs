//! The quota controllers: kube-runtime's Controller of each kind (KarmadaQuota here,
//! KarmadaClusterQuota in `crate::cluster_quotas`), each over its watch and the
//! triggers' requests, run together with the one reconciler (`crate::reconcile`).

use std::sync::Arc;

use parking_lot::RwLock;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{StreamExt, stream};
use karmada_quota_crds::KarmadaQuota;
use kube::Client;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use crate::cluster_quotas;
use crate::index::Index;
use crate::metrics::Metrics;
use crate::namespaces::NamespaceLabels;
use crate::reconcile::{self, Ctx, KindCtx};
use crate::stop::Stop;
use crate::triggers::TriggerStreams;

/// The KarmadaQuota watch that drives its controller.
pub(crate) struct QuotaWatch {
    /// The KarmadaQuotas' store.
    pub(crate) store: Store<KarmadaQuota>,
    /// The KarmadaQuotas applied.
    pub(crate) events: BoxStream<'static, Result<KarmadaQuota, watcher::Error>>,
}

/// What both quota controllers run with.
pub(crate) struct Reconcilers<'a> {
    /// API client (the status stores, the cluster quota watch).
    pub(crate) client: &'a Client,
    /// The shared reconcile context.
    pub(crate) ctx: Arc<Ctx>,
    /// The index (told the quotas are listed when no KarmadaQuota controller runs).
    pub(crate) index: &'a Arc<RwLock<Index>>,
    /// Metrics.
    pub(crate) metrics: &'a Arc<Metrics>,
    /// Stops both.
    pub(crate) stop: &'a Stop,
}

impl Reconcilers<'_> {
    /// Both quota controllers, each when the flags ask for it (the KarmadaQuota
    /// controller's concurrency, the KarmadaClusterQuota controller's settings), running
    /// together.
    pub(crate) fn run(
        self,
        (namespaced, clusters): (Option<u16>, Option<cluster_quotas::Config>),
        streams: TriggerStreams,
        quotas: QuotaWatch,
        namespaces: NamespaceLabels,
    ) -> impl Future<Output = ()> + Send + use<> {
        let labels = namespaces;
        let TriggerStreams {
            namespaces,
            all,
            cluster_namespaces,
            cluster_all,
            quotas: named_quotas,
            cluster_quotas: named_cluster_quotas,
        } = streams;
        let requests = cluster_quotas::Requests {
            namespaces: cluster_namespaces.boxed(),
            all: cluster_all.boxed(),
            named: named_cluster_quotas.boxed(),
        };
        let clusters = self.cluster_quotas(clusters.as_ref(), requests, labels);
        let streams = TriggerStreams::namespaced(namespaces, all, named_quotas);
        let namespaced = self.namespaced(namespaced, streams, quotas);
        async move {
            tokio::join!(namespaced, clusters);
        }
    }

    /// The KarmadaClusterQuota controller, unless `--namespace` is set.
    fn cluster_quotas(
        &self,
        config: Option<&cluster_quotas::Config>,
        requests: cluster_quotas::Requests,
        labels: NamespaceLabels,
    ) -> BoxFuture<'static, ()> {
        let Some(config) = config else {
            tracing::info!("--namespace is set: KarmadaClusterQuotas are not reconciled");
            return Box::pin(std::future::ready(()));
        };
        Box::pin(cluster_quotas::run(
            config,
            self.client,
            self.ctx.clone(),
            requests,
            labels,
            self.metrics,
            self.stop.requested(),
        ))
    }

    /// The KarmadaQuota controller (`concurrency`), unless `--namespaced-quotas=false`:
    /// then the index takes the quotas as listed.
    fn namespaced(
        self,
        concurrency: Option<u16>,
        streams: TriggerStreams,
        quotas: QuotaWatch,
    ) -> BoxFuture<'static, ()> {
        let Some(concurrency) = concurrency else {
            tracing::info!("--namespaced-quotas=false: KarmadaQuotas are not reconciled");
            self.index.write().quotas_listed();
            return Box::pin(std::future::ready(()));
        };
        let ctx = Arc::new(KindCtx::<KarmadaQuota> {
            store: Arc::new(karmada_quota_status::KubeStore::new(self.client.clone())),
            base: self.ctx,
            own: (),
        });
        Box::pin(run_controller(
            concurrency,
            quotas.events,
            quotas.store,
            streams,
            ctx,
            self.stop,
        ))
    }
}

/// The quotas of `namespace`, from the reflector's store.
fn quotas_in(store: &Store<KarmadaQuota>, namespace: &str) -> Vec<ObjectRef<KarmadaQuota>> {
    store
        .state()
        .iter()
        .filter(|q| q.metadata.namespace.as_deref() == Some(namespace))
        .map(|q| ObjectRef::from_obj(q.as_ref()))
        .collect()
}

/// kube-runtime's Controller over the quota watch, reconciling also the quotas of every
/// namespace a trigger names, and all of them on a trigger for all.
fn run_controller(
    concurrency: u16,
    quota_events: BoxStream<'static, Result<KarmadaQuota, watcher::Error>>,
    quotas: Store<KarmadaQuota>,
    streams: TriggerStreams,
    ctx: Arc<KindCtx<KarmadaQuota>>,
    stop: &Stop,
) -> impl Future<Output = ()> + Send + use<> {
    let store = quotas.clone();
    let ns_refs = streams
        .namespaces
        .map(move |ns| stream::iter(quotas_in(&store, &ns)))
        .flatten();
    // A reservation batch names its quotas one by one: each is reconciled (folded) by name.
    let named = streams
        .quotas
        .map(|(namespace, name)| ObjectRef::<KarmadaQuota>::new(&name).within(&namespace));
    Controller::for_stream(quota_events, quotas)
        .with_config(controller::Config::default().concurrency(concurrency))
        .reconcile_on(ns_refs)
        .reconcile_on(named)
        .reconcile_all_on(streams.all)
        .graceful_shutdown_on(stop.requested())
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|res| async move { reconcile::log_result(res, "quota") })
}
