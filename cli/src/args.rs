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
        the named quota was not found; 2 bad input or usage; 3 the API server could not be read.",
    after_help = "Examples:\n  \
        kubectl karmada-quota get -A\n  \
        kubectl karmada-quota get -n team-a -o wide\n  \
        kubectl karmada-quota describe team-a-compute -n team-a\n  \
        kubectl karmada-quota top\n  \
        kubectl karmada-quota check -f deploy/ -R\n  \
        kubectl karmada-quota check -f app.yaml --usage=quotas.yaml -o json\n  \
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
        /// table, wide (per member cluster columns), csv, json or yaml.
        #[arg(short = 'o', long, value_enum, default_value = "table")]
        output: Output,
    },
    /// One quota in full: resources, per member cluster placed/observed/drift, conditions, events.
    Describe {
        /// The quota's name.
        name: String,
    },
    /// The quotas closest to their limits across the federation (all namespaces unless -n).
    Top {
        /// How many quotas to show.
        #[arg(long, default_value_t = 10)]
        limit: usize,
    },
    /// What a change would add to each quota, and whether it fits (exit 0 fits, 1 exceeds, 2 bad input).
    Check(CheckArgs),
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
