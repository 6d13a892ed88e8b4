//! The one backoff of both binaries: a wait that starts at `initial`, doubles after each
//! failure up to `max`, and starts over after a success. Pure: no clock, no sleep, no
//! global random source; the caller sleeps (or schedules) the duration it is given.
//!
//! Two ways to use it, for the two shapes of retry in the house:
//! - a loop that keeps its own state: [`Backoff::next_delay`] after a failure,
//!   [`Backoff::reset`] after a success ([`Backoff::current`] peeks, for a log line);
//! - a site that counts failures itself (per quota, per API group): [`Backoff::delay`]
//!   gives the wait after `n` failures in a row.
//!
//! Optional jitter ([`Backoff::with_jitter`]) spreads replicas that fail together: each
//! wait is drawn from its upper half, `[d/2, d]`, by `fastrand`'s generator seeded by the
//! caller (deterministic, so it is testable).

use std::time::Duration;

/// Doubling from `initial` to `max`, reset on success; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    next: Duration,
    /// The jitter generator (seeded, so tests see one sequence); `None` = no jitter.
    jitter: Option<fastrand::Rng>,
}

impl Backoff {
    /// Waits of `initial`, `2·initial`, `4·initial`, … never above `max` (when `max` is
    /// below `initial`, every wait is `max`).
    pub const fn new(initial: Duration, max: Duration) -> Self {
        let first = if initial.as_nanos() < max.as_nanos() {
            initial
        } else {
            max
        };
        Self {
            initial,
            max,
            next: first,
            jitter: None,
        }
    }

    /// The same waits, each drawn from `[d/2, d]` by a generator seeded with `seed`.
    pub fn with_jitter(mut self, seed: u64) -> Self {
        self.jitter = Some(fastrand::Rng::with_seed(seed));
        self
    }

    /// The wait after `failures` failures in a row: 0 failures → no wait; 1 → `initial`;
    /// each further one doubles it, up to `max` (saturating, never overflowing). No
    /// jitter: this is the counting sites' face, and it takes `&self`.
    pub fn delay(&self, failures: u32) -> Duration {
        if failures == 0 {
            return Duration::ZERO;
        }
        let doublings = (failures - 1).min(31);
        self.initial
            .saturating_mul(1_u32 << doublings)
            .min(self.max)
    }

    /// The wait the next failure will be given, without counting it.
    pub fn current(&self) -> Duration {
        self.next
    }

    /// Count a failure: the wait before trying again (jittered when asked), and double
    /// the next one (up to `max`).
    pub fn next_delay(&mut self) -> Duration {
        let d = self.next;
        self.next = self.next.saturating_mul(2).min(self.max);
        match self.jitter.as_mut() {
            Some(state) => jittered(d, state),
            None => d,
        }
    }

    /// A success: the next failure waits `initial` again.
    pub fn reset(&mut self) {
        self.next = self.initial.min(self.max);
    }
}

/// `d` scaled into `[d/2, d]` by the next number of `rng`.
fn jittered(d: Duration, rng: &mut fastrand::Rng) -> Duration {
    let half = d / 2;
    let span = u64::try_from((d - half).as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(rng.u64(0..=span))
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn doubles_up_to_the_max_and_resets_after_a_success() {
        let mut b = Backoff::new(S(1), S(5));
        let waits: Vec<_> = (0..5).map(|_| b.next_delay()).collect();
        assert_eq!(waits, [S(1), S(2), S(4), S(5), S(5)]);
        assert_eq!(b.current(), S(5));
        b.reset();
        assert_eq!(b.current(), S(1));
        assert_eq!(b.next_delay(), S(1));
        assert_eq!(b.next_delay(), S(2));
    }

    #[test]
    fn a_max_below_the_initial_wait_caps_every_wait() {
        let mut b = Backoff::new(S(10), S(3));
        assert_eq!((b.next_delay(), b.next_delay()), (S(3), S(3)));
        b.reset();
        assert_eq!(b.current(), S(3));
        assert_eq!(b.delay(1), S(3));
    }

    #[test]
    fn the_counted_face_gives_the_same_waits_as_the_loop() {
        let mut looped = Backoff::new(Duration::from_millis(500), S(10));
        let counted = looped.clone();
        assert_eq!(counted.delay(0), Duration::ZERO);
        for n in 1..40 {
            assert_eq!(counted.delay(n), looped.next_delay(), "after {n} failures");
        }
    }

    #[test]
    fn a_huge_failure_count_saturates_instead_of_overflowing() {
        let b = Backoff::new(S(1), Duration::MAX);
        assert_eq!(b.delay(u32::MAX), S(1 << 31));
        let mut b = Backoff::new(Duration::MAX / 3, Duration::MAX);
        b.next_delay();
        b.next_delay();
        assert_eq!(b.next_delay(), Duration::MAX);
        assert_eq!(b.next_delay(), Duration::MAX);
    }

    #[test]
    fn jitter_draws_each_wait_from_its_upper_half_and_depends_on_the_seed() {
        let plain: Vec<_> = {
            let mut b = Backoff::new(S(1), S(64));
            (0..8).map(|_| b.next_delay()).collect()
        };
        let draw = |seed| {
            let mut b = Backoff::new(S(1), S(64)).with_jitter(seed);
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        let (a, b) = (draw(1), draw(2));
        for (i, d) in plain.iter().enumerate() {
            for w in [a[i], b[i]] {
                assert!(
                    *d / 2 <= w && w <= *d,
                    "wait {w:?} outside [{:?}, {d:?}]",
                    *d / 2
                );
            }
        }
        assert_ne!(a, b, "two seeds drew the same waits");
        assert_ne!(a, plain, "jitter changed nothing");
        assert_eq!(draw(1), a, "the same seed draws the same waits");
    }
}
