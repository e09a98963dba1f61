//! Directory listings kept while the directory's lease lasts, so listing it again (`ls -lR`
//! twice, `find` after `ls`, a build's repeated scans) costs no READDIRPLUS.
//!
//! A listing is kept per directory and user (authno: what a user may list is the server's
//! decision), with the stamp taken before its first page was asked and the end of the lease
//! its first page granted on the directory. It is used again only while that lease lasts
//! and if nothing changed the directory since the stamp: our own CREATE, REMOVE, RENAME...
//! in it, another client's (its INVALIDATE: we hold the lease) and a reconnect all count as
//! changes ([`super::AttrCache::changed_since`]). Each entry is then given the attributes the
//! session cache holds for it now, with what is left of their lease; if any entry has none
//! (expired, or dropped by a change), the directory is listed again.

use std::collections::HashMap;
use std::time::Instant;

use protocol::{DirEntryPlus, FileHandle};

use super::Stamp;

/// Bound on the entries of all kept listings (past it, all are dropped).
const MAX_ENTRIES: usize = 65_536;

pub(super) struct Kept {
    pub entries: Vec<DirEntryPlus>,
    pub since: Stamp,
    pub until: Instant,
}

/// Kept listings by (directory, authno).
#[derive(Default)]
pub(super) struct Listings {
    by_dir: HashMap<(FileHandle, u32), Kept>,
    entries: usize,
}

impl Listings {
    pub fn keep(&mut self, dir: FileHandle, authno: u32, kept: Kept) {
        if kept.entries.len() > MAX_ENTRIES / 4 {
            return;
        }
        self.drop_one(&(dir, authno));
        if self.entries + kept.entries.len() > MAX_ENTRIES {
            self.clear();
        }
        self.entries += kept.entries.len();
        self.by_dir.insert((dir, authno), kept);
    }

    pub fn get(&self, dir: &FileHandle, authno: u32) -> Option<&Kept> {
        self.by_dir.get(&(*dir, authno))
    }

    fn drop_one(&mut self, key: &(FileHandle, u32)) {
        if let Some(k) = self.by_dir.remove(key) {
            self.entries -= k.entries.len();
        }
    }

    /// Drops every user's listing of `dir`.
    pub fn forget(&mut self, dir: &FileHandle) {
        let keys: Vec<_> = self
            .by_dir
            .keys()
            .filter(|k| k.0 == *dir)
            .copied()
            .collect();
        for k in keys {
            self.drop_one(&k);
        }
    }

    pub fn clear(&mut self) {
        self.by_dir.clear();
        self.entries = 0;
    }
}
