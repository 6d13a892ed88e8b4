//! The mutating review and the validating webhook's charge of a waiting binding: a CREATE
//! that fits passes unchanged unless others wait ahead; one that does not is suspended and
//! marked; a waiting binding is charged nothing; its release is charged with the CAS and
//! refused when it no longer fits; a binding suspended by someone else is charged as before.

use serde_json::{Value, json};

use crate::tests::{
    CONTROLLER, Harness, as_user, create_rb, mk_binding, mk_quota, update_rb, verdict,
};

fn queueing(hard: &str, used: &str, order: &str) -> karmada_quota_crds::KarmadaQuota {
    let mut q = mk_quota("q", &[("requests.cpu", hard)], &[("requests.cpu", used)]);
    q.spec.admission = Some(karmada_quota_crds::quota::AdmissionSpec {
        mode: Some("Queue".into()),
        order: Some(order.into()),
    });
    q
}

async fn mutate(h: &Harness, review: Value) -> Value {
    let (code, body) = h
        .post(
            super::MUTATE_RESOURCEBINDING_PATH,
            review.to_string().into_bytes(),
        )
        .await;
    assert_eq!(code, axum::http::StatusCode::OK, "{body}");
    body["response"].clone()
}

/// `object` with the response's JSON patch applied (unchanged without one).
fn patched(mut object: Value, response: &Value) -> Value {
    let bytes: Option<Vec<u8>> = match &response["patch"] {
        Value::String(p) => Some(base64_decode::decode(p)),
        Value::Array(a) => Some(a.iter().map(|b| b.as_u64().unwrap() as u8).collect()),
        _ => None,
    };
    if let Some(bytes) = bytes {
        let patch: json_patch::Patch = serde_json::from_slice(&bytes).unwrap();
        json_patch::patch(&mut object, &patch).unwrap();
    }
    object
}

/// Base64 as Kubernetes encodes `[]byte` (standard alphabet, padded).
mod base64_decode {
    pub fn decode(s: &str) -> Vec<u8> {
        const ABC: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u32, 0);
        for c in s.bytes().filter(|c| *c != b'=') {
            let v = ABC.iter().position(|x| *x == c).unwrap() as u32;
            acc = (acc << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        out
    }
}

fn waits(object: &Value) -> bool {
    object["spec"]["suspension"]["scheduling"] == json!(true)
        && object["metadata"]["annotations"][karmada_quota_core::queue::ANNOTATION_QUEUED_AT]
            .is_string()
}

#[tokio::test]
async fn a_create_that_fits_passes_unchanged_and_is_charged() {
    let h = Harness::new(&[queueing("4", "1", "StrictFIFO")]);
    let rb = mk_binding("web", "u1", 1, 2, "1", "");
    let r = mutate(&h, create_rb(rb.clone())).await;
    assert!(r["allowed"].as_bool().unwrap());
    assert!(r.get("patch").is_none_or(Value::is_null), "{r}");
    let v = h.review_binding(create_rb(rb)).await;
    assert!(verdict(&v).0);
    assert_eq!(h.entries("q"), 1);
}

#[tokio::test]
async fn a_create_that_does_not_fit_is_suspended_marked_and_charged_nothing() {
    let h = Harness::new(&[queueing("4", "3", "StrictFIFO")]);
    let rb = mk_binding("big", "u1", 1, 2, "1", "");
    let r = mutate(&h, create_rb(rb.clone())).await;
    assert!(r["allowed"].as_bool().unwrap(), "{r}");
    let held = patched(rb, &r);
    assert!(waits(&held), "{held}");
    assert_eq!(
        held["metadata"]["annotations"]["quota.karmada.io/waiting-for"],
        "q"
    );
    let v = h.review_binding(create_rb(held)).await;
    assert!(verdict(&v).0, "{v}");
    assert_eq!(h.entries("q"), 0, "a waiting binding is charged nothing");
}

#[tokio::test]
async fn a_create_that_fits_waits_when_it_would_jump_a_strict_line() {
    let q = strict_with_one_waiting();
    let h = Harness::new(&[q]);
    let rb = mk_binding("late", "u1", 1, 1, "1", "");
    let r = mutate(&h, create_rb(rb.clone())).await;
    assert!(waits(&patched(rb.clone(), &r)), "{r}");
    // A higher priority passes a line of lower ones when it fits.
    let mut urgent = rb;
    urgent["spec"]["schedulePriority"] = json!({"priority": 10});
    let r = mutate(&h, create_rb(urgent.clone())).await;
    assert!(!waits(&patched(urgent, &r)), "{r}");
}

/// A strict quota whose status shows one binding of priority 0 waiting.
fn strict_with_one_waiting() -> karmada_quota_crds::KarmadaQuota {
    let mut q = queueing("4", "0", "StrictFIFO");
    q.status.as_mut().unwrap().queue = Some(karmada_quota_crds::quota::QueueStatus {
        total: 1,
        waiting: vec![karmada_quota_crds::quota::WaitingBinding {
            position: 1,
            namespace: String::new(),
            name: "first".into(),
            priority: 0,
            asks: Default::default(),
            short: Default::default(),
            since: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::UNIX_EPOCH,
            ),
            stuck: None,
        }],
    });
    q
}

#[tokio::test]
async fn a_create_the_arrivals_review_did_not_see_cannot_jump_a_strict_line() {
    // The namespace lacks the waiting-line label (or the mutating webhook is not
    // installed): the CREATE reaches the validating webhook neither suspended nor marked.
    let h = Harness::new(&[strict_with_one_waiting()]);
    let rb = mk_binding("late", "u1", 1, 1, "1", "");
    let v = h.review_binding(create_rb(rb.clone())).await;
    let (allowed, code, _, message) = verdict(&v);
    assert!(!allowed, "it would start ahead of the line: {v}");
    assert_eq!(code, 403);
    for part in [
        "quota q",
        "StrictFIFO",
        karmada_quota_core::queue::LABEL_WAITING_LINE,
        "--label-line-namespaces",
    ] {
        assert!(message.contains(part), "{part}: {message}");
    }
    assert_eq!(h.entries("q"), 0, "nothing reserved");
    // Through the arrivals review it waits in its place, charged nothing.
    let r = mutate(&h, create_rb(rb.clone())).await;
    let held = patched(rb, &r);
    assert!(waits(&held), "{r}");
    assert!(verdict(&h.review_binding(create_rb(held)).await).0);
    // One of higher priority may pass the line (as the arrivals review decides), and a
    // line in best-effort order is no line to jump.
    let mut urgent = mk_binding("urgent", "u2", 1, 1, "1", "");
    urgent["spec"]["schedulePriority"] = json!({"priority": 10});
    assert!(verdict(&h.review_binding(create_rb(urgent)).await).0);
    let mut best = strict_with_one_waiting();
    best.spec.admission.as_mut().unwrap().order = Some("BestEffortFIFO".into());
    let h = Harness::new(&[best]);
    let v = h
        .review_binding(create_rb(mk_binding("late", "u1", 1, 1, "1", "")))
        .await;
    assert!(verdict(&v).0, "{v}");
}

#[tokio::test]
async fn a_suspension_of_ours_makes_the_next_arrival_wait_before_the_status_shows_it() {
    let h = Harness::new(&[queueing("4", "3", "StrictFIFO")]);
    let big = mk_binding("big", "u1", 1, 2, "1", "");
    let r = mutate(&h, create_rb(big.clone())).await;
    assert!(waits(&patched(big, &r)));
    // Fits (1 free), but the big one is ahead in a strict line.
    let small = mk_binding("small", "u2", 1, 1, "1", "");
    let r = mutate(&h, create_rb(small.clone())).await;
    assert!(waits(&patched(small, &r)), "{r}");
}

#[tokio::test]
async fn a_refusing_quota_suspends_nothing_and_refuses_as_before() {
    let h = Harness::new(&[mk_quota(
        "q",
        &[("requests.cpu", "4")],
        &[("requests.cpu", "3")],
    )]);
    let rb = mk_binding("big", "u1", 1, 2, "1", "");
    let r = mutate(&h, create_rb(rb.clone())).await;
    let same = patched(rb, &r);
    assert!(!waits(&same));
    let v = h.review_binding(create_rb(same)).await;
    assert_eq!(verdict(&v).2, "QuotaExceeded");
}

#[tokio::test]
async fn the_release_is_charged_with_the_cas_and_refused_when_it_no_longer_fits() {
    let h = Harness::new(&[queueing("4", "2", "StrictFIFO")]);
    let rb = mk_binding("w", "u1", 1, 2, "1", "");
    let mut held = rb.clone();
    held["metadata"]["annotations"] =
        json!({"quota.karmada.io/queued-at": "2026-11-26T03:00:00.000Z"});
    held["spec"]["suspension"] = json!({"scheduling": true});
    // The controller's release: suspension and mark cleared. 2 free: charged 2 under the CAS.
    let v = h
        .review_binding(as_user(
            update_rb(held.clone(), rb.clone()),
            CONTROLLER,
            &[],
        ))
        .await;
    assert!(verdict(&v).0, "{v}");
    assert_eq!(
        h.effective("q").get("requests.cpu").unwrap().to_string(),
        "4"
    );
    // Another waiting binding released now does not fit any more: refused, stays waiting.
    let other = mk_binding("w2", "u2", 1, 1, "1", "");
    let mut other_held = other.clone();
    other_held["metadata"]["annotations"] = held["metadata"]["annotations"].clone();
    other_held["spec"]["suspension"] = json!({"scheduling": true});
    let v = h
        .review_binding(as_user(update_rb(other_held, other), CONTROLLER, &[]))
        .await;
    assert_eq!(verdict(&v).2, "QuotaExceeded", "{v}");
}

#[tokio::test]
async fn a_binding_suspended_by_someone_else_is_charged_in_full() {
    let h = Harness::new(&[queueing("4", "3", "StrictFIFO")]);
    let mut rb = mk_binding("theirs", "u1", 1, 2, "1", "");
    rb["spec"]["suspension"] = json!({"scheduling": true});
    let r = mutate(&h, create_rb(rb.clone())).await;
    assert!(
        r.get("patch").is_none_or(Value::is_null),
        "left as it is: {r}"
    );
    let v = h.review_binding(create_rb(rb)).await;
    assert_eq!(verdict(&v).2, "QuotaExceeded", "{v}");
}

#[tokio::test]
async fn a_placed_binding_cannot_be_made_waiting_to_free_its_charge() {
    let h = Harness::new(&[queueing("4", "2", "StrictFIFO")]);
    let rb = mk_binding("running", "u1", 1, 2, "1", "");
    let mut paused = rb.clone();
    paused["metadata"]["annotations"] =
        json!({"quota.karmada.io/queued-at": "2026-11-26T03:00:00.000Z"});
    paused["spec"]["suspension"] = json!({"scheduling": true});
    let v = h
        .review_binding(update_rb(rb.clone(), paused.clone()))
        .await;
    let (allowed, code, reason, message) = verdict(&v);
    assert!(!allowed);
    assert_eq!((code, reason.as_str()), (403, "Forbidden"), "{message}");
    // Marked and suspended but placed (clusters chosen): not waiting, charged in full.
    let mut placed = paused;
    placed["spec"]["clusters"] = json!([{"name": "member1", "replicas": 3}]);
    let grown = {
        let mut g = placed.clone();
        g["spec"]["replicas"] = json!(5);
        g
    };
    let v = h.review_binding(update_rb(rb, grown)).await;
    assert_eq!(verdict(&v).2, "QuotaExceeded", "+3 cpu of 2 free: {v}");
}

#[tokio::test]
async fn a_create_is_judged_before_the_apiserver_sets_its_uid() {
    // Mutating admission of a CREATE runs before the apiserver fills metadata.uid.
    let h = Harness::new(&[queueing("4", "3", "StrictFIFO")]);
    let mut rb = mk_binding("big", "u1", 1, 2, "1", "");
    rb["metadata"].as_object_mut().unwrap().remove("uid");
    let r = mutate(&h, create_rb(rb.clone())).await;
    assert!(waits(&patched(rb, &r)), "{r}");
}

#[tokio::test]
async fn a_mark_the_creator_wrote_is_removed_from_a_binding_that_does_not_wait() {
    let h = Harness::new(&[queueing("4", "0", "StrictFIFO")]);
    let mut rb = mk_binding("forged", "u1", 1, 1, "1", "");
    rb["metadata"]["annotations"] =
        json!({"quota.karmada.io/queued-at": "2000-01-01T00:00:00.000Z", "keep": "me"});
    let r = mutate(&h, create_rb(rb.clone())).await;
    let out = patched(rb, &r);
    assert_eq!(out["metadata"]["annotations"], json!({"keep": "me"}));
}

#[tokio::test]
async fn the_detector_updating_a_waiting_binding_changes_its_demand_not_its_charge() {
    // Karmada's detector keeps spec.suspension and merges annotations on its UPDATEs
    // (pkg/util/binding.go MergePolicySuspension, DedupeAndMergeAnnotations): a template
    // scaled while waiting keeps waiting, charged nothing; its release is charged the new size.
    let h = Harness::new(&[queueing("4", "3", "StrictFIFO")]);
    let mut held = mk_binding("w", "u1", 1, 2, "1", "");
    held["metadata"]["annotations"] =
        json!({"quota.karmada.io/queued-at": "2026-11-26T03:00:00.000Z"});
    held["spec"]["suspension"] = json!({"scheduling": true});
    let mut scaled = held.clone();
    scaled["spec"]["replicas"] = json!(6);
    scaled["metadata"]["generation"] = json!(2);
    let v = h.review_binding(update_rb(held, scaled.clone())).await;
    assert!(verdict(&v).0, "{v}");
    assert_eq!(h.entries("q"), 0);
    // Released at 6 cpu: does not fit (1 free).
    let mut released = scaled.clone();
    released["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    released["spec"]
        .as_object_mut()
        .unwrap()
        .remove("suspension");
    let v = h
        .review_binding(as_user(update_rb(scaled, released), CONTROLLER, &[]))
        .await;
    assert_eq!(verdict(&v).2, "QuotaExceeded", "{v}");
}

/// A binding held in a strict line, as the arrival leaves it (priority 1 when it joined).
fn held_in_line(name: &str) -> Value {
    let mut held = mk_binding(name, "u1", 1, 1, "1", "");
    held["metadata"]["annotations"] = json!({
        "quota.karmada.io/queued-at": "2026-11-26T03:00:00.000Z",
        "quota.karmada.io/waiting-for": "q",
        "quota.karmada.io/queued-priority": "1",
    });
    held["spec"]["suspension"] = json!({"scheduling": true});
    held["spec"]["schedulePriority"] = json!({"priority": 1});
    held
}

/// The line belongs to the quota: a tenant who may update bindings cannot release a
/// waiting one (it fits, but others may wait ahead of it), remove the mark, place it by
/// hand or rewrite the line's annotations; the controller and a quota administrator can.
#[tokio::test]
async fn only_the_controller_releases_a_waiting_binding() {
    let h = Harness::new(&[queueing("4", "0", "StrictFIFO")]);
    let held = held_in_line("w");
    let tenant = |review| as_user(review, "alice", &["team-a", "system:authenticated"]);
    let mut unsuspended = held.clone();
    unsuspended["spec"]
        .as_object_mut()
        .unwrap()
        .remove("suspension");
    let mut unmarked = held.clone();
    unmarked["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("annotations");
    let mut placed = held.clone();
    placed["spec"]["clusters"] = json!([{"name": "member1", "replicas": 1}]);
    let mut reprioritised = held.clone();
    reprioritised["metadata"]["annotations"]["quota.karmada.io/queued-priority"] = json!("1000");
    let mut backdated = held.clone();
    backdated["metadata"]["annotations"]["quota.karmada.io/queued-at"] =
        json!("2000-01-01T00:00:00.000Z");
    for (what, new) in [
        ("suspension cleared", &unsuspended),
        ("mark removed", &unmarked),
        ("placed by hand", &placed),
        ("queued-priority raised", &reprioritised),
        ("queued-at backdated", &backdated),
    ] {
        let v = h
            .review_binding(tenant(update_rb(held.clone(), new.clone())))
            .await;
        let (allowed, code, _, message) = verdict(&v);
        assert!(!allowed, "{what}: {v}");
        assert_eq!(code, 403, "{what}: {message}");
        assert!(
            message.contains("only the quota controller releases it")
                && message.contains("alice")
                && message.contains("--queue-releasers"),
            "{what}: {message}"
        );
    }
    assert_eq!(h.entries("q"), 0, "nothing reserved for a refusal");
    // Karmada's controller-manager is no releaser either.
    let v = h
        .review_binding(update_rb(held.clone(), unsuspended.clone()))
        .await;
    assert_eq!(verdict(&v).1, 403, "{v}");
    // The controller releases it: charged in full.
    let v = h
        .review_binding(as_user(
            update_rb(held.clone(), unsuspended.clone()),
            CONTROLLER,
            &[],
        ))
        .await;
    assert!(verdict(&v).0, "{v}");
    assert_eq!(h.entries("q"), 1);
    // So may a quota administrator.
    let v = h
        .review_binding(as_user(
            update_rb(held, unmarked),
            "admin",
            &["system:masters"],
        ))
        .await;
    assert!(verdict(&v).0, "{v}");
}

/// A tenant may change a waiting binding's spec priority (Karmada's detector writes it from
/// the policy), but the line keeps the priority the binding joined with.
#[tokio::test]
async fn a_priority_raised_while_waiting_is_allowed_and_does_not_move_the_binding() {
    let h = Harness::new(&[queueing("4", "0", "StrictFIFO")]);
    let held = held_in_line("w");
    let mut raised = held.clone();
    raised["spec"]["schedulePriority"] = json!({"priority": 1000});
    let v = h
        .review_binding(as_user(update_rb(held, raised.clone()), "alice", &[]))
        .await;
    assert!(verdict(&v).0, "{v}");
    let rb: karmada_quota_crds::ResourceBinding = serde_json::from_value(raised).unwrap();
    assert_eq!(
        karmada_quota_core::queue::line_priority(rb.metadata.annotations.as_ref(), &rb.spec),
        1
    );
}

/// The arrival records the priority a binding joins the line with.
#[tokio::test]
async fn a_binding_joins_the_line_with_its_priority_recorded() {
    let h = Harness::new(&[queueing("4", "3", "StrictFIFO")]);
    let mut rb = mk_binding("big", "u1", 1, 2, "1", "");
    rb["spec"]["schedulePriority"] = json!({"priority": 7});
    let r = mutate(&h, create_rb(rb.clone())).await;
    let held = patched(rb, &r);
    assert!(waits(&held), "{held}");
    assert_eq!(
        held["metadata"]["annotations"]["quota.karmada.io/queued-priority"],
        "7"
    );
}
