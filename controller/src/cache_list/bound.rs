//! The lower bound of a list: the newest resourceVersion the watch has seen, or etcd's
//! current one when it has seen none.
//!
//! resourceVersions are opaque to clients by the API's contract; kube-apiserver's are
//! etcd revisions, which its watch cache compares as integers. [`Seen`] compares them the
//! same way when both parse, and otherwise keeps the later one it was told (events come in
//! order), so a server with another scheme still gets its own values back.

use kube::api::{Api, ListParams};
use serde::Deserialize;

use super::{Failure, Object};

/// The newest resourceVersion a watch has seen.
#[derive(Debug, Default)]
pub(super) struct Seen(Option<String>);

impl Seen {
    /// What the next list must not be older than; `None`: nothing seen (or forgotten).
    pub(super) fn bound(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// A complete list at `rv` (or the end of a streaming list's initial events).
    pub(super) fn listed_at(&mut self, rv: String) {
        self.0 = Some(rv);
    }

    /// An event or bookmark at `rv`, after the list.
    pub(super) fn saw(&mut self, rv: &str) {
        if rv.is_empty() || self.0.as_deref().is_some_and(|b| older(rv, b)) {
            return;
        }
        self.0 = Some(rv.to_owned());
    }

    /// The server said the bound is ahead of it: the next one is read from etcd.
    pub(super) fn forget(&mut self) {
        self.0 = None;
    }
}

/// `a` is older than `b` (both integers, as kube-apiserver's are); `false` when either
/// is not one (no order known).
pub(super) fn older(a: &str, b: &str) -> bool {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

#[derive(Deserialize)]
struct OnlyMeta {
    metadata: Meta,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    resource_version: Option<String>,
}

/// etcd's current resourceVersion: a one-item list without `resourceVersion`, which the
/// apiserver serves from etcd (a quorum read), its items ignored.
pub(super) async fn current<K: Object>(api: &Api<K>) -> Result<String, Failure> {
    let client: kube::Client = api.clone().into_client();
    let request = kube::core::Request::new(api.resource_url())
        .list(&ListParams::default().limit(1))
        .map_err(|e| Failure::Api(kube::Error::BuildRequest(e)))?;
    let list: OnlyMeta = client.request(request).await?;
    list.metadata
        .resource_version
        .filter(|rv| !rv.is_empty())
        .ok_or(Failure::NoResourceVersion)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_only_moves_forward_and_forgets_on_demand() {
        let mut s = Seen::default();
        assert_eq!(s.bound(), None);
        s.listed_at("10".into());
        s.saw("12");
        s.saw("11");
        s.saw("");
        assert_eq!(s.bound(), Some("12"));
        s.forget();
        assert_eq!(s.bound(), None);
    }

    #[test]
    fn versions_that_are_not_integers_have_no_order_and_the_later_one_is_kept() {
        assert!(older("9", "10"));
        assert!(!older("10", "9"));
        assert!(!older("a", "9"));
        let mut s = Seen::default();
        s.listed_at("x1".into());
        s.saw("x0");
        assert_eq!(s.bound(), Some("x0"));
    }
}
