//! The watcher configurations for lists: served by the apiserver's watch cache, or consistent.
//!
//! For the watch cache, `watcher::Config::any_semantic()` alone does not do it: kube-core leaves
//! `resourceVersion=0` out of a list that has a `limit` (`ListParams::populate_qp`), and a
//! watcher's default page size is 500, so such a watcher lists consistently from etcd, page
//! after page (at 10,000 quotas the webhook took 18–21 s to be ready; bench/RESULTS.md,
//! "Cold start"). [`from_watch_cache`] also drops the page size: one `resourceVersion=0`
//! list, served from the cache (client-go's reflectors list the same way). The whole list
//! is then read at once, which is fine for the kinds that hold one object per quota,
//! namespace or cluster; the ResourceBinding watch, which can hold a million objects,
//! streams its list instead (the controller's `cache_list`).

use kube::runtime::watcher;

/// A watcher config whose lists are consistent (no `resourceVersion`, no page size): never
/// older than any write acknowledged before the list began, so never older than a list or
/// event the watch saw before. The webhook lists what it enforces so (the quota kinds and
/// the Namespaces whose labels select cluster quotas): a list from a cache behind could
/// lack a quota, or a label, that the watch had already shown, and a namespace whose
/// quota is missing is not judged at all (docs/reservations.md R23). An apiserver with
/// `ConsistentListFromCache` (on by default from Kubernetes 1.31) still serves it from its
/// watch cache, once the cache has caught up with etcd.
pub fn consistent() -> watcher::Config {
    watcher::Config {
        page_size: None,
        ..watcher::Config::default()
    }
}

/// A watcher config whose lists are served by the apiserver's watch cache.
pub fn from_watch_cache() -> watcher::Config {
    let mut config = watcher::Config::default().any_semantic();
    config.page_size = None;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_consistent_list_asks_for_the_most_recent_state_without_a_limit() {
        let c = consistent();
        assert_eq!(c.page_size, None);
        assert!(matches!(c.list_semantic, watcher::ListSemantic::MostRecent));
    }

    #[test]
    fn the_list_asks_for_resource_version_zero_without_a_limit() {
        let c = from_watch_cache();
        assert_eq!(c.page_size, None);
        assert!(matches!(c.list_semantic, watcher::ListSemantic::Any));
    }

    /// Why the page size must go: with a limit, kube sends no resourceVersion at all.
    #[test]
    fn kube_drops_resource_version_zero_from_a_paged_list() {
        use kube::api::{ListParams, VersionMatch};
        let url = |limit| {
            let lp = ListParams {
                resource_version: Some("0".into()),
                version_match: Some(VersionMatch::NotOlderThan),
                limit,
                ..ListParams::default()
            };
            let req = kube::core::Request::new("/apis/g/v1/things")
                .list(&lp)
                .unwrap();
            req.uri().to_string()
        };
        assert!(
            !url(Some(500)).contains("resourceVersion"),
            "{}",
            url(Some(500))
        );
        assert!(url(None).contains("resourceVersion=0"), "{}", url(None));
    }
}
