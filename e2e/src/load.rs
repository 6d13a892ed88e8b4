//! Steady admission load on one namespace, and the ledger's invariants sampled while it
//! runs (the upgrade test keeps both going across a rollout).
//!
//! ```text
//!  Load (one task)    every period: create load-<i> (1 replica × small cpu), every
//!                     big_every-th one asking more than the quota's hard (must be refused);
//!                     past keep_live admitted bindings, delete the oldest (churn, under
//!                     the churn lock); bounded by max_creates. Each outcome recorded:
//!                     Admitted │ QuotaRefused (403 "exceeded quota") │ Refused (anything
//!                     else the apiserver answered) │ Error (no answer)
//!  Sampler (one task) every period, holding the churn lock: list the namespace's bindings
//!                     (need = Σ replicas × cpu), then read each quota (effective = used +
//!                     Σ reservations, the admission's own rule):
//!                       lost:        effective < need  (an admitted binding not counted)
//!                       overcommit:  need > hard  or  effective > hard
//! ```
//!
//! The lock makes each sample consistent: a binding deleted between the list and the quota
//! read would look like a lost reservation. A binding created in between only raises
//! effective, which the checks allow.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use karmada_quota_core::Quantity;
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_crds::cluster_quota::KarmadaClusterQuota;
use karmada_quota_crds::convert::cluster_quota_state;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, Client};
use tokio::sync::watch;

use crate::webhook::{Rb, bindings, create, quota_usage};

/// The resource the load charges.
pub const CPU: &str = "requests.cpu";

/// What the load creates.
#[derive(Clone, Debug)]
pub struct LoadSpec {
    /// Namespace of the bindings.
    pub ns: String,
    /// Member the bindings are placed in.
    pub cluster: String,
    /// Time between two creates.
    pub period: Duration,
    /// Most creates in all.
    pub max_creates: usize,
    /// cpu per replica of an ordinary binding.
    pub small_cpu: String,
    /// Every this many creates, one binding asking `big_cpu` (more than hard: refused).
    pub big_every: usize,
    /// cpu per replica of the big one.
    pub big_cpu: String,
    /// Admitted bindings kept; past this the oldest is deleted.
    pub keep_live: usize,
}

/// How one create ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Stored.
    Admitted,
    /// Refused for the quota (403, "exceeded quota").
    QuotaRefused,
    /// Refused for another reason (the webhook unreachable, an internal error, …).
    Refused { code: u16, message: String },
    /// No answer from the apiserver.
    Error(String),
}

/// One create of the load.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// When it was sent, since the load started.
    pub at: Duration,
    /// When its answer came, since the load started.
    pub answered: Duration,
    /// The binding's name.
    pub name: String,
    /// Whether it asked more than the quota holds.
    pub big: bool,
    /// How it ended.
    pub verdict: Verdict,
}

/// The load, running; [`Load::stop`] ends it.
pub struct Load {
    started: Instant,
    stop: watch::Sender<bool>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    churn: Arc<tokio::sync::Mutex<()>>,
    task: tokio::task::JoinHandle<Result<()>>,
}

impl Load {
    /// Starts creating (and deleting) bindings with `client`.
    pub fn start(client: Client, spec: LoadSpec) -> Load {
        let (stop, mut stopped) = watch::channel(false);
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let churn = Arc::new(tokio::sync::Mutex::new(()));
        let started = Instant::now();
        let (log, lock) = (attempts.clone(), churn.clone());
        let task = tokio::spawn(async move {
            let api = bindings(&client, &spec.ns);
            let mut live = std::collections::VecDeque::new();
            let mut tick = tokio::time::interval(spec.period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for i in 0..spec.max_creates {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.wait_for(|s| *s) => break,
                }
                let big = spec.big_every > 0 && i % spec.big_every == spec.big_every - 1;
                let name = format!("load-{i:05}");
                let cpu = if big { &spec.big_cpu } else { &spec.small_cpu };
                let obj = Rb::deployment(&name, 1)
                    .request("cpu", cpu)
                    .clusters(&[(&spec.cluster, 1)])
                    .json(&spec.ns);
                let at = started.elapsed();
                let verdict = match create(&client, &obj).await {
                    Ok(Ok(_)) => Verdict::Admitted,
                    Ok(Err(s)) if s.code == 403 && s.message.contains("exceeded quota") => {
                        Verdict::QuotaRefused
                    }
                    Ok(Err(s)) => Verdict::Refused {
                        code: s.code,
                        message: s.message,
                    },
                    Err(e) => Verdict::Error(format!("{e:#}")),
                };
                let answered = started.elapsed();
                if verdict == Verdict::Admitted {
                    live.push_back(name.clone());
                }
                lock_attempts(&log).push(Attempt {
                    at,
                    answered,
                    name,
                    big,
                    verdict,
                });
                if live.len() > spec.keep_live
                    && let Some(oldest) = live.pop_front()
                {
                    let _held = lock.lock().await;
                    api.delete(&oldest, &DeleteParams::default())
                        .await
                        .with_context(|| format!("deleting binding {}/{oldest}", spec.ns))?;
                }
            }
            Ok(())
        });
        Load {
            started,
            stop,
            attempts,
            churn,
            task,
        }
    }

    /// The lock a [`Sampler`] holds around each sample (deletes wait for it).
    pub fn churn_lock(&self) -> Arc<tokio::sync::Mutex<()>> {
        self.churn.clone()
    }

    /// Since the load started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The attempts so far.
    pub fn attempts(&self) -> Vec<Attempt> {
        lock_attempts(&self.attempts).clone()
    }

    /// Stops creating; every attempt made.
    pub async fn stop(self) -> Result<Vec<Attempt>> {
        let _ = self.stop.send(true);
        self.task
            .await
            .map_err(|e| anyhow!("the load task: {e}"))??;
        Ok(lock_attempts(&self.attempts).clone())
    }
}

fn lock_attempts(m: &Mutex<Vec<Attempt>>) -> std::sync::MutexGuard<'_, Vec<Attempt>> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the sampler saw.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// Samples taken.
    pub count: usize,
    /// Every broken invariant, with the sample's time and numbers.
    pub violations: Vec<String>,
    /// Most pending reservations seen on the namespace's quota at once.
    pub max_pending: usize,
    /// Most effective cpu (milli) seen on it.
    pub max_effective_milli: i128,
    /// Most cpu (milli) the stored bindings needed at once.
    pub max_need_milli: i128,
    /// Samples that could not be taken (a read failed), with the error.
    pub read_errors: Vec<String>,
}

/// The invariants, sampled until stopped.
pub struct Sampler {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Samples>,
}

impl Sampler {
    /// Samples quota `ns/quota` and, if given, KarmadaClusterQuota `cluster_quota` (which
    /// selects `ns`) every `period`, holding `churn` around each sample.
    pub fn start(
        client: Client,
        ns: &str,
        quota: &str,
        cluster_quota: Option<&str>,
        churn: Arc<tokio::sync::Mutex<()>>,
        period: Duration,
    ) -> Sampler {
        let (stop, mut stopped) = watch::channel(false);
        let (ns, quota, cluster_quota) = (
            ns.to_owned(),
            quota.to_owned(),
            cluster_quota.map(str::to_owned),
        );
        let started = Instant::now();
        let task = tokio::spawn(async move {
            let mut out = Samples::default();
            let mut tick = tokio::time::interval(period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.wait_for(|s| *s) => break,
                }
                let _held = churn.lock().await;
                let at = started.elapsed();
                match sample(&client, &ns, &quota, cluster_quota.as_deref()).await {
                    Ok(s) => {
                        out.count += 1;
                        out.max_pending = out.max_pending.max(s.pending);
                        out.max_effective_milli = out.max_effective_milli.max(s.effective);
                        out.max_need_milli = out.max_need_milli.max(s.need);
                        for v in s.violations {
                            out.violations.push(format!("at {at:.1?}: {v}"));
                        }
                    }
                    Err(e) => out.read_errors.push(format!("at {at:.1?}: {e:#}")),
                }
            }
            out
        });
        Sampler { stop, task }
    }

    /// Stops sampling; what was seen.
    pub async fn stop(self) -> Result<Samples> {
        let _ = self.stop.send(true);
        self.task
            .await
            .map_err(|e| anyhow!("the sampler task: {e}"))
    }
}

/// One sample's numbers (cpu in milli).
struct Sample {
    need: i128,
    effective: i128,
    pending: usize,
    violations: Vec<String>,
}

/// cpu (milli) the stored bindings of `ns` are charged: Σ replicas × requests.cpu.
pub async fn needed_cpu_milli(client: &Client, ns: &str) -> Result<i128> {
    let list = bindings(client, ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing the bindings of {ns}"))?;
    let mut need = 0;
    for b in &list.items {
        let spec = &b.data["spec"];
        let replicas = i128::from(spec["replicas"].as_i64().unwrap_or(0));
        let cpu = spec["replicaRequirements"]["resourceRequest"]["cpu"]
            .as_str()
            .unwrap_or("0");
        let cpu = Quantity::parse(cpu)
            .map_err(|e| anyhow!("binding {ns}/{:?}: cpu {cpu}: {e}", b.metadata.name))?;
        need += replicas * cpu.milli_value();
    }
    Ok(need)
}

async fn sample(
    client: &Client,
    ns: &str,
    quota: &str,
    cluster_quota: Option<&str>,
) -> Result<Sample> {
    let need = needed_cpu_milli(client, ns).await?;
    let usage = quota_usage(client, ns, quota).await?;
    let effective = usage.effective.get_or_zero(CPU).milli_value();
    let hard = usage
        .object
        .spec
        .hard
        .get(CPU)
        .map(|q| Quantity::parse(&q.0).map(|q| q.milli_value()))
        .transpose()
        .map_err(|e| anyhow!("{ns}/{quota}: spec.hard {CPU}: {e}"))?
        .ok_or_else(|| anyhow!("{ns}/{quota} has no hard {CPU}"))?;
    let mut violations = Vec::new();
    if effective < need {
        violations.push(format!(
            "lost: {ns}/{quota} counts {effective}m (used + reservations) but the stored bindings need {need}m"
        ));
    }
    if need > hard || effective > hard {
        violations.push(format!(
            "overcommit: {ns}/{quota} hard {hard}m, bindings {need}m, effective {effective}m"
        ));
    }
    if let Some(name) = cluster_quota {
        let q = Api::<KarmadaClusterQuota>::all(client.clone())
            .get(name)
            .await
            .with_context(|| format!("reading KarmadaClusterQuota {name}"))?;
        let state = cluster_quota_state(&q).map_err(|errs| {
            anyhow!(
                "KarmadaClusterQuota {name}: {}",
                errs.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("; ")
            )
        })?;
        let cluster_effective =
            effective_usage(&state.used.unwrap_or_default(), &state.reservations, None)
                .get_or_zero(CPU)
                .milli_value();
        if cluster_effective < need {
            violations.push(format!(
                "lost: KarmadaClusterQuota {name} counts {cluster_effective}m but {ns}'s bindings need {need}m"
            ));
        }
    }
    Ok(Sample {
        need,
        effective,
        pending: usage.reservations.len(),
        violations,
    })
}
