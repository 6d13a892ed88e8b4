//! Tests of `events::series`.
use super::*;

const SEC: Duration = Duration::from_secs(1);

fn mk_key(name: &str, note: &str) -> SeriesKey {
    SeriesKey {
        regarding: ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: "team-a".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        },
        related: None,
        type_: EventType::Warning,
        action: "Admit",
        reason: "QuotaExceeded",
        note: note.into(),
    }
}

fn wall(s: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + s).unwrap()
}

/// Writes everything due at `now` and reports them written (named `ev-<name>`).
fn write_all(a: &mut Aggregator, now: Instant) -> Vec<Write> {
    let writes = a.take_due(now, usize::MAX);
    for w in &writes {
        let name = format!("ev-{}", w.key().regarding.name);
        a.finish(w, Outcome::Written { name }, now);
    }
    writes
}

#[test]
fn retries_of_one_denial_aggregate_into_one_event_with_a_rising_count() {
    let t0 = Instant::now();
    let mut a = Aggregator::new(10 * SEC);
    let key = mk_key("web", "exceeded quota: q");

    assert_eq!(
        a.observe(key.clone(), t0, wall(0)),
        Observed::New {
            evicted_unwritten: 0
        }
    );
    let first = write_all(&mut a, t0);
    assert_eq!(
        first,
        [Write::Create {
            key: key.clone(),
            count: 1,
            first: wall(0),
            last: wall(0)
        }]
    );

    // Five retries within the interval: counted, nothing written yet.
    for i in 1..=5 {
        let at = t0 + SEC * i;
        assert_eq!(
            a.observe(key.clone(), at, wall(i64::from(i))),
            Observed::Aggregated
        );
        assert!(
            write_all(&mut a, at).is_empty(),
            "wrote before the interval"
        );
    }
    assert_eq!(a.next_due(), Some(t0 + 10 * SEC));

    // At the interval: one patch with the whole count and the last time.
    let second = write_all(&mut a, t0 + 10 * SEC);
    assert_eq!(
        second,
        [Write::Patch {
            key: key.clone(),
            name: "ev-web".into(),
            count: 6,
            last: wall(5)
        }]
    );
    assert_eq!(a.len(), 1);
    // Nothing new: nothing due.
    assert_eq!(a.next_due(), None);
    assert!(write_all(&mut a, t0 + 100 * SEC).is_empty());
}

#[test]
fn a_different_message_or_object_is_a_different_series() {
    let t0 = Instant::now();
    let mut a = Aggregator::new(10 * SEC);
    a.observe(mk_key("web", "used: 1"), t0, wall(0));
    a.observe(mk_key("web", "used: 2"), t0, wall(0));
    a.observe(mk_key("api", "used: 1"), t0, wall(0));
    let writes = write_all(&mut a, t0);
    assert_eq!(writes.len(), 3);
    assert!(
        writes
            .iter()
            .all(|w| matches!(w, Write::Create { count: 1, .. }))
    );
}

#[test]
fn writes_are_at_most_one_per_interval_per_series_however_many_retries() {
    let t0 = Instant::now();
    let mut a = Aggregator::new(10 * SEC);
    let key = mk_key("web", "m");
    let mut writes = 0;
    let mut last_count = 0;
    // A retry every 10 ms for 60 s.
    for ms in (0..60_000u64).step_by(10) {
        let now = t0 + Duration::from_millis(ms);
        a.observe(key.clone(), now, wall(0));
        for w in write_all(&mut a, now) {
            writes += 1;
            assert!(w.count() > last_count, "count did not rise");
            last_count = w.count();
        }
    }
    // Writes at 0, 10, 20, 30, 40, 50 s.
    assert_eq!(writes, 6);
    assert_eq!(last_count, 5001);
}

#[test]
fn budget_limits_writes_per_round_and_the_rest_stays_pending() {
    let t0 = Instant::now();
    let mut a = Aggregator::new(10 * SEC);
    for name in ["a", "b", "c"] {
        a.observe(mk_key(name, "m"), t0, wall(0));
    }
    assert_eq!(a.take_due(t0, 0), []);
    let first = a.take_due(t0, 2);
    assert_eq!(first.len(), 2);
    // In flight: not handed out again.
    let rest = a.take_due(t0, 10);
    assert_eq!(rest.len(), 1);
    assert!(first.iter().all(|w| w.key() != rest[0].key()));
}

#[test]
fn failed_write_is_retried_after_the_interval_with_the_newer_count() {
    let t0 = Instant::now();
    let mut a = Aggregator::new(10 * SEC);
    let key = mk_key("web", "m");
    a.observe(key.clone(), t0, wall(0));
    let w = a.take_due(t0, 1);
    a.finish(&w[0], Outcome::Failed, t0);
    a.observe(key.clone(), t0 + SEC, wall(1));
    assert!(a.take_due(t0 + 5 * SEC, 1).is_empty());
    let retry = a.take_due(t0 + 10 * SEC, 1);
    assert_eq!(
        retry,
        [Write::Create {
            key,
            count: 2,
            first: wall(0),
            last: wall(1)
        }]
    );
}

#[test]
fn a_gone_event_is_created_again_with_the_whole_count() {
    let t0 = Instant::now();
    let mut a = Aggregator::new(SEC);
    let key = mk_key("web", "m");
    a.observe(key.clone(), t0, wall(0));
    write_all(&mut a, t0);
    a.observe(key.clone(), t0, wall(0));
    let patch = a.take_due(t0 + SEC, 1);
    assert!(matches!(patch[0], Write::Patch { count: 2, .. }));
    a.finish(&patch[0], Outcome::Gone, t0 + SEC);
    let again = a.take_due(t0 + 2 * SEC, 1);
    assert!(
        matches!(again[0], Write::Create { count: 2, .. }),
        "{again:?}"
    );
}

#[test]
fn memory_is_bounded_and_the_least_recently_observed_series_goes_first() {
    let t0 = Instant::now();
    let mut a = Aggregator::with_limits(SEC, 3, Duration::from_secs(3600));
    for (i, name) in ["a", "b", "c"].iter().enumerate() {
        a.observe(mk_key(name, "m"), t0 + SEC * i as u32, wall(0));
    }
    write_all(&mut a, t0 + 3 * SEC);
    // "a" observed again: "b" is now the least recent.
    a.observe(mk_key("a", "m"), t0 + 4 * SEC, wall(0));
    // "b" had nothing unwritten.
    assert_eq!(
        a.observe(mk_key("d", "m"), t0 + 5 * SEC, wall(0)),
        Observed::New {
            evicted_unwritten: 0
        }
    );
    assert_eq!(a.len(), 3);
    let names: Vec<String> = a
        .take_due(t0 + 10 * SEC, 10)
        .iter()
        .map(|w| w.key().regarding.name.clone())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    // a (one unwritten occurrence) and d (new) are due; b is gone.
    assert_eq!(sorted, ["a", "d"]);
    // Evicting a series with unwritten occurrences reports them.
    let mut b = Aggregator::with_limits(SEC, 4, Duration::from_secs(3600));
    for name in ["x", "y1", "y2", "y3"] {
        b.observe(mk_key(name, "m"), t0, wall(0));
    }
    write_all(&mut b, t0);
    b.observe(mk_key("x", "m"), t0, wall(0));
    assert_eq!(
        b.observe(mk_key("z", "m"), t0 + SEC, wall(0)),
        Observed::New {
            evicted_unwritten: 1
        }
    );
}

#[test]
fn when_full_and_mostly_unwritten_new_series_are_refused_not_swapped_in() {
    let t0 = Instant::now();
    let mut a = Aggregator::with_limits(SEC, 4, Duration::from_secs(3600));
    for name in ["a", "b", "c", "d"] {
        a.observe(mk_key(name, "m"), t0, wall(0));
    }
    assert_eq!(a.observe(mk_key("e", "m"), t0, wall(0)), Observed::Refused);
    assert_eq!(a.len(), 4);
    // Known series still aggregate.
    assert_eq!(
        a.observe(mk_key("a", "m"), t0, wall(0)),
        Observed::Aggregated
    );
    // Once written, the oldest gives way again.
    write_all(&mut a, t0);
    assert_eq!(
        a.observe(mk_key("e", "m"), t0 + SEC, wall(0)),
        Observed::New {
            evicted_unwritten: 0
        }
    );
}

#[test]
fn a_series_with_a_write_in_flight_is_not_evicted() {
    let t0 = Instant::now();
    let mut a = Aggregator::with_limits(SEC, 2, Duration::from_secs(3600));
    a.observe(mk_key("old", "m"), t0, wall(0));
    a.observe(mk_key("newer", "m"), t0 + SEC, wall(0));
    let in_flight = a.take_due(t0 + SEC, 1);
    assert_eq!(in_flight[0].key().regarding.name, "old");
    // Full: "newer" goes although "old" is older, because old's write is in flight.
    a.observe(mk_key("new", "m"), t0 + 2 * SEC, wall(0));
    a.finish(
        &in_flight[0],
        Outcome::Written { name: "ev".into() },
        t0 + 2 * SEC,
    );
    let mut names: Vec<String> = a
        .take_due(t0 + 10 * SEC, 10)
        .iter()
        .map(|w| w.key().regarding.name.clone())
        .collect();
    names.sort();
    assert_eq!(names, ["new"]);
    assert_eq!(a.len(), 2);
}

#[test]
fn idle_written_series_are_swept_but_pending_ones_stay() {
    let t0 = Instant::now();
    let mut a = Aggregator::with_limits(SEC, 100, 60 * SEC);
    a.observe(mk_key("done", "m"), t0, wall(0));
    write_all(&mut a, t0);
    a.observe(mk_key("pending", "m"), t0, wall(0));
    a.sweep(t0 + 120 * SEC);
    assert_eq!(a.len(), 1);
    assert_eq!(a.next_due(), Some(t0));
}

#[test]
fn token_bucket_allows_a_burst_then_the_rate() {
    let t0 = Instant::now();
    let mut b = TokenBucket::new(2.0, 3, t0);
    assert_eq!(b.available(t0), 3);
    for _ in 0..3 {
        b.spend();
    }
    assert_eq!(b.available(t0), 0);
    assert_eq!(b.next_token_at(t0), t0 + Duration::from_millis(500));
    assert_eq!(b.available(t0 + SEC), 2);
    // Never above the burst.
    assert_eq!(b.available(t0 + 100 * SEC), 3);
}
