//! Attribute leases: who may cache which object's attributes until when.
//!
//! Lives in color 0 (the dispatcher's state). Bounded: when full, replies carry a lease of 0
//! (clients must not cache) instead of growing the table, so correctness never depends on
//! memory. Expired entries are reaped by a timer.

use std::collections::HashMap;
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
    len: usize,
    objects: HashMap<ObjKey, Entry>,
}

impl Leases {
    pub fn new(duration: Duration, max: usize) -> Leases {
        Leases {
            duration,
            max,
            len: 0,
            objects: HashMap::new(),
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

    /// Records that `conn` holds a lease on `key` (granted `lease_ms` ago at most).
    pub fn grant(&mut self, conn: ConnId, key: ObjKey, fh: FileHandle, lease_ms: u32) {
        if lease_ms == 0 {
            return;
        }
        // A small overshoot (grants decided before the table filled) is bounded by the
        // number of requests in flight.
        let expiry = Instant::now() + Duration::from_millis(lease_ms as u64);
        let e = self.objects.entry(key).or_insert_with(|| Entry {
            fh,
            holders: HashMap::new(),
        });
        if e.holders.insert(conn, expiry).is_none() {
            self.len += 1;
        }
    }

    /// `key` changed because of `by`: returns the other live holders (their leases end) and
    /// the handle to name in the INVALIDATE.
    pub fn changed(&mut self, key: ObjKey, by: ConnId) -> (Vec<ConnId>, Option<FileHandle>) {
        let now = Instant::now();
        let Some(e) = self.objects.get_mut(&key) else {
            return (Vec::new(), None);
        };
        let mut notify = Vec::new();
        e.holders.retain(|&c, &mut exp| {
            if c == by {
                return true;
            }
            if exp > now {
                notify.push(c);
            }
            false
        });
        let fh = e.fh;
        let left = e.holders.len();
        self.recount();
        if left == 0 {
            self.objects.remove(&key);
        }
        (notify, Some(fh))
    }

    fn recount(&mut self) {
        self.len = self.objects.values().map(|e| e.holders.len()).sum();
    }

    /// Drops everything a closed connection held.
    pub fn drop_conn(&mut self, conn: ConnId) {
        self.objects.retain(|_, e| {
            e.holders.remove(&conn);
            !e.holders.is_empty()
        });
        self.recount();
    }

    /// Drops expired leases.
    pub fn reap(&mut self) -> usize {
        let now = Instant::now();
        let before = self.len;
        self.objects.retain(|_, e| {
            e.holders.retain(|_, exp| *exp > now);
            !e.holders.is_empty()
        });
        self.recount();
        before - self.len
    }

    pub fn count(&self) -> usize {
        self.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_change_reap_bound() {
        let fh = FileHandle::from_bytes([0; 48]);
        let mut l = Leases::new(Duration::from_secs(60), 2);
        l.grant(1, (1, 1), fh, l.lease_ms());
        l.grant(2, (1, 1), fh, l.lease_ms());
        assert_eq!(l.lease_ms(), 0, "full table grants no lease");
        let (who, _) = l.changed((1, 1), 1);
        assert_eq!(who, vec![2]);
        assert_eq!(l.count(), 1);
        l.drop_conn(1);
        assert_eq!(l.count(), 0);
        l.grant(3, (2, 2), fh, 1);
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(l.reap(), 1);
    }
}
