//! The unit a color's FIFO holds: a callback plus its scheduling attributes.

use std::sync::Arc;

use crate::color::Color;
use crate::reactor::{Direction, IoEntry};

/// A one-shot callback.
pub(crate) type Callback = Box<dyn FnOnce() + Send + 'static>;

/// What running a task does.
pub(crate) enum Work {
    /// A plain callback (from `cpucb`, a timer, a helper completion or a drop alternative).
    Call(Callback),
    /// The readiness callback of an I/O registration; looked up when the task runs so that
    /// a callback replaced, re-colored or cleared while queued is honoured.
    Io(Arc<IoEntry>, Direction),
}

/// Which lane of its color's FIFO a task joins: `cpucb` tasks run ahead of I/O tasks of the
/// same color (the libasync-smp paper section 4.2, figure 5), because the state they touch was just
/// written by their creator. Each turn of a color runs at least one I/O task if any is
/// waiting, so a color that keeps re-posting itself cannot starve its own I/O.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    Cpu,
    Io,
}

pub(crate) struct Task {
    pub(crate) color: Color,
    /// Scheduler hint: a color made runnable by a task with a positive priority is queued on
    /// the runtime's priority queue, served before any worker's own queue. Never reorders
    /// tasks of one color.
    pub(crate) priority: i8,
    pub(crate) lane: Lane,
    pub(crate) work: Work,
    /// A cheap alternative to run instead of `work` if the color's FIFO is past the overload
    /// threshold when the task is posted (thesis 000, section 7.1).
    pub(crate) on_overload: Option<Callback>,
    /// The drop alternative replaced the callback (counted by the worker that runs it, so the
    /// statistics keep a single writer).
    pub(crate) shed: bool,
}

impl Task {
    pub(crate) fn call(color: Color, lane: Lane, f: Callback) -> Task {
        Task {
            color,
            priority: 0,
            lane,
            work: Work::Call(f),
            on_overload: None,
            shed: false,
        }
    }

    /// Applies the overload rule: past the threshold, the drop alternative replaces the
    /// callback (and keeps its color, so it still runs in order with its peers).
    pub(crate) fn shed_if(&mut self, overloaded: bool) -> bool {
        if overloaded && let Some(alt) = self.on_overload.take() {
            self.work = Work::Call(alt);
            self.shed = true;
            return true;
        }
        self.on_overload = None;
        false
    }
}
