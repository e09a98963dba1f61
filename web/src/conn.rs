//! One client connection, run entirely in its own color.
//!
//! Readable or writable -> [`Conn::pump`]: read what fits, parse as many pipelined requests
//! as the bounds allow, answer cache hits at once, send misses to their cache shard's color
//! (which loads the file and posts the answer back to this color), write. Responses leave in
//! request order: each request takes a place in `pending`, and only the leading answered
//! places move to the output. libcolor's promise (one color's callbacks never overlap and run
//! in order) is what lets all of this state live without a lock.
//!
//! Bounds: the input buffer is [`INBUF`] bytes (a request header block is at most 8 KiB, so
//! one always fits); at most `max_pipelined` requests wait for answers and at most
//! [`OUT_MAX`] bytes of answers wait for the peer before the connection stops parsing (and
//! then reading: TCP flow control pushes back on the client). A partial request older than
//! the header timeout, an idle keep-alive connection older than the idle timeout, and a peer
//! that takes nothing for the idle timeout are closed. After an error response the connection
//! half-closes and drains its input for at most [`LINGER`] (so the client reads the error
//! instead of a reset), then closes.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::net::Shutdown;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use libcolor::mio::net::TcpStream;
use libcolor::{Color, ColorCell, IoRegistration, TimerId};

use crate::cache::{Cache, Loaded};
use crate::output::{Flushed, Output};
use crate::parser::{self, Method, Request};
use crate::response::{self, Failure, Plan};
use crate::server::Server;

/// Input buffer size: two maximal header blocks, so a pipelined burst is read in one call.
pub const INBUF: usize = 2 * parser::MAX_HEADER_BYTES;
/// Answer bytes queued for a peer beyond which the connection stops parsing.
pub const OUT_MAX: usize = 256 * 1024;
/// How long a connection drains its input after an error response before closing.
pub const LINGER: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open,
    /// No more requests (error, `Connection: close`): close once the answers are written.
    Closing,
    /// Write side shut down; input is read and dropped until EOF or [`LINGER`].
    Lingering(Instant),
    Closed,
}

/// An answer prepared while an earlier one is still missing.
struct Reply {
    head: Vec<u8>,
    body: Body,
}

enum Body {
    None,
    Mem(Arc<[u8]>, usize, usize),
    File(Arc<File>, u64, u64),
}

enum Slot {
    Waiting,
    Ready(Reply),
}

pub struct Conn {
    color: Color,
    stream: TcpStream,
    reg: Option<IoRegistration>,
    inbuf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Answers in request order; `pending[0]` has sequence number `base`.
    pending: VecDeque<Slot>,
    base: u64,
    out: Output,
    state: State,
    peer_eof: bool,
    /// Last time the peer sent something or took something.
    last_active: Instant,
    /// When the current incomplete request began (None when the buffer is empty).
    partial_since: Option<Instant>,
    timer: Option<TimerId>,
    /// The socket may have unread input: set by a readable edge, cleared by a read that
    /// came back short or would block. Edge-triggered epoll reports every later arrival as a
    /// new edge, so a short read needs no second `read` to hit `EAGAIN` (nginx does the same).
    readable: bool,
    /// Whether the poller also watches writability: only while output is stuck, since on
    /// loopback every ACK would otherwise wake the connection for nothing.
    watching_writes: bool,
}

/// A connection's state belongs to its color (libcolor checks it on every access).
pub type ConnRef = Arc<ColorCell<Conn>>;

/// Starts serving `stream` in `color` (called in color 0 by the accept loop).
pub fn start(srv: &Arc<Server>, color: Color, mut stream: TcpStream) {
    let reg = match srv
        .h
        .register_in(color, &mut stream, libcolor::mio::Interest::READABLE)
    {
        Ok(r) => r,
        Err(_) => {
            srv.conns.fetch_sub(1, Ordering::SeqCst);
            return;
        }
    };
    let conn: ConnRef = Arc::new(ColorCell::new(
        &srv.h,
        color,
        Conn {
            color,
            stream,
            reg: None,
            inbuf: vec![0u8; INBUF].into_boxed_slice(),
            start: 0,
            end: 0,
            pending: VecDeque::new(),
            base: 0,
            out: Output::default(),
            state: State::Open,
            peer_eof: false,
            last_active: Instant::now(),
            partial_since: None,
            timer: None,
            readable: true,
            watching_writes: false,
        },
    ));
    let (s2, c2) = (srv.clone(), conn.clone());
    reg.on_readable(color, move || {
        c2.with(|c| {
            c.readable = true;
            c.pump(&s2, &c2)
        })
    });
    let (s2, c2) = (srv.clone(), conn.clone());
    reg.on_writable(color, move || c2.with(|c| c.pump(&s2, &c2)));
    let (s2, c2) = (srv.clone(), conn.clone());
    srv.h.cpucb(color, move || {
        c2.with(|c| {
            c.reg = Some(reg);
            let _ = c.stream.set_nodelay(true);
            c.arm_timer(&s2, Arc::downgrade(&c2));
            c.pump(&s2, &c2);
        })
    });
}

impl Conn {
    /// Does everything that can be done now: read, parse, answer, write, until nothing moves.
    fn pump(&mut self, srv: &Arc<Server>, me: &ConnRef) {
        loop {
            if self.state == State::Closed {
                return;
            }
            let mut progress = false;
            if self.readable && !self.peer_eof && self.end < self.inbuf.len() {
                let space = self.inbuf.len() - self.end;
                match self.stream.read(&mut self.inbuf[self.end..]) {
                    Ok(0) => {
                        self.peer_eof = true;
                        progress = true;
                    }
                    Ok(n) => {
                        self.readable = n == space;
                        self.end += n;
                        self.last_active = Instant::now();
                        if self.partial_since.is_none() {
                            self.partial_since = Some(self.last_active);
                        }
                        progress = true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => self.readable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => progress = true,
                    Err(_) => return self.close(srv),
                }
            }
            match self.state {
                State::Open => progress |= self.parse_some(srv, me),
                State::Lingering(_) => {
                    self.start = 0;
                    self.end = 0;
                    self.partial_since = None;
                    if self.peer_eof {
                        return self.close(srv);
                    }
                }
                State::Closing | State::Closed => {}
            }
            match self.out.flush(&mut self.stream) {
                Ok(Flushed::Progress) => {
                    self.last_active = Instant::now();
                    progress = true;
                }
                Ok(Flushed::Idle) => {}
                Err(_) => return self.close(srv),
            }
            if self.out.is_empty() == self.watching_writes
                && !self.watch_writes(!self.out.is_empty())
            {
                return self.close(srv);
            }
            if self.out.is_empty() && self.pending.is_empty() {
                if self.state == State::Closing {
                    let _ = self.stream.shutdown(Shutdown::Write);
                    self.state = State::Lingering(Instant::now());
                    progress = true;
                } else if self.peer_eof && self.state == State::Open {
                    // Whatever is left in the buffer is an incomplete request the peer will
                    // never finish.
                    return self.close(srv);
                }
            }
            if !progress {
                return;
            }
        }
    }

    /// Parses and answers requests while the bounds allow; true if any was taken.
    fn parse_some(&mut self, srv: &Arc<Server>, me: &ConnRef) -> bool {
        let mut took = false;
        while self.state == State::Open
            && self.start < self.end
            && self.pending.len() < srv.cfg.max_pipelined
            && self.out.bytes() < OUT_MAX
        {
            match parser::parse(&self.inbuf[self.start..self.end]) {
                Ok(Some((req, n))) => {
                    self.start += n;
                    took = true;
                    self.partial_since = (self.start < self.end).then(Instant::now);
                    if !req.keep_alive {
                        self.state = State::Closing;
                    }
                    self.answer(srv, me, req);
                }
                Ok(None) => break,
                Err(reject) => {
                    took = true;
                    self.state = State::Closing;
                    let mut head = Vec::new();
                    response::error(&mut head, Failure::Rejected(reject), None, false);
                    self.deliver(Reply {
                        head,
                        body: Body::None,
                    });
                }
            }
        }
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
            self.partial_since = None;
        } else if self.start > 0 && self.end == self.inbuf.len() {
            self.inbuf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        took
    }

    /// Answers a cache hit now; a miss asks the file's shard color and answers when it replies.
    fn answer(&mut self, srv: &Arc<Server>, me: &ConnRef, req: Request) {
        if let Some(entry) = srv.cache.get_fresh(&req.path) {
            if self.pending.is_empty() {
                let plan = self
                    .out
                    .write_with(|buf| response::file_head(buf, &req, &entry.meta));
                if let Plan::Body(s, e) = plan {
                    self.out.push_body(&entry.body, s as usize, e as usize);
                }
            } else {
                let reply = reply_for(&req, Loaded::Cached(entry));
                self.deliver(reply);
            }
            return;
        }
        let seq = self.base + self.pending.len() as u64;
        self.pending.push_back(Slot::Waiting);
        let shard = srv.cache.shard_of(&req.path);
        let (s2, c2) = (srv.clone(), me.clone());
        srv.h.cpucb(Cache::shard_color(shard), move || {
            let loaded = s2.cache.load(&s2.root, &req.path);
            let reply = reply_for(&req, loaded);
            let color = c2.color();
            let s3 = s2.clone();
            s2.h.cpucb(color, move || {
                c2.with(|c| {
                    c.fill(seq, reply);
                    c.pump(&s3, &c2);
                })
            });
        });
    }

    /// Queues `reply` after every earlier answer.
    fn deliver(&mut self, reply: Reply) {
        if self.pending.is_empty() {
            self.emit(reply);
        } else {
            self.pending.push_back(Slot::Ready(reply));
        }
    }

    /// The answer to request `seq` has come: it and the answers waiting behind it go out.
    fn fill(&mut self, seq: u64, reply: Reply) {
        if self.state == State::Closed {
            return;
        }
        if let Some(slot) = seq
            .checked_sub(self.base)
            .and_then(|i| self.pending.get_mut(i as usize))
        {
            *slot = Slot::Ready(reply);
        }
        while matches!(self.pending.front(), Some(Slot::Ready(_))) {
            if let Some(Slot::Ready(r)) = self.pending.pop_front() {
                self.base += 1;
                self.emit(r);
            }
        }
    }

    fn emit(&mut self, reply: Reply) {
        self.out.write_with(|b| b.extend_from_slice(&reply.head));
        match reply.body {
            Body::None => {}
            Body::Mem(b, s, e) => self.out.push_body(&b, s, e),
            Body::File(f, s, e) => self.out.push_file(f, s, e),
        }
    }

    /// Starts or stops watching writability; false if the poller refused.
    fn watch_writes(&mut self, on: bool) -> bool {
        let Some(reg) = &self.reg else {
            return true;
        };
        let interest = if on {
            libcolor::mio::Interest::READABLE | libcolor::mio::Interest::WRITABLE
        } else {
            libcolor::mio::Interest::READABLE
        };
        self.watching_writes = on;
        reg.reregister(&mut self.stream, interest).is_ok()
    }

    fn arm_timer(&mut self, srv: &Arc<Server>, me: Weak<ColorCell<Conn>>) {
        let (s2, tick) = (srv.clone(), srv.cfg.tick());
        self.timer = Some(srv.h.delaycb(tick, self.color, move || {
            if let Some(conn) = me.upgrade() {
                conn.with(|c| c.on_tick(&s2, &conn));
            }
        }));
    }

    /// The periodic check of the connection's time limits.
    fn on_tick(&mut self, srv: &Arc<Server>, me: &ConnRef) {
        self.timer = None;
        if self.state == State::Closed {
            return;
        }
        let now = Instant::now();
        let cfg = &srv.cfg;
        let expired = match self.state {
            State::Lingering(since) => now - since > LINGER,
            _ => {
                let waiting_for_request = self.pending.is_empty() && self.out.is_empty();
                self.partial_since
                    .is_some_and(|t| now - t > cfg.header_timeout)
                    || (waiting_for_request
                        && self.end == self.start
                        && now - self.last_active > cfg.idle_timeout)
                    || (!self.out.is_empty() && now - self.last_active > cfg.idle_timeout)
            }
        };
        if expired {
            return self.close(srv);
        }
        self.arm_timer(srv, Arc::downgrade(me));
    }

    fn close(&mut self, srv: &Arc<Server>) {
        if self.state == State::Closed {
            return;
        }
        self.state = State::Closed;
        if let Some(reg) = self.reg.take() {
            let _ = reg.deregister(&mut self.stream);
        }
        let _ = self.stream.shutdown(Shutdown::Both);
        if let Some(t) = self.timer.take() {
            srv.h.cancel_timer(t);
        }
        self.pending.clear();
        self.out = Output::default();
        self.inbuf = Box::new([]);
        srv.conns.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The answer to `req` given what the shard found.
fn reply_for(req: &Request, loaded: Loaded) -> Reply {
    let mut head = Vec::with_capacity(256);
    let body = match loaded {
        Loaded::Cached(e) => match response::file_head(&mut head, req, &e.meta) {
            Plan::Body(s, end) => Body::Mem(e.body.clone(), s as usize, end as usize),
            Plan::NoBody => Body::None,
        },
        Loaded::Large(f, meta) => match response::file_head(&mut head, req, &meta) {
            Plan::Body(s, end) => Body::File(f, s, end),
            Plan::NoBody => Body::None,
        },
        Loaded::NotFound => {
            let method = Some(req.method).filter(|m| *m == Method::Head);
            response::error(&mut head, Failure::NotFound, method, req.keep_alive);
            Body::None
        }
    };
    Reply { head, body }
}
