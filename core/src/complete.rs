//! The never-under-count rule: usage that could not be computed keeps its last known value.
//!
//! ```text
//!  bindings whose count name is unresolved ─► CountGap ─┐
//!  the quota's spec (hard names, scope) ────────────────┼─► incomplete_names ─► Incomplete
//!                                                       │          (name → reason)
//!  QuotaView.used (this computation) ─┐                 ▼
//!  status.used (last written) ────────┴─► hold_last_known ─► used never lowered for those
//!                                         usage_condition ─► UsageComplete condition
//! ```
//!
//! `used` is summed from the ResourceBindings. Everything but an object count is priced
//! from the binding itself; a `count/<plural>.<group>` needs the plural of the template's
//! kind, which may need API discovery. When discovery fails, the binding's count is
//! unknown: every `count/…` name of that group in the quota's `hard` is *incomplete*. For
//! an incomplete name the status keeps the larger of the last written value and this
//! computation's (which is then only a lower bound), and the `UsageComplete` condition
//! names the resource and the reason. Complete names take the computed value, up or down.

use std::collections::BTreeMap;

use crate::quota::QuotaSpec;
use crate::resources::{COUNT_PREFIX, ResourceList};
use crate::status::QuotaView;
use crate::usage::{BindingCharge, ScopedUsage};

/// Condition type: whether every tracked resource's usage could be computed.
pub const CONDITION_USAGE_COMPLETE: &str = "UsageComplete";
/// UsageComplete=True.
pub const REASON_COMPLETE: &str = "Complete";
/// UsageComplete=False: some names keep their last known value.
pub const REASON_INCOMPLETE: &str = "UsageIncomplete";

/// Why a binding's object count could not be priced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountGap {
    /// The template's apiVersion (`example.com/v1`).
    pub api_version: String,
    /// The template's kind.
    pub kind: String,
    /// What went wrong (e.g. the discovery error).
    pub reason: String,
}

impl CountGap {
    /// Whether the count name `name` could be this template's (same API group).
    pub fn may_count(&self, name: &str) -> bool {
        let Some(rest) = name.strip_prefix(COUNT_PREFIX) else {
            return false;
        };
        let group = self.api_version.split_once('/').map_or("", |(g, _)| g);
        match rest.split_once('.') {
            Some((_, g)) => g == group,
            None => group.is_empty(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "kind {} of {} has no known plural ({})",
            self.kind, self.api_version, self.reason
        )
    }
}

/// Quota names whose usage could not be computed → why.
pub type Incomplete = BTreeMap<String, String>;

/// The names of `spec.hard` that the `gaps` leave incomplete: a gap counts when the
/// scope matches its binding and `hard` has a count name of its group.
pub fn incomplete_names<'a>(
    spec: &QuotaSpec,
    gaps: impl IntoIterator<Item = (&'a BindingCharge, &'a CountGap)>,
) -> Incomplete {
    let mut out = Incomplete::new();
    for (charge, gap) in gaps {
        let names: Vec<&str> = spec.hard.names().filter(|n| gap.may_count(n)).collect();
        if names.is_empty() || !charge.add_scoped_to(&spec.scope, &mut ScopedUsage::default()) {
            continue;
        }
        for name in names {
            out.entry(name.to_owned()).or_insert_with(|| gap.describe());
        }
    }
    out
}

/// `computed` with every incomplete name raised to its `last_known` value where that is
/// higher; complete names are taken as computed.
pub fn hold_last_known(
    computed: &ResourceList,
    last_known: Option<&ResourceList>,
    incomplete: &Incomplete,
) -> ResourceList {
    let mut out = computed.clone();
    for name in incomplete.keys() {
        let Some(&last) = last_known.and_then(|l| l.get(name)) else {
            continue;
        };
        if last > out.get_or_zero(name) {
            out.insert(name, last);
        }
    }
    out
}

/// Apply [`hold_last_known`] to a computed view: `used` and `effective` (= used +
/// reserved) keep the last known value of incomplete names.
pub fn hold_view(view: &mut QuotaView, last_known: Option<&ResourceList>, incomplete: &Incomplete) {
    if incomplete.is_empty() {
        return;
    }
    view.used = hold_last_known(&view.used, last_known, incomplete);
    view.effective = view.used.plus(&view.reserved);
}

/// (status, reason, message) of the UsageComplete condition.
pub fn usage_condition(incomplete: &Incomplete) -> (&'static str, &'static str, String) {
    if incomplete.is_empty() {
        return (
            "True",
            REASON_COMPLETE,
            "usage of every tracked resource computed".to_owned(),
        );
    }
    let parts: Vec<String> = incomplete
        .iter()
        .map(|(name, why)| format!("{name}: {why}"))
        .collect();
    (
        "False",
        REASON_INCOMPLETE,
        format!("{}; last known value kept, retrying", parts.join("; ")),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Quantity;
    use crate::binding::{ObjectReference, ResourceBindingSpec};
    use crate::scope::ScopeSelector;

    fn rl(pairs: &[(&str, &str)]) -> ResourceList {
        pairs
            .iter()
            .map(|(n, q)| ((*n).to_owned(), q.parse::<Quantity>().unwrap()))
            .collect()
    }

    fn gap(api_version: &str, kind: &str) -> CountGap {
        CountGap {
            api_version: api_version.into(),
            kind: kind.into(),
            reason: "discovery failed: 503".into(),
        }
    }

    fn charge(api_version: &str, kind: &str) -> BindingCharge {
        let spec = ResourceBindingSpec {
            resource: ObjectReference {
                api_version: api_version.into(),
                kind: kind.into(),
                ..Default::default()
            },
            ..Default::default()
        };
        BindingCharge::compute(&spec, None)
    }

    #[test]
    fn a_gap_may_count_only_count_names_of_its_group() {
        let table = [
            ("example.com/v1", "count/widgets.example.com", true),
            ("example.com/v1", "count/gadgets.example.com", true),
            ("example.com/v1", "count/widgets.other.io", false),
            ("example.com/v1", "count/widgets", false),
            ("example.com/v1", "requests.cpu", false),
            ("v1", "count/widgets", true),
            ("v1", "count/deployments.apps", false),
            ("v1", "configmaps", false),
        ];
        for (api_version, name, want) in table {
            assert_eq!(
                gap(api_version, "Widget").may_count(name),
                want,
                "{api_version} {name}"
            );
        }
    }

    #[test]
    fn incomplete_names_are_the_hard_count_names_of_matched_gaps() {
        let spec = QuotaSpec {
            policy: Default::default(),
            hard: rl(&[
                ("count/widgets.example.com", "5"),
                ("count/deployments.apps", "5"),
                ("requests.cpu", "4"),
            ]),
            scope: ScopeSelector::default(),
        };
        let c = charge("example.com/v1", "Widget");
        let g = gap("example.com/v1", "Widget");
        let got = incomplete_names(&spec, [(&c, &g)]);
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            ["count/widgets.example.com"]
        );
        assert!(got["count/widgets.example.com"].contains("Widget"));
        // A gap in another group leaves this quota complete.
        let c = charge("other.io/v1", "Thing");
        let g = gap("other.io/v1", "Thing");
        assert!(incomplete_names(&spec, [(&c, &g)]).is_empty());
    }

    type Pairs = &'static [(&'static str, &'static str)];
    /// (computed, last known, incomplete names, expected)
    type Case = (Pairs, Option<Pairs>, &'static [&'static str], Pairs);

    #[test]
    fn incomplete_names_keep_last_known_complete_names_take_the_computed_value() {
        // (computed, last known, incomplete names, expected)
        let cases: [Case; 5] = [
            // complete: the computed value, even when lower
            (
                &[("count/w.x.io", "1"), ("pods", "2")],
                Some(&[("count/w.x.io", "3"), ("pods", "5")]),
                &[],
                &[("count/w.x.io", "1"), ("pods", "2")],
            ),
            // incomplete: the last known value for that name only
            (
                &[("count/w.x.io", "1"), ("pods", "2")],
                Some(&[("count/w.x.io", "3"), ("pods", "5")]),
                &["count/w.x.io"],
                &[("count/w.x.io", "3"), ("pods", "2")],
            ),
            // incomplete but computed is higher (a lower bound above the old value): computed
            (
                &[("count/w.x.io", "4")],
                Some(&[("count/w.x.io", "3")]),
                &["count/w.x.io"],
                &[("count/w.x.io", "4")],
            ),
            // incomplete, nothing known before: the computed lower bound
            (
                &[("count/w.x.io", "1")],
                None,
                &["count/w.x.io"],
                &[("count/w.x.io", "1")],
            ),
            // incomplete, last status lacks the name (new hard name): computed
            (
                &[("count/w.x.io", "0")],
                Some(&[("pods", "1")]),
                &["count/w.x.io"],
                &[("count/w.x.io", "0")],
            ),
        ];
        for (computed, last, names, want) in cases {
            let incomplete: Incomplete = names
                .iter()
                .map(|n| ((*n).to_owned(), "why".to_owned()))
                .collect();
            let last = last.map(rl);
            let got = hold_last_known(&rl(computed), last.as_ref(), &incomplete);
            assert_eq!(
                got,
                rl(want),
                "computed {computed:?} last {last:?} incomplete {names:?}"
            );
        }
    }

    #[test]
    fn hold_view_keeps_effective_consistent() {
        let mut view = QuotaView {
            used: rl(&[("count/w.x.io", "0")]),
            reserved: rl(&[("count/w.x.io", "1")]),
            effective: rl(&[("count/w.x.io", "1")]),
            ..Default::default()
        };
        let incomplete = Incomplete::from([("count/w.x.io".to_owned(), "why".to_owned())]);
        hold_view(&mut view, Some(&rl(&[("count/w.x.io", "2")])), &incomplete);
        assert_eq!(view.used, rl(&[("count/w.x.io", "2")]));
        assert_eq!(view.effective, rl(&[("count/w.x.io", "3")]));
    }

    #[test]
    fn the_condition_names_each_resource_and_reason() {
        assert_eq!(usage_condition(&Incomplete::new()).0, "True");
        assert_eq!(usage_condition(&Incomplete::new()).1, REASON_COMPLETE);
        let incomplete = Incomplete::from([(
            "count/widgets.example.com".to_owned(),
            gap("example.com/v1", "Widget").describe(),
        )]);
        let (status, reason, message) = usage_condition(&incomplete);
        assert_eq!((status, reason), ("False", REASON_INCOMPLETE));
        assert_eq!(
            message,
            "count/widgets.example.com: kind Widget of example.com/v1 has no known plural \
             (discovery failed: 503); last known value kept, retrying"
        );
    }
}
