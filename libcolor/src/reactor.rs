//! The I/O side: the mio `Poll`s (one per worker), the registrations they report on, and
//! their callback slots.
//!
//! mio is edge-triggered, so a readiness edge must never be lost: an edge that arrives while
//! no callback is armed (or while the callback is running) is remembered and delivered as soon
//! as a callback is armed again. A callback is queued at most once per slot at a time; edges
//! that arrive while it is queued are coalesced into that run. Callbacks must therefore read or
//! write until `WouldBlock`, as with mio itself. A queued task runs the callback only in the
//! color the slot is armed with when it runs; if the slot was re-armed in another color, the
//! task moves to that color instead (exclusion is per color, so the callback must run there).

use std::collections::HashMap;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

use mio::event::Source;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use parking_lot::{Mutex, MutexGuard};
use rustix::fd::{AsRawFd, OwnedFd};
use rustix::time::{
    Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
    timerfd_settime,
};

use crate::color::Color;
use crate::core::Core;
use crate::task::{Lane, Task, Work};

const WAKER_TOKEN: Token = Token(usize::MAX);
const WATCHDOG_TOKEN: Token = Token(usize::MAX - 1);
const EVENTS_PER_POLL: usize = 1024;

/// Which readiness a callback slot waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Read = 0,
    Write = 1,
}

/// One epoll instance: the right to poll it, its registry, waker and watchdog timer, and the
/// registrations it reports on.
struct PollSet {
    poll: Mutex<(Poll, Events)>,
    registry: Registry,
    waker: Waker,
    /// A one-shot timer that ends a blocking poll when it fires: a wake-up set in advance,
    /// which costs nothing if it is set again, later, before it fires.
    watchdog: OwnedFd,
    entries: Mutex<HashMap<usize, Arc<IoEntry>>>,
}

impl PollSet {
    fn new() -> io::Result<PollSet> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Waker::new(&registry, WAKER_TOKEN)?;
        let watchdog = timerfd_create(
            TimerfdClockId::Monotonic,
            TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC,
        )?;
        registry.register(
            &mut SourceFd(&watchdog.as_raw_fd()),
            WATCHDOG_TOKEN,
            Interest::READABLE,
        )?;
        Ok(PollSet {
            poll: Mutex::new((poll, Events::with_capacity(EVENTS_PER_POLL))),
            registry,
            waker,
            watchdog,
            entries: Mutex::new(HashMap::new()),
        })
    }
}

/// The runtime's pollers: one epoll per worker (one in all for the uniprocessor flavour), so
/// that a source registered for a color is watched by the worker that runs the color and its
/// events do not cross CPUs. Any thread may poll any of them while holding its lock; which
/// thread does is the flavour's policy.
pub(crate) struct Reactor {
    sets: Box<[PollSet]>,
    next_token: AtomicUsize,
}

/// A ready callback slot found by a poll.
pub(crate) type Ready = (Arc<IoEntry>, Direction);

/// The right to poll one of the reactor's epolls: one thread at a time per epoll.
pub(crate) struct PollerGuard<'a> {
    set: &'a PollSet,
    held: MutexGuard<'a, (Poll, Events)>,
}

impl Reactor {
    /// A reactor of `polls` epolls (at least one).
    pub(crate) fn new(polls: usize) -> io::Result<Reactor> {
        Ok(Reactor {
            sets: (0..polls.max(1))
                .map(|_| PollSet::new())
                .collect::<io::Result<_>>()?,
            next_token: AtomicUsize::new(0),
        })
    }

    /// Interrupts a blocking poll of epoll `poll` (from any thread).
    pub(crate) fn wake(&self, poll: usize) {
        if let Err(err) = self.sets[poll].waker.wake() {
            tracing::error!(%err, "libcolor: cannot wake the poller");
        }
    }

    /// Makes a blocking poll of epoll `poll` return `after` from now, unless this is called
    /// again before then (from any thread; the later call wins). One system call, and no
    /// wake-up at all if the poll has returned, or the timer is set again, before it fires.
    pub(crate) fn wake_after(&self, poll: usize, after: Duration) {
        let value = Itimerspec {
            it_interval: Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: Timespec {
                tv_sec: after.as_secs() as i64,
                tv_nsec: i64::from(after.subsec_nanos()),
            },
        };
        let set = &self.sets[poll];
        if let Err(err) = timerfd_settime(&set.watchdog, TimerfdTimerFlags::empty(), &value) {
            tracing::error!(%err, "libcolor: cannot set the watchdog timer");
            self.wake(poll);
        }
    }

    /// Interrupts every blocking poll.
    pub(crate) fn wake_all(&self) {
        for poll in 0..self.sets.len() {
            self.wake(poll);
        }
    }

    /// Registers `source` in epoll `poll` (taken modulo the number of epolls).
    pub(crate) fn register<S: Source + ?Sized>(
        &self,
        source: &mut S,
        interest: Interest,
        poll: usize,
    ) -> io::Result<Arc<IoEntry>> {
        let poll = poll % self.sets.len();
        let set = &self.sets[poll];
        let token = self.next_token.fetch_add(1, Relaxed);
        let entry = Arc::new(IoEntry {
            token,
            poll,
            dirs: Mutex::new(Default::default()),
        });
        set.entries.lock().insert(token, entry.clone());
        if let Err(err) = set.registry.register(source, Token(token), interest) {
            set.entries.lock().remove(&token);
            return Err(err);
        }
        Ok(entry)
    }

    pub(crate) fn reregister<S: Source + ?Sized>(
        &self,
        entry: &IoEntry,
        source: &mut S,
        interest: Interest,
    ) -> io::Result<()> {
        self.sets[entry.poll]
            .registry
            .reregister(source, Token(entry.token), interest)
    }

    pub(crate) fn deregister<S: Source + ?Sized>(
        &self,
        entry: &IoEntry,
        source: &mut S,
    ) -> io::Result<()> {
        self.sets[entry.poll].registry.deregister(source)
    }

    /// Forgets an entry and drops its callbacks (which may own the very registration).
    pub(crate) fn forget(&self, entry: &IoEntry) {
        self.sets[entry.poll].entries.lock().remove(&entry.token);
        let dropped = entry.disarm_all();
        drop(dropped);
    }

    /// Drops every registration's callbacks: used at shutdown to break reference cycles
    /// between callbacks and the runtime.
    pub(crate) fn clear(&self) {
        for set in self.sets.iter() {
            let entries: Vec<_> = set.entries.lock().drain().map(|(_, e)| e).collect();
            for entry in entries {
                drop(entry.disarm_all());
            }
        }
    }

    /// Takes the right to poll epoll `poll` if no other thread holds it.
    pub(crate) fn try_begin(&self, poll: usize) -> Option<PollerGuard<'_>> {
        let set = &self.sets[poll];
        set.poll.try_lock().map(|held| PollerGuard { set, held })
    }

    /// Takes the right to poll epoll `poll`, waiting while another thread holds it (callers
    /// that take another worker's epoll only hold it for a non-blocking poll).
    pub(crate) fn begin(&self, poll: usize) -> PollerGuard<'_> {
        let set = &self.sets[poll];
        PollerGuard {
            set,
            held: set.poll.lock(),
        }
    }

    /// Polls once with the poller held (blocking up to `timeout`, `None` = until an event)
    /// and returns the ready callback slots. The caller releases the poller, then hands the
    /// result to [`Reactor::dispatch`].
    pub(crate) fn poll_held(
        &self,
        guard: &mut PollerGuard<'_>,
        timeout: Option<Duration>,
    ) -> io::Result<Vec<Ready>> {
        let mut ready = Vec::new();
        let (poll, events) = &mut *guard.held;
        match poll.poll(events, timeout) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::Interrupted => return Ok(ready),
            Err(err) => return Err(err),
        }
        let entries = guard.set.entries.lock();
        for event in events.iter() {
            if event.token() == WAKER_TOKEN {
                continue;
            }
            if event.token() == WATCHDOG_TOKEN {
                // Edge-triggered: reading the expiry count only keeps the descriptor tidy.
                let _ = rustix::io::read(&guard.set.watchdog, &mut [0u8; 8]);
                continue;
            }
            let Some(entry) = entries.get(&event.token().0) else {
                continue;
            };
            let failed = event.is_error();
            if event.is_readable() || event.is_read_closed() || failed {
                ready.push((entry.clone(), Direction::Read));
            }
            if event.is_writable() || event.is_write_closed() || failed {
                ready.push((entry.clone(), Direction::Write));
            }
        }
        Ok(ready)
    }

    /// Schedules the callbacks of ready slots; returns how many tasks it scheduled.
    pub(crate) fn dispatch(ready: Vec<Ready>, core: &dyn Core) -> usize {
        let mut scheduled = 0;
        for (entry, dir) in ready {
            if let Some(task) = entry.on_ready(dir) {
                core.schedule(task);
                scheduled += 1;
            }
        }
        scheduled
    }
}

/// A persistent readiness callback.
pub(crate) type IoCallback = Box<dyn FnMut() + Send + 'static>;

struct Armed {
    color: Color,
    callback: IoCallback,
}

#[derive(Default)]
struct Slot {
    armed: Option<Armed>,
    /// An edge arrived while nothing was armed (or while the callback ran).
    ready: bool,
    /// A task for this slot sits in a run queue.
    queued: bool,
    /// Bumped whenever the callback is replaced or cleared, so a running callback that
    /// re-armed or cleared its own slot is not put back over the new state.
    generation: u64,
}

/// One registered source: a callback slot per direction.
pub(crate) struct IoEntry {
    token: usize,
    /// The epoll it is registered in.
    poll: usize,
    dirs: Mutex<[Slot; 2]>,
}

impl IoEntry {
    pub(crate) fn token(&self) -> Token {
        Token(self.token)
    }

    fn task(self: &Arc<Self>, color: Color, dir: Direction) -> Task {
        Task {
            color,
            priority: 0,
            lane: Lane::Io,
            work: Work::Io(self.clone(), dir),
            on_overload: None,
            shed: false,
        }
    }

    fn on_ready(self: &Arc<Self>, dir: Direction) -> Option<Task> {
        let mut dirs = self.dirs.lock();
        let slot = &mut dirs[dir as usize];
        match &slot.armed {
            Some(armed) if !slot.queued => {
                slot.queued = true;
                Some(self.task(armed.color, dir))
            }
            Some(_) => None,
            None => {
                slot.ready = true;
                None
            }
        }
    }

    /// Installs a callback; returns a task to schedule if an edge was waiting for it.
    pub(crate) fn arm(
        self: &Arc<Self>,
        dir: Direction,
        color: Color,
        callback: IoCallback,
    ) -> Option<Task> {
        let previous;
        let task;
        {
            let mut dirs = self.dirs.lock();
            let slot = &mut dirs[dir as usize];
            slot.generation += 1;
            previous = slot.armed.replace(Armed { color, callback });
            task = if slot.ready && !slot.queued {
                slot.ready = false;
                slot.queued = true;
                Some(self.task(color, dir))
            } else {
                None
            };
        }
        drop(previous);
        task
    }

    /// Removes a callback (dropped by the caller, outside the lock).
    pub(crate) fn disarm(&self, dir: Direction) -> Option<IoCallback> {
        let mut dirs = self.dirs.lock();
        let slot = &mut dirs[dir as usize];
        slot.generation += 1;
        slot.armed.take().map(|armed| armed.callback)
    }

    fn disarm_all(&self) -> Vec<IoCallback> {
        let mut dirs = self.dirs.lock();
        dirs.iter_mut()
            .filter_map(|slot| {
                slot.generation += 1;
                slot.armed.take().map(|armed| armed.callback)
            })
            .collect()
    }

    /// Runs the armed callback of `dir` (the body of a `Work::Io` task queued in `color`).
    /// Returns a task to schedule: the same edge re-posted in the slot's new color if the slot
    /// was re-armed with another color while the task was queued (running it here would run
    /// it outside its color), or a new edge that arrived while the callback ran.
    pub(crate) fn run(self: &Arc<Self>, dir: Direction, color: Color) -> Option<Task> {
        let (mut armed, generation) = {
            let mut dirs = self.dirs.lock();
            let slot = &mut dirs[dir as usize];
            match &slot.armed {
                None => {
                    // Cleared while queued (say, a backpressure pause): keep the edge for the
                    // next `arm`, which would otherwise wait for an edge mio never repeats.
                    slot.queued = false;
                    slot.ready = true;
                    return None;
                }
                Some(armed) if armed.color != color => {
                    // Re-armed in another color while queued: the callback belongs to that
                    // color now; the task moves there (still queued, the edge kept).
                    return Some(self.task(armed.color, dir));
                }
                Some(_) => {}
            }
            slot.queued = false;
            slot.ready = false;
            (slot.armed.take()?, slot.generation)
        };
        (armed.callback)();
        let mut dirs = self.dirs.lock();
        let slot = &mut dirs[dir as usize];
        if slot.generation != generation || slot.armed.is_some() {
            drop(dirs);
            drop(armed);
            return None;
        }
        let color = armed.color;
        slot.armed = Some(armed);
        if slot.ready && !slot.queued {
            slot.ready = false;
            slot.queued = true;
            return Some(self.task(color, dir));
        }
        None
    }
}
