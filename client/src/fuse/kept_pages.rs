//! A file's pages kept in the kernel from one open to the next while the file is unchanged.
//!
//! Without `FOPEN_KEEP_CACHE` the kernel drops a file's cached pages at every open, so a file
//! read again (a compiler's headers, `grep -r` run twice, git's objects and index) is read
//! from the server again: a round trip per file, 50 ms apiece over a long link. The NFS client
//! keeps them when a GETATTR at the open shows the file unchanged; this mount needs no GETATTR,
//! since the server tells it of every change while it holds the file's lease (INVALIDATE).
//!
//! At each open that drops the pages, the mount remembers the attribute cache's clock
//! ([`crate::cache::Stamp`]) and the file's modification time, change time and size as it then
//! knows them. A later open keeps the pages only if
//! - the attributes are still cached under their lease (held since: the lease ends only when
//!   no INVALIDATE came, and then they are fetched again), and equal to the remembered ones
//!   (what a lapse of the lease in between could have missed shows here, as it does to NFS);
//! - nothing changed the file since the remembered clock, as the attribute cache tells
//!   ([`crate::cache::AttrCache::changed_since`]: a change through this mount begun or ended,
//!   another client's INVALIDATE);
//! - no write of ours to it is under way, and the open neither truncates it nor appends (an
//!   append is direct I/O, past the pages).
//!
//! A change through another client is then seen when its INVALIDATE arrives (which also drops
//! the pages at once), as the attributes are; the kernel's page locks order a READ still in
//! flight before the drop.
//!
//! Pages our own writes leave are the file's too: a write through the kernel goes through its
//! pages (they hold what the WRITE sent), and a change by anyone else drops them (its
//! INVALIDATE). So when an open file that wrote through the pages is released with no write
//! of ours under way, the pages are remembered as read then, under the attributes the last
//! WRITE's reply brought ([`ServerMount::pages_written`]): a file written and then read back
//! (a compiler's output read by the linker, `COMMIT_EDITMSG`) is read from the kernel's pages.
//! Not after an open for appending or with `O_DIRECT`, whose writes go past the pages, nor
//! when those attributes are not cached (writes that overlapped install none), nor when a
//! write failed (the pages then hold bytes the server does not). The kernel keeps a page
//! written in part as not read; for a file this mount made new and that was written from its
//! start one write after another, the bytes of that last page are kept beside the bytes read
//! with opens ([`super::read_at_open`]: 1,024 pages at most, while the file's attributes are
//! cached and it is unchanged), so reading the file back asks the server nothing.

use std::collections::HashMap;

use fuser::{INodeNo, OpenFlags};
use protocol::{Attr, FileHandle, FileType, Time};

use super::ServerMount;
use super::attrs_behind::LastPage;
use crate::cache::{AttrCache, Stamp};
use crate::session::Client;

/// What the pages the kernel may hold of one file were read under.
#[derive(Debug, Clone, Copy)]
pub(super) struct PagesRead {
    since: Stamp,
    mtime: Time,
    ctime: Time,
    size: u64,
}

impl PagesRead {
    fn of(since: Stamp, a: &Attr) -> PagesRead {
        PagesRead {
            since,
            mtime: a.mtime,
            ctime: a.ctime,
            size: a.size,
        }
    }

    fn matches(&self, a: &Attr) -> bool {
        self.mtime == a.mtime && self.ctime == a.ctime && self.size == a.size
    }

    /// Whether the pages are still the file's `fh`, whose cached attributes are `attr`.
    fn still_of(&self, fh: &FileHandle, attr: Option<&Attr>, cache: &AttrCache) -> bool {
        attr.is_some_and(|a| self.matches(a)) && !cache.changed_since(fh, self.since)
    }
}

/// Per node, what its kept pages were read under (entries go with the node's FORGET).
#[derive(Default)]
pub(super) struct KeptPages {
    by_node: HashMap<u64, PagesRead>,
}

impl KeptPages {
    pub(super) fn forget(&mut self, ino: u64) {
        self.by_node.remove(&ino);
    }
}

/// Whether an open with `flags` may keep pages at all.
fn may_keep(flags: OpenFlags) -> bool {
    flags.0 & (libc::O_TRUNC | libc::O_APPEND) == 0
}

/// Whether an open with `flags` writes through the kernel's pages: opened for writing,
/// neither appending nor `O_DIRECT` (both write past the pages).
fn writes_through_pages(flags: OpenFlags) -> bool {
    flags.0 & libc::O_ACCMODE != libc::O_RDONLY && flags.0 & (libc::O_APPEND | libc::O_DIRECT) == 0
}

impl ServerMount {
    /// Whether this open of `ino` may keep the kernel's pages of it (see the module's doc);
    /// when not, what the pages read from now on are read under is remembered.
    pub(super) fn open_keeps_pages(&self, c: &Client, ino: INodeNo, flags: OpenFlags) -> bool {
        let Ok(fh) = self.fh(ino) else {
            return false;
        };
        let cache = c.cache();
        let now = cache.stamp();
        let attr = cache.get(&fh).filter(|a| a.ftype == FileType::Regular);
        let keepable = may_keep(flags);
        let mut t = self.table();
        let keep = keepable
            && !self.behind.busy(ino.0)
            && (t.kept_pages.by_node.get(&ino.0))
                .is_some_and(|r| r.still_of(&fh, attr.as_ref(), cache));
        if !keep {
            match attr {
                Some(a) if keepable => {
                    t.kept_pages.by_node.insert(ino.0, PagesRead::of(now, &a));
                }
                _ => {
                    t.kept_pages.by_node.remove(&ino.0);
                }
            }
        }
        keep
    }

    /// An open file of `ino` opened with `flags` is being released: if it could write
    /// through the kernel's pages, those are remembered as the file's as of now (see the
    /// module's doc), or forgotten when that cannot be told.
    pub(super) fn pages_written(
        &self,
        c: &Client,
        ino: INodeNo,
        flags: OpenFlags,
        last_page: Option<LastPage>,
    ) {
        if !writes_through_pages(flags) {
            return;
        }
        let Ok(fh) = self.fh(ino) else {
            return;
        };
        let cache = c.cache();
        let now = cache.stamp();
        let attr = cache.get(&fh).filter(|a| a.ftype == FileType::Regular);
        // A write that failed left the kernel's pages holding bytes the server does not.
        let failed = self.behind.take_failed_since(ino.0);
        let mut t = self.table();
        match attr {
            Some(a) if !failed && !self.behind.busy(ino.0) => {
                t.kept_pages.by_node.insert(ino.0, PagesRead::of(now, &a));
                // The page the kernel keeps as not read, answered from what was written.
                if let Some(l) = last_page.filter(|l| l.end == a.size && !l.bytes.is_empty()) {
                    let at = l.end - l.bytes.len() as u64;
                    t.read_at_open.keep_last_page(fh, now, at, l.bytes);
                }
            }
            _ => {
                t.kept_pages.by_node.remove(&ino.0);
            }
        }
    }

    /// Whether the next open of `fh` would keep the kernel's pages of it, as far as the mount
    /// knows (the kernel may have dropped some since, under memory pressure).
    pub(super) fn pages_kept(&self, fh: &FileHandle) -> bool {
        let cache = self.client.cache();
        let attr = cache.get(fh);
        let t = self.table();
        let read = t
            .by_fh
            .get(fh)
            .and_then(|ino| t.kept_pages.by_node.get(ino));
        read.is_some_and(|r| r.still_of(fh, attr.as_ref(), cache))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(size: u64, secs: i64) -> Attr {
        let mut a = Attr::test_file(size, 60_000);
        a.mtime.seconds = secs;
        a.ctime.seconds = secs;
        a
    }

    #[test]
    fn pages_match_only_the_attributes_they_were_read_under() {
        let cache = crate::cache::AttrCache::default();
        let read = PagesRead::of(cache.stamp(), &attr(10, 5));
        assert!(read.matches(&attr(10, 5)));
        assert!(!read.matches(&attr(11, 5)), "size");
        let mut later = attr(10, 5);
        later.mtime.nanos = 1;
        assert!(!read.matches(&later), "mtime");
        let mut changed = attr(10, 5);
        changed.ctime.seconds = 6;
        assert!(!read.matches(&changed), "ctime");
    }

    #[test]
    fn only_writes_through_the_pages_leave_them_the_files() {
        assert!(writes_through_pages(OpenFlags(libc::O_WRONLY)));
        assert!(writes_through_pages(OpenFlags(
            libc::O_RDWR | libc::O_TRUNC
        )));
        assert!(!writes_through_pages(OpenFlags(libc::O_RDONLY)));
        assert!(!writes_through_pages(OpenFlags(
            libc::O_WRONLY | libc::O_APPEND
        )));
        assert!(!writes_through_pages(OpenFlags(
            libc::O_RDWR | libc::O_DIRECT
        )));
    }

    #[test]
    fn truncating_and_appending_opens_never_keep() {
        assert!(may_keep(OpenFlags(libc::O_RDONLY)));
        assert!(may_keep(OpenFlags(libc::O_RDWR)));
        assert!(!may_keep(OpenFlags(libc::O_WRONLY | libc::O_TRUNC)));
        assert!(!may_keep(OpenFlags(libc::O_WRONLY | libc::O_APPEND)));
    }
}
