//! What every part of a run shares: its configuration, its random source, its trace, the
//! apiserver, the ground truth, and the switch that ends the faults.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::apiserver::{Apiserver, lock};
use crate::clock;
use crate::config::{Config, Faults};
use crate::rng::Rng;
use crate::trace::Trace;
use crate::truth::Truth;

/// The shared state of a run.
pub struct World {
    /// The run.
    pub config: Config,
    /// The fault kinds of this run.
    pub faults: Faults,
    rng: Mutex<Rng>,
    trace: Mutex<Trace>,
    /// The simulated apiserver.
    pub api: Apiserver,
    /// What was admitted and released, and the invariant over it.
    pub truth: Mutex<Truth>,
    /// Faults are injected (off for the liveness phase at the end).
    faulting: AtomicBool,
}

impl World {
    /// A world for `config` over `api`, its faults chosen.
    pub fn new(config: Config, faults: Faults, rng: Rng, api: Apiserver, truth: Truth) -> Self {
        Self {
            config,
            faults,
            rng: Mutex::new(rng),
            trace: Mutex::default(),
            api,
            truth: Mutex::new(truth),
            faulting: AtomicBool::new(true),
        }
    }

    /// Draw from the run's random source.
    pub fn rng<T>(&self, f: impl FnOnce(&mut Rng) -> T) -> T {
        f(&mut lock(&self.rng))
    }

    /// A fault of a kind that is `on` this run, with `per_mille` chance, while faults are
    /// injected.
    pub fn fault(&self, on: bool, per_mille: u32) -> bool {
        on && self.faulting() && self.rng(|r| r.chance(per_mille))
    }

    /// Whether faults are still injected.
    pub fn faulting(&self) -> bool {
        self.faulting.load(Ordering::SeqCst)
    }

    /// Stop injecting faults.
    pub fn stop_faults(&self) {
        self.faulting.store(false, Ordering::SeqCst);
        self.trace("faults stop".into());
    }

    /// Record a line of the trace.
    pub fn trace(&self, line: String) {
        lock(&self.trace).push(clock::now_ms(), line);
    }

    /// Run `f` over the trace.
    pub fn with_trace<T>(&self, f: impl FnOnce(&Trace) -> T) -> T {
        f(&lock(&self.trace))
    }
}
