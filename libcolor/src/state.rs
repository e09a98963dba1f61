//! The state machine of one color slot: the heart of the exclusion guarantee.
//!
//! A slot is *idle* (nothing queued, on no run queue), *queued* (on exactly one run queue),
//! *running* (owned by exactly one worker, on no run queue) or *running + notified* (a post
//! arrived while it ran). Two bits encode the four states:
//!
//! | state            | bits          |
//! |------------------|---------------|
//! | idle             | `0`           |
//! | queued           | `NOTIFIED`    |
//! | running          | `RUNNING`     |
//! | running+notified | `RUNNING\|NOTIFIED` |
//!
//! * A poster pushes its callback on the slot's FIFO, then `notify`s: one `fetch_or`. Only the
//!   poster that finds the slot idle puts it on a run queue, so a slot is on at most one run
//!   queue, and posting to a busy color costs that one atomic, no lock and no wake.
//! * The worker that takes the slot off a run queue `start`s it; it is then the only thread
//!   that may pop the slot's FIFO. A thief can only take what is on a run queue, so it can
//!   never take a running color: exclusion holds by construction, not by a check.
//! * A runner that finds the FIFO empty tries to go idle; if a post slipped in (`NOTIFIED`
//!   set) the CAS fails and it looks at the FIFO again, so no callback is stranded.
//! * A runner out of budget `yield`s: the slot becomes queued and the runner puts it back on a
//!   run queue itself.
//!
//! Every transition is a read-modify-write on one atomic with acquire-release ordering, so
//! each runner synchronises with every poster whose callback it pops and with the previous
//! runner (whose writes to color-owned state it therefore sees: what makes
//! [`crate::ColorCell`] sound). The `loom` model in `loom_model` checks this protocol.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU8, Ordering::AcqRel, Ordering::Acquire};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU8, Ordering::AcqRel, Ordering::Acquire};

const NOTIFIED: u8 = 1;
const RUNNING: u8 = 2;

pub(crate) struct SlotState(AtomicU8);

impl SlotState {
    pub(crate) fn new() -> SlotState {
        SlotState(AtomicU8::new(0))
    }

    /// Called after pushing a callback on the slot's FIFO. Returns true if the caller must put
    /// the slot on a run queue (it was idle).
    #[inline]
    pub(crate) fn notify(&self) -> bool {
        self.0.fetch_or(NOTIFIED, AcqRel) == 0
    }

    /// Called by the worker that took the slot off a run queue: it now owns the slot.
    ///
    /// # Panics
    /// If the slot was not queued (a run-queue entry was duplicated): running it would break
    /// exclusion, so the runtime stops instead.
    #[inline]
    pub(crate) fn start(&self) {
        let previous = self.0.swap(RUNNING, AcqRel);
        assert_eq!(
            previous, NOTIFIED,
            "libcolor: a color slot was taken off a run queue while not queued"
        );
    }

    /// Called by the owner after finding the FIFO empty. True: the slot is idle and the owner
    /// must not touch it again. False: a post arrived meanwhile; the owner still owns the slot
    /// and must look at the FIFO again.
    #[inline]
    pub(crate) fn try_idle(&self) -> bool {
        match self.0.compare_exchange(RUNNING, 0, AcqRel, Acquire) {
            Ok(_) => true,
            Err(_) => {
                // RUNNING|NOTIFIED: clear the notification, keep running.
                self.0.swap(RUNNING, AcqRel);
                false
            }
        }
    }

    /// Called by the owner that stops running a slot whose FIFO is not empty: the slot is
    /// queued again and the caller must put it back on a run queue.
    #[inline]
    pub(crate) fn yield_now(&self) {
        self.0.swap(NOTIFIED, AcqRel);
    }

    /// Whether a worker owns the slot (for diagnostics and tests).
    #[cfg(all(test, not(loom)))]
    pub(crate) fn is_running(&self) -> bool {
        self.0.load(Acquire) & RUNNING != 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn only_the_first_post_to_an_idle_slot_queues_it() {
        let s = SlotState::new();
        assert!(s.notify());
        assert!(!s.notify());
        s.start();
        assert!(s.is_running());
        assert!(
            !s.notify(),
            "a post to a running slot must not queue it again"
        );
        assert!(!s.try_idle(), "a notified slot must be looked at again");
        assert!(s.try_idle());
        assert!(s.notify(), "an idle slot is queued by the next post");
        s.start();
        s.yield_now();
        assert!(!s.notify(), "a yielded slot is already queued");
        s.start();
        assert!(s.try_idle());
        assert!(!s.is_running());
    }

    #[test]
    #[should_panic(expected = "while not queued")]
    fn starting_a_running_slot_panics() {
        let s = SlotState::new();
        assert!(s.notify());
        s.start();
        s.start();
    }
}
