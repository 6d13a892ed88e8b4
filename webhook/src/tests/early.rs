//! The early answer of the ResourceBinding review: an UPDATE whose charge did not change
//! is allowed at once, without queueing behind the reservation batches being created
//! and without writing anything; every other request takes the usual path, and a
//! namespace whose quota cannot be enforced still refuses it, naming the quota.

use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::admission::REASON_CHARGE_UNCHANGED;

fn cpu_quota() -> KarmadaQuota {
    mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "2")],
    )
}

/// `web` as stored, and the same binding with a new label: the charge is the same.
fn relabelled() -> (Value, Value) {
    let old = mk_binding("web", "uid-web", 1, 2, "1", "");
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"team": "a"});
    (old, new)
}

/// Longest an early answer may take here: far below the decision timeout the harness
/// runs with, so a review that queued behind the hanging batch create could not make it.
const PROMPT: Duration = Duration::from_secs(1);

#[tokio::test]
async fn an_unchanged_update_is_answered_while_the_batch_create_hangs() {
    let h = Harness::with_timeout(&[cpu_quota()], Duration::from_secs(10));
    h.batches.hang.store(true, Ordering::SeqCst);
    // A CREATE whose batch create never completes holds the queue's worker.
    let app = h.state.clone();
    let create = tokio::spawn(async move {
        let body = create_rb(mk_binding("new", "uid-new", 1, 1, "1", ""));
        crate::app(app)
            .oneshot(
                Request::post(crate::admission::RESOURCEBINDING_PATH)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string()))
                    .unwrap(),
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !create.is_finished(),
        "the CREATE must be held by its write"
    );

    let (old, new) = relabelled();
    let resp = tokio::time::timeout(PROMPT, h.review_binding(update_rb(old, new)))
        .await
        .expect("an UPDATE whose charge did not change must not wait for the write");
    assert!(verdict(&resp).0, "{resp}");
    assert_eq!(h.allowed_with(REASON_CHARGE_UNCHANGED), 1);
    assert!(!create.is_finished(), "the write is still held");
    assert_eq!(h.store.writes.load(Ordering::SeqCst), 0, "nothing written");
    assert_eq!(h.entries("compute"), 0);
    create.abort();
}

#[tokio::test]
async fn a_changed_update_still_queues_behind_the_write() {
    let h = Harness::with_timeout(&[cpu_quota()], Duration::from_secs(10));
    h.batches.hang.store(true, Ordering::SeqCst);
    let first = {
        let app = h.state.clone();
        tokio::spawn(async move {
            let body = create_rb(mk_binding("new", "uid-new", 1, 1, "1", ""));
            crate::app(app)
                .oneshot(
                    Request::post(crate::admission::RESOURCEBINDING_PATH)
                        .body(Body::from(body.to_string()))
                        .unwrap(),
                )
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Scaled up (2 → 3 replicas): it charges more, so it waits for its batch.
    let old = mk_binding("web", "uid-web", 1, 2, "1", "");
    let new = mk_binding("web", "uid-web", 2, 3, "1", "");
    let waited = tokio::time::timeout(
        Duration::from_millis(300),
        h.review_binding(update_rb(old, new)),
    )
    .await;
    assert!(waited.is_err(), "a scale-up must go through the batcher");
    assert_eq!(h.allowed_with(REASON_CHARGE_UNCHANGED), 0);
    first.abort();
}

#[tokio::test]
async fn an_unchanged_update_and_a_scale_down_are_counted_apart() {
    let h = Harness::new(&[cpu_quota()]);
    let (old, new) = relabelled();
    assert!(verdict(&h.review_binding(update_rb(old, new)).await).0);
    // A scale-down charges nothing more but is not unchanged: the usual path answers it.
    let old = mk_binding("web", "uid-web", 1, 2, "1", "");
    let new = mk_binding("web", "uid-web", 2, 1, "1", "");
    assert!(verdict(&h.review_binding(update_rb(old, new)).await).0);
    assert_eq!(h.allowed_with(REASON_CHARGE_UNCHANGED), 1);
    assert_eq!(h.allowed_with("Allowed"), 1);
    assert_eq!(h.store.writes.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn an_unchanged_update_is_still_refused_under_a_quota_that_cannot_be_enforced() {
    let mut bad = cpu_quota();
    bad.metadata.name = Some("broken".to_owned());
    bad.spec.hard = list(&[("limits.cpu", "4")]);
    let h = Harness::new(&[cpu_quota(), bad]);
    let (old, new) = relabelled();
    let (allowed, code, _, message) = verdict(&h.review_binding(update_rb(old, new)).await);
    assert!(!allowed);
    assert_eq!(code, 500);
    assert!(
        message.starts_with(
            "ResourceBinding team-a/web: KarmadaQuota team-a/broken cannot be enforced: "
        ),
        "{message}"
    );
    assert_eq!(h.allowed_with(REASON_CHARGE_UNCHANGED), 0);
}

#[tokio::test]
async fn an_old_object_that_does_not_decode_is_charged_like_a_create_not_answered_early() {
    let h = Harness::new(&[cpu_quota()]);
    let new = mk_binding("web", "uid-web", 1, 2, "1", "");
    // The same binding, but a stored object that is not a valid ResourceBinding: it is
    // dropped, and the request is charged in full (2 cpu), never waved through.
    let mut broken = new.clone();
    broken["spec"]["replicas"] = json!("two");
    let resp = h.review_binding(update_rb(broken, new)).await;
    assert!(verdict(&resp).0, "{resp}");
    assert_eq!(h.allowed_with(REASON_CHARGE_UNCHANGED), 0);
    assert_eq!(h.entries("compute"), 1);
    assert_eq!(h.effective("compute").to_string(), "requests.cpu=4");
}
