//! Which quotas cover a ResourceBinding under review ([`prepare`]), shared by the
//! validating and the mutating review: only a CREATE or UPDATE of the main resource is
//! looked at; the object must be there, named within Kubernetes' lengths and (validating)
//! carry a uid; the cache must be synced, know the namespace when cluster quotas exist,
//! and not be stale; no quota covering the namespace is an allow; a template whose object
//! count cannot be named is refused only when a covering quota counts objects of its
//! group.

use std::sync::Arc;
use std::time::Duration;

use karmada_quota_crds::ResourceBinding;
use karmada_quota_shell::untrusted::{self, within};
use kube::core::admission::{AdmissionRequest, Operation};
use tokio::time::{Instant, timeout_at};

use super::AppState;
use super::answer::{Answer, allowed, bad_request, error_answer};
use super::decode::object_key;
use crate::cache::{Cached, CachedClusterQuota, CachedQuota};
use crate::error::Error;

/// Longest wait for a namespace the Namespace cache does not hold yet (one created just
/// before its first binding), when cluster quotas exist; at most half of what is left of
/// the decision timeout.
pub const NAMESPACE_GRACE: Duration = Duration::from_secs(1);
/// How often the Namespace cache is asked again during [`NAMESPACE_GRACE`].
const NAMESPACE_RECHECK: Duration = Duration::from_millis(25);

/// A ResourceBinding review read up to its quotas: the new object, who it is, its
/// template's object-count name and the quota objects covering its namespace.
pub(crate) struct Prepared<'r> {
    /// The new object.
    pub(crate) new: &'r ResourceBinding,
    /// `ns/name`, for messages.
    pub(crate) key: String,
    /// Its namespace.
    pub(crate) namespace: String,
    /// Its name.
    pub(crate) name: String,
    /// Its uid.
    pub(crate) uid: String,
    /// Its template's object-count name.
    pub(crate) count: Option<String>,
    /// The namespace's KarmadaQuotas.
    pub(crate) quotas: Vec<Arc<CachedQuota>>,
    /// The KarmadaClusterQuotas selecting the namespace.
    pub(crate) clusters: Vec<Arc<CachedClusterQuota>>,
}

/// Read a binding review up to its quotas; the answer given without a decision otherwise
/// (not a CREATE/UPDATE, a subresource, a bad object, no quota, an unusable cache, …).
/// `need_uid`: a binding without `metadata.uid` is refused (the validating review: its
/// reservation is keyed by the uid); a mutating review of a CREATE runs before the
/// apiserver sets the uid, and gets an empty one.
pub(crate) async fn prepare<'r>(
    st: &AppState,
    req: &'r AdmissionRequest<ResourceBinding>,
    deadline: Instant,
    need_uid: bool,
) -> Result<Prepared<'r>, Box<Answer>> {
    let mut prepared = identify(req, need_uid)?;
    (prepared.quotas, prepared.clusters) = covering(st, req, &prepared, deadline).await?;
    prepared.count = count_name(st, req, &prepared, deadline).await?;
    Ok(prepared)
}

/// Who the binding under review is: its object, key, namespace, name and uid (no quotas
/// and no object-count name yet); the answer when the review is not looked at (not a
/// CREATE/UPDATE, a subresource) or is bad (no object, no uid when `need_uid`, a field
/// longer than Kubernetes allows).
fn identify(
    req: &AdmissionRequest<ResourceBinding>,
    need_uid: bool,
) -> Result<Prepared<'_>, Box<Answer>> {
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return Err(Box::new(allowed(req, "NotChecked")));
    }
    if req.sub_resource.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(Box::new(allowed(req, "NotChecked")));
    }
    let Some(new) = req.object.as_ref() else {
        let key = object_key(req, None);
        return Err(Box::new(bad_request(
            req,
            &format!("ResourceBinding {key}: the review has no object"),
        )));
    };
    let key = object_key(req, Some(&new.metadata));
    let namespace = new
        .metadata
        .namespace
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| req.namespace.clone())
        .unwrap_or_default();
    let uid = match new.metadata.uid.clone().filter(|u| !u.is_empty()) {
        Some(uid) => uid,
        None if !need_uid => String::new(),
        None => {
            return Err(Box::new(bad_request(
                req,
                &format!("ResourceBinding {key} has no metadata.uid"),
            )));
        }
    };
    let name = new
        .metadata
        .name
        .clone()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| req.name.clone());
    if let Some(field) = oversized(&namespace, &name, &uid) {
        return Err(Box::new(bad_request(
            req,
            &format!("ResourceBinding {key}: {field} is longer than Kubernetes allows"),
        )));
    }
    Ok(Prepared {
        new,
        key,
        namespace,
        name,
        uid,
        count: None,
        quotas: Vec::new(),
        clusters: Vec::new(),
    })
}

/// The KarmadaQuotas and KarmadaClusterQuotas covering the namespace of `binding`; the
/// answer when the cache is not synced, does not know the namespace in time, holds no
/// covering quota (an allow), or is stale.
async fn covering(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    binding: &Prepared<'_>,
    deadline: Instant,
) -> Result<(Vec<Arc<CachedQuota>>, Vec<Arc<CachedClusterQuota>>), Box<Answer>> {
    let namespace = &binding.namespace;
    let error = |e: Error| Box::new(error_answer(st, req, &binding.key, e));
    if !st.cache.is_synced() {
        return Err(error(Error::NotSynced));
    }
    if !namespace_placeable(st, namespace, deadline).await {
        return Err(error(Error::UnknownNamespace(namespace.clone())));
    }
    let quotas = st.cache.in_namespace(namespace);
    let clusters = st.cache.cluster_quotas_covering(namespace);
    if quotas.is_empty() && clusters.is_empty() {
        // Design §4 step 2: no quota covers the namespace → allowed; nothing to compute.
        return Err(Box::new(allowed(req, "NoQuota")));
    }
    if let Some(stale) = st.cache.stale(st.settings.max_cache_staleness) {
        return Err(error(Error::Stale(stale)));
    }
    Ok((quotas, clusters))
}

/// The object-count name of the template of `binding` (`None` when it cannot be named);
/// the answer when its group/version is too long, naming it outruns `deadline`, or it
/// cannot be named while a covering quota counts objects of its group.
async fn count_name(
    st: &AppState,
    req: &AdmissionRequest<ResourceBinding>,
    binding: &Prepared<'_>,
    deadline: Instant,
) -> Result<Option<String>, Box<Answer>> {
    let key = &binding.key;
    let error = |e: Error| Box::new(error_answer(st, req, key, e));
    let template = &binding.new.spec.resource;
    if let Some(why) = untrusted::group_version_too_long(&template.api_version) {
        return Err(Box::new(bad_request(
            req,
            &format!("ResourceBinding {key}: spec.resource.{why}"),
        )));
    }
    let Ok(count) = timeout_at(
        deadline,
        st.plurals.count_name(&template.api_version, &template.kind),
    )
    .await
    else {
        return Err(error(Error::Timeout));
    };
    if count.is_none()
        && let Some(quota) = counts_group(&binding.quotas, &template.api_version)
            .or_else(|| counts_group(&binding.clusters, &template.api_version))
    {
        return Err(error(Error::UnknownPlural {
            api_version: template.api_version.clone(),
            kind: within(&template.kind, untrusted::MAX_KIND_LEN).into_owned(),
            namespace: binding.namespace.clone(),
            quota,
        }));
    }
    Ok(count)
}

/// The first of a binding's namespace, name and uid longer than Kubernetes allows (a
/// forged review's; the apiserver validates real ones), so that none reaches a log line,
/// a rate-limit key or a reservation entry.
fn oversized(namespace: &str, name: &str, uid: &str) -> Option<&'static str> {
    if namespace.len() > untrusted::MAX_NAMESPACE_LEN {
        Some("metadata.namespace")
    } else if name.len() > untrusted::MAX_NAME_LEN {
        Some("metadata.name")
    } else if uid.len() > untrusted::MAX_UID_LEN {
        Some("metadata.uid")
    } else {
        None
    }
}

/// Whether the cache can tell which cluster quotas select `namespace`: always when there
/// are none; otherwise once the Namespace cache holds it. A namespace created just before
/// its first binding may not have arrived yet: it is asked again for up to
/// [`NAMESPACE_GRACE`] (at most half of what is left before `deadline`).
async fn namespace_placeable(st: &AppState, namespace: &str, deadline: Instant) -> bool {
    if !st.cache.has_cluster_quotas() || st.cache.knows_namespace(namespace) {
        return true;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let until = Instant::now() + NAMESPACE_GRACE.min(left / 2);
    while Instant::now() < until {
        tokio::time::sleep(NAMESPACE_RECHECK).await;
        if st.cache.knows_namespace(namespace) {
            return true;
        }
    }
    false
}

/// A quota (name) that counts objects of `api_version`'s group (`count/<plural>.<group>`,
/// or `count/<plural>` for the core group): one the template's count could matter to.
fn counts_group<K>(quotas: &[Arc<Cached<K>>], api_version: &str) -> Option<String> {
    let group = api_version.split_once('/').map_or("", |(g, _)| g);
    quotas.iter().find_map(|q| {
        let parsed = q.parsed.as_ref().ok()?;
        parsed
            .state
            .spec
            .hard
            .names()
            .filter_map(|n| n.strip_prefix("count/"))
            .any(|rest| match rest.split_once('.') {
                Some((_, g)) => g == group,
                None => group.is_empty(),
            })
            .then(|| q.name().to_owned())
    })
}
