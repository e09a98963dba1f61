//! Color 0's bookkeeping as a state machine: the lease table, the connection registry and
//! the starting connections, driven by inputs (a connection opened, logged in, closed; a
//! request finished with what it changed; a READ's lease to record; another instance's change;
//! a reaper tick; each with the time it happens at) and answering with what must happen as
//! plain data: the [`Invalidation`]s to send, the starting connection to drop ([`Dropped`]).
//!
//! Nothing here touches a socket, the runtime or a connection: [`crate::server`] runs it in
//! color 0 and does what it asks (an INVALIDATE sent in the target's color, a starting
//! connection closed in its own), and tests drive it directly with chosen times and orders.
//! The registry keeps, per connection, a link `L` the executor reaches the connection with
//! (opaque here) and the flag the connection reads to grant lease 0 when it holds its share.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use protocol::{Attr, FileHandle, NfsStatus, ReplyBody, RequestOp};

use crate::changes::{Changes, Epoch};
use crate::fs::ObjKey;
use crate::leases::{ConnId, Holder, Leases};
use crate::startups::{Dropped, Startups};

/// An INVALIDATE color 0 asks the executor to send: `conn`'s lease on `fh` ended. It carries
/// the object's new attributes, with lease 0, when the change returned them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Invalidation {
    pub conn: ConnId,
    pub fh: FileHandle,
    pub attr: Option<Attr>,
}

/// What a request changed.
pub(crate) struct Changed<'a> {
    /// The objects, with their new attributes where the request returned them.
    pub objects: &'a [(ObjKey, FileHandle, Option<Attr>)],
    /// For a REMOVE, RMDIR or RENAME, the handles it named ([`named_by`]): its sender is told
    /// of any other object in `objects` (the one removed, moved or replaced) as other holders
    /// are, before its reply, so its cached attributes of that object end before the reply
    /// reaches it.
    pub named: Option<&'a [FileHandle]>,
}

/// The handles a REMOVE, RMDIR, RENAME or RENAME2 names (its directories); None for any
/// other request, which changes only objects it names. Such a request also changes an object
/// it names only by a name (the one removed, moved or replaced), and its sender is told of it
/// as any other holder is ([`Bookkeeping::request_finished`]): a client of protocol version
/// 15 or later relies on that to keep its other cached attributes answering.
pub(crate) fn named_by(op: &RequestOp) -> Option<Vec<FileHandle>> {
    match op {
        RequestOp::Remove { dir, .. } | RequestOp::Rmdir { dir, .. } => Some(vec![*dir]),
        RequestOp::Rename {
            from_dir, to_dir, ..
        }
        | RequestOp::Rename2 {
            from_dir, to_dir, ..
        } => Some(vec![*from_dir, *to_dir]),
        _ => None,
    }
}

/// A connection as color 0 knows it.
struct Registered<L> {
    link: L,
    /// Set while the connection can be granted no lease ([`Leases::capped`]: its address
    /// holds its whole share and it holds none to end for room); the connection's color
    /// reads it to grant lease 0 in its replies.
    lease_capped: Arc<AtomicBool>,
    /// Whether the log has said the connection reached its share (once per connection: one
    /// hovering at its share reaches it again at every lease that ends).
    share_logged: AtomicBool,
}

/// The state only color 0 touches (libcolor serialises color 0's callbacks, so no lock).
pub(crate) struct Bookkeeping<L> {
    leases: Leases,
    conns: HashMap<ConnId, Registered<L>>,
    /// Connections not yet logged in (see [`crate::startups`]).
    startups: Startups,
    /// The change log color 0 advances (shared with the connections' READ fast path).
    changes: Arc<Changes>,
}

impl<L> Bookkeeping<L> {
    pub(crate) fn new(leases: Leases, startups: Startups, changes: Arc<Changes>) -> Self {
        Bookkeeping {
            leases,
            conns: HashMap::new(),
            startups,
            changes,
        }
    }

    /// The link of connection `id`, while it is registered.
    pub(crate) fn link(&self, id: ConnId) -> Option<&L> {
        self.conns.get(&id).map(|r| &r.link)
    }

    /// The lease granted now (milliseconds; 0 while the table is full).
    pub(crate) fn lease_ms(&self) -> u32 {
        self.leases.lease_ms()
    }

    /// Whether anonymous requests hold their whole allowance of leases.
    pub(crate) fn anonymous_full(&self) -> bool {
        self.leases.anonymous_full()
    }

    /// A connection opened (from `peer`, which its leases are charged to). It joins the
    /// starting connections; if they are too many, the one returned is to be closed, in its
    /// own color, unless it has logged in since (see [`crate::startups`]).
    pub(crate) fn opened(
        &mut self,
        id: ConnId,
        link: L,
        lease_capped: Arc<AtomicBool>,
        peer: IpAddr,
    ) -> Option<Dropped> {
        self.conns.insert(
            id,
            Registered {
                link,
                lease_capped,
                share_logged: AtomicBool::new(false),
            },
        );
        self.leases.open_conn(id, peer);
        self.startups.admit(id)
    }

    /// Connection `id`, dropped while color 0 thought it in the handshake, had finished it:
    /// it comes back, and another may have to make room.
    pub(crate) fn readmit(&mut self, id: ConnId) -> Option<Dropped> {
        if !self.conns.contains_key(&id) {
            return None;
        }
        self.startups.readmit(id)
    }

    /// Connection `id` finished its handshake.
    pub(crate) fn handshake_done(&mut self, id: ConnId) {
        self.startups.handshake_done(id);
    }

    /// Connection `id` logged in: it is no longer a starting connection.
    pub(crate) fn logged_in(&mut self, id: ConnId) {
        self.startups.logged_in(id);
    }

    /// Connection `id` was granted anonymous access (it leaves the starting connections if
    /// anonymous ones have room).
    pub(crate) fn anonymous(&mut self, id: ConnId) {
        self.startups.anonymous(id);
    }

    /// Connection `id` closed: it is forgotten, with its leases; nothing is sent to it again.
    pub(crate) fn closed(&mut self, id: ConnId) {
        self.conns.remove(&id);
        self.startups.closed(id);
        self.leases.drop_conn(id);
    }

    /// A request of `holder` finished at `now`. Every attribute in `result` keeps its lease
    /// only if the grant fits (the others go with lease 0); `leased` names the handles of the
    /// objects the reply carries attributes of. Every other holder of an object the request
    /// `changed` whose lease still runs is told. The changer is not, except of an object it
    /// changed without naming it ([`Changed::named`]).
    pub(crate) fn request_finished(
        &mut self,
        now: Instant,
        holder: Holder,
        lease_ms: u32,
        result: &mut Result<ReplyBody, NfsStatus>,
        leased: &[(ObjKey, FileHandle)],
        changed: Changed<'_>,
    ) -> Vec<Invalidation> {
        let Changed { objects, named } = changed;
        if let Ok(body) = result {
            // A listing carries many attributes: look their handles up, not through the list.
            let handles: HashMap<ObjKey, FileHandle> = leased.iter().copied().collect();
            for attr in body.attrs_mut() {
                let key = (attr.fsid, attr.fileid);
                let granted = handles
                    .get(&key)
                    .is_some_and(|fh| self.leases.try_grant(now, holder, key, *fh, lease_ms));
                if !granted {
                    attr.lease_ms = 0;
                }
            }
        }
        // Leases the grants ended to make room: their holders (this connection) are told.
        let mut told = self.ended_for_room();
        for (key, _, _) in objects {
            self.changes.note(*key);
        }
        for (key, fh, attr) in objects {
            let unnamed = named.is_some_and(|named| !named.contains(fh));
            // Connection 0 is never a holder: every holder's lease ends.
            let kept_by = if unnamed { 0 } else { holder.conn };
            let (ended, _) = self.leases.changed(now, *key, kept_by);
            for other in ended {
                self.publish_share(other);
                if self.conns.contains_key(&other) {
                    told.push(Invalidation {
                        conn: other,
                        fh: *fh,
                        attr: attr.map(|a| Attr { lease_ms: 0, ..a }),
                    });
                }
            }
        }
        self.publish_share(holder.conn);
        told
    }

    /// The lease a READ reply announced, recorded after the reply was queued (see
    /// [`crate::read`]). If the grant does not fit, or the object changed after the read
    /// started at `read_from` (a change handled before this grant found no holder to tell),
    /// the reader is told, which ends the announced lease; so is the holder of any lease the
    /// grant ended to make room.
    pub(crate) fn record_read_lease(
        &mut self,
        now: Instant,
        holder: Holder,
        key: ObjKey,
        fh: FileHandle,
        lease_ms: u32,
        read_from: Epoch,
    ) -> Vec<Invalidation> {
        let id = holder.conn;
        if !self.conns.contains_key(&id) {
            return Vec::new();
        }
        let granted = self.leases.try_grant(now, holder, key, fh, lease_ms);
        let mut told = self.ended_for_room();
        self.publish_share(id);
        let stale = self.changes.object_changed_since(key, &read_from);
        if !granted || stale {
            told.push(Invalidation {
                conn: id,
                fh,
                attr: None,
            });
        }
        told
    }

    /// The INVALIDATEs for the leases the last grants ended to make room
    /// ([`crate::leases::Leases::take_ended`]), to connections still here.
    fn ended_for_room(&mut self) -> Vec<Invalidation> {
        let ended = self.leases.take_ended();
        ended
            .into_iter()
            .filter(|(conn, _)| self.conns.contains_key(conn))
            .map(|(conn, fh)| Invalidation {
                conn,
                fh,
                attr: None,
            })
            .collect()
    }

    /// Another instance sharing the state directory changed `keys` (or, with `everything`,
    /// may have changed anything: its datagrams were lost). The leases on them end and their
    /// live holders are told, without attributes (this instance has not seen them).
    pub(crate) fn peer_changed(
        &mut self,
        now: Instant,
        keys: &[ObjKey],
        everything: bool,
    ) -> Vec<Invalidation> {
        let mut ended = Vec::new();
        if everything {
            // Cached descriptors too: access may have changed.
            self.changes.note_access();
            self.changes.note_all();
            ended = self.leases.changed_all(now);
        } else {
            for key in keys {
                self.changes.note(*key);
                // Connection 0 holds nothing (connections count from 1): every holder.
                if let (who, Some(fh)) = self.leases.changed(now, *key, 0) {
                    ended.extend(who.into_iter().map(|c| (c, fh)));
                }
            }
        }
        let mut told = Vec::new();
        for (other, fh) in ended {
            self.publish_share(other);
            if self.conns.contains_key(&other) {
                told.push(Invalidation {
                    conn: other,
                    fh,
                    attr: None,
                });
            }
        }
        told
    }

    /// The reaper's tick at `now`: leases expired by then go (nobody is told: the holders'
    /// leases ran out on their own); returns how many.
    pub(crate) fn reap(&mut self, now: Instant) -> usize {
        let reaped = self.leases.reap(now);
        for &id in self.conns.keys() {
            self.publish_share(id);
        }
        reaped
    }

    /// Tells connection `id` whether it can be granted no lease ([`Leases::capped`]).
    fn publish_share(&self, id: ConnId) {
        if let Some(r) = self.conns.get(&id) {
            let capped = self.leases.capped(id);
            r.lease_capped.store(capped, Ordering::Relaxed);
            if capped && !r.share_logged.swap(true, Ordering::Relaxed) {
                tracing::info!(
                    conn = id,
                    "connection holds no lease while its address holds its whole share \
                     (four times --max-leases-per-conn, at most half of --max-leases): its \
                     replies carry lease 0 until some of the address's leases end, and its \
                     client caches nothing (every use of an object is a round trip)"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use protocol::{Attr, ReplyBody};

    use super::*;
    use crate::leases::{Principal, Shares};

    const LEASE_MS: u32 = 1000;
    const OBJ: ObjKey = (7, 42);
    const A: ConnId = 1;
    const B: ConnId = 2;
    const C: ConnId = 3;

    /// Color 0 with the connections `ids` open and logged in (the link is the id itself), a
    /// table of 64 leases, `per_conn` per connection, room for `startups` starting ones.
    fn color0(ids: &[ConnId], per_conn: usize, startups: usize) -> Bookkeeping<ConnId> {
        let leases = Leases::new(
            Duration::from_millis(LEASE_MS as u64),
            64,
            Shares::new(64, per_conn),
        );
        let mut c0 = Bookkeeping::new(leases, Startups::new(startups, 4), Arc::new(Changes::new()));
        for &id in ids {
            assert_eq!(c0.opened(id, id, flag(), addr(id)), None);
            c0.logged_in(id);
        }
        c0
    }

    fn flag() -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(false))
    }

    /// Each connection from its own address (so the per-address share does not interfere).
    fn addr(id: ConnId) -> IpAddr {
        IpAddr::from([10, 0, 0, id as u8])
    }

    fn fh(n: u8) -> FileHandle {
        FileHandle::from_bytes([n; 48])
    }

    fn holder(conn: ConnId) -> Holder {
        Holder {
            conn,
            who: Principal::User(1000 + conn),
        }
    }

    /// The attributes of `OBJ` as a GETATTR reply carries them.
    fn getattr_reply() -> Result<ReplyBody, NfsStatus> {
        let attr = Attr {
            fsid: OBJ.0,
            fileid: OBJ.1,
            ..Attr::test_file(10, LEASE_MS)
        };
        Ok(ReplyBody::GetAttr { attr })
    }

    /// `conn` reads `OBJ`'s attributes at `now`: returns the lease its reply carries.
    fn getattr(c0: &mut Bookkeeping<ConnId>, now: Instant, conn: ConnId) -> u32 {
        let mut result = getattr_reply();
        let effects = c0.request_finished(
            now,
            holder(conn),
            LEASE_MS,
            &mut result,
            &[(OBJ, fh(1))],
            Changed {
                objects: &[],
                named: None,
            },
        );
        assert!(effects.is_empty(), "a read-only request told {effects:?}");
        match result {
            Ok(ReplyBody::GetAttr { attr }) => attr.lease_ms,
            other => panic!("{other:?}"),
        }
    }

    /// `conn` changes `OBJ` at `now`.
    fn write(c0: &mut Bookkeeping<ConnId>, now: Instant, conn: ConnId) -> Vec<Invalidation> {
        let attr = Attr::test_file(20, LEASE_MS);
        let mut result = Ok(ReplyBody::Null);
        c0.request_finished(
            now,
            holder(conn),
            LEASE_MS,
            &mut result,
            &[],
            Changed {
                objects: &[(OBJ, fh(1), Some(attr))],
                named: None,
            },
        )
    }

    fn told(effects: &[Invalidation]) -> Vec<ConnId> {
        let mut ids: Vec<ConnId> = effects.iter().map(|i| i.conn).collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn a_change_tells_the_other_live_holders_and_not_the_changer() {
        let t0 = Instant::now();
        let mut c0 = color0(&[A, B, C], 8, 16);
        // C's lease is granted first and has run out when B writes; A's still runs.
        assert_eq!(getattr(&mut c0, t0, C), LEASE_MS);
        let later = t0 + Duration::from_millis(LEASE_MS as u64 / 2 + 1);
        assert_eq!(getattr(&mut c0, later, A), LEASE_MS);
        assert_eq!(getattr(&mut c0, later, B), LEASE_MS);
        let at = t0 + Duration::from_millis(LEASE_MS as u64 + 1);
        let effects = write(&mut c0, at, B);
        assert_eq!(told(&effects), vec![A]);
        // The INVALIDATE carries the new attributes with lease 0 (they must not be cached).
        assert_eq!(effects[0].fh, fh(1));
        let attr = effects[0].attr.map(|a| (a.size, a.lease_ms));
        assert_eq!(attr, Some((20, 0)));
        // A's lease ended with the INVALIDATE, the changer kept its own: C's change tells B.
        assert_eq!(told(&write(&mut c0, at, C)), vec![B]);
    }

    #[test]
    fn a_remove_or_rename_tells_its_sender_too_of_what_it_changed_without_naming_it() {
        let now = Instant::now();
        let mut c0 = color0(&[A, B], 8, 16);
        assert_eq!(getattr(&mut c0, now, A), LEASE_MS);
        assert_eq!(getattr(&mut c0, now, B), LEASE_MS);
        // A renames something over OBJ (fh 1) in directory `dir`, which the request names.
        let dir = fh(2);
        let op = RequestOp::Rename {
            from_dir: dir,
            from_name: b"new".to_vec(),
            to_dir: dir,
            to_name: b"obj".to_vec(),
        };
        let named = named_by(&op).expect("a rename names its directories");
        let mut result = Ok(ReplyBody::Null);
        let effects = c0.request_finished(
            now,
            holder(A),
            LEASE_MS,
            &mut result,
            &[],
            Changed {
                objects: &[(OBJ, fh(1), None), ((7, 1), dir, None)],
                named: Some(&named[..]),
            },
        );
        // OBJ: both holders, the sender among them; the directory it named: nobody.
        assert_eq!(told(&effects), vec![A, B]);
        assert!(effects.iter().all(|i| i.fh == fh(1)));
        // Any other request tells only the other holders, as before.
        assert_eq!(named_by(&RequestOp::GetAttr { fh: dir }), None);
        assert_eq!(getattr(&mut c0, now, A), LEASE_MS);
        assert_eq!(getattr(&mut c0, now, B), LEASE_MS);
        assert_eq!(told(&write(&mut c0, now, A)), vec![B]);
    }

    #[test]
    fn a_closed_connection_is_forgotten_and_never_told() {
        let now = Instant::now();
        let mut c0 = color0(&[A, B], 8, 16);
        assert_eq!(getattr(&mut c0, now, A), LEASE_MS);
        c0.closed(A);
        assert_eq!(c0.link(A), None);
        assert!(write(&mut c0, now, B).is_empty());
        assert!(c0.peer_changed(now, &[OBJ], false).is_empty());
        // Nor does a READ lease recorded after its close bring it back.
        let epoch = c0.changes.now();
        assert_eq!(
            c0.record_read_lease(now, holder(A), OBJ, fh(1), LEASE_MS, epoch),
            Vec::new()
        );
        assert!(c0.peer_changed(now, &[OBJ], true).is_empty());
    }

    #[test]
    fn a_read_lease_recorded_after_a_conflicting_change_is_revoked() {
        let now = Instant::now();
        let mut c0 = color0(&[A, B], 8, 16);
        // A's READ started (epoch taken), B's WRITE was handled by color 0, then A's lease
        // is recorded: B's change found no holder to tell, so A is told now.
        let read_from = c0.changes.now();
        assert!(write(&mut c0, now, B).is_empty());
        let revoked = c0.record_read_lease(now, holder(A), OBJ, fh(1), LEASE_MS, read_from);
        assert_eq!(
            revoked,
            vec![Invalidation {
                conn: A,
                fh: fh(1),
                attr: None
            }]
        );
        // A READ that started after the change keeps its lease, and a later change tells it.
        let read_from = c0.changes.now();
        assert_eq!(
            c0.record_read_lease(now, holder(A), OBJ, fh(1), LEASE_MS, read_from),
            Vec::new()
        );
        assert_eq!(told(&write(&mut c0, now, B)), vec![A]);
    }

    /// A read lease over the connection's share ends its oldest lease, which it is told of;
    /// one that does not fit at all (the table is full) is revoked.
    #[test]
    fn a_read_lease_over_the_share_ends_the_oldest_and_one_that_does_not_fit_is_revoked() {
        let now = Instant::now();
        let mut c0 = color0(&[A], 1, 16);
        let read_from = c0.changes.now();
        assert_eq!(
            c0.record_read_lease(now, holder(A), (1, 1), fh(1), LEASE_MS, read_from),
            Vec::new()
        );
        assert_eq!(
            c0.record_read_lease(now, holder(A), (1, 2), fh(2), LEASE_MS, read_from),
            vec![Invalidation {
                conn: A,
                fh: fh(1),
                attr: None
            }],
            "over its share of one: its oldest lease ends"
        );
        let leases = Leases::new(
            Duration::from_millis(LEASE_MS as u64),
            1,
            Shares::new(1, 16),
        );
        let mut c0 = Bookkeeping::new(leases, Startups::new(16, 4), Arc::new(Changes::new()));
        for id in [A, B] {
            assert_eq!(c0.opened(id, id, flag(), addr(id)), None);
            c0.logged_in(id);
        }
        let read_from = c0.changes.now();
        assert!(
            c0.record_read_lease(now, holder(A), (1, 1), fh(1), LEASE_MS, read_from)
                .is_empty()
        );
        assert_eq!(
            c0.record_read_lease(now, holder(B), (1, 2), fh(2), LEASE_MS, read_from),
            vec![Invalidation {
                conn: B,
                fh: fh(2),
                attr: None
            }],
            "the table is full: the announced lease must end"
        );
    }

    /// A connection over its address's share that holds no lease to end for room is capped:
    /// the flag its color reads is set (its replies carry lease 0), and lifted when the
    /// address is below its share again. One at its own share is never capped.
    #[test]
    fn the_lease_cap_is_published_to_the_connection_and_lifted() {
        let now = Instant::now();
        // A share of one a connection, so four an address.
        let mut c0 = color0(&[], 1, 16);
        let one_addr = addr(A);
        let flags: Vec<_> = (1..=5).map(|_| flag()).collect();
        for (id, capped) in (1..=5).zip(&flags) {
            assert_eq!(c0.opened(id, id, capped.clone(), one_addr), None);
            c0.logged_in(id);
        }
        let getattr_of = |c0: &mut Bookkeeping<ConnId>, id: ConnId, obj: u8| {
            let mut result = Ok(ReplyBody::GetAttr {
                attr: Attr {
                    fsid: 9,
                    fileid: u64::from(obj),
                    ..Attr::test_file(1, LEASE_MS)
                },
            });
            let told = c0.request_finished(
                now,
                holder(id),
                LEASE_MS,
                &mut result,
                &[((9, u64::from(obj)), fh(obj))],
                Changed {
                    objects: &[],
                    named: None,
                },
            );
            match result {
                Ok(ReplyBody::GetAttr { attr }) => (attr.lease_ms, told),
                other => panic!("{other:?}"),
            }
        };
        for id in 1..=4 {
            assert_eq!(getattr_of(&mut c0, id, id as u8).0, LEASE_MS);
            assert!(!flags[id as usize - 1].load(Ordering::Relaxed));
        }
        // Connection 1 at its share: its own oldest lease makes room, and it is told.
        let (lease, told) = getattr_of(&mut c0, 1, 11);
        assert_eq!(lease, LEASE_MS);
        assert_eq!(
            told,
            vec![Invalidation {
                conn: 1,
                fh: fh(1),
                attr: None
            }]
        );
        assert!(
            !flags[0].load(Ordering::Relaxed),
            "never capped at its own share"
        );
        // Connection 5 holds nothing, and its address holds its share: capped.
        let (lease, told) = getattr_of(&mut c0, 5, 5);
        assert_eq!((lease, told), (0, Vec::new()));
        assert!(flags[4].load(Ordering::Relaxed), "the cap is published");
        // Connection 4 closes: the address is below its share, and 5 is granted again.
        c0.closed(4);
        assert_eq!(getattr_of(&mut c0, 5, 5).0, LEASE_MS);
        assert!(!flags[4].load(Ordering::Relaxed), "the cap is lifted");
    }

    #[test]
    fn the_reaper_drops_a_lease_at_its_expiry_and_not_before() {
        let t0 = Instant::now();
        let mut c0 = color0(&[A, B], 8, 16);
        assert_eq!(getattr(&mut c0, t0, A), LEASE_MS);
        let expiry = t0 + Duration::from_millis(LEASE_MS as u64);
        assert_eq!(c0.reap(expiry - Duration::from_millis(1)), 0);
        // Still held: a change tells A.
        assert_eq!(told(&write(&mut c0, t0, B)), vec![A]);
        assert_eq!(getattr(&mut c0, t0, A), LEASE_MS);
        assert_eq!(c0.reap(expiry), 1);
        assert!(
            write(&mut c0, t0, B).is_empty(),
            "a reaped lease is not told"
        );
    }

    #[test]
    fn a_full_pool_of_starting_connections_drops_the_oldest() {
        let mut c0 = color0(&[], 8, 2);
        assert_eq!(c0.opened(A, A, flag(), addr(A)), None);
        assert_eq!(c0.opened(B, B, flag(), addr(B)), None);
        // A logged in meanwhile? No: A is the oldest in the handshake and makes room for C.
        assert_eq!(
            c0.opened(C, C, flag(), addr(C)),
            Some(Dropped {
                conn: A,
                in_handshake: true
            })
        );
        // A logged-in connection is never picked.
        c0.logged_in(B);
        assert_eq!(c0.opened(4, 4, flag(), addr(4)), None);
        // A had finished its handshake after all: it comes back, and C makes room.
        assert_eq!(
            c0.readmit(A),
            Some(Dropped {
                conn: C,
                in_handshake: true
            })
        );
        // A closed connection is not readmitted.
        c0.closed(C);
        assert_eq!(c0.readmit(C), None);
    }

    #[test]
    fn another_instances_change_tells_every_live_holder() {
        let now = Instant::now();
        let mut c0 = color0(&[A, B], 8, 16);
        assert_eq!(getattr(&mut c0, now, A), LEASE_MS);
        assert_eq!(getattr(&mut c0, now, B), LEASE_MS);
        let effects = c0.peer_changed(now, &[OBJ], false);
        assert_eq!(told(&effects), vec![A, B]);
        assert!(c0.peer_changed(now, &[OBJ], false).is_empty());
        // Lost datagrams: everything may have changed, and a READ from before is not trusted.
        let read_from = c0.changes.now();
        assert_eq!(getattr(&mut c0, now, A), LEASE_MS);
        assert_eq!(told(&c0.peer_changed(now, &[], true)), vec![A]);
        assert!(
            !c0.record_read_lease(now, holder(B), OBJ, fh(1), LEASE_MS, read_from)
                .is_empty()
        );
    }
}
