//! The leader's fence (docs/reservations.md R21): a replica that takes the Lease writes
//! no status until its binding index holds a list it began after taking it.
//!
//! ```text
//!  Elector: Lease taken ─► Fence::took_lease: generation g+1 asked ─► leader = true
//!  binding watch (cache_list): sees g+1 ─► drops its stream ─► consistent list (no
//!      resourceVersion: etcd's state now) ─► InitDone tagged g+1 ─► Index::bindings_listed
//!  reconcile / status::update: Fence::allows(index): listed at ≥ g+1? else no write
//! ```
//!
//! Why: the previous leader dropped each entry whose binding *its* index showed, and wrote
//! that binding into `used`. A standby's index may be older than that (its watch down in a
//! backoff, or silent); planned from it, the new leader's first write leaves the binding
//! out of `used` while its entry is gone: its charge counts nowhere and the webhooks admit
//! it again (the batch store's fault run, seed 1795919603669209443: `used` fell from 600m
//! to 500m at the hand-over). A list begun after the Lease was taken is no older than any
//! write of the previous leader, which stopped writing before the Lease could expire.

use tokio::sync::watch;

use crate::index::Index;

/// The generation of the binding list each leadership term needs. Cheap to share (`Arc`).
#[derive(Debug)]
pub struct Fence {
    asked: watch::Sender<u64>,
}

impl Default for Fence {
    fn default() -> Self {
        Self {
            asked: watch::Sender::new(0),
        }
    }
}

impl Fence {
    /// This replica took the Lease (call before it acts as the leader): the binding watch
    /// lists again, consistently, and writes wait for that list. The new generation.
    pub fn took_lease(&self) -> u64 {
        let mut generation = 0;
        self.asked.send_modify(|g| {
            *g += 1;
            generation = *g;
        });
        generation
    }

    /// The generation the binding index must have listed at for this term's writes.
    pub fn required(&self) -> u64 {
        *self.asked.borrow()
    }

    /// For the binding watch: the generations asked for (a change: list again at once).
    pub fn asked(&self) -> watch::Receiver<u64> {
        self.asked.subscribe()
    }

    /// Whether a leader planning from `index` may write: its binding list is this term's.
    pub fn allows(&self, index: &Index) -> bool {
        // The simulation's revert (bench/sim.md): a new leader writes from whatever its
        // index holds.
        cfg!(feature = "sim-revert-leader-fence") || index.bindings_listed_since(self.required())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;

    #[test]
    fn each_term_waits_for_a_binding_list_begun_in_it() {
        let fence = Fence::default();
        let mut index = Index::new(600);
        let mut asked = fence.asked();
        assert!(!fence.allows(&index), "no list yet");
        for ev in [Event::Init, Event::InitDone] {
            index.apply_binding_event(&ev, None, 0);
        }
        index.bindings_listed(0);
        assert!(
            fence.allows(&index),
            "leading alone: the first list will do"
        );

        let g = fence.took_lease();
        assert_eq!(g, 1);
        assert!(asked.has_changed().unwrap(), "the binding watch is told");
        assert_eq!(*asked.borrow_and_update(), 1);
        assert!(
            !fence.allows(&index),
            "a list from before the Lease does not do"
        );
        index.bindings_listed(0);
        assert!(!fence.allows(&index), "nor does a late report of one");
        index.bindings_listed(1);
        assert!(fence.allows(&index));

        fence.took_lease();
        assert!(!fence.allows(&index), "the next term lists again");
    }
}
