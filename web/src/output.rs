//! A connection's queued response bytes: head and small bodies copied into one buffer (so a
//! burst of pipelined responses leaves in one `write`), large cached bodies shared, and
//! uncached files sent with `sendfile` from their descriptor.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::os::fd::AsFd;
use std::sync::Arc;

/// Bodies up to this size are copied into the output buffer; larger ones are written from
/// the cache's own bytes.
const COPY_MAX: usize = 16 * 1024;
/// A buffer chunk stops growing here, so its bytes are bounded.
const BUF_MAX: usize = 64 * 1024;
/// Largest single `sendfile`.
const SENDFILE_MAX: usize = 1 << 20;

enum Chunk {
    Buf(Vec<u8>, usize),
    Shared(Arc<[u8]>, usize, usize),
    File(Arc<File>, u64, u64),
}

#[derive(Default)]
pub struct Output {
    chunks: VecDeque<Chunk>,
    /// Bytes queued in memory (files' bytes are not: they stay in the page cache).
    bytes: usize,
}

/// What a flush did.
#[derive(Debug, PartialEq, Eq)]
pub enum Flushed {
    /// Wrote something (maybe not all).
    Progress,
    /// Nothing to write, or the socket is full.
    Idle,
}

impl Output {
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Lets `f` write a head (or any bytes) at the end of the queue, counting what it wrote.
    pub fn write_with<R>(&mut self, f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
        let buf = self.tail();
        let before = buf.len();
        let r = f(buf);
        let wrote = buf.len() - before;
        self.bytes += wrote;
        r
    }

    /// The buffer the next head is written into.
    fn tail(&mut self) -> &mut Vec<u8> {
        let fresh = !matches!(self.chunks.back(), Some(Chunk::Buf(b, _)) if b.len() < BUF_MAX);
        if fresh {
            self.chunks
                .push_back(Chunk::Buf(Vec::with_capacity(4096), 0));
        }
        match self.chunks.back_mut() {
            Some(Chunk::Buf(b, _)) => b,
            _ => unreachable!("a buffer chunk was just ensured"),
        }
    }

    /// Queues `body[start..end]`.
    pub fn push_body(&mut self, body: &Arc<[u8]>, start: usize, end: usize) {
        if end <= start {
            return;
        }
        if end - start <= COPY_MAX {
            self.tail().extend_from_slice(&body[start..end]);
        } else {
            self.chunks
                .push_back(Chunk::Shared(body.clone(), start, end));
        }
        self.bytes += end - start;
    }

    /// Queues bytes `[start, end)` of `file`.
    pub fn push_file(&mut self, file: Arc<File>, start: u64, end: u64) {
        if end > start {
            self.chunks.push_back(Chunk::File(file, start, end));
        }
    }

    /// Writes until done or the socket would block. An error (or a file that shrank under a
    /// response already promised) is returned: the connection must close.
    pub fn flush<S: Write + AsFd>(&mut self, sock: &mut S) -> io::Result<Flushed> {
        let mut progress = false;
        while let Some(front) = self.chunks.front_mut() {
            let r = match front {
                Chunk::Buf(b, pos) => sock.write(&b[*pos..]).map(|n| {
                    *pos += n;
                    (n, *pos == b.len())
                }),
                Chunk::Shared(b, pos, end) => sock.write(&b[*pos..*end]).map(|n| {
                    *pos += n;
                    (n, *pos == *end)
                }),
                Chunk::File(f, off, end) => {
                    let count = ((*end - *off) as usize).min(SENDFILE_MAX);
                    match rustix::fs::sendfile(sock.as_fd(), f.as_fd(), Some(off), count) {
                        Ok(0) => {
                            return Err(io::Error::new(ErrorKind::UnexpectedEof, "file shrank"));
                        }
                        Ok(_) => Ok((0, *off == *end)),
                        Err(e) => Err(e.into()),
                    }
                }
            };
            match r {
                Ok((n, done)) => {
                    if n == 0 && !matches!(self.chunks.front(), Some(Chunk::File(..))) {
                        return Err(io::Error::new(ErrorKind::WriteZero, "peer closed"));
                    }
                    self.bytes -= n;
                    progress = true;
                    if done {
                        self.chunks.pop_front();
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(if progress {
            Flushed::Progress
        } else {
            Flushed::Idle
        })
    }
}
