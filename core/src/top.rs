//! The bindings that use the most of one quota: each matching binding's usage of the
//! quota's hard names, ranked by its largest share of hard (what the dashboard's quota
//! page lists under "bindings that use the most").
//!
//! ```text
//!  (name, BindingCharge) of every observed binding in the namespace
//!       │ scope matches? (the same rule as the quota's `used`)
//!       ▼
//!  usage restricted to hard ─► share = max over hard names of usage / hard
//!       ▼
//!  highest share first (ties: name), the first N; bindings that use none of hard left out
//! ```

use std::collections::HashMap;

use crate::resources::ResourceList;
use crate::scope::ScopeSelector;
use crate::usage::BindingCharge;

/// How many bindings a quota's report lists by default.
pub const TOP_BINDINGS: usize = 10;

/// One binding's usage of a quota.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct BindingUsage {
    /// The ResourceBinding's name.
    pub name: String,
    /// What it uses of the quota's hard names (names it does not use are left out).
    pub usage: ResourceList,
    /// The member clusters it is placed on (sorted; empty before scheduling).
    pub clusters: Vec<String>,
}

impl BindingUsage {
    /// The largest share of `hard` this binding uses, in percent (0 when it uses none of a
    /// non-zero limit).
    pub fn share_of(&self, hard: &ResourceList) -> f64 {
        share(&self.usage, hard)
    }
}

/// The largest `usage / hard × 100` over the names of `hard` with a non-zero limit.
fn share(usage: &ResourceList, hard: &ResourceList) -> f64 {
    usage
        .iter()
        .filter_map(|(name, q)| q.percent_of(*hard.get(name)?))
        .fold(0.0, f64::max)
}

/// The `n` bindings of `bindings` that use the largest share of `hard` under `scope`,
/// highest first (ties by name). A binding the scope does not match, or whose usage of
/// every hard name is zero, is not listed.
pub fn top_bindings<'a>(
    hard: &ResourceList,
    scope: &ScopeSelector,
    bindings: impl IntoIterator<Item = (&'a str, &'a BindingCharge)>,
    n: usize,
) -> Vec<BindingUsage> {
    if n == 0 {
        return Vec::new();
    }
    // Bindings that share one (interned) charge share its usage: computed once per charge.
    let mut usages: HashMap<*const BindingCharge, Option<(f64, ResourceList)>> = HashMap::new();
    let mut ranked: Vec<Ranked<'a>> = Vec::new();
    for (name, charge) in bindings {
        let usage = usages.entry(std::ptr::from_ref(charge)).or_insert_with(|| {
            usage_of(hard, scope, charge).map(|usage| (share(&usage, hard), usage))
        });
        if let Some((share, _)) = usage {
            ranked.push((*share, name, charge));
        }
    }
    if ranked.len() > n {
        ranked.select_nth_unstable_by(n - 1, by_share);
        ranked.truncate(n);
    }
    ranked.sort_by(by_share);
    ranked
        .into_iter()
        .map(|(_, name, charge)| BindingUsage {
            name: name.to_owned(),
            usage: usages
                .get(&std::ptr::from_ref(charge))
                .and_then(Option::as_ref)
                .map(|(_, usage)| usage.clone())
                .unwrap_or_default(),
            clusters: placed_on(charge, scope),
        })
        .collect()
}

/// What a binding with `charge` uses of the hard names under `scope` (zeros left out);
/// `None` when the scope does not match it or it uses none of them (it is not listed).
fn usage_of(
    hard: &ResourceList,
    scope: &ScopeSelector,
    charge: &BindingCharge,
) -> Option<ResourceList> {
    let view = charge.view(scope)?;
    let usage: ResourceList = hard
        .names()
        .filter_map(|res| view.get(res).map(|q| (res.to_owned(), q)))
        .filter(|(_, q)| !q.is_zero())
        .collect();
    (!usage.is_empty()).then_some(usage)
}

/// `share(usage_of(..))` without building the usage list: `None` when not listed.
fn share_of_charge(
    hard: &ResourceList,
    scope: &ScopeSelector,
    charge: &BindingCharge,
) -> Option<f64> {
    let view = charge.view(scope)?;
    let mut listed = false;
    let mut largest = 0.0f64;
    for (name, limit) in hard.iter() {
        let Some(q) = view.get(name).filter(|q| !q.is_zero()) else {
            continue;
        };
        listed = true;
        if let Some(p) = q.percent_of(*limit) {
            largest = largest.max(p);
        }
    }
    listed.then_some(largest)
}

/// Of distinct charges, each with the number of bindings that cost it, those a binding
/// among the `n` that [`top_bindings`] lists may have: every charge whose share is at
/// least the `n`-th largest share counted over all bindings (ties kept, since the names
/// decide among them). [`top_bindings`] over the bindings of these charges only gives
/// the same list as over all of them, so a caller that counts its charges can rank a few
/// bindings instead of every one.
pub fn candidates<'a>(
    hard: &ResourceList,
    scope: &ScopeSelector,
    counted: impl IntoIterator<Item = (&'a BindingCharge, usize)>,
    n: usize,
) -> Vec<&'a BindingCharge> {
    if n == 0 {
        return Vec::new();
    }
    let mut ranked: Vec<(f64, &'a BindingCharge, usize)> = counted
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .filter_map(|(charge, count)| {
            share_of_charge(hard, scope, charge).map(|s| (s, charge, count))
        })
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    let mut seen = 0usize;
    let mut threshold = None;
    for (share, _, count) in &ranked {
        seen = seen.saturating_add(*count);
        if seen >= n {
            threshold = Some(*share);
            break;
        }
    }
    ranked
        .into_iter()
        .filter(|(share, _, _)| threshold.is_none_or(|t| share.total_cmp(&t).is_ge()))
        .map(|(_, charge, _)| charge)
        .collect()
}

/// A candidate: its share, name and charge.
type Ranked<'a> = (f64, &'a str, &'a BindingCharge);

/// Highest share first, then by name.
fn by_share(a: &Ranked<'_>, b: &Ranked<'_>) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

/// The clusters the parts `scope` matches are placed on (with at least one replica).
fn placed_on(charge: &BindingCharge, scope: &ScopeSelector) -> Vec<String> {
    let mut names: Vec<String> = charge
        .parts
        .iter()
        .filter(|p| scope.matches(&p.priority_class))
        .flat_map(|p| p.placement.iter())
        .filter(|(_, replicas)| *replicas > 0)
        .map(|(cluster, _)| cluster.clone())
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::{mk_charge, mk_deployment, mk_list, mk_scope};

    fn charge(replicas: i32, cpu: &str, class: &str, clusters: &[(&str, i32)]) -> BindingCharge {
        mk_charge(&mk_deployment(
            replicas,
            &[("cpu", cpu), ("memory", "1Gi")],
            class,
            clusters,
        ))
    }

    #[test]
    fn ranks_by_the_largest_share_of_hard_then_by_name() {
        let hard = mk_list(&[("requests.cpu", "10"), ("pods", "4")]);
        let web = charge(2, "1", "", &[("member1", 1), ("member2", 1)]); // cpu 20 %, pods 50 %
        let api = charge(1, "4", "", &[("member2", 1)]); // cpu 40 %, pods 25 %
        let job = charge(1, "1", "", &[]); // cpu 10 %, pods 25 %
        let twin = charge(1, "4", "", &[("member1", 1)]); // same share as api
        let top = top_bindings(
            &hard,
            &ScopeSelector::default(),
            [("web", &web), ("api", &api), ("job", &job), ("twin", &twin)],
            10,
        );
        let names: Vec<&str> = top.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["web", "api", "twin", "job"]);
        assert_eq!(
            top[0].usage,
            mk_list(&[("requests.cpu", "2"), ("pods", "2")])
        );
        assert_eq!(top[0].clusters, ["member1", "member2"]);
        assert_eq!(top[0].share_of(&hard), 50.0);
        assert!(top[3].clusters.is_empty(), "not scheduled yet");
        // memory is not a hard name: left out of the usage.
        assert!(!top[1].usage.contains("requests.memory"));
    }

    #[test]
    fn keeps_only_the_first_n() {
        let hard = mk_list(&[("requests.cpu", "100")]);
        let charges: Vec<(String, BindingCharge)> = (1..=30)
            .map(|i| (format!("b{i:02}"), charge(1, &i.to_string(), "", &[])))
            .collect();
        let top = top_bindings(
            &hard,
            &ScopeSelector::default(),
            charges.iter().map(|(n, c)| (n.as_str(), c)),
            3,
        );
        let names: Vec<&str> = top.iter().map(|b| b.name.as_str()).collect();
        assert_eq!(names, ["b30", "b29", "b28"]);
        assert!(
            top_bindings(&hard, &ScopeSelector::default(), [("a", &charges[0].1)], 0).is_empty()
        );
    }

    #[test]
    fn the_scope_and_hard_decide_what_counts() {
        let hard = mk_list(&[("requests.cpu", "10")]);
        let batch = charge(1, "5", "batch", &[("member1", 1)]);
        let web = charge(1, "1", "", &[("member1", 1)]);
        let not_batch = mk_scope("NotIn", &["batch"]);
        let top = top_bindings(&hard, &not_batch, [("batch", &batch), ("web", &web)], 10);
        assert_eq!(top.len(), 1);
        assert_eq!(top[0].name, "web");
        // A quota on a name no binding uses lists nothing.
        let gpus = mk_list(&[("requests.nvidia.com/gpu", "4")]);
        assert!(top_bindings(&gpus, &ScopeSelector::default(), [("web", &web)], 10).is_empty());
    }

    #[test]
    fn a_zero_limit_counts_usage_but_no_share() {
        let hard = mk_list(&[("requests.cpu", "0"), ("pods", "10")]);
        let a = charge(1, "1", "", &[]);
        let top = top_bindings(&hard, &ScopeSelector::default(), [("a", &a)], 10);
        assert_eq!(
            top[0].usage,
            mk_list(&[("requests.cpu", "1"), ("pods", "1")])
        );
        assert_eq!(top[0].share_of(&hard), 10.0);
    }

    #[test]
    fn ranking_only_the_candidates_gives_the_same_list() {
        let hard = mk_list(&[("requests.cpu", "100"), ("pods", "50")]);
        let scope = mk_scope("NotIn", &["batch"]);
        let distinct = [
            charge(1, "1", "", &[]),
            charge(2, "3", "", &[("member1", 2)]),
            charge(1, "3", "", &[("member2", 1)]),
            charge(4, "2", "batch", &[]),
            charge(1, "5", "", &[]),
        ];
        // Bindings named so that ties are decided by name across charges.
        let mut bindings: Vec<(String, &BindingCharge)> = Vec::new();
        for (i, c) in distinct.iter().enumerate() {
            for k in 0..(i + 2) {
                bindings.push((format!("b{}-{i}", (k * 7 + i) % 10), c));
            }
        }
        let counted = || distinct.iter().enumerate().map(|(i, c)| (c, i + 2));
        for n in [0, 1, 2, 3, 5, 8, 40] {
            let all = top_bindings(
                &hard,
                &scope,
                bindings.iter().map(|(name, c)| (name.as_str(), *c)),
                n,
            );
            let keep = candidates(&hard, &scope, counted(), n);
            assert!(keep.len() <= distinct.len());
            let few = top_bindings(
                &hard,
                &scope,
                bindings
                    .iter()
                    .filter(|(_, c)| keep.iter().any(|k| std::ptr::eq(*k, *c)))
                    .map(|(name, c)| (name.as_str(), *c)),
                n,
            );
            assert_eq!(few, all, "n = {n}");
        }
        // The out-of-scope charge is never a candidate; with n = 1 only the largest share.
        let one = candidates(&hard, &scope, counted(), 1);
        assert_eq!(one.len(), 1);
        assert!(std::ptr::eq(one[0], &distinct[1]));
    }
}
