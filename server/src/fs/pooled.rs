//! [`Pooled`]: a blocking backend ([`BlockingStorage`], the local one) behind the storage
//! threads, as the one [`Storage`] the server calls.
//!
//! A short metadata operation runs on the calling worker, in the connection's color
//! ([`BlockingStorage::execute_inline`]: no thread hop), and one the backend refuses there goes
//! to the storage threads ([`FsPool`]: round robin between connections). A READ is answered in
//! the connection's color from a descriptor it cached when the data is in the page cache
//! (`preadv2(RWF_NOWAIT)` straight into a sent reply's buffer: no thread, no allocation);
//! otherwise a storage thread opens the file as the user (the descriptor then goes to the
//! connection's cache) and reads it (see [`crate::read`]).

use std::fs::File;
use std::sync::Arc;

use protocol::{NfsStatus, RequestOp};

use super::pool::FsPool;
use super::{BlockingStorage, Busy, Done, OpCtx, Outcome, ReadCall, Storage};
use crate::read::{ReadFailure, ReplyRecord, read_reply};

/// A blocking backend and the storage threads that run it.
pub(crate) struct Pooled<S: BlockingStorage> {
    storage: Arc<S>,
    pool: FsPool,
}

impl<S: BlockingStorage> Pooled<S> {
    pub(crate) fn new(storage: S, pool: FsPool) -> Pooled<S> {
        Pooled {
            storage: Arc::new(storage),
            pool,
        }
    }
}

impl<S: BlockingStorage> Storage for Pooled<S> {
    fn submit(&self, ctx: OpCtx, op: RequestOp, done: Done<Outcome>) -> Result<(), Busy> {
        // A short metadata operation runs here, in the connection's color, saving the two
        // thread hops of a storage thread (see `fs/local/inline.rs`).
        if let Some(outcome) = self.storage.execute_inline(&ctx, &op) {
            done(outcome);
            return Ok(());
        }
        let storage = self.storage.clone();
        self.pool
            .submit(ctx.conn, move || done(storage.execute(&ctx, op)))
    }

    fn read(&self, mut call: ReadCall<'_>) {
        let args = call.args();
        let cached = call.cached_file();
        if let Some(file) = &cached {
            let buf = call.spare_buffer();
            let lease_ms = call.lease_ms();
            match read_reply(
                buf,
                args.req_id,
                file,
                args.offset,
                args.count,
                lease_ms,
                true,
            ) {
                Ok(record) => return call.answer(Ok(record)),
                Err(ReadFailure::Status(s)) => return call.answer(Err(s)),
                // Not in the page cache: a storage thread reads it.
                Err(ReadFailure::WouldBlock) => {}
            }
        }
        let ctx = call.ctx();
        let storage = self.storage.clone();
        let job = move || -> Result<(ReplyRecord, Option<Arc<File>>), NfsStatus> {
            let (file, opened) = match cached {
                Some(f) => (f, false),
                None => (Arc::new(storage.open_read(&ctx, &args.hd)?), true),
            };
            match read_reply(
                Vec::new(),
                args.req_id,
                &file,
                args.offset,
                args.count,
                ctx.lease_ms,
                false,
            ) {
                Ok(record) => Ok((record, opened.then_some(file))),
                Err(ReadFailure::Status(s)) => Err(s),
                Err(ReadFailure::WouldBlock) => Err(NfsStatus::Jukebox),
            }
        };
        let conn = call.conn_id();
        call.later(|reply| {
            self.pool.submit(conn, move || match job() {
                Ok((record, opened)) => reply.send(Ok(record), opened),
                Err(s) => reply.send(Err(s), None),
            })
        });
    }

    fn connection_closed(&self, conn: crate::ids::ConnId) {
        self.storage.connection_closed(conn);
    }

    fn stop(&self) {
        self.pool.stop();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use protocol::{FileHandle, HandleData, ReplyBody};

    use super::*;

    /// Answers GETATTR inline (a fault, to tell it apart) and anything else on the storage
    /// threads (a success), where it first waits for the test's gate.
    struct Fake {
        gate: parking_lot::Mutex<mpsc::Receiver<()>>,
    }

    impl BlockingStorage for Fake {
        fn execute(&self, _: &OpCtx, _: RequestOp) -> Outcome {
            self.gate.lock().recv().unwrap();
            let mut out = Outcome::err(NfsStatus::ServerFault);
            out.result = Ok(ReplyBody::Null);
            out
        }
        fn execute_inline(&self, _: &OpCtx, op: &RequestOp) -> Option<Outcome> {
            matches!(op, RequestOp::GetAttr { .. }).then(|| Outcome::err(NfsStatus::Io))
        }
        fn open_read(&self, _: &OpCtx, _: &HandleData) -> Result<File, NfsStatus> {
            Err(NfsStatus::Acces)
        }
    }

    fn ctx(conn: crate::ids::ConnId) -> OpCtx {
        OpCtx {
            creds: crate::users::Creds::anonymous(65534, 65534),
            conn,
            lease_ms: 0,
        }
    }

    #[test]
    fn short_operations_run_inline_others_on_the_threads_and_a_full_pool_refuses() {
        let (gate, gate_rx) = mpsc::channel();
        let fake = Fake {
            gate: parking_lot::Mutex::new(gate_rx),
        };
        // One thread, at most one job queued per connection.
        let pooled = Pooled::new(fake, FsPool::new(1, 1, 10).unwrap());
        let fh = FileHandle::from_bytes([1; protocol::HANDLE_LEN]);
        let (tx, rx) = mpsc::channel();
        let me = std::thread::current().id();
        let done = |tx: mpsc::Sender<_>| -> Done<Outcome> {
            Box::new(move |o: Outcome| tx.send((std::thread::current().id(), o.result)).unwrap())
        };

        pooled
            .submit(ctx(1), RequestOp::GetAttr { fh }, done(tx.clone()))
            .unwrap();
        let (thread, result) = rx.try_recv().expect("completed before submit returned");
        assert_eq!(thread, me);
        assert_eq!(result, Err(NfsStatus::Io));

        let commit = || RequestOp::Commit {
            fh,
            offset: 0,
            count: 0,
        };
        // The first runs (and waits at the gate), the second is queued, the third is over
        // the connection's cap: refused, its completion dropped unrun.
        pooled.submit(ctx(1), commit(), done(tx.clone())).unwrap();
        let queued = || pooled.submit(ctx(1), commit(), done(tx.clone()));
        let mut refused = None;
        for _ in 0..100 {
            // Until the thread took the first job off the queue.
            match queued() {
                Ok(()) => {
                    refused = Some(queued());
                    break;
                }
                Err(Busy) => std::thread::sleep(std::time::Duration::from_millis(10)),
            }
        }
        assert_eq!(refused, Some(Err(Busy)));
        gate.send(()).unwrap();
        gate.send(()).unwrap();
        for _ in 0..2 {
            let (thread, result) = rx.recv().unwrap();
            assert_ne!(thread, me, "on a storage thread");
            assert!(matches!(result, Ok(ReplyBody::Null)), "{result:?}");
        }
        drop(tx);
        assert!(rx.recv().is_err(), "the refused completion never ran");
        pooled.stop();
    }
}
