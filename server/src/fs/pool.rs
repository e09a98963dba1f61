//! The storage threads: blocking file-system work, shared fairly between connections.
//!
//! Every connection has its own FIFO of jobs; the threads serve the connections with queued
//! work in round robin, one job per turn. A client that floods the server with expensive
//! requests therefore delays another client's LOOKUP by at most one of its own jobs per
//! thread, however many it queued. Each connection may queue at most `per_conn` jobs and the
//! whole pool `total` (beyond that, [`Busy`]: the request is answered JUKEBOX, "try later").
//!
//! Jobs are plain closures; the server's jobs switch to the request's credentials themselves
//! (see [`super::creds`]). After [`FsPool::stop`] no further job starts.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::ids::ConnId;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// The pool is full (for this connection or in total).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy;

#[derive(Default)]
struct Queues {
    by_conn: HashMap<ConnId, VecDeque<Job>>,
    /// Connections with queued jobs, in service order (each appears once).
    ring: VecDeque<ConnId>,
    queued: usize,
    stopping: bool,
}

/// What the storage threads share: the queues and the condition they wait on.
struct PoolState {
    queues: Mutex<Queues>,
    work: Condvar,
    per_conn: usize,
    total: usize,
}

/// A fixed set of threads running jobs round robin by connection.
pub(crate) struct FsPool {
    shared: Arc<PoolState>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl FsPool {
    /// Starts `threads` threads.
    pub(crate) fn new(threads: usize, per_conn: usize, total: usize) -> std::io::Result<FsPool> {
        let shared = Arc::new(PoolState {
            queues: Mutex::new(Queues::default()),
            work: Condvar::new(),
            per_conn: per_conn.max(1),
            total: total.max(1),
        });
        let mut handles = Vec::new();
        for i in 0..threads.max(1) {
            let s = shared.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("sfsd-fs-{i}"))
                    .spawn(move || serve(&s))?,
            );
        }
        Ok(FsPool {
            shared,
            threads: Mutex::new(handles),
        })
    }

    /// Queues `job` for `conn`.
    pub(crate) fn submit(
        &self,
        conn: ConnId,
        job: impl FnOnce() + Send + 'static,
    ) -> Result<(), Busy> {
        let mut q = self.shared.queues.lock();
        if q.stopping || q.queued >= self.shared.total {
            return Err(Busy);
        }
        let mine = q.by_conn.entry(conn).or_default();
        if mine.len() >= self.shared.per_conn {
            return Err(Busy);
        }
        let was_empty = mine.is_empty();
        mine.push_back(Box::new(job));
        if was_empty {
            q.ring.push_back(conn);
        }
        q.queued += 1;
        drop(q);
        self.shared.work.notify_one();
        Ok(())
    }

    /// No job starts after this; running jobs finish; the threads are joined.
    pub(crate) fn stop(&self) {
        {
            let mut q = self.shared.queues.lock();
            q.stopping = true;
            q.by_conn.clear();
            q.ring.clear();
            q.queued = 0;
        }
        self.shared.work.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for FsPool {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One thread: take the next connection's next job, run it, repeat.
fn serve(s: &PoolState) {
    loop {
        let job = {
            let mut q = s.queues.lock();
            loop {
                if q.stopping {
                    return;
                }
                if let Some(conn) = q.ring.pop_front() {
                    let Some(mine) = q.by_conn.get_mut(&conn) else {
                        continue;
                    };
                    let job = mine.pop_front();
                    if mine.is_empty() {
                        q.by_conn.remove(&conn);
                    } else {
                        q.ring.push_back(conn);
                    }
                    if let Some(job) = job {
                        q.queued -= 1;
                        break job;
                    }
                    continue;
                }
                s.work.wait(&mut q);
            }
        };
        job();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Submits a job for `conn` that holds the (single) thread until the returned sender is
    /// sent to, and waits until it has started.
    fn occupy(pool: &FsPool, conn: ConnId) -> mpsc::Sender<()> {
        let (gate_tx, gate_rx) = mpsc::channel::<()>();
        let (started_tx, started_rx) = mpsc::channel::<()>();
        pool.submit(conn, move || {
            started_tx.send(()).unwrap();
            gate_rx.recv().unwrap();
        })
        .unwrap();
        started_rx.recv().unwrap();
        gate_tx
    }

    #[test]
    fn round_robin_between_connections() {
        // One thread, blocked while both connections queue: conn 1 queues 5, conn 2 queues 1.
        let pool = FsPool::new(1, 16, 100).unwrap();
        let gate_tx = occupy(&pool, 9);
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..5 {
            let o = order.clone();
            pool.submit(1, move || o.lock().push((1, i))).unwrap();
        }
        let o = order.clone();
        pool.submit(2, move || o.lock().push((2, 0))).unwrap();
        gate_tx.send(()).unwrap();
        let (done_tx, done_rx) = mpsc::channel();
        // Queued behind all of conn 1's jobs, so it runs last.
        pool.submit(1, move || done_tx.send(()).unwrap()).unwrap();
        done_rx.recv().unwrap();
        let order = order.lock().clone();
        let pos2 = order.iter().position(|&(c, _)| c == 2).unwrap();
        assert!(
            pos2 <= 1,
            "conn 2's job waits for at most one of conn 1's: {order:?}"
        );
        let ones: Vec<_> = order.iter().filter(|(c, _)| *c == 1).map(|x| x.1).collect();
        assert_eq!(
            ones,
            vec![0, 1, 2, 3, 4],
            "one connection's jobs stay in order"
        );
    }

    #[test]
    fn caps_per_connection_and_total() {
        let pool = FsPool::new(1, 2, 3).unwrap();
        let gate_tx = occupy(&pool, 1);
        pool.submit(1, || ()).unwrap();
        pool.submit(1, || ()).unwrap();
        assert_eq!(pool.submit(1, || ()), Err(Busy), "per-connection cap");
        pool.submit(2, || ()).unwrap();
        assert_eq!(pool.submit(3, || ()), Err(Busy), "total cap");
        gate_tx.send(()).unwrap();
        pool.stop();
        assert_eq!(pool.submit(4, || ()), Err(Busy), "nothing after stop");
    }
}
