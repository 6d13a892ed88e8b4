//! Replicated webhooks and controllers on a control plane of a test's own, and a seeded
//! loop of faults against them: processes killed and started again, the network between a
//! replica and the apiserver cut and restored, the apiserver restarted (etcd kept).
//!
//! ```text
//!  apiserver ──▶ Service (127.0.0.1) ──▶ webhook 0 │ 1 │ 2     (a killed one is taken out
//!                                                             of the endpoints; back once
//!                                                             ready, on the same port)
//!  webhook i ───▶ TcpProxy i ──┐
//!  controller j ▶ TcpProxy j ──┴──▶ apiserver 0 ──▶ etcd      (one Lease: one leader)
//!
//!  Chaos::run(plan)   every kind once (in a seeded order), then seeded picks (and an
//!                     apiserver restart every plan.apiserver_every), until
//!                     plan.duration or plan.max_faults: inject, hold (seeded, bounded),
//!                     undo (and wait until the replica is ready again), pause; one fault
//!                     at a time, each line of the timeline stamped
//!    KillWebhook(i)       SIGKILL; started again after the hold
//!    KillLeader           the controller whose kq_controller_leader is 1 (else 0) SIGKILLed
//!    CutWebhook(i)        its proxy stopped (open connections cut, new ones refused)
//!    CutController(j)     likewise, for a controller (the leader loses the apiserver)
//!    RestartApiserver     OwnControlPlane::restart_apiserver(0): SIGTERM, same flags again
//! ```
//!
//! Every replica reaches the apiserver through its own proxy, so a cut leaves the test's
//! own client (and the other replicas) untouched.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::controller::{
    Controller, LEASE_NAMESPACE, READY_TIMEOUT as CONTROLLER_READY, ensure_namespace,
};
use crate::own_controlplane::OwnControlPlane;
use crate::proxy::{TcpProxy, kubeconfig_via, server_addr};
use crate::service::Service;
use crate::webhook::{READY_TIMEOUT as WEBHOOK_READY, Webhook};
use crate::{Env, free_port};

/// One fault of the loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Webhook replica `i` killed.
    KillWebhook(usize),
    /// The controller leader killed.
    KillLeader,
    /// Webhook replica `i` cut from the apiserver.
    CutWebhook(usize),
    /// Controller replica `j` cut from the apiserver.
    CutController(usize),
    /// The apiserver restarted.
    RestartApiserver,
}

/// How many replicas, with which flags.
#[derive(Clone, Debug)]
pub struct Replicas {
    /// Webhook replicas.
    pub webhooks: usize,
    /// Controller replicas (one Lease).
    pub controllers: usize,
    /// Flags every webhook gets (after the fixture's).
    pub webhook_args: Vec<String>,
    /// Flags every controller gets (after the fixture's).
    pub controller_args: Vec<String>,
}

/// The loop's bounds; every duration is drawn from the seed within its range.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The seed (printed, so a run can be repeated).
    pub seed: u64,
    /// Faults start no later than this after the loop began.
    pub duration: Duration,
    /// At most this many faults.
    pub max_faults: usize,
    /// How long a fault lasts (min, max).
    pub hold: (Duration, Duration),
    /// The pause after a fault is undone (min, max).
    pub pause: (Duration, Duration),
    /// Time between two apiserver restarts (after the first, which comes in the seeded
    /// order of the first round).
    pub apiserver_every: Duration,
}

/// A seeded generator (`fastrand`'s): the same seed, the same faults.
#[derive(Clone, Debug)]
pub struct Seeded(fastrand::Rng);

impl Seeded {
    /// From `seed`.
    pub fn new(seed: u64) -> Seeded {
        Seeded(fastrand::Rng::with_seed(seed))
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0.u64(..)
    }

    /// A number below `n` (n > 0).
    pub fn below(&mut self, n: usize) -> usize {
        self.0.usize(0..n)
    }

    /// A duration within `[lo, hi]`, in whole milliseconds.
    pub fn within(&mut self, (lo, hi): (Duration, Duration)) -> Duration {
        let span = hi.saturating_sub(lo).as_millis() as u64;
        lo + Duration::from_millis(self.0.u64(0..=span))
    }
}

/// How an injected fault is undone.
#[derive(Clone, Copy, Debug)]
enum Undo {
    StartWebhook(usize),
    ReconnectWebhook(usize),
    StartController(usize),
    ReconnectController(usize),
    Nothing,
}

struct Slot<T> {
    proxy: TcpProxy,
    kubeconfig: PathBuf,
    process: Option<T>,
}

/// A proxy in front of the apiserver and a kubeconfig through it, `<dir>/kubeconfig-<label>`.
async fn slot<T>(env: &Env, dir: &Path, apiserver: SocketAddr, label: &str) -> Result<Slot<T>> {
    let proxy = TcpProxy::start(apiserver).await?;
    let kubeconfig = dir.join(format!("kubeconfig-{label}"));
    kubeconfig_via(env.kubeconfig(), &proxy.url(), &kubeconfig)?;
    Ok(Slot {
        proxy,
        kubeconfig,
        process: None,
    })
}

/// The replicas, their proxies and the Service in front of the webhooks; see the module
/// docs. Every process is killed when dropped.
pub struct Chaos<'a> {
    cp: &'a OwnControlPlane,
    spec: Replicas,
    lease: String,
    service: Service,
    webhook_ports: Vec<u16>,
    webhooks: Vec<Slot<Webhook>>,
    controllers: Vec<Slot<Controller>>,
    started: Instant,
    timeline: Vec<(Duration, String)>,
}

impl<'a> Chaos<'a> {
    /// Starts every replica behind its proxy and waits until each is ready.
    pub async fn start(cp: &'a OwnControlPlane, spec: Replicas) -> Result<Chaos<'a>> {
        let env = cp.env();
        let dir = env.log_dir().join("chaos");
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let apiserver = server_addr(env.kubeconfig())?;
        ensure_namespace(&env.client()?, LEASE_NAMESPACE).await?;
        let mut chaos = Chaos {
            cp,
            lease: format!("kq-chaos-{}", std::process::id()),
            service: Service::start(Vec::new()).await?,
            webhook_ports: Vec::new(),
            webhooks: Vec::new(),
            controllers: Vec::new(),
            started: Instant::now(),
            timeline: Vec::new(),
            spec,
        };
        for i in 0..chaos.spec.webhooks {
            chaos
                .webhooks
                .push(slot(env, &dir, apiserver, &format!("webhook-{i}")).await?);
            chaos.webhook_ports.push(free_port()?);
            chaos.start_webhook(i).await?;
        }
        for j in 0..chaos.spec.controllers {
            chaos
                .controllers
                .push(slot(env, &dir, apiserver, &format!("controller-{j}")).await?);
            chaos.start_controller(j).await?;
        }
        Ok(chaos)
    }

    /// The control plane's configuration.
    pub fn env(&self) -> &Env {
        self.cp.env()
    }

    /// `https://<Service address>`: the URL to register the webhooks at.
    pub fn url(&self) -> String {
        format!("https://{}", self.service.addr())
    }

    /// The running webhooks (for [`crate::webhook::wait_called`]).
    pub fn webhooks(&self) -> Vec<&Webhook> {
        self.webhooks
            .iter()
            .filter_map(|s| s.process.as_ref())
            .collect()
    }

    /// What happened, since [`Chaos::start`].
    pub fn timeline(&self) -> &[(Duration, String)] {
        &self.timeline
    }

    /// Since [`Chaos::start`].
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    fn mark(&mut self, what: String) {
        let at = self.started.elapsed();
        eprintln!("    [{at:>7.1?}] {what}");
        self.timeline.push((at, what));
    }

    fn set_endpoints(&self) {
        let up = self
            .webhooks
            .iter()
            .zip(&self.webhook_ports)
            .filter(|(s, _)| s.process.is_some())
            .map(|(_, p)| SocketAddr::from(([127, 0, 0, 1], *p)))
            .collect();
        self.service.set_endpoints(up);
    }

    async fn start_webhook(&mut self, i: usize) -> Result<()> {
        let slot = &self.webhooks[i];
        let mut b = Webhook::builder()
            .port(self.webhook_ports[i])
            .arg("--kubeconfig")
            .arg(slot.kubeconfig.display().to_string());
        for a in &self.spec.webhook_args {
            b = b.arg(a);
        }
        let mut w = b.spawn(self.cp.env()).await?;
        w.wait_until("/readyz", WEBHOOK_READY)
            .await
            .with_context(|| format!("webhook {i} ready"))?;
        self.webhooks[i].process = Some(w);
        self.set_endpoints();
        Ok(())
    }

    async fn start_controller(&mut self, j: usize) -> Result<()> {
        let mut b = Controller::builder()
            .kubeconfig(&self.controllers[j].kubeconfig)
            .lease_name(&self.lease)
            .clusters_from_api(false);
        for a in &self.spec.controller_args {
            b = b.arg(a);
        }
        let mut c = b.spawn(self.cp.env())?;
        c.wait_ready(CONTROLLER_READY)
            .await
            .with_context(|| format!("controller {j} ready"))?;
        self.controllers[j].process = Some(c);
        Ok(())
    }

    /// The controller that says it leads, if any.
    async fn leader(&self) -> Option<usize> {
        for (j, s) in self.controllers.iter().enumerate() {
            if let Some(c) = &s.process
                && c.is_leader().await.unwrap_or(false)
            {
                return Some(j);
            }
        }
        None
    }

    /// Injects `fault`; how to undo it and what it did.
    async fn inject(&mut self, fault: Fault) -> Result<(Undo, String)> {
        Ok(match fault {
            Fault::KillWebhook(i) => {
                if let Some(w) = self.webhooks[i].process.take() {
                    self.set_endpoints();
                    w.kill().await?;
                }
                (Undo::StartWebhook(i), format!("webhook {i} killed"))
            }
            Fault::KillLeader => {
                let j = self.leader().await.unwrap_or(0);
                if let Some(c) = self.controllers[j].process.take() {
                    c.kill().await?;
                }
                (
                    Undo::StartController(j),
                    format!("controller {j} (the leader) killed"),
                )
            }
            Fault::CutWebhook(i) => {
                self.webhooks[i].proxy.stop().await;
                (
                    Undo::ReconnectWebhook(i),
                    format!("webhook {i} cut from the apiserver"),
                )
            }
            Fault::CutController(j) => {
                self.controllers[j].proxy.stop().await;
                let what = format!("controller {j} cut from the apiserver");
                (Undo::ReconnectController(j), what)
            }
            Fault::RestartApiserver => (Undo::Nothing, "nothing".to_owned()),
        })
    }

    /// Undoes an injected fault, waiting until the replica is ready again.
    async fn undo(&mut self, undo: Undo) -> Result<()> {
        match undo {
            Undo::StartWebhook(i) => self.start_webhook(i).await,
            Undo::ReconnectWebhook(i) => self.webhooks[i].proxy.start_again().await,
            Undo::StartController(j) => self.start_controller(j).await,
            Undo::ReconnectController(j) => self.controllers[j].proxy.start_again().await,
            Undo::Nothing => Ok(()),
        }
    }

    fn kinds(&self) -> Vec<Fault> {
        let mut all = vec![Fault::KillLeader, Fault::RestartApiserver];
        all.extend((0..self.webhooks.len()).map(Fault::KillWebhook));
        all.extend((0..self.webhooks.len()).map(Fault::CutWebhook));
        all.extend((0..self.controllers.len()).map(Fault::CutController));
        all
    }

    /// Runs the fault loop of `plan` (see the module docs); the faults injected, in order.
    pub async fn run(&mut self, plan: &Plan) -> Result<Vec<Fault>> {
        let mut rng = Seeded::new(plan.seed);
        let kinds = self.kinds();
        // Every kind once first, in a seeded order.
        let mut first = kinds.clone();
        for k in (1..first.len()).rev() {
            first.swap(k, rng.below(k + 1));
        }
        let began = Instant::now();
        let mut last_restart: Option<Instant> = None;
        let mut injected = Vec::new();
        self.mark(format!("fault loop begins (seed {})", plan.seed));
        while began.elapsed() < plan.duration && injected.len() < plan.max_faults {
            let due = last_restart.is_some_and(|t| t.elapsed() >= plan.apiserver_every);
            let mut fault = match first.get(injected.len()) {
                Some(f) => *f,
                None if due => Fault::RestartApiserver,
                None => kinds[rng.below(kinds.len())],
            };
            if fault == Fault::RestartApiserver && last_restart.is_some() && !due {
                fault = Fault::KillLeader;
            }
            let hold = rng.within(plan.hold);
            let pause = rng.within(plan.pause);
            self.one(fault, hold).await?;
            if fault == Fault::RestartApiserver {
                last_restart = Some(Instant::now());
            }
            injected.push(fault);
            tokio::time::sleep(pause).await;
        }
        self.mark(format!("fault loop ends: {} faults", injected.len()));
        Ok(injected)
    }

    /// One fault: injected, held for `hold`, undone (the replica ready again).
    pub async fn one(&mut self, fault: Fault, hold: Duration) -> Result<()> {
        if fault == Fault::RestartApiserver {
            self.mark("apiserver: SIGTERM, started again (etcd kept)".to_owned());
            let away = self.cp.restart_apiserver(0).await?;
            self.mark(format!("apiserver serves again after {away:.1?}"));
            return Ok(());
        }
        let (undo, what) = self.inject(fault).await?;
        self.mark(format!("{what}, for {hold:.1?}"));
        tokio::time::sleep(hold).await;
        self.undo(undo)
            .await
            .with_context(|| format!("undoing {what}"))?;
        self.mark(format!("undone: {what}"));
        Ok(())
    }
}
