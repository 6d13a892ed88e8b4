//! quota.karmada.io/v1alpha1 KarmadaQuotaReservation: one *reservation batch* — the
//! entries of the admissions one webhook decision made durable together (docs/design.md
//! §5, "Reservation batches"; docs/reservations.md).
//!
//! The webhook does not rewrite a quota's status for each admission: it *creates* one batch object, in its own namespace, holding only the
//! entries of that decision, for quotas of any namespace. The name carries the batch's
//! place in the sequence ([`batch_name`]): a second writer of the same number gets 409
//! AlreadyExists, which is the compare-and-swap. Only the controller deletes batches,
//! once every quota an entry names records in `status.foldedThrough` that its status
//! accounts for them (in `used`, or carried over into `status.reservations`).
//!
//! The spec is schema-less (`x-kubernetes-preserve-unknown-fields`): the apiserver stores
//! it without validating each entry field by field, which is what makes a batch cheaper
//! than a status write (bench/RESULTS.md "Reservation batches"). Both binaries parse it
//! with [`parse_batch`], and refuse to guess from an entry that does not parse.

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use karmada_quota_core::quota as cq;
use karmada_quota_core::selection::QuotaKey;

use karmada_quota_core::quota::FieldError;

use crate::convert::{reservation_from_api, reservation_to_api};
use crate::quota::Reservation;

/// The name prefix of every batch: `kqr-<sequence, 12 digits>`.
pub const BATCH_PREFIX: &str = "kqr-";

/// A reservation batch (written by the webhook, deleted by the controller).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "quota.karmada.io",
    version = "v1alpha1",
    kind = "KarmadaQuotaReservation",
    plural = "karmadaquotareservations",
    shortname = "kqr",
    category = "karmada-io",
    namespaced,
    schema = "disabled",
    doc = "One batch of reservation entries written by the karmada-quota webhook (one \
           admission decision made durable) and deleted by its controller once every quota \
           it names has folded it. Not for hand edits.",
    printcolumn(
        name = "Entries",
        type_ = "integer",
        json_path = ".spec.count",
        description = "how many admissions the batch holds"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct KarmadaQuotaReservationSpec {
    /// How many entries (for `kubectl get`).
    #[serde(default)]
    pub count: usize,
    /// The entries, each naming its quota.
    #[serde(default)]
    pub entries: Vec<BatchEntry>,
    /// The attempt that wrote it (one webhook process, one create): how that webhook tells
    /// its own batch in its watch from another one of the same number (docs/design.md §5,
    /// "An admission waits for its own batch in its watch"). Absent in batches of
    /// webhooks before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writer: Option<String>,
}

/// One admission's entry in a batch: the quota it is charged to and the reservation, in
/// the same form as a `status.reservations` entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchEntry {
    /// The quota: a KarmadaQuota (`namespace` set) or a KarmadaClusterQuota (no
    /// `namespace`).
    pub quota: BatchQuota,
    /// The reservation itself.
    #[serde(flatten)]
    pub reservation: Reservation,
}

/// The quota an entry is charged to.
#[derive(
    Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct BatchQuota {
    /// A KarmadaQuota's namespace; absent for a KarmadaClusterQuota.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// metadata.name.
    pub name: String,
}

/// The object name of batch number `sequence`.
pub fn batch_name(sequence: u64) -> String {
    format!("{BATCH_PREFIX}{sequence:012}")
}

/// The greatest batch number: its name has 12 digits ([`batch_name`]), and a longer one
/// would not parse as a batch in any reader. No number follows it.
pub const LAST_SEQUENCE: u64 = 999_999_999_999;

/// The sequence number of a batch named `name`; `None` for a name that is not a batch's.
pub fn batch_sequence(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(BATCH_PREFIX)?;
    if digits.len() != 12 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// A batch object numbered `sequence` in `namespace`, holding `entries`.
pub fn batch_object(
    namespace: &str,
    sequence: u64,
    entries: Vec<BatchEntry>,
) -> KarmadaQuotaReservation {
    let mut batch = KarmadaQuotaReservation::new(
        &batch_name(sequence),
        KarmadaQuotaReservationSpec {
            count: entries.len(),
            entries,
            writer: None,
        },
    );
    batch.metadata.namespace = Some(namespace.to_string());
    batch
}

/// `spec.writer` of the empty batch the controller creates when the store lacks its
/// newest number (docs/reservations.md R20): no webhook's token, so no webhook takes it
/// for its own nor withdraws it.
pub const SEED_WRITER: &str = "karmada-quota-controller/seed";

/// The empty batch numbered `sequence` the controller creates to re-seed the newest
/// number (docs/reservations.md R20).
pub fn seed_batch(namespace: &str, sequence: u64) -> KarmadaQuotaReservation {
    let mut batch = batch_object(namespace, sequence, Vec::new());
    batch.spec.writer = Some(SEED_WRITER.to_owned());
    batch
}

impl BatchQuota {
    /// The engine's key of this quota.
    pub fn key(&self) -> QuotaKey {
        match &self.namespace {
            Some(namespace) => QuotaKey::Namespaced {
                namespace: namespace.clone(),
                name: self.name.clone(),
            },
            None => QuotaKey::Cluster {
                name: self.name.clone(),
            },
        }
    }

    /// The API form of `key`.
    pub fn of(key: &QuotaKey) -> Self {
        Self {
            namespace: key.namespace().map(str::to_owned),
            name: key.name().to_owned(),
        }
    }
}

/// The API form of one admission's entry for the quota `key`.
pub fn batch_entry(key: &QuotaKey, reservation: &cq::Reservation) -> BatchEntry {
    BatchEntry {
        quota: BatchQuota::of(key),
        reservation: reservation_to_api(reservation),
    }
}

/// A stored batch as both binaries read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParsedBatch {
    /// Its place in the sequence.
    pub sequence: u64,
    /// Its entries, each with the quota it is charged to, in stored order.
    pub entries: Vec<(QuotaKey, cq::Reservation)>,
    /// The attempt that wrote it (`spec.writer`).
    pub writer: Option<String>,
    /// Its `metadata.uid`: which batch of its number it is (a number freed by a delete
    /// can be taken again).
    pub uid: Option<String>,
}

/// Parse a stored batch. A batch is written only by the webhook, so a name that is not a
/// batch's or an entry that does not parse is a hand edit or a bug: the error names it,
/// and the callers refuse to guess (the webhook fails closed, the controller keeps it).
pub fn parse_batch(batch: &KarmadaQuotaReservation) -> Result<ParsedBatch, FieldError> {
    let name = batch.metadata.name.as_deref().unwrap_or_default();
    let sequence = batch_sequence(name).ok_or_else(|| FieldError {
        field: "metadata.name".into(),
        message: format!("{name:?} is not a reservation batch's name ({BATCH_PREFIX}<12 digits>)"),
    })?;
    let mut entries = Vec::with_capacity(batch.spec.entries.len());
    for (i, e) in batch.spec.entries.iter().enumerate() {
        let r = reservation_from_api(&e.reservation, &format!("spec.entries[{i}]"))?;
        entries.push((e.quota.key(), r));
    }
    Ok(ParsedBatch {
        sequence,
        entries,
        writer: batch.spec.writer.clone(),
        uid: batch.metadata.uid.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::ReservedBy;
    use std::collections::BTreeMap;

    #[test]
    fn the_name_carries_the_sequence_and_nothing_else_parses() {
        assert_eq!(batch_name(42), "kqr-000000000042");
        assert_eq!(batch_sequence(&batch_name(42)), Some(42));
        assert_eq!(
            batch_sequence(&batch_name(u64::from(u32::MAX))),
            Some(4_294_967_295)
        );
        for other in [
            "kqr-42",
            "kqr-00000000004a",
            "x-000000000042",
            "kqr-0000000000420",
        ] {
            assert_eq!(batch_sequence(other), None, "{other}");
        }
    }

    #[test]
    fn an_entry_is_a_status_entry_with_its_quota_and_round_trips() {
        let entry = BatchEntry {
            quota: BatchQuota {
                namespace: Some("team-a".into()),
                name: "q".into(),
            },
            reservation: Reservation {
                reserved_by: ReservedBy {
                    api_version: "work.karmada.io/v1alpha2".into(),
                    kind: "ResourceBinding".into(),
                    namespace: String::new(),
                    name: "rb".into(),
                    uid: "u1".into(),
                },
                generation: 2,
                reserved: BTreeMap::from([(
                    "requests.cpu".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("100m".into()),
                )]),
                expiration_time: crate::convert::unix_to_time(1_700_000_000),
            },
        };
        let json = serde_json::to_value(&entry).unwrap();
        assert_eq!(
            json["quota"],
            serde_json::json!({"namespace": "team-a", "name": "q"})
        );
        assert_eq!(json["reservedBy"]["uid"], "u1");
        assert!(
            json["reservedBy"].get("kind").is_none(),
            "compact as a status entry"
        );
        let back: BatchEntry = serde_json::from_value(json).unwrap();
        assert_eq!(back, entry);
        let batch = batch_object("kq-system", 7, vec![entry]);
        assert_eq!(batch.metadata.name.as_deref(), Some("kqr-000000000007"));
        assert_eq!(batch.spec.count, 1);
    }
}
