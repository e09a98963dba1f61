//! The lock table: POSIX byte-range locks and `flock` whole-file locks that every client of
//! this server sees (LOCK, UNLOCK, TESTLOCK; docs/PROTOCOL.md, "Locks").
//!
//! - **Backend independent.** Locks are kept here, in memory, by object ([`ObjKey`] of the
//!   verified handle), not in the storage: the local backend and the NFS backend (NFSv3 has no
//!   locks) share them. So they are not visible to processes on the server machine that lock
//!   the exported files directly, and they do not survive a restart of sfsd.
//! - **Holders.** A lock belongs to a [`Holder`]: the client ([`LockClient`], today the
//!   connection), the server uid of the authno that took it (so one user of a multi-user mount
//!   cannot release another's), and the client's owner number. Conflict: overlapping ranges of
//!   different holders where one is a write lock. A holder's new lock replaces, merges with
//!   and splits its own overlapping ranges (POSIX `fcntl`), and `flock` locks are a space of
//!   their own (a `flock` lock never conflicts with an `fcntl` lock, as on Linux).
//! - **Bounds.** Every range is charged to its client: at most [`MAX_PER_CLIENT`] each and
//!   [`MAX_TOTAL`] in all; a LOCK or an UNLOCK that would need more is refused with `NOLCK`
//!   before anything changes (an UNLOCK of everything never needs more).
//! - **Lifetime.** A closed connection's locks stay for the grace period (the server's lease)
//!   and are then released by [`LockTable::reap`] (run with the lease reaper, and before every
//!   operation): a client that vanishes loses them after that time, never holds them forever,
//!   and a client that comes back as a new connection within the grace can take them over
//!   ([`LockTable::rebind`], once clients have an identity that survives reconnects).
//! - **Where it lives.** A `parking_lot::Mutex` in [`crate::server::Server`], not color 0's
//!   state: a lock request first checks the caller's access through the backend (on a storage
//!   thread, or in the NFS backend's completion), and the table is then updated right there
//!   in a few microseconds of linear scans; going through color 0 would add a hop to every
//!   lock for nothing color 0 knows.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use protocol::{LockConflict, LockKind, NfsStatus};

use crate::fs::ObjKey;

/// Ranges one client may hold (each lock range, of any file, counts one).
pub(crate) const MAX_PER_CLIENT: usize = 4096;
/// Ranges all clients together may hold.
pub(crate) const MAX_TOTAL: usize = 65536;
/// Ranges one server user may hold, on all its clients together: four clients' worth, a
/// quarter of the table, so one user opening many connections cannot take every lock from
/// the others.
pub(crate) const MAX_PER_USER: usize = 4 * MAX_PER_CLIENT;

/// Who a lock is charged to and kept for: the client's reply-cache record when its connection
/// has one (SESSION: the same on each of the client's connections, so its locks survive a
/// reconnect), else the connection. Either way they outlive the last connection by the grace
/// period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct LockClient(pub u64);

impl LockClient {
    /// A connection without a reply-cache record.
    pub(crate) fn conn(id: crate::leases::ConnId) -> LockClient {
        LockClient(u64::from(id))
    }

    /// The client of reply-cache record `key` (numbers above every connection id's).
    pub(crate) fn record(key: u64) -> LockClient {
        LockClient((1 << 32) + key)
    }

    /// Who a request on connection `id`, bound to record `record` if any, locks as.
    pub(crate) fn of(id: crate::leases::ConnId, record: Option<u64>) -> LockClient {
        record.map_or(LockClient::conn(id), LockClient::record)
    }
}

/// The holder of a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Holder {
    pub client: LockClient,
    /// Server uid of the requesting authno.
    pub uid: u32,
    /// The client's owner number.
    pub owner: u64,
}

/// A byte range, both ends included (`end == u64::MAX`: to the end of the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    /// The wire's (start, len), len 0 meaning to the end of the file; `INVAL` past 2^64.
    pub(crate) fn from_wire(start: u64, len: u64) -> Result<Range, NfsStatus> {
        let end = match len {
            0 => u64::MAX,
            n => start.checked_add(n - 1).ok_or(NfsStatus::Inval)?,
        };
        Ok(Range { start, end })
    }

    /// The whole file (`flock`).
    pub(crate) const ALL: Range = Range {
        start: 0,
        end: u64::MAX,
    };

    /// Wire length (0 = to the end of the file).
    fn len(self) -> u64 {
        if self.end == u64::MAX {
            0
        } else {
            self.end - self.start + 1
        }
    }

    fn overlaps(self, o: Range) -> bool {
        self.start <= o.end && o.start <= self.end
    }

    /// Overlapping or touching (same-kind ranges that touch merge).
    fn touches(self, o: Range) -> bool {
        self.start <= o.end.saturating_add(1) && o.start <= self.end.saturating_add(1)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    holder: Holder,
    range: Range,
    kind: LockKind,
}

/// The locks of one file.
#[derive(Debug, Default)]
struct FileLocks {
    posix: Vec<Entry>,
    flock: Vec<Entry>,
}

impl FileLocks {
    fn space(&mut self, flock: bool) -> &mut Vec<Entry> {
        if flock {
            &mut self.flock
        } else {
            &mut self.posix
        }
    }
}

#[derive(Debug, Default)]
struct ClientState {
    ranges: usize,
    /// Its connection closed at this time: its locks go at `gone + grace`.
    gone: Option<Instant>,
}

/// Why a LOCK was not granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Another holder's lock is in the way.
    Denied(LockConflict),
    /// No room for the ranges it needs.
    NoLck,
}

impl From<Refused> for NfsStatus {
    fn from(r: Refused) -> NfsStatus {
        match r {
            Refused::Denied(_) => NfsStatus::Denied,
            Refused::NoLck => NfsStatus::NoLck,
        }
    }
}

/// Every lock of every file.
#[derive(Debug)]
pub(crate) struct LockTable {
    files: HashMap<ObjKey, FileLocks>,
    clients: HashMap<LockClient, ClientState>,
    /// Ranges held per server uid.
    users: HashMap<u32, usize>,
    total: usize,
    max_per_client: usize,
    max_per_user: usize,
    max_total: usize,
    grace: Duration,
}

fn conflict_of(e: &Entry) -> LockConflict {
    LockConflict {
        kind: e.kind,
        start: e.range.start,
        len: e.range.len(),
        holder: e.holder.client.0,
    }
}

fn conflicts(e: &Entry, holder: Holder, kind: LockKind, r: Range) -> bool {
    e.holder != holder
        && e.range.overlaps(r)
        && (kind == LockKind::Write || e.kind == LockKind::Write)
}

/// `e` with `r` cut out: zero, one or two pieces.
fn cut(e: Entry, r: Range) -> impl Iterator<Item = Entry> {
    let before = (e.range.start < r.start).then(|| Entry {
        range: Range {
            start: e.range.start,
            end: r.start - 1,
        },
        ..e
    });
    let after = (e.range.end > r.end).then(|| Entry {
        range: Range {
            start: r.end + 1,
            end: e.range.end,
        },
        ..e
    });
    before.into_iter().chain(after)
}

impl LockTable {
    /// An empty table whose closed connections keep their locks for `grace`.
    pub(crate) fn new(grace: Duration) -> LockTable {
        LockTable::with_bounds(grace, MAX_PER_CLIENT, MAX_PER_USER, MAX_TOTAL)
    }

    fn with_bounds(
        grace: Duration,
        max_per_client: usize,
        max_per_user: usize,
        max_total: usize,
    ) -> LockTable {
        LockTable {
            files: HashMap::new(),
            clients: HashMap::new(),
            users: HashMap::new(),
            total: 0,
            max_per_client,
            max_per_user,
            max_total,
            grace,
        }
    }

    /// Adds `more` (or takes `less`) ranges to `uid`'s count.
    fn charge_user(&mut self, uid: u32, more: usize, less: usize) {
        let n = self.users.entry(uid).or_default();
        *n = (*n + more).saturating_sub(less);
        if *n == 0 {
            self.users.remove(&uid);
        }
    }

    /// Ranges held in all.
    #[cfg(test)]
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// The first lock of another holder that a `kind` lock on `r` would conflict with.
    pub(crate) fn test(
        &self,
        key: ObjKey,
        holder: Holder,
        kind: LockKind,
        r: Range,
        flock: bool,
    ) -> Option<LockConflict> {
        let f = self.files.get(&key)?;
        let space = if flock { &f.flock } else { &f.posix };
        space
            .iter()
            .find(|e| conflicts(e, holder, kind, r))
            .map(conflict_of)
    }

    /// Takes a `kind` lock on `r` for `holder` (POSIX semantics; `flock`: the whole file), or
    /// says why not; nothing changes when it is refused.
    pub(crate) fn lock(
        &mut self,
        key: ObjKey,
        holder: Holder,
        kind: LockKind,
        r: Range,
        flock: bool,
    ) -> Result<(), Refused> {
        let r = if flock { Range::ALL } else { r };
        if let Some(c) = self.test(key, holder, kind, r, flock) {
            if flock {
                // Linux converts a flock lock by dropping the old one first, even when the new
                // one is then refused: two holders upgrading shared locks do not wait for
                // each other forever.
                self.unlock(key, holder, r, true)?;
            }
            return Err(Refused::Denied(c));
        }
        let old = self
            .files
            .get(&key)
            .map_or(&[][..], |f| if flock { &f.flock[..] } else { &f.posix[..] });
        // The holder's own ranges after this lock: same-kind ranges touching it merge into
        // it, other-kind ones lose what it covers.
        let mut merged = Entry {
            holder,
            range: r,
            kind,
        };
        let mut kept = Vec::new();
        let mut mine = 0usize;
        for e in old.iter().filter(|e| e.holder == holder) {
            mine += 1;
            if e.kind == kind && e.range.touches(merged.range) {
                merged.range.start = merged.range.start.min(e.range.start);
                merged.range.end = merged.range.end.max(e.range.end);
            } else if e.range.overlaps(r) {
                kept.extend(cut(*e, r));
            } else {
                kept.push(*e);
            }
        }
        // A same-kind range may touch the merged one only after it grew: merge again.
        let mut changed = true;
        while changed {
            changed = false;
            kept.retain(|e| {
                if e.kind == kind && e.range.touches(merged.range) {
                    merged.range.start = merged.range.start.min(e.range.start);
                    merged.range.end = merged.range.end.max(e.range.end);
                    changed = true;
                    false
                } else {
                    true
                }
            });
        }
        kept.push(merged);
        self.replace(key, holder, flock, mine, kept)
    }

    /// Releases `holder`'s locks on `r` (`flock`: its whole-file lock), splitting a range it
    /// covers part of. Refused (`NOLCK`) only when a split needs a range beyond the bounds.
    pub(crate) fn unlock(
        &mut self,
        key: ObjKey,
        holder: Holder,
        r: Range,
        flock: bool,
    ) -> Result<(), Refused> {
        let r = if flock { Range::ALL } else { r };
        let Some(f) = self.files.get(&key) else {
            return Ok(());
        };
        let old = if flock { &f.flock } else { &f.posix };
        let mut kept = Vec::new();
        let mut mine = 0usize;
        for e in old.iter().filter(|e| e.holder == holder) {
            mine += 1;
            if e.range.overlaps(r) {
                kept.extend(cut(*e, r));
            } else {
                kept.push(*e);
            }
        }
        if mine == 0 {
            return Ok(());
        }
        self.replace(key, holder, flock, mine, kept)
    }

    /// Sets `holder`'s ranges in one space of `key` to `new` (it had `mine`), within bounds.
    fn replace(
        &mut self,
        key: ObjKey,
        holder: Holder,
        flock: bool,
        mine: usize,
        new: Vec<Entry>,
    ) -> Result<(), Refused> {
        let user = self.users.get(&holder.uid).copied().unwrap_or(0);
        let client = self.clients.entry(holder.client).or_default();
        if new.len() > mine {
            let more = new.len() - mine;
            if client.ranges + more > self.max_per_client
                || user + more > self.max_per_user
                || self.total + more > self.max_total
            {
                if client.ranges == 0 {
                    self.clients.remove(&holder.client);
                }
                return Err(Refused::NoLck);
            }
        }
        client.ranges = client.ranges + new.len() - mine;
        self.total = self.total + new.len() - mine;
        if client.ranges == 0 {
            self.clients.remove(&holder.client);
        }
        self.charge_user(holder.uid, new.len(), mine);
        let f = self.files.entry(key).or_default();
        let space = f.space(flock);
        space.retain(|e| e.holder != holder);
        space.extend(new);
        if f.posix.is_empty() && f.flock.is_empty() {
            self.files.remove(&key);
        }
        Ok(())
    }

    /// `client`'s connection closed at `now`: its locks go once the grace has passed.
    pub(crate) fn client_gone(&mut self, client: LockClient, now: Instant) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.gone = Some(now);
        }
    }

    /// `client` is connected again (a new connection bound its record): its locks stay.
    pub(crate) fn client_back(&mut self, client: LockClient) {
        if let Some(c) = self.clients.get_mut(&client) {
            c.gone = None;
        }
    }

    /// Moves `from`'s locks (a closed connection's, within its grace) to `to`, which keeps
    /// them as its own.
    #[allow(dead_code)] // Called once clients have an identity that survives reconnects.
    pub(crate) fn rebind(&mut self, from: LockClient, to: LockClient) {
        let Some(moved) = self.clients.remove(&from) else {
            return;
        };
        for f in self.files.values_mut() {
            for e in f.posix.iter_mut().chain(f.flock.iter_mut()) {
                if e.holder.client == from {
                    e.holder.client = to;
                }
            }
        }
        let c = self.clients.entry(to).or_default();
        c.ranges += moved.ranges;
        // The one taking them over is connected.
        c.gone = None;
    }

    /// Releases the locks of every client gone for longer than the grace; returns how many
    /// ranges went.
    pub(crate) fn reap(&mut self, now: Instant) -> usize {
        let grace = self.grace;
        let expired: Vec<LockClient> = self
            .clients
            .iter()
            .filter(|(_, c)| {
                c.gone
                    .is_some_and(|t| now.saturating_duration_since(t) >= grace)
            })
            .map(|(k, _)| *k)
            .collect();
        if expired.is_empty() {
            return 0;
        }
        let before = self.total;
        for k in &expired {
            if let Some(c) = self.clients.remove(k) {
                self.total -= c.ranges;
            }
        }
        let mut released: HashMap<u32, usize> = HashMap::new();
        self.files.retain(|_, f| {
            for space in [&mut f.posix, &mut f.flock] {
                space.retain(|e| {
                    let gone = expired.contains(&e.holder.client);
                    if gone {
                        *released.entry(e.holder.uid).or_default() += 1;
                    }
                    !gone
                });
            }
            !(f.posix.is_empty() && f.flock.is_empty())
        });
        for (uid, n) in released {
            self.charge_user(uid, 0, n);
        }
        before - self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    const K: ObjKey = (1, 2);

    fn h(client: u32, owner: u64) -> Holder {
        Holder {
            client: LockClient::conn(client),
            uid: 1000,
            owner,
        }
    }

    fn r(start: u64, end: u64) -> Range {
        Range { start, end }
    }

    fn ranges(t: &LockTable, holder: Holder, flock: bool) -> Vec<(u64, u64, LockKind)> {
        let mut v: Vec<_> = t
            .files
            .get(&K)
            .map(|f| {
                if flock {
                    f.flock.clone()
                } else {
                    f.posix.clone()
                }
            })
            .unwrap_or_default()
            .into_iter()
            .filter(|e| e.holder == holder)
            .map(|e| (e.range.start, e.range.end, e.kind))
            .collect();
        v.sort_by_key(|x| x.0);
        v
    }

    use LockKind::{Read as R, Write as W};

    #[test]
    fn own_ranges_merge_split_upgrade_and_downgrade() {
        let mut t = LockTable::new(Duration::from_secs(1));
        let a = h(1, 1);
        t.lock(K, a, R, r(0, 9), false).unwrap();
        t.lock(K, a, R, r(10, 19), false).unwrap();
        assert_eq!(
            ranges(&t, a, false),
            vec![(0, 19, R)],
            "touching ranges merge"
        );
        t.lock(K, a, W, r(5, 9), false).unwrap();
        assert_eq!(
            ranges(&t, a, false),
            vec![(0, 4, R), (5, 9, W), (10, 19, R)],
            "an upgrade of the middle splits"
        );
        t.lock(K, a, R, r(5, 9), false).unwrap();
        assert_eq!(
            ranges(&t, a, false),
            vec![(0, 19, R)],
            "downgrade merges back"
        );
        t.unlock(K, a, r(8, 11), false).unwrap();
        assert_eq!(ranges(&t, a, false), vec![(0, 7, R), (12, 19, R)]);
        assert_eq!(t.total(), 2);
        t.unlock(K, a, Range::ALL, false).unwrap();
        assert_eq!(t.total(), 0);
        assert!(t.files.is_empty() && t.clients.is_empty());
    }

    #[test]
    fn conflicts_are_between_holders_with_a_writer() {
        let mut t = LockTable::new(Duration::from_secs(1));
        let (a, b) = (h(1, 1), h(2, 1));
        t.lock(K, a, R, r(0, 99), false).unwrap();
        t.lock(K, b, R, r(50, 149), false).unwrap();
        let c = t.lock(K, b, W, r(90, 95), false).unwrap_err();
        assert_eq!(
            c,
            Refused::Denied(LockConflict {
                kind: R,
                start: 0,
                len: 100,
                holder: 1
            })
        );
        assert!(t.lock(K, b, W, r(100, 120), false).is_ok());
        // Same client, another owner (another process) conflicts too.
        assert!(t.lock(K, h(1, 2), W, r(0, 0), false).is_err());
        // Another uid on the same connection is another holder.
        let other_user = Holder { uid: 7, ..a };
        assert!(t.lock(K, other_user, W, r(0, 0), false).is_err());
        assert!(t.test(K, a, W, r(0, 10), false).is_none());
        assert!(t.test(K, a, W, r(0, 60), false).is_some());
    }

    #[test]
    fn flock_and_posix_locks_do_not_meet() {
        let mut t = LockTable::new(Duration::from_secs(1));
        let (a, b) = (h(1, 1), h(2, 1));
        t.lock(K, a, W, Range::ALL, true).unwrap();
        t.lock(K, b, W, Range::ALL, false).unwrap();
        assert!(t.lock(K, b, R, r(3, 4), true).is_err());
        // flock converts in place: a downgrade lets readers in.
        t.lock(K, a, R, r(7, 7), true).unwrap();
        assert_eq!(ranges(&t, a, true), vec![(0, u64::MAX, R)]);
        t.lock(K, b, R, Range::ALL, true).unwrap();
        // A refused conversion drops the old lock, as Linux's does.
        let c = h(3, 1);
        t.lock(K, c, R, Range::ALL, true).unwrap();
        assert!(t.lock(K, c, W, Range::ALL, true).is_err());
        assert_eq!(ranges(&t, c, true), vec![]);
        t.unlock(K, a, Range::ALL, true).unwrap();
        assert_eq!(ranges(&t, b, false), vec![(0, u64::MAX, W)]);
    }

    #[test]
    fn bounds_refuse_before_changing_anything() {
        let mut t = LockTable::with_bounds(Duration::from_secs(1), 3, 100, 4);
        let (a, b) = (h(1, 1), h(2, 1));
        for i in 0..3 {
            t.lock(K, a, W, r(i * 10, i * 10), false).unwrap();
        }
        assert_eq!(t.lock(K, a, W, r(100, 100), false), Err(Refused::NoLck));
        // Extending a range costs nothing; splitting one by an unlock needs one more.
        t.lock(K, a, W, r(1, 1), false).unwrap();
        assert_eq!(t.unlock(K, a, r(10, 10), false), Ok(()));
        assert_eq!(t.unlock(K, a, r(0, 0), false), Ok(()));
        assert_eq!(ranges(&t, a, false), vec![(1, 1, W), (20, 20, W)]);
        t.lock(K, a, W, r(5, 25), false).unwrap();
        assert_eq!(t.unlock(K, a, r(7, 7), false), Ok(()));
        assert_eq!(t.unlock(K, a, r(9, 9), false), Err(Refused::NoLck));
        // Cutting an end needs no new range.
        assert_eq!(t.unlock(K, a, r(25, 25), false), Ok(()));
        assert_eq!(ranges(&t, a, false), vec![(1, 1, W), (5, 6, W), (8, 24, W)]);
        t.lock(K, b, W, r(1000, 1000), false).unwrap();
        assert_eq!(t.total(), 4);
        assert_eq!(t.lock(K, b, W, r(2000, 2000), false), Err(Refused::NoLck));
        // Releasing everything always works.
        t.unlock(K, a, Range::ALL, false).unwrap();
        assert_eq!(t.total(), 1);
    }

    #[test]
    fn one_user_on_many_clients_is_bounded_and_gets_its_share_back() {
        // Three ranges a client, four a user, ten in all.
        let mut t = LockTable::with_bounds(Duration::from_secs(1), 3, 4, 10);
        let user = |client, owner| Holder {
            client: LockClient(client),
            uid: 1000,
            owner,
        };
        for i in 0..3 {
            t.lock(K, user(1, 1), W, r(i * 10, i * 10), false).unwrap();
        }
        t.lock(K, user(2, 1), W, r(100, 100), false).unwrap();
        // A third client of the same user: over the user's share.
        assert_eq!(
            t.lock(K, user(3, 1), W, r(200, 200), false),
            Err(Refused::NoLck)
        );
        // Another user still has room.
        let other = Holder {
            client: LockClient(9),
            uid: 2000,
            owner: 1,
        };
        t.lock(K, other, W, r(300, 300), false).unwrap();
        // Released, by unlock or by the reaper, the share comes back.
        t.unlock(K, user(2, 1), Range::ALL, false).unwrap();
        t.lock(K, user(3, 1), W, r(200, 200), false).unwrap();
        let t0 = Instant::now();
        t.client_gone(LockClient(1), t0);
        assert_eq!(t.reap(t0 + Duration::from_secs(2)), 3);
        for i in 0..3 {
            t.lock(K, user(4, 1), W, r(400 + i * 10, 400 + i * 10), false)
                .unwrap_or_else(|e| panic!("{i}: {e:?}"));
        }
        assert_eq!(t.users.get(&1000), Some(&4));
    }

    #[test]
    fn a_gone_client_keeps_its_locks_for_the_grace_only_unless_rebound() {
        let mut t = LockTable::new(Duration::from_secs(10));
        let (a, b) = (h(1, 1), h(2, 1));
        let t0 = Instant::now();
        t.lock(K, a, W, Range::ALL, false).unwrap();
        t.lock((9, 9), a, W, Range::ALL, true).unwrap();
        t.client_gone(a.client, t0);
        assert_eq!(t.reap(t0 + Duration::from_secs(9)), 0);
        assert!(t.lock(K, b, W, r(0, 0), false).is_err());
        assert_eq!(t.reap(t0 + Duration::from_secs(10)), 2);
        assert!(t.lock(K, b, W, r(0, 0), false).is_ok());
        assert!(!t.files.contains_key(&(9, 9)));
        // Rebound within the grace: the new client keeps them, for good.
        let c = h(3, 1);
        t.lock((5, 5), c, W, Range::ALL, false).unwrap();
        t.client_gone(c.client, t0);
        t.rebind(c.client, LockClient(4));
        assert_eq!(t.reap(t0 + Duration::from_secs(100)), 0);
        assert!(t.test((5, 5), b, R, r(0, 0), false).is_some());
        t.unlock(
            (5, 5),
            Holder {
                client: LockClient(4),
                ..c
            },
            Range::ALL,
            false,
        )
        .unwrap();
        assert_eq!(t.total(), 1);
    }

    /// Against a model: per byte of a small file, which holders hold which kind.
    #[test]
    fn matches_a_byte_array_model() {
        const N: u64 = 24;
        let mut rng = rand::rngs::StdRng::seed_from_u64(26);
        for _ in 0..200 {
            let mut t = LockTable::new(Duration::from_secs(1));
            // model[holder][byte]
            let mut model = [[None::<LockKind>; N as usize]; 3];
            for _ in 0..60 {
                let who = rng.gen_range(0..3usize);
                let holder = h(who as u32, 0);
                let s = rng.gen_range(0..N);
                let e = rng.gen_range(s..N);
                let range = r(s, e);
                let kind = if rng.gen_bool(0.5) { R } else { W };
                if rng.gen_bool(0.3) {
                    t.unlock(K, holder, range, false).unwrap();
                    for b in s..=e {
                        model[who][b as usize] = None;
                    }
                    continue;
                }
                let blocked = (0..3).filter(|o| *o != who).any(|o| {
                    (s..=e).any(|b| model[o][b as usize].is_some_and(|k| k == W || kind == W))
                });
                assert_eq!(t.test(K, holder, kind, range, false).is_some(), blocked);
                assert_eq!(t.lock(K, holder, kind, range, false).is_err(), blocked);
                if !blocked {
                    for b in s..=e {
                        model[who][b as usize] = Some(kind);
                    }
                }
                for (who, bytes) in model.iter().enumerate() {
                    let mut got = [None; N as usize];
                    let mine = ranges(&t, h(who as u32, 0), false);
                    for w in mine.windows(2) {
                        assert!(
                            w[0].1 < w[1].0 && (w[0].1 + 1 < w[1].0 || w[0].2 != w[1].2),
                            "ranges overlap or touching same-kind ranges did not merge: {mine:?}"
                        );
                    }
                    for (s, e, k) in mine {
                        for b in s..=e.min(N - 1) {
                            got[b as usize] = Some(k);
                        }
                    }
                    assert_eq!(&got, bytes);
                }
            }
        }
    }
}
