//! The uniprocessor flavour's run queue: the same color-as-unit design as the multiprocessor
//! one (a FIFO per color slot, `cpucb` lane ahead of the I/O lane, a queue of runnable slots,
//! a budget per turn), without atomics: it lives on the loop's thread.

use std::collections::VecDeque;

use crate::color::COLOR_SLOTS;
use crate::task::{Lane, Task};

#[derive(Default)]
struct LocalSlot {
    cpu: VecDeque<Task>,
    io: VecDeque<Task>,
    /// On the ready queue, or running.
    scheduled: bool,
    /// Yielded with I/O waiting: the next turn starts with an I/O callback.
    io_first: bool,
}

pub(crate) struct LocalQueue {
    slots: Box<[LocalSlot]>,
    ready: VecDeque<usize>,
    urgent: VecDeque<usize>,
    tasks: usize,
}

impl Default for LocalQueue {
    fn default() -> Self {
        LocalQueue {
            slots: (0..COLOR_SLOTS).map(|_| LocalSlot::default()).collect(),
            ready: VecDeque::new(),
            urgent: VecDeque::new(),
            tasks: 0,
        }
    }
}

impl LocalQueue {
    /// Callbacks queued in every slot.
    pub(crate) fn len(&self) -> usize {
        self.tasks
    }

    /// Callbacks queued in `slot`.
    pub(crate) fn slot_len(&self, slot: usize) -> usize {
        let s = &self.slots[slot];
        s.cpu.len() + s.io.len()
    }

    /// Slots waiting for a turn.
    pub(crate) fn runnable(&self) -> usize {
        self.ready.len() + self.urgent.len()
    }

    pub(crate) fn push(&mut self, task: Task) {
        let slot = task.color.slot();
        let urgent = task.priority > 0;
        let s = &mut self.slots[slot];
        match task.lane {
            Lane::Cpu => s.cpu.push_back(task),
            Lane::Io => s.io.push_back(task),
        }
        self.tasks += 1;
        if !s.scheduled {
            s.scheduled = true;
            if urgent {
                self.urgent.push_back(slot);
            } else {
                self.ready.push_back(slot);
            }
        }
    }

    /// The next slot to give a turn to; it stays scheduled until [`LocalQueue::end_turn`].
    pub(crate) fn next_slot(&mut self) -> Option<usize> {
        self.urgent.pop_front().or_else(|| self.ready.pop_front())
    }

    /// Whether the turn of `slot` should start with its I/O lane (clears the flag).
    pub(crate) fn take_io_first(&mut self, slot: usize) -> bool {
        std::mem::take(&mut self.slots[slot].io_first)
    }

    /// The next callback of `slot`: `cpucb` lane first unless `io_first`.
    pub(crate) fn pop(&mut self, slot: usize, io_first: bool) -> Option<Task> {
        let s = &mut self.slots[slot];
        let task = if io_first {
            s.io.pop_front().or_else(|| s.cpu.pop_front())
        } else {
            s.cpu.pop_front().or_else(|| s.io.pop_front())
        };
        if task.is_some() {
            self.tasks -= 1;
        }
        task
    }

    /// Ends a turn of `slot`: back on the ready queue if it has callbacks left (with its
    /// next turn starting on I/O if `yielded` with I/O waiting), idle otherwise.
    pub(crate) fn end_turn(&mut self, slot: usize, yielded: bool) {
        let s = &mut self.slots[slot];
        if s.cpu.is_empty() && s.io.is_empty() {
            s.scheduled = false;
            s.io_first = false;
        } else {
            s.io_first = yielded && !s.io.is_empty();
            self.ready.push_back(slot);
        }
    }

    /// Empties the queue, returning how many callbacks were dropped.
    pub(crate) fn clear(&mut self) -> usize {
        let n = self.tasks;
        for s in self.slots.iter_mut() {
            *s = LocalSlot::default();
        }
        self.ready.clear();
        self.urgent.clear();
        self.tasks = 0;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::color::Color;

    fn task(color: u32, lane: Lane, priority: i8) -> Task {
        let mut t = Task::call(Color(color), lane, Box::new(|| {}));
        t.priority = priority;
        t
    }

    /// Runs turns of one callback each and returns the colors in run order.
    fn drain(q: &mut LocalQueue) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(slot) = q.next_slot() {
            let io_first = q.take_io_first(slot);
            let t = q.pop(slot, io_first).unwrap();
            out.push(t.color.0);
            q.end_turn(slot, true);
        }
        out
    }

    #[test]
    fn cpu_lane_runs_before_io_lane_within_a_color() {
        let mut q = LocalQueue::default();
        q.push(task(1, Lane::Io, 0));
        q.push(task(1, Lane::Cpu, 0));
        let slot = q.next_slot().unwrap();
        assert_eq!(q.pop(slot, false).unwrap().lane, Lane::Cpu);
        assert_eq!(q.pop(slot, false).unwrap().lane, Lane::Io);
    }

    #[test]
    fn colors_take_turns_in_fifo_order_and_priority_goes_first() {
        let mut q = LocalQueue::default();
        q.push(task(1, Lane::Cpu, 0));
        q.push(task(2, Lane::Cpu, 0));
        q.push(task(1, Lane::Cpu, 0));
        q.push(task(3, Lane::Cpu, 5));
        assert_eq!(drain(&mut q), vec![3, 1, 2, 1]);
        assert_eq!(q.len(), 0);
    }

    #[test]
    fn a_yielded_turn_starts_with_waiting_io() {
        let mut q = LocalQueue::default();
        q.push(task(1, Lane::Cpu, 0));
        q.push(task(1, Lane::Io, 7));
        q.push(task(1, Lane::Cpu, 0));
        let slot = q.next_slot().unwrap();
        assert_eq!(q.pop(slot, q.slots[slot].io_first).unwrap().lane, Lane::Cpu);
        q.end_turn(slot, true);
        let slot = q.next_slot().unwrap();
        let io_first = q.take_io_first(slot);
        assert!(io_first);
        assert_eq!(q.pop(slot, io_first).unwrap().priority, 7);
    }

    #[test]
    fn slots_share_a_fifo_and_clear_counts() {
        let mut q = LocalQueue::default();
        q.push(task(5, Lane::Cpu, 0));
        q.push(task(5 + COLOR_SLOTS as u32, Lane::Cpu, 0));
        assert_eq!(q.runnable(), 1);
        assert_eq!(q.slot_len(5), 2);
        assert_eq!(q.clear(), 2);
        assert_eq!(q.next_slot(), None);
    }
}
