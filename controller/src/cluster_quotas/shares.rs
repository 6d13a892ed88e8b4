//! The KarmadaClusterQuotaShare mirrors: after a cluster quota's reconcile, the leader
//! makes the shares say what the cluster quota's status says, one per namespace its
//! `status.namespaces` lists (crds' `share_of`), and deletes the shares of namespaces it no
//! longer selects and of cluster quotas that are gone.
//!
//! ```text
//!  watch KarmadaClusterQuotaShare (label quota.karmada.io/cluster-quota) ─► store
//!      └─► any change: reconcile the cluster quota it names (a share edited by hand is
//!          written back)
//!  reconcile(cluster quota) ─► plan(cluster quota, store) ─► server-side apply (spec,
//!                                                             then status) / delete
//! ```
//!
//! Only differences are written ([`plan`] compares with the store), so a usage change
//! costs one status write per selected namespace and a steady state costs none.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use karmada_quota_crds::cluster_quota_share::SHARE_OF_LABEL;
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaClusterQuotaShare, share_of};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::Event;
use kube::runtime::{WatchStreamExt, watcher as watch};
use kube::{Client, ResourceExt};

use crate::metrics::Metrics;
use karmada_quota_shell::watch_cache::from_watch_cache;

/// The field manager of the controller's server-side applies of shares.
const FIELD_MANAGER: &str = "karmada-quota-controller";

/// What to do to make the shares of one cluster quota mirror it.
#[derive(Debug, Default)]
pub struct Plan {
    /// Shares to create or rewrite.
    pub apply: Vec<KarmadaClusterQuotaShare>,
    /// (namespace, name) of shares to delete: their namespace is no longer selected.
    pub delete: Vec<(String, String)>,
}

/// The shares `cq` should have (one per namespace of its `status.namespaces`) against
/// `existing` (every share the store holds): those that differ, and those to delete.
pub fn plan(cq: &KarmadaClusterQuota, existing: &[Arc<KarmadaClusterQuotaShare>]) -> Plan {
    let name = cq.name_any();
    let selected: Vec<&str> = cq
        .status
        .as_ref()
        .map(|s| s.namespaces.iter().map(|n| n.name.as_str()).collect())
        .unwrap_or_default();
    let mine: Vec<&Arc<KarmadaClusterQuotaShare>> = existing
        .iter()
        .filter(|s| s.labels().get(SHARE_OF_LABEL) == Some(&name))
        .collect();
    let mut out = Plan::default();
    for ns in &selected {
        let desired = share_of(cq, ns);
        let current = mine
            .iter()
            .find(|s| s.namespace().as_deref() == Some(*ns) && s.name_any() == name);
        if !current.is_some_and(|c| c.mirrors(&desired)) {
            out.apply.push(desired);
        }
    }
    for s in mine {
        let ns = s.namespace().unwrap_or_default();
        if !selected.contains(&ns.as_str()) {
            out.delete.push((ns, s.name_any()));
        }
    }
    out
}

/// The shares' store and the client that writes them.
#[derive(Clone)]
pub struct Shares {
    client: Client,
    store: Store<KarmadaClusterQuotaShare>,
}

impl Shares {
    /// Watch every share (by its label) into a store; returns the mirrors and the names of
    /// the cluster quotas whose shares changed (to reconcile them: a share edited or
    /// deleted by someone else is written back).
    pub fn watch(
        client: &Client,
        metrics: Arc<Metrics>,
    ) -> (Self, impl Stream<Item = String> + Send + 'static) {
        let (store, writer) = reflector::store();
        let changed = watch(
            Api::<KarmadaClusterQuotaShare>::all(client.clone()),
            from_watch_cache().labels(SHARE_OF_LABEL),
        )
        .default_backoff()
        .inspect(move |ev| {
            if let Err(e) = ev {
                tracing::warn!(error = %e, "KarmadaClusterQuotaShare watch error; retrying");
                metrics.watch_restarted("karmadaclusterquotashares");
            }
        })
        .reflect(writer)
        .filter_map(|ev| {
            std::future::ready(match ev {
                Ok(Event::Apply(s) | Event::Delete(s)) => s.labels().get(SHARE_OF_LABEL).cloned(),
                _ => None,
            })
        });
        let shares = Self {
            client: client.clone(),
            store,
        };
        (shares, changed)
    }

    /// Whether the store has listed the shares once (before, a plan would re-create them
    /// all).
    pub fn ready(&self) -> bool {
        use futures::FutureExt;
        matches!(self.store.wait_until_ready().now_or_never(), Some(Ok(())))
    }

    /// Make the shares of `cq` mirror it; returns how many were written or deleted. Errors
    /// name the share.
    pub async fn sync(&self, cq: &KarmadaClusterQuota) -> Result<usize, kube::Error> {
        if !self.ready() {
            return Ok(0);
        }
        let plan = plan(cq, &self.store.state());
        let n = plan.apply.len() + plan.delete.len();
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for share in plan.apply {
            let ns = share.namespace().unwrap_or_default();
            let name = share.name_any();
            let api = Api::<KarmadaClusterQuotaShare>::namespaced(self.client.clone(), &ns);
            let mut body = serde_json::to_value(&share).map_err(kube::Error::SerdeError)?;
            if let Some(o) = body.as_object_mut() {
                o.insert("apiVersion".into(), "quota.karmada.io/v1alpha1".into());
                o.insert("kind".into(), "KarmadaClusterQuotaShare".into());
            }
            let status = body.as_object_mut().and_then(|o| o.remove("status"));
            api.patch(&name, &params, &Patch::Apply(&body))
                .await
                .inspect_err(|e| tracing::warn!(share = %format!("{ns}/{name}"), error = %e, "writing a KarmadaClusterQuotaShare failed"))?;
            if let Some(status) = status {
                let body = serde_json::json!({
                    "apiVersion": "quota.karmada.io/v1alpha1",
                    "kind": "KarmadaClusterQuotaShare",
                    "metadata": {"name": name, "namespace": ns},
                    "status": status,
                });
                api.patch_status(&name, &params, &Patch::Apply(&body))
                    .await
                    .inspect_err(|e| tracing::warn!(share = %format!("{ns}/{name}"), error = %e, "writing a KarmadaClusterQuotaShare's status failed"))?;
            }
        }
        for (ns, name) in plan.delete {
            self.delete(&ns, &name).await?;
        }
        Ok(n)
    }

    /// Delete every share of cluster quota `name` (it is gone).
    pub async fn forget(&self, name: &str) {
        let gone: Vec<(String, String)> = self
            .store
            .state()
            .iter()
            .filter(|s| s.labels().get(SHARE_OF_LABEL).map(String::as_str) == Some(name))
            .map(|s| (s.namespace().unwrap_or_default(), s.name_any()))
            .collect();
        for (ns, share) in gone {
            if let Err(e) = self.delete(&ns, &share).await {
                tracing::warn!(share = %format!("{ns}/{share}"), error = %e, "deleting the share of a deleted KarmadaClusterQuota failed");
            }
        }
    }

    async fn delete(&self, ns: &str, name: &str) -> Result<(), kube::Error> {
        match Api::<KarmadaClusterQuotaShare>::namespaced(self.client.clone(), ns)
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The reference of the cluster quota named `name` (what a share change reconciles).
    pub fn owner(name: String) -> ObjectRef<KarmadaClusterQuota> {
        ObjectRef::new(&name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cq(namespaces: &[(&str, &str)]) -> KarmadaClusterQuota {
        serde_json::from_value(json!({
            "apiVersion": "quota.karmada.io/v1alpha1", "kind": "KarmadaClusterQuota",
            "metadata": {"name": "biz", "uid": "u-1"},
            "spec": {"namespaceSelector": {"matchLabels": {"business": "a"}},
                     "hard": {"requests.cpu": "10"}},
            "status": {"used": {"requests.cpu": "7"},
                       "namespaces": namespaces.iter()
                           .map(|(n, u)| json!({"name": n, "used": {"requests.cpu": u}}))
                           .collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    fn stored(s: KarmadaClusterQuotaShare) -> Arc<KarmadaClusterQuotaShare> {
        let mut s = s;
        s.metadata.resource_version = Some("1".into());
        Arc::new(s)
    }

    #[test]
    fn a_new_cluster_quota_gets_one_share_per_selected_namespace() {
        let p = plan(&cq(&[("a", "2"), ("b", "5")]), &[]);
        let at: Vec<_> = p.apply.iter().map(|s| s.namespace().unwrap()).collect();
        assert_eq!(at, ["a", "b"]);
        assert!(p.delete.is_empty());
    }

    #[test]
    fn a_steady_state_writes_nothing_and_a_usage_change_rewrites_only_its_namespace() {
        let before = cq(&[("a", "2"), ("b", "5")]);
        let existing = vec![
            stored(share_of(&before, "a")),
            stored(share_of(&before, "b")),
        ];
        let steady = plan(&before, &existing);
        assert!(
            steady.apply.is_empty() && steady.delete.is_empty(),
            "{steady:?}"
        );
        let after = cq(&[("a", "3"), ("b", "5")]);
        let p = plan(&after, &existing);
        // The totals did not move here, so b's share still mirrors.
        let at: Vec<_> = p.apply.iter().map(|s| s.namespace().unwrap()).collect();
        assert_eq!(at, ["a"]);
    }

    #[test]
    fn a_namespace_no_longer_selected_loses_its_share_and_others_are_left_alone() {
        let before = cq(&[("a", "2"), ("b", "5")]);
        let mut other = share_of(&before, "a");
        other.metadata.name = Some("other".into());
        other
            .metadata
            .labels
            .as_mut()
            .unwrap()
            .insert(SHARE_OF_LABEL.into(), "other".into());
        let existing = vec![
            stored(share_of(&before, "a")),
            stored(share_of(&before, "b")),
            stored(other),
        ];
        let p = plan(&cq(&[("a", "2")]), &existing);
        assert_eq!(p.delete, [("b".to_owned(), "biz".to_owned())]);
    }

    #[test]
    fn a_share_edited_by_hand_is_written_back() {
        let q = cq(&[("a", "2")]);
        let mut edited = share_of(&q, "a");
        edited.spec.cluster_quota.quota.hard.insert(
            "requests.cpu".into(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity("1000".into()),
        );
        let p = plan(&q, &[stored(edited)]);
        assert_eq!(p.apply.len(), 1);
        assert!(p.apply[0].mirrors(&share_of(&q, "a")));
    }
}
