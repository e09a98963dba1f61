//! The multiprocessor flavour: one worker thread per CPU, a run queue per worker, the
//! 1024-entry color table, and stealing of whole colors (paper 001, section 4.2).
//!
//! Why a mutex per queue rather than crossbeam-deque: a steal must take *every* queued task of
//! a color that is not running, keep their order and retarget the color table atomically with
//! respect to anyone scheduling that color; and any thread may push onto any worker's queue.
//! crossbeam's deques steal single tasks (or halves) from one end and only let the owner push,
//! so they cannot express either rule. A short critical section on an uncontended futex mutex
//! is what the original used too (spin locks on the run queues, section 4.3).
//!
//! Locking rules: a queue's lock covers its tasks and, for the color table, the entries that
//! map to it: the table entry of a slot only changes while both the old and the new owner's
//! locks are held (taken in index order), and a scheduler re-checks the entry under the lock it
//! took, so a task can never land on a queue that no longer owns its color.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use crossbeam_utils::CachePadded;
use crossbeam_utils::sync::{Parker, Unparker};

use crate::color::{COLOR_SLOTS, Color};
use crate::core::{Common, Core, nanos, poll_turn, run_task};
use crate::error::Error;
use crate::handle::Handle;
use crate::queue::RunQueue;
use crate::reactor::lock;
use crate::task::{Task, Work};

/// How the runtime arranges its run queues: the steps of paper 001's Table 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QueueMode {
    /// One queue shared by all workers (the paper's "base" configuration).
    Shared,
    /// One queue per worker, colors mapped to workers through the color table.
    PerWorker,
}

const AWAKE: u8 = 0;
const PARKED: u8 = 1;
const POLLING: u8 = 2;
const NOT_RUNNING: usize = usize::MAX;
/// An idle worker is woken to steal when a queue has at least this many tasks waiting.
const STEAL_WAKE_DEPTH: usize = 2;
/// An idle worker only steals from a queue at least this deep. A queue holding one task will
/// run it as soon as its worker is free; moving that color (often the poller's color 0, whose
/// task is always queued) to another CPU costs its cache state and, in a server, makes colors
/// ping-pong between idle workers (cohort scheduling's argument for stealing thresholds,
/// paper 004).
const STEAL_MIN_DEPTH: usize = 2;

struct WorkerQueue {
    tasks: Mutex<RunQueue>,
    /// Number of queued tasks, readable without the lock (observability, steal choice).
    depth: AtomicUsize,
}

struct WorkerState {
    sleep: AtomicU8,
    /// The color slot this worker is running, or `NOT_RUNNING`; written under its queue's
    /// lock when a task is picked, so a thief holding that lock sees it.
    running_slot: AtomicUsize,
    unparker: Unparker,
}

pub(crate) struct Mp {
    common: Common,
    queues: Box<[CachePadded<WorkerQueue>]>,
    table: Box<[AtomicUsize]>,
    workers: Box<[CachePadded<WorkerState>]>,
    mode: QueueMode,
    steal: bool,
    window: usize,
    idle_workers: AtomicUsize,
    /// Set once the poller task has been queued, so `run` queues exactly one.
    poller_started: AtomicBool,
}

pub(crate) struct MpConfig {
    pub(crate) workers: usize,
    pub(crate) mode: QueueMode,
    pub(crate) steal: bool,
    pub(crate) window: usize,
}

impl Mp {
    pub(crate) fn new(config: MpConfig, common: Common) -> (Arc<Mp>, Vec<Parker>) {
        let workers = config.workers.max(1);
        let queue_count = match config.mode {
            QueueMode::Shared => 1,
            QueueMode::PerWorker => workers,
        };
        let parkers: Vec<Parker> = (0..workers).map(|_| Parker::new()).collect();
        let mp = Mp {
            common,
            queues: (0..queue_count)
                .map(|_| {
                    CachePadded::new(WorkerQueue {
                        tasks: Mutex::new(RunQueue::default()),
                        depth: AtomicUsize::new(0),
                    })
                })
                .collect(),
            // Round-robin initial distribution: color c runs on worker c mod N.
            table: (0..COLOR_SLOTS)
                .map(|slot| AtomicUsize::new(slot % queue_count))
                .collect(),
            workers: parkers
                .iter()
                .map(|p| {
                    CachePadded::new(WorkerState {
                        sleep: AtomicU8::new(AWAKE),
                        running_slot: AtomicUsize::new(NOT_RUNNING),
                        unparker: p.unparker().clone(),
                    })
                })
                .collect(),
            mode: config.mode,
            steal: config.steal && config.mode == QueueMode::PerWorker && workers > 1,
            window: config.window,
            idle_workers: AtomicUsize::new(0),
            poller_started: AtomicBool::new(false),
        };
        (Arc::new(mp), parkers)
    }

    fn queue_of(&self, worker: usize) -> usize {
        match self.mode {
            QueueMode::Shared => 0,
            QueueMode::PerWorker => worker,
        }
    }

    /// Runs the workers on their own threads until the runtime stops.
    pub(crate) fn run(
        self: &Arc<Self>,
        parkers: Vec<Parker>,
        pin: Option<Vec<usize>>,
    ) -> Result<(), Error> {
        if !self.poller_started.swap(true, AcqRel) {
            self.schedule(Task::poll());
        }
        let mut threads = Vec::with_capacity(parkers.len());
        for (index, parker) in parkers.into_iter().enumerate() {
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
                    mp.worker_loop(index, &parker);
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
        for queue in self.queues.iter() {
            lock(&queue.tasks).clear();
            queue.depth.store(0, Relaxed);
        }
        self.common.teardown();
        match self.common.take_failure() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn worker_loop(&self, index: usize, parker: &Parker) {
        let counters = self.common.stats.worker(index);
        let queue = &self.queues[self.queue_of(index)];
        let me = &self.workers[index];
        let mut last: Option<Color> = None;
        let mut clock = Instant::now();
        while !self.common.is_stopping() {
            let (task, more) = {
                let mut tasks = lock(&queue.tasks);
                let task = match self.mode {
                    QueueMode::PerWorker => tasks.pick(last, self.window, |_| false),
                    QueueMode::Shared => {
                        tasks.pick(last, self.window, |slot| self.running_elsewhere(slot))
                    }
                };
                if let Some(task) = &task {
                    me.running_slot.store(task.color.slot(), Release);
                    queue.depth.store(tasks.len(), Relaxed);
                }
                (task, !tasks.is_empty())
            };
            match task {
                Some(Task {
                    work: Work::Poll, ..
                }) => {
                    self.poller_turn(index, !more);
                    me.running_slot.store(NOT_RUNNING, Release);
                    if !self.common.is_stopping() {
                        self.schedule(Task::poll());
                    }
                    clock = Instant::now();
                }
                Some(task) => {
                    let color = task.color;
                    clock = run_task(self, counters, task, clock);
                    me.running_slot.store(NOT_RUNNING, Release);
                    last = Some(color);
                }
                None => {
                    if !self.try_steal(index) {
                        self.park(index, parker);
                    }
                    clock = Instant::now();
                }
            }
        }
        me.running_slot.store(NOT_RUNNING, Release);
    }

    /// The poller's turn: a non-blocking poll while this worker has other work, a blocking
    /// one only when nothing else can run here (and nothing could be stolen).
    fn poller_turn(&self, index: usize, alone: bool) {
        let counters = self.common.stats.worker(index);
        let me = &self.workers[index];
        let mut may_block = alone && !self.try_steal(index);
        if may_block {
            me.sleep.store(POLLING, SeqCst);
            self.idle_workers.fetch_add(1, SeqCst);
            // Re-check after announcing the sleep: a task scheduled before the announcement
            // saw us awake and did not wake us.
            if self.has_eligible_work(index) || self.common.is_stopping() {
                may_block = false;
            }
        }
        let started = Instant::now();
        poll_turn(self, may_block);
        let spent = nanos(started.elapsed());
        if me.sleep.load(Relaxed) == POLLING {
            me.sleep.store(AWAKE, SeqCst);
            self.idle_workers.fetch_sub(1, SeqCst);
        }
        if may_block {
            counters.idled(spent);
        } else {
            counters.polled(spent);
        }
    }

    fn park(&self, index: usize, parker: &Parker) {
        let me = &self.workers[index];
        me.sleep.store(PARKED, SeqCst);
        self.idle_workers.fetch_add(1, SeqCst);
        let must_stay_awake =
            self.common.is_stopping() || self.has_eligible_work(index) || self.try_steal(index);
        if !must_stay_awake {
            let started = Instant::now();
            parker.park();
            self.common
                .stats
                .worker(index)
                .idled(nanos(started.elapsed()));
        }
        me.sleep.store(AWAKE, SeqCst);
        self.idle_workers.fetch_sub(1, SeqCst);
    }

    /// Whether this worker's queue holds something it could run now. With per-worker queues
    /// that is any task; with the shared queue, a task whose color is not running elsewhere
    /// (a worker that finishes a color picks its successor itself, so skipping blocked
    /// colors cannot strand them).
    fn has_eligible_work(&self, index: usize) -> bool {
        let queue = &self.queues[self.queue_of(index)];
        match self.mode {
            QueueMode::PerWorker => queue.depth.load(SeqCst) > 0,
            QueueMode::Shared => {
                lock(&queue.tasks).has_eligible(|slot| self.running_elsewhere_than(index, slot))
            }
        }
    }

    /// With a shared queue, whether another worker is running a task of `slot`.
    fn running_elsewhere(&self, slot: usize) -> bool {
        self.workers
            .iter()
            .any(|w| w.running_slot.load(Acquire) == slot)
    }

    fn running_elsewhere_than(&self, me: usize, slot: usize) -> bool {
        self.workers
            .iter()
            .enumerate()
            .any(|(i, w)| i != me && w.running_slot.load(Acquire) == slot)
    }

    /// Steals every queued task of one color slot that is not running from the busiest other
    /// worker, and retargets the color table to this worker. Returns whether it stole.
    fn try_steal(&self, thief: usize) -> bool {
        if !self.steal {
            return false;
        }
        let victim = (0..self.queues.len())
            .filter(|&v| v != thief)
            .map(|v| (self.queues[v].depth.load(Relaxed), v))
            .filter(|&(depth, _)| depth >= STEAL_MIN_DEPTH)
            .max()
            .map(|(_, v)| v);
        let Some(victim) = victim else {
            return false;
        };
        let (mut victim_tasks, mut own_tasks) = self.lock_pair(victim, thief);
        let running = self.workers[victim].running_slot.load(Acquire);
        let running = (running != NOT_RUNNING).then_some(running);
        let Some(slot) = victim_tasks.stealable_slot(running) else {
            return false;
        };
        let stolen = victim_tasks.take_slot(slot);
        let count = stolen.len();
        for task in stolen {
            own_tasks.push(task);
        }
        self.table[slot].store(thief, Release);
        self.queues[victim].depth.store(victim_tasks.len(), Relaxed);
        self.queues[thief].depth.store(own_tasks.len(), Relaxed);
        drop(own_tasks);
        drop(victim_tasks);
        self.common.stats.worker(thief).stole(count);
        true
    }

    /// Locks two queues in index order (the only place two queue locks are held at once).
    fn lock_pair(
        &self,
        a: usize,
        b: usize,
    ) -> (MutexGuard<'_, RunQueue>, MutexGuard<'_, RunQueue>) {
        if a < b {
            let first = lock(&self.queues[a].tasks);
            let second = lock(&self.queues[b].tasks);
            (first, second)
        } else {
            let second = lock(&self.queues[b].tasks);
            let first = lock(&self.queues[a].tasks);
            (first, second)
        }
    }

    fn wake(&self, worker: usize) {
        match self.workers[worker].sleep.load(SeqCst) {
            PARKED => self.workers[worker].unparker.unpark(),
            POLLING => self.common.reactor.wake(),
            _ => {}
        }
    }

    fn wake_one_idle(&self, except: usize) {
        if let Some(idle) = (0..self.workers.len())
            .find(|&w| w != except && self.workers[w].sleep.load(SeqCst) != AWAKE)
        {
            self.wake(idle);
        }
    }
}

impl Core for Mp {
    fn common(&self) -> &Common {
        &self.common
    }

    fn schedule(&self, mut task: Task) {
        let slot = task.color.slot();
        loop {
            let owner = self.table[slot].load(Acquire);
            let queue = &self.queues[owner];
            let mut tasks = lock(&queue.tasks);
            if self.table[slot].load(Acquire) != owner {
                continue; // the color was stolen meanwhile; follow it
            }
            let depth = tasks.len();
            if task.shed_if(depth >= self.common.overload_threshold) {
                self.common.stats.worker(owner).shed_one();
            }
            tasks.push(task);
            queue.depth.store(depth + 1, SeqCst);
            drop(tasks);
            self.common.stats.worker(owner).saw_depth(depth + 1);
            match self.mode {
                QueueMode::PerWorker => {
                    if self.workers[owner].sleep.load(SeqCst) != AWAKE {
                        self.wake(owner);
                    } else if self.steal
                        && depth + 1 >= STEAL_WAKE_DEPTH
                        && self.idle_workers.load(SeqCst) > 0
                    {
                        self.wake_one_idle(owner);
                    }
                }
                QueueMode::Shared => {
                    // A blocked poller holds color 0: only it can run color-0 work.
                    if slot == Color::DEFAULT.slot() {
                        self.wake_poller();
                    }
                    if self.idle_workers.load(SeqCst) > 0 {
                        self.wake_one_idle(usize::MAX);
                    }
                }
            }
            return;
        }
    }

    fn wake_poller(&self) {
        if self.workers.iter().any(|w| w.sleep.load(SeqCst) == POLLING) {
            self.common.reactor.wake();
        }
    }

    fn wake_all(&self) {
        for worker in self.workers.iter() {
            worker.unparker.unpark();
        }
        self.common.reactor.wake();
    }

    fn queue_depths(&self) -> Vec<usize> {
        self.queues.iter().map(|q| q.depth.load(Relaxed)).collect()
    }

    fn queue_depth_for(&self, color: Color) -> usize {
        self.queues[self.table[color.slot()].load(Relaxed)]
            .depth
            .load(Relaxed)
    }

    fn workers(&self) -> usize {
        self.workers.len()
    }
}
