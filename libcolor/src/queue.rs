//! A run queue and the in-worker scheduling policy, shared by both runtime flavours.
//!
//! The queue has two lanes, `cpucb` tasks ahead of I/O tasks (paper 001, figure 5). The
//! scheduler looks at the first few eligible tasks and picks the one with the highest weight
//! `priority + (color == last color run here)` (thesis 000, section 3.3), the leftmost on a
//! tie. Only the first queued task of each color slot is a candidate, so neither priority nor
//! affinity can reorder tasks of one color.
//!
//! Affinity and priority alone could starve a task forever (a color that re-schedules itself
//! keeps winning on affinity), so after `MAX_BYPASS` consecutive picks that passed over the
//! leftmost candidate, the leftmost one runs: every task runs within a bounded number of picks.

use std::collections::VecDeque;

use crate::color::Color;
use crate::task::{Lane, Task, Work};

/// How many eligible tasks the scheduler considers before settling (the paper's "first few").
pub(crate) const DEFAULT_WINDOW: usize = 4;

/// Consecutive picks that may pass over the leftmost eligible task.
const MAX_BYPASS: u32 = 8;

#[derive(Default)]
pub(crate) struct RunQueue {
    cpu: VecDeque<Task>,
    io: VecDeque<Task>,
    /// Picks in a row that did not take the leftmost candidate.
    bypassed: u32,
}

impl RunQueue {
    pub(crate) fn len(&self) -> usize {
        self.cpu.len() + self.io.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.cpu.is_empty() && self.io.is_empty()
    }

    pub(crate) fn push(&mut self, task: Task) {
        match task.lane {
            Lane::Cpu => self.cpu.push_back(task),
            Lane::Io => self.io.push_back(task),
        }
    }

    fn get(&self, index: usize) -> &Task {
        if index < self.cpu.len() {
            &self.cpu[index]
        } else {
            &self.io[index - self.cpu.len()]
        }
    }

    fn remove(&mut self, index: usize) -> Task {
        let cpu_len = self.cpu.len();
        let task = if index < cpu_len {
            self.cpu.remove(index)
        } else {
            self.io.remove(index - cpu_len)
        };
        task.expect("index came from a scan of this queue")
    }

    /// Removes and returns the task to run next, or `None` if no task is eligible.
    ///
    /// `blocked(slot)` says whether a color slot is running elsewhere (only possible with a
    /// shared queue); such tasks are skipped without counting towards the window.
    pub(crate) fn pick(
        &mut self,
        last: Option<Color>,
        window: usize,
        blocked: impl Fn(usize) -> bool,
    ) -> Option<Task> {
        let mut seen_slots = [usize::MAX; 16];
        let window = window.clamp(1, seen_slots.len());
        let window = if self.bypassed >= MAX_BYPASS {
            1
        } else {
            window
        };
        let mut seen = 0usize;
        let mut best: Option<(usize, i16)> = None;
        let mut skipped_slots: Vec<usize> = Vec::new();
        for index in 0..self.len() {
            let task = self.get(index);
            let slot = task.color.slot();
            if seen_slots[..seen].contains(&slot) || skipped_slots.contains(&slot) {
                continue;
            }
            if blocked(slot) {
                // Remember it so later tasks of the slot are not taken out of order.
                skipped_slots.push(slot);
                continue;
            }
            seen_slots[seen] = slot;
            seen += 1;
            // The poller gets no affinity bonus: it re-queues itself after every turn.
            let affinity = Some(task.color) == last && !matches!(task.work, Work::Poll);
            let weight = i16::from(task.priority) + i16::from(affinity);
            if best.is_none_or(|(_, w)| weight > w) {
                best = Some((index, weight));
            }
            if seen == window {
                break;
            }
        }
        let (index, _) = best?;
        // `best` only moves off the first candidate when a later one weighs more.
        let took_leftmost = self.get(index).color.slot() == seen_slots[0];
        self.bypassed = if took_leftmost { 0 } else { self.bypassed + 1 };
        Some(self.remove(index))
    }

    /// Whether `pick` would find something to run.
    pub(crate) fn has_eligible(&self, blocked: impl Fn(usize) -> bool) -> bool {
        self.cpu
            .iter()
            .chain(self.io.iter())
            .any(|task| !blocked(task.color.slot()))
    }

    /// Takes every task of `slot`, both lanes, keeping their order.
    pub(crate) fn take_slot(&mut self, slot: usize) -> Vec<Task> {
        let mut taken = Vec::new();
        for lane in [&mut self.cpu, &mut self.io] {
            let mut kept = VecDeque::with_capacity(lane.len());
            for task in lane.drain(..) {
                if task.color.slot() == slot {
                    taken.push(task);
                } else {
                    kept.push_back(task);
                }
            }
            *lane = kept;
        }
        taken
    }

    /// The slot of the leftmost task whose slot is not `running` (a steal candidate).
    pub(crate) fn stealable_slot(&self, running: Option<usize>) -> Option<usize> {
        self.cpu
            .iter()
            .chain(self.io.iter())
            .map(|task| task.color.slot())
            .find(|&slot| Some(slot) != running)
    }

    /// Empties the queue, returning how many tasks were dropped (their closures are dropped,
    /// so whatever they owned is released).
    pub(crate) fn clear(&mut self) -> usize {
        let n = self.len();
        self.cpu.clear();
        self.io.clear();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::Lane;

    fn task(color: u32, lane: Lane, priority: i8) -> Task {
        let mut t = Task::call(Color(color), lane, Box::new(|| {}));
        t.priority = priority;
        t
    }

    fn colors(q: &mut RunQueue, last: Option<Color>) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(t) = q.pick(last, DEFAULT_WINDOW, |_| false) {
            out.push(t.color.0);
        }
        out
    }

    #[test]
    fn cpu_lane_runs_before_io_lane() {
        let mut q = RunQueue::default();
        q.push(task(1, Lane::Io, 0));
        q.push(task(2, Lane::Cpu, 0));
        assert_eq!(colors(&mut q, None), vec![2, 1]);
    }

    #[test]
    fn last_color_is_preferred_within_window_but_never_out_of_order() {
        let mut q = RunQueue::default();
        q.push(task(1, Lane::Cpu, 0));
        q.push(task(7, Lane::Cpu, 0));
        q.push(task(7, Lane::Cpu, 5));
        // Color 7 wins by affinity; its second task must not overtake the first even though
        // it has a higher priority.
        let first = q.pick(Some(Color(7)), DEFAULT_WINDOW, |_| false).unwrap();
        assert_eq!((first.color.0, first.priority), (7, 0));
    }

    #[test]
    fn priority_beats_position_among_first_of_each_color() {
        let mut q = RunQueue::default();
        q.push(task(1, Lane::Cpu, 0));
        q.push(task(2, Lane::Cpu, 3));
        assert_eq!(colors(&mut q, None), vec![2, 1]);
    }

    #[test]
    fn window_limits_the_scan() {
        let mut q = RunQueue::default();
        for c in 1..=8 {
            q.push(task(c, Lane::Cpu, 0));
        }
        q.push(task(9, Lane::Cpu, 10));
        let first = q.pick(None, 4, |_| false).unwrap();
        assert_eq!(first.color.0, 1);
    }

    #[test]
    fn blocked_slots_are_skipped_and_keep_their_order() {
        let mut q = RunQueue::default();
        q.push(task(3, Lane::Cpu, 0));
        q.push(task(4, Lane::Cpu, 0));
        q.push(task(3, Lane::Cpu, 0));
        let t = q.pick(None, DEFAULT_WINDOW, |slot| slot == 3).unwrap();
        assert_eq!(t.color.0, 4);
        assert!(q.pick(None, DEFAULT_WINDOW, |slot| slot == 3).is_none());
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn a_self_rescheduling_color_cannot_starve_the_leftmost_task() {
        let mut q = RunQueue::default();
        q.push(task(1, Lane::Cpu, 0));
        q.push(task(2, Lane::Cpu, 0));
        let mut ran_one = false;
        for _ in 0..=MAX_BYPASS {
            let t = q.pick(Some(Color(2)), DEFAULT_WINDOW, |_| false).unwrap();
            if t.color.0 == 1 {
                ran_one = true;
                break;
            }
            q.push(task(2, Lane::Cpu, 0)); // color 2 chains itself
        }
        assert!(ran_one, "color 1 starved");
    }

    #[test]
    fn take_slot_keeps_order_and_both_lanes() {
        let mut q = RunQueue::default();
        q.push(task(5, Lane::Io, 1));
        q.push(task(6, Lane::Cpu, 0));
        q.push(task(5 + crate::color::COLOR_SLOTS as u32, Lane::Cpu, 2));
        q.push(task(5, Lane::Io, 3));
        let taken: Vec<i8> = q.take_slot(5).iter().map(|t| t.priority).collect();
        // The cpu lane comes first, as `pick` would run them.
        assert_eq!(taken, vec![2, 1, 3]);
        assert_eq!(q.len(), 1);
    }
}
