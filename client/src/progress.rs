//! Progress bars for transfers: shown only on a terminal and only once a transfer has taken
//! more than a second, so short copies and scripts see no noise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A byte counter that becomes a visible bar after a second on a terminal.
pub(crate) struct Progress {
    bar: ProgressBar,
    start: Instant,
    shown: bool,
    tty: bool,
}

impl Progress {
    /// A bar for `total` bytes (unknown when `None`) labelled `label`.
    pub(crate) fn new(label: &str, total: Option<u64>) -> Progress {
        let bar = match total {
            Some(t) => ProgressBar::with_draw_target(Some(t), ProgressDrawTarget::hidden()),
            None => ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden()),
        };
        let style = ProgressStyle::with_template(
            "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar())
        .progress_chars("=> ");
        bar.set_style(style);
        bar.set_message(crate::commands::shown::escaped(label).into_owned());
        Progress {
            bar,
            start: Instant::now(),
            shown: false,
            tty: std::io::stderr().is_terminal(),
        }
    }

    /// Counts `n` more bytes done.
    pub(crate) fn inc(&mut self, n: u64) {
        self.bar.inc(n);
        if !self.shown && self.tty && self.start.elapsed() > Duration::from_secs(1) {
            self.shown = true;
            self.bar.set_draw_target(ProgressDrawTarget::stderr());
        }
    }

    /// Ends the bar (leaves the final line on screen when it was shown).
    pub(crate) fn finish(self) {
        if self.shown {
            self.bar.finish();
        }
    }
}
