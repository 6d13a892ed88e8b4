//! A quota's status as the webhook's tests need it: `status.used` seeded as the controller
//! would write it ([`seed_used`]), read back in the engine's terms ([`quota_usage`]), and
//! the waits until the webhook's cache has caught up (dry-run probes).

use std::time::Duration;

use anyhow::{Context, Result, anyhow};
use karmada_quota_core::ResourceList;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::{list_from_api, quota_state};
use kube::Client;
use kube::api::Api;
use serde_json::Value;

use super::outcome::create_with;
use crate::{replace_quota_status, try_wait_for};

/// The webhook's quota watch delivers a status change in milliseconds; this is headroom.
const STATUS_SEEN_TIMEOUT: Duration = Duration::from_secs(20);

/// Writes `status.used` (and `status.hard` = `spec.hard`) of a quota the way the
/// controller does: a status replace with the read resourceVersion, retried on conflict.
/// Reservations are kept as they are.
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
    /// `status.reservations` (all of them: the tests run with a long TTL), but the
    /// reservation-store fence (`crate::quota_status::pending`).
    pub reservations: Vec<karmada_quota_crds::quota::Reservation>,
    /// `used + Σ reservations`.
    pub effective: ResourceList,
}

impl QuotaUsage {
    /// The effective usage of `name` in whole units (millis rounded up), 0 when absent.
    pub fn effective_of(&self, name: &str) -> i128 {
        self.effective.get_or_zero(name).value()
    }

    /// The reservation entry of binding `uid`, if any.
    pub fn reservation_of(&self, uid: &str) -> Option<&karmada_quota_crds::quota::Reservation> {
        self.reservations.iter().find(|r| r.reserved_by.uid == uid)
    }
}

/// Reads a quota and sums its effective usage.
pub async fn quota_usage(client: &Client, ns: &str, quota: &str) -> Result<QuotaUsage> {
    let object = Api::<KarmadaQuota>::namespaced(client.clone(), ns)
        .get(quota)
        .await
        .with_context(|| format!("reading KarmadaQuota {ns}/{quota}"))?;
    let status = object.status.clone().unwrap_or_default();
    let used = list_from_api(&status.used, "status.used").map_err(|e| anyhow!("{e}"))?;
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
    let effective = karmada_quota_core::ledger::effective_usage(&used, &state.reservations, None);
    let reservations = crate::quota_status::pending(&status)
        .into_iter()
        .cloned()
        .collect();
    Ok(QuotaUsage {
        object,
        used,
        reservations,
        effective,
    })
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
