//! The command line: kubectl-like global flags and the subcommands.

use std::path::PathBuf;

use clap::{Args as ClapArgs, Parser, Subcommand};

use crate::render::Output;

/// `kubectl karmada-quota`: federated KarmadaQuota usage, and what a change would add.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-karmada_quota",
    bin_name = "kubectl karmada-quota",
    version,
    about = "Federated KarmadaQuota usage across Karmada member clusters, and an offline what-if check",
    long_about = "Reads KarmadaQuota objects (quota.karmada.io/v1alpha1) from the Karmada API server: \
        what each quota's namespace uses (status.used), what admissions have reserved but the \
        controller has not counted yet, the hard limits, and per member cluster what Karmada \
        placed and what the member really runs.\n\n\
        Exit codes: 0 success (check: everything fits); 1 check: the change exceeds a quota, or \
        the named quota was not found; 2 bad input or usage; 3 the API server (report: \
        Prometheus) could not be read or refused the query.",
    after_help = "Examples:\n  \
        kubectl karmada-quota get -A\n  \
        kubectl karmada-quota get -n team-a -o wide\n  \
        kubectl karmada-quota describe team-a-compute -n team-a\n  \
        kubectl karmada-quota top\n  \
        kubectl karmada-quota queue -n team-a\n  \
        kubectl karmada-quota check -f deploy/ -R\n  \
        kubectl karmada-quota check -f app.yaml --usage=quotas.yaml -o json\n  \
        kubectl karmada-quota report --prometheus http://127.0.0.1:9090 --from -7d --by team,cluster\n  \
        kubectl karmada-quota completion bash > /etc/bash_completion.d/kubectl-karmada_quota"
)]
pub struct Args {
    /// Cluster access.
    #[command(flatten)]
    pub global: Global,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every subcommand takes, as kubectl's.
#[derive(Clone, Debug, ClapArgs)]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, env = "KUBECONFIG", value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true, env = "KQ_CONTEXT")]
    pub context: Option<String>,
    /// The namespace (default: the context's).
    #[arg(short = 'n', long, global = true, env = "KQ_NAMESPACE")]
    pub namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, global = true)]
    pub all_namespaces: bool,
    /// Never colour the output (also: NO_COLOR set). Colour is used only on a terminal.
    #[arg(long, global = true, env = "KQ_NO_COLOR")]
    pub no_color: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List quotas: one row per resource (USED, RESERVED, HARD, % of hard in use).
    Get {
        /// One quota by name.
        name: Option<String>,
        /// KarmadaClusterQuotas instead of KarmadaQuotas (cluster-scoped; to a tenant who
        /// may not read them, their KarmadaClusterQuotaShares in the namespace of -n).
        #[arg(short = 'c', long)]
        cluster: bool,
        /// table, wide (per member cluster columns), csv, json or yaml.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// One quota in full: resources, per member cluster placed/observed/drift, conditions, events.
    Describe {
        /// The quota's name.
        name: String,
        /// A KarmadaClusterQuota (its selector and each selected namespace's usage too).
        #[arg(short = 'c', long)]
        cluster: bool,
    },
    /// The quotas closest to their limits across the federation (all namespaces unless -n).
    Top {
        /// How many quotas to show.
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// What a change would add to each quota, and whether it fits (exit 0 fits, 1 exceeds, 2 bad input).
    Check(CheckArgs),
    /// Usage for billing from Prometheus: average, peak and resource-hours (core-hours,
    /// GiB-hours, GPU-hours…) per team, namespace or member cluster (exit 2 bad input, 3
    /// Prometheus unreachable or refusing).
    #[command(long_about = REPORT_LONG_ABOUT, after_help = REPORT_EXAMPLES)]
    Report(Box<ReportArgs>),
    /// The waiting lines of quotas in queueing mode (spec.admission.mode: Queue): each
    /// waiting binding's place, priority, what it asks, what its quota lacks for it, and
    /// how long it has waited (the namespace's quotas and the cluster quotas selecting it;
    /// -A: every namespace).
    Queue,
    /// Print a shell completion script.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
}

/// Flags of `check`.
#[derive(Clone, Debug, ClapArgs)]
pub struct CheckArgs {
    /// Manifests: files, directories (their *.yaml, *.yml, *.json) or - for standard input.
    #[arg(short = 'f', long = "filename", required = true, value_name = "PATH")]
    pub files: Vec<String>,
    /// Walk directories recursively.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Current usage: `cluster` (read it from the API server), `none` (zero), or a file of
    /// KarmadaQuota objects with their status (for CI without cluster access). Default:
    /// cluster when a kubeconfig is found, else none.
    #[arg(long, value_name = "cluster|none|FILE")]
    pub usage: Option<String>,
    /// table or json.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: CheckOutput,
}

/// How `check` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CheckOutput {
    /// Human-readable.
    Table,
    /// The report as JSON (for CI bots).
    Json,
}

/// `report --help`: what it reports, where the team comes from, the exit codes.
const REPORT_LONG_ABOUT: &str = "Usage for billing: for each team (the value of a namespace label), namespace or \
        member cluster, the average and peak usage and the resource-hours over a window, from \
        the controller's series in Prometheus (range queries over kq_quota_cluster_used, or \
        kq_quota_cluster_observed with --source observed, and kq_namespace_labels for the \
        team). CPU is in cores and core-hours, memory and storage in GiB and GiB-hours, GPUs \
        in GPU-hours, pods in pod-hours, object counts in object-hours, other resources in \
        unit-hours; docs/report.md describes every column.\n\n\
        The team of a namespace is read from Prometheus (the controller exports the label \
        named by its --dashboard-team-label), at each instant: no kubeconfig is needed. A \
        namespace without the label is billed to __unallocated__.\n\n\
        Exit codes: 0 the report was printed; 2 bad input (a time, a step, --by, the URL); \
        3 Prometheus unreachable, timed out or refused the query.";

/// `report --help`: examples.
const REPORT_EXAMPLES: &str = "Examples:\n  \
        kubectl karmada-quota report --prometheus http://127.0.0.1:9090\n  \
        kubectl karmada-quota report --prometheus http://127.0.0.1:9090 --from 2026-01-01 --to 2026-02-01 -o csv > january.csv\n  \
        kubectl karmada-quota report --prometheus http://127.0.0.1:9090 --from -7d --to now --step 5m --by team,cluster\n  \
        kubectl karmada-quota report --prometheus http://127.0.0.1:9090 --from=-1h --by namespace --source observed -o json\n  \
        KQ_PROMETHEUS=http://127.0.0.1:9090 kubectl karmada-quota report --by cluster";

/// Flags of `report`.
#[derive(Clone, Debug, ClapArgs)]
pub struct ReportArgs {
    /// The Prometheus HTTP API (scraping the controller's /metrics), e.g.
    /// http://127.0.0.1:9090; a path prefix is kept (https://example.org/prometheus).
    #[arg(long, env = "KQ_PROMETHEUS", value_name = "URL", value_parser = karmada_quota_billing::prometheus::check_url)]
    pub prometheus: String,
    /// TLS and credentials for --prometheus.
    #[command(flatten)]
    pub prometheus_access: karmada_quota_billing::prometheus_access::PrometheusAccess,
    /// Start of the window: RFC 3339 (2026-01-01T00:00:00Z), a date (2026-01-01, midnight
    /// UTC), Unix seconds, `now`, or a duration before now (-24h, now-7d).
    #[arg(
        long,
        env = "KQ_REPORT_FROM",
        default_value = "-24h",
        allow_hyphen_values = true,
        value_name = "TIME"
    )]
    pub from: String,
    /// End of the window (exclusive), same syntax.
    #[arg(
        long,
        env = "KQ_REPORT_TO",
        default_value = "now",
        allow_hyphen_values = true,
        value_name = "TIME"
    )]
    pub to: String,
    /// Time between two samples (30s, 5m, 1h). Each sample stands for one step. Default:
    /// about 1,000 samples over the window, at least 1m.
    #[arg(long, env = "KQ_REPORT_STEP", value_name = "DURATION")]
    pub step: Option<String>,
    /// Group by team, namespace, cluster or quota, or a comma-separated list of them
    /// (team,cluster: each team's usage in each member cluster).
    #[arg(
        long,
        env = "KQ_REPORT_BY",
        default_value = "team",
        value_name = "KEYS"
    )]
    pub by: String,
    /// Which usage: placed (what Karmada placed in each member, the quota's accounting) or
    /// observed (what the members' pods request).
    #[arg(long, env = "KQ_REPORT_SOURCE", value_enum, default_value = "placed")]
    pub source: ReportSource,
    /// The namespace label whose value names a team (as the controller's
    /// --dashboard-team-label).
    #[arg(
        long,
        env = "KQ_TEAM_LABEL",
        default_value = "karmada-quota.io/team",
        value_name = "KEY"
    )]
    pub team_label: String,
    /// How long one Prometheus query may take.
    #[arg(
        long,
        env = "KQ_PROMETHEUS_TIMEOUT",
        default_value = "2m",
        value_name = "DURATION"
    )]
    pub timeout: String,
    /// table, csv or json.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: ReportOutput,
}

/// Which usage `report` bills.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportSource {
    /// What Karmada placed in each member cluster.
    Placed,
    /// What the member clusters' pods request.
    Observed,
}

/// How `report` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportOutput {
    /// For people, numbers with their units.
    Table,
    /// Comma-separated, a header line, one line per row (the dashboard's download).
    Csv,
    /// The report as JSON.
    Json,
}
