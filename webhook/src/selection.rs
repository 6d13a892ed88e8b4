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

use std::sync::Arc;

use crate::cache::{CachedClusterQuota, QuotaCache};

impl QuotaCache {
    /// The cluster quotas covering `namespace` (its labels matched by their selector),
    /// sorted by name; unparseable ones included when their selector still reads (they
    /// refuse its bindings). A namespace the cache does not know is covered by none.
    /// A hash lookup: the cache keeps the coverage by namespace.
    pub fn cluster_quotas_covering(&self, namespace: &str) -> Vec<Arc<CachedClusterQuota>> {
        self.covering(namespace)
    }

    /// The batch group of `namespace` (see the module doc). A hash lookup, but for the
    /// first one after the coverage changed, which recomputes the groups.
    pub fn batch_group(&self, namespace: &str) -> String {
        match self.group_of(namespace) {
            Some(least) => format!("cluster/{least}"),
            None => format!("namespace/{namespace}"),
        }
    }
}
