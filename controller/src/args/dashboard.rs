//! The dashboard's flags (`--dashboard-*`): where it listens and with what TLS, who may
//! see what (`--dashboard-auth`, audiences, the unauthenticated-remote guard), sessions,
//! live streams, the Report page's Prometheus. Flattened into the controller's `Args`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::ArgAction;
use karmada_quota_shell::duration;
use karmada_quota_shell::listener::TlsFiles;

/// Flags of the browser dashboard the controller serves.
#[derive(Clone, Debug, clap::Args)]
pub struct DashboardArgs {
    /// Serve the read-only browser dashboard (overview, one quota, member clusters, live
    /// updates, JSON under /api/v1 and CSV) on this address. Every replica serves it.
    /// Loopback by default: give a routable address (e.g. `0.0.0.0:8081`) to serve other
    /// pods, with --dashboard-auth=kubernetes and TLS (here or at a proxy).
    #[arg(
        long,
        env = "KQ_DASHBOARD_LISTEN",
        default_value = "127.0.0.1:8081",
        value_name = "ADDR"
    )]
    pub dashboard_listen: SocketAddr,

    /// PEM certificate (chain) the dashboard serves HTTPS with (itself, without a proxy);
    /// reloaded when the file changes; set, every dashboard cookie is `Secure`. Unset: plain
    /// HTTP.
    #[arg(
        long,
        env = "KQ_DASHBOARD_TLS_CERT_FILE",
        value_name = "PEM",
        requires = "dashboard_tls_private_key_file"
    )]
    pub dashboard_tls_cert_file: Option<PathBuf>,

    /// PEM private key of --dashboard-tls-cert-file; reloaded with it.
    #[arg(
        long,
        env = "KQ_DASHBOARD_TLS_PRIVATE_KEY_FILE",
        value_name = "PEM",
        requires = "dashboard_tls_cert_file"
    )]
    pub dashboard_tls_private_key_file: Option<PathBuf>,

    /// The namespace label whose value names a team: the dashboard's overview groups the
    /// quotas of a team's namespaces together. Empty: group by namespace only (and do not
    /// watch namespaces).
    #[arg(long, env = "KQ_DASHBOARD_TEAM_LABEL", default_value = karmada_quota_dashboard::DEFAULT_TEAM_LABEL, value_name = "KEY")]
    pub dashboard_team_label: String,

    /// The dashboard shows a banner for a member cluster whose data is older than this
    /// (unreachable, or never listed).
    #[arg(long, env = "KQ_DASHBOARD_STALE_AFTER", default_value = "60s", value_parser = duration::parse)]
    pub dashboard_stale_after: Duration,

    /// Who may see the dashboard. `none`: everyone sees every quota (for loopback and
    /// demos). `kubernetes`: every request must carry a bearer token (the
    /// `Authorization: Bearer` header, or the cookie the /login form sets) that a
    /// TokenReview accepts, and sees only the namespaces where a SubjectAccessReview
    /// allows the token's user to `list karmadaquotas.quota.karmada.io`. The controller
    /// then needs `create` on tokenreviews and subjectaccessreviews.
    #[arg(long, env = "KQ_DASHBOARD_AUTH", value_enum, default_value_t = DashboardAuth::None)]
    pub dashboard_auth: DashboardAuth,

    /// With `--dashboard-auth=kubernetes`: how long an accepted token and an access
    /// decision are trusted before the API server is asked again (a refused token: 5 s).
    #[arg(long, env = "KQ_DASHBOARD_AUTH_CACHE_TTL", default_value = "30s", value_parser = duration::parse)]
    pub dashboard_auth_cache_ttl: Duration,
    /// A Prometheus that scrapes this controller's /metrics (e.g.
    /// `http://prometheus.monitoring:9090`, a path prefix allowed): the dashboard's Report
    /// page reads usage history from it (average, peak and resource-hours per team,
    /// namespace and member cluster, with a CSV download), as `kubectl karmada-quota
    /// report` does. Unset: the page says how to turn it on.
    #[arg(long, env = "KQ_DASHBOARD_PROMETHEUS", value_name = "URL", value_parser = karmada_quota_billing::prometheus::check_url)]
    pub dashboard_prometheus: Option<String>,

    /// How much usage history the controller keeps in memory for the quota page's chart
    /// (used, reserved and hard per resource, and each member cluster's placed usage):
    /// samples older than this are dropped. The chart reads --dashboard-prometheus instead
    /// when it is set, and this window when Prometheus fails.
    #[arg(long, env = "KQ_HISTORY_WINDOW", default_value = "60m", value_parser = at_least_a_second)]
    pub history_window: Duration,

    /// The in-memory history samples each quota when it changes and at least this often
    /// (so a flat line still draws). It keeps at most 2 × window / step + 2 samples per
    /// quota: beyond, older samples are merged to one per step, each holding its peak.
    #[arg(long, env = "KQ_HISTORY_STEP", default_value = "15s", value_parser = at_least_a_second)]
    pub history_step: Duration,

    /// The in-memory history keeps this many quotas at most; the chart of a quota beyond
    /// them says so (with --dashboard-prometheus it still reads Prometheus).
    #[arg(long, env = "KQ_HISTORY_MAX_QUOTAS", default_value_t = 1000, value_parser = at_least_one)]
    pub history_max_quotas: usize,

    /// TLS and credentials for --dashboard-prometheus (`--prometheus-*`).
    #[command(flatten)]
    pub prometheus_access: karmada_quota_billing::prometheus_access::PrometheusAccess,

    /// Allow `--dashboard-auth=none` on an address other than loopback, i.e. show every
    /// quota, reservation and binding name to anyone who can reach the port. Without it
    /// the controller refuses to start with that combination.
    #[arg(
        long,
        env = "KQ_DASHBOARD_ALLOW_UNAUTHENTICATED_REMOTE",
        default_value_t = false,
        action = ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        require_equals = true,
        value_name = "BOOL"
    )]
    pub dashboard_allow_unauthenticated_remote: bool,

    /// With `--dashboard-auth=kubernetes`: the audiences a bearer token must be issued for
    /// (comma-separated, e.g. `karmada-quota-dashboard`). They are sent in the TokenReview
    /// and a token is accepted only when the review's status names one of them. Empty:
    /// the API server's own audiences.
    #[arg(
        long,
        env = "KQ_DASHBOARD_TOKEN_AUDIENCES",
        value_delimiter = ',',
        value_name = "AUDIENCE"
    )]
    pub dashboard_token_audiences: Vec<String>,

    /// Most login sessions the dashboard keeps (in this replica's memory); beyond it the
    /// oldest session ends.
    #[arg(long, env = "KQ_DASHBOARD_MAX_SESSIONS", default_value_t = karmada_quota_dashboard::session::DEFAULT_MAX_SESSIONS, value_parser = at_least_one)]
    pub dashboard_max_sessions: usize,

    /// Most login sessions of one user; a new login past it ends that user's oldest
    /// session, never another user's (one token logging in over and over cannot log
    /// everyone else out).
    #[arg(long, env = "KQ_DASHBOARD_MAX_SESSIONS_PER_USER", default_value_t = karmada_quota_dashboard::session::DEFAULT_MAX_SESSIONS_PER_USER, value_parser = at_least_one)]
    pub dashboard_max_sessions_per_user: usize,

    /// Logins of one dashboard user a minute (a token bucket per user name: all of them at
    /// once at most, then one every minute/N). Past it a login is refused with 429 and
    /// ends no session: one token logging in again and again keeps its user's other
    /// sessions.
    #[arg(long, env = "KQ_DASHBOARD_LOGINS_PER_USER_PER_MINUTE", default_value_t = karmada_quota_dashboard::session::DEFAULT_LOGINS_PER_USER_PER_MINUTE, value_parser = clap::value_parser!(u32).range(1..))]
    pub dashboard_logins_per_user_per_minute: u32,

    /// Login attempts from one client address a minute (IPv4, or IPv6 by its /64; a token
    /// bucket per address: all of them at once at most), counted before the token is
    /// reviewed: one address trying many users' tokens is refused with 429. 0: not limited
    /// (behind a proxy every login comes from the proxy's address).
    #[arg(long, env = "KQ_DASHBOARD_LOGINS_PER_PEER_PER_MINUTE", default_value_t = karmada_quota_dashboard::session::DEFAULT_LOGINS_PER_PEER_PER_MINUTE)]
    pub dashboard_logins_per_peer_per_minute: u32,

    /// With `--dashboard-auth=kubernetes`: TokenReviews a second (all of them at once at
    /// most) of bearer tokens the dashboard has not seen before; past it such a token is
    /// answered 503 until one is back. Tokens accepted before and the tokens of live
    /// sessions are re-reviewed whatever it, and a refused token is remembered for 5 s:
    /// a flood of random tokens costs the API server at most this rate.
    #[arg(long, env = "KQ_DASHBOARD_NEW_TOKEN_REVIEWS_PER_SECOND", default_value_t = karmada_quota_dashboard::auth::DEFAULT_NEW_TOKEN_REVIEWS_PER_SECOND, value_parser = clap::value_parser!(u32).range(1..))]
    pub dashboard_new_token_reviews_per_second: u32,

    /// A dashboard login session unused for this long ends.
    #[arg(long, env = "KQ_DASHBOARD_SESSION_IDLE_TIMEOUT", default_value = "30m", value_parser = duration::parse)]
    pub dashboard_session_idle_timeout: Duration,

    /// A dashboard login session ends this long after the login, used or not (the
    /// cookie's Max-Age).
    #[arg(long, env = "KQ_DASHBOARD_SESSION_MAX_AGE", default_value = "8h", value_parser = duration::parse)]
    pub dashboard_session_max_age: Duration,

    /// Most live-update streams (the pages' Server-Sent Events) open at once; one more is
    /// answered 503.
    #[arg(long, env = "KQ_DASHBOARD_MAX_STREAMS", default_value_t = karmada_quota_dashboard::streams::DEFAULT_MAX_STREAMS, value_parser = at_least_one)]
    pub dashboard_max_streams: usize,

    /// Most live-update streams one dashboard user may hold open (a few browser tabs);
    /// one more is answered 503. Applies with `--dashboard-auth=kubernetes`.
    #[arg(long, env = "KQ_DASHBOARD_MAX_STREAMS_PER_USER", default_value_t = karmada_quota_dashboard::streams::DEFAULT_MAX_STREAMS_PER_USER, value_parser = at_least_one)]
    pub dashboard_max_streams_per_user: usize,
}

impl DashboardArgs {
    /// The dashboard's TLS files (`--dashboard-tls-*`), if it serves HTTPS.
    pub fn dashboard_tls(&self) -> Option<TlsFiles> {
        Some(TlsFiles {
            cert: self.dashboard_tls_cert_file.clone()?,
            key: self.dashboard_tls_private_key_file.clone()?,
            client_auth: None,
        })
    }

    /// Refuses `--dashboard-auth=none` on a non-loopback `--dashboard-listen` unless
    /// `--dashboard-allow-unauthenticated-remote` says so: the message says why and what
    /// to do instead.
    pub fn check_dashboard_exposure(&self) -> Result<(), String> {
        let addr = self.dashboard_listen;
        if self.dashboard_auth != DashboardAuth::None
            || addr.ip().is_loopback()
            || self.dashboard_allow_unauthenticated_remote
        {
            return Ok(());
        }
        Err(format!(
            "refusing to start: --dashboard-auth=none on --dashboard-listen={addr} would show \
             every quota, reservation and binding to anyone who can reach {addr}. Use \
             --dashboard-auth=kubernetes, listen on loopback (e.g. 127.0.0.1:{port}), or pass \
             --dashboard-allow-unauthenticated-remote (KQ_DASHBOARD_ALLOW_UNAUTHENTICATED_REMOTE=true) \
             to accept that",
            port = addr.port()
        ))
    }
}

/// `--dashboard-auth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DashboardAuth {
    /// No login: every quota is visible.
    None,
    /// Bearer tokens reviewed by the API server; each user sees the namespaces they may
    /// list KarmadaQuotas in.
    Kubernetes,
}

/// A duration of at least a second.
fn at_least_a_second(s: &str) -> Result<Duration, String> {
    let d = duration::parse(s)?;
    if d < Duration::from_secs(1) {
        return Err(format!("expected at least 1s, got {s:?}"));
    }
    Ok(d)
}

impl DashboardArgs {
    /// The in-memory history's bounds (`--history-*`).
    pub fn history_bounds(&self) -> karmada_quota_billing::history::Bounds {
        karmada_quota_billing::history::Bounds {
            window: self.history_window.as_secs(),
            step: self.history_step.as_secs(),
            max_quotas: self.history_max_quotas,
        }
    }
}

/// A count of at least 1.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("expected a whole number of at least 1, got {s:?}")),
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::{CommandFactory, Parser};

    use super::DashboardAuth;
    use crate::args::Args;
    use crate::args::tests::parse;

    #[test]
    fn history_flags_parse_with_defaults_and_refuse_less_than_a_second() {
        let a = Args::try_parse_from(["c"]).unwrap();
        let b = a.dashboard.history_bounds();
        assert_eq!((b.window, b.step, b.max_quotas), (3600, 15, 1000));
        assert_eq!(b.max_samples(), 482);
        let a = Args::try_parse_from([
            "c",
            "--history-window=15m",
            "--history-step=5s",
            "--history-max-quotas=20",
        ])
        .unwrap();
        let b = a.dashboard.history_bounds();
        assert_eq!((b.window, b.step, b.max_quotas), (900, 5, 20));
        for bad in [
            "--history-step=0",
            "--history-step=500ms",
            "--history-window=0s",
            "--history-max-quotas=0",
        ] {
            let e = Args::try_parse_from(["c", bad]).unwrap_err().to_string();
            assert!(e.contains("expected"), "{bad}: {e}");
        }
        let help = Args::command().render_long_help().to_string();
        for (flag, env) in [
            ("--history-window", "KQ_HISTORY_WINDOW"),
            ("--history-step", "KQ_HISTORY_STEP"),
            ("--history-max-quotas", "KQ_HISTORY_MAX_QUOTAS"),
        ] {
            assert!(help.contains(flag) && help.contains(env), "{flag}");
        }
    }

    #[test]
    fn dashboard_auth_takes_none_or_kubernetes() {
        let a = parse(&[
            "--dashboard-auth=kubernetes",
            "--dashboard-auth-cache-ttl=10s",
        ]);
        assert_eq!(a.dashboard.dashboard_auth, DashboardAuth::Kubernetes);
        assert_eq!(
            a.dashboard.dashboard_auth_cache_ttl,
            Duration::from_secs(10)
        );
        let err = Args::try_parse_from(["c", "--dashboard-auth=basic"]).unwrap_err();
        assert!(err.to_string().contains("none, kubernetes"), "{err}");
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        assert!(help.contains("KQ_DASHBOARD_AUTH"), "{help}");
        assert!(help.contains("SubjectAccessReview"), "{help}");
    }

    #[test]
    fn dashboard_flags_parse() {
        let a = parse(&[
            "--dashboard-listen=127.0.0.1:9999",
            "--dashboard-team-label=",
            "--dashboard-stale-after=5m",
        ]);
        assert_eq!(a.dashboard.dashboard_listen.to_string(), "127.0.0.1:9999");
        assert!(a.dashboard.dashboard_team_label.is_empty());
        assert_eq!(a.dashboard.dashboard_stale_after, Duration::from_secs(300));
        assert!(Args::try_parse_from(["c", "--dashboard-listen=nope"]).is_err());
    }

    #[test]
    fn dashboard_tls_takes_a_certificate_and_its_key_together() {
        let a = parse(&[
            "--dashboard-tls-cert-file=d.pem",
            "--dashboard-tls-private-key-file=d.key",
        ]);
        let tls = a.dashboard.dashboard_tls().unwrap();
        assert_eq!(
            (tls.cert, tls.key),
            (PathBuf::from("d.pem"), PathBuf::from("d.key"))
        );
        for alone in [
            "--dashboard-tls-cert-file=d.pem",
            "--dashboard-tls-private-key-file=d.key",
        ] {
            assert!(Args::try_parse_from(["c", alone]).is_err(), "{alone} alone");
        }
    }

    #[test]
    fn unauthenticated_dashboard_only_on_loopback_unless_allowed() {
        let open = parse(&["--dashboard-listen=0.0.0.0:8081", "--dashboard-auth=none"]);
        let e = open.dashboard.check_dashboard_exposure().unwrap_err();
        assert!(
            e.contains("--dashboard-auth=none on --dashboard-listen=0.0.0.0:8081"),
            "{e}"
        );
        assert!(
            e.contains("--dashboard-allow-unauthenticated-remote"),
            "{e}"
        );
        for ok in [
            &["--dashboard-listen=127.0.0.1:8081", "--dashboard-auth=none"][..],
            &["--dashboard-listen=[::1]:8081", "--dashboard-auth=none"],
            &[
                "--dashboard-listen=0.0.0.0:8081",
                "--dashboard-auth=kubernetes",
            ],
            &[
                "--dashboard-listen=10.0.0.1:8081",
                "--dashboard-auth=none",
                "--dashboard-allow-unauthenticated-remote",
            ],
        ] {
            assert!(
                parse(ok).dashboard.check_dashboard_exposure().is_ok(),
                "{ok:?}"
            );
        }
        assert!(!parse(&[]).dashboard.dashboard_allow_unauthenticated_remote);
    }

    #[test]
    fn dashboard_session_stream_and_audience_flags_parse() {
        let a = parse(&[]);
        assert_eq!(a.dashboard.dashboard_max_sessions, 10_000);
        assert_eq!(
            a.dashboard.dashboard_session_idle_timeout,
            Duration::from_secs(1800)
        );
        assert_eq!(
            a.dashboard.dashboard_session_max_age,
            Duration::from_secs(8 * 3600)
        );
        assert_eq!(
            (
                a.dashboard.dashboard_max_streams,
                a.dashboard.dashboard_max_streams_per_user
            ),
            (256, 8)
        );
        assert!(a.dashboard.dashboard_token_audiences.is_empty());
        assert_eq!(a.dashboard.dashboard_tls_cert_file, None);
        let a = parse(&[
            "--dashboard-token-audiences=kq-dashboard,other",
            "--dashboard-max-streams=10",
            "--dashboard-max-streams-per-user=2",
            "--dashboard-max-sessions=5",
            "--dashboard-session-idle-timeout=5m",
            "--dashboard-session-max-age=1h",
        ]);
        assert_eq!(
            a.dashboard.dashboard_token_audiences,
            ["kq-dashboard", "other"]
        );
        assert_eq!(
            (
                a.dashboard.dashboard_max_streams,
                a.dashboard.dashboard_max_streams_per_user
            ),
            (10, 2)
        );
        assert_eq!(a.dashboard.dashboard_max_sessions, 5);
        assert!(Args::try_parse_from(["c", "--dashboard-max-streams=0"]).is_err());
        use clap::CommandFactory;
        let help = Args::command().render_long_help().to_string();
        for env in [
            "KQ_DASHBOARD_ALLOW_UNAUTHENTICATED_REMOTE",
            "KQ_DASHBOARD_TOKEN_AUDIENCES",
            "KQ_DASHBOARD_MAX_STREAMS",
            "KQ_DASHBOARD_MAX_STREAMS_PER_USER",
            "KQ_DASHBOARD_MAX_SESSIONS",
            "KQ_DASHBOARD_SESSION_IDLE_TIMEOUT",
            "KQ_DASHBOARD_SESSION_MAX_AGE",
            "KQ_DASHBOARD_TLS_CERT_FILE",
        ] {
            assert!(help.contains(env), "{env}");
        }
    }

    #[test]
    fn dashboard_prometheus_takes_an_http_url() {
        assert_eq!(parse(&[]).dashboard.dashboard_prometheus, None);
        let a = parse(&["--dashboard-prometheus=http://127.0.0.1:9090/"]);
        assert_eq!(
            a.dashboard.dashboard_prometheus.as_deref(),
            Some("http://127.0.0.1:9090")
        );
        let e = Args::try_parse_from(["c", "--dashboard-prometheus=prometheus:9090"]).unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
    }
}
