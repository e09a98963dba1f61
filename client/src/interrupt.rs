//! Requests whose program is being killed end at once, so `kill` works on a program waiting
//! for a slow or silent server.
//!
//! Once a FUSE request is read by the file system, the kernel waits for its answer
//! uninterruptibly: a fatal signal only marks the waiting thread, and the kernel tells the
//! file system with an INTERRUPT request. fuser 0.18 answers INTERRUPT itself (`ENOSYS`, after
//! which the kernel sends no more), so the file system never hears of it. Instead, a sweep
//! every [`CHECK_EVERY`] looks in `/proc` at the thread of each request unanswered for that
//! long: when the kernel has queued SIGKILL for it (it does so for every thread of a process
//! that a fatal signal ends, SIGKILL, or SIGTERM or SIGINT without a handler), the request's
//! work is dropped, and with it its reply, which fuser answers with `EIO`. Nobody sees that
//! error: the program is dying. Signals a program handles do not end its requests (as with a
//! file system that ignores INTERRUPT). One sweep, not a timer per request: see
//! [`crate::sweep`].

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::sweep::Sweep;

/// How long a killed program may wait for its request to end, and how often the thread of a
/// request left waiting is looked at (one small `/proc` read): a second is about what `kill`
/// is expected to take, and five small reads a second per waiting request cost nothing next
/// to the wait itself.
const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Idle sweeps before the sweep stops ticking.
const LINGER: u32 = 25;

/// SIGKILL's bit in a `/proc` signal mask (bit `signal - 1`).
const SIGKILL_BIT: u64 = 1 << (libc::SIGKILL - 1);

/// A request being answered, for the sweep.
struct Watched {
    tid: u32,
    since: Instant,
    /// Ends the request; taken when fired, or when the thread cannot be seen (another pid
    /// namespace, gone): nothing to watch then.
    end: Option<oneshot::Sender<()>>,
}

/// The requests of a mount being answered, watched for their callers' deaths ([module
/// docs](self)).
pub(crate) struct KillWatch {
    watched: Arc<Mutex<Requests>>,
    sweep: Arc<Sweep>,
}

#[derive(Default)]
struct Requests {
    next: u64,
    by_id: HashMap<u64, Watched>,
}

impl KillWatch {
    /// A watch whose sweep runs on `rt` while the watch lives.
    pub(crate) fn start(rt: &Handle) -> Arc<KillWatch> {
        let watch = KillWatch {
            watched: Arc::default(),
            sweep: Arc::default(),
        };
        let (watched, sweep) = (Arc::downgrade(&watch.watched), watch.sweep.clone());
        rt.spawn(async move {
            sweep
                .run(CHECK_EVERY, LINGER, || Some(check(&*watched.upgrade()?)))
                .await
        });
        Arc::new(watch)
    }

    /// Runs `work` (answering a request from thread `tid`) to its end, or until `tid` is
    /// being killed. `tid` 0 (a request the kernel makes itself) always runs to its end.
    pub(crate) async fn unless_killed(self: Arc<Self>, tid: u32, work: impl Future<Output = ()>) {
        if tid == 0 {
            return work.await;
        }
        let (end, ended) = oneshot::channel();
        let id = {
            let mut w = self.watched.lock();
            w.next += 1;
            let id = w.next;
            let since = Instant::now();
            w.by_id.insert(
                id,
                Watched {
                    tid,
                    since,
                    end: Some(end),
                },
            );
            id
        };
        self.sweep.added();
        let _unwatch = Unwatch(&self.watched, id);
        tokio::select! {
            () = work => {}
            Ok(()) = ended => tracing::info!(tid, "the caller is being killed; its request ends"),
        }
    }
}

impl Drop for KillWatch {
    /// Lets an idle sweep see that the watch is gone, and end.
    fn drop(&mut self) {
        self.sweep.added();
    }
}

/// Ends the requests whose threads have SIGKILL pending; whether any request is left.
fn check(watched: &Mutex<Requests>) -> bool {
    let mut w = watched.lock();
    let now = Instant::now();
    for r in w.by_id.values_mut() {
        if r.end.is_none() || now.duration_since(r.since) < CHECK_EVERY {
            continue;
        }
        match std::fs::read_to_string(format!("/proc/{}/status", r.tid)) {
            Ok(s) if sigkill_pending(&s) => {
                if let Some(end) = r.end.take() {
                    let _ = end.send(());
                }
            }
            Ok(_) => {}
            Err(_) => r.end = None,
        }
    }
    !w.by_id.is_empty()
}

/// Takes a request out of the watch when it ends, however it ends.
struct Unwatch<'a>(&'a Mutex<Requests>, u64);

impl Drop for Unwatch<'_> {
    fn drop(&mut self) {
        self.0.lock().by_id.remove(&self.1);
    }
}

/// Whether a `/proc/TID/status` text shows SIGKILL pending for the thread (`SigPnd`) or its
/// process (`ShdPnd`).
fn sigkill_pending(status: &str) -> bool {
    status.lines().any(|l| {
        let Some((key, mask)) = l.split_once(':') else {
            return false;
        };
        matches!(key, "SigPnd" | "ShdPnd")
            && u64::from_str_radix(mask.trim(), 16).is_ok_and(|m| m & SIGKILL_BIT != 0)
    })
}

/// Whether thread `tid` has a signal pending that it does not block (`SigPnd` or `ShdPnd`
/// against `SigBlk` in `/proc/TID/status`): a request that waits on purpose (a blocking lock,
/// [`crate::fuse`]'s `setlk`) then ends with `EINTR`, as a local `fcntl(F_SETLKW)` does, so the
/// program's handler runs. False when the thread cannot be seen (another pid namespace, gone).
pub(crate) fn signal_pending(tid: u32) -> bool {
    tid != 0
        && std::fs::read_to_string(format!("/proc/{tid}/status"))
            .is_ok_and(|s| unblocked_pending(&s))
}

/// Whether a `/proc/TID/status` text shows a pending signal its thread does not block.
fn unblocked_pending(status: &str) -> bool {
    let mut pending = 0u64;
    let mut blocked = 0u64;
    for l in status.lines() {
        let Some((key, mask)) = l.split_once(':') else {
            continue;
        };
        let Ok(m) = u64::from_str_radix(mask.trim(), 16) else {
            continue;
        };
        match key {
            "SigPnd" | "ShdPnd" => pending |= m,
            "SigBlk" => blocked |= m,
            _ => {}
        }
    }
    pending & !blocked != 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pending_signal_counts_unless_blocked() {
        let alarm =
            "SigPnd:\t0000000000000000\nShdPnd:\t0000000000002000\nSigBlk:\t0000000000000000\n";
        assert!(unblocked_pending(alarm));
        let blocked =
            "SigPnd:\t0000000000000000\nShdPnd:\t0000000000002000\nSigBlk:\t0000000000002000\n";
        assert!(!unblocked_pending(blocked));
        assert!(unblocked_pending(
            "SigPnd:\t0000000000000001\nSigBlk:\t0000000000002000\n"
        ));
        assert!(!unblocked_pending("SigPnd:\tgarbage\n"));
        assert!(!signal_pending(0));
        assert!(!signal_pending(std::process::id()));
    }

    #[test]
    fn sigkill_is_read_from_either_pending_mask() {
        let quiet =
            "Name:\tstat\nSigQ:\t0/1\nSigPnd:\t0000000000000000\nShdPnd:\t0000000000004000\n";
        assert!(!sigkill_pending(quiet), "SIGTERM alone is not a kill");
        let dying = "SigPnd:\t0000000000000100\nShdPnd:\t0000000000004000\n";
        assert!(sigkill_pending(dying));
        assert!(sigkill_pending("ShdPnd:\t0000000000000100\n"));
        assert!(
            !sigkill_pending("SigBlk:\t0000000000000100\n"),
            "blocked is not pending"
        );
        assert!(!sigkill_pending("SigPnd:\tgarbage\nShdPnd:\n"));
    }

    #[test]
    fn own_status_parses_and_shows_no_kill() {
        let s = std::fs::read_to_string("/proc/self/status").unwrap();
        assert!(s.contains("SigPnd:"));
        assert!(!sigkill_pending(&s));
    }

    #[tokio::test]
    async fn requests_of_the_kernel_and_unknown_threads_run_to_their_end() {
        let watch = KillWatch::start(&Handle::current());
        let mut ran = false;
        watch.clone().unless_killed(0, async { ran = true }).await;
        assert!(ran);
        let done = tokio::time::timeout(
            Duration::from_millis(700),
            watch
                .clone()
                .unless_killed(u32::MAX, tokio::time::sleep(Duration::from_millis(650))),
        )
        .await;
        assert!(done.is_ok(), "no /proc entry: never treated as killed");
        assert!(
            watch.watched.lock().by_id.is_empty(),
            "an ended request is not watched"
        );
    }

    /// The sweep looks at long requests (this one is, after 200 ms) and lets those of a live
    /// caller run on. The killed case needs a thread the kernel holds with SIGKILL pending:
    /// `client/tests/fuse_mount.rs` kills programs waiting on a stopped server.
    #[tokio::test]
    async fn a_live_callers_long_request_runs_on() {
        let watch = KillWatch::start(&Handle::current());
        let done = tokio::time::timeout(
            Duration::from_millis(900),
            watch.clone().unless_killed(
                std::process::id(),
                tokio::time::sleep(Duration::from_millis(800)),
            ),
        )
        .await;
        assert!(done.is_ok(), "a live caller's request runs to its end");
    }
}
