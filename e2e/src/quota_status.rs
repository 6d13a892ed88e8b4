//! Writing a KarmadaQuota's status from a test, the way the webhook and the controller
//! write it: read, change, replace with the read resourceVersion, retry on conflict.

use std::time::Duration;

use anyhow::Result;
use karmada_quota_crds::{KarmadaQuota, KarmadaQuotaSpec, KarmadaQuotaStatus};
use kube::Client;
use kube::api::{Api, PostParams};

use crate::try_wait_for;

/// Reads quota `ns/quota`, lets `change` edit its status (created empty when missing; the
/// spec is given to look at) and replaces the status with the read resourceVersion, as the
/// controller and the webhook write it; re-read and retried on 409 for up to 10 s (`desc` names the attempt in the
/// timeout error). Returns the object written.
pub async fn replace_quota_status(
    client: &Client,
    ns: &str,
    quota: &str,
    desc: &str,
    change: impl Fn(&KarmadaQuotaSpec, &mut KarmadaQuotaStatus),
) -> Result<KarmadaQuota> {
    let api: Api<KarmadaQuota> = Api::namespaced(client.clone(), ns);
    try_wait_for(desc, Duration::from_secs(10), || async {
        let mut q = api.get(quota).await?;
        change(
            &q.spec,
            q.status.get_or_insert_with(KarmadaQuotaStatus::default),
        );
        q.metadata.managed_fields = None;
        match api.replace_status(quota, &PostParams::default(), &q).await {
            Ok(written) => Ok(Some(written)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(anyhow::Error::from(e)),
        }
    })
    .await
}

/// Whether `status` holds the reservation-store fence (core's `fence`, docs/reservations.md
/// R22).
pub fn fenced(status: &KarmadaQuotaStatus) -> bool {
    status
        .reservations
        .iter()
        .any(karmada_quota_crds::convert::is_fence)
}

/// The entries of `status` that stand for admissions: every one but the reservation-store
/// fence (core's `fence`, docs/reservations.md R22), which the controller of the batch
/// store keeps in every quota.
pub fn pending(status: &KarmadaQuotaStatus) -> Vec<&karmada_quota_crds::quota::Reservation> {
    status
        .reservations
        .iter()
        .filter(|r| !karmada_quota_crds::convert::is_fence(r))
        .collect()
}
