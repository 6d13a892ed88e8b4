//! A quota's status as the webhook's tests need it: `status.used` seeded as the controller
//! would write it ([`seed_used`]), read back in the engine's terms ([`quota_usage`]), and
//! the waits until the webhook's cache has caught up (dry-run probes).

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use karmada_quota_core::ResourceList;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::{quota_state, stored_list_from_api};
use kube::Client;
use kube::api::Api;
use serde_json::Value;

use super::outcome::create_with;
use crate::{replace_quota_status, try_wait_for};

/// The webhook's quota watch delivers a status change in milliseconds; this is headroom.
const STATUS_SEEN_TIMEOUT: Duration = Duration::from_secs(20);

/// Writes `status.used` (and `status.hard` = `spec.hard`, and the reservation-store fence
/// over it) of a quota the way the controller does: a status replace with the read
/// resourceVersion, retried on conflict. Other reservations are kept as they are.
pub async fn seed_used(
    client: &Client,
    ns: &str,
    quota: &str,
    used: &[(&str, &str)],
) -> Result<KarmadaQuota> {
    let used: std::collections::BTreeMap<_, _> = used
        .iter()
        .map(|(k, v)| {
            (
                (*k).to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity((*v).to_owned()),
            )
        })
        .collect();
    replace_quota_status(
        client,
        ns,
        quota,
        &format!("seeding status.used of {ns}/{quota}"),
        |spec, status| {
            status.used = used.clone();
            status.hard = spec.hard.clone();
            // A hard the apiserver accepted parses; a failure leaves the fence out.
            let _ = karmada_quota_crds::convert::ensure_fence(&mut status.reservations, &spec.hard);
        },
    )
    .await
}

/// A quota's status in the engine's terms.
#[derive(Clone, Debug)]
pub struct QuotaUsage {
    /// The object as read.
    pub object: KarmadaQuota,
    /// `status.used`.
    pub used: ResourceList,
    /// The admissions' entries that count: `status.reservations` (all of them: the tests
    /// run with a long TTL) but the reservation-store fence (`crate::quota_status::pending`),
    /// and the entries for this quota of every reservation batch its status does not
    /// account for yet (numbered past `status.foldedThrough`); one per binding uid and
    /// generation (core's `ledger::upsert`), in the engine's terms.
    pub reservations: Vec<karmada_quota_core::quota::Reservation>,
    /// `used + Σ reservations`.
    pub effective: ResourceList,
}

impl QuotaUsage {
    /// The effective usage of `name` in whole units (millis rounded up), 0 when absent.
    pub fn effective_of(&self, name: &str) -> i128 {
        self.effective.get_or_zero(name).value()
    }

    /// The reservation entry of binding `uid`, if any.
    pub fn reservation_of(&self, uid: &str) -> Option<&karmada_quota_core::quota::Reservation> {
        self.reservations.iter().find(|r| r.reserved_by.uid == uid)
    }
}

/// Reads a quota and sums its effective usage: `used`, its status's entries and those of
/// the reservation batches it has not folded yet (the batches of every namespace are
/// listed: a test's quotas have names of their own).
pub async fn quota_usage(client: &Client, ns: &str, quota: &str) -> Result<QuotaUsage> {
    let object = Api::<KarmadaQuota>::namespaced(client.clone(), ns)
        .get(quota)
        .await
        .with_context(|| format!("reading KarmadaQuota {ns}/{quota}"))?;
    let status = object.status.clone().unwrap_or_default();
    let used = stored_list_from_api(&status.used, "status.used").map_err(|e| anyhow!("{e}"))?;
    // quota_state validates the entries; its errors name the field.
    let state = quota_state(&object).map_err(|errs| {
        anyhow!(
            "{ns}/{quota}: {}",
            errs.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("; ")
        )
    })?;
    let mut reservations: Vec<karmada_quota_core::quota::Reservation> =
        karmada_quota_core::fence::pending(&state.reservations)
            .cloned()
            .collect();
    for entry in unfolded_entries(client, Some(ns), quota, status.folded_through).await? {
        let entry = karmada_quota_crds::convert::reservation_from_api(&entry, "entries")
            .map_err(|e| anyhow!("a batch entry for {ns}/{quota}: {e}"))?;
        karmada_quota_core::ledger::upsert(&mut reservations, entry);
    }
    let effective = karmada_quota_core::ledger::effective_usage(&used, &reservations, None);
    Ok(QuotaUsage {
        object,
        used,
        reservations,
        effective,
    })
}

/// The entries for quota `ns/quota` (`ns` `None`: KarmadaClusterQuota `quota`) of the
/// reservation batches numbered past `folded_through`, in every namespace (a test's quotas
/// have names of their own).
pub async fn unfolded_entries(
    client: &Client,
    ns: Option<&str>,
    quota: &str,
    folded_through: Option<u64>,
) -> Result<Vec<karmada_quota_crds::quota::Reservation>> {
    use karmada_quota_crds::reservation_batch::{KarmadaQuotaReservation, batch_sequence};
    let batches = Api::<KarmadaQuotaReservation>::all(client.clone())
        .list(&Default::default())
        .await
        .context("listing the reservation batches")?;
    let mut out = Vec::new();
    for b in batches.items {
        let name = b.metadata.name.as_deref().unwrap_or_default();
        if batch_sequence(name).is_none_or(|n| folded_through.is_some_and(|f| n <= f)) {
            continue;
        }
        out.extend(
            b.spec
                .entries
                .into_iter()
                .filter(|e| e.quota.namespace.as_deref() == ns && e.quota.name == quota)
                .map(|e| e.reservation),
        );
    }
    Ok(out)
}

/// Dry-run creates `probe` (a binding the quota charges) until the webhook decides it: it
/// stops answering `status unknown` — its cache has the seeded `status.used` — and, with
/// the batch store, `no reservation-store fence yet` (its cache has the fence), and answers
/// no retryable error that comes before a decision ([`not_decided_yet`]).
pub async fn wait_until_status_seen(client: &Client, probe: &Value) -> Result<()> {
    try_wait_for(
        "the webhook to see the seeded status.used",
        STATUS_SEEN_TIMEOUT,
        || async {
            let outcome = create_with(client, probe, true).await?;
            Ok::<_, anyhow::Error>(match outcome {
                Err(s) if not_decided_yet(&s) => None,
                _ => Some(()),
            })
        },
    )
    .await
}

/// Whether a refusal of a probe says nothing of what the webhook's cache holds: `status
/// unknown`, no fence yet, or a retryable answer before any decision (503: the cache not
/// synced, the namespace not in it yet, a watch down; or the apiserver failing to call
/// the webhook at all).
fn not_decided_yet(s: &kube::core::Status) -> bool {
    s.message.contains("status unknown")
        || s.message.contains("no reservation-store fence yet")
        || s.message.contains("failed calling webhook")
        || s.code == 503
}

/// Dry-run creates `probe` until the apiserver refuses it with a message containing
/// `fragment`: the webhook's cache has caught up with a spec or status change that makes
/// `probe` fail (e.g. a lowered limit).
pub async fn wait_until_dry_run_refused(
    client: &Client,
    probe: &Value,
    fragment: &str,
) -> Result<()> {
    try_wait_for(
        &format!("a dry-run create refused with {fragment:?}"),
        STATUS_SEEN_TIMEOUT,
        || async {
            let outcome = create_with(client, probe, true).await?;
            Ok::<_, anyhow::Error>(match outcome {
                Err(s) if s.message.contains(fragment) => Some(()),
                _ => None,
            })
        },
    )
    .await
}
