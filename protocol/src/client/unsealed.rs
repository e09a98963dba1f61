//! Requests encoded by whoever makes them and sealed later, in order, by the connection's one
//! [`RequestSender`](super::RequestSender).
//!
//! A client with many callers (the sfs client: a FUSE mount's threads, a transfer's parallel
//! requests) cannot encode every request where it seals it: sealing must follow the record
//! counter, so it happens in one place, while encoding is per-request work (a WRITE reads a
//! file's bytes into its request) that runs best where the caller runs. So a caller encodes
//! its request into an [`UnsealedRequest`], behind a gap for the record header, and hands it
//! to the one task that seals and writes; that task seals it in place
//! ([`RequestSender::seal_in_place`](super::RequestSender::seal_in_place)), so a WRITE's data
//! is never copied on the way out, or straight into a batch of small records
//! ([`RequestSender::seal_into_batch`](super::RequestSender::seal_into_batch)).

use crate::message::{Request, WriteHead, encode_write_request_at, write_request_data_offset};
use crate::record::{HEADER_LEN, TAG_LEN};

/// The alignment of a WRITE's data in its request buffer: the kernel's copy from the page
/// cache into an unaligned destination costs several times more on some CPUs.
pub const WRITE_DATA_ALIGN: usize = 64;

/// A request encoded after a record header's gap, not sealed yet. The record starts `start`
/// bytes into the buffer (the bytes before it put a WRITE's data on a cache-line boundary).
#[derive(Debug)]
pub struct UnsealedRequest {
    buf: Vec<u8>,
    start: usize,
}

impl UnsealedRequest {
    /// `request` encoded into `buf` (cleared first: a recycled one may be given).
    pub fn new(mut buf: Vec<u8>, request: &Request) -> UnsealedRequest {
        buf.clear();
        buf.extend_from_slice(&[0; HEADER_LEN]);
        request.encode_into(&mut buf);
        UnsealedRequest { buf, start: 0 }
    }

    /// A WRITE whose data, at most `max` bytes, `fill` writes straight into `buf` (a recycled
    /// buffer, not cleared: only what lies beyond its old length is zeroed) from a
    /// [`WRITE_DATA_ALIGN`] boundary; `fill`'s error is returned, and the buffer dropped.
    pub fn write<E>(
        mut buf: Vec<u8>,
        head: &WriteHead<'_>,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, E>,
    ) -> Result<UnsealedRequest, E> {
        let before_data = HEADER_LEN + write_request_data_offset(head);
        // The alignment padding, the request, XDR padding of the data and the record's tag.
        let room = WRITE_DATA_ALIGN + before_data + max + 3 + TAG_LEN;
        if buf.capacity() < room {
            buf.reserve_exact(room - buf.len());
        }
        // The buffer does not move from here on: it has room for everything, the tag included.
        let data_addr = buf.as_ptr().addr() + before_data;
        let start = (WRITE_DATA_ALIGN - data_addr % WRITE_DATA_ALIGN) % WRITE_DATA_ALIGN;
        encode_write_request_at(&mut buf, start + HEADER_LEN, head, max, fill)?;
        Ok(UnsealedRequest { buf, start })
    }

    /// Bytes of the record once sealed (header, payload and tag): what goes on the wire.
    pub fn record_len(&self) -> usize {
        self.buf.len() - self.start + TAG_LEN
    }

    /// The encoded request (the record's payload).
    pub fn payload(&self) -> &[u8] {
        &self.buf[self.start + HEADER_LEN..]
    }

    /// The buffer, for reuse.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }

    /// The buffer and where its record starts, to seal it in place.
    pub(super) fn into_parts(self) -> (Vec<u8>, usize) {
        (self.buf, self.start)
    }
}

/// A request sealed in its own buffer by
/// [`RequestSender::seal_in_place`](super::RequestSender::seal_in_place): the record, ready to
/// write, and the buffer to reuse afterwards.
#[derive(Debug)]
pub struct SealedRequest {
    buf: Vec<u8>,
    start: usize,
}

impl SealedRequest {
    /// The record sealed in `buf` from `start` on.
    pub(super) fn new(buf: Vec<u8>, start: usize) -> SealedRequest {
        SealedRequest { buf, start }
    }

    /// The record's bytes.
    pub fn record(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The buffer, for reuse once the record is written.
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
}
