//! Simulated time. Every clock the real code reads comes from here: tokio's paused clock
//! (the runtime advances it when every task waits) for waits and deadlines, and Unix
//! seconds derived from it for entry expirations — one per webhook replica, each with its
//! own bounded skew, handed to the batcher as a plain `fn() -> i64`.

use std::cell::Cell;

use tokio::time::Instant;

/// The Unix second a run starts at.
pub const EPOCH: i64 = 1_800_000_000;

/// Most replicas a run can have (one clock function each).
pub const MAX_REPLICAS: usize = 4;

thread_local! {
    static START: Cell<Option<Instant>> = const { Cell::new(None) };
    static SKEW_MS: Cell<[i64; MAX_REPLICAS]> = const { Cell::new([0; MAX_REPLICAS]) };
}

/// Start the clocks of a run (on its runtime's thread), with each replica's skew.
pub fn start(skews_ms: [i64; MAX_REPLICAS]) {
    START.with(|s| s.set(Some(Instant::now())));
    SKEW_MS.with(|s| s.set(skews_ms));
}

/// Milliseconds since the run started.
pub fn now_ms() -> u64 {
    START.with(|s| {
        s.get().map_or(0, |t| {
            u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX)
        })
    })
}

fn unix_at(ms: i64) -> i64 {
    EPOCH + ms.div_euclid(1000)
}

/// The controller's clock (no skew), Unix seconds.
pub fn unix_now() -> i64 {
    unix_at(i64::try_from(now_ms()).unwrap_or(i64::MAX))
}

fn skewed<const R: usize>() -> i64 {
    let skew = SKEW_MS.with(|s| s.get()[R]);
    unix_at(i64::try_from(now_ms()).unwrap_or(i64::MAX) + skew)
}

/// The clock of replica `id` (Unix seconds, skewed).
pub fn replica_clock(id: usize) -> fn() -> i64 {
    match id {
        0 => skewed::<0>,
        1 => skewed::<1>,
        2 => skewed::<2>,
        _ => skewed::<3>,
    }
}
