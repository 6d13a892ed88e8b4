//! One run: the world built from the seed, the workload's steps, then the faults stop and
//! the liveness phase — every request that fits is admitted within a bounded time.

use std::sync::Arc;
use std::time::Duration;

use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaSpec, KarmadaQuotaStatus};

use crate::apiserver::{Apiserver, lock};
use crate::clock::{self, MAX_REPLICAS};
use crate::config::{Config, Faults};
use crate::replica::TTL;
use crate::rng::Rng;
use crate::truth::Truth;
use crate::workload::{Answer, Sim, k8s_quantity};
use crate::world::World;

/// The longest a replica's clock is off, when skew is on.
const MAX_SKEW_MS: u64 = 2_000;
/// How long the liveness probe of one quota may take: an attempt that timed out after
/// its batch was created holds its entry until it expires (TTL), then the controller
/// drops it.
const LIVENESS_MS: u64 = 30_000;
/// Trace lines shown for a failing seed.
pub const TAIL: usize = 80;

/// What a run found.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// The run.
    pub config: Config,
    /// Its fault kinds.
    pub faults: Faults,
    /// Invariant and liveness violations (empty: passed).
    pub violations: Vec<String>,
    /// Admissions that raised a charge.
    pub admissions: u64,
    /// The trace's fingerprint.
    pub trace_hash: u64,
    /// The trace's lines.
    pub trace: Vec<String>,
    /// Simulated time, ms.
    pub sim_ms: u64,
}

impl Outcome {
    /// Whether the run found a violation.
    pub fn failed(&self) -> bool {
        !self.violations.is_empty()
    }

    /// The last lines of the trace.
    pub fn tail(&self, n: usize) -> &[String] {
        &self.trace[self.trace.len().saturating_sub(n)..]
    }
}

/// Run `config` on a runtime of its own (current thread, paused clock).
pub fn run(config: &Config) -> Outcome {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    rt.block_on(simulate(config.clone()))
}

fn quota(namespace: &str, hard: i64) -> KarmadaQuota {
    let cpu = |n: i64| [("requests.cpu".to_owned(), k8s_quantity(n))].into();
    let mut q = KarmadaQuota::new(
        "compute",
        KarmadaQuotaSpec {
            hard: cpu(hard),
            ..Default::default()
        },
    );
    q.metadata.namespace = Some(namespace.to_owned());
    // Fenced for the batch store, as the controller of the batch store leaves every quota
    // it writes (docs/reservations.md R22) before the run begins.
    let mut status = KarmadaQuotaStatus {
        hard: cpu(hard),
        used: cpu(0),
        ..KarmadaQuotaStatus::default()
    };
    karmada_quota_crds::convert::ensure_fence(&mut status.reservations, &q.spec.hard)
        .expect("cpu parses");
    q.status = Some(status);
    q
}

async fn simulate(mut config: Config) -> Outcome {
    config.standby = Some(config.with_standby());
    let mut rng = Rng::new(config.seed);
    let faults = config.faults.unwrap_or_else(|| Faults::swarm(&mut rng));
    let mut skews = [0_i64; MAX_REPLICAS];
    if faults.skew {
        for s in &mut skews {
            *s = rng.between(0, 2 * MAX_SKEW_MS) as i64 - MAX_SKEW_MS as i64;
        }
    }
    clock::start(skews);
    config.late_quota = Some(config.with_late_quota());
    config.early_use = Some(config.with_early_use());
    let mut truth = Truth::default();
    let mut quotas = Vec::new();
    let namespaces: Vec<String> = (0..config.quotas).map(|i| format!("ns-{i}")).collect();
    for ns in &namespaces {
        let hard = rng.between(3, 8) as i64;
        quotas.push((ns.clone(), hard));
    }
    // The late quota's creation time, from a draw of its own (the run's source stays as
    // it was without it).
    let late = (config.late_quota == Some(true)).then(|| {
        let (ns, hard) = quotas.pop().expect("two quotas or more");
        let at = Rng::new(config.seed ^ 0x4c41_5445_4154_4d53).between(300, 3_000);
        (ns, hard, at)
    });
    for (ns, hard) in &quotas {
        truth.quota(ns, *hard);
    }
    let objects: Vec<KarmadaQuota> = quotas.iter().map(|(ns, hard)| quota(ns, *hard)).collect();
    let api = Apiserver::new(&objects);
    let world = Arc::new(World::new(config.clone(), faults, rng, api, truth));
    world.trace(format!(
        "seed {} steps {} replicas {} quotas {} faults {} skews {skews:?}{}",
        config.seed,
        config.steps,
        config.replicas,
        config.quotas,
        faults.describe(),
        if config.standby == Some(true) {
            " standby"
        } else {
            ""
        }
    ));
    if config.linger_ms > 0 {
        world.trace(format!("webhook replicas linger {} ms", config.linger_ms));
    }
    let pending = late.iter().map(|(ns, _, _)| ns.clone()).collect();
    let sim = Sim::start(world.clone(), namespaces, pending);
    if let Some((ns, hard, at)) = late {
        world.trace(format!("{ns}/compute is created at {at} ms"));
        tokio::spawn(
            sim.clone()
                .create_late_quota(ns.clone(), quota(&ns, hard), hard, at),
        );
    }
    drive(&sim).await;
    let truth = lock(&world.truth);
    Outcome {
        config,
        faults,
        violations: truth.violations.clone(),
        admissions: truth.admissions,
        trace_hash: world.with_trace(|t| t.hash()),
        trace: world.with_trace(|t| t.lines().to_vec()),
        sim_ms: clock::now_ms(),
    }
}

fn violated(world: &World) -> bool {
    !lock(&world.truth).violations.is_empty()
}

/// The workload's steps, then the quiet, then the liveness probes.
async fn drive(sim: &Arc<Sim>) {
    let world = sim.world.clone();
    let mut tasks = Vec::new();
    for _ in 0..world.config.steps {
        let ms = world.rng(|r| r.between(0, 150));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        if let Some(task) = step(sim) {
            tasks.push(task);
        }
        let over = lock(&world.truth).check_all();
        if let Some(v) = over {
            world.trace(v);
        }
        if violated(&world) {
            return;
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    if violated(&world) {
        return;
    }
    if !world.config.liveness {
        return;
    }
    world.stop_faults();
    while !sim.all_up() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Entries of requests allowed but not stored, and of withdrawn batches, expire.
    let quiet = TTL.as_millis() as u64 + 2 * MAX_SKEW_MS + 10_000;
    tokio::time::sleep(Duration::from_millis(quiet)).await;
    if world.config.hand_deletes_newest {
        hand_deletes_newest(sim).await;
    }
    liveness(sim).await;
}

/// A hand deletes the newest batch, then every webhook replica restarts (so lists a store
/// without it, and no number seen before).
async fn hand_deletes_newest(sim: &Arc<Sim>) {
    use karmada_quota_status::BatchStore;
    let world = &sim.world;
    let newest = world
        .api
        .batches
        .all()
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .max();
    if let Some(name) = newest {
        let deleted = world.api.batches.delete(&name, None).await;
        world.trace(format!("hand: deleted {name}: {deleted:?}"));
    }
    let restarts = (0..world.config.replicas).map(|id| tokio::spawn(sim.clone().crash_replica(id)));
    for r in restarts.collect::<Vec<_>>() {
        let _ = r.await;
    }
}

/// One workload step; a task when the step runs on.
fn step(sim: &Arc<Sim>) -> Option<tokio::task::JoinHandle<()>> {
    let world = &sim.world;
    let f = world.faults;
    let roll = world.rng(|r| r.below(100));
    match roll {
        0..45 => {
            let namespaces = sim.in_force();
            let ns = world.rng(|r| r.pick(&namespaces).clone());
            let replicas = world.rng(|r| r.between(1, 3)) as i64;
            Some(tokio::spawn(sim.clone().create(ns, replicas)))
        }
        45..65 => {
            let replicas = world.rng(|r| r.between(1, 4)) as i64;
            Some(tokio::spawn(sim.clone().scale(replicas)))
        }
        65..80 => {
            sim.delete();
            None
        }
        80..85 if f.quota_edits => {
            sim.edit_quota();
            None
        }
        85..90 if f.crashes => {
            let id = world.rng(|r| r.below(world.config.replicas as u64)) as usize;
            Some(tokio::spawn(sim.clone().crash_replica(id)))
        }
        90..93 if f.crashes => Some(tokio::spawn(sim.clone().crash_controller())),
        93..100 if f.stalls => {
            sim.stall();
            None
        }
        _ => None,
    }
}

/// Every quota with room for 1 cpu admits a 1-cpu binding within [`LIVENESS_MS`].
async fn liveness(sim: &Arc<Sim>) {
    let world = &sim.world;
    if let Some(ns) = sim.never_in_force().first() {
        let v =
            format!("LIVENESS quota {ns}/compute: created, but not every running replica holds it");
        world.trace(v.clone());
        lock(&world.truth).violations.push(v);
        return;
    }
    for ns in &sim.in_force() {
        let (hard, charged) = {
            let t = lock(&world.truth);
            (t.hard(ns), t.charged(ns))
        };
        if charged + 1 > hard {
            world.trace(format!("liveness: {ns} is full ({charged} of {hard} cpu)"));
            continue;
        }
        let until = clock::now_ms() + LIVENESS_MS;
        let failure = loop {
            match sim.probe(ns).await {
                Answer::Allowed => break None,
                Answer::Denied(m) if world.config.strict_liveness || clock::now_ms() >= until => {
                    break Some(format!("denied: {m}"));
                }
                Answer::Denied(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                Answer::Failed(e) if clock::now_ms() >= until => {
                    break Some(format!("failed: {e}"));
                }
                Answer::Failed(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        };
        if let Some(why) = failure {
            let v = format!(
                "LIVENESS quota {ns}/compute: 1 cpu fits ({charged} of {hard}) but was not admitted within {LIVENESS_MS} ms: {why}"
            );
            world.trace(v.clone());
            for line in sim.describe(ns) {
                world.trace(format!("  {line}"));
            }
            let stored = world
                .api
                .quotas
                .object(ns, "compute")
                .status
                .unwrap_or_default();
            let entries: Vec<String> = stored
                .reservations
                .iter()
                .map(|r| format!("{}/{}:{:?}", r.reserved_by.name, r.generation, r.reserved))
                .collect();
            world.trace(format!(
                "  stored: used {:?} foldedThrough {:?} reservations {entries:?}; bindings {:?}",
                stored.used,
                stored.folded_through,
                world
                    .api
                    .bindings()
                    .iter()
                    .filter(|b| b.metadata.namespace.as_deref() == Some(ns.as_str()))
                    .map(|b| format!(
                        "{}:{}",
                        b.metadata.name.clone().unwrap_or_default(),
                        b.spec.replicas
                    ))
                    .collect::<Vec<_>>()
            ));
            lock(&world.truth).violations.push(v);
            return;
        }
    }
}
