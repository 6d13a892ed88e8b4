//! What-if: what a set of templates, propagated by their policies, would add to each quota,
//! and which the webhook would refuse — a dry run of the admission decision. Used by
//! `kubectl karmada-quota check` and by PropagationPolicy admission.
//!
//! ```text
//!  templates × policies (the first PropagationPolicy of the template's namespace that
//!  selects it, else the first ClusterPropagationPolicy)
//!     │ Policy::binding_for (interpreter + placement over the known clusters)
//!     │ old charge = the template's existing binding, if any (the increase counts)
//!     ▼
//!  decision::decide_batch per namespace against the quotas' states (used + entries): the
//!  namespace's KarmadaQuotas and every KarmadaClusterQuota selecting it; a cluster quota
//!  is one state for all its namespaces, so each namespace's share counts against its
//!  hard over all of them
//!     ▼
//!  Outcome: per quota current / added / hard, refusals with the webhook's message
//! ```

use std::collections::BTreeMap;

use karmada_quota_core::binding::ResourceBindingSpec;
use karmada_quota_core::decision::{AdmissionRequest, Decision, Denial, decide_batch};
use karmada_quota_core::ledger::effective_usage;
use karmada_quota_core::quota::QuotaState;
use karmada_quota_core::resources::ResourceList;
use karmada_quota_core::usage::{BindingCharge, builtin_plural, count_name};

use crate::clusters::ClusterFacts;
use crate::policy::{PROPAGATION_POLICY, Policy};
use crate::template::Template;

/// The state a change is checked against.
#[derive(Clone, Debug, Default)]
pub struct Current {
    /// Quotas per namespace (a quota without `used` for a name is taken as 0 there: a new
    /// quota, or one the controller has not synced).
    pub quotas: BTreeMap<String, Vec<QuotaState>>,
    /// KarmadaClusterQuotas (`covers` a selector; `used` is their total over every
    /// namespace they select), by name.
    pub cluster_quotas: Vec<QuotaState>,
    /// Namespace → the names of the cluster quotas that select it (a namespace missing
    /// here is selected by none).
    pub selected: BTreeMap<String, Vec<String>>,
    /// Member clusters (for Duplicated placements).
    pub clusters: Vec<ClusterFacts>,
    /// Existing bindings per namespace, for the increase over what already runs.
    pub bindings: BTreeMap<String, Vec<ResourceBindingSpec>>,
    /// API groups whose kinds run no pods (the webhook's `--pod-less-groups`): their
    /// templates are objects, never uncountable workloads, as the webhook decides.
    pub pod_less_groups: Vec<String>,
}

/// One quota's numbers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuotaChange {
    /// Namespace (empty for a cluster quota).
    pub namespace: String,
    /// A KarmadaClusterQuota: `current` and `hard` are its totals over every namespace
    /// it selects, `added` what the change adds in all of them.
    pub cluster: bool,
    /// Name.
    pub name: String,
    /// used + entries now, restricted to the hard names.
    pub current: ResourceList,
    /// What the admitted templates add.
    pub added: ResourceList,
    /// The limits.
    pub hard: ResourceList,
    /// A template charging it was refused.
    pub refused: bool,
}

impl QuotaChange {
    /// `current + added`.
    pub fn after(&self) -> ResourceList {
        self.current.plus(&self.added)
    }

    /// Nothing refused, and nothing above hard after the change.
    pub fn fits(&self) -> bool {
        !self.refused && self.after().exceeds(&self.hard).is_empty()
    }
}

/// A template the webhook would refuse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// `Deployment team-a/web`.
    pub template: String,
    /// The template's namespace.
    pub namespace: String,
    /// The decision's denial (quota, reason, message).
    pub denial: Denial,
    /// What the template would add to that quota (the increase over its existing
    /// binding, in the quota's scope, restricted to its hard names): the whole charge,
    /// not only the part that does not fit.
    pub charge: ResourceList,
}

/// What the change does.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Every quota of the namespaces the change touches, by namespace and name.
    pub quotas: Vec<QuotaChange>,
    /// Templates the webhook would refuse, in order.
    pub refused: Vec<Refusal>,
    /// Templates no policy selects (not charged).
    pub unselected: Vec<String>,
    /// Templates that cannot be read.
    pub errors: Vec<String>,
    /// Templates asking resources at pod level, which their bindings leave out (one line
    /// each).
    pub notes: Vec<String>,
}

/// What a template asking `names` at pod level is told: Karmada's binding leaves them out,
/// the member clusters count them.
fn pod_level_note(template: &str, names: &[&str]) -> String {
    format!(
        "{template} asks {} at pod level (spec.resources.requests): Karmada v1.18 leaves \
         pod-level requests out of the binding, so quotas charge its containers' requests \
         while the member clusters count the pod level",
        names.join(", ")
    )
}

/// `Kind namespace/name`.
pub fn describe(t: &Template) -> String {
    format!("{} {}/{}", t.kind, t.metadata.namespace, t.metadata.name)
}

/// The policy Karmada would apply to `t`: the first PropagationPolicy of its namespace that
/// selects it, else the first ClusterPropagationPolicy (a namespaced policy wins).
pub fn policy_for<'a>(policies: &'a [Policy], t: &Template) -> Option<&'a Policy> {
    policies
        .iter()
        .find(|p| p.kind == PROPAGATION_POLICY && p.selects(t))
        .or_else(|| {
            policies
                .iter()
                .find(|p| p.kind != PROPAGATION_POLICY && p.selects(t))
        })
}

/// One template's charge: (description, binding name, old charge, new charge).
type Charge = (String, String, Option<BindingCharge>, BindingCharge);

/// What `templates`, propagated by `policies`, would do to `current`'s quotas.
pub fn what_if(templates: &[Template], policies: &[Policy], current: &Current) -> Outcome {
    let mut outcome = Outcome::default();
    let charges = charges_of(templates, policies, current, &mut outcome);
    // One state per cluster quota, shared by every namespace it selects.
    let mut clusters = ClusterQuotas {
        states: current
            .cluster_quotas
            .iter()
            .map(|q| (q.name.clone(), with_zero_used(q)))
            .collect(),
        changes: BTreeMap::new(),
    };
    for (ns, list) in &charges {
        namespace_what_if(ns, list, current, &mut clusters, &mut outcome);
    }
    outcome.quotas.extend(clusters.changes.into_values());
    outcome
        .quotas
        .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    outcome
}

/// Each template's charge by namespace; the unselected, notes and errors into `outcome`.
fn charges_of(
    templates: &[Template],
    policies: &[Policy],
    current: &Current,
    outcome: &mut Outcome,
) -> BTreeMap<String, Vec<Charge>> {
    let mut charges: BTreeMap<String, Vec<Charge>> = BTreeMap::new();
    for t in templates {
        let Some(policy) = policy_for(policies, t) else {
            outcome.unselected.push(describe(t));
            continue;
        };
        let pod_level = t.pod_level_requests();
        if !pod_level.is_empty() {
            outcome.notes.push(pod_level_note(&describe(t), &pod_level));
        }
        let spec = match policy.binding_for(t, &current.clusters) {
            Ok(s) => s,
            Err(e) => {
                outcome.errors.push(e.to_string());
                continue;
            }
        };
        let count = builtin_plural(&t.api_version, &t.kind).map(|p| count_name(&t.api_version, p));
        let new = BindingCharge::compute_with(&spec, count.as_deref(), &current.pod_less_groups);
        let old = current
            .bindings
            .get(&t.metadata.namespace)
            .and_then(|specs| {
                specs.iter().find(|b| {
                    b.resource.api_version == t.api_version
                        && b.resource.kind == t.kind
                        && b.resource.name == t.metadata.name
                })
            })
            .map(|b| BindingCharge::compute_with(b, count.as_deref(), &current.pod_less_groups));
        // Karmada names a binding `<name>-<kind>` in lower case.
        let binding = format!("{}-{}", t.metadata.name, t.kind.to_lowercase());
        charges
            .entry(t.metadata.namespace.clone())
            .or_default()
            .push((describe(t), binding, old, new));
    }
    charges
}

/// The cluster quotas' states (carrying each namespace's admitted entries to the next)
/// and what the change adds to each.
struct ClusterQuotas {
    states: BTreeMap<String, QuotaState>,
    changes: BTreeMap<String, QuotaChange>,
}

/// One namespace's charges decided together, as the webhook decides a batch, against its
/// own quotas and the cluster quotas selecting it.
fn namespace_what_if(
    ns: &str,
    list: &[Charge],
    current: &Current,
    clusters: &mut ClusterQuotas,
    outcome: &mut Outcome,
) {
    let selecting: Vec<&String> = current
        .selected
        .get(ns)
        .map(|names| {
            names
                .iter()
                .filter(|n| clusters.states.contains_key(*n))
                .collect()
        })
        .unwrap_or_default();
    let own = current
        .quotas
        .get(ns)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if own.is_empty() && selecting.is_empty() {
        return; // no quota covers the namespace: nothing to check
    }
    let mut states: Vec<QuotaState> = own.iter().map(with_zero_used).collect();
    let own_len = states.len();
    states.extend(selecting.iter().map(|n| clusters.states[*n].clone()));
    let mut changes: Vec<QuotaChange> =
        states[..own_len].iter().map(|q| change_of(ns, q)).collect();
    for q in &states[own_len..] {
        clusters
            .changes
            .entry(q.name.clone())
            .or_insert_with(|| change_of("", q));
    }
    let uids: Vec<String> = (0..list.len())
        .map(|i| format!("what-if-{ns}-{i}"))
        .collect();
    let reqs: Vec<AdmissionRequest<'_>> = list
        .iter()
        .zip(&uids)
        .map(|((_, binding, old, new), uid)| AdmissionRequest {
            namespace: ns,
            name: binding,
            uid,
            generation: 1,
            old: old.as_ref(),
            new,
            now: 0,
            reservation_ttl: 0,
            max_reservations: usize::MAX,
        })
        .collect();
    let decisions = decide_batch(&mut states, &reqs);
    for (charge, decision) in list.iter().zip(decisions) {
        let mut target = Target {
            own: &mut changes,
            clusters: &mut clusters.changes,
        };
        match decision {
            Decision::Allow(entries) => {
                for (quota, entry) in entries {
                    if let Some(c) = target.change(quota.namespace().is_none(), quota.name()) {
                        c.added.add_assign(&entry.reserved);
                    }
                }
            }
            Decision::Deny(denial) => {
                if let Some(c) = target.change(denial.cluster, &denial.quota) {
                    c.refused = true;
                }
                outcome.refused.push(refusal(ns, charge, &states, denial));
            }
        }
    }
    // The cluster quotas carry this namespace's admitted entries to the next one.
    for q in states.drain(own_len..) {
        clusters.states.insert(q.name.clone(), q);
    }
    outcome.quotas.extend(changes);
}

/// Where a decision's effect on a quota is recorded: this namespace's own quotas, or the
/// cluster quotas.
struct Target<'a> {
    own: &'a mut Vec<QuotaChange>,
    clusters: &'a mut BTreeMap<String, QuotaChange>,
}

impl Target<'_> {
    fn change(&mut self, cluster: bool, name: &str) -> Option<&mut QuotaChange> {
        if cluster {
            self.clusters.get_mut(name)
        } else {
            self.own.iter_mut().find(|c| c.name == name)
        }
    }
}

/// A refused template: what it would have added to the quota that refused it.
fn refusal(ns: &str, charge: &Charge, states: &[QuotaState], denial: Denial) -> Refusal {
    let (template, _, old, new) = charge;
    let charge = states
        .iter()
        .find(|q| q.name == denial.quota && q.covers.is_cluster() == denial.cluster)
        .map(|q| increase(old.as_ref(), new, q))
        .unwrap_or_default();
    Refusal {
        template: template.clone(),
        namespace: ns.to_owned(),
        denial,
        charge,
    }
}

/// What `new` adds over `old` to quota `q` (its scope, its hard names).
fn increase(old: Option<&BindingCharge>, new: &BindingCharge, q: &QuotaState) -> ResourceList {
    let of = |c: &BindingCharge| c.scoped(&q.spec.scope).map(|u| u.total).unwrap_or_default();
    let before = old.map(of).unwrap_or_default();
    of(new).sub_clamped(&before).restricted_to(&q.spec.hard)
}

/// `q`'s numbers before the change, as `namespace`'s (empty: a cluster quota's).
fn change_of(namespace: &str, q: &QuotaState) -> QuotaChange {
    QuotaChange {
        namespace: namespace.to_owned(),
        cluster: q.covers.is_cluster(),
        name: q.name.clone(),
        current: effective_usage(
            q.used.as_ref().unwrap_or(&ResourceList::new()),
            &q.reservations,
            None,
        )
        .restricted_to(&q.spec.hard),
        added: ResourceList::new(),
        hard: q.spec.hard.clone(),
        refused: false,
    }
}

/// `q` with every hard name present in `used` (0 where the controller has not said).
fn with_zero_used(q: &QuotaState) -> QuotaState {
    let mut q = q.clone();
    let used = q.used.get_or_insert_with(ResourceList::new);
    for (name, _) in q.spec.hard.iter() {
        if used.get(name).is_none() {
            used.insert(name, karmada_quota_core::quantity::Quantity::ZERO);
        }
    }
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::mk_list;
    use karmada_quota_core::quota::QuotaSpec;

    fn template(yaml: &str) -> Template {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn policy(yaml: &str) -> Policy {
        serde_saphyr::from_str(yaml).unwrap()
    }

    fn quota(name: &str, hard: &[(&str, &str)], used: Option<&[(&str, &str)]>) -> QuotaState {
        QuotaState {
            clusters: Vec::new(),
            name: name.into(),
            covers: Default::default(),
            spec: QuotaSpec {
                policy: Default::default(),
                hard: mk_list(hard),
                ..Default::default()
            },
            used: used.map(mk_list),
            reservations: Vec::new(),
        }
    }

    const WEB: &str = "{apiVersion: apps/v1, kind: Deployment, metadata: {name: web, namespace: a}, spec: {replicas: 4, template: {spec: {containers: [{resources: {requests: {cpu: 500m}}}]}}}}";
    const DIVIDED: &str = "{kind: PropagationPolicy, metadata: {namespace: a}, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}], placement: {replicaScheduling: {replicaSchedulingType: Divided}}}}";

    #[test]
    fn charges_the_increase_over_the_existing_binding() {
        let mut current = Current::default();
        current.quotas.insert(
            "a".into(),
            vec![quota(
                "q",
                &[("requests.cpu", "3")],
                Some(&[("requests.cpu", "1")]),
            )],
        );
        // Running: 2 × 500m; the change scales to 4 × 500m: +1 cpu → 2 of 3.
        let running = template(&WEB.replace("replicas: 4", "replicas: 2"))
            .binding()
            .unwrap();
        current.bindings.insert("a".into(), vec![running]);
        let out = what_if(&[template(WEB)], &[policy(DIVIDED)], &current);
        assert_eq!(out.refused, []);
        assert_eq!(out.quotas[0].added, mk_list(&[("requests.cpu", "1")]));
        assert_eq!(out.quotas[0].after(), mk_list(&[("requests.cpu", "2")]));
        assert!(out.quotas[0].fits());
    }

    #[test]
    fn a_refusal_carries_the_webhooks_message_and_unselected_templates_are_listed() {
        let mut current = Current::default();
        current.quotas.insert(
            "a".into(),
            vec![quota("q", &[("requests.cpu", "1500m")], None)],
        );
        let cm = template("{apiVersion: v1, kind: ConfigMap, metadata: {name: c, namespace: a}}");
        let out = what_if(&[template(WEB), cm], &[policy(DIVIDED)], &current);
        assert_eq!(out.unselected, ["ConfigMap a/c"]);
        assert_eq!(out.refused.len(), 1);
        assert_eq!(out.refused[0].template, "Deployment a/web");
        assert_eq!(
            out.refused[0].denial.message,
            "exceeded quota: q, requested: requests.cpu=2, used: requests.cpu=0, limited: requests.cpu=1500m"
        );
        assert!(!out.quotas[0].fits());
    }

    #[test]
    fn a_kind_of_a_pod_less_group_is_an_object_as_the_webhook_decides() {
        let mut current = Current::default();
        current
            .quotas
            .insert("a".into(), vec![quota("q", &[("requests.cpu", "1")], None)]);
        let cert = template(
            "{apiVersion: cert-manager.io/v1, kind: Certificate, metadata: {name: c, namespace: a}}",
        );
        let any = policy(
            "{kind: PropagationPolicy, metadata: {namespace: a}, spec: {resourceSelectors: [{apiVersion: cert-manager.io/v1, kind: Certificate}]}}",
        );
        // Unknown to the engine: a custom kind may run pods nothing counts.
        let out = what_if(
            std::slice::from_ref(&cert),
            std::slice::from_ref(&any),
            &current,
        );
        assert_eq!(out.refused.len(), 1, "{out:?}");
        assert_eq!(
            out.refused[0].denial.reason,
            karmada_quota_core::decision::DenyReason::Unaccounted
        );
        // Told its group runs no pods (--pod-less-groups), it is an object and fits.
        current.pod_less_groups = vec!["cert-manager.io".into()];
        let out = what_if(&[cert], &[any], &current);
        assert_eq!(out.refused, []);
    }

    #[test]
    fn a_cluster_quota_counts_every_selected_namespace_against_its_hard() {
        let mut biz = quota(
            "biz",
            &[("requests.cpu", "3")],
            Some(&[("requests.cpu", "1")]),
        );
        biz.covers = karmada_quota_core::selection::Covers::Selected(Default::default());
        let mut current = Current::default();
        current.cluster_quotas.push(biz);
        for ns in ["a", "b"] {
            current.selected.insert(ns.into(), vec!["biz".into()]);
        }
        // Unselected namespace c: not charged to biz.
        let cpp = policy(
            "{kind: ClusterPropagationPolicy, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}], placement: {replicaScheduling: {replicaSchedulingType: Divided}}}}",
        );
        let in_ns = |ns: &str, replicas: u32| {
            template(
                &WEB.replace("namespace: a", &format!("namespace: {ns}"))
                    .replace("replicas: 4", &format!("replicas: {replicas}")),
            )
        };
        // a: 4 × 500m = 2 → 1 + 2 = 3 of 3; b: 2 × 500m = 1 more → refused; c: free.
        let out = what_if(
            &[in_ns("a", 4), in_ns("b", 2), in_ns("c", 8)],
            &[cpp],
            &current,
        );
        assert_eq!(out.refused.len(), 1, "{:?}", out.refused);
        assert_eq!(out.refused[0].template, "Deployment b/web");
        assert!(out.refused[0].denial.cluster);
        assert_eq!(
            out.refused[0].denial.message,
            "exceeded cluster quota: biz, requested: requests.cpu=1, used: requests.cpu=3, limited: requests.cpu=3"
        );
        assert_eq!(out.quotas.len(), 1, "{:?}", out.quotas);
        let c = &out.quotas[0];
        assert!(c.cluster && c.namespace.is_empty() && c.name == "biz");
        assert_eq!(c.current, mk_list(&[("requests.cpu", "1")]));
        assert_eq!(c.added, mk_list(&[("requests.cpu", "2")]));
        assert!(c.refused && !c.fits());
    }

    #[test]
    fn a_namespaced_policy_wins_over_a_cluster_policy() {
        let cpp = policy(
            "{kind: ClusterPropagationPolicy, spec: {resourceSelectors: [{apiVersion: apps/v1, kind: Deployment}]}}",
        );
        let pp = policy(DIVIDED);
        let t = template(WEB);
        assert_eq!(policy_for(&[cpp.clone(), pp.clone()], &t), Some(&pp));
        assert_eq!(policy_for(std::slice::from_ref(&cpp), &t), Some(&cpp));
    }
}
