//! The batcher under concurrency and conflicts, through an in-memory store.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;
use karmada_quota_core::decision::Decision;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::ResourceBinding;
use tokio::time::Instant;

use super::*;
use crate::reserve::BindingRequest;

/// A CREATE of `replicas` × `cpu` with PriorityClass `class`, charged by core.
fn request(name: &str, replicas: i32, cpu: &str, class: &str) -> BindingRequest {
    let rb: ResourceBinding = serde_json::from_value(mk_binding(
        name,
        &format!("uid-{name}"),
        1,
        replicas,
        cpu,
        class,
    ))
    .unwrap();
    BindingRequest {
        namespace: NS.to_owned(),
        name: name.to_owned(),
        uid: format!("uid-{name}"),
        generation: 1,
        old: None,
        new: BindingCharge::compute(&rb.spec, Some("count/deployments.apps")),
    }
}

async fn submit(h: &Harness, req: BindingRequest) -> Decision {
    h.state
        .batcher
        .submit(req, Instant::now() + Duration::from_secs(2))
        .await
        .unwrap()
}

/// Submit a request that must fail within `within`; its error.
async fn submit_err(h: &Harness, req: BindingRequest, within: Duration) -> crate::error::Error {
    h.state
        .batcher
        .submit(req, Instant::now() + within)
        .await
        .unwrap_err()
}

/// The uids of the entries a stored quota holds, in order.
fn entry_uids(h: &Harness, quota: &str) -> Vec<String> {
    h.store
        .quota(quota)
        .status
        .unwrap()
        .reservations
        .into_iter()
        .map(|r| r.reserved_by.uid)
        .collect()
}

fn message(d: &Decision) -> &str {
    match d {
        Decision::Deny(d) => &d.message,
        Decision::Allow(_) => "allowed",
    }
}

#[tokio::test]
async fn a_conflict_rereads_and_rechecks() {
    // 5 of 10 cpu used; meanwhile the controller records 9 used. 2 more must be refused.
    let h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "5")],
    )]);
    h.store.intrude(|q| {
        q.status.as_mut().unwrap().used = list(&[("requests.cpu", "9")]);
    });
    let d = submit(&h, request("web", 2, "1", "")).await;
    assert_eq!(
        message(&d),
        "exceeded quota: compute, requested: requests.cpu=2, used: requests.cpu=9, limited: requests.cpu=10"
    );
    assert_eq!(h.store.conflicts.load(Ordering::SeqCst), 1);
    assert_eq!(h.store.gets.load(Ordering::SeqCst), 1);
    assert_eq!(h.store.entries("compute"), 0);
    assert_eq!(h.state.metrics.conflicts.get(), 1);
    assert_eq!(h.state.metrics.retries.get(), 1);
}

#[tokio::test]
async fn a_conflict_keeps_the_other_writers_changes() {
    // Another webhook replica reserved 3 cpu meanwhile; ours still fits and both stay.
    let h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "5")],
    )]);
    let other = {
        let rb: ResourceBinding =
            serde_json::from_value(mk_binding("other", "uid-other", 1, 3, "1", "")).unwrap();
        let charge = BindingCharge::compute(&rb.spec, None);
        let entry = charge.scoped(&Default::default()).unwrap().total;
        karmada_quota_crds::quota::Reservation {
            reserved_by: karmada_quota_crds::quota::ReservedBy {
                api_version: "work.karmada.io/v1alpha2".into(),
                kind: "ResourceBinding".into(),
                namespace: String::new(),
                name: "other".into(),
                uid: "uid-other".into(),
            },
            generation: 1,
            reserved: list(&[(
                "requests.cpu",
                &entry.get("requests.cpu").unwrap().to_string(),
            )]),
            expiration_time: karmada_quota_crds::convert::unix_to_time(NOW + 60),
        }
    };
    h.store
        .intrude(move |q| q.status.as_mut().unwrap().reservations.push(other));
    let d = submit(&h, request("web", 2, "1", "")).await;
    assert!(d.is_allowed(), "{}", message(&d));
    assert_eq!(h.store.entries("compute"), 2);
    assert_eq!(h.store.effective("compute").to_string(), "requests.cpu=10");
    // and one more does not fit
    let d = submit(&h, request("late", 1, "1", "")).await;
    assert!(
        message(&d).starts_with("exceeded quota: compute"),
        "{}",
        message(&d)
    );
}

/// Kubernetes bug #141904: a request refused by one quota must stay refused when another
/// quota's write conflicts and is retried, even if the refusing quota frees up meanwhile.
#[tokio::test]
async fn denied_by_one_quota_stays_denied_when_another_conflicts() {
    let all = mk_quota("a-all", &[("requests.cpu", "10")], &[("requests.cpu", "0")]);
    let gold = scoped(
        mk_quota("b-gold", &[("requests.cpu", "1")], &[("requests.cpu", "1")]),
        &["gold"],
    );
    let h = Harness::new(&[all.clone(), gold.clone()]);
    // While "a-all" is written, someone else writes it first, and "b-gold" frees up
    // (the controller observed a deletion) and the cache sees it.
    let writer = h.writer.clone();
    let mut freed = gold.clone();
    freed.status.as_mut().unwrap().used = list(&[("requests.cpu", "0")]);
    freed.metadata.resource_version = Some("5000".to_owned());
    h.store.intrude(move |q| {
        q.status.as_mut().unwrap().conditions = vec![];
        writer
            .lock()
            .apply_watcher_event(&Event::Apply(CachedQuota::from_object(freed)));
    });
    let (gold_req, silver_req) = (request("g", 1, "1", "gold"), request("s", 1, "1", "silver"));
    let (g, s) = tokio::join!(submit(&h, gold_req), submit(&h, silver_req));
    assert!(
        message(&g).starts_with("exceeded quota: b-gold"),
        "{}",
        message(&g)
    );
    assert!(s.is_allowed(), "{}", message(&s));
    assert_eq!(h.store.conflicts.load(Ordering::SeqCst), 1);
    let entries = h.store.quota("a-all").status.unwrap().reservations;
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].reserved_by.name, "s");
    assert_eq!(h.store.entries("b-gold"), 0);
}

#[tokio::test]
async fn a_request_is_allowed_only_after_all_its_quotas_are_written() {
    let a = mk_quota("a", &[("requests.cpu", "10")], &[("requests.cpu", "0")]);
    let b = mk_quota("b", &[("pods", "10")], &[("pods", "0")]);
    let h = Harness::new(&[a, b]);
    // "a" conflicts once (another writer); after the re-read both are written.
    h.store.intrude(|_| {});
    let d = submit(&h, request("web", 1, "1", "")).await;
    assert!(d.is_allowed(), "{}", message(&d));
    assert_eq!((h.store.entries("a"), h.store.entries("b")), (1, 1));

    // "b" refuses every write: the request gets an error, and the entry "a" got for it is
    // rolled back (it would pin usage until it expired).
    h.store.fail_quota(Some("b"));
    let err = submit_err(&h, request("next", 1, "1", ""), Duration::from_secs(2)).await;
    assert_eq!(err.metric_label(), "api_error");
    assert!(
        err.to_string().starts_with("KarmadaQuota team-a/b:"),
        "{err}"
    );
    assert_eq!((h.store.entries("a"), h.store.entries("b")), (1, 1));
    assert_eq!(rollbacks(&h, "ok"), 1);
    assert_eq!(rollbacks(&h, "failed"), 0);
}

fn rollbacks(h: &Harness, result: &'static str) -> u64 {
    h.state
        .metrics
        .rollbacks
        .get_or_create(&crate::metrics::WriteLabels { result })
        .get()
}

#[tokio::test]
async fn refused_by_the_second_quota_after_a_conflict_leaves_nothing_in_the_first() {
    // Both fit when the batch is decided; "a" is written; meanwhile the controller records
    // "b" as full, so b's write conflicts and the re-decision refuses. a's entry must go,
    // or it would pin 1 cpu (and cause false denials) until the controller expires it.
    let a = mk_quota("a", &[("requests.cpu", "10")], &[("requests.cpu", "0")]);
    let b = mk_quota("b", &[("pods", "10")], &[("pods", "0")]);
    let h = Harness::new(&[a, b]);
    h.store.intrude_on(NS, "b", |q| {
        q.status.as_mut().unwrap().used = list(&[("pods", "10")]);
    });
    let d = submit(&h, request("web", 1, "1", "")).await;
    assert_eq!(
        message(&d),
        "exceeded quota: b, requested: pods=1, used: pods=10, limited: pods=10"
    );
    assert_eq!((h.store.entries("a"), h.store.entries("b")), (0, 0));
    assert_eq!(h.store.effective("a").to_string(), "requests.cpu=0");
    assert_eq!(rollbacks(&h, "ok"), 1);
    // a was written twice: the entry, then its rollback.
    assert_eq!(h.store.written(NS, "a").len(), 2);
}

#[tokio::test]
async fn a_write_that_times_out_is_rolled_back_everywhere() {
    let a = mk_quota("a", &[("requests.cpu", "10")], &[("requests.cpu", "0")]);
    let b = mk_quota("b", &[("pods", "10")], &[("pods", "0")]);
    let h = Harness::new(&[a, b]);
    // b's write hangs past the request's deadline: it may or may not have landed.
    h.store.hang_quota(Some("b"));
    let err = submit_err(&h, request("web", 1, "1", ""), Duration::from_millis(300)).await;
    assert_eq!(err.metric_label(), "timeout");
    h.store.hang_quota(None);
    // The rollback runs right after the answer, before the batch group's next batch.
    let d = submit(&h, request("next", 1, "1", "")).await;
    assert!(d.is_allowed(), "{}", message(&d));
    let uids = entry_uids(&h, "a");
    assert_eq!(uids, ["uid-next"]);
}

#[tokio::test]
async fn endless_conflicts_end_in_an_error_not_an_allow() {
    let h = Harness::new(&[mk_quota(
        "q",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    )]);
    for _ in 0..50 {
        h.store.intrude(|_| {});
    }
    let err = submit_err(&h, request("web", 1, "1", ""), Duration::from_secs(2)).await;
    assert!(
        matches!(
            err,
            crate::error::Error::TooManyConflicts { attempts: 10, .. }
        ),
        "{err}"
    );
}

async fn fifty_against_twenty(conflict_every: usize) {
    let h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "20")],
        &[("requests.cpu", "0")],
    )]);
    h.store.set_write_latency(Duration::from_millis(5));
    h.store
        .conflict_every
        .store(conflict_every, Ordering::SeqCst);
    let decisions = join_all((0..50).map(|i| {
        let h = &h;
        async move {
            // staggered arrivals: several batches, interleaved with the writes
            tokio::time::sleep(Duration::from_millis(i)).await;
            let req = request(&format!("rb-{i}"), 1, "1", "");
            h.state
                .batcher
                .submit(req, Instant::now() + Duration::from_secs(2))
                .await
        }
    }))
    .await;
    let allowed = decisions
        .iter()
        .filter(|d| matches!(d, Ok(d) if d.is_allowed()))
        .count();
    let errors: Vec<_> = decisions.iter().filter_map(|d| d.as_ref().err()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(allowed, 20);
    for d in decisions.iter().flatten().filter(|d| !d.is_allowed()) {
        assert!(
            message(d).starts_with("exceeded quota: compute"),
            "{}",
            message(d)
        );
    }
    assert_eq!(h.store.effective("compute").to_string(), "requests.cpu=20");
    assert_eq!(h.store.entries("compute"), 20);
    let writes = h.store.writes.load(Ordering::SeqCst);
    assert!(
        writes < 20,
        "{writes} writes for 20 admissions: not batched"
    );
    if conflict_every > 0 {
        assert!(h.store.conflicts.load(Ordering::SeqCst) > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn fifty_concurrent_one_cpu_requests_against_twenty_admit_exactly_twenty() {
    fifty_against_twenty(0).await;
}

#[tokio::test(start_paused = true)]
async fn exactly_twenty_also_when_other_writers_keep_interfering() {
    fifty_against_twenty(3).await;
}

#[tokio::test(start_paused = true)]
async fn batching_writes_fewer_times_than_requests() {
    let h = Harness::new(&[mk_quota(
        "compute",
        &[("requests.cpu", "1000")],
        &[("requests.cpu", "0")],
    )]);
    h.store.set_write_latency(Duration::from_millis(5));
    let decisions =
        join_all((0..100).map(|i| submit(&h, request(&format!("rb-{i}"), 1, "1", "")))).await;
    assert!(decisions.iter().all(Decision::is_allowed));
    let writes = h.store.writes.load(Ordering::SeqCst);
    assert!(writes <= 3, "{writes} writes for 100 requests");
    assert_eq!(h.store.entries("compute"), 100);
}

#[tokio::test]
async fn a_quota_deleted_meanwhile_no_longer_applies() {
    let h = Harness::new(&[mk_quota(
        "gone",
        &[("requests.cpu", "1")],
        &[("requests.cpu", "0")],
    )]);
    h.store.delete(NS, "gone");
    let d = submit(&h, request("web", 1, "1", "")).await;
    assert!(d.is_allowed(), "{}", message(&d));
}

#[tokio::test]
async fn a_write_keeps_expired_entries_only_the_controller_removes_them() {
    use karmada_quota_crds::convert::unix_to_time;
    use karmada_quota_crds::quota::{Reservation, ReservedBy};
    let entry = |uid: &str, expires: i64| Reservation {
        reserved_by: ReservedBy {
            api_version: "work.karmada.io/v1alpha2".into(),
            kind: "ResourceBinding".into(),
            namespace: String::new(),
            name: uid.into(),
            uid: uid.into(),
        },
        generation: 1,
        reserved: list(&[("requests.cpu", "1")]),
        expiration_time: unix_to_time(expires),
    };
    let mut q = mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    );
    // The controller is down: an expired entry still counts (its binding may exist and not
    // be in used yet), so the webhook keeps it.
    q.status.as_mut().unwrap().reservations = vec![entry("lapsed", NOW), entry("live", NOW + 60)];
    let h = Harness::new(&[q]);
    let d = submit(&h, request("web", 1, "1", "")).await;
    assert!(d.is_allowed(), "{d:?}");
    let uids = entry_uids(&h, "compute");
    assert_eq!(uids, ["lapsed", "live", "uid-web"]);
    assert_eq!(h.store.effective("compute").to_string(), "requests.cpu=3");
}

/// A replica of the status store meets a quota fenced for the batch store (docs/reservations.md
/// R22) — fenced before its decision, or by the controller between its read and its write
/// (the write conflicts, the fresh copy holds the fence): it writes nothing and answers
/// 503 naming the quota and the mode, where 0.2.0's code, which counts the fence, denies
/// for quota.
#[tokio::test]
async fn a_status_store_replica_refuses_a_quota_fenced_for_batches_with_a_503_naming_the_mode() {
    let fence = |q: &mut KarmadaQuota| {
        let status = q.status.as_mut().unwrap();
        karmada_quota_crds::convert::ensure_fence(&mut status.reservations, &q.spec.hard).unwrap();
    };
    let quota = || {
        mk_quota(
            "compute",
            &[("requests.cpu", "10")],
            &[("requests.cpu", "5")],
        )
    };
    // Fenced between the read and the write.
    let h = Harness::new(&[quota()]);
    h.store.intrude(fence);
    let err = submit_err(&h, request("web", 1, "1", ""), Duration::from_secs(2)).await;
    assert_eq!(
        (err.code(), err.metric_label()),
        (503, "reservation_store_fenced")
    );
    let text = err.to_string();
    assert!(
        text.contains("KarmadaQuota team-a/compute")
            && text.contains("--reservation-store=batches"),
        "{text}"
    );
    assert_eq!(h.store.conflicts.load(Ordering::SeqCst), 1);
    assert_eq!(entry_uids(&h, "compute"), ["reservation-store-fence"]);
    // Fenced before the decision.
    let mut fenced = quota();
    fence(&mut fenced);
    let h = Harness::new(&[fenced]);
    let err = submit_err(&h, request("web", 1, "1", ""), Duration::from_secs(2)).await;
    assert_eq!(err.metric_label(), "reservation_store_fenced");
    assert_eq!(
        h.store.conflicts.load(Ordering::SeqCst),
        0,
        "nothing written"
    );
}
