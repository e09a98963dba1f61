//! A `loom` model of the scheduling protocol: post, queue, steal, sleep in the worker's own
//! epoll, take over the other worker's epoll, run, with two workers and a producer, over the
//! real slot state machine ([`crate::state::SlotState`],
//! compiled against loom's atomics). Run queues and the slot FIFO are modelled as loom
//! mutexes around `VecDeque`s (crossbeam's deques are not loom-instrumented; their
//! linearizability is crossbeam's to prove): what is checked is the protocol on top of them —
//! exclusion (no two workers run the slot), per-color FIFO order, no lost callback and no lost
//! wakeup (loom reports a deadlock if a worker sleeps forever with work queued), also when
//! the other worker's takeover poll discards the wakes it finds in a worker's epoll. A turn's
//! look at a lane before popping it (`Slot::pop`: `is_empty`, then `pop`) is, with the owner
//! the lane's only consumer, the modelled `pop_front` that finds the FIFO empty.
//!
//! The same file models the uniprocessor inbox and shows the defect of issue 10: clearing the
//! inbox flag after releasing the lock loses a wakeup (loom finds the deadlock).
//!
//! Run (about a minute on 2 cores):
//! `RUSTFLAGS="--cfg loom" cargo test -p libcolor --lib --release loom_model`

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::*, fence};
use loom::sync::{Arc, Condvar, Mutex};
use std::collections::VecDeque;

use crate::state::SlotState;

const AWAKE: usize = 0;
const POLLING: usize = 1;

/// A worker's epoll as far as waking goes: the right to poll it (`poll`) and its waker's
/// pending edge (`edge`: an eventfd write, which needs no lock to make). Whoever polls it
/// consumes the edge: the owner's blocking poll waits for one; the other worker's
/// non-blocking takeover poll discards it (it only looks for I/O events).
///
/// The right to poll is a flag rather than a loom mutex, so that a worker that stops where
/// it would block (`Model::probe`) keeps it.
struct Epoll {
    held: AtomicBool,
    edge: Mutex<bool>,
    cv: Condvar,
}

impl Epoll {
    fn new() -> Epoll {
        Epoll {
            held: AtomicBool::new(false),
            edge: Mutex::new(false),
            cv: Condvar::new(),
        }
    }
    /// Takes the right to poll if it is free.
    fn try_begin(&self) -> bool {
        self.held
            .compare_exchange(false, true, SeqCst, Relaxed)
            .is_ok()
    }
    /// Takes the right to poll, waiting while the other worker holds it.
    fn begin(&self) {
        while !self.try_begin() {
            loom::thread::yield_now();
        }
    }
    fn end(&self) {
        self.held.store(false, SeqCst);
    }
    /// The waker.
    fn wake(&self) {
        *self.edge.lock().unwrap() = true;
        self.cv.notify_one();
    }
    /// A blocking poll (the caller holds `poll`).
    fn wait(&self) {
        let mut edge = self.edge.lock().unwrap();
        while !*edge {
            edge = self.cv.wait(edge).unwrap();
        }
        *edge = false;
    }
    /// A non-blocking poll (the caller should hold the right to poll): takes a pending
    /// wake, if any, and says whether there was one.
    fn discard(&self) -> bool {
        std::mem::take(&mut *self.edge.lock().unwrap())
    }
}

struct Model {
    state: SlotState,
    fifo: Mutex<VecDeque<usize>>,
    queues: [Mutex<VecDeque<()>>; 2],
    sleep: [AtomicUsize; 2],
    epolls: [Epoll; 2],
    /// Whether a takeover poll takes the epoll's lock (false: the defect loom must find).
    takeover_locks: bool,
    /// Stealing on (the color is homed on worker 0, either worker runs it), or off (homed
    /// on worker 1, which alone runs it: worker 0 only takes over worker 1's epoll).
    steal: bool,
    /// A worker stops where it would block, keeping its epoll and its announcement (loom
    /// aborts, rather than panics, on a deadlock with the worker's state on its stack, so a
    /// lost wake is checked by an assertion at the end instead, as in `uni_inbox`).
    probe: bool,
    slept: [AtomicBool; 2],
    idle: AtomicUsize,
    running: AtomicBool,
    next: AtomicUsize,
    total: usize,
}

impl Model {
    fn post(&self, task: usize) {
        self.fifo.lock().unwrap().push_back(task);
        if self.state.notify() {
            let home = self.home();
            self.queues[home].lock().unwrap().push_back(());
            fence(SeqCst);
            if self.steal {
                if self.idle.load(SeqCst) > 0 {
                    self.wake_one();
                }
            } else {
                self.wake(home); // `Mp::notify_worker`
            }
        }
    }

    fn home(&self) -> usize {
        if self.steal { 0 } else { 1 }
    }

    fn wake(&self, w: usize) {
        if self.sleep[w]
            .compare_exchange(POLLING, AWAKE, SeqCst, Relaxed)
            .is_ok()
        {
            self.epolls[w].wake();
        }
    }

    fn wake_one(&self) {
        for w in 0..2 {
            if self.sleep[w]
                .compare_exchange(POLLING, AWAKE, SeqCst, Relaxed)
                .is_ok()
            {
                self.epolls[w].wake();
                return;
            }
        }
    }

    /// Own queue first, then (stealing) the other's.
    fn find(&self, me: usize) -> bool {
        self.queues[me].lock().unwrap().pop_front().is_some()
            || (self.steal && self.queues[1 - me].lock().unwrap().pop_front().is_some())
    }

    fn has_work(&self, me: usize) -> bool {
        !self.queues[me].lock().unwrap().is_empty()
            || (self.steal && !self.queues[1 - me].lock().unwrap().is_empty())
    }

    /// A turn with a budget of one callback, as `Mp::run_slot`.
    fn run_slot(&self, me: usize) {
        self.state.start();
        loop {
            let task = self.fifo.lock().unwrap().pop_front();
            let Some(task) = task else {
                if self.state.try_idle() {
                    return;
                }
                continue;
            };
            assert!(
                !self.running.swap(true, SeqCst),
                "two workers ran the color"
            );
            assert_eq!(self.next.load(SeqCst), task, "the color ran out of order");
            self.next.store(task + 1, SeqCst);
            self.running.store(false, SeqCst);
            if task + 1 == self.total {
                // Done: let the other worker see it.
                for e in &self.epolls {
                    e.wake();
                }
            }
            if self.fifo.lock().unwrap().is_empty() {
                if self.state.try_idle() {
                    return;
                }
                continue;
            }
            self.state.yield_now();
            self.queues[me].lock().unwrap().push_back(());
            if self.steal {
                fence(SeqCst);
                if self.idle.load(SeqCst) > 0 {
                    self.wake_one();
                }
            }
            return;
        }
    }

    fn worker(&self, me: usize) {
        while self.next.load(SeqCst) < self.total {
            if self.find(me) {
                self.run_slot(me);
                continue;
            }
            // `Mp::poll_stalled`, in the worst case: the other worker's epoll is always taken
            // over when its owner does not hold it.
            let other = &self.epolls[1 - me];
            if self.takeover_locks {
                if other.try_begin() {
                    other.discard();
                    other.end();
                }
            } else {
                other.discard();
            }
            // `Mp::idle`: take the own epoll, then announce, re-check, block.
            self.epolls[me].begin();
            self.sleep[me].store(POLLING, SeqCst);
            self.idle.fetch_add(1, SeqCst);
            fence(SeqCst);
            if !self.has_work(me) && self.next.load(SeqCst) < self.total {
                if !self.probe {
                    self.epolls[me].wait();
                } else if !self.epolls[me].discard() {
                    // Blocked from here on: a wake would leave its edge in the epoll.
                    self.slept[me].store(true, SeqCst);
                    return;
                }
            }
            self.sleep[me].store(AWAKE, SeqCst);
            self.idle.fetch_sub(1, SeqCst);
            self.epolls[me].end();
        }
    }
}

fn post_steal_sleep_run(steal: bool, probe: bool, takeover_locks: bool) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let model = Arc::new(Model {
            state: SlotState::new(),
            fifo: Mutex::new(VecDeque::new()),
            queues: [Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())],
            sleep: [AtomicUsize::new(AWAKE), AtomicUsize::new(AWAKE)],
            epolls: [Epoll::new(), Epoll::new()],
            takeover_locks,
            steal,
            probe,
            slept: [AtomicBool::new(false), AtomicBool::new(false)],
            idle: AtomicUsize::new(0),
            running: AtomicBool::new(false),
            next: AtomicUsize::new(0),
            total: 3,
        });
        let workers: Vec<_> = (0..2)
            .map(|me| {
                let m = model.clone();
                loom::thread::spawn(move || m.worker(me))
            })
            .collect();
        // The producer: three callbacks of the one color, racing the workers.
        model.post(0);
        model.post(1);
        model.post(2);
        for w in workers {
            w.join().unwrap();
        }
        for w in 0..2 {
            let stranded = !model.queues[w].lock().unwrap().is_empty();
            let woken = *model.epolls[w].edge.lock().unwrap();
            assert!(
                !(model.slept[w].load(SeqCst) && stranded && !woken),
                "worker {w} slept with its color queued and nobody woke it"
            );
        }
        if !probe {
            assert_eq!(model.next.load(SeqCst), 3);
        }
    });
}

#[test]
fn loom_model_post_steal_sleep_in_own_epoll_take_over_run() {
    post_steal_sleep_run(true, false, true);
}

/// Without stealing only the home worker runs the color, so a lost wake of it is not masked
/// by the other worker running the callbacks.
#[test]
fn loom_model_post_sleep_in_own_epoll_take_over_run_without_stealing() {
    post_steal_sleep_run(false, false, true);
    post_steal_sleep_run(false, true, true);
}

/// A takeover poll that does not hold the epoll can discard the wake of a worker blocked in
/// it: loom finds the worker asleep with its color queued.
#[test]
#[should_panic(expected = "nobody woke it")]
fn loom_model_a_takeover_without_the_epoll_loses_a_wakeup() {
    post_steal_sleep_run(false, true, false);
}

/// The uniprocessor inbox: a loop thread that drains an inbox and otherwise sleeps, and a
/// poster on another thread. `clear_under_lock: false` is the defect of issue 10. Instead of
/// blocking (which loom would report as a deadlock by aborting), the loop stops where it would
/// sleep, and the model asserts that it never sleeps with work in the inbox unless the poster
/// saw it polling (and so woke it). (The fences mirror `uni.rs`: loom does not give plain
/// `SeqCst` stores and loads their total order, so the store-then-load handshake needs them to
/// be modelled faithfully.)
fn uni_inbox(clear_under_lock: bool) {
    loom::model(move || {
        let inbox = Arc::new(Mutex::new(Vec::<usize>::new()));
        let full = Arc::new(AtomicBool::new(false));
        let polling = Arc::new(AtomicBool::new(false));
        let woken = Arc::new(AtomicBool::new(false));
        let poster = {
            let (inbox, full, polling, woken) =
                (inbox.clone(), full.clone(), polling.clone(), woken.clone());
            loom::thread::spawn(move || {
                for task in 0..2 {
                    inbox.lock().unwrap().push(task);
                    full.store(true, SeqCst);
                    fence(SeqCst);
                    if polling.load(SeqCst) {
                        woken.store(true, SeqCst); // the mio waker
                    }
                }
            })
        };
        let mut got = 0;
        let mut slept = false;
        while got < 2 {
            if full.load(SeqCst) {
                let posted = if clear_under_lock {
                    let mut guard = inbox.lock().unwrap();
                    full.store(false, SeqCst);
                    std::mem::take(&mut *guard)
                } else {
                    let posted = std::mem::take(&mut *inbox.lock().unwrap());
                    full.store(false, SeqCst);
                    posted
                };
                got += posted.len();
                continue;
            }
            polling.store(true, SeqCst);
            fence(SeqCst);
            if !full.load(SeqCst) {
                slept = true; // would block in poll here
                break;
            }
            polling.store(false, SeqCst);
        }
        poster.join().unwrap();
        let stranded = !inbox.lock().unwrap().is_empty();
        assert!(
            !(slept && stranded && !woken.load(SeqCst)),
            "the loop slept with a post in its inbox and nobody woke it"
        );
    });
}

#[test]
fn loom_model_uni_inbox_flag_cleared_under_the_lock() {
    uni_inbox(true);
}

#[test]
#[should_panic(expected = "nobody woke it")]
fn loom_model_uni_inbox_flag_cleared_after_the_lock_loses_a_wakeup() {
    uni_inbox(false);
}
