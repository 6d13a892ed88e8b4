//! Which quota objects a binding's namespace answers to — its KarmadaQuotas and every
//! KarmadaClusterQuota whose selector matches its labels.
//!
//! ```text
//!  namespace N ─ labels (Namespace watch) ─► cluster quotas covering N (core's Covers)
//! ```

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
}
