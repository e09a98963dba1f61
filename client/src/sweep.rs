//! A periodic sweep of a table of deadlines, ticking only while the table holds any.
//!
//! A timer per request (a timeout, a watch for the caller's death) costs a registration with
//! the runtime's time driver each; tokio's driver wakes its thread for every registration
//! earlier than the next timer it already waits for, which, for requests one after another,
//! is every one. Made from a thread outside the runtime (a FUSE reading thread), that is a
//! wake-up of another thread per request. One sweep per table, ticking while the table holds
//! entries and for a while after, registers no timer per request: a request checks a flag
//! and wakes the sweep only at the start of a burst. The price is precision: a deadline is
//! seen up to one tick late.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The sweep's side of a table ([module docs](self)).
#[derive(Default)]
pub(crate) struct Sweep {
    ticking: AtomicBool,
    start: Notify,
}

impl Sweep {
    /// An entry was put in the table: the sweep ticks from now on, if it did not.
    pub(crate) fn added(&self) {
        if !self.ticking.load(Ordering::SeqCst) {
            self.start.notify_one();
        }
    }

    /// Calls `sweep` every `every` while it says the table holds entries (`Some(true)`) and
    /// for `linger` ticks after, then waits for [`Sweep::added`]; returns when `sweep` says
    /// the table is gone (`None`).
    pub(crate) async fn run(
        &self,
        every: Duration,
        linger: u32,
        mut sweep: impl FnMut() -> Option<bool>,
    ) {
        loop {
            self.ticking.store(true, Ordering::SeqCst);
            let mut idle = 0;
            while idle < linger {
                tokio::time::sleep(every).await;
                match sweep() {
                    None => return,
                    Some(true) => idle = 0,
                    Some(false) => idle += 1,
                }
            }
            self.ticking.store(false, Ordering::SeqCst);
            // An entry put in after the last tick saw the sweep ticking and did not wake it.
            match sweep() {
                None => return,
                Some(true) => continue,
                Some(false) => self.start.notified().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;
    use std::sync::Arc;
    use std::time::Instant;

    /// Entries put in at any time, busy or idle, are swept within a few ticks; an idle table
    /// stops the ticking.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_entry_is_swept_and_an_idle_sweep_stops() {
        let table: Arc<Mutex<Vec<Instant>>> = Arc::default();
        let sweep = Arc::new(Sweep::default());
        let ticks = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let runner = {
            let (table, sweep, ticks) = (table.clone(), sweep.clone(), ticks.clone());
            tokio::spawn(async move {
                sweep
                    .run(Duration::from_millis(5), 3, || {
                        ticks.fetch_add(1, Ordering::SeqCst);
                        let mut t = table.lock();
                        t.retain(|d| d.elapsed() < Duration::from_millis(2));
                        Some(!t.is_empty())
                    })
                    .await
            })
        };
        for round in 0..40 {
            // From a thread outside the runtime, at every phase of the sweep's cycle.
            let (t, s) = (table.clone(), sweep.clone());
            std::thread::spawn(move || {
                t.lock().push(Instant::now());
                s.added();
            })
            .join()
            .unwrap();
            let put = Instant::now();
            while !table.lock().is_empty() {
                assert!(
                    put.elapsed() < Duration::from_secs(2),
                    "round {round}: an entry was never swept"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(round % 30)).await;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let idle = ticks.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(ticks.load(Ordering::SeqCst), idle, "an idle sweep ticks on");
        runner.abort();
    }
}
