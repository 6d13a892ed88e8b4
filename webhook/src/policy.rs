//! PropagationPolicy admission: before a policy is stored, what the bindings it would make
//! for the templates that exist now would add to the quotas — a dry run, no reservation.
//!
//! ```text
//!  POST /validate/propagationpolicy | /validate/clusterpropagationpolicy (CREATE/UPDATE)
//!     │ decode the policy (interpreter::policy::Policy)
//!     │ PolicyWorld (kube, a fake in tests): the templates each selector names (≤ the
//!     │   limit), the member Clusters, the existing bindings of the namespaces touched
//!     │ quotas: the webhook's cache
//!     ▼
//!  interpreter::whatif::what_if — the default interpreter, the placement, the admission decision
//!     ▼
//!  fits → allowed, no warning; exceeds → allowed with a warning per refused template
//!  (`kubectl apply` prints them), or refused with `--policy-enforcement=deny`.
//!  Too many templates, a kind that cannot be listed, or no answer within the decision
//!  timeout → allowed with a warning saying the check was skipped and why.
//! ```
//!
//! A template whose kind a ResourceInterpreterCustomization prices (its `replicaResource`
//! or `componentResource` Lua) is priced by that Lua (`karmada-quota-interpreter`), which
//! wins over the built-in rules as in Karmada. The customizations are listed at most every
//! [`CUSTOMIZATIONS_TTL`]; their scripts run off the async workers, each call in the
//! interpreter's limits and all of one selector's templates within [`LUA_BUDGET`]; a script
//! that fails skips the check naming the customization.
//!
//! A selector's apiVersion and kind are the policy writer's: the discovery cache keyed by
//! them holds at most [`MAX_KINDS`] entries (least recently used evicted), refuses a key
//! longer than Kubernetes allows without a lookup, keeps a failed lookup only
//! [`FAILED_LOOKUP_TTL`], and every message quoting them clips them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use karmada_quota_core::binding::ResourceBindingSpec;
use karmada_quota_crds::ResourceBinding;
use karmada_quota_interpreter::clusters::ClusterFacts;
use karmada_quota_interpreter::policy::{PROPAGATION_POLICY, Policy, ResourceSelector};
use karmada_quota_interpreter::template::Template;
use karmada_quota_interpreter::whatif::{self, Current};
use karmada_quota_interpreter::{Customization, Customizations, Limits, customization, interpret};
use karmada_quota_shell::bounded::LruMap;
use karmada_quota_shell::untrusted::{self, clip};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::core::admission::{AdmissionRequest, Operation};
use kube::discovery::{self, Scope};
use kube::{Api, Client};
use parking_lot::Mutex;
use tokio::time::{Instant, timeout_at};

/// Reading templates within bounds (pages, bytes).
mod listing;

pub use listing::{
    DEFAULT_LUA_RUNS, DEFAULT_MAX_TEMPLATE_BYTES, DEFAULT_PAGE_SIZE,
    DEFAULT_TEMPLATE_BYTES_IN_FLIGHT, TemplateLimits,
};

/// Most (apiVersion, kind) discovery answers kept; the least recently used is evicted.
pub const MAX_KINDS: usize = 256;
/// How long a kind discovery did not find (or could not ask about) stays cached.
pub const FAILED_LOOKUP_TTL: Duration = Duration::from_secs(10);

/// How long a listing of the ResourceInterpreterCustomizations is reused.
pub const CUSTOMIZATIONS_TTL: Duration = Duration::from_secs(10);
/// Wall-clock bound on running customizations' Lua over the templates of one selector.
pub const LUA_BUDGET: Duration = Duration::from_secs(2);

/// Path of the PropagationPolicy check.
pub const PROPAGATIONPOLICY_PATH: &str = "/validate/propagationpolicy";
/// Path of the ClusterPropagationPolicy check.
pub const CLUSTERPROPAGATIONPOLICY_PATH: &str = "/validate/clusterpropagationpolicy";
/// API group of the policies.
pub const POLICY_GROUP: &str = "policy.karmada.io";

/// What an exceeding policy gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Enforcement {
    /// Allowed, with a warning per template that would not fit.
    #[default]
    Warn,
    /// Refused (403 QuotaExceeded) with the first template that would not fit.
    Deny,
}

/// Why the check could not be made (the policy is then allowed with this as a warning).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skip(pub String);

/// The reads the check makes, behind a trait so that tests run without an apiserver.
pub trait PolicyWorld: Send + Sync + 'static {
    /// The templates `selector` names (in `namespace`, or in every namespace when `None`),
    /// at most `limit` of them: more is a [`Skip`].
    fn templates<'a>(
        &'a self,
        selector: &'a ResourceSelector,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Template>, Skip>>;

    /// The member clusters.
    fn clusters(&self) -> BoxFuture<'_, Result<Vec<ClusterFacts>, Skip>>;

    /// The ResourceBindings of `namespace`.
    fn bindings<'a>(
        &'a self,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ResourceBindingSpec>, Skip>>;
}

/// What discovery said of an (apiVersion, kind): its resource and whether it is
/// namespaced, or `None` when it is not served.
type Discovered = Option<(ApiResource, bool)>;

/// A discovery answer and when it was given.
type Answered = (Discovered, Instant);

/// [`PolicyWorld`] over the Kubernetes API (discovery cached per kind, bounded; templates
/// read within [`TemplateLimits`], see [`listing`]).
pub struct KubePolicyWorld {
    client: Client,
    kinds: Mutex<LruMap<(String, String), Answered>>,
    customizations: Mutex<Option<(Instant, Arc<Customizations>)>>,
    limits: TemplateLimits,
}

impl KubePolicyWorld {
    /// Reads through `client`, templates within the default [`TemplateLimits`].
    pub fn new(client: Client) -> Self {
        Self {
            client,
            kinds: Mutex::new(LruMap::new(MAX_KINDS)),
            customizations: Mutex::new(None),
            limits: TemplateLimits::default(),
        }
    }

    /// Templates read within `limits`.
    #[must_use]
    pub fn with_limits(mut self, limits: TemplateLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The cluster's ResourceInterpreterCustomizations, listed at most every
    /// [`CUSTOMIZATIONS_TTL`]. A list that fails (RBAC, not served) counts as none, logged:
    /// the kinds only they price are then reported as not priced.
    async fn customizations(&self) -> Arc<Customizations> {
        let cached = self.customizations.lock().clone();
        if let Some((at, c)) = cached
            && at.elapsed() < CUSTOMIZATIONS_TTL
        {
            return c;
        }
        let gvk = GroupVersionKind::gvk(customization::GROUP, "v1alpha1", customization::KIND);
        let api: Api<DynamicObject> = Api::all_with(
            self.client.clone(),
            &ApiResource::from_gvk_with_plural(&gvk, customization::PLURAL),
        );
        let mut list = Vec::new();
        match api.list(&ListParams::default()).await {
            Ok(objects) => {
                for o in &objects.items {
                    let read = serde_json::to_value(o)
                        .map_err(|e| e.to_string())
                        .and_then(|v| Customization::from_object(&v));
                    match read {
                        Ok(c) => list.push(c),
                        Err(e) => {
                            tracing::warn!(error = %clip(&e), "ResourceInterpreterCustomization not read")
                        }
                    }
                }
            }
            Err(e) => tracing::warn!(
                error = %clip(&e.to_string()),
                "ResourceInterpreterCustomizations not listed: kinds only they price are not priced"
            ),
        }
        let c = Arc::new(Customizations::new(list));
        *self.customizations.lock() = Some((Instant::now(), c.clone()));
        c
    }

    /// The API resource of (apiVersion, kind) and whether it is namespaced; `Ok(None)` when
    /// the kind is not served (or discovery failed: asked again after
    /// [`FAILED_LOOKUP_TTL`]); a [`Skip`] without a lookup when either is longer than
    /// Kubernetes allows.
    async fn resource(&self, api_version: &str, kind: &str) -> Result<Discovered, Skip> {
        if let Some(why) = untrusted::group_version_too_long(api_version) {
            return Err(Skip(why));
        }
        if !untrusted::kind_fits(kind) {
            return Err(Skip(format!(
                "kind {} is longer than {} bytes: not looked up",
                clip(kind),
                untrusted::MAX_KIND_LEN
            )));
        }
        let key = (api_version.to_owned(), kind.to_owned());
        if let Some((known, at)) = self.kinds.lock().get(&key)
            && (known.is_some() || at.elapsed() < FAILED_LOOKUP_TTL)
        {
            return Ok(known.clone());
        }
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = discovery::pinned_kind(&self.client, &gvk)
            .await
            .ok()
            .map(|(ar, caps)| (ar, caps.scope == Scope::Namespaced));
        let mut kinds = self.kinds.lock();
        kinds.retain(|_, (d, at)| d.is_some() || at.elapsed() < FAILED_LOOKUP_TTL);
        kinds.insert(key, (found.clone(), Instant::now()));
        Ok(found)
    }

    /// Kinds cached now.
    #[cfg(test)]
    pub fn cached_kinds(&self) -> usize {
        self.kinds.lock().len()
    }
}

fn label_selector(selector: &ResourceSelector) -> Option<String> {
    let s = selector.label_selector.as_ref()?;
    let mut parts: Vec<String> = s
        .match_labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    for r in &s.match_expressions {
        parts.push(match r.operator.as_str() {
            "In" => format!("{} in ({})", r.key, r.values.join(",")),
            "NotIn" => format!("{} notin ({})", r.key, r.values.join(",")),
            "Exists" => r.key.clone(),
            "DoesNotExist" => format!("!{}", r.key),
            _ => return None, // filtered by core's matcher instead
        });
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

impl PolicyWorld for KubePolicyWorld {
    fn templates<'a>(
        &'a self,
        selector: &'a ResourceSelector,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Template>, Skip>> {
        Box::pin(async move {
            let what = format!("{} ({})", clip(&selector.kind), clip(&selector.api_version));
            let Some((ar, namespaced)) =
                self.resource(&selector.api_version, &selector.kind).await?
            else {
                return Err(Skip(format!("{what} is not served by the API server")));
            };
            let mut reader = listing::Reader {
                client: &self.client,
                limits: &self.limits,
                customizations: self.customizations().await,
                lua_end: std::time::Instant::now() + LUA_BUDGET,
                what,
                read: 0,
                ar,
            };
            let ar = reader.ar.clone();
            let in_namespace = |ns: Option<&str>| match (namespaced, ns) {
                (true, Some(ns)) => listing::url(&ar, Some(ns)),
                _ => listing::url(&ar, None),
            };
            if selector.name.is_empty() {
                let mut params = ListParams::default();
                if let Some(labels) = label_selector(selector) {
                    params = params.labels(&labels);
                }
                return reader.list(&in_namespace(namespace), params, limit).await;
            }
            let ns = namespace.or(Some(selector.namespace.as_str()).filter(|s| !s.is_empty()));
            if namespaced && ns.is_none() {
                // A ClusterPropagationPolicy naming a namespaced template without a
                // namespace: every namespace's object of that name.
                let params =
                    ListParams::default().fields(&format!("metadata.name={}", selector.name));
                return reader.list(&in_namespace(None), params, limit).await;
            }
            Ok(reader
                .get(&in_namespace(ns), &selector.name)
                .await?
                .into_iter()
                .collect())
        })
    }

    fn clusters(&self) -> BoxFuture<'_, Result<Vec<ClusterFacts>, Skip>> {
        Box::pin(async move {
            let gvk = GroupVersionKind::gvk("cluster.karmada.io", "v1alpha1", "Cluster");
            let api: Api<DynamicObject> = Api::all_with(
                self.client.clone(),
                &ApiResource::from_gvk_with_plural(&gvk, "clusters"),
            );
            let list = api
                .list(&ListParams::default())
                .await
                .map_err(|e| Skip(format!("cannot list Clusters: {e}")))?;
            Ok(list
                .items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok())
                .map(|v| karmada_quota_interpreter::clusters::facts(&v))
                .collect())
        })
    }

    fn bindings<'a>(
        &'a self,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ResourceBindingSpec>, Skip>> {
        Box::pin(async move {
            let list = Api::<ResourceBinding>::namespaced(self.client.clone(), namespace)
                .list(&ListParams::default())
                .await
                .map_err(|e| Skip(format!("cannot list ResourceBindings in {namespace}: {e}")))?;
            Ok(list.items.into_iter().map(|b| b.spec).collect())
        })
    }
}

/// The template of an object read as `ar`. Items of a LIST of a built-in kind carry no
/// `apiVersion`/`kind` (only the list does), so they get `ar`'s: without them no selector
/// would select the template (`ResourceSelector::selects` compares both), and a policy
/// selecting by label or by kind alone would always be judged to fit.
#[cfg(test)]
pub(crate) fn to_template(ar: &ApiResource, o: DynamicObject) -> Result<Template, Skip> {
    interpreted_template(ar, o, &Customizations::default(), std::time::Instant::now())
}

/// [`to_template`], priced by the customization of its kind when there is one (see
/// [`template_from_json`]).
#[cfg(test)]
pub(crate) fn interpreted_template(
    ar: &ApiResource,
    o: DynamicObject,
    customizations: &Customizations,
    end: std::time::Instant,
) -> Result<Template, Skip> {
    let name = o.metadata.name.clone().unwrap_or_default();
    let json = serde_json::to_string(&o).map_err(|e| {
        Skip(format!(
            "cannot read template {}: {}",
            clip(&name),
            clip(&e.to_string())
        ))
    })?;
    template_from_json(ar, &json, customizations, end)
}

/// The template in `json`, an object read as `ar`: decoded typed (only the fields pricing
/// reads), `apiVersion` and `kind` from `ar` when the object has none; priced by the
/// customization of its kind when there is one (its Lua reads the whole object: only
/// then is a JSON tree of it built; calls bounded by the interpreter's limits and by
/// `end`). A script that fails is a [`Skip`] naming the template and the customization.
pub(crate) fn template_from_json(
    ar: &ApiResource,
    json: &str,
    customizations: &Customizations,
    end: std::time::Instant,
) -> Result<Template, Skip> {
    let unreadable = |e: serde_json::Error| {
        Skip(format!(
            "cannot read a {} template: {}",
            clip(&ar.kind),
            clip(&e.to_string())
        ))
    };
    let mut t: Template = serde_json::from_str(json).map_err(unreadable)?;
    if t.api_version.is_empty() {
        t.api_version.clone_from(&ar.api_version);
    }
    if t.kind.is_empty() {
        t.kind.clone_from(&ar.kind);
    }
    if let Some(scripts) = customizations.scripts(&t.api_version, &t.kind) {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Err(Skip(format!(
                "the interpreter customizations' Lua ran longer than {LUA_BUDGET:?} over the \
                 templates of {} ({})",
                clip(&t.kind),
                clip(&t.api_version)
            )));
        }
        let mut value: serde_json::Value = serde_json::from_str(json).map_err(unreadable)?;
        if let Some(o) = value.as_object_mut() {
            o.insert("apiVersion".into(), t.api_version.clone().into());
            o.insert("kind".into(), t.kind.clone().into());
        }
        let limits = Limits {
            timeout: left.min(Limits::default().timeout),
            ..Limits::default()
        };
        let priced = interpret(scripts, &value, limits).map_err(|e| {
            Skip(format!(
                "cannot price {}: {}",
                clip(&whatif::describe(&t)),
                clip(&e.to_string())
            ))
        })?;
        t.interpreted = Some(priced);
    }
    Ok(t)
}

/// How the check ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Everything fits.
    Fits,
    /// These templates would be refused: one line each, for warnings or the refusal.
    Exceeds(Vec<String>),
    /// The check was not made; why.
    Skipped(String),
}

/// The dry run for `policy`: templates from `world`, quotas from `quotas` (per namespace,
/// the cache's parsed states: its KarmadaQuotas and the KarmadaClusterQuotas selecting
/// it, told apart by `covers`), bounded by `deadline`.
pub async fn check(
    world: &dyn PolicyWorld,
    policy: &Policy,
    quotas: impl Fn(&str) -> Vec<karmada_quota_core::quota::QuotaState>,
    max_templates: usize,
    deadline: Instant,
    pod_less_groups: &[String],
) -> Verdict {
    match timeout_at(deadline, gather(world, policy, &quotas, max_templates)).await {
        Err(_) => Verdict::Skipped(
            "the quota check did not finish within the decision timeout".to_owned(),
        ),
        Ok(Err(Skip(why))) => Verdict::Skipped(why),
        Ok(Ok((templates, mut current))) => {
            current.pod_less_groups = pod_less_groups.to_vec();
            let outcome = whatif::what_if(&templates, std::slice::from_ref(policy), &current);
            let mut lines: Vec<String> = outcome
                .refused
                .iter()
                .map(|r| {
                    if r.denial.cluster {
                        format!(
                            "this policy would exceed cluster quota {} with {}: {}",
                            r.denial.quota, r.template, r.denial.message
                        )
                    } else {
                        format!(
                            "this policy would exceed quota {}/{} with {}: {}",
                            r.namespace, r.denial.quota, r.template, r.denial.message
                        )
                    }
                })
                .collect();
            lines.extend(
                outcome
                    .errors
                    .iter()
                    .map(|e| format!("cannot price a template: {e}")),
            );
            if lines.is_empty() {
                Verdict::Fits
            } else {
                Verdict::Exceeds(lines)
            }
        }
    }
}

type Gathered = (Vec<Template>, Current);

async fn gather(
    world: &dyn PolicyWorld,
    policy: &Policy,
    quotas: &impl Fn(&str) -> Vec<karmada_quota_core::quota::QuotaState>,
    max_templates: usize,
) -> Result<Gathered, Skip> {
    let own_namespace =
        (policy.kind == PROPAGATION_POLICY).then_some(policy.metadata.namespace.as_str());
    let mut templates: Vec<Template> = Vec::new();
    for selector in &policy.spec.resource_selectors {
        let ns = own_namespace
            .or((!selector.namespace.is_empty()).then_some(selector.namespace.as_str()));
        for t in world.templates(selector, ns, max_templates).await? {
            if policy.selects(&t)
                && !templates.iter().any(|k| {
                    k.api_version == t.api_version
                        && k.kind == t.kind
                        && k.metadata.namespace == t.metadata.namespace
                        && k.metadata.name == t.metadata.name
                })
            {
                templates.push(t);
            }
        }
        if templates.len() > max_templates {
            return Err(Skip(format!(
                "the policy selects more than {max_templates} templates (--policy-max-templates)"
            )));
        }
    }
    let mut current = Current::default();
    let mut namespaces: Vec<&str> = templates
        .iter()
        .map(|t| t.metadata.namespace.as_str())
        .collect();
    namespaces.sort_unstable();
    namespaces.dedup();
    let mut with_quota = BTreeMap::new();
    for ns in namespaces {
        let (clusters, own): (Vec<_>, Vec<_>) =
            quotas(ns).into_iter().partition(|q| q.covers.is_cluster());
        if !clusters.is_empty() {
            current.selected.insert(
                ns.to_owned(),
                clusters.iter().map(|q| q.name.clone()).collect(),
            );
            for q in clusters {
                if !current.cluster_quotas.iter().any(|k| k.name == q.name) {
                    current.cluster_quotas.push(q);
                }
            }
        }
        if !own.is_empty() {
            with_quota.insert(ns.to_owned(), own);
        }
    }
    if with_quota.is_empty() && current.selected.is_empty() {
        return Ok((Vec::new(), current)); // no quota applies: nothing to read
    }
    let duplicated = policy.spec.placement.is_duplicated();
    if duplicated {
        current.clusters = world.clusters().await?;
    }
    let mut charged: Vec<&String> = with_quota.keys().chain(current.selected.keys()).collect();
    charged.sort_unstable();
    charged.dedup();
    for ns in charged {
        let bindings = world.bindings(ns).await?;
        current.bindings.insert(ns.clone(), bindings);
    }
    current.quotas = with_quota;
    Ok((templates, current))
}

/// Whether a review is one the policy check judges: CREATE or UPDATE of the policy itself
/// (not a status or other subresource).
pub fn judged<T: kube::Resource>(req: &AdmissionRequest<T>) -> bool {
    matches!(req.operation, Operation::Create | Operation::Update)
        && req.sub_resource.as_deref().is_none_or(str::is_empty)
}

/// A [`PolicyWorld`] in memory, for tests and the fuzzer (feature `fake-world`).
#[cfg(any(test, feature = "fake-world"))]
#[derive(Default)]
pub struct FakeWorld {
    /// Templates, filtered by kind and namespace like the API would.
    pub templates: Vec<Template>,
    /// Clusters.
    pub clusters: Vec<ClusterFacts>,
    /// Bindings per namespace.
    pub bindings: BTreeMap<String, Vec<ResourceBindingSpec>>,
    /// Answers take this long.
    pub latency: std::time::Duration,
}

#[cfg(any(test, feature = "fake-world"))]
impl PolicyWorld for FakeWorld {
    fn templates<'a>(
        &'a self,
        selector: &'a ResourceSelector,
        namespace: Option<&'a str>,
        limit: usize,
    ) -> BoxFuture<'a, Result<Vec<Template>, Skip>> {
        Box::pin(async move {
            tokio::time::sleep(self.latency).await;
            let found: Vec<Template> = self
                .templates
                .iter()
                .filter(|t| t.api_version == selector.api_version && t.kind == selector.kind)
                .filter(|t| namespace.is_none_or(|ns| t.metadata.namespace == ns))
                .cloned()
                .collect();
            if found.len() > limit {
                return Err(Skip(format!("more than {limit} {} objects", selector.kind)));
            }
            Ok(found)
        })
    }

    fn clusters(&self) -> BoxFuture<'_, Result<Vec<ClusterFacts>, Skip>> {
        Box::pin(async move { Ok(self.clusters.clone()) })
    }

    fn bindings<'a>(
        &'a self,
        namespace: &'a str,
    ) -> BoxFuture<'a, Result<Vec<ResourceBindingSpec>, Skip>> {
        Box::pin(async move { Ok(self.bindings.get(namespace).cloned().unwrap_or_default()) })
    }
}

/// Shared handle to the world the webhook reads.
pub type SharedWorld = Arc<dyn PolicyWorld>;
