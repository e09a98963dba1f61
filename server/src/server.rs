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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use libcolor::ColorCell;
use std::time::{Duration, Instant};

use libcolor::{Color, Handle};
use protocol::{
    Attr, FileHandle, HandleKey, HandshakeConfig, Invalidate, NfsStatus, Reply, RequestOp,
    ServerKeypair, ServerMessage, ServerName,
};

use crate::changes::{Changes, Epoch};
use crate::conn::{self, Conn, ConnRef};
use crate::fs::{ObjKey, OpCtx, Storage};
use crate::leases::{ConnId, Holder, Leases, Principal, Shares};
use crate::limits::Limits;
use crate::read::FileBudget;
use crate::settings::Settings;
use crate::startups::{Dropped, Startups};
use crate::users::{Creds, Users};

/// A connection as color 0 knows it.
pub(crate) struct Registered {
    pub conn: Weak<ColorCell<Conn>>,
    /// Set by color 0 while the connection holds its whole share of leases; the connection's
    /// color reads it to grant lease 0 in its replies.
    pub lease_capped: Arc<AtomicBool>,
}

/// State only color 0 touches (libcolor serialises color 0's callbacks, so no lock).
pub(crate) struct Color0 {
    pub leases: Leases,
    pub conns: HashMap<ConnId, Registered>,
    /// Connections not yet logged in (see [`crate::startups`]).
    pub startups: Startups,
}

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
    pub changes: Changes,
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
    pub peers: Option<crate::peers::Peers>,
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
        peers: Option<crate::peers::Peers>,
    ) -> Server {
        let mut limits = settings.limits.clone();
        limits.max_startups =
            crate::startups::pool_size(limits.max_startups, limits.max_connections);
        let (anonymous_uid, anonymous_gid) = settings.anonymous;
        Server {
            name: st.name(),
            handshake: HandshakeConfig {
                max_record_payload: limits.max_record,
                ..HandshakeConfig::default()
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
                Color0 {
                    leases: Leases::new(
                        settings.lease,
                        settings.max_leases,
                        Shares::new(settings.max_leases, settings.max_leases_per_conn),
                    ),
                    conns: HashMap::new(),
                    startups: Startups::new(
                        limits.max_startups,
                        crate::startups::anonymous_limit(limits.max_connections),
                    ),
                },
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
            changes: Changes::new(),
            // A record per connection, and as many again of clients whose connection broke,
            // each kept for one lease: a client back within it finds its replies.
            clients: crate::replies::ClientRecords::new(
                limits.max_connections.saturating_mul(2),
                settings.lease,
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
    pub conn: ConnRef,
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
    /// [`crate::read`]). If the grant does not fit, or the object changed after the read
    /// started (a change color 0 handled before this grant found no holder to invalidate),
    /// the reader gets an INVALIDATE, which ends the announced lease.
    pub(crate) fn record_read_lease(
        self: &Arc<Self>,
        holder: Holder,
        key: ObjKey,
        fh: FileHandle,
        lease_ms: u32,
        read_from: Epoch,
    ) {
        let id = holder.conn;
        let revoke = self.color0.with(|c0| {
            if !c0.conns.contains_key(&id) {
                return false;
            }
            let granted = c0
                .leases
                .try_grant(Instant::now(), holder, key, fh, lease_ms);
            self.publish_share(c0, id);
            self.publish_table(c0);
            !granted || self.changes.object_changed_since(key, &read_from)
        });
        if revoke
            && let Some(target) = self
                .color0
                .with(|c0| c0.conns.get(&id).and_then(|r| r.conn.upgrade()))
        {
            let srv = self.clone();
            self.h.cpucb(Color(id), move || {
                conn::send_unsolicited(
                    &srv,
                    &target,
                    &ServerMessage::Invalidate(Invalidate { fh, attr: None }),
                )
            });
        }
    }

    /// Connection color: any other storage operation goes to the storage (the local backend
    /// runs a short one right here: see [`crate::fs::BlockingStorage::execute_inline`]); its
    /// completion runs in color 0, which owns the lease table, then the reply goes back to the
    /// connection's color.
    pub(crate) fn dispatch(self: &Arc<Self>, d: InFlight, op: RequestOp) {
        let mut op = match crate::lock_ops::take(op) {
            crate::lock_ops::Split::Lock(lock) => return self.dispatch_lock(d, lock),
            crate::lock_ops::Split::Other(op) => op,
        };
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
        let completed = move |outcome: crate::fs::Outcome| {
            if access && !outcome.changed.is_empty() {
                // As soon as it is done, so no cached descriptor serves after this reply.
                srv.changes.note_access();
            }
            srv.in_color(Color::DEFAULT, move |srv| {
                srv.finish(replying_to, holder, req_id, reserved, lease_ms, outcome)
            });
        };
        if self.storage.submit(ctx, op, Box::new(completed)).is_err() {
            self.answer_busy(conn, id, req_id, reserved);
        }
    }

    /// Color 0: leases, then invalidations to other holders, then the reply in the
    /// connection's color.
    fn finish(
        self: &Arc<Self>,
        conn: ConnRef,
        holder: Holder,
        req_id: u64,
        reserved: usize,
        lease_ms: u32,
        outcome: crate::fs::Outcome,
    ) {
        let id = holder.conn;
        let mut invalidations = Vec::new();
        let mut result = outcome.result;
        self.color0.with(|c0| {
            let now = Instant::now();
            // Every attribute in the reply keeps its lease only if the table and the shares of
            // this connection, its address and its user allow the grant; the others are sent
            // with lease 0.
            if let Ok(body) = &mut result {
                let handles: HashMap<ObjKey, FileHandle> = outcome.leased.iter().copied().collect();
                for attr in body.attrs_mut() {
                    let key = (attr.fsid, attr.fileid);
                    let granted = handles
                        .get(&key)
                        .is_some_and(|fh| c0.leases.try_grant(now, holder, key, *fh, lease_ms));
                    if !granted {
                        attr.lease_ms = 0;
                    }
                }
            }
            for (key, _, _) in &outcome.changed {
                self.changes.note(*key);
            }
            for (key, fh, attr) in &outcome.changed {
                let (who, _) = c0.leases.changed(now, *key, id);
                for other in who {
                    self.publish_share(c0, other);
                    if let Some(target) = c0.conns.get(&other).and_then(|r| r.conn.upgrade()) {
                        invalidations.push((other, target, *fh, *attr));
                    }
                }
            }
            self.publish_share(c0, id);
            self.publish_table(c0);
        });
        if let Some(peers) = &self.peers {
            for (key, _, _) in &outcome.changed {
                peers.changed(self, *key);
            }
        }
        for (other, target, fh, attr) in invalidations {
            let attr = attr.map(|a| Attr { lease_ms: 0, ..a });
            let srv = self.clone();
            self.h.cpucb(Color(other), move || {
                conn::send_unsolicited(
                    &srv,
                    &target,
                    &ServerMessage::Invalidate(Invalidate { fh, attr }),
                )
            });
        }
        let reply = Reply { id: req_id, result };
        let srv = self.clone();
        let buffer = outcome.returned_buffer;
        self.h.cpucb(Color(id), move || {
            conn::complete(&srv, &conn, reserved, reply, buffer)
        });
    }

    /// Color 0: another instance sharing the state directory changed `keys` (or, with
    /// `everything`, may have changed anything: its datagrams were lost). The leases this
    /// instance granted on them end, and their holders get INVALIDATE, as for a local change
    /// (without attributes: this instance has not seen them).
    pub(crate) fn peer_changed(self: &Arc<Self>, keys: &[ObjKey], everything: bool) {
        let mut invalidations = Vec::new();
        self.color0.with(|c0| {
            let mut ended = Vec::new();
            if everything {
                // Cached descriptors too: access may have changed.
                self.changes.note_access();
                self.changes.note_all();
                ended = c0.leases.changed_all(Instant::now());
            } else {
                for key in keys {
                    self.changes.note(*key);
                    // Connection 0 holds nothing (connections count from 1): every holder.
                    if let (who, Some(fh)) = c0.leases.changed(Instant::now(), *key, 0) {
                        ended.extend(who.into_iter().map(|c| (c, fh)));
                    }
                }
            }
            for (other, fh) in ended {
                self.publish_share(c0, other);
                if let Some(target) = c0.conns.get(&other).and_then(|r| r.conn.upgrade()) {
                    invalidations.push((other, target, fh));
                }
            }
            self.publish_table(c0);
        });
        for (other, target, fh) in invalidations {
            let srv = self.clone();
            self.h.cpucb(Color(other), move || {
                conn::send_unsolicited(
                    &srv,
                    &target,
                    &ServerMessage::Invalidate(Invalidate { fh, attr: None }),
                )
            });
        }
    }

    /// Color 0: tells every color the lease granted now, and whether anonymous requests may
    /// get one.
    fn publish_table(&self, c0: &Color0) {
        self.lease_ms_now
            .store(c0.leases.lease_ms(), Ordering::Relaxed);
        self.anonymous_leases_full
            .store(c0.leases.anonymous_full(), Ordering::Relaxed);
    }

    /// Color 0: tells connection `id` whether it (or its address) holds its whole share of
    /// leases.
    fn publish_share(&self, c0: &mut Color0, id: ConnId) {
        let over = c0.leases.over_share(id);
        if let Some(r) = c0.conns.get(&id) {
            r.lease_capped.store(over, Ordering::Relaxed);
        }
    }

    /// The storage threads are full: answer JUKEBOX ("try later") instead of queueing more.
    fn answer_busy(self: &Arc<Self>, conn: ConnRef, id: ConnId, req_id: u64, reserved: usize) {
        let srv = self.clone();
        self.h.cpucb(Color(id), move || {
            conn::complete(
                &srv,
                &conn,
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
        conn: &ConnRef,
        capped: Arc<AtomicBool>,
        peer: IpAddr,
    ) {
        let victim = self.color0.with(|c0| {
            c0.conns.insert(
                id,
                Registered {
                    conn: Arc::downgrade(conn),
                    lease_capped: capped,
                },
            );
            c0.leases.open_conn(id, peer);
            let victim = c0.startups.admit(id);
            Self::reach(c0, victim)
        });
        self.drop_starting(victim);
    }

    /// Color 0: the connection `d` names, if it is still there.
    fn reach(c0: &Color0, d: Option<Dropped>) -> Option<(ConnRef, Dropped)> {
        let d = d?;
        let conn = c0.conns.get(&d.conn)?.conn.upgrade()?;
        Some((conn, d))
    }

    /// Color 0: has `victim` closed in its own color (see [`conn::drop_starting`]).
    fn drop_starting(self: &Arc<Self>, victim: Option<(ConnRef, Dropped)>) {
        if let Some((conn, d)) = victim {
            self.startups_dropped.fetch_add(1, Ordering::Relaxed);
            self.doomed.fetch_add(1, Ordering::SeqCst);
            let srv = self.clone();
            self.h.cpucb(conn.color(), move || {
                conn::drop_starting(&srv, &conn, d.in_handshake)
            });
        }
    }

    /// Color 0: connection `id`, dropped while it was thought to be in the handshake, had
    /// finished it: it comes back (see [`Startups::readmit`]), and another makes room.
    pub(crate) fn conn_readmit(self: &Arc<Self>, id: ConnId) {
        // Its drop was counted and did not happen.
        self.startups_dropped.fetch_sub(1, Ordering::Relaxed);
        let victim = self.color0.with(|c0| {
            if !c0.conns.contains_key(&id) {
                return None;
            }
            let victim = c0.startups.readmit(id);
            Self::reach(c0, victim)
        });
        self.drop_starting(victim);
    }

    /// Color 0: connection `id` finished its handshake (see [`Startups::handshake_done`]).
    pub(crate) fn conn_handshake_done(&self, id: ConnId) {
        self.color0.with(|c0| c0.startups.handshake_done(id));
    }

    /// Color 0: connection `id` logged in: it is no longer a starting connection.
    pub(crate) fn conn_logged_in(&self, id: ConnId) {
        self.color0.with(|c0| c0.startups.logged_in(id));
    }

    /// Color 0: connection `id` was granted anonymous access: it leaves the starting
    /// connections if anonymous ones have room (see [`Startups::anonymous`]).
    pub(crate) fn conn_anonymous(&self, id: ConnId) {
        self.color0.with(|c0| c0.startups.anonymous(id));
    }

    /// Color 0: a connection closed; its leases go.
    pub(crate) fn forget_conn(&self, id: ConnId) {
        self.color0.with(|c0| {
            c0.conns.remove(&id);
            c0.startups.closed(id);
            c0.leases.drop_conn(id);
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
                let reaped = c0.leases.reap(Instant::now());
                let ids: Vec<ConnId> = c0.conns.keys().copied().collect();
                for id in ids {
                    srv.publish_share(c0, id);
                }
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
