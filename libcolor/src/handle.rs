//! `Handle`: how a program schedules work on a runtime, from a callback or any thread.

use std::cell::RefCell;
use std::io;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use mio::Interest;
use mio::event::Source;

use crate::color::Color;
use crate::core::Core;
use crate::error::{Error, panic_message};
use crate::pool::PoolBusy;
use crate::reactor::{Direction, IoEntry};
use crate::stats::Stats;
use crate::task::{Lane, Task};
use crate::timer::TimerId;

thread_local! {
    /// The runtime whose callbacks this thread runs (set on worker threads and on the
    /// uniprocessor loop's thread), so callbacks can schedule work without owning a `Handle`
    /// clone: cloning one is an atomic increment on a counter shared by every worker.
    static CURRENT: RefCell<Option<Handle>> = const { RefCell::new(None) };
}

/// Makes `handle` this thread's current runtime until the guard is dropped.
pub(crate) fn enter(handle: Handle) -> EnterGuard {
    let previous = CURRENT.with(|current| current.replace(Some(handle)));
    EnterGuard { previous }
}

pub(crate) struct EnterGuard {
    previous: Option<Handle>,
}

impl Drop for EnterGuard {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|current| *current.borrow_mut() = previous);
    }
}

/// The runtime running the current callback, if this thread is one of a runtime's workers.
pub fn current() -> Option<Handle> {
    CURRENT.with(|current| current.borrow().clone())
}

/// `cpucb` on the runtime running the current callback: the libasync-style call for code
/// inside callbacks, cheaper than going through a captured [`Handle`].
///
/// # Panics
/// If called outside a callback (on a thread that is not a runtime's worker): that is a
/// programming error, like spawning a tokio task outside a tokio runtime.
pub fn cpucb(color: impl Into<Color>, callback: impl FnOnce() + Send + 'static) {
    CURRENT.with(|current| match &*current.borrow() {
        Some(handle) => handle.cpucb(color, callback),
        None => panic!("libcolor::cpucb called outside a libcolor callback; use Handle::cpucb"),
    })
}

/// A cheap, cloneable, thread-safe reference to a runtime.
///
/// Callbacks are `FnOnce() + Send + 'static` closures; they capture a `Handle` clone to
/// schedule more work. Nothing is inherited: every call names the color it schedules into.
#[derive(Clone)]
pub struct Handle {
    pub(crate) core: Arc<dyn Core>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("workers", &self.core.workers())
            .finish_non_exhaustive()
    }
}

impl Handle {
    /// Makes `callback` runnable now in `color` (the libasync-smp paper's `cpucb`). It runs after every
    /// earlier `cpucb` of the same color and, within its worker, ahead of I/O callbacks.
    pub fn cpucb(&self, color: impl Into<Color>, callback: impl FnOnce() + Send + 'static) {
        self.core
            .schedule(Task::call(color.into(), Lane::Cpu, Box::new(callback)));
    }

    /// [`Handle::cpucb`] with a scheduling priority hint: among the first few eligible
    /// callbacks of a worker, higher priorities run first (thesis 000, section 3.4). Never
    /// reorders callbacks of one color.
    pub fn cpucb_with_priority(
        &self,
        color: impl Into<Color>,
        priority: i8,
        callback: impl FnOnce() + Send + 'static,
    ) {
        let mut task = Task::call(color.into(), Lane::Cpu, Box::new(callback));
        task.priority = priority;
        self.core.schedule(task);
    }

    /// [`Handle::cpucb`] with a cheap alternative: if the target worker's queue already holds
    /// at least the runtime's overload threshold of tasks, `on_overload` is queued in its place
    /// (same color, same position), so a server can answer "busy" and release the request's
    /// state instead of letting the queue grow without bound.
    pub fn cpucb_or_shed(
        &self,
        color: impl Into<Color>,
        callback: impl FnOnce() + Send + 'static,
        on_overload: impl FnOnce() + Send + 'static,
    ) {
        let mut task = Task::call(color.into(), Lane::Cpu, Box::new(callback));
        task.on_overload = Some(Box::new(on_overload));
        self.core.schedule(task);
    }

    /// Runs `callback` in `color` once `after` has elapsed.
    pub fn delaycb(
        &self,
        after: Duration,
        color: impl Into<Color>,
        callback: impl FnOnce() + Send + 'static,
    ) -> TimerId {
        self.timecb(Instant::now() + after, color, callback)
    }

    /// Runs `callback` in `color` at (or just after) `at`. Timers due at the same instant run
    /// in the order they were set.
    pub fn timecb(
        &self,
        at: Instant,
        color: impl Into<Color>,
        callback: impl FnOnce() + Send + 'static,
    ) -> TimerId {
        let (id, earliest) = self
            .core
            .common()
            .timers
            .add(at, color.into(), Box::new(callback));
        if earliest {
            self.core.wake_poller();
        }
        id
    }

    /// Cancels a timer. Returns false if it already fired (or was cancelled).
    pub fn cancel_timer(&self, id: TimerId) -> bool {
        self.core.common().timers.cancel(id)
    }

    /// Registers a mio source with the runtime's poller; arm callbacks on the returned
    /// registration. On the multiprocessor flavour the source goes in the epoll of the
    /// calling worker (worker 0's from a thread that is not a worker); prefer
    /// [`Handle::register_in`] when the color its callbacks will run in is known.
    pub fn register<S: Source + ?Sized>(
        &self,
        source: &mut S,
        interest: Interest,
    ) -> io::Result<IoRegistration> {
        self.register_at(source, interest, self.core.reactor_for(None))
    }

    /// Registers a mio source whose callbacks will run in `color`: on the multiprocessor
    /// flavour it goes in the epoll of the color's home worker, so that the worker that runs
    /// the color also harvests its events (a source's socket, its state and its epoll stay on
    /// one CPU, as with one copy of a server per CPU). Callbacks may still be armed in any
    /// color; only where events are first seen depends on it.
    pub fn register_in<S: Source + ?Sized>(
        &self,
        color: impl Into<Color>,
        source: &mut S,
        interest: Interest,
    ) -> io::Result<IoRegistration> {
        let poll = self.core.reactor_for(Some(color.into()));
        self.register_at(source, interest, poll)
    }

    fn register_at<S: Source + ?Sized>(
        &self,
        source: &mut S,
        interest: Interest,
        poll: usize,
    ) -> io::Result<IoRegistration> {
        let entry = self
            .core
            .common()
            .reactor
            .register(source, interest, poll)?;
        Ok(IoRegistration {
            entry,
            handle: self.clone(),
        })
    }

    /// Runs the blocking `job` on the helper pool, then `done(result)` as a callback of
    /// `color`. Fails at once, without running anything, if the pool's queue is full.
    pub fn blocking<T: Send + 'static>(
        &self,
        color: impl Into<Color>,
        job: impl FnOnce() -> T + Send + 'static,
        done: impl FnOnce(T) + Send + 'static,
    ) -> Result<(), PoolBusy> {
        let color = color.into();
        let core = self.core.clone();
        self.core.common().pool.submit(Box::new(move || {
            match catch_unwind(AssertUnwindSafe(job)) {
                Ok(value) => {
                    core.schedule(Task::call(color, Lane::Cpu, Box::new(move || done(value))))
                }
                Err(payload) => {
                    core.common().fail(Error::HelperPanicked {
                        color,
                        message: panic_message(payload.as_ref()),
                    });
                    core.wake_all();
                }
            }
        }))
    }

    /// Runs `callback` in `color` each time the process receives `signal` (via a self-pipe
    /// polled like any other source, so the callback runs as an ordinary callback). The hook
    /// is removed when the runtime stops.
    pub fn on_signal(
        &self,
        signal: i32,
        color: impl Into<Color>,
        mut callback: impl FnMut() + Send + 'static,
    ) -> io::Result<()> {
        let (reader, writer) = std::os::unix::net::UnixStream::pair()?;
        reader.set_nonblocking(true)?;
        writer.set_nonblocking(true)?;
        let mut reader = mio::net::UnixStream::from_std(reader);
        let registration = self.register(&mut reader, Interest::READABLE)?;
        let id = signal_hook::low_level::pipe::register(signal, writer)?;
        self.core.common().signals.lock().push(id);
        let entry = registration.entry.clone();
        let on_readable = move || {
            // The closure owns the registration (and so the reader's poller entry); the
            // reactor drops it at shutdown, which breaks the cycle.
            let _registration = &registration;
            let mut buf = [0u8; 64];
            let mut fired = false;
            while let Ok(n) = io::Read::read(&mut reader, &mut buf) {
                if n == 0 {
                    break;
                }
                fired = true;
            }
            if fired {
                callback();
            }
        };
        if let Some(task) = entry.arm(Direction::Read, color.into(), Box::new(on_readable)) {
            self.core.schedule(task);
        }
        Ok(())
    }

    /// Stops the runtime when the process gets SIGINT or SIGTERM.
    pub fn stop_on_termination_signals(&self) -> io::Result<()> {
        for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
            let handle = self.clone();
            self.on_signal(signal, Color::DEFAULT, move || handle.stop())?;
        }
        Ok(())
    }

    /// Asks the runtime to stop: workers finish the callback they are running and exit;
    /// callbacks still queued, pending timers and I/O callbacks are dropped without running
    /// (their captured state is released). `Runtime::run` then returns.
    pub fn stop(&self) {
        self.core.common().stopping.store(true, Ordering::Release);
        self.core.wake_all();
    }

    /// Whether [`Handle::stop`] was called (or a callback panicked): long callbacks may
    /// check it to end early.
    pub fn is_stopping(&self) -> bool {
        self.core.common().is_stopping()
    }

    /// Number of worker threads (1 for the uniprocessor flavour).
    pub fn workers(&self) -> usize {
        self.core.workers()
    }

    /// Current depth of each run queue.
    pub fn queue_depths(&self) -> Vec<usize> {
        self.core.queue_depths()
    }

    /// Current depth of the queue that `color` is scheduled on.
    pub fn queue_depth_for(&self, color: impl Into<Color>) -> usize {
        self.core.queue_depth_for(color.into())
    }

    /// A snapshot of the runtime's counters.
    pub fn stats(&self) -> Stats {
        self.core.common().stats.snapshot()
    }
}

/// A source registered with the poller, with one callback slot per direction.
///
/// Slot callbacks are persistent (`FnMut`): they run once per readiness edge, in their color,
/// and stay armed until replaced or cleared. An edge that arrives while a slot is empty is kept
/// and delivered when a callback is armed. Callbacks must read or write until `WouldBlock`.
///
/// Dropping the registration clears both slots (dropping their closures); call
/// [`IoRegistration::deregister`] to also remove the source from the poller. A callback that
/// owns its own registration forms a cycle that only `clear_*`/`deregister` (or the runtime's
/// shutdown) breaks.
pub struct IoRegistration {
    entry: Arc<IoEntry>,
    handle: Handle,
}

impl std::fmt::Debug for IoRegistration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IoRegistration")
            .field("token", &self.entry.token())
            .finish()
    }
}

impl IoRegistration {
    /// The token the source was registered with (unique among live registrations).
    pub fn token(&self) -> mio::Token {
        self.entry.token()
    }

    /// Arms (or replaces) the readable callback.
    pub fn on_readable(&self, color: impl Into<Color>, callback: impl FnMut() + Send + 'static) {
        self.arm(Direction::Read, color.into(), Box::new(callback));
    }

    /// Arms (or replaces) the writable callback.
    pub fn on_writable(&self, color: impl Into<Color>, callback: impl FnMut() + Send + 'static) {
        self.arm(Direction::Write, color.into(), Box::new(callback));
    }

    /// Disarms the readable callback (dropped without running); readiness is remembered
    /// for the next one armed.
    pub fn clear_readable(&self) {
        drop(self.entry.disarm(Direction::Read));
    }

    /// Disarms the writable callback, as [`IoRegistration::clear_readable`].
    pub fn clear_writable(&self) {
        drop(self.entry.disarm(Direction::Write));
    }

    fn arm(&self, dir: Direction, color: Color, callback: crate::reactor::IoCallback) {
        if let Some(task) = self.entry.arm(dir, color, callback) {
            self.handle.core.schedule(task);
        }
    }

    /// Changes the readiness the poller reports for this source.
    pub fn reregister<S: Source + ?Sized>(
        &self,
        source: &mut S,
        interest: Interest,
    ) -> io::Result<()> {
        self.handle
            .core
            .common()
            .reactor
            .reregister(&self.entry, source, interest)
    }

    /// Removes the source from the poller and drops both callbacks.
    pub fn deregister<S: Source + ?Sized>(self, source: &mut S) -> io::Result<()> {
        self.handle
            .core
            .common()
            .reactor
            .deregister(&self.entry, source)
        // `Drop` forgets the entry and its callbacks.
    }
}

impl Drop for IoRegistration {
    fn drop(&mut self) {
        self.handle.core.common().reactor.forget(&self.entry);
    }
}
