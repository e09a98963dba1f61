//! What changed since when: a change log that color 0 advances and every color can read.
//!
//! The READ fast path ([`crate::read`]) answers from the connection's color without asking
//! color 0 first, so it needs to learn afterwards whether something changed while it was
//! reading:
//!
//! - the lease it put in a reply is recorded by color 0 *after* the reply was sent; a change
//!   that color 0 handled in between found no holder to invalidate, so color 0 compares the
//!   object's last change with the epoch the read started at and invalidates the reader;
//! - a cached open file may only serve a user while nothing that could change that user's
//!   access happened since it was opened.
//!
//! Changes are counted, not stored: each object hashes to one of [`BUCKETS`] slots holding the
//! number of the last change of any object in that slot. Two objects sharing a slot only make
//! the answer "changed" more often (an extra INVALIDATE, a re-open), never "unchanged" wrongly,
//! and the memory is fixed whatever the clients do.

use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::fs::ObjKey;

/// Slots of the per-object change counters.
pub(crate) const BUCKETS: usize = 4096;

/// A point in the change log: compare it later with [`Changes::object_changed_since`] and
/// [`Changes::access_changed_since`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Epoch {
    any: u64,
    access: u64,
}

/// The change log. Objects are noted by color 0 (where leases are recorded, so the order of
/// notes and grants is color 0's); access changes by the storage thread that made them.
pub(crate) struct Changes {
    /// Number of the last change recorded.
    counter: AtomicU64,
    /// Number of the last change that may have changed who can open what (SETATTR, RENAME,
    /// REMOVE, RMDIR: modes, owners, ACLs and directory search permission).
    access: AtomicU64,
    /// Per slot, the number of the last change of an object hashing there.
    buckets: Box<[AtomicU64]>,
    hasher: std::collections::hash_map::RandomState,
}

impl Default for Changes {
    fn default() -> Self {
        Changes::new()
    }
}

impl Changes {
    pub(crate) fn new() -> Changes {
        Changes {
            counter: AtomicU64::new(0),
            access: AtomicU64::new(0),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            hasher: Default::default(),
        }
    }

    /// Now, as a point to compare with later. Take it *before* reading what it protects.
    pub(crate) fn now(&self) -> Epoch {
        Epoch {
            any: self.counter.load(Ordering::Acquire),
            access: self.access.load(Ordering::Acquire),
        }
    }

    fn slot(&self, key: ObjKey) -> &AtomicU64 {
        let mut h = self.hasher.build_hasher();
        key.hash(&mut h);
        let i = std::hash::Hasher::finish(&h) as usize % BUCKETS;
        &self.buckets[i]
    }

    /// Color 0: `key` changed (its storage operation has completed).
    pub(crate) fn note(&self, key: ObjKey) {
        let n = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        self.slot(key).fetch_max(n, Ordering::AcqRel);
    }

    /// Color 0: any object may have changed (another instance's changes were lost).
    pub(crate) fn note_all(&self) {
        let n = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        for slot in self.buckets.iter() {
            slot.fetch_max(n, Ordering::AcqRel);
        }
    }

    /// An operation that may change access rights completed (any thread, as soon as it did).
    pub(crate) fn note_access(&self) {
        let n = self.counter.fetch_add(1, Ordering::AcqRel) + 1;
        self.access.fetch_max(n, Ordering::AcqRel);
    }

    /// Whether `key` may have changed after `since` (true also for an unrelated object in
    /// the same slot).
    pub(crate) fn object_changed_since(&self, key: ObjKey, since: &Epoch) -> bool {
        self.slot(key).load(Ordering::Acquire) > since.any
    }

    /// Whether anything that may change access rights happened after `since`.
    pub(crate) fn access_changed_since(&self, since: &Epoch) -> bool {
        self.access.load(Ordering::Acquire) > since.access
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_after_the_epoch_is_seen_and_one_before_is_not() {
        let c = Changes::new();
        c.note((1, 1));
        let e = c.now();
        assert!(!c.object_changed_since((1, 1), &e));
        c.note((1, 2));
        assert!(c.object_changed_since((1, 2), &e));
        // (1, 1) is only "changed" if it shares a slot with (1, 2).
        let shared = std::ptr::eq(c.slot((1, 1)), c.slot((1, 2)));
        assert_eq!(c.object_changed_since((1, 1), &e), shared);
        assert!(!c.access_changed_since(&e));
        c.note_access();
        assert!(c.access_changed_since(&e));
        assert!(!c.access_changed_since(&c.now()));
    }

    #[test]
    fn every_object_has_its_own_history_up_to_slot_sharing() {
        let c = Changes::new();
        let e = c.now();
        for i in 0..100u64 {
            c.note((7, i));
        }
        for i in 0..100u64 {
            assert!(c.object_changed_since((7, i), &e), "change of {i} lost");
        }
        let later = c.now();
        for i in 0..100u64 {
            assert!(!c.object_changed_since((7, i), &later));
        }
    }
}
