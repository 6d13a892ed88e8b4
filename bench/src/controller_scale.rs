//! P3 in process: the controller's index fed with N generated bindings.
//!
//! ```text
//!  generate::binding(i) ─► JSON bytes ─(timed: deserialize)─► ResourceBinding
//!                                  ─(timed: apply)──────► Index (Init … InitApply … InitDone)
//!  VmRSS before / after                                    │
//!  (timed: recompute) desired::compute + desired_status of every quota (one per namespace)
//!  (timed: events) U binding updates (a scale: generation + 1) applied to the index; every
//!     `interval` of busy time the quotas of the touched namespaces are recomputed once
//!     (the controller's coalescing: at most one write per quota per interval)
//! ```
//!
//! The same functions the controller runs (`Index`, `desired::compute`,
//! `desired::desired_status`); only the watch and the API writes are left out.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use karmada_quota_controller::desired::{self, Computed};
use karmada_quota_controller::index::Index;
use karmada_quota_core::status::ObservedPods;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaSpec, ResourceBinding};
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

use crate::generate;
use crate::rss::{CpuTimer, vm_rss};

/// The count name of the generated bindings' kind.
const COUNT_NAME: &str = "count/deployments.apps";

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bindings fed to the index.
    pub bindings: usize,
    /// Namespaces they are spread over (one quota each).
    pub namespaces: usize,
    /// Bindings deserialized per chunk (bounds the transient memory).
    pub chunk: usize,
    /// Binding updates of the event-rate phase.
    pub updates: usize,
    /// Coalescing interval of the event-rate phase.
    pub interval: Duration,
    /// Every binding with its own request (no two charges equal).
    pub distinct: bool,
}

/// The quota of namespace `ns`: cpu, memory, pods and the Deployment count, all ample.
pub fn quota(ns: &str) -> KarmadaQuota {
    let hard: BTreeMap<String, Quantity> = [
        ("requests.cpu", "100M"),
        ("requests.memory", "100Pi"),
        ("pods", "100M"),
        (COUNT_NAME, "100M"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
    .collect();
    let mut q = KarmadaQuota::new(
        "compute",
        KarmadaQuotaSpec {
            hard,
            scope_selector: None,
            ..Default::default()
        },
    );
    q.metadata.namespace = Some(ns.to_owned());
    q.metadata.generation = Some(1);
    q.metadata.resource_version = Some("1".to_owned());
    q
}

/// Recompute every quota; returns (time, statuses that changed, Σ pods used).
fn recompute(
    quotas: &mut [KarmadaQuota],
    which: impl Fn(&KarmadaQuota) -> bool,
    index: &Index,
    now: jiff::Timestamp,
) -> (Duration, usize, i128) {
    let observed = ObservedPods::default();
    let reach = BTreeMap::new();
    let started = CpuTimer::start();
    let mut changed = 0;
    let mut pods: i128 = 0;
    for q in quotas.iter_mut().filter(|q| which(q)) {
        let computed = desired::compute(q, index, &observed, now.as_second());
        if let Computed::Valid { view, .. } = &computed {
            pods += view.used.get("pods").map_or(0, |p| p.value());
        }
        if let Some(status) = desired::desired_status(q, &computed, &reach, now) {
            // What the write would store: the next compute compares against it.
            q.status = Some(status);
            changed += 1;
        }
    }
    (started.elapsed(), changed, pods)
}

/// Run the bench; the JSON report.
pub fn run(cfg: &Config) -> Result<Value> {
    let now = jiff::Timestamp::now();
    let rss_before = vm_rss();
    let mut index = Index::new(600);
    let filled = fill(cfg, &mut index, now)?;
    let rss_after = vm_rss();

    let mut quotas: Vec<KarmadaQuota> = (0..cfg.namespaces)
        .map(|n| quota(&generate::namespace(n, cfg.namespaces)))
        .collect();
    let (first, _, pods) = recompute(&mut quotas, |_| true, &index, now);
    ensure!(
        pods == filled.expected_pods,
        "recompute summed {pods} pods, the bindings hold {}",
        filled.expected_pods
    );
    // Again, nothing changed: what a resync costs (and no write).
    let (again, unchanged_writes, _) = recompute(&mut quotas, |_| true, &index, now);
    let steady = steady(cfg, &mut index, &mut quotas, now)?;

    let n = cfg.bindings as f64;
    let secs = |d: Duration| d.as_secs_f64();
    let rss_per_binding = rss_after.saturating_sub(rss_before) as f64 / n;
    let Steady {
        busy,
        folds,
        writes,
        events,
        fold_time,
    } = steady;
    Ok(json!({
        "bench": "controller-scale",
        "timing": "on-CPU time of the bench thread (/proc/thread-self/schedstat)",
        "distinct_charges": index.distinct_charges(),
        "bindings": cfg.bindings,
        "distinct_charges_requested": cfg.distinct,
        "namespaces": cfg.namespaces,
        "quotas": quotas.len(),
        "json_bytes_per_binding": filled.bytes as f64 / n,
        "deserialize_s": secs(filled.deserialize),
        "index_apply_s": secs(filled.apply),
        "recompute_s": secs(first),
        "recompute_again_s": secs(again),
        "recompute_over_deserialize": secs(first) / secs(filled.deserialize).max(1e-9),
        "writes_when_nothing_changed": unchanged_writes,
        "rss_before_mib": rss_before as f64 / 1048576.0,
        "rss_after_mib": rss_after as f64 / 1048576.0,
        "rss_bytes_per_binding": rss_per_binding,
        "events": events,
        "events_busy_s": secs(busy),
        "events_per_s": events as f64 / secs(busy).max(1e-9),
        "interval_ms": cfg.interval.as_millis() as u64,
        "folds": folds,
        "fold_s": secs(fold_time),
        "writes": writes,
        "writes_per_fold_max": cfg.namespaces,
        "events_per_write": events as f64 / writes.max(1) as f64,
    }))
}

/// What the initial list cost: its JSON, its decode and its apply to the index.
struct Filled {
    deserialize: Duration,
    apply: Duration,
    bytes: usize,
    expected_pods: i128,
}

/// The initial list of `cfg.bindings` bindings, decoded and applied to `index` chunk by
/// chunk, as the binding watch's first list is.
fn fill(cfg: &Config, index: &mut Index, now: jiff::Timestamp) -> Result<Filled> {
    index.apply_binding_event(&Event::Init, None, now.as_second());
    let (mut deserialize, mut apply, mut bytes) = (Duration::ZERO, Duration::ZERO, 0usize);
    let mut expected_pods = 0i128;
    let mut start = 0;
    while start < cfg.bindings {
        let end = (start + cfg.chunk).min(cfg.bindings);
        let raw: Vec<Vec<u8>> = (start..end)
            .map(|i| {
                serde_json::to_vec(&generate::binding_with(i, cfg.namespaces, 1, cfg.distinct))
            })
            .collect::<Result<_, _>>()?;
        bytes += raw.iter().map(Vec::len).sum::<usize>();
        let t = CpuTimer::start();
        let typed: Vec<ResourceBinding> = raw
            .iter()
            .map(|b| serde_json::from_slice(b))
            .collect::<Result<_, _>>()?;
        deserialize += t.elapsed();
        drop(raw);
        expected_pods += typed
            .iter()
            .map(|rb| i128::from(rb.spec.replicas))
            .sum::<i128>();
        let t = CpuTimer::start();
        for rb in typed {
            index.apply_binding_event(&Event::InitApply(rb), Some(COUNT_NAME), now.as_second());
        }
        apply += t.elapsed();
        start = end;
    }
    let t = CpuTimer::start();
    index.apply_binding_event(&Event::InitDone, None, now.as_second());
    apply += t.elapsed();
    ensure!(
        index.binding_count() == cfg.bindings,
        "index holds {} bindings",
        index.binding_count()
    );
    Ok(Filled {
        deserialize,
        apply,
        bytes,
        expected_pods,
    })
}

/// What the steady events cost: the index's work and the folds of the quotas they touched.
struct Steady {
    busy: Duration,
    folds: usize,
    writes: usize,
    events: usize,
    fold_time: Duration,
}

/// Steady events: `cfg.updates` scales of bindings (generation 2, 3, …) round-robin over
/// the index, applied in slices, the quotas they touched recomputed every `cfg.interval`
/// of on-CPU time.
fn steady(
    cfg: &Config,
    index: &mut Index,
    quotas: &mut [KarmadaQuota],
    now: jiff::Timestamp,
) -> Result<Steady> {
    let mut out = Steady {
        busy: Duration::ZERO,
        folds: 0,
        writes: 0,
        events: 0,
        fold_time: Duration::ZERO,
    };
    let mut since_fold = Duration::ZERO;
    let mut touched = std::collections::BTreeSet::new();
    let generation_of = |k: usize| 2 + (k / cfg.bindings.max(1)) as i64;
    while out.events < cfg.updates {
        let end = (out.events + cfg.chunk).min(cfg.updates);
        let typed: Vec<ResourceBinding> = (out.events..end)
            .map(|k| {
                let b = k % cfg.bindings.max(1);
                serde_json::from_value(generate::binding_with(
                    b,
                    cfg.namespaces,
                    generation_of(k),
                    cfg.distinct,
                ))
            })
            .collect::<Result<_, _>>()?;
        // Applied in slices, the coalescing interval checked between them (a slice is far
        // shorter than the interval).
        let mut typed = typed.into_iter().peekable();
        while typed.peek().is_some() {
            let slice: Vec<ResourceBinding> = typed.by_ref().take(256).collect();
            let n = slice.len();
            let t = CpuTimer::start();
            for rb in slice {
                touched.extend(index.apply_binding_event(
                    &Event::Apply(rb),
                    Some(COUNT_NAME),
                    now.as_second(),
                ));
            }
            let d = t.elapsed();
            out.busy += d;
            since_fold += d;
            out.events += n;
            if since_fold >= cfg.interval {
                fold_touched(quotas, index, now, &mut touched, &mut out);
                since_fold = Duration::ZERO;
            }
        }
    }
    if !touched.is_empty() {
        fold_touched(quotas, index, now, &mut touched, &mut out);
    }
    Ok(out)
}

/// One fold of the steady events: the quotas of the namespaces `touched` names
/// recomputed, counted into `out`; `touched` emptied.
fn fold_touched(
    quotas: &mut [KarmadaQuota],
    index: &Index,
    now: jiff::Timestamp,
    touched: &mut std::collections::BTreeSet<String>,
    out: &mut Steady,
) {
    let (d, w, _) = recompute(
        quotas,
        |q| touched.contains(q.metadata.namespace.as_deref().unwrap_or_default()),
        index,
        now,
    );
    out.busy += d;
    out.fold_time += d;
    out.writes += w;
    out.folds += 1;
    touched.clear();
}
