//! Timers: callbacks scheduled at a deadline, fired by the poller.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Instant;

use parking_lot::Mutex;

use crate::color::Color;
use crate::task::Callback;

/// Identifies a scheduled timer so it can be cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TimerId {
    at: Instant,
    seq: u64,
}

impl TimerId {
    /// When the timer fires (or would have).
    pub fn deadline(&self) -> Instant {
        self.at
    }
}

/// Ordered by deadline, then by the order of scheduling, so timers with equal deadlines fire
/// in the order they were set.
#[derive(Default)]
pub(crate) struct Timers {
    pending: Mutex<BTreeMap<TimerId, (Color, Callback)>>,
    seq: AtomicU64,
}

impl Timers {
    /// Adds a timer; returns its id and whether it is now the earliest (the poller may need
    /// waking to shorten its sleep).
    pub(crate) fn add(&self, at: Instant, color: Color, callback: Callback) -> (TimerId, bool) {
        let id = TimerId {
            at,
            seq: self.seq.fetch_add(1, Relaxed),
        };
        let mut pending = self.pending.lock();
        pending.insert(id, (color, callback));
        let earliest = pending.keys().next() == Some(&id);
        (id, earliest)
    }

    /// Cancels a timer; false if it already fired or was cancelled.
    pub(crate) fn cancel(&self, id: TimerId) -> bool {
        let removed = self.pending.lock().remove(&id);
        removed.is_some()
    }

    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        self.pending.lock().keys().next().map(|id| id.at)
    }

    /// Removes and returns every timer due at `now`, earliest first.
    pub(crate) fn take_due(&self, now: Instant) -> Vec<(Color, Callback)> {
        let mut pending = self.pending.lock();
        let mut due = Vec::new();
        while let Some(entry) = pending.first_entry() {
            if entry.key().at > now {
                break;
            }
            due.push(entry.remove());
        }
        due
    }

    pub(crate) fn clear(&self) -> usize {
        let dropped = std::mem::take(&mut *self.pending.lock());
        dropped.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn due_timers_come_out_in_deadline_then_insertion_order() {
        let timers = Timers::default();
        let now = Instant::now();
        let later = now + Duration::from_secs(60);
        timers.add(now, Color(2), Box::new(|| {}));
        timers.add(later, Color(9), Box::new(|| {}));
        let (_, earliest) = timers.add(now, Color(1), Box::new(|| {}));
        assert!(!earliest);
        let due: Vec<u32> = timers.take_due(now).into_iter().map(|(c, _)| c.0).collect();
        assert_eq!(due, vec![2, 1]);
        assert_eq!(timers.next_deadline(), Some(later));
    }

    #[test]
    fn cancel_removes_once() {
        let timers = Timers::default();
        let (id, earliest) = timers.add(Instant::now(), Color(0), Box::new(|| {}));
        assert!(earliest);
        assert!(timers.cancel(id));
        assert!(!timers.cancel(id));
        assert!(timers.take_due(Instant::now()).is_empty());
    }
}
