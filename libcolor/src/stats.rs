//! Runtime statistics, cheap enough to leave on.
//!
//! Each worker owns one cache-padded block of counters and is its only writer, so updates are
//! plain relaxed load/store pairs (ordinary moves on x86, no locked instructions); anyone may
//! read a snapshot at any time. Callback time is measured with one clock read per callback:
//! the end of one callback is the start of the next.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use crossbeam_utils::CachePadded;

#[derive(Default)]
pub(crate) struct WorkerCounters {
    callbacks: AtomicU64,
    steals: AtomicU64,
    stolen_callbacks: AtomicU64,
    idle_ns: AtomicU64,
    color0_ns: AtomicU64,
    other_ns: AtomicU64,
    poll_ns: AtomicU64,
    polls: AtomicU64,
    shed: AtomicU64,
    /// Written by whoever enqueues onto this worker's queue, so updated with `fetch_max`
    /// (only when a new high is seen, which is rare).
    queue_high_water: AtomicU64,
}

/// Single-writer increment: no read-modify-write instruction needed.
#[inline]
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

impl WorkerCounters {
    #[inline]
    pub(crate) fn ran(&self, color0: bool, nanos: u64) {
        bump(&self.callbacks, 1);
        bump(
            if color0 {
                &self.color0_ns
            } else {
                &self.other_ns
            },
            nanos,
        );
    }

    #[inline]
    pub(crate) fn polled(&self, nanos: u64) {
        bump(&self.polls, 1);
        bump(&self.poll_ns, nanos);
    }

    pub(crate) fn idled(&self, nanos: u64) {
        bump(&self.idle_ns, nanos);
    }

    pub(crate) fn stole(&self, callbacks: usize) {
        bump(&self.steals, 1);
        bump(&self.stolen_callbacks, callbacks as u64);
    }

    /// Called by the thread that scheduled the task, which may not be this worker.
    pub(crate) fn shed_one(&self) {
        self.shed.fetch_add(1, Relaxed);
    }

    #[inline]
    pub(crate) fn saw_depth(&self, depth: usize) {
        let depth = depth as u64;
        if depth > self.queue_high_water.load(Relaxed) {
            self.queue_high_water.fetch_max(depth, Relaxed);
        }
    }

    fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            callbacks: self.callbacks.load(Relaxed),
            steals: self.steals.load(Relaxed),
            stolen_callbacks: self.stolen_callbacks.load(Relaxed),
            idle: Duration::from_nanos(self.idle_ns.load(Relaxed)),
            color0_busy: Duration::from_nanos(self.color0_ns.load(Relaxed)),
            other_busy: Duration::from_nanos(self.other_ns.load(Relaxed)),
            poll_busy: Duration::from_nanos(self.poll_ns.load(Relaxed)),
            polls: self.polls.load(Relaxed),
            shed: self.shed.load(Relaxed),
            queue_high_water: self.queue_high_water.load(Relaxed),
        }
    }
}

pub(crate) struct StatsBoard {
    workers: Box<[CachePadded<WorkerCounters>]>,
}

impl StatsBoard {
    pub(crate) fn new(workers: usize) -> StatsBoard {
        StatsBoard {
            workers: (0..workers).map(|_| CachePadded::default()).collect(),
        }
    }

    #[inline]
    pub(crate) fn worker(&self, index: usize) -> &WorkerCounters {
        &self.workers[index]
    }

    pub(crate) fn snapshot(&self) -> Stats {
        Stats {
            workers: self.workers.iter().map(|w| w.snapshot()).collect(),
        }
    }
}

/// Counters of one worker thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Callbacks run (the poller's turns are counted in `polls`, not here).
    pub callbacks: u64,
    /// Colors stolen by this worker from others.
    pub steals: u64,
    /// Callbacks moved to this worker by those steals.
    pub stolen_callbacks: u64,
    /// Time spent with nothing to run (parked or in a blocking poll).
    pub idle: Duration,
    /// Time spent running color-0 callbacks: the serial part of the program.
    pub color0_busy: Duration,
    /// Time spent running callbacks of every other color.
    pub other_busy: Duration,
    /// Time spent in non-blocking polls and in dispatching their events.
    pub poll_busy: Duration,
    /// Turns of the poller on this worker.
    pub polls: u64,
    /// Callbacks replaced by their drop alternative because the queue was overloaded.
    pub shed: u64,
    /// Deepest this worker's queue has been.
    pub queue_high_water: u64,
}

/// A snapshot of the runtime's statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub workers: Vec<WorkerStats>,
}

impl Stats {
    pub fn callbacks(&self) -> u64 {
        self.workers.iter().map(|w| w.callbacks).sum()
    }

    pub fn steals(&self) -> u64 {
        self.workers.iter().map(|w| w.steals).sum()
    }

    pub fn color0_busy(&self) -> Duration {
        self.workers.iter().map(|w| w.color0_busy).sum()
    }

    pub fn other_busy(&self) -> Duration {
        self.workers.iter().map(|w| w.other_busy).sum()
    }

    pub fn poll_busy(&self) -> Duration {
        self.workers.iter().map(|w| w.poll_busy).sum()
    }

    /// Share of callback time spent in color 0, counting the poller (which runs as color 0)
    /// as serial too. This is the `s` of Amdahl's law for the program.
    pub fn serial_fraction(&self) -> f64 {
        let serial = (self.color0_busy() + self.poll_busy()).as_secs_f64();
        let total = serial + self.other_busy().as_secs_f64();
        if total == 0.0 { 0.0 } else { serial / total }
    }

    /// The speedup Amdahl's law allows on `cpus` CPUs given [`Stats::serial_fraction`].
    pub fn amdahl_bound(&self, cpus: usize) -> f64 {
        amdahl_bound(self.serial_fraction(), cpus)
    }

    /// Counters accumulated since `earlier` (a snapshot of the same runtime).
    pub fn since(&self, earlier: &Stats) -> Stats {
        let workers = self
            .workers
            .iter()
            .zip(
                earlier
                    .workers
                    .iter()
                    .chain(std::iter::repeat(&WorkerStats::default())),
            )
            .map(|(now, then)| WorkerStats {
                callbacks: now.callbacks - then.callbacks,
                steals: now.steals - then.steals,
                stolen_callbacks: now.stolen_callbacks - then.stolen_callbacks,
                idle: now.idle.saturating_sub(then.idle),
                color0_busy: now.color0_busy.saturating_sub(then.color0_busy),
                other_busy: now.other_busy.saturating_sub(then.other_busy),
                poll_busy: now.poll_busy.saturating_sub(then.poll_busy),
                polls: now.polls - then.polls,
                shed: now.shed - then.shed,
                queue_high_water: now.queue_high_water,
            })
            .collect();
        Stats { workers }
    }
}

/// Amdahl's law: the best speedup on `cpus` CPUs of a program whose serial share is `serial`.
pub fn amdahl_bound(serial: f64, cpus: usize) -> f64 {
    let cpus = cpus.max(1) as f64;
    1.0 / (serial + (1.0 - serial) / cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amdahl_matches_the_papers_example() {
        // Paper 001: with 35% serial, four CPUs give at most about 1.95x.
        let bound = amdahl_bound(0.35, 4);
        assert!((bound - 1.951).abs() < 0.01, "{bound}");
        assert_eq!(amdahl_bound(0.0, 4), 4.0);
        assert_eq!(amdahl_bound(1.0, 4), 1.0);
    }

    #[test]
    fn counters_accumulate_and_diff() {
        let board = StatsBoard::new(2);
        board.worker(0).ran(true, 300);
        board.worker(1).ran(false, 700);
        board.worker(1).saw_depth(5);
        board.worker(1).saw_depth(3);
        let a = board.snapshot();
        assert_eq!(a.callbacks(), 2);
        assert!((a.serial_fraction() - 0.3).abs() < 1e-9);
        assert_eq!(a.workers[1].queue_high_water, 5);
        board.worker(1).ran(false, 100);
        let d = board.snapshot().since(&a);
        assert_eq!(d.callbacks(), 1);
        assert_eq!(d.other_busy(), Duration::from_nanos(100));
    }
}
