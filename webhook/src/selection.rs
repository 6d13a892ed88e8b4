//! Which quota objects a binding's namespace answers to — its KarmadaQuotas and every
//! KarmadaClusterQuota whose selector matches its labels — and which admissions are
//! batched together (docs/design.md §5).
//!
//! ```text
//!  namespace N ─ labels (Namespace watch) ─► cluster quotas covering N (core's Covers)
//!  batch group of N:  no cluster quota covers N → "namespace/N"   (as before)
//!                     otherwise → "cluster/<least name>" of the connected component of
//!                     cluster quotas that share a namespace with N's
//! ```
//!
//! Every admission that can touch a given cluster quota is in the same group, whatever
//! its namespace, so one worker decides them in one batch and writes that quota once per
//! batch; namespaces no cluster quota covers keep their own worker.

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::cache::{CachedClusterQuota, QuotaCache};

impl QuotaCache {
    /// The cluster quotas covering `namespace` (its labels matched by their selector),
    /// sorted by name; unparseable ones included when their selector still reads (they
    /// refuse its bindings). A namespace the cache does not know is covered by none.
    pub fn cluster_quotas_covering(&self, namespace: &str) -> Vec<Arc<CachedClusterQuota>> {
        let Some(labels) = self.labels_of(namespace) else {
            return Vec::new();
        };
        let mut covering: Vec<_> = self
            .cluster_quotas()
            .into_iter()
            .filter(|q| {
                q.covers
                    .as_ref()
                    .is_some_and(|c| c.covers(namespace, Some(&labels)))
            })
            .collect();
        covering.sort_by(|a, b| a.name().cmp(b.name()));
        covering
    }

    /// The batch group of `namespace` (see the module doc).
    pub fn batch_group(&self, namespace: &str) -> String {
        let covering = self.cluster_quotas_covering(namespace);
        if covering.is_empty() {
            return format!("namespace/{namespace}");
        }
        let mut component: BTreeSet<String> =
            covering.iter().map(|q| q.name().to_owned()).collect();
        let all = self.cluster_quotas();
        let labels = self.namespace_labels();
        loop {
            let before = component.len();
            for (ns, l) in &labels {
                let names: Vec<&str> = all
                    .iter()
                    .filter(|q| q.covers.as_ref().is_some_and(|c| c.covers(ns, Some(l))))
                    .map(|q| q.name())
                    .collect();
                if names.iter().any(|n| component.contains(*n)) {
                    component.extend(names.iter().map(|n| (*n).to_owned()));
                }
            }
            if component.len() == before {
                break;
            }
        }
        let least = component.first().map_or("", String::as_str);
        format!("cluster/{least}")
    }
}
