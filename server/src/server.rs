//! The shared server state and the color-0 bookkeeping.
//!
//! ```text
//! READ:   conn color c: read, open record, decode, auth, verify handle, then with a cached
//!           descriptor: preadv2(RWF_NOWAIT) straight into the record buffer, seal, write
//!           (not cached: storage thread, as the user: open, pread --> c: seal, write)
//!           --cpucb, not waited for--> color 0: record the lease (skipped while c holds it)
//! others: c: decode, auth, submit to the storage threads --storage thread, as the user: the
//!           file operation--> color 0: record leases, send INVALIDATEs to other holders
//!           --cpucb--> c: seal, write
//!         (short metadata operations of the local backend: c: decode, auth, the operation as
//!           the user --cpucb--> color 0 ... as above; see `fs/local/inline.rs`)
//! ```
//! Only the short bookkeeping (lease table, connection registry) runs in color 0; sealing,
//! opening and copying file data run in connection colors or on storage threads
//! ([`crate::fs::pool`], round robin between connections).

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use libcolor::ColorCell;
use std::time::{Duration, Instant};

use libcolor::{Color, Handle};
use protocol::{
    FileHandle, HandleKey, HandshakeConfig, Invalidate, NfsStatus, Reply, RequestOp, ServerKeypair,
    ServerMessage, ServerName,
};

use crate::changes::{Changes, Epoch};
use crate::color0::{Bookkeeping, Changed, Invalidation};
use crate::fs::{ObjKey, OpCtx, Storage};
use crate::leases::{ConnId, Holder, Leases, Principal, Shares};
use crate::limits::Limits;
use crate::read::FileBudget;
use crate::settings::Settings;
use crate::startups::Dropped;
use crate::startups::Startups;
use crate::users::{Creds, Users};

/// How the dispatcher and color 0 reach a connection: implemented by the connection driver
/// (`conn.rs`), which depends on this module and not the other way round. Each method runs in
/// the connection's color.
pub(crate) trait ConnLink: Send + Sync {
    /// A reply from the dispatcher, and the request's data buffer back (empty if it had none)
    /// for the next request.
    fn complete(
        self: Arc<Self>,
        srv: &Arc<Server>,
        reserved: usize,
        reply: Reply,
        returned_buffer: Vec<u8>,
    );
    /// An INVALIDATE caused by another connection (or another instance); `ahead_of_reply`:
    /// caused by this connection's own request, whose reply follows it (it ends a lease of
    /// this connection's to make room for the reply's, or names an object the request
    /// changed unnamed), so as bounded as that reply is.
    fn send_unsolicited(
        self: Arc<Self>,
        srv: &Arc<Server>,
        msg: &ServerMessage,
        ahead_of_reply: bool,
    );
    /// Color 0 picked this starting connection to make room (see [`crate::startups`]);
    /// `in_handshake`: whether color 0 thought it was still in the handshake.
    fn drop_starting(self: Arc<Self>, srv: &Arc<Server>, in_handshake: bool);
}

/// A connection as the dispatcher holds it while one of its requests is in flight.
pub(crate) type ConnLinkRef = Arc<dyn ConnLink>;

/// Color 0's state: the bookkeeping, reaching each connection through a weak reference (a
/// closed connection is not kept alive by the registry).
pub(crate) type Color0 = Bookkeeping<Weak<dyn ConnLink>>;

/// Everything the connection colors and color 0 share.
pub(crate) struct Server {
    pub h: Handle,
    pub keypair: ServerKeypair,
    pub name: ServerName,
    pub handshake: HandshakeConfig,
    pub handle_key: HandleKey,
    /// Where the files are: the local backend behind the storage threads
    /// ([`crate::fs::pooled::Pooled`]) or the NFS backend.
    pub storage: Arc<dyn Storage>,
    pub users: Users,
    /// What anonymous requests (authno 0) run as, with `--anonymous-read`.
    pub anonymous: Creds,
    pub limits: Limits,
    /// Largest READ the server answers (its own limit, whatever the client advertises).
    pub max_io: usize,
    pub read_only: bool,
    pub anonymous_read: bool,
    pub color0: ColorCell<Color0>,
    /// Changes color 0 has seen, for the READ fast path's cached descriptors and leases.
    pub changes: Arc<Changes>,
    /// Bound on descriptors cached for READ, server-wide.
    pub file_budget: FileBudget,
    /// Requests admitted and not yet answered (for shutdown).
    pub in_flight: AtomicUsize,
    /// The lease color 0 currently grants (milliseconds; 0 when the table is full), readable
    /// from any color.
    pub lease_ms_now: AtomicU32,
    /// Set by color 0 while anonymous requests hold their whole allowance of leases: the
    /// connections' colors then grant anonymous requests lease 0 without asking.
    pub anonymous_leases_full: AtomicBool,
    pub open_conns: AtomicUsize,
    /// Connections with requests in flight (a core idles when there are fewer than workers:
    /// then one connection's replies may be sealed on several).
    pub busy_conns: AtomicUsize,
    pub draining: AtomicBool,
    /// Starting connections closed to make room for new ones (see [`crate::startups`]).
    pub startups_dropped: AtomicU64,
    /// Every client's reply cache (SESSION, SEQUENCE).
    pub clients: crate::replies::ClientRecords,
    /// Starting connections color 0 has asked to close and that have not heard it yet: they
    /// still count in `open_conns`, but the accept limit does not count them (at most
    /// `max_startups` of them), or a flood would fill it with connections already on their way
    /// out.
    pub doomed: AtomicUsize,
    /// Byte-range and `flock` locks (see [`crate::locks`] for why a mutex, not color 0).
    pub locks: parking_lot::Mutex<crate::locks::LockTable>,
    /// The other instances sharing this state directory, told of every change (`--peer`).
    pub peers: Option<Arc<crate::peers::Peers>>,
}

impl Server {
    /// Runs `f` with this server in `color` (a hop: the closure owns its own reference).
    /// Color 0 ([`Color::DEFAULT`]) is the dispatcher's: leases, the connection registry.
    pub(crate) fn in_color(
        self: &Arc<Self>,
        color: Color,
        f: impl FnOnce(&Arc<Server>) + Send + 'static,
    ) {
        let srv = self.clone();
        self.h.cpucb(color, move || f(&srv));
    }

    /// Runs `f` with this server in `color` once `delay` has passed (a timer that does not
    /// keep the server alive beyond the runtime's timers).
    pub(crate) fn in_color_after(
        self: &Arc<Self>,
        delay: Duration,
        color: Color,
        f: impl FnOnce(&Arc<Server>) + Send + 'static,
    ) {
        let srv = self.clone();
        self.h.delaycb(delay, color, move || f(&srv));
    }

    /// The server for `settings`, serving `storage` on runtime `h`.
    pub(crate) fn new(
        h: Handle,
        st: crate::state::State,
        storage: Arc<dyn Storage>,
        users: Users,
        settings: &Settings,
        peers: Option<Arc<crate::peers::Peers>>,
        disk_told: bool,
    ) -> Server {
        let mut limits = settings.limits.clone();
        limits.max_startups =
            crate::startups::pool_size(limits.max_startups, limits.max_connections);
        let (anonymous_uid, anonymous_gid) = settings.anonymous;
        let changes = Arc::new(Changes::new());
        Server {
            name: st.name(),
            handshake: HandshakeConfig {
                max_record_payload: limits.max_record,
                // Versions 17 and 18 promise that changes made behind sfsd's back are told.
                versions: protocol::handshake::versions_here()
                    .into_iter()
                    .filter(|&v| disk_told || !protocol::handshake::tells_disk_changes(v))
                    .collect(),
            },
            keypair: st.keypair,
            handle_key: st.handle_key,
            storage,
            users,
            anonymous: Creds::anonymous(anonymous_uid, anonymous_gid),
            max_io: protocol::max_io_size(limits.max_record) as usize,
            read_only: settings.read_only,
            anonymous_read: settings.anonymous_read,
            color0: ColorCell::new(
                &h,
                Color::DEFAULT,
                Bookkeeping::new(
                    Leases::new(
                        settings.lease,
                        settings.max_leases,
                        Shares::new(settings.max_leases, settings.max_leases_per_conn),
                    ),
                    Startups::new(
                        limits.max_startups,
                        crate::startups::anonymous_limit(limits.max_connections),
                    ),
                    changes.clone(),
                ),
            ),
            in_flight: AtomicUsize::new(0),
            lease_ms_now: AtomicU32::new(
                u32::try_from(settings.lease.as_millis()).unwrap_or(u32::MAX),
            ),
            anonymous_leases_full: AtomicBool::new(false),
            open_conns: AtomicUsize::new(0),
            busy_conns: AtomicUsize::new(0),
            draining: AtomicBool::new(false),
            startups_dropped: AtomicU64::new(0),
            doomed: AtomicUsize::new(0),
            // A closed connection's locks last as long as the leases it was granted.
            locks: parking_lot::Mutex::new(crate::locks::LockTable::new(settings.lease)),
            changes,
            // A record per connection, and as many again of clients whose connection broke,
            // each kept for one lease: a client back within it finds its replies.
            clients: crate::replies::ClientRecords::start(
                limits.max_connections.saturating_mul(2),
                settings.lease,
                st.replies,
            ),
            file_budget: FileBudget::new(crate::limits::CACHED_FILES),
            limits,
            peers,
            h,
        }
    }
}

/// Whether `op` may change who can open what (modes, owners, ACLs, a directory's search
/// permission, which name leads where): cached descriptors opened before it must not serve
/// after it.
fn changes_access(op: &RequestOp) -> bool {
    match op {
        RequestOp::SetAttr { .. }
        | RequestOp::Rename { .. }
        | RequestOp::Remove { .. }
        | RequestOp::Rmdir { .. } => true,
        // A POSIX ACL (or a security label) decides access as the mode does; `user.` and
        // `trusted.` data never does.
        RequestOp::SetXattr { name, .. } | RequestOp::RemoveXattr { name, .. } => {
            !(name.starts_with(b"user.") || name.starts_with(b"trusted."))
        }
        _ => false,
    }
}

/// A request in flight from its connection to storage and back: who asked, on which
/// connection, what it reserved of the connection's output, and the lease to grant.
pub(crate) struct InFlight {
    pub conn: ConnLinkRef,
    pub id: ConnId,
    pub req_id: u64,
    pub creds: Creds,
    /// Bytes of reply reserved against the connection's output limit.
    pub reserved: usize,
    /// The lease this connection is granted now (0 over its share or when the table is full).
    pub lease_ms: u32,
    /// The key of the client's reply-cache record, if the connection has one (its locks are
    /// the client's, kept across its reconnects).
    pub record: Option<u64>,
}

impl Server {
    /// Color 0: records the lease a READ reply announced (after it was queued: see
    /// [`crate::read`]); the reader is told if the lease does not hold
    /// ([`Bookkeeping::record_read_lease`]).
    pub(crate) fn record_read_lease(
        self: &Arc<Self>,
        holder: Holder,
        key: ObjKey,
        fh: FileHandle,
        lease_ms: u32,
        read_from: Epoch,
    ) {
        let revoked = self.color0.with(|c0| {
            let revoked =
                c0.record_read_lease(Instant::now(), holder, key, fh, lease_ms, read_from);
            self.publish_table(c0);
            revoked
        });
        self.invalidate(revoked);
    }

    /// Connection color: any other storage operation goes to the storage (the local backend
    /// runs a short one right here: see [`crate::fs::BlockingStorage::execute_inline`]); its
    /// completion runs in color 0, which owns the lease table, then the reply goes back to the
    /// connection's color.
    pub(crate) fn dispatch(self: &Arc<Self>, d: InFlight, mut op: RequestOp) {
        // One default mode for objects made without one, whichever backend makes them.
        crate::fs::fill_default_mode(&mut op);
        let InFlight {
            conn,
            id,
            req_id,
            creds,
            reserved,
            lease_ms,
            ..
        } = d;
        let holder = Holder {
            conn: id,
            who: Principal::of(&creds),
        };
        let ctx = OpCtx {
            creds,
            lease_ms,
            conn: id,
        };
        let srv = self.clone();
        let replying_to = conn.clone();
        let access = changes_access(&op);
        let named = crate::color0::named_by(&op);
        let completed = move |outcome: crate::fs::Outcome| {
            if access && !outcome.changed.is_empty() {
                // As soon as it is done, so no cached descriptor serves after this reply.
                srv.changes.note_access();
            }
            srv.in_color(Color::DEFAULT, move |srv| {
                let reply = (req_id, reserved, lease_ms);
                srv.finish(replying_to, holder, reply, outcome, named.as_deref())
            });
        };
        if self.storage.submit(ctx, op, Box::new(completed)).is_err() {
            self.answer_busy(conn, id, req_id, reserved);
        }
    }

    /// Color 0: leases, then invalidations to other holders (and to the changer, of what it
    /// changed without `named` naming it: [`crate::color0::named_by`]), then the reply
    /// (`req_id`, with `reserved` bytes and `lease_ms`) in the connection's color, behind them.
    fn finish(
        self: &Arc<Self>,
        conn: ConnLinkRef,
        holder: Holder,
        (req_id, reserved, lease_ms): (u64, usize, u32),
        outcome: crate::fs::Outcome,
        named: Option<&[FileHandle]>,
    ) {
        let id = holder.conn;
        let mut result = outcome.result;
        let told = self.color0.with(|c0| {
            let told = c0.request_finished(
                Instant::now(),
                holder,
                lease_ms,
                &mut result,
                &outcome.leased,
                Changed {
                    objects: &outcome.changed,
                    named,
                },
            );
            self.publish_table(c0);
            told
        });
        if let Some(peers) = &self.peers {
            for (key, _, _) in &outcome.changed {
                peers.changed(*key);
            }
        }
        self.invalidate_ahead_of(told, Some(id));
        let reply = Reply { id: req_id, result };
        let srv = self.clone();
        let buffer = outcome.returned_buffer;
        self.h.cpucb(Color(id), move || {
            conn.complete(&srv, reserved, reply, buffer)
        });
    }

    /// Color 0: another instance sharing the state directory changed `keys` (or, with
    /// `everything`, may have changed anything): see [`Bookkeeping::peer_changed`].
    pub(crate) fn peer_changed(self: &Arc<Self>, keys: &[ObjKey], everything: bool) {
        let told = self.color0.with(|c0| {
            let told = c0.peer_changed(Instant::now(), keys, everything);
            self.publish_table(c0);
            told
        });
        self.invalidate(told);
    }

    /// Color 0: a program on the server's host changed `batch`'s objects behind sfsd's back
    /// ([`crate::disk_watch`]): their leases end and their holders are told, as for another
    /// instance's change; one that may have changed access has cached open files checked
    /// again.
    pub(crate) fn changed_on_disk(self: &Arc<Self>, batch: crate::disk_watch::Batch) {
        if batch.access {
            self.changes.note_access();
        }
        self.peer_changed(&batch.keys, batch.everything);
    }

    /// Color 0: sends each INVALIDATE the bookkeeping asked for, in its connection's color
    /// (a connection gone meanwhile is skipped).
    fn invalidate(self: &Arc<Self>, told: impl IntoIterator<Item = Invalidation>) {
        self.invalidate_ahead_of(told, None);
    }

    /// [`Server::invalidate`], those to `requester` ahead of the reply to its request (queued
    /// after them in the same color): bounded by that reply, not dropped for a full output
    /// as an INVALIDATE its client did not cause is ([`ConnLink::send_unsolicited`]).
    fn invalidate_ahead_of(
        self: &Arc<Self>,
        told: impl IntoIterator<Item = Invalidation>,
        requester: Option<ConnId>,
    ) {
        for Invalidation { conn, fh, attr } in told {
            let Some(target) = self.reach(conn) else {
                continue;
            };
            let srv = self.clone();
            let ahead_of_reply = requester == Some(conn);
            self.h.cpucb(Color(conn), move || {
                let msg = ServerMessage::Invalidate(Invalidate { fh, attr });
                target.send_unsolicited(&srv, &msg, ahead_of_reply)
            });
        }
    }

    /// Color 0: has the starting connection the bookkeeping picked closed in its own color
    /// (see [`ConnLink::drop_starting`]).
    fn drop_starting(self: &Arc<Self>, victim: Option<Dropped>) {
        let Some((d, target)) = victim.and_then(|d| Some((d, self.reach(d.conn)?))) else {
            return;
        };
        self.startups_dropped.fetch_add(1, Ordering::Relaxed);
        self.doomed.fetch_add(1, Ordering::SeqCst);
        let srv = self.clone();
        self.h.cpucb(Color(d.conn), move || {
            target.drop_starting(&srv, d.in_handshake)
        });
    }

    /// Color 0: connection `id`, if it is registered and still there.
    fn reach(&self, id: ConnId) -> Option<ConnLinkRef> {
        self.color0.with(|c0| c0.link(id).and_then(Weak::upgrade))
    }

    /// Color 0: tells every color the lease granted now, and whether anonymous requests may
    /// get one.
    fn publish_table(&self, c0: &Color0) {
        self.lease_ms_now.store(c0.lease_ms(), Ordering::Relaxed);
        self.anonymous_leases_full
            .store(c0.anonymous_full(), Ordering::Relaxed);
    }

    /// The storage threads are full: answer JUKEBOX ("try later") instead of queueing more.
    fn answer_busy(self: &Arc<Self>, conn: ConnLinkRef, id: ConnId, req_id: u64, reserved: usize) {
        let srv = self.clone();
        self.h.cpucb(Color(id), move || {
            conn.complete(
                &srv,
                reserved,
                Reply {
                    id: req_id,
                    result: Err(NfsStatus::Jukebox),
                },
                Vec::new(),
            )
        });
    }

    /// Color 0: a connection opened (from `peer`, which its leases are charged to). It joins
    /// the starting connections; if they are too many, the one [`Startups::admit`] picks is
    /// closed (in its own color, which knows whether it has logged in meanwhile).
    pub(crate) fn register_conn(
        self: &Arc<Self>,
        id: ConnId,
        conn: Weak<dyn ConnLink>,
        capped: Arc<AtomicBool>,
        peer: IpAddr,
    ) {
        let victim = self.color0.with(|c0| c0.opened(id, conn, capped, peer));
        self.drop_starting(victim);
    }

    /// Color 0: connection `id`, dropped while it was thought to be in the handshake, had
    /// finished it: it comes back (see [`Startups::readmit`]), and another makes room.
    pub(crate) fn conn_readmit(self: &Arc<Self>, id: ConnId) {
        // Its drop was counted and did not happen.
        self.startups_dropped.fetch_sub(1, Ordering::Relaxed);
        let victim = self.color0.with(|c0| c0.readmit(id));
        self.drop_starting(victim);
    }

    /// Color 0: connection `id` finished its handshake (see [`Startups::handshake_done`]).
    pub(crate) fn conn_handshake_done(&self, id: ConnId) {
        self.color0.with(|c0| c0.handshake_done(id));
    }

    /// Color 0: connection `id` logged in: it is no longer a starting connection.
    pub(crate) fn conn_logged_in(&self, id: ConnId) {
        self.color0.with(|c0| c0.logged_in(id));
    }

    /// Color 0: connection `id` was granted anonymous access: it leaves the starting
    /// connections if anonymous ones have room (see [`Startups::anonymous`]).
    pub(crate) fn conn_anonymous(&self, id: ConnId) {
        self.color0.with(|c0| c0.anonymous(id));
    }

    /// Color 0: a connection closed; its leases go.
    pub(crate) fn forget_conn(&self, id: ConnId) {
        self.color0.with(|c0| {
            c0.closed(id);
            self.publish_table(c0);
        });
        // Its locks stay for the grace period ([`crate::locks`]).
        self.locks.lock().client_gone(
            crate::locks::LockClient::conn(id),
            std::time::Instant::now(),
        );
        self.storage.connection_closed(id);
    }

    /// Color 0, periodically: reap expired leases.
    pub(crate) fn start_reaper(self: &Arc<Self>, every: Duration) {
        let srv = self.clone();
        self.h.delaycb(every, Color::DEFAULT, move || {
            let reaped = srv.color0.with(|c0| {
                let reaped = c0.reap(Instant::now());
                srv.publish_table(c0);
                reaped
            });
            if reaped > 0 {
                tracing::debug!(reaped, "expired leases reaped");
            }
            let locks = srv.locks.lock().reap(std::time::Instant::now());
            if locks > 0 {
                tracing::info!(locks, "locks of connections gone past the grace released");
            }
            if !srv.h.is_stopping() {
                srv.start_reaper(every);
            }
        });
    }

    /// Whether a new connection must be refused: the connection limit is reached, not counting
    /// up to `max_startups` connections on their way out (their descriptors are the only thing
    /// they still hold, taken from the room left for files).
    pub(crate) fn at_connection_limit(&self) -> bool {
        let open = self.open_conns.load(Ordering::SeqCst);
        let doomed = self
            .doomed
            .load(Ordering::SeqCst)
            .min(self.limits.max_startups);
        open.saturating_sub(doomed) >= self.limits.max_connections
    }

    pub(crate) fn drain_pending(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}
