//! Building and running a runtime.

use std::sync::Arc;

use crate::core::Common;
use crate::error::Error;
use crate::handle::Handle;
use crate::mp::{Mp, MpConfig, QueueMode, WorkerSeat};
use crate::stats::Stats;
use crate::uni::Uni;

/// Configures a runtime. The defaults are the full multiprocessor design: one worker per CPU,
/// per-worker run queues of colors, stealing of queued colors, no pinning.
#[derive(Clone, Debug)]
pub struct Builder {
    workers: Option<usize>,
    uniprocessor: bool,
    pin: Pin,
    queues: QueueMode,
    steal: bool,
    helpers: usize,
    helper_queue: usize,
    overload_threshold: Option<usize>,
}

#[derive(Clone, Debug)]
enum Pin {
    No,
    /// Worker i on CPU i.
    Identity,
    /// Worker i on `cpus[i % len]`.
    Cpus(Vec<usize>),
}

impl Default for Builder {
    fn default() -> Self {
        Builder::new()
    }
}

impl Builder {
    /// The defaults: the multiprocessor flavour, one worker per CPU this process may use,
    /// unpinned, per-worker queues with stealing, 4 blocking helpers, no overload shedding.
    pub fn new() -> Builder {
        Builder {
            workers: None,
            uniprocessor: false,
            pin: Pin::No,
            queues: QueueMode::PerWorker,
            steal: true,
            helpers: 4,
            helper_queue: 1024,
            overload_threshold: None,
        }
    }

    /// Number of worker threads (default: the number of CPUs this process may use).
    pub fn workers(mut self, n: usize) -> Builder {
        self.workers = Some(n.max(1));
        self
    }

    /// The uniprocessor flavour: one thread, no cross-thread machinery on the hot path.
    pub fn uniprocessor(mut self) -> Builder {
        self.uniprocessor = true;
        self
    }

    /// Pins worker i to CPU i.
    pub fn pin(mut self, pin: bool) -> Builder {
        self.pin = if pin { Pin::Identity } else { Pin::No };
        self
    }

    /// Pins worker i to `cpus[i % cpus.len()]` (the uniprocessor loop to `cpus[0]`).
    pub fn pin_to(mut self, cpus: Vec<usize>) -> Builder {
        self.pin = if cpus.is_empty() {
            Pin::No
        } else {
            Pin::Cpus(cpus)
        };
        self
    }

    /// How run queues are arranged (the libasync-smp paper, Table 2): `Shared` is the base configuration.
    pub fn queue_mode(mut self, mode: QueueMode) -> Builder {
        self.queues = mode;
        self
    }

    /// Whether idle workers steal whole colors from busy ones (per-worker queues only).
    pub fn stealing(mut self, steal: bool) -> Builder {
        self.steal = steal;
        self
    }

    /// Kept for source compatibility: the previous scheduler picked among the first `n`
    /// eligible callbacks. The color-as-unit scheduler has no window (a worker runs one
    /// color's FIFO for a budget, then yields it), so this setting has no effect.
    pub fn window(self, n: usize) -> Builder {
        let _ = n;
        self
    }

    /// Threads in the helper pool for blocking calls (default 4).
    pub fn helpers(mut self, n: usize) -> Builder {
        self.helpers = n.max(1);
        self
    }

    /// Jobs that may wait for a helper before `Handle::blocking` refuses more (default 1024).
    pub fn helper_queue(mut self, n: usize) -> Builder {
        self.helper_queue = n.max(1);
        self
    }

    /// Queue depth at which a callback scheduled with `cpucb_or_shed` is replaced by its drop
    /// alternative (default: never).
    pub fn overload_threshold(mut self, depth: usize) -> Builder {
        self.overload_threshold = Some(depth);
        self
    }

    /// Makes the runtime: its poller and, for the multiprocessor flavour, its worker
    /// threads, idle until [`Runtime::run`].
    pub fn build(self) -> Result<Runtime, Error> {
        let workers = if self.uniprocessor {
            1
        } else {
            self.workers.unwrap_or_else(available_cpus)
        };
        let common = Common::new(
            workers,
            self.helpers,
            self.helper_queue,
            self.overload_threshold,
        )?;
        let cpus = match self.pin {
            Pin::No => None,
            Pin::Identity => Some((0..workers).collect()),
            Pin::Cpus(cpus) => Some(cpus),
        };
        let flavor = if self.uniprocessor {
            Flavor::Uni(Arc::new(Uni::new(common)))
        } else {
            let (mp, seats) = Mp::new(
                MpConfig {
                    workers,
                    mode: self.queues,
                    steal: self.steal,
                },
                common,
            );
            Flavor::Mp(mp, seats)
        };
        Ok(Runtime { flavor, cpus })
    }
}

/// Pins the calling thread to `cpu`; false if the CPU does not exist or is not allowed.
/// (Checked against the allowed set first: setting an out-of-range CPU is not an error
/// core_affinity reports gracefully.)
pub(crate) fn pin_current_thread(cpu: usize) -> bool {
    let allowed = core_affinity::get_core_ids().unwrap_or_default();
    allowed.iter().any(|core| core.id == cpu)
        && core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
}

/// CPUs this process may run on.
pub fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

enum Flavor {
    Uni(Arc<Uni>),
    Mp(Arc<Mp>, Vec<WorkerSeat>),
}

/// A runtime, built but not yet running. Schedule initial work through [`Runtime::handle`],
/// then call [`Runtime::run`].
pub struct Runtime {
    flavor: Flavor,
    cpus: Option<Vec<usize>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("workers", &self.handle().workers())
            .finish()
    }
}

impl Runtime {
    /// A [`Builder`] with the defaults ([`Builder::new`]).
    pub fn builder() -> Builder {
        Builder::new()
    }

    /// A handle for scheduling callbacks, registering I/O and stopping, from any thread.
    pub fn handle(&self) -> Handle {
        match &self.flavor {
            Flavor::Uni(uni) => Handle { core: uni.clone() },
            Flavor::Mp(mp, _) => Handle { core: mp.clone() },
        }
    }

    /// Runs until a callback (or another thread, or a signal hook) calls `Handle::stop`, or a
    /// callback panics. The uniprocessor flavour runs on the calling thread; the
    /// multiprocessor flavour runs its workers on threads of their own and waits for them.
    /// Returns the final statistics, or the first error (a panicking callback stops the
    /// whole runtime: the runtime cannot know what state it left behind).
    pub fn run(self) -> Result<Stats, Error> {
        match self.flavor {
            Flavor::Uni(uni) => {
                uni.run(self.cpus.and_then(|cpus| cpus.first().copied()))?;
                Ok(crate::core::Core::common(&*uni).stats.snapshot())
            }
            Flavor::Mp(mp, seats) => {
                mp.run(seats, self.cpus)?;
                Ok(crate::core::Core::common(&*mp).stats.snapshot())
            }
        }
    }
}
