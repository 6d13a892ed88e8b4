//! What one status write costs the apiserver, against what one create costs it (P1's
//! cost model `1 / (1 + w / (k·c))`).
//!
//! Against an apiserver with the project's CRDs and *no* webhook registered, runs cells of
//! `ops` operations each, in rounds, and charges every cell the CPU time the apiserver and
//! etcd processes spent during it (`/proc/<pid>/stat` utime + stime), less their idle rate:
//!
//! ```text
//!  create        ResourceBinding creates of kq-load's shape (1 replica, 1m cpu)       c
//!  put:N         KarmadaQuota status PUTs with resourceVersion, N entries             w(N)
//!  put-free:N    the same bodies to a throwaway copy of the CRD whose status is
//!                `x-kubernetes-preserve-unknown-fields` (no schema under status)      u(N)
//!  jsonpatch:N   a JSON patch of the KarmadaQuota's status: test resourceVersion,
//!                drop the oldest entry, append one                                   p(N)
//!  batch:k       a reservation *batch*: one new schema-less object holding k entries
//!                created (its name the next number of the worker's sequence, so a
//!                second writer of the same number gets 409: the compare-and-swap), and
//!                the previous batch deleted (as a controller would once it folded it)  b(k)
//!  slot:k        a ledger *slot*: the worker's one schema-less object of the batch kind
//!                rewritten in place with k new entries (PUT with its resourceVersion,
//!                so a second writer gets 409): what a fixed ring of ledger objects
//!                would write per admission instead of a batch's create and delete      s(k)
//!  review        ResourceBinding creates like `create`, in namespaces where a validating
//!                webhook (`--review-url`: an endpoint that answers "allowed") reviews
//!                every CREATE: r − c is what one review's hop costs the apiserver,
//!                the price an admission webhook adds to each binding it reviews        r
//! ```
//!
//! `batch:k` prototypes a reservation store outside the quota's status (the batches): a
//! write that carries only the entries of its own admissions, never the pending ones, and
//! that admissions of many namespaces can share (group commit across namespaces). Per
//! admission it costs b(k) / k.
//!
//! Each write holds N entries, one of them new (it replaces the oldest, so the object
//! changes and keeps its size); N = 0 changes `status.summary` only (the floor of a status
//! write). Entries are made by core's decision for a binding of kq-load's shape, converted
//! as the webhook converts them (`convert::reservation_to_api`: the compact form). Each
//! worker of `concurrency` writes its own objects in its own namespace, so no write
//! conflicts. The KarmadaQuota objects are watched as the webhook and the controller watch
//! them (`--quota-watchers`, also on the copy), the bindings as the controller does.

use std::collections::VecDeque;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};
use axum::http::Request;
use futures::{AsyncReadExt, future};
use karmada_quota_core::decision::{AdmissionRequest, Decision, decide};
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::convert::{quota_state, reservation_to_api};
use karmada_quota_crds::{KarmadaQuota, ResourceBinding};
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde::Deserialize;
use serde_json::{Value, json};

/// The throwaway copy of the KarmadaQuota CRD (created and deleted by the bench only).
const FREE_GROUP: &str = "writecost.bench.karmada-quota.io";
const FREE_KIND: &str = "WriteCostQuota";
const FREE_PLURAL: &str = "writecostquotas";
/// The throwaway batch kind (same group): schema-less, no status subresource.
const BATCH_KIND: &str = "WriteCostBatch";
const BATCH_PLURAL: &str = "writecostbatches";
const QUOTA_PATH: &str = "/apis/quota.karmada.io/v1alpha1";
const BINDING_PATH: &str = "/apis/work.karmada.io/v1alpha2";
/// Linux's USER_HZ: the unit of utime/stime in /proc/<pid>/stat on every Linux ABI.
const TICKS_PER_SECOND: f64 = 100.0;
/// How long a cell's CPU window runs on after its last operation.
const TAIL: Duration = Duration::from_secs(1);
/// The webhook's default `--reservation-ttl`.
const TTL_SECONDS: i64 = 60;

/// What to run.
#[derive(Clone, Debug)]
pub struct Config {
    /// Kubeconfig of the apiserver.
    pub kubeconfig: PathBuf,
    /// The apiserver's pid (its CPU is what is measured).
    pub apiserver_pid: u32,
    /// etcd's pid (0: not measured).
    pub etcd_pid: u32,
    /// Operations per cell.
    pub ops: usize,
    /// Workers (one namespace and one object per kind and N each).
    pub concurrency: usize,
    /// Rounds; each runs every cell once (odd rounds in reverse order).
    pub rounds: usize,
    /// The entry counts N.
    pub entries: Vec<usize>,
    /// Also run the JSON patch cells.
    pub patch: bool,
    /// Watches on each quota kind (the webhook and the controller: 2).
    pub quota_watchers: usize,
    /// Watches on ResourceBindings (the controller: 1).
    pub binding_watchers: usize,
    /// Idle measured before every cell (its rate is subtracted from the cell).
    pub idle: Duration,
    /// Entries per reservation batch of the `batch:k` cells (empty: none).
    pub batch_sizes: Vec<usize>,
    /// Entries per ledger slot of the `slot:k` cells (empty: none).
    pub slot_sizes: Vec<usize>,
    /// The `review` cells' webhook: its URL and the CA that signed its certificate (none:
    /// no review cells).
    pub review: Option<Review>,
}

/// An HTTPS endpoint that answers every AdmissionReview with "allowed".
#[derive(Clone, Debug)]
pub struct Review {
    /// `https://127.0.0.1:<port>/…`
    pub url: String,
    /// The CA that signed the endpoint's certificate: its PEM, base64-encoded (the
    /// configuration's `caBundle`).
    pub ca_bundle: String,
}

/// The label of the namespaces whose creates are reviewed (the `review` cells').
const REVIEW_LABEL: &str = "write-cost.bench.karmada-quota.io/review";
/// The ValidatingWebhookConfiguration of the `review` cells (created and deleted here).
const REVIEW_VWC: &str = "kq-write-cost-review";
const VWC_PATH: &str = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Create,
    Put,
    PutFree,
    JsonPatch,
    Batch,
    Slot,
    Review,
}

impl Kind {
    fn label(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Put => "put",
            Kind::PutFree => "put-free",
            Kind::JsonPatch => "jsonpatch",
            Kind::Batch => "batch",
            Kind::Slot => "slot",
            Kind::Review => "review",
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    kind: Kind,
    n: usize,
    /// Index of `n` in the configured entry counts (the worker's object for it).
    slot: usize,
}

impl Cell {
    fn name(self) -> String {
        match self.kind {
            Kind::Create => format!("create#{}", self.slot),
            Kind::Review => "review".to_string(),
            k => format!("{}:{}", k.label(), self.n),
        }
    }
}

/// One status object a worker writes: its URL, last resourceVersion and entries.
struct Target {
    /// `…/namespaces/<ns>/<plural>/<name>` (no `/status`).
    url: String,
    /// The object as read once (metadata without managedFields), the body's template.
    template: Value,
    rv: String,
    entries: VecDeque<Value>,
}

/// A worker: its namespace and, per N, its KarmadaQuota and its copy.
struct Worker {
    ns: String,
    /// The worker's namespace whose creates are reviewed (the `review` cells').
    review_ns: String,
    quotas: Vec<Target>,
    free: Vec<Target>,
    made: u64,
    /// The number of the worker's last reservation batch (0: none yet).
    batches: u64,
    /// The resourceVersion of the worker's ledger slot (`slot:k`), once created.
    slot_rv: Option<String>,
    /// Writes of the worker's slot so far (its own count: a batch cell deletes the
    /// previous *batch*, which a slot write is not).
    slot_writes: u64,
}

#[derive(Deserialize)]
struct Meta {
    metadata: MetaRv,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MetaRv {
    resource_version: Option<String>,
}

/// CPU ticks (utime + stime) of a process; 0 when `pid` is 0 or gone.
fn cpu_ticks(pid: u32) -> u64 {
    if pid == 0 {
        return 0;
    }
    fs::read_to_string(format!("/proc/{pid}/stat")).map_or(0, |s| stat_ticks(&s))
}

/// utime + stime of a /proc/<pid>/stat text; 0 when it does not parse.
fn stat_ticks(stat: &str) -> u64 {
    // Fields after the parenthesised command (which may hold spaces): state is field 3,
    // utime and stime are fields 14 and 15.
    let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
        return 0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    num(11) + num(12)
}

fn ticks_ms(ticks: u64) -> f64 {
    ticks as f64 * 1000.0 / TICKS_PER_SECOND
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A uid shaped like the apiserver's (UUID v4 text), distinct per (worker, n).
fn uid(worker: usize, n: u64) -> String {
    let mut x = (worker as u64) << 40 ^ n ^ 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    };
    let (a, b) = (next(), next());
    format!(
        "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xfff,
        0x8000 | ((b >> 48) & 0x3fff),
        b & 0xffff_ffff_ffff
    )
}

/// kq-load's binding (`Rb::deployment(name, 1).request("cpu", "1m")`, placed in member1).
pub fn binding(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "work.karmada.io/v1alpha2",
        "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "namespace": ns},
            "replicas": 1,
            "replicaRequirements": {"resourceRequest": {"cpu": "1m"}},
            "clusters": [{"name": "member1", "replicas": 1}],
        },
    })
}

/// The quota every namespace holds: what P1 uses, `status.used` seeded as the controller
/// writes it.
fn quota_object(ns: &str, name: &str) -> Value {
    json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"hard": {"requests.cpu": "100k", "pods": "100k"}},
    })
}

/// The status the controller leaves on such a quota (hard, used, summary, Ready,
/// observedGeneration), with `entries`.
fn status(entries: &VecDeque<Value>, summary: &str) -> Value {
    json!({
        "hard": {"pods": "100k", "requests.cpu": "100k"},
        "used": {"pods": "0", "requests.cpu": "0"},
        "reservations": entries,
        "summary": summary,
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "Synced",
            "message": "usage of 0 bindings", "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }],
        "observedGeneration": 1,
    })
}

/// The entry the webhook writes when it admits `binding(ns, name)` with `uid` into the
/// quota `q`: core's decision, converted as the webhook converts it.
pub fn webhook_entry(q: &QuotaState, ns: &str, name: &str, uid: &str, now: i64) -> Result<Value> {
    let rb: ResourceBinding = serde_json::from_value(binding(ns, name))?;
    let charge = BindingCharge::compute(&rb.spec, None);
    let req = AdmissionRequest {
        namespace: ns,
        name,
        uid,
        generation: 1,
        old: None,
        new: &charge,
        now,
        reservation_ttl: TTL_SECONDS,
        max_reservations: usize::MAX,
    };
    match decide(std::slice::from_ref(q), &req) {
        Decision::Allow(entries) => {
            let Some((_, entry)) = entries.into_iter().next() else {
                bail!("the decision for {ns}/{name} wrote no entry");
            };
            Ok(serde_json::to_value(reservation_to_api(&entry))?)
        }
        Decision::Deny(d) => bail!("the decision refused {ns}/{name}: {}", d.message),
    }
}

/// The state core decides against: the quota with `used` seeded and no entries.
fn decision_quota(ns: &str) -> Result<QuotaState> {
    let mut q = quota_object(ns, "q");
    q["status"] = json!({"used": {"pods": "0", "requests.cpu": "0"}});
    let q: KarmadaQuota = serde_json::from_value(q)?;
    quota_state(&q).map_err(|e| anyhow::anyhow!("the bench's quota does not validate: {e:?}"))
}

/// The KarmadaQuota CRD with another group and kind and no schema under `status`.
fn free_crd() -> Result<Value> {
    use kube::CustomResourceExt;
    let mut crd = serde_json::to_value(KarmadaQuota::crd())?;
    crd["metadata"] = json!({"name": format!("{FREE_PLURAL}.{FREE_GROUP}")});
    crd["spec"]["group"] = json!(FREE_GROUP);
    crd["spec"]["names"] = json!({
        "kind": FREE_KIND, "listKind": format!("{FREE_KIND}List"),
        "plural": FREE_PLURAL, "singular": FREE_KIND.to_lowercase(),
    });
    let versions = crd["spec"]["versions"]
        .as_array_mut()
        .context("the generated CRD has no versions")?;
    for v in versions {
        let props = &mut v["schema"]["openAPIV3Schema"]["properties"];
        if props.get("status").is_none() {
            bail!("the generated CRD has no status schema");
        }
        props["status"] = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    }
    Ok(crd)
}

/// The reservation batch kind: namespaced, one schema-less `spec`, no subresources.
fn batch_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{BATCH_PLURAL}.{FREE_GROUP}")},
        "spec": {
            "group": FREE_GROUP,
            "scope": "Namespaced",
            "names": {"kind": BATCH_KIND, "listKind": format!("{BATCH_KIND}List"),
                      "plural": BATCH_PLURAL, "singular": BATCH_KIND.to_lowercase()},
            "versions": [{
                "name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                }}}
            }]
        }
    })
}

/// A batch object: `k` entries of admissions, numbered `seq` in the worker's sequence.
fn batch_object(ns: &str, seq: u64, entries: &[Value]) -> Value {
    json!({
        "apiVersion": format!("{FREE_GROUP}/v1alpha1"),
        "kind": BATCH_KIND,
        "metadata": {"name": format!("b-{seq:08}"), "namespace": ns},
        "spec": {"quota": "q", "entries": entries},
    })
}

/// The name of a worker's ledger slot (`slot:k`): one object, rewritten in place.
const SLOT_NAME: &str = "slot-0";

/// The ledger slot's body for its `seq`-th write: a batch of the same kind and shape under
/// the slot's fixed name, with the resourceVersion it replaces (None: its create).
fn slot_object(ns: &str, seq: u64, entries: &[Value], rv: Option<&str>) -> Value {
    let mut o = batch_object(ns, seq, entries);
    o["metadata"]["name"] = json!(SLOT_NAME);
    o["spec"]["sequence"] = json!(seq);
    if let Some(rv) = rv {
        o["metadata"]["resourceVersion"] = json!(rv);
    }
    o
}

/// `k` new entries of admissions of worker `w` (numbered on from its last one).
fn new_entries(q: &QuotaState, w: &mut Worker, windex: usize, k: usize) -> Result<Vec<Value>> {
    let now = now_unix();
    let mut entries = Vec::with_capacity(k);
    for _ in 0..k {
        w.made += 1;
        let name = format!("rb-{:05}", w.made);
        entries.push(webhook_entry(q, &w.ns, &name, &uid(windex, w.made), now)?);
    }
    Ok(entries)
}

async fn client(kubeconfig: &PathBuf) -> Result<Client> {
    let kc = Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("reading {}", kubeconfig.display()))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    config.read_timeout = Some(Duration::from_secs(60));
    Ok(Client::try_from(config)?)
}

async fn send(
    client: &Client,
    method: &str,
    url: &str,
    ctype: &str,
    body: Vec<u8>,
) -> Result<String> {
    let req = Request::builder()
        .method(method)
        .uri(url)
        .header("content-type", ctype)
        .body(body)?;
    client
        .request_text(req)
        .await
        .with_context(|| format!("{method} {url}"))
}

async fn post(client: &Client, url: &str, body: &Value) -> Result<String> {
    send(
        client,
        "POST",
        url,
        "application/json",
        serde_json::to_vec(body)?,
    )
    .await
}

fn rv_of(text: &str) -> Result<String> {
    let m: Meta = serde_json::from_str(text)?;
    m.metadata
        .resource_version
        .context("the apiserver's answer has no resourceVersion")
}

/// Create the throwaway CRDs and wait until they serve.
async fn install_free_crd(client: &Client) -> Result<()> {
    install_crd(client, &free_crd()?, FREE_PLURAL).await?;
    install_crd(client, &batch_crd(), BATCH_PLURAL).await
}

async fn install_crd(client: &Client, crd: &Value, plural: &str) -> Result<()> {
    let url = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";
    match post(client, url, crd).await {
        Ok(_) => {}
        Err(e) if format!("{e:#}").contains("already exists") => {}
        Err(e) => return Err(e),
    }
    for _ in 0..300 {
        let probe = format!("/apis/{FREE_GROUP}/v1alpha1/{plural}?limit=1");
        if send(client, "GET", &probe, "application/json", Vec::new())
            .await
            .is_ok()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("the CRD {plural}.{FREE_GROUP} did not serve within 30 s")
}

async fn delete_free_crd(client: &Client) {
    for plural in [FREE_PLURAL, BATCH_PLURAL] {
        let url = format!(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{plural}.{FREE_GROUP}"
        );
        let _ = send(client, "DELETE", &url, "application/json", Vec::new()).await;
    }
}

/// Create the object at `collection` (kind `kind`), write its status with `n` entries, and
/// read it back as the body template.
/// Which kind of object a [`Target`] is: its collection URL, apiVersion and kind.
struct Resource<'a> {
    collection: &'a str,
    api_version: &'a str,
    kind: &'a str,
}

async fn make_target(
    client: &Client,
    q: &QuotaState,
    w: &mut Worker,
    windex: usize,
    res: &Resource<'_>,
    n: usize,
) -> Result<Target> {
    let (collection, api_version, kind) = (res.collection, res.api_version, res.kind);
    let name = format!("q-{n}");
    let mut obj = quota_object(&w.ns, &name);
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    post(client, collection, &obj).await?;
    let url = format!("{collection}/{name}");
    let text = send(client, "GET", &url, "application/json", Vec::new()).await?;
    let mut template: Value = serde_json::from_str(&text)?;
    if let Some(m) = template["metadata"].as_object_mut() {
        m.remove("managedFields");
    }
    let now = now_unix();
    let mut entries = VecDeque::with_capacity(n);
    for _ in 0..n {
        w.made += 1;
        let name = format!("rb-{:05}", w.made);
        entries.push_back(webhook_entry(q, &w.ns, &name, &uid(windex, w.made), now)?);
    }
    let rv = rv_of(&text)?;
    let mut t = Target {
        url,
        template,
        rv,
        entries,
    };
    let body = put_body(&t, "seeded");
    t.rv = rv_of(
        &send(
            client,
            "PUT",
            &format!("{}/status", t.url),
            "application/json",
            body,
        )
        .await?,
    )?;
    Ok(t)
}

fn put_body(t: &Target, summary: &str) -> Vec<u8> {
    let mut body = t.template.clone();
    body["metadata"]["resourceVersion"] = json!(t.rv);
    body["status"] = status(&t.entries, summary);
    serde_json::to_vec(&body).unwrap_or_default()
}

/// One write's new entry: the oldest leaves, a new one arrives (N = 0: none).
fn rotate(
    t: &mut Target,
    q: &QuotaState,
    ns: &str,
    windex: usize,
    made: &mut u64,
) -> Result<Option<Value>> {
    if t.entries.is_empty() {
        return Ok(None);
    }
    *made += 1;
    let name = format!("rb-{:05}", *made);
    let e = webhook_entry(q, ns, &name, &uid(windex, *made), now_unix())?;
    t.entries.pop_front();
    t.entries.push_back(e.clone());
    Ok(Some(e))
}

/// One operation of `cell` by worker `w`; its latency.
async fn op(
    client: &Client,
    q: &QuotaState,
    cell: Cell,
    w: &mut Worker,
    windex: usize,
    round: usize,
    i: usize,
) -> Result<Duration> {
    match cell.kind {
        Kind::Create | Kind::Review => {
            let ns = if cell.kind == Kind::Review {
                &w.review_ns
            } else {
                &w.ns
            };
            let name = format!("rb-{round}-{}-{i:05}", cell.slot);
            let body = serde_json::to_vec(&binding(ns, &name))?;
            let url = format!("{BINDING_PATH}/namespaces/{ns}/resourcebindings");
            let t = Instant::now();
            send(client, "POST", &url, "application/json", body).await?;
            Ok(t.elapsed())
        }
        Kind::Put | Kind::PutFree => {
            let (ns, made) = (w.ns.clone(), &mut w.made);
            let list = if cell.kind == Kind::Put {
                &mut w.quotas
            } else {
                &mut w.free
            };
            let t = list.get_mut(cell.slot).context("no object for this N")?;
            rotate(t, q, &ns, windex, made)?;
            let body = put_body(t, &format!("write {made}"));
            let url = format!("{}/status", t.url);
            let start = Instant::now();
            let text = send(client, "PUT", &url, "application/json", body).await?;
            let took = start.elapsed();
            t.rv = rv_of(&text)?;
            Ok(took)
        }
        Kind::Batch => {
            let entries = new_entries(q, w, windex, cell.n)?;
            w.batches += 1;
            let body = serde_json::to_vec(&batch_object(&w.ns, w.batches, &entries))?;
            let coll = format!(
                "/apis/{FREE_GROUP}/v1alpha1/namespaces/{}/{BATCH_PLURAL}",
                w.ns
            );
            let start = Instant::now();
            send(client, "POST", &coll, "application/json", body).await?;
            let took = start.elapsed();
            if w.batches > 1 {
                let old = format!("{coll}/b-{:08}", w.batches - 1);
                send(client, "DELETE", &old, "application/json", Vec::new()).await?;
            }
            Ok(took)
        }
        Kind::Slot => {
            let entries = new_entries(q, w, windex, cell.n)?;
            w.slot_writes += 1;
            let rv = w
                .slot_rv
                .clone()
                .context("the worker's slot was not created")?;
            let body = serde_json::to_vec(&slot_object(&w.ns, w.slot_writes, &entries, Some(&rv)))?;
            let url = format!(
                "/apis/{FREE_GROUP}/v1alpha1/namespaces/{}/{BATCH_PLURAL}/{SLOT_NAME}",
                w.ns
            );
            let start = Instant::now();
            let text = send(client, "PUT", &url, "application/json", body).await?;
            let took = start.elapsed();
            w.slot_rv = Some(rv_of(&text)?);
            Ok(took)
        }
        Kind::JsonPatch => {
            let (ns, made) = (w.ns.clone(), &mut w.made);
            let t = w
                .quotas
                .get_mut(cell.slot)
                .context("no object for this N")?;
            let mut ops =
                vec![json!({"op": "test", "path": "/metadata/resourceVersion", "value": t.rv})];
            match rotate(t, q, &ns, windex, made)? {
                Some(e) => {
                    ops.push(json!({"op": "remove", "path": "/status/reservations/0"}));
                    ops.push(json!({"op": "add", "path": "/status/reservations/-", "value": e}));
                }
                None => ops.push(
                    json!({"op": "replace", "path": "/status/summary", "value": format!("write {made}")}),
                ),
            }
            let url = format!("{}/status", t.url);
            let body = serde_json::to_vec(&ops)?;
            let start = Instant::now();
            let text = send(client, "PATCH", &url, "application/json-patch+json", body).await?;
            let took = start.elapsed();
            t.rv = rv_of(&text)?;
            Ok(took)
        }
    }
}

/// A watch on `collection` whose events are read and dropped, until aborted.
fn spawn_watch(client: Client, collection: String) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let url = format!("{collection}?watch=true&timeoutSeconds=3600");
            let Ok(req) = Request::get(&url).body(Vec::new()) else {
                return;
            };
            let Ok(stream) = client.request_stream(req).await else {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            };
            let mut stream = std::pin::pin!(stream);
            let mut buf = vec![0u8; 64 * 1024];
            while let Ok(1..) = stream.as_mut().read(&mut buf).await {}
        }
    })
}

/// Wait (at most 60 s) until the apiserver is quiet: installing a CRD makes it rebuild its
/// OpenAPI document for a while, which the idle rate must not include.
async fn settle(pid: u32) {
    let window = Duration::from_secs(2);
    for _ in 0..30 {
        let a0 = cpu_ticks(pid);
        tokio::time::sleep(window).await;
        let rate = ticks_ms(cpu_ticks(pid).saturating_sub(a0)) / window.as_secs_f64();
        eprintln!("settling: apiserver {rate:.0} ms CPU/s");
        if rate < 40.0 {
            return;
        }
    }
}

/// Run every round; the JSON report: every cell of every round (raw CPU per op, the idle
/// rate before it, wall time, latency); bench/p1-write-cost.sh turns it into ratios.
pub async fn run(cfg: &Config) -> Result<Value> {
    if cfg.apiserver_pid == 0 || cpu_ticks(cfg.apiserver_pid) == 0 {
        bail!(
            "--apiserver-pid {}: no such process to measure",
            cfg.apiserver_pid
        );
    }
    let client = client(&cfg.kubeconfig).await?;
    install_free_crd(&client).await?;
    let workers_n = cfg.concurrency.max(1);
    let mut workers = Vec::with_capacity(workers_n);
    let free_api = format!("{FREE_GROUP}/v1alpha1");
    for windex in 0..workers_n {
        let ns = format!("wc-{windex}");
        post(
            &client,
            "/api/v1/namespaces",
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await?;
        let review_ns = format!("wr-{windex}");
        if cfg.review.is_some() {
            post(
                &client,
                "/api/v1/namespaces",
                &json!({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": review_ns, "labels": {REVIEW_LABEL: "true"}}}),
            )
            .await?;
        }
        let mut w = Worker {
            ns: ns.clone(),
            review_ns,
            quotas: Vec::new(),
            free: Vec::new(),
            made: 0,
            batches: 0,
            slot_rv: None,
            slot_writes: 0,
        };
        let qs = decision_quota(&ns)?;
        for &n in &cfg.entries {
            let coll = format!("{QUOTA_PATH}/namespaces/{ns}/karmadaquotas");
            let res = Resource {
                collection: &coll,
                api_version: "quota.karmada.io/v1alpha1",
                kind: "KarmadaQuota",
            };
            let t = make_target(&client, &qs, &mut w, windex, &res, n).await?;
            w.quotas.push(t);
            let coll = format!("/apis/{free_api}/namespaces/{ns}/{FREE_PLURAL}");
            let res = Resource {
                collection: &coll,
                api_version: &free_api,
                kind: FREE_KIND,
            };
            let t = make_target(&client, &qs, &mut w, windex, &res, n).await?;
            w.free.push(t);
        }
        if !cfg.slot_sizes.is_empty() {
            // The slot exists before the cells: they measure its rewrites, not its create.
            let coll = format!("/apis/{free_api}/namespaces/{ns}/{BATCH_PLURAL}");
            let text = post(&client, &coll, &slot_object(&ns, 0, &[], None)).await?;
            w.slot_rv = Some(rv_of(&text)?);
        }
        workers.push(w);
    }
    let mut watches = Vec::new();
    for _ in 0..cfg.quota_watchers {
        watches.push(spawn_watch(
            client.clone(),
            format!("{QUOTA_PATH}/karmadaquotas"),
        ));
        watches.push(spawn_watch(
            client.clone(),
            format!("/apis/{free_api}/{FREE_PLURAL}"),
        ));
        watches.push(spawn_watch(
            client.clone(),
            format!("/apis/{free_api}/{BATCH_PLURAL}"),
        ));
    }
    for _ in 0..cfg.binding_watchers {
        watches.push(spawn_watch(
            client.clone(),
            format!("{BINDING_PATH}/resourcebindings"),
        ));
    }
    if let Some(review) = &cfg.review {
        post(&client, VWC_PATH, &review_vwc(review)).await?;
    }
    settle(cfg.apiserver_pid).await;
    let result = rounds(cfg, &client, &mut workers).await;
    for w in watches {
        w.abort();
    }
    if cfg.review.is_some() {
        let url = format!("{VWC_PATH}/{REVIEW_VWC}");
        if let Err(e) = send(&client, "DELETE", &url, "application/json", Vec::new()).await {
            eprintln!("warning: {REVIEW_VWC} not deleted: {e:#}");
        }
    }
    delete_free_crd(&client).await;
    result
}

/// The `review` cells' webhook: every ResourceBinding CREATE in a namespace labelled
/// [`REVIEW_LABEL`], as the project's chart registers its binding webhook (v1 reviews,
/// no side effects, failure closes).
fn review_vwc(review: &Review) -> Value {
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": REVIEW_VWC},
        "webhooks": [{
            "name": "review.write-cost.bench.karmada-quota.io",
            "clientConfig": {"url": review.url, "caBundle": review.ca_bundle},
            "rules": [{"apiGroups": ["work.karmada.io"], "apiVersions": ["v1alpha2"],
                       "operations": ["CREATE"], "resources": ["resourcebindings"]}],
            "namespaceSelector": {"matchLabels": {REVIEW_LABEL: "true"}},
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        }],
    })
}

/// The cells of a round: a create cell before every group of writes (one N) and after the
/// last, so each group's c is measured next to it (`create#g` and `create#g+1`).
fn round_cells(cfg: &Config) -> Vec<Cell> {
    let create = |slot| Cell {
        kind: Kind::Create,
        n: 0,
        slot,
    };
    let mut cells = Vec::new();
    for (slot, &n) in cfg.entries.iter().enumerate() {
        cells.push(create(slot));
        let mut kinds = vec![Kind::Put, Kind::PutFree];
        if cfg.patch {
            kinds.push(Kind::JsonPatch);
        }
        cells.extend(kinds.into_iter().map(|kind| Cell { kind, n, slot }));
    }
    if !cfg.batch_sizes.is_empty() || !cfg.slot_sizes.is_empty() {
        let slot = cfg.entries.len();
        cells.push(create(slot));
        let batches = cfg.batch_sizes.iter().map(|&n| (Kind::Batch, n));
        let slots = cfg.slot_sizes.iter().map(|&n| (Kind::Slot, n));
        let review = cfg.review.iter().map(|_| (Kind::Review, 0));
        cells.extend(
            batches
                .chain(slots)
                .chain(review)
                .map(|(kind, n)| Cell { kind, n, slot }),
        );
        cells.push(create(slot + 1));
    } else if cfg.review.is_some() {
        let slot = cfg.entries.len();
        cells.push(create(slot));
        cells.push(Cell {
            kind: Kind::Review,
            n: 0,
            slot,
        });
        cells.push(create(slot + 1));
    } else {
        cells.push(create(cfg.entries.len()));
    }
    cells
}

/// CPU ms per second the apiserver and etcd spend idle, over `window`.
async fn idle_rate(cfg: &Config) -> (f64, f64) {
    let (a0, e0, t0) = (
        cpu_ticks(cfg.apiserver_pid),
        cpu_ticks(cfg.etcd_pid),
        Instant::now(),
    );
    tokio::time::sleep(cfg.idle).await;
    let secs = t0.elapsed().as_secs_f64();
    (
        ticks_ms(cpu_ticks(cfg.apiserver_pid).saturating_sub(a0)) / secs,
        ticks_ms(cpu_ticks(cfg.etcd_pid).saturating_sub(e0)) / secs,
    )
}

async fn rounds(cfg: &Config, client: &Client, workers: &mut [Worker]) -> Result<Value> {
    let cells = round_cells(cfg);
    let qs: Vec<QuotaState> = workers
        .iter()
        .map(|w| decision_quota(&w.ns))
        .collect::<Result<_>>()?;
    let mut results = Vec::new();
    for round in 1..=cfg.rounds {
        let order: Vec<Cell> = if round % 2 == 0 {
            cells.iter().rev().copied().collect()
        } else {
            cells.clone()
        };
        for cell in order {
            // The idle rate right before the cell, subtracted from it.
            let idle = idle_rate(cfg).await;
            let r = run_cell(cfg, client, workers, &qs, cell, round, idle).await?;
            eprintln!(
                "round {round} {:<14} apiserver {:7.2} ms/op (net {:7.2})  etcd {:5.2}  p50 {:6.1} ms  idle {:4.0} ms/s  errors {}",
                cell.name(),
                r["apiserver_ms"].as_f64().unwrap_or(0.0),
                r["apiserver_net_ms"].as_f64().unwrap_or(0.0),
                r["etcd_ms"].as_f64().unwrap_or(0.0),
                r["p50_ms"].as_f64().unwrap_or(0.0),
                idle.0,
                r["errors"]
            );
            results.push(r);
        }
    }
    Ok(json!({
        "bench": "write-cost",
        "ops": cfg.ops,
        "concurrency": workers.len(),
        "quota_watchers": cfg.quota_watchers,
        "binding_watchers": cfg.binding_watchers,
        "cells": results,
    }))
}

async fn run_cell(
    cfg: &Config,
    client: &Client,
    workers: &mut [Worker],
    qs: &[QuotaState],
    cell: Cell,
    round: usize,
    idle: (f64, f64),
) -> Result<Value> {
    let n_workers = workers.len();
    let per = cfg.ops.div_ceil(n_workers);
    let (a0, e0, t0) = (
        cpu_ticks(cfg.apiserver_pid),
        cpu_ticks(cfg.etcd_pid),
        Instant::now(),
    );
    let runs = workers.iter_mut().enumerate().map(|(windex, w)| {
        let q = &qs[windex];
        async move {
            let mut lat = Vec::with_capacity(per);
            let mut errors = Vec::new();
            for i in 0..per {
                match op(client, q, cell, w, windex, round, windex * per + i).await {
                    Ok(d) => lat.push(d),
                    Err(e) => {
                        errors.push(format!("{e:#}"));
                        // A failed write leaves the resourceVersion unknown: read it again.
                        if !matches!(cell.kind, Kind::Create | Kind::Review) {
                            refresh_rv(client, w, cell).await;
                        }
                    }
                }
            }
            (lat, errors)
        }
    });
    let outs = future::join_all(runs).await;
    let busy = t0.elapsed().as_secs_f64();
    // The cell's window runs on for a tail after its last answer: the watch fan-out and
    // the garbage collection of its writes belong to it, not to the next cell's idle.
    tokio::time::sleep(TAIL).await;
    let wall = t0.elapsed().as_secs_f64();
    let (a1, e1) = (cpu_ticks(cfg.apiserver_pid), cpu_ticks(cfg.etcd_pid));
    let mut lat: Vec<Duration> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for (l, e) in outs {
        lat.extend(l);
        errors.extend(e);
    }
    lat.sort();
    let ops = (per * n_workers) as f64;
    let api = ticks_ms(a1.saturating_sub(a0)) / ops;
    let etcd = ticks_ms(e1.saturating_sub(e0)) / ops;
    let body_bytes = sample_body_bytes(workers, cell);
    Ok(json!({
        "round": round,
        "cell": cell.name(),
        "kind": cell.kind.label(),
        "n": cell.n,
        "ops": ops,
        "errors": errors.len(),
        "error_samples": errors.iter().take(3).collect::<Vec<_>>(),
        "busy_s": busy,
        "wall_s": wall,
        "idle_apiserver_ms_per_s": idle.0,
        "idle_etcd_ms_per_s": idle.1,
        "apiserver_ms": api,
        "etcd_ms": etcd,
        "apiserver_net_ms": (api - idle.0 * wall / ops).max(0.0),
        "etcd_net_ms": (etcd - idle.1 * wall / ops).max(0.0),
        "p50_ms": crate::stats::percentile_ms(&lat, 0.5),
        "p99_ms": crate::stats::percentile_ms(&lat, 0.99),
        "body_bytes": body_bytes,
    }))
}

/// Bytes of one PUT body of this cell (the create's body for creates).
fn sample_body_bytes(workers: &[Worker], cell: Cell) -> usize {
    let Some(w) = workers.first() else { return 0 };
    match cell.kind {
        Kind::Create | Kind::Review => {
            serde_json::to_vec(&binding(&w.ns, "rb-0-00000")).map_or(0, |b| b.len())
        }
        Kind::Put | Kind::JsonPatch => w
            .quotas
            .get(cell.slot)
            .map_or(0, |t| put_body(t, "write 1").len()),
        Kind::PutFree => w
            .free
            .get(cell.slot)
            .map_or(0, |t| put_body(t, "write 1").len()),
        Kind::Batch | Kind::Slot => {
            let Some(e) = w.quotas.iter().find_map(|t| t.entries.front()) else {
                return 0;
            };
            let entries = vec![e.clone(); cell.n];
            let body = if cell.kind == Kind::Batch {
                batch_object(&w.ns, 1, &entries)
            } else {
                slot_object(&w.ns, 1, &entries, w.slot_rv.as_deref())
            };
            serde_json::to_vec(&body).map_or(0, |b| b.len())
        }
    }
}

async fn refresh_rv(client: &Client, w: &mut Worker, cell: Cell) {
    match cell.kind {
        Kind::Batch => return,
        Kind::Slot => {
            let url = format!(
                "/apis/{FREE_GROUP}/v1alpha1/namespaces/{}/{BATCH_PLURAL}/{SLOT_NAME}",
                w.ns
            );
            if let Ok(text) = send(client, "GET", &url, "application/json", Vec::new()).await
                && let Ok(rv) = rv_of(&text)
            {
                w.slot_rv = Some(rv);
            }
            return;
        }
        _ => {}
    }
    let list = if cell.kind == Kind::PutFree {
        &mut w.free
    } else {
        &mut w.quotas
    };
    if let Some(t) = list.get_mut(cell.slot)
        && let Ok(text) = send(client, "GET", &t.url, "application/json", Vec::new()).await
        && let Ok(rv) = rv_of(&text)
    {
        t.rv = rv;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_the_webhooks_compact_form() {
        let q = decision_quota("ns1").unwrap();
        let e = webhook_entry(&q, "ns1", "rb-00001", &uid(0, 1), 1_000).unwrap();
        // No apiVersion/kind (a ResourceBinding's), no namespace (a KarmadaQuota's).
        assert_eq!(
            e["reservedBy"],
            json!({"name": "rb-00001", "uid": uid(0, 1)})
        );
        assert_eq!(e["generation"], 1);
        assert_eq!(e["reserved"], json!({"pods": "1", "requests.cpu": "1m"}));
        assert_eq!(e["expirationTime"], "1970-01-01T00:17:40Z");
    }

    #[test]
    fn every_group_of_writes_has_a_create_cell_on_each_side() {
        let cfg = Config {
            kubeconfig: PathBuf::new(),
            apiserver_pid: 1,
            etcd_pid: 0,
            ops: 1,
            concurrency: 1,
            rounds: 1,
            entries: vec![0, 10],
            patch: true,
            quota_watchers: 0,
            binding_watchers: 0,
            idle: Duration::from_secs(1),
            batch_sizes: vec![1, 14],
            slot_sizes: vec![1],
            review: Some(Review {
                url: "https://127.0.0.1:1/".into(),
                ca_bundle: "Q0E=".into(),
            }),
        };
        let names: Vec<String> = round_cells(&cfg).into_iter().map(Cell::name).collect();
        assert_eq!(
            names,
            [
                "create#0",
                "put:0",
                "put-free:0",
                "jsonpatch:0",
                "create#1",
                "put:10",
                "put-free:10",
                "jsonpatch:10",
                "create#2",
                "batch:1",
                "batch:14",
                "slot:1",
                "review",
                "create#3"
            ]
        );
        let reviews_only = Config {
            batch_sizes: Vec::new(),
            slot_sizes: Vec::new(),
            ..cfg.clone()
        };
        let names: Vec<String> = round_cells(&reviews_only)
            .into_iter()
            .map(Cell::name)
            .collect();
        assert_eq!(names[8..], ["create#2", "review", "create#3"]);
        let no_batches = Config {
            batch_sizes: Vec::new(),
            slot_sizes: Vec::new(),
            review: None,
            ..cfg
        };
        let names: Vec<String> = round_cells(&no_batches)
            .into_iter()
            .map(Cell::name)
            .collect();
        assert_eq!(names.last().map(String::as_str), Some("create#2"));
        assert_eq!(names.len(), 9);
    }

    #[test]
    fn the_review_webhook_sees_only_binding_creates_in_the_labelled_namespaces() {
        let vwc = review_vwc(&Review {
            url: "https://127.0.0.1:9443/".into(),
            ca_bundle: "Q0E=".into(),
        });
        let hook = &vwc["webhooks"][0];
        assert_eq!(hook["clientConfig"]["url"], "https://127.0.0.1:9443/");
        assert_eq!(hook["clientConfig"]["caBundle"], "Q0E=");
        assert_eq!(hook["rules"][0]["operations"], json!(["CREATE"]));
        assert_eq!(hook["rules"][0]["resources"], json!(["resourcebindings"]));
        assert_eq!(
            hook["namespaceSelector"]["matchLabels"][REVIEW_LABEL],
            "true"
        );
        assert_eq!(hook["failurePolicy"], "Fail");
    }

    #[test]
    fn a_batch_holds_its_entries_under_its_sequence_number_and_its_crd_has_no_subresource() {
        let q = decision_quota("ns1").unwrap();
        let e = webhook_entry(&q, "ns1", "rb-00001", &uid(0, 1), 1_000).unwrap();
        let b = batch_object("ns1", 12, &[e.clone(), e]);
        assert_eq!(b["metadata"]["name"], "b-00000012");
        assert_eq!(b["spec"]["entries"].as_array().map(Vec::len), Some(2));
        let crd = batch_crd();
        let v = &crd["spec"]["versions"][0];
        assert!(v.get("subresources").is_none());
        assert_eq!(
            v["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
    }

    #[test]
    fn a_slot_is_rewritten_under_one_name_with_the_version_it_replaces() {
        let q = decision_quota("ns1").unwrap();
        let e = webhook_entry(&q, "ns1", "rb-00001", &uid(0, 1), 1_000).unwrap();
        let created = slot_object("ns1", 0, &[], None);
        let next = slot_object("ns1", 7, &[e], Some("42"));
        assert_eq!(created["metadata"]["name"], SLOT_NAME);
        assert_eq!(next["metadata"]["name"], SLOT_NAME);
        assert!(created["metadata"].get("resourceVersion").is_none());
        assert_eq!(next["metadata"]["resourceVersion"], "42");
        assert_eq!(next["spec"]["sequence"], 7);
        assert_eq!(next["spec"]["entries"].as_array().map(Vec::len), Some(1));
        assert_eq!(next["kind"], BATCH_KIND);
    }

    #[test]
    fn uids_look_like_the_apiservers_and_differ() {
        let (a, b) = (uid(0, 1), uid(1, 1));
        assert_eq!(a.len(), 36);
        assert_ne!(a, b);
        assert_ne!(uid(0, 1), uid(0, 2));
        assert_eq!(a.as_bytes()[14], b'4');
    }

    #[test]
    fn the_free_crd_keeps_spec_and_drops_the_status_schema() {
        let crd = free_crd().unwrap();
        assert_eq!(crd["spec"]["group"], FREE_GROUP);
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        assert_eq!(
            schema["status"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert!(schema["spec"]["properties"]["hard"].is_object());
        assert_eq!(
            crd["spec"]["versions"][0]["subresources"]["status"],
            json!({})
        );
    }

    #[test]
    fn stat_ticks_adds_utime_and_stime_after_a_command_with_spaces() {
        let line =
            "4242 (kube apiserver) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 9 0";
        assert_eq!(stat_ticks(line), 1234 + 567);
        assert_eq!(stat_ticks("garbage"), 0);
    }

    #[test]
    fn cpu_ticks_reads_this_process() {
        // Spin (at most 5 s) until this process has used a clock tick.
        let start = Instant::now();
        let mut x = 0u64;
        while cpu_ticks(std::process::id()) == 0 && start.elapsed() < Duration::from_secs(5) {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_add(i));
            }
        }
        assert!(cpu_ticks(std::process::id()) > 0);
        assert_eq!(cpu_ticks(0), 0);
    }
}
