//! The read step against a fake apiserver: reads what must be read, records it, keeps an
//! entry whose read failed or found its binding stored.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::*;
use crate::testutil::{mk_binding, mk_entry, mk_quota, mk_reservation};
use karmada_quota_core::ledger::Observation;
use karmada_quota_crds::KarmadaQuotaStatus;
use kube::runtime::watcher::Event;

const NOW: i64 = 1_000;

/// namespace/name → what a read answers; every read is counted.
#[derive(Default)]
struct FakeReads {
    answers: HashMap<String, Result<Option<(String, i64)>, String>>,
    asked: Mutex<Vec<String>>,
}

impl FakeReads {
    fn answer(mut self, key: &str, answer: Result<Option<(&str, i64)>, &str>) -> Self {
        let answer = answer
            .map(|found| found.map(|(u, g)| (u.to_owned(), g)))
            .map_err(str::to_owned);
        self.answers.insert(key.to_owned(), answer);
        self
    }
    fn asked(&self) -> Vec<String> {
        let mut a = self.asked.lock().clone();
        a.sort();
        a
    }
}

impl BindingReads for FakeReads {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<(String, i64)>, String>> {
        let key = format!("{namespace}/{name}");
        self.asked.lock().push(key.clone());
        let answer = self.answers.get(&key).cloned().unwrap_or(Ok(None));
        Box::pin(async move { answer })
    }
}

fn index() -> RwLock<Index> {
    let mut i = Index::new(600);
    i.apply_binding_event(&Event::Init, None, NOW);
    i.apply_binding_event(
        &Event::InitApply(mk_binding("team-a", "shown", "u-shown", 1, 1, "1", &[])),
        None,
        NOW,
    );
    i.apply_binding_event(&Event::InitDone, None, NOW);
    RwLock::new(i)
}

#[tokio::test]
async fn only_expired_entries_the_watch_has_not_shown_are_read_and_a_read_decides_their_fate() {
    let i = index();
    let mut q = mk_quota("team-a", "q", &[("pods", "10")]);
    q.status = Some(KarmadaQuotaStatus {
        reservations: vec![
            mk_reservation("fresh", "u-fresh", 1, &[("pods", "1")], NOW + 30),
            mk_reservation("shown", "u-shown", 1, &[("pods", "1")], NOW - 5),
            mk_reservation("gone", "u-gone", 1, &[("pods", "1")], NOW - 5),
            mk_reservation("lagging", "u-lag", 2, &[("pods", "1")], NOW - 5),
            mk_reservation("flaky", "u-flaky", 1, &[("pods", "1")], NOW - 5),
            mk_reservation("reused", "u-old", 1, &[("pods", "1")], NOW - 5),
        ],
        ..KarmadaQuotaStatus::default()
    });
    let reads = FakeReads::default()
        .answer("team-a/lagging", Ok(Some(("u-lag", 2))))
        .answer("team-a/flaky", Err("etcdserver: request timed out"))
        .answer("team-a/reused", Ok(Some(("u-new", 1))));
    let outcome = read_for(&i, &reads, &q, NOW).await;
    assert_eq!(
        outcome,
        Outcome {
            not_stored: 2,
            stored: 1,
            failed: 1
        }
    );
    // Neither the unexpired entry nor the one the watch shows is read.
    assert_eq!(
        reads.asked(),
        [
            "team-a/flaky",
            "team-a/gone",
            "team-a/lagging",
            "team-a/reused"
        ]
    );
    let i = i.read();
    let seen = |name: &str, uid: &str, g: i64| {
        i.observation_of(
            "team-a",
            &mk_entry(name, uid, g, &[("pods", "1")], NOW - 5),
            NOW,
        )
    };
    assert_eq!(seen("gone", "u-gone", 1), Observation::NotStored);
    assert_eq!(seen("reused", "u-old", 1), Observation::NotStored);
    assert_eq!(
        seen("lagging", "u-lag", 2),
        Observation::NotSeen,
        "stored, the watch lags: kept"
    );
    assert_eq!(
        seen("flaky", "u-flaky", 1),
        Observation::NotSeen,
        "the read failed: kept"
    );
    // Settled reads are not made again; the failed one and (after READ_AGAIN) the
    // stored one are.
    let entries = karmada_quota_crds::convert::parse_status(q.status.as_ref()).reservations;
    let again = |now| {
        wanted(&i, "team-a", &entries, now)
            .into_iter()
            .map(|w| w.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(again(NOW + 1), ["flaky"]);
    assert_eq!(
        again(NOW + crate::index::reads::READ_AGAIN),
        ["lagging", "flaky"]
    );
}

#[tokio::test]
async fn at_most_max_reads_are_made_in_one_turn() {
    let i = index();
    let mut q = mk_quota("team-a", "q", &[("pods", "1000")]);
    q.status = Some(KarmadaQuotaStatus {
        reservations: (0..MAX_READS + 10)
            .map(|n| {
                mk_reservation(
                    &format!("b{n}"),
                    &format!("u{n}"),
                    1,
                    &[("pods", "1")],
                    NOW - 1,
                )
            })
            .collect(),
        ..KarmadaQuotaStatus::default()
    });
    let reads = FakeReads::default();
    read_for(&i, &reads, &q, NOW).await;
    assert_eq!(reads.asked().len(), MAX_READS);
    let reads = FakeReads::default();
    read_for(&i, &reads, &q, NOW).await;
    assert_eq!(reads.asked().len(), 10, "the rest the next turn");
}

#[tokio::test]
async fn an_expired_entry_that_names_no_binding_is_not_read_and_goes() {
    let i = index();
    let mut q = mk_quota("team-a", "q", &[("pods", "10")]);
    q.status = Some(KarmadaQuotaStatus {
        reservations: vec![mk_reservation("", "u-anon", 1, &[("pods", "1")], NOW - 5)],
        ..KarmadaQuotaStatus::default()
    });
    let reads = FakeReads::default();
    assert_eq!(read_for(&i, &reads, &q, NOW).await, Outcome::default());
    assert!(reads.asked().is_empty());
    let entry = mk_entry("", "u-anon", 1, &[("pods", "1")], NOW - 5);
    let i = i.read();
    assert_eq!(
        i.observation_of("team-a", &entry, NOW),
        Observation::NotStored
    );
    let fresh = mk_entry("", "u-anon", 1, &[("pods", "1")], NOW + 5);
    assert_eq!(
        i.observation_of("team-a", &fresh, NOW),
        Observation::NotSeen
    );
}
