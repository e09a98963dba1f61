//! Attribute leases: who may cache which object's attributes until when.
//!
//! Lives in color 0 (the dispatcher's state). A lease of 0 tells the client not to cache, so
//! correctness never depends on memory, and every bound below only turns leases into 0:
//!
//! - the whole table holds at most `max` (beyond it every reply carries lease 0);
//! - each connection at most `per_conn` (one client listing huge directories cannot crowd out
//!   the others), each peer address at most `per_addr` (nor can one host opening many
//!   connections), each user at most `per_user` (nor one user on many connections or hosts);
//! - anonymous requests, all connections together, at most `anonymous` ([`Shares::new`]: a
//!   small part of the table), so a crowd of anonymous connections, which cost nothing to
//!   open, cannot leave logged-in users with lease 0.
//!
//! A lease is charged, when granted, to its connection, the connection's address and whoever
//! the request ran as; its release gives back exactly those. Expired entries are reaped by a
//! timer. Every count is kept incrementally: no operation walks the whole table except the
//! periodic reap.
//!
//! A connection that holds its whole share (or whose address does) makes room by ending its
//! own lease granted or renewed longest ago, and is told (INVALIDATE, [`Leases::take_ended`]),
//! instead of getting lease 0: a client walking more objects than its share (`find`, `du`,
//! `git status` in a large tree) keeps caching what it uses now, and lets go of what it used
//! first. Lease 0 for every object past the share made each later use of them a round trip:
//! a `find` of 20,000 directories took 15 s, every step a LOOKUP and a GETATTR.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use protocol::FileHandle;

pub(crate) use crate::ids::ConnId;
use crate::ids::ObjKey;
use crate::users::Creds;

/// Whom a lease is charged to besides its connection and address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Principal {
    /// Anonymous requests, whatever their connection: one allowance for all.
    Anonymous,
    /// A logged-in user, by uid (the same user on several connections shares one allowance).
    User(u32),
}

impl Principal {
    /// Whom a request running as `creds` charges.
    pub(crate) fn of(creds: &Creds) -> Principal {
        if creds.anonymous {
            Principal::Anonymous
        } else {
            Principal::User(creds.uid)
        }
    }
}

/// Who asks for a lease: a connection, on behalf of a principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Holder {
    pub conn: ConnId,
    pub who: Principal,
}

/// How many leases each kind of holder may have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shares {
    pub per_conn: usize,
    pub per_addr: usize,
    pub per_user: usize,
    pub anonymous: usize,
}

impl Shares {
    /// The shares for a table of `max` entries and `per_conn` per connection (the two
    /// settings; the others follow from them, so there is nothing more to tune): an address or
    /// a user may hold four connections' worth, but never more than half the table; anonymous
    /// requests, all together, two connections' worth, never more than a quarter of the table.
    /// However many anonymous connections there are, logged-in users thus keep three quarters
    /// of the table, and on the anonymous crowd's own address whatever of that address's share
    /// the crowd cannot take; no one address or user can take more than half of it.
    pub(crate) fn new(max: usize, per_conn: usize) -> Shares {
        let per_conn = per_conn.max(1);
        Shares {
            per_conn,
            per_addr: per_conn.saturating_mul(4).min(max / 2).max(1),
            per_user: per_conn.saturating_mul(4).min(max / 2).max(1),
            anonymous: per_conn.saturating_mul(2).min(max / 4).max(1),
        }
    }
}

/// One holder's lease on an object.
#[derive(Debug, Clone, Copy)]
struct Held {
    expiry: Instant,
    who: Principal,
    /// When it was granted or last renewed (a count): its place in its connection's
    /// [`ConnLeases::order`].
    seq: u64,
}

#[derive(Debug)]
struct Entry {
    fh: FileHandle,
    holders: HashMap<ConnId, Held>,
}

/// A connection's address and the objects it holds leases on.
#[derive(Debug)]
struct ConnLeases {
    addr: IpAddr,
    keys: HashSet<ObjKey>,
    /// Its leases, oldest grant or renewal first; a place whose lease ended, or was renewed
    /// since (its `seq` differs), is skipped. Kept at most about twice as long as `keys`.
    order: VecDeque<(ObjKey, u64)>,
}

impl ConnLeases {
    /// Drops the places of leases ended or renewed since, once they outnumber the leases.
    fn compact(&mut self, objects: &HashMap<ObjKey, Entry>, conn: ConnId) {
        if self.order.len() > 2 * self.keys.len() + 64 {
            self.order
                .retain(|&(key, seq)| held_at(objects, key, conn, seq));
        }
    }
}

/// Whether `conn`'s lease on `key` is the one granted or renewed at `seq`.
fn held_at(objects: &HashMap<ObjKey, Entry>, key: ObjKey, conn: ConnId, seq: u64) -> bool {
    objects
        .get(&key)
        .and_then(|e| e.holders.get(&conn))
        .is_some_and(|held| held.seq == seq)
}

#[derive(Debug)]
pub(crate) struct Leases {
    duration: Duration,
    max: usize,
    shares: Shares,
    len: usize,
    objects: HashMap<ObjKey, Entry>,
    conns: HashMap<ConnId, ConnLeases>,
    by_addr: HashMap<IpAddr, usize>,
    by_user: HashMap<u32, usize>,
    anonymous: usize,
    /// Grants and renewals so far (each lease's `seq`).
    seq: u64,
    /// Leases ended to make room, still running then: their holders are to be told
    /// ([`Leases::take_ended`]).
    ended: Vec<(ConnId, FileHandle)>,
}

impl Leases {
    pub(crate) fn new(duration: Duration, max: usize, shares: Shares) -> Leases {
        Leases {
            duration,
            max,
            shares,
            len: 0,
            objects: HashMap::new(),
            conns: HashMap::new(),
            by_addr: HashMap::new(),
            by_user: HashMap::new(),
            anonymous: 0,
            seq: 0,
            ended: Vec::new(),
        }
    }

    /// The lease to grant now, in milliseconds (0 when the table is full).
    pub(crate) fn lease_ms(&self) -> u32 {
        if self.len >= self.max {
            0
        } else {
            u32::try_from(self.duration.as_millis()).unwrap_or(u32::MAX)
        }
    }

    /// Connection `conn`, from `addr`, may hold leases (until [`Leases::drop_conn`]).
    pub(crate) fn open_conn(&mut self, conn: ConnId, addr: IpAddr) {
        self.conns.entry(conn).or_insert_with(|| ConnLeases {
            addr,
            keys: HashSet::new(),
            order: VecDeque::new(),
        });
    }

    /// Whether `conn` can be granted no new lease whoever it asks for: it, or its address,
    /// holds its whole share (its replies then carry lease 0).
    pub(crate) fn over_share(&self, conn: ConnId) -> bool {
        let Some(c) = self.conns.get(&conn) else {
            return true;
        };
        c.keys.len() >= self.shares.per_conn
            || self.by_addr.get(&c.addr).copied().unwrap_or(0) >= self.shares.per_addr
    }

    /// Whether `conn` can be granted no new lease at all: it is over its share
    /// ([`Leases::over_share`]) and holds none of its own to end for room.
    pub(crate) fn capped(&self, conn: ConnId) -> bool {
        self.over_share(conn) && self.conns.get(&conn).is_none_or(|c| c.keys.is_empty())
    }

    /// The leases ended to make room since the last call, each with the handle to name in
    /// the INVALIDATE its holder is sent.
    pub(crate) fn take_ended(&mut self) -> Vec<(ConnId, FileHandle)> {
        std::mem::take(&mut self.ended)
    }

    /// Whether anonymous requests hold their whole allowance (theirs then carry lease 0).
    pub(crate) fn anonymous_full(&self) -> bool {
        self.anonymous >= self.shares.anonymous
    }

    #[cfg(test)]
    fn held_by(&self, conn: ConnId) -> usize {
        self.conns.get(&conn).map_or(0, |c| c.keys.len())
    }

    /// Whether `who` holds its whole share.
    fn principal_full(&self, who: Principal) -> bool {
        match who {
            Principal::Anonymous => self.anonymous_full(),
            Principal::User(uid) => {
                self.by_user.get(&uid).copied().unwrap_or(0) >= self.shares.per_user
            }
        }
    }

    /// Grants `h` a lease of `lease_ms` from `now` on `key` if the table and every share it is
    /// charged to allow it (renewing a lease its connection holds always does); returns whether
    /// it did. Where only the connection's share, or its address's, is full, the connection's
    /// oldest lease ends to make room ([`Leases::take_ended`] names it). A reply must carry
    /// lease 0 for every object this refuses. Time is an input (here and in
    /// [`Leases::changed`] and [`Leases::reap`]) so tests drive it.
    pub(crate) fn try_grant(
        &mut self,
        now: Instant,
        h: Holder,
        key: ObjKey,
        fh: FileHandle,
        lease_ms: u32,
    ) -> bool {
        if lease_ms == 0 || !self.conns.contains_key(&h.conn) {
            return false;
        }
        let expiry = now + Duration::from_millis(lease_ms as u64);
        self.seq += 1;
        let seq = self.seq;
        if let Some(held) = self
            .objects
            .get_mut(&key)
            .and_then(|e| e.holders.get_mut(&h.conn))
        {
            // A renewal: no new entry, charged as before; it moves to the back of the order.
            held.expiry = held.expiry.max(expiry);
            held.seq = seq;
            if let Some(c) = self.conns.get_mut(&h.conn) {
                c.order.push_back((key, seq));
                c.compact(&self.objects, h.conn);
            }
            return true;
        }
        if self.len >= self.max || self.principal_full(h.who) {
            return false;
        }
        // Room from this connection's own oldest lease: it and its address then hold one
        // less than their share (neither is ever granted past it). One that holds none gets
        // none.
        if self.over_share(h.conn) && !self.end_oldest(now, h.conn) {
            return false;
        }
        let e = self.objects.entry(key).or_insert_with(|| Entry {
            fh,
            holders: HashMap::new(),
        });
        e.holders.insert(
            h.conn,
            Held {
                expiry,
                who: h.who,
                seq,
            },
        );
        let Some(c) = self.conns.get_mut(&h.conn) else {
            return false;
        };
        c.keys.insert(key);
        c.order.push_back((key, seq));
        c.compact(&self.objects, h.conn);
        self.len += 1;
        *self.by_addr.entry(c.addr).or_default() += 1;
        match h.who {
            Principal::Anonymous => self.anonymous += 1,
            Principal::User(uid) => *self.by_user.entry(uid).or_default() += 1,
        }
        true
    }

    /// Ends `conn`'s lease granted or renewed longest ago, to make room for a new one; its
    /// holder is to be told if it was still running at `now`. False if it holds none.
    fn end_oldest(&mut self, now: Instant, conn: ConnId) -> bool {
        loop {
            let Some((key, seq)) = self.conns.get_mut(&conn).and_then(|c| c.order.pop_front())
            else {
                return false;
            };
            if !held_at(&self.objects, key, conn, seq) {
                continue;
            }
            let Some(e) = self.objects.get_mut(&key) else {
                continue;
            };
            let (fh, held) = (e.fh, e.holders.remove(&conn));
            if e.holders.is_empty() {
                self.objects.remove(&key);
            }
            if let Some(held) = held {
                self.release(conn, key, held);
                if held.expiry > now {
                    self.ended.push((conn, fh));
                }
            }
            return true;
        }
    }

    /// Gives back what `conn`'s lease on `key` (already removed from the object) was charged.
    fn release(&mut self, conn: ConnId, key: ObjKey, held: Held) {
        self.len -= 1;
        let addr = self.conns.get_mut(&conn).map(|c| {
            c.keys.remove(&key);
            c.addr
        });
        if let Some(addr) = addr {
            decrement(&mut self.by_addr, addr);
        }
        match held.who {
            Principal::Anonymous => self.anonymous -= 1,
            Principal::User(uid) => decrement(&mut self.by_user, uid),
        }
    }

    /// `key` changed at `now` because of `by`: returns the other holders whose leases were still
    /// running (they end) and the handle to name in the INVALIDATE.
    pub(crate) fn changed(
        &mut self,
        now: Instant,
        key: ObjKey,
        by: ConnId,
    ) -> (Vec<ConnId>, Option<FileHandle>) {
        let Some(e) = self.objects.get_mut(&key) else {
            return (Vec::new(), None);
        };
        let fh = e.fh;
        let mut ended = Vec::new();
        e.holders.retain(|&c, held| {
            if c == by {
                return true;
            }
            ended.push((c, *held));
            false
        });
        if e.holders.is_empty() {
            self.objects.remove(&key);
        }
        let mut notify = Vec::new();
        for (c, held) in ended {
            self.release(c, key, held);
            if held.expiry > now {
                notify.push(c);
            }
        }
        (notify, Some(fh))
    }

    /// Every object may have changed: every lease ends. Returns the live holders and the
    /// handles to name in their INVALIDATEs.
    pub(crate) fn changed_all(&mut self, now: Instant) -> Vec<(ConnId, FileHandle)> {
        let keys: Vec<ObjKey> = self.objects.keys().copied().collect();
        let mut ended = Vec::new();
        for key in keys {
            // Connection 0 is never a holder (connections count from 1).
            if let (who, Some(fh)) = self.changed(now, key, 0) {
                ended.extend(who.into_iter().map(|c| (c, fh)));
            }
        }
        ended
    }

    /// Drops everything a closed connection held (only its own entries are visited) and
    /// forgets it.
    pub(crate) fn drop_conn(&mut self, conn: ConnId) {
        let Some(keys) = self.conns.get(&conn).map(|c| c.keys.clone()) else {
            return;
        };
        for key in keys {
            let Some(e) = self.objects.get_mut(&key) else {
                continue;
            };
            let held = e.holders.remove(&conn);
            if e.holders.is_empty() {
                self.objects.remove(&key);
            }
            if let Some(held) = held {
                self.release(conn, key, held);
            }
        }
        self.conns.remove(&conn);
    }

    /// Drops the leases expired at `now`; returns how many.
    pub(crate) fn reap(&mut self, now: Instant) -> usize {
        let mut expired = Vec::new();
        self.objects.retain(|&key, e| {
            e.holders.retain(|&c, held| {
                let keep = held.expiry > now;
                if !keep {
                    expired.push((c, key, *held));
                }
                keep
            });
            !e.holders.is_empty()
        });
        for &(c, key, held) in &expired {
            self.release(c, key, held);
        }
        expired.len()
    }

    #[cfg(test)]
    fn count(&self) -> usize {
        self.len
    }
}

/// One less in `counts[k]`, forgetting `k` at zero (so idle addresses and users cost nothing).
fn decrement<K: std::hash::Hash + Eq>(counts: &mut HashMap<K, usize>, k: K) {
    if let Some(n) = counts.get_mut(&k) {
        *n -= 1;
        if *n == 0 {
            counts.remove(&k);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Principal = Principal::User(1000);
    const B: Principal = Principal::User(1001);
    const ANON: Principal = Principal::Anonymous;

    fn fh() -> FileHandle {
        FileHandle::from_bytes([0; 48])
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn h(conn: ConnId, who: Principal) -> Holder {
        Holder { conn, who }
    }

    /// Shares no test reaches unless it means to.
    fn roomy(per_conn: usize) -> Shares {
        Shares {
            per_conn,
            per_addr: 1 << 20,
            per_user: 1 << 20,
            anonymous: 1 << 20,
        }
    }

    /// Every count is back to zero and every map empty: nothing leaked.
    fn assert_empty(l: &Leases) {
        assert_eq!(l.count(), 0);
        assert!(l.objects.is_empty(), "{:?}", l.objects);
        assert!(l.by_addr.is_empty(), "{:?}", l.by_addr);
        assert!(l.by_user.is_empty(), "{:?}", l.by_user);
        assert_eq!(l.anonymous, 0);
        assert!(l.conns.values().all(|c| c.keys.is_empty()));
    }

    #[test]
    fn grant_change_reap_bound() {
        let t0 = Instant::now();
        let mut l = Leases::new(Duration::from_secs(60), 2, roomy(10));
        for c in 1..=3 {
            l.open_conn(c, ip(c as u8));
        }
        assert!(l.try_grant(t0, h(1, A), (1, 1), fh(), l.lease_ms()));
        assert!(l.try_grant(t0, h(2, A), (1, 1), fh(), 60_000));
        assert_eq!(l.lease_ms(), 0, "full table grants no lease");
        assert!(
            !l.try_grant(t0, h(3, A), (1, 1), fh(), 60_000),
            "full: refused"
        );
        assert!(
            l.try_grant(t0, h(2, B), (1, 1), fh(), 60_000),
            "a renewal is not a new entry"
        );
        let (who, _) = l.changed(t0, (1, 1), 1);
        assert_eq!(who, vec![2]);
        assert_eq!(l.count(), 1);
        assert_eq!(l.held_by(2), 0);
        l.drop_conn(1);
        assert_eq!(l.count(), 0);
        assert!(l.try_grant(t0, h(3, A), (2, 2), fh(), 1));
        assert_eq!(l.reap(t0), 0, "1 ms is still running");
        assert_eq!(l.reap(t0 + Duration::from_millis(1)), 1);
        assert_eq!((l.count(), l.held_by(3)), (0, 0));
        assert_empty(&l);
        assert!(
            !l.try_grant(t0, h(1, A), (3, 3), fh(), 60_000),
            "a closed connection gets none"
        );
    }

    /// A change INVALIDATEs only holders whose lease was still running when it happened; a
    /// lease that ran out is dropped without a word (its holder asks again anyway), and
    /// the reaper drops it at its expiry, not a moment before.
    #[test]
    fn a_change_tells_only_holders_whose_lease_runs() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut l = Leases::new(Duration::from_secs(60), 100, roomy(10));
        for c in 1..=3 {
            l.open_conn(c, ip(c as u8));
        }
        assert!(l.try_grant(t0, h(1, A), (1, 1), fh(), 100));
        assert!(l.try_grant(t0, h(2, B), (1, 1), fh(), 300));
        assert!(l.try_grant(t0, h(3, A), (2, 2), fh(), 100));
        // At 200 ms connection 1's lease has run out, connection 2's runs.
        let (told, named) = l.changed(t0 + ms(200), (1, 1), 3);
        assert_eq!((told, named), (vec![2], Some(fh())));
        assert_eq!(l.count(), 1, "both leases on (1, 1) ended");
        // A renewal keeps the later expiry.
        assert!(l.try_grant(t0 + ms(50), h(3, A), (2, 2), fh(), 20));
        assert_eq!(l.reap(t0 + ms(99)), 0);
        assert_eq!(l.reap(t0 + ms(100)), 1);
        assert_empty(&l);
    }

    /// Handles that tell objects apart (the table keys on `ObjKey`; the INVALIDATE names these).
    fn fh_of(i: u64) -> FileHandle {
        let mut b = [0u8; 48];
        b[..8].copy_from_slice(&i.to_le_bytes());
        FileHandle::from_bytes(b)
    }

    /// A connection at its share ends its own lease granted or renewed longest ago for each
    /// new one, and is told of it; no other connection is touched.
    #[test]
    fn share_per_connection() {
        let t0 = Instant::now();
        let mut l = Leases::new(Duration::from_secs(60), 1000, roomy(3));
        l.open_conn(1, ip(1));
        l.open_conn(2, ip(2));
        for i in 0..3 {
            assert!(l.try_grant(t0, h(1, A), (1, i), fh_of(i), l.lease_ms()));
        }
        assert!(l.try_grant(t0, h(2, A), (1, 0), fh_of(0), 60_000));
        assert!(l.over_share(1), "connection 1 holds its whole share");
        assert!(!l.capped(1), "it has leases of its own to end for room");
        assert!(l.take_ended().is_empty());
        // Object 0 renewed: object 1 is now the oldest.
        assert!(l.try_grant(t0, h(1, A), (1, 0), fh_of(0), 60_000));
        assert!(l.try_grant(t0, h(1, A), (1, 9), fh_of(9), 60_000));
        assert_eq!(
            l.take_ended(),
            vec![(1, fh_of(1))],
            "the oldest ended, told"
        );
        assert_eq!(l.held_by(1), 3, "still its share, no more");
        assert!(l.try_grant(t0, h(1, A), (1, 8), fh_of(8), 60_000));
        assert_eq!(l.take_ended(), vec![(1, fh_of(2))]);
        assert!(l.try_grant(t0, h(1, A), (1, 7), fh_of(7), 60_000));
        assert_eq!(l.take_ended(), vec![(1, fh_of(0))]);
        assert_eq!(l.held_by(2), 1, "others are unaffected");
        let (told, _) = l.changed(t0, (1, 0), 3);
        assert_eq!(told, vec![2], "connection 1 no longer holds object 0");
        // A lease that ran out ends for room without a word.
        let later = t0 + Duration::from_secs(61);
        assert!(l.try_grant(later, h(1, A), (1, 6), fh_of(6), 60_000));
        assert!(l.take_ended().is_empty(), "its lease had run out");
        assert_eq!(l.count(), 3);
        l.drop_conn(1);
        l.drop_conn(2);
        assert_empty(&l);
    }

    /// Renewals and ends leave the order queue bounded by about twice the leases held, also
    /// where no lease is ended for room (which would pop the places left behind).
    #[test]
    fn the_order_of_a_connections_leases_stays_bounded() {
        let t0 = Instant::now();
        let mut l = Leases::new(Duration::from_secs(60), 1000, roomy(100));
        l.open_conn(1, ip(1));
        for round in 0..1000u64 {
            let i = round % 8;
            assert!(l.try_grant(t0, h(1, A), (1, i), fh_of(i), 60_000));
            assert!(l.try_grant(t0, h(1, A), (1, i), fh_of(i), 60_000));
            if round % 3 == 0 {
                l.changed(t0, (1, i), 2);
            }
        }
        assert!(
            l.take_ended().is_empty(),
            "below its share: nothing ended for room"
        );
        let (held, queued) = (l.held_by(1), l.conns[&1].order.len());
        assert!(held <= 8);
        assert!(
            queued <= 2 * held + 65,
            "{queued} places queued for {held} leases"
        );
        // Past the share, the oldest still goes first.
        let mut l = Leases::new(Duration::from_secs(60), 1000, roomy(8));
        l.open_conn(1, ip(1));
        for i in 0..100u64 {
            assert!(l.try_grant(t0, h(1, A), (1, i), fh_of(i), 60_000));
        }
        let ended: Vec<FileHandle> = l.take_ended().into_iter().map(|(_, fh)| fh).collect();
        assert_eq!(ended, (0..92).map(fh_of).collect::<Vec<_>>());
    }

    /// Where the address's share is full, a connection from it makes room with its own
    /// oldest lease; one that holds none gets none.
    #[test]
    fn share_per_address() {
        let t0 = Instant::now();
        let shares = Shares {
            per_addr: 4,
            ..roomy(3)
        };
        let mut l = Leases::new(Duration::from_secs(60), 1000, shares);
        // Four connections from one address, one from another.
        for c in 1..=4 {
            l.open_conn(c, ip(1));
        }
        l.open_conn(5, ip(2));
        assert!(l.try_grant(t0, h(1, A), (1, 0), fh_of(0), 60_000));
        assert!(l.try_grant(t0, h(1, B), (1, 1), fh_of(1), 60_000));
        assert!(l.try_grant(t0, h(2, A), (1, 2), fh_of(2), 60_000));
        assert!(l.try_grant(t0, h(3, ANON), (1, 3), fh_of(3), 60_000));
        assert!(l.over_share(2), "the address holds its whole share");
        assert!(l.capped(4), "connection 4 holds nothing to end");
        assert!(
            !l.try_grant(t0, h(4, B), (1, 4), fh_of(4), 60_000),
            "refused"
        );
        assert!(l.take_ended().is_empty());
        assert!(l.try_grant(t0, h(2, B), (1, 4), fh_of(4), 60_000));
        assert_eq!(
            l.take_ended(),
            vec![(2, fh_of(2))],
            "its own, not another's"
        );
        assert!(
            l.try_grant(t0, h(1, A), (1, 0), fh_of(0), 60_000),
            "renewals still are"
        );
        assert!(l.take_ended().is_empty());
        assert!(
            l.try_grant(t0, h(5, A), (1, 4), fh_of(4), 60_000),
            "another address"
        );
        l.drop_conn(3);
        assert!(
            !l.over_share(4),
            "a connection closed: below the share again"
        );
        assert!(l.try_grant(t0, h(4, B), (1, 5), fh_of(5), 60_000));
        for c in 1..=5 {
            l.drop_conn(c);
        }
        assert_empty(&l);
        assert!(l.conns.is_empty());
    }

    #[test]
    fn share_per_user() {
        let t0 = Instant::now();
        let shares = Shares {
            per_user: 2,
            ..roomy(10)
        };
        let mut l = Leases::new(Duration::from_secs(60), 1000, shares);
        l.open_conn(1, ip(1));
        l.open_conn(2, ip(2));
        // One user on two connections from two addresses: one allowance.
        assert!(l.try_grant(t0, h(1, A), (1, 0), fh(), 60_000));
        assert!(l.try_grant(t0, h(2, A), (1, 1), fh(), 60_000));
        assert!(
            !l.try_grant(t0, h(2, A), (1, 2), fh(), 60_000),
            "user A is full"
        );
        assert!(!l.over_share(2), "the connection itself is not");
        assert!(
            l.try_grant(t0, h(2, B), (1, 2), fh(), 60_000),
            "user B is not"
        );
        let (ended, _) = l.changed(t0, (1, 0), 2);
        assert_eq!(ended, vec![1]);
        assert!(
            l.try_grant(t0, h(2, A), (1, 3), fh(), 60_000),
            "A below its share"
        );
        l.drop_conn(1);
        l.drop_conn(2);
        assert_empty(&l);
    }

    #[test]
    fn anonymous_share_all_connections_together() {
        let t0 = Instant::now();
        let shares = Shares {
            anonymous: 5,
            ..roomy(3)
        };
        let mut l = Leases::new(Duration::from_secs(60), 1000, shares);
        for c in 1..=10 {
            l.open_conn(c, ip(c as u8));
        }
        let mut granted = 0;
        for c in 1..=9 {
            for i in 0..3 {
                granted += usize::from(l.try_grant(t0, h(c, ANON), (1, i), fh(), 60_000));
            }
        }
        assert_eq!(granted, 5, "nine anonymous connections share five leases");
        assert!(l.anonymous_full());
        assert!(
            l.try_grant(t0, h(10, A), (1, 0), fh(), 60_000),
            "a user is unaffected"
        );
        assert!(!l.try_grant(t0, h(10, ANON), (1, 1), fh(), 60_000));
        assert_eq!(l.reap(t0), 0);
        l.drop_conn(1);
        assert!(
            !l.anonymous_full(),
            "a connection closed: its leases came back"
        );
        for c in 1..=10 {
            l.drop_conn(c);
        }
        assert_empty(&l);
    }

    #[test]
    fn derived_shares() {
        let s = Shares::new(100_000, 4096);
        assert_eq!((s.per_conn, s.per_addr, s.per_user), (4096, 16384, 16384));
        assert_eq!(s.anonymous, 8192);
        let s = Shares::new(600, 100);
        assert_eq!((s.per_addr, s.per_user, s.anonymous), (300, 300, 150));
        let s = Shares::new(0, 0);
        assert_eq!(
            (s.per_conn, s.per_addr, s.per_user, s.anonymous),
            (1, 1, 1, 1)
        );
    }

    #[test]
    fn many_grants_and_drops_leave_nothing() {
        let t0 = Instant::now();
        let shares = Shares {
            per_conn: 7,
            per_addr: 15,
            per_user: 11,
            anonymous: 9,
        };
        let mut l = Leases::new(Duration::from_secs(60), 200, shares);
        let whos = [A, B, ANON, Principal::User(7)];
        for round in 0..200u32 {
            let conns: Vec<ConnId> = (0..8).map(|i| round * 8 + i + 1).collect();
            for &c in &conns {
                l.open_conn(c, ip((c % 3) as u8));
            }
            for (n, &c) in conns.iter().enumerate() {
                for i in 0..12u64 {
                    let who = whos[(n + i as usize) % whos.len()];
                    let ms = if i % 4 == 0 { 1 } else { 60_000 };
                    l.try_grant(t0, h(c, who), (1, i + u64::from(round % 5)), fh(), ms);
                }
            }
            // Some leases end by changes, some by expiry, the rest with their connections.
            l.changed(t0, (1, u64::from(round % 7)), conns[0]);
            if round % 10 == 0 {
                // The 1 ms leases have run out.
                l.reap(t0 + Duration::from_millis(2));
            }
            let by_addr: usize = l.by_addr.values().sum();
            let by_who: usize = l.by_user.values().sum::<usize>() + l.anonymous;
            assert_eq!((by_addr, by_who), (l.count(), l.count()), "round {round}");
            assert!(l.anonymous <= 9 && l.by_user.values().all(|&n| n <= 11));
            assert!(l.by_addr.values().all(|&n| n <= 15));
            for &c in &conns {
                assert!(l.held_by(c) <= 7);
                l.drop_conn(c);
            }
            assert_empty(&l);
            assert!(l.conns.is_empty());
        }
    }
}
