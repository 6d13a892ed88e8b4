//! The two quota kinds behind one trait: what the status writer, the webhook and the
//! controller need to treat a KarmadaQuota and a KarmadaClusterQuota alike.
//!
//! ```text
//!  QuotaObject ── key()            KarmadaQuota: ns/name   KarmadaClusterQuota: name
//!              ── state()          validated spec + parsed status → core QuotaState
//!              ── quota_status()   the KarmadaQuota-shaped part of the status
//!              ── status / status_mut (the whole status, for compare-and-swap writes)
//! ```

use std::fmt::Debug;

use karmada_quota_core::quota::{FieldError, QuotaState};
use karmada_quota_core::selection::QuotaKey;
use kube::Resource;
use kube::ResourceExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cluster_quota::{KarmadaClusterQuota, KarmadaClusterQuotaStatus};
use crate::convert::{cluster_quota_state, quota_state};
use crate::quota::{KarmadaQuota, KarmadaQuotaSpec, KarmadaQuotaStatus};

/// A quota object of either kind.
pub trait QuotaObject:
    Resource<DynamicType = ()> + Clone + Debug + Serialize + DeserializeOwned + Send + Sync + 'static
{
    /// Its whole status.
    type Status: Clone + Debug + Default + PartialEq + Send + Sync + 'static;

    /// `KarmadaQuota` or `KarmadaClusterQuota`, for messages.
    const KIND: &'static str;

    /// Its identity (namespace and name, or name).
    fn key(&self) -> QuotaKey;

    /// `hard` and `scopeSelector`.
    fn quota_spec(&self) -> &KarmadaQuotaSpec;

    /// The engine's view: validated spec, covered namespaces, parsed status; any error
    /// refuses it (a quota is never enforced from a guess).
    fn state(&self) -> Result<QuotaState, Vec<FieldError>>;

    /// The status, when there is one.
    fn status(&self) -> Option<&Self::Status>;

    /// The status, to replace it.
    fn status_mut(&mut self) -> &mut Option<Self::Status>;

    /// The KarmadaQuota-shaped part of a status.
    fn quota_part(status: &Self::Status) -> &KarmadaQuotaStatus;

    /// The KarmadaQuota-shaped part of a status, to change it.
    fn quota_part_mut(status: &mut Self::Status) -> &mut KarmadaQuotaStatus;

    /// The KarmadaQuota-shaped part of the status, when there is one.
    fn quota_status(&self) -> Option<&KarmadaQuotaStatus> {
        self.status().map(Self::quota_part)
    }
}

impl QuotaObject for KarmadaQuota {
    type Status = KarmadaQuotaStatus;
    const KIND: &'static str = "KarmadaQuota";

    fn key(&self) -> QuotaKey {
        QuotaKey::Namespaced {
            namespace: self.namespace().unwrap_or_default(),
            name: self.name_any(),
        }
    }
    fn quota_spec(&self) -> &KarmadaQuotaSpec {
        &self.spec
    }
    fn state(&self) -> Result<QuotaState, Vec<FieldError>> {
        quota_state(self)
    }
    fn status(&self) -> Option<&KarmadaQuotaStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<KarmadaQuotaStatus> {
        &mut self.status
    }
    fn quota_part(status: &KarmadaQuotaStatus) -> &KarmadaQuotaStatus {
        status
    }
    fn quota_part_mut(status: &mut KarmadaQuotaStatus) -> &mut KarmadaQuotaStatus {
        status
    }
}

impl QuotaObject for KarmadaClusterQuota {
    type Status = KarmadaClusterQuotaStatus;
    const KIND: &'static str = "KarmadaClusterQuota";

    fn key(&self) -> QuotaKey {
        QuotaKey::Cluster {
            name: self.name_any(),
        }
    }
    fn quota_spec(&self) -> &KarmadaQuotaSpec {
        &self.spec.quota
    }
    fn state(&self) -> Result<QuotaState, Vec<FieldError>> {
        cluster_quota_state(self)
    }
    fn status(&self) -> Option<&KarmadaClusterQuotaStatus> {
        self.status.as_ref()
    }
    fn status_mut(&mut self) -> &mut Option<KarmadaClusterQuotaStatus> {
        &mut self.status
    }
    fn quota_part(status: &KarmadaClusterQuotaStatus) -> &KarmadaQuotaStatus {
        &status.quota
    }
    fn quota_part_mut(status: &mut KarmadaClusterQuotaStatus) -> &mut KarmadaQuotaStatus {
        &mut status.quota
    }
}
