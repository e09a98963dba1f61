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
//!
//! | file          | what                                                                |
//! |---------------|---------------------------------------------------------------------|
//! | [`error`]     | [`SessionError`], with the underlying error as its source           |
//! | [`conn`]      | one connection: TCP, handshake, reader and writer tasks, LOGIN      |
//! | [`handshake`] | the async driver of the protocol crate's handshake machine          |
//! | [`call`]      | sending a request: the retry and timeout policy                     |
//! | [`slots`]     | which reply-cache slot a change goes through (exactly-once)         |
//! | [`ops`]       | one typed method per NFS operation                                  |
//! | [`bulk`]      | whole-file READ and WRITE with a window of requests in flight       |
//! | [`append`]    | APPEND: writes at the end of the file as the server finds it        |
//! | [`limits`]    | bounds on what a (possibly hostile) server can make us hold         |
//! | [`invalidations`] | the bounded queue of invalidations for the FUSE side            |
//! | `tests`       | the above against an in-process server driven by the protocol crate |

mod append;
mod bulk;
mod by_path;
mod call;
mod conn;
pub(crate) mod error;
mod handshake;
pub(crate) mod invalidations;
mod known_keys;
pub(crate) mod limits;
mod locks;
mod ops;
mod outgoing;
mod sent;
mod slots;
mod window;
mod xattr;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use protocol::{Attr, FileHandle, ServerName};

use crate::cache::AttrCache;
use crate::caller_groups::Groups;
use crate::identity::Identity;
pub(crate) use by_path::Fetched;
use conn::Conn;
pub(crate) use ops::Made;
pub(crate) use sent::{Sent, SentSoFar};
pub(crate) use xattr::absent_unless_listed;

pub(crate) use error::SessionError;

/// Tunables of a session.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Connection attempts before giving up (each reconnect, and the first connect).
    pub connect_attempts: u32,
    /// Delay before the second attempt; doubled each time up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest delay between attempts.
    pub max_backoff: Duration,
    /// Time allowed for TCP connect plus handshake.
    pub connect_timeout: Duration,
    /// Most READ/WRITE requests outstanding per bulk transfer.
    pub window: usize,
    /// Bytes a bulk transfer starts with in flight: as many requests as carry this much (at
    /// least two, at most `window`), so large records do not pile up megabytes the server
    /// would only hold back, and small ones still keep the stream full. The window grows from
    /// here while that makes the transfer faster ([`window`]).
    pub window_bytes: usize,
    /// The most a bulk transfer's window grows to (less if an eighth of the memory available
    /// is less): 64 MiB fills 1 Gbit/s at 500 ms, or 5 Gbit/s at 100 ms.
    pub window_max_bytes: usize,
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
pub(crate) const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_attempts: 8,
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            window: 128,
            window_bytes: 8 << 20,
            window_max_bytes: 64 << 20,
            retries: 8,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
        }
    }
}

/// What the server told us about changes made by others (see [`Client::on_invalidate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Handles are inline (up to 113 bytes, Copy) since wrapped handles; invalidations are rare
// and short-lived, so boxing would buy nothing.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Invalidation {
    /// An INVALIDATE for one object (its new attributes when the server sent them).
    Object(FileHandle, Option<Attr>),
    /// A new connection replaced a broken one: INVALIDATEs may have been missed, so nothing
    /// cached from before can be trusted.
    Everything,
}

/// A callback told of every [`Invalidation`]; called on the connection's reader task, so it
/// must not block (hand the work to another thread).
pub(crate) type InvalidateHook = Box<dyn Fn(Invalidation) + Send + Sync>;

/// Finds the identity of a local uid (for [`Client::as_uid`]).
pub(crate) type IdentityResolver = Box<dyn Fn(u32) -> Option<Identity> + Send + Sync>;

/// What the clones of one [`Client`] share: the server's name and key, the identity, the
/// attribute cache, the live connection and the buffers kept for reuse.
struct ClientState {
    name: ServerName,
    identity: Option<Identity>,
    opts: Options,
    cache: AttrCache,
    next_id: AtomicU64,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    /// What `conn` holds, for what must be read without waiting for `conn`'s lock (which
    /// every request takes, and a reconnect holds): never held across an await.
    conn_now: Mutex<Option<Arc<Conn>>>,
    on_invalidate: std::sync::OnceLock<InvalidateHook>,
    resolver: std::sync::OnceLock<IdentityResolver>,
    user_ids: Mutex<HashMap<u32, Option<Identity>>>,
    /// Large buffers kept for reuse: READ data handed back by bulk transfers (reused by the
    /// reader task), sent requests (reused for the next), blocks of bulk writes.
    buffers: Mutex<Vec<Vec<u8>>>,
    /// Our id and slots in the server's reply cache.
    slots: slots::Slots,
    /// The server's key, once known (from disk or a handshake): the next handshake sends its
    /// first message without waiting for the server's ([`known_keys`]).
    server_key: Mutex<Option<known_keys::ServerKey>>,
    /// The server answered LISTDIR with NOTSUPP (its backend cannot say which entries have
    /// extended attributes): listings use READDIRPLUS.
    no_listdir: std::sync::atomic::AtomicBool,
}

/// Large buffers kept for reuse: a bulk write's window needs two per request in flight (the
/// block and its sealed request), a bulk read's one.
const KEPT_BUFFERS: usize = 24;
/// Records smaller than this are decoded into fresh allocations.
const REUSE_ABOVE: usize = 16 * 1024;
/// Room beyond the data in a recycled buffer: a record's header, tag and message header.
const RECORD_ROOM: usize = 1024;

impl Options {
    /// A bulk transfer's window, at its starting size.
    fn bulk_window(&self) -> window::Window {
        let initial = self.window_bytes as u64;
        window::Window::new(
            initial,
            window::affordable(self.window_max_bytes as u64, initial),
        )
    }
}

impl ClientState {
    /// A buffer for `len` bytes of data (a READ reply's, a WRITE request's, a bulk write's
    /// block): a recycled one when it is large, with room for a record's framing besides so
    /// the buffers cycling through a transfer never grow (contents and length are the last
    /// user's: callers clear or overwrite).
    fn buffer_for(&self, len: usize) -> Vec<u8> {
        if len < REUSE_ABOVE {
            return Vec::new();
        }
        let mut buf = self.buffers.lock().pop().unwrap_or_default();
        let room = len + RECORD_ROOM;
        if buf.capacity() < room {
            buf.reserve_exact(room - buf.len());
        }
        buf
    }

    /// Keeps `buf` for a later record (if it is large and few are kept).
    fn recycle(&self, buf: Vec<u8>) {
        let mut kept = self.buffers.lock();
        if buf.capacity() >= REUSE_ABOVE && kept.len() < KEPT_BUFFERS {
            kept.push(buf);
        }
    }

    fn invalidated(&self, what: Invalidation) {
        if let Some(hook) = self.on_invalidate.get() {
            hook(what);
        }
    }

    /// The connection the server's INVALIDATEs came on is gone (the server died or closed
    /// it, or the network broke it): what the cache holds under the server's leases can no
    /// longer be told stale, so it goes now, with the kernel's caches, rather than at the
    /// next request's reconnect. Until then a mount answered from a listing or attributes
    /// the server had stopped watching: a name another client made after sfsd restarted
    /// stayed unseen for up to the lease (a minute) on a mount that asked nothing meanwhile.
    fn connection_lost(&self) {
        self.cache.clear();
        self.invalidated(Invalidation::Everything);
    }
}

/// A session with one server, shared cheaply (`Clone`) between tasks.
#[derive(Clone)]
pub(crate) struct Client {
    inner: Arc<ClientState>,
    /// The local user this handle acts for (None: the session's own identity).
    who: Option<u32>,
    /// The groups of the local process this handle acts for: requests carry an authno
    /// narrowed to them (None: the login's own groups).
    caller: Option<Groups>,
}

/// Most narrowed authnos remembered per connection; past it a narrowing is asked for again
/// each time (the server answers the same authno).
const MAX_NARROWED: usize = 1024;

impl Client {
    /// A client for `name` (its path, if any, is ignored here); connects lazily.
    pub(crate) fn new(name: &ServerName, identity: Option<Identity>, opts: Options) -> Client {
        Client {
            inner: Arc::new(ClientState {
                name: name.without_path(),
                identity,
                opts,
                cache: AttrCache::default(),
                next_id: AtomicU64::new(1),
                conn: tokio::sync::Mutex::new(None),
                conn_now: Mutex::new(None),
                on_invalidate: std::sync::OnceLock::new(),
                resolver: std::sync::OnceLock::new(),
                user_ids: Mutex::new(HashMap::new()),
                buffers: Mutex::new(Vec::new()),
                slots: slots::Slots::new(),
                server_key: Mutex::new(None),
                no_listdir: Default::default(),
            }),
            who: None,
            caller: None,
        }
    }

    /// Registers the callback told of INVALIDATEs and reconnects (at most one; later calls
    /// are ignored and return false). The attribute cache is updated before it runs.
    pub(crate) fn on_invalidate(&self, hook: InvalidateHook) -> bool {
        self.inner.on_invalidate.set(hook).is_ok()
    }

    /// The attribute cache.
    pub(crate) fn cache(&self) -> &AttrCache {
        &self.inner.cache
    }

    /// The session's authno (0 when anonymous); connects if needed.
    pub(crate) async fn authno(&self) -> Result<u32, SessionError> {
        let c = self.connection().await?;
        self.authno_on(&c).await
    }

    /// [`Client::authno`] if it is known without waiting: connected, this user logged in and
    /// its groups narrowed already (None otherwise). For answers from the cache on the
    /// kernel's thread, and while other requests take their turns at the connection.
    pub(crate) fn authno_now(&self) -> Option<u32> {
        let conn = self.inner.conn_now.lock().clone()?;
        if conn.is_dead() {
            return None;
        }
        let base = match self.who {
            None => conn.authno,
            Some(uid) => *conn.logins.lock().get(&uid)?,
        };
        match &self.caller {
            Some(g) if base != protocol::ANONYMOUS => {
                conn.narrowed.lock().get(&(base, g.clone())).copied()
            }
            _ => Some(base),
        }
    }

    /// Largest READ count and WRITE data per request on the current connection.
    pub(crate) async fn io_sizes(&self) -> Result<(u32, u32), SessionError> {
        let c = self.connection().await?;
        Ok((c.read_max, c.write_max))
    }

    /// Closes the connection (requests under way finish on it); the next call connects
    /// again. Cached attributes are dropped and [`Invalidation::Everything`] is reported,
    /// since no INVALIDATE can arrive while disconnected. Whether there was a connection.
    pub(crate) async fn disconnect(&self) -> bool {
        let was = {
            let mut slot = self.inner.conn.lock().await;
            *self.inner.conn_now.lock() = None;
            slot.take().is_some()
        };
        if was {
            self.inner.cache.clear();
            self.inner.invalidated(Invalidation::Everything);
        }
        was
    }

    /// The authno this client's requests carry on `conn`: the session identity's, or for a
    /// client made by [`Client::as_uid`], that local user's (logged in on first use on each
    /// connection; anonymous when the user has no identity).
    async fn authno_on(&self, conn: &Conn) -> Result<u32, SessionError> {
        let base = self.login_authno_on(conn).await?;
        match &self.caller {
            Some(g) if base != protocol::ANONYMOUS => self.narrowed_on(conn, base, g).await,
            _ => Ok(base),
        }
    }

    /// `base` narrowed to `g` on `conn`: remembered per connection (authnos are), so a busy
    /// process costs one NARROW, not one per request. A refused narrowing (the server grants
    /// the user no such primary group, or the user holds too many authnos) is remembered as
    /// `base`: the process then acts with the login's groups, as before NARROW existed.
    async fn narrowed_on(&self, conn: &Conn, base: u32, g: &Groups) -> Result<u32, SessionError> {
        let key = (base, g.clone());
        if let Some(a) = conn.narrowed.lock().get(&key) {
            return Ok(*a);
        }
        let authno = self.narrow(conn, base, g).await?;
        let mut known = conn.narrowed.lock();
        if known.len() < MAX_NARROWED {
            known.insert(key, authno);
        }
        Ok(authno)
    }

    /// The authno of this client's identity on `conn` (before narrowing).
    async fn login_authno_on(&self, conn: &Conn) -> Result<u32, SessionError> {
        let Some(uid) = self.who else {
            return Ok(conn.authno);
        };
        if let Some(a) = conn.logins.lock().get(&uid) {
            return Ok(*a);
        }
        let authno = match self.identity_of(uid) {
            Some(id) => self.login(conn, &id).await?,
            None => protocol::ANONYMOUS,
        };
        conn.logins.lock().insert(uid, authno);
        Ok(authno)
    }

    /// The identity of local user `uid` (from the resolver, asked once per uid).
    fn identity_of(&self, uid: u32) -> Option<Identity> {
        if let Some(id) = self.inner.user_ids.lock().get(&uid) {
            return id.clone();
        }
        let id = self.inner.resolver.get().and_then(|r| r(uid));
        match &id {
            Some(i) => tracing::info!(uid, user = %i.user, "identity for local user"),
            None => tracing::info!(uid, "no identity for local user: anonymous"),
        }
        self.inner.user_ids.lock().insert(uid, id.clone());
        id
    }

    /// This session acting for local user `uid`: same connection and caches, but requests
    /// carry that user's authno (see [`Client::set_identity_resolver`]).
    pub(crate) fn as_uid(&self, uid: u32) -> Client {
        Client {
            inner: self.inner.clone(),
            who: Some(uid),
            caller: self.caller.clone(),
        }
    }

    /// This client acting with the groups `g` of one local process (NARROW); None keeps the
    /// login's own groups.
    pub(crate) fn with_groups(&self, g: Option<Groups>) -> Client {
        Client {
            inner: self.inner.clone(),
            who: self.who,
            caller: g,
        }
    }

    /// How [`Client::as_uid`] finds a local user's identity (None: anonymous). At most one;
    /// later calls are ignored and return false.
    pub(crate) fn set_identity_resolver(&self, r: IdentityResolver) -> bool {
        self.inner.resolver.set(r).is_ok()
    }

    pub(super) fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests;
