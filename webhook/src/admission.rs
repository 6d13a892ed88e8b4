//! The admission router: AdmissionReview in, AdmissionReview out (docs/design.md §5).
//!
//! - `POST /validate/resourcebinding` (`binding`): decode → the quotas covering the
//!   namespace, from the cache (`covering`) → charges (core, plural from
//!   [`PluralResolver`]; `charge`) → an UPDATE whose charge did not change: allowed at
//!   once → dry-run: decide now; otherwise the [`Batcher`] decides and records the
//!   reservation → answer. Bounded by `--decision-timeout`; an error or a timeout is a
//!   refusal, never an allow.
//! - `POST /mutate/resourcebinding` (`arrival`): a CREATE a queueing quota holds is
//!   suspended and marked.
//! - `POST /validate/karmadaquota`: `crds::convert::validate_spec`; field errors → 422
//!   Invalid; a second quota in the namespace → allowed with a warning.
//! - `POST /validate/karmadaclusterquota`: `crds::convert::validate_cluster_spec` (the
//!   namespace selector required and not empty, then as a KarmadaQuota); field errors →
//!   422 Invalid; a selector that matches no namespace now → allowed with a warning.
//! - On both quota paths, first: CREATE, DELETE and changes of spec, labels or
//!   ownerReferences only by quota administrators (`crate::tenancy`), else 403 Forbidden;
//!   subresources (`status`) are never judged.
//! - Anything else: 404. A body over its path's limit (`--max-body-bytes` for bindings,
//!   `--max-policy-body-bytes`, `--max-quota-body-bytes`): 413. Before any handler
//!   decodes, the review is weighed and its estimated decoded size charged to
//!   `--max-decoded-bytes-in-flight` (`budget`, `weigh`); a review is read as typed
//!   fields, never through a generic JSON tree, and `request.options` is never read
//!   (`wire`).
//!
//! Bad input gets HTTP 200 with `allowed: false`, code 400 and a message naming the object
//! when it is known. A review of another kind is allowed (the webhook configuration is
//! wrong, not the request) and logged.
//!
//! Review fields are untrusted: a binding whose namespace, name, uid or template apiVersion
//! is longer than Kubernetes allows is refused (400) before any lookup, and every value a
//! log line or message quotes from a review is clipped (`shell::untrusted`).
//!
//! A ResourceBinding is refused (503, retryable) rather than charged against a view that
//! may be wrong: while a cache watch has failed for longer than `--max-cache-staleness`
//! (in a namespace with quotas), and when cluster quotas exist but the namespace is not in
//! the Namespace cache after a short wait (its labels decide which of them select it).
//!
//! Every review runs in a `review` span (`review_span`): `binding` (`namespace/name`),
//! `namespace`, `operation`, or `quota`. This file holds the router, its settings and
//! state; each idea has its module below.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::post;
use karmada_quota_shell::plurals::PluralResolver;

use crate::cache::QuotaCache;
use crate::denials::Denials;
use crate::metrics::Metrics;
use crate::policy::{
    CLUSTERPROPAGATIONPOLICY_PATH, Enforcement, PROPAGATIONPOLICY_PATH, PolicyWorld, SharedWorld,
};
use crate::reserve::Batcher;

/// Answers and their counting.
mod answer;
/// `POST /mutate/resourcebinding`: a CREATE that must wait joins a quota line.
mod arrival;
/// `POST /validate/resourcebinding`, step by step.
mod binding;
/// The body limit of each path, and the decode budget every review is charged to.
mod budget;
/// What a binding under review charges.
mod charge;
/// Which quotas cover a binding under review.
mod covering;
/// Reading a review; how messages name its object.
mod decode;
/// The (Cluster)PropagationPolicy review.
mod policy_review;
/// The KarmadaQuota and KarmadaClusterQuota reviews.
mod quota_objects;
/// The `review` span and its fields.
mod review_span;
/// What a review costs decoded, measured before decoding.
mod weigh;
/// The AdmissionReview as it arrives, typed.
mod wire;

pub use arrival::MUTATE_RESOURCEBINDING_PATH;
pub use binding::REASON_CHARGE_UNCHANGED;
pub use budget::{
    DEFAULT_DECODED_BYTES_IN_FLIGHT, DecodeBudget, REASON_BUDGET, REASON_TOO_LARGE,
    decoded_estimate,
};
pub use covering::NAMESPACE_GRACE;
pub use decode::{decode_binding_review, decode_cluster_quota_review, decode_quota_review};
pub use policy_review::decode_policy_review;
pub use weigh::PER_VALUE;

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

/// Metric label of a ResourceBinding review.
const KIND_BINDING: &str = "resourcebinding";
/// Metric label of a KarmadaQuota review.
const KIND_QUOTA: &str = "karmadaquota";
/// Metric label of a KarmadaClusterQuota review.
const KIND_CLUSTER_QUOTA: &str = "karmadaclusterquota";
/// Metric label of a (Cluster)PropagationPolicy review.
const KIND_POLICY: &str = "propagationpolicy";

/// `--max-policy-body-bytes`' default: a policy review carries the policy twice (object
/// and oldObject) and policies are a few KiB; 256 KiB holds thousands of cluster names.
pub const DEFAULT_POLICY_BODY_BYTES: usize = 256 * 1024;
/// `--max-quota-body-bytes`' default: a quota review carries the quota twice, status
/// included, and a status holds up to `--max-reservations` (1000) entries of ~300 bytes.
pub const DEFAULT_QUOTA_BODY_BYTES: usize = 1024 * 1024;
/// `--max-list-items`' default: more than any real cluster list, selector or status.
pub const DEFAULT_LIST_ITEMS: usize = 10_000;

/// Limits of the HTTP handlers.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Longest time to answer one review (`--decision-timeout`).
    pub decision_timeout: Duration,
    /// Largest accepted ResourceBinding review body (`--max-body-bytes`); larger → 413.
    pub max_body_bytes: usize,
    /// Largest accepted (Cluster)PropagationPolicy review body
    /// (`--max-policy-body-bytes`); larger → 413.
    pub max_policy_body_bytes: usize,
    /// Largest accepted KarmadaQuota / KarmadaClusterQuota review body
    /// (`--max-quota-body-bytes`); larger → 413.
    pub max_quota_body_bytes: usize,
    /// Most items of any list in a review (`--max-list-items`); more → 400.
    pub max_list_items: usize,
    /// Estimated decoded bytes all reviews may hold at once
    /// (`--max-decoded-bytes-in-flight`).
    pub decode_budget: DecodeBudget,
    /// What an exceeding PropagationPolicy gets (`--policy-enforcement`).
    pub policy_enforcement: Enforcement,
    /// Most templates one policy check reads (`--policy-max-templates`).
    pub policy_max_templates: usize,
    /// Longest a watch may fail before the view is stale (`--max-cache-staleness`).
    pub max_cache_staleness: Duration,
    /// Who may create, delete or change the spec of quota objects
    /// (`--quota-admin-users`, `--quota-admin-groups`).
    pub quota_admins: crate::tenancy::QuotaAdmins,
    /// Users besides the quota administrators who may release a waiting binding or change
    /// the line's annotations on it (`--queue-releasers`: the controller's identity).
    pub queue_releasers: Vec<String>,
    /// API groups whose kinds run no pods (`--pod-less-groups`).
    pub pod_less_groups: Vec<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            decision_timeout: Duration::from_secs(2),
            max_body_bytes: 3 * 1024 * 1024,
            max_policy_body_bytes: DEFAULT_POLICY_BODY_BYTES,
            max_quota_body_bytes: DEFAULT_QUOTA_BODY_BYTES,
            max_list_items: DEFAULT_LIST_ITEMS,
            decode_budget: DecodeBudget::default(),
            policy_enforcement: Enforcement::Warn,
            policy_max_templates: 200,
            max_cache_staleness: Duration::from_secs(60),
            quota_admins: crate::tenancy::QuotaAdmins::default(),
            queue_releasers: Vec::new(),
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

/// The admission router: the check paths behind the body limits and the decode budget
/// (`budget`), 404 for anything else.
pub fn app(state: AppState) -> Router {
    let s = &state.settings;
    let limit = s
        .max_body_bytes
        .max(s.max_policy_body_bytes)
        .max(s.max_quota_body_bytes);
    Router::new()
        .route(RESOURCEBINDING_PATH, post(binding::validate_binding))
        .route(MUTATE_RESOURCEBINDING_PATH, post(arrival::mutate_binding))
        .route(KARMADAQUOTA_PATH, post(quota_objects::validate_quota))
        .route(
            KARMADACLUSTERQUOTA_PATH,
            post(quota_objects::validate_cluster_quota),
        )
        .route(PROPAGATIONPOLICY_PATH, post(policy_review::validate_policy))
        .route(
            CLUSTERPROPAGATIONPOLICY_PATH,
            post(policy_review::validate_policy),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            budget::admit,
        ))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(state)
}
