//! The karmada-quota controller: federated KarmadaQuota usage across member clusters.
//!
//! Six rooms, each with a door of its own. [`run_until`] takes the flags apart once
//! (`config`: a settings struct per room; no room reads [`Args`]), makes what they
//! share (metrics, the index, the waiting line, the triggers, the views) and starts them:
//!
//! ```text
//!  Args ─► config::Config ─► run_until: Shared, then one step per room
//!
//!  control plane: watches (KarmadaQuota store, ResourceBinding ─► index, queue::Line;
//!     Cluster ─► members::Members::sync), namespaces (the one Namespace watch)
//!  members:  member clusters' pods ─► MemberRegistry (ns → pod uid → usage; reach)
//!  election: the Lease (or alone, or never) ─► leader watch
//!  batches:  KarmadaQuotaReservation watch ; the leader's sweep
//!     each of the above ─► Triggers (touched namespaces, named quotas, all)
//!                                   │
//!  accounting: kube-runtime Controller per kind (KarmadaQuota; cluster_quotas)
//!     ─► reconcile: pace ─► read (the leader: expired entries' bindings, quorum GETs)
//!        ─► plan (desired: pure; the fold put-off) ─► write (the leader: status::update,
//!        CAS, redo on 409; events) ─► publish (api::Views, metrics)
//!  releaser: queue::release (the leader) ◄─ QuotaSource; ─► binding patches, Triggers
//!  dashboard_host ◄─ Ports (Views, MemberRegistry, leader, NamespaceLabels) ─► dashboard
//!  admin: /livez, /readyz, /metrics
//! ```
//!
//! Modules: [`args`] (flags) and `config` (the flags taken apart); [`watches`]
//! (control-plane watches), [`index`] (watch-fed state), [`namespaces`] (the Namespace
//! watch); [`members`] (member clusters); `election` and [`leader`] (Lease election);
//! [`batches`] (reservation batches: their watch, folds and deletion sweep);
//! `reconcilers` (the Controller of each kind, run together), [`reconcile`] (the one
//! reconciler and its one writer), [`expired`] (the read of expired entries' bindings
//! before they go), [`desired`] (pure status computation),
//! [`cluster_quotas`] (the KarmadaClusterQuota kind, its shares); [`queue`] (the waiting
//! line and its releaser); [`triggers`](mod@triggers); [`api`] (the computed views);
//! `dashboard_host` (starts [`dashboard`], the browser dashboard's feed, with
//! [`dashboard_auth`], its TokenReview / SubjectAccessReview, and [`history`], the
//! in-memory usage history its quota charts read); `admin` (the admin port),
//! [`metrics`]; `stop` and `clock`.
//!
//! One door to the data: the admin port serves `/livez`, `/readyz` and `/metrics` only;
//! every JSON view of quotas is the dashboard's, behind `--dashboard-auth`.

mod admin;
pub mod api;
pub mod args;
pub mod batches;
pub mod billing_source;
mod cache_list;
pub mod changes;
mod clock;
pub mod cluster_quotas;
mod config;
pub mod dashboard;
pub mod dashboard_auth;
mod dashboard_host;
pub mod desired;
mod election;
mod error;
pub mod expired;
pub mod fence;
pub mod history;
pub mod index;
pub mod leader;
pub mod members;
pub mod metrics;
pub mod namespaces;
pub mod queue;
mod readiness;
pub mod reconcile;
mod reconcilers;
mod stop;
pub mod triggers;
pub mod watches;

#[cfg(test)]
mod testutil;

use parking_lot::{Mutex, RwLock};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use karmada_quota_core::quota::Unaccounted;
use karmada_quota_shell::events::{self, Event, EventConfig, EventQueue, KubeEventSink};
use karmada_quota_shell::{Readiness, shutdown_signal};
use kube::Client;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use admin::admin_app;
pub use args::Args;
pub use error::Error;

// The control-plane watches and the batch sweep read the clock here.

use crate::api::Views;
use crate::batches::Batches;
use crate::config::{Config, IndexConfig, MembersConfig, NamespaceWatch};
use crate::election::Election;
use crate::fence::Fence;
use crate::index::Index;
use crate::members::{MemberRegistry, Members, desired_members};
use crate::metrics::Metrics;
use crate::namespaces::NamespaceLabels;
use crate::queue::metrics::QueueMetrics;
use crate::reconcile::Ctx;
use crate::reconcilers::{QuotaWatch, Reconcilers};
use crate::stop::Stop;
use crate::triggers::{TriggerStreams, Triggers, triggers};

/// The controller's name, as reporting controller of events.
pub const CONTROLLER_NAME: &str = "karmada-quota-controller";
/// Events waiting for the writer task (a full queue drops and counts, never waits).
const EVENT_QUEUE_CAPACITY: usize = 1024;
/// Longest wait for in-flight reconciles once shutdown was requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Run the controller until SIGTERM / Ctrl-C.
pub async fn run(args: Args, client: Client) -> Result<(), Error> {
    let stop = CancellationToken::new();
    let on_signal = stop.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutdown requested");
        on_signal.cancel();
    });
    run_until(args, client, stop).await
}

/// Run the controller until `external_stop` is cancelled: the flags taken apart
/// (`config::Config`), the shared state made, every part started, the reconcilers run
/// to the end.
pub async fn run_until(
    args: Args,
    client: Client,
    external_stop: CancellationToken,
) -> Result<(), Error> {
    let config = Config::of(&args).map_err(Error::Config)?;
    let stop = Stop::following(&external_stop);
    let (shared, streams) = Shared::new(&config);
    // The Cluster watch (when Cluster objects are read) keeps the kubeconfig members too.
    let cluster_watch = config
        .index
        .clusters
        .then(|| config.members.kubeconfigs.clone());
    let members = start_members(config.members, &client, &shared);
    let election = election::start(
        config.leadership,
        &client,
        &stop,
        (&shared.triggers, &shared.fence),
        &shared.metrics,
    );
    let events = event_writer(config.identity.clone(), &client, &shared.metrics);
    let ready = Readiness::default();
    let admin = admin::start(config.admin, shared.registry.clone(), &ready, &stop);
    let watches = WatchSettings {
        scope: watches::Scope {
            namespace: config.namespace.as_deref(),
            clusters: cluster_watch,
        },
        namespaces: &config.namespaces,
    };
    let watched = start_watches(watches, &client, &shared, &members);
    if let (Some(namespace), Some(batches)) = (&config.batches, &shared.batches) {
        let folds = batches::folds::StoreFolds {
            scope: config.fold_scope.clone(),
            quotas: watched.quotas.store.clone(),
            line: shared.line.clone(),
        };
        spawn_batches(
            namespace, &client, batches, &shared, folds, &election, &stop,
        );
    }
    if let Some(unaccounted) = config.releaser {
        let quotas = Arc::new(queue::quotas::WatchedQuotas {
            quotas: watched.quotas.store.clone(),
            line: shared.line.clone(),
            index: shared.index.clone(),
            cluster_quotas: config.cluster_quotas.is_some(),
        });
        spawn_releaser(unaccounted, &client, &shared, &quotas, &election, &events);
        if config.line_labels {
            spawn_marker(&client, &shared, (&quotas, &watched), &election);
        }
    }
    if let Some(dashboard) = config.dashboard {
        spawn_dashboard(dashboard, &client, &shared, (&election, &watched), &stop);
    }
    keep_readiness(&shared, &election, ready);
    let ctx = shared.reconcile_context(&config.reconcile, &election, events, &client);
    tracing::info!(
        identity = %config.identity,
        admin = %args.admin.admin_listen,
        namespace = config.namespace.as_deref().unwrap_or("(all)"),
        "karmada-quota-controller started"
    );
    let reconcilers = Reconcilers {
        client: &client,
        ctx,
        index: &shared.index,
        metrics: &shared.metrics,
        stop: &stop,
    };
    let kinds = (config.namespaced, config.cluster_quotas);
    let controller = reconcilers.run(kinds, streams, watched.quotas, watched.namespaces);
    let mut admin = admin;
    let admin_result = run_to_the_end(controller, &mut admin, &stop).await;
    shut_down(&stop, &members, election.task, admin, admin_result).await
}

/// What the parts share, made before any is started.
struct Shared {
    /// The metrics.
    metrics: Arc<Metrics>,
    /// The registry `/metrics` serves.
    registry: Arc<Mutex<Registry>>,
    /// The watch-fed state.
    index: Arc<RwLock<Index>>,
    /// The waiting bindings and lines.
    line: Arc<queue::Line>,
    /// The waiting line's metrics.
    queue_metrics: Arc<QueueMetrics>,
    /// The reservation batches held (`None`: a replica that does not reconcile).
    batches: Option<Arc<Batches>>,
    /// Reconcile requests from outside the quota watches.
    triggers: Triggers,
    /// The members' pods and reach, as measured here.
    member_registry: MemberRegistry,
    /// The computed view of every quota.
    views: Views,
    /// The leader's fence: each term writes from a binding list begun in it.
    fence: Arc<Fence>,
}

impl Shared {
    /// The shared state (metrics registered in their order: the controller's, the
    /// line's, the batches'), and the triggers' streams.
    fn new(config: &Config) -> (Self, TriggerStreams) {
        let (metrics, registry) = register_metrics();
        let index = Arc::new(RwLock::new(new_index(&config.index)));
        let queue_metrics = Arc::new(QueueMetrics::register(&mut registry.lock()));
        let batches = config
            .batches
            .as_ref()
            .map(|_| batches_of(&registry, config.reservation_ttl));
        let (triggers, streams) = triggers();
        let shared = Self {
            metrics,
            registry,
            index,
            line: Arc::new(queue::Line::default()),
            queue_metrics,
            batches,
            triggers,
            member_registry: MemberRegistry::default(),
            views: Views::default(),
            fence: Arc::default(),
        };
        (shared, streams)
    }

    /// Everything a reconcile needs (`client` reads the bindings of expired entries).
    fn reconcile_context(
        &self,
        settings: &reconcile::Settings,
        election: &Election,
        events: EventQueue<Event>,
        client: &kube::Client,
    ) -> Arc<Ctx> {
        Arc::new(
            Ctx::new(
                self.index.clone(),
                self.member_registry.clone(),
                self.views.clone(),
                self.metrics.clone(),
                election.leader.clone(),
                Some(events),
                settings.resync,
            )
            .with_settings(settings)
            .with_queue(self.line.clone())
            .with_batches(self.batches.clone())
            .with_binding_reads(Arc::new(client.clone()))
            .with_fence(self.fence.clone()),
        )
    }
}

/// The metrics, and the registry `/metrics` serves.
fn register_metrics() -> (Arc<Metrics>, Arc<Mutex<Registry>>) {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    (metrics, Arc::new(Mutex::new(registry)))
}

/// The reservation batches this controller folds and deletes, their metrics registered.
fn batches_of(registry: &Mutex<Registry>, reservation_ttl: Duration) -> Arc<Batches> {
    let metrics = batches::metrics::BatchMetrics::register(&mut registry.lock());
    Arc::new(Batches::new(Arc::new(metrics)).with_reservation_ttl(reservation_ttl))
}

/// An empty index; without the Cluster watch its clusters count as synced.
fn new_index(config: &IndexConfig) -> Index {
    let mut index = Index::new(config.deleted_memory);
    index.unaccounted_default = config.unaccounted;
    if !config.clusters {
        index.skip_clusters();
    }
    index
}

/// The member supervisor, already watching the `--member-kubeconfig` members.
fn start_members(config: MembersConfig, client: &Client, shared: &Shared) -> Arc<Members> {
    let members = Arc::new(Members::new(
        shared.member_registry.clone(),
        client.clone(),
        config.settings,
        shared.triggers.clone(),
        shared.metrics.clone(),
    ));
    members.sync(&desired_members([], &config.kubeconfigs));
    members
}

/// The controller's event writer (this replica, `identity`, as the reporting instance),
/// the one the webhook uses too: the quotas' events and the waiting line's, aggregated
/// into series and paced, written off the reconcile's path.
fn event_writer(identity: String, client: &Client, metrics: &Metrics) -> EventQueue<Event> {
    let (queue, rx) = EventQueue::channel(EVENT_QUEUE_CAPACITY, metrics.events());
    tokio::spawn(events::run(
        rx,
        Arc::new(KubeEventSink::new(client.clone())),
        EventConfig {
            instance: identity,
            ..EventConfig::new(CONTROLLER_NAME, "controller event")
        },
        metrics.events(),
    ));
    queue
}

/// What the control-plane watches give the rest.
struct Watched {
    /// The KarmadaQuota watch.
    quotas: QuotaWatch,
    /// The namespaces' labels.
    namespaces: NamespaceLabels,
}

/// The control-plane watches (bindings, clusters, quotas; they read the flags
/// themselves) and the one Namespace watch.
/// What the watches are told: the control-plane watches' scope, the Namespace watch's
/// settings.
struct WatchSettings<'a> {
    scope: watches::Scope<'a>,
    namespaces: &'a NamespaceWatch,
}

fn start_watches(
    settings: WatchSettings<'_>,
    client: &Client,
    shared: &Shared,
    members: &Arc<Members>,
) -> Watched {
    let Shared {
        index,
        triggers,
        metrics,
        line,
        views,
        fence,
        ..
    } = shared;
    let WatchSettings { scope, namespaces } = settings;
    let namespace = scope.namespace;
    watches::spawn_control_plane(
        scope,
        client,
        index,
        members,
        triggers,
        metrics,
        (line, fence),
    );
    let (quotas, quota_events) = watches::quotas(namespace, client, index, views, metrics, line);
    Watched {
        quotas: QuotaWatch {
            store: quotas,
            events: quota_events.boxed(),
        },
        namespaces: watch_namespaces(namespaces, client, triggers, metrics),
    }
}

/// The batch watch of `--reservation-namespace` (`namespace`) and the leader's deletion
/// sweep.
fn spawn_batches(
    namespace: &str,
    client: &Client,
    batches: &Arc<Batches>,
    shared: &Shared,
    folds: batches::folds::StoreFolds,
    election: &Election,
    stop: &Stop,
) {
    tracing::info!(namespace = %namespace, "reservation batches: watching, folding and deleting them");
    tokio::spawn(batches::watch::watch(
        client.clone(),
        namespace.to_owned(),
        batches.clone(),
        shared.triggers.clone(),
        shared.metrics.clone(),
    ));
    tokio::spawn(batches::sweep::run(
        batches.clone(),
        (
            Arc::new(karmada_quota_status::KubeBatchStore::new(
                client.clone(),
                namespace,
            )),
            namespace.to_owned(),
        ),
        folds,
        election.leader.clone(),
        stop.requested(),
    ));
}

/// The waiting line's release loop (it runs while this replica leads).
fn spawn_releaser(
    unaccounted_default: Unaccounted,
    client: &Client,
    shared: &Shared,
    quotas: &Arc<queue::quotas::WatchedQuotas>,
    election: &Election,
    events: &EventQueue<Event>,
) {
    tokio::spawn(
        queue::release::Releaser {
            line: shared.line.clone(),
            quotas: quotas.clone(),
            leader: election.leader.clone(),
            triggers: shared.triggers.clone(),
            unaccounted_default,
            metrics: shared.queue_metrics.clone(),
            client: client.clone(),
            events: Some(events.clone()),
        }
        .run(),
    );
}

/// The waiting-line labels of the namespaces (`--label-line-namespaces`; the leader
/// keeps them).
fn spawn_marker(
    client: &Client,
    shared: &Shared,
    (quotas, watched): (&Arc<queue::quotas::WatchedQuotas>, &Watched),
    election: &Election,
) {
    tracing::info!(
        label = karmada_quota_core::queue::LABEL_WAITING_LINE,
        "keeping the waiting-line label on the namespaces a Queue-mode quota covers"
    );
    tokio::spawn(
        queue::marks::Marker {
            quotas: quotas.clone(),
            namespace_changes: watched.namespaces.changes(),
            leader: election.leader.clone(),
            client: client.clone(),
            metrics: shared.queue_metrics.clone(),
        }
        .run(),
    );
}

/// The browser dashboard, through its one port onto the rest.
fn spawn_dashboard(
    config: dashboard_host::DashboardConfig,
    client: &Client,
    shared: &Shared,
    (election, watched): (&Election, &Watched),
    stop: &Stop,
) {
    let ports = dashboard_host::Ports {
        views: shared.views.clone(),
        members: shared.member_registry.clone(),
        leader: election.leader.clone(),
        namespaces: watched.namespaces.clone(),
    };
    dashboard_host::spawn(config, client, ports, stop);
}

/// Keep `/readyz` following the watches' lists and the Lease.
fn keep_readiness(shared: &Shared, election: &Election, ready: Readiness) {
    let synced = shared.index.read().synced_changes();
    tokio::spawn(readiness::keep_readiness(
        synced,
        election.lease_ok.clone(),
        ready,
    ));
}

/// The controller's one Namespace watch, when anything reads namespaces: the cluster
/// quotas (every change reconciles them all) or the dashboard's teams (every change
/// exports `kq_namespace_labels`). Otherwise a store no watch feeds (never listed: no
/// teams).
fn watch_namespaces(
    config: &NamespaceWatch,
    client: &Client,
    triggers: &Triggers,
    metrics: &Arc<Metrics>,
) -> NamespaceLabels {
    let clusters = config.cluster_quotas;
    let label = config.team_label.clone();
    if !clusters && label.is_empty() {
        return NamespaceLabels::with_writer().0;
    }
    let (triggers, exported) = (triggers.clone(), metrics.clone());
    namespaces::watch_namespaces(client.clone(), metrics.clone(), move |ns| {
        if clusters {
            triggers.cluster_all();
        }
        if !label.is_empty() {
            exported.set_namespace_labels(&label, &ns.teams(&label));
        }
    })
}

/// Drive the controller until it ends; a failed admin server stops everything. The
/// controller stops once its in-flight reconciles finish; one that never got its quota
/// store ready (stop requested while the API server is unreachable) would wait forever,
/// so shutdown gives it SHUTDOWN_GRACE at most. Returns the admin server's result if it
/// ended.
async fn run_to_the_end(
    controller: impl Future<Output = ()>,
    admin: &mut JoinHandle<anyhow::Result<()>>,
    stop: &Stop,
) -> Option<Result<(), Error>> {
    tokio::pin!(controller);
    let stopping = stop.requested();
    tokio::pin!(stopping);
    let mut admin_result = None;
    let mut grace_deadline: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = &mut controller => break,
            res = &mut *admin, if admin_result.is_none() => {
                let res = admin::flatten(res);
                if let Err(e) = &res {
                    tracing::error!(error = %e, "admin server failed; shutting down");
                    stop.halt();
                }
                admin_result = Some(res);
            }
            () = &mut stopping, if grace_deadline.is_none() => {
                grace_deadline = Some(tokio::time::Instant::now() + SHUTDOWN_GRACE);
            }
            () = clock::sleep_until_opt(grace_deadline) => {
                tracing::warn!(grace = ?SHUTDOWN_GRACE, "controller did not stop in time; exiting anyway");
                break;
            }
        }
    }
    admin_result
}

/// Stop the member watches, release the Lease and wait for the admin server (each
/// bounded: the API server may be gone).
async fn shut_down(
    stop: &Stop,
    members: &Members,
    elector: Option<JoinHandle<()>>,
    admin: JoinHandle<anyhow::Result<()>>,
    admin_result: Option<Result<(), Error>>,
) -> Result<(), Error> {
    tracing::info!("controller stopped; shutting down");
    stop.halt();
    members.stop();
    if let Some(task) = elector {
        let _ = tokio::time::timeout(SHUTDOWN_GRACE, task).await;
    }
    match admin_result {
        Some(res) => res,
        None => match tokio::time::timeout(SHUTDOWN_GRACE, admin).await {
            Ok(res) => admin::flatten(res),
            Err(_) => Err(Error::Admin("admin server did not stop in time".to_owned())),
        },
    }
}
