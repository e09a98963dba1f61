//! Attribute leases: who may cache which object's attributes until when.
//!
//! Lives in color 0 (the dispatcher's state). Bounded twice: each connection may hold at most
//! `per_conn` leases (a connection over its share is granted lease 0, so one client listing
//! huge directories cannot crowd out the others), and the whole table at most `max` (beyond
//! it every reply carries lease 0). A lease of 0 tells the client not to cache, so correctness
//! never depends on memory. Expired entries are reaped by a timer. Every count is kept
//! incrementally: no operation walks the whole table except the periodic reap.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use protocol::FileHandle;

use crate::fs::ObjKey;

/// Connection identifier (also its color).
pub type ConnId = u32;

#[derive(Debug)]
struct Entry {
    fh: FileHandle,
    holders: HashMap<ConnId, Instant>,
}

#[derive(Debug)]
pub struct Leases {
    duration: Duration,
    max: usize,
    per_conn: usize,
    len: usize,
    objects: HashMap<ObjKey, Entry>,
    by_conn: HashMap<ConnId, HashSet<ObjKey>>,
}

impl Leases {
    pub fn new(duration: Duration, max: usize, per_conn: usize) -> Leases {
        Leases {
            duration,
            max,
            per_conn,
            len: 0,
            objects: HashMap::new(),
            by_conn: HashMap::new(),
        }
    }

    /// The lease to grant now, in milliseconds (0 when the table is full).
    pub fn lease_ms(&self) -> u32 {
        if self.len >= self.max {
            0
        } else {
            u32::try_from(self.duration.as_millis()).unwrap_or(u32::MAX)
        }
    }

    /// Whether `conn` holds its whole share (its replies then carry lease 0).
    pub fn over_share(&self, conn: ConnId) -> bool {
        self.held_by(conn) >= self.per_conn
    }

    pub fn held_by(&self, conn: ConnId) -> usize {
        self.by_conn.get(&conn).map_or(0, HashSet::len)
    }

    /// Grants `conn` a lease of `lease_ms` on `key` if the table and the connection's share
    /// allow it (renewing a lease it holds always does); returns whether it did. A reply must
    /// carry lease 0 for every object this refuses.
    pub fn try_grant(&mut self, conn: ConnId, key: ObjKey, fh: FileHandle, lease_ms: u32) -> bool {
        if lease_ms == 0 {
            return false;
        }
        let holds = self
            .objects
            .get(&key)
            .is_some_and(|e| e.holders.contains_key(&conn));
        if !holds && (self.len >= self.max || self.over_share(conn)) {
            return false;
        }
        self.grant(conn, key, fh, lease_ms);
        true
    }

    /// Records that `conn` holds a lease on `key` (granted `lease_ms` ago at most).
    fn grant(&mut self, conn: ConnId, key: ObjKey, fh: FileHandle, lease_ms: u32) {
        if lease_ms == 0 {
            return;
        }
        let expiry = Instant::now() + Duration::from_millis(lease_ms as u64);
        let e = self.objects.entry(key).or_insert_with(|| Entry {
            fh,
            holders: HashMap::new(),
        });
        if e.holders.insert(conn, expiry).is_none() {
            self.len += 1;
            self.by_conn.entry(conn).or_default().insert(key);
        }
    }

    fn release(&mut self, conn: ConnId, key: ObjKey) {
        self.len -= 1;
        if let Some(keys) = self.by_conn.get_mut(&conn) {
            keys.remove(&key);
            if keys.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
    }

    /// `key` changed because of `by`: returns the other live holders (their leases end) and
    /// the handle to name in the INVALIDATE.
    pub fn changed(&mut self, key: ObjKey, by: ConnId) -> (Vec<ConnId>, Option<FileHandle>) {
        let now = Instant::now();
        let Some(e) = self.objects.get_mut(&key) else {
            return (Vec::new(), None);
        };
        let fh = e.fh;
        let mut ended = Vec::new();
        e.holders.retain(|&c, &mut exp| {
            if c == by {
                return true;
            }
            ended.push((c, exp > now));
            false
        });
        if e.holders.is_empty() {
            self.objects.remove(&key);
        }
        let mut notify = Vec::new();
        for (c, live) in ended {
            self.release(c, key);
            if live {
                notify.push(c);
            }
        }
        (notify, Some(fh))
    }

    /// Drops everything a closed connection held (only its own entries are visited).
    pub fn drop_conn(&mut self, conn: ConnId) {
        let Some(keys) = self.by_conn.remove(&conn) else {
            return;
        };
        for key in keys {
            if let Some(e) = self.objects.get_mut(&key) {
                if e.holders.remove(&conn).is_some() {
                    self.len -= 1;
                }
                if e.holders.is_empty() {
                    self.objects.remove(&key);
                }
            }
        }
    }

    /// Drops expired leases; returns how many.
    pub fn reap(&mut self) -> usize {
        let now = Instant::now();
        let mut expired = Vec::new();
        self.objects.retain(|&key, e| {
            e.holders.retain(|&c, exp| {
                let keep = *exp > now;
                if !keep {
                    expired.push((c, key));
                }
                keep
            });
            !e.holders.is_empty()
        });
        for &(c, key) in &expired {
            self.release(c, key);
        }
        expired.len()
    }

    pub fn count(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fh() -> FileHandle {
        FileHandle::from_bytes([0; 48])
    }

    #[test]
    fn grant_change_reap_bound() {
        let mut l = Leases::new(Duration::from_secs(60), 2, 10);
        assert!(l.try_grant(1, (1, 1), fh(), l.lease_ms()));
        assert!(l.try_grant(2, (1, 1), fh(), 60_000));
        assert_eq!(l.lease_ms(), 0, "full table grants no lease");
        assert!(!l.try_grant(3, (1, 1), fh(), 60_000), "full: refused");
        assert!(
            l.try_grant(2, (1, 1), fh(), 60_000),
            "a renewal is not a new entry"
        );
        let (who, _) = l.changed((1, 1), 1);
        assert_eq!(who, vec![2]);
        assert_eq!(l.count(), 1);
        assert_eq!(l.held_by(2), 0);
        l.drop_conn(1);
        assert_eq!(l.count(), 0);
        assert!(l.try_grant(3, (2, 2), fh(), 1));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(l.reap(), 1);
        assert_eq!((l.count(), l.held_by(3)), (0, 0));
    }

    #[test]
    fn share_per_connection() {
        let mut l = Leases::new(Duration::from_secs(60), 1000, 3);
        for i in 0..3 {
            assert!(l.try_grant(1, (1, i), fh(), l.lease_ms()));
        }
        assert!(l.over_share(1), "connection 1 holds its whole share");
        assert!(
            !l.try_grant(1, (1, 9), fh(), 60_000),
            "over its share: refused"
        );
        assert!(
            l.try_grant(2, (1, 9), fh(), 60_000),
            "others are unaffected"
        );
        assert!(!l.over_share(2), "others are unaffected");
        assert_ne!(l.lease_ms(), 0);
        l.changed((1, 0), 3);
        assert!(!l.over_share(1), "a lease ended: below the share again");
        l.drop_conn(1);
        l.drop_conn(2);
        assert_eq!(l.count(), 0);
    }
}
