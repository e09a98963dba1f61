//! The kernel's own copy of each directory's listing: whether an `opendir` may let the kernel
//! serve it again instead of asking us.
//!
//! With `FOPEN_CACHE_DIR` the kernel keeps what our READDIRPLUS replies gave for a directory
//! in the directory's page cache and answers later `getdents` of it from there, so a walk
//! that lists a directory again (`ls -lR`, `find`, `du`, `git status`) costs no READDIRPLUS
//! and no GETATTR of the directory (an uncached listing makes the kernel forget the
//! directory's atime, so glibc's `fstat` after `opendir` asks again). Each `opendir` reply
//! says whether that copy may stay (`FOPEN_KEEP_CACHE`); without it the kernel drops the copy
//! and fills a new one from the listing this open serves. The kernel itself drops its copy
//! when the directory changes through this mount (`fs/fuse/dir.c` bumps the directory's
//! i_version) or when told to (an INVALIDATE's `FUSE_NOTIFY_INVAL_INODE`).
//!
//! The copy may stay only while it holds exactly the listing the opener would be served:
//!
//! - the kept listing this open uses ([`super::kept_listings`], per local user, dropped on
//!   any change we learn of and at the directory's lease end) is the very listing the
//!   kernel's copy was filled from. A new listing (its lease ended, a change, another user's
//!   listing, a read-ahead) always replaces the copy, so it is never older than what this
//!   user would be shown, nor one another user was shown. Its `d_ino` are the files' own
//!   inode numbers (`convert::stat_ino`), not node ids, so no FORGET makes them stale.
//!
//! The record is taken when the kernel starts a fill (a listing read from offset 0, which
//! reaches us only when the kernel has no copy) and dropped with the directory's node.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

/// What each directory's kernel copy was filled from ([module docs](self)).
pub(super) struct KernelListings<L> {
    /// Each copy's listing, the one served to its fill (weak: a listing no longer kept is
    /// never kept again).
    by_dir: HashMap<u64, Weak<L>>,
}

impl<L> Default for KernelListings<L> {
    fn default() -> Self {
        KernelListings {
            by_dir: HashMap::new(),
        }
    }
}

impl<L> KernelListings<L> {
    /// The kernel reads `listing` of directory `dir` from its start: it is filling its copy.
    pub(super) fn filling(&mut self, dir: u64, listing: &Arc<L>) {
        self.by_dir.insert(dir, Arc::downgrade(listing));
    }

    /// Directory `ino`'s node was forgotten by the kernel, and its copy with it.
    pub(super) fn dir_forgotten(&mut self, ino: u64) {
        self.by_dir.remove(&ino);
    }

    /// Whether an `opendir` of `dir` that will serve `listing` may leave the kernel's copy
    /// in place. When not, the reply makes the kernel drop it, and so is the record.
    pub(super) fn may_keep(&mut self, dir: u64, listing: &Arc<L>) -> bool {
        let keep = self
            .by_dir
            .get(&dir)
            .is_some_and(|filled| std::ptr::eq(filled.as_ptr(), Arc::as_ptr(listing)));
        if !keep {
            self.by_dir.remove(&dir);
        }
        keep
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copy_stays_only_for_the_listing_it_was_filled_from() {
        let mut k = KernelListings::default();
        let (a, b) = (Arc::new("a"), Arc::new("a"));
        assert!(!k.may_keep(7, &a), "nothing filled yet");
        k.filling(7, &a);
        assert!(k.may_keep(7, &a));
        assert!(k.may_keep(7, &a), "asking does not use it up");
        assert!(
            !k.may_keep(7, &b),
            "an equal but newer listing replaces the copy"
        );
        assert!(!k.may_keep(7, &a), "and the record went with the copy");
        k.filling(7, &b);
        assert!(!k.may_keep(8, &b), "another directory");
    }

    #[test]
    fn a_forgotten_directory_ends_its_copy_alone() {
        let mut k = KernelListings::default();
        let a = Arc::new(());
        let b = Arc::new(());
        k.filling(1, &a);
        assert!(k.may_keep(1, &a));
        k.dir_forgotten(1);
        k.filling(2, &b);
        assert!(!k.may_keep(1, &a), "the directory's own node went");
        assert!(k.may_keep(2, &b));
    }

    #[test]
    fn a_listing_dropped_and_freed_is_never_matched() {
        let mut k = KernelListings::default();
        let a = Arc::new(1u64);
        k.filling(3, &a);
        drop(a);
        let again = Arc::new(1u64);
        assert!(!k.may_keep(3, &again));
    }
}
