//! The indexes beside the stores ([`super::index`], [`super::coverage`]) against a
//! brute-force reading of the stores, after every event of apply / delete / re-list
//! sequences over the three watches.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::{ObjectMeta, PartialObjectMeta, PartialObjectMetaExt};
use kube::runtime::watcher::Event;
use serde_json::json;

use super::*;

const NAMESPACES: [&str; 6] = ["ns0", "ns1", "ns2", "ns3", "ns4", "ns5"];
const QUOTA_NAMES: [&str; 3] = ["q0", "q1", "q2"];
const CLUSTER_NAMES: [&str; 5] = ["c0", "c1", "c2", "c3", "c4"];

/// A fixed, reproducible sequence per seed (`fastrand`'s seeded generator).
struct Rng(fastrand::Rng);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0.usize(0..n)
    }
    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }
}

fn quota(ns: &str, name: &str, rv: u64, valid: bool) -> CachedQuota {
    let hard = if valid {
        json!({"pods": "10"})
    } else {
        json!({"pods": "1.1.M"})
    };
    CachedQuota::from_value(json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaQuota",
        "metadata": {"name": name, "namespace": ns, "resourceVersion": rv.to_string()},
        "spec": {"hard": hard}
    }))
    .unwrap()
}

/// Cluster quota `name` selecting `team=<team>` (`None`: no selector, covers nothing);
/// `valid = false`: its spec does not parse, its selector still reads.
fn cluster(name: &str, team: Option<&str>, rv: u64, valid: bool) -> CachedClusterQuota {
    let hard = if valid {
        json!({"pods": "10"})
    } else {
        json!({"pods": "1.1.M"})
    };
    let mut spec = json!({"hard": hard});
    if let Some(team) = team {
        spec["namespaceSelector"] = json!({"matchLabels": {"team": team}});
    }
    CachedClusterQuota::from_value(json!({
        "apiVersion": "quota.karmada.io/v1alpha1",
        "kind": "KarmadaClusterQuota",
        "metadata": {"name": name, "resourceVersion": rv.to_string()},
        "spec": spec
    }))
    .unwrap()
}

fn namespace(name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
    ObjectMeta {
        name: Some(name.to_owned()),
        labels: (!labels.is_empty()).then(|| {
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        }),
        ..Default::default()
    }
    .into_request_partial::<Namespace>()
}

/// The quotas of `ns` as the store alone says (the lookup before the index).
fn brute_in_namespace(cache: &QuotaCache, ns: &str) -> Vec<Arc<CachedQuota>> {
    let mut quotas = cache
        .store
        .state_filter(|q| q.metadata.namespace.as_deref() == Some(ns));
    quotas.sort_by(|a, b| a.name().cmp(b.name()));
    quotas
}

/// The cluster quotas covering `ns` as the stores alone say.
fn brute_covering(cache: &QuotaCache, ns: &str) -> Vec<Arc<CachedClusterQuota>> {
    let Some(labels) = cache.labels_of(ns) else {
        return Vec::new();
    };
    let mut covering: Vec<_> = cache
        .cluster_quotas()
        .into_iter()
        .filter(|q| {
            q.covers
                .as_ref()
                .is_some_and(|c| c.covers(ns, Some(&labels)))
        })
        .collect();
    covering.sort_by(|a, b| a.name().cmp(b.name()));
    covering
}

fn same<K>(a: &[Arc<K>], b: &[Arc<K>]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| Arc::ptr_eq(x, y))
}

fn names<K>(v: &[Arc<Cached<K>>]) -> Vec<String> {
    v.iter().map(|q| q.name().to_owned()).collect()
}

/// Every lookup of the cache equals the brute-force reading of its stores.
fn check(cache: &QuotaCache, step: &str) {
    for ns in NAMESPACES.iter().copied().chain(["unknown"]) {
        let (got, want) = (cache.in_namespace(ns), brute_in_namespace(cache, ns));
        assert!(
            same(&got, &want),
            "{step}: in_namespace({ns}) {:?} != {:?}",
            names(&got),
            names(&want)
        );
        for name in QUOTA_NAMES {
            let want = want.iter().find(|q| q.name() == name);
            let got = cache.quota(ns, name);
            assert_eq!(
                got.as_ref().map(Arc::as_ptr),
                want.map(Arc::as_ptr),
                "{step}: quota({ns}/{name})"
            );
        }
        let (got, want) = (cache.cluster_quotas_covering(ns), brute_covering(cache, ns));
        assert!(
            same(&got, &want),
            "{step}: cluster_quotas_covering({ns}) {:?} != {:?}",
            names(&got),
            names(&want)
        );
    }
    for name in CLUSTER_NAMES {
        let want = cache
            .cluster_quotas()
            .into_iter()
            .find(|q| q.name() == name);
        assert_eq!(
            cache.cluster_quota(name).as_ref().map(Arc::as_ptr),
            want.as_ref().map(Arc::as_ptr),
            "{step}: cluster_quota({name})"
        );
    }
}

/// Where one watch is: between `Init` and `InitDone` (re-listing) or not.
#[derive(Default)]
struct Phase {
    relisting: bool,
}

/// The next event of a watch: during a re-list `InitApply` or `InitDone`; otherwise
/// `Apply`, `Delete` (of an object that may or may not be there) or a new re-list.
fn next_event<K>(rng: &mut Rng, phase: &mut Phase, object: K) -> Event<K> {
    if phase.relisting {
        if rng.below(4) == 0 {
            phase.relisting = false;
            Event::InitDone
        } else {
            Event::InitApply(object)
        }
    } else {
        match rng.below(10) {
            0 => {
                phase.relisting = true;
                Event::Init
            }
            1..=3 => Event::Delete(object),
            _ => Event::Apply(object),
        }
    }
}

fn run(seed: u64, steps: usize) {
    let mut rng = Rng(fastrand::Rng::with_seed(seed));
    let (cache, mut w) = QuotaCache::with_writers();
    let mut phases: [Phase; 3] = Default::default();
    let teams = ["a", "b", "c"];
    for step in 0..steps {
        let rv = step as u64 + 1;
        let which = rng.below(3);
        let what = match which {
            0 => {
                let q = quota(
                    rng.pick(&NAMESPACES),
                    rng.pick(&QUOTA_NAMES),
                    rv,
                    rng.below(5) > 0,
                );
                let ev = next_event(&mut rng, &mut phases[0], q);
                let what = format!("quota {ev:?}");
                w.quotas.apply_watcher_event(&ev);
                what
            }
            1 => {
                let team = match rng.below(4) {
                    0 => None,
                    i => Some(teams[i - 1]),
                };
                let c = cluster(rng.pick(&CLUSTER_NAMES), team, rv, rng.below(5) > 0);
                let ev = next_event(&mut rng, &mut phases[1], c);
                let what = format!("cluster quota {ev:?}");
                w.clusters.apply_watcher_event(&ev);
                what
            }
            _ => {
                let labels: Vec<(&str, &str)> = match rng.below(5) {
                    0 => vec![],
                    1 => vec![("other", "x")],
                    i => vec![("team", teams[i - 2])],
                };
                let n = namespace(rng.pick(&NAMESPACES), &labels);
                let ev = next_event(&mut rng, &mut phases[2], n);
                let what = format!("namespace {ev:?}");
                w.namespaces.apply_watcher_event(&ev);
                what
            }
        };
        check(&cache, &format!("seed {seed} step {step} ({what})"));
    }
}

#[test]
fn the_indexes_agree_with_the_stores_after_every_event() {
    for seed in 1..=40_u64 {
        run(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), 400);
    }
}

#[test]
fn a_relist_drops_what_was_deleted_while_the_watch_was_down_and_keeps_the_rest() {
    let (cache, mut w) = QuotaCache::with_writers();
    w.quotas.apply_watcher_event(&Event::Init);
    for (ns, name) in [("a", "one"), ("a", "two"), ("b", "one")] {
        w.quotas
            .apply_watcher_event(&Event::InitApply(quota(ns, name, 1, true)));
    }
    w.quotas.apply_watcher_event(&Event::InitDone);
    assert_eq!(names(&cache.in_namespace("a")), ["one", "two"]);
    w.quotas
        .apply_watcher_event(&Event::Delete(quota("a", "one", 2, true)));
    assert_eq!(names(&cache.in_namespace("a")), ["two"]);

    // The watch restarts: during the re-list the old state is served; at InitDone the
    // listed state replaces it (b/one and a/two are gone, a/three is new).
    w.quotas.apply_watcher_event(&Event::Init);
    w.quotas
        .apply_watcher_event(&Event::InitApply(quota("a", "three", 5, true)));
    assert_eq!(names(&cache.in_namespace("a")), ["two"]);
    assert_eq!(names(&cache.in_namespace("b")), ["one"]);
    w.quotas.apply_watcher_event(&Event::InitDone);
    assert_eq!(names(&cache.in_namespace("a")), ["three"]);
    assert!(cache.in_namespace("b").is_empty());
    assert!(cache.quota("b", "one").is_none());
    assert!(index::read(&cache.by_namespace).get("b").is_none());
}

/// `Init` or `InitDone`.
fn list_event<K>(init: bool) -> Event<K> {
    if init { Event::Init } else { Event::InitDone }
}

#[test]
fn coverage_follows_labels_selectors_and_deletions() {
    let (cache, mut w) = QuotaCache::with_writers();
    for init in [true, false] {
        w.quotas.apply_watcher_event(&list_event(init));
        w.clusters.apply_watcher_event(&list_event(init));
        w.namespaces.apply_watcher_event(&list_event(init));
    }
    let ns = |name: &str, labels: &[(&str, &str)]| Event::Apply(namespace(name, labels));
    w.namespaces.apply_watcher_event(&ns("x", &[("team", "a")]));
    w.namespaces.apply_watcher_event(&ns("y", &[("team", "b")]));
    w.clusters
        .apply_watcher_event(&Event::Apply(cluster("ca", Some("a"), 1, true)));
    w.clusters
        .apply_watcher_event(&Event::Apply(cluster("cb", Some("b"), 2, true)));
    assert_eq!(names(&cache.cluster_quotas_covering("x")), ["ca"]);

    // A status write (same selector) changes nothing; the object returned is the new one.
    w.clusters
        .apply_watcher_event(&Event::Apply(cluster("cb", Some("b"), 3, true)));
    assert_eq!(
        cache.cluster_quotas_covering("y")[0].resource_version(),
        Some(3)
    );

    // cb selecting teams a and b covers x beside ca.
    w.namespaces.apply_watcher_event(&ns("w", &[("team", "b")]));
    w.clusters.apply_watcher_event(&Event::Apply(
        CachedClusterQuota::from_value(json!({
            "apiVersion": "quota.karmada.io/v1alpha1",
            "kind": "KarmadaClusterQuota",
            "metadata": {"name": "cb", "resourceVersion": "4"},
            "spec": {"hard": {"pods": "1"}, "namespaceSelector": {"matchExpressions": [
                {"key": "team", "operator": "In", "values": ["a", "b"]}]}}
        }))
        .unwrap(),
    ));
    assert_eq!(names(&cache.cluster_quotas_covering("x")), ["ca", "cb"]);
    // Back to team b alone; c0 covers b's namespaces beside cb.
    w.clusters
        .apply_watcher_event(&Event::Apply(cluster("cb", Some("b"), 5, true)));
    w.clusters
        .apply_watcher_event(&Event::Apply(cluster("c0", Some("b"), 6, true)));
    assert_eq!(names(&cache.cluster_quotas_covering("w")), ["c0", "cb"]);
    // A relabelled namespace moves.
    w.namespaces.apply_watcher_event(&ns("x", &[("team", "b")]));
    w.namespaces.apply_watcher_event(&ns("x", &[("team", "a")]));

    // Deleting the namespace or the quota takes it out.
    w.namespaces
        .apply_watcher_event(&Event::Delete(namespace("y", &[])));
    assert!(cache.cluster_quotas_covering("y").is_empty());
    w.clusters
        .apply_watcher_event(&Event::Delete(cluster("c0", None, 7, true)));
    assert_eq!(names(&cache.cluster_quotas_covering("w")), ["cb"]);
    check(&cache, "end");
    let labels: BTreeMap<String, String> = cache.labels_of("w").unwrap();
    assert_eq!(labels.get("team").map(String::as_str), Some("b"));
}
