//! The queue between a session's reader task, which receives INVALIDATEs, and the thread
//! that passes them on to the kernel ([`crate::fuse::invalidator()`]). The kernel can be slow to
//! take them (it waits for locks held by requests we are answering) and the server sends as
//! many as it likes, so the queue is bounded ([`MAX_QUEUED_INVALIDATIONS`]): when it is full
//! everything waiting is replaced by one [`Invalidation::Everything`], which drops all that
//! is cached of the server and so stands for any invalidation that was dropped.

use std::collections::VecDeque;
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::Invalidation;
use super::limits::MAX_QUEUED_INVALIDATIONS;

#[derive(Default)]
struct State {
    queued: VecDeque<Invalidation>,
    /// The sender is gone: the receiver ends once the queue is empty.
    closed: bool,
}

#[derive(Default)]
struct Queue {
    state: Mutex<State>,
    ready: Condvar,
}

/// The reader task's end (never blocks); dropping it ends the receiver.
pub(crate) struct Sender(Arc<Queue>);

/// The invalidating thread's end: iterate to wait for each invalidation in turn.
pub(crate) struct Receiver(Arc<Queue>);

/// A bounded queue of invalidations.
pub(crate) fn channel() -> (Sender, Receiver) {
    let q = Arc::new(Queue::default());
    (Sender(q.clone()), Receiver(q))
}

impl Sender {
    /// Queues `what`; when the queue is full, replaces all of it by `Everything`.
    pub(crate) fn send(&self, what: Invalidation) {
        let mut st = self.0.state.lock();
        if st.queued.len() >= MAX_QUEUED_INVALIDATIONS {
            st.queued.clear();
            st.queued.push_back(Invalidation::Everything);
        }
        // Anything after an `Everything` that is still waiting adds nothing.
        if st.queued.back() != Some(&Invalidation::Everything) {
            st.queued.push_back(what);
        }
        drop(st);
        self.0.ready.notify_one();
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.0.state.lock().closed = true;
        self.0.ready.notify_all();
    }
}

impl Iterator for Receiver {
    type Item = Invalidation;

    /// The next invalidation, waiting for one; `None` once the sender is gone and all are
    /// taken.
    fn next(&mut self) -> Option<Invalidation> {
        let mut st = self.0.state.lock();
        loop {
            if let Some(what) = st.queued.pop_front() {
                return Some(what);
            }
            if st.closed {
                return None;
            }
            self.0.ready.wait(&mut st);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::FileHandle;

    fn object(i: u32) -> Invalidation {
        let mut b = [0u8; protocol::HANDLE_LEN];
        b[..4].copy_from_slice(&i.to_le_bytes());
        Invalidation::Object(FileHandle::from_bytes(b), None)
    }

    #[test]
    fn a_flood_becomes_everything_and_memory_stays_bounded() {
        let (tx, rx) = channel();
        for i in 0..10 * MAX_QUEUED_INVALIDATIONS as u32 {
            tx.send(object(i));
            assert!(tx.0.state.lock().queued.len() <= MAX_QUEUED_INVALIDATIONS);
        }
        drop(tx);
        let got: Vec<_> = rx.collect();
        assert!(
            got.contains(&Invalidation::Everything),
            "overflow stood for"
        );
        assert!(got.len() <= MAX_QUEUED_INVALIDATIONS);
    }

    #[test]
    fn in_order_below_the_bound_and_ends_with_the_sender() {
        let (tx, mut rx) = channel();
        let t = std::thread::spawn(move || rx.by_ref().take(3).collect::<Vec<_>>());
        for i in 0..3 {
            tx.send(object(i));
        }
        assert_eq!(t.join().unwrap(), vec![object(0), object(1), object(2)]);
        let (tx, rx) = channel();
        let t = std::thread::spawn(move || rx.count());
        tx.send(object(9));
        drop(tx);
        assert_eq!(t.join().unwrap(), 1);
    }
}
