//! A connection's sending side: requests sealed in order and written, straight from the
//! sending thread when the socket takes them at once.
//!
//! The record counter is the nonce, so a record must be written in the order it was sealed:
//! both happen under one lock. A small request sent while nothing is waiting to be written is
//! sealed and written at once by whoever sends it (a FUSE reading thread, a runtime thread):
//! no task is woken to write it, so a request through the mount costs the runtime no wake-up
//! of its own (a wake-up crosses CPUs and costs tens of microseconds on a VM). Whatever the
//! socket does not take at once, and every large request (WRITE data, sealed in its own
//! buffer), goes to a queue that the writer task drains in order, with small records gathered
//! into batches; while it does, later requests join the queue behind them.

use std::collections::VecDeque;
use std::io::ErrorKind;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use protocol::client::{RequestSender, SealedRequest, UnsealedRequest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::sync::Notify;

use super::ClientState;

/// Requests at least this large are sealed and written from their own buffer (then recycled);
/// smaller ones are copied into a batch.
const WRITE_ALONE: usize = 64 * 1024;

/// Most bytes of small records gathered into one batch before another is begun.
const BATCH: usize = 256 * 1024;

/// Sealed bytes not yet written, in order.
enum Chunk {
    Batch(Vec<u8>),
    Alone(SealedRequest),
}

struct State {
    sealer: RequestSender,
    queue: VecDeque<Chunk>,
    /// The writer task owns the socket until the queue is empty: nobody else writes.
    writing: bool,
    /// Requests sealed so far: the last one's place in the order of the connection.
    sealed: u64,
    /// Sealing or writing failed: the connection is over.
    broken: bool,
}

/// The sending side of one connection ([module docs](self)).
pub(super) struct Outgoing {
    state: Mutex<State>,
    socket: OwnedWriteHalf,
    /// Wakes the writer task when the queue gets work.
    work: Notify,
}

/// Sending failed: the record could not be sealed (a counter or key limit) or written. The
/// connection is over.
#[derive(Debug)]
pub(super) struct Broken;

impl Outgoing {
    pub(super) fn new(sealer: RequestSender, socket: OwnedWriteHalf) -> Arc<Outgoing> {
        Arc::new(Outgoing {
            state: Mutex::new(State {
                sealer,
                queue: VecDeque::new(),
                writing: false,
                sealed: 0,
                broken: false,
            }),
            socket,
            work: Notify::new(),
        })
    }

    /// Seals `request` as the connection's next record and writes it, or queues it for the
    /// writer task; returns its place in the connection's order.
    pub(super) fn send(&self, request: UnsealedRequest) -> Result<u64, Broken> {
        let mut s = self.state.lock();
        if s.broken {
            return Err(Broken);
        }
        let small = request.record_len() < WRITE_ALONE;
        let sealed = match small {
            true => {
                let mut record = Vec::with_capacity(request.record_len());
                s.sealer
                    .seal_into_batch(&request, &mut record)
                    .map(|()| Chunk::Batch(record))
            }
            false => s.sealer.seal_in_place(request).map(Chunk::Alone),
        };
        let Ok(chunk) = sealed else {
            s.broken = true;
            return Err(Broken);
        };
        s.sealed += 1;
        let place = s.sealed;
        match chunk {
            Chunk::Batch(mut record) if !s.writing => {
                // Nothing is queued (the queue is only ever non-empty while the writer
                // task writes): straight to the socket, the rest to the writer task.
                let taken = match self.socket.try_write(&record) {
                    Ok(n) => n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                    Err(_) => {
                        s.broken = true;
                        return Err(Broken);
                    }
                };
                if taken < record.len() {
                    record.drain(..taken);
                    self.hand_over(&mut s, Chunk::Batch(record));
                }
            }
            Chunk::Batch(record) => match s.queue.back_mut() {
                Some(Chunk::Batch(b)) if b.len() < BATCH => b.extend_from_slice(&record),
                _ => s.queue.push_back(Chunk::Batch(record)),
            },
            alone => self.hand_over(&mut s, alone),
        }
        Ok(place)
    }

    /// Queues `chunk` and makes sure the writer task writes it.
    fn hand_over(&self, s: &mut State, chunk: Chunk) {
        s.queue.push_back(chunk);
        if !s.writing {
            s.writing = true;
            self.work.notify_one();
        }
    }

    /// Takes the next chunk to write, or, when none is left, gives the socket back.
    fn next_chunk(&self) -> Option<Chunk> {
        let mut s = self.state.lock();
        let next = s.queue.pop_front();
        if next.is_none() {
            s.writing = false;
        }
        next
    }

    fn break_off(&self) {
        let mut s = self.state.lock();
        s.broken = true;
        s.queue.clear();
    }
}

/// The writer task: writes what [`Outgoing::send`] queued, in order, until the connection
/// breaks (then `on_broken` runs) or the connection is dropped (the task is aborted).
pub(super) async fn write_queued(
    out: Arc<Outgoing>,
    client: Weak<ClientState>,
    on_broken: impl FnOnce(),
) {
    loop {
        out.work.notified().await;
        while let Some(chunk) = out.next_chunk() {
            let written = match &chunk {
                Chunk::Batch(b) => write_all(&out.socket, b).await,
                Chunk::Alone(r) => write_all(&out.socket, r.record()).await,
            };
            if let (Chunk::Alone(r), Some(inner)) = (chunk, client.upgrade()) {
                inner.recycle(r.into_buffer());
            }
            if written.is_err() {
                out.break_off();
                on_broken();
                return;
            }
        }
    }
}

/// Writes all of `buf` through the shared write half (which takes `&self`).
async fn write_all(socket: &OwnedWriteHalf, mut buf: &[u8]) -> std::io::Result<()> {
    while !buf.is_empty() {
        socket.writable().await?;
        match socket.try_write(buf) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
