//! What both runtime flavours share: the reactor, timers, helper pool, statistics and the
//! stop/failure state, plus the `Core` trait through which a `Handle` reaches a flavour.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::color::Color;
use crate::error::{Error, panic_message};
use crate::pool::Pool;
use crate::reactor::{Reactor, lock};
use crate::stats::{StatsBoard, WorkerCounters};
use crate::task::{Lane, Task, Work};
use crate::timer::Timers;

pub(crate) struct Common {
    pub(crate) reactor: Reactor,
    pub(crate) timers: Timers,
    pub(crate) pool: Pool,
    pub(crate) stats: StatsBoard,
    pub(crate) stopping: AtomicBool,
    failure: Mutex<Option<Error>>,
    /// Queue depth past which a task's drop alternative replaces it.
    pub(crate) overload_threshold: usize,
    pub(crate) signals: Mutex<Vec<signal_hook::SigId>>,
}

impl Common {
    pub(crate) fn new(
        workers: usize,
        helpers: usize,
        helper_queue: usize,
        overload_threshold: Option<usize>,
    ) -> Result<Common, Error> {
        Ok(Common {
            reactor: Reactor::new().map_err(Error::Start)?,
            timers: Timers::default(),
            pool: Pool::new(helpers, helper_queue).map_err(Error::Start)?,
            stats: StatsBoard::new(workers),
            stopping: AtomicBool::new(false),
            failure: Mutex::new(None),
            overload_threshold: overload_threshold.unwrap_or(usize::MAX),
            signals: Mutex::new(Vec::new()),
        })
    }

    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Records the first failure and asks the runtime to stop.
    pub(crate) fn fail(&self, error: Error) {
        tracing::error!(%error, "libcolor: stopping the runtime");
        let mut failure = lock(&self.failure);
        if failure.is_none() {
            *failure = Some(error);
        }
        self.stopping.store(true, Ordering::Release);
    }

    pub(crate) fn take_failure(&self) -> Option<Error> {
        lock(&self.failure).take()
    }

    /// Releases everything the runtime still holds for the program (pending timers, I/O
    /// callbacks, signal hooks, helper threads), breaking cycles through the `Handle`s that
    /// callbacks captured.
    pub(crate) fn teardown(&self) -> usize {
        for id in std::mem::take(&mut *lock(&self.signals)) {
            signal_hook::low_level::unregister(id);
        }
        self.pool.shutdown();
        self.reactor.clear();
        self.timers.clear()
    }
}

/// A runtime flavour as seen by `Handle` and by the shared machinery.
pub(crate) trait Core: Send + Sync + 'static {
    fn common(&self) -> &Common;
    /// Puts a task on the queue of the worker that owns its color.
    fn schedule(&self, task: Task);
    /// Interrupts a blocking poll so it sees a new earliest timer or a stop request.
    fn wake_poller(&self);
    /// Wakes every sleeping worker (for stop).
    fn wake_all(&self);
    fn queue_depths(&self) -> Vec<usize>;
    fn queue_depth_for(&self, color: Color) -> usize;
    fn workers(&self) -> usize;
}

/// Runs a non-poller task with panic containment and accounts its time. `started` is when the
/// task began (the end of the previous one); returns the time it ended.
pub(crate) fn run_task(
    core: &dyn Core,
    counters: &WorkerCounters,
    task: Task,
    started: Instant,
) -> Instant {
    let color = task.color;
    let outcome = catch_unwind(AssertUnwindSafe(|| match task.work {
        Work::Call(callback) => callback(),
        Work::Io(entry, dir) => {
            if let Some(again) = entry.run(dir) {
                core.schedule(again);
            }
        }
        Work::Poll => unreachable!("the poller is run by the worker loop, not run_task"),
    }));
    if let Err(payload) = outcome {
        core.common().fail(Error::CallbackPanicked {
            color,
            message: panic_message(payload.as_ref()),
        });
        core.wake_all();
    }
    let ended = Instant::now();
    counters.ran(color == Color::DEFAULT, nanos(ended - started));
    ended
}

/// One turn of the poller: poll (blocking up to the next timer if `may_block`), then schedule
/// due timers.
pub(crate) fn poll_turn(core: &dyn Core, may_block: bool) {
    let common = core.common();
    let timeout = if may_block {
        common
            .timers
            .next_deadline()
            .map(|at| at.saturating_duration_since(Instant::now()))
    } else {
        Some(Duration::ZERO)
    };
    if let Err(err) = common.reactor.poll(timeout, core) {
        common.fail(Error::Poll(err));
        core.wake_all();
        return;
    }
    for (color, callback) in common.timers.take_due(Instant::now()) {
        core.schedule(Task::call(color, Lane::Io, callback));
    }
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
