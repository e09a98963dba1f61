//! One client connection, run entirely in its own color.
//!
//! Readable -> read into the connection's [`ServerConnection`] (the sans-IO protocol end: the
//! handshake, records, requests, LOGIN verification and the authno table, sealing), answer its
//! events (the session's authnos are per connection, so they live here, not in color 0), then
//! `cpucb` to color 0. Replies come back to this color, are sealed here (or on a lane) and
//! written when the socket is writable. This file is the driver: readiness, admission, lanes,
//! timers and dispatch.
//!
//! Backpressure: the connection is not read while it has `max_in_flight` requests being
//! worked on, or when the replies its peer has not taken plus the replies being prepared (each
//! request reserves its largest possible reply when admitted) exceed `max_output`; it resumes
//! when that drains. Invalidations count too: a peer that lets them pile up beyond the limit is
//! disconnected. Any protocol violation (bad record, undecodable request) closes this
//! connection only, and so does `idle_timeout` without a request.

use std::collections::HashMap;
use std::io::{ErrorKind, Read};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use libcolor::mio::net::TcpStream;
use libcolor::{Color, ColorCell, IoRegistration};
use protocol::sequence::Ticket;
use protocol::server::{CloseReason, Event, Phase as Proto, Sender, ServerConnection};
use protocol::{
    FileHandle, HandleData, NfsStatus, RecordStart, Reply, ReplyBody, Request, RequestOp,
    ServerMessage,
};

use crate::fs::ReadCall;
use crate::fs::key_of;
use crate::fs::read_call::PendingRead;
use crate::leases::{ConnId, Holder, Principal};
use crate::output::{Flushed, Output, SPARE_MIN_CAPACITY};
use crate::read::{ReadState, ReplyRecord};
use crate::replies::{Begin, Record};
use crate::server::{ConnLink, InFlight, Server};
use crate::users::Creds;

mod admission;
mod identity;
mod read_call;
mod write_order;
use read_call::Reading;
use write_order::WriteOrder;

enum Phase {
    /// Accepted; the protocol end (its handshake machine and the server's first message) is
    /// made by the connection's first callback, in its own color: color 0, which accepts every
    /// connection of a flood, does as little per connection as it can.
    Accepted,
    /// In the handshake or open: [`ServerConnection::phase`] says which.
    Live(Box<ServerConnection<Creds>>),
    Closed,
}

impl Phase {
    fn live(&mut self) -> Option<&mut ServerConnection<Creds>> {
        match self {
            Phase::Live(sc) => Some(sc),
            _ => None,
        }
    }

    fn is_open(&self) -> bool {
        matches!(self, Phase::Live(sc) if sc.is_open())
    }
}

pub(crate) struct Conn {
    pub id: ConnId,
    /// The server, for a READ the storage answers later ([`crate::fs::read_call::ReadLink`]):
    /// the server outlives its connections anyway (the runtime's callbacks hold both).
    srv: Arc<Server>,
    peer: SocketAddr,
    stream: TcpStream,
    reg: Option<IoRegistration>,
    phase: Phase,
    /// Cached descriptors and held leases of the READ fast path.
    reads: ReadState,
    /// The client's reply cache, once SESSION bound one ([`crate::replies`]).
    client: Option<Arc<Record>>,
    out: Output,
    in_flight: usize,
    /// Reply bytes reserved by requests being worked on (counted with `out_bytes`).
    reserved: usize,
    requests: u64,
    /// Last time the peer sent anything (for the idle timeout and releasing buffers).
    last_active: Instant,
    /// A timer will release the buffers once the connection is quiet.
    release_armed: bool,
    /// Set by color 0 while this connection can be granted no lease (its address holds its
    /// whole share, and it holds none to end for room).
    lease_capped: Arc<AtomicBool>,
    /// Some LOGIN succeeded: color 0 may no longer drop this connection to make room for new
    /// ones (see [`crate::startups`]), and has been told.
    logged_in: bool,
    /// An anonymous request was accepted, and color 0 told (it lets the connection out of the
    /// starting ones if anonymous connections have room).
    anonymous_told: bool,
    /// Sequenced requests being done, by request id: their replies go into the reply cache
    /// (as many as requests in flight).
    tickets: HashMap<u64, (Arc<Record>, Ticket)>,
    /// COMMITs and SETATTRs wait for the WRITEs of their file before them.
    write_order: WriteOrder,
}

/// A connection's state belongs to its color: every callback that touches it runs there, so
/// it needs no lock (libcolor checks the running color on every access).
pub(crate) type ConnRef = Arc<ColorCell<Conn>>;

/// Smallest READ reply worth sealing on another worker (below it the hops cost more than the
/// cipher).
const PARALLEL_SEAL_MIN: usize = 16 * 1024;
/// Colors of a connection's sealing lanes are its own plus this (and one more per lane): a
/// different color slot from the connection's own.
const SEAL_LANE_OFFSET: u32 = libcolor::COLOR_SLOTS as u32 / 2;

/// A READ as the connection decoded it (see [`crate::read`]).
struct ReadRequest {
    authno: u32,
    fh: FileHandle,
    handle: HandleData,
    offset: u64,
    count: usize,
}

impl Conn {
    fn closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    fn paused(&self, srv: &Server) -> bool {
        self.in_flight >= srv.limits.max_in_flight
            || self.out.bytes() + self.reserved > srv.limits.max_output
    }

    fn push(&mut self, buf: Vec<u8>) {
        self.out.push(buf);
    }

    /// Writes queued output until the socket would block.
    fn flush(&mut self, srv: &Arc<Server>) {
        match self.out.write_to(&mut self.stream) {
            Ok(Flushed::Done | Flushed::WouldBlock) => {}
            Ok(Flushed::Closed) => self.close(srv, "peer stopped reading"),
            Err(_) => self.close(srv, "write failed"),
        }
    }

    /// Seals one message and queues it.
    /// Seals one message and queues it (a reply too large for the peer goes as an error:
    /// [`ServerConnection::seal`]).
    fn send(&mut self, srv: &Arc<Server>, msg: &ServerMessage) {
        let Some(sc) = self.phase.live() else {
            return;
        };
        let mut buf = Vec::new();
        match sc.seal(msg, &mut buf) {
            Ok(true) => self.push(buf),
            Ok(false) => {}
            Err(_) => self.close(srv, "cannot seal"),
        }
    }

    /// A LOGIN succeeded: color 0 stops counting this connection among the starting ones
    /// (told once).
    fn logged_in(&mut self, srv: &Arc<Server>) {
        if !std::mem::replace(&mut self.logged_in, true) {
            let id = self.id;
            srv.in_color(Color::DEFAULT, move |srv| srv.conn_logged_in(id));
        }
    }

    /// An anonymous request is accepted: color 0 may let the connection out of the starting
    /// ones (told once).
    fn anonymous_granted(&mut self, srv: &Arc<Server>) {
        if !self.logged_in && !std::mem::replace(&mut self.anonymous_told, true) {
            let id = self.id;
            srv.in_color(Color::DEFAULT, move |srv| srv.conn_anonymous(id));
        }
    }

    /// The request `id` is answered with `result`: if it came through a reply-cache slot, the
    /// slot keeps the answer.
    fn settle_ticket(&mut self, id: u64, result: &Result<ReplyBody, NfsStatus>) {
        if let Some((record, ticket)) = self.tickets.remove(&id) {
            record.complete(ticket, result);
        }
    }

    fn close(&mut self, srv: &Arc<Server>, why: &str) {
        if self.closed() {
            return;
        }
        if let Some(record) = self.client.take() {
            // Its client may come back within the grace period for the replies and its locks.
            let now = Instant::now();
            if srv.clients.unbind(&record, self.id, now) {
                srv.locks
                    .lock()
                    .client_gone(crate::locks::LockClient::record(record.key), now);
            }
        }
        self.phase = Phase::Closed;
        // Its descriptors and leases go with it.
        self.reads = ReadState::default();
        if let Some(reg) = self.reg.take() {
            let _ = reg.deregister(&mut self.stream);
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.out.clear();
        srv.open_conns.fetch_sub(1, Ordering::SeqCst);
        tracing::info!(conn = self.id, peer = %self.peer, requests = self.requests, why, "connection closed");
        let id = self.id;
        srv.in_color(Color::DEFAULT, move |srv| srv.forget_conn(id));
    }
}

/// Color 0 (listener): sets up a new connection in its own color.
pub(crate) fn start(srv: &Arc<Server>, id: ConnId, mut stream: TcpStream, peer: SocketAddr) {
    let color = Color(id);
    // In the epoll of the color's home worker: the worker that runs the connection also
    // harvests its events.
    let reg = match srv.h.register_in(
        color,
        &mut stream,
        libcolor::mio::Interest::READABLE | libcolor::mio::Interest::WRITABLE,
    ) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "cannot register connection");
            return;
        }
    };
    let lease_capped = Arc::new(AtomicBool::new(false));

    let conn = Arc::new(ColorCell::new(
        &srv.h,
        color,
        Conn {
            id,
            srv: srv.clone(),
            peer,
            stream,
            reg: None,
            phase: Phase::Accepted,
            reads: ReadState::default(),
            client: None,
            out: Output::with_first(Vec::new(), srv.limits.max_output),
            in_flight: 0,
            reserved: 0,
            requests: 0,
            last_active: Instant::now(),
            release_armed: false,
            lease_capped: lease_capped.clone(),
            logged_in: false,
            anonymous_told: false,
            tickets: HashMap::new(),
            write_order: WriteOrder::default(),
        },
    ));
    srv.open_conns.fetch_add(1, Ordering::SeqCst);
    srv.register_conn(id, Arc::downgrade(&conn) as _, lease_capped, peer.ip());
    {
        let (srv, conn) = (srv.clone(), conn.clone());
        reg.on_readable(color, move || pump(&srv, &conn));
    }
    {
        let (srv, conn) = (srv.clone(), conn.clone());
        reg.on_writable(color, move || {
            conn.with(|c| {
                c.flush(&srv);
                pump_borrowed(&srv, &conn, c);
            })
        });
    }
    // A peer that never finishes the handshake must not hold a connection slot forever.
    let weak = Arc::downgrade(&conn);
    srv.in_color_after(srv.limits.handshake_timeout, color, move |srv| {
        if let Some(conn) = weak.upgrade() {
            conn.with(|c| {
                let handshaking = match &c.phase {
                    Phase::Accepted => true,
                    Phase::Live(sc) => sc.phase() == Proto::Handshake,
                    Phase::Closed => false,
                };
                if handshaking {
                    c.close(srv, "handshake timeout");
                }
            });
        }
    });
    // The registration moves into the state, the handshake begins and the first flush runs,
    // in the connection's color like everything else.
    srv.in_color(color, move |srv| {
        conn.with(|c| {
            if c.closed() {
                let _ = reg.deregister(&mut c.stream);
                return;
            }
            c.reg = Some(reg);
            tracing::info!(conn = c.id, peer = %c.peer, "connection opened");
            let _ = c.stream.set_nodelay(true);
            let mut sc =
                ServerConnection::new(&srv.keypair, srv.handshake.clone(), srv.name.host_id());
            // The server's first handshake message goes out before anything else.
            c.push(sc.take_output());
            c.phase = Phase::Live(Box::new(sc));
            c.flush(srv);
            // Whatever arrived before the handshake existed (readiness is edge-triggered).
            pump_borrowed(srv, &conn, c);
        })
    });
}

/// Connection color, every `idle_timeout` at most: closes a connection that sent nothing for
/// that long and has nothing in flight (a client reconnects when it needs the server again).
fn arm_idle_timer(srv: &Arc<Server>, conn: &ConnRef, id: ConnId, after: std::time::Duration) {
    let weak = Arc::downgrade(conn);
    srv.in_color_after(after, Color(id), move |srv| {
        let Some(conn) = weak.upgrade() else {
            return;
        };
        let limit = srv.limits.idle_timeout;
        let again = conn.with(|c| {
            if c.closed() {
                return None;
            }
            let idle = c.last_active.elapsed();
            if idle >= limit && c.in_flight == 0 {
                c.close(srv, "idle timeout");
                return None;
            }
            Some(limit.saturating_sub(idle).max(limit / 8))
        });
        if let Some(after) = again {
            arm_idle_timer(srv, &conn, id, after);
        }
    });
}

/// Readable: read and process until the socket is drained or the connection must pause.
fn pump(srv: &Arc<Server>, conn: &ConnRef) {
    conn.with(|c| pump_borrowed(srv, conn, c));
}

/// [`pump`] with the connection's state already borrowed from its cell (the caller runs in
/// the connection's color).
fn pump_borrowed(srv: &Arc<Server>, conn: &ConnRef, c: &mut Conn) {
    loop {
        if c.closed() {
            return;
        }
        process_records(srv, conn, c);
        if c.closed() || c.paused(srv) {
            return;
        }
        let Phase::Live(sc) = &mut c.phase else {
            return;
        };
        let got = if sc.is_open() {
            // Straight into the record reader: a WRITE's data stays where the socket put it.
            match c.stream.read(sc.read_buf()) {
                Ok(n) => {
                    sc.advance(n);
                    c.last_active = Instant::now();
                    Ok(n)
                }
                Err(e) => Err(e),
            }
        } else {
            // The handshake reads little, into a small buffer here (a silent connection holds
            // no receive buffer).
            let mut buf = [0u8; 2048];
            match c.stream.read(&mut buf) {
                Ok(0) => return c.close(srv, "eof during handshake"),
                Ok(n) => {
                    c.last_active = Instant::now();
                    sc.receive(&buf[..n]);
                    continue;
                }
                Err(e) => Err(e),
            }
        };
        match got {
            Ok(0) => {
                let clean = matches!(&c.phase, Phase::Live(sc) if sc.finished_cleanly());
                let why = if clean { "eof" } else { "eof inside a record" };
                return c.close(srv, why);
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return release_when_quiet(srv, conn, c),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return c.close(srv, "read failed"),
        }
    }
}

/// How long a connection must be quiet (nothing received, nothing in flight, nothing queued)
/// before it lets its buffers go. Not at once: a client streaming WRITEs slower than they are
/// written drains the socket between requests, and would otherwise allocate and fault in a
/// fresh megabyte-sized buffer for every one.
const QUIET: Duration = Duration::from_millis(200);

/// The socket is drained: once the connection has been quiet for [`QUIET`] it holds no
/// receive buffer, no reply buffers and no descriptors that can no longer serve (an idle
/// connection costs a few KiB). Arms one timer per quiet period, not one per drain.
fn release_when_quiet(srv: &Arc<Server>, conn: &ConnRef, c: &mut Conn) {
    if c.release_armed {
        return;
    }
    c.release_armed = true;
    arm_release(srv, conn, c.id, QUIET);
}

fn arm_release(srv: &Arc<Server>, conn: &ConnRef, id: ConnId, after: Duration) {
    let weak = Arc::downgrade(conn);
    srv.in_color_after(after, Color(id), move |srv| {
        let Some(conn) = weak.upgrade() else {
            return;
        };
        let again = conn.with(|c| {
            let quiet_for = c.last_active.elapsed();
            if c.closed() || !c.release_armed {
                return None;
            }
            if c.in_flight > 0 || !c.out.is_empty() || quiet_for < QUIET {
                return Some(QUIET.saturating_sub(quiet_for).max(QUIET / 4));
            }
            c.release_armed = false;
            if let Phase::Live(sc) = &mut c.phase
                && sc.is_open()
            {
                sc.release_buffer();
                c.out.release_spare();
                c.reads.sweep();
            }
            None
        });
        if let Some(after) = again {
            arm_release(srv, &conn, id, after);
        }
    });
}

/// Handles the protocol end's events (the handshake's end, requests, a failure) as long as
/// the connection is not paused, and queues the handshake's output.
fn process_records(srv: &Arc<Server>, conn: &ConnRef, c: &mut Conn) {
    loop {
        let Some(sc) = c.phase.live() else {
            return;
        };
        let handshake = sc.take_output();
        if !handshake.is_empty() {
            c.push(handshake);
            c.flush(srv);
        }
        if c.paused(srv) {
            return;
        }
        let Some(sc) = c.phase.live() else {
            return;
        };
        // Only a WRITE is this large. Its record is normally alone in the receive buffer, which
        // then becomes the WRITE's data, the reader continuing in a buffer kept from earlier;
        // otherwise the data is copied into such a buffer.
        let out = &mut c.out;
        let Some(event) = sc.next_event(SPARE_MIN_CAPACITY, || out.take_spare()) else {
            return;
        };
        match event {
            Event::Opened => {
                tracing::debug!(conn = c.id, "session established");
                let id = c.id;
                srv.in_color(Color::DEFAULT, move |srv| srv.conn_handshake_done(id));
                arm_idle_timer(srv, conn, c.id, srv.limits.idle_timeout);
            }
            Event::Login { id, result } => {
                c.requests += 1;
                let result = identity::login(srv, c, result);
                reply_now(srv, c, id, result);
            }
            Event::Request { request, sender } => {
                c.requests += 1;
                handle_request(srv, conn, c, request, sender);
            }
            Event::Close(why) => {
                // A handshake refusal still goes out.
                if let Some(sc) = c.phase.live() {
                    let refusal = sc.take_output();
                    if !refusal.is_empty() {
                        c.push(refusal);
                        c.flush(srv);
                    }
                }
                let reason = match why {
                    CloseReason::Handshake(e @ protocol::HandshakeError::VersionRefused { .. }) => {
                        tracing::info!(conn = c.id, error = %e, "handshake refused");
                        "handshake refused"
                    }
                    CloseReason::Handshake(e) => {
                        tracing::info!(conn = c.id, error = %e, "handshake failed");
                        "handshake failed"
                    }
                    CloseReason::BadRecord(e) => {
                        tracing::warn!(conn = c.id, error = %e, "bad record; closing");
                        "bad record"
                    }
                    CloseReason::BadRequest(e) => {
                        tracing::warn!(conn = c.id, error = %e, "undecodable request; closing");
                        "bad request"
                    }
                    _ => "protocol error",
                };
                return c.close(srv, reason);
            }
        }
    }
}

fn reply_now(srv: &Arc<Server>, c: &mut Conn, id: u64, result: Result<ReplyBody, NfsStatus>) {
    c.settle_ticket(id, &result);
    c.send(srv, &ServerMessage::Reply(Reply { id, result }));
    c.flush(srv);
}

fn handle_request(
    srv: &Arc<Server>,
    conn: &ConnRef,
    c: &mut Conn,
    req: Request,
    sender: Sender<Creds>,
) {
    let Request { id, authno, op } = req;
    let op = match op {
        RequestOp::Null => return reply_now(srv, c, id, Ok(ReplyBody::Null)),
        RequestOp::Session { client_id, slots } => {
            let result = identity::session(srv, c, client_id, slots);
            return reply_now(srv, c, id, result);
        }
        RequestOp::Narrow { gid, groups } => {
            let result = identity::narrow(c, authno, &sender, gid, &groups);
            return reply_now(srv, c, id, result);
        }
        op => op,
    };
    let creds = match sender {
        Sender::Anonymous if srv.anonymous_read => srv.anonymous.clone(),
        Sender::User(creds) => creds,
        _ => return reply_now(srv, c, id, Err(NfsStatus::Acces)),
    };
    if creds.anonymous {
        c.anonymous_granted(srv);
    }
    let op = match op {
        RequestOp::Sequence { slot, seq, op } => {
            let Some(record) = c.client.clone() else {
                return reply_now(srv, c, id, Err(NfsStatus::BadSession));
            };
            let ticket = Ticket { slot, seq };
            let runs_again = crate::replies::runs_again_after_restart(&op);
            match record.begin(ticket, creds.uid, runs_again) {
                Begin::Run => {
                    c.tickets.insert(id, (record, ticket));
                    *op
                }
                Begin::Answer(result) => return reply_now(srv, c, id, result),
            }
        }
        op => op,
    };
    let max_read = match c.phase.live() {
        Some(sc) => sc.max_read(),
        None => return,
    };
    if crate::fs::is_mutating(&op) {
        if srv.read_only && !matches!(op, RequestOp::Commit { .. }) {
            return reply_now(srv, c, id, Err(NfsStatus::RoFs));
        }
        if creds.anonymous {
            return reply_now(srv, c, id, Err(NfsStatus::Acces));
        }
    }
    let mut op = op;
    let (read_count, reserved) = admission::reserve(&mut op, max_read, srv.max_io);
    if c.in_flight == 0 {
        srv.busy_conns.fetch_add(1, Ordering::Relaxed);
    }
    c.in_flight += 1;
    c.reserved += reserved;
    srv.in_flight.fetch_add(1, Ordering::SeqCst);
    let lease_ms = if c.lease_capped.load(Ordering::Relaxed)
        || (creds.anonymous && srv.anonymous_leases_full.load(Ordering::Relaxed))
    {
        0
    } else {
        srv.lease_ms_now.load(Ordering::Relaxed)
    };
    let record = c.client.as_ref().map(|r| r.key);
    let d = InFlight {
        conn: conn.clone() as Arc<dyn ConnLink>,
        id: c.id,
        req_id: id,
        creds,
        reserved,
        lease_ms,
        record,
    };
    match op {
        RequestOp::Read { fh, offset, .. } => match srv.handle_key.verify(&fh) {
            Ok(handle) => start_read(
                srv,
                conn,
                c,
                d,
                ReadRequest {
                    authno,
                    fh,
                    handle,
                    offset,
                    count: read_count,
                },
            ),
            Err(e) => complete_borrowed(
                srv,
                c,
                reserved,
                Reply {
                    id,
                    result: Err(e.into()),
                },
            ),
        },
        op => dispatch_in_order(srv, c, d, op),
    }
}

/// Connection color: hands `op` to the storage, unless it is a COMMIT or SETATTR that waits
/// for WRITEs ([`WriteOrder`]).
fn dispatch_in_order(srv: &Arc<Server>, c: &mut Conn, d: InFlight, op: RequestOp) {
    if let Some((d, op)) = c.write_order.admit(d, op) {
        dispatch(srv, d, op);
    }
}

/// Connection color: a lock request to the lock table ([`crate::lock_ops`]), any other to
/// the storage ([`Server::dispatch`]).
fn dispatch(srv: &Arc<Server>, d: InFlight, op: RequestOp) {
    match crate::lock_ops::take(op) {
        crate::lock_ops::Split::Lock(lock) => crate::lock_ops::dispatch(srv, d, lock),
        crate::lock_ops::Split::Other(op) => srv.dispatch(d, op),
    }
}

/// Connection color: hands a READ to the storage ([`crate::fs::Storage::read`]), which
/// answers it here from a cached descriptor when it can, or later (see [`crate::read`]).
fn start_read(srv: &Arc<Server>, conn: &ConnRef, c: &mut Conn, d: InFlight, r: ReadRequest) {
    if !c.phase.is_open() {
        return;
    }
    let epoch = srv.changes.now();
    let lease = c.reads.lease_for(
        Instant::now(),
        &r.fh,
        key_of(&r.handle),
        d.lease_ms,
        &srv.changes,
    );
    let read = PendingRead {
        conn: d.id,
        req_id: d.req_id,
        reserved: d.reserved,
        creds: d.creds,
        authno: r.authno,
        fh: r.fh,
        handle: r.handle,
        offset: r.offset,
        count: r.count,
        lease,
        epoch,
    };
    let mut reading = Reading { srv, conn, c };
    srv.storage.read(ReadCall::new(&mut reading, read));
}

/// Connection color: seals a READ reply in place (the payload follows a 4-byte gap: no copy
/// of the data) and queues it; then color 0 records the lease it announced, without the
/// reply waiting for that.
fn finish_read(
    srv: &Arc<Server>,
    conn: &ConnRef,
    c: &mut Conn,
    read: &PendingRead,
    res: Result<ReplyRecord, NfsStatus>,
) {
    let (lease, epoch) = (read.lease, read.epoch);
    let ReplyRecord { mut buf, start } = match res {
        Ok(record) => record,
        Err(status) => {
            let reply = Reply {
                id: read.req_id,
                result: Err(status),
            };
            return complete_borrowed(srv, c, read.reserved, reply);
        }
    };
    release(srv, c, read.reserved);
    let elsewhere = seal_elsewhere(srv, &c.out, buf.len());
    let Some(sc) = c.phase.live().filter(|sc| sc.is_open()) else {
        return;
    };
    if lease.record {
        c.reads
            .lease_announced(Instant::now(), read.fh, lease.ms, epoch);
    }
    if elsewhere {
        match sc.defer_seal() {
            Some(Ok(seal)) => seal_on_lane(srv, c, conn, seal, ReplyRecord { buf, start }),
            _ => c.close(srv, "cannot seal"),
        }
    } else if let Some(Ok(())) = sc.seal_in_place(&mut buf, RecordStart::at(start)) {
        c.out.push_from(buf, start);
        c.flush(srv);
    } else {
        let reply = Reply {
            id: read.req_id,
            result: Err(NfsStatus::ServerFault),
        };
        c.send(srv, &ServerMessage::Reply(reply));
        c.flush(srv);
    }
    if lease.record {
        let holder = Holder {
            conn: read.conn,
            who: Principal::of(&read.creds),
        };
        let (key, fh) = (key_of(&read.handle), read.fh);
        srv.in_color(Color::DEFAULT, move |srv| {
            srv.record_read_lease(holder, key, fh, lease.ms, epoch)
        });
    }
}

/// A request is answered: its slot and its reservation are released.
fn release(srv: &Server, c: &mut Conn, reserved: usize) {
    if c.in_flight == 1 {
        srv.busy_conns.fetch_sub(1, Ordering::Relaxed);
    }
    c.in_flight = c.in_flight.saturating_sub(1);
    c.reserved = c.reserved.saturating_sub(reserved);
    srv.in_flight.fetch_sub(1, Ordering::SeqCst);
}

/// [`ConnLink::complete`] with the connection's state already borrowed from its cell.
fn complete_borrowed(srv: &Arc<Server>, c: &mut Conn, reserved: usize, reply: Reply) {
    release(srv, c, reserved);
    // Even on a closed connection: a held COMMIT or SETATTR runs, and its ticket is settled.
    c.write_order
        .answered(reply.id, |d, op| dispatch(srv, d, op));
    // Even on a closed connection: its client may send the request again on another.
    c.settle_ticket(reply.id, &reply.result);
    if c.closed() {
        return;
    }
    c.send(srv, &ServerMessage::Reply(reply));
    c.flush(srv);
}

/// Whether a READ reply of `len` bytes should be sealed on another worker: only when it is
/// large, the runtime has more workers than connections with work (a core would otherwise
/// idle: one client streaming), and this connection has a lane free.
fn seal_elsewhere(srv: &Server, out: &Output, len: usize) -> bool {
    let lanes = srv.h.workers().saturating_sub(1);
    len >= PARALLEL_SEAL_MIN
        && out.pending() < lanes
        && srv.busy_conns.load(Ordering::Relaxed) < srv.h.workers()
}

/// Connection color: queues a place for `buf`'s record and seals it in a lane color (in
/// parallel with this color); the lane hands it back to this color, which writes it in its
/// place.
fn seal_on_lane(
    srv: &Arc<Server>,
    c: &mut Conn,
    conn: &ConnRef,
    seal: protocol::DeferredSeal,
    record: ReplyRecord,
) {
    let ReplyRecord { mut buf, start } = record;
    let token = c
        .out
        .push_pending(buf.len() - start + protocol::record::TAG_LEN);
    let lanes = srv.h.workers().saturating_sub(1).max(1) as u64;
    let lane = Color(
        c.id.wrapping_add(SEAL_LANE_OFFSET)
            .wrapping_add((token % lanes) as u32),
    );
    let (conn, id) = (conn.clone(), c.id);
    srv.in_color(lane, move |srv| {
        let sealed = seal.finish(&mut buf, RecordStart::at(start)).is_ok();
        srv.in_color(Color(id), move |srv| {
            conn.with(|c| {
                if c.closed() {
                    return;
                }
                if !sealed || !c.out.fill(token, buf, start) {
                    return c.close(srv, "cannot seal");
                }
                c.flush(srv);
                // Output drained: a connection paused on its output limit reads again.
                pump_borrowed(srv, &conn, c);
            })
        });
    });
}

fn send_unsolicited_in(srv: &Arc<Server>, c: &mut Conn, msg: &ServerMessage, ahead_of_reply: bool) {
    if c.closed() {
        return;
    }
    // Invalidations are not throttled by the peer's requests: a peer that does not read them
    // is disconnected (its leases end with it) rather than buffered for without bound. One
    // ahead of the reply to the peer's own request is bounded by that request (at most one
    // per object its reply carries, and requests are not read while the output is full).
    if !ahead_of_reply && c.out.bytes() > srv.limits.max_output {
        return c.close(srv, "peer not reading its invalidations");
    }
    if let ServerMessage::Invalidate(inv) = msg
        && c.phase.is_open()
    {
        c.reads.lease_ended(&inv.fh);
    }
    c.send(srv, msg);
    c.flush(srv);
}

/// Color 0 and the dispatcher reach a connection through this (see [`ConnLink`]); each method
/// runs in the connection's color.
impl ConnLink for ColorCell<Conn> {
    fn complete(
        self: Arc<Self>,
        srv: &Arc<Server>,
        reserved: usize,
        reply: Reply,
        returned_buffer: Vec<u8>,
    ) {
        self.with(|c| {
            if !c.closed() {
                c.out.keep_spare(returned_buffer);
            }
            complete_borrowed(srv, c, reserved, reply);
            pump_borrowed(srv, &self, c);
        });
    }

    fn send_unsolicited(
        self: Arc<Self>,
        srv: &Arc<Server>,
        msg: &ServerMessage,
        ahead_of_reply: bool,
    ) {
        self.with(|c| send_unsolicited_in(srv, c, msg, ahead_of_reply));
    }

    /// Closed unless it has logged in since, or color 0 thought it `in_handshake` but it has
    /// finished the handshake since (then it asks to come back:
    /// [`crate::startups::Startups::readmit`]).
    fn drop_starting(self: Arc<Self>, srv: &Arc<Server>, in_handshake: bool) {
        srv.doomed.fetch_sub(1, Ordering::SeqCst);
        self.with(|c| {
            if c.logged_in || c.closed() {
                return;
            }
            if in_handshake && c.phase.is_open() {
                let id = c.id;
                srv.in_color(Color::DEFAULT, move |srv| srv.conn_readmit(id));
                return;
            }
            c.close(srv, "too many starting connections");
        });
    }
}
