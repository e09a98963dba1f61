//! One session per server: one TCP stream, pipelined requests, reconnects.
//!
//! A [`Client`] owns at most one live connection. Requests get a fresh id and go to a writer
//! task that seals them in order (the record counter is the nonce, so sealing and writing must
//! stay in one place); a reader task opens records, hands each reply to the caller waiting for
//! its id (in whatever order they come) and applies INVALIDATEs to the attribute cache.
//!
//! When the stream breaks, every outstanding request fails with "connection lost"; the caller
//! reconnects (exponential backoff, the same HOSTID verified by the handshake since it comes
//! from the name), logs in again and retries the request if it is idempotent. File handles are
//! server-issued and survive server restarts, so they stay valid across reconnects.
//!
//! A server that stays connected but stops answering is treated the same way: each request
//! waits at most [`Options::request_timeout`] for its reply, after which the connection is
//! declared broken and the request takes the reconnect path above.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use protocol::{
    Attr, ClientHandshake, FileHandle, LoginSigner, NfsStatus, Proc, RecordReader, ReplyBody,
    Request, RequestOp, ServerMessage, ServerName, StableHow, max_io_size,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::cache::AttrCache;
use crate::identity::Identity;

/// What went wrong with a request.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SessionError {
    /// The server answered with an error status.
    #[error("{}", status_message(*.0))]
    Nfs(NfsStatus),
    /// No connection could be made.
    #[error("cannot reach {name}: {reason}")]
    Connect {
        /// The server.
        name: String,
        /// Why.
        reason: String,
    },
    /// The handshake failed: for instance the server is not the one the HOSTID names.
    #[error("refusing server {name}: {reason}")]
    Handshake {
        /// The server.
        name: String,
        /// Why.
        reason: String,
    },
    /// The stream broke while a non-idempotent request was outstanding: it may or may not
    /// have been done, so it is not repeated blindly.
    #[error(
        "connection to {name} lost during {proc:?}; not retried because it is not idempotent \
         (check the result and repeat if needed)"
    )]
    NotRetried {
        /// The server.
        name: String,
        /// The request.
        proc: Proc,
    },
    /// The server stayed connected but did not answer within the request timeout, and the
    /// request could not be completed on a new connection either (or was not repeated
    /// because it is not idempotent).
    #[error("server {name} did not answer {proc:?} within {} s; {detail}", secs(*.timeout))]
    Timeout {
        /// The server.
        name: String,
        /// The request.
        proc: Proc,
        /// The per-request timeout that expired.
        timeout: Duration,
        /// What happened next.
        detail: String,
    },
    /// The server sent something this client cannot make sense of.
    #[error("protocol error with {name}: {reason}")]
    Protocol {
        /// The server.
        name: String,
        /// Why.
        reason: String,
    },
}

/// A duration in seconds as a user reads it ("30", "0.3").
fn secs(d: Duration) -> String {
    format!("{}", (d.as_secs_f64() * 1000.0).round() / 1000.0)
}

/// The message a shell user expects for a status (`ls` says "No such file or directory").
pub fn status_message(s: NfsStatus) -> String {
    match s {
        NfsStatus::NoEnt => "No such file or directory".into(),
        NfsStatus::Acces | NfsStatus::Perm => "Permission denied".into(),
        NfsStatus::Exist => "File exists".into(),
        NfsStatus::NotDir => "Not a directory".into(),
        NfsStatus::IsDir => "Is a directory".into(),
        NfsStatus::NotEmpty => "Directory not empty".into(),
        NfsStatus::RoFs => "Read-only file system".into(),
        NfsStatus::NoSpc => "No space left on device".into(),
        NfsStatus::NameTooLong => "File name too long".into(),
        NfsStatus::Inval => "Invalid argument".into(),
        NfsStatus::Stale => "Stale file handle".into(),
        other => other.description().to_string(),
    }
}

/// Tunables of a session.
#[derive(Debug, Clone)]
pub struct Options {
    /// Connection attempts before giving up (each reconnect, and the first connect).
    pub connect_attempts: u32,
    /// Delay before the second attempt; doubled each time up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest delay between attempts.
    pub max_backoff: Duration,
    /// Time allowed for TCP connect plus handshake.
    pub connect_timeout: Duration,
    /// Outstanding READ/WRITE requests per bulk transfer.
    pub window: usize,
    /// Times an idempotent request is retried after the stream broke.
    pub retries: u32,
    /// How long a request waits for its reply. When it expires the stream is treated as
    /// broken: the connection is dropped (failing everything outstanding on it) and the
    /// request goes through the reconnect path like any other lost request.
    pub request_timeout: Duration,
}

/// Times an idempotent request that timed out is retried (each on a fresh connection).
const MAX_TIMEOUT_RETRIES: u32 = 1;

/// Default per-request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_attempts: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            window: 8,
            retries: 8,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

type Waiter = oneshot::Sender<Result<ReplyBody, NfsStatus>>;

/// An outstanding READ of a bulk transfer: its offset and the task doing it.
type ReadTask = (u64, JoinHandle<Result<(Vec<u8>, bool), SessionError>>);

/// An outstanding WRITE of a bulk transfer: (write verifier, bytes) when done.
type WriteTask = JoinHandle<Result<([u8; 8], u64), SessionError>>;

/// Requests waiting for replies on one connection.
#[derive(Default)]
struct Pending {
    dead: bool,
    waiters: HashMap<u64, Waiter>,
}

/// One live connection (dropped, with its tasks, when it breaks and a new one is made).
struct Conn {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    pending: Arc<Mutex<Pending>>,
    /// The authno of the session's own identity (ANONYMOUS without one).
    authno: u32,
    /// Signs LOGINs on this connection (its sequence numbers must increase).
    signer: Mutex<LoginSigner>,
    /// Authnos of the local users logged in on this connection ([`Client::as_uid`]).
    logins: Mutex<HashMap<u32, u32>>,
    read_max: u32,
    write_max: u32,
    tasks: [JoinHandle<()>; 2],
}

impl Drop for Conn {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Conn {
    fn is_dead(&self) -> bool {
        lock(&self.pending).dead
    }

    /// Sends one encoded request and waits for its reply; `None` when the stream broke.
    async fn roundtrip(&self, id: u64, payload: Vec<u8>) -> Option<Result<ReplyBody, NfsStatus>> {
        let (tx, rx) = oneshot::channel();
        {
            let mut p = lock(&self.pending);
            if p.dead {
                return None;
            }
            p.waiters.insert(id, tx);
        }
        if self.tx.send(payload).is_err() {
            lock(&self.pending).waiters.remove(&id);
            return None;
        }
        rx.await.ok()
    }

    /// [`Conn::roundtrip`] bounded by `timeout`: `Err(())` when no reply came in time, in
    /// which case the connection is marked broken (its outstanding requests fail too, and the
    /// next call reconnects).
    async fn roundtrip_within(
        &self,
        timeout: Duration,
        id: u64,
        payload: Vec<u8>,
    ) -> Result<Option<Result<ReplyBody, NfsStatus>>, ()> {
        match tokio::time::timeout(timeout, self.roundtrip(id, payload)).await {
            Ok(r) => Ok(r),
            Err(_) => {
                fail_all(&self.pending);
                Err(())
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Marks a connection dead and fails everything waiting on it.
fn fail_all(pending: &Mutex<Pending>) {
    let mut p = lock(pending);
    p.dead = true;
    p.waiters.clear(); // dropping the senders wakes the waiters with "lost"
}

/// What the server told us about changes made by others (see [`Client::on_invalidate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalidation {
    /// An INVALIDATE for one object (its new attributes when the server sent them).
    Object(FileHandle, Option<Attr>),
    /// A new connection replaced a broken one: INVALIDATEs may have been missed, so nothing
    /// cached from before can be trusted.
    Everything,
}

/// A callback told of every [`Invalidation`]; called on the connection's reader task, so it
/// must not block (hand the work to another thread).
pub type InvalidateHook = Box<dyn Fn(Invalidation) + Send + Sync>;

/// Finds the identity of a local uid (for [`Client::as_uid`]).
pub type IdentityResolver = Box<dyn Fn(u32) -> Option<Identity> + Send + Sync>;

struct Inner {
    name: ServerName,
    identity: Option<Identity>,
    opts: Options,
    cache: AttrCache,
    next_id: AtomicU64,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    on_invalidate: std::sync::OnceLock<InvalidateHook>,
    resolver: std::sync::OnceLock<IdentityResolver>,
    user_ids: Mutex<HashMap<u32, Option<Identity>>>,
}

impl Inner {
    fn invalidated(&self, what: Invalidation) {
        if let Some(hook) = self.on_invalidate.get() {
            hook(what);
        }
    }
}

/// A session with one server, shared cheaply (`Clone`) between tasks.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// The local user this handle acts for (None: the session's own identity).
    who: Option<u32>,
}

impl Client {
    /// A client for `name` (its path, if any, is ignored here); connects lazily.
    pub fn new(name: &ServerName, identity: Option<Identity>, opts: Options) -> Client {
        Client {
            inner: Arc::new(Inner {
                name: name.without_path(),
                identity,
                opts,
                cache: AttrCache::default(),
                next_id: AtomicU64::new(1),
                conn: tokio::sync::Mutex::new(None),
                on_invalidate: std::sync::OnceLock::new(),
                resolver: std::sync::OnceLock::new(),
                user_ids: Mutex::new(HashMap::new()),
            }),
            who: None,
        }
    }

    /// Registers the callback told of INVALIDATEs and reconnects (at most one; later calls
    /// are ignored and return false). The attribute cache is updated before it runs.
    pub fn on_invalidate(&self, hook: InvalidateHook) -> bool {
        self.inner.on_invalidate.set(hook).is_ok()
    }

    /// The attribute cache.
    pub fn cache(&self) -> &AttrCache {
        &self.inner.cache
    }

    /// The session's authno (0 when anonymous); connects if needed.
    pub async fn authno(&self) -> Result<u32, SessionError> {
        let c = self.connection().await?;
        self.authno_on(&c).await
    }

    /// Largest READ count and WRITE data per request on the current connection.
    pub async fn io_sizes(&self) -> Result<(u32, u32), SessionError> {
        let c = self.connection().await?;
        Ok((c.read_max, c.write_max))
    }

    /// Closes the connection (requests under way finish on it); the next call connects
    /// again. Cached attributes are dropped and [`Invalidation::Everything`] is reported,
    /// since no INVALIDATE can arrive while disconnected. Whether there was a connection.
    pub async fn disconnect(&self) -> bool {
        let was = self.inner.conn.lock().await.take().is_some();
        if was {
            self.inner.cache.clear();
            self.inner.invalidated(Invalidation::Everything);
        }
        was
    }

    /// The live connection, making one (with backoff) when there is none or it broke.
    async fn connection(&self) -> Result<Arc<Conn>, SessionError> {
        let mut slot = self.inner.conn.lock().await;
        if let Some(c) = slot.as_ref()
            && !c.is_dead()
        {
            return Ok(c.clone());
        }
        let reconnect = slot.take().is_some();
        let opts = &self.inner.opts;
        let mut delay = opts.initial_backoff;
        let mut last = None;
        for attempt in 0..opts.connect_attempts.max(1) {
            if attempt > 0 {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(opts.max_backoff);
            }
            match tokio::time::timeout(opts.connect_timeout, self.establish()).await {
                Ok(Ok(c)) => {
                    if reconnect {
                        // INVALIDATEs may have been missed while disconnected.
                        self.inner.cache.clear();
                        self.inner.invalidated(Invalidation::Everything);
                    }
                    let c = Arc::new(c);
                    *slot = Some(c.clone());
                    return Ok(c);
                }
                Ok(Err(e @ SessionError::Handshake { .. })) => return Err(e),
                Ok(Err(e)) => {
                    tracing::debug!(attempt, error = %e, "connect failed");
                    last = Some(e);
                }
                Err(_) => {
                    last = Some(SessionError::Connect {
                        name: self.inner.name.to_string(),
                        reason: "timed out".into(),
                    })
                }
            }
        }
        Err(last.unwrap_or_else(|| SessionError::Connect {
            name: self.inner.name.to_string(),
            reason: "no attempt made".into(),
        }))
    }

    /// TCP connect, handshake, tasks, login.
    async fn establish(&self) -> Result<Conn, SessionError> {
        let name = &self.inner.name;
        let cerr = |e: std::io::Error| SessionError::Connect {
            name: name.to_string(),
            reason: e.to_string(),
        };
        let mut stream = TcpStream::connect(name.location().socket_addr_string())
            .await
            .map_err(cerr)?;
        stream.set_nodelay(true).map_err(cerr)?;
        let mut hs = ClientHandshake::new(name);
        let mut buf = vec![0u8; 4096];
        let mut leftover = Vec::new();
        while !hs.is_done() {
            if hs.has_output() {
                stream.write_all(&hs.take_output()).await.map_err(cerr)?;
            }
            if !hs.wants_input() {
                break;
            }
            let n = stream.read(&mut buf).await.map_err(cerr)?;
            if n == 0 {
                return Err(SessionError::Connect {
                    name: name.to_string(),
                    reason: "server closed the connection during the handshake".into(),
                });
            }
            let used = hs.receive(&buf[..n]).map_err(|e| SessionError::Handshake {
                name: name.to_string(),
                reason: e.to_string(),
            })?;
            leftover.extend_from_slice(&buf[used..n]);
        }
        if hs.has_output() {
            stream.write_all(&hs.take_output()).await.map_err(cerr)?;
        }
        let session = hs.into_session().map_err(|e| SessionError::Handshake {
            name: name.to_string(),
            reason: e.to_string(),
        })?;
        let write_max = max_io_size(session.sealer.max_payload());
        let read_max = max_io_size(session.opener.max_payload());
        let session_id = session.session_id;
        let mut reader = RecordReader::new(session.opener);
        reader.extend_from_slice(&leftover);
        let mut sealer = session.sealer;

        let pending = Arc::new(Mutex::new(Pending::default()));
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let (mut rd, mut wr) = stream.into_split();

        let wpending = pending.clone();
        let writer = tokio::spawn(async move {
            let mut out = Vec::new();
            while let Some(first) = rx.recv().await {
                out.clear();
                let mut next = Some(first);
                // Coalesce what is queued into one write (bounded so memory stays small).
                while let Some(p) = next.take() {
                    if sealer.seal_into(&p, &mut out).is_err() {
                        fail_all(&wpending);
                        return;
                    }
                    if out.len() < 256 * 1024 {
                        next = rx.try_recv().ok();
                    }
                }
                if wr.write_all(&out).await.is_err() {
                    fail_all(&wpending);
                    return;
                }
            }
        });

        let rpending = pending.clone();
        let client = Arc::downgrade(&self.inner);
        let rname = name.to_string();
        let readertask = tokio::spawn(async move {
            loop {
                loop {
                    let rec = match reader.next_record() {
                        Ok(Some(r)) => r,
                        Ok(None) => break,
                        Err(e) => {
                            tracing::warn!(server = %rname, error = %e, "bad record; closing");
                            fail_all(&rpending);
                            return;
                        }
                    };
                    match ServerMessage::decode(rec) {
                        Ok(ServerMessage::Reply(r)) => {
                            let w = lock(&rpending).waiters.remove(&r.id);
                            if let Some(w) = w {
                                let _ = w.send(r.result);
                            }
                        }
                        Ok(ServerMessage::Invalidate(inv)) => {
                            if let Some(inner) = client.upgrade() {
                                inner.cache.invalidate(&inv.fh);
                                if let Some(a) = inv.attr {
                                    inner.cache.put(inv.fh, a);
                                }
                                inner.invalidated(Invalidation::Object(inv.fh, inv.attr));
                            }
                        }
                        Err(e) => {
                            tracing::warn!(server = %rname, error = %e, "undecodable message");
                            fail_all(&rpending);
                            return;
                        }
                    }
                }
                let buf = reader.read_buf();
                match rd.read(buf).await {
                    Ok(0) | Err(_) => {
                        fail_all(&rpending);
                        return;
                    }
                    Ok(n) => reader.advance(n),
                }
            }
        });

        let mut conn = Conn {
            tx,
            pending,
            authno: protocol::ANONYMOUS,
            signer: Mutex::new(LoginSigner::new(session_id, name.host_id())),
            logins: Mutex::new(HashMap::new()),
            read_max,
            write_max,
            tasks: [writer, readertask],
        };
        if let Some(id) = &self.inner.identity {
            conn.authno = self.login(&conn, id).await?;
        }
        Ok(conn)
    }

    /// LOGIN as `id` on `conn`: the authno, or ANONYMOUS when the server refuses (not fatal:
    /// the user works anonymously and gets what anonymous users get, usually "Permission
    /// denied", as with SFS).
    async fn login(&self, conn: &Conn, id: &Identity) -> Result<u32, SessionError> {
        let name = &self.inner.name;
        let args =
            lock(&conn.signer)
                .sign(&id.user, &id.key)
                .map_err(|e| SessionError::Protocol {
                    name: name.to_string(),
                    reason: format!("cannot sign login: {e}"),
                })?;
        let rid = self.next_id();
        let payload = Request {
            id: rid,
            authno: protocol::ANONYMOUS,
            op: RequestOp::Login(args),
        }
        .encode();
        let lost = || SessionError::Connect {
            name: name.to_string(),
            reason: "connection lost during login".into(),
        };
        match conn
            .roundtrip_within(self.inner.opts.request_timeout, rid, payload)
            .await
        {
            Ok(Some(Ok(ReplyBody::Login { authno }))) => Ok(authno),
            Ok(Some(Ok(other))) => Err(SessionError::Protocol {
                name: name.to_string(),
                reason: format!("LOGIN answered with {:?}", other.proc()),
            }),
            Ok(Some(Err(status))) => {
                tracing::warn!(
                    "login as {} refused by {} ({}); continuing anonymously",
                    id.user,
                    name,
                    status_message(status)
                );
                Ok(protocol::ANONYMOUS)
            }
            Ok(None) | Err(()) => Err(lost()),
        }
    }

    /// The authno this client's requests carry on `conn`: the session identity's, or for a
    /// client made by [`Client::as_uid`], that local user's (logged in on first use on each
    /// connection; anonymous when the user has no identity).
    async fn authno_on(&self, conn: &Conn) -> Result<u32, SessionError> {
        let Some(uid) = self.who else {
            return Ok(conn.authno);
        };
        if let Some(a) = lock(&conn.logins).get(&uid) {
            return Ok(*a);
        }
        let authno = match self.identity_of(uid) {
            Some(id) => self.login(conn, &id).await?,
            None => protocol::ANONYMOUS,
        };
        lock(&conn.logins).insert(uid, authno);
        Ok(authno)
    }

    /// The identity of local user `uid` (from the resolver, asked once per uid).
    fn identity_of(&self, uid: u32) -> Option<Identity> {
        if let Some(id) = lock(&self.inner.user_ids).get(&uid) {
            return id.clone();
        }
        let id = self.inner.resolver.get().and_then(|r| r(uid));
        match &id {
            Some(i) => tracing::info!(uid, user = %i.user, "identity for local user"),
            None => tracing::info!(uid, "no identity for local user: anonymous"),
        }
        lock(&self.inner.user_ids).insert(uid, id.clone());
        id
    }

    /// This session acting for local user `uid`: same connection and caches, but requests
    /// carry that user's authno (see [`Client::set_identity_resolver`]).
    pub fn as_uid(&self, uid: u32) -> Client {
        Client {
            inner: self.inner.clone(),
            who: Some(uid),
        }
    }

    /// How [`Client::as_uid`] finds a local user's identity (None: anonymous). At most one;
    /// later calls are ignored and return false.
    pub fn set_identity_resolver(&self, r: IdentityResolver) -> bool {
        self.inner.resolver.set(r).is_ok()
    }

    fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends a request and waits for its reply, reconnecting and retrying when the request is
    /// idempotent.
    pub async fn call(&self, op: RequestOp) -> Result<ReplyBody, SessionError> {
        let proc = op.proc();
        self.call_with(proc, |id, authno, buf| {
            Request {
                id,
                authno,
                op: op.clone(),
            }
            .encode_into(buf)
        })
        .await
    }

    /// [`Client::call`] with a caller-supplied encoder (WRITE avoids copying its data twice).
    async fn call_with(
        &self,
        proc: Proc,
        encode: impl Fn(u64, u32, &mut Vec<u8>),
    ) -> Result<ReplyBody, SessionError> {
        let mut lost = 0;
        let mut busy = 0u32;
        // Whether the last attempt ended with the server not answering in time, and how many
        // did: a timed-out idempotent request is retried once on a fresh connection, so a
        // server that accepts connections but never answers costs at most two timeouts.
        let mut timed_out = false;
        let mut timeouts = 0u32;
        let timeout = self.inner.opts.request_timeout;
        loop {
            let conn = match self.connection().await {
                Ok(c) => c,
                Err(e) if timed_out => {
                    return Err(self.timeout_error(proc, format!("reconnecting failed: {e}")));
                }
                Err(e) => return Err(e),
            };
            let authno = match self.authno_on(&conn).await {
                Ok(a) => a,
                Err(e) if proc.is_idempotent() && lost < self.inner.opts.retries => {
                    lost += 1;
                    tracing::info!(server = %self.inner.name, error = %e, "login failed; retrying");
                    continue;
                }
                Err(e) => return Err(e),
            };
            let id = self.next_id();
            let mut payload = Vec::new();
            encode(id, authno, &mut payload);
            let reply = match conn.roundtrip_within(timeout, id, payload).await {
                Ok(r) => {
                    timed_out = false;
                    r
                }
                Err(()) => {
                    tracing::warn!(
                        server = %self.inner.name,
                        ?proc,
                        "no reply within {} s; dropping the connection",
                        secs(timeout)
                    );
                    timed_out = true;
                    timeouts += 1;
                    None
                }
            };
            match reply {
                // JUKEBOX means the server did not do the work (its storage threads were full,
                // or a handle needs a rate-limited walk first), so any request may be sent
                // again, idempotent or not.
                Some(Err(NfsStatus::Jukebox)) if busy < 10 => {
                    busy += 1;
                    tokio::time::sleep(Duration::from_millis(50 << busy.min(6))).await;
                }
                Some(r) => return r.map_err(SessionError::Nfs),
                None if proc.is_idempotent()
                    && lost < self.inner.opts.retries
                    && timeouts <= MAX_TIMEOUT_RETRIES =>
                {
                    lost += 1;
                    tracing::info!(server = %self.inner.name, ?proc, "connection lost; retrying");
                }
                None if proc.is_idempotent() && timed_out => {
                    return Err(
                        self.timeout_error(proc, format!("gave up after {timeouts} attempts"))
                    );
                }
                None if proc.is_idempotent() => {
                    return Err(SessionError::Connect {
                        name: self.inner.name.to_string(),
                        reason: "connection keeps breaking".into(),
                    });
                }
                None if timed_out => {
                    return Err(self.timeout_error(
                        proc,
                        "not retried because it is not idempotent (check the result and repeat \
                         if needed)"
                            .into(),
                    ));
                }
                None => {
                    return Err(SessionError::NotRetried {
                        name: self.inner.name.to_string(),
                        proc,
                    });
                }
            }
        }
    }

    fn timeout_error(&self, proc: Proc, detail: String) -> SessionError {
        SessionError::Timeout {
            name: self.inner.name.to_string(),
            proc,
            timeout: self.inner.opts.request_timeout,
            detail,
        }
    }

    fn unexpected(&self, body: &ReplyBody) -> SessionError {
        SessionError::Protocol {
            name: self.inner.name.to_string(),
            reason: format!("unexpected reply {:?}", body.proc()),
        }
    }

    /// Remembers attributes that came with a reply.
    fn note(&self, fh: &FileHandle, attr: &Option<Attr>) {
        match attr {
            Some(a) => self.inner.cache.put(*fh, *a),
            None => self.inner.cache.invalidate(fh),
        }
    }

    /// MOUNT: the handle of `path` below the server's root.
    pub async fn mount(&self, path: &str) -> Result<(FileHandle, Attr), SessionError> {
        let path = if path.is_empty() { "/" } else { path };
        match self
            .call(RequestOp::Mount {
                path: path.as_bytes().to_vec(),
            })
            .await?
        {
            ReplyBody::Mount { fh, attr } => {
                self.inner.cache.put(fh, attr);
                Ok((fh, attr))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// Attributes, from the cache while their lease lasts.
    pub async fn getattr(&self, fh: &FileHandle) -> Result<Attr, SessionError> {
        if let Some(a) = self.inner.cache.get(fh) {
            return Ok(a);
        }
        self.getattr_fresh(fh).await
    }

    /// Attributes from the server, bypassing the cache.
    pub async fn getattr_fresh(&self, fh: &FileHandle) -> Result<Attr, SessionError> {
        match self.call(RequestOp::GetAttr { fh: *fh }).await? {
            ReplyBody::GetAttr { attr } => {
                self.inner.cache.put(*fh, attr);
                Ok(attr)
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// LOOKUP.
    pub async fn lookup(
        &self,
        dir: &FileHandle,
        name: &[u8],
    ) -> Result<(FileHandle, Attr), SessionError> {
        match self
            .call(RequestOp::Lookup {
                dir: *dir,
                name: name.to_vec(),
            })
            .await?
        {
            ReplyBody::Lookup { fh, attr, dir_attr } => {
                if let Some(d) = dir_attr {
                    self.inner.cache.put(*dir, d);
                }
                let attr = match attr {
                    Some(a) => {
                        self.inner.cache.put(fh, a);
                        a
                    }
                    None => self.getattr(&fh).await?,
                };
                Ok((fh, attr))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// ACCESS, cached per user while the attributes' lease lasts (the FUSE mount asks it for
    /// `access(2)` and `open(2)`; nfsserve answers ACCESS itself from the attributes).
    pub async fn access(&self, fh: &FileHandle, bits: u32) -> Result<u32, SessionError> {
        let authno = self.authno().await?;
        if let Some(g) = self.inner.cache.get_access(fh, authno, bits) {
            return Ok(g);
        }
        match self
            .call(RequestOp::Access {
                fh: *fh,
                access: bits,
            })
            .await?
        {
            ReplyBody::Access { attr, access } => {
                if let Some(a) = &attr {
                    self.inner
                        .cache
                        .put_access(*fh, authno, bits, access, a.lease_ms);
                }
                self.note(fh, &attr);
                Ok(access)
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// SETATTR.
    pub async fn setattr(
        &self,
        fh: &FileHandle,
        attr: protocol::SetAttr,
    ) -> Result<Attr, SessionError> {
        self.inner.cache.invalidate(fh);
        match self
            .call(RequestOp::SetAttr {
                fh: *fh,
                attr,
                guard: None,
            })
            .await?
        {
            ReplyBody::SetAttr { attr: Some(a) } => {
                self.inner.cache.put(*fh, a);
                Ok(a)
            }
            ReplyBody::SetAttr { attr: None } => self.getattr_fresh(fh).await,
            other => Err(self.unexpected(&other)),
        }
    }

    /// READLINK.
    pub async fn readlink(&self, fh: &FileHandle) -> Result<Vec<u8>, SessionError> {
        match self.call(RequestOp::ReadLink { fh: *fh }).await? {
            ReplyBody::ReadLink { target, .. } => Ok(target),
            other => Err(self.unexpected(&other)),
        }
    }

    /// One READ of at most the negotiated size: (data, eof).
    pub async fn read(
        &self,
        fh: &FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), SessionError> {
        let (rmax, _) = self.io_sizes().await?;
        match self
            .call(RequestOp::Read {
                fh: *fh,
                offset,
                count: count.min(rmax),
            })
            .await?
        {
            ReplyBody::Read { attr, eof, data } => {
                if let Some(a) = attr {
                    self.inner.cache.put(*fh, a);
                }
                Ok((data, eof))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// One WRITE of at most the negotiated size: (count written, verifier).
    pub async fn write(
        &self,
        fh: &FileHandle,
        offset: u64,
        stable: StableHow,
        data: &[u8],
    ) -> Result<(u32, [u8; 8]), SessionError> {
        self.inner.cache.invalidate(fh);
        let body = self
            .call_with(Proc::Write, |id, authno, buf| {
                protocol::encode_write_request_into(buf, id, authno, fh, offset, stable, data)
            })
            .await?;
        match body {
            ReplyBody::Write {
                attr,
                count,
                verifier,
                ..
            } => {
                self.note(fh, &attr);
                Ok((count, verifier))
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// COMMIT: the write verifier after the data is stable.
    pub async fn commit(&self, fh: &FileHandle) -> Result<[u8; 8], SessionError> {
        match self
            .call(RequestOp::Commit {
                fh: *fh,
                offset: 0,
                count: 0,
            })
            .await?
        {
            ReplyBody::Commit { verifier, .. } => Ok(verifier),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Reads `fh` from `offset` to its end, handing data to `sink` in order, with up to
    /// `window` READs outstanding so one stream can fill the link.
    pub async fn read_all(
        &self,
        fh: &FileHandle,
        mut offset: u64,
        mut sink: impl FnMut(&[u8]) -> std::io::Result<()>,
    ) -> Result<u64, anyhow::Error> {
        let (rmax, _) = self.io_sizes().await?;
        let chunk = u64::from(rmax.max(1));
        let window = self.inner.opts.window.max(1);
        let mut inflight: VecDeque<ReadTask> = VecDeque::new();
        let mut next = offset;
        let mut total = 0u64;
        let spawn = |at: u64| {
            let c = self.clone();
            let fh = *fh;
            tokio::spawn(async move { c.read(&fh, at, rmax).await })
        };
        let abort = |q: &mut VecDeque<(u64, JoinHandle<_>)>| {
            for (_, h) in q.drain(..) {
                h.abort();
            }
        };
        loop {
            while inflight.len() < window {
                inflight.push_back((next, spawn(next)));
                next += chunk;
            }
            let Some((at, h)) = inflight.pop_front() else {
                return Ok(total);
            };
            debug_assert_eq!(at, offset);
            let (data, eof) = match h.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    abort(&mut inflight);
                    return Err(e.into());
                }
                Err(e) => {
                    abort(&mut inflight);
                    return Err(anyhow::anyhow!("read task failed: {e}"));
                }
            };
            if let Err(e) = sink(&data) {
                abort(&mut inflight);
                return Err(e.into());
            }
            total += data.len() as u64;
            offset += data.len() as u64;
            if eof || data.is_empty() {
                abort(&mut inflight);
                return Ok(total);
            }
            if (data.len() as u64) < chunk {
                // A short read that is not the end: the later requests assumed full chunks,
                // so restart the pipeline from where this one ended.
                abort(&mut inflight);
                next = offset;
            }
        }
    }

    /// Writes everything `source` yields (chunks of any size) at increasing offsets from 0,
    /// with up to `window` WRITEs outstanding, then COMMITs. `progress` is told of each
    /// acknowledged byte count.
    pub async fn write_all(
        &self,
        fh: &FileHandle,
        mut source: impl FnMut(&mut [u8]) -> std::io::Result<usize>,
        mut progress: impl FnMut(u64),
    ) -> Result<u64, anyhow::Error> {
        let (_, wmax) = self.io_sizes().await?;
        let window = self.inner.opts.window.max(1);
        let mut inflight: VecDeque<WriteTask> = VecDeque::new();
        let mut offset = 0u64;
        let mut done = false;
        let mut verifier = None;
        let mut restarted = false;
        loop {
            while !done && inflight.len() < window {
                let mut buf = vec![0u8; wmax as usize];
                let mut filled = 0;
                while filled < buf.len() {
                    let n = source(&mut buf[filled..])?;
                    if n == 0 {
                        done = true;
                        break;
                    }
                    filled += n;
                }
                buf.truncate(filled);
                if buf.is_empty() {
                    break;
                }
                let at = offset;
                offset += buf.len() as u64;
                let c = self.clone();
                let fh = *fh;
                inflight.push_back(tokio::spawn(async move {
                    let mut pos = 0usize;
                    let mut verf = [0u8; 8];
                    while pos < buf.len() {
                        let (n, v) = c
                            .write(&fh, at + pos as u64, StableHow::Unstable, &buf[pos..])
                            .await?;
                        if n == 0 {
                            return Err(SessionError::Nfs(NfsStatus::Io));
                        }
                        pos += n as usize;
                        verf = v;
                    }
                    Ok((verf, buf.len() as u64))
                }));
            }
            let Some(h) = inflight.pop_front() else {
                break;
            };
            let (v, len) = match h.await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    for h in inflight.drain(..) {
                        h.abort();
                    }
                    return Err(e.into());
                }
                Err(e) => return Err(anyhow::anyhow!("write task failed: {e}")),
            };
            if verifier.is_some_and(|old| old != v) {
                restarted = true;
            }
            verifier = Some(v);
            progress(len);
        }
        let committed = self.commit(fh).await?;
        if restarted || verifier.is_some_and(|v| v != committed) {
            anyhow::bail!(
                "the server restarted during the transfer and may have lost unstable writes; \
                 run the command again"
            );
        }
        self.inner.cache.invalidate(fh);
        Ok(offset)
    }

    /// All entries of a directory (READDIRPLUS, following cookies to the end).
    pub async fn readdir_all(
        &self,
        dir: &FileHandle,
    ) -> Result<Vec<protocol::DirEntryPlus>, SessionError> {
        let mut out = Vec::new();
        let mut cookie = 0u64;
        let mut verifier = [0u8; 8];
        loop {
            let body = self
                .call(RequestOp::ReadDirPlus {
                    dir: *dir,
                    cookie,
                    verifier,
                    dircount: 64 * 1024,
                    maxcount: 256 * 1024,
                })
                .await?;
            let ReplyBody::ReadDirPlus(page) = body else {
                return Err(self.unexpected(&body));
            };
            if let Some(a) = page.dir_attr {
                self.inner.cache.put(*dir, a);
            }
            verifier = page.verifier;
            let n = page.entries.len();
            for e in page.entries {
                cookie = e.cookie;
                if let (Some(fh), Some(a)) = (&e.fh, &e.attr) {
                    self.inner.cache.put(*fh, *a);
                }
                out.push(e);
            }
            if page.eof || n == 0 {
                return Ok(out);
            }
        }
    }

    /// CREATE (unchecked: truncates an existing file when `size` is set to 0).
    pub async fn create(
        &self,
        dir: &FileHandle,
        name: &[u8],
        how: protocol::CreateHow,
    ) -> Result<(FileHandle, Attr), SessionError> {
        self.inner.cache.invalidate(dir);
        let body = self
            .call(RequestOp::Create {
                dir: *dir,
                name: name.to_vec(),
                how,
            })
            .await?;
        match body {
            ReplyBody::Create(o) => self.new_object(o).await,
            other => Err(self.unexpected(&other)),
        }
    }

    /// MKDIR.
    pub async fn mkdir(
        &self,
        dir: &FileHandle,
        name: &[u8],
        attr: protocol::SetAttr,
    ) -> Result<(FileHandle, Attr), SessionError> {
        self.inner.cache.invalidate(dir);
        let body = self
            .call(RequestOp::Mkdir {
                dir: *dir,
                name: name.to_vec(),
                attr,
            })
            .await?;
        match body {
            ReplyBody::Mkdir(o) => self.new_object(o).await,
            other => Err(self.unexpected(&other)),
        }
    }

    /// SYMLINK.
    pub async fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        attr: protocol::SetAttr,
    ) -> Result<(FileHandle, Attr), SessionError> {
        self.inner.cache.invalidate(dir);
        let body = self
            .call(RequestOp::Symlink {
                dir: *dir,
                name: name.to_vec(),
                attr,
                target: target.to_vec(),
            })
            .await?;
        match body {
            ReplyBody::Symlink(o) => self.new_object(o).await,
            other => Err(self.unexpected(&other)),
        }
    }

    /// MKNOD: a FIFO, socket or device node (the server makes it as the caller; the kernel
    /// there decides whether that user may make a device).
    pub async fn mknod(
        &self,
        dir: &FileHandle,
        name: &[u8],
        kind: protocol::SpecialKind,
        attr: protocol::SetAttr,
    ) -> Result<(FileHandle, Attr), SessionError> {
        self.inner.cache.invalidate(dir);
        let body = self
            .call(RequestOp::Mknod {
                dir: *dir,
                name: name.to_vec(),
                kind,
                attr,
            })
            .await?;
        match body {
            ReplyBody::Mknod(o) => self.new_object(o).await,
            other => Err(self.unexpected(&other)),
        }
    }

    async fn new_object(&self, o: protocol::NewObject) -> Result<(FileHandle, Attr), SessionError> {
        match o.attr {
            Some(a) => {
                self.inner.cache.put(o.fh, a);
                Ok((o.fh, a))
            }
            None => Ok((o.fh, self.getattr_fresh(&o.fh).await?)),
        }
    }

    /// REMOVE or RMDIR.
    pub async fn remove(
        &self,
        dir: &FileHandle,
        name: &[u8],
        is_dir: bool,
    ) -> Result<(), SessionError> {
        self.inner.cache.invalidate(dir);
        let op = if is_dir {
            RequestOp::Rmdir {
                dir: *dir,
                name: name.to_vec(),
            }
        } else {
            RequestOp::Remove {
                dir: *dir,
                name: name.to_vec(),
            }
        };
        self.call(op).await.map(|_| ())
    }

    /// LINK: a new name `dir/name` for `fh`; the object's attributes afterwards.
    pub async fn link(
        &self,
        fh: &FileHandle,
        dir: &FileHandle,
        name: &[u8],
    ) -> Result<Attr, SessionError> {
        self.inner.cache.invalidate(dir);
        self.inner.cache.invalidate(fh);
        let body = self
            .call(RequestOp::Link {
                fh: *fh,
                dir: *dir,
                name: name.to_vec(),
            })
            .await?;
        match body {
            ReplyBody::Link { attr: Some(a), .. } => {
                self.inner.cache.put(*fh, a);
                Ok(a)
            }
            ReplyBody::Link { attr: None, .. } => self.getattr_fresh(fh).await,
            other => Err(self.unexpected(&other)),
        }
    }

    /// FSSTAT.
    pub async fn fsstat(&self, fh: &FileHandle) -> Result<protocol::FsStat, SessionError> {
        match self.call(RequestOp::FsStat { fh: *fh }).await? {
            ReplyBody::FsStat(s) => {
                self.note(fh, &s.attr);
                Ok(s)
            }
            other => Err(self.unexpected(&other)),
        }
    }

    /// RENAME.
    pub async fn rename(
        &self,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
    ) -> Result<(), SessionError> {
        self.inner.cache.invalidate(from_dir);
        self.inner.cache.invalidate(to_dir);
        self.call(RequestOp::Rename {
            from_dir: *from_dir,
            from_name: from_name.to_vec(),
            to_dir: *to_dir,
            to_name: to_name.to_vec(),
        })
        .await
        .map(|_| ())
    }

    /// RENAME2 with `flags` ([`protocol::rename_flags`]): with NOREPLACE the server fails with
    /// `Exist` rather than replace `to_name`, in the same system call as the rename.
    pub async fn rename2(
        &self,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
        flags: u32,
    ) -> Result<(), SessionError> {
        self.inner.cache.invalidate(from_dir);
        self.inner.cache.invalidate(to_dir);
        match self
            .call(RequestOp::Rename2 {
                from_dir: *from_dir,
                from_name: from_name.to_vec(),
                to_dir: *to_dir,
                to_name: to_name.to_vec(),
                flags,
            })
            .await?
        {
            ReplyBody::Rename2 { .. } => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
