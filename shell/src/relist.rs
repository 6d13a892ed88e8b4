//! A watch's re-list, buffered so the state it feeds is replaced at once.
//!
//! ```text
//!  Event::Apply(obj)  ─────────────────────────► Step::Apply(obj)
//!  Event::Delete(obj) ─────────────────────────► Step::Delete(obj)
//!  Event::Init                 ─► new buffer   ─► Step::Buffered
//!  Event::InitApply(obj)       ─► fill(buffer) ─► Step::Buffered
//!  Event::InitDone             ─► take buffer  ─► Step::Relisted(buffer)
//! ```
//!
//! kube's watcher re-lists after a restart (or a 410 Gone) as `Init`, `InitApply`…,
//! `InitDone`. Until `InitDone` the old state keeps answering (a half-listed state would
//! under-count); then the caller swaps in the buffer in one step. Each state keeps one
//! [`Relist`] per watched kind and matches on the [`Step`].

use kube::runtime::watcher::Event;

/// The re-list buffer of one watched kind; `T` is the state the list builds.
#[derive(Debug)]
pub struct Relist<T> {
    buffer: Option<T>,
}

impl<T> Default for Relist<T> {
    fn default() -> Self {
        Self { buffer: None }
    }
}

/// What the caller does with one watch event.
#[derive(Debug, PartialEq, Eq)]
pub enum Step<'e, K, T> {
    /// Apply this object to the live state.
    Apply(&'e K),
    /// Remove this object from the live state.
    Delete(&'e K),
    /// A re-list is in progress; the object (if any) went into the buffer.
    Buffered,
    /// The re-list is complete: replace the live state with this one.
    Relisted(T),
}

impl<T: Default> Relist<T> {
    /// Route `ev`: live changes come back as [`Step::Apply`] / [`Step::Delete`]; `Init`
    /// starts a buffer, `InitApply` hands the object to `fill` with the buffer, and
    /// `InitDone` returns the buffer. A re-list whose `Init` was not seen starts at its
    /// first `InitApply` (or is empty at `InitDone`): a complete list is the whole state.
    pub fn step<'e, K>(
        &mut self,
        ev: &'e Event<K>,
        fill: impl FnOnce(&mut T, &'e K),
    ) -> Step<'e, K, T> {
        match ev {
            Event::Apply(obj) => Step::Apply(obj),
            Event::Delete(obj) => Step::Delete(obj),
            Event::Init => {
                self.buffer = Some(T::default());
                Step::Buffered
            }
            Event::InitApply(obj) => {
                fill(self.buffer.get_or_insert_with(T::default), obj);
                Step::Buffered
            }
            Event::InitDone => Step::Relisted(self.buffer.take().unwrap_or_default()),
        }
    }

    /// Whether a re-list is in progress (the tests' view of the buffer).
    #[cfg(test)]
    fn in_progress(&self) -> bool {
        self.buffer.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    type Names = BTreeSet<&'static str>;

    /// A tiny state fed through a Relist, as the controller's indexes are.
    #[derive(Default)]
    struct State {
        live: Names,
        relist: Relist<Names>,
    }

    impl State {
        fn apply(&mut self, ev: &Event<&'static str>) {
            match self.relist.step(ev, |buf, name| {
                buf.insert(*name);
            }) {
                Step::Apply(n) => {
                    self.live.insert(*n);
                }
                Step::Delete(n) => {
                    self.live.remove(*n);
                }
                Step::Buffered => {}
                Step::Relisted(all) => self.live = all,
            }
        }
    }

    #[test]
    fn live_events_pass_through() {
        let mut r = Relist::<Names>::default();
        assert_eq!(
            r.step(&Event::Apply("a"), |_, _| panic!()),
            Step::Apply(&"a")
        );
        assert_eq!(
            r.step(&Event::Delete("a"), |_, _| panic!()),
            Step::Delete(&"a")
        );
        assert!(!r.in_progress());
    }

    #[test]
    fn the_old_state_answers_until_the_relist_completes_then_is_replaced_at_once() {
        let mut s = State::default();
        s.apply(&Event::Apply("old"));
        s.apply(&Event::Init);
        assert!(s.relist.in_progress());
        s.apply(&Event::InitApply("new1"));
        s.apply(&Event::InitApply("new2"));
        assert_eq!(s.live, Names::from(["old"]));
        s.apply(&Event::InitDone);
        assert_eq!(s.live, Names::from(["new1", "new2"]));
        assert!(!s.relist.in_progress());
    }

    #[test]
    fn an_empty_relist_empties_the_state() {
        let mut s = State::default();
        s.apply(&Event::Apply("gone"));
        s.apply(&Event::Init);
        s.apply(&Event::InitDone);
        assert!(s.live.is_empty());
    }

    #[test]
    fn a_second_init_discards_a_half_filled_buffer() {
        let mut s = State::default();
        s.apply(&Event::Init);
        s.apply(&Event::InitApply("from-the-broken-list"));
        s.apply(&Event::Init);
        s.apply(&Event::InitApply("b"));
        s.apply(&Event::InitDone);
        assert_eq!(s.live, Names::from(["b"]));
    }

    #[test]
    fn a_relist_without_init_starts_at_its_first_object() {
        let mut s = State::default();
        s.apply(&Event::Apply("old"));
        s.apply(&Event::InitApply("a"));
        s.apply(&Event::InitDone);
        assert_eq!(s.live, Names::from(["a"]));
    }
}
