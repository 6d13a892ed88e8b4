//! What a ResourceBinding under review charges ([`charges`]): core's `BindingCharge` of the
//! new object and, on an UPDATE, of the stored one. A waiting binding (suspended by a
//! quota line, never placed) is charged nothing; its release — the UPDATE that clears the
//! suspension — is charged in full; a binding cannot join a line after its creation (403).
//! Who may release a waiting binding is decided before any charge, by the line guard
//! (`binding::line_guard`, [`crate::tenancy::line_change`]).

use karmada_quota_core::decision::CODE_FORBIDDEN;
use karmada_quota_core::queue::{ANNOTATION_QUEUED_AT, is_waiting};
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::ResourceBinding;
use kube::core::admission::{AdmissionRequest, Operation};
use tokio::time::{Instant, timeout_at};

use super::answer::{Answer, error_answer, refused};
use super::covering::Prepared;
use super::{AppState, REASON_FORBIDDEN};
use crate::error::Error;
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
