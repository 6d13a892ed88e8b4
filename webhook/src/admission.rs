//! The admission router: AdmissionReview in, AdmissionReview out (docs/design.md §5).
//!
//! - `POST /validate/resourcebinding`: decode → charges (core, plural from
//!   [`PluralResolver`]) → the namespace's quotas from the cache → dry-run: decide now;
//!   otherwise the [`Batcher`] decides and records the reservation → answer. Bounded by
//!   `--decision-timeout`; an error or a timeout is a refusal, never an allow.
//! - `POST /validate/karmadaquota`: `crds::convert::validate_spec`; field errors → 422
//!   Invalid; a second quota in the namespace → allowed with a warning.
//! - `POST /validate/karmadaclusterquota`: `crds::convert::validate_cluster_spec` (the
//!   namespace selector required and not empty, then as a KarmadaQuota); field errors →
//!   422 Invalid; a selector that matches no namespace now → allowed with a warning.
//! - On both quota paths, first: CREATE, DELETE and changes of spec, labels or
//!   ownerReferences only by quota administrators (`crate::tenancy`), else 403 Forbidden;
//!   subresources (`status`) are never judged.
//! - Anything else: 404. A body over `--max-body-bytes`: 413.
//!
//! Bad input gets HTTP 200 with `allowed: false`, code 400 and a message naming the object
//! when it is known. A review of another kind is allowed (the webhook configuration is
//! wrong, not the request) and logged.
//!
//! Review fields are untrusted: a binding whose namespace, name, uid or template apiVersion
//! is longer than Kubernetes allows is refused (400) before any lookup, and every value a
//! log line or message quotes from a review is clipped (`runtime::untrusted`).
//!
//! A ResourceBinding is refused (503, retryable) rather than charged against a view that
//! may be wrong: while a cache watch has failed for longer than `--max-cache-staleness`
//! (in a namespace with quotas), and when cluster quotas exist but the namespace is not in
//! the Namespace cache after a short wait (its labels decide which of them select it).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::post;
use karmada_quota_core::decision::{CODE_FORBIDDEN, Decision};
use karmada_quota_core::queue::{ANNOTATION_QUEUED_AT, is_waiting};
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::convert::{validate_cluster_spec, validate_spec};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaQuota, ResourceBinding};
use karmada_quota_runtime::plurals::PluralResolver;
use karmada_quota_runtime::untrusted::{self, clip, within};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation};
use kube::core::{DynamicObject, GroupVersionKind, Resource, Status};
use serde::de::DeserializeOwned;
use tokio::time::{Instant, timeout_at};

use crate::cache::QuotaCache;
use crate::denials::{Denials, Denied};
use crate::metrics::{ALLOWED, DENIED, ERROR, Metrics};
use crate::policy::{
    CLUSTERPROPAGATIONPOLICY_PATH, Enforcement, POLICY_GROUP, PROPAGATIONPOLICY_PATH, PolicyWorld,
    SharedWorld, Verdict,
};
use crate::reserve::{Batcher, BindingRequest};
use karmada_quota_runtime::duration;

use crate::Error;

mod arrival;
mod policy_review;
mod quota_objects;
pub use arrival::MUTATE_RESOURCEBINDING_PATH;
use arrival::mutate_binding;
pub use policy_review::decode_policy_review;
use policy_review::validate_policy;
use quota_objects::{validate_cluster_quota, validate_quota};

/// Path of the ResourceBinding check.
pub const RESOURCEBINDING_PATH: &str = "/validate/resourcebinding";
/// Path of the KarmadaQuota check.
pub const KARMADAQUOTA_PATH: &str = "/validate/karmadaquota";
/// Path of the KarmadaClusterQuota check.
pub const KARMADACLUSTERQUOTA_PATH: &str = "/validate/karmadaclusterquota";

/// `status.reason` of a malformed review or object.
pub const REASON_BAD_REQUEST: &str = "BadRequest";
/// `status.reason` of a request the rules forbid (as Kubernetes' 403).
pub const REASON_FORBIDDEN: &str = "Forbidden";
/// `status.reason` of an invalid KarmadaQuota (as Kubernetes' validation).
pub const REASON_INVALID: &str = "Invalid";

/// HTTP code of a malformed review or object.
const CODE_BAD_REQUEST: u16 = 400;
/// HTTP code of an invalid KarmadaQuota (Kubernetes' 422 Unprocessable Entity).
const CODE_INVALID: u16 = 422;

/// Longest wait for a namespace the Namespace cache does not hold yet (one created just
/// before its first binding), when cluster quotas exist; at most half of what is left of
/// the decision timeout.
pub const NAMESPACE_GRACE: Duration = Duration::from_secs(1);
/// How often the Namespace cache is asked again during [`NAMESPACE_GRACE`].
const NAMESPACE_RECHECK: Duration = Duration::from_millis(25);

/// Metric label of a ResourceBinding review.
const KIND_BINDING: &str = "resourcebinding";
/// Metric label of a KarmadaQuota review.
const KIND_QUOTA: &str = "karmadaquota";
/// Metric label of a KarmadaClusterQuota review.
const KIND_CLUSTER_QUOTA: &str = "karmadaclusterquota";
/// Metric label of a (Cluster)PropagationPolicy review.
const KIND_POLICY: &str = "propagationpolicy";

/// Limits of the HTTP handlers.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Longest time to answer one review (`--decision-timeout`).
    pub decision_timeout: Duration,
    /// Largest accepted body (`--max-body-bytes`); larger → 413.
    pub max_body_bytes: usize,
    /// What an exceeding PropagationPolicy gets (`--policy-enforcement`).
    pub policy_enforcement: Enforcement,
    /// Most templates one policy check reads (`--policy-max-templates`).
    pub policy_max_templates: usize,
    /// Longest a watch may fail before the view is stale (`--max-cache-staleness`).
    pub max_cache_staleness: Duration,
    /// Who may create, delete or change the spec of quota objects
    /// (`--quota-admin-users`, `--quota-admin-groups`).
    pub quota_admins: crate::tenancy::QuotaAdmins,
    /// API groups whose kinds run no pods (`--pod-less-groups`).
    pub pod_less_groups: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            decision_timeout: Duration::from_secs(2),
            max_body_bytes: 3 * 1024 * 1024,
            policy_enforcement: Enforcement::Warn,
            policy_max_templates: 200,
            max_cache_staleness: Duration::from_secs(60),
            quota_admins: crate::tenancy::QuotaAdmins::default(),
            pod_less_groups: Vec::new(),
        }
    }
}

/// Everything the handlers need. Clone freely.
#[derive(Clone, Debug)]
pub struct AppState {
    /// The KarmadaQuota cache (the batcher reads the same one).
    pub cache: QuotaCache,
    /// Decides and records ResourceBinding requests.
    pub batcher: Batcher,
    /// Template kind → object-count name.
    pub plurals: PluralResolver,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Limits.
    pub settings: Settings,
    /// Logs denials and queues their events.
    pub denials: Denials,
    /// What the PropagationPolicy check reads (`None`: policies are allowed unchecked).
    pub policies: Option<SharedWorld>,
}

impl std::fmt::Debug for dyn PolicyWorld {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PolicyWorld")
    }
}

/// The admission router: the two check paths, 404 for anything else.
pub fn app(state: AppState) -> Router {
    let limit = state.settings.max_body_bytes;
    Router::new()
        .route(RESOURCEBINDING_PATH, post(validate_binding))
        .route(MUTATE_RESOURCEBINDING_PATH, post(mutate_binding))
        .route(KARMADAQUOTA_PATH, post(validate_quota))
        .route(KARMADACLUSTERQUOTA_PATH, post(validate_cluster_quota))
        .route(PROPAGATIONPOLICY_PATH, post(validate_policy))
        .route(CLUSTERPROPAGATIONPOLICY_PATH, post(validate_policy))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}

/// A response and how to count it.
pub(crate) struct Answer {
    response: AdmissionResponse,
    result: &'static str,
    reason: &'static str,
}

fn allowed<T: Resource>(req: &AdmissionRequest<T>, reason: &'static str) -> Answer {
    Answer {
        response: AdmissionResponse::from(req),
        result: ALLOWED,
        reason,
    }
}

fn refused<T: Resource>(
    req: &AdmissionRequest<T>,
    code: u16,
    status_reason: &str,
    message: &str,
    result: &'static str,
    metric_reason: &'static str,
) -> Answer {
    let mut response = AdmissionResponse::from(req);
    response.allowed = false;
    response.result = Status::failure(message, status_reason).with_code(code);
    Answer {
        response,
        result,
        reason: metric_reason,
    }
}

fn bad_request<T: Resource>(req: &AdmissionRequest<T>, message: &str) -> Answer {
    refused(
        req,
        CODE_BAD_REQUEST,
        REASON_BAD_REQUEST,
        message,
        DENIED,
        REASON_BAD_REQUEST,
    )
}

/// A 400 for a body we could not read a request from (no uid to echo).
fn bad_review(message: &str) -> Answer {
    let mut response = AdmissionResponse::invalid(message);
    response.result = Status::failure(message, REASON_BAD_REQUEST).with_code(CODE_BAD_REQUEST);
    Answer {
        response,
        result: DENIED,
        reason: REASON_BAD_REQUEST,
    }
}

fn finish(
    st: &AppState,
    kind: &'static str,
    started: Instant,
    answer: Answer,
) -> Json<AdmissionReview<DynamicObject>> {
    st.metrics.decision(kind, answer.result, answer.reason);
    st.metrics
        .decision_duration
        .observe(started.elapsed().as_secs_f64());
    Json(answer.response.into_review())
}

/// The kind a path checks.
struct Target {
    group: &'static str,
    kind: &'static str,
}

const BINDING: Target = Target {
    group: karmada_quota_crds::resourcebinding::GROUP,
    kind: karmada_quota_crds::resourcebinding::KIND,
};

const QUOTA: Target = Target {
    group: karmada_quota_crds::quota::GROUP,
    kind: "KarmadaQuota",
};

const CLUSTER_QUOTA: Target = Target {
    group: karmada_quota_crds::quota::GROUP,
    kind: "KarmadaClusterQuota",
};

impl Target {
    fn matches(&self, gvk: &GroupVersionKind) -> bool {
        gvk.group == self.group && gvk.kind == self.kind
    }
}

enum Decoded<T: Resource> {
    Request(Box<AdmissionRequest<T>>),
    Answer(Box<Answer>),
}

/// `ns/name` of the object under review, from the object when it has them.
fn object_key<T: Resource>(
    req: &AdmissionRequest<T>,
    meta: Option<&kube::core::ObjectMeta>,
) -> String {
    let ns = meta
        .and_then(|m| m.namespace.as_deref())
        .filter(|s| !s.is_empty())
        .or(req.namespace.as_deref())
        .unwrap_or_default();
    let name = meta
        .and_then(|m| m.name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or(&req.name);
    format!(
        "{}/{}",
        within(ns, untrusted::MAX_NAMESPACE_LEN),
        within(name, untrusted::MAX_NAME_LEN)
    )
}

/// Decode a review of `target`'s kind. Fast path: straight into the typed object. When
/// that fails, decode generically to say precisely what is wrong and with which object
/// (or to let a review of another kind through); a broken `oldObject` is dropped (the
/// request is then charged like a CREATE, never less).
fn decode<T>(body: &[u8], path: &str, target: &Target) -> Decoded<T>
where
    T: Resource + DeserializeOwned + Clone,
{
    match serde_json::from_slice::<AdmissionReview<T>>(body) {
        Ok(review) => match TryInto::<AdmissionRequest<T>>::try_into(review) {
            Err(_) => Decoded::Answer(Box::new(bad_review("AdmissionReview has no request"))),
            Ok(req) if !target.matches(&req.kind) => {
                Decoded::Answer(Box::new(other_kind(&req, path)))
            }
            Ok(req) => Decoded::Request(Box::new(req)),
        },
        Err(_) => decode_slow(body, path, target),
    }
}

/// The ResourceBinding review in `body` as the webhook reads it before it looks at any
/// quota: the request, or the answer given without one (400 for a malformed review, an
/// allow for a review of another kind). Pure: no cache, no clock, no I/O.
pub fn decode_binding_review(
    body: &[u8],
) -> Result<Box<AdmissionRequest<ResourceBinding>>, Box<AdmissionResponse>> {
    match decode::<ResourceBinding>(body, RESOURCEBINDING_PATH, &BINDING) {
        Decoded::Request(r) => Ok(r),
        Decoded::Answer(a) => Err(Box::new(a.response)),
    }
}

/// The KarmadaQuota review in `body`, like [`decode_binding_review`].
pub fn decode_quota_review(
    body: &[u8],
) -> Result<Box<AdmissionRequest<KarmadaQuota>>, Box<AdmissionResponse>> {
    match decode::<KarmadaQuota>(body, KARMADAQUOTA_PATH, &QUOTA) {
        Decoded::Request(r) => Ok(r),
        Decoded::Answer(a) => Err(Box::new(a.response)),
    }
}

/// The KarmadaClusterQuota review in `body`, like [`decode_binding_review`].
pub fn decode_cluster_quota_review(
    body: &[u8],
) -> Result<Box<AdmissionRequest<KarmadaClusterQuota>>, Box<AdmissionResponse>> {
    match decode::<KarmadaClusterQuota>(body, KARMADACLUSTERQUOTA_PATH, &CLUSTER_QUOTA) {
        Decoded::Request(r) => Ok(r),
        Decoded::Answer(a) => Err(Box::new(a.response)),
    }
}

fn decode_slow<T>(body: &[u8], path: &str, target: &Target) -> Decoded<T>
where
    T: Resource + DeserializeOwned + Clone,
{
    let review = match serde_json::from_slice::<AdmissionReview<DynamicObject>>(body) {
        Ok(r) => r,
        Err(e) => {
            return Decoded::Answer(Box::new(bad_review(&format!(
                "malformed AdmissionReview: {}",
                clip(&e.to_string())
            ))));
        }
    };
    let req: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(_) => return Decoded::Answer(Box::new(bad_review("AdmissionReview has no request"))),
    };
    if !target.matches(&req.kind) {
        return Decoded::Answer(Box::new(other_kind(&req, path)));
    }
    let typed = |o: &DynamicObject| serde_json::to_value(o).and_then(serde_json::from_value::<T>);
    let object = match req.object.as_ref().map(typed).transpose() {
        Ok(o) => o,
        Err(e) => {
            let key = object_key(&req, req.object.as_ref().map(|o| &o.metadata));
            return Decoded::Answer(Box::new(bad_request(
                &req,
                &format!(
                    "{} {key} is not a valid {}: {}",
                    target.kind,
                    target.kind,
                    clip(&e.to_string())
                ),
            )));
        }
    };
    let old_object = match req.old_object.as_ref().map(typed).transpose() {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(
                object = object_key(&req, req.old_object.as_ref().map(|o| &o.metadata)),
                error = %clip(&e.to_string()),
                "the stored {} does not decode; checking the request as a CREATE",
                target.kind
            );
            None
        }
    };
    Decoded::Request(Box::new(AdmissionRequest {
        types: req.types,
        uid: req.uid,
        kind: req.kind,
        resource: req.resource,
        sub_resource: req.sub_resource,
        request_kind: req.request_kind,
        request_resource: req.request_resource,
        request_sub_resource: req.request_sub_resource,
        name: req.name,
        namespace: req.namespace,
        operation: req.operation,
        user_info: req.user_info,
        object,
        old_object,
        dry_run: req.dry_run,
        options: req.options,
    }))
}

fn other_kind<T: Resource>(req: &AdmissionRequest<T>, path: &str) -> Answer {
    tracing::warn!(
        %path,
        group = %clip(&req.kind.group),
        kind = %clip(&req.kind.kind),
        name = %clip(&req.name),
        "review of another kind on this path: allowed; check the ValidatingWebhookConfiguration"
    );
    allowed(req, "OtherKind")
}

async fn validate_binding(
    State(st): State<AppState>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let started = Instant::now();
    let answer = review_binding(&st, &body, started + st.settings.decision_timeout).await;
    finish(&st, KIND_BINDING, started, answer)
}

async fn review_binding(st: &AppState, body: &[u8], deadline: Instant) -> Answer {
    let req = match decode::<ResourceBinding>(body, RESOURCEBINDING_PATH, &BINDING) {
        Decoded::Request(r) => r,
        Decoded::Answer(a) => return *a,
    };
    let p = match prepare(st, &req, deadline, true).await {
        Ok(p) => p,
        Err(answer) => return *answer,
    };
    let (new, key, namespace, name) = (p.new, p.key, p.namespace, p.name);
    let (uid, count, quotas, clusters) = (p.uid, p.count, p.quotas, p.clusters);
    let template = &new.spec.resource;
    let pod_less = &st.settings.pod_less_groups;
    let annotations = new.metadata.annotations.as_ref();
    let waiting = is_waiting(annotations, &new.spec);
    // A waiting binding (suspended by a quota line, never placed) is charged nothing;
    // its release — the UPDATE that clears the suspension — is charged in full.
    let new_charge = if waiting {
        BindingCharge::default()
    } else {
        BindingCharge::compute_with(&new.spec, count.as_deref(), pod_less)
    };
    let old_charge = match (&req.operation, req.old_object.as_ref()) {
        (Operation::Update, Some(old)) => {
            let old_waiting = is_waiting(old.metadata.annotations.as_ref(), &old.spec);
            if waiting && !old_waiting {
                // Karmada: a binding cannot be paused once admitted (its charge would
                // vanish while it may run); it joins a line only at its creation.
                return refused(
                    &req,
                    CODE_FORBIDDEN,
                    REASON_FORBIDDEN,
                    &format!(
                        "ResourceBinding {key}: a binding joins a quota's waiting line only at \
                         its creation; it cannot be suspended with {ANNOTATION_QUEUED_AT} later"
                    ),
                    DENIED,
                    "LateQueueEntry",
                );
            }
            let t = &old.spec.resource;
            let old_count = if t.api_version == template.api_version && t.kind == template.kind {
                count.clone()
            } else {
                match timeout_at(deadline, st.plurals.count_name(&t.api_version, &t.kind)).await {
                    Ok(c) => c,
                    Err(_) => return error_answer(st, &req, &key, Error::Timeout),
                }
            };
            Some(if old_waiting {
                BindingCharge::default()
            } else {
                BindingCharge::compute_with(&old.spec, old_count.as_deref(), pod_less)
            })
        }
        _ => None,
    };
    // Who sends what (docs/karmada.md: the detector's CREATE, the scheduler's UPDATE).
    tracing::debug!(
        %namespace,
        binding = %name,
        operation = ?req.operation,
        user = req.user_info.username.as_deref().unwrap_or(""),
        clusters = new.spec.clusters.len(),
        // A multi-template binding carries its replicas in its components.
        replicas = if new.spec.components.is_empty() {
            i64::from(new.spec.replicas)
        } else {
            new.spec.components.iter().map(|c| i64::from(c.replicas)).sum()
        },
        components = new.spec.components.len(),
        waiting,
        dry_run = req.dry_run,
        "ResourceBinding review"
    );
    let request = BindingRequest {
        namespace: namespace.clone(),
        name: name.clone(),
        uid,
        generation: new.metadata.generation.unwrap_or(0),
        old: old_charge,
        new: new_charge,
    };

    let result = if req.dry_run {
        st.batcher.decide_now_with(&request, &quotas, &clusters)
    } else {
        timeout_at(deadline, st.batcher.submit(request, deadline))
            .await
            .unwrap_or(Err(Error::Timeout))
    };
    match result {
        Ok(Decision::Allow(_)) => {
            tracing::debug!(%namespace, binding = %name, dry_run = req.dry_run, "ResourceBinding allowed");
            allowed(&req, "Allowed")
        }
        Ok(Decision::Deny(d)) => {
            st.denials.report(&Denied {
                binding_kind: BINDING.kind,
                namespace: &namespace,
                binding: &name,
                template,
                quotas: &quotas,
                cluster_quotas: &clusters,
                denial: &d,
                dry_run: req.dry_run,
            });
            refused(
                &req,
                d.code,
                d.reason.as_str(),
                &d.message,
                DENIED,
                d.reason.as_str(),
            )
        }
        Err(e) => error_answer(st, &req, &key, e),
    }
}

/// A ResourceBinding review read up to its quotas: the new object, who it is, its
/// template's object-count name and the quota objects covering its namespace.
pub(crate) struct Prepared<'r> {
    /// The new object.
    pub(crate) new: &'r ResourceBinding,
    /// `ns/name`, for messages.
    pub(crate) key: String,
    /// Its namespace.
    pub(crate) namespace: String,
    /// Its name.
    pub(crate) name: String,
    /// Its uid.
    pub(crate) uid: String,
    /// Its template's object-count name.
    pub(crate) count: Option<String>,
    /// The namespace's KarmadaQuotas.
    pub(crate) quotas: Vec<Arc<crate::cache::CachedQuota>>,
    /// The KarmadaClusterQuotas selecting the namespace.
    pub(crate) clusters: Vec<Arc<crate::cache::CachedClusterQuota>>,
}

/// Read a binding review up to its quotas; the answer given without a decision otherwise
/// (not a CREATE/UPDATE, a subresource, a bad object, no quota, an unusable cache, …).
/// `need_uid`: a binding without `metadata.uid` is refused (the validating review: its
/// reservation is keyed by the uid); a mutating review of a CREATE runs before the
/// apiserver sets the uid, and gets an empty one.
pub(crate) async fn prepare<'r>(
    st: &AppState,
    req: &'r AdmissionRequest<ResourceBinding>,
    deadline: Instant,
    need_uid: bool,
) -> Result<Prepared<'r>, Box<Answer>> {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Err(Box::new(allowed(req, "NotChecked")));
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(Box::new(allowed(req, "NotChecked")));
    }
    let Some(new) = req.object.as_ref() else {
        let key = object_key(req, None);
        return Err(Box::new(bad_request(
            req,
            &format!("ResourceBinding {key}: the review has no object"),
        )));
    };
    let key = object_key(req, Some(&new.metadata));
    let namespace = new
        .metadata
        .namespace
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| req.namespace.clone())
        .unwrap_or_default();
    let uid = match new.metadata.uid.clone().filter(|u| !u.is_empty()) {
        Some(uid) => uid,
        None if !need_uid => String::new(),
        None => {
            return Err(Box::new(bad_request(
                req,
                &format!("ResourceBinding {key} has no metadata.uid"),
            )));
        }
    };
    let name = new
        .metadata
        .name
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| req.name.clone());
    if let Some(field) = oversized(&namespace, &name, &uid) {
        return Err(Box::new(bad_request(
            req,
            &format!("ResourceBinding {key}: {field} is longer than Kubernetes allows"),
        )));
    }
    let error = |e: Error| Box::new(error_answer(st, req, &key, e));
    if !st.cache.is_synced() {
        return Err(error(Error::NotSynced));
    }
    if !namespace_placeable(st, &namespace, deadline).await {
        return Err(error(Error::UnknownNamespace(namespace.clone())));
    }
    let quotas = st.cache.in_namespace(&namespace);
    let clusters = st.cache.cluster_quotas_covering(&namespace);
    if quotas.is_empty() && clusters.is_empty() {
        // Design §4 step 2: no quota covers the namespace → allowed; nothing to compute.
        return Err(Box::new(allowed(req, "NoQuota")));
    }
    if let Some(stale) = st.cache.stale(st.settings.max_cache_staleness) {
        return Err(error(Error::Stale(stale)));
    }

    let template = &new.spec.resource;
    if let Some(why) = untrusted::group_version_too_long(&template.api_version) {
        return Err(Box::new(bad_request(
            req,
            &format!("ResourceBinding {key}: spec.resource.{why}"),
        )));
    }
    let Ok(count) = timeout_at(
        deadline,
        st.plurals.count_name(&template.api_version, &template.kind),
    )
    .await
    else {
        return Err(error(Error::Timeout));
    };
    if count.is_none()
        && let Some(quota) = counts_group(&quotas, &template.api_version)
            .or_else(|| counts_group(&clusters, &template.api_version))
    {
        return Err(error(Error::UnknownPlural {
            api_version: template.api_version.clone(),
            kind: within(&template.kind, untrusted::MAX_KIND_LEN).into_owned(),
            namespace,
            quota,
        }));
    }
    Ok(Prepared {
        new,
        key,
        namespace,
        name,
        uid,
        count,
        quotas,
        clusters,
    })
}

/// The refusal for an internal error `e` while reviewing binding `key` (never an allow).
pub(crate) fn error_answer<T: Resource>(
    st: &AppState,
    req: &AdmissionRequest<T>,
    key: &str,
    e: Error,
) -> Answer {
    let message = match e {
        Error::Timeout => format!(
            "ResourceBinding {key}: no quota decision within {}",
            duration::format(st.settings.decision_timeout)
        ),
        _ => format!("ResourceBinding {key}: {e}"),
    };
    tracing::warn!(%message, "refusing on error");
    refused(req, e.code(), e.reason(), &message, ERROR, e.metric_label())
}

/// The first of a binding's namespace, name and uid longer than Kubernetes allows (a
/// forged review's; the apiserver validates real ones), so that none reaches a log line,
/// a rate-limit key or a reservation entry.
fn oversized(namespace: &str, name: &str, uid: &str) -> Option<&'static str> {
    if namespace.len() > untrusted::MAX_NAMESPACE_LEN {
        Some("metadata.namespace")
    } else if name.len() > untrusted::MAX_NAME_LEN {
        Some("metadata.name")
    } else if uid.len() > untrusted::MAX_UID_LEN {
        Some("metadata.uid")
    } else {
        None
    }
}

/// Whether the cache can tell which cluster quotas select `namespace`: always when there
/// are none; otherwise once the Namespace cache holds it. A namespace created just before
/// its first binding may not have arrived yet: it is asked again for up to
/// [`NAMESPACE_GRACE`] (at most half of what is left before `deadline`).
async fn namespace_placeable(st: &AppState, namespace: &str, deadline: Instant) -> bool {
    if !st.cache.has_cluster_quotas() || st.cache.knows_namespace(namespace) {
        return true;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let until = Instant::now() + NAMESPACE_GRACE.min(left / 2);
    while Instant::now() < until {
        tokio::time::sleep(NAMESPACE_RECHECK).await;
        if st.cache.knows_namespace(namespace) {
            return true;
        }
    }
    false
}

/// A quota (name) that counts objects of `api_version`'s group (`count/<plural>.<group>`,
/// or `count/<plural>` for the core group): one the template's count could matter to.
fn counts_group<K>(quotas: &[Arc<crate::cache::Cached<K>>], api_version: &str) -> Option<String> {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    quotas.iter().find_map(|q| {
        let parsed = q.parsed.as_ref().ok()?;
        parsed
            .state
            .spec
            .hard
            .names()
            .filter_map(|n| n.strip_prefix("count/"))
            .any(|rest| match rest.split_once('.') {
                Some((_, g)) => g == group,
                None => group.is_empty(),
            })
            .then(|| q.name().to_owned())
    })
}
