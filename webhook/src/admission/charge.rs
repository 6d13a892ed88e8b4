//! What a ResourceBinding under review charges ([`charges`]): core's `BindingCharge` of the
//! new object and, on an UPDATE, of the stored one. A waiting binding (suspended by a
//! quota line, never placed) is charged nothing; its release — the UPDATE that clears the
//! suspension — is charged in full; a binding cannot join a line after its creation (403).
//!
//! The line belongs to the quota: only the controller (`--queue-releasers`) and the quota
//! administrators may release a waiting binding (clear its suspension or our mark, or
//! place it) or change the line's annotations on it; anyone else is refused (403). A
//! priority raised while a binding waits is allowed but does not move it: the line orders
//! by the priority it joined with (`core::queue::line_priority`).

use karmada_quota_core::decision::CODE_FORBIDDEN;
use karmada_quota_core::queue::{ANNOTATION_QUEUED_AT, LINE_ANNOTATIONS, is_waiting};
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::ResourceBinding;
use kube::core::admission::{AdmissionRequest, Operation};
use tokio::time::{Instant, timeout_at};

use super::answer::{Answer, error_answer, refused};
use super::covering::Prepared;
use super::{AppState, REASON_FORBIDDEN};
use crate::Error;
use crate::metrics::DENIED;

/// What one review charges.
pub(super) struct Charges {
    /// The new object is waiting in a quota line (charged nothing).
    pub(super) waiting: bool,
    /// Charge of the new object.
    pub(super) new: BindingCharge,
    /// Charge of the stored object (UPDATE), `None` on CREATE or when `oldObject` did not
    /// decode (charged like a CREATE, never less).
    pub(super) old: Option<BindingCharge>,
}

impl Charges {
    /// An UPDATE whose new object charges exactly what the stored one does: core's
    /// decision rule 1 (`core::decision::decide`) then allows it and writes nothing,
    /// whatever the quotas covering it hold.
    pub(super) fn unchanged(&self) -> bool {
        self.old.as_ref() == Some(&self.new)
    }
}

/// The charges of the review `req`, read up to its quotas as `p`; the answer that ends the
/// review otherwise: 403 for a binding paused after its creation, 504 when the stored
/// object's template kind cannot be named before `deadline`.
pub(super) async fn charges(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    p: &Prepared<'_>,
    deadline: Instant,
) -> Result<Charges, Box<Answer>> {
    let pod_less = &st.settings.pod_less_groups;
    let new = p.new;
    let waiting = is_waiting(new.metadata.annotations.as_ref(), &new.spec);
    let new_charge = if waiting {
        BindingCharge::default()
    } else {
        BindingCharge::compute_with(&new.spec, p.count.as_deref(), pod_less)
    };
    let (Operation::Update, Some(old)) = (&req.operation, req.old_object.as_ref()) else {
        return Ok(Charges {
            waiting,
            new: new_charge,
            old: None,
        });
    };
    let old_waiting = is_waiting(old.metadata.annotations.as_ref(), &old.spec);
    if waiting && !old_waiting {
        // Karmada: a binding cannot be paused once admitted (its charge would vanish while
        // it may run); it joins a line only at its creation.
        return Err(Box::new(refused(
            req,
            CODE_FORBIDDEN,
            REASON_FORBIDDEN,
            &format!(
                "ResourceBinding {}: a binding joins a quota's waiting line only at its \
                 creation; it cannot be suspended with {ANNOTATION_QUEUED_AT} later",
                p.key
            ),
            DENIED,
            "LateQueueEntry",
        )));
    }
    if old_waiting {
        line_guard(st, req, p, waiting, old, new)?;
    }
    let (t, template) = (&old.spec.resource, &new.spec.resource);
    let old_count = if t.api_version == template.api_version && t.kind == template.kind {
        p.count.clone()
    } else {
        match timeout_at(deadline, st.plurals.count_name(&t.api_version, &t.kind)).await {
            Ok(c) => c,
            Err(_) => return Err(Box::new(error_answer(st, req, &p.key, Error::Timeout))),
        }
    };
    let old_charge = if old_waiting {
        BindingCharge::default()
    } else {
        BindingCharge::compute_with(&old.spec, old_count.as_deref(), pod_less)
    };
    Ok(Charges {
        waiting,
        new: new_charge,
        old: Some(old_charge),
    })
}

/// An UPDATE of a waiting binding by someone who is neither the controller nor a quota
/// administrator: refused when it leaves the line (a release the controller did not
/// make would jump the bindings ahead of it) or changes the line's annotations.
fn line_guard<'a>(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    p: &Prepared<'_>,
    still_waiting: bool,
    old: &'a ResourceBinding,
    new: &'a ResourceBinding,
) -> Result<(), Box<Answer>> {
    let user = req.user_info.username.as_deref();
    let groups = req.user_info.groups.as_deref().unwrap_or_default();
    if st.settings.quota_admins.admits(user, groups)
        || user.is_some_and(|u| st.settings.queue_releasers.iter().any(|r| r == u))
    {
        return Ok(());
    }
    let annotation = |o: &'a ResourceBinding, k: &str| -> Option<&'a String> {
        o.metadata.annotations.as_ref()?.get(k)
    };
    let what = if !still_waiting {
        "release it (clear its suspension or the line's mark, or place it)".to_owned()
    } else if let Some(k) = LINE_ANNOTATIONS
        .into_iter()
        .find(|k| annotation(old, k) != annotation(new, k))
    {
        format!("change its annotation {k}")
    } else {
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
