//! Member clusters: what their pods actually request.
//!
//! ```text
//!  Cluster objects (apiEndpoint + secretRef) ─┐ desired_members ─► Members::sync
//!  --member-kubeconfig NAME=PATH ─────────────┘        (start / restart / stop one task each)
//!
//!  task per member:  config (Secret token + caBundle, or kubeconfig)
//!        └─► watch pods (all namespaces, or --namespace; non-terminal) ─► MemberPods: ns → uid → {class, usage}
//!              error ─► Reach::Unreachable, retry with backoff (never a crash)
//!              changes ─► Triggers (only the namespaces touched; all quotas on reach changes)
//! ```
//!
//! A member's pods count as `clusters[].observed` only while it is [`Reach::Reachable`];
//! otherwise it is reported in the `MembersReachable` condition and `observed` is omitted.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Pod, Secret};
use karmada_quota_core::ResourceList;
use karmada_quota_core::status::ObservedPods;
use karmada_quota_core::usage::{PodView, pod_usage};
use karmada_quota_crds::Cluster;
use karmada_quota_crds::convert::list_from_api;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Api, Client, ResourceExt};
use tokio::task::AbortHandle;

use crate::Error;
use crate::args::MemberKubeconfig;
use crate::index::Touched;
use crate::metrics::Metrics;
use crate::triggers::Triggers;

/// Secret data key of the member's bearer token (as Karmada stores it).
pub const SECRET_TOKEN_KEY: &str = "token";
/// Secret data key of the member API server's CA bundle, PEM (as Karmada stores it).
pub const SECRET_CA_KEY: &str = "caBundle";
/// Pods in these phases use nothing; the watch leaves them out server-side.
const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";
/// After this many failed attempts in a row the member's configuration is rebuilt (the
/// Secret may have been rotated).
const REBUILD_AFTER_FAILURES: u32 = 3;

/// Where a member's connection details come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MemberSource {
    /// A Cluster object: API endpoint and a Secret with `token` and `caBundle`.
    Cluster {
        /// `spec.apiEndpoint`.
        endpoint: String,
        /// `spec.secretRef.namespace`.
        secret_namespace: String,
        /// `spec.secretRef.name`.
        secret_name: String,
        /// `spec.insecureSkipTLSVerification`.
        insecure: bool,
    },
    /// `--member-kubeconfig NAME=PATH`.
    Kubeconfig(PathBuf),
}

/// The members to watch: every Cluster with an apiEndpoint and a secretRef, and every
/// `--member-kubeconfig` (which wins over a Cluster of the same name).
pub fn desired_members<'a>(
    clusters: impl IntoIterator<Item = &'a Cluster>,
    flags: &[MemberKubeconfig],
) -> BTreeMap<String, MemberSource> {
    let mut out = BTreeMap::new();
    for c in clusters {
        let spec = &c.spec;
        let (Some(endpoint), Some(secret)) = (spec.api_endpoint.as_ref(), spec.secret_ref.as_ref())
        else {
            continue;
        };
        if endpoint.is_empty() || secret.name.is_empty() {
            continue;
        }
        out.insert(
            c.name_any(),
            MemberSource::Cluster {
                endpoint: endpoint.clone(),
                secret_namespace: secret.namespace.clone(),
                secret_name: secret.name.clone(),
                insecure: spec.insecure_skip_tls_verification,
            },
        );
    }
    for f in flags {
        out.insert(f.name.clone(), MemberSource::Kubeconfig(f.path.clone()));
    }
    out
}

/// A client configuration for a member from Karmada's Secret (`token`, `caBundle`),
/// without connecting.
pub fn config_from_secret(
    cluster: &str,
    endpoint: &str,
    secret: &Secret,
    insecure: bool,
    connect_timeout: Duration,
) -> Result<kube::Config, Error> {
    let err = |message: String| Error::MemberConfig {
        cluster: cluster.to_owned(),
        message,
    };
    let secret_name = format!(
        "{}/{}",
        secret.namespace().unwrap_or_default(),
        secret.name_any()
    );
    let data = secret.data.as_ref();
    let token = data.and_then(|d| d.get(SECRET_TOKEN_KEY)).ok_or_else(|| {
        err(format!(
            "Secret {secret_name} has no {SECRET_TOKEN_KEY:?} key"
        ))
    })?;
    let token = std::str::from_utf8(&token.0)
        .map_err(|_| {
            err(format!(
                "Secret {secret_name}: {SECRET_TOKEN_KEY:?} is not UTF-8"
            ))
        })?
        .trim()
        .to_owned();
    if token.is_empty() {
        return Err(err(format!(
            "Secret {secret_name}: {SECRET_TOKEN_KEY:?} is empty"
        )));
    }
    let uri = endpoint
        .parse()
        .map_err(|e| err(format!("invalid apiEndpoint {endpoint:?}: {e}")))?;
    let mut config = kube::Config::new(uri);
    config.auth_info.token = Some(token.into());
    config.accept_invalid_certs = insecure;
    config.connect_timeout = Some(connect_timeout);
    match data.and_then(|d| d.get(SECRET_CA_KEY)) {
        Some(ca) if !ca.0.is_empty() => {
            let certs: Vec<Vec<u8>> = pem::parse_many(&ca.0)
                .map_err(|e| {
                    err(format!(
                        "Secret {secret_name}: {SECRET_CA_KEY:?} is not PEM: {e}"
                    ))
                })?
                .into_iter()
                .filter(|p| p.tag() == "CERTIFICATE")
                .map(pem::Pem::into_contents)
                .collect();
            if certs.is_empty() {
                return Err(err(format!(
                    "Secret {secret_name}: {SECRET_CA_KEY:?} holds no CERTIFICATE block"
                )));
            }
            config.root_cert = Some(certs);
        }
        _ if insecure => {}
        // No CA: the platform's roots verify the member (like client-go with no caData).
        _ => {}
    }
    Ok(config)
}

/// A client configuration from a kubeconfig file (its current context), without connecting.
pub async fn config_from_kubeconfig(
    cluster: &str,
    path: &std::path::Path,
    connect_timeout: Duration,
) -> Result<kube::Config, Error> {
    let err = |message: String| Error::MemberConfig {
        cluster: cluster.to_owned(),
        message,
    };
    let kc = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| err(format!("cannot read kubeconfig {}: {e}", path.display())))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| err(format!("invalid kubeconfig {}: {e}", path.display())))?;
    config.connect_timeout = Some(connect_timeout);
    Ok(config)
}

/// Whether a member can be read.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", content = "message", rename_all = "camelCase")]
pub enum Reach {
    /// First list in progress: not measured yet, not reported unreachable yet.
    Connecting,
    /// Pods listed and watched.
    Reachable,
    /// The last attempt failed with this error; retried with backoff.
    Unreachable(String),
}

/// One pod, reduced to what quota needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodEntry {
    /// `spec.priorityClassName` (empty = none).
    pub priority_class: String,
    /// core's `pod_usage`.
    pub usage: ResourceList,
}

/// The quota-relevant view of a pod (requests parsed; unparseable values skipped — the
/// API server validated them, so this never happens in practice).
pub fn pod_view(pod: &Pod) -> PodView {
    let parse = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
        r.and_then(|r| r.requests.as_ref())
            .map(parse_lenient)
            .unwrap_or_default()
    };
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    PodView {
        priority_class: spec
            .and_then(|s| s.priority_class_name.clone())
            .unwrap_or_default(),
        containers: spec
            .map(|s| {
                s.containers
                    .iter()
                    .map(|c| parse(c.resources.as_ref()))
                    .collect()
            })
            .unwrap_or_default(),
        init_containers: spec
            .and_then(|s| s.init_containers.as_ref())
            .map(|ics| ics.iter().map(|c| parse(c.resources.as_ref())).collect())
            .unwrap_or_default(),
        init_restartable: spec
            .and_then(|s| s.init_containers.as_ref())
            .map(|ics| {
                ics.iter()
                    .map(|c| c.restart_policy.as_deref() == Some("Always"))
                    .collect()
            })
            .unwrap_or_default(),
        overhead: spec
            .and_then(|s| s.overhead.as_ref())
            .map(parse_lenient)
            .unwrap_or_default(),
        terminal: matches!(phase, Some("Succeeded" | "Failed")),
    }
}

fn parse_lenient(
    map: &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
) -> ResourceList {
    match list_from_api(map, "requests") {
        Ok(l) => l,
        Err(_) => map
            .iter()
            .filter_map(|(k, v)| {
                let one = BTreeMap::from([(k.clone(), v.clone())]);
                list_from_api(&one, "requests").ok()
            })
            .fold(ResourceList::new(), |mut acc, l| {
                acc.0.extend(l.0);
                acc
            }),
    }
}

/// The entry of a pod, or `None` for a terminal pod (it uses nothing).
pub fn pod_entry(pod: &Pod) -> Option<PodEntry> {
    let view = pod_view(pod);
    if view.terminal {
        return None;
    }
    Some(PodEntry {
        priority_class: view.priority_class.clone(),
        usage: pod_usage(&view),
    })
}

/// namespace → pod uid → entry.
type Pods = HashMap<String, HashMap<String, PodEntry>>;

/// The non-terminal pods of one member, fed by its pod watch.
#[derive(Debug, Default)]
pub struct MemberPods {
    pods: Pods,
    init: Option<Pods>,
}

impl MemberPods {
    /// Apply a pod watch event; returns the namespaces whose pods changed. `InitDone`
    /// replaces everything (and touches every namespace that differs).
    pub fn apply_event(&mut self, ev: &Event<Pod>) -> Touched {
        match ev {
            Event::Apply(pod) => {
                let Some((ns, uid)) = pod_key(pod) else {
                    return Touched::new();
                };
                match pod_entry(pod) {
                    Some(entry) => {
                        let by_uid = self.pods.entry(ns.clone()).or_default();
                        if by_uid.get(&uid) == Some(&entry) {
                            return Touched::new();
                        }
                        by_uid.insert(uid, entry);
                        Touched::from([ns])
                    }
                    None => self.remove(&ns, &uid),
                }
            }
            Event::Delete(pod) => match pod_key(pod) {
                Some((ns, uid)) => self.remove(&ns, &uid),
                None => Touched::new(),
            },
            Event::Init => {
                self.init = Some(Pods::new());
                Touched::new()
            }
            Event::InitApply(pod) => {
                if let (Some(buf), Some((ns, uid)), Some(entry)) =
                    (self.init.as_mut(), pod_key(pod), pod_entry(pod))
                {
                    buf.entry(ns).or_default().insert(uid, entry);
                }
                Touched::new()
            }
            Event::InitDone => {
                let Some(new) = self.init.take() else {
                    return Touched::new();
                };
                let mut touched: Touched = self
                    .pods
                    .iter()
                    .filter(|(ns, old)| new.get(*ns) != Some(*old))
                    .map(|(ns, _)| ns.clone())
                    .collect();
                touched.extend(
                    new.iter()
                        .filter(|(ns, p)| !self.pods.contains_key(*ns) && !p.is_empty())
                        .map(|(ns, _)| ns.clone()),
                );
                self.pods = new;
                touched
            }
        }
    }

    fn remove(&mut self, ns: &str, uid: &str) -> Touched {
        let Some(by_uid) = self.pods.get_mut(ns) else {
            return Touched::new();
        };
        let removed = by_uid.remove(uid).is_some();
        if by_uid.is_empty() {
            self.pods.remove(ns);
        }
        if removed {
            Touched::from([ns.to_owned()])
        } else {
            Touched::new()
        }
    }

    /// The pods of `namespace` as (priority class, usage).
    pub fn in_namespace(&self, namespace: &str) -> Vec<(String, ResourceList)> {
        self.pods
            .get(namespace)
            .map(|m| {
                m.values()
                    .map(|e| (e.priority_class.clone(), e.usage.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Number of pods.
    pub fn len(&self) -> usize {
        self.pods.values().map(HashMap::len).sum()
    }

    /// Whether no pod is known.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }
}

fn pod_key(pod: &Pod) -> Option<(String, String)> {
    Some((pod.metadata.namespace.clone()?, pod.metadata.uid.clone()?))
}

/// One member's state.
#[derive(Debug)]
pub struct MemberState {
    /// Whether it can be read.
    pub reach: Reach,
    /// Its non-terminal pods (meaningful while reachable).
    pub pods: MemberPods,
}

impl Default for MemberState {
    fn default() -> Self {
        Self {
            reach: Reach::Connecting,
            pods: MemberPods::default(),
        }
    }
}

/// Every member's state, shared between the member tasks and the reconciler.
#[derive(Clone, Debug, Default)]
pub struct MemberRegistry(Arc<RwLock<BTreeMap<String, MemberState>>>);

impl MemberRegistry {
    /// Pods of `namespace` per member: `None` for a member not (or no longer) reachable.
    pub fn observed_pods(&self, namespace: &str) -> ObservedPods {
        let members = self.0.read().unwrap_or_else(|e| e.into_inner());
        members
            .iter()
            .map(|(name, st)| {
                let pods = (st.reach == Reach::Reachable).then(|| st.pods.in_namespace(namespace));
                (name.clone(), pods)
            })
            .collect()
    }

    /// Members that are unreachable, with their errors, by name.
    pub fn unreachable(&self) -> BTreeMap<String, String> {
        let members = self.0.read().unwrap_or_else(|e| e.into_inner());
        members
            .iter()
            .filter_map(|(name, st)| match &st.reach {
                Reach::Unreachable(e) => Some((name.clone(), e.clone())),
                _ => None,
            })
            .collect()
    }

    /// Every member's reachability.
    pub fn reach(&self) -> BTreeMap<String, Reach> {
        let members = self.0.read().unwrap_or_else(|e| e.into_inner());
        members
            .iter()
            .map(|(n, st)| (n.clone(), st.reach.clone()))
            .collect()
    }

    /// Apply a pod event to `member`; the namespaces touched.
    pub fn apply_pod_event(&self, member: &str, ev: &Event<Pod>) -> Touched {
        let mut members = self.0.write().unwrap_or_else(|e| e.into_inner());
        members
            .get_mut(member)
            .map(|st| st.pods.apply_event(ev))
            .unwrap_or_default()
    }

    /// Set `member`'s reachability; returns whether it changed (an unreachable member
    /// keeps its first error message, so retries do not churn the status).
    pub fn set_reach(&self, member: &str, reach: Reach) -> bool {
        let mut members = self.0.write().unwrap_or_else(|e| e.into_inner());
        let Some(st) = members.get_mut(member) else {
            return false;
        };
        let same = match (&st.reach, &reach) {
            (Reach::Unreachable(_), Reach::Unreachable(_)) => true,
            (a, b) => a == b,
        };
        if !same {
            st.reach = reach;
        }
        !same
    }

    fn insert(&self, member: &str) {
        let mut members = self.0.write().unwrap_or_else(|e| e.into_inner());
        members.insert(member.to_owned(), MemberState::default());
    }

    fn remove(&self, member: &str) {
        let mut members = self.0.write().unwrap_or_else(|e| e.into_inner());
        members.remove(member);
    }

    /// Insert a member in a given state (tests and benchmarks).
    #[doc(hidden)]
    pub fn insert_for_test(&self, member: &str, reach: Reach, pods: impl IntoIterator<Item = Pod>) {
        let mut st = MemberState {
            reach,
            pods: MemberPods::default(),
        };
        for p in pods {
            st.pods.apply_event(&Event::Apply(p));
        }
        let mut members = self.0.write().unwrap_or_else(|e| e.into_inner());
        members.insert(member.to_owned(), st);
    }
}

/// How member tasks connect and retry.
#[derive(Clone, Debug)]
pub struct MemberSettings {
    /// TCP connect timeout, the deadline of a probe, and a third of the first list's.
    pub connect_timeout: Duration,
    /// How often a watched member is probed.
    pub probe_interval: Duration,
    /// Longest wait between attempts.
    pub max_backoff: Duration,
    /// Watch pods of this namespace only (`--namespace`); `None`: all namespaces.
    pub namespace: Option<String>,
}

/// Starts, restarts and stops one watch task per member.
pub struct Members {
    registry: MemberRegistry,
    tasks: Mutex<BTreeMap<String, (MemberSource, AbortHandle)>>,
    control: Client,
    settings: MemberSettings,
    triggers: Triggers,
    metrics: Arc<Metrics>,
}

impl Members {
    /// A manager with no members yet.
    pub fn new(
        registry: MemberRegistry,
        control: Client,
        settings: MemberSettings,
        triggers: Triggers,
        metrics: Arc<Metrics>,
    ) -> Self {
        Self {
            registry,
            tasks: Mutex::new(BTreeMap::new()),
            control,
            settings,
            triggers,
            metrics,
        }
    }

    /// Make the running member tasks match `desired` (new ones started, changed ones
    /// restarted, removed ones stopped and forgotten).
    pub fn sync(&self, desired: &BTreeMap<String, MemberSource>) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        let mut changed = false;
        tasks.retain(|name, (source, handle)| {
            let keep = desired.get(name) == Some(source);
            if !keep {
                tracing::info!(member = %name, "stopping member watch");
                handle.abort();
                self.registry.remove(name);
                self.metrics.remove_member(name);
                changed = true;
            }
            keep
        });
        for (name, source) in desired {
            if tasks.contains_key(name) {
                continue;
            }
            tracing::info!(member = %name, ?source, "starting member watch");
            self.registry.insert(name);
            let task = MemberTask {
                name: name.clone(),
                source: source.clone(),
                registry: self.registry.clone(),
                control: self.control.clone(),
                settings: self.settings.clone(),
                triggers: self.triggers.clone(),
                metrics: self.metrics.clone(),
            };
            let handle = tokio::spawn(task.run()).abort_handle();
            tasks.insert(name.clone(), (source.clone(), handle));
            changed = true;
        }
        if changed {
            self.triggers.all();
        }
    }

    /// Stop every member task.
    pub fn stop(&self) {
        let mut tasks = self.tasks.lock().unwrap_or_else(|e| e.into_inner());
        for (_, (_, handle)) in std::mem::take(&mut *tasks) {
            handle.abort();
        }
    }
}

impl Drop for Members {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Exponential backoff: 1 s, 2 s, 4 s, … up to a maximum.
#[derive(Clone, Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    const MIN: Duration = Duration::from_secs(1);

    /// Start at one second, never above `max`.
    pub fn new(max: Duration) -> Self {
        Self {
            next: Self::MIN.min(max),
            max,
        }
    }

    /// The next wait.
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = (self.next * 2).min(self.max);
        d
    }

    /// Back to the shortest wait.
    pub fn reset(&mut self) {
        self.next = Self::MIN.min(self.max);
    }
}

struct MemberTask {
    name: String,
    source: MemberSource,
    registry: MemberRegistry,
    control: Client,
    settings: MemberSettings,
    triggers: Triggers,
    metrics: Arc<Metrics>,
}

/// Why one watch attempt ended.
enum Ended {
    /// The member could not be reached (or configured): mark it unreachable.
    Unreachable(String),
    /// The stream broke after working; re-list at once.
    Broken,
}

impl MemberTask {
    async fn run(self) {
        let mut backoff = Backoff::new(self.settings.max_backoff);
        let mut failures = 0_u32;
        let mut config: Option<kube::Config> = None;
        loop {
            if config.is_none() || failures >= REBUILD_AFTER_FAILURES {
                failures = failures.min(REBUILD_AFTER_FAILURES - 1);
                match self.config().await {
                    Ok(c) => config = Some(c),
                    Err(e) => {
                        self.unreachable(e.to_string());
                        tokio::time::sleep(backoff.next_delay()).await;
                        continue;
                    }
                }
            }
            let Some(cfg) = config.clone() else { continue };
            let ended = match Client::try_from(cfg) {
                Ok(client) => self.watch(client, &mut backoff).await,
                Err(e) => Ended::Unreachable(format!("cannot build a client: {e}")),
            };
            self.metrics.watch_restarted(&format!("pods/{}", self.name));
            match ended {
                Ended::Unreachable(e) => {
                    failures += 1;
                    self.unreachable(e);
                    tokio::time::sleep(backoff.next_delay()).await;
                }
                Ended::Broken => {
                    failures = 0;
                    tokio::time::sleep(Backoff::MIN).await;
                }
            }
        }
    }

    async fn config(&self) -> Result<kube::Config, Error> {
        match &self.source {
            MemberSource::Kubeconfig(path) => {
                config_from_kubeconfig(&self.name, path, self.settings.connect_timeout).await
            }
            MemberSource::Cluster {
                endpoint,
                secret_namespace,
                secret_name,
                insecure,
            } => {
                let api: Api<Secret> = Api::namespaced(self.control.clone(), secret_namespace);
                let secret = api
                    .get(secret_name)
                    .await
                    .map_err(|e| Error::MemberConfig {
                        cluster: self.name.clone(),
                        message: format!(
                            "cannot read Secret {secret_namespace}/{secret_name}: {e}"
                        ),
                    })?;
                config_from_secret(
                    &self.name,
                    endpoint,
                    &secret,
                    *insecure,
                    self.settings.connect_timeout,
                )
            }
        }
    }

    /// Watch the member's pods until the watch fails.
    async fn watch(&self, client: Client, backoff: &mut Backoff) -> Ended {
        let api: Api<Pod> = match &self.settings.namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        };
        let wc = watcher::Config::default()
            .fields(NON_TERMINAL_PODS)
            .any_semantic();
        let mut stream = watcher(api, wc).boxed();
        // The first list must finish in time, or the member is reported unreachable.
        let first_list = self.settings.connect_timeout.saturating_mul(3);
        let deadline = tokio::time::Instant::now() + first_list;
        let mut synced = false;
        let mut probe = tokio::time::interval(self.settings.probe_interval);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        probe.tick().await; // the first tick is immediate; the watch's list is the first probe
        loop {
            let next = if synced {
                tokio::select! {
                    next = stream.next() => next,
                    _ = probe.tick() => {
                        match tokio::time::timeout(self.settings.connect_timeout, client.apiserver_version()).await {
                            Ok(Ok(_)) => continue,
                            Ok(Err(e)) => return Ended::Unreachable(format!("probe failed: {e}")),
                            Err(_) => {
                                return Ended::Unreachable(format!(
                                    "probe got no answer within {}s",
                                    self.settings.connect_timeout.as_secs()
                                ));
                            }
                        }
                    }
                }
            } else {
                match tokio::time::timeout_at(deadline, stream.next()).await {
                    Ok(n) => n,
                    Err(_) => {
                        return Ended::Unreachable(format!(
                            "no complete pod list within {}s",
                            first_list.as_secs()
                        ));
                    }
                }
            };
            match next {
                None => return Ended::Broken,
                Some(Ok(ev)) => {
                    let done = matches!(ev, Event::InitDone);
                    let touched = self.registry.apply_pod_event(&self.name, &ev);
                    if done {
                        synced = true;
                        backoff.reset();
                        if self.registry.set_reach(&self.name, Reach::Reachable) {
                            tracing::info!(member = %self.name, "member reachable, pods listed");
                            self.metrics.set_member_reachable(&self.name, true);
                            self.triggers.all();
                        }
                    }
                    self.triggers.namespaces(touched);
                }
                // 410 Gone and other server-side watch errors: the watcher re-lists itself.
                Some(Err(watcher::Error::WatchError(status))) => {
                    tracing::debug!(member = %self.name, %status, "member watch error, re-listing");
                }
                Some(Err(
                    e
                    @ (watcher::Error::InitialListFailed(_) | watcher::Error::WatchStartFailed(_)),
                )) => {
                    return Ended::Unreachable(e.to_string());
                }
                Some(Err(e)) => {
                    tracing::info!(member = %self.name, error = %e, "member watch broke, re-listing");
                    return Ended::Broken;
                }
            }
        }
    }

    fn unreachable(&self, error: String) {
        if self
            .registry
            .set_reach(&self.name, Reach::Unreachable(error.clone()))
        {
            tracing::warn!(member = %self.name, %error, "member cluster unreachable; retrying with backoff");
            self.metrics.set_member_reachable(&self.name, false);
            self.triggers.all();
        } else {
            tracing::debug!(member = %self.name, %error, "member cluster still unreachable");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use k8s_openapi::ByteString;

    fn ca() -> String {
        pem::encode(&pem::Pem::new(
            "CERTIFICATE",
            vec![0x30, 0x03, 0x02, 0x01, 0x01],
        ))
    }

    fn secret(data: &[(&str, &[u8])]) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("member1".into()),
                namespace: Some("karmada-cluster".into()),
                ..Default::default()
            },
            data: Some(
                data.iter()
                    .map(|(k, v)| ((*k).to_owned(), ByteString(v.to_vec())))
                    .collect(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn secret_with_token_and_ca_bundle_builds_a_config() {
        let s = secret(&[("token", b"abc.def\n"), ("caBundle", ca().as_bytes())]);
        let c = config_from_secret(
            "member1",
            "https://127.0.0.1:6443",
            &s,
            false,
            Duration::from_secs(3),
        )
        .unwrap();
        assert_eq!(c.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(c.root_cert.as_ref().map(Vec::len), Some(1));
        assert!(!c.accept_invalid_certs);
        assert_eq!(c.connect_timeout, Some(Duration::from_secs(3)));
        assert!(c.auth_info.token.is_some());
    }

    #[test]
    fn insecure_cluster_needs_no_ca() {
        let s = secret(&[("token", b"t")]);
        let c = config_from_secret(
            "m",
            "https://10.0.0.1:6443",
            &s,
            true,
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(c.accept_invalid_certs);
        assert!(c.root_cert.is_none());
    }

    #[test]
    fn bad_secrets_are_named_errors() {
        let no_token = secret(&[("caBundle", ca().as_bytes())]);
        let e = config_from_secret(
            "member1",
            "https://x:1",
            &no_token,
            false,
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("member1") && e.contains("\"token\""), "{e}");
        let bad_ca = secret(&[("token", b"t"), ("caBundle", b"not pem")]);
        let e = config_from_secret(
            "member1",
            "https://x:1",
            &bad_ca,
            false,
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("caBundle"), "{e}");
        let ok = secret(&[("token", b"t")]);
        let e = config_from_secret(
            "member1",
            "not a url at all",
            &ok,
            false,
            Duration::from_secs(1),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("apiEndpoint"), "{e}");
    }

    #[test]
    fn desired_members_take_clusters_with_endpoint_and_secret_and_flags_win() {
        let c1 = mk_cluster(
            "member1",
            Some("https://a:1"),
            Some(("karmada-cluster", "member1")),
        );
        let pull = mk_cluster("member2", None, None);
        let c3 = mk_cluster(
            "member3",
            Some("https://c:1"),
            Some(("karmada-cluster", "member3")),
        );
        let flags = [MemberKubeconfig {
            name: "member3".into(),
            path: "/k3".into(),
        }];
        let d = desired_members([&c1, &pull, &c3], &flags);
        assert_eq!(d.len(), 2);
        assert_eq!(
            d["member1"],
            MemberSource::Cluster {
                endpoint: "https://a:1".into(),
                secret_namespace: "karmada-cluster".into(),
                secret_name: "member1".into(),
                insecure: false,
            }
        );
        assert_eq!(d["member3"], MemberSource::Kubeconfig("/k3".into()));
    }

    #[test]
    fn pod_events_keep_non_terminal_pods_per_namespace() {
        let mut p = MemberPods::default();
        let a = mk_pod("team-a", "a", "uid-a", "", &["500m"], "Running");
        let b = mk_pod("team-a", "b", "uid-b", "batch", &["1"], "Pending");
        let done = mk_pod("team-a", "c", "uid-c", "", &["1"], "Succeeded");
        for ev in [
            Event::Init,
            Event::InitApply(a.clone()),
            Event::InitApply(done),
            Event::InitApply(b.clone()),
        ] {
            assert!(p.apply_event(&ev).is_empty());
        }
        assert_eq!(
            p.apply_event(&Event::InitDone),
            Touched::from(["team-a".to_owned()])
        );
        assert_eq!(p.len(), 2);
        let pods = p.in_namespace("team-a");
        assert_eq!(pods.len(), 2);
        assert!(pods.iter().any(|(class, usage)| {
            class == "batch"
                && usage
                    .get("requests.cpu")
                    .map(ToString::to_string)
                    .as_deref()
                    == Some("1")
        }));
        // Same pod, status change only: nothing touched.
        let mut a2 = a.clone();
        a2.metadata.resource_version = Some("2".into());
        assert!(p.apply_event(&Event::Apply(a2)).is_empty());
        // It finishes: removed.
        let mut a3 = a;
        a3.status.as_mut().unwrap().phase = Some("Succeeded".into());
        assert_eq!(p.apply_event(&Event::Apply(a3)).len(), 1);
        assert_eq!(p.apply_event(&Event::Delete(b)).len(), 1);
        assert!(p.is_empty());
    }

    #[test]
    fn pod_view_reads_requests_sidecars_and_overhead() {
        let mut pod = mk_pod("ns", "p", "u", "high", &["250m", "250m"], "Running");
        let spec = pod.spec.as_mut().unwrap();
        spec.init_containers = Some(vec![mk_container("init", "2"), {
            let mut c = mk_container("sidecar", "100m");
            c.restart_policy = Some("Always".into());
            c
        }]);
        let v = pod_view(&pod);
        assert_eq!(v.priority_class, "high");
        assert_eq!(v.containers.len(), 2);
        assert_eq!(v.init_restartable, vec![false, true]);
        assert!(!v.terminal);
    }

    #[test]
    fn unreachable_members_are_not_observed_and_keep_their_first_error() {
        let reg = MemberRegistry::default();
        reg.insert_for_test(
            "member1",
            Reach::Reachable,
            [mk_pod("team-a", "a", "ua", "", &["1"], "Running")],
        );
        reg.insert_for_test("member2", Reach::Connecting, []);
        let obs = reg.observed_pods("team-a");
        assert_eq!(obs["member1"].as_ref().map(Vec::len), Some(1));
        assert_eq!(obs["member2"], None);
        assert!(reg.set_reach("member2", Reach::Unreachable("connection refused".into())));
        assert!(!reg.set_reach("member2", Reach::Unreachable("timeout".into())));
        assert_eq!(reg.unreachable()["member2"], "connection refused");
        assert!(reg.set_reach("member2", Reach::Reachable));
        assert!(reg.unreachable().is_empty());
    }

    #[test]
    fn backoff_doubles_up_to_the_max_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(5));
        let got: Vec<_> = (0..5).map(|_| b.next_delay().as_secs()).collect();
        assert_eq!(got, [1, 2, 4, 5, 5]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_secs(1));
    }
}
