//! One connection to the server: TCP, handshake, the sending side, a reader task, LOGIN.
//!
//! The handshake's session becomes a [`ClientConnection`], split into its halves: the
//! sending side ([`Outgoing`]) owns the [`RequestSender`](protocol::client::RequestSender),
//! seals records in order and writes them (callers hand it [`UnsealedRequest`]s they encoded
//! with the session-wide ids a retry keeps); the reader task owns the [`MessageReader`], hands
//! each reply to the caller waiting for its id and applies INVALIDATEs to the attribute cache.
//! A sweep ends requests past their deadline ([`crate::sweep`]: no timer per request).
//! When either side fails, [`fail_all`] marks the connection dead and wakes every waiter with
//! "lost"; the next request makes a new connection ([`Client::connection`]).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use protocol::client::{MessageReader, UnsealedRequest};
use protocol::handshake::{Completed, DriveError};
use protocol::{
    ClientConnection, ClientHandshake, LoginSigner, NfsStatus, ReplyBody, Request, RequestOp,
    ServerMessage,
};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::error::{ConnectError, ProtocolError, SessionError, status_message};
use super::handshake;
use super::known_keys;
use super::outgoing::{Outgoing, write_queued};
use super::{Client, ClientState, Invalidation, REUSE_ABOVE, Sent};
use crate::caller_groups::Groups;
use crate::identity::Identity;
use crate::sweep::Sweep;

/// Where a reply goes: the caller waiting for its id, until its deadline.
struct Waiter {
    reply: oneshot::Sender<Outcome>,
    deadline: Instant,
}

/// How a request ended, for the caller waiting for it (the stream breaking drops the sender):
/// its reply, or [`TimedOut`].
type Outcome = Result<Result<ReplyBody, NfsStatus>, TimedOut>;

/// No reply by the deadline: the connection was dropped.
struct TimedOut;

/// How many of a request's timeouts go by between sweeps of a connection's deadlines (a
/// request times out up to this fraction of its timeout late), within these bounds.
const SWEEPS_PER_TIMEOUT: u32 = 8;
const SWEEP_MIN: Duration = Duration::from_millis(10);
const SWEEP_MAX: Duration = Duration::from_secs(1);
/// Idle sweeps before a connection's sweep stops ticking.
const SWEEP_LINGER: u32 = 5;

/// The answer to a request sent with a new connection's LOGIN ([`Client::connection_with`]).
pub(super) type EarlyReply = Result<ReplyBody, NfsStatus>;

/// The authno a connection's first successful LOGIN gets (docs/PROTOCOL.md, section 8).
const FIRST_AUTHNO: u32 = 1;

/// Most file bytes a FETCH riding with a new connection's LOGIN asks for: what the server's
/// first flight can carry besides the SESSION and LOGIN replies (a new TCP connection sends
/// 10 segments of 1448 bytes before its first acknowledgement, RFC 6928; the two small
/// replies take a segment each, the FETCH's own fields and the record's framing a few hundred
/// bytes). A larger answer would take several round trips of TCP's slow start to arrive, and
/// the READs for the rest of the file, which need the FETCH's handle, would reach the server
/// only a round trip after its last byte left: the stream would stop for a round trip. An
/// answer that fits in the first flight arrives a round trip after the handshake, and the
/// READs sent then reach the server with the acknowledgements that let it send more, so the
/// stream never waits for them (a file up to this size still comes whole with the LOGIN).
/// On a live connection, whose window is open, a FETCH asks for a whole record.
pub(super) const FIRST_FLIGHT_FETCH: u32 = 8 * 1024;

/// Whether `op` may go out with a new connection's LOGIN on a connection of `version`: a
/// FETCH or a CREATEAT, where the version has it. A CREATEAT goes unsequenced there (the
/// SESSION that binds the reply cache is in the same flight); a session that has just begun
/// has nothing to replay, and if its answer is lost the caller makes the file again the
/// ordinary way.
fn rides_with_login(op: &RequestOp, version: u32) -> bool {
    match op {
        RequestOp::Fetch { .. } => protocol::handshake::has_fetch(version),
        RequestOp::CreateAt { .. } => protocol::handshake::has_create_at(version),
        _ => false,
    }
}

/// Requests waiting for replies on one connection.
#[derive(Default)]
struct Pending {
    dead: bool,
    waiters: HashMap<u64, Waiter>,
}

impl Pending {
    /// Ends the requests past their deadline, and then the connection; whether any request
    /// is still waiting.
    fn sweep(&mut self, now: Instant) -> bool {
        if self.waiters.values().any(|w| w.deadline <= now) {
            for (_, w) in self.waiters.drain() {
                if w.deadline <= now {
                    let _ = w.reply.send(Err(TimedOut));
                }
            }
            self.dead = true;
        }
        !self.waiters.is_empty()
    }
}

/// The next connection's serial (for [`Sent`]): never reused within the process.
static SERIALS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// One live connection (dropped, with its tasks, when it breaks and a new one is made).
pub(super) struct Conn {
    out: Arc<Outgoing>,
    pending: Arc<Mutex<Pending>>,
    deadlines: Arc<Sweep>,
    /// The authno of the session's own identity (ANONYMOUS without one).
    pub(super) authno: u32,
    /// Signs LOGINs on this connection (its sequence numbers must increase).
    signer: Mutex<LoginSigner>,
    /// Authnos of the local users logged in on this connection ([`Client::as_uid`]).
    pub(super) logins: Mutex<HashMap<u32, u32>>,
    /// Narrowed authnos on this connection by (login authno, groups) ([`Client::with_groups`]).
    pub(super) narrowed: Mutex<HashMap<(u32, Groups), u32>>,
    pub(super) read_max: u32,
    pub(super) write_max: u32,
    /// The reply-cache epoch this connection's changes go in ([`super::slots`]); None when
    /// the server has no reply cache for us (it speaks protocol version 2, or refused).
    pub(super) epoch: Option<u64>,
    /// The protocol version the handshake chose.
    pub(super) version: u32,
    /// This connection among the process's (see [`Sent`]).
    pub(super) serial: u64,
    tasks: [JoinHandle<()>; 3],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Conn {
    pub(super) fn is_dead(&self) -> bool {
        self.pending.lock().dead
    }

    /// Sends one encoded request and waits for its reply until `deadline`: `Err(())` when
    /// none came by then (the connection is then dropped: its outstanding requests fail too,
    /// and the next call reconnects), `None` when the stream broke. `on_sent` is told where
    /// the request went once it is sealed.
    async fn roundtrip(
        &self,
        id: u64,
        request: UnsealedRequest,
        deadline: Instant,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<Option<Result<ReplyBody, NfsStatus>>, ()> {
        let (reply, rx) = oneshot::channel();
        {
            let mut p = self.pending.lock();
            if p.dead {
                return Ok(None);
            }
            p.waiters.insert(id, Waiter { reply, deadline });
        }
        self.deadlines.added();
        let Ok(seq) = self.out.send(request) else {
            fail_all(&self.pending);
            return Ok(None);
        };
        on_sent(Sent {
            conn: self.serial,
            seq,
            version: self.version,
        });
        match rx.await {
            Ok(Ok(r)) => Ok(Some(r)),
            Ok(Err(TimedOut)) => Err(()),
            Err(_) => Ok(None),
        }
    }

    /// [`Conn::roundtrip`] with a deadline `timeout` from now.
    pub(super) async fn roundtrip_within(
        &self,
        timeout: Duration,
        id: u64,
        request: UnsealedRequest,
    ) -> Result<Option<Result<ReplyBody, NfsStatus>>, ()> {
        self.roundtrip_within_sent(timeout, id, request, &mut |_| {})
            .await
    }

    /// [`Conn::roundtrip_within`], telling `on_sent` where the request went.
    pub(super) async fn roundtrip_within_sent(
        &self,
        timeout: Duration,
        id: u64,
        request: UnsealedRequest,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<Option<Result<ReplyBody, NfsStatus>>, ()> {
        self.roundtrip(id, request, Instant::now() + timeout, on_sent)
            .await
    }
}

/// Marks a connection dead and fails everything waiting on it.
fn fail_all(pending: &Mutex<Pending>) {
    let mut p = pending.lock();
    p.dead = true;
    p.waiters.clear(); // dropping the senders wakes the waiters with "lost"
}

impl Client {
    /// The live connection, making one (with backoff) when there is none or it broke.
    pub(super) async fn connection(&self) -> Result<Arc<Conn>, SessionError> {
        Ok(self.connection_with(None).await?.0)
    }

    /// [`Client::connection`]; when a new connection is made, `early` (a FETCH or a
    /// CREATEAT) goes out with its LOGIN and SESSION, and its answer comes back beside the
    /// connection (see [`Client::establish`]).
    pub(super) async fn connection_with(
        &self,
        early: Option<RequestOp>,
    ) -> Result<(Arc<Conn>, Option<EarlyReply>), SessionError> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.is_dead()
        {
            return Ok((c.clone(), None));
        }
        *self.inner.conn_now.lock() = None;
        let reconnect = slot.take().is_some();
        let opts = &self.inner.opts;
        let mut delay = opts.initial_backoff;
        let mut last = None;
        for attempt in 0..opts.connect_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(opts.max_backoff);
            }
            let establish = self.establish(early.clone());
            match tokio::time::timeout(opts.connect_timeout, establish).await {
                Ok(Ok((c, early_reply))) => {
                    if reconnect {
                        // INVALIDATEs may have been missed while disconnected.
                        self.inner.cache.clear();
                        self.inner.invalidated(Invalidation::Everything);
                    }
                    let c = Arc::new(c);
                    *self.inner.conn_now.lock() = Some(c.clone());
                    *slot = Some(c.clone());
                    return Ok((c, early_reply));
                }
                Ok(Err(e @ SessionError::Handshake { .. })) => return Err(e),
                Ok(Err(e)) => {
                    tracing::debug!(attempt, error = %e.report(), "connect failed");
                    last = Some(e);
                }
                Err(_) => last = Some(self.connect_error(ConnectError::TimedOut)),
            }
        }
        Err(last.unwrap_or_else(|| self.connect_error(ConnectError::NoAttempt)))
    }

    /// A connect failure with this session's server.
    pub(super) fn connect_error(&self, source: impl Into<ConnectError>) -> SessionError {
        SessionError::Connect {
            name: self.inner.name.to_string(),
            source: source.into(),
        }
    }

    /// TCP connect, handshake, tasks, login.
    ///
    /// SESSION and LOGIN go out together behind the handshake's last message, and so does
    /// `early` (a FETCH or a CREATEAT) where the version has it, sent with the authno the
    /// LOGIN will get:
    /// the server gives authnos 1, 2, ... in the order of LOGINs and checks a connection's
    /// requests in order, so the FETCH runs as the user once the LOGIN before it succeeded
    /// (docs/PROTOCOL.md, section 8). Its answer is returned only if the LOGIN did get that
    /// authno; otherwise (refused: the user is anonymous) the caller asks again.
    async fn establish(
        &self,
        early: Option<RequestOp>,
    ) -> Result<(Conn, Option<EarlyReply>), SessionError> {
        let name = &self.inner.name;
        let mut stream = TcpStream::connect(name.location().socket_addr_string())
            .await
            .map_err(|e| self.connect_error(e))?;
        stream
            .set_nodelay(true)
            .map_err(|e| self.connect_error(e))?;
        let Completed { session, rest } = self.handshake(&mut stream).await?;
        let version = session.version;
        let sessions = version >= protocol::SESSIONS_VERSION;
        let (requests, messages, signer) =
            ClientConnection::new(session, name.host_id(), &rest).into_parts();
        let write_max = requests.max_write();
        let read_max = messages.max_read();

        let pending = Arc::new(Mutex::new(Pending::default()));
        let (rd, wr) = stream.into_split();
        let out = Outgoing::new(requests, wr);
        let writer = tokio::spawn({
            let pending = pending.clone();
            write_queued(out.clone(), Arc::downgrade(&self.inner), move || {
                fail_all(&pending)
            })
        });
        let deadlines = Arc::new(Sweep::default());
        let every =
            (self.inner.opts.request_timeout / SWEEPS_PER_TIMEOUT).clamp(SWEEP_MIN, SWEEP_MAX);
        let sweeper = tokio::spawn({
            let (pending, deadlines) = (Arc::downgrade(&pending), deadlines.clone());
            async move {
                deadlines
                    .run(every, SWEEP_LINGER, || {
                        let pending = pending.upgrade()?;
                        let mut p = pending.lock();
                        let waiting = p.sweep(Instant::now());
                        // A dead connection's waiters are all gone: nothing to sweep again.
                        (!p.dead).then_some(waiting)
                    })
                    .await
            }
        });
        let readertask = tokio::spawn(read_records(
            messages,
            rd,
            pending.clone(),
            Arc::downgrade(&self.inner),
            name.to_string(),
        ));
        let mut conn = Conn {
            out,
            pending,
            deadlines,
            authno: protocol::ANONYMOUS,
            signer: Mutex::new(signer),
            logins: Mutex::new(HashMap::new()),
            narrowed: Mutex::new(HashMap::new()),
            read_max,
            write_max,
            epoch: None,
            version,
            serial: SERIALS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            tasks: [writer, readertask, sweeper],
        };
        let identity = self.inner.identity.as_ref();
        let expected_authno = match identity {
            Some(_) => FIRST_AUTHNO,
            None => protocol::ANONYMOUS,
        };
        let early = early.filter(|op| rides_with_login(op, version));
        let (epoch, authno, early_reply) = tokio::join!(
            async {
                match sessions {
                    true => self.bind_session(&conn).await,
                    false => Ok(None),
                }
            },
            async {
                match identity {
                    Some(id) => self.login(&conn, id).await.map(Some),
                    None => Ok(None),
                }
            },
            async { self.send_early(&conn, expected_authno, early?).await }
        );
        conn.epoch = epoch?;
        if let Some(authno) = authno? {
            conn.authno = authno;
        }
        let early_reply = early_reply.filter(|_| conn.authno == expected_authno);
        Ok((conn, early_reply))
    }

    /// Sends `op` as `authno` on `conn` and waits for its answer (None if the stream broke or
    /// it timed out: the caller asks again the ordinary way).
    async fn send_early(&self, conn: &Conn, authno: u32, op: RequestOp) -> Option<EarlyReply> {
        let rid = self.next_id();
        let request = UnsealedRequest::new(
            Vec::new(),
            &Request {
                id: rid,
                authno,
                op,
            },
        );
        conn.roundtrip_within(self.inner.opts.request_timeout, rid, request)
            .await
            .ok()
            .flatten()
    }

    /// Runs the client side of the handshake on `stream`.
    async fn handshake(&self, stream: &mut TcpStream) -> Result<Completed, SessionError> {
        let name = &self.inner.name;
        let known = *self.inner.server_key.lock();
        let known = known.or_else(|| known_keys::load(name));
        let hs = known
            .and_then(|key| ClientHandshake::with_known_key(name, Default::default(), key).ok())
            .unwrap_or_else(|| ClientHandshake::new(name));
        let completed = handshake::complete(hs, stream).await.map_err(|e| match e {
            DriveError::Io(e) => self.connect_error(e),
            DriveError::Closed => self.connect_error(ConnectError::ClosedInHandshake),
            DriveError::Handshake(source) => SessionError::Handshake {
                name: name.to_string(),
                source,
            },
        })?;
        let key = completed.session.server_key;
        if known != Some(key) {
            known_keys::store(name, &key);
        }
        *self.inner.server_key.lock() = Some(key);
        Ok(completed)
    }

    /// LOGIN as `id` on `conn`: the authno, or ANONYMOUS when the server refuses (not fatal:
    /// the user works anonymously and gets what anonymous users get, usually "Permission
    /// denied", as with SFS).
    pub(super) async fn login(&self, conn: &Conn, id: &Identity) -> Result<u32, SessionError> {
        let name = &self.inner.name;
        let args = conn
            .signer
            .lock()
            .sign(&id.user, &id.key)
            .map_err(|e| self.protocol_error(ProtocolError::SignLogin(e)))?;
        let rid = self.next_id();
        let request = UnsealedRequest::new(
            Vec::new(),
            &Request {
                id: rid,
                authno: protocol::ANONYMOUS,
                op: RequestOp::Login(args),
            },
        );
        match conn
            .roundtrip_within(self.inner.opts.request_timeout, rid, request)
            .await
        {
            Ok(Some(Ok(ReplyBody::Login { authno }))) => Ok(authno),
            Ok(Some(Ok(other))) => {
                Err(self.protocol_error(ProtocolError::LoginAnswer(other.proc())))
            }
            Ok(Some(Err(status))) => {
                tracing::warn!(
                    "login as {} refused by {} ({}); continuing anonymously",
                    id.user,
                    name,
                    status_message(status)
                );
                Ok(protocol::ANONYMOUS)
            }
            Ok(None) | Err(()) => Err(self.connect_error(ConnectError::LostDuringLogin)),
        }
    }

    /// SESSION on `conn`: binds it to our reply cache on the server; the epoch its changes go
    /// in, or None if the server refuses (its table is full: changes then go without).
    async fn bind_session(&self, conn: &Conn) -> Result<Option<u64>, SessionError> {
        let rid = self.next_id();
        let request = UnsealedRequest::new(
            Vec::new(),
            &Request {
                id: rid,
                authno: protocol::ANONYMOUS,
                op: self.inner.slots.session_request(),
            },
        );
        match conn
            .roundtrip_within(self.inner.opts.request_timeout, rid, request)
            .await
        {
            Ok(Some(Ok(ReplyBody::Session { slots, resumed }))) => {
                tracing::debug!(server = %self.inner.name, slots, resumed, "session bound");
                Ok(Some(self.inner.slots.bound(slots, resumed)))
            }
            Ok(Some(Ok(other))) => {
                Err(self.protocol_error(ProtocolError::UnexpectedReply(other.proc())))
            }
            Ok(Some(Err(status))) => {
                tracing::info!(
                    "{} keeps no replies for us ({}); changes cut off by a reconnect will not \
                     be retried",
                    self.inner.name,
                    status_message(status)
                );
                Ok(None)
            }
            Ok(None) | Err(()) => Err(self.connect_error(ConnectError::LostDuringLogin)),
        }
    }

    /// NARROW `base` to `g` on `conn`: the narrowed authno, or `base` when the server refuses
    /// (an older server that does not know NARROW included: the login's groups then apply).
    pub(super) async fn narrow(
        &self,
        conn: &Conn,
        base: u32,
        g: &Groups,
    ) -> Result<u32, SessionError> {
        let rid = self.next_id();
        let request = UnsealedRequest::new(
            Vec::new(),
            &Request {
                id: rid,
                authno: base,
                op: RequestOp::Narrow {
                    gid: g.gid,
                    groups: g.groups.to_vec(),
                },
            },
        );
        match conn
            .roundtrip_within(self.inner.opts.request_timeout, rid, request)
            .await
        {
            Ok(Some(Ok(ReplyBody::Narrow { authno }))) => Ok(authno),
            Ok(Some(Ok(other))) => {
                Err(self.protocol_error(ProtocolError::UnexpectedReply(other.proc())))
            }
            Ok(Some(Err(status))) => {
                tracing::debug!(
                    base,
                    gid = g.gid,
                    groups = ?g.groups,
                    "narrowing refused by {} ({}); the login's groups apply",
                    self.inner.name,
                    status_message(status)
                );
                Ok(base)
            }
            Ok(None) | Err(()) => Err(self.connect_error(ConnectError::LostDuringLogin)),
        }
    }

    /// A protocol error with this session's server.
    pub(super) fn protocol_error(&self, source: ProtocolError) -> SessionError {
        SessionError::Protocol {
            name: self.inner.name.to_string(),
            source,
        }
    }
}

/// The reader task: opens records, hands replies to their waiters, applies INVALIDATEs to the
/// cache of the session (while it exists) and tells its hook.
async fn read_records(
    mut reader: MessageReader,
    mut rd: OwnedReadHalf,
    pending: Arc<Mutex<Pending>>,
    client: Weak<ClientState>,
    server: String,
) {
    loop {
        loop {
            // A large record (a READ reply) alone in the receive buffer brings the buffer
            // with it, which becomes the reply's data; the reader goes on in a kept buffer.
            let spare = |len| {
                client
                    .upgrade()
                    .map(|inner| inner.buffer_for(len))
                    .unwrap_or_default()
            };
            match reader.next_message_reusing(REUSE_ABOVE, spare) {
                Ok(Some(ServerMessage::Reply(r))) => {
                    let w = pending.lock().waiters.remove(&r.id);
                    if let Some(w) = w {
                        let _ = w.reply.send(Ok(r.result));
                    }
                }
                Ok(Some(ServerMessage::Invalidate(inv))) => {
                    if let Some(inner) = client.upgrade() {
                        inner.cache.invalidated(&inv.fh, inv.attr);
                        inner.invalidated(Invalidation::Object(inv.fh, inv.attr));
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(%server, error = %e, "bad record or message; closing");
                    return lost(&pending, &client);
                }
            }
        }
        let buf = reader.read_buf();
        match rd.read(buf).await {
            Ok(0) | Err(_) => return lost(&pending, &client),
            Ok(n) => reader.advance(n),
        }
    }
}

/// The reader's end: the connection is dead, and no INVALIDATE can come on it any more
/// ([`ClientState::connection_lost`]).
fn lost(pending: &Mutex<Pending>, client: &Weak<ClientState>) {
    fail_all(pending);
    if let Some(inner) = client.upgrade() {
        inner.connection_lost();
    }
}
