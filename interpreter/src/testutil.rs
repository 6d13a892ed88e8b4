//! Fixture builders shared by the unit tests.

use karmada_quota_core::ResourceList;

pub fn mk_list(entries: &[(&str, &str)]) -> ResourceList {
    ResourceList::parse_map(entries.iter().copied()).expect("test list")
}
