//! A connection's output: sealed records waiting for the socket, in nonce order.
//!
//! Records leave in the order their nonces were taken (the peer opens them in that order).
//! A record being sealed on another worker ([`protocol::Sealer::defer`]) holds its place as a
//! *pending* slot: nothing behind it is written until it is filled. Ready records are written
//! several at a time (`writev`). Buffers of sent READ replies are kept for the next replies
//! (at most [`SPARE_BUFFERS`]), so a stream of READs does not fault in fresh pages for each;
//! so are the data buffers of written WRITEs, which the next WRITE is decoded into.

use std::collections::VecDeque;
use std::io::{self, IoSlice, Write};

/// Reply buffers kept for reuse.
const SPARE_BUFFERS: usize = 4;
/// Smallest buffer worth keeping (a READ reply's or a WRITE's data); requests at least this
/// large are decoded into a spare buffer.
pub(crate) const SPARE_MIN_CAPACITY: usize = 16 * 1024;
/// Buffers handed to one `writev`.
const WRITEV_MAX: usize = 16;

enum Slot {
    /// A sealed record: the bytes of the buffer from the offset on (the bytes before are
    /// padding that aligned its data for the kernel's copy).
    Ready(Vec<u8>, usize),
    /// Being sealed elsewhere: `bytes` are counted already.
    Pending { token: u64, bytes: usize },
}

/// Queued output of one connection.
#[derive(Default)]
pub(crate) struct Output {
    slots: VecDeque<Slot>,
    /// Bytes of the front slot already written.
    front_written: usize,
    /// Bytes queued and not yet written (pending slots by their announced size).
    bytes: usize,
    spare: Vec<Vec<u8>>,
    /// Capacity of the kept buffers, at most `spare_budget` (the connection's output limit:
    /// what it keeps for reuse is bounded like what it queues).
    spare_bytes: usize,
    spare_budget: usize,
    next_token: u64,
    pending: usize,
}

/// What a write attempt did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flushed {
    /// Everything ready was written (pending slots may remain).
    Done,
    /// The socket is full: wait until it is writable.
    WouldBlock,
    /// The peer stopped reading (a write of 0 bytes).
    Closed,
}

impl Output {
    /// An output that keeps at most `spare_budget` bytes of buffers for reuse, with `first`
    /// queued.
    pub(crate) fn with_first(first: Vec<u8>, spare_budget: usize) -> Output {
        let mut out = Output {
            spare_budget,
            ..Output::default()
        };
        out.push(first);
        out
    }

    /// Bytes queued and not yet written.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Records being sealed elsewhere.
    pub(crate) fn pending(&self) -> usize {
        self.pending
    }

    pub(crate) fn push(&mut self, buf: Vec<u8>) {
        self.push_from(buf, 0);
    }

    /// Queues the bytes of `buf` from `from` on.
    pub(crate) fn push_from(&mut self, buf: Vec<u8>, from: usize) {
        if buf.len() > from {
            self.bytes += buf.len() - from;
            self.slots.push_back(Slot::Ready(buf, from));
        }
    }

    /// Holds the next place for a record of `bytes` being sealed elsewhere; returns the token
    /// to [`Output::fill`] it with.
    pub(crate) fn push_pending(&mut self, bytes: usize) -> u64 {
        let token = self.next_token;
        self.next_token += 1;
        self.bytes += bytes;
        self.pending += 1;
        self.slots.push_back(Slot::Pending { token, bytes });
        token
    }

    /// The record for `token` is sealed: the bytes of `buf` from `from` on. False if there is
    /// no such pending slot (the output was cleared).
    pub(crate) fn fill(&mut self, token: u64, buf: Vec<u8>, from: usize) -> bool {
        let slot = self
            .slots
            .iter_mut()
            .find(|s| matches!(s, Slot::Pending { token: t, .. } if *t == token));
        let Some(slot) = slot else {
            return false;
        };
        let Slot::Pending { bytes, .. } = *slot else {
            return false;
        };
        self.bytes = self.bytes - bytes + buf.len().saturating_sub(from);
        self.pending -= 1;
        let from = from.min(buf.len());
        *slot = Slot::Ready(buf, from);
        true
    }

    /// Drops everything queued (the connection closed).
    pub(crate) fn clear(&mut self) {
        *self = Output {
            next_token: self.next_token,
            spare_budget: self.spare_budget,
            ..Output::default()
        };
    }

    /// A buffer for the next reply, or the next receive buffer (a sent one, if any). It may
    /// still hold bytes of this connection's earlier messages: whoever takes it clears it, or
    /// (the receive buffer) only ever reads what it wrote, and so need not zero it again.
    pub(crate) fn take_spare(&mut self) -> Vec<u8> {
        let buf = self.spare.pop().unwrap_or_default();
        self.spare_bytes -= buf.capacity();
        buf
    }

    /// Keeps `buf` for a later reply or request (a sent reply's, or a written WRITE's data)
    /// if it is large and few are kept.
    pub(crate) fn keep_spare(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE_BUFFERS
            && buf.capacity() >= SPARE_MIN_CAPACITY
            && self.spare_bytes + buf.capacity() <= self.spare_budget
        {
            self.spare_bytes += buf.capacity();
            self.spare.push(buf);
        }
    }

    /// Lets the spare buffers go (the connection is quiet).
    pub(crate) fn release_spare(&mut self) {
        self.spare = Vec::new();
        self.spare_bytes = 0;
    }

    /// Writes ready records, in order, until done, blocked or failed.
    pub(crate) fn write_to(&mut self, w: &mut impl Write) -> io::Result<Flushed> {
        loop {
            let mut slices = [IoSlice::new(&[]); WRITEV_MAX];
            let mut n = 0;
            for slot in self.slots.iter().take(WRITEV_MAX) {
                let Slot::Ready(buf, from) = slot else {
                    break;
                };
                let written = if n == 0 { self.front_written } else { 0 };
                slices[n] = IoSlice::new(&buf[from + written..]);
                n += 1;
            }
            if n == 0 {
                return Ok(Flushed::Done);
            }
            match w.write_vectored(&slices[..n]) {
                Ok(0) => return Ok(Flushed::Closed),
                Ok(written) => self.consume(written),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Flushed::WouldBlock),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn consume(&mut self, mut n: usize) {
        self.bytes -= n;
        while n > 0 {
            let Some(Slot::Ready(front, from)) = self.slots.front() else {
                return;
            };
            let left = front.len() - from - self.front_written;
            if n < left {
                self.front_written += n;
                return;
            }
            n -= left;
            self.front_written = 0;
            if let Some(Slot::Ready(done, _)) = self.slots.pop_front() {
                self.keep_spare(done);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket that takes at most `limit` bytes per call, and nothing once `full`.
    struct Trickle {
        got: Vec<u8>,
        limit: usize,
        full: bool,
    }

    impl Write for Trickle {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.full {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.limit);
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn records_leave_in_order_and_wait_for_a_pending_one() {
        let mut out = Output::default();
        let mut sock = Trickle {
            got: Vec::new(),
            limit: 3,
            full: false,
        };
        out.push(b"one".to_vec());
        let t = out.push_pending(5);
        out.push(b"three".to_vec());
        assert_eq!(out.bytes(), 13);
        assert_eq!(out.write_to(&mut sock).unwrap(), Flushed::Done);
        assert_eq!(sock.got, b"one", "nothing passes a pending record");
        assert!(!out.fill(t + 1, b"wrong".to_vec(), 0));
        assert!(out.fill(t, b"padtwo!!".to_vec(), 3));
        assert_eq!(out.pending(), 0);
        assert_eq!(out.write_to(&mut sock).unwrap(), Flushed::Done);
        assert_eq!(sock.got, b"onetwo!!three");
        assert_eq!(out.bytes(), 0);
        assert!(out.is_empty());
    }

    #[test]
    fn a_full_socket_keeps_the_rest_and_partial_writes_resume_mid_record() {
        let mut out = Output::default();
        let mut sock = Trickle {
            got: Vec::new(),
            limit: 4,
            full: false,
        };
        out.push(b"abcdefgh".to_vec());
        out.push_from(b"--ij".to_vec(), 2);
        assert_eq!(out.bytes(), 10, "padding before a record is not output");
        sock.full = true;
        assert_eq!(out.write_to(&mut sock).unwrap(), Flushed::WouldBlock);
        sock.full = false;
        assert_eq!(out.write_to(&mut sock).unwrap(), Flushed::Done);
        assert_eq!(sock.got, b"abcdefghij");
        // A padded record cut by a partial write resumes after the padding and what was sent.
        out.push_from(b"xxxklmnopq".to_vec(), 3);
        sock.limit = 2;
        sock.full = false;
        assert_eq!(out.write_to(&mut sock).unwrap(), Flushed::Done);
        assert_eq!(sock.got, b"abcdefghijklmnopq");
        assert_eq!(out.bytes(), 0);
    }

    #[test]
    fn sent_reply_buffers_are_reused_and_released() {
        let mut out = Output::with_first(Vec::new(), usize::MAX);
        let mut sock = Trickle {
            got: Vec::new(),
            limit: usize::MAX,
            full: false,
        };
        for _ in 0..SPARE_BUFFERS + 1 {
            out.push(vec![1; SPARE_MIN_CAPACITY]);
        }
        out.push(vec![1; 10]);
        out.write_to(&mut sock).unwrap();
        for _ in 0..SPARE_BUFFERS {
            let spare = out.take_spare();
            assert!(spare.capacity() >= SPARE_MIN_CAPACITY);
        }
        assert_eq!(
            out.take_spare().capacity(),
            0,
            "no more kept, small ones not at all"
        );
        out.push(vec![1; SPARE_MIN_CAPACITY]);
        out.write_to(&mut sock).unwrap();
        out.release_spare();
        assert_eq!(out.take_spare().capacity(), 0);
    }

    #[test]
    fn kept_buffers_stay_within_the_budget() {
        let mut out = Output::with_first(Vec::new(), 3 * SPARE_MIN_CAPACITY);
        out.keep_spare(Vec::with_capacity(2 * SPARE_MIN_CAPACITY));
        out.keep_spare(Vec::with_capacity(2 * SPARE_MIN_CAPACITY));
        out.keep_spare(Vec::with_capacity(SPARE_MIN_CAPACITY));
        let kept: Vec<usize> = (0..3).map(|_| out.take_spare().capacity()).collect();
        assert_eq!(
            kept,
            [SPARE_MIN_CAPACITY, 2 * SPARE_MIN_CAPACITY, 0],
            "the second large buffer did not fit"
        );
        // Taking a buffer frees its share of the budget.
        out.keep_spare(Vec::with_capacity(3 * SPARE_MIN_CAPACITY));
        assert_eq!(out.take_spare().capacity(), 3 * SPARE_MIN_CAPACITY);
    }
}
