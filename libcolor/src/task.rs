//! The unit a run queue holds: a callback plus its scheduling attributes.

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
    /// a callback replaced or cleared while queued is honoured.
    Io(Arc<IoEntry>, Direction),
    /// The poller: polls mio and schedules the ready callbacks and due timers. It lives in
    /// the queue of the worker that owns color 0, as the paper's select callback does.
    Poll,
}

/// Which side of a queue a task joins: `cpucb` tasks sit ahead of I/O tasks (paper 001
/// section 4.2, figure 5), because the state they touch was just written by their creator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    Cpu,
    Io,
}

pub(crate) struct Task {
    pub(crate) color: Color,
    /// Scheduler hint: higher runs earlier among the first few eligible tasks (thesis 000,
    /// section 3.4). Never reorders tasks of one color.
    pub(crate) priority: i8,
    pub(crate) lane: Lane,
    pub(crate) work: Work,
    /// A cheap alternative to run instead of `work` if the target queue is past the
    /// overload threshold when the task is scheduled (thesis 000, section 7.1).
    pub(crate) on_overload: Option<Callback>,
}

impl Task {
    pub(crate) fn call(color: Color, lane: Lane, f: Callback) -> Task {
        Task {
            color,
            priority: 0,
            lane,
            work: Work::Call(f),
            on_overload: None,
        }
    }

    pub(crate) fn poll() -> Task {
        Task {
            color: Color::DEFAULT,
            priority: 0,
            lane: Lane::Io,
            work: Work::Poll,
            on_overload: None,
        }
    }

    /// Applies the overload rule: past the threshold, the drop alternative replaces the
    /// callback (and keeps its color, so it still runs in order with its peers).
    pub(crate) fn shed_if(&mut self, overloaded: bool) -> bool {
        if overloaded && let Some(alt) = self.on_overload.take() {
            self.work = Work::Call(alt);
            return true;
        }
        self.on_overload = None;
        false
    }
}
