//! The I/O side: one mio `Poll`, the registrations it reports on, and their callback slots.
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
use mio::{Events, Interest, Poll, Registry, Token, Waker};
use parking_lot::{Mutex, MutexGuard};

use crate::color::Color;
use crate::core::Core;
use crate::task::{Lane, Task, Work};

const WAKER_TOKEN: Token = Token(usize::MAX);
const EVENTS_PER_POLL: usize = 1024;

/// Which readiness a callback slot waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    Read = 0,
    Write = 1,
}

pub(crate) struct Reactor {
    poll: Mutex<(Poll, Events)>,
    registry: Registry,
    waker: Waker,
    entries: Mutex<HashMap<usize, Arc<IoEntry>>>,
    next_token: AtomicUsize,
}

/// A ready callback slot found by a poll.
pub(crate) type Ready = (Arc<IoEntry>, Direction);

/// The right to poll: one thread at a time.
pub(crate) type PollerGuard<'a> = MutexGuard<'a, (Poll, Events)>;

impl Reactor {
    pub(crate) fn new() -> io::Result<Reactor> {
        let poll = Poll::new()?;
        let registry = poll.registry().try_clone()?;
        let waker = Waker::new(&registry, WAKER_TOKEN)?;
        Ok(Reactor {
            poll: Mutex::new((poll, Events::with_capacity(EVENTS_PER_POLL))),
            registry,
            waker,
            entries: Mutex::new(HashMap::new()),
            next_token: AtomicUsize::new(0),
        })
    }

    /// Interrupts a blocking poll (from any thread).
    pub(crate) fn wake(&self) {
        if let Err(err) = self.waker.wake() {
            tracing::error!(%err, "libcolor: cannot wake the poller");
        }
    }

    pub(crate) fn register<S: Source + ?Sized>(
        &self,
        source: &mut S,
        interest: Interest,
    ) -> io::Result<Arc<IoEntry>> {
        let token = self.next_token.fetch_add(1, Relaxed);
        let entry = Arc::new(IoEntry {
            token,
            dirs: Mutex::new(Default::default()),
        });
        self.entries.lock().insert(token, entry.clone());
        if let Err(err) = self.registry.register(source, Token(token), interest) {
            self.entries.lock().remove(&token);
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
        self.registry
            .reregister(source, Token(entry.token), interest)
    }

    pub(crate) fn deregister<S: Source + ?Sized>(&self, source: &mut S) -> io::Result<()> {
        self.registry.deregister(source)
    }

    /// Forgets an entry and drops its callbacks (which may own the very registration).
    pub(crate) fn forget(&self, entry: &IoEntry) {
        self.entries.lock().remove(&entry.token);
        let dropped = entry.disarm_all();
        drop(dropped);
    }

    /// Drops every registration's callbacks: used at shutdown to break reference cycles
    /// between callbacks and the runtime.
    pub(crate) fn clear(&self) {
        let entries: Vec<_> = self.entries.lock().drain().map(|(_, e)| e).collect();
        for entry in entries {
            drop(entry.disarm_all());
        }
    }

    /// Takes the poller if no other thread holds it: whoever holds it polls (the worker that
    /// would otherwise park, or a busy worker's periodic non-blocking look).
    pub(crate) fn try_begin(&self) -> Option<PollerGuard<'_>> {
        self.poll.try_lock()
    }

    /// Polls once with the poller held (blocking up to `timeout`, `None` = until an event)
    /// and returns the ready callback slots. The caller releases the poller, then hands the
    /// result to [`Reactor::dispatch`].
    pub(crate) fn poll_held(
        &self,
        held: &mut PollerGuard<'_>,
        timeout: Option<Duration>,
    ) -> io::Result<Vec<Ready>> {
        let mut ready = Vec::new();
        let (poll, events) = &mut **held;
        match poll.poll(events, timeout) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::Interrupted => return Ok(ready),
            Err(err) => return Err(err),
        }
        let entries = self.entries.lock();
        for event in events.iter() {
            if event.token() == WAKER_TOKEN {
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
