//! What both runtime flavours share: the reactor, timers, helper pool, statistics and the
//! stop/failure state, plus the `Core` trait through which a `Handle` reaches a flavour.

use std::cell::Cell;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use std::time::{Duration, Instant};

use crossbeam_utils::CachePadded;

use crate::color::Color;
use crate::error::{Error, panic_message};
use crate::pool::Pool;
use crate::reactor::{PollerGuard, Reactor};
use crate::stats::{StatsBoard, WorkerClock};
use crate::task::{Lane, Task, Work};
use crate::timer::Timers;

static NEXT_RUNTIME_ID: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The runtime and color of the callback running on this thread, if any (what
    /// [`crate::ColorCell`] checks against).
    static RUNNING: Cell<Option<(u64, Color)>> = const { Cell::new(None) };
}

/// The runtime id and color of the callback running on this thread.
pub(crate) fn running() -> Option<(u64, Color)> {
    RUNNING.with(Cell::get)
}

/// Restores the previous running color when a callback returns or unwinds.
struct RunningGuard(Option<(u64, Color)>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        RUNNING.with(|r| r.set(self.0));
    }
}

fn enter_color(runtime: u64, color: Color) -> RunningGuard {
    RunningGuard(RUNNING.with(|r| r.replace(Some((runtime, color)))))
}

pub(crate) struct Common {
    /// Distinguishes runtimes (for `ColorCell` and the per-thread worker context).
    pub(crate) id: u64,
    pub(crate) reactor: Reactor,
    pub(crate) timers: Timers,
    pub(crate) pool: Pool,
    pub(crate) stats: StatsBoard,
    /// Read on every callback by every worker: on a line of its own.
    pub(crate) stopping: Arc<CachePadded<AtomicBool>>,
    failure: Mutex<Option<Error>>,
    /// Depth of a color's FIFO past which a task's drop alternative replaces it.
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
        let stopping = Arc::new(CachePadded::new(AtomicBool::new(false)));
        Ok(Common {
            id: NEXT_RUNTIME_ID.fetch_add(1, Ordering::Relaxed),
            reactor: Reactor::new(workers).map_err(Error::Start)?,
            timers: Timers::default(),
            pool: Pool::new(helpers, helper_queue, stopping.clone()).map_err(Error::Start)?,
            stats: StatsBoard::new(workers),
            stopping,
            failure: Mutex::new(None),
            overload_threshold: overload_threshold.unwrap_or(usize::MAX),
            signals: Mutex::new(Vec::new()),
        })
    }

    #[inline]
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Records the first failure and asks the runtime to stop.
    pub(crate) fn fail(&self, error: Error) {
        tracing::error!(%error, "libcolor: stopping the runtime");
        let mut failure = self.failure.lock();
        if failure.is_none() {
            *failure = Some(error);
        }
        self.stopping.store(true, Ordering::Release);
    }

    pub(crate) fn take_failure(&self) -> Option<Error> {
        self.failure.lock().take()
    }

    /// Releases everything the runtime still holds for the program (pending timers, I/O
    /// callbacks, signal hooks, helper threads), breaking cycles through the `Handle`s that
    /// callbacks captured.
    pub(crate) fn teardown(&self) -> usize {
        for id in std::mem::take(&mut *self.signals.lock()) {
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
    /// Appends a task to its color's FIFO, queuing the color if it was idle.
    fn schedule(&self, task: Task);
    /// Interrupts a blocking poll so it sees a new earliest timer or a stop request.
    fn wake_poller(&self);
    /// Wakes every sleeping worker (for stop).
    fn wake_all(&self);
    fn queue_depths(&self) -> Vec<usize>;
    fn queue_depth_for(&self, color: Color) -> usize;
    fn workers(&self) -> usize;
    /// The epoll a new registration goes in: the one of `color`'s home worker (so that its
    /// events are harvested where its callbacks run), or without a color the calling
    /// worker's.
    fn reactor_for(&self, color: Option<Color>) -> usize;
}

/// Runs one task with panic containment, in its color. Its time is accounted by the caller,
/// per turn (one clock read per few callbacks, not one per callback).
#[inline]
pub(crate) fn run_task(core: &dyn Core, clock: &mut WorkerClock<'_>, task: Task) {
    let color = task.color;
    if task.shed {
        clock.counters().shed_one();
    }
    let outcome = {
        let _running = enter_color(core.common().id, color);
        catch_unwind(AssertUnwindSafe(|| match task.work {
            Work::Call(callback) => callback(),
            Work::Io(entry, dir) => {
                if let Some(again) = entry.run(dir, color) {
                    core.schedule(again);
                }
            }
        }))
    };
    if let Err(payload) = outcome {
        core.common().fail(Error::CallbackPanicked {
            color,
            message: panic_message(payload.as_ref()),
        });
        core.wake_all();
    }
}

/// How many callbacks a turn runs between two clock reads (the turn's time budget and the
/// statistics are checked at that granularity).
pub(crate) const CLOCK_EVERY: u32 = 8;

/// How long a poll may block: until the next timer if `may_block`, else not at all.
pub(crate) fn poll_timeout(common: &Common, may_block: bool) -> Option<Duration> {
    if may_block {
        common
            .timers
            .next_deadline()
            .map(|at| at.saturating_duration_since(Instant::now()))
    } else {
        Some(Duration::ZERO)
    }
}

/// One poll with the poller held: polls, releases the poller, then schedules ready I/O
/// callbacks and due timers. Returns how many tasks it scheduled.
pub(crate) fn poll_once(
    core: &dyn Core,
    mut held: PollerGuard<'_>,
    timeout: Option<Duration>,
) -> usize {
    let common = core.common();
    let ready = common.reactor.poll_held(&mut held, timeout);
    drop(held);
    let ready = match ready {
        Ok(ready) => ready,
        Err(err) => {
            common.fail(Error::Poll(err));
            core.wake_all();
            return 0;
        }
    };
    let mut scheduled = Reactor::dispatch(ready, core);
    for (color, callback) in common.timers.take_due(Instant::now()) {
        core.schedule(Task::call(color, Lane::Io, callback));
        scheduled += 1;
    }
    scheduled
}

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}
