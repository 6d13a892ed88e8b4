//! The lower bound of a re-list: the newest resourceVersion of an object the watch has
//! handed on (a listed item, an added, modified or deleted object).
//!
//! Not the list's own resourceVersion nor a bookmark's: those are the serving cache's (or
//! etcd's, for a consistent list), and on a kind that has seen no change for a while
//! another apiserver's cache may stay below them until a change of the kind comes — a
//! list bounded by them would wait there and be refused. Every cache that has applied a
//! change of the kind has reached that change's resourceVersion, so a bound of the newest
//! change seen is one every up-to-date cache meets; and a list at or after it holds every
//! object the watch has seen unless it was deleted since.
//!
//! resourceVersions are opaque to clients by the API's contract; kube-apiserver's are
//! etcd revisions, which its watch cache compares as integers. [`Seen`] compares them the
//! same way when both parse, and otherwise keeps the later one it was told.

/// The newest resourceVersion a watch has seen.
#[derive(Debug, Default)]
pub(super) struct Seen(Option<String>);

impl Seen {
    /// What the next list must not be older than; `None`: nothing seen (or forgotten):
    /// the next list is a consistent one.
    pub(super) fn bound(&self) -> Option<&str> {
        self.0.as_deref()
    }

    /// An object at `rv` was handed on.
    pub(super) fn saw(&mut self, rv: &str) {
        if rv.is_empty() || self.0.as_deref().is_some_and(|b| older(rv, b)) {
            return;
        }
        self.0 = Some(rv.to_owned());
    }

    /// The server said the bound is ahead of it: the next list is a consistent one.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_only_moves_forward_and_forgets_on_demand() {
        let mut s = Seen::default();
        assert_eq!(s.bound(), None);
        s.saw("10");
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
        s.saw("x1");
        s.saw("x0");
        assert_eq!(s.bound(), Some("x0"));
    }
}
