//! `POST /validate/resourcebinding` (docs/design.md §5), as named steps read top-down:
//!
//! ```text
//!  1. decode                 decode::decode                400, or an allow for another kind
//!  2. which quotas cover it  covering::prepare             allow (not judged, no quota), 400, 503
//!  3. who may change a line  line_guard                    403 (a waiting binding released
//!                                                          or re-annotated by a tenant)
//!     who may start ahead   arrival_guard                 403 (a CREATE jumping a strict
//!                                                          line the arrivals review did
//!                                                          not see)
//!  4. what it charges        charge::charges               403 (paused after creation), 504
//!  5. early answers          early_answer                  allow: an UPDATE whose charge
//!                                                          did not change, without queueing
//!  6. reserve                reserve                       the batcher (a dry run: decided now)
//!  7. answer                 answer                        allow, denial (reported), error
//! ```
//!
//! Steps 1–5 may end the review with their own answer (right column). The whole review is
//! bounded by `--decision-timeout`; an error or a timeout is a refusal, never an allow. It
//! runs in a `review` span carrying `binding` (`namespace/name`), `namespace` and
//! `operation` ([`super::review_span`]).

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use karmada_quota_core::decision::{CODE_FORBIDDEN, Decision};
use karmada_quota_core::queue::{
    LABEL_WAITING_LINE, LABEL_WAITING_LINE_VALUE, is_waiting, suspended,
};
use karmada_quota_crds::ResourceBinding;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionReview, Operation};
use tokio::time::{Instant, timeout_at};
use tracing::field::Empty;

use super::answer::{Answer, allowed, error_answer, finish, refused};
use super::charge::{Charges, charges};
use super::covering::{Prepared, prepare};
use super::decode::{BINDING, Decoded, decode};
use super::review_span::record_binding;
use super::{AppState, KIND_BINDING, REASON_FORBIDDEN, RESOURCEBINDING_PATH};
use crate::denials::Denied;
use crate::error::{Error, Result};
use crate::metrics::DENIED;
use crate::reserve::BindingRequest;

/// Metric reason of an UPDATE allowed early because its charge did not change.
pub const REASON_CHARGE_UNCHANGED: &str = "ChargeUnchanged";

/// The handler: one review, answered and counted.
#[tracing::instrument(
    name = "review",
    skip_all,
    fields(kind = KIND_BINDING, binding = Empty, namespace = Empty, operation = Empty)
)]
pub(super) async fn validate_binding(
    State(st): State<AppState>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let started = Instant::now();
    let answer = review_binding(&st, &body, started + st.settings.decision_timeout).await;
    finish(&st, KIND_BINDING, started, answer)
}

/// The review of `body`, step by step (see the module's doc), answered by `deadline`.
async fn review_binding(st: &AppState, body: &[u8], deadline: Instant) -> Answer {
    let req = match decode::<ResourceBinding>(body, RESOURCEBINDING_PATH, &BINDING) {
        Decoded::Request(r) => r,
        Decoded::Answer(a) => return *a,
    };
    record_binding(&req);
    let p = match prepare(st, &req, deadline, true).await {
        Ok(p) => p,
        Err(answer) => return *answer,
    };
    if let Err(answer) = line_guard(st, &req, &p) {
        return *answer;
    }
    if let Err(answer) = arrival_guard(st, &req, &p) {
        return *answer;
    }
    let charges = match charges(st, &req, &p, deadline).await {
        Ok(c) => c,
        Err(answer) => return *answer,
    };
    log_review(&req, &p, &charges);
    if let Some(answer) = early_answer(st, &req, &p, &charges) {
        return answer;
    }
    let result = reserve(st, &req, &p, charges, deadline).await;
    answer(st, &req, &p, result)
}

/// An UPDATE of a binding waiting in a quota's line, by someone who is neither the
/// controller nor a quota administrator: refused (403) when it leaves the line (a release
/// the controller did not make would jump the bindings ahead of it) or changes the line's
/// annotations ([`crate::tenancy::line_change`]).
fn line_guard(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    p: &Prepared<'_>,
) -> Result<(), Box<Answer>> {
    let (Operation::Update, Some(old)) = (&req.operation, req.old_object.as_ref()) else {
        return Ok(());
    };
    if !is_waiting(old.metadata.annotations.as_ref(), &old.spec) {
        return Ok(());
    }
    let user = req.user_info.username.as_deref();
    let groups = req.user_info.groups.as_deref().unwrap_or_default();
    if st
        .settings
        .quota_admins
        .may_change_line(&st.settings.queue_releasers, user, groups)
    {
        return Ok(());
    }
    let new = p.new;
    let still_waiting = is_waiting(new.metadata.annotations.as_ref(), &new.spec);
    let Some(what) = crate::tenancy::line_change(
        still_waiting,
        old.metadata.annotations.as_ref(),
        new.metadata.annotations.as_ref(),
    ) else {
        return Ok(());
    };
    let who = karmada_quota_shell::untrusted::clip(user.unwrap_or("(no user)")).to_string();
    Err(Box::new(refused(
        req,
        CODE_FORBIDDEN,
        REASON_FORBIDDEN,
        &format!(
            "ResourceBinding {} waits in a quota's line: only the quota controller releases \
             it, in line order; user \"{who}\" may not {what} (--queue-releasers, \
             --quota-admin-users and --quota-admin-groups name who may)",
            p.key
        ),
        DENIED,
        "LineJumped",
    )))
}

/// A CREATE that is not suspended, where a quota in `Queue` mode and strict order has a
/// line it would jump: refused (403). The arrivals review would have held it; it did not
/// see it (the chart registers it only for namespaces with core's `LABEL_WAITING_LINE`,
/// which the controller adds once a `Queue` quota covers the namespace, or the chart's
/// `webhook.queueing` is off). Karmada's detector retries it, and once the arrivals
/// review runs there it waits in its place.
fn arrival_guard(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    p: &Prepared<'_>,
) -> Result<(), Box<Answer>> {
    if req.operation != Operation::Create || suspended(&p.new.spec) {
        return Ok(());
    }
    let binding = || super::arrival::waiting(st, p, jiff::Timestamp::now().as_millisecond());
    let jumped = match st.batcher.jumped_lines(binding, &p.quotas, &p.clusters) {
        Ok(jumped) if jumped.is_empty() => return Ok(()),
        Ok(jumped) => jumped,
        Err(e) => return Err(Box::new(error_answer(st, req, &p.key, e))),
    };
    let lines = jumped
        .iter()
        .map(|k| format!("{} {}", k.noun(), k.name()))
        .collect::<Vec<_>>()
        .join(", ");
    Err(Box::new(refused(
        req,
        CODE_FORBIDDEN,
        REASON_FORBIDDEN,
        &format!(
            "ResourceBinding {} would start ahead of the bindings waiting in the line of \
             {lines} (spec.admission.order StrictFIFO), and the waiting line's review did not \
             see it: its namespace lacks the label {LABEL_WAITING_LINE}={LABEL_WAITING_LINE_VALUE} \
             the controller adds where a Queue-mode quota applies (--label-line-namespaces), or \
             the MutatingWebhookConfiguration is not installed. Karmada retries it; once the \
             namespace carries the label it waits in its place",
            p.key
        ),
        DENIED,
        "NotInLine",
    )))
}

/// Who sends what (docs/karmada.md: the detector's CREATE, the scheduler's UPDATE), at
/// debug.
fn log_review(req: &AdmissionRequest<ResourceBinding>, p: &Prepared<'_>, charges: &Charges) {
    let new = p.new;
    tracing::debug!(
        user = req.user_info.username.as_deref().unwrap_or(""),
        clusters = new.spec.clusters.len(),
        // A multi-template binding carries its replicas in its components.
        replicas = if new.spec.components.is_empty() {
            i64::from(new.spec.replicas)
        } else {
            new.spec
                .components
                .iter()
                .map(|c| i64::from(c.replicas))
                .sum()
        },
        components = new.spec.components.len(),
        waiting = charges.waiting,
        dry_run = req.dry_run,
        "ResourceBinding review"
    );
}

/// The answer given before any queueing: an UPDATE whose charge did not change is
/// allowed at once (core's rule 1 allows it and writes nothing, so it need not wait behind
/// the reservation batches in the queue). Only while every quota covering it can be
/// enforced; otherwise the usual path refuses it, naming the quota.
fn early_answer(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    p: &Prepared<'_>,
    charges: &Charges,
) -> Option<Answer> {
    if !charges.unchanged() {
        return None;
    }
    st.batcher
        .check_enforceable(&p.namespace, &p.quotas, &p.clusters)
        .ok()?;
    tracing::debug!(
        reason = REASON_CHARGE_UNCHANGED,
        dry_run = req.dry_run,
        "ResourceBinding allowed"
    );
    Some(allowed(req, REASON_CHARGE_UNCHANGED))
}

/// The decision and, unless a dry run, the reservation: the batcher decides the request
/// with its group's batch and records its entries by `deadline`; a dry run is decided now
/// against the newest copies, nothing written.
async fn reserve(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    p: &Prepared<'_>,
    charges: Charges,
    deadline: Instant,
) -> Result<Decision> {
    let request = BindingRequest {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
        generation: p.new.metadata.generation.unwrap_or(0),
        old: charges.old,
        new: charges.new,
    };
    if req.dry_run {
        st.batcher.decide_now_with(&request, &p.quotas, &p.clusters)
    } else {
        timeout_at(deadline, st.batcher.submit(request, deadline))
            .await
            .unwrap_or(Err(Error::Timeout))
    }
}

/// The answer to the decision `result`: an allow; a denial (logged and turned into events
/// by [`crate::denials`]) with core's code, reason and message; or the refusal of an error.
fn answer(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    p: &Prepared<'_>,
    result: Result<Decision>,
) -> Answer {
    match result {
        Ok(Decision::Allow(_)) => {
            tracing::debug!(
                reason = "Allowed",
                dry_run = req.dry_run,
                "ResourceBinding allowed"
            );
            allowed(req, "Allowed")
        }
        Ok(Decision::Deny(d)) => {
            st.denials.report(&Denied {
                binding_kind: BINDING.kind,
                namespace: &p.namespace,
                binding: &p.name,
                template: &p.new.spec.resource,
                quotas: &p.quotas,
                cluster_quotas: &p.clusters,
                denial: &d,
                dry_run: req.dry_run,
            });
            refused(
                req,
                d.code,
                d.reason.as_str(),
                &d.message,
                DENIED,
                d.reason.as_str(),
            )
        }
        Err(e) => error_answer(st, req, &p.key, e),
    }
}
