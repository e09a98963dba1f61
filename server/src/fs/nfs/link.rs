//! The backend's RPC connections: libcolor sockets, calls pipelined, replies matched by XID
//! and completed as callbacks in the connection's color. No helper threads.
//!
//! Each [`Link`] is owned by its own color (a [`ColorCell`]): sending, reading, the XID table
//! and reconnecting all run there, so links work in parallel with each other and with the
//! client connections. Completions run in the link's color too, *after* the link's state is
//! released, so a completion may immediately issue the next call of a multi-call operation.
//!
//! A link that fails (connection refused or reset, EOF, a malformed or oversized record, or a
//! call unanswered for [`CALL_TIMEOUT`] by default) completes every call in flight with
//! [`CallError::Down`] and reconnects with backoff; while it is down, calls fail at once (the
//! client gets JUKEBOX and retries) rather than queue without bound.

use std::collections::{HashMap, VecDeque};
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use libcolor::mio::net::TcpStream;
use libcolor::{Color, ColorCell, Handle, IoRegistration};

use super::rpc::{self, RecordReader, RpcError};

/// By default, a call unanswered this long takes its link down (and is answered JUKEBOX).
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a link checks for calls past [`CALL_TIMEOUT`].
const SWEEP_EVERY: Duration = Duration::from_secs(1);
/// First and longest wait before reconnecting.
const BACKOFF_MIN: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Bytes read from a socket at a time.
const READ_CHUNK: usize = 64 * 1024;
/// Colors of the links: far from the connection ids the listener hands out first.
const LINK_COLOR_BASE: u32 = 0x4e46_0000;

/// Why a call has no reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CallError {
    /// The connection to the backend is down or went down with the call in flight.
    Down,
    /// This link has as many calls in flight as it may.
    Busy,
    /// The backend answered, but not with results.
    Rpc(RpcError),
}

/// A reply's results: the record and where the procedure's results start in it.
pub(crate) struct Body {
    record: Vec<u8>,
    start: usize,
}

impl Body {
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.record[self.start..]
    }
}

pub(crate) type Waiter = Box<dyn FnOnce(Result<Body, CallError>) + Send>;

/// Limits of one link.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LinkLimits {
    /// Largest reply record accepted (a READ of the largest size plus headers).
    pub max_record: usize,
    /// Calls in flight on one link.
    pub max_pending: usize,
    /// A call unanswered this long takes its link down ([`CALL_TIMEOUT`] by default).
    pub call_timeout: Duration,
}

struct Sock {
    stream: TcpStream,
    reg: Option<IoRegistration>,
    connected: bool,
    out: VecDeque<Vec<u8>>,
    out_off: usize,
    reader: RecordReader,
}

/// One connection to the backend's NFS service and its calls in flight.
pub(crate) struct Link {
    index: usize,
    addr: SocketAddr,
    limits: LinkLimits,
    sock: Option<Sock>,
    pending: HashMap<u32, (Instant, Waiter)>,
    backoff: Duration,
    reconnect_armed: bool,
    /// Completions to run once the link's state is released.
    done: Vec<(Waiter, Result<Body, CallError>)>,
    /// Reused for every read from the socket.
    read_buf: Vec<u8>,
}

type LinkRef = Arc<ColorCell<Link>>;

/// A small pool of links, used round robin.
pub(crate) struct Pool {
    h: Handle,
    links: Vec<LinkRef>,
    next: AtomicUsize,
    xid: AtomicU32,
}

impl Pool {
    /// Creates `n` links to `addr` and starts connecting them.
    pub(crate) fn start(h: &Handle, addr: SocketAddr, n: usize, limits: LinkLimits) -> Arc<Pool> {
        let links: Vec<LinkRef> = (0..n.max(1))
            .map(|index| {
                Arc::new(ColorCell::new(
                    h,
                    Color(LINK_COLOR_BASE + index as u32),
                    Link {
                        index,
                        addr,
                        limits,
                        sock: None,
                        pending: HashMap::new(),
                        backoff: BACKOFF_MIN,
                        reconnect_armed: false,
                        done: Vec::new(),
                        read_buf: vec![0; READ_CHUNK],
                    },
                ))
            })
            .collect();
        for l in &links {
            let (h2, l2) = (h.clone(), l.clone());
            h.cpucb(l.color(), move || {
                run(&l2, |link| link.connect(&h2, &l2));
                sweep_later(&h2, &l2);
            });
        }
        Arc::new(Pool {
            h: h.clone(),
            links,
            next: AtomicUsize::new(0),
            // Start from a random XID so replies meant for an earlier sfsd are not matched.
            xid: AtomicU32::new(rand::random()),
        })
    }

    /// The runtime the links run on.
    pub(crate) fn handle(&self) -> &Handle {
        &self.h
    }

    /// Sends one call; `done` runs in the link's color with the results or why there are
    /// none. `encode(xid, out)` appends the call's record.
    pub(crate) fn call(&self, encode: impl FnOnce(u32, &mut Vec<u8>), done: Waiter) {
        let xid = self.xid.fetch_add(1, Ordering::Relaxed);
        let mut rec = Vec::new();
        encode(xid, &mut rec);
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.links.len();
        let link = self.links[i].clone();
        let h = self.h.clone();
        self.h.cpucb(link.color(), move || {
            run(&link, |l| l.send(&h, &link, xid, rec, done));
        });
    }
}

/// Runs `f` on the link, then the completions it produced (outside the link's state).
fn run(link: &LinkRef, f: impl FnOnce(&mut Link)) {
    let done = link.with(|l| {
        f(l);
        std::mem::take(&mut l.done)
    });
    for (w, res) in done {
        w(res);
    }
}

fn sweep_later(h: &Handle, link: &LinkRef) {
    let (h2, weak) = (h.clone(), Arc::downgrade(link));
    h.delaycb(SWEEP_EVERY, link.color(), move || {
        let Some(link) = weak.upgrade() else {
            return;
        };
        run(&link, |l| {
            let late = l
                .pending
                .values()
                .any(|(sent, _)| sent.elapsed() >= l.limits.call_timeout);
            if late {
                l.down(&h2, &link, "the backend did not answer in time");
            }
        });
        if !h2.is_stopping() {
            sweep_later(&h2, &link);
        }
    });
}

impl Link {
    fn connect(&mut self, h: &Handle, me: &LinkRef) {
        self.reconnect_armed = false;
        let mut stream = match TcpStream::connect(self.addr) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(addr = %self.addr, error = %e, "backend connect failed");
                return self.retry_later(h, me);
            }
        };
        let _ = stream.set_nodelay(true);
        let color = me.color();
        let reg = match h.register_in(
            color,
            &mut stream,
            libcolor::mio::Interest::READABLE | libcolor::mio::Interest::WRITABLE,
        ) {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot register a backend connection");
                return self.retry_later(h, me);
            }
        };
        {
            let (h2, l2) = (h.clone(), me.clone());
            reg.on_readable(color, move || run(&l2, |l| l.on_readable(&h2, &l2)));
            let (h2, l2) = (h.clone(), me.clone());
            reg.on_writable(color, move || run(&l2, |l| l.on_writable(&h2, &l2)));
        }
        self.sock = Some(Sock {
            stream,
            reg: Some(reg),
            connected: false,
            out: VecDeque::new(),
            out_off: 0,
            reader: RecordReader::new(self.limits.max_record),
        });
    }

    fn retry_later(&mut self, h: &Handle, me: &LinkRef) {
        if self.reconnect_armed || h.is_stopping() {
            return;
        }
        self.reconnect_armed = true;
        let wait = self.backoff;
        self.backoff = (self.backoff * 2).min(BACKOFF_MAX);
        let (h2, l2) = (h.clone(), me.clone());
        h.delaycb(wait, me.color(), move || {
            run(&l2, |l| {
                if l.sock.is_none() {
                    l.connect(&h2, &l2)
                } else {
                    l.reconnect_armed = false;
                }
            })
        });
    }

    /// Drops the connection: every call in flight fails, and a reconnect is scheduled.
    fn down(&mut self, h: &Handle, me: &LinkRef, why: &str) {
        if let Some(mut s) = self.sock.take() {
            if let Some(reg) = s.reg.take() {
                let _ = reg.deregister(&mut s.stream);
            }
            let _ = s.stream.shutdown(std::net::Shutdown::Both);
            if s.connected {
                tracing::warn!(link = self.index, addr = %self.addr, why, in_flight = self.pending.len(), "backend connection lost");
            } else {
                tracing::debug!(link = self.index, addr = %self.addr, why, "backend connection failed");
            }
        }
        for (_, (_, w)) in self.pending.drain() {
            self.done.push((w, Err(CallError::Down)));
        }
        self.retry_later(h, me);
    }

    fn send(&mut self, h: &Handle, me: &LinkRef, xid: u32, rec: Vec<u8>, w: Waiter) {
        let Some(sock) = &mut self.sock else {
            self.done.push((w, Err(CallError::Down)));
            return;
        };
        if self.pending.len() >= self.limits.max_pending {
            self.done.push((w, Err(CallError::Busy)));
            return;
        }
        self.pending.insert(xid, (Instant::now(), w));
        sock.out.push_back(rec);
        if sock.connected {
            self.flush(h, me);
        }
    }

    fn on_writable(&mut self, h: &Handle, me: &LinkRef) {
        let Some(sock) = &mut self.sock else {
            return;
        };
        if !sock.connected {
            // A non-blocking connect completed: did it succeed?
            match sock.stream.take_error() {
                Ok(None) => {}
                Ok(Some(e)) | Err(e) => {
                    return self.down(h, me, &format!("connect: {e}"));
                }
            }
            match sock.stream.peer_addr() {
                Ok(_) => {
                    sock.connected = true;
                    self.backoff = BACKOFF_MIN;
                    tracing::info!(link = self.index, addr = %self.addr, "backend connection up");
                }
                Err(e) if e.kind() == ErrorKind::NotConnected => return,
                Err(e) => return self.down(h, me, &format!("connect: {e}")),
            }
        }
        self.flush(h, me);
    }

    fn flush(&mut self, h: &Handle, me: &LinkRef) {
        let Some(sock) = &mut self.sock else {
            return;
        };
        while let Some(front) = sock.out.front() {
            match sock.stream.write(&front[sock.out_off..]) {
                Ok(0) => return self.down(h, me, "backend stopped reading"),
                Ok(n) => {
                    sock.out_off += n;
                    if sock.out_off == front.len() {
                        sock.out.pop_front();
                        sock.out_off = 0;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return self.down(h, me, &format!("write: {e}")),
            }
        }
    }

    fn on_readable(&mut self, h: &Handle, me: &LinkRef) {
        loop {
            let Some(sock) = &mut self.sock else {
                return;
            };
            match sock.stream.read(&mut self.read_buf) {
                Ok(0) => return self.down(h, me, "the backend closed the connection"),
                Ok(n) => {
                    sock.reader.push(&self.read_buf[..n]);
                    loop {
                        let Some(sock) = &mut self.sock else {
                            return;
                        };
                        match sock.reader.next_record() {
                            Ok(Some(rec)) => self.reply(h, me, rec),
                            Ok(None) => break,
                            Err(e) => return self.down(h, me, &e.to_string()),
                        }
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::NotConnected => return,
                Err(e) => return self.down(h, me, &format!("read: {e}")),
            }
        }
    }

    fn reply(&mut self, h: &Handle, me: &LinkRef, record: Vec<u8>) {
        let (xid, result) = match rpc::decode_reply(&record) {
            Ok((xid, Ok(body))) => (xid, Ok(record.len() - body.len())),
            Ok((xid, Err(e))) => (xid, Err(CallError::Rpc(e))),
            Err(e) => {
                // The stream cannot be trusted past a reply we cannot read.
                return self.down(h, me, &format!("malformed reply: {e}"));
            }
        };
        let Some((_, w)) = self.pending.remove(&xid) else {
            tracing::debug!(
                xid,
                "reply to no call in flight (answered after a timeout?)"
            );
            return;
        };
        let res = result.map(|start| Body { record, start });
        self.done.push((w, res));
    }
}
