//! The flags taken apart, once: [`Config::of`] gives each part of the controller a
//! settings struct of its own, so that the parts never read [`Args`].
//! A part's settings struct lives with the part (`admin::AdminConfig`), is built here,
//! and is handed over by the crate root's step that starts the part.
//!
//! ```text
//!  Args ─► Config ─┬─ admin ─────────► admin::AdminConfig
//!                  ├─ leadership ────► election::Leadership
//!                  ├─ index, members ► the root's IndexConfig, MembersConfig
//!                  ├─ reconcile ─────► reconcile::Settings
//!                  ├─ namespaced ────► the KarmadaQuota controller's concurrency
//!                  ├─ cluster_quotas ► cluster_quotas::Config
//!                  ├─ namespaces ────► the root's NamespaceWatch
//!                  ├─ batches, releaser, line labels (only a replica that reconciles)
//!                  └─ dashboard ─────► dashboard_host::DashboardConfig
//! ```

use std::time::Duration;

use karmada_quota_core::quota::Unaccounted;

use crate::admin::AdminConfig;
use crate::args::{Args, DashboardAuth};
use crate::dashboard_host::DashboardConfig;
use crate::election::Leadership;
use crate::leader::LeaseSettings;
use crate::members::{MemberKubeconfig, MemberSettings};
use crate::{cluster_quotas, reconcile};

/// Every part's settings.
pub(crate) struct Config {
    /// This replica's identity: the Lease holder, the events' reporting instance.
    pub(crate) identity: String,
    /// The one namespace watched (`--namespace`); `None`: all.
    pub(crate) namespace: Option<String>,
    /// The admin port.
    pub(crate) admin: AdminConfig,
    /// How this replica leads.
    pub(crate) leadership: Leadership,
    /// The watch-fed index.
    pub(crate) index: IndexConfig,
    /// The member clusters' watches.
    pub(crate) members: MembersConfig,
    /// Both reconcilers.
    pub(crate) reconcile: reconcile::Settings,
    /// The KarmadaQuota controller's concurrency; `None`: KarmadaQuotas are not
    /// reconciled (`--namespaced-quotas=false`).
    pub(crate) namespaced: Option<u16>,
    /// The KarmadaClusterQuota controller; `None`: not run (`--namespace` is set).
    pub(crate) cluster_quotas: Option<cluster_quotas::Config>,
    /// The one Namespace watch.
    pub(crate) namespaces: NamespaceWatch,
    /// `--reservation-namespace`, when this replica folds and deletes reservation
    /// batches (a replica that reconciles).
    pub(crate) batches: Option<String>,
    /// `--reservation-ttl`: a folded batch entry expires at the fold's now plus this, at
    /// the latest (the webhook's TTL).
    pub(crate) reservation_ttl: Duration,
    /// Which quotas this replica folds batches for (the rest count as folded here).
    pub(crate) fold_scope: crate::batches::folds::Scope,
    /// The waiting line's releaser, in a replica that reconciles: the
    /// `unaccountedWorkloads` of a quota that sets none.
    pub(crate) releaser: Option<Unaccounted>,
    /// The leader keeps the namespaces' waiting-line labels beside the releaser
    /// (`--label-line-namespaces`; `Args::check_role` refused it where the quotas are not
    /// all seen).
    pub(crate) line_labels: bool,
    /// The browser dashboard (`--role` all or dashboard).
    pub(crate) dashboard: Option<DashboardConfig>,
}

/// The index's settings.
pub(crate) struct IndexConfig {
    /// How long a deleted binding is remembered, seconds (`--deleted-memory`).
    pub(crate) deleted_memory: i64,
    /// The `unaccountedWorkloads` of a quota that sets none.
    pub(crate) unaccounted: Unaccounted,
    /// Whether Cluster objects are watched (otherwise the index's clusters count as
    /// listed).
    pub(crate) clusters: bool,
}

/// The member supervisor's settings.
pub(crate) struct MembersConfig {
    /// How each member is watched.
    pub(crate) settings: MemberSettings,
    /// The `--member-kubeconfig` members, watched from the start.
    pub(crate) kubeconfigs: Vec<MemberKubeconfig>,
}

/// What the one Namespace watch feeds.
pub(crate) struct NamespaceWatch {
    /// The cluster quotas: every change reconciles them all.
    pub(crate) cluster_quotas: bool,
    /// The dashboard's team label (`kq_namespace_labels`); empty: none.
    pub(crate) team_label: String,
}

impl Config {
    /// Takes `args` apart; refuses the flags that cannot go together.
    pub(crate) fn of(args: &Args) -> Result<Self, String> {
        args.check_role()?;
        args.dashboard.check_dashboard_exposure()?;
        let controls = args.controls();
        let clusters = args.reconciles_cluster_quotas();
        Ok(Self {
            identity: args.identity(),
            namespace: args.watch_namespace().map(str::to_owned),
            admin: AdminConfig {
                listen: args.admin.admin_listen,
                limits: args.listener.limits(),
            },
            leadership: leadership(args),
            index: IndexConfig {
                deleted_memory: i64::try_from(args.deleted_memory.as_secs()).unwrap_or(i64::MAX),
                unaccounted: args.unaccounted_workloads.into(),
                clusters: args.reads_member_clusters(),
            },
            members: members(args),
            reconcile: reconcile::Settings {
                resync: args.resync_period,
                min_write_interval: args.min_write_interval,
                max_write_backoff: args.max_write_backoff,
                fold_interval: args.fold_interval,
                observed_from_status: !controls,
            },
            namespaced: args.namespaced_quotas.then_some(args.concurrency),
            cluster_quotas: clusters.then(|| cluster_quotas::Config {
                selector: args.cluster_quota_selector.trim().to_owned(),
                shares: args.cluster_quota_shares && controls,
                concurrency: args.concurrency,
            }),
            namespaces: NamespaceWatch {
                cluster_quotas: clusters,
                team_label: if args.serves_dashboard() {
                    args.dashboard.dashboard_team_label.trim().to_owned()
                } else {
                    String::new()
                },
            },
            reservation_ttl: args.reservation_ttl,
            fold_scope: crate::batches::folds::Scope {
                namespaced: args.namespaced_quotas,
                namespace: args.watch_namespace().map(str::to_owned),
                clusters: args.reconciles_cluster_quotas(),
                cluster_selector: !args.cluster_quota_selector.trim().is_empty(),
            },
            batches: controls.then(|| args.reservations.reservation_namespace.clone()),
            releaser: controls.then(|| args.unaccounted_workloads.into()),
            line_labels: args.label_line_namespaces,
            dashboard: args.serves_dashboard().then(|| dashboard(args)),
        })
    }
}

/// Never (`--role=dashboard`), by the Lease, or alone.
fn leadership(args: &Args) -> Leadership {
    if !args.controls() {
        Leadership::Never
    } else if args.leader_election_enabled() {
        Leadership::Lease(LeaseSettings {
            namespace: args.lease_namespace.clone(),
            name: args.lease_name.clone(),
            identity: args.identity(),
            duration: args.lease_duration,
            renew_interval: args.lease_renew_interval,
        })
    } else {
        Leadership::Alone
    }
}

/// The member flags.
fn members(args: &Args) -> MembersConfig {
    MembersConfig {
        settings: MemberSettings {
            connect_timeout: args.member_connect_timeout,
            probe_interval: args.member_probe_interval,
            max_backoff: args.member_max_backoff,
            namespace: args.watch_namespace().map(str::to_owned),
            allow_insecure: args.allow_insecure(),
        },
        kubeconfigs: args.member_kubeconfigs.clone(),
    }
}

/// The `--dashboard-*` flags, `--listener` bounds and the role.
fn dashboard(args: &Args) -> DashboardConfig {
    let d = &args.dashboard;
    DashboardConfig {
        listen: d.dashboard_listen,
        namespace: args.watch_namespace().map(str::to_owned),
        members_measured: args.controls(),
        settings: karmada_quota_dashboard::Settings {
            stale_after: d.dashboard_stale_after,
            team_label: d.dashboard_team_label.trim().to_owned(),
            prometheus: None,
            // Served over TLS by the dashboard itself: every cookie is Secure.
            secure_cookies: d.dashboard_tls_cert_file.is_some(),
            sessions: karmada_quota_dashboard::SessionPolicy {
                max_sessions: d.dashboard_max_sessions,
                max_sessions_per_user: d.dashboard_max_sessions_per_user,
                idle_timeout: d.dashboard_session_idle_timeout,
                max_age: d.dashboard_session_max_age,
                logins_per_user_per_minute: d.dashboard_logins_per_user_per_minute,
                logins_per_peer_per_minute: d.dashboard_logins_per_peer_per_minute,
            },
            streams: karmada_quota_dashboard::StreamLimits {
                max_total: d.dashboard_max_streams,
                max_per_user: d.dashboard_max_streams_per_user,
            },
            reports: karmada_quota_dashboard::ReportLimits::default(),
            from_status: !args.controls(),
        },
        prometheus: d
            .dashboard_prometheus
            .clone()
            .map(|url| (url, d.prometheus_access.clone())),
        auth: (d.dashboard_auth == DashboardAuth::Kubernetes).then(|| {
            (
                d.dashboard_token_audiences.clone(),
                karmada_quota_dashboard::CachePolicy {
                    ttl: d.dashboard_auth_cache_ttl,
                    new_tokens: karmada_quota_dashboard::rate::Rate::per_second(
                        d.dashboard_new_token_reviews_per_second,
                    ),
                    ..karmada_quota_dashboard::CachePolicy::default()
                },
            )
        }),
        listener: (args.listener.limits(), d.dashboard_tls()),
        history: (d.history_bounds(), d.history_step),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use clap::Parser;

    use super::*;

    fn config(flags: &[&str]) -> Result<Config, String> {
        let args = Args::try_parse_from(
            std::iter::once("karmada-quota-controller").chain(flags.iter().copied()),
        )
        .expect("the flags parse");
        Config::of(&args)
    }

    #[test]
    fn by_default_every_room_runs_and_the_lease_decides_who_writes() {
        let c = config(&[]).unwrap();
        assert!(matches!(c.leadership, Leadership::Lease(_)));
        assert_eq!(c.namespaced, Some(4));
        let clusters = c.cluster_quotas.expect("cluster quotas reconciled");
        assert!(clusters.shares && clusters.selector.is_empty());
        assert!(c.namespaces.cluster_quotas);
        assert!(c.releaser.is_some());
        assert_eq!(
            c.batches.as_deref(),
            Some("karmada-quota-system"),
            "the batches are folded and deleted"
        );
        assert!(c.dashboard.as_ref().is_some_and(|d| d.members_measured));
        assert!(c.index.clusters);
        assert!(!c.reconcile.observed_from_status);
        assert_eq!(c.reconcile.min_write_interval, Duration::from_secs(1));
    }

    #[test]
    fn a_dashboard_replica_leads_never_writes_nothing_and_reads_no_member() {
        let c = config(&["--role=dashboard"]).unwrap();
        assert!(matches!(c.leadership, Leadership::Never));
        assert!(c.releaser.is_none());
        assert!(c.batches.is_none(), "no batch is folded or deleted");
        assert!(!c.cluster_quotas.expect("its views are computed").shares);
        assert!(c.reconcile.observed_from_status);
        assert!(!c.index.clusters);
        let dashboard = c.dashboard.expect("served");
        assert!(!dashboard.members_measured && dashboard.settings.from_status);
        assert!(
            config(&["--role=dashboard", "--member-kubeconfig=m1=/x"]).is_err(),
            "no member credential"
        );
    }

    #[test]
    fn one_namespace_reconciles_no_cluster_quota_and_watches_its_members_pods_there() {
        let c = config(&["--namespace=team-a", "--role=controller"]).unwrap();
        assert!(c.cluster_quotas.is_none());
        assert!(!c.namespaces.cluster_quotas);
        assert!(c.namespaces.team_label.is_empty(), "no dashboard: no teams");
        assert!(c.dashboard.is_none());
        assert_eq!(c.members.settings.namespace.as_deref(), Some("team-a"));
        assert_eq!(c.namespace.as_deref(), Some("team-a"));
    }

    #[test]
    fn batches_are_folded_by_a_replica_that_reconciles_with_their_own_write_interval() {
        let c = config(&[
            "--reservation-namespace=batches-here",
            "--no-leader-election",
        ])
        .unwrap();
        assert_eq!(c.batches.as_deref(), Some("batches-here"));
        assert_eq!(c.reconcile.min_write_interval, Duration::from_secs(1));
        assert!(matches!(c.leadership, Leadership::Alone));
    }
}
