//! A `loom` model of the scheduling protocol: post, queue, steal, park, run, with two
//! workers and a producer, over the real slot state machine ([`crate::state::SlotState`],
//! compiled against loom's atomics). Run queues and the slot FIFO are modelled as loom
//! mutexes around `VecDeque`s (crossbeam's deques are not loom-instrumented; their
//! linearizability is crossbeam's to prove): what is checked is the protocol on top of them —
//! exclusion (no two workers run the slot), per-color FIFO order, no lost callback and no lost
//! wakeup (loom reports a deadlock if a worker sleeps forever with work queued). A turn's
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
const PARKED: usize = 1;

struct Parker {
    token: Mutex<bool>,
    cv: Condvar,
}

impl Parker {
    fn new() -> Parker {
        Parker {
            token: Mutex::new(false),
            cv: Condvar::new(),
        }
    }
    fn park(&self) {
        let mut token = self.token.lock().unwrap();
        while !*token {
            token = self.cv.wait(token).unwrap();
        }
        *token = false;
    }
    fn unpark(&self) {
        *self.token.lock().unwrap() = true;
        self.cv.notify_one();
    }
}

struct Model {
    state: SlotState,
    fifo: Mutex<VecDeque<usize>>,
    queues: [Mutex<VecDeque<()>>; 2],
    sleep: [AtomicUsize; 2],
    parkers: [Parker; 2],
    idle: AtomicUsize,
    running: AtomicBool,
    next: AtomicUsize,
    total: usize,
}

impl Model {
    fn post(&self, task: usize) {
        self.fifo.lock().unwrap().push_back(task);
        if self.state.notify() {
            // Home worker 0.
            self.queues[0].lock().unwrap().push_back(());
            fence(SeqCst);
            if self.idle.load(SeqCst) > 0 {
                self.wake_one();
            }
        }
    }

    fn wake_one(&self) {
        for w in 0..2 {
            if self.sleep[w]
                .compare_exchange(PARKED, AWAKE, SeqCst, Relaxed)
                .is_ok()
            {
                self.parkers[w].unpark();
                return;
            }
        }
    }

    /// Own queue first, then steal from the other's.
    fn find(&self, me: usize) -> bool {
        self.queues[me].lock().unwrap().pop_front().is_some()
            || self.queues[1 - me].lock().unwrap().pop_front().is_some()
    }

    fn has_work(&self) -> bool {
        self.queues.iter().any(|q| !q.lock().unwrap().is_empty())
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
                for p in &self.parkers {
                    p.unpark();
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
            fence(SeqCst);
            if self.idle.load(SeqCst) > 0 {
                self.wake_one();
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
            self.sleep[me].store(PARKED, SeqCst);
            self.idle.fetch_add(1, SeqCst);
            fence(SeqCst);
            if !self.has_work() && self.next.load(SeqCst) < self.total {
                self.parkers[me].park();
            }
            self.sleep[me].store(AWAKE, SeqCst);
            self.idle.fetch_sub(1, SeqCst);
        }
    }
}

#[test]
fn loom_model_post_steal_park_run() {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(|| {
        let model = Arc::new(Model {
            state: SlotState::new(),
            fifo: Mutex::new(VecDeque::new()),
            queues: [Mutex::new(VecDeque::new()), Mutex::new(VecDeque::new())],
            sleep: [AtomicUsize::new(AWAKE), AtomicUsize::new(AWAKE)],
            parkers: [Parker::new(), Parker::new()],
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
        assert_eq!(model.next.load(SeqCst), 3);
    });
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
