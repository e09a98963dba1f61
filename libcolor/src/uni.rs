//! The uniprocessor flavour: the classic libasync loop on one thread.
//!
//! Its run queue lives in a thread-local `RefCell` on the loop thread, so scheduling from a
//! callback (the hot path) touches no atomic read-modify-write and no lock. Only work posted
//! from other threads (helper completions, other programs' threads) goes through a locked
//! inbox and the mio waker. This is the baseline every speedup is measured against, and what
//! each process of an N-copy server runs.

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::color::Color;
use crate::core::{Common, Core, nanos, poll_turn, run_task};
use crate::error::Error;
use crate::handle::Handle;
use crate::queue::RunQueue;
use crate::reactor::lock;
use crate::task::{Task, Work};

const AWAKE: u8 = 0;
const POLLING: u8 = 2;

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The run queue of the uniprocessor runtime running on this thread, tagged with its id.
    static LOCAL: RefCell<Option<(u64, RunQueue)>> = const { RefCell::new(None) };
}

pub(crate) struct Uni {
    common: Common,
    id: u64,
    window: usize,
    inbox: Mutex<Vec<Task>>,
    inbox_full: AtomicBool,
    sleep: AtomicU8,
    /// Depth of the local queue, published for observability only (single writer).
    depth: AtomicUsize,
}

impl Uni {
    pub(crate) fn new(common: Common, window: usize) -> Uni {
        let uni = Uni {
            common,
            id: NEXT_ID.fetch_add(1, Relaxed),
            window,
            inbox: Mutex::new(Vec::new()),
            inbox_full: AtomicBool::new(false),
            sleep: AtomicU8::new(AWAKE),
            depth: AtomicUsize::new(0),
        };
        uni.post_remote(Task::poll());
        uni
    }

    fn post_remote(&self, task: Task) {
        lock(&self.inbox).push(task);
        self.inbox_full.store(true, SeqCst);
        if self.sleep.load(SeqCst) == POLLING {
            self.common.reactor.wake();
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
            *local = Some((self.id, RunQueue::default()));
            true
        });
        if !installed {
            return Err(Error::Start(std::io::Error::other(
                "another uniprocessor runtime is already running on this thread",
            )));
        }
        self.event_loop();
        LOCAL.with(|local| {
            if let Some((_, mut queue)) = local.borrow_mut().take() {
                queue.clear();
            }
        });
        lock(&self.inbox).clear();
        self.common.teardown();
        match self.common.take_failure() {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    fn drain_inbox(&self) {
        let posted = std::mem::take(&mut *lock(&self.inbox));
        self.inbox_full.store(false, SeqCst);
        self.with_queue(|queue| {
            for task in posted {
                queue.push(task);
            }
        });
    }

    fn with_queue<R>(&self, f: impl FnOnce(&mut RunQueue) -> R) -> R {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            let (_, queue) = local.as_mut().expect("only called on the loop thread");
            f(queue)
        })
    }

    fn event_loop(&self) {
        let counters = self.common.stats.worker(0);
        let mut last: Option<Color> = None;
        let mut clock = Instant::now();
        while !self.common.is_stopping() {
            if self.inbox_full.load(Relaxed) {
                self.drain_inbox();
            }
            let (task, more) = self.with_queue(|queue| {
                let task = queue.pick(last, self.window, |_| false);
                self.depth.store(queue.len(), Relaxed);
                (task, !queue.is_empty())
            });
            let Some(task) = task else {
                // Cannot happen while the poller is queued; recover by re-queuing it.
                self.with_queue(|queue| queue.push(Task::poll()));
                continue;
            };
            if let Work::Poll = task.work {
                let mut may_block = !more;
                if may_block {
                    self.sleep.store(POLLING, SeqCst);
                    if self.inbox_full.load(SeqCst) || self.common.is_stopping() {
                        may_block = false;
                    }
                }
                let started = Instant::now();
                poll_turn(self, may_block);
                self.sleep.store(AWAKE, SeqCst);
                let spent = nanos(started.elapsed());
                if may_block {
                    counters.idled(spent);
                } else {
                    counters.polled(spent);
                }
                self.with_queue(|queue| queue.push(Task::poll()));
                clock = Instant::now();
            } else {
                let color = task.color;
                clock = run_task(self, counters, task, clock);
                last = Some(color);
            }
        }
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
                && *id == self.id
                && let Some(mut task) = task.take()
            {
                let depth = queue.len();
                if task.shed_if(depth >= self.common.overload_threshold) {
                    self.common.stats.worker(0).shed_one();
                }
                queue.push(task);
                self.common.stats.worker(0).saw_depth(depth + 1);
            }
        });
        if let Some(mut task) = task {
            let depth = self.depth.load(Relaxed) + lock(&self.inbox).len();
            if task.shed_if(depth >= self.common.overload_threshold) {
                self.common.stats.worker(0).shed_one();
            }
            self.post_remote(task);
        }
    }

    fn wake_poller(&self) {
        if self.sleep.load(SeqCst) == POLLING {
            self.common.reactor.wake();
        }
    }

    fn wake_all(&self) {
        self.common.reactor.wake();
    }

    fn queue_depths(&self) -> Vec<usize> {
        vec![self.depth.load(Relaxed) + lock(&self.inbox).len()]
    }

    fn queue_depth_for(&self, _color: Color) -> usize {
        self.queue_depths()[0]
    }

    fn workers(&self) -> usize {
        1
    }
}
