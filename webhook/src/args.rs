//! Command-line flags (each with an environment-variable twin).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use karmada_quota_shell::listener::{ClientAuthFiles, ListenerArgs, TlsFiles};
use karmada_quota_shell::{AdminArgs, ClientArgs, LogArgs, ReservationArgs};

/// Validating admission webhook that enforces KarmadaQuota on Karmada ResourceBindings.
///
/// Serves `POST /validate/resourcebinding` and `POST /validate/karmadaquota` over HTTPS,
/// and `/metrics`, `/livez`, `/readyz` over plain HTTP on the admin address.
#[derive(Clone, Debug, clap::Parser)]
#[command(name = "karmada-quota-webhook", version, about, long_about = None, args_override_self = true)]
pub struct Args {
    /// HTTPS address for admission reviews. Loopback by default: give the pod's address
    /// (e.g. `0.0.0.0:9443`) for an apiserver in another pod, with --client-ca-file.
    #[arg(long, env = "KQ_LISTEN", default_value = "127.0.0.1:9443")]
    pub listen: SocketAddr,

    /// PEM certificate (chain) served on --listen. Reloaded when the file changes, so a
    /// rotated certificate needs no restart.
    #[arg(long, env = "KQ_TLS_CERT_FILE")]
    pub tls_cert_file: PathBuf,

    /// PEM private key of --tls-cert-file. Reloaded with it.
    #[arg(long, env = "KQ_TLS_PRIVATE_KEY_FILE")]
    pub tls_private_key_file: PathBuf,

    /// PEM bundle of the CA(s) that sign the apiserver's webhook client certificate
    /// (kube-apiserver / karmada-apiserver present it through an AdmissionConfiguration
    /// whose kubeConfigFile names it). When set, a connection without a client certificate
    /// signed by it is refused during the TLS handshake; reloaded with --tls-cert-file.
    /// Without it anyone who reaches --listen can send reviews (and reserve quota): the
    /// webhook warns at start and exports kq_webhook_client_auth_required 0.
    #[arg(long, env = "KQ_CLIENT_CA_FILE", value_name = "PEM")]
    pub client_ca_file: Option<PathBuf>,

    /// Comma-separated names a client certificate must carry, as its CN or a DNS
    /// subjectAltName (ASCII case ignored, no wildcards); empty: any certificate signed by
    /// --client-ca-file. E.g. `karmada-apiserver-webhook-client`.
    #[arg(
        long,
        env = "KQ_CLIENT_ALLOWED_NAMES",
        value_delimiter = ',',
        requires = "client_ca_file",
        value_name = "NAMES"
    )]
    pub client_allowed_names: Vec<String>,

    /// Accept any certificate --client-ca-file signed, whatever its names. Without it the
    /// webhook refuses to start with a client CA but no --client-allowed-names: a CA such
    /// as Karmada's own signs every component's and every pull-mode agent's certificate,
    /// and each of them could then send reviews and reserve quota.
    #[arg(long, env = "KQ_CLIENT_ALLOW_ANY_NAME", requires = "client_ca_file")]
    pub client_allow_any_name: bool,

    /// Serve reviews without client authentication on an address other than loopback.
    /// Without it the webhook refuses to start with a non-loopback --listen and no
    /// --client-ca-file: anyone who reaches the port could forge reviews and reserve
    /// quota. (On loopback only local processes reach it; a warning is logged.)
    #[arg(long, env = "KQ_ALLOW_UNAUTHENTICATED_REVIEWS")]
    pub allow_unauthenticated_reviews: bool,

    /// How often the certificate, key and client CA files are checked for changes.
    #[arg(long, env = "KQ_TLS_RELOAD_INTERVAL", default_value = "5s", value_parser = karmada_quota_shell::duration::parse)]
    pub tls_reload_interval: Duration,

    /// Longest time to answer one admission review; past it the request is refused
    /// (never allowed). Keep it below the webhook configuration's timeoutSeconds (3s).
    #[arg(long, env = "KQ_DECISION_TIMEOUT", default_value = "2s", value_parser = karmada_quota_shell::duration::parse)]
    pub decision_timeout: Duration,

    /// Lifetime of a reservation entry in a quota's status: once it has passed, the
    /// controller drops an entry whose binding it never observed. Until the controller
    /// removes it, an entry counts, expired or not.
    #[arg(long, env = "KQ_RESERVATION_TTL", default_value = "60s", value_parser = karmada_quota_shell::duration::parse)]
    pub reservation_ttl: Duration,

    /// How long a reservation batch waits, when a request finds the queue idle, for
    /// others to join it before it is decided and written: one batch create and one
    /// delete then carry several admissions instead of one each. Every request waits up
    /// to this much longer; 0 decides at once. Keep it well below --decision-timeout.
    #[arg(long, env = "KQ_BATCH_LINGER", default_value = "0s", value_parser = karmada_quota_shell::duration::parse)]
    pub batch_linger: Duration,

    /// A quota holding this many pending reservation entries refuses new ones (retryable),
    /// rather than grow toward etcd's object size limit.
    #[arg(long, env = "KQ_MAX_RESERVATIONS", default_value_t = 1000)]
    pub max_reservations: usize,

    /// Largest accepted ResourceBinding AdmissionReview body, in bytes; larger bodies get
    /// HTTP 413 (a declared Content-Length over it before a byte is read; a body that
    /// grows past it is cut there, never buffered further). The policy and quota paths
    /// have their own, smaller limits.
    #[arg(long, env = "KQ_MAX_BODY_BYTES", default_value_t = 3 * 1024 * 1024)]
    pub max_body_bytes: usize,

    /// Largest accepted (Cluster)PropagationPolicy review body, in bytes (413 past it). A
    /// review carries the policy twice and policies are KiB; a tenant who may create
    /// policies must not make the webhook decode megabytes per review.
    #[arg(long, env = "KQ_MAX_POLICY_BODY_BYTES", default_value_t = crate::admission::DEFAULT_POLICY_BODY_BYTES, value_parser = at_least_one)]
    pub max_policy_body_bytes: usize,

    /// Largest accepted KarmadaQuota / KarmadaClusterQuota review body, in bytes (413 past
    /// it). A review carries the quota twice with its status (up to --max-reservations
    /// entries of ~300 bytes each).
    #[arg(long, env = "KQ_MAX_QUOTA_BODY_BYTES", default_value_t = crate::admission::DEFAULT_QUOTA_BODY_BYTES, value_parser = at_least_one)]
    pub max_quota_body_bytes: usize,

    /// Most items of any one list in a review (cluster names, selectors, components...),
    /// `request.options` and a binding's status aside; a longer list is refused (400)
    /// before the review is decoded.
    #[arg(long, env = "KQ_MAX_LIST_ITEMS", default_value_t = crate::admission::DEFAULT_LIST_ITEMS, value_parser = at_least_one)]
    pub max_list_items: usize,

    /// Estimated bytes the reviews being handled may take once decoded, over all of them:
    /// each review is weighed before decoding (body bytes + 256 bytes per JSON value) and
    /// charged until it is answered; a review that does not fit now is answered 503 (the
    /// apiserver applies the failurePolicy), one larger than the whole budget 413. Bounds
    /// memory whatever the reviews' shapes; the listener's --max-body-bytes-in-flight
    /// bounds the raw bodies.
    #[arg(long, env = "KQ_MAX_DECODED_BYTES_IN_FLIGHT", default_value_t = crate::admission::DEFAULT_DECODED_BYTES_IN_FLIGHT)]
    pub max_decoded_bytes_in_flight: usize,

    /// What a PropagationPolicy whose bindings would exceed a quota gets: `warn` (allowed,
    /// with a warning per template that would not fit, printed by kubectl apply) or `deny`.
    #[arg(
        long,
        env = "KQ_POLICY_ENFORCEMENT",
        value_enum,
        default_value = "warn"
    )]
    pub policy_enforcement: crate::policy::Enforcement,

    /// What a binding costs whose template runs pods but carries no replica requirements
    /// (a DaemonSet, ReplicaSet, CronJob, or a custom kind Karmada has no interpreter
    /// for), under a quota that tracks compute and does not say itself
    /// (`spec.unaccountedWorkloads`): `deny` (refused, naming the kind), `observed`
    /// (admitted; the controller charges the pods the members run for it) or `allow`
    /// (admitted with its object count only).
    #[arg(
        long,
        env = "KQ_UNACCOUNTED_WORKLOADS",
        value_enum,
        default_value = "deny"
    )]
    pub unaccounted_workloads: karmada_quota_shell::UnaccountedArg,

    /// API groups whose kinds run no pods (comma-separated), e.g.
    /// `cert-manager.io,monitoring.coreos.com`: a binding of such a kind is an object, never
    /// an uncountable workload. Kubernetes' and Karmada's own groups are known already;
    /// any other group is taken to possibly run pods.
    #[arg(
        long,
        env = "KQ_POD_LESS_GROUPS",
        value_name = "GROUPS",
        value_delimiter = ','
    )]
    pub pod_less_groups: Vec<String>,

    /// Most templates one policy check reads; a policy selecting more is allowed with a
    /// warning that the check was skipped.
    #[arg(long, env = "KQ_POLICY_MAX_TEMPLATES", default_value_t = 200)]
    pub policy_max_templates: usize,

    /// Objects per page when the policy check lists a selector's templates (LIST `limit`,
    /// then `continue`): each page is decoded into what pricing reads and dropped before
    /// the next, so one check never holds a whole large list.
    #[arg(long, env = "KQ_POLICY_LIST_PAGE_SIZE", default_value_t = crate::policy::DEFAULT_PAGE_SIZE, value_parser = clap::value_parser!(u32).range(1..))]
    pub policy_list_page_size: u32,

    /// Most response bytes the policy check reads for one selector's templates; past it the
    /// check is skipped with a warning. A tenant's own large objects (1 MiB ConfigMaps)
    /// must not make every policy review read hundreds of MiB.
    #[arg(long, env = "KQ_POLICY_MAX_TEMPLATE_BYTES", default_value_t = crate::policy::DEFAULT_MAX_TEMPLATE_BYTES)]
    pub policy_max_template_bytes: usize,

    /// Most template response bytes all policy checks hold at once; a check that would
    /// pass it is skipped with a warning (retry). Bounds the memory concurrent policy
    /// reviews take whatever they select.
    #[arg(long, env = "KQ_POLICY_TEMPLATE_BYTES_IN_FLIGHT", default_value_t = crate::policy::DEFAULT_TEMPLATE_BYTES_IN_FLIGHT)]
    pub policy_template_bytes_in_flight: usize,

    /// Most threads pricing templates with ResourceInterpreterCustomizations' Lua at once,
    /// over all policy checks; a check that gets no slot within its Lua budget is skipped
    /// with a warning. A slot is held until its thread ends, even when its review gave up:
    /// scripts that run to their limits keep at most this many threads busy.
    #[arg(long, env = "KQ_POLICY_MAX_CONCURRENT_LUA", default_value_t = crate::policy::DEFAULT_LUA_RUNS, value_parser = at_least_one)]
    pub policy_max_concurrent_lua: usize,
    /// Write Warning events for quota denials, on the binding's resource template and on
    /// the KarmadaQuota (events.k8s.io/v1; needs RBAC create and patch on events).
    /// Written off the admission path: a failing or slow event API never delays a decision.
    #[arg(long, env = "KQ_EVENTS", default_value_t = true, action = clap::ArgAction::Set)]
    pub events: bool,

    /// At most one write per event series (object, reason, message) per interval; the
    /// denials in between are counted into the event's series.count.
    #[arg(long, env = "KQ_EVENT_INTERVAL", default_value = "10s", value_parser = karmada_quota_shell::duration::parse)]
    pub event_interval: Duration,

    /// Event writes per second over all series (a token bucket).
    #[arg(long, env = "KQ_EVENT_QPS", default_value_t = 5.0)]
    pub event_qps: f64,

    /// Event writes allowed at once before --event-qps applies.
    #[arg(long, env = "KQ_EVENT_BURST", default_value_t = 25)]
    pub event_burst: u32,

    /// At most one info log line per (namespace, binding, reason) per interval for
    /// denials; the lines skipped are counted in the next one and in a metric. 0s logs
    /// every denial. Allowed requests are logged at debug.
    #[arg(long, env = "KQ_DENIAL_LOG_INTERVAL", default_value = "10s", value_parser = karmada_quota_shell::duration::parse)]
    pub denial_log_interval: Duration,

    /// Longest time the quota view may go without a working watch: once a watch of
    /// KarmadaQuotas, KarmadaClusterQuotas or Namespaces has kept failing for longer,
    /// /readyz answers 503 and ResourceBindings in namespaces with quotas are refused
    /// (retryable) until it recovers. Counted from the watch's first failure.
    #[arg(long, env = "KQ_MAX_CACHE_STALENESS", default_value = "60s", value_parser = karmada_quota_shell::duration::parse)]
    pub max_cache_staleness: Duration,

    /// Comma-separated groups whose members may create and delete KarmadaQuotas and
    /// KarmadaClusterQuotas and change their spec, labels and ownerReferences (everyone
    /// else: only annotations and finalizers; status is never reviewed). Karmada's admin
    /// kubeconfig is in `system:masters`. Empty: no group.
    #[arg(
        long,
        env = "KQ_QUOTA_ADMIN_GROUPS",
        value_delimiter = ',',
        default_value = crate::tenancy::DEFAULT_GROUPS,
        value_name = "GROUPS"
    )]
    pub quota_admin_groups: Vec<String>,

    /// Comma-separated users who may do what --quota-admin-groups may. The default names
    /// the kube-controller-manager's namespace controller and garbage collector, so that
    /// a deleted namespace takes its quotas with it. Empty: no user.
    #[arg(
        long,
        env = "KQ_QUOTA_ADMIN_USERS",
        value_delimiter = ',',
        default_value = crate::tenancy::DEFAULT_USERS,
        value_name = "USERS"
    )]
    pub quota_admin_users: Vec<String>,

    /// Comma-separated users who may release a binding waiting in a quota's line (clear
    /// its suspension or the line's mark) and change the line's annotations on it,
    /// besides the quota administrators: the controller's identity, e.g.
    /// `system:serviceaccount:karmada-system:karmada-quota-controller`. Anyone else is
    /// refused, so that the line's order is the controller's alone. Empty: only the
    /// quota administrators.
    #[arg(
        long,
        env = "KQ_QUEUE_RELEASERS",
        value_delimiter = ',',
        value_name = "USERS"
    )]
    pub queue_releasers: Vec<String>,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub admin: AdminArgs,

    /// Bounds of each listener (HTTPS and admin alike).
    #[command(flatten)]
    pub listener: ListenerArgs,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub log: LogArgs,

    #[command(flatten)]
    #[allow(missing_docs)]
    pub client: ClientArgs,

    /// Where reservations are made durable (the batches) and their namespace.
    #[command(flatten)]
    pub reservations: ReservationArgs,
}

/// A limit of at least 1 (0 would refuse every review).
fn at_least_one(v: &str) -> Result<usize, String> {
    match v.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        Ok(_) => Err("must be at least 1 (0 would refuse every review)".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}

impl Args {
    /// The TLS files these flags name: serving certificate and key, and the client CA
    /// with its allowed names when `--client-ca-file` is set.
    pub fn tls_files(&self) -> TlsFiles {
        TlsFiles {
            cert: self.tls_cert_file.clone(),
            key: self.tls_private_key_file.clone(),
            client_auth: self.client_ca_file.as_ref().map(|ca| ClientAuthFiles {
                ca: ca.clone(),
                allowed_names: self.client_allowed_names.clone(),
            }),
        }
    }

    /// Refuses the client-authentication settings that would let callers other than the
    /// apiserver send reviews, unless allowed by name: a client CA without allowed names
    /// (`--client-allow-any-name`), no client CA on a non-loopback address
    /// (`--allow-unauthenticated-reviews`). The message says what to set.
    pub fn check_client_auth(&self) -> Result<(), String> {
        match &self.client_ca_file {
            Some(ca) if self.client_allowed_names.is_empty() && !self.client_allow_any_name => {
                Err(format!(
                    "--client-ca-file={} is set without --client-allowed-names: every \
                     certificate that CA signed could send reviews and reserve quota; name \
                     the apiserver's client certificate (its CN or a DNS SAN) with \
                     --client-allowed-names, or accept them all with --client-allow-any-name",
                    ca.display()
                ))
            }
            None if !self.listen.ip().is_loopback() && !self.allow_unauthenticated_reviews => {
                Err(format!(
                    "--listen={} is not a loopback address and there is no --client-ca-file: \
                     anyone who reaches it could forge reviews and reserve quota; require the \
                     apiserver's client certificate with --client-ca-file and \
                     --client-allowed-names, or accept this with \
                     --allow-unauthenticated-reviews",
                    self.listen
                ))
            }
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[test]
    fn flags_are_consistent_and_default_sensibly() {
        Args::command().debug_assert();
        let a = Args::try_parse_from([
            "karmada-quota-webhook",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
            "--decision-timeout=500ms",
        ])
        .unwrap();
        assert_eq!(a.listen.to_string(), "127.0.0.1:9443");
        assert_eq!(a.admin.admin_listen.to_string(), "127.0.0.1:8080");
        assert_eq!(a.client_ca_file, None);
        assert!(a.client_allowed_names.is_empty());
        assert_eq!(a.decision_timeout, Duration::from_millis(500));
        assert_eq!(a.reservation_ttl, Duration::from_secs(60));
        assert_eq!(a.max_reservations, 1000);
        assert_eq!(a.batch_linger, Duration::ZERO);
        assert_eq!(a.max_body_bytes, 3 * 1024 * 1024);
        assert!(a.events);
        assert_eq!(a.event_interval, Duration::from_secs(10));
        assert_eq!(a.denial_log_interval, Duration::from_secs(10));
        assert_eq!(a.max_cache_staleness, Duration::from_secs(60));
        let admins = crate::tenancy::QuotaAdmins::new(a.quota_admin_users, a.quota_admin_groups);
        assert_eq!(admins, crate::tenancy::QuotaAdmins::default());
    }

    #[test]
    fn quota_admins_are_lists_and_can_be_emptied() {
        let a = Args::try_parse_from([
            "karmada-quota-webhook",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
            "--quota-admin-groups=platform,system:masters",
            "--quota-admin-users=",
        ])
        .unwrap();
        let admins = crate::tenancy::QuotaAdmins::new(a.quota_admin_users, a.quota_admin_groups);
        assert_eq!(admins.groups, ["platform", "system:masters"]);
        assert!(admins.users.is_empty());
    }

    #[test]
    fn client_names_are_a_list_and_need_a_client_ca() {
        let a = Args::try_parse_from([
            "karmada-quota-webhook",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
            "--client-ca-file=ca.pem",
            "--client-allowed-names=karmada-apiserver-webhook-client,apiserver.example",
        ])
        .unwrap();
        assert_eq!(a.client_ca_file, Some(PathBuf::from("ca.pem")));
        assert_eq!(
            a.client_allowed_names,
            ["karmada-apiserver-webhook-client", "apiserver.example"]
        );
        let err = Args::try_parse_from([
            "karmada-quota-webhook",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
            "--client-allowed-names=x",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--client-ca-file"), "{err}");
    }

    #[test]
    fn events_can_be_switched_off() {
        let a = Args::try_parse_from([
            "karmada-quota-webhook",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
            "--events=false",
            "--event-interval=1s",
            "--denial-log-interval=0s",
        ])
        .unwrap();
        assert!(!a.events);
        assert_eq!(a.event_interval, Duration::from_secs(1));
        assert_eq!(a.denial_log_interval, Duration::ZERO);
    }

    #[test]
    fn every_flag_has_an_env_twin() {
        let cmd = Args::command();
        for arg in cmd.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            assert!(
                arg.get_env().is_some(),
                "--{id} has no environment variable"
            );
        }
    }

    fn parse(extra: &[&str]) -> Args {
        let mut argv = vec![
            "karmada-quota-webhook",
            "--tls-cert-file=c.pem",
            "--tls-private-key-file=k.pem",
        ];
        argv.extend_from_slice(extra);
        Args::try_parse_from(argv).unwrap()
    }

    #[test]
    fn a_client_ca_without_allowed_names_is_refused_unless_allowed() {
        let err = parse(&["--client-ca-file=ca.pem"])
            .check_client_auth()
            .unwrap_err();
        assert!(
            err.contains("--client-allowed-names") && err.contains("--client-allow-any-name"),
            "{err}"
        );
        parse(&[
            "--client-ca-file=ca.pem",
            "--client-allowed-names=apiserver",
        ])
        .check_client_auth()
        .unwrap();
        parse(&["--client-ca-file=ca.pem", "--client-allow-any-name"])
            .check_client_auth()
            .unwrap();
        assert!(
            Args::try_parse_from([
                "karmada-quota-webhook",
                "--tls-cert-file=c.pem",
                "--tls-private-key-file=k.pem",
                "--client-allow-any-name",
            ])
            .is_err(),
            "--client-allow-any-name needs --client-ca-file"
        );
    }

    #[test]
    fn no_client_auth_off_loopback_is_refused_unless_allowed() {
        parse(&[]).check_client_auth().unwrap();
        parse(&["--listen=[::1]:9443"]).check_client_auth().unwrap();
        let err = parse(&["--listen=0.0.0.0:9443"])
            .check_client_auth()
            .unwrap_err();
        assert!(
            err.contains("0.0.0.0:9443") && err.contains("--allow-unauthenticated-reviews"),
            "{err}"
        );
        parse(&["--listen=0.0.0.0:9443", "--allow-unauthenticated-reviews"])
            .check_client_auth()
            .unwrap();
        parse(&[
            "--listen=0.0.0.0:9443",
            "--client-ca-file=ca.pem",
            "--client-allowed-names=apiserver",
        ])
        .check_client_auth()
        .unwrap();
    }

    #[test]
    fn limits_of_zero_are_refused() {
        for flag in [
            "--max-policy-body-bytes=0",
            "--max-quota-body-bytes=0",
            "--max-list-items=0",
        ] {
            let err = Args::try_parse_from([
                "karmada-quota-webhook",
                "--tls-cert-file=c.pem",
                "--tls-private-key-file=k.pem",
                flag,
            ])
            .unwrap_err();
            assert!(err.to_string().contains("at least 1"), "{flag}: {err}");
        }
    }
}
