//! The batcher with reservation batches: one batch object
//! per decision across namespaces, the create as the compare-and-swap between replicas,
//! the fold and the tombstones, failures that allow nothing.

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::future::join_all;
use karmada_quota_core::decision::Decision;
use karmada_quota_core::usage::BindingCharge;
use karmada_quota_crds::ResourceBinding;
use karmada_quota_crds::reservation_batch::{KarmadaQuotaReservation, parse_batch};
use karmada_quota_status::batch_store::FakeBatchStore;
use tokio::time::Instant;

use super::*;
use crate::ledger::Ledger;
use crate::reserve::BindingRequest;

/// A CREATE of `cpu` in `namespace`, charged by core.
fn request(namespace: &str, name: &str, cpu: &str) -> BindingRequest {
    let rb: ResourceBinding =
        serde_json::from_value(mk_binding(name, &format!("uid-{name}"), 1, 1, cpu, "")).unwrap();
    BindingRequest {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        uid: format!("uid-{namespace}-{name}"),
        generation: 1,
        old: None,
        new: BindingCharge::compute(&rb.spec, Some("count/deployments.apps")),
    }
}

/// `quota` moved to `namespace`.
fn in_ns(mut q: KarmadaQuota, namespace: &str) -> KarmadaQuota {
    q.metadata.namespace = Some(namespace.to_owned());
    q
}

/// A harness whose batcher reserves in batches of `batches` (its own ledger).
fn harness(quotas: &[KarmadaQuota], batches: &Arc<FakeBatchStore>) -> (Harness, Arc<Ledger>) {
    let mut h = Harness::new(quotas);
    let (batcher, ledger) = replica(&h, batches);
    h.state.batcher = batcher;
    (h, ledger)
}

/// Another webhook replica over the same cache and the same batch store (its own view).
fn replica(h: &Harness, batches: &Arc<FakeBatchStore>) -> (Batcher, Arc<Ledger>) {
    replica_with(h, batches, BatcherConfig::default())
}

/// [`replica`] with `config`.
fn replica_with(
    h: &Harness,
    batches: &Arc<FakeBatchStore>,
    config: BatcherConfig,
) -> (Batcher, Arc<Ledger>) {
    let ledger = watching_ledger(batches, h.state.cache.relists());
    let no_cluster_quotas: &[karmada_quota_crds::KarmadaClusterQuota] = &[];
    let batcher = Batcher::with_stores(
        Stores {
            quotas: h.store.clone(),
            cluster_quotas: FakeStore::with(no_cluster_quotas),
            ledger: ledger.clone(),
        },
        h.state.cache.clone(),
        h.state.metrics.clone(),
        config,
        clock,
    );
    (batcher, ledger)
}

async fn submit(b: &Batcher, req: BindingRequest) -> crate::error::Result<Decision> {
    b.submit(req, Instant::now() + Duration::from_secs(2)).await
}

/// Whether `req` is admitted (an error fails the test).
async fn allowed(b: &Batcher, req: BindingRequest) -> bool {
    submit(b, req).await.unwrap().is_allowed()
}

/// Entries in the stored batches, per quota namespace.
fn stored_entries(batches: &FakeBatchStore, namespace: &str) -> usize {
    batches
        .all()
        .iter()
        .map(|b| parse_batch(b).unwrap())
        .flat_map(|b| b.entries)
        .filter(|(k, _)| k.namespace() == Some(namespace))
        .count()
}

/// A quota `compute` of `cpu` in [`NS`], nothing used.
fn compute(cpu: &str) -> KarmadaQuota {
    mk_quota(
        "compute",
        &[("requests.cpu", cpu)],
        &[("requests.cpu", "0")],
    )
}

/// A quota `compute` of 20 cpu in [`NS`], nothing used.
fn twenty_cpu() -> KarmadaQuota {
    compute("20")
}

/// `q` as the controller leaves it once batch 1 (15 cpu) is folded into it.
fn batch_one_folded(q: &KarmadaQuota) -> KarmadaQuota {
    let mut folded = q.clone();
    let st = folded.status.as_mut().unwrap();
    st.used = list(&[("requests.cpu", "15")]);
    st.folded_through = Some(1);
    folded
}

/// The cache sees `q` as the controller wrote it.
fn cache_sees(h: &Harness, q: &KarmadaQuota) {
    let v = serde_json::to_value(q).unwrap();
    h.writer
        .lock()
        .apply_watcher_event(&Event::Apply(CachedQuota::from_value(v).unwrap()));
}

#[tokio::test(start_paused = true)]
async fn two_replicas_sharing_the_batches_admit_exactly_the_limit_and_write_no_status() {
    let batches = Arc::new(FakeBatchStore::new());
    let (h, _) = harness(
        &[mk_quota(
            "compute",
            &[("requests.cpu", "20")],
            &[("requests.cpu", "0")],
        )],
        &batches,
    );
    let (other, _) = replica(&h, &batches);
    let decisions = join_all((0..50).map(|i| {
        let b = if i % 2 == 0 { &h.state.batcher } else { &other };
        async move {
            tokio::time::sleep(Duration::from_millis(i / 3)).await;
            submit(b, request(NS, &format!("rb-{i}"), "1")).await
        }
    }))
    .await;
    let errors: Vec<_> = decisions.iter().filter_map(|d| d.as_ref().err()).collect();
    assert!(errors.is_empty(), "{errors:?}");
    let allowed = decisions
        .iter()
        .flatten()
        .filter(|d| d.is_allowed())
        .count();
    assert_eq!(allowed, 20);
    assert_eq!(stored_entries(&batches, NS), 20, "one entry per admission");
    assert!(
        batches.conflicts.load(Ordering::SeqCst) > 0,
        "the replicas raced for numbers: the test must exercise the compare-and-swap"
    );
    assert_eq!(
        h.store.writes.load(Ordering::SeqCst),
        0,
        "no quota status is written"
    );
}

#[tokio::test(start_paused = true)]
async fn requests_of_sixteen_namespaces_share_batches() {
    let batches = Arc::new(FakeBatchStore::new());
    let quotas: Vec<_> = (0..16)
        .map(|i| {
            in_ns(
                mk_quota("q", &[("requests.cpu", "100")], &[("requests.cpu", "0")]),
                &format!("ns-{i}"),
            )
        })
        .collect();
    let (h, _) = harness(&quotas, &batches);
    let decisions = join_all((0..64).map(|i| {
        let h = &h;
        async move {
            submit(
                &h.state.batcher,
                request(&format!("ns-{}", i % 16), &format!("rb-{i}"), "1"),
            )
            .await
        }
    }))
    .await;
    assert!(
        decisions
            .iter()
            .all(|d| matches!(d, Ok(d) if d.is_allowed()))
    );
    let created = batches.creates.load(Ordering::SeqCst);
    assert!(
        created < 16,
        "{created} batches for 64 admissions of 16 namespaces: not shared"
    );
    for i in 0..16 {
        assert_eq!(stored_entries(&batches, &format!("ns-{i}")), 4);
    }
}

/// `--batch-linger`: requests arriving one at a time 5 ms apart (as Karmada's detector
/// sends its CREATEs) share one batch when the first waits 20 ms, and take one batch each
/// when it does not; a request after the window starts the next batch.
#[tokio::test(start_paused = true)]
async fn a_lingering_batch_gathers_requests_that_arrive_one_at_a_time() {
    async fn batches_for(linger: Duration) -> (usize, Vec<bool>) {
        let batches = Arc::new(FakeBatchStore::new());
        let h = Harness::new(&[twenty_cpu()]);
        let config = BatcherConfig {
            linger,
            ..BatcherConfig::default()
        };
        let (batcher, _) = replica_with(&h, &batches, config);
        let start = Instant::now();
        let admitted = join_all([0, 5, 10, 15, 40].into_iter().map(|ms| {
            let batcher = &batcher;
            async move {
                tokio::time::sleep_until(start + Duration::from_millis(ms)).await;
                allowed(batcher, request(NS, &format!("rb-{ms}"), "1")).await
            }
        }))
        .await;
        (batches.creates.load(Ordering::SeqCst), admitted)
    }
    assert_eq!(
        batches_for(Duration::from_millis(20)).await,
        (2, vec![true; 5]),
        "0-15 ms in one batch, 40 ms in the next"
    );
    assert_eq!(batches_for(Duration::ZERO).await, (5, vec![true; 5]));
}

#[tokio::test]
async fn a_folded_batch_counts_once_and_a_deleted_one_counts_until_its_fold_is_in_view() {
    let batches = Arc::new(FakeBatchStore::new());
    let quota = twenty_cpu();
    let (h, ledger) = harness(std::slice::from_ref(&quota), &batches);
    let b = &h.state.batcher;
    assert!(
        submit(b, request(NS, "a", "15"))
            .await
            .unwrap()
            .is_allowed()
    );
    // Pending in batch 1: 15 of 20.
    assert!(
        !submit(b, request(NS, "b", "10"))
            .await
            .unwrap()
            .is_allowed()
    );
    // A second batch, so that the controller may delete the first.
    assert!(submit(b, request(NS, "c", "1")).await.unwrap().is_allowed());
    // The controller deletes batch 1 before this webhook's quota view shows its fold:
    // the tombstone still counts it.
    let first: KarmadaQuotaReservation = batches.all().remove(0);
    ledger.apply(&Event::Delete(first));
    assert!(!submit(b, request(NS, "d", "5")).await.unwrap().is_allowed());
    // The fold arrives: a's 15 in used, foldedThrough 1; batch 2's 1 still pending.
    let mut folded = batch_one_folded(&quota);
    folded.metadata.resource_version = Some("2".into());
    cache_sees(&h, &folded);
    // 15 + 1 + 4 = 20 fits; counted twice it would not.
    assert!(submit(b, request(NS, "e", "4")).await.unwrap().is_allowed());
    assert!(!submit(b, request(NS, "f", "1")).await.unwrap().is_allowed());
    assert_eq!(
        ledger.with_view(|v| v.len()),
        2,
        "the settled tombstone is gone, batches 2 and 3 held"
    );
}

#[tokio::test]
async fn a_create_that_fails_allows_nothing_and_a_stored_one_is_counted_later() {
    let batches = Arc::new(FakeBatchStore::new());
    let (h, _) = harness(
        &[mk_quota(
            "compute",
            &[("requests.cpu", "10")],
            &[("requests.cpu", "0")],
        )],
        &batches,
    );
    let b = &h.state.batcher;
    batches.fail.store(true, Ordering::SeqCst);
    let err = submit(b, request(NS, "a", "6"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("KarmadaQuotaReservation kq-system/kqr-000000000001"),
        "{err}"
    );
    batches.fail.store(false, Ordering::SeqCst);
    // but the answer is lost: the request fails; its entry is counted from then on.
    batches.fail_after_store.store(true, Ordering::SeqCst);
    assert!(submit(b, request(NS, "b", "6")).await.is_err());
    batches.fail_after_store.store(false, Ordering::SeqCst);
    let d = submit(b, request(NS, "c", "6")).await.unwrap();
    assert!(!d.is_allowed(), "b's stored entry (6 of 10) must count");
    assert!(submit(b, request(NS, "d", "4")).await.unwrap().is_allowed());
    assert_eq!(stored_entries(&batches, NS), 2);
}

#[tokio::test]
async fn a_batch_that_does_not_parse_refuses_every_admission_naming_it() {
    let batches = Arc::new(FakeBatchStore::new());
    let (h, ledger) = harness(
        &[mk_quota(
            "compute",
            &[("requests.cpu", "10")],
            &[("requests.cpu", "0")],
        )],
        &batches,
    );
    let mut bad = KarmadaQuotaReservation::new("kqr-7", Default::default());
    bad.metadata.namespace = Some(BATCH_NS.into());
    ledger.apply(&Event::Apply(bad.clone()));
    let err = submit(&h.state.batcher, request(NS, "a", "1"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("kqr-7") && err.contains("fix or delete it"),
        "{err}"
    );
    ledger.apply(&Event::Delete(bad));
    assert!(
        submit(&h.state.batcher, request(NS, "a", "1"))
            .await
            .unwrap()
            .is_allowed()
    );
}

#[tokio::test]
async fn an_admission_in_a_status_and_in_a_batch_counts_once() {
    let batches = Arc::new(FakeBatchStore::new());
    // A status-mode replica admitted a (4 cpu) before the switch: its entry is in status.
    let mut quota = mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    );
    let a = request(NS, "a", "4");
    let entry = karmada_quota_core::quota::Reservation {
        reserved_by: karmada_quota_core::quota::ReservedBy {
            api_version: "work.karmada.io/v1alpha2".into(),
            kind: "ResourceBinding".into(),
            namespace: String::new(),
            name: a.name.clone(),
            uid: a.uid.clone(),
        },
        generation: 1,
        reserved: ResourceList::parse_map([("requests.cpu", "4")]).unwrap(),
        expiration_time: NOW + 60,
    };
    quota
        .status
        .as_mut()
        .unwrap()
        .reservations
        .push(karmada_quota_crds::convert::reservation_to_api(&entry));
    let (h, _) = harness(&[quota], &batches);
    let b = &h.state.batcher;
    // The apiserver retries a's CREATE against a batch-mode replica: charged again in a
    // batch, but the same (uid, generation) counts once.
    assert!(submit(b, a).await.unwrap().is_allowed());
    assert!(submit(b, request(NS, "b", "6")).await.unwrap().is_allowed());
    assert!(!submit(b, request(NS, "c", "1")).await.unwrap().is_allowed());
}

#[tokio::test]
async fn a_view_behind_or_a_watch_down_refuses_with_a_retryable_503_and_writes_nothing() {
    let batches = Arc::new(FakeBatchStore::new());
    let mut quota = mk_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    );
    // The quota shows a fold of batch 5, which this webhook never saw (another replica's,
    // created, folded and deleted while this view lagged): number 1 may have been used.
    quota.status.as_mut().unwrap().folded_through = Some(5);
    let (h, ledger) = harness(std::slice::from_ref(&quota), &batches);
    let b = &h.state.batcher;
    let err = submit(b, request(NS, "a", "1")).await.unwrap_err();
    assert!(
        matches!(
            err,
            crate::error::Error::BatchesBehind {
                folded_through: 5,
                newest: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!((err.code(), err.metric_label()), (503, "batches_behind"));
    assert_eq!(batches.creates.load(Ordering::SeqCst), 0, "nothing written");
    // Once the view has seen that far, the decision goes on under the next number.
    let seen = karmada_quota_crds::reservation_batch::batch_object(BATCH_NS, 5, vec![]);
    ledger.apply(&Event::Apply(seen));
    assert!(submit(b, request(NS, "b", "1")).await.unwrap().is_allowed());
    assert_eq!(
        batches.all().last().map(|b| b.metadata.name.clone()),
        Some(Some("kqr-000000000006".to_owned()))
    );
    // A batch watch that failed refuses until its re-list is in, as a 503 too.
    ledger.watch_failed();
    let err = submit(b, request(NS, "c", "1")).await.unwrap_err();
    assert_eq!((err.code(), err.metric_label()), (503, "batch_watch_down"));
    ledger.watch_relisted();
    assert!(submit(b, request(NS, "d", "1")).await.unwrap().is_allowed());
}

/// A decision that finds the batch watch down waits for its re-list within its own
/// deadline (less the margin its create needs) instead of refusing at once: a re-list
/// that comes in time lets it be admitted; one that does not leaves it a 503
/// (`batch_watch_down`), after that wait and not before.
#[tokio::test(start_paused = true)]
async fn a_decision_waits_for_the_batch_re_list_within_its_deadline() {
    let batches = Arc::new(FakeBatchStore::new());
    let (h, ledger) = harness(&[twenty_cpu()], &batches);
    let b = h.state.batcher.clone();
    ledger.watch_failed();
    let started = Instant::now();
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { submit(&b, request(NS, "a", "1")).await }
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!waiting.is_finished(), "answered while the watch was down");
    ledger.watch_relisted();
    assert!(waiting.await.unwrap().unwrap().is_allowed());
    assert!(started.elapsed() < Duration::from_secs(1));

    ledger.watch_failed();
    let started = Instant::now();
    let err = submit(&b, request(NS, "b", "1")).await.unwrap_err();
    assert_eq!((err.code(), err.metric_label()), (503, "batch_watch_down"));
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1_400) && waited < Duration::from_secs(2),
        "refused after {waited:?}"
    );
}

/// A hand took the newest batch away: the store holds none at or above the quota's fold,
/// and a webhook that lists it refuses every try (R11) until the controller creates the
/// empty batch of that number (R20); then it admits again, the empty batch counting
/// nothing and every admitted entry counting.
#[tokio::test]
async fn a_store_without_its_newest_batch_refuses_until_the_controller_seeds_it_again() {
    use karmada_quota_crds::reservation_batch::seed_batch;
    use karmada_quota_status::BatchStore;
    let batches = Arc::new(FakeBatchStore::new());
    let mut quota = mk_quota(
        "compute",
        &[("requests.cpu", "3")],
        &[("requests.cpu", "1")],
    );
    quota.status.as_mut().unwrap().folded_through = Some(5);
    let (h, _ledger) = harness(std::slice::from_ref(&quota), &batches);
    let b = &h.state.batcher;
    for name in ["a", "b"] {
        let err = submit(b, request(NS, name, "1")).await.unwrap_err();
        assert!(
            matches!(
                err,
                crate::error::Error::BatchesBehind {
                    folded_through: 5,
                    newest: 0,
                    ..
                }
            ),
            "{err:?}"
        );
        assert_eq!((err.code(), err.metric_label()), (503, "batches_behind"));
    }
    assert_eq!(batches.creates.load(Ordering::SeqCst), 0, "nothing written");
    // The controller's re-seed, shown by the watch.
    batches.create(&seed_batch(BATCH_NS, 5)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(allowed(b, request(NS, "c", "1")).await);
    assert!(allowed(b, request(NS, "d", "1")).await);
    assert!(
        !allowed(b, request(NS, "e", "1")).await,
        "1 used + 2 admitted = 3 of 3 cpu"
    );
    let names: Vec<String> = batches
        .all()
        .iter()
        .filter_map(|b| b.metadata.name.clone())
        .collect();
    assert_eq!(
        names,
        ["kqr-000000000005", "kqr-000000000006", "kqr-000000000007"]
    );
    // A replica that lists the store now numbers above the fold and counts the same.
    let (other, _) = replica(&h, &batches);
    assert!(!allowed(&other, request(NS, "f", "1")).await);
}

/// Another writer's batch `sequence` holding one entry of `cpu` for binding `uid`.
fn others_batch(sequence: u64, uid: &str, cpu: &str) -> KarmadaQuotaReservation {
    use karmada_quota_crds::quota::{Reservation, ReservedBy};
    use karmada_quota_crds::reservation_batch::{BatchEntry, BatchQuota, batch_object};
    let entry = BatchEntry {
        quota: BatchQuota {
            namespace: Some(NS.into()),
            name: "compute".into(),
        },
        reservation: Reservation {
            reserved_by: ReservedBy {
                name: uid.into(),
                uid: uid.into(),
                ..Default::default()
            },
            generation: 1,
            reserved: [("requests.cpu".to_string(), Quantity(cpu.into()))].into(),
            expiration_time: karmada_quota_crds::convert::unix_to_time(clock() + 3600),
        },
    };
    let mut batch = batch_object(BATCH_NS, sequence, vec![entry]);
    batch.spec.writer = Some("another-replica-0".into());
    batch
}

/// The uid [`request`] gives binding `name` of [`NS`].
fn uid(name: &str) -> String {
    format!("uid-{NS}-{name}")
}

/// The bindings whose entries the ledger counts for the quota `compute` of [`NS`].
fn counted(ledger: &Ledger) -> Vec<String> {
    let key = karmada_quota_core::selection::QuotaKey::Namespaced {
        namespace: NS.into(),
        name: "compute".into(),
    };
    ledger.with_view(|v| {
        v.unfolded(&key, None)
            .map(|(_, e)| e.reserved_by.uid.clone())
            .collect()
    })
}

/// A quota of 2 cpu, nothing used, over a batch store of its own.
fn two_cpu() -> (Arc<FakeBatchStore>, Harness, Arc<Ledger>) {
    let batches = Arc::new(FakeBatchStore::new());
    let quota = compute("2");
    let (h, ledger) = harness(std::slice::from_ref(&quota), &batches);
    (batches, h, ledger)
}

/// The attack of e2e `reservation_batches`, with a watch that lags instead of failing:
/// batch 2 is created, folded and deleted by another writer while this webhook's views
/// show nothing of it; the create of 2 succeeds on the freed name. The watch shows the
/// used 2 first, so the webhook withdraws its own and refuses.
#[tokio::test(start_paused = true)]
async fn a_create_on_a_number_used_while_the_watch_lagged_is_withdrawn_and_refused() {
    use karmada_quota_status::BatchStore;
    let (batches, h, ledger) = two_cpu();
    let b = h.state.batcher.clone();
    assert!(
        submit(&b, request(NS, "a", "1"))
            .await
            .unwrap()
            .is_allowed()
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(counted(&ledger), [uid("a")]);
    // The watches lag; another writer's batch 2 (b, 1 cpu) is created and, its fold in
    // the quota (not in this webhook's view), deleted.
    batches.lag.store(true, Ordering::SeqCst);
    batches
        .create(&others_batch(2, &uid("b"), "1"))
        .await
        .unwrap();
    batches.delete("kqr-000000000002", None).await.unwrap();
    let c = tokio::spawn(async move { submit(&b, request(NS, "c", "1")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        batches.creates.load(Ordering::SeqCst),
        3,
        "c's batch was created on the freed number 2"
    );
    // The watch catches up: the used 2 (created, deleted), then c's.
    batches.lag.store(false, Ordering::SeqCst);
    batches.catch_up();
    let err = c.await.unwrap().unwrap_err();
    assert_eq!((err.code(), err.metric_label()), (503, "batch_unconfirmed"));
    let message = err.to_string();
    assert!(
        message.contains("kq-system/kqr-000000000002") && message.contains("used before"),
        "{message}"
    );
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(
        batches
            .all()
            .iter()
            .map(|b| b.metadata.name.clone().unwrap())
            .collect::<Vec<_>>(),
        ["kqr-000000000001", "kqr-000000000002"],
        "c's withdrawn batch stays, for the controller to fold and delete"
    );
    // b counts (a tombstone until the fold is in view), c does not: the quota is full.
    assert_eq!(counted(&ledger), [uid("a"), uid("b")]);
    let d = submit(&h.state.batcher, request(NS, "d", "1"))
        .await
        .unwrap();
    assert!(!d.is_allowed(), "2 of 2 cpu used: {d:?}");
}

/// A number freed by a delete can be taken again by a writer whose view lagged, so the
/// batch that holds a name after a create conflict need not be the first of its number.
/// Here another writer's batch 1 (b, 1 cpu) is created, folded and deleted while this
/// webhook's views show nothing of it, and a lagging writer takes 1 again with an empty
/// batch. This webhook's create of 1 conflicts: it waits until its watch shows number 1
/// — b's batch first — and decides again counting b. Read and counted instead, the empty
/// batch would hide b, and c's 2 cpu would be admitted next to b's 1 (3 of 2).
#[tokio::test(start_paused = true)]
async fn after_a_conflict_the_number_is_counted_from_the_watch_not_from_the_batch_read() {
    use karmada_quota_status::BatchStore;
    let (batches, h, ledger) = two_cpu();
    batches.lag.store(true, Ordering::SeqCst);
    batches
        .create(&others_batch(1, &uid("b"), "1"))
        .await
        .unwrap();
    batches.delete("kqr-000000000001", None).await.unwrap();
    let mut reused = karmada_quota_crds::reservation_batch::batch_object(BATCH_NS, 1, vec![]);
    reused.spec.writer = Some("lagging-replica-0".into());
    batches.create(&reused).await.unwrap();
    let b = h.state.batcher.clone();
    let c = tokio::spawn(async move { submit(&b, request(NS, "c", "2")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        batches.conflicts.load(Ordering::SeqCst),
        1,
        "c's create of number 1 conflicted"
    );
    assert_eq!(
        batches.creates.load(Ordering::SeqCst),
        2,
        "nothing created since"
    );
    batches.lag.store(false, Ordering::SeqCst);
    batches.catch_up();
    let d = c.await.unwrap().unwrap();
    assert!(
        !d.is_allowed(),
        "b's 1 cpu counts: 2 more do not fit in 2: {d:?}"
    );
    assert_eq!(counted(&ledger), [uid("b")], "b counts, as a tombstone");
    assert!(
        submit(&h.state.batcher, request(NS, "e", "1"))
            .await
            .unwrap()
            .is_allowed()
    );
}

/// A batch re-list can hold a later batch of a freed number, never the first one: here
/// batch 1 (b, 1 cpu) is created, folded and deleted while this webhook's batch watch is
/// down, and a lagging writer takes 1 again with an empty batch, which the re-list shows.
/// No number is unseen, so no quota re-list is asked for; the re-list moves the read
/// generation, and the next decision reads the quota from etcd, fold included. Decided
/// on the copy read before (nothing used), c's 2 cpu would be admitted next to b's 1.
#[tokio::test(start_paused = true)]
async fn a_batch_relist_makes_the_next_decision_read_its_quotas_again() {
    use karmada_quota_status::BatchStore;
    let (batches, h, ledger) = two_cpu();
    let b = h.state.batcher.clone();
    // A decision reads the quota from etcd: nothing used, nothing folded.
    assert!(!allowed(&b, request(NS, "big", "3")).await);
    batches.lag.store(true, Ordering::SeqCst);
    ledger.watch_failed();
    batches
        .create(&others_batch(1, &uid("b"), "1"))
        .await
        .unwrap();
    let mut folded = compute("2");
    let st = folded.status.as_mut().unwrap();
    st.used = list(&[("requests.cpu", "1")]);
    st.folded_through = Some(1);
    h.store.put(folded);
    batches.delete("kqr-000000000001", None).await.unwrap();
    let mut reused = karmada_quota_crds::reservation_batch::batch_object(BATCH_NS, 1, vec![]);
    reused.spec.writer = Some("lagging-replica-0".into());
    batches.create(&reused).await.unwrap();
    // The batch watch lists again: it shows the empty batch 1 only.
    ledger.apply(&Event::Init);
    for listed in batches.all() {
        ledger.apply(&Event::InitApply(listed));
    }
    ledger.apply(&Event::InitDone);
    ledger.watch_relisted();
    let c = tokio::spawn(async move { submit(&b, request(NS, "c", "2")).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    batches.lag.store(false, Ordering::SeqCst);
    batches.catch_up();
    let d = c.await.unwrap().unwrap();
    assert!(
        !d.is_allowed(),
        "b's 1 cpu is in used: 2 more do not fit in 2: {d:?}"
    );
    assert!(allowed(&h.state.batcher, request(NS, "e", "1")).await);
}

/// A batch made by hand on the last number (`kqr-999999999999`) leaves no number after
/// it: the decision is refused naming it, and no batch with a name no reader parses (13
/// digits) is created.
#[tokio::test]
async fn a_batch_on_the_last_number_refuses_naming_it_and_creates_nothing() {
    let batches = Arc::new(FakeBatchStore::new());
    batches.put(karmada_quota_crds::reservation_batch::batch_object(
        BATCH_NS,
        999_999_999_999,
        vec![],
    ));
    let (h, _) = harness(&[compute("2")], &batches);
    let err = submit(&h.state.batcher, request(NS, "a", "1"))
        .await
        .unwrap_err();
    let message = err.to_string();
    assert_eq!((err.code(), err.metric_label()), (500, "invalid_batch"));
    assert!(
        message.contains("kq-system/kqr-999999999999") && message.contains("last batch number"),
        "{message}"
    );
    assert_eq!(batches.creates.load(Ordering::SeqCst), 0, "nothing created");
    assert_eq!(batches.all().len(), 1);
}

/// A watch that never shows the batch: nothing is admitted on an unconfirmed create, the
/// batch is withdrawn, and its late events count nothing.
#[tokio::test(start_paused = true)]
async fn a_batch_the_watch_does_not_show_by_the_deadline_is_withdrawn() {
    let (batches, h, ledger) = two_cpu();
    let b = &h.state.batcher;
    batches.lag.store(true, Ordering::SeqCst);
    let err = submit(b, request(NS, "a", "2")).await.unwrap_err();
    assert_eq!((err.code(), err.metric_label()), (503, "batch_unconfirmed"));
    assert!(err.to_string().contains("deadline"), "{err}");
    tokio::time::sleep(Duration::from_millis(10)).await;
    let left: Vec<_> = batches.all();
    assert_eq!(
        left.iter()
            .map(|b| (b.metadata.name.clone().unwrap(), b.spec.entries.len()))
            .collect::<Vec<_>>(),
        [("kqr-000000000001".to_owned(), 1)],
        "withdrawn, and left in the store: the controller folds it and deletes it"
    );
    // A webhook that lists the store now (a restart) numbers above the withdrawn batch.
    let fresh = Ledger::new(batches.clone(), BATCH_NS, h.state.cache.relists().clone());
    fresh.apply(&Event::Init);
    for b in &left {
        fresh.apply(&Event::InitApply(b.clone()));
    }
    fresh.apply(&Event::InitDone);
    assert_eq!(fresh.next_sequence(), 2);
    batches.lag.store(false, Ordering::SeqCst);
    batches.catch_up();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(
        counted(&ledger).is_empty(),
        "its late create counts nothing"
    );
    // The whole quota is free here, under the next number.
    assert!(submit(b, request(NS, "b", "2")).await.unwrap().is_allowed());
    assert_eq!(
        batches.all()[1].metadata.name.as_deref(),
        Some("kqr-000000000002")
    );
}

/// With reservation batches the quota lists come from the apiserver's watch cache, which
/// may be older than the batch list before them. Here batch 1 (15 cpu for `a`) was folded
/// into the quota and deleted before this webhook listed the batches: the batch list
/// shows only batch 2 (empty, the newest number), and the cached quota copy predates the
/// fold. Decided on that copy, 10 more cpu would fit in 20 (25 in truth). The webhook
/// reads the quota from etcd before its first decision against it, once per re-list
/// generation.
#[tokio::test]
async fn a_quota_list_older_than_the_batch_list_cannot_hide_a_fold() {
    use karmada_quota_crds::reservation_batch::batch_object;
    use karmada_quota_status::BatchStore;
    let batches = Arc::new(FakeBatchStore::new());
    let stale = twenty_cpu();
    // Before this webhook starts: batch 1 created, folded, deleted; batch 2 kept.
    batches
        .create(&others_batch(1, &uid("a"), "15"))
        .await
        .unwrap();
    batches
        .create(&batch_object(BATCH_NS, 2, Vec::new()))
        .await
        .unwrap();
    batches
        .delete(&karmada_quota_crds::reservation_batch::batch_name(1), None)
        .await
        .unwrap();
    let (h, ledger) = harness(std::slice::from_ref(&stale), &batches);
    h.store.put(batch_one_folded(&stale));
    assert_eq!(
        ledger.newest(),
        Some(2),
        "the batch list shows batch 2 only"
    );
    let reads = || h.store.gets.load(Ordering::SeqCst);
    let b = &h.state.batcher;

    let over = submit(b, request(NS, "b", "10")).await.unwrap();
    assert!(!over.is_allowed(), "15 folded + 10 > 20: {over:?}");
    assert!(submit(b, request(NS, "c", "5")).await.unwrap().is_allowed());
    assert!(!submit(b, request(NS, "d", "1")).await.unwrap().is_allowed());
    assert_eq!(
        reads(),
        1,
        "read once, then the newer of it and the cache's"
    );
    let read_ok = h
        .state
        .metrics
        .quota_reads
        .get_or_create(&crate::metrics::WriteLabels { result: "ok" })
        .get();
    assert_eq!(read_ok, 1);

    // A batch re-list that found numbers it never held asks for a new generation: the
    // quota is read again before the next decision.
    let g = h.state.cache.relists().request();
    h.state
        .cache
        .relists()
        .listed(crate::cache::freshness::Watch::Quotas, g);
    h.state
        .cache
        .relists()
        .listed(crate::cache::freshness::Watch::ClusterQuotas, g);
    assert!(!submit(b, request(NS, "e", "1")).await.unwrap().is_allowed());
    assert_eq!(reads(), 2, "read again in the new generation");
}

/// A quota the cache holds but etcd no longer does (deleted; the watch has not shown it)
/// is left out of the decision, and read again until the cache drops it.
#[tokio::test]
async fn a_quota_deleted_before_its_first_use_is_left_out() {
    let batches = Arc::new(FakeBatchStore::new());
    let quota = compute("1");
    let (h, _ledger) = harness(std::slice::from_ref(&quota), &batches);
    h.store.delete(NS, "compute");
    let b = &h.state.batcher;
    assert!(submit(b, request(NS, "a", "5")).await.unwrap().is_allowed());
    assert!(submit(b, request(NS, "b", "5")).await.unwrap().is_allowed());
    assert_eq!(h.store.gets.load(Ordering::SeqCst), 2);
    let gone = h
        .state
        .metrics
        .quota_reads
        .get_or_create(&crate::metrics::WriteLabels {
            result: "not_found",
        })
        .get();
    assert_eq!(gone, 2);
}

/// A quota read that fails (etcd unreachable behind the apiserver) fails the decision with
/// the read's own cause: a 500 naming the quota and the API's answer, counted as an API
/// error — not relabelled as a worker that went away.
#[tokio::test]
async fn a_failed_quota_read_refuses_naming_the_quota_and_the_cause() {
    let batches = Arc::new(FakeBatchStore::new());
    let quota = compute("10");
    let (h, _ledger) = harness(std::slice::from_ref(&quota), &batches);
    h.store.fail_get(Some("compute"));
    let b = &h.state.batcher;
    let (one, two) = tokio::join!(
        submit(b, request(NS, "a", "1")),
        submit(b, request(NS, "b", "1"))
    );
    for e in [one.unwrap_err(), two.unwrap_err()] {
        assert_eq!(e.metric_label(), "api_error", "{e}");
        assert_eq!(e.code(), 500);
        let text = e.to_string();
        assert!(
            text.contains(&format!("KarmadaQuota {NS}/compute"))
                && text.contains(karmada_quota_status::fake::INJECTED_FAILURE),
            "{text}"
        );
    }
    assert_eq!(stored_entries(&batches, NS), 0, "nothing reserved");
    h.store.fail_get(None);
    assert!(
        allowed(b, request(NS, "c", "1")).await,
        "the next read succeeds"
    );
}

/// A quota watch that lists again may get an *older* copy than its cache
/// showed (another apiserver's watch cache), after that cache's fold settled a tombstone.
/// Here batch 1 (15 cpu for `a` in NS) is folded into `compute` and deleted; a decision in
/// another namespace settles its tombstone on the cache's fold; then the quota list comes
/// back from before the fold. Deciding on that copy, 10 more cpu would fit in 20. Every
/// list a quota watch begins starts a new read generation, so `compute` is read again.
#[tokio::test]
async fn a_quota_relist_older_than_a_settled_fold_is_read_again() {
    use karmada_quota_status::BatchStore;
    let batches = Arc::new(FakeBatchStore::new());
    let compute = twenty_cpu();
    let other = in_ns(
        mk_quota(
            "other",
            &[("requests.cpu", "100")],
            &[("requests.cpu", "0")],
        ),
        "ns-b",
    );
    let (h, ledger) = harness(&[compute.clone(), other.clone()], &batches);
    let b = &h.state.batcher;
    assert!(allowed(b, request(NS, "a", "15")).await);
    assert!(allowed(b, request("ns-b", "x", "1")).await);
    // The controller folds batch 1 into `compute` and deletes it; the cache shows both.
    h.store.put(batch_one_folded(&compute));
    cache_sees(&h, &h.store.object(NS, "compute"));
    let first = karmada_quota_crds::reservation_batch::batch_name(1);
    batches.delete(&first, None).await.unwrap();
    let tombstone = || ledger.with_view(|v| v.holds(1) && !v.live().any(|s| s == 1));
    tokio::time::timeout(Duration::from_secs(2), async {
        while !tombstone() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the batch watch never showed batch 1 deleted");
    // A decision in ns-b settles the tombstone on the cache's fold.
    assert!(allowed(b, request("ns-b", "y", "1")).await);
    assert!(
        !ledger.with_view(|v| v.holds(1)),
        "batch 1's tombstone settled"
    );
    // The quota watch lists again and gets the copies from before the fold.
    h.state.cache.relists().list_begun();
    {
        let mut w = h.writer.lock();
        w.apply_watcher_event(&Event::Init);
        for q in [&compute, &other] {
            let v = serde_json::to_value(q).unwrap();
            w.apply_watcher_event(&Event::InitApply(CachedQuota::from_value(v).unwrap()));
        }
        w.apply_watcher_event(&Event::InitDone);
    }
    let over = submit(b, request(NS, "b", "10")).await.unwrap();
    assert!(!over.is_allowed(), "15 folded + 10 > 20: {over:?}");
    assert!(allowed(b, request(NS, "c", "5")).await);
}

/// A quota whose status holds no fence covering its `hard` yet may still take entries
/// from a webhook of 0.2.0's status store: it is refused with a 503 naming it (docs/reservations.md R22), nothing is created; once
/// the controller fenced it, the same request is admitted. A fence that does not cover a
/// name `hard` gained refuses too.
#[tokio::test]
async fn a_quota_not_fenced_is_refused_with_a_503_until_it_is() {
    let batches = Arc::new(FakeBatchStore::new());
    let unfenced = mk_unfenced_quota(
        "compute",
        &[("requests.cpu", "10")],
        &[("requests.cpu", "0")],
    );
    let (h, _ledger) = harness(std::slice::from_ref(&unfenced), &batches);
    let b = &h.state.batcher;
    let err = submit(b, request(NS, "a", "1")).await.unwrap_err();
    assert_eq!(
        (err.code(), err.metric_label()),
        (503, "reservation_store_not_fenced")
    );
    assert!(
        err.to_string().contains("KarmadaQuota team-a/compute"),
        "{err}"
    );
    assert_eq!(batches.creates.load(Ordering::SeqCst), 0, "nothing written");
    // The controller's write, read again (as the quota watch's event would bring it).
    h.store.put(fenced(unfenced.clone()));
    h.state.cache.relists().list_begun();
    assert!(submit(b, request(NS, "b", "1")).await.unwrap().is_allowed());
    // hard gains a name the fence does not cover.
    let mut grown = fenced(unfenced);
    grown.spec.hard.insert(
        "pods".into(),
        k8s_openapi::apimachinery::pkg::api::resource::Quantity("10".into()),
    );
    h.store.put(grown);
    h.state.cache.relists().list_begun();
    let err = submit(b, request(NS, "c", "1")).await.unwrap_err();
    assert_eq!(err.metric_label(), "reservation_store_not_fenced");
}
