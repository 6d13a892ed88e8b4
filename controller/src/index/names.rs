//! Which uid serves each binding name, per namespace: how the index tells a reservation
//! for a uid it never saw whose name another binding holds (the CREATE it was admitted
//! for failed with `already exists`) from one whose binding has not shown up yet.
//!
//! Names and uids are the index entries' own allocations (`Arc<str>`), so the map adds two
//! pointers per binding.

use std::collections::HashMap;
use std::sync::Arc;

/// namespace → binding name → uid.
#[derive(Debug, Default)]
pub struct Names {
    by_ns: HashMap<String, HashMap<Arc<str>, Arc<str>>>,
}

impl Names {
    /// `name` in `ns` is served by `uid` (replacing what served it before).
    pub fn insert(&mut self, ns: &str, name: Arc<str>, uid: Arc<str>) {
        match self.by_ns.get_mut(ns) {
            Some(names) => {
                names.insert(name, uid);
            }
            None => {
                self.by_ns
                    .insert(ns.to_owned(), HashMap::from([(name, uid)]));
            }
        }
    }

    /// `uid`, named `name` in `ns`, is gone: the name is free unless another uid took it.
    pub fn remove(&mut self, ns: &str, name: &str, uid: &str) {
        if let Some(names) = self.by_ns.get_mut(ns)
            && names.get(name).is_some_and(|u| **u == *uid)
        {
            names.remove(name);
        }
    }

    /// `ns` has no binding left.
    pub fn forget(&mut self, ns: &str) {
        self.by_ns.remove(ns);
    }

    /// The uid serving `name` in `ns`.
    pub fn uid(&self, ns: &str, name: &str) -> Option<&str> {
        self.by_ns.get(ns)?.get(name).map(|u| &**u)
    }

    /// The map of every (namespace, name, uid), e.g. after a re-list.
    pub fn rebuilt<'a>(entries: impl IntoIterator<Item = (&'a str, Arc<str>, Arc<str>)>) -> Self {
        let mut names = Names::default();
        for (ns, name, uid) in entries {
            names.insert(ns, name, uid);
        }
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_freed_only_by_the_uid_that_serves_it() {
        let mut n = Names::default();
        n.insert("team-a", "web".into(), "uid-1".into());
        n.insert("team-b", "web".into(), "uid-2".into());
        assert_eq!(n.uid("team-a", "web"), Some("uid-1"));
        // Recreated under a new uid before the old one's delete arrived.
        n.insert("team-a", "web".into(), "uid-3".into());
        n.remove("team-a", "web", "uid-1");
        assert_eq!(n.uid("team-a", "web"), Some("uid-3"));
        n.remove("team-a", "web", "uid-3");
        assert_eq!(n.uid("team-a", "web"), None);
        assert_eq!(n.uid("team-b", "web"), Some("uid-2"));
        n.forget("team-b");
        assert_eq!(n.uid("team-b", "web"), None);
        let r = Names::rebuilt([("team-c", "api".into(), "uid-4".into())]);
        assert_eq!(r.uid("team-c", "api"), Some("uid-4"));
    }
}
