//! Command-line flags of `karmada-quota-controller`; every flag has a `KQ_*` environment twin.

use std::time::Duration;

use clap::{ArgAction, Parser};
use karmada_quota_shell::listener::ListenerArgs;
use karmada_quota_shell::{AdminArgs, ClientArgs, LogArgs, duration};

mod dashboard;
pub use dashboard::{DashboardArgs, DashboardAuth};

use crate::members::{MemberKubeconfig, parse_member_kubeconfig};

/// Flags of the controller binary.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "karmada-quota-controller",
    version,
    about = "Computes the federated usage of every KarmadaQuota across Karmada member clusters",
    long_about = "Computes the federated usage of every KarmadaQuota across Karmada member clusters.\n\n\
        Watches KarmadaQuota, ResourceBinding and Cluster objects in the Karmada control plane, \
        sums what every binding costs (the same engine the admission webhook uses), measures \
        the pods actually running in each member cluster, and writes status.used, \
        status.clusters[], pruned status.reservations and conditions (Ready, Drift, \
        MembersReachable). Only the holder of the leader Lease writes; other replicas keep \
        their caches warm. The admin port serves /metrics, /livez and /readyz only; \
        --dashboard-listen serves the browser dashboard, whose /api/v1 is the only JSON view \
        of the quotas (behind --dashboard-auth)."
)]
pub struct Args {
    /// Admin port flags.
    #[command(flatten)]
    pub admin: AdminArgs,
    /// Logging flags.
    #[command(flatten)]
    pub log: LogArgs,
    /// How to reach the Karmada control plane.
    #[command(flatten)]
    pub client: ClientArgs,
    /// Bounds of each listener (admin and dashboard alike).
    #[command(flatten)]
    pub listener: ListenerArgs,

    /// What this process does. `all` (default): reconcile quotas, measure the members and
    /// serve the dashboard. `controller`: the same without the dashboard. `dashboard`: serve
    /// only the dashboard, as an identity of its own that holds no member-cluster credential:
    /// it watches the control plane read-only (quotas, bindings, namespaces, events), never
    /// reads a Secret, connects to no member, takes no Lease and writes nothing; what members
    /// run and whether they are reachable come from the quotas' status, which the
    /// controller writes. Refuses --member-kubeconfig.
    #[arg(long, env = "KQ_ROLE", value_enum, default_value_t = Role::All)]
    pub role: Role,

    /// Run a controller for one namespace; default all. Restricts the KarmadaQuota and
    /// ResourceBinding watches and the member clusters' pod watches to NAMESPACE (Cluster
    /// objects and the Lease are read as usual). For one team's controller, or tests that
    /// share a control plane.
    #[arg(long, env = "KQ_NAMESPACE", value_name = "NAMESPACE")]
    pub namespace: Option<String>,

    /// Reconcile only the KarmadaClusterQuotas with these labels (a label selector, e.g.
    /// `tier=gold`); empty: all of them. A controller restricted by --namespace
    /// reconciles none (a cluster quota spans namespaces it does not watch).
    #[arg(
        long,
        env = "KQ_CLUSTER_QUOTA_SELECTOR",
        default_value = "",
        value_name = "SELECTOR"
    )]
    pub cluster_quota_selector: String,

    /// Keep, in every namespace a KarmadaClusterQuota selects, a read-only
    /// KarmadaClusterQuotaShare of the same name (its limits, totals and that namespace's
    /// share), so tenants without cluster-scoped rights can read the quota that binds them
    /// (`kubectl get kcqshare`, the plugin). Needs write access to
    /// karmadaclusterquotashares.
    #[arg(
        long,
        env = "KQ_CLUSTER_QUOTA_SHARES",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub cluster_quota_shares: bool,

    /// Keep the label `quota.karmada.io/waiting-line=true` on every namespace a quota in
    /// `spec.admission.mode: Queue` covers, and off every other (the leader adds and
    /// removes it; it owns the label). The chart registers the waiting line's arrivals
    /// review only for namespaces that carry it (`webhook.queueing.labelNamespaces`), so
    /// a binding elsewhere costs one review fewer. Needs patch on namespaces, and a
    /// controller that sees every quota: refused with --namespace,
    /// --namespaced-quotas=false, --cluster-quota-selector or --role=dashboard.
    #[arg(
        long,
        env = "KQ_LABEL_LINE_NAMESPACES",
        default_value_t = false,
        action = clap::ArgAction::Set,
        default_missing_value = "true",
        num_args = 0..=1,
        value_name = "BOOL"
    )]
    pub label_line_namespaces: bool,

    /// Reconcile KarmadaQuotas (true) or only KarmadaClusterQuotas (false), e.g. to run
    /// the cluster quotas in a replica set of their own.
    #[arg(
        long,
        env = "KQ_NAMESPACED_QUOTAS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub namespaced_quotas: bool,

    /// Recompute every quota at least this often, even when no watch event arrived
    /// (e.g. `30s`, `5m`, `1h`). Changes are picked up at once regardless; the resync only
    /// repairs what a lost event could have left stale.
    #[arg(long, env = "KQ_RESYNC_PERIOD", default_value = "5m", value_parser = duration::parse)]
    pub resync_period: Duration,

    /// Least time between two status writes of one quota. The first write after a change
    /// goes out at once; during a burst of admissions later ones wait. The webhook writes
    /// no status, and pending entries cost it nothing while they sit in batches: spacing
    /// the controller's writes only saves the apiserver work (bench/RESULTS.md).
    #[arg(long, env = "KQ_MIN_WRITE_INTERVAL", default_value = "1s", value_parser = duration::parse)]
    pub min_write_interval: Duration,

    /// Longest wait between two status writes of one quota while its writes keep meeting
    /// another writer's (409 Conflict: another controller replica, or a 0.2.0 webhook
    /// during an upgrade): each write that conflicted doubles the wait after
    /// `--min-write-interval`, up to this; a clean write resets it. A contended write is
    /// tried twice (one re-read), then left to the next turn instead of fighting on.
    /// `0s` (the default: measured in bench/RESULTS.md, it cut conflicts but not the
    /// apiserver's cost per admission): no backoff (up to 5 immediate re-reads, then the
    /// error backoff).
    #[arg(long, env = "KQ_MAX_WRITE_BACKOFF", default_value = "0s", value_parser = duration::parse)]
    pub max_write_backoff: Duration,

    /// Longest the controller puts off a write that only folds observed entries into
    /// `used` (effective usage unchanged: nothing admission reads moves), while the quota
    /// holds fewer than 64 entries; any other change is written at once. `0s` (the
    /// default: measured in bench/RESULTS.md, the longer lists it leaves made every
    /// webhook write dearer): fold at every write turn.
    #[arg(long, env = "KQ_FOLD_INTERVAL", default_value = "0s", value_parser = duration::parse)]
    pub fold_interval: Duration,

    /// How many quotas are reconciled at the same time (one quota is never reconciled twice
    /// at once).
    #[arg(long, env = "KQ_CONCURRENCY", default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,

    /// Elect a leader with a coordination.k8s.io/v1 Lease so several replicas can run and
    /// only one writes status. `--leader-election=false` or `--no-leader-election` writes
    /// unconditionally (a single replica).
    #[arg(
        long,
        env = "KQ_LEADER_ELECTION",
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        require_equals = true
    )]
    pub leader_election: bool,

    /// Same as `--leader-election=false`.
    #[arg(long, overrides_with = "leader_election")]
    pub no_leader_election: bool,

    /// Namespace of the leader-election Lease (in the Karmada control plane).
    #[arg(long, env = "KQ_LEASE_NAMESPACE", default_value = "karmada-system")]
    pub lease_namespace: String,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "KQ_LEASE_NAME",
        default_value = "karmada-quota-controller"
    )]
    pub lease_name: String,

    /// This replica's identity in the Lease. Default: $POD_NAME, else `<hostname>_<pid>`.
    #[arg(long, env = "KQ_IDENTITY")]
    pub identity: Option<String>,

    /// How long a Lease stays valid without renewal; a stopped leader is replaced after
    /// about this long.
    #[arg(long, env = "KQ_LEASE_DURATION", default_value = "15s", value_parser = duration::parse)]
    pub lease_duration: Duration,

    /// How often the leader renews the Lease (and how often a candidate retries). The leader
    /// stops writing when it could not renew for `--lease-duration` minus this.
    #[arg(long, env = "KQ_LEASE_RENEW_INTERVAL", default_value = "5s", value_parser = duration::parse)]
    pub lease_renew_interval: Duration,

    /// A member cluster given by kubeconfig, as `NAME=PATH` (repeatable; the env twin takes
    /// a comma-separated list). NAME is the cluster's name in ResourceBindings; it wins over
    /// a Cluster object of the same name.
    #[arg(long = "member-kubeconfig", env = "KQ_MEMBER_KUBECONFIG", value_name = "NAME=PATH", value_delimiter = ',', value_parser = parse_member_kubeconfig)]
    pub member_kubeconfigs: Vec<MemberKubeconfig>,

    /// Read member clusters from the control plane's Cluster objects (spec.apiEndpoint +
    /// spec.secretRef). `--member-clusters-from-api=false` uses only --member-kubeconfig.
    #[arg(
        long,
        env = "KQ_MEMBER_CLUSTERS_FROM_API",
        default_value_t = true,
        action = ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        require_equals = true
    )]
    pub member_clusters_from_api: bool,

    /// Give up connecting to a member's API server after this long (the member is then
    /// reported unreachable and retried with backoff).
    #[arg(long, env = "KQ_MEMBER_CONNECT_TIMEOUT", default_value = "10s", value_parser = duration::parse)]
    pub member_connect_timeout: Duration,

    /// How often a member's API server is probed (GET /version) while its pods are watched.
    /// A failed probe marks it unreachable at once, even when a half-open watch connection
    /// (a partition, a stopped server) would otherwise hide that for minutes.
    #[arg(long, env = "KQ_MEMBER_PROBE_INTERVAL", default_value = "10s", value_parser = duration::parse)]
    pub member_probe_interval: Duration,

    /// Longest wait between two attempts to reach an unreachable member.
    #[arg(long, env = "KQ_MEMBER_MAX_BACKOFF", default_value = "60s", value_parser = duration::parse)]
    pub member_max_backoff: Duration,

    /// Member clusters that may be reached without TLS verification (comma-separated names,
    /// or `*` for all). A member whose Cluster sets spec.insecureSkipTLSVerification, whose
    /// apiEndpoint is http://, or whose --member-kubeconfig sets insecure-skip-tls-verify is
    /// otherwise refused: never connected, its token never sent, shown unreachable with why.
    /// Allowed ones are named in the quotas' MembersReachable condition.
    #[arg(
        long,
        env = "KQ_ALLOW_INSECURE_MEMBERS",
        value_name = "NAMES",
        value_delimiter = ','
    )]
    pub allow_insecure_members: Vec<String>,

    /// The `spec.unaccountedWorkloads` of a quota that sets none (keep it equal to the
    /// webhook's `--unaccounted-workloads`): with `observed`, the pods the members run for
    /// a workload nothing counts (a DaemonSet, a CronJob, a custom kind without
    /// interpreter) are charged to the quota's `used`, attributed by their owner.
    #[arg(
        long,
        env = "KQ_UNACCOUNTED_WORKLOADS",
        value_enum,
        default_value = "deny"
    )]
    pub unaccounted_workloads: karmada_quota_shell::UnaccountedArg,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub dashboard: DashboardArgs,

    /// The reservation batches' namespace (shared with the webhook): the controller
    /// watches the batches of `--reservation-namespace`, folds them into the quotas they
    /// name and deletes them.
    #[command(flatten)]
    pub reservations: karmada_quota_shell::reservations::ReservationArgs,

    /// How long a ResourceBinding deletion seen by the watch is remembered, so that a
    /// reservation for it is pruned as "deleted". Must exceed the webhook's
    /// --reservation-ttl (after which the entry would expire anyway).
    #[arg(long, env = "KQ_DELETED_MEMORY", default_value = "10m", value_parser = duration::parse)]
    pub deleted_memory: Duration,

    /// The webhook's --reservation-ttl (give both binaries the same): an entry folded from
    /// a batch expires at the fold's time plus this at the latest, whatever expiration the
    /// batch names.
    #[arg(long, env = "KQ_RESERVATION_TTL", default_value = "60s", value_parser = duration::parse)]
    pub reservation_ttl: Duration,
}

/// `--role`: which parts of the controller binary run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Role {
    /// Reconciler, member measurements and dashboard.
    All,
    /// Reconciler and member measurements, no dashboard.
    Controller,
    /// The dashboard alone, from the quotas' status (no member credential, no writes).
    Dashboard,
}

impl Args {
    /// Whether this process reconciles and measures members (`--role` all or controller).
    pub fn controls(&self) -> bool {
        self.role != Role::Dashboard
    }

    /// Whether this process serves the dashboard (`--role` all or dashboard).
    pub fn serves_dashboard(&self) -> bool {
        self.role != Role::Controller
    }

    /// Whether member clusters are read from Cluster objects (and their Secrets): never
    /// for `--role=dashboard`.
    pub fn reads_member_clusters(&self) -> bool {
        self.controls() && self.member_clusters_from_api
    }

    /// The flags `--role` cannot go with, as an error that says why.
    pub fn check_role(&self) -> Result<(), String> {
        if self.role == Role::Dashboard && !self.member_kubeconfigs.is_empty() {
            return Err(format!(
                "--role=dashboard holds no member-cluster credential: drop --member-kubeconfig ({}); \
                 the dashboard shows what the controller measured, from the quotas' status",
                self.member_kubeconfigs
                    .iter()
                    .map(|m| m.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
        self.check_line_labels()
    }

    /// `--label-line-namespaces` removes the label from every namespace no `Queue` quota
    /// it sees covers: it must see every quota.
    fn check_line_labels(&self) -> Result<(), String> {
        if !self.label_line_namespaces {
            return Ok(());
        }
        let partial = [
            (!self.controls(), "--role=dashboard (it writes nothing)"),
            (self.watch_namespace().is_some(), "--namespace"),
            (!self.namespaced_quotas, "--namespaced-quotas=false"),
            (
                !self.cluster_quota_selector.trim().is_empty(),
                "--cluster-quota-selector",
            ),
        ];
        match partial.iter().find(|(set, _)| *set) {
            Some((_, flag)) => Err(format!(
                "--label-line-namespaces keeps the waiting-line label on every namespace from                  every quota, so it cannot run with {flag}: this controller would not see every                  quota and would take the label off namespaces another one queues in"
            )),
            None => Ok(()),
        }
    }

    /// `--allow-insecure-members` as the member tasks read it.
    pub fn allow_insecure(&self) -> crate::members::AllowInsecure {
        crate::members::AllowInsecure::from_values(
            self.allow_insecure_members.iter().map(String::as_str),
        )
    }

    /// Whether this controller reconciles KarmadaClusterQuotas: only when it watches every
    /// namespace.
    pub fn reconciles_cluster_quotas(&self) -> bool {
        self.watch_namespace().is_none()
    }

    /// The one namespace to watch (`--namespace`), or `None` for all namespaces (an empty
    /// value, e.g. `KQ_NAMESPACE=`, means all too).
    pub fn watch_namespace(&self) -> Option<&str> {
        self.namespace
            .as_deref()
            .map(str::trim)
            .filter(|ns| !ns.is_empty())
    }

    /// Whether leader election is on (`--leader-election`, not `--no-leader-election`).
    pub fn leader_election_enabled(&self) -> bool {
        self.leader_election && !self.no_leader_election
    }

    /// The Lease identity: `--identity`, else $POD_NAME, else `<hostname>_<pid>`.
    pub fn identity(&self) -> String {
        if let Some(id) = self.identity.as_ref().filter(|s| !s.is_empty()) {
            return id.clone();
        }
        if let Ok(pod) = std::env::var("POD_NAME")
            && !pod.is_empty()
        {
            return pod;
        }
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_owned())
                    .filter(|h| !h.is_empty())
            })
            .unwrap_or_else(|| "karmada-quota-controller".to_owned());
        format!("{host}_{}", std::process::id())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `args` parsed as the controller's command line (the dashboard's tests use it too).
    pub(super) fn parse(args: &[&str]) -> Args {
        Args::try_parse_from(
            std::iter::once("karmada-quota-controller").chain(args.iter().copied()),
        )
        .unwrap()
    }

    #[test]
    fn the_min_write_interval_defaults_to_a_second_and_a_given_one_wins() {
        assert_eq!(parse(&[]).min_write_interval, Duration::from_secs(1));
        let given = parse(&["--min-write-interval", "100ms"]);
        assert_eq!(given.min_write_interval, Duration::from_millis(100));
    }

    #[test]
    fn defaults_are_sensible() {
        let a = parse(&[]);
        assert_eq!(a.resync_period, Duration::from_secs(300));
        assert!(a.leader_election_enabled());
        assert_eq!(a.lease_namespace, "karmada-system");
        assert_eq!(a.lease_name, "karmada-quota-controller");
        assert_eq!(a.lease_duration, Duration::from_secs(15));
        assert_eq!(a.lease_renew_interval, Duration::from_secs(5));
        assert!(a.member_kubeconfigs.is_empty());
        assert!(a.member_clusters_from_api);
        assert_eq!(a.deleted_memory, Duration::from_secs(600));
        assert_eq!(a.reservation_ttl, Duration::from_secs(60));
        assert_eq!(a.concurrency, 4);
        assert_eq!(a.watch_namespace(), None);
        assert_eq!(a.dashboard.dashboard_listen.to_string(), "127.0.0.1:8081");
        assert_eq!(a.admin.admin_listen.to_string(), "127.0.0.1:8080");
        assert_eq!(a.dashboard.dashboard_tls(), None);
        assert_eq!(
            a.listener.limits(),
            karmada_quota_shell::listener::Limits::default()
        );
        assert_eq!(a.dashboard.dashboard_team_label, "karmada-quota.io/team");
        assert_eq!(a.dashboard.dashboard_stale_after, Duration::from_secs(60));
        assert_eq!(a.dashboard.dashboard_auth, DashboardAuth::None);
        assert_eq!(
            a.dashboard.dashboard_auth_cache_ttl,
            Duration::from_secs(30)
        );
    }

    #[test]
    fn the_role_says_what_runs_and_a_dashboard_holds_no_member_credential() {
        let a = parse(&[]);
        assert_eq!(a.role, Role::All);
        assert!(a.controls() && a.serves_dashboard() && a.reads_member_clusters());
        let c = parse(&["--role=controller"]);
        assert!(c.controls() && !c.serves_dashboard() && c.reads_member_clusters());
        let d = parse(&["--role=dashboard"]);
        assert!(!d.controls() && d.serves_dashboard());
        // Cluster objects lead to their Secrets: a dashboard never reads them.
        assert!(!d.reads_member_clusters());
        assert_eq!(d.check_role(), Ok(()));
        let refused = parse(&["--role=dashboard", "--member-kubeconfig=m1=/k1"])
            .check_role()
            .unwrap_err();
        assert!(refused.contains("--member-kubeconfig (m1)"), "{refused}");
        assert_eq!(
            parse(&["--member-kubeconfig=m1=/k1"]).check_role(),
            Ok(()),
            "the other roles take member kubeconfigs"
        );
        assert!(
            Args::try_parse_from(["karmada-quota-controller", "--role=viewer"]).is_err(),
            "an unknown role is refused"
        );
    }

    #[test]
    fn the_waiting_line_labels_need_a_controller_that_sees_every_quota() {
        assert!(!parse(&[]).label_line_namespaces, "off unless asked");
        assert!(parse(&["--label-line-namespaces"]).label_line_namespaces);
        assert_eq!(parse(&["--label-line-namespaces"]).check_role(), Ok(()));
        for (flags, named) in [
            (&["--namespace=team-a"][..], "--namespace"),
            (
                &["--namespaced-quotas=false"][..],
                "--namespaced-quotas=false",
            ),
            (
                &["--cluster-quota-selector=tier=gold"][..],
                "--cluster-quota-selector",
            ),
            (&["--role=dashboard"][..], "--role=dashboard"),
        ] {
            let mut args = vec!["--label-line-namespaces=true"];
            args.extend_from_slice(flags);
            let refused = parse(&args).check_role().unwrap_err();
            assert!(refused.contains(named), "{refused}");
            assert!(refused.contains("--label-line-namespaces"), "{refused}");
        }
    }

    #[test]
    fn namespace_restricts_to_one_and_empty_means_all() {
        assert_eq!(
            parse(&["--namespace", "team-a"]).watch_namespace(),
            Some("team-a")
        );
        assert_eq!(
            parse(&["--namespace=team-b"]).watch_namespace(),
            Some("team-b")
        );
        assert_eq!(parse(&["--namespace="]).watch_namespace(), None);
        assert!(Args::try_parse_from(["c", "--namespace"]).is_err());
    }

    #[test]
    fn help_documents_the_namespace_flag() {
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        assert!(help.contains("--namespace <NAMESPACE>"), "{help}");
        assert!(
            help.contains("Run a controller for one namespace; default all"),
            "{help}"
        );
        assert!(help.contains("KQ_NAMESPACE"), "{help}");
    }

    #[test]
    fn member_kubeconfig_is_repeatable() {
        let a = parse(&["--member-kubeconfig", "a=/x", "--member-kubeconfig=b=/y/z"]);
        assert_eq!(
            a.member_kubeconfigs,
            vec![
                MemberKubeconfig {
                    name: "a".into(),
                    path: "/x".into()
                },
                MemberKubeconfig {
                    name: "b".into(),
                    path: "/y/z".into()
                },
            ]
        );
    }

    #[test]
    fn allow_insecure_members_takes_names_or_a_star() {
        use crate::members::AllowInsecure;
        let none = parse(&[]);
        assert_eq!(none.allow_insecure(), AllowInsecure::None);
        let named = parse(&["--allow-insecure-members=member1,member2"]);
        assert!(named.allow_insecure().allows("member2"));
        assert!(!named.allow_insecure().allows("member3"));
        assert_eq!(
            parse(&["--allow-insecure-members", "*"]).allow_insecure(),
            AllowInsecure::All
        );
    }

    #[test]
    fn member_kubeconfig_without_equals_is_refused() {
        let err = Args::try_parse_from(["c", "--member-kubeconfig", "a"]).unwrap_err();
        assert!(err.to_string().contains("NAME=PATH"), "{err}");
        assert!(Args::try_parse_from(["c", "--member-kubeconfig", "=/x"]).is_err());
    }

    #[test]
    fn leader_election_can_be_turned_off_both_ways() {
        assert!(!parse(&["--leader-election=false"]).leader_election_enabled());
        assert!(!parse(&["--no-leader-election"]).leader_election_enabled());
        assert!(parse(&["--leader-election"]).leader_election_enabled());
        assert!(parse(&["--leader-election=true"]).leader_election_enabled());
    }

    #[test]
    fn duration_flags_take_units() {
        let a = parse(&["--resync-period", "30s", "--deleted-memory=2m"]);
        assert_eq!(a.resync_period, Duration::from_secs(30));
        assert_eq!(a.deleted_memory, Duration::from_secs(120));
    }

    #[test]
    fn identity_flag_wins() {
        let a = parse(&["--identity", "replica-a"]);
        assert_eq!(a.identity(), "replica-a");
        assert!(!parse(&[]).identity().is_empty());
    }
}
