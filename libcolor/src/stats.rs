//! Runtime statistics, cheap enough to leave on, and honest about what they measure.
//!
//! Every counter has exactly one writer, the worker that owns its cache-padded block, so
//! updates are relaxed load/store pairs (plain moves on x86): work posted from other threads
//! is counted by the worker that runs it (shed callbacks, queue depth high water), never by
//! the poster. Anyone may read a snapshot at any time.
//!
//! Callback time is wall-clock, one clock read per few callbacks of a turn (a turn runs one
//! slot, so the time between two reads belongs to that slot; the end of one read interval is
//! the start of the next), kept per color slot in a worker-private scratch array. At the worker's
//! park and poll boundaries (and every few milliseconds of uninterrupted running) the scratch
//! is flushed into the shared per-slot counters scaled by the thread's CPU time over its wall
//! time for that interval (`CLOCK_THREAD_CPUTIME_ID`), so time the thread was preempted, or
//! blocked on a lock, is not charged to the colors that happened to be running. The busiest
//! slot's share of that time is the serial fraction Amdahl's law needs: no color can run on
//! more than one CPU at once, whichever color it is.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::color::COLOR_SLOTS;
use crate::core::nanos;

pub(crate) struct WorkerCounters {
    callbacks: AtomicU64,
    steals: AtomicU64,
    stolen_colors: AtomicU64,
    idle_ns: AtomicU64,
    wakeups: AtomicU64,
    color0_ns: AtomicU64,
    other_ns: AtomicU64,
    poll_ns: AtomicU64,
    polls: AtomicU64,
    takeovers: AtomicU64,
    watchdogs_set: AtomicU64,
    shed: AtomicU64,
    queue_high_water: AtomicU64,
    cpu_ns: AtomicU64,
    awake_ns: AtomicU64,
    /// CPU-corrected busy time per color slot.
    slot_ns: Box<[AtomicU64]>,
}

impl Default for WorkerCounters {
    fn default() -> Self {
        WorkerCounters {
            callbacks: AtomicU64::new(0),
            steals: AtomicU64::new(0),
            stolen_colors: AtomicU64::new(0),
            idle_ns: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            color0_ns: AtomicU64::new(0),
            other_ns: AtomicU64::new(0),
            poll_ns: AtomicU64::new(0),
            polls: AtomicU64::new(0),
            takeovers: AtomicU64::new(0),
            watchdogs_set: AtomicU64::new(0),
            shed: AtomicU64::new(0),
            queue_high_water: AtomicU64::new(0),
            cpu_ns: AtomicU64::new(0),
            awake_ns: AtomicU64::new(0),
            slot_ns: (0..COLOR_SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

/// Single-writer increment: no read-modify-write instruction needed.
#[inline]
fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Relaxed).wrapping_add(by), Relaxed);
}

impl WorkerCounters {
    #[inline]
    pub(crate) fn polled(&self, nanos: u64) {
        bump(&self.polls, 1);
        bump(&self.poll_ns, nanos);
    }

    /// This worker polled another worker's epoll, left unwatched by a long callback.
    pub(crate) fn took_over(&self) {
        bump(&self.takeovers, 1);
    }

    /// This worker set a sleeping peer's watchdog timer (a system call).
    pub(crate) fn set_watchdog(&self) {
        bump(&self.watchdogs_set, 1);
    }

    /// The worker slept (a blocking poll) for `nanos` and woke.
    pub(crate) fn idled(&self, nanos: u64) {
        bump(&self.idle_ns, nanos);
        bump(&self.wakeups, 1);
    }

    pub(crate) fn stole(&self, colors: usize) {
        bump(&self.steals, 1);
        bump(&self.stolen_colors, colors as u64);
    }

    #[inline]
    pub(crate) fn shed_one(&self) {
        bump(&self.shed, 1);
    }

    /// The depth of a color's FIFO seen by the worker starting a turn of it.
    #[inline]
    pub(crate) fn saw_depth(&self, depth: usize) {
        let depth = depth as u64;
        if depth > self.queue_high_water.load(Relaxed) {
            self.queue_high_water.store(depth, Relaxed);
        }
    }

    fn snapshot(&self) -> WorkerStats {
        WorkerStats {
            callbacks: self.callbacks.load(Relaxed),
            steals: self.steals.load(Relaxed),
            stolen_callbacks: self.stolen_colors.load(Relaxed),
            idle: Duration::from_nanos(self.idle_ns.load(Relaxed)),
            wakeups: self.wakeups.load(Relaxed),
            color0_busy: Duration::from_nanos(self.color0_ns.load(Relaxed)),
            other_busy: Duration::from_nanos(self.other_ns.load(Relaxed)),
            poll_busy: Duration::from_nanos(self.poll_ns.load(Relaxed)),
            polls: self.polls.load(Relaxed),
            takeovers: self.takeovers.load(Relaxed),
            watchdogs_set: self.watchdogs_set.load(Relaxed),
            shed: self.shed.load(Relaxed),
            queue_high_water: self.queue_high_water.load(Relaxed),
            cpu: Duration::from_nanos(self.cpu_ns.load(Relaxed)),
            awake: Duration::from_nanos(self.awake_ns.load(Relaxed)),
        }
    }
}

/// CPU time consumed by the calling thread.
pub(crate) fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call and
    // CLOCK_THREAD_CPUTIME_ID is supported on every Linux/BSD this crate targets; on failure
    // the zeroed value is used. Tested by `stats::tests::thread_cpu_time_advances`.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// How long a worker may run without a boundary before its slot times are flushed anyway.
const FLUSH_EVERY: Duration = Duration::from_millis(5);

/// A worker's private accounting state: callback times per slot since the last boundary, and
/// the clock and CPU readings the boundary scales them by.
pub(crate) struct WorkerClock<'a> {
    counters: &'a WorkerCounters,
    pending: Box<[u64]>,
    touched: Vec<usize>,
    /// The end of the last callback (or the start of the current activity).
    pub(crate) now: Instant,
    interval_wall: Instant,
    /// `interval_wall + FLUSH_EVERY`: checked between turns, so kept as a deadline (one
    /// comparison) rather than recomputed as a duration (a subtraction with its overflow
    /// checks) every time.
    flush_at: Instant,
    interval_cpu: Duration,
}

impl<'a> WorkerClock<'a> {
    pub(crate) fn new(counters: &'a WorkerCounters) -> WorkerClock<'a> {
        let now = Instant::now();
        WorkerClock {
            counters,
            pending: vec![0; COLOR_SLOTS].into_boxed_slice(),
            touched: Vec::new(),
            now,
            interval_wall: now,
            flush_at: now + FLUSH_EVERY,
            interval_cpu: thread_cpu_time(),
        }
    }

    pub(crate) fn counters(&self) -> &'a WorkerCounters {
        self.counters
    }

    /// Accounts `n` callbacks of slot `slot` (one turn, or part of one) that ran from
    /// `self.now` until `ended`. Slot 0's time counts as color 0's.
    #[inline]
    pub(crate) fn ran(&mut self, slot: usize, n: u32, ended: Instant) {
        let spent = nanos(ended.saturating_duration_since(self.now));
        self.now = ended;
        let c = self.counters;
        bump(&c.callbacks, u64::from(n));
        bump(if slot == 0 { &c.color0_ns } else { &c.other_ns }, spent);
        if self.pending[slot] == 0 {
            self.touched.push(slot);
        }
        self.pending[slot] += spent.max(1);
    }

    /// Flushes if the current interval has run long enough.
    #[inline]
    pub(crate) fn maybe_flush(&mut self) {
        if self.now >= self.flush_at {
            self.flush();
        }
    }

    /// A boundary: scales the pending slot times by CPU time over wall time since the last
    /// one, publishes them, and starts a new interval.
    pub(crate) fn flush(&mut self) {
        let now = Instant::now();
        let cpu = thread_cpu_time();
        let wall = nanos(now.saturating_duration_since(self.interval_wall));
        let used = nanos(cpu.saturating_sub(self.interval_cpu));
        let c = self.counters;
        bump(&c.awake_ns, wall);
        bump(&c.cpu_ns, used);
        let factor = if wall == 0 {
            1.0
        } else {
            (used as f64 / wall as f64).min(1.0)
        };
        for slot in self.touched.drain(..) {
            let ns = std::mem::take(&mut self.pending[slot]);
            bump(&c.slot_ns[slot], (ns as f64 * factor) as u64);
        }
        self.interval_wall = now;
        self.flush_at = now + FLUSH_EVERY;
        self.interval_cpu = cpu;
        self.now = now;
    }

    /// Call before parking or a blocking poll, then [`WorkerClock::idle_end`] after.
    pub(crate) fn idle_start(&mut self) {
        self.flush();
    }

    /// Ends an idle period begun by [`WorkerClock::idle_start`], charging it as idle (or, if
    /// `polled`, as a poll turn that found work).
    ///
    /// The new interval's CPU reading is the one `idle_start` took: a blocked thread uses no
    /// CPU, so reading the clock again would only add a system call (`CLOCK_THREAD_CPUTIME_ID`
    /// is not in the vDSO) to every wake-up, which on a metadata workload was a tenth of a
    /// server's CPU. The little CPU spent entering and leaving the wait is charged to the
    /// next interval, as the time of the thread it is.
    pub(crate) fn idle_end(&mut self) {
        let now = Instant::now();
        self.counters
            .idled(nanos(now.saturating_duration_since(self.now)));
        self.interval_wall = now;
        self.flush_at = now + FLUSH_EVERY;
        self.now = now;
    }

    /// Accounts a non-blocking poll turn that started at `self.now`.
    pub(crate) fn polled(&mut self) {
        let now = Instant::now();
        self.counters
            .polled(nanos(now.saturating_duration_since(self.now)));
        self.now = now;
    }
}

impl Drop for WorkerClock<'_> {
    fn drop(&mut self) {
        self.flush();
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
        let mut slot_busy = vec![Duration::ZERO; COLOR_SLOTS];
        for w in self.workers.iter() {
            for (total, ns) in slot_busy.iter_mut().zip(w.slot_ns.iter()) {
                *total += Duration::from_nanos(ns.load(Relaxed));
            }
        }
        Stats {
            workers: self.workers.iter().map(|w| w.snapshot()).collect(),
            slot_busy,
        }
    }
}

/// Counters of one worker thread.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Callbacks run.
    pub callbacks: u64,
    /// Successful steals by this worker (each takes a batch of queued colors).
    pub steals: u64,
    /// Colors moved to this worker by its steals, each with every callback it had queued.
    /// (The name is kept from the task-stealing design, which moved callbacks.)
    pub stolen_callbacks: u64,
    /// Wall time spent with nothing to run (parked or in a blocking poll).
    pub idle: Duration,
    /// Times this worker blocked in a poll and woke (a wake by another thread, an event, a
    /// timer or its poll's time bound). On a VM whose idle CPUs halt, each is dear.
    pub wakeups: u64,
    /// Wall time spent running callbacks of color 0 (and of the colors that share its slot,
    /// 1024, 2048, ...).
    pub color0_busy: Duration,
    /// Wall time spent running callbacks of every other color.
    pub other_busy: Duration,
    /// Wall time spent in non-blocking polls and in dispatching their events.
    pub poll_busy: Duration,
    /// Poll turns taken by this worker (blocking or not).
    pub polls: u64,
    /// Polls of another worker's epoll, which its owner had not looked at for a while (it
    /// was in a long callback).
    pub takeovers: u64,
    /// Times this worker set a sleeping peer's watchdog timer, so that the peer wakes to
    /// look at its epoll should this worker's callbacks run long (a system call each).
    pub watchdogs_set: u64,
    /// Callbacks replaced by their drop alternative because their color was overloaded.
    pub shed: u64,
    /// Deepest color FIFO this worker has started a turn of.
    pub queue_high_water: u64,
    /// Thread CPU time while awake (`CLOCK_THREAD_CPUTIME_ID`, read at boundaries).
    pub cpu: Duration,
    /// Wall time awake (not parked, not in a blocking poll), over the same intervals.
    pub awake: Duration,
}

/// A snapshot of the runtime's statistics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Per worker, by index.
    pub workers: Vec<WorkerStats>,
    /// Busy time per color slot (index = `color % COLOR_SLOTS`), summed over workers and
    /// corrected for preemption (see the module docs).
    pub slot_busy: Vec<Duration>,
}

impl Stats {
    /// Callbacks run, over all workers.
    pub fn callbacks(&self) -> u64 {
        self.workers.iter().map(|w| w.callbacks).sum()
    }

    /// Successful steals, over all workers.
    pub fn steals(&self) -> u64 {
        self.workers.iter().map(|w| w.steals).sum()
    }

    /// Wall time in color 0's slot's callbacks, over all workers.
    pub fn color0_busy(&self) -> Duration {
        self.workers.iter().map(|w| w.color0_busy).sum()
    }

    /// Wall time in every other color's callbacks, over all workers.
    pub fn other_busy(&self) -> Duration {
        self.workers.iter().map(|w| w.other_busy).sum()
    }

    /// Wall time in non-blocking polls and their dispatch, over all workers.
    pub fn poll_busy(&self) -> Duration {
        self.workers.iter().map(|w| w.poll_busy).sum()
    }

    /// Thread CPU time of all workers while awake.
    pub fn cpu(&self) -> Duration {
        self.workers.iter().map(|w| w.cpu).sum()
    }

    /// The color slot with the most (CPU-corrected) busy time, and that time.
    pub fn busiest_slot(&self) -> Option<(usize, Duration)> {
        self.slot_busy
            .iter()
            .copied()
            .enumerate()
            .filter(|(_, d)| !d.is_zero())
            .max_by_key(|&(slot, d)| (d, std::cmp::Reverse(slot)))
    }

    /// Total CPU-corrected callback time plus poll time.
    pub fn busy(&self) -> Duration {
        self.slot_busy.iter().sum::<Duration>() + self.poll_busy()
    }

    /// The `s` of Amdahl's law: the share of busy time that must run serially because it
    /// belongs to one color (the busiest slot), or to the poller, whichever is larger. Color
    /// 0 is not special: a hot connection color limits speedup just as much.
    pub fn serial_fraction(&self) -> f64 {
        let total = self.busy().as_secs_f64();
        if total == 0.0 {
            return 0.0;
        }
        let busiest = self.busiest_slot().map_or(Duration::ZERO, |(_, d)| d);
        busiest.max(self.poll_busy()).as_secs_f64() / total
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
                wakeups: now.wakeups - then.wakeups,
                color0_busy: now.color0_busy.saturating_sub(then.color0_busy),
                other_busy: now.other_busy.saturating_sub(then.other_busy),
                poll_busy: now.poll_busy.saturating_sub(then.poll_busy),
                polls: now.polls - then.polls,
                takeovers: now.takeovers - then.takeovers,
                watchdogs_set: now.watchdogs_set - then.watchdogs_set,
                shed: now.shed - then.shed,
                queue_high_water: now.queue_high_water,
                cpu: now.cpu.saturating_sub(then.cpu),
                awake: now.awake.saturating_sub(then.awake),
            })
            .collect();
        let slot_busy = self
            .slot_busy
            .iter()
            .enumerate()
            .map(|(i, d)| d.saturating_sub(earlier.slot_busy.get(i).copied().unwrap_or_default()))
            .collect();
        Stats { workers, slot_busy }
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
    fn thread_cpu_time_advances() {
        // Spin until 5 ms of CPU time accrue (however loaded the machine), giving up after 5 s
        // of wall time: a clock that does not advance fails.
        let before = thread_cpu_time();
        let give_up = Instant::now() + Duration::from_secs(5);
        while thread_cpu_time() - before < Duration::from_millis(5) && Instant::now() < give_up {
            std::hint::spin_loop();
        }
        let spent = thread_cpu_time() - before;
        assert!(spent >= Duration::from_millis(5), "{spent:?}");
        // Sleeping costs no CPU.
        let before = thread_cpu_time();
        std::thread::sleep(Duration::from_millis(30));
        assert!(thread_cpu_time() - before < Duration::from_millis(10));
    }

    #[test]
    fn the_busiest_color_sets_the_serial_fraction_not_only_color_zero() {
        let ms = Duration::from_millis;
        let mut slot_busy = vec![Duration::ZERO; COLOR_SLOTS];
        slot_busy[0] = ms(3);
        slot_busy[7] = ms(6);
        slot_busy[5] = ms(3);
        let s = Stats {
            workers: vec![WorkerStats {
                poll_busy: ms(0),
                ..WorkerStats::default()
            }],
            slot_busy,
        };
        assert_eq!(s.busiest_slot(), Some((7, ms(6))));
        assert!((s.serial_fraction() - 0.5).abs() < 1e-9);
        assert!((s.amdahl_bound(4) - amdahl_bound(0.5, 4)).abs() < 1e-9);
        // A poller busier than any color is the serial bottleneck instead.
        let mut polled = s.clone();
        polled.workers[0].poll_busy = ms(12);
        assert!((polled.serial_fraction() - 0.5).abs() < 1e-9, "12 of 24");
        assert_eq!(Stats::default().serial_fraction(), 0.0);
    }

    #[test]
    fn a_worker_clock_charges_slots_and_reads_thread_cpu_time() {
        let board = StatsBoard::new(1);
        {
            let mut a = WorkerClock::new(board.worker(0));
            let t = a.now;
            let until = t + Duration::from_millis(5);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
            a.ran(0, 1, until);
            a.ran(9, 1, until + Duration::from_micros(1));
        }
        let s = board.snapshot();
        assert_eq!(s.callbacks(), 2);
        assert_eq!(s.color0_busy(), Duration::from_millis(5));
        assert_eq!(s.other_busy(), Duration::from_micros(1));
        assert!(s.workers[0].awake >= Duration::from_millis(5));
        // However descheduled this thread was, the corrected time never exceeds the wall time.
        assert!(s.slot_busy[0] <= Duration::from_millis(5));
        assert!(s.workers[0].cpu <= s.workers[0].awake + Duration::from_millis(1));
    }

    /// Work after an idle period is charged in full: the time blocked is idle, not part of
    /// the next interval's wall time (which would scale the work down by the CPU the thread
    /// did not use while blocked).
    ///
    /// The defect charges a fifth of the spin (10 ms of work over 50 ms of wall) every time;
    /// a loaded machine can also deschedule the thread between the spin and the flush, which
    /// lengthens the wall time by a time slice and charges less in one attempt (it failed 2
    /// runs in 10 at load 8 with one attempt). So the test passes if any of 5 attempts is
    /// charged in full, and the defect still fails all of them.
    #[test]
    fn work_after_an_idle_period_is_charged_in_full() {
        let mut seen = Vec::new();
        for _ in 0..5 {
            let board = StatsBoard::new(1);
            let spun;
            {
                let mut a = WorkerClock::new(board.worker(0));
                a.idle_start();
                std::thread::sleep(Duration::from_millis(40));
                a.idle_end();
                let cpu_before = thread_cpu_time();
                let until = a.now + Duration::from_millis(10);
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
                spun = thread_cpu_time() - cpu_before;
                a.ran(5, 1, until);
            }
            let s = board.snapshot();
            assert!(s.workers[0].idle >= Duration::from_millis(40));
            // However loaded the machine (the spin may be preempted), the slot is charged the
            // CPU the spin had, not a fifth of it.
            if s.slot_busy[5].as_secs_f64() >= spun.as_secs_f64() * 0.8 {
                return;
            }
            seen.push((s.slot_busy[5], spun));
        }
        panic!("corrected busy time against CPU spinning, in every attempt: {seen:?}");
    }

    #[test]
    fn preempted_time_is_not_charged_to_the_running_color() {
        let board = StatsBoard::new(1);
        {
            let mut a = WorkerClock::new(board.worker(0));
            let t = a.now;
            // 40 ms of wall time of which almost none on the CPU (as if preempted).
            std::thread::sleep(Duration::from_millis(40));
            a.ran(3, 1, Instant::now());
            let _ = t;
        }
        let s = board.snapshot();
        assert!(s.other_busy() >= Duration::from_millis(40), "wall is kept");
        assert!(
            s.slot_busy[3] < Duration::from_millis(15),
            "corrected busy {:?}",
            s.slot_busy[3]
        );
    }

    #[test]
    fn counters_diff() {
        let board = StatsBoard::new(1);
        let a = board.snapshot();
        {
            let mut c = WorkerClock::new(board.worker(0));
            let t = c.now;
            c.ran(1, 1, t + Duration::from_micros(10));
        }
        board.worker(0).saw_depth(5);
        board.worker(0).saw_depth(3);
        let d = board.snapshot().since(&a);
        assert_eq!(d.callbacks(), 1);
        assert_eq!(d.workers[0].queue_high_water, 5);
        assert_eq!(d.other_busy(), Duration::from_micros(10));
    }
}
