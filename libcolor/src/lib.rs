//! libcolor: an event-driven runtime whose callbacks carry a *color*.
//!
//! A Rust reimplementation of libasync-smp (Zeldovich et al., "Multiprocessor Support for
//! Event-Driven Programs", USENIX 2003):
//!
//! * Callbacks of one color never run at the same time and run in the order they were
//!   scheduled (per source: `cpucb` order is kept, I/O readiness order is kept). Callbacks of
//!   different colors may run in parallel, one worker thread per CPU.
//! * Color 0 is the default and colors are not inherited, so a program that never names a
//!   color is a classic single-threaded event loop; parallelism is added one callback at a time
//!   by giving independent work its own color.
//! * `cpucb` makes a callback runnable now, ahead of I/O callbacks; I/O readiness callbacks on
//!   mio sources, timers, signals, a helper pool for blocking calls and overload shedding
//!   complete the event interface.
//! * The color (its slot in a 1024-entry table) is the unit of scheduling: each slot has its
//!   own FIFO and a small atomic state machine, and the workers' run queues
//!   (`crossbeam-deque`) hold slots. Idle workers steal queued slots, never running ones; a
//!   worker runs a slot for a budget, then yields it; whichever worker would otherwise park
//!   polls. See the crate's README and `mp.rs` for the design and why.
//! * [`ColorCell`] holds state owned by one color, reachable only from its callbacks.
//! * A uniprocessor flavour with the same API is the baseline for speedups.
//!
//! Panics: a panicking callback is caught, logged, and stops the runtime; `Runtime::run`
//! returns [`Error::CallbackPanicked`]. Its color is not left wedged, but the runtime does not
//! carry on, because it cannot know what invariants the callback broke.
//!
//! Locks: the runtime's mutexes are `parking_lot`'s, which do not poison, so a panicking
//! callback cannot wedge the workers that go on to stop the runtime. That is sound because
//! every critical section leaves its data consistent before anything that could panic runs,
//! and user callbacks never run under a lock.
//!
//! ```
//! use libcolor::{Color, Runtime};
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//!
//! let rt = Runtime::builder().workers(2).build().unwrap();
//! let h = rt.handle();
//! let done = Arc::new(AtomicU32::new(0));
//! for client in 1..=4u32 {
//!     let (h2, done) = (h.clone(), done.clone());
//!     // Per-client work in the client's color, in parallel...
//!     h.cpucb(Color(client), move || {
//!         let h3 = h2.clone();
//!         // ...then the shared-state step in color 0, serialised.
//!         h2.cpucb(Color::DEFAULT, move || {
//!             if done.fetch_add(1, Ordering::SeqCst) == 3 {
//!                 h3.stop();
//!             }
//!         });
//!     });
//! }
//! rt.run().unwrap();
//! ```
#![warn(missing_docs)]

mod cell;
mod color;
mod core;
mod error;
mod handle;
#[cfg(all(test, loom))]
mod loom_model;
mod mp;
mod pool;
mod queue;
mod reactor;
mod runtime;
mod state;
mod stats;
mod task;
mod timer;
mod uni;

pub use cell::{ColorCell, RunningColor, WrongColor};
pub use color::{COLOR_SLOTS, Color};
pub use error::Error;
pub use handle::{Handle, IoRegistration, cpucb, current};
pub use mio;
pub use mp::QueueMode;
pub use pool::PoolBusy;
pub use runtime::{Builder, Runtime, available_cpus};
pub use stats::{Stats, WorkerStats, amdahl_bound};
pub use timer::TimerId;
