//! The clients and the operator: what the simulated apiserver is asked to do, step by
//! step — binding creates (each admitted or not by a webhook replica the apiserver picks,
//! retried after an error as a new attempt), scale-ups and scale-downs (UPDATEs), deletes,
//! quota edits, and the faults that are steps of their own (crashes, stalls). After every
//! step and every admission the invariant is checked ([`crate::truth`]).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use karmada_quota_core::decision::Decision;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::{KarmadaClusterQuota, ResourceBinding};
use karmada_quota_webhook::BindingRequest;
use parking_lot::Mutex;
use serde_json::json;

use crate::apiserver::{Shared, lock};
use crate::clock;
use crate::controller::{COUNT_NAME, Controller};
use crate::replica::Replica;
use crate::world::World;

/// Attempts of one client request (the first and retries after errors).
const ATTEMPTS: u32 = 3;

/// A binding of `replicas` replicas of 1 cpu, as the apiserver stores it.
pub fn binding(
    namespace: &str,
    name: &str,
    uid: &str,
    generation: i64,
    replicas: i64,
) -> ResourceBinding {
    serde_json::from_value(json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid, "generation": generation},
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "namespace": namespace},
            "replicas": replicas,
            "replicaRequirements": {"resourceRequest": {"cpu": "1", "memory": "64Mi"}}
        }
    }))
    .expect("a binding")
}

fn charge(rb: &ResourceBinding) -> BindingCharge {
    BindingCharge::compute(&rb.spec, Some(COUNT_NAME))
}

/// How a client request ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Allowed.
    Allowed,
    /// Denied, with the message.
    Denied(String),
    /// Failed (an error the client retries).
    Failed(String),
}

impl Answer {
    fn is_final(&self) -> bool {
        !matches!(self, Answer::Failed(_))
    }
}

/// The processes of a run and what its clients have in flight.
pub struct Sim {
    /// The run.
    pub world: Arc<World>,
    replicas: Mutex<Vec<(u32, Option<Replica>)>>,
    /// The leader's slot: the newest incarnation number, and the leader (`None` while the
    /// lease is free).
    controller: Mutex<(u32, Option<Controller>)>,
    /// The standby controller (with `Config::standby`): its watches run; it takes the
    /// lease when the leader crashes or is deposed.
    standby: Mutex<Option<Controller>>,
    cluster_log: Shared<KarmadaClusterQuota>,
    /// Bindings (namespace/name) with a request in flight.
    busy: Mutex<BTreeSet<String>>,
    next: AtomicU64,
    /// The namespaces, one quota `compute` each.
    pub namespaces: Vec<String>,
    /// The namespaces clients leave alone: a late quota not created yet, or not in force
    /// yet (`Config::late_quota`, `Config::early_use`).
    pending: Mutex<BTreeSet<String>>,
    /// The namespaces whose quota not every running replica holds yet.
    unheld: Mutex<BTreeSet<String>>,
}

impl Sim {
    /// Start every replica and the controller; the quotas of `pending` are not in force
    /// yet.
    pub fn start(
        world: Arc<World>,
        namespaces: Vec<String>,
        pending: BTreeSet<String>,
    ) -> Arc<Self> {
        let sim = Arc::new(Self {
            replicas: Mutex::new(Vec::new()),
            controller: Mutex::new((0, None)),
            standby: Mutex::new(None),
            cluster_log: Shared::default(),
            busy: Mutex::default(),
            next: AtomicU64::new(0),
            namespaces,
            unheld: Mutex::new(pending.clone()),
            pending: Mutex::new(pending),
            world,
        });
        for id in 0..sim.world.config.replicas {
            let r = Replica::start(&sim.world, id, 0, &sim.cluster_log);
            lock(&sim.replicas).push((0, Some(r)));
        }
        *lock(&sim.controller) = (0, Some(Controller::start(&sim.world, 0, true)));
        if sim.world.config.standby == Some(true) {
            *lock(&sim.standby) = Some(Controller::start(&sim.world, 1, false));
            lock(&sim.controller).0 = 1;
        }
        sim
    }

    /// The namespaces whose quota is in force (all of them, unless one is created late).
    pub fn in_force(&self) -> Vec<String> {
        let pending = lock(&self.pending);
        self.namespaces
            .iter()
            .filter(|ns| !pending.contains(*ns))
            .cloned()
            .collect()
    }

    /// The namespaces whose quota never came into force.
    pub fn never_in_force(&self) -> Vec<String> {
        lock(&self.unheld).iter().cloned().collect()
    }

    /// The operator creates `quota` (of `hard` cpu) over `namespace` at `at_ms`; it is in
    /// force once every running replica's cache holds it: from then on the truth checks
    /// `namespace` and clients use it. With `Config::early_use`, the truth checks it and
    /// clients use it from its creation on, and a binding a replica admits without
    /// holding it while it is not in force is left out of the bound (`Truth::admitted`).
    pub async fn create_late_quota(
        self: Arc<Self>,
        namespace: String,
        quota: karmada_quota_crds::KarmadaQuota,
        hard: i64,
        at_ms: u64,
    ) {
        tokio::time::sleep(Duration::from_millis(at_ms)).await;
        self.world.api.create_quota(quota);
        self.world.trace(format!(
            "operator: created {namespace}/compute, hard = {hard} cpu"
        ));
        if self.world.config.early_use == Some(true) {
            lock(&self.world.truth).quota(&namespace, hard);
            lock(&self.pending).remove(&namespace);
        }
        loop {
            let held = lock(&self.replicas)
                .iter()
                .all(|(_, r)| r.as_ref().is_none_or(|r| r.holds_quota(&namespace)));
            if held {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        if self.world.config.early_use != Some(true) {
            lock(&self.world.truth).quota(&namespace, hard);
            lock(&self.pending).remove(&namespace);
        }
        lock(&self.unheld).remove(&namespace);
        self.world.trace(format!(
            "{namespace}/compute in force: every running replica holds it"
        ));
    }

    fn fresh(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst)
    }

    /// The replica the apiserver calls (`None`: it is down).
    fn route(&self) -> (usize, Option<Replica>) {
        let n = self.world.config.replicas as u64;
        let id = self.world.rng(|r| r.below(n)) as usize;
        (id, lock(&self.replicas)[id].1.clone())
    }

    /// Ask a replica to review `request`: its answer, or an error the client retries;
    /// with whether the replica lacked the namespace's quota when asked while not every
    /// replica held it (an admission before the quota, `Truth::admitted`).
    async fn review(&self, request: &BindingRequest) -> (Result<Decision, String>, bool) {
        let (id, replica) = self.route();
        let Some(r) = replica else {
            return (Err(format!("replica r{id} is down")), false);
        };
        let before_quota =
            lock(&self.unheld).contains(&request.namespace) && !r.holds_quota(&request.namespace);
        let answer = match r.review(request.clone()).await {
            Some(answer) => answer,
            None => Err(format!("{} crashed during the review", r.name)),
        };
        (answer, before_quota)
    }

    /// One client request for `rb` (`old`: the stored one), stored once allowed.
    async fn request(&self, rb: &ResourceBinding, old: Option<&ResourceBinding>) -> Answer {
        let (ns, name) = (
            rb.metadata.namespace.clone().unwrap_or_default(),
            rb.metadata.name.clone().unwrap_or_default(),
        );
        let uid = rb.metadata.uid.clone().unwrap_or_default();
        let generation = rb.metadata.generation.unwrap_or(1);
        let request = BindingRequest {
            namespace: ns.clone(),
            name: name.clone(),
            uid: uid.clone(),
            generation,
            old: old.map(charge),
            new: charge(rb),
        };
        let cpu = rb.spec.replicas.into();
        let sent = clock::now_ms();
        let (answer, before_quota) = self.review(&request).await;
        let what = format!("{ns}/{name} gen {generation} ({cpu} cpu, uid {uid})");
        match answer {
            Ok(Decision::Allow(_)) => {
                let before = if before_quota {
                    " by a replica without its quota"
                } else {
                    ""
                };
                self.world.trace(format!("client: {what} allowed{before}"));
                let violation = lock(&self.world.truth).admitted(
                    (&ns, &name, &uid),
                    generation,
                    cpu,
                    (sent, before_quota),
                );
                if let Some(v) = violation {
                    self.world.trace(v);
                }
                self.store(rb).await;
                Answer::Allowed
            }
            Ok(Decision::Deny(d)) => {
                self.world
                    .trace(format!("client: {what} denied: {}", d.message));
                Answer::Denied(d.message)
            }
            Err(e) => {
                self.world.trace(format!("client: {what} failed: {e}"));
                Answer::Failed(e)
            }
        }
    }

    /// The apiserver stores an allowed binding — or, now and then, another plugin refuses it.
    async fn store(&self, rb: &ResourceBinding) {
        let ms = self.world.rng(|r| r.between(1, 200));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let uid = rb.metadata.uid.clone().unwrap_or_default();
        let generation = rb.metadata.generation.unwrap_or(1);
        if self.world.fault(self.world.faults.dropped, 60) {
            self.world.trace(format!(
                "apiserver: {uid} gen {generation} not stored (injected)"
            ));
            lock(&self.world.truth).not_stored(&uid, generation);
            return;
        }
        self.world.api.put_binding(rb.clone());
    }

    /// A client creates a binding in `ns` (each attempt a new uid).
    pub async fn create(self: Arc<Self>, ns: String, replicas: i64) {
        let name = format!("rb-{}", self.fresh());
        let key = format!("{ns}/{name}");
        lock(&self.busy).insert(key.clone());
        for attempt in 0..ATTEMPTS {
            let uid = format!("u{}", self.fresh());
            let rb = binding(&ns, &name, &uid, 1, replicas);
            if self.request(&rb, None).await.is_final() {
                break;
            }
            if attempt + 1 < ATTEMPTS {
                let ms = self.world.rng(|r| r.between(100, 500));
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
        lock(&self.busy).remove(&key);
    }

    /// One create of a 1-cpu binding in `ns` (the liveness probe).
    pub async fn probe(&self, ns: &str) -> Answer {
        let n = self.fresh();
        let rb = binding(ns, &format!("probe-{n}"), &format!("u{n}"), 1, 1);
        self.request(&rb, None).await
    }

    /// A stored binding no request is in flight for.
    fn idle_binding(&self) -> Option<ResourceBinding> {
        let busy = lock(&self.busy).clone();
        let stored: Vec<ResourceBinding> = self
            .world
            .api
            .bindings()
            .into_iter()
            .filter(|rb| !busy.contains(&crate::apiserver::key_of(&rb.metadata)))
            .collect();
        (!stored.is_empty()).then(|| self.world.rng(|r| r.pick(&stored).clone()))
    }

    /// A client scales a stored binding to `replicas` (an UPDATE: next generation).
    pub async fn scale(self: Arc<Self>, replicas: i64) {
        let Some(old) = self.idle_binding() else {
            return;
        };
        let key = crate::apiserver::key_of(&old.metadata);
        lock(&self.busy).insert(key.clone());
        let (ns, name) = (
            old.metadata.namespace.clone().unwrap_or_default(),
            old.metadata.name.clone().unwrap_or_default(),
        );
        let uid = old.metadata.uid.clone().unwrap_or_default();
        let generation = old.metadata.generation.unwrap_or(1) + 1;
        let rb = binding(&ns, &name, &uid, generation, replicas);
        for attempt in 0..ATTEMPTS {
            if self.request(&rb, Some(&old)).await.is_final() {
                break;
            }
            if attempt + 1 < ATTEMPTS {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        lock(&self.busy).remove(&key);
    }

    /// A client deletes a stored binding.
    pub fn delete(&self) {
        let Some(rb) = self.idle_binding() else {
            return;
        };
        let (ns, name) = (
            rb.metadata.namespace.clone().unwrap_or_default(),
            rb.metadata.name.clone().unwrap_or_default(),
        );
        if self.world.api.delete_binding(&ns, &name).is_some() {
            let uid = rb.metadata.uid.clone().unwrap_or_default();
            self.world
                .trace(format!("client: deleted {ns}/{name} (uid {uid})"));
            lock(&self.world.truth).deleted(&uid);
        }
    }

    /// The quota owner changes `hard` of one quota by -2..=+2 cpu (at least 1).
    pub fn edit_quota(&self) {
        let namespaces = self.in_force();
        let ns = self.world.rng(|r| r.pick(&namespaces).clone());
        let delta = self.world.rng(|r| r.between(0, 4)) as i64 - 2;
        let hard = (lock(&self.world.truth).hard(&ns) + delta).max(1);
        self.world.api.edit_quota(&ns, "compute", |q| {
            q.spec
                .hard
                .insert("requests.cpu".into(), k8s_quantity(hard));
        });
        lock(&self.world.truth).hard_changed(&ns, hard, clock::now_ms());
        self.world
            .trace(format!("operator: {ns}/compute hard = {hard} cpu"));
    }

    /// Crash replica `id`, and restart it after a while.
    pub async fn crash_replica(self: Arc<Self>, id: usize) {
        let Some(r) = lock(&self.replicas)[id].1.take() else {
            return;
        };
        r.crash();
        self.world.trace(format!("{}: crashed (injected)", r.name));
        let ms = self.world.rng(|r| r.between(100, 2_000));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let incarnation = lock(&self.replicas)[id].0 + 1;
        let fresh = Replica::start(&self.world, id, incarnation, &self.cluster_log);
        lock(&self.replicas)[id] = (incarnation, Some(fresh));
    }

    /// Crash the controller, and restart it after a while. With a standby: the leader
    /// crashes or is deposed (alive, its lease lost and its watches silent for 1–6 s),
    /// and after the lease's expiry the
    /// standby takes the lease; the deposed leader, or a new incarnation, is the standby.
    pub async fn crash_controller(self: Arc<Self>) {
        let Some(c) = lock(&self.controller).1.take() else {
            return;
        };
        let standby = self.world.config.standby == Some(true);
        let deposed = standby && self.world.rng(|r| r.chance(500));
        if deposed {
            // Cut off from the apiserver, as a leader that cannot renew is: its watches
            // fall silent too.
            let ms = self.world.rng(|r| r.between(1_000, 6_000));
            c.stall.until(clock::now_ms() + ms);
            c.lose_lease();
        } else {
            c.crash();
            self.world.trace(format!("{}: crashed (injected)", c.name));
        }
        let ms = self.world.rng(|r| r.between(100, 3_000));
        tokio::time::sleep(Duration::from_millis(ms)).await;
        let incarnation = lock(&self.controller).0 + 1;
        if !standby {
            *lock(&self.controller) = (
                incarnation,
                Some(Controller::start(&self.world, incarnation, true)),
            );
            return;
        }
        let Some(next) = lock(&self.standby).take() else {
            return;
        };
        next.take_lease();
        let (incarnation, standby) = if deposed {
            (incarnation - 1, c)
        } else {
            (
                incarnation,
                Controller::start(&self.world, incarnation, false),
            )
        };
        *lock(&self.controller) = (incarnation, Some(next));
        *lock(&self.standby) = Some(standby);
    }

    /// Silence every watch of one process (a replica or the controller) for 1–6 s.
    pub fn stall(&self) {
        let standby = u64::from(self.world.config.standby == Some(true));
        let n = self.world.config.replicas as u64 + 1 + standby;
        let which = self.world.rng(|r| r.below(n)) as usize;
        let ms = self.world.rng(|r| r.between(1_000, 6_000));
        let until = clock::now_ms() + ms;
        let stalled = if which < self.world.config.replicas {
            lock(&self.replicas)[which].1.as_ref().map(|r| {
                r.stall.until(until);
                r.name.clone()
            })
        } else if which == self.world.config.replicas {
            lock(&self.controller).1.as_ref().map(|c| {
                c.stall.until(until);
                c.name.clone()
            })
        } else {
            lock(&self.standby).as_ref().map(|c| {
                c.stall.until(until);
                c.name.clone()
            })
        };
        if let Some(name) = stalled {
            self.world
                .trace(format!("{name}: watches stall for {ms} ms (injected)"));
        }
    }

    /// What every replica counts for `namespace`'s quota.
    pub fn describe(&self, namespace: &str) -> Vec<String> {
        lock(&self.replicas)
            .iter()
            .filter_map(|(_, r)| r.as_ref().map(|r| r.describe(namespace)))
            .collect()
    }

    /// Whether every process is up.
    pub fn all_up(&self) -> bool {
        lock(&self.replicas).iter().all(|(_, r)| r.is_some()) && lock(&self.controller).1.is_some()
    }
}

/// `cpu` whole cpus as a quantity.
pub fn k8s_quantity(cpu: i64) -> k8s_openapi::apimachinery::pkg::api::resource::Quantity {
    k8s_openapi::apimachinery::pkg::api::resource::Quantity(cpu.to_string())
}
