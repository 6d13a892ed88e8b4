//! The karmada-quota controller: federated KarmadaQuota usage across member clusters.
//!
//! ```text
//!  Karmada control plane                                   member clusters
//!  ─────────────────────                                   ───────────────
//!  watch KarmadaQuota ──► reflector store ─► Controller ◄── reconcile_on ◄─ members::MemberRegistry
//!                          (namespace → quotas)    ▲                         (ns → pod uid → usage;
//!  watch ResourceBinding ─► index.bindings ────────┤ Triggers                 Reachable / Unreachable)
//!     (charge by core; unpriced counts retried)    │ (touched namespaces)          ▲
//!  watch Cluster ─► index.clusters ─► members::Members::sync (start/stop member watches)
//!
//!  watch KarmadaQuotaReservation ─► batches (--reservation-store=batches) ─► Triggers
//!     (the quotas a batch names); leader: delete the batches every quota named folded
//!
//!  Controller ─► reconcile(quota) ─► desired::compute (core::status::compute, pure)
//!                    │              ─► desired::desired_status ─► status::update (CAS, redo on 409)
//!                    │                                           (leader only; leader::Elector)
//!                    └─► api::Views (the dashboard's feed), metrics, events
//! ```
//!
//! Modules: [`args`] (flags), [`watches`] (control-plane watches), [`index`] (watch-fed
//! state), [`batches`] (reservation batches: their watch and deletion sweep), [`members`] (member clusters), [`desired`] (pure status computation),
//! [`reconcile`] (reconciler and its one writer), [`leader`] (Lease election),
//! [`metrics`], [`api`] (the computed views), [`triggers`], [`dashboard`] (the browser
//! dashboard's feed), [`dashboard_auth`] (its TokenReview / SubjectAccessReview) and
//! [`history`] (the in-memory usage history its quota charts read).
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
pub mod cluster_quotas;
pub mod dashboard;
pub mod dashboard_auth;
pub mod desired;
mod election;
mod error;
pub mod history;
pub mod index;
pub mod leader;
pub mod members;
pub mod metrics;
pub mod namespaces;
pub mod queue;
mod readiness;
pub mod reconcile;
pub mod triggers;
pub mod watches;

#[cfg(test)]
mod testutil;

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt, stream};
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_shell::events::{self, Event, EventConfig, EventQueue, KubeEventSink};
use karmada_quota_shell::{Readiness, shutdown_signal};
use kube::Client;
use kube::runtime::controller::{self, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::registry::Registry;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use admin::admin_app;
pub use args::Args;
pub use error::Error;

use crate::api::Views;
use crate::election::Election;
use crate::index::Index;
use crate::members::{MemberRegistry, MemberSettings, Members, desired_members};
use crate::metrics::Metrics;
use crate::namespaces::NamespaceLabels;
use crate::reconcile::{Ctx, KindCtx};
use crate::triggers::{TriggerStreams, Triggers, triggers};

/// The controller's name, as reporting controller of events.
pub const CONTROLLER_NAME: &str = "karmada-quota-controller";
/// Events waiting for the writer task (a full queue drops and counts, never waits).
const EVENT_QUEUE_CAPACITY: usize = 1024;
/// Longest wait for in-flight reconciles once shutdown was requested.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Now, Unix seconds.
fn now_secs() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// The one internal stop signal (tokio-util's `CancellationToken`): cancelled by the
/// caller (a child of its token), or by a failed admin server.
#[derive(Clone)]
struct Stop(CancellationToken);

impl Stop {
    /// A stop signal that also fires when `external` is cancelled.
    fn following(external: &CancellationToken) -> Self {
        Self(external.child_token())
    }

    /// Ask everything to stop.
    fn halt(&self) {
        self.0.cancel();
    }

    /// Resolves once stopping was asked.
    fn requested(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.0.clone().cancelled_owned()
    }
}

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

/// Run the controller until `external_stop` is cancelled.
pub async fn run_until(
    args: Args,
    client: Client,
    external_stop: CancellationToken,
) -> Result<(), Error> {
    args.check_role().map_err(Error::Config)?;
    let stop = Stop::following(&external_stop);
    let (metrics, registry) = register_metrics();
    let index = Arc::new(RwLock::new(new_index(&args)));
    let line = Arc::new(queue::Line::default());
    let queue_metrics = Arc::new(queue::metrics::QueueMetrics::register(
        &mut registry.lock().unwrap_or_else(|e| e.into_inner()),
    ));
    let batches = batches_of(&args, &registry);
    let (triggers, streams) = triggers();
    let member_registry = MemberRegistry::default();
    let members = start_members(&args, &client, &member_registry, &triggers, &metrics);
    let election = election::start(&args, &client, &stop, &triggers, &metrics);
    let views = Views::default();
    let events = event_writer(&args, &client, &metrics);
    let ready = Readiness::default();
    args.dashboard
        .check_dashboard_exposure()
        .map_err(Error::Config)?;
    let admin = admin::start(&args, registry, &ready, &stop);
    watches::spawn_control_plane(&args, &client, &index, &members, &triggers, &metrics, &line);
    let (quotas, quota_events) = watches::quotas(&args, &client, &index, &views, &metrics, &line);
    let namespace_labels = watch_namespaces(&args, &client, &triggers, &metrics);
    if let Some(batches) = &batches {
        spawn_batches(
            &args,
            &client,
            batches,
            (&triggers, &metrics),
            batches::folds::StoreFolds {
                scope: batches::folds::Scope::of(&args),
                quotas: quotas.clone(),
                line: line.clone(),
            },
            (&election.leader, &stop),
        );
    }
    if args.controls() {
        tokio::spawn(
            queue::release::Releaser {
                line: line.clone(),
                quotas: quotas.clone(),
                index: index.clone(),
                leader: election.leader.clone(),
                triggers: triggers.clone(),
                unaccounted_default: args.unaccounted_workloads.into(),
                metrics: queue_metrics,
                client: client.clone(),
                events: Some(events.clone()),
            }
            .run(),
        );
    }
    if args.serves_dashboard() {
        spawn_dashboard(
            &args,
            &client,
            &views,
            &member_registry,
            &election.leader,
            &namespace_labels,
            &stop,
        );
    }
    let synced = index
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .synced_changes();
    tokio::spawn(readiness::keep_readiness(
        synced,
        election.lease_ok.clone(),
        ready,
    ));
    let ctx = reconcile_context(
        &args,
        events,
        &index,
        member_registry,
        views,
        &metrics,
        &election,
        &line,
        batches,
    );
    tracing::info!(
        identity = %args.identity(),
        admin = %args.admin.admin_listen,
        namespace = args.watch_namespace().unwrap_or("(all)"),
        "karmada-quota-controller started"
    );
    let TriggerStreams {
        namespaces,
        all,
        cluster_namespaces,
        cluster_all,
        quotas: named_quotas,
        cluster_quotas: named_cluster_quotas,
    } = streams;
    let clusters: futures::future::BoxFuture<'static, ()> = if args.reconciles_cluster_quotas() {
        Box::pin(cluster_quotas::run(
            &args,
            &client,
            ctx.clone(),
            cluster_namespaces,
            cluster_all,
            named_cluster_quotas,
            namespace_labels,
            &metrics,
            stop.requested(),
        ))
    } else {
        tracing::info!("--namespace is set: KarmadaClusterQuotas are not reconciled");
        Box::pin(std::future::ready(()))
    };
    let namespaced: futures::future::BoxFuture<'_, ()> = if args.namespaced_quotas {
        let ctx = Arc::new(KindCtx::<KarmadaQuota> {
            store: Arc::new(karmada_quota_status::KubeStore::new(client.clone())),
            base: ctx,
            own: (),
        });
        Box::pin(run_controller(
            &args,
            quota_events,
            quotas,
            TriggerStreams::namespaced(namespaces, all, named_quotas),
            ctx,
            &stop,
        ))
    } else {
        tracing::info!("--namespaced-quotas=false: KarmadaQuotas are not reconciled");
        index
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .quotas_listed();
        Box::pin(std::future::ready(()))
    };
    let controller = async move {
        tokio::join!(namespaced, clusters);
    };
    let mut admin = admin;
    let admin_result = run_to_the_end(controller, &mut admin, &stop).await;
    shut_down(&stop, &members, election.task, admin, admin_result).await
}

/// The metrics, and the registry `/metrics` serves.
fn register_metrics() -> (Arc<Metrics>, Arc<Mutex<Registry>>) {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::register(&mut registry));
    (metrics, Arc::new(Mutex::new(registry)))
}

/// The reservation batches this controller folds and deletes: with
/// `--reservation-store=batches` in a replica that reconciles (a `--role=dashboard` one
/// neither reads nor counts them), their metrics registered. `None`: status mode.
fn batches_of(args: &Args, registry: &Mutex<Registry>) -> Option<Arc<batches::Batches>> {
    if !(args.reservations.batches() && args.controls()) {
        return None;
    }
    let metrics = batches::metrics::BatchMetrics::register(
        &mut registry.lock().unwrap_or_else(|e| e.into_inner()),
    );
    Some(Arc::new(
        batches::Batches::new(Arc::new(metrics)).with_reservation_ttl(args.reservation_ttl),
    ))
}

/// The batch watch of `--reservation-namespace` and the leader's deletion sweep.
fn spawn_batches(
    args: &Args,
    client: &Client,
    batches: &Arc<batches::Batches>,
    (triggers, metrics): (&Triggers, &Arc<Metrics>),
    folds: batches::folds::StoreFolds,
    (leader, stop): (&watch::Receiver<bool>, &Stop),
) {
    let namespace = args.reservations.reservation_namespace.clone();
    tracing::info!(namespace = %namespace, "reservation batches: watching, folding and deleting them");
    tokio::spawn(batches::watch::watch(
        client.clone(),
        namespace.clone(),
        batches.clone(),
        triggers.clone(),
        metrics.clone(),
    ));
    tokio::spawn(batches::sweep::run(
        batches.clone(),
        Arc::new(karmada_quota_status::KubeBatchStore::new(
            client.clone(),
            &namespace,
        )),
        move |key: &karmada_quota_core::selection::QuotaKey| folds.fold(key),
        leader.clone(),
        stop.requested(),
    ));
}

/// An empty index; without the Cluster watch its clusters count as synced.
fn new_index(args: &Args) -> Index {
    let deleted_memory = i64::try_from(args.deleted_memory.as_secs()).unwrap_or(i64::MAX);
    let mut index = Index::new(deleted_memory);
    index.unaccounted_default = args.unaccounted_workloads.into();
    if !args.reads_member_clusters() {
        index.skip_clusters();
    }
    index
}

/// The member supervisor, already watching the `--member-kubeconfig` members.
fn start_members(
    args: &Args,
    client: &Client,
    registry: &MemberRegistry,
    triggers: &Triggers,
    metrics: &Arc<Metrics>,
) -> Arc<Members> {
    let members = Arc::new(Members::new(
        registry.clone(),
        client.clone(),
        MemberSettings {
            connect_timeout: args.member_connect_timeout,
            probe_interval: args.member_probe_interval,
            max_backoff: args.member_max_backoff,
            namespace: args.watch_namespace().map(str::to_owned),
            allow_insecure: args.allow_insecure(),
        },
        triggers.clone(),
        metrics.clone(),
    ));
    members.sync(&desired_members([], &args.member_kubeconfigs));
    members
}

/// The controller's event writer (this replica as the reporting instance), the one the
/// webhook uses too: the quotas' events and the waiting line's, aggregated into series and
/// paced, written off the reconcile's path.
fn event_writer(args: &Args, client: &Client, metrics: &Metrics) -> EventQueue<Event> {
    let (queue, rx) = EventQueue::channel(EVENT_QUEUE_CAPACITY, metrics.events());
    tokio::spawn(events::run(
        rx,
        Arc::new(KubeEventSink::new(client.clone())),
        EventConfig {
            instance: args.identity(),
            ..EventConfig::new(CONTROLLER_NAME, "controller event")
        },
        metrics.events(),
    ));
    queue
}

/// Everything a reconcile needs.
#[allow(clippy::too_many_arguments)]
fn reconcile_context(
    args: &Args,
    events: EventQueue<Event>,
    index: &Arc<RwLock<Index>>,
    members: MemberRegistry,
    views: Views,
    metrics: &Arc<Metrics>,
    election: &Election,
    line: &Arc<queue::Line>,
    batches: Option<Arc<batches::Batches>>,
) -> Arc<Ctx> {
    Arc::new(
        Ctx::new(
            index.clone(),
            members,
            views,
            metrics.clone(),
            election.leader.clone(),
            Some(events),
            args.resync_period,
        )
        .with_min_write_interval(args.min_write_interval())
        .with_max_write_backoff(args.max_write_backoff)
        .with_fold_interval(args.fold_interval)
        .with_observed_from_status(!args.controls())
        .with_queue(line.clone())
        .with_batches(batches),
    )
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
    args: &Args,
    quota_events: impl Stream<Item = Result<KarmadaQuota, kube::runtime::watcher::Error>>
    + Send
    + 'static,
    quotas: Store<KarmadaQuota>,
    streams: TriggerStreams,
    ctx: Arc<KindCtx<KarmadaQuota>>,
    stop: &Stop,
) -> impl Future<Output = ()> + Send {
    let store = quotas.clone();
    let ns_refs = streams
        .namespaces
        .map(move |ns| stream::iter(quotas_in(&store, &ns)))
        .flatten();
    Controller::for_stream(quota_events, quotas)
        .with_config(controller::Config::default().concurrency(args.concurrency))
        .reconcile_on(ns_refs)
        .reconcile_all_on(streams.all)
        .graceful_shutdown_on(stop.requested())
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
            () = sleep_until_opt(grace_deadline) => {
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

/// The controller's one Namespace watch, when anything reads namespaces: the cluster
/// quotas (every change reconciles them all) or the dashboard's teams (every change
/// exports `kq_namespace_labels`). Otherwise a store no watch feeds (never listed: no
/// teams).
fn watch_namespaces(
    args: &Args,
    client: &Client,
    triggers: &Triggers,
    metrics: &Arc<Metrics>,
) -> NamespaceLabels {
    let clusters = args.reconciles_cluster_quotas();
    let label = if args.serves_dashboard() {
        args.dashboard.dashboard_team_label.trim().to_owned()
    } else {
        String::new()
    };
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

/// The browser dashboard on `--dashboard-listen`, with the watch only it needs (Warning
/// events of quotas), behind `--dashboard-auth`.
fn spawn_dashboard(
    args: &Args,
    client: &Client,
    views: &Views,
    members: &MemberRegistry,
    leader: &watch::Receiver<bool>,
    namespaces: &NamespaceLabels,
    stop: &Stop,
) {
    let sources = dashboard::Sources {
        views: views.clone(),
        members: if args.controls() {
            dashboard::MemberSource::Measured(members.clone())
        } else {
            dashboard::MemberSource::FromStatus
        },
        leader: leader.clone(),
        namespaces: namespaces.clone(),
        team_label: args.dashboard.dashboard_team_label.trim().to_owned(),
        warnings: dashboard::Warnings::default(),
        warnings_changed: changes::Changes::default(),
    };
    let label = sources.team_label.clone();
    let prometheus = args
        .dashboard
        .dashboard_prometheus
        .as_deref()
        .and_then(|url| {
            billing_source::page_source(url, &args.dashboard.prometheus_access)
                .inspect_err(|e| tracing::error!(error = %e, "dashboard Report page off"))
                .ok()
        });
    tokio::spawn(dashboard::watch_warnings(
        watches::scoped_api(client, args.watch_namespace()),
        sources.warnings.clone(),
        sources.warnings_changed.clone(),
    ));
    let access = (args.dashboard.dashboard_auth == args::DashboardAuth::Kubernetes).then(|| {
        karmada_quota_dashboard::Access::new(
            Arc::new(dashboard_auth::KubeReviewer::new(
                client.clone(),
                args.dashboard.dashboard_token_audiences.clone(),
            )),
            karmada_quota_dashboard::CachePolicy {
                ttl: args.dashboard.dashboard_auth_cache_ttl,
                ..karmada_quota_dashboard::CachePolicy::default()
            },
        )
    });
    dashboard::spawn(
        args.dashboard.dashboard_listen,
        karmada_quota_dashboard::Settings {
            stale_after: args.dashboard.dashboard_stale_after,
            team_label: label,
            prometheus,
            // Served over TLS by the dashboard itself: every cookie is Secure.
            secure_cookies: args.dashboard.dashboard_tls_cert_file.is_some(),
            sessions: karmada_quota_dashboard::SessionPolicy {
                max_sessions: args.dashboard.dashboard_max_sessions,
                max_sessions_per_user: args.dashboard.dashboard_max_sessions_per_user,
                idle_timeout: args.dashboard.dashboard_session_idle_timeout,
                max_age: args.dashboard.dashboard_session_max_age,
            },
            streams: karmada_quota_dashboard::StreamLimits {
                max_total: args.dashboard.dashboard_max_streams,
                max_per_user: args.dashboard.dashboard_max_streams_per_user,
            },
            reports: karmada_quota_dashboard::ReportLimits::default(),
            from_status: !args.controls(),
        },
        access,
        sources,
        (args.listener.limits(), args.dashboard.dashboard_tls()),
        stop.requested(),
        (
            std::sync::Arc::new(std::sync::RwLock::new(
                karmada_quota_billing::history::Store::new(args.dashboard.history_bounds()),
            )),
            args.dashboard.history_step,
        ),
    );
}

async fn sleep_until_opt(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
