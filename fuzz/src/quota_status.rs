//! `quota_status`: a whole KarmadaQuota as JSON, as the webhook's cache and the controller
//! read it from the API (status written by this or an older version, or edited by hand),
//! through `crds::convert::quota_state` (its `parse_status` is the one parse of a stored
//! status both binaries use) and the ledger's effective usage.
//!
//! Laws, for an object that decodes:
//! - what is written back (encoded) reads back and encodes the same (a fixed point);
//! - when `quota_state` accepts it: `used` is known exactly when `status.used` is
//!   non-empty, every entry is kept in order, no value is negative (a negative entry
//!   would lower effective usage: an over-commit), and every value and entry survives
//!   the way back to the API (`list_to_api`, `reservation_to_api`) unchanged;
//! - effective usage is `used` + Σ entries (lapsed ones included), so at least `used`;
//! - when it refuses: every error names a `spec.…` or `status.…` field.

use karmada_quota_core::ResourceList;
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::{
    list_to_api, quota_state, reservation_from_api, reservation_to_api, stored_list_from_api,
};

/// Runs one input.
pub fn run(data: &[u8]) {
    let Ok(quota) = serde_json::from_slice::<KarmadaQuota>(data) else {
        return;
    };
    // Times keep whole seconds when written (metav1.Time), so the law is on what is written.
    let encoded = serde_json::to_vec(&quota).expect("a decoded quota encodes");
    let decoded: KarmadaQuota = serde_json::from_slice(&encoded).expect("an encoded quota decodes");
    assert_eq!(decoded.spec, quota.spec, "spec changes through JSON");
    let again = serde_json::to_vec(&decoded).expect("a decoded quota encodes");
    assert!(again == encoded, "a written status reads back differently");

    let state = match quota_state(&quota) {
        Ok(state) => state,
        Err(errors) => {
            assert!(!errors.is_empty(), "refused without an error");
            for e in &errors {
                assert!(
                    e.field.starts_with("spec.") || e.field.starts_with("status."),
                    "error on an unexpected field: {e:?}"
                );
                assert!(!e.message.is_empty(), "{} without a message", e.field);
            }
            return;
        }
    };
    let status = quota.status.unwrap_or_default();
    assert_eq!(state.used.is_some(), !status.used.is_empty());
    assert_eq!(state.reservations.len(), status.reservations.len());
    let used = state.used.clone().unwrap_or_default();
    assert_no_negative(&used, "status.used");
    assert_eq!(
        stored_list_from_api(&list_to_api(&used), "status.used").as_ref(),
        Ok(&used),
        "used changes on its way back to the API"
    );
    for (i, (entry, raw)) in state
        .reservations
        .iter()
        .zip(&status.reservations)
        .enumerate()
    {
        assert_eq!(
            entry.reserved_by.uid, raw.reserved_by.uid,
            "entry {i} moved"
        );
        assert_eq!(entry.generation, raw.generation);
        assert_no_negative(&entry.reserved, "status.reservations[].reserved");
        let field = format!("status.reservations[{i}]");
        let back = reservation_from_api(&reservation_to_api(entry), &field);
        assert_eq!(
            back.as_ref(),
            Ok(entry),
            "entry {i} changes on its way back"
        );
    }
    // Every entry counts, expired or not, until the controller removes it.
    let effective = effective_usage(&used, &state.reservations, None);
    let mut expected = used.clone();
    for entry in &state.reservations {
        expected.add_assign(&entry.reserved);
    }
    assert_eq!(
        effective, expected,
        "effective usage is not used + Σ entries"
    );
    for (name, q) in used.iter() {
        assert!(
            effective.get_or_zero(name) >= *q,
            "effective {name} below used"
        );
    }
}

fn assert_no_negative(list: &ResourceList, field: &str) {
    for (name, q) in list.iter() {
        assert!(!q.is_negative(), "{field}[{name}]={q} accepted");
    }
}
