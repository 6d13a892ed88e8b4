//! Time to start after a long wait, with real Karmada (docs/karmada.md): the waiting line against
//! the refusal path. Per wait length W (`KQ_QUEUE_WAITS`, seconds, comma-separated;
//! default `30`) and per mode (`Queue`, `Refuse`), each in its own namespace with its own
//! quota, webhook and controller, all at once on one Karmada (the run lasts about the
//! longest W plus the refusal path's delay):
//!
//! ```text
//!  quota q: requests.cpu=400m ── fill-1, fill-2 (2 × 100m each): placed; each one's
//!                                apply → placed is a plain placement's time (the baseline)
//!  waiter (2 × 100m)  Queue:  admitted, scheduling suspended (waits in q's line)
//!                     Refuse: the detector's CREATE of its binding is refused; Karmada
//!                             retries the template on its own backoff (up to 1000 s)
//!  … W seconds …
//!  delete fill-1 (and its binding, as the garbage collector would) ── clock starts
//!  waiter's binding Scheduled and its Deployment in both members ── clock stops
//! ```
//!
//! Queue mode must place it within the baseline + the 2 s release bound + a fixed slack
//! (and the deletion itself); the refusal path is only required to place it eventually
//! (W + 20 min): its delay is Karmada's backoff, which the table shows.
//! `make e2e-karmada-queue-wait` runs this test alone with waits of 30 s, 3 and 10 min.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::future::join_all;
use karmada_quota_e2e::Env;
use karmada_quota_e2e::controller::{milli, wait_quota};
use karmada_quota_e2e::karmada::{
    KarmadaSetup, QUOTA, apply, binding_name, delete_as_gc, deployment, is_scheduled, karmada_dir,
    member_placement, member_replicas, placement, policy, wait_binding,
};
use karmada_quota_e2e::queue::{Arrivals, waiting};
use karmada_quota_e2e::setup::step;
use karmada_quota_e2e::webhook::bindings;
use kube::api::{Patch, PatchParams};
use serde_json::json;

/// The waits (seconds, comma-separated).
const ENV_WAITS: &str = "KQ_QUEUE_WAITS";
const DEFAULT_WAITS: &[u64] = &[30];
/// 400m: two fillers of 2 × 100m fill it; the waiter (2 × 100m) fits once one is gone.
const HARD: &[(&str, &str)] = &[("requests.cpu", "400m"), ("pods", "20")];
const REPLICAS: i32 = 2;
const CPU: &str = "100m";
/// The issue's bound: released within 2 s of the quota freeing.
const RELEASE_WITHIN: Duration = Duration::from_secs(2);
/// Slack on top of the baseline + the bound (6 namespaces polled at once on 2 cores).
const SLACK: Duration = Duration::from_secs(2);
/// How long the refusal path may take beyond the wait (Karmada's backoff is at most
/// 1000 s between tries by default).
const REFUSAL_EXTRA: Duration = Duration::from_secs(20 * 60);
/// Between the cases' starts: six webhooks, controllers and Karmada's first placements at
/// once on 2 cores made a fresh webhook drop a connection and the baseline slow.
const STAGGER: Duration = Duration::from_secs(5);
/// How often the waiter's binding and the members are read while the clock runs.
const POLL: Duration = Duration::from_millis(100);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Queue,
    Refuse,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Queue => "Queue",
            Mode::Refuse => "Refuse",
        }
    }
}

/// One case's measurement.
#[derive(Debug)]
struct Outcome {
    wait: u64,
    mode: Mode,
    /// The slowest filler's apply → placed (binding Scheduled, Deployment in the members).
    baseline: Duration,
    /// How long the waiter actually waited (apply → the filler's deletion).
    waited: Duration,
    /// The filler's deletion until its binding was gone (the quota freed).
    freed: Duration,
    /// The deletion until the waiter's binding was Scheduled.
    scheduled: Duration,
    /// The deletion until its Deployment existed in both members.
    placed: Duration,
}

fn waits() -> Result<Vec<u64>> {
    let Ok(text) = std::env::var(ENV_WAITS) else {
        return Ok(DEFAULT_WAITS.to_vec());
    };
    let waits: Vec<u64> = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<u64>()
                .with_context(|| format!("{ENV_WAITS}={text:?}: {s:?} is not a number of seconds"))
        })
        .collect::<Result<_>>()?;
    ensure!(!waits.is_empty(), "{ENV_WAITS}={text:?} names no wait");
    Ok(waits)
}

#[tokio::test]
#[ignore = "needs real Karmada: make e2e-karmada runs it (make e2e-karmada-queue-wait: 30 s, 3 and 10 min)"]
async fn after_a_long_wait_the_line_starts_a_workload_within_seconds_and_refusal_waits_for_backoff()
-> Result<()> {
    karmada_dir()?;
    let waits = waits()?;
    step(&format!(
        "[Plan] waits {waits:?} s × Queue, Refuse, all at once; the longest takes about {} s \
         plus the refusal path's delay",
        waits.iter().max().copied().unwrap_or(0)
    ));
    let cases: Vec<(u64, Mode)> = waits
        .iter()
        .flat_map(|w| [(*w, Mode::Queue), (*w, Mode::Refuse)])
        .collect();
    let results = join_all(cases.iter().enumerate().map(|(i, (w, m))| async move {
        tokio::time::sleep(STAGGER * u32::try_from(i).unwrap_or(0)).await;
        case(*w, *m)
            .await
            .with_context(|| format!("wait {w} s, {}", m.name()))
    }))
    .await;

    let mut table =
        String::from("wait_s  mode    waited_s  baseline_s  freed_s  scheduled_s  placed_s\n");
    let mut failures = Vec::new();
    for (r, (w, m)) in results.iter().zip(&cases) {
        match r {
            Ok(o) => {
                let _ = writeln!(
                    table,
                    "{:<6}  {:<6}  {:>8.1}  {:>10.2}  {:>7.2}  {:>11.2}  {:>8.2}",
                    o.wait,
                    o.mode.name(),
                    o.waited.as_secs_f64(),
                    o.baseline.as_secs_f64(),
                    o.freed.as_secs_f64(),
                    o.scheduled.as_secs_f64(),
                    o.placed.as_secs_f64()
                );
            }
            Err(e) => {
                let _ = writeln!(table, "{w:<6}  {:<6}  failed", m.name());
                failures.push(format!("{e:#}"));
            }
        }
    }
    step(&format!(
        "[Result] seconds from the filler's deletion (Karmada {}):\n{table}",
        karmada_version()
    ));
    if let Ok(dir) = karmada_dir() {
        let path = dir.join("logs").join("queue-wait.txt");
        if let Err(e) = std::fs::write(&path, &table) {
            step(&format!("(could not write {}: {e})", path.display()));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

/// The Karmada version the script started (its `env` file), for the table.
fn karmada_version() -> String {
    karmada_dir()
        .ok()
        .and_then(|d| std::fs::read_to_string(d.join("env")).ok())
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("KARMADA_VERSION=").map(str::to_owned))
        })
        .unwrap_or_else(|| "?".to_owned())
}

/// One wait length in one mode, in its own namespace.
async fn case(wait: u64, mode: Mode) -> Result<Outcome> {
    let tag = format!("kq-wait-{wait}-{}", mode.name().to_lowercase());
    let k = KarmadaSetup::start(&tag, HARD).await?;
    let (c, ns) = (k.client().clone(), k.ns().to_owned());
    let env = Env::get().await?;
    let arrivals = match mode {
        Mode::Queue => {
            let a = Arrivals::register(&c, &k.setup).await?;
            kube::Api::<karmada_quota_crds::KarmadaQuota>::namespaced(c.clone(), &ns)
                .patch(
                    QUOTA,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"admission": {"mode": "Queue"}}})),
                )
                .await
                .with_context(|| format!("setting {ns}/{QUOTA} to Queue"))?;
            Some(a)
        }
        Mode::Refuse => None,
    };
    apply(
        &c,
        &ns,
        policy(&ns, "all", &[], placement::divided_static(1, 1)),
    )
    .await?;

    let mut baseline = Duration::ZERO;
    for f in ["fill-1", "fill-2"] {
        let t = Instant::now();
        apply(&c, &ns, deployment(&ns, f, REPLICAS, CPU)).await?;
        let (_, took) = wait_placed(env, &c, &ns, f, t, Duration::from_secs(90)).await?;
        baseline = baseline.max(took);
    }
    step(&format!(
        "[{tag}] {ns}: fill-1, fill-2 placed; a placement takes up to {baseline:?}"
    ));
    wait_quota(
        &c,
        &ns,
        QUOTA,
        "used requests.cpu=400m",
        Duration::from_secs(30),
        |q| {
            q.status
                .as_ref()
                .is_some_and(|s| milli(&s.used, "requests.cpu") == 400)
        },
    )
    .await?;

    let applied = Instant::now();
    apply(&c, &ns, deployment(&ns, "waiter", REPLICAS, CPU)).await?;
    let rb = binding_name("waiter");
    match mode {
        Mode::Queue => {
            wait_binding(&c, &ns, &rb, "the waiter's binding waits", |o| {
                serde_json::to_value(o).is_ok_and(|v| waiting(&v))
            })
            .await?;
        }
        Mode::Refuse => {
            karmada_quota_e2e::try_wait_for(
                "the webhook to refuse the waiter's binding",
                Duration::from_secs(90),
                || async {
                    let refused = k
                        .denials()?
                        .iter()
                        .any(|d| d.binding == rb && d.reason == "QuotaExceeded");
                    Ok::<_, anyhow::Error>(refused.then_some(()))
                },
            )
            .await?;
        }
    }
    step(&format!(
        "[{tag}] waiter {}; waiting {wait} s",
        match mode {
            Mode::Queue => "held with its scheduling suspended",
            Mode::Refuse => "refused (Karmada retries it on its backoff)",
        }
    ));
    tokio::time::sleep_until((applied + Duration::from_secs(wait)).into()).await;
    let still = bindings(&c, &ns).get_opt(&rb).await?;
    if let Some(o) = &still {
        ensure!(
            !is_scheduled(o),
            "the waiter was placed before the room freed: {}",
            o.data["spec"]["clusters"]
        );
    }

    let waited = applied.elapsed();
    let started = Instant::now();
    delete_as_gc(&c, &ns, "fill-1").await?;
    let freed = started.elapsed();
    let timeout = match mode {
        Mode::Queue => Duration::from_secs(90),
        Mode::Refuse => Duration::from_secs(wait) + REFUSAL_EXTRA,
    };
    let (scheduled, placed_after) = wait_placed(env, &c, &ns, "waiter", started, timeout).await?;
    step(&format!(
        "[{tag}] waiter placed {placed_after:?} after fill-1's deletion (Scheduled after \
         {scheduled:?}; the binding was gone after {freed:?})"
    ));
    if mode == Mode::Queue {
        let bound = freed + baseline + RELEASE_WITHIN + SLACK;
        ensure!(
            placed_after <= bound,
            "Queue: placed {placed_after:?} after the deletion; the bound is {bound:?} \
             (the deletion {freed:?} + a placement {baseline:?} + {RELEASE_WITHIN:?} + \
             {SLACK:?})"
        );
    }
    if let Some(a) = arrivals {
        a.cleanup().await?;
    }
    k.teardown().await?;
    Ok(Outcome {
        wait,
        mode,
        baseline,
        waited,
        freed,
        scheduled,
        placed: placed_after,
    })
}

/// Polls Deployment `name`'s binding until it is Scheduled and the members run the
/// Deployment as placed; (Scheduled, in the members), each measured from `since`.
async fn wait_placed(
    env: &Env,
    c: &kube::Client,
    ns: &str,
    name: &str,
    since: Instant,
    timeout: Duration,
) -> Result<(Duration, Duration)> {
    let api = bindings(c, ns);
    let rb = binding_name(name);
    let mut scheduled: Option<Duration> = None;
    let mut last = String::from("(no binding)");
    loop {
        if scheduled.is_none()
            && let Some(o) = api.get_opt(&rb).await?
        {
            if is_scheduled(&o) {
                scheduled = Some(since.elapsed());
            }
            last = json!({"spec": o.data["spec"], "status": o.data["status"]}).to_string();
        }
        if let Some(at) = scheduled {
            let o = api
                .get(&rb)
                .await
                .with_context(|| format!("reading ResourceBinding {ns}/{rb}"))?;
            if member_replicas(env, ns, name).await? == member_placement(&o) {
                return Ok((at, since.elapsed()));
            }
        }
        if since.elapsed() > timeout {
            bail!(
                "{ns}/{name} not placed within {timeout:?} (Scheduled: {scheduled:?}); \
                 its binding: {last}"
            );
        }
        tokio::time::sleep(POLL).await;
    }
}
