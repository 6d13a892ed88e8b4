//! `kubectl karmada-quota`: KarmadaQuota usage in kubectl, and an offline what-if check.
//! See docs/architecture.md for where it sits; it only reads the API server.
//!
//! ```text
//!  args ─► cluster::Access (kubeconfig, context, namespace) ─► KarmadaQuota objects
//!            │ model::QuotaSummary::of (pure: used, reserved, hard, %, per cluster)
//!            ▼
//!          render::{get, describe, top} (pure, golden-tested) ─► stdout
//!  check: manifests ─► check::Inputs ─► check::check (the interpreter crate + core's decision, a
//!         dry run) against the usage of the cluster, a file, or zero ─► report, exit code
//!  report: billing::request ─► karmada_quota_billing::prometheus (two range queries) ─► core::billing
//!          (average, peak, resource-hours) ─► table, csv, json
//! ```

pub mod args;
pub mod billing;
pub mod check;
pub mod check_table;
pub mod cluster;
pub mod manifests;
pub mod model;
pub mod queue;
pub mod render;

use std::io::IsTerminal;

use anyhow::Result;
use clap::CommandFactory;

use crate::args::{Args, CheckArgs, CheckOutput, Command};
use crate::check::{Current, Inputs};
use crate::cluster::Access;
use crate::model::QuotaSummary;
use crate::render::Style;
use karmada_quota_crds::KarmadaClusterQuota;

/// Exit codes scripts can rely on.
pub mod exit {
    /// Success; `check`: everything fits.
    pub const OK: u8 = 0;
    /// `check`: the change exceeds a quota; `get`/`describe`: the quota was not found.
    pub const EXCEEDS: u8 = 1;
    /// Bad input or usage.
    pub const BAD_INPUT: u8 = 2;
    /// The API server could not be read; `report`: Prometheus unreachable or refusing.
    pub const API: u8 = 3;
}

/// An error with the exit code it ends the program with.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: u8,
    /// What to print.
    pub error: anyhow::Error,
}

fn api(error: anyhow::Error) -> Failure {
    Failure {
        code: exit::API,
        error,
    }
}

fn bad_input(error: anyhow::Error) -> Failure {
    Failure {
        code: exit::BAD_INPUT,
        error,
    }
}

/// Run one command; what to print on stdout and the exit code.
pub async fn run(args: Args) -> Result<(String, u8), Failure> {
    let style = Style {
        color: !args.global.no_color
            && std::env::var_os("NO_COLOR").is_none()
            && std::io::stdout().is_terminal(),
    };
    let global = args.global.clone();
    match args.command {
        Command::Completion { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(
                shell,
                &mut Args::command(),
                "kubectl-karmada_quota",
                &mut out,
            );
            Ok((String::from_utf8_lossy(&out).into_owned(), exit::OK))
        }
        Command::Get {
            name,
            output,
            cluster: true,
        } => get_cluster(&global, name.as_deref(), output, style).await,
        Command::Describe {
            name,
            cluster: true,
        } => describe_cluster(&global, &name, style).await,
        Command::Get { name, output, .. } => get(&global, name.as_deref(), output, style).await,
        Command::Describe { name, .. } => describe(&global, &name, style).await,
        Command::Top { limit } => top(&global, limit, style).await,
        Command::Queue => queue_of(&global).await,
        Command::Check(check) => run_check(&global, &check).await,
        Command::Report(report) => {
            let now = jiff::Timestamp::now().as_second();
            run_report(&report, now).await.map(|text| (text, exit::OK))
        }
    }
}

/// `get --cluster [NAME]`: the KarmadaClusterQuotas selecting the namespace, or one.
async fn get_cluster(
    global: &args::Global,
    name: Option<&str>,
    output: render::Output,
    style: Style,
) -> Result<(String, u8), Failure> {
    let access = Access::new(global).await.map_err(api)?;
    let quotas = match name {
        Some(n) => match note_on_stderr(access.cluster_quota(n).await.map_err(api)?) {
            Some(q) => vec![q],
            None => return Err(not_found(format!("karmadaclusterquotas \"{n}\" not found"))),
        },
        None => note_on_stderr(
            access
                .cluster_quotas_for(std::slice::from_ref(&access.namespace))
                .await
                .map_err(api)?,
        ),
    };
    if quotas.is_empty() && output == render::Output::Table {
        return Ok(("No KarmadaClusterQuotas found.\n".to_owned(), exit::OK));
    }
    let summaries: Vec<QuotaSummary> = quotas.iter().map(QuotaSummary::of_cluster).collect();
    Ok((
        render::get(&summaries, output, style).map_err(bad_input)?,
        exit::OK,
    ))
}

/// `describe --cluster NAME`.
async fn describe_cluster(
    global: &args::Global,
    name: &str,
    style: Style,
) -> Result<(String, u8), Failure> {
    let access = Access::new(global).await.map_err(api)?;
    let Some(q) = note_on_stderr(access.cluster_quota(name).await.map_err(api)?) else {
        return Err(not_found(format!(
            "karmadaclusterquotas \"{name}\" not found"
        )));
    };
    // Events about a cluster-scoped object are kept in namespace default.
    let events = access
        .events_of("KarmadaClusterQuota", "default", name)
        .await
        .unwrap_or_default();
    Ok((
        render::describe(&QuotaSummary::of_cluster(&q), &events, style),
        exit::OK,
    ))
}

/// `get [NAME]`: the namespace's KarmadaQuotas (every namespace's with `-A`), or one.
async fn get(
    global: &args::Global,
    name: Option<&str>,
    output: render::Output,
    style: Style,
) -> Result<(String, u8), Failure> {
    let access = Access::new(global).await.map_err(api)?;
    let quotas = match name {
        Some(n) => match access.quota(&access.namespace, n).await.map_err(api)? {
            Some(q) => vec![q],
            None => {
                return Err(not_found(format!(
                    "karmadaquotas \"{n}\" not found in namespace \"{}\"",
                    access.namespace
                )));
            }
        },
        None => {
            let ns = (!global.all_namespaces).then_some(access.namespace.as_str());
            access.quotas(ns).await.map_err(api)?
        }
    };
    let summaries: Vec<QuotaSummary> = quotas.iter().map(QuotaSummary::of).collect();
    if summaries.is_empty() && output == render::Output::Table {
        let scope = if global.all_namespaces {
            "any namespace".to_owned()
        } else {
            format!("namespace \"{}\"", access.namespace)
        };
        return Ok((format!("No KarmadaQuotas found in {scope}.\n"), exit::OK));
    }
    Ok((
        render::get(&summaries, output, style).map_err(bad_input)?,
        exit::OK,
    ))
}

/// `describe NAME`.
async fn describe(
    global: &args::Global,
    name: &str,
    style: Style,
) -> Result<(String, u8), Failure> {
    let access = Access::new(global).await.map_err(api)?;
    let Some(q) = access.quota(&access.namespace, name).await.map_err(api)? else {
        return Err(not_found(format!(
            "karmadaquotas \"{name}\" not found in namespace \"{}\"",
            access.namespace
        )));
    };
    let events = access
        .quota_events(&access.namespace, name)
        .await
        .unwrap_or_default();
    Ok((
        render::describe(&QuotaSummary::of(&q), &events, style),
        exit::OK,
    ))
}

/// The KarmadaClusterQuotas selecting namespace `ns` (every one without), or none with a
/// note on stderr when the caller may not list them (a tenant).
async fn cluster_quotas_here(access: &Access, ns: Option<&str>) -> Vec<KarmadaClusterQuota> {
    let here: Vec<String> = ns.iter().map(|n| (*n).to_owned()).collect();
    match access.cluster_quotas_for(&here).await.map(note_on_stderr) {
        Ok(list) => {
            let labels = match ns {
                Some(n) => access.namespace_labels(n).await.ok().flatten(),
                None => None,
            };
            list.into_iter()
                .filter(|q| ns.is_none_or(|n| check::selects(q, n, labels.as_ref())))
                .collect()
        }
        Err(e) => {
            eprintln!("note: KarmadaClusterQuotas not listed ({e:#}): showing KarmadaQuotas only");
            Vec::new()
        }
    }
}

/// `top`: the quotas by use, with the cluster quotas selecting `-n`'s namespace (their
/// totals over every namespace they select), or all of them without `-n`.
async fn top(global: &args::Global, limit: usize, style: Style) -> Result<(String, u8), Failure> {
    let access = Access::new(global).await.map_err(api)?;
    let ns = global.namespace.as_deref();
    let quotas = access.quotas(ns).await.map_err(api)?;
    let mut summaries: Vec<QuotaSummary> = quotas.iter().map(QuotaSummary::of).collect();
    let clusters = cluster_quotas_here(&access, ns).await;
    summaries.extend(clusters.iter().map(QuotaSummary::of_cluster));
    Ok((render::top(&summaries, limit, style), exit::OK))
}

/// `queue`: the waiting lines of the namespace's quotas (every namespace's with `-A`) and
/// of the cluster quotas selecting it.
async fn queue_of(global: &args::Global) -> Result<(String, u8), Failure> {
    let access = Access::new(global).await.map_err(api)?;
    let ns = (!global.all_namespaces).then_some(access.namespace.as_str());
    let quotas = access.quotas(ns).await.map_err(api)?;
    let clusters = cluster_quotas_here(&access, ns).await;
    let mut lines: Vec<queue::QuotaLine<'_>> = quotas
        .iter()
        .map(|q| queue::QuotaLine {
            quota: match (ns, q.metadata.namespace.as_deref()) {
                (None, Some(n)) => {
                    format!("{n}/{}", q.metadata.name.as_deref().unwrap_or_default())
                }
                _ => q.metadata.name.clone().unwrap_or_default(),
            },
            status: q.status.as_ref(),
        })
        .collect();
    lines.extend(clusters.iter().map(|q| queue::QuotaLine {
        quota: format!("cluster/{}", q.metadata.name.as_deref().unwrap_or_default()),
        status: q.status.as_ref().map(|s| &s.quota),
    }));
    Ok((queue::render(&lines, jiff::Timestamp::now()), exit::OK))
}

/// A named object that does not exist: exit code EXCEEDS, as `kubectl get` does.
fn not_found(message: String) -> Failure {
    Failure {
        code: exit::EXCEEDS,
        error: anyhow::anyhow!(message),
    }
}

/// `report` with `now` (Unix seconds) for relative times: bad input → exit 2, Prometheus
/// failing → exit 3.
pub async fn run_report(args: &args::ReportArgs, now: i64) -> Result<String, Failure> {
    let request = billing::request(args, now).map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    let timeout = billing::timeout(args).map_err(|e| bad_input(anyhow::anyhow!(e)))?;
    let prometheus = karmada_quota_billing::prometheus::Prometheus::with_access(
        &args.prometheus,
        timeout,
        &args.prometheus_access,
    )
    .map_err(|e| bad_input(e.into()))?;
    let report = billing::fetch(&prometheus, &request)
        .await
        .map_err(|e| api(e.into()))?;
    Ok(billing::render(&report, args.output))
}

async fn run_check(global: &args::Global, args: &CheckArgs) -> Result<(String, u8), Failure> {
    let mut inputs = Inputs::default();
    for (source, docs) in manifests::read(&args.files, args.recursive).map_err(bad_input)? {
        inputs
            .add_documents(&source, docs)
            .map_err(|e| bad_input(e.into()))?;
    }
    let current = match args.usage.as_deref() {
        Some("none") => Current::default(),
        Some("cluster") => from_cluster(global, &inputs).await.map_err(api)?,
        Some(file) => {
            let mut usage = Inputs::default();
            for (source, docs) in manifests::read(&[file.to_owned()], false).map_err(bad_input)? {
                usage
                    .add_documents(&source, docs)
                    .map_err(|e| bad_input(e.into()))?;
            }
            Current {
                quotas: usage.quotas,
                cluster_quotas: usage.cluster_quotas,
                clusters: usage.clusters,
                ..Default::default()
            }
        }
        // Default: the cluster when a kubeconfig works, else zero usage.
        None => match from_cluster(global, &inputs).await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("note: checking against zero usage (no cluster: {e:#})");
                Current::default()
            }
        },
    };
    let report = check::check(&inputs, &current);
    let code = if report.fits() {
        exit::OK
    } else {
        exit::EXCEEDS
    };
    let text = match args.output {
        CheckOutput::Json => {
            let mut s = serde_json::to_string_pretty(&report).map_err(|e| bad_input(e.into()))?;
            s.push('\n');
            s
        }
        CheckOutput::Table => check_table::render(&report),
    };
    Ok((text, code))
}

/// The quotas, clusters and bindings of the namespaces the manifests touch.
async fn from_cluster(global: &args::Global, inputs: &Inputs) -> Result<Current> {
    let access = Access::new(global).await?;
    let mut namespaces: Vec<String> = inputs
        .templates
        .iter()
        .map(|t| t.metadata.namespace.clone())
        .chain(
            inputs
                .quotas
                .iter()
                .filter_map(|q| q.metadata.namespace.clone()),
        )
        .filter(|n| !n.is_empty())
        .collect();
    namespaces.sort();
    namespaces.dedup();
    let mut current = Current {
        clusters: access.clusters().await?,
        ..Default::default()
    };
    // KarmadaClusterQuotas are cluster-scoped: a tenant may not list them (then their
    // shares in the manifests' namespaces stand in; without those the check prices
    // KarmadaQuotas only, and says so).
    match access
        .cluster_quotas_for(&namespaces)
        .await
        .map(note_on_stderr)
    {
        Ok(list) => current.cluster_quotas = list,
        Err(e) => eprintln!(
            "note: KarmadaClusterQuotas not read ({e:#}): checking against KarmadaQuotas only"
        ),
    }
    current.customizations = note_on_stderr(access.customizations().await?);
    for ns in namespaces {
        if !current.cluster_quotas.is_empty()
            && let Ok(Some(labels)) = access.namespace_labels(&ns).await
        {
            current.namespace_labels.insert(ns.clone(), labels);
        }
        current.quotas.extend(access.quotas(Some(&ns)).await?);
        let bindings = access.bindings(&ns).await?;
        current
            .bindings
            .insert(ns, bindings.into_iter().map(|b| b.spec).collect());
    }
    Ok(current)
}

/// The value, after printing its note (if any) on stderr.
fn note_on_stderr<T>((value, note): (T, Option<String>)) -> T {
    if let Some(note) = note {
        eprintln!("{note}");
    }
    value
}
