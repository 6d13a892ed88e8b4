//! AdmissionReviews that real Karmada sent to the ResourceBinding webhook
//! (bench/review-recorder.py, one JSON line per review with the webhook's answer), replayed
//! through the chart's matchConditions: how many a kube-apiserver 1.28+ would no longer
//! send, by operation and sender, and that each of those is one the webhook did allow when
//! it was sent and allows without charging anything more: answered early (charge
//! unchanged), or allowed by a quota with no room left (a placement that cannot raise it).
//!
//! The recording replayed is `KQ_CAPTURED_REVIEWS` when set (a file bench/karmada.sh wrote
//! with `BENCH_RECORD_REVIEWS`), else the sample beside this file: Karmada v1.18.2's
//! reviews of 10 of a `make bench-karmada` round's Deployments, created, scheduled and
//! deleted (managedFields dropped; bench/RESULTS.md, "Which reviews matchConditions hold
//! back").

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use super::super::*;
use super::MatchConditions;
use crate::admission::REASON_CHARGE_UNCHANGED;

/// The recording to replay.
fn recording() -> PathBuf {
    std::env::var_os("KQ_CAPTURED_REVIEWS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("src/tests/apiserver_cel/karmada-v1.18.2-reviews.jsonl")
        })
}

/// The recorded ResourceBinding reviews: (review, whether the webhook allowed it).
fn binding_reviews() -> Vec<(Value, bool)> {
    let path = recording();
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<Value>(l).expect("one JSON object per line"))
        // The apiserver's path carries `?timeout=…`.
        .filter(|r| {
            let path = r["path"].as_str().unwrap_or_default();
            path.split('?').next() == Some(crate::admission::RESOURCEBINDING_PATH)
        })
        .map(|r| {
            let allowed = r["response"]["response"]["allowed"] == Value::Bool(true);
            (r["review"].clone(), allowed)
        })
        .collect()
}

/// `review` moved into the harness's namespace as a dry run, so that the harness's quota
/// covers it and nothing is written.
fn into_harness(mut review: Value) -> Value {
    let request = &mut review["request"];
    request["namespace"] = NS.into();
    request["dryRun"] = true.into();
    for o in ["object", "oldObject"] {
        if request[o].is_object() {
            request[o]["metadata"]["namespace"] = NS.into();
        }
    }
    review
}

/// Hard limits generous enough for the recording.
const HARD: &[(&str, &str)] = &[
    ("requests.cpu", "1000"),
    ("pods", "2000"),
    ("count/deployments.apps", "1000"),
];

/// A quota of [`HARD`] with `used`.
fn quota_using(used: &[(&str, &str)]) -> KarmadaQuota {
    mk_quota("roomy", HARD, used)
}

#[tokio::test]
async fn captured_reviews_held_back_charge_nothing_more() {
    let reviews = binding_reviews();
    assert!(
        !reviews.is_empty(),
        "{}: no ResourceBinding review",
        recording().display()
    );
    let h = Harness::new(&[quota_using(&[])]);
    // Every name used up: a review the webhook allows here charges nothing more.
    let full = Harness::new(&[quota_using(HARD)]);
    let conditions = MatchConditions::binding();
    // (operation, user) → [sent, held back].
    let mut tally: BTreeMap<(String, String), [usize; 2]> = BTreeMap::new();
    for (review, allowed) in reviews.iter().cloned() {
        let request = &review["request"];
        let key = (
            request["operation"].as_str().unwrap_or_default().to_owned(),
            request["userInfo"]["username"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        let sent = conditions
            .sent(&review)
            .unwrap_or_else(|e| panic!("{key:?}: {e}"));
        tally.entry(key.clone()).or_default()[usize::from(!sent)] += 1;
        if !sent {
            assert!(
                allowed,
                "{key:?}: held back, yet the webhook refused it when sent"
            );
            let before = h.allowed_with(REASON_CHARGE_UNCHANGED);
            let (ok, ..) = verdict(&h.review_binding(into_harness(review.clone())).await);
            let early = h.allowed_with(REASON_CHARGE_UNCHANGED) > before;
            let (ok_full, ..) = verdict(&full.review_binding(into_harness(review)).await);
            assert!(
                ok && (early || ok_full),
                "{key:?}: held back, yet the webhook refuses it or it charges more"
            );
        }
    }
    let held: usize = tally.values().map(|t| t[1]).sum();
    println!(
        "{}: {} ResourceBinding reviews",
        recording().display(),
        reviews.len()
    );
    println!("| operation | user | sent | held back |\n|---|---|---:|---:|");
    for ((op, user), [sent, skipped]) in &tally {
        println!("| {op} | {user} | {sent} | {skipped} |");
    }
    println!(
        "held back: {held} of {} ({:.1} %)",
        reviews.len(),
        100.0 * held as f64 / reviews.len() as f64
    );
    // CREATEs are always sent; real Karmada's finalizer and label updates are not.
    assert!(
        held > 0 && held < reviews.len(),
        "held back {held} of {}",
        reviews.len()
    );
}
