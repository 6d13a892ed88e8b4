//! Steady admission load on one namespace, and the ledger's invariants sampled while it
//! runs (the upgrade test keeps both going across a rollout, the fault test across kills,
//! cuts and apiserver restarts).
//!
//! ```text
//!  Load (one task)    every period: create load-<i> (1 replica × small cpu), every
//!                     big_every-th one asking more than the quota's hard (must be refused),
//!                     every scale_every-th tick instead scale the newest live binding up
//!                     by one replica (an UPDATE); past keep_live admitted bindings, or after
//!                     a small create refused for the quota, delete the oldest (churn, under
//!                     the churn lock; a failed delete is tried again later); bounded by
//!                     max_creates. Each create and scale-up recorded:
//!                     Admitted │ QuotaRefused (403 "exceeded [cluster] quota") │ Refused (anything
//!                     else the apiserver answered) │ Error (no answer: it may be stored,
//!                     so the binding is looked up again and, if there, churned too)
//!  Sampler (one task) every period, holding every churn lock: invariant::read (the
//!                     namespaces' bindings, the reservation batches, each quota) and
//!                     invariant::check per quota:
//!                       lost:        effective < need  (an admitted binding not counted)
//!                       overcommit:  committed > hard  (need + entries no stored binding
//!                                    holds)
//! ```
//!
//! The lock makes each sample consistent: a binding deleted between the list and the quota
//! read would look like a lost reservation. A binding created or scaled in between only
//! raises effective, which the checks allow.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow};
use kube::Client;
use kube::api::DeleteParams;
use tokio::sync::watch;

pub use crate::invariant::{CPU, Watched, needed_cpu_milli};
use crate::invariant::{check, counted_over_hard, read};
use crate::webhook::{Outcome, Rb, bindings, create, update};

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
    /// Every this many ticks (0: never), scale the newest live binding up by one replica
    /// instead of creating.
    pub scale_every: usize,
}

/// What one tick of the load sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// A CREATE of a new binding.
    Create,
    /// An UPDATE adding one replica to a live binding.
    ScaleUp,
}

/// How one create ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Stored.
    Admitted,
    /// Refused for the quota (403, "exceeded quota" or "exceeded cluster quota").
    QuotaRefused,
    /// Refused for another reason (the webhook unreachable, an internal error, …).
    Refused { code: u16, message: String },
    /// No answer from the apiserver.
    Error(String),
}

impl Verdict {
    /// What a create or update came to.
    pub fn of(outcome: Result<Outcome>) -> Verdict {
        match outcome {
            Ok(Ok(_)) => Verdict::Admitted,
            Ok(Err(s))
                if s.code == 403
                    && (s.message.contains("exceeded quota")
                        || s.message.contains("exceeded cluster quota")) =>
            {
                Verdict::QuotaRefused
            }
            Ok(Err(s)) => Verdict::Refused {
                code: s.code,
                message: s.message,
            },
            Err(e) => Verdict::Error(format!("{e:#}")),
        }
    }
}

/// One create (or scale-up) of the load.
#[derive(Clone, Debug)]
pub struct Attempt {
    /// When it was sent, since the load started.
    pub at: Duration,
    /// When its answer came, since the load started.
    pub answered: Duration,
    /// The binding's name.
    pub name: String,
    /// What was sent.
    pub op: Op,
    /// Whether it asked more than the quota holds.
    pub big: bool,
    /// How it ended.
    pub verdict: Verdict,
}

/// The bindings the load owns: admitted ones (name, replicas), oldest first, and those
/// whose create got no answer (maybe stored).
#[derive(Default)]
struct Owned {
    live: VecDeque<(String, i32)>,
    unsure: VecDeque<String>,
    /// Deletes that failed (retried), as lines.
    delete_errors: Vec<String>,
}

/// The load, running; [`Load::stop`] ends it.
pub struct Load {
    started: Instant,
    stop: watch::Sender<bool>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    delete_errors: Arc<Mutex<Vec<String>>>,
    churn: Arc<tokio::sync::Mutex<()>>,
    task: tokio::task::JoinHandle<Result<()>>,
}

/// One running load's state, shared by its steps.
struct Run {
    client: Client,
    spec: LoadSpec,
    started: Instant,
    owned: Owned,
    attempts: Arc<Mutex<Vec<Attempt>>>,
    churn: Arc<tokio::sync::Mutex<()>>,
}

impl Run {
    fn binding(&self, name: &str, replicas: i32, cpu: &str) -> serde_json::Value {
        Rb::deployment(name, replicas)
            .request("cpu", cpu)
            .clusters(&[(&self.spec.cluster, replicas)])
            .json(&self.spec.ns)
    }

    /// Tick `i`: a create, or a scale-up of the newest live binding.
    async fn tick(&mut self, i: usize) {
        let spec = &self.spec;
        let big = spec.big_every > 0 && i % spec.big_every == spec.big_every - 1;
        let scale = !big && spec.scale_every > 0 && i % spec.scale_every == spec.scale_every - 1;
        let at = self.started.elapsed();
        let (name, op, verdict) = match self.owned.live.back().cloned() {
            Some((name, replicas)) if scale => {
                let obj = self.binding(&name, replicas + 1, &spec.small_cpu);
                let verdict = Verdict::of(update(&self.client, &obj).await);
                if verdict == Verdict::Admitted
                    && let Some(last) = self.owned.live.back_mut()
                {
                    last.1 = replicas + 1;
                }
                (name, Op::ScaleUp, verdict)
            }
            _ => {
                let name = format!("load-{i:05}");
                let cpu = if big { &spec.big_cpu } else { &spec.small_cpu };
                let obj = self.binding(&name, 1, cpu);
                let verdict = Verdict::of(create(&self.client, &obj).await);
                match &verdict {
                    Verdict::Admitted => self.owned.live.push_back((name.clone(), 1)),
                    Verdict::Error(_) => self.owned.unsure.push_back(name.clone()),
                    _ => {}
                }
                (name, Op::Create, verdict)
            }
        };
        let refused_small = !big && verdict == Verdict::QuotaRefused;
        lock(&self.attempts).push(Attempt {
            at,
            answered: self.started.elapsed(),
            name,
            op,
            big,
            verdict,
        });
        if self.owned.live.len() > spec.keep_live || refused_small {
            self.delete_oldest().await;
        }
    }

    /// Deletes the oldest live binding under the churn lock; on failure it stays oldest.
    async fn delete_oldest(&mut self) {
        let Some((oldest, replicas)) = self.owned.live.pop_front() else {
            return;
        };
        let _held = self.churn.lock().await;
        match bindings(&self.client, &self.spec.ns)
            .delete(&oldest, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                let at = self.started.elapsed();
                self.owned.delete_errors.push(format!(
                    "at {at:.1?}: deleting {}/{oldest}: {e}",
                    self.spec.ns
                ));
                self.owned.live.push_front((oldest, replicas));
            }
        }
    }

    /// Looks up one create that got no answer: stored → live (churned), absent → dropped.
    async fn resolve_unsure(&mut self) {
        let Some(name) = self.owned.unsure.pop_front() else {
            return;
        };
        match bindings(&self.client, &self.spec.ns).get_opt(&name).await {
            Ok(Some(b)) => {
                let replicas = b.data["spec"]["replicas"].as_i64().unwrap_or(1);
                self.owned
                    .live
                    .push_front((name, i32::try_from(replicas).unwrap_or(1)));
            }
            Ok(None) => {}
            Err(_) => self.owned.unsure.push_back(name),
        }
    }
}

impl Load {
    /// Starts creating (and deleting) bindings with `client`.
    pub fn start(client: Client, spec: LoadSpec) -> Load {
        let (stop, mut stopped) = watch::channel(false);
        let attempts = Arc::new(Mutex::new(Vec::new()));
        let delete_errors = Arc::new(Mutex::new(Vec::new()));
        let churn = Arc::new(tokio::sync::Mutex::new(()));
        let started = Instant::now();
        let mut run = Run {
            client,
            spec,
            started,
            owned: Owned::default(),
            attempts: attempts.clone(),
            churn: churn.clone(),
        };
        let errors = delete_errors.clone();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(run.spec.period);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            for i in 0..run.spec.max_creates {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.wait_for(|s| *s) => break,
                }
                run.resolve_unsure().await;
                run.tick(i).await;
                lock(&errors).append(&mut run.owned.delete_errors);
            }
            Ok(())
        });
        Load {
            started,
            stop,
            attempts,
            delete_errors,
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
        lock(&self.attempts).clone()
    }

    /// Deletes that failed so far (each was tried again later).
    pub fn delete_errors(&self) -> Vec<String> {
        lock(&self.delete_errors).clone()
    }

    /// Stops creating; every attempt made.
    pub async fn stop(self) -> Result<Vec<Attempt>> {
        let _ = self.stop.send(true);
        self.task
            .await
            .map_err(|e| anyhow!("the load task: {e}"))??;
        Ok(lock(&self.attempts).clone())
    }
}

fn lock<T>(m: &Mutex<T>) -> parking_lot::MutexGuard<'_, T> {
    m.lock()
}

/// What the sampler saw.
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// Samples taken.
    pub count: usize,
    /// Every broken invariant, with the sample's time and numbers.
    pub violations: Vec<String>,
    /// Most pending reservations seen on one quota at once.
    pub max_pending: usize,
    /// Most effective cpu (milli) seen on one quota.
    pub max_effective_milli: i128,
    /// Most cpu (milli) the stored bindings charged to one quota needed at once.
    pub max_need_milli: i128,
    /// Samples that could not be taken because the apiserver did not answer (a transport
    /// error, 429 or 5xx), with the error.
    pub read_errors: Vec<String>,
    /// Samples whose answer could not be used (an object that does not decode or parse,
    /// any other refusal), with the error: never expected.
    pub unreadable: Vec<String>,
    /// With the batch store: counts over hard that are no over-commit
    /// ([`crate::invariant::counted_over_hard`]).
    pub counted_over_hard: Vec<String>,
}

/// Whether a failed read is the apiserver not answering (away, busy: a transport error,
/// 429, 5xx; or starting: the plain `404 page not found` of a custom resource whose route
/// a restarted apiserver has not installed yet, not a Status) rather than an answer the
/// sampler could not use.
fn unanswered(e: &anyhow::Error) -> bool {
    e.chain()
        .find_map(|c| c.downcast_ref::<kube::Error>())
        .is_some_and(|k| match k {
            kube::Error::Api(s) => {
                s.code == 429 || s.code >= 500 || (s.code == 404 && s.message == NO_ROUTE_YET)
            }
            kube::Error::SerdeError(_) => false,
            _ => true,
        })
}

/// The body (not a Status) a starting apiserver answers for a resource it has no route
/// for yet: a CRD's, until its apiextensions controller installed it after a restart.
const NO_ROUTE_YET: &str = "404 page not found";

/// The invariants, sampled until stopped.
pub struct Sampler {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Samples>,
}

impl Sampler {
    /// Samples quota `ns/quota` and, if given, KarmadaClusterQuota `cluster_quota` (which
    /// selects `ns`), with the reservation batches of namespace `batches`, every `period`,
    /// holding `churn` around each sample.
    pub fn start(
        client: Client,
        (ns, quota): (&str, &str),
        cluster_quota: Option<&str>,
        batches: &str,
        churn: Arc<tokio::sync::Mutex<()>>,
        period: Duration,
    ) -> Sampler {
        let watched = Watched {
            quotas: vec![(ns.to_owned(), quota.to_owned())],
            cluster_quota: cluster_quota.map(str::to_owned),
            batches: batches.to_owned(),
        };
        Sampler::over(client, watched, vec![churn], period)
    }

    /// Samples every quota of `watched` every `period`, holding every lock of `churn`
    /// (one per load) around each sample.
    pub fn over(
        client: Client,
        watched: Watched,
        churn: Vec<Arc<tokio::sync::Mutex<()>>>,
        period: Duration,
    ) -> Sampler {
        let (stop, mut stopped) = watch::channel(false);
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
                let mut held = Vec::with_capacity(churn.len());
                for l in &churn {
                    held.push(l.lock().await);
                }
                let at = started.elapsed();
                match read(&client, &watched).await {
                    Ok(readings) => {
                        out.count += 1;
                        for r in &readings {
                            out.max_pending = out.max_pending.max(r.pending);
                            out.max_effective_milli = out.max_effective_milli.max(r.effective);
                            out.max_need_milli = out.max_need_milli.max(r.need);
                            for v in check(r) {
                                out.violations.push(format!("at {at:.1?}: {v}"));
                            }
                            if let Some(c) = counted_over_hard(r) {
                                out.counted_over_hard.push(format!("at {at:.1?}: {c}"));
                            }
                        }
                    }
                    Err(e) if unanswered(&e) => {
                        out.read_errors.push(format!("at {at:.1?}: {e:#}"));
                    }
                    Err(e) => out.unreadable.push(format!("at {at:.1?}: {e:#}")),
                }
                drop(held);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> anyhow::Error {
        let status = kube::core::Status::failure(message, "").with_code(code);
        anyhow::Error::new(kube::Error::Api(status.boxed())).context("listing the bindings")
    }

    /// Read in a fault run: two samples as a restarted apiserver came back, before it
    /// served the ResourceBinding CRD's route.
    #[test]
    fn a_starting_apiserver_is_unanswered_and_a_refusal_is_not() {
        assert!(unanswered(&api(404, "404 page not found")));
        assert!(unanswered(&api(
            503,
            "the server is currently unable to handle the request"
        )));
        assert!(unanswered(&api(429, "too many requests")));
        assert!(!unanswered(&api(
            404,
            "resourcebindings.work.karmada.io \"x\" not found"
        )));
        assert!(!unanswered(&api(403, "forbidden")));
    }
}
