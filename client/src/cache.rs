//! Attribute and access caches honouring the server's leases.
//!
//! Every attribute the server sends carries `lease_ms`: the client may use it for that long
//! after *receiving* it (so clocks need not agree) unless an INVALIDATE arrives first. Access
//! results are cached per authno (one per user on the session), with the lease of the
//! attributes that came with them.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use protocol::{Attr, FileHandle};

/// Cached attributes and access bits, keyed by file handle.
#[derive(Default)]
pub struct AttrCache {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    attrs: HashMap<FileHandle, (Attr, Instant)>,
    access: HashMap<(FileHandle, u32), (u32, u32, Instant)>,
}

/// Bound on entries: past it, expired entries are swept, then everything if still too many.
const MAX_ENTRIES: usize = 65_536;

impl AttrCache {
    /// Remembers `attr` for `fh`, valid for its lease from now.
    pub fn put(&self, fh: FileHandle, attr: Attr) {
        let expiry = Instant::now() + Duration::from_millis(u64::from(attr.lease_ms));
        let mut g = self.inner.lock();
        if g.attrs.len() >= MAX_ENTRIES {
            let now = Instant::now();
            g.attrs.retain(|_, (_, e)| *e > now);
            if g.attrs.len() >= MAX_ENTRIES {
                g.attrs.clear();
            }
        }
        if attr.lease_ms == 0 {
            g.attrs.remove(&fh);
        } else {
            g.attrs.insert(fh, (attr, expiry));
        }
    }

    /// Attributes of `fh` whose lease has not expired.
    pub fn get(&self, fh: &FileHandle) -> Option<Attr> {
        let mut g = self.inner.lock();
        match g.attrs.get(fh) {
            Some((a, e)) if *e > Instant::now() => Some(*a),
            Some(_) => {
                g.attrs.remove(fh);
                None
            }
            None => None,
        }
    }

    /// Drops everything known about `fh` (INVALIDATE, or a change we made ourselves).
    pub fn invalidate(&self, fh: &FileHandle) {
        let mut g = self.inner.lock();
        g.attrs.remove(fh);
        g.access.retain(|(h, _), _| h != fh);
    }

    /// Drops everything (after a reconnect: invalidations may have been missed).
    pub fn clear(&self) {
        let mut g = self.inner.lock();
        g.attrs.clear();
        g.access.clear();
    }

    /// Remembers that `authno` asked `asked` on `fh` and was granted `granted`.
    pub fn put_access(&self, fh: FileHandle, authno: u32, asked: u32, granted: u32, lease_ms: u32) {
        if lease_ms == 0 {
            return;
        }
        let expiry = Instant::now() + Duration::from_millis(u64::from(lease_ms));
        let mut g = self.inner.lock();
        if g.access.len() >= MAX_ENTRIES {
            g.access.clear();
        }
        g.access.insert((fh, authno), (asked, granted, expiry));
    }

    /// Cached answer to `asked` for `authno` on `fh`, if every bit asked was asked before.
    pub fn get_access(&self, fh: &FileHandle, authno: u32, asked: u32) -> Option<u32> {
        let g = self.inner.lock();
        match g.access.get(&(*fh, authno)) {
            Some((a, granted, e)) if *e > Instant::now() && asked & !a == 0 => {
                Some(granted & asked)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(lease_ms: u32) -> Attr {
        Attr::test_file(5, lease_ms)
    }

    #[test]
    fn lease_expires() {
        let c = AttrCache::default();
        let fh = FileHandle::from_bytes([1; 48]);
        c.put(fh, attr(30));
        assert!(c.get(&fh).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(c.get(&fh).is_none());
    }

    #[test]
    fn invalidate_drops_attrs_and_access() {
        let c = AttrCache::default();
        let fh = FileHandle::from_bytes([2; 48]);
        c.put(fh, attr(60_000));
        c.put_access(fh, 1, 0x3, 0x1, 60_000);
        assert_eq!(c.get_access(&fh, 1, 0x1), Some(0x1));
        assert_eq!(c.get_access(&fh, 1, 0x4), None, "bit never asked");
        assert_eq!(c.get_access(&fh, 2, 0x1), None, "per user");
        c.invalidate(&fh);
        assert!(c.get(&fh).is_none());
        assert_eq!(c.get_access(&fh, 1, 0x1), None);
    }

    #[test]
    fn zero_lease_is_not_cached() {
        let c = AttrCache::default();
        let fh = FileHandle::from_bytes([3; 48]);
        c.put(fh, attr(0));
        assert!(c.get(&fh).is_none());
    }
}
