//! The bounded helper pool for blocking calls (disk I/O that may miss the page cache, user
//! lookups, DNS): workers must never block, so such calls run here and their completion comes
//! back as a callback (the libasync-smp paper section 4.3 makes the same split for SFS's disk reads).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use std::thread::JoinHandle;

use crossbeam_channel::{Sender, TrySendError, bounded};

use crossbeam_utils::CachePadded;

pub(crate) type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool's queue is full: the caller should shed the request (or retry later).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the blocking-call helper pool is saturated")]
pub struct PoolBusy;

pub(crate) struct Pool {
    sender: Mutex<Option<Sender<Job>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl Pool {
    /// Helpers drop (without running) every job they take once `stopping` is set.
    pub(crate) fn new(
        threads: usize,
        queue: usize,
        stopping: Arc<CachePadded<AtomicBool>>,
    ) -> std::io::Result<Pool> {
        let (sender, receiver) = bounded::<Job>(queue.max(1));
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads.max(1) {
            let receiver = receiver.clone();
            let stopping = stopping.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("libcolor-helper-{i}"))
                    .spawn(move || {
                        for job in receiver {
                            if stopping.load(Ordering::Acquire) {
                                drop(job);
                            } else {
                                job();
                            }
                        }
                    })?,
            );
        }
        Ok(Pool {
            sender: Mutex::new(Some(sender)),
            threads: Mutex::new(handles),
        })
    }

    pub(crate) fn submit(&self, job: Job) -> Result<(), PoolBusy> {
        let sender = self.sender.lock().clone().ok_or(PoolBusy)?;
        sender.try_send(job).map_err(|err| match err {
            TrySendError::Full(_) | TrySendError::Disconnected(_) => PoolBusy,
        })
    }

    /// Stops accepting jobs and waits for the helpers: a job already running finishes (a
    /// blocking call cannot be interrupted), jobs still queued are dropped without running
    /// (the runtime has stopped, so nothing would consume their results), and completions
    /// posted to the stopped runtime are dropped without running.
    pub(crate) fn shutdown(&self) {
        self.sender.lock().take();
        let threads = std::mem::take(&mut *self.threads.lock());
        let me = std::thread::current().id();
        for handle in threads {
            if handle.thread().id() != me {
                let _ = handle.join();
            }
        }
    }
}
