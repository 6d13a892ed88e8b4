//! The karmada-quota controller: federated KarmadaQuota usage across member clusters.
//!
//! ```text
//!  Karmada control plane                                   member clusters
//!  ─────────────────────                                   ───────────────
//!  watch KarmadaQuota ──► index.quotas ─┐                   watch pods (per member)
//!     └─► reflector store ──► Controller│◄── reconcile_on ◄─ members::MemberRegistry
//!  watch ResourceBinding ─► index.bindings (charge by core)  (ns → pod uid → usage;
//!     └─ touched namespaces ─► Triggers ─┘                   Reachable / Unreachable)
//!  watch Cluster ─► index.clusters ─► members::Members::sync (start/stop member watches)
//!
//!  Controller ─► reconcile(quota) ─► desired::compute (core::status::compute, pure)
//!                    │              ─► desired::desired_status ─► status::update (CAS, redo on 409)
//!                    │                                           (leader only; leader::Elector)
//!                    └─► api::Views (GET /api/v1/quotas), metrics, events
//! ```
//!
//! Modules: [`args`] (flags), [`index`] (watch-fed state), [`members`] (member clusters),
//! [`desired`] (pure status computation), [`reconcile`] (reconciler and its one writer),
//! [`leader`] (Lease election), [`metrics`], [`api`] (JSON view), [`triggers`].

pub mod api;
pub mod args;
pub mod desired;
pub mod index;
pub mod leader;
pub mod members;
pub mod metrics;
pub mod reconcile;
pub mod triggers;

#[cfg(test)]
mod testutil;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{StreamExt, stream};
use karmada_quota_crds::{Cluster, KarmadaQuota, ResourceBinding};
use karmada_quota_runtime::{Readiness, admin_router, serve_admin, shutdown_signal};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::watcher::{self, Event, watcher};
use kube::runtime::{WatchStreamExt, controller};
use kube::{Api, Client, ResourceExt};
use prometheus_client::registry::Registry;
use tokio::sync::watch;

pub use args::Args;

use crate::api::{ApiState, Views};
use crate::index::Index;
use crate::leader::{Elector, LeaseSettings};
use crate::members::{MemberRegistry, MemberSettings, Members, desired_members};
use crate::metrics::Metrics;
use crate::reconcile::Ctx;
use crate::triggers::{Triggers, triggers};

/// The controller's name, as reporting controller of events.
pub const CONTROLLER_NAME: &str = "karmada-quota-controller";
/// Longest wait for in-flight reconciles once shutdown was requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// How often readiness is checked until every watch has listed once.
const READY_POLL: Duration = Duration::from_millis(200);

/// Errors of the controller library.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error("kubernetes API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// A quota's status could not be written (409s in a row, or an API error).
    #[error(transparent)]
    Status(#[from] karmada_quota_status::UpdateError),
    /// A KarmadaQuota without a namespace (never from a watch).
    #[error("KarmadaQuota {0} has no namespace")]
    MissingNamespace(String),
    /// A member cluster cannot be configured (Secret, CA bundle, endpoint, kubeconfig).
    #[error("member cluster {cluster}: {message}")]
    MemberConfig {
        /// Member name.
        cluster: String,
        /// What is wrong.
        message: String,
    },
    /// The admin server failed.
    #[error("admin server: {0}")]
    Admin(String),
}

impl Error {
    /// A short label for the `kq_controller_reconcile_errors` metric.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Status(e) => match e {
                karmada_quota_status::UpdateError::Conflicts { .. } => "conflict",
                karmada_quota_status::UpdateError::Store { .. } => "kube",
            },
            Error::MissingNamespace(_) => "missing_namespace",
            Error::MemberConfig { .. } => "member_config",
            Error::Admin(_) => "admin",
        }
    }
}

/// Now, Unix seconds.
fn now_secs() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// A future that resolves once shutdown was requested.
fn shutdown_future(rx: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + Sync + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|stop| *stop).await;
    }
}

/// Run the controller until SIGTERM / Ctrl-C.
pub async fn run(args: Args, client: Client) -> Result<(), Error> {
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown requested");
        stop_tx.send_replace(true);
    });
    run_until(args, client, stop_rx).await
}

/// Run the controller until `stop` becomes true.
pub async fn run_until(
    args: Args,
    client: Client,
    external_stop: watch::Receiver<bool>,
) -> Result<(), Error> {
    // One internal stop signal: the caller's, or a failed admin server.
    let (halt, stop) = watch::channel(false);
    let halt = Arc::new(halt);
    {
        let halt = halt.clone();
        let ext = shutdown_future(&external_stop);
        tokio::spawn(async move {
            ext.await;
            halt.send_replace(true);
        });
    }
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    let registry = Arc::new(Mutex::new(registry));
    let ready = Readiness::default();
    let identity = args.identity();

    let deleted_memory = i64::try_from(args.deleted_memory.as_secs()).unwrap_or(i64::MAX);
    let index = Arc::new(RwLock::new(Index::new(deleted_memory)));
    if !args.member_clusters_from_api {
        index
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .skip_clusters();
    }
    let (triggers, streams) = triggers();
    let member_registry = MemberRegistry::default();
    let members = Arc::new(Members::new(
        member_registry.clone(),
        client.clone(),
        MemberSettings {
            connect_timeout: args.member_connect_timeout,
            probe_interval: args.member_probe_interval,
            max_backoff: args.member_max_backoff,
            namespace: args.watch_namespace().map(str::to_owned),
        },
        triggers.clone(),
        metrics.clone(),
    ));
    members.sync(&desired_members([], &args.member_kubeconfigs));

    // Leadership.
    let mut elector_task = None;
    let leader = if args.leader_election_enabled() {
        let (elector, rx) = Elector::new(
            client.clone(),
            LeaseSettings {
                namespace: args.lease_namespace.clone(),
                name: args.lease_name.clone(),
                identity: identity.clone(),
                duration: args.lease_duration,
                renew_interval: args.lease_renew_interval,
            },
        );
        elector_task = Some(tokio::spawn(elector.run(shutdown_future(&stop))));
        rx
    } else {
        tracing::info!("leader election disabled: this replica writes status");
        watch::channel(true).1
    };
    tokio::spawn(follow_leadership(
        leader.clone(),
        triggers.clone(),
        metrics.clone(),
    ));

    // Admin server: /metrics, /livez, /readyz, /api/v1/quotas.
    let views = Views::default();
    let router = admin_router(registry, ready.clone()).merge(api::router(ApiState {
        views: views.clone(),
        members: member_registry.clone(),
        leader: leader.clone(),
    }));
    let admin_addr = args.admin.admin_listen;
    let mut admin = tokio::spawn(serve_admin(admin_addr, router, shutdown_future(&stop)));

    // Watches feeding the index.
    tokio::spawn(watch_bindings(
        scoped_api::<ResourceBinding>(&client, args.watch_namespace()),
        index.clone(),
        karmada_quota_runtime::plurals::PluralResolver::new(client.clone()),
        triggers.clone(),
        metrics.clone(),
    ));
    if args.member_clusters_from_api {
        tokio::spawn(watch_clusters(
            Api::<Cluster>::all(client.clone()),
            index.clone(),
            members.clone(),
            args.member_kubeconfigs.clone(),
            metrics.clone(),
        ));
    }
    tokio::spawn(mark_ready_when_synced(index.clone(), ready.clone()));

    // The quota watch feeds the index (namespace → names), the controller's store, and
    // forgets deleted quotas' views and metrics.
    let (reader, writer) = reflector::store::<KarmadaQuota>();
    let quota_stream = {
        let index = index.clone();
        let views = views.clone();
        let metrics = metrics.clone();
        watcher(
            scoped_api::<KarmadaQuota>(&client, args.watch_namespace()),
            watcher::Config::default().any_semantic(),
        )
        .default_backoff()
        .inspect(move |ev| match ev {
            Ok(ev) => on_quota_event(ev, &index, &views, &metrics),
            Err(e) => {
                tracing::warn!(error = %e, "KarmadaQuota watch error; retrying");
                metrics.watch_restarted("karmadaquotas");
            }
        })
        .reflect(writer)
        .applied_objects()
    };

    let ns_refs = {
        let index = index.clone();
        streams
            .namespaces
            .map(move |ns| {
                let idx = index.read().unwrap_or_else(|e| e.into_inner());
                let refs: Vec<ObjectRef<KarmadaQuota>> = idx
                    .quotas_in(&ns)
                    .map(|name| ObjectRef::new(name).within(&ns))
                    .collect();
                stream::iter(refs)
            })
            .flatten()
    };

    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: CONTROLLER_NAME.to_owned(),
            instance: Some(identity.clone()),
        },
    );
    let ctx = Arc::new(
        Ctx::new(
            index.clone(),
            member_registry,
            views,
            metrics.clone(),
            leader,
            Arc::new(karmada_quota_status::KubeStore::new(client.clone())),
            Some(recorder),
            args.resync_period,
        )
        .with_min_write_interval(args.min_write_interval),
    );

    tracing::info!(
        %identity,
        admin = %admin_addr,
        namespace = args.watch_namespace().unwrap_or("(all)"),
        "karmada-quota-controller started"
    );
    let controller = Controller::for_stream(quota_stream, reader)
        .with_config(controller::Config::default().concurrency(args.concurrency))
        .reconcile_on(ns_refs)
        .reconcile_all_on(streams.all)
        .graceful_shutdown_on(shutdown_future(&stop))
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, _)) => tracing::trace!(quota = %obj, "reconciled"),
                Err(controller::Error::ObjectNotFound(obj)) => {
                    tracing::debug!(quota = %obj, "quota gone before its reconcile");
                }
                Err(controller::Error::ReconcilerFailed(..)) => {} // logged by error_policy
                Err(e) => tracing::warn!(error = %e, "controller error"),
            }
        });
    tokio::pin!(controller);
    // The controller stops once its in-flight reconciles finish; one that never got its
    // quota store ready (stop requested while the API server is unreachable) would wait
    // forever, so shutdown gives it SHUTDOWN_GRACE at most.
    let stopping = shutdown_future(&stop);
    tokio::pin!(stopping);
    let mut admin_result = None;
    let mut grace_deadline: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = &mut controller => break,
            res = &mut admin, if admin_result.is_none() => {
                let res = flatten_admin(res);
                if let Err(e) = &res {
                    tracing::error!(error = %e, "admin server failed; shutting down");
                    halt.send_replace(true);
                }
                admin_result = Some(res);
            }
            () = &mut stopping, if grace_deadline.is_none() => {
                grace_deadline = Some(tokio::time::Instant::now() + SHUTDOWN_GRACE);
            }
            () = sleep_until_opt(grace_deadline) => {
                tracing::warn!(grace = ?SHUTDOWN_GRACE, "controller did not stop in time; exiting anyway");
                break;
            }
        }
    }

    tracing::info!("controller stopped; shutting down");
    halt.send_replace(true);
    members.stop();
    if let Some(task) = elector_task {
        // The elector releases the Lease on shutdown (bounded: the API server may be gone).
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, task).await;
    }
    match admin_result {
        Some(res) => res,
        None => match tokio::time::timeout(SHUTDOWN_GRACE, admin).await {
            Ok(res) => flatten_admin(res),
            Err(_) => Err(Error::Admin("admin server did not stop in time".to_owned())),
        },
    }
}

/// An `Api` over one namespace (`--namespace`) or all of them.
fn scoped_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn flatten_admin(res: Result<anyhow::Result<()>, tokio::task::JoinError>) -> Result<(), Error> {
    match res {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(Error::Admin(format!("{e:#}"))),
        Err(e) => Err(Error::Admin(e.to_string())),
    }
}

fn on_quota_event(
    ev: &Event<KarmadaQuota>,
    index: &RwLock<Index>,
    views: &Views,
    metrics: &Metrics,
) {
    let mut idx = index.write().unwrap_or_else(|e| e.into_inner());
    idx.apply_quota_event(ev);
    match ev {
        Event::Delete(q) => {
            let (ns, name) = (q.namespace().unwrap_or_default(), q.name_any());
            views
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(ns.clone(), name.clone()));
            metrics.forget_quota(&ns, &name);
        }
        Event::InitDone => {
            let mut views = views.write().unwrap_or_else(|e| e.into_inner());
            let gone: Vec<_> = views
                .keys()
                .filter(|(ns, name)| !idx.quotas_in(ns).any(|n| n == name))
                .cloned()
                .collect();
            for key in gone {
                views.remove(&key);
                metrics.forget_quota(&key.0, &key.1);
            }
        }
        _ => {}
    }
}

/// Feed ResourceBinding events into the index (count names resolved first) and trigger the
/// quotas of the namespaces that changed.
async fn watch_bindings(
    api: Api<ResourceBinding>,
    index: Arc<RwLock<Index>>,
    counts: karmada_quota_runtime::plurals::PluralResolver,
    triggers: Triggers,
    metrics: Arc<Metrics>,
) {
    let mut events = guarded_events(api, "resourcebindings", metrics.clone());
    while let Some(ev) = events.next().await {
        let count = match &ev {
            Event::Apply(rb) | Event::InitApply(rb) => {
                let r = &rb.spec.resource;
                counts.count_name(&r.api_version, &r.kind).await
            }
            _ => None,
        };
        let (touched, n) = {
            let mut idx = index.write().unwrap_or_else(|e| e.into_inner());
            let touched = idx.apply_binding_event(&ev, count.as_deref(), now_secs());
            (touched, idx.binding_count())
        };
        metrics.set_bindings(n);
        triggers.namespaces(touched);
    }
}

/// Feed Cluster events into the index and keep the member watches in line with them.
async fn watch_clusters(
    api: Api<Cluster>,
    index: Arc<RwLock<Index>>,
    members: Arc<Members>,
    flags: Vec<args::MemberKubeconfig>,
    metrics: Arc<Metrics>,
) {
    let mut events = guarded_events(api, "clusters", metrics);
    while let Some(ev) = events.next().await {
        let desired = {
            let mut idx = index.write().unwrap_or_else(|e| e.into_inner());
            if !idx.apply_cluster_event(&ev) {
                continue;
            }
            desired_members(idx.clusters().values().map(AsRef::as_ref), &flags)
        };
        members.sync(&desired);
    }
}

/// The events of a watch on `api`, re-established with backoff. An error never ends the
/// stream (one malformed object must not stall the watch): it is logged and counted as a
/// restart of `what`.
fn guarded_events<K>(
    api: Api<K>,
    what: &'static str,
    metrics: Arc<Metrics>,
) -> futures::stream::BoxStream<'static, Event<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .filter_map(move |ev| {
            let ok = match ev {
                Ok(ev) => Some(ev),
                Err(e) => {
                    tracing::warn!(error = %e, watch = what, "watch error; retrying");
                    metrics.watch_restarted(what);
                    None
                }
            };
            std::future::ready(ok)
        })
        .boxed()
}

/// Ready once every control-plane watch has listed everything once.
async fn mark_ready_when_synced(index: Arc<RwLock<Index>>, ready: Readiness) {
    loop {
        if index.read().unwrap_or_else(|e| e.into_inner()).synced() {
            tracing::info!("caches synced; ready");
            ready.set_ready();
            return;
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// On becoming leader, reconcile every quota at once; export the leader gauge.
async fn follow_leadership(
    mut leader: watch::Receiver<bool>,
    triggers: Triggers,
    metrics: Arc<Metrics>,
) {
    loop {
        let is_leader = *leader.borrow_and_update();
        metrics.set_leader(is_leader);
        if is_leader {
            triggers.all();
        }
        if leader.changed().await.is_err() {
            return;
        }
    }
}
