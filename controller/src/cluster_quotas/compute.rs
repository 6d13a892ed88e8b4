//! What a KarmadaClusterQuota's status should be: the KarmadaQuota computation
//! (`desired::compute_over`, `desired::desired_status`) over the namespaces it selects,
//! plus core's per-namespace usage. Pure: no client.

use std::collections::BTreeMap;

use karmada_quota_core::placement::LabelSelector;
use karmada_quota_core::selection::{Labels, namespace_usage};
use karmada_quota_core::status::ObservedPods;
use karmada_quota_crds::cluster_quota::NamespaceUsage;
use karmada_quota_crds::convert::{list_to_api, validate_cluster_spec};
use karmada_quota_crds::{KarmadaClusterQuota, KarmadaClusterQuotaStatus};

use crate::desired::{self, Computed};
use crate::index::Index;
use crate::members::{MemberRegistry, Reach};

/// The namespaces `selector` matches among `labels` (name, labels), sorted by name.
pub fn namespaces_selected(selector: &LabelSelector, labels: &[(String, Labels)]) -> Vec<String> {
    let mut out: Vec<String> = labels
        .iter()
        .filter(|(_, l)| selector.matches(l))
        .map(|(n, _)| n.clone())
        .collect();
    out.sort();
    out
}

/// The members' pods of `namespaces`, merged per member (a member unknown for one of them
/// is unknown).
pub fn observed_in(members: &MemberRegistry, namespaces: &[String]) -> ObservedPods {
    // No namespace has the empty name: every member, reachable ones with no pods.
    let mut out = members.observed_pods("");
    for ns in namespaces {
        for (member, pods) in members.observed_pods(ns) {
            let slot = out.entry(member).or_insert_with(|| Some(Vec::new()));
            match (slot.as_mut(), pods) {
                (Some(acc), Some(mut p)) => acc.append(&mut p),
                (_, None) => *slot = None,
                (None, Some(_)) => {}
            }
        }
    }
    out
}

/// One cluster quota, computed.
#[derive(Clone, Debug)]
pub struct ClusterComputed {
    /// The computation of its KarmadaQuota-shaped part (its view's namespace is empty).
    pub computed: Computed,
    /// The selected namespaces' usage, sorted by namespace.
    pub namespaces: Vec<(String, karmada_quota_core::ResourceList)>,
}

/// Compute `cq` over the namespaces of `labels` its selector matches, with the batch
/// entries its stored status does not account for yet (`unfolded`, batches mode).
pub fn compute(
    cq: &KarmadaClusterQuota,
    labels: &[(String, Labels)],
    index: &Index,
    members: &MemberRegistry,
    now: i64,
    unfolded: Option<&desired::Unfolded>,
) -> ClusterComputed {
    let (selector, spec) = match validate_cluster_spec(cq) {
        Ok(v) => v,
        Err(errors) => {
            return ClusterComputed {
                computed: Computed::Invalid(errors),
                namespaces: Vec::new(),
            };
        }
    };
    let selected = namespaces_selected(&selector, labels);
    let rows = namespace_usage(
        &spec.hard,
        &spec.scope,
        selected.iter().map(|ns| (ns.as_str(), index.tally_in(ns))),
    );
    let observed = observed_in(members, &selected);
    // The entries of a cluster quota name their namespace; none falls back to "".
    let mut lookup = vec![String::new()];
    lookup.extend(selected.iter().cloned());
    // `unfolded` is the batch store's (`None` also when no batch names the quota): the
    // caller fences (`Computed::fenced`).
    let computed = desired::compute_over(cq, spec, &lookup, index, &observed, now, unfolded);
    ClusterComputed {
        computed,
        namespaces: rows,
    }
}

/// The status `cq` should have, or `None` when it already says it.
pub fn desired_status(
    cq: &KarmadaClusterQuota,
    c: &ClusterComputed,
    reach: &BTreeMap<String, Reach>,
    now: jiff::Timestamp,
) -> Option<KarmadaClusterQuotaStatus> {
    let current = cq.status.clone().unwrap_or_default();
    let quota = desired::desired_status(cq, &c.computed, reach, now)
        .unwrap_or_else(|| current.quota.clone());
    let namespaces = match &c.computed {
        Computed::Valid { .. } => c
            .namespaces
            .iter()
            .map(|(name, used)| NamespaceUsage {
                name: name.clone(),
                used: list_to_api(used),
            })
            .collect(),
        // An invalid spec leaves the rest of the status as it was.
        Computed::Invalid(_) => current.namespaces.clone(),
    };
    let next = KarmadaClusterQuotaStatus { quota, namespaces };
    (next != current).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::*;
    use kube::runtime::watcher::Event;

    const NOW: i64 = 1_800_000_000;

    fn labels(pairs: &[(&str, &str)]) -> Vec<(String, Labels)> {
        pairs
            .iter()
            .map(|(ns, business)| {
                let l = if business.is_empty() {
                    Labels::new()
                } else {
                    Labels::from([("business".to_owned(), (*business).to_owned())])
                };
                ((*ns).to_owned(), l)
            })
            .collect()
    }

    fn index() -> Index {
        let mut i = Index::new(600);
        i.apply_binding_event(&Event::Init, None, NOW);
        for (ns, name, uid, replicas) in [
            ("a-dev", "web", "u1", 2),
            ("a-prod", "web", "u2", 3),
            ("b", "web", "u3", 5),
        ] {
            let rb = mk_binding(ns, name, uid, 1, replicas, "1", &[("member1", replicas)]);
            i.apply_binding_event(&Event::InitApply(rb), None, NOW);
        }
        i.apply_binding_event(&Event::InitDone, None, NOW);
        i
    }

    fn used_of(c: &ClusterComputed) -> String {
        match &c.computed {
            Computed::Valid { view, .. } => view.used.to_string(),
            Computed::Invalid(e) => panic!("invalid: {e:?}"),
        }
    }

    #[test]
    fn used_is_the_union_of_the_selected_namespaces_and_each_has_its_row() {
        let q = business_quota(&[("requests.cpu", "50"), ("pods", "100")]);
        let c = compute(
            &q,
            &labels(&[
                ("a-dev", "a"),
                ("a-prod", "a"),
                ("b", "b"),
                ("a-empty", "a"),
            ]),
            &index(),
            &MemberRegistry::default(),
            NOW,
            None,
        );
        assert_eq!(used_of(&c), "pods=5,requests.cpu=5");
        let rows: Vec<(String, String)> = c
            .namespaces
            .iter()
            .map(|(n, l)| (n.clone(), l.to_string()))
            .collect();
        assert_eq!(
            rows,
            [
                ("a-dev".to_owned(), "pods=2,requests.cpu=2".to_owned()),
                ("a-empty".to_owned(), "pods=0,requests.cpu=0".to_owned()),
                ("a-prod".to_owned(), "pods=3,requests.cpu=3".to_owned()),
            ]
        );
        let st = desired_status(&q, &c, &BTreeMap::new(), jiff::Timestamp::now())
            .expect("a first status");
        assert_eq!(st.namespaces.len(), 3);
        assert_eq!(st.quota.used["requests.cpu"].0, "5");
        assert_eq!(
            st.quota.summary.as_deref(),
            Some("pods: 5/100, requests.cpu: 5/50")
        );
    }

    #[test]
    fn a_relabelled_namespace_moves_its_usage_at_the_next_computation() {
        let q = business_quota(&[("requests.cpu", "50")]);
        let before = compute(
            &q,
            &labels(&[("a-dev", "a"), ("a-prod", "a"), ("b", "b")]),
            &index(),
            &MemberRegistry::default(),
            NOW,
            None,
        );
        assert_eq!(used_of(&before), "requests.cpu=5");
        // b joins business a, a-prod leaves it.
        let after = compute(
            &q,
            &labels(&[("a-dev", "a"), ("a-prod", ""), ("b", "a")]),
            &index(),
            &MemberRegistry::default(),
            NOW,
            None,
        );
        assert_eq!(used_of(&after), "requests.cpu=7");
        let names: Vec<&str> = after.namespaces.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a-dev", "b"]);
    }

    #[test]
    fn entries_are_pruned_in_the_namespace_they_name() {
        let mut q = business_quota(&[("requests.cpu", "50")]);
        let mut seen = mk_reservation("web", "u2", 1, &[("requests.cpu", "3")], NOW + 60);
        seen.reserved_by.namespace = "a-prod".into();
        // Same binding name as a-dev's served "web", but in a-prod and never seen: a
        // pending CREATE, not a failed duplicate.
        let mut pending = mk_reservation("web2", "u9", 1, &[("requests.cpu", "1")], NOW + 60);
        pending.reserved_by.namespace = "a-prod".into();
        let mut dup = mk_reservation("web", "u8", 1, &[("requests.cpu", "1")], NOW + 60);
        dup.reserved_by.namespace = "a-dev".into();
        q.status = Some(karmada_quota_crds::KarmadaClusterQuotaStatus {
            quota: karmada_quota_crds::KarmadaQuotaStatus {
                reservations: vec![seen, pending.clone(), dup],
                ..Default::default()
            },
            namespaces: Vec::new(),
        });
        let c = compute(
            &q,
            &labels(&[("a-dev", "a"), ("a-prod", "a")]),
            &index(),
            &MemberRegistry::default(),
            NOW,
            None,
        );
        let Computed::Valid { view, .. } = &c.computed else {
            panic!("valid")
        };
        let kept: Vec<&str> = view
            .reservations
            .iter()
            .map(|r| r.reserved_by.uid.as_str())
            .collect();
        assert_eq!(
            kept,
            ["u9"],
            "observed and failed-duplicate entries are dropped"
        );
    }

    /// Batch entries of a cluster quota name their binding's namespace: observed in
    /// a-prod (u2) they are folded into `used`, unseen (u9) carried; the status records
    /// the newest batch naming the cluster quota.
    #[test]
    fn batch_entries_are_folded_in_the_namespace_they_name_and_the_fold_recorded() {
        use karmada_quota_core::selection::QuotaKey;
        use karmada_quota_crds::convert::reservation_from_api;
        let q = business_quota(&[("requests.cpu", "50")]);
        let entry = |name: &str, uid: &str| {
            let mut r = mk_reservation(name, uid, 1, &[("requests.cpu", "3")], NOW + 60);
            r.reserved_by.namespace = "a-prod".into();
            reservation_from_api(&r, "entry").unwrap()
        };
        let mut view = karmada_quota_status::BatchView::new();
        for (sequence, uid) in [(4, "u2"), (6, "u9")] {
            view.insert(&karmada_quota_crds::reservation_batch::ParsedBatch {
                sequence,
                entries: vec![(
                    QuotaKey::Cluster {
                        name: "business-a".into(),
                    },
                    entry(if uid == "u2" { "web" } else { "web2" }, uid),
                )],
                writer: None,
                uid: None,
            });
        }
        let key = QuotaKey::Cluster {
            name: "business-a".into(),
        };
        let unfolded = desired::Unfolded::of(&view, &key, None, 3600).unwrap();
        let c = compute(
            &q,
            &labels(&[("a-dev", "a"), ("a-prod", "a")]),
            &index(),
            &MemberRegistry::default(),
            NOW,
            Some(&unfolded),
        );
        let st = desired_status(&q, &c, &BTreeMap::new(), jiff::Timestamp::now()).unwrap();
        assert_eq!(st.quota.folded_through, Some(6));
        let kept: Vec<&str> = st
            .quota
            .reservations
            .iter()
            .map(|r| r.reserved_by.uid.as_str())
            .collect();
        assert_eq!(kept, ["u9"]);
        assert_eq!(st.quota.used["requests.cpu"].0, "5", "a-dev 2 + a-prod 3");
    }

    #[test]
    fn an_invalid_spec_keeps_the_namespaces_and_says_why() {
        let mut q = business_quota(&[("requests.cpu", "50")]);
        q.spec.namespace_selector = None;
        q.status = Some(karmada_quota_crds::KarmadaClusterQuotaStatus {
            namespaces: vec![NamespaceUsage {
                name: "a-dev".into(),
                used: Default::default(),
            }],
            ..Default::default()
        });
        let c = compute(
            &q,
            &labels(&[("a-dev", "a")]),
            &index(),
            &MemberRegistry::default(),
            NOW,
            None,
        );
        let st = desired_status(&q, &c, &BTreeMap::new(), jiff::Timestamp::now()).unwrap();
        assert_eq!(st.namespaces[0].name, "a-dev");
        let ready = &st.quota.conditions[0];
        assert_eq!(
            (ready.type_.as_str(), ready.status.as_str()),
            ("Ready", "False")
        );
        assert!(
            ready
                .message
                .contains("spec.namespaceSelector: Required value"),
            "{}",
            ready.message
        );
    }
}
