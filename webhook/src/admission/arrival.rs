//! `POST /mutate/resourcebinding` (docs/design.md §5b): on a binding's CREATE, a quota in
//! `Queue` mode that it does not fit — or whose line it would jump — holds it: the answer
//! patches `spec.suspension.scheduling: true` (Karmada's scheduler then leaves it alone)
//! and our mark (`quota.karmada.io/queued-at`, `quota.karmada.io/waiting-for`). The
//! validating webhook, which runs after every mutation, then charges it nothing.
//!
//! Never a refusal on a quota decision (the validating webhook refuses); refusals only on
//! errors, as the validating webhook would (registered `failurePolicy: Fail`). A binding
//! someone else suspended (no mark of ours) is left as it is; a mark the creator wrote
//! itself is removed unless the webhook suspends the binding now, so that the place in
//! line is always the webhook's.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use karmada_quota_core::queue::{
    ANNOTATION_QUEUED_AT, ANNOTATION_QUEUED_PRIORITY, ANNOTATION_WAITING_FOR, Arrival,
    LINE_ANNOTATIONS, Waiting, format_queued_at, priority, suspended,
};
use karmada_quota_core::selection::QuotaKey;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::ResourceBinding;
use kube::core::admission::{AdmissionRequest, Operation};
use kube::core::{DynamicObject, admission::AdmissionReview};
use serde_json::{Value, json};
use tokio::time::Instant;
use tracing::field::Empty;

use super::answer::{Answer, allowed, error_answer, finish};
use super::covering::{Prepared, prepare};
use super::decode::{BINDING, Decoded, decode};
use super::review_span::record_binding;
use super::{AppState, RESOURCEBINDING_PATH};

/// Path of the mutating ResourceBinding review (CREATE only).
pub const MUTATE_RESOURCEBINDING_PATH: &str = "/mutate/resourcebinding";
/// Metric label of a mutating ResourceBinding review.
const KIND_ARRIVAL: &str = "resourcebinding_arrival";

/// The handler: one review, answered (with its patch) and counted.
#[tracing::instrument(
    name = "review",
    skip_all,
    fields(kind = KIND_ARRIVAL, binding = Empty, namespace = Empty, operation = Empty)
)]
pub(super) async fn mutate_binding(
    State(st): State<AppState>,
    body: Bytes,
) -> Json<AdmissionReview<DynamicObject>> {
    let started = Instant::now();
    let answer = review_arrival(&st, &body, started + st.settings.decision_timeout).await;
    finish(&st, KIND_ARRIVAL, started, answer)
}

async fn review_arrival(st: &AppState, body: &[u8], deadline: Instant) -> Answer {
    let req = match decode::<ResourceBinding>(body, RESOURCEBINDING_PATH, &BINDING) {
        Decoded::Request(r) => r,
        Decoded::Answer(a) => return *a,
    };
    record_binding(&req);
    if req.operation != Operation::Create {
        return allowed(&req, "NotChecked");
    }
    if let Some(new) = req.object.as_ref()
        && suspended(&new.spec)
        && !marked(new)
    {
        // Someone else's suspension: charged in full by the validating webhook, as before.
        return allowed(&req, "SuspendedByOthers");
    }
    let p = match prepare(st, &req, deadline, false).await {
        Ok(p) => p,
        Err(answer) => return strip_mark(&req, *answer),
    };
    let now_ms = jiff::Timestamp::now().as_millisecond();
    let binding = waiting(st, &p, now_ms);
    match st
        .batcher
        .arrival(&binding, &p.quotas, &p.clusters, req.dry_run)
    {
        Err(e) => error_answer(st, &req, &p.key, e),
        Ok(Arrival::Admit) => strip_mark(&req, allowed(&req, "Admitted")),
        Ok(Arrival::Wait(keys)) => {
            tracing::info!(
                quotas = %waiting_for(&keys),
                priority = binding.priority,
                dry_run = req.dry_run,
                "ResourceBinding joins the quota line (scheduling suspended)"
            );
            let patch = suspend_patch(
                p.new,
                &format_queued_at(now_ms),
                &waiting_for(&keys),
                binding.priority,
            );
            with_patch(allowed(&req, "Queued"), patch)
        }
    }
}

/// The binding of a CREATE as the line sees it, arriving at `now_ms`: priced in full.
pub(super) fn waiting(st: &AppState, p: &Prepared<'_>, now_ms: i64) -> Waiting {
    Waiting {
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        uid: p.uid.clone(),
        generation: p.new.metadata.generation.unwrap_or(0),
        priority: priority(&p.new.spec),
        created: now_ms.div_euclid(1000),
        queued_at: now_ms,
        charge: BindingCharge::compute_with(
            &p.new.spec,
            p.count.as_deref(),
            &st.settings.pod_less_groups,
        ),
    }
}

/// Whether the object carries our mark.
fn marked(rb: &ResourceBinding) -> bool {
    rb.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| LINE_ANNOTATIONS.iter().any(|k| a.contains_key(*k)))
}

/// `answer`, with a patch removing a mark of ours the creator wrote, when it is allowed.
fn strip_mark(req: &AdmissionRequest<ResourceBinding>, answer: Answer) -> Answer {
    let Some(new) = req.object.as_ref().filter(|o| marked(o)) else {
        return answer;
    };
    if !answer.response.allowed {
        return answer;
    }
    let annotations = new.metadata.annotations.as_ref();
    let ops: Vec<Value> = LINE_ANNOTATIONS
        .into_iter()
        .filter(|k| annotations.is_some_and(|a| a.contains_key(*k)))
        .map(|k| json!({"op": "remove", "path": format!("/metadata/annotations/{}", pointer(k))}))
        .collect();
    with_patch(answer, Value::Array(ops))
}

/// The quotas a binding waits for, as the `waiting-for` annotation says them.
fn waiting_for(keys: &[QuotaKey]) -> String {
    keys.iter()
        .map(|k| match k {
            QuotaKey::Namespaced { name, .. } => name.clone(),
            QuotaKey::Cluster { name } => format!("cluster/{name}"),
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// JSON pointer escaping of one path segment (RFC 6901).
fn pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

/// The JSON patch that suspends `rb`'s scheduling and marks it (with the priority it
/// holds its place in line with).
fn suspend_patch(rb: &ResourceBinding, queued_at: &str, waiting_for: &str, priority: i32) -> Value {
    let mut ops = Vec::new();
    let priority = priority.to_string();
    let marks = BTreeMap::from([
        (ANNOTATION_QUEUED_AT, queued_at),
        (ANNOTATION_WAITING_FOR, waiting_for),
        (ANNOTATION_QUEUED_PRIORITY, priority.as_str()),
    ]);
    if rb.metadata.annotations.is_none() {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": marks}));
    } else {
        for (k, v) in marks {
            ops.push(json!({"op": "add", "path": format!("/metadata/annotations/{}", pointer(k)), "value": v}));
        }
    }
    if rb.spec.suspension.is_none() {
        ops.push(json!({"op": "add", "path": "/spec/suspension", "value": {"scheduling": true}}));
    } else {
        ops.push(json!({"op": "add", "path": "/spec/suspension/scheduling", "value": true}));
    }
    Value::Array(ops)
}

/// `answer` carrying the JSON patch `ops` (none when empty).
fn with_patch(answer: Answer, ops: Value) -> Answer {
    if ops.as_array().is_some_and(Vec::is_empty) {
        return answer;
    }
    let Answer {
        response,
        result,
        reason,
    } = answer;
    let response = match serde_json::from_value::<json_patch::Patch>(ops) {
        Ok(patch) => match response.clone().with_patch(patch) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a JSON patch");
                response.deny("internal error: cannot encode the admission patch")
            }
        },
        Err(e) => {
            tracing::error!(error = %e, "cannot build a JSON patch");
            response.deny("internal error: cannot build the admission patch")
        }
    };
    Answer {
        response,
        result,
        reason,
    }
}

#[cfg(test)]
mod tests;
