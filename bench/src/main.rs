//! `kq-bench`: the in-process benchmarks (P1's write cost, P3's scale) and the metrics helper of
//! bench/*.sh.
//!
//! ```text
//!  controller-scale  the controller's index and status computation with N bindings (P3)
//!  webhook-cache     the webhook's quota cache with Q quotas: memory, decision latency
//!  list-bindings     LIST all ResourceBindings from an apiserver: transfer vs deserialize
//!  metrics-delta     two Prometheus scrapes → counters and histograms of the run, as JSON
//!  write-cost        apiserver CPU per ResourceBinding create vs per quota status write
//! ```
//!
//! Each prints one JSON line on stdout.

mod controller_scale;
mod generate;
mod list_bindings;
mod populate;
mod promdelta;
mod rss;
mod stats;
mod webhook_cache;
mod write_cost;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};
use serde_json::{Map, Value};

#[derive(Parser, Debug)]
#[command(name = "kq-bench", about = "In-process benchmarks of karmada-quota")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Feed the controller's index N generated bindings: deserialize vs apply vs full
    /// recompute time, RSS per binding, steady event rate with coalesced status writes.
    ControllerScale {
        /// Bindings.
        #[arg(long, default_value_t = 1_000_000)]
        bindings: usize,
        /// Namespaces (one quota each).
        #[arg(long, default_value_t = 100)]
        namespaces: usize,
        /// Bindings per deserialize chunk.
        #[arg(long, default_value_t = 10_000)]
        chunk: usize,
        /// Binding updates in the event-rate phase.
        #[arg(long, default_value_t = 200_000)]
        updates: usize,
        /// Coalescing interval of status writes (ms), as the controller's --min-write-interval.
        #[arg(long, default_value_t = 250)]
        interval_ms: u64,
        /// Give every binding its own cpu request (no two charges equal: the worst case).
        #[arg(long)]
        distinct_charges: bool,
    },
    /// The webhook's quota cache with many quotas: RSS per quota, decision p50/p99.
    WebhookCache {
        /// Quotas.
        #[arg(long, default_value_t = 10_000)]
        quotas: usize,
        /// Namespaces.
        #[arg(long, default_value_t = 5_000)]
        namespaces: usize,
        /// Reviews.
        #[arg(long, default_value_t = 20_000)]
        reviews: usize,
        /// KarmadaClusterQuotas, each selecting the namespaces of one label value (half
        /// the namespaces are covered).
        #[arg(long, default_value_t = 0)]
        cluster_quotas: usize,
        /// Give each quota the managedFields and last-applied annotation an API server
        /// returns for an applied, controller- and webhook-written quota.
        #[arg(long)]
        managed_fields: bool,
    },
    /// LIST all ResourceBindings of an apiserver in pages: transfer vs deserialize time.
    ListBindings {
        /// Kubeconfig of the apiserver.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Page size.
        #[arg(long, default_value_t = 500)]
        page: usize,
        /// One list with resourceVersion=0, served from the apiserver's watch cache (what
        /// the controller's watches ask for), instead of consistent pages from etcd.
        #[arg(long)]
        any: bool,
    },
    /// Create Q KarmadaQuotas over N namespaces through the apiserver, each with a synced
    /// status, to start a webhook or controller cold against them (bench/p3-cold-start.sh).
    PopulateQuotas {
        /// Kubeconfig of the apiserver.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Quotas.
        #[arg(long, default_value_t = 10_000)]
        quotas: usize,
        /// Namespaces (`team-NNNNN`, created when missing).
        #[arg(long, default_value_t = 5_000)]
        namespaces: usize,
        /// Requests in flight.
        #[arg(long, default_value_t = 32)]
        concurrency: usize,
    },
    /// Apiserver (and etcd) CPU per ResourceBinding create and per KarmadaQuota status
    /// write with N entries, with and without the status schema, and per JSON patch
    /// (run by bench/p1-write-cost.sh; no webhook may be registered).
    WriteCost {
        /// Kubeconfig of the apiserver.
        #[arg(long, env = "KUBECONFIG")]
        kubeconfig: PathBuf,
        /// The apiserver's pid (its /proc/<pid>/stat CPU time is measured).
        #[arg(long, env = "KQ_APISERVER_PID")]
        apiserver_pid: u32,
        /// etcd's pid (0: not measured).
        #[arg(long, env = "KQ_ETCD_PID", default_value_t = 0)]
        etcd_pid: u32,
        /// Operations per cell.
        #[arg(long, env = "KQ_OPS", default_value_t = 300)]
        ops: usize,
        /// Workers, each with its own namespace and objects (no write conflicts).
        #[arg(long, env = "KQ_CONCURRENCY", default_value_t = 4)]
        concurrency: usize,
        /// Rounds (every cell once per round; even rounds in reverse order).
        #[arg(long, env = "KQ_ROUNDS", default_value_t = 3)]
        rounds: usize,
        /// Entry counts N of the status writes, comma-separated.
        #[arg(
            long,
            env = "KQ_ENTRIES",
            value_delimiter = ',',
            default_value = "0,1,10,100,500"
        )]
        entries: Vec<usize>,
        /// Leave out the JSON patch cells.
        #[arg(long, env = "KQ_NO_PATCH")]
        no_patch: bool,
        /// Watches on each quota kind while measuring (the webhook's and the controller's).
        #[arg(long, env = "KQ_QUOTA_WATCHERS", default_value_t = 2)]
        quota_watchers: usize,
        /// Watches on ResourceBindings while measuring (the controller's).
        #[arg(long, env = "KQ_BINDING_WATCHERS", default_value_t = 1)]
        binding_watchers: usize,
        /// Idle seconds measured before every cell (its rate is subtracted from the cell).
        #[arg(long, env = "KQ_IDLE_SECONDS", default_value_t = 1)]
        idle_seconds: u64,
        /// Entries per reservation batch of the `batch:k` cells, comma-separated (a
        /// reservation store outside the quota's status; empty: no batch cells).
        #[arg(
            long,
            env = "KQ_BATCH_SIZES",
            value_delimiter = ',',
            default_value = "1,14,32"
        )]
        batch_sizes: Vec<usize>,
        /// Entries per ledger slot of the `slot:k` cells, comma-separated: one object per
        /// worker rewritten in place (PUT with its resourceVersion), the write a fixed ring
        /// of ledger objects would make per admission instead of a batch's create and
        /// delete (empty: no slot cells).
        #[arg(long, env = "KQ_SLOT_SIZES", value_delimiter = ',', default_value = "")]
        slot_sizes: Vec<usize>,
        /// The `review` cells' endpoint (an HTTPS URL answering every AdmissionReview
        /// with "allowed", e.g. `kq-load bare-server`): ResourceBinding creates in
        /// namespaces where it reviews each CREATE. Needs --review-ca-bundle. None: no
        /// review cells.
        #[arg(long, env = "KQ_REVIEW_URL", requires = "review_ca_bundle")]
        review_url: Option<String>,
        /// The base64 of the PEM CA that signed the endpoint's certificate (the
        /// webhook configuration's `caBundle`).
        #[arg(long, env = "KQ_REVIEW_CA_BUNDLE", requires = "review_url")]
        review_ca_bundle: Option<String>,
    },
    /// Counters and histograms between two scrapes of a /metrics endpoint.
    MetricsDelta {
        /// The scrape before the run.
        #[arg(long)]
        before: PathBuf,
        /// The scrape after the run.
        #[arg(long)]
        after: PathBuf,
        /// KEY=METRIC[|LABEL="VALUE"…]: the counter's increase, under KEY.
        #[arg(long)]
        counter: Vec<String>,
        /// KEY=METRIC[|LABEL="VALUE"…]: the histogram's count, mean, p50/p90/p99, buckets.
        #[arg(long)]
        histogram: Vec<String>,
    },
}

/// `KEY=METRIC|filter|filter` → (key, metric, filters).
fn spec(s: &str) -> Result<(&str, &str, Vec<&str>)> {
    let Some((key, rest)) = s.split_once('=') else {
        bail!("{s:?}: expected KEY=METRIC[|LABEL=\"VALUE\"…]");
    };
    let mut parts = rest.split('|');
    let metric = parts.next().unwrap_or_default();
    Ok((key, metric, parts.collect()))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let report = match Cli::parse().command {
        Command::ControllerScale {
            bindings,
            namespaces,
            chunk,
            updates,
            interval_ms,
            distinct_charges,
        } => controller_scale::run(&controller_scale::Config {
            bindings,
            namespaces,
            chunk: chunk.max(1),
            updates,
            interval: Duration::from_millis(interval_ms),
            distinct: distinct_charges,
        })?,
        Command::WebhookCache {
            quotas,
            namespaces,
            reviews,
            cluster_quotas,
            managed_fields,
        } => {
            webhook_cache::run(&webhook_cache::Config {
                quotas,
                namespaces: namespaces.max(1),
                reviews,
                cluster_quotas,
                managed_fields,
            })
            .await?
        }
        Command::ListBindings {
            kubeconfig,
            page,
            any,
        } => list_bindings::run(&kubeconfig, page, any).await?,
        Command::PopulateQuotas {
            kubeconfig,
            quotas,
            namespaces,
            concurrency,
        } => populate::run(&kubeconfig, quotas, namespaces, concurrency).await?,
        Command::WriteCost {
            kubeconfig,
            apiserver_pid,
            etcd_pid,
            ops,
            concurrency,
            rounds,
            entries,
            no_patch,
            quota_watchers,
            binding_watchers,
            idle_seconds,
            batch_sizes,
            slot_sizes,
            review_url,
            review_ca_bundle,
        } => {
            write_cost::run(&write_cost::Config {
                kubeconfig,
                apiserver_pid,
                etcd_pid,
                ops: ops.max(1),
                concurrency: concurrency.max(1),
                rounds: rounds.max(1),
                entries,
                patch: !no_patch,
                quota_watchers,
                binding_watchers,
                idle: Duration::from_secs(idle_seconds.max(1)),
                batch_sizes,
                slot_sizes,
                review: review_url
                    .zip(review_ca_bundle)
                    .map(|(url, ca_bundle)| write_cost::Review { url, ca_bundle }),
            })
            .await?
        }
        Command::MetricsDelta {
            before,
            after,
            counter,
            histogram,
        } => metrics_delta(&before, &after, &counter, &histogram)?,
    };
    println!("{report}");
    Ok(())
}

/// `kq-bench metrics-delta`: each counter's and histogram's change between two scrapes, by
/// the key each spec names.
fn metrics_delta(
    before: &Path,
    after: &Path,
    counter: &[String],
    histogram: &[String],
) -> Result<Value> {
    let read = |p: &Path| {
        std::fs::read_to_string(p)
            .with_context(|| format!("reading {}", p.display()))
            .map(|t| promdelta::Scrape::parse(&t))
    };
    let (b, a) = (read(before)?, read(after)?);
    let mut out = Map::new();
    for c in counter {
        let (key, metric, filters) = spec(c)?;
        out.insert(
            key.to_owned(),
            promdelta::counter(&b, &a, metric, &filters).into(),
        );
    }
    for h in histogram {
        let (key, metric, filters) = spec(h)?;
        out.insert(
            key.to_owned(),
            promdelta::histogram(&b, &a, metric, &filters),
        );
    }
    Ok(Value::Object(out))
}
