//! Real Karmada around the tests of `e2e/tests/karmada.rs`: the gate, the fixture (a
//! namespace, the project's webhook and controller, a quota), Deployments and
//! PropagationPolicies as a user applies them, and readers of what Karmada made of them
//! (bindings and their conditions, events, member Deployments) and of the webhook's log.
//!
//! ```text
//!  hack/e2e-karmada.sh ── controlplane.sh up (Karmada's CRDs) ── member1, member2 as
//!       │                 Clusters + one Ready Node each ── karmada-webhook,
//!       │                 karmada-controller-manager, karmada-scheduler on 127.0.0.1
//!       ▼ E2E_CONTROLPLANE_DIR, E2E_KARMADA_DIR
//!  KarmadaSetup::start    E2E_KARMADA_DIR (none: an error) → WebhookSetup (namespace, webhook with
//!       │                 JSON logs, its registration) → Controller (--namespace, members
//!       │                 from Karmada's Cluster objects) → quota `q`, synced and seen
//!       ▼
//!  tests: apply Deployment + PropagationPolicy → the detector CREATEs `<name>-deployment`
//!         → the scheduler UPDATEs spec.clusters → wait_binding / scheduled_condition /
//!         events_on / member_replicas / reviews() and denials() from the webhook's log;
//!         delete_as_gc (no kube-controller-manager runs: the test deletes the binding as
//!         the garbage collector would)
//! ```

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::controller::{Controller, wait_synced};
use crate::setup::{WebhookSetup, step};
use crate::skip;
use crate::webhook::{Rb, Webhook, bindings, quota, wait_until_status_seen};
use crate::{Env, accepts, apply_json, try_wait_for};

/// Variable set by `hack/e2e-karmada.sh` once Karmada's components run against the
/// control plane of `E2E_CONTROLPLANE_DIR`; its value is that directory.
pub const ENV_KARMADA_DIR: &str = "E2E_KARMADA_DIR";
/// The Karmada feature gates the script started Karmada with (`--feature-gates`).
pub const ENV_KARMADA_FEATURE_GATES: &str = "E2E_KARMADA_FEATURE_GATES";

/// Whether Karmada runs with feature gate `gate` set to true. When it does not, the
/// calling test fails unless `KQ_ALLOW_SKIP` names `karmada-gates` (e2e/src/skip.rs);
/// then the skip is recorded and `Ok(false)` returned, and the test returns. Only gates
/// the script set count (Karmada's defaults are not assumed).
pub fn gate_on(gate: &str) -> Result<bool> {
    let gates = std::env::var(ENV_KARMADA_FEATURE_GATES).unwrap_or_default();
    let on = gates
        .split(',')
        .filter_map(|g| g.split_once('='))
        .any(|(name, value)| name.trim() == gate && value.trim().eq_ignore_ascii_case("true"));
    if !on {
        skip::prerequisite(
            skip::KARMADA_GATES,
            format!(
                "Karmada runs without {gate}=true (KARMADA_FEATURE_GATES={gates:?}); \
                 `KARMADA_FEATURE_GATES={gate}=true make e2e-karmada` on a Karmada that has it"
            ),
        )?;
    }
    Ok(on)
}

/// The quota every test makes.
pub const QUOTA: &str = "q";
/// Label the script puts on both member Clusters (a selector that names no cluster).
pub const MEMBER_LABEL: &str = "e2e.karmada-quota/member";
/// The user each Karmada component's requests come as (the script gives each its own).
pub const DETECTOR_USER: &str = "karmada-controller-manager";
/// See [`DETECTOR_USER`].
pub const SCHEDULER_USER: &str = "karmada-scheduler";
/// The member Clusters the script registers.
pub const MEMBERS: [&str; 2] = ["member1", "member2"];
/// How long Karmada may take for one step (detector, scheduler, binding controller,
/// execution to members): seconds normally; its retries back off up to tens of seconds.
pub const KARMADA_TIMEOUT: Duration = Duration::from_secs(90);

/// The directory Karmada runs against; an error when the tests are not run by
/// `hack/e2e-karmada.sh`: these tests are built only with the `karmada` feature, and a
/// Karmada test that finds no Karmada fails instead of passing without a check.
pub fn karmada_dir() -> Result<PathBuf> {
    match std::env::var_os(ENV_KARMADA_DIR) {
        Some(d) if !d.is_empty() => Ok(PathBuf::from(d)),
        _ => bail!(
            "{ENV_KARMADA_DIR} is not set, so no Karmada runs here: `make e2e-karmada` \
             (hack/e2e-karmada.sh) starts Karmada and runs these tests"
        ),
    }
}

/// One test's setting: its namespace, the project's webhook (registered for it) and
/// controller (watching it), and quota [`QUOTA`].
pub struct KarmadaSetup {
    /// Namespace, webhook and registration.
    pub setup: WebhookSetup,
    /// The controller.
    pub controller: Controller,
    webhook_log: PathBuf,
}

impl KarmadaSetup {
    /// Starts the fixture with quota [`QUOTA`] = `hard`; an error when Karmada does not
    /// run (see [`karmada_dir`]).
    pub async fn start(test: &str, hard: &[(&str, &str)]) -> Result<KarmadaSetup> {
        karmada_dir()?;
        let mut setup =
            WebhookSetup::with_webhook(test, Webhook::builder().arg("--log-format=json")).await?;
        let webhook_log = setup.webhook.binary().log_path().to_path_buf();
        let ns = setup.ns().to_owned();
        let controller = Controller::builder()
            .namespace(&ns)
            .start(setup.env)
            .await?;
        step(&format!(
            "[Create] KarmadaQuota {ns}/{QUOTA}: {}",
            hard.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        accepts(&setup.client, &quota(&ns, QUOTA, hard)).await?;
        wait_synced(&setup.client, &ns, QUOTA).await?;
        // The webhook's cache has the controller's first status once a probe is no longer
        // answered `status unknown`.
        wait_until_status_seen(
            &setup.client,
            &Rb::deployment("kq-probe", 1).request("cpu", "1m").json(&ns),
        )
        .await?;
        Ok(KarmadaSetup {
            setup,
            controller,
            webhook_log,
        })
    }

    /// The test's namespace.
    pub fn ns(&self) -> &str {
        self.setup.ns()
    }

    /// A client for the Karmada control plane.
    pub fn client(&self) -> &Client {
        &self.setup.client
    }

    /// The webhook's log file (JSON lines).
    pub fn webhook_log(&self) -> &Path {
        &self.webhook_log
    }

    /// The webhook's review lines about bindings of this namespace, in order.
    pub fn reviews(&self) -> Result<Vec<Review>> {
        Ok(log_lines(&self.webhook_log)?
            .iter()
            .filter_map(Review::parse)
            .filter(|r| r.namespace == self.ns())
            .collect())
    }

    /// The webhook's denial lines about bindings of this namespace, in order.
    pub fn denials(&self) -> Result<Vec<DenialLine>> {
        Ok(log_lines(&self.webhook_log)?
            .iter()
            .filter_map(DenialLine::parse)
            .filter(|d| d.namespace == self.ns())
            .collect())
    }

    /// Unregisters the webhook, deletes the namespace, stops both binaries.
    pub async fn teardown(self) -> Result<()> {
        drop(self.controller);
        self.setup.teardown().await
    }
}

fn log_lines(path: &Path) -> Result<Vec<Value>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .collect())
}

fn field<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line.get("fields")?.get(name)
}

/// A review's attribute: the line's own field, else its `review` span's (the webhook
/// logs the binding, namespace and operation once, on the span).
fn attr_str(line: &Value, name: &str) -> String {
    match field(line, name).or_else(|| line.get("span")?.get(name)) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// The binding's name: the span and the denial lines carry `namespace/name`.
fn binding_name_of(line: &Value) -> String {
    let b = attr_str(line, "binding");
    match b.split_once('/') {
        Some((_, name)) => name.to_owned(),
        None => b,
    }
}

fn field_str(line: &Value, name: &str) -> String {
    match field(line, name) {
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => String::new(),
    }
}

/// One `ResourceBinding review` line of the webhook's log: a request the apiserver sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Review {
    /// The binding's namespace.
    pub namespace: String,
    /// The binding's name.
    pub binding: String,
    /// `Create` or `Update`.
    pub operation: String,
    /// The requesting user.
    pub user: String,
    /// Entries of `spec.clusters` in the new object.
    pub clusters: u64,
    /// `spec.replicas` of the new object.
    pub replicas: i64,
}

impl Review {
    fn parse(line: &Value) -> Option<Review> {
        if field(line, "message")?.as_str()? != "ResourceBinding review"
            || field(line, "dry_run").and_then(Value::as_bool) == Some(true)
        {
            return None;
        }
        Some(Review {
            namespace: attr_str(line, "namespace"),
            binding: binding_name_of(line),
            operation: attr_str(line, "operation"),
            user: field_str(line, "user"),
            clusters: field(line, "clusters").and_then(Value::as_u64)?,
            replicas: field(line, "replicas").and_then(Value::as_i64)?,
        })
    }
}

impl std::fmt::Display for Review {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} by {} (replicas {}, {} clusters)",
            self.operation.to_uppercase(),
            self.binding,
            self.user,
            self.replicas,
            self.clusters
        )
    }
}

/// One `ResourceBinding denied: …` info line of the webhook's log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DenialLine {
    /// The binding's namespace.
    pub namespace: String,
    /// The binding's name.
    pub binding: String,
    /// The quota that refused.
    pub quota: String,
    /// The deny reason (`QuotaExceeded`, …).
    pub reason: String,
    /// The whole log message (`ResourceBinding denied: exceeded quota: …`).
    pub message: String,
    /// `Create` or `Update` (the review span's).
    pub operation: String,
}

impl DenialLine {
    fn parse(line: &Value) -> Option<DenialLine> {
        let message = field(line, "message")?.as_str()?;
        if !message.starts_with("ResourceBinding denied: ")
            || field(line, "dry_run").and_then(Value::as_bool) == Some(true)
        {
            return None;
        }
        Some(DenialLine {
            namespace: attr_str(line, "namespace"),
            binding: binding_name_of(line),
            quota: field_str(line, "quota"),
            reason: field_str(line, "reason"),
            message: message.to_owned(),
            operation: attr_str(line, "operation"),
        })
    }
}

// ---------------------------------------------------------------------------------------
// What a user applies
// ---------------------------------------------------------------------------------------

/// A Deployment `name` of `replicas` replicas, each requesting `cpu`.
pub fn deployment(ns: &str, name: &str, replicas: i32, cpu: &str) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{
                    "name": "app",
                    "image": "registry.invalid/app:1",
                    "resources": {"requests": {"cpu": cpu}}
                }]}
            }
        }
    })
}

/// A PropagationPolicy `name` selecting the Deployments `names` (every Deployment of the
/// namespace when empty) with `placement`.
pub fn policy(ns: &str, name: &str, names: &[&str], placement: Value) -> Value {
    let selectors: Vec<Value> = if names.is_empty() {
        vec![json!({"apiVersion": "apps/v1", "kind": "Deployment"})]
    } else {
        names
            .iter()
            .map(|n| json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": n}))
            .collect()
    };
    json!({
        "apiVersion": "policy.karmada.io/v1alpha1",
        "kind": "PropagationPolicy",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"resourceSelectors": selectors, "placement": placement}
    })
}

/// Placements of the tests.
pub mod placement {
    use serde_json::{Value, json};

    use super::{MEMBER_LABEL, MEMBERS};

    /// Divided over both members by static weights.
    pub fn divided_static(w1: i64, w2: i64) -> Value {
        json!({
            "clusterAffinity": {"clusterNames": MEMBERS},
            "replicaScheduling": {
                "replicaSchedulingType": "Divided",
                "replicaDivisionPreference": "Weighted",
                "weightPreference": {"staticWeightList": [
                    {"targetCluster": {"clusterNames": [MEMBERS[0]]}, "weight": w1},
                    {"targetCluster": {"clusterNames": [MEMBERS[1]]}, "weight": w2},
                ]}
            }
        })
    }

    /// Divided over both members by available replicas (Karmada's resource modeling of
    /// the members' Nodes).
    pub fn divided_dynamic() -> Value {
        json!({
            "clusterAffinity": {"clusterNames": MEMBERS},
            "replicaScheduling": {
                "replicaSchedulingType": "Divided",
                "replicaDivisionPreference": "Weighted",
                "weightPreference": {"dynamicWeight": "AvailableReplicas"}
            }
        })
    }

    /// Duplicated to both members, named: the clusters are known at the detector's CREATE.
    pub fn duplicated_named() -> Value {
        json!({
            "clusterAffinity": {"clusterNames": MEMBERS},
            "replicaScheduling": {"replicaSchedulingType": "Duplicated"}
        })
    }

    /// Duplicated to the members a label selects: the clusters are known only once the
    /// scheduler has run.
    pub fn duplicated_selected() -> Value {
        json!({
            "clusterAffinity": {"labelSelector": {"matchLabels": {MEMBER_LABEL: "true"}}},
            "replicaScheduling": {"replicaSchedulingType": "Duplicated"}
        })
    }
}

/// Applies `obj` (server-side apply) into the test's namespace.
pub async fn apply(c: &Client, ns: &str, obj: Value) -> Result<DynamicObject> {
    apply_json(c, ns, obj).await
}

/// Sets `spec.replicas` of Deployment `name` (a merge patch, as `kubectl scale` does).
pub async fn scale(c: &Client, ns: &str, name: &str, replicas: i32) -> Result<()> {
    Api::<Deployment>::namespaced(c.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": replicas}})),
        )
        .await
        .with_context(|| format!("scaling Deployment {ns}/{name}"))?;
    Ok(())
}

/// Deletes Deployment `name`, then its binding as Kubernetes' garbage collector would
/// (the binding's controller owner is the Deployment; no kube-controller-manager runs
/// here), and waits until the binding is gone (Karmada's binding controller removes its
/// Works and its finalizer).
pub async fn delete_as_gc(c: &Client, ns: &str, name: &str) -> Result<()> {
    Api::<Deployment>::namespaced(c.clone(), ns)
        .delete(name, &DeleteParams::background())
        .await
        .with_context(|| format!("deleting Deployment {ns}/{name}"))?;
    let rb = binding_name(name);
    let api = bindings(c, ns);
    match api.delete(&rb, &DeleteParams::background()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e).with_context(|| format!("deleting ResourceBinding {ns}/{rb}")),
    }
    try_wait_for(
        &format!("ResourceBinding {ns}/{rb} to be gone"),
        KARMADA_TIMEOUT,
        || async { Ok::<_, anyhow::Error>(api.get_opt(&rb).await?.is_none().then_some(())) },
    )
    .await
}

// ---------------------------------------------------------------------------------------
// What Karmada made of it
// ---------------------------------------------------------------------------------------

/// The binding Karmada's detector makes for Deployment `name`.
pub fn binding_name(deployment: &str) -> String {
    format!("{deployment}-deployment")
}

/// `spec.clusters` of a binding: (cluster, replicas), by cluster name (the scheduler
/// writes them in no fixed order).
pub fn placed(rb: &DynamicObject) -> Vec<(String, i64)> {
    let mut out: Vec<(String, i64)> = rb.data["spec"]["clusters"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| {
                    (
                        c["name"].as_str().unwrap_or_default().to_owned(),
                        c["replicas"].as_i64().unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// What the members should run of a binding's workload: the replicas `spec.clusters`
/// gives each member, in [`MEMBERS`] order (`None` where it is not placed), as
/// [`member_replicas`] reads them.
pub fn member_placement(rb: &DynamicObject) -> Vec<Option<i32>> {
    let on = placed(rb);
    MEMBERS
        .iter()
        .map(|m| {
            on.iter()
                .find(|(n, _)| n == m)
                .map(|(_, r)| i32::try_from(*r).unwrap_or(i32::MAX))
        })
        .collect()
}

/// `spec.replicas` of a binding.
pub fn replicas(rb: &DynamicObject) -> i64 {
    rb.data["spec"]["replicas"].as_i64().unwrap_or(0)
}

/// A condition of a binding: (status, reason, message).
pub fn binding_condition(rb: &DynamicObject, type_: &str) -> Option<(String, String, String)> {
    rb.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
            (s("status"), s("reason"), s("message"))
        })
}

/// Whether the scheduler has placed the binding's current spec: `Scheduled=True`, its
/// observed generation is the binding's, and `spec.clusters` is not empty.
pub fn is_scheduled(rb: &DynamicObject) -> bool {
    let observed = rb.data["status"]["schedulerObservedGeneration"].as_i64();
    binding_condition(rb, "Scheduled").is_some_and(|(s, _, _)| s == "True")
        && observed.is_some()
        && observed == rb.metadata.generation
        && !placed(rb).is_empty()
}

/// Polls binding `name` until `pred` holds; the error shows the last object read.
pub async fn wait_binding(
    c: &Client,
    ns: &str,
    name: &str,
    desc: &str,
    pred: impl Fn(&DynamicObject) -> bool,
) -> Result<DynamicObject> {
    let api = bindings(c, ns);
    let last = parking_lot::Mutex::new(None::<DynamicObject>);
    let res = try_wait_for(desc, KARMADA_TIMEOUT, || async {
        let rb = api.get_opt(name).await?;
        let hit = rb.as_ref().is_some_and(&pred);
        *last.lock() = rb.clone();
        Ok::<_, anyhow::Error>(if hit { rb } else { None })
    })
    .await;
    res.map_err(|e| {
        let shown = last
            .lock()
            .take()
            .map(|rb| {
                serde_json::to_string_pretty(
                    &json!({"spec": rb.data["spec"], "status": rb.data["status"]}),
                )
                .unwrap_or_default()
            })
            .unwrap_or_else(|| "(no binding)".to_owned());
        e.context(format!(
            "last state of ResourceBinding {ns}/{name}:\n{shown}"
        ))
    })
}

/// Waits until binding `name` is scheduled ([`is_scheduled`]) and returns it.
pub async fn wait_scheduled(c: &Client, ns: &str, name: &str) -> Result<DynamicObject> {
    wait_binding(
        c,
        ns,
        name,
        &format!("ResourceBinding {ns}/{name} to be scheduled"),
        is_scheduled,
    )
    .await
}

/// One core/v1 event: (type, reason, message, reporting component).
#[derive(Clone, Debug)]
pub struct EventLine {
    /// `Normal` or `Warning`.
    pub type_: String,
    /// The reason.
    pub reason: String,
    /// The message (events.k8s.io `note`).
    pub message: String,
    /// `source.component` or `reportingComponent`.
    pub from: String,
    /// `count`, or `series.count` (1 when neither).
    pub count: i32,
}

impl std::fmt::Display for EventLine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<8} {:<24} (x{}) {:<24} {}",
            self.type_, self.reason, self.count, self.from, self.message
        )
    }
}

/// The events about `kind`/`name` in `ns`, oldest first (core/v1, which also lists the
/// webhook's events.k8s.io/v1 events).
pub async fn events_on(c: &Client, ns: &str, kind: &str, name: &str) -> Result<Vec<EventLine>> {
    let mut list = Api::<Event>::namespaced(c.clone(), ns)
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing events in {ns}"))?
        .items;
    list.retain(|e| {
        e.involved_object.kind.as_deref() == Some(kind)
            && e.involved_object.name.as_deref() == Some(name)
    });
    list.sort_by_key(|e| {
        e.last_timestamp
            .as_ref()
            .map(|t| t.0)
            .or_else(|| e.event_time.as_ref().map(|t| t.0))
    });
    Ok(list
        .into_iter()
        .map(|e| EventLine {
            type_: e.type_.clone().unwrap_or_default(),
            reason: e.reason.clone().unwrap_or_default(),
            message: e.message.clone().unwrap_or_default(),
            from: e
                .reporting_component
                .clone()
                .filter(|s| !s.is_empty())
                .or_else(|| e.source.as_ref().and_then(|s| s.component.clone()))
                .unwrap_or_default(),
            count: e
                .series
                .as_ref()
                .and_then(|s| s.count)
                .or(e.count)
                .unwrap_or(1),
        })
        .collect())
}

/// Waits until an event about `kind`/`name` has `reason` and a message containing
/// `fragment`; returns every event about the object at that moment.
pub async fn wait_event(
    c: &Client,
    ns: &str,
    kind: &str,
    name: &str,
    reason: &str,
    fragment: &str,
) -> Result<Vec<EventLine>> {
    try_wait_for(
        &format!("a {reason} event on {kind} {ns}/{name} containing {fragment:?}"),
        KARMADA_TIMEOUT,
        || async {
            let events = events_on(c, ns, kind, name).await?;
            let hit = events
                .iter()
                .any(|e| e.reason == reason && e.message.contains(fragment));
            Ok::<_, anyhow::Error>(hit.then_some(events))
        },
    )
    .await
}

/// `spec.replicas` of Deployment `ns/name` in each member (`None` where it does not exist),
/// in [`MEMBERS`] order.
pub async fn member_replicas(env: &Env, ns: &str, name: &str) -> Result<Vec<Option<i32>>> {
    let mut out = Vec::new();
    for (i, m) in env.member_clients()?.into_iter().enumerate() {
        let d = Api::<Deployment>::namespaced(m, ns)
            .get_opt(name)
            .await
            .with_context(|| format!("reading Deployment {ns}/{name} in member {}", i + 1))?;
        out.push(d.map(|d| d.spec.and_then(|s| s.replicas).unwrap_or(1)));
    }
    Ok(out)
}

/// Waits until the members run Deployment `ns/name` with `want` replicas each (`None`:
/// absent), in [`MEMBERS`] order.
pub async fn wait_member_replicas(
    env: &Env,
    ns: &str,
    name: &str,
    want: &[Option<i32>],
) -> Result<()> {
    let last = parking_lot::Mutex::new(Vec::new());
    try_wait_for(
        &format!("the members' Deployment {ns}/{name} at {want:?} replicas"),
        KARMADA_TIMEOUT,
        || async {
            let got = member_replicas(env, ns, name).await?;
            let ok = got == want;
            *last.lock() = got;
            Ok::<_, anyhow::Error>(ok.then_some(()))
        },
    )
    .await
    .map_err(|e| {
        let got = last.lock().clone();
        e.context(format!("last seen: {got:?}"))
    })
}

/// `kubectl describe` of Deployment `name` and of its binding (or a line saying there is
/// none), run against the control plane now: the events of both, the binding's placement
/// and its `Scheduled` condition.
pub async fn describe(env: &Env, c: &Client, ns: &str, name: &str) -> Result<String> {
    let mut out = format!("$ kubectl -n {ns} describe deployment {name}\n");
    out += &env
        .kubectl(&["-n", ns, "describe", "deployment", name])
        .await?;
    let rb = binding_name(name);
    out += &format!("\n$ kubectl -n {ns} describe resourcebinding {rb}\n");
    if bindings(c, ns).get_opt(&rb).await?.is_some() {
        out += &env
            .kubectl(&["-n", ns, "describe", "resourcebinding", &rb])
            .await?;
    } else {
        out += "(none: the detector's CREATE was refused)\n";
    }
    Ok(out)
}

/// Milli-cpu of `n` replicas of `cpu_milli` each, as the quota prints it.
pub fn cpu(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn review_and_denial_lines_parse_from_the_webhooks_json_log() {
        let review = json!({"level": "DEBUG", "fields": {
            "message": "ResourceBinding review", "namespace": "ns", "binding": "web-deployment",
            "operation": "Create", "user": "admin", "clusters": 0, "replicas": 3, "dry_run": false}});
        assert_eq!(
            Review::parse(&review).unwrap().to_string(),
            "CREATE web-deployment by admin (replicas 3, 0 clusters)"
        );
        let mut dry = review.clone();
        dry["fields"]["dry_run"] = json!(true);
        assert!(Review::parse(&dry).is_none());
        let denial = json!({"level": "INFO", "fields": {
            "message": "ResourceBinding denied: exceeded quota: q, requested: requests.cpu=1",
            "namespace": "ns", "binding": "web-deployment", "quota": "q",
            "reason": "QuotaExceeded", "dry_run": false}});
        let d = DenialLine::parse(&denial).unwrap();
        assert_eq!(
            (d.quota.as_str(), d.reason.as_str()),
            ("q", "QuotaExceeded")
        );
        assert!(DenialLine::parse(&review).is_none());
    }

    /// The lines as the webhook writes them since its `review` span carries the binding,
    /// namespace and operation (copied from a v1.18.2 run's log).
    #[test]
    fn review_and_denial_lines_read_the_binding_from_the_review_span() {
        let span = json!({"binding": "e2e-ns/web-deployment", "kind": "resourcebinding",
            "namespace": "e2e-ns", "operation": "Update", "name": "review"});
        let review = json!({"level": "DEBUG", "fields": {"message": "ResourceBinding review",
            "user": "karmada-scheduler", "clusters": 2, "replicas": 4, "components": 0,
            "waiting": false, "dry_run": false}, "span": span, "spans": [span]});
        let r = Review::parse(&review).unwrap();
        assert_eq!(
            (r.namespace.as_str(), r.binding.as_str()),
            ("e2e-ns", "web-deployment")
        );
        assert_eq!(
            r.to_string(),
            "UPDATE web-deployment by karmada-scheduler (replicas 4, 2 clusters)"
        );
        let denial = json!({"level": "INFO", "fields": {
            "message": "ResourceBinding denied: exceeded quota: q, requested: requests.cpu=2",
            "namespace": "e2e-ns", "binding": "e2e-ns/web-deployment", "quota": "q",
            "reason": "QuotaExceeded", "code": 403, "dry_run": false, "suppressed": 0},
            "span": span});
        let d = DenialLine::parse(&denial).unwrap();
        assert_eq!(
            (d.namespace.as_str(), d.binding.as_str()),
            ("e2e-ns", "web-deployment")
        );
    }

    #[test]
    fn member_placement_lists_each_members_replicas_in_member_order() {
        let rb: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "w-deployment"},
            "spec": {"clusters": [{"name": "member2", "replicas": 3}]}
        }))
        .unwrap();
        assert_eq!(member_placement(&rb), vec![None, Some(3)]);
    }

    #[test]
    fn policies_select_named_deployments_or_all() {
        let p = policy("ns", "p", &[], placement::duplicated_named());
        assert_eq!(p["spec"]["resourceSelectors"][0].get("name"), None);
        let p = policy("ns", "p", &["a", "b"], placement::divided_static(1, 3));
        assert_eq!(p["spec"]["resourceSelectors"][1]["name"], "b");
        assert_eq!(cpu(1500), "1500m");
        assert_eq!(cpu(2000), "2");
    }
}
