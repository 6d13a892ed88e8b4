//! Faults against the real apiserver, Jepsen-style: 3 webhook replicas and 2 controllers
//! under steady creates, scale-ups and deletes over three quotas and a cluster quota over
//! them, while a seeded fault loop kills and restarts webhooks and the controller leader,
//! cuts and restores the network between a replica and the apiserver, and restarts the
//! apiserver (etcd kept).
//!
//! ```text
//!  own control plane (etcd + apiserver 0), so that restarting the apiserver disturbs no
//!  other test; namespaces faults-{a,b,c}: KarmadaQuota q requests.cpu 1500m each;
//!  KarmadaClusterQuota over the three: 3500m (less than their sum: it binds too)
//!  load per namespace: a tick every 300 ms — create 1 × 100m, every 4th tick scale the
//!        newest binding up by one replica, every 10th create asks 2 cpu (over hard: must
//!        be refused); past 12 live, or after a create refused for the quota, delete the
//!        oldest
//!  sampler every 250 ms (load::Sampler over invariant::read): per quota,
//!        bindings' need ≤ hard, used + reservations (+ unfolded batch entries) ≤ hard
//!        and ≥ need
//!  chaos::Chaos::run for FAULT_TIME (KQ_FAULTS_SEED picks the seed, else the clock)
//!  then: the loads run on 10 s and stop; their bindings are deleted; in each namespace,
//!        once the room left (hard − effective, the cluster quota's too) is above zero —
//!        entries of lost answers hold room up to the reservation TTL — a create of
//!        exactly that room must be admitted within FIT_WITHIN, retried as a client retries
//! ```
//!
//! Checked: no sample breaks the invariant, enough samples were taken, no big binding was
//! admitted, every kind of fault happened, and every fitting request was admitted within
//! seconds after the faults stopped. `invariant::tests` (unit tests) show the checks
//! report an over-commit and a lost charge; `upgrade_checks.rs` shows the sampler does so
//! against a real apiserver.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Namespace;
use karmada_quota_crds::KarmadaClusterQuota;
use karmada_quota_e2e::chaos::{Chaos, Fault, Plan, Replicas};
use karmada_quota_e2e::controller::{ensure_namespace, wait_synced};
use karmada_quota_e2e::invariant::{self, CPU, Watched};
use karmada_quota_e2e::load::{Attempt, Load, LoadSpec, Op, Sampler, Samples, Verdict};
use karmada_quota_e2e::own_controlplane::OwnControlPlane;
use karmada_quota_e2e::setup::step;
use karmada_quota_e2e::webhook::{
    BINDING_WEBHOOK, NS_LABEL, Rb, WebhookTls, bindings, create, quota, vwc_from_manifest,
    wait_called, wait_until_status_seen,
};
use karmada_quota_e2e::{accepts, wait_for};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const NAMESPACES: [&str; 3] = ["faults-a", "faults-b", "faults-c"];
const BATCHES_NS: &str = "faults-batches";
const QUOTA_HARD: &str = "1500m";
const CLUSTER_QUOTA: &str = "faults-all";
const CLUSTER_HARD: &str = "3500m";
/// The label the cluster quota selects its namespaces by.
const GROUP: &str = "e2e.karmada-quota/faults";
const REGISTRATION: &str = "kq-e2e-faults";
/// How long the faults go on (KQ_FAULTS_SECONDS sets another length, e.g. for a long run).
const FAULT_TIME: Duration = Duration::from_secs(180);
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The loads run on this long after the last fault.
const AFTER_FAULTS: Duration = Duration::from_secs(10);
/// "Within seconds": a fitting request is admitted this soon after the faults stopped.
const FIT_WITHIN: Duration = Duration::from_secs(20);
/// The webhooks' `--reservation-ttl`: the entry of a request whose answer was lost holds
/// its room at most this long (docs/reservations.md, liveness).
const RESERVATION_TTL: Duration = Duration::from_secs(60);

/// Salts `KQ_FAULTS_SEED` into the fault loop's seed (so the replay values recorded in
/// bench/RESULTS.md keep replaying the same runs).
const SEED_SALT: u64 = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn faults_never_over_commit_and_fitting_requests_are_admitted_after() -> Result<()> {
    run().await
}

/// The checks above are not vacuous on this path (several quotas, a cluster quota, the
/// batch store's reads): the one webhook registered with failurePolicy Ignore and killed,
/// bindings past hard go straight in, and the sampler must report the over-commit of the
/// namespace's quota and of the cluster quota.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the loopback control plane: make test runs it"]
async fn the_sampler_reports_the_over_commit_of_a_down_webhook_whose_failures_are_ignored()
-> Result<()> {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("faults-ignored-{}", std::process::id()));
    let cp = OwnControlPlane::up(&dir, 1, "").await?;
    let c = cp.env().client()?;
    objects(&c).await?;
    let mut chaos = Chaos::start(
        &cp,
        Replicas {
            webhooks: 1,
            controllers: 1,
            webhook_args: store_args(),
            controller_args: store_args(),
        },
    )
    .await?;
    step("[Setup] one webhook, registered with failurePolicy Ignore (a broken configuration)");
    register(&c, &chaos, "Ignore").await?;
    wait_synced(&c, NAMESPACES[0], "q").await?;
    let watched = watched();
    let lock = Arc::new(tokio::sync::Mutex::new(()));
    let sampler = Sampler::over(c.clone(), watched, vec![lock], SAMPLE_EVERY);
    step(
        "[Attack] the webhook killed for 10 s; meanwhile 40 × 100m created in faults-a \
         (hard 1500m; the cluster quota's 3500m)",
    );
    let creates = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        let mut stored = 0;
        for i in 0..40 {
            if Verdict::of(create(&c, &small(NAMESPACES[0], &format!("past-{i}"))).await)
                == Verdict::Admitted
            {
                stored += 1;
            }
        }
        stored
    };
    let (killed, stored) = tokio::join!(
        chaos.one(Fault::KillWebhook(0), Duration::from_secs(10)),
        creates
    );
    killed?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let samples = sampler.stop().await?;
    eprintln!(
        "[Result] {stored} of 40 stored without the webhook; {} samples, violations:\n  {}",
        samples.count,
        samples.violations.join("\n  ")
    );
    ensure!(
        stored > 35,
        "only {stored} of 40 stored: the webhook was not ignored"
    );
    for want in ["overcommit: faults-a/q", "overcommit: KarmadaClusterQuota"] {
        ensure!(
            samples.violations.iter().any(|v| v.contains(want)),
            "the sampler did not report {want:?}"
        );
    }
    drop(chaos);
    drop(cp);
    // A passing run leaves nothing behind (a failing one keeps the logs and etcd).
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn watched() -> Watched {
    Watched {
        quotas: NAMESPACES
            .iter()
            .map(|ns| ((*ns).to_owned(), "q".to_owned()))
            .collect(),
        cluster_quota: Some(CLUSTER_QUOTA.to_owned()),
        batches: BATCHES_NS.to_owned(),
    }
}

fn store_args() -> Vec<String> {
    vec![format!("--reservation-namespace={BATCHES_NS}")]
}

fn seed() -> u64 {
    let base = std::env::var("KQ_FAULTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    base ^ SEED_SALT
}

fn fault_time() -> Duration {
    std::env::var("KQ_FAULTS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(FAULT_TIME, Duration::from_secs)
}

async fn run() -> Result<()> {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("faults-{}", std::process::id()));
    step(&format!(
        "[Setup] a control plane of the test's own in {}",
        dir.display()
    ));
    let cp = OwnControlPlane::up(&dir, 1, "").await?;
    let c = cp.env().client()?;
    objects(&c).await?;
    let mut webhook_args = vec![format!("--reservation-ttl={}s", RESERVATION_TTL.as_secs())];
    webhook_args.extend(store_args());
    let mut chaos = Chaos::start(
        &cp,
        Replicas {
            webhooks: 3,
            controllers: 2,
            webhook_args,
            controller_args: store_args(),
        },
    )
    .await?;
    register(&c, &chaos, "Fail").await?;
    step(&format!(
        "[Setup] 3 webhooks behind {}, 2 controllers, each through its own proxy",
        chaos.url()
    ));
    for ns in NAMESPACES {
        wait_synced(&c, ns, "q").await?;
        wait_until_status_seen(&c, &small(ns, "probe")).await?;
    }

    let watched = watched();
    let (loads, locks, sampler) = loads_and_sampler(&c, &watched);
    let plan = Plan {
        seed: seed(),
        duration: fault_time(),
        max_faults: 400,
        hold: (Duration::from_millis(500), Duration::from_secs(5)),
        pause: (Duration::from_millis(500), Duration::from_secs(3)),
        apiserver_every: Duration::from_secs(40),
    };
    step(&format!(
        "[Faults] seed {} (KQ_FAULTS_SEED={} repeats it), {:?}",
        plan.seed,
        plan.seed ^ SEED_SALT,
        plan.duration
    ));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let faults = chaos.run(&plan).await;
    let faults_end = Instant::now();
    if faults.is_err() {
        eprintln!("timeline: {:#?}", chaos.timeline());
    }
    let faults = faults?;
    tokio::time::sleep(AFTER_FAULTS).await;
    let (attempts, delete_errors) = stop(loads).await?;
    step("[After] the loads stopped; their bindings deleted; then the room left, exactly");
    clear(&c, &locks).await?;
    let fits = fitting_requests(&c, &watched, faults_end).await;
    let samples = sampler.stop().await?;
    report(&samples, &attempts, &delete_errors, &faults);
    // The invariant first: a run that also failed to admit what fits still says what it
    // violated.
    let verified = verify(&plan, &samples, &attempts, &faults, &chaos);
    let fits = match (verified, fits) {
        (Err(v), Err(f)) => return Err(v.context(format!("and after the faults: {f:#}"))),
        (Err(v), Ok(_)) => return Err(v),
        (Ok(()), fits) => fits?,
    };
    for f in &fits {
        eprintln!("    {f}");
    }
    drop(chaos);
    drop(cp);
    // A passing run leaves nothing behind (a failing one keeps the logs and etcd).
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The checks of a fault run (the module docs).
fn verify(
    plan: &Plan,
    samples: &Samples,
    attempts: &[Attempt],
    faults: &[Fault],
    chaos: &Chaos<'_>,
) -> Result<()> {
    ensure!(
        samples.violations.is_empty(),
        "{} violations of the invariant (seed {}):\n  {}\ntimeline:\n{}",
        samples.violations.len(),
        plan.seed,
        samples.violations.join("\n  "),
        timeline(chaos)
    );
    // One sample every 250 ms over the faults is `nominal`; a sample is not taken while
    // the apiserver is away (a read error), nor while a load's delete holds its lock.
    let nominal = (plan.duration.as_millis() / SAMPLE_EVERY.as_millis()) as usize;
    ensure!(
        samples.unreadable.is_empty(),
        "samples whose answer could not be used:\n  {}",
        samples.unreadable.join("\n  ")
    );
    let tried = samples.count + samples.read_errors.len();
    ensure!(
        tried * 2 >= nominal && samples.count * 4 >= nominal,
        "{} samples and {} read errors; want at least half of {nominal} tried (one every \
         {SAMPLE_EVERY:?} over the faults) and a quarter taken",
        samples.count,
        samples.read_errors.len()
    );
    let big: Vec<&Attempt> = attempts
        .iter()
        .filter(|a| a.big && a.verdict == Verdict::Admitted)
        .collect();
    ensure!(big.is_empty(), "bindings over hard admitted: {big:?}");
    for kind in [
        "KillWebhook",
        "KillLeader",
        "CutWebhook",
        "CutController",
        "RestartApiserver",
    ] {
        ensure!(
            faults.iter().any(|f| format!("{f:?}").starts_with(kind)),
            "no {kind} among the faults: {faults:?}"
        );
    }
    enough_admitted(attempts)
}

/// The loads got through: at least 20 creates and scale-ups admitted.
fn enough_admitted(attempts: &[Attempt]) -> Result<()> {
    let admitted = attempts
        .iter()
        .filter(|a| a.verdict == Verdict::Admitted)
        .count();
    ensure!(
        admitted >= 20,
        "only {admitted} creates and scale-ups admitted"
    );
    Ok(())
}

fn timeline(chaos: &Chaos<'_>) -> String {
    chaos
        .timeline()
        .iter()
        .map(|(at, what)| format!("  {at:>7.1?} {what}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A load in each namespace, and the sampler of `watched` holding every load's churn lock
/// around each sample.
fn loads_and_sampler(
    c: &Client,
    watched: &Watched,
) -> (Vec<Load>, Vec<Arc<tokio::sync::Mutex<()>>>, Sampler) {
    let loads: Vec<Load> = NAMESPACES
        .iter()
        .map(|ns| Load::start(c.clone(), load_spec(ns)))
        .collect();
    let locks: Vec<_> = loads.iter().map(Load::churn_lock).collect();
    let sampler = Sampler::over(c.clone(), watched.clone(), locks.clone(), SAMPLE_EVERY);
    (loads, locks, sampler)
}

/// Stop `loads`: every attempt they made, and the deletes that failed (retried).
async fn stop(loads: Vec<Load>) -> Result<(Vec<Attempt>, Vec<String>)> {
    let mut attempts = Vec::new();
    let mut delete_errors = Vec::new();
    for load in loads {
        delete_errors.extend(load.delete_errors());
        attempts.extend(load.stop().await?);
    }
    Ok((attempts, delete_errors))
}

fn small(ns: &str, name: &str) -> serde_json::Value {
    Rb::deployment(name, 1)
        .request("cpu", "100m")
        .clusters(&[("member1", 1)])
        .json(ns)
}

fn load_spec(ns: &str) -> LoadSpec {
    LoadSpec {
        ns: ns.to_owned(),
        cluster: "member1".to_owned(),
        period: Duration::from_millis(300),
        max_creates: 2000,
        small_cpu: "100m".to_owned(),
        big_every: 10,
        big_cpu: "2".to_owned(),
        keep_live: 12,
        scale_every: 4,
    }
}

/// The namespaces (labelled for the registration and the cluster quota), the quotas.
async fn objects(c: &Client) -> Result<()> {
    ensure_namespace(c, BATCHES_NS).await?;
    for ns in NAMESPACES {
        ensure_namespace(c, ns).await?;
        Api::<Namespace>::all(c.clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"labels": {NS_LABEL: REGISTRATION, GROUP: "on"}}}),
                ),
            )
            .await
            .with_context(|| format!("labelling namespace {ns}"))?;
        accepts(c, &quota(ns, "q", &[(CPU, QUOTA_HARD)])).await?;
    }
    let cq: KarmadaClusterQuota = serde_json::from_value(json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaClusterQuota",
        "metadata": {"name": CLUSTER_QUOTA, "labels": {NS_LABEL: REGISTRATION}},
        "spec": {"namespaceSelector": {"matchLabels": {GROUP: "on"}}, "hard": {CPU: CLUSTER_HARD}},
    }))?;
    Api::<KarmadaClusterQuota>::all(c.clone())
        .create(&PostParams::default(), &cq)
        .await
        .context("creating the cluster quota")?;
    Ok(())
}

/// The manifest's webhooks at the Service in front of the replicas (this control plane
/// is the test's alone; it goes down with it).
/// `failure_policy` replaces the ResourceBinding webhook's (the manifest's is Fail).
async fn register(c: &Client, chaos: &Chaos<'_>, failure_policy: &str) -> Result<()> {
    let tls = WebhookTls::get(chaos.env()).await?;
    let mut vwc = vwc_from_manifest(REGISTRATION, &chaos.url(), &tls.ca_bundle, REGISTRATION)?;
    for hook in vwc.webhooks.iter_mut().flatten() {
        if hook.name == BINDING_WEBHOOK {
            hook.failure_policy = Some(failure_policy.to_owned());
        }
    }
    Api::<ValidatingWebhookConfiguration>::all(c.clone())
        .create(&PostParams::default(), &vwc)
        .await
        .context("creating the ValidatingWebhookConfiguration")?;
    wait_called(c, NAMESPACES[0], &chaos.webhooks()).await?;
    wait_for(
        "the cluster quota synced",
        Duration::from_secs(30),
        || async {
            let q = Api::<KarmadaClusterQuota>::all(c.clone())
                .get(CLUSTER_QUOTA)
                .await
                .ok()?;
            q.status?.quota.used.contains_key(CPU).then_some(())
        },
    )
    .await
}

/// Deletes every binding of the namespaces, each under its load's lock (so no sample sees
/// a binding gone from the list but not yet from `used`).
async fn clear(c: &Client, locks: &[Arc<tokio::sync::Mutex<()>>]) -> Result<()> {
    for (ns, lock) in NAMESPACES.iter().zip(locks) {
        let api = bindings(c, ns);
        wait_for(
            &format!("the bindings of {ns} deleted"),
            FIT_WITHIN,
            || async {
                let list = api.list(&ListParams::default()).await.ok()?;
                for b in &list.items {
                    let _held = lock.lock().await;
                    let name = b.metadata.name.clone().unwrap_or_default();
                    let _ = api.delete(&name, &DeleteParams::default()).await;
                }
                list.items.is_empty().then_some(())
            },
        )
        .await?;
    }
    Ok(())
}

/// The room `ns` has left (its quota's and the cluster quota's, the least), once two reads
/// half a second apart agree on it and it is not zero: the controller has written the
/// deletes of [`clear`]. Entries of requests whose answers were lost may hold all of it
/// (the earlier namespaces' fitting requests take what the cluster quota has left) until
/// they expire, so the wait is the reservation TTL plus FIT_WITHIN.
async fn settled_room(c: &Client, watched: &Watched, ns: &str) -> Result<i128> {
    let mut last = None;
    let mut readings = Vec::new();
    let started = Instant::now();
    let within = RESERVATION_TTL + FIT_WITHIN;
    while started.elapsed() < within {
        readings = invariant::read(c, watched).await?;
        let room = readings
            .iter()
            .filter(|r| r.quota == format!("{ns}/q") || r.quota.starts_with("KarmadaClusterQuota"))
            .map(|r| r.hard - r.effective)
            .min()
            .unwrap_or(0);
        if room > 0 && last == Some(room) {
            return Ok(room);
        }
        last = Some(room);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    anyhow::bail!("the room left in {ns} did not settle above zero within {within:?}: {readings:?}")
}

/// In each namespace in turn: a create of exactly the room the quota and the cluster quota
/// have left (hard − effective, read from the apiserver), retried every 250 ms until
/// admitted, at most FIT_WITHIN. One line per namespace.
async fn fitting_requests(
    c: &Client,
    watched: &Watched,
    faults_end: Instant,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for ns in NAMESPACES {
        let room = settled_room(c, watched, ns).await?;
        let obj = Rb::deployment("fit", 1)
            .request("cpu", &format!("{room}m"))
            .clusters(&[("member1", 1)])
            .json(ns);
        let started = Instant::now();
        let mut refusals = Vec::new();
        loop {
            match Verdict::of(create(c, &obj).await) {
                Verdict::Admitted => break,
                v => refusals.push(format!("{v:?}")),
            }
            if bindings(c, ns)
                .get_opt("fit")
                .await
                .ok()
                .flatten()
                .is_some()
            {
                break; // stored although the answer was lost
            }
            ensure!(
                started.elapsed() < FIT_WITHIN,
                "{ns}: {room}m fits but was not admitted within {FIT_WITHIN:?}; refusals: {refusals:?}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        out.push(format!(
            "{ns}: {room}m (all the room left) admitted {:.1?} after asking, {:.1?} after the faults; {} refusals first{}",
            started.elapsed(),
            faults_end.elapsed(),
            refusals.len(),
            refusals.first().map(|r| format!(", e.g. {r}")).unwrap_or_default()
        ));
    }
    Ok(out)
}

fn report(samples: &Samples, attempts: &[Attempt], delete_errors: &[String], faults: &[Fault]) {
    let count = |op: Op, f: &dyn Fn(&Verdict) -> bool| {
        attempts
            .iter()
            .filter(|a| a.op == op && f(&a.verdict))
            .count()
    };
    let admitted = |v: &Verdict| *v == Verdict::Admitted;
    let quota = |v: &Verdict| *v == Verdict::QuotaRefused;
    let refused = |v: &Verdict| matches!(v, Verdict::Refused { .. });
    let error = |v: &Verdict| matches!(v, Verdict::Error(_));
    eprintln!(
        "[Result] {} faults; {} samples, {} violations, {} read errors; \
         creates {} admitted / {} refused for quota / {} refused otherwise / {} no answer; \
         scale-ups {} / {} / {} / {}; {} failed deletes (retried); max need {}m, max effective {}m, max pending {}; \
         {} samples counted over hard without an over-commit",
        faults.len(),
        samples.count,
        samples.violations.len(),
        samples.read_errors.len(),
        count(Op::Create, &admitted),
        count(Op::Create, &quota),
        count(Op::Create, &refused),
        count(Op::Create, &error),
        count(Op::ScaleUp, &admitted),
        count(Op::ScaleUp, &quota),
        count(Op::ScaleUp, &refused),
        count(Op::ScaleUp, &error),
        delete_errors.len(),
        samples.max_need_milli,
        samples.max_effective_milli,
        samples.max_pending,
        samples.counted_over_hard.len(),
    );
    for c in samples.counted_over_hard.iter().take(5) {
        eprintln!("    counted over hard {c}");
    }
    let mut codes = std::collections::BTreeMap::<String, usize>::new();
    for a in attempts {
        if let Verdict::Refused { code, message } = &a.verdict {
            let why = message
                .rsplit("denied the request: ")
                .next()
                .unwrap_or(message);
            // "ResourceBinding <ns>/<name>: why" names the binding: group by the why.
            let why = why
                .split_once(": ")
                .filter(|(b, _)| b.starts_with("ResourceBinding "))
                .map_or(why, |(_, w)| w);
            let head: String = why.chars().take(70).collect();
            *codes.entry(format!("{code} {head}")).or_default() += 1;
        }
    }
    for (k, n) in codes {
        eprintln!("    refused {n}×: {k}");
    }
}
