//! The multiprocessor flavour: one worker thread per CPU; the color slot is the unit of
//! scheduling.
//!
//! # Design
//!
//! Each of the 1024 color slots (the libasync-smp paper section 4.2: colors map through a 1024-entry
//! table; colors congruent modulo its size share a slot and are serialised together) owns a
//! FIFO of callbacks in two lock-free lanes (`cpucb` ahead of I/O) and the small state machine
//! of [`crate::state`]: idle, queued, running, running + notified. Run queues hold *slots*,
//! never callbacks, the way libdispatch enqueues a serial queue (not its blocks) on a root
//! queue:
//!
//! * every worker has a `crossbeam-deque` FIFO `Worker` (its local run queue; others hold its
//!   `Stealer`) and an `Injector` inbox for slots queued by other threads;
//! * posting (`cpucb`, an I/O edge, a timer, a helper completion) pushes the callback on the
//!   slot's lane and does one `fetch_or` on the slot state. Only a post that finds the slot
//!   idle queues it, on the run queue of the slot's *home* worker (the last worker that ran
//!   it: the thesis' last-color affinity, which keeps a color's state in one cache) — its own
//!   local deque when the poster is that worker, the home's inbox otherwise. Posting to a busy
//!   color costs that one atomic: no lock, no wake;
//! * a worker that queues a slot whose home is asleep in its epoll *adopts* it (queues it on
//!   its own deque and becomes its home) instead of waking the home, and a worker wakes an
//!   idle peer for a slot it queued on its own deque only when that deque then holds more
//!   than the one slot it takes next. A request that hops from a connection's color to color
//!   0 and back, or whose readiness one worker harvested for a color homed on a sleeping
//!   one, then runs on the awake worker: on a VM whose idle vCPUs halt, a cross-CPU wake-up
//!   costs several times a same-CPU one. Under load no worker sleeps and this never applies;
//!   a slot queued behind a long callback is stolen within the 1 ms an idle worker blocks
//!   while another is awake (below);
//! * a worker takes a slot off a run queue, `start`s it (it is then the slot's only owner),
//!   and runs its callbacks in FIFO order for a budget (64 callbacks or 500 µs, the time read
//!   every 8 callbacks: cohort
//!   batching, after Larus and Parkes, "Using Cohort Scheduling to Enhance Server Performance"),
//!   then yields the slot to the back of its own deque, so no color, and
//!   nothing queued behind it, starves; a yielded turn begins with an I/O callback if one
//!   waits, so a color that keeps re-posting `cpucb`s cannot starve its own I/O either;
//! * an idle worker steals a *batch* of queued slots from another worker's inbox or deque.
//!   Running slots are on no run queue, so a thief cannot take one: exclusion holds by
//!   construction (a slot is on at most one run queue, and only the worker that took it off
//!   runs it), order by the slot's FIFO. The slot's home follows the thief;
//! * every worker has its own epoll (N copies of a uniprocessor server keep each connection,
//!   its socket and its epoll on one CPU; one shared epoll made one worker harvest every
//!   connection's events while another ran half of them). [`Handle::register_in`] puts a
//!   source in the epoll of its color's home worker; a color stolen later leaves its
//!   registrations where they are (its events then cross, as every event did before). An
//!   idle worker blocks in its own epoll, until the next timer; a busy worker takes a
//!   non-blocking look at it every 250 µs between turns, so timers, signals and I/O are
//!   never starved by CPU work;
//! * no event waits behind a long callback: an epoll that nobody has looked at for 1 ms
//!   (its owner is in a long callback; between short turns it looks every 250 µs) is polled
//!   by another worker, busy (between its turns) or idle (an idle worker blocks for at most
//!   1 ms while another worker is awake). The events go to their colors' queues as any
//!   other, and an idle worker steals what the stuck worker cannot run;
//! * sleeping follows the Dekker pattern: a worker takes its own epoll, announces itself
//!   idle (`SeqCst`), fences, re-checks; a poster that queued a slot fences and wakes an idle
//!   worker (through its epoll's waker) if the idle count is non-zero. Either the worker sees
//!   the slot or the poster sees the worker. A thread polling another's epoll discards the
//!   wakes it finds there, which is why the owner takes its epoll *before* announcing: a
//!   wake aimed at the announced owner stays in the epoll for it.
//!
//! Priorities: a slot queued by a callback with a positive priority goes on a runtime-wide
//! priority injector that every worker serves first. Overload shedding compares the slot's
//! FIFO depth with the threshold at post time.
//!
//! `QueueMode::Shared` (Table 2's base) puts every queued slot on one shared `Injector`
//! instead; `stealing(false)` keeps a slot on its home (`slot mod workers`) forever.
//!
//! # Why not the old design
//!
//! The previous design kept *callbacks* in a mutex-protected queue per worker and found a
//! color's tasks by scanning; a thief had to move every task of a non-running color under two
//! locks, and a scheduler had to re-check the color table under the lock. Making the slot the
//! unit removes the scan (a turn pops a FIFO), the per-post lock and most wakes; measurements
//! are in the README (`sfs-bench tasks`).

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering::*, fence};
use std::time::{Duration, Instant};

use crossbeam_deque::{Injector, Steal, Stealer, Worker};
use crossbeam_queue::SegQueue;
use crossbeam_utils::CachePadded;

use crate::color::{COLOR_SLOTS, Color};
use crate::core::{CLOCK_EVERY, Common, Core, nanos, run_task};
use crate::error::Error;
use crate::handle::Handle;
use crate::state::SlotState;
use crate::stats::WorkerClock;
use crate::task::{Lane, Task};

/// How the runtime arranges its run queues: the steps of the libasync-smp paper's Table 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueMode {
    /// One queue shared by all workers (the paper's "base" configuration).
    Shared,
    /// One queue per worker, colors mapped to workers through the color table.
    PerWorker,
}

const AWAKE: u8 = 0;
const POLLING: u8 = 1;

/// Callbacks a worker runs from one slot before yielding it.
pub(crate) const BUDGET: u32 = 64;
/// Wall time after which a worker yields a slot even within the budget.
pub(crate) const TURN_TIME: Duration = Duration::from_micros(500);
/// How often a busy worker takes a non-blocking look at its own epoll (and at any that has
/// gone unwatched for [`TAKEOVER_AFTER`]).
const POLL_INTERVAL: Duration = Duration::from_micros(250);
/// An epoll nobody has looked at for this long belongs to a worker stuck in a long callback
/// (a worker between short turns looks at its own every [`POLL_INTERVAL`], and a turn yields
/// after [`TURN_TIME`]): another worker polls it for it, so no event waits behind the
/// callback. It is also how often an idle worker wakes to check while another one is busy.
const TAKEOVER_AFTER: Duration = Duration::from_millis(1);
/// Every this many turns a worker serves its inbox before its own deque (fairness between
/// slots queued locally and slots queued by other threads).
const INBOX_EVERY: u32 = 31;

pub(crate) struct Slot {
    state: CachePadded<SlotState>,
    /// Set by the owner that yields the slot with I/O waiting: its next turn starts with I/O.
    io_first: AtomicBool,
    cpu: SegQueue<Task>,
    io: SegQueue<Task>,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            state: CachePadded::new(SlotState::new()),
            io_first: AtomicBool::new(false),
            cpu: SegQueue::new(),
            io: SegQueue::new(),
        }
    }

    fn len(&self) -> usize {
        self.cpu.len() + self.io.len()
    }

    fn is_empty(&self) -> bool {
        self.cpu.is_empty() && self.io.is_empty()
    }

    /// The owner's next callback: from the I/O lane first if `io_first`, else from the `cpucb`
    /// lane first.
    ///
    /// A lane is looked at (`is_empty`: two loads) before it is popped, because
    /// `SegQueue::pop` pays a `SeqCst` fence even to find a lane empty, and a turn looks at an
    /// empty lane two or three times (a connection's color usually holds one I/O callback and
    /// no `cpucb`). With the owner the only consumer (the only thread that moves a lane's
    /// head), `is_empty` cannot call a lane empty that held a callback when the owner looked;
    /// a push it misses is one whose `notify` the owner's `try_idle` will see, so the owner
    /// looks again (the tests below, `tests/stress.rs`, and the loom model's emptiness check
    /// before `try_idle`).
    fn pop(&self, io_first: bool) -> Option<Task> {
        let (first, second) = if io_first {
            (&self.io, &self.cpu)
        } else {
            (&self.cpu, &self.io)
        };
        if !first.is_empty()
            && let Some(task) = first.pop()
        {
            return Some(task);
        }
        if second.is_empty() {
            None
        } else {
            second.pop()
        }
    }

    fn drain(&self) -> usize {
        let mut n = 0;
        while self.cpu.pop().or_else(|| self.io.pop()).is_some() {
            n += 1;
        }
        n
    }
}

struct WorkerShared {
    /// AWAKE or POLLING (blocked in its own epoll); a waker claims a sleeping worker by CAS
    /// to AWAKE.
    sleep: CachePadded<AtomicU8>,
    /// Set before a worker blocks without a time bound (every other worker was polling too):
    /// a worker that wakes with work wakes it, so that it watches for long callbacks again.
    unbounded: AtomicBool,
    /// When a thread last polled this worker's epoll (nanoseconds since the runtime's epoch).
    looked_at: CachePadded<AtomicU64>,
    /// When this worker's watchdog timer was last set to fire (nanoseconds since the
    /// runtime's epoch; 0 before the first): [`Mp::watch_over`] leaves a timer due far enough
    /// ahead as it is. Set by the peers, read by them only.
    watchdog_due: AtomicU64,
    inbox: Injector<usize>,
    stealer: Stealer<usize>,
}

/// What a worker thread is handed when it starts.
pub(crate) struct WorkerSeat {
    deque: Worker<usize>,
}

/// (runtime id, worker index, local deque).
type LocalSeat = (u64, usize, Rc<Worker<usize>>);

thread_local! {
    /// The local run queue of the worker running on this thread: (runtime id, worker index,
    /// deque). Lets a post from a callback push onto its own worker's deque without a lock.
    static LOCAL: RefCell<Option<LocalSeat>> = const { RefCell::new(None) };
}

pub(crate) struct Mp {
    common: Common,
    slots: Box<[Slot]>,
    /// Home worker of each slot (per-worker mode).
    table: Box<[AtomicUsize]>,
    workers: Box<[WorkerShared]>,
    /// The single queue of `QueueMode::Shared`.
    shared: Injector<usize>,
    /// Slots queued by a prioritised callback; served first by every worker.
    urgent: Injector<usize>,
    mode: QueueMode,
    steal: bool,
    /// Workers blocked in their epoll (announced before their last re-check).
    idle: CachePadded<AtomicUsize>,
    /// The origin of `WorkerShared::looked_at`.
    epoch: Instant,
}

pub(crate) struct MpConfig {
    pub(crate) workers: usize,
    pub(crate) mode: QueueMode,
    pub(crate) steal: bool,
}

/// Takes one item, retrying while the queue reports contention.
fn take<T>(mut attempt: impl FnMut() -> Steal<T>) -> Option<T> {
    loop {
        match attempt() {
            Steal::Success(item) => return Some(item),
            Steal::Empty => return None,
            Steal::Retry => std::hint::spin_loop(),
        }
    }
}

impl Mp {
    pub(crate) fn new(config: MpConfig, common: Common) -> (Arc<Mp>, Vec<WorkerSeat>) {
        let workers = config.workers.max(1);
        let seats: Vec<WorkerSeat> = (0..workers)
            .map(|_| WorkerSeat {
                deque: Worker::new_fifo(),
            })
            .collect();
        let mp = Mp {
            common,
            slots: (0..COLOR_SLOTS).map(|_| Slot::new()).collect(),
            // Round-robin initial homes: color c starts on worker c mod N.
            table: (0..COLOR_SLOTS)
                .map(|slot| AtomicUsize::new(slot % workers))
                .collect(),
            workers: seats
                .iter()
                .map(|seat| WorkerShared {
                    sleep: CachePadded::new(AtomicU8::new(AWAKE)),
                    unbounded: AtomicBool::new(false),
                    looked_at: CachePadded::new(AtomicU64::new(0)),
                    watchdog_due: AtomicU64::new(0),
                    inbox: Injector::new(),
                    stealer: seat.deque.stealer(),
                })
                .collect(),
            shared: Injector::new(),
            urgent: Injector::new(),
            mode: config.mode,
            steal: config.steal && config.mode == QueueMode::PerWorker && workers > 1,
            idle: CachePadded::new(AtomicUsize::new(0)),
            epoch: Instant::now(),
        };
        (Arc::new(mp), seats)
    }

    /// Runs the workers on their own threads until the runtime stops.
    pub(crate) fn run(
        self: &Arc<Self>,
        seats: Vec<WorkerSeat>,
        pin: Option<Vec<usize>>,
    ) -> Result<(), Error> {
        let mut threads = Vec::with_capacity(seats.len());
        for (index, seat) in seats.into_iter().enumerate() {
            let mp = self.clone();
            let cpu = pin.as_ref().map(|cpus| cpus[index % cpus.len()]);
            let spawned = std::thread::Builder::new()
                .name(format!("libcolor-worker-{index}"))
                .spawn(move || {
                    let _current = crate::handle::enter(Handle { core: mp.clone() });
                    if let Some(cpu) = cpu
                        && !crate::runtime::pin_current_thread(cpu)
                    {
                        mp.common.fail(Error::Pin { worker: index, cpu });
                        mp.wake_all();
                        return;
                    }
                    let deque = Rc::new(seat.deque);
                    LOCAL.with(|l| *l.borrow_mut() = Some((mp.common.id, index, deque.clone())));
                    mp.worker_loop(index, &deque);
                    LOCAL.with(|l| l.borrow_mut().take());
                    // Slot indices left in the deque are dropped with it; the slots' FIFOs
                    // are drained below.
                });
            match spawned {
                Ok(handle) => threads.push(handle),
                Err(err) => {
                    self.common.fail(Error::Start(err));
                    self.wake_all();
                    break;
                }
            }
        }
        for handle in threads {
            if let Err(payload) = handle.join() {
                self.common.fail(Error::CallbackPanicked {
                    color: Color::DEFAULT,
                    message: format!(
                        "worker thread died: {}",
                        crate::error::panic_message(payload.as_ref())
                    ),
                });
            }
        }
        self.drain_all();
        self.common.teardown();
        // Completions that helpers posted while being joined.
        self.drain_all();
        match self.common.take_failure() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Drops every queued callback (their captured state is released).
    fn drain_all(&self) -> usize {
        while take(|| self.shared.steal()).is_some() {}
        while take(|| self.urgent.steal()).is_some() {}
        for w in self.workers.iter() {
            while take(|| w.inbox.steal()).is_some() {}
        }
        self.slots.iter().map(Slot::drain).sum()
    }

    fn worker_loop(&self, index: usize, deque: &Worker<usize>) {
        let mut clock = WorkerClock::new(self.common.stats.worker(index));
        let mut tick: u32 = 0;
        // A deadline, not an interval: this is checked between every two turns.
        let mut next_poll = clock.now + POLL_INTERVAL;
        while !self.common.is_stopping() {
            tick = tick.wrapping_add(1);
            if clock.now >= next_poll {
                next_poll = clock.now + POLL_INTERVAL;
                self.poll_while_busy(index, &mut clock);
            }
            clock.maybe_flush();
            match self.find_work(index, deque, tick, &mut clock) {
                Some(slot) => self.run_slot(index, slot, deque, &mut clock),
                None => {
                    self.idle(index, deque, &mut clock);
                    next_poll = clock.now + POLL_INTERVAL;
                }
            }
        }
    }

    fn find_work(
        &self,
        index: usize,
        deque: &Worker<usize>,
        tick: u32,
        clock: &mut WorkerClock<'_>,
    ) -> Option<usize> {
        if !self.urgent.is_empty()
            && let Some(slot) = take(|| self.urgent.steal())
        {
            return Some(slot);
        }
        match self.mode {
            QueueMode::Shared => take(|| self.shared.steal()),
            QueueMode::PerWorker => {
                let inbox = &self.workers[index].inbox;
                if tick.is_multiple_of(INBOX_EVERY)
                    && let Some(slot) = take(|| inbox.steal_batch_and_pop(deque))
                {
                    return Some(slot);
                }
                if let Some(slot) = deque.pop() {
                    return Some(slot);
                }
                if let Some(slot) = take(|| inbox.steal_batch_and_pop(deque)) {
                    return Some(slot);
                }
                if self.steal {
                    self.steal_from_others(index, deque, clock)
                } else {
                    None
                }
            }
        }
    }

    /// Takes a batch of queued slots from another worker (its inbox first: slots nobody has
    /// looked at yet, then its deque), starting after this worker so thieves spread out.
    fn steal_from_others(
        &self,
        thief: usize,
        deque: &Worker<usize>,
        clock: &mut WorkerClock<'_>,
    ) -> Option<usize> {
        let n = self.workers.len();
        for offset in 1..n {
            let victim = &self.workers[(thief + offset) % n];
            let got = take(|| victim.inbox.steal_batch_and_pop(deque))
                .or_else(|| take(|| victim.stealer.steal_batch_and_pop(deque)));
            if let Some(slot) = got {
                clock.counters().stole(1 + deque.len());
                return Some(slot);
            }
        }
        None
    }

    /// Runs a turn of `slot`, which this worker just took off a run queue.
    fn run_slot(&self, index: usize, s: usize, deque: &Worker<usize>, clock: &mut WorkerClock<'_>) {
        let slot = &self.slots[s];
        slot.state.start();
        if self.steal && self.table[s].load(Relaxed) != index {
            self.table[s].store(index, Relaxed);
        }
        clock.counters().saw_depth(slot.len());
        let turn_end = clock.now + TURN_TIME;
        let mut ran = 0u32;
        let mut unclocked = 0u32;
        // Only the owner reads or writes `io_first` (ordered by the state's acquire-release
        // transitions): a load and, rarely, a store, not a read-modify-write every turn.
        let mut io_first = slot.io_first.load(Relaxed);
        if io_first {
            slot.io_first.store(false, Relaxed);
        }
        loop {
            let task = slot.pop(std::mem::take(&mut io_first));
            let Some(task) = task else {
                if unclocked > 0 {
                    clock.ran(s, unclocked, Instant::now());
                }
                if slot.state.try_idle() {
                    return;
                }
                unclocked = 0;
                continue; // a post slipped in: look again
            };
            run_task(self, clock, task);
            ran += 1;
            unclocked += 1;
            if self.common.is_stopping() {
                clock.ran(s, unclocked, Instant::now());
                return; // the slot stays owned; teardown drops what is queued
            }
            if unclocked == CLOCK_EVERY {
                clock.ran(s, unclocked, Instant::now());
                unclocked = 0;
            }
            if ran >= BUDGET || clock.now >= turn_end {
                if unclocked > 0 {
                    clock.ran(s, unclocked, Instant::now());
                    unclocked = 0;
                }
                if slot.is_empty() {
                    if slot.state.try_idle() {
                        return;
                    }
                    continue;
                }
                slot.io_first.store(!slot.io.is_empty(), Relaxed);
                slot.state.yield_now();
                self.requeue(s, deque);
                return;
            }
        }
    }

    /// Puts a yielded slot back on a run queue (this worker's, or the shared one).
    fn requeue(&self, s: usize, deque: &Worker<usize>) {
        match self.mode {
            QueueMode::Shared => self.shared.push(s),
            QueueMode::PerWorker => {
                deque.push(s);
                if self.steal && deque.len() > 1 {
                    // More than this worker will take next: let an idle one steal.
                    self.notify_any(None);
                }
            }
        }
    }

    /// Whether any run queue this worker may take from holds a slot.
    fn has_work(&self, index: usize, deque: &Worker<usize>) -> bool {
        if !self.urgent.is_empty() {
            return true;
        }
        match self.mode {
            QueueMode::Shared => !self.shared.is_empty(),
            QueueMode::PerWorker => {
                if !deque.is_empty() || !self.workers[index].inbox.is_empty() {
                    return true;
                }
                self.steal
                    && self
                        .workers
                        .iter()
                        .enumerate()
                        .any(|(i, w)| i != index && (!w.inbox.is_empty() || !w.stealer.is_empty()))
            }
        }
    }

    /// Nothing to run: poll the epolls of workers stuck in long callbacks, then block in
    /// this worker's own epoll.
    ///
    /// The worker takes its epoll *before* announcing itself, so that a wake written after
    /// the announcement stays in the epoll for it: a thread polling another's epoll (which
    /// discards wakes) can only do so before the owner announces, and then the owner's
    /// re-check sees whatever the waker had queued.
    fn idle(&self, index: usize, deque: &Worker<usize>, clock: &mut WorkerClock<'_>) {
        clock.now = Instant::now();
        if self.poll_stalled(index, clock) > 0 {
            return;
        }
        let me = &self.workers[index];
        let mut held = self.common.reactor.begin(index);
        me.sleep.store(POLLING, SeqCst);
        self.idle.fetch_add(1, SeqCst);
        fence(SeqCst);
        let may_block = !self.has_work(index, deque) && !self.common.is_stopping();
        let timeout = if may_block {
            clock.idle_start();
            self.idle_timeout(index)
        } else {
            Some(Duration::ZERO)
        };
        let ready = self.common.reactor.poll_held(&mut held, timeout);
        me.sleep.store(AWAKE, SeqCst);
        self.idle.fetch_sub(1, SeqCst);
        drop(held);
        if may_block {
            clock.idle_end();
            self.looked(index, clock.now);
        } else {
            self.looked(index, Instant::now());
        }
        let scheduled = self.dispatch(ready);
        if !may_block {
            clock.polled();
        }
        if scheduled > 0 || (may_block && self.has_work(index, deque)) {
            // This worker is about to run callbacks: a peer blocked without a bound must
            // watch for them running long.
            self.watch_over(index, clock);
        }
    }

    /// How long an idle worker may block: until the next timer, and no longer than
    /// [`TAKEOVER_AFTER`] while another worker is awake (it may be in a long callback whose
    /// epoll this worker must then poll).
    ///
    /// `unbounded` is stored before the peers' states are read, and a waking worker stores
    /// its state before reading `unbounded` (both `SeqCst`): either this worker sees the
    /// peer awake, or the peer sees this worker blocking without a bound and sets its
    /// watchdog ([`Mp::watch_over`]).
    fn idle_timeout(&self, index: usize) -> Option<Duration> {
        let me = &self.workers[index];
        me.unbounded.store(true, SeqCst);
        let peer_awake = self
            .workers
            .iter()
            .enumerate()
            .any(|(w, worker)| w != index && worker.sleep.load(SeqCst) != POLLING);
        let timer = self
            .common
            .timers
            .next_deadline()
            .map(|at| at.saturating_duration_since(Instant::now()));
        if peer_awake {
            me.unbounded.store(false, SeqCst);
            Some(timer.map_or(TAKEOVER_AFTER, |t| t.min(TAKEOVER_AFTER)))
        } else {
            timer
        }
    }

    /// After leaving its epoll with work: has a peer that blocked without a time bound wake
    /// [`TAKEOVER_AFTER`] from now, unless this worker (or another) leaves its epoll with work
    /// again before then, which pushes the time back. A worker stuck in a callback leaves no
    /// epoll, so its peer wakes at most that long after it started, and polls its epoll and
    /// steals its queued slots; a short burst of work wakes nobody. The peer stays asleep
    /// (and `unbounded`) until then, so the next burst sets the same peer's timer again.
    ///
    /// The time is pushed back at most once per half period: setting the timer is a system
    /// call that reprograms the CPU's timer, which on a virtual machine just woken from idle
    /// cost 10-20 us, and a server answering one request at a time leaves its epoll with work
    /// twice per request. A timer left as it was fires between half a period and a period
    /// after the burst began; if the busy worker has then not yet gone a period without
    /// looking at its epoll, the peer looks again a period later (its poll is bounded while
    /// a peer is awake), so a stuck callback is found within two periods.
    fn watch_over(&self, index: usize, clock: &mut WorkerClock<'_>) {
        for w in 0..self.workers.len() {
            let peer = &self.workers[w];
            if w != index && peer.unbounded.load(SeqCst) && self.asleep(w) {
                let now = nanos(Instant::now().saturating_duration_since(self.epoch));
                let period = nanos(TAKEOVER_AFTER);
                if peer.watchdog_due.load(Relaxed) > now + period / 2 {
                    return;
                }
                peer.watchdog_due.store(now + period, Relaxed);
                self.common.reactor.wake_after(w, TAKEOVER_AFTER);
                clock.counters().set_watchdog();
                return;
            }
        }
    }

    /// Records that worker `w`'s epoll was polled at `now`.
    fn looked(&self, w: usize, now: Instant) {
        self.workers[w]
            .looked_at
            .store(nanos(now.saturating_duration_since(self.epoch)), Relaxed);
    }

    /// Polls, without blocking, every other worker's epoll that nobody has looked at for
    /// [`TAKEOVER_AFTER`] and that its owner does not hold (it is in a callback or a long
    /// turn). The events go to their colors' run queues as any other: a color homed on the
    /// busy worker is then stolen by an idle one. Returns how many tasks it scheduled.
    fn poll_stalled(&self, index: usize, clock: &mut WorkerClock<'_>) -> usize {
        let now = nanos(clock.now.saturating_duration_since(self.epoch));
        let mut scheduled = 0;
        for w in 0..self.workers.len() {
            if w == index
                || now.saturating_sub(self.workers[w].looked_at.load(Relaxed))
                    < nanos(TAKEOVER_AFTER)
            {
                continue;
            }
            // None: its owner (or another thief) is polling it.
            if let Some(n) = self.poll_now(w, clock.now) {
                scheduled += n;
                clock.counters().took_over();
            }
        }
        scheduled
    }

    /// Polls worker `w`'s epoll without blocking, if no other thread holds it, and schedules
    /// what it found; `None` if it was held. The one non-blocking poll of a busy worker's look
    /// at its own epoll and of a takeover.
    fn poll_now(&self, w: usize, now: Instant) -> Option<usize> {
        let mut held = self.common.reactor.try_begin(w)?;
        let ready = self
            .common
            .reactor
            .poll_held(&mut held, Some(Duration::ZERO));
        drop(held);
        self.looked(w, now);
        Some(self.dispatch(ready))
    }

    /// Schedules what a poll found (ready I/O callbacks, due timers).
    fn dispatch(&self, ready: std::io::Result<Vec<crate::reactor::Ready>>) -> usize {
        match ready {
            Ok(ready) => {
                let mut n = crate::reactor::Reactor::dispatch(ready, self);
                for (color, callback) in self.common.timers.take_due(Instant::now()) {
                    self.schedule(Task::call(color, Lane::Io, callback));
                    n += 1;
                }
                n
            }
            Err(err) => {
                self.common.fail(Error::Poll(err));
                self.wake_all();
                0
            }
        }
    }

    /// A busy worker's periodic look at its own epoll (unless a thief holds it) and at any
    /// peer's that has gone unwatched.
    fn poll_while_busy(&self, index: usize, clock: &mut WorkerClock<'_>) {
        clock.now = Instant::now();
        if self.poll_now(index, clock.now).is_some() {
            clock.polled();
        }
        if self.workers.len() > 1 {
            self.poll_stalled(index, clock);
        }
        clock.flush();
    }

    /// Whether worker `w` is blocked in its epoll (a hint: it may be waking).
    fn asleep(&self, w: usize) -> bool {
        self.workers[w].sleep.load(SeqCst) == POLLING
    }

    /// Claims worker `w` if it is sleeping in state `state` and wakes it.
    fn try_wake(&self, w: usize, state: u8) -> bool {
        let worker = &self.workers[w];
        if worker.sleep.load(SeqCst) != state
            || worker
                .sleep
                .compare_exchange(state, AWAKE, SeqCst, Relaxed)
                .is_err()
        {
            return false;
        }
        self.common.reactor.wake(w);
        true
    }

    /// After queuing a slot that any worker may take: wakes one idle worker (`prefer` first),
    /// if any is idle.
    fn notify_any(&self, prefer: Option<usize>) {
        fence(SeqCst);
        if self.idle.load(SeqCst) == 0 {
            return;
        }
        if let Some(w) = prefer
            && self.try_wake(w, POLLING)
        {
            return;
        }
        for w in 0..self.workers.len() {
            if self.try_wake(w, POLLING) {
                return;
            }
        }
    }

    /// After queuing a slot only worker `w` may take (no stealing): wakes it if it sleeps.
    fn notify_worker(&self, w: usize) {
        fence(SeqCst);
        let _ = self.try_wake(w, POLLING);
    }

    /// Puts a slot that just became queued on a run queue.
    fn enqueue(&self, s: usize, urgent: bool) {
        if urgent {
            self.urgent.push(s);
            self.notify_any(None);
            return;
        }
        match self.mode {
            QueueMode::Shared => {
                self.shared.push(s);
                self.notify_any(None);
            }
            QueueMode::PerWorker => {
                let home = self.table[s].load(Relaxed);
                // Queued on this worker's own deque: the deque's length after the push.
                let local = LOCAL.with(|l| match &*l.borrow() {
                    Some((runtime, me, deque))
                        if *runtime == self.common.id
                            && (*me == home || self.steal && self.asleep(home)) =>
                    {
                        if *me != home {
                            // Adopted: waking the sleeping home would cost a cross-CPU
                            // wake-up for work this awake worker does next.
                            self.table[s].store(*me, Relaxed);
                        }
                        deque.push(s);
                        Some(deque.len())
                    }
                    _ => None,
                });
                match (local, self.steal) {
                    (Some(queued), true) => {
                        // One slot is what this worker takes next, when the callback that
                        // posted it returns. If that callback runs long, a peer steals the
                        // slot within its time bound (or its watchdog's: [`Mp::watch_over`]).
                        if queued > 1 {
                            self.notify_any(None);
                        }
                    }
                    (Some(_), false) => {}
                    (None, true) => {
                        self.workers[home].inbox.push(s);
                        self.notify_any(Some(home));
                    }
                    (None, false) => {
                        self.workers[home].inbox.push(s);
                        self.notify_worker(home);
                    }
                }
            }
        }
    }
}

impl Core for Mp {
    fn common(&self) -> &Common {
        &self.common
    }

    fn schedule(&self, mut task: Task) {
        let s = task.color.slot();
        let slot = &self.slots[s];
        if task.on_overload.is_some() {
            let depth = slot.len();
            task.shed_if(depth >= self.common.overload_threshold);
        }
        let urgent = task.priority > 0;
        match task.lane {
            Lane::Cpu => slot.cpu.push(task),
            Lane::Io => slot.io.push(task),
        }
        // A post to the slot this very thread is running (a color re-posting itself) needs
        // no notification: the owner pops its FIFO again before it may go idle, and it is this
        // thread. That saves the one atomic read-modify-write of the common chain pattern.
        if crate::core::running().is_some_and(|(rt, c)| rt == self.common.id && c.slot() == s) {
            return;
        }
        if slot.state.notify() {
            self.enqueue(s, urgent);
        }
    }

    /// A new earliest timer: one blocked worker recomputes its timeout (and any poll fires
    /// due timers). With none blocked, every busy worker polls every [`POLL_INTERVAL`].
    fn wake_poller(&self) {
        for w in 0..self.workers.len() {
            if self.workers[w].sleep.load(SeqCst) == POLLING {
                self.common.reactor.wake(w);
                return;
            }
        }
    }

    fn wake_all(&self) {
        self.common.reactor.wake_all();
    }

    fn queue_depths(&self) -> Vec<usize> {
        match self.mode {
            QueueMode::Shared => vec![self.slots.iter().map(Slot::len).sum()],
            QueueMode::PerWorker => {
                let n = self.workers.len();
                let mut depths = vec![0; n];
                for (s, slot) in self.slots.iter().enumerate() {
                    depths[self.table[s].load(Relaxed) % n] += slot.len();
                }
                depths
            }
        }
    }

    fn queue_depth_for(&self, color: Color) -> usize {
        self.slots[color.slot()].len()
    }

    fn workers(&self) -> usize {
        self.workers.len()
    }

    fn reactor_for(&self, color: Option<Color>) -> usize {
        match color {
            Some(color) => {
                let s = color.slot();
                match self.mode {
                    QueueMode::PerWorker => self.table[s].load(Relaxed),
                    QueueMode::Shared => s % self.workers.len(),
                }
            }
            None => LOCAL.with(|l| match &*l.borrow() {
                Some((runtime, me, _)) if *runtime == self.common.id => *me,
                _ => 0,
            }),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// A task that records `tag` in `log` when run.
    fn task(lane: Lane, tag: u32, log: &Arc<Mutex<Vec<u32>>>) -> Task {
        let log = log.clone();
        Task::call(
            Color(1),
            lane,
            Box::new(move || log.lock().unwrap().push(tag)),
        )
    }

    fn run(task: Task) {
        match task.work {
            crate::task::Work::Call(f) => f(),
            crate::task::Work::Io(..) => unreachable!(),
        }
    }

    #[test]
    fn a_turn_pops_cpucb_before_io_and_io_first_when_asked_skipping_empty_lanes() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let slot = Slot::new();
        assert!(slot.pop(false).is_none() && slot.pop(true).is_none());
        slot.io.push(task(Lane::Io, 1, &log));
        slot.io.push(task(Lane::Io, 2, &log));
        slot.cpu.push(task(Lane::Cpu, 10, &log));
        run(slot.pop(true).unwrap()); // I/O first: 1
        run(slot.pop(false).unwrap()); // then cpucb: 10
        run(slot.pop(false).unwrap()); // the cpucb lane is empty: 2
        assert!(slot.pop(false).is_none() && slot.pop(true).is_none());
        slot.cpu.push(task(Lane::Cpu, 11, &log));
        run(slot.pop(true).unwrap()); // the I/O lane is empty: 11
        assert_eq!(*log.lock().unwrap(), vec![1, 10, 2, 11]);
    }

    /// The owner's side of a turn (`pop` until empty, then `try_idle`) racing a poster on
    /// both lanes (push, then `notify`), over the real state machine: every callback runs,
    /// each lane in order, and the slot is queued again (`notify` true) exactly when the
    /// owner let it go idle. A `pop` that reported a non-empty lane empty, or the lanes
    /// looked at out of order, loses or reorders callbacks here.
    #[test]
    fn a_poster_racing_the_owner_loses_no_callback_and_keeps_each_lane_in_order() {
        const N: u32 = 20_000;
        let slot = Arc::new(Slot::new());
        let log = Arc::new(Mutex::new(Vec::new()));
        let queued = Arc::new(AtomicUsize::new(0));
        let poster = {
            let (slot, log, queued) = (slot.clone(), log.clone(), queued.clone());
            std::thread::spawn(move || {
                for i in 0..N {
                    let lane = if i % 3 == 0 { Lane::Cpu } else { Lane::Io };
                    let t = task(lane, i, &log);
                    match lane {
                        Lane::Cpu => slot.cpu.push(t),
                        Lane::Io => slot.io.push(t),
                    }
                    if slot.state.notify() {
                        queued.fetch_add(1, SeqCst);
                    }
                }
            })
        };
        let mut turns = 0;
        let mut io_first = false;
        while !(poster.is_finished() && queued.load(SeqCst) == 0) {
            if queued.load(SeqCst) == 0 {
                std::hint::spin_loop();
                continue;
            }
            queued.fetch_sub(1, SeqCst);
            slot.state.start();
            turns += 1;
            loop {
                if let Some(t) = slot.pop(std::mem::take(&mut io_first)) {
                    run(t);
                    io_first = turns % 2 == 0;
                    continue;
                }
                if slot.state.try_idle() {
                    break;
                }
            }
        }
        poster.join().unwrap();
        let log = log.lock().unwrap();
        assert_eq!(log.len() as u32, N, "callbacks were lost");
        let cpu: Vec<u32> = log.iter().copied().filter(|&i| i % 3 == 0).collect();
        let io: Vec<u32> = log.iter().copied().filter(|&i| i % 3 != 0).collect();
        assert!(
            cpu.windows(2).all(|w| w[0] < w[1]),
            "cpucb lane out of order"
        );
        assert!(io.windows(2).all(|w| w[0] < w[1]), "I/O lane out of order");
        assert!(slot.is_empty());
    }
}
