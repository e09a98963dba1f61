//! One client connection, run entirely in its own color.
//!
//! Readable -> read, handshake or open records, decode requests, authenticate (the session's
//! authnos are per connection, so they live here, not in color 0), then `cpucb` to color 0.
//! Replies come back to this color, are sealed here and written when the socket is writable.
//!
//! Backpressure: the connection is not read while it has `max_in_flight` requests being
//! worked on or more than `max_output` bytes of replies its peer has not taken; it resumes
//! when that drains. Any protocol violation (bad record, undecodable request) closes this
//! connection only.

use std::collections::VecDeque;
use std::io::{ErrorKind, Read, Write};
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use libcolor::mio::net::TcpStream;
use libcolor::{Color, IoRegistration};
use protocol::{
    AuthTable, LoginVerifier, NfsStatus, RecordReader, Reply, ReplyBody, Request, RequestOp,
    Sealer, ServerHandshake, ServerMessage,
};

use crate::leases::ConnId;
use crate::server::{Server, lock};
use crate::users::Creds;

enum Phase {
    Handshake(Box<ServerHandshake>),
    Open(Box<Open>),
    Closed,
}

struct Open {
    reader: RecordReader,
    sealer: Sealer,
    verifier: LoginVerifier,
    auth: AuthTable<Creds>,
    /// Largest READ this peer can receive in one record.
    max_read: usize,
    /// A record larger than the reader's usual 64 KiB buffer was received: once the
    /// connection goes idle, the reader is replaced so an idle connection does not keep a
    /// megabyte-sized buffer.
    grown: bool,
}

pub struct Conn {
    pub id: ConnId,
    peer: SocketAddr,
    stream: TcpStream,
    reg: Option<IoRegistration>,
    phase: Phase,
    out: VecDeque<Vec<u8>>,
    out_off: usize,
    out_bytes: usize,
    in_flight: usize,
    requests: u64,
}

pub type ConnRef = Arc<Mutex<Conn>>;

/// Receive buffer an idle connection may keep (the record reader's usual size).
const IDLE_BUFFER: usize = 64 * 1024;

impl Conn {
    fn closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    fn paused(&self, srv: &Server) -> bool {
        self.in_flight >= srv.limits.max_in_flight || self.out_bytes > srv.limits.max_output
    }

    fn push(&mut self, buf: Vec<u8>) {
        if !buf.is_empty() {
            self.out_bytes += buf.len();
            self.out.push_back(buf);
        }
    }

    /// Writes queued output until the socket would block.
    fn flush(&mut self, srv: &Arc<Server>) {
        while let Some(front) = self.out.front() {
            match self.stream.write(&front[self.out_off..]) {
                Ok(0) => return self.close(srv, "peer stopped reading"),
                Ok(n) => {
                    self.out_off += n;
                    self.out_bytes -= n;
                    if self.out_off == front.len() {
                        self.out.pop_front();
                        self.out_off = 0;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.close(srv, "write failed"),
            }
        }
    }

    /// Seals one message and queues it.
    fn send(&mut self, srv: &Arc<Server>, msg: &ServerMessage) {
        let Phase::Open(open) = &mut self.phase else {
            return;
        };
        let mut buf = Vec::new();
        if open
            .sealer
            .seal_with(&mut buf, |b| msg.encode_into(b))
            .is_err()
        {
            // Too large for the peer (e.g. a huge READDIR page): say so instead.
            let id = match msg {
                ServerMessage::Reply(r) => r.id,
                ServerMessage::Invalidate(_) => return,
            };
            let fault = ServerMessage::Reply(Reply {
                id,
                result: Err(NfsStatus::ServerFault),
            });
            if open
                .sealer
                .seal_with(&mut buf, |b| fault.encode_into(b))
                .is_err()
            {
                return self.close(srv, "cannot seal");
            }
        }
        self.push(buf);
    }

    fn close(&mut self, srv: &Arc<Server>, why: &str) {
        if self.closed() {
            return;
        }
        self.phase = Phase::Closed;
        if let Some(reg) = self.reg.take() {
            let _ = reg.deregister(&mut self.stream);
        }
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        self.out.clear();
        self.out_bytes = 0;
        srv.open_conns.fetch_sub(1, Ordering::SeqCst);
        tracing::info!(conn = self.id, peer = %self.peer, requests = self.requests, why, "connection closed");
        let srv2 = srv.clone();
        let id = self.id;
        srv.h.cpucb(Color::DEFAULT, move || srv2.forget_conn(id));
    }
}

/// Color 0 (listener): sets up a new connection in its own color.
pub fn start(srv: &Arc<Server>, id: ConnId, mut stream: TcpStream, peer: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let reg = match srv.h.register(
        &mut stream,
        libcolor::mio::Interest::READABLE | libcolor::mio::Interest::WRITABLE,
    ) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(%peer, error = %e, "cannot register connection");
            return;
        }
    };
    let mut hs = ServerHandshake::with_config(&srv.keypair, srv.handshake.clone());
    let s0 = hs.take_output();
    let conn = Arc::new(Mutex::new(Conn {
        id,
        peer,
        stream,
        reg: None,
        phase: Phase::Handshake(Box::new(hs)),
        out: VecDeque::new(),
        out_off: 0,
        out_bytes: 0,
        in_flight: 0,
        requests: 0,
    }));
    srv.open_conns.fetch_add(1, Ordering::SeqCst);
    srv.register_conn(id, &conn);
    tracing::info!(conn = id, %peer, "connection opened");
    let color = Color(id);
    {
        let (srv2, c2) = (srv.clone(), conn.clone());
        reg.on_readable(color, move || pump(&srv2, &c2));
        let (srv2, c2) = (srv.clone(), conn.clone());
        reg.on_writable(color, move || {
            let mut c = lock(&c2);
            c.flush(&srv2);
            pump_locked(&srv2, &c2, &mut c);
        });
    }
    // A peer that never finishes the handshake must not hold a connection slot forever.
    let (srv2, c2) = (srv.clone(), Arc::downgrade(&conn));
    srv.h.delaycb(srv.limits.handshake_timeout, color, move || {
        if let Some(conn) = c2.upgrade() {
            let mut c = lock(&conn);
            if matches!(c.phase, Phase::Handshake(_)) {
                c.close(&srv2, "handshake timeout");
            }
        }
    });
    let mut c = lock(&conn);
    c.reg = Some(reg);
    c.push(s0);
    // The first flush runs in the connection's color like everything else.
    drop(c);
    let (srv2, c2) = (srv.clone(), conn);
    srv.h.cpucb(color, move || lock(&c2).flush(&srv2));
}

/// Readable: read and process until the socket is drained or the connection must pause.
fn pump(srv: &Arc<Server>, conn: &ConnRef) {
    let mut c = lock(conn);
    pump_locked(srv, conn, &mut c);
}

fn pump_locked(srv: &Arc<Server>, conn: &ConnRef, c: &mut Conn) {
    loop {
        if c.closed() {
            return;
        }
        process_records(srv, conn, c);
        if c.closed() || c.paused(srv) {
            return;
        }
        let got = match &mut c.phase {
            Phase::Closed => return,
            Phase::Handshake(_) => {
                let mut buf = [0u8; 2048];
                match c.stream.read(&mut buf) {
                    Ok(0) => return c.close(srv, "eof during handshake"),
                    Ok(n) => {
                        handshake_input(srv, c, &buf[..n]);
                        continue;
                    }
                    Err(e) => Err(e),
                }
            }
            Phase::Open(open) => {
                let dst = open.reader.read_buf();
                match c.stream.read(dst) {
                    Ok(n) => {
                        if let Phase::Open(open) = &mut c.phase {
                            open.reader.advance(n);
                        }
                        Ok(n)
                    }
                    Err(e) => Err(e),
                }
            }
        };
        match got {
            Ok(0) => {
                let clean = match &c.phase {
                    Phase::Open(o) => o.reader.finish().is_ok(),
                    _ => false,
                };
                let why = if clean { "eof" } else { "eof inside a record" };
                return c.close(srv, why);
            }
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => return release_idle_buffer(c),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return c.close(srv, "read failed"),
        }
    }
}

/// Drops a grown receive buffer once everything received has been processed.
fn release_idle_buffer(c: &mut Conn) {
    let Phase::Open(open) = &mut c.phase else {
        return;
    };
    if !open.grown || open.reader.buffered() != 0 {
        return;
    }
    let Phase::Open(mut open) = std::mem::replace(&mut c.phase, Phase::Closed) else {
        return;
    };
    // Swap in a throwaway reader to take the real one out, then rebuild it around the same
    // opener (its record counter continues).
    let placeholder = RecordReader::new(protocol::Opener::new(&[0u8; 32], 4096));
    let reader = std::mem::replace(&mut open.reader, placeholder);
    open.reader = RecordReader::new(reader.into_opener());
    open.grown = false;
    c.phase = Phase::Open(open);
}

fn handshake_input(srv: &Arc<Server>, c: &mut Conn, mut input: &[u8]) {
    let Phase::Handshake(hs) = &mut c.phase else {
        return;
    };
    match hs.receive(input) {
        Ok(used) => input = &input[used..],
        Err(e) => {
            let out = hs.take_output();
            c.push(out);
            c.flush(srv);
            tracing::info!(conn = c.id, error = %e, "handshake failed");
            return c.close(srv, "handshake failed");
        }
    }
    let out = hs.take_output();
    let done = hs.is_done();
    c.push(out);
    if done {
        let Phase::Handshake(hs) = std::mem::replace(&mut c.phase, Phase::Closed) else {
            return;
        };
        match hs.into_session() {
            Ok(session) => {
                let max_read = protocol::max_io_size(session.sealer.max_payload()) as usize;
                let mut reader = RecordReader::new(session.opener);
                reader.extend_from_slice(input);
                c.phase = Phase::Open(Box::new(Open {
                    reader,
                    verifier: LoginVerifier::new(session.session_id, srv.name.host_id()),
                    sealer: session.sealer,
                    auth: AuthTable::new(),
                    max_read,
                    grown: false,
                }));
                tracing::debug!(conn = c.id, "session established");
            }
            Err(e) => {
                // Refused version: the refusal is already queued.
                c.phase = Phase::Handshake(Box::new(ServerHandshake::new(&srv.keypair)));
                c.flush(srv);
                tracing::info!(conn = c.id, error = %e, "handshake refused");
                return c.close(srv, "handshake refused");
            }
        }
    }
    c.flush(srv);
}

/// Opens and handles every complete record, as long as the connection is not paused.
fn process_records(srv: &Arc<Server>, conn: &ConnRef, c: &mut Conn) {
    loop {
        if c.paused(srv) {
            return;
        }
        let Phase::Open(open) = &mut c.phase else {
            return;
        };
        let decoded = match open.reader.next_record() {
            Ok(None) => return,
            Ok(Some(payload)) => {
                let big = payload.len() > IDLE_BUFFER;
                let decoded = Request::decode(payload);
                open.grown |= big;
                decoded
            }
            Err(e) => {
                tracing::warn!(conn = c.id, error = %e, "bad record; closing");
                return c.close(srv, "bad record");
            }
        };
        match decoded {
            Ok(req) => {
                c.requests += 1;
                handle_request(srv, conn, c, req);
            }
            Err(e) => {
                tracing::warn!(conn = c.id, error = %e, "undecodable request; closing");
                return c.close(srv, "bad request");
            }
        }
    }
}

fn reply_now(srv: &Arc<Server>, c: &mut Conn, id: u64, result: Result<ReplyBody, NfsStatus>) {
    c.send(srv, &ServerMessage::Reply(Reply { id, result }));
    c.flush(srv);
}

fn handle_request(srv: &Arc<Server>, conn: &ConnRef, c: &mut Conn, req: Request) {
    let Phase::Open(open) = &mut c.phase else {
        return;
    };
    let Request { id, authno, op } = req;
    let op = match op {
        RequestOp::Null => return reply_now(srv, c, id, Ok(ReplyBody::Null)),
        RequestOp::Login(args) => {
            let result = match open.verifier.verify(&args) {
                Ok(v) => match srv.users.lookup(&v.user, &v.public_key) {
                    Some(creds) => match open.auth.assign(creds.clone()) {
                        Ok(authno) => {
                            tracing::info!(conn = c.id, user = %v.user, uid = creds.uid, authno, "login");
                            Ok(ReplyBody::Login { authno })
                        }
                        Err(_) => Err(NfsStatus::Acces),
                    },
                    None => {
                        tracing::warn!(conn = c.id, user = %v.user, "login refused: key not authorised");
                        Err(NfsStatus::Acces)
                    }
                },
                Err(e) => {
                    tracing::warn!(conn = c.id, error = %e, "login refused");
                    Err(match e {
                        protocol::LoginError::BadUserName(_) => NfsStatus::Inval,
                        _ => NfsStatus::Acces,
                    })
                }
            };
            return reply_now(srv, c, id, result);
        }
        op => op,
    };
    let creds = if authno == protocol::ANONYMOUS {
        if !srv.anonymous_read {
            return reply_now(srv, c, id, Err(NfsStatus::Acces));
        }
        Creds::anonymous()
    } else {
        match open.auth.get(authno) {
            Some(c) => c.clone(),
            None => return reply_now(srv, c, id, Err(NfsStatus::Acces)),
        }
    };
    if crate::fs::is_mutating(&op) {
        if srv.read_only && !matches!(op, RequestOp::Commit { .. }) {
            return reply_now(srv, c, id, Err(NfsStatus::RoFs));
        }
        if creds.anonymous {
            return reply_now(srv, c, id, Err(NfsStatus::Acces));
        }
    }
    let max_read = open.max_read;
    c.in_flight += 1;
    srv.in_flight.fetch_add(1, Ordering::SeqCst);
    let conn_id = c.id;
    let (srv2, conn2) = (srv.clone(), conn.clone());
    match op {
        RequestOp::Read { fh, offset, count } => {
            // Handle verification stays in the connection's color.
            let hd = match srv.handle_key.verify(&fh) {
                Ok(hd) => hd,
                Err(e) => {
                    return complete_locked(
                        srv,
                        c,
                        Reply {
                            id,
                            result: Err(e.into()),
                        },
                    );
                }
            };
            let count = (count as usize).min(max_read);
            srv.h.cpucb(Color::DEFAULT, move || {
                srv2.dispatch_read(conn2, conn_id, id, creds, fh, hd, offset, count)
            });
        }
        op => srv2.dispatch(conn2, conn_id, id, creds, op),
    }
}

/// Connection color: a reply from the dispatcher.
pub fn complete(srv: &Arc<Server>, conn: &ConnRef, reply: Reply) {
    let mut c = lock(conn);
    complete_locked(srv, &mut c, reply);
    pump_locked(srv, conn, &mut c);
}

fn complete_locked(srv: &Arc<Server>, c: &mut Conn, reply: Reply) {
    c.in_flight = c.in_flight.saturating_sub(1);
    srv.in_flight.fetch_sub(1, Ordering::SeqCst);
    if c.closed() {
        return;
    }
    c.send(srv, &ServerMessage::Reply(reply));
    c.flush(srv);
}

/// Connection color: a READ reply whose payload the helper already wrote after a 4-byte
/// header gap; seal it in place (no copy of the data).
pub fn complete_read(srv: &Arc<Server>, conn: &ConnRef, id: u64, res: Result<Vec<u8>, NfsStatus>) {
    let mut c = lock(conn);
    match res {
        Err(status) => complete_locked(
            srv,
            &mut c,
            Reply {
                id,
                result: Err(status),
            },
        ),
        Ok(mut buf) => {
            c.in_flight = c.in_flight.saturating_sub(1);
            srv.in_flight.fetch_sub(1, Ordering::SeqCst);
            if let Phase::Open(open) = &mut c.phase {
                // `begin` on an empty buffer yields the start of a record at offset 0 and
                // writes a 4-byte header placeholder, exactly the gap the helper left.
                let start = open.sealer.begin(&mut Vec::new());
                if open.sealer.finish(&mut buf, start).is_ok() {
                    c.push(buf);
                    c.flush(srv);
                } else {
                    c.send(
                        srv,
                        &ServerMessage::Reply(Reply {
                            id,
                            result: Err(NfsStatus::ServerFault),
                        }),
                    );
                    c.flush(srv);
                }
            }
        }
    }
    pump_locked(srv, conn, &mut c);
}

/// Connection color: an INVALIDATE caused by another connection.
pub fn send_unsolicited(srv: &Arc<Server>, conn: &ConnRef, msg: &ServerMessage) {
    let mut c = lock(conn);
    if c.closed() {
        return;
    }
    c.send(srv, msg);
    c.flush(srv);
}
