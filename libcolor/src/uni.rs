//! The uniprocessor flavour: the classic libasync loop on one thread.
//!
//! Its run queue (a FIFO per color slot and a queue of runnable slots, as in the
//! multiprocessor flavour) lives in a thread-local `RefCell` on the loop thread, so scheduling
//! from a callback (the hot path) touches no atomic read-modify-write and no lock. Only work
//! posted from other threads (helper completions, other programs' threads) goes through a
//! locked inbox and the mio waker. This is the baseline every speedup is measured against,
//! and what each process of an N-copy server runs.
//!
//! The loop runs in rounds: each slot runnable at the start of a round gets one turn (up to
//! the same budget as a multiprocessor worker), then the loop polls: without blocking if work
//! remains, until the next timer otherwise. Nothing can starve the poller, timers or signals.

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::*, fence};

use parking_lot::Mutex;
use std::time::Instant;

use crate::color::Color;
use crate::core::{CLOCK_EVERY, Common, Core, poll_once, poll_timeout, run_task};
use crate::error::Error;
use crate::handle::Handle;
use crate::mp::{BUDGET, TURN_TIME};
use crate::queue::LocalQueue;
use crate::stats::WorkerClock;
use crate::task::Task;

const AWAKE: u8 = 0;
const POLLING: u8 = 2;

thread_local! {
    /// The run queue of the uniprocessor runtime running on this thread, tagged with its id.
    static LOCAL: RefCell<Option<(u64, LocalQueue)>> = const { RefCell::new(None) };
}

pub(crate) struct Uni {
    common: Common,
    inbox: Mutex<Vec<Task>>,
    inbox_full: AtomicBool,
    sleep: AtomicU8,
    /// Depth of the local queue, published for observability only (single writer).
    depth: AtomicUsize,
}

impl Uni {
    pub(crate) fn new(common: Common) -> Uni {
        Uni {
            common,
            inbox: Mutex::new(Vec::new()),
            inbox_full: AtomicBool::new(false),
            sleep: AtomicU8::new(AWAKE),
            depth: AtomicUsize::new(0),
        }
    }

    fn post_remote(&self, task: Task) {
        self.inbox.lock().push(task);
        self.inbox_full.store(true, SeqCst);
        fence(SeqCst);
        if self.sleep.load(SeqCst) == POLLING {
            self.common.reactor.wake(0);
        }
    }

    /// Runs the loop on the calling thread until the runtime stops.
    pub(crate) fn run(self: &Arc<Self>, pin: Option<usize>) -> Result<(), Error> {
        let _current = crate::handle::enter(Handle { core: self.clone() });
        if let Some(cpu) = pin
            && !crate::runtime::pin_current_thread(cpu)
        {
            return Err(Error::Pin { worker: 0, cpu });
        }
        let installed = LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            if local.is_some() {
                return false;
            }
            *local = Some((self.common.id, LocalQueue::default()));
            true
        });
        if !installed {
            return Err(Error::Start(std::io::Error::other(
                "another uniprocessor runtime is already running on this thread",
            )));
        }
        self.event_loop();
        let dropped = LOCAL.with(|local| local.borrow_mut().take());
        if let Some((_, mut queue)) = dropped {
            queue.clear();
        }
        self.common.teardown();
        drop(std::mem::take(&mut *self.inbox.lock()));
        match self.common.take_failure() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Moves work posted by other threads onto the local queue. The flag is cleared under
    /// the inbox lock: a post that lands after the take sets it again after its push, so it
    /// is seen before the loop next decides to block (clearing it after releasing the lock
    /// could erase that post's flag and block in poll with work queued).
    fn drain_inbox(&self) {
        let posted = {
            let mut inbox = self.inbox.lock();
            self.inbox_full.store(false, SeqCst);
            std::mem::take(&mut *inbox)
        };
        self.with_queue(|queue| {
            for task in posted {
                queue.push(task);
            }
        });
    }

    fn with_queue<R>(&self, f: impl FnOnce(&mut LocalQueue) -> R) -> R {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            let (_, queue) = local.as_mut().expect("only called on the loop thread");
            f(queue)
        })
    }

    fn event_loop(&self) {
        let mut clock = WorkerClock::new(self.common.stats.worker(0));
        while !self.common.is_stopping() {
            if self.inbox_full.load(SeqCst) {
                self.drain_inbox();
            }
            let turns = self.with_queue(|q| q.runnable());
            for _ in 0..turns {
                let Some(slot) = self.with_queue(|q| q.next_slot()) else {
                    break;
                };
                if !self.turn(slot, &mut clock) {
                    return;
                }
            }
            clock.maybe_flush();
            self.poll(&mut clock);
        }
    }

    /// One turn of `slot`; false if the runtime is stopping.
    fn turn(&self, slot: usize, clock: &mut WorkerClock<'_>) -> bool {
        let turn_end = clock.now + TURN_TIME;
        let mut io_first = self.with_queue(|q| {
            clock.counters().saw_depth(q.slot_len(slot));
            q.take_io_first(slot)
        });
        let mut ran = 0;
        let mut unclocked = 0;
        loop {
            let Some(task) = self.with_queue(|q| q.pop(slot, std::mem::take(&mut io_first))) else {
                if unclocked > 0 {
                    clock.ran(slot, unclocked, Instant::now());
                }
                self.with_queue(|q| q.end_turn(slot, false));
                return true;
            };
            run_task(self, clock, task);
            ran += 1;
            unclocked += 1;
            if self.common.is_stopping() {
                clock.ran(slot, unclocked, Instant::now());
                return false;
            }
            if unclocked == CLOCK_EVERY {
                clock.ran(slot, unclocked, Instant::now());
                unclocked = 0;
            }
            if ran >= BUDGET || clock.now >= turn_end {
                if unclocked > 0 {
                    clock.ran(slot, unclocked, Instant::now());
                }
                self.with_queue(|q| q.end_turn(slot, true));
                return true;
            }
        }
    }

    /// The poller's turn: non-blocking while work is queued, else until the next timer.
    fn poll(&self, clock: &mut WorkerClock<'_>) {
        let Some(held) = self.common.reactor.try_begin(0) else {
            return; // only this thread polls; cannot happen
        };
        let busy = self.with_queue(|q| {
            self.depth.store(q.len(), Relaxed);
            q.runnable() > 0
        });
        let mut may_block = !busy;
        if may_block {
            self.sleep.store(POLLING, SeqCst);
            fence(SeqCst);
            if self.inbox_full.load(SeqCst) || self.common.is_stopping() {
                may_block = false;
            }
        }
        if may_block {
            clock.idle_start();
        } else {
            clock.now = std::time::Instant::now();
        }
        // Released before dispatching: a ready callback is scheduled onto the local queue.
        let timeout = poll_timeout(&self.common, may_block);
        self.sleep_poll(held, timeout);
        if may_block {
            clock.idle_end();
        } else {
            clock.polled();
        }
    }

    fn sleep_poll(
        &self,
        held: crate::reactor::PollerGuard<'_>,
        timeout: Option<std::time::Duration>,
    ) {
        // `poll_once` releases the poller after polling, before dispatching.
        let sleep = &self.sleep;
        struct Awake<'a>(&'a AtomicU8);
        impl Drop for Awake<'_> {
            fn drop(&mut self) {
                self.0.store(AWAKE, SeqCst);
            }
        }
        let _awake = Awake(sleep);
        poll_once(self, held, timeout);
    }
}

impl Core for Uni {
    fn common(&self) -> &Common {
        &self.common
    }

    fn schedule(&self, task: Task) {
        let mut task = Some(task);
        LOCAL.with(|local| {
            if let Ok(mut local) = local.try_borrow_mut()
                && let Some((id, queue)) = local.as_mut()
                && *id == self.common.id
                && let Some(mut task) = task.take()
            {
                if task.on_overload.is_some() {
                    let depth = queue.slot_len(task.color.slot());
                    task.shed_if(depth >= self.common.overload_threshold);
                }
                queue.push(task);
            }
        });
        if let Some(mut task) = task {
            if task.on_overload.is_some() {
                let depth = self.depth.load(Relaxed) + self.inbox.lock().len();
                task.shed_if(depth >= self.common.overload_threshold);
            }
            self.post_remote(task);
        }
    }

    fn wake_poller(&self) {
        if self.sleep.load(SeqCst) == POLLING {
            self.common.reactor.wake(0);
        }
    }

    fn wake_all(&self) {
        self.common.reactor.wake(0);
    }

    fn queue_depths(&self) -> Vec<usize> {
        vec![self.depth.load(Relaxed) + self.inbox.lock().len()]
    }

    fn queue_depth_for(&self, _color: Color) -> usize {
        self.queue_depths()[0]
    }

    fn workers(&self) -> usize {
        1
    }

    fn reactor_for(&self, _color: Option<Color>) -> usize {
        0
    }
}
