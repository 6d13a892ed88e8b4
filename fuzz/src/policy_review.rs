//! `policy_review`: a PropagationPolicy / ClusterPropagationPolicy AdmissionReview as the
//! webhook decodes it ([`decode_policy_review`]), then its dry run ([`policy::check`]:
//! template selection, core's `Policy::selects` and `binding_for`, the what-if) against a
//! world fed from the same input.
//!
//! Input: `<AdmissionReview JSON> 0xFF <world JSON>`, the world being
//! `{"templates": [...], "clusters": [Cluster...], "quotas": [KarmadaQuota...],
//!   "bindings": {"<namespace>": [ResourceBinding spec...]}}` (each entry that does not
//! decode is dropped, as the API would never serve it).
//!
//! Laws:
//! - a decoded review is a CREATE or UPDATE of a policy of `policy.karmada.io` whose
//!   `Policy::kind` is the request's kind; any other answer is an allow or a 400 with a
//!   message;
//! - the dry run ends (fits, exceeds or skipped), twice the same way on the same world;
//! - it prices only templates the policy selects: no selected template, or no quota in
//!   the selected templates' namespaces, always fits; a PropagationPolicy never reaches
//!   templates outside its own namespace;
//! - skipped only for more than the template limit; every warning line is non-empty.

use std::sync::OnceLock;
use std::time::Duration;

use karmada_quota_core::quota::QuotaState;
use karmada_quota_crds::KarmadaQuota;
use karmada_quota_crds::convert::quota_state;
use karmada_quota_interpreter::policy::{PROPAGATION_POLICY, Policy};
use karmada_quota_interpreter::template::Template;
use karmada_quota_webhook::admission::{REASON_BAD_REQUEST, decode_policy_review};
use karmada_quota_webhook::policy::{self, FakeWorld, Verdict};
use kube::core::admission::Operation;
use serde_json::Value;

use crate::parts::{check_refusal, split};

/// The template limit of the dry run (`--policy-max-templates`), small so that inputs
/// reach it.
const MAX_TEMPLATES: usize = 8;

/// A world read from the input: the webhook's in-memory [`FakeWorld`] (answering like the
/// API: kind and namespace filtered, more than the limit refused) and the quotas.
#[derive(Default)]
struct World {
    api: FakeWorld,
    quotas: Vec<QuotaState>,
    quota_namespaces: Vec<String>,
}

fn entries<T: serde::de::DeserializeOwned>(v: Option<&Value>) -> Vec<T> {
    v.and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|e| serde_json::from_value(e.clone()).ok())
        .collect()
}

impl World {
    fn from_json(data: &[u8]) -> Self {
        let Ok(doc) = serde_json::from_slice::<Value>(data) else {
            return Self::default();
        };
        let mut world = Self {
            api: FakeWorld {
                templates: entries(doc.get("templates")),
                clusters: doc
                    .get("clusters")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .map(karmada_quota_interpreter::clusters::facts)
                    .collect(),
                ..FakeWorld::default()
            },
            ..Self::default()
        };
        for q in entries::<KarmadaQuota>(doc.get("quotas")) {
            if let Ok(state) = quota_state(&q) {
                world
                    .quota_namespaces
                    .push(q.metadata.namespace.clone().unwrap_or_default());
                world.quotas.push(state);
            }
        }
        if let Some(by_ns) = doc.get("bindings").and_then(Value::as_object) {
            for (ns, list) in by_ns {
                world.api.bindings.insert(ns.clone(), entries(Some(list)));
            }
        }
        world
    }

    fn quotas_of(&self, namespace: &str) -> Vec<QuotaState> {
        self.quotas
            .iter()
            .zip(&self.quota_namespaces)
            .filter(|(_, ns)| *ns == namespace)
            .map(|(q, _)| q.clone())
            .collect()
    }
}

/// The dry run's timer needs a runtime: one for every run.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime starts")
    })
}

/// Runs one input.
pub fn run(data: &[u8]) {
    let [review, world] = split::<2>(data);
    let (req, policy) = match decode_policy_review(review) {
        Ok(decoded) => decoded,
        Err(answer) => return check_refusal(&answer, REASON_BAD_REQUEST),
    };
    assert_eq!(req.kind.group, policy::POLICY_GROUP);
    assert!(matches!(
        req.operation,
        Operation::Create | Operation::Update
    ));
    assert_eq!(
        policy.kind, req.kind.kind,
        "the policy's kind is the request's"
    );
    assert!(matches!(
        policy.kind.as_str(),
        "PropagationPolicy" | "ClusterPropagationPolicy"
    ));

    let world = World::from_json(world);
    let verdict = dry_run(&world, &policy);
    assert_eq!(
        verdict,
        dry_run(&world, &policy),
        "the dry run is not repeatable"
    );

    let selected: Vec<&Template> = world
        .api
        .templates
        .iter()
        .filter(|t| policy.selects(t))
        .collect();
    if policy.kind == PROPAGATION_POLICY {
        assert!(
            selected
                .iter()
                .all(|t| t.metadata.namespace == policy.metadata.namespace),
            "a PropagationPolicy selected a template of another namespace"
        );
    }
    match &verdict {
        Verdict::Skipped(why) => assert!(
            why.contains(&format!("more than {MAX_TEMPLATES}")),
            "skipped for another reason than the limit: {why}"
        ),
        Verdict::Exceeds(lines) => {
            assert!(lines.iter().all(|l| !l.is_empty()), "an empty warning");
            let priced = selected
                .iter()
                .any(|t| !world.quotas_of(&t.metadata.namespace).is_empty());
            assert!(priced, "exceeds without a selected template under a quota");
        }
        Verdict::Fits => {}
    }
}

fn dry_run(world: &World, policy: &Policy) -> Verdict {
    let rt = runtime();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    rt.block_on(policy::check(
        &world.api,
        policy,
        |ns| world.quotas_of(ns),
        MAX_TEMPLATES,
        deadline,
        &[],
    ))
}
