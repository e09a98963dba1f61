//! A small file's bytes, or a larger file's first bytes, read with its open.
//!
//! An `open` for reading whose access the server must answer sends a READ of the whole file
//! (when its size is known and small) in the same flight as the ACCESS, and the kernel's first
//! READs of the open file are answered from what came back. Reading a small file (`cp`, `cat`,
//! `grep -r`, a compiler reading its sources) then costs one round trip instead of two. Of a
//! larger file, or one whose size the mount does not know (its attributes dropped by a change),
//! the first [`READ_AT_OPEN_PREFIX`] bytes are read so: a program reading from the start (a
//! file format's header: git's pack files, an ELF header, a database's first page) has its
//! first READs answered too. A READ reaching past them goes to the server as before.
//!
//! The bytes are those of the file as of the open, which is what close-to-open promises. They
//! serve only while the file has not changed since the READ was sent, as the attribute cache
//! tells ([`crate::cache::AttrCache::changed_since`]: a change through this mount begun or
//! ended, or another client's INVALIDATE), with no write of ours under way, and for
//! [`KEPT_FOR`] at most. Any local user's READ may be served: the kernel sends one only for a
//! file its caller opened for reading, which the server granted.
//!
//! Bytes are kept by file handle, not node: files read ahead along a listing
//! ([`super::files_ahead`]) are kept here too, and may have no node yet.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fuser::OpenFlags;
use protocol::{Attr, FileHandle, FileType};

use super::bounded::Bounded;
use super::{ServerMount, convert::errno};
use crate::cache::Stamp;
use crate::session::Client;

/// Largest file read with its open: what the kernel's first READ asks at most (its
/// read-ahead), so one READ answers it.
pub(super) const READ_AT_OPEN_MAX: u64 = 128 * 1024;

/// How much of a larger file, or one of unknown size, is read with its open: the kernel's
/// first read-ahead for a small read at the start is 16 KiB, and for a program reading 64 KiB
/// at a time 64 KiB, so one READ answers the first few of either. A program that never
/// reads the start (`tail`) costs this much transfer for nothing, and no time.
pub(super) const READ_AT_OPEN_PREFIX: u32 = 64 * 1024;

/// How much of the end of a larger file of known size is read with its open, beside its
/// start: where many formats keep what a reader looks up first (git's pack checksum, a zip's
/// central directory, an ELF file's section headers). The kernel's read-ahead for a small read
/// there is 16 KiB from the page read; reads from a page at or after the one that starts this
/// piece are answered from it.
pub(super) const READ_AT_OPEN_TAIL: u64 = 16 * 1024;

/// Where the tail read with an open of a file of `size` bytes starts, if one is read: on a
/// page boundary (the kernel's READs start on one), only for a file longer than what is read
/// whole.
pub(super) fn tail_start(flags: OpenFlags, a: Option<&Attr>) -> Option<u64> {
    let a = a.filter(|a| a.ftype == FileType::Regular && a.size > READ_AT_OPEN_MAX)?;
    reading_only(flags).then(|| (a.size - READ_AT_OPEN_TAIL) & !4095)
}

/// Files whose bytes are kept at once (a walk opens one at a time; each is used within
/// microseconds of its open, or never; a read-ahead keeps at most
/// [`super::files_ahead::AHEAD`] ahead of it).
const KEPT_MAX: usize = 64;

/// How long the bytes wait for the kernel's READ.
const KEPT_FOR: Duration = Duration::from_secs(2);

struct Early {
    /// Taken before the READ was sent.
    since: Stamp,
    data: Vec<u8>,
    /// `data` runs to the end of the file.
    eof: bool,
    /// A larger file's last bytes, from this offset to the end of the file.
    tail: Option<(u64, Vec<u8>)>,
    at: Instant,
}

/// The bytes read with opens, by file ([module docs](self)).
pub(super) struct ReadAtOpen {
    by_fh: HashMap<FileHandle, Early>,
    /// The last page, written in part, of files this mount made new and wrote from their
    /// start ([`super::kept_pages`]): from what offset, and taken when. At most
    /// [`LAST_PAGES_MAX`], the earliest kept going first (one is kept at the release of every
    /// file a build or `cp -r` writes, under the mount's table lock: no scan).
    last_pages: Bounded<FileHandle, (Stamp, u64, Vec<u8>)>,
}

impl Default for ReadAtOpen {
    fn default() -> ReadAtOpen {
        ReadAtOpen {
            by_fh: HashMap::new(),
            last_pages: Bounded::with_max(LAST_PAGES_MAX),
        }
    }
}

/// Last pages kept at once (at most a page each): a build writes many files before it reads
/// them back.
const LAST_PAGES_MAX: usize = 1024;

/// Whether an open with `flags` is for reading only (no truncation).
pub(super) fn reading_only(flags: OpenFlags) -> bool {
    flags.0 & libc::O_ACCMODE == libc::O_RDONLY && flags.0 & libc::O_TRUNC == 0
}

/// How much to read with an open of `flags` of a file with attributes `a`: None unless it is
/// a regular file opened for reading only (no truncation) and at most [`READ_AT_OPEN_MAX`]
/// long.
pub(super) fn wanted(flags: OpenFlags, a: &Attr) -> Option<u32> {
    (reading_only(flags) && a.ftype == FileType::Regular && a.size <= READ_AT_OPEN_MAX)
        .then(|| u32::try_from(a.size).unwrap_or(u32::MAX).max(1))
}

/// How much to read with an open of `flags` of a file with attributes `a` (None: not
/// known): the whole file where [`wanted`] says so, else the first [`READ_AT_OPEN_PREFIX`]
/// bytes of a regular file (or one of unknown type: the kernel opens only regular files
/// through the mount) opened for reading only.
pub(super) fn wanted_at_open(flags: OpenFlags, a: Option<&Attr>) -> Option<u32> {
    match a {
        Some(a) if a.ftype != FileType::Regular => None,
        Some(a) if a.size <= READ_AT_OPEN_MAX => wanted(flags, a),
        _ => reading_only(flags).then_some(READ_AT_OPEN_PREFIX),
    }
}

impl ServerMount {
    /// The server's answer to an `open` of `ino` with `flags` by `c`'s user (the access
    /// `bits` it needs), with the file's bytes read in the same flight when they are
    /// [`wanted`], kept for the kernel's READs.
    pub(super) async fn check_open(
        &self,
        c: &Client,
        ino: fuser::INodeNo,
        flags: OpenFlags,
        bits: u32,
    ) -> Result<(), fuser::Errno> {
        let fh = self.fh(ino)?;
        let cache = self.client.cache();
        // Nothing to read: not wanted, or read ahead along a listing already.
        let attr = cache.get(&fh);
        let wanted_size = wanted_at_open(flags, attr.as_ref());
        let Some(size) = wanted_size.filter(|_| !self.kept_from_open(&fh)) else {
            return self.check_access(c, ino, bits).await;
        };
        let since = cache.stamp();
        let tail_at = tail_start(flags, attr.as_ref());
        let tail = async {
            let at = tail_at?;
            let len = u32::try_from(attr?.size - at).ok()?;
            // Only a tail that reached the end of the file (it did not grow meanwhile).
            match c.read(&fh, at, len).await {
                Ok((data, true)) => Some((at, data.to_vec())),
                _ => None,
            }
        };
        let (granted, read, tail) =
            tokio::join!(self.check_access(c, ino, bits), c.read(&fh, 0, size), tail);
        if granted.is_ok()
            && let Ok((data, eof)) = read.map_err(errno)
        {
            self.table()
                .read_at_open
                .keep(fh, since, data.to_vec(), eof, tail);
        }
        granted
    }

    /// The answer to the kernel's READ of `size` bytes at `offset` of `ino` from bytes read
    /// with its open, if they hold it and are still the file's.
    pub(super) fn read_from_open(&self, ino: u64, offset: u64, size: u32) -> Option<Vec<u8>> {
        if self.behind.busy(ino) {
            return None;
        }
        let fh = self.fh(fuser::INodeNo(ino)).ok()?;
        let cache = self.client.cache();
        let mut t = self.table();
        let early =
            (t.read_at_open).take(&fh, offset, size, |since| !cache.changed_since(&fh, since));
        // A last page serves while the file's attributes are cached under their lease (an
        // INVALIDATE would end it) and nothing changed it since.
        early.or_else(|| {
            t.read_at_open.take_last_page(&fh, offset, size, |since| {
                cache.get(&fh).is_some() && !cache.changed_since(&fh, since)
            })
        })
    }

    /// Whether bytes of `fh` are kept that are still the file's.
    pub(super) fn kept_from_open(&self, fh: &FileHandle) -> bool {
        let cache = self.client.cache();
        self.table()
            .read_at_open
            .holds(fh, |since| !cache.changed_since(fh, since))
    }
}

impl ReadAtOpen {
    /// Keeps `data` (from offset 0; `eof`: to the end) read from `fh` by a READ stamped
    /// `since`.
    pub(super) fn keep(
        &mut self,
        fh: FileHandle,
        since: Stamp,
        data: Vec<u8>,
        eof: bool,
        tail: Option<(u64, Vec<u8>)>,
    ) {
        let now = Instant::now();
        self.by_fh
            .retain(|_, e| now.duration_since(e.at) < KEPT_FOR);
        if self.by_fh.len() >= KEPT_MAX
            && let Some(oldest) = self.by_fh.iter().min_by_key(|(_, e)| e.at).map(|(k, _)| *k)
        {
            self.by_fh.remove(&oldest);
        }
        let at = now;
        self.by_fh.insert(
            fh,
            Early {
                since,
                data,
                eof,
                tail,
                at,
            },
        );
    }

    /// Keeps `bytes`, the last page of `fh` from offset `at` to the end of the file, as of
    /// stamp `since` ([`super::kept_pages`]). The oldest go past [`LAST_PAGES_MAX`].
    pub(super) fn keep_last_page(&mut self, fh: FileHandle, since: Stamp, at: u64, bytes: Vec<u8>) {
        self.last_pages.keep(fh, (since, at, bytes));
    }

    /// The answer to a READ of `size` bytes at `offset` of `fh` from its kept last page, if
    /// the READ starts in it and `unchanged(since)` says it is still the file's; the page
    /// goes either way once asked for (the kernel keeps what it read).
    pub(super) fn take_last_page(
        &mut self,
        fh: &FileHandle,
        offset: u64,
        size: u32,
        unchanged: impl FnOnce(Stamp) -> bool,
    ) -> Option<Vec<u8>> {
        let (since, at, bytes) = self.last_pages.take(fh)?;
        to_end(at, &bytes, offset, size).filter(|_| unchanged(since))
    }

    /// Whether bytes of `fh` are kept that `unchanged(since)` says are still the file's.
    pub(super) fn holds(&self, fh: &FileHandle, unchanged: impl FnOnce(Stamp) -> bool) -> bool {
        self.by_fh
            .get(fh)
            .is_some_and(|e| e.at.elapsed() < KEPT_FOR && unchanged(e.since))
    }

    /// The answer to a READ of `size` bytes at `offset` of `fh`, if the kept bytes hold it
    /// whole (or up to the end of the file) and `unchanged(since)` says they are still the
    /// file's. Kept bytes that cannot serve go.
    pub(super) fn take(
        &mut self,
        fh: &FileHandle,
        offset: u64,
        size: u32,
        unchanged: impl FnOnce(Stamp) -> bool,
    ) -> Option<Vec<u8>> {
        let e = self.by_fh.remove(fh)?;
        if e.at.elapsed() >= KEPT_FOR || !unchanged(e.since) {
            return None;
        }
        if let Some(answer) = from_tail(&e, offset, size) {
            // The start stays for a read of it after.
            self.by_fh.insert(*fh, e);
            return Some(answer);
        }
        let start = usize::try_from(offset)
            .ok()
            .filter(|s| *s <= e.data.len())?;
        let end = start.saturating_add(size as usize);
        let answer = match (end <= e.data.len(), e.eof) {
            (true, _) => e.data[start..end].to_vec(),
            (false, true) => e.data[start..].to_vec(),
            (false, false) => return None,
        };
        // Kept for the READs after, unless this one read to the end (of the start, with no
        // tail left to serve).
        if end < e.data.len() || e.tail.is_some() {
            self.by_fh.insert(*fh, e);
        }
        Some(answer)
    }
}

/// A READ of `size` bytes at `offset` answered from the tail of `e`, which runs to the end
/// of the file.
fn from_tail(e: &Early, offset: u64, size: u32) -> Option<Vec<u8>> {
    let (at, tail) = e.tail.as_ref()?;
    to_end(*at, tail, offset, size)
}

/// A READ of `size` bytes at `offset` answered from `bytes`, the file's from `at` to its
/// end: whatever of the range lies before the end (less at the end is the end), if the READ
/// starts in them.
fn to_end(at: u64, bytes: &[u8], offset: u64, size: u32) -> Option<Vec<u8>> {
    let start = usize::try_from(offset.checked_sub(at)?).ok()?;
    if start > bytes.len() {
        return None;
    }
    let end = start.saturating_add(size as usize).min(bytes.len());
    Some(bytes[start..end].to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(ftype: FileType, size: u64) -> Attr {
        Attr {
            ftype,
            size,
            ..crate::fuse::placeholder_dir()
        }
    }

    #[test]
    fn only_small_regular_files_opened_for_reading() {
        let small = attr(FileType::Regular, 5000);
        assert_eq!(wanted(OpenFlags(libc::O_RDONLY), &small), Some(5000));
        assert_eq!(
            wanted(OpenFlags(libc::O_RDONLY), &attr(FileType::Regular, 0)),
            Some(1)
        );
        assert_eq!(wanted(OpenFlags(libc::O_RDWR), &small), None);
        assert_eq!(wanted(OpenFlags(libc::O_WRONLY), &small), None);
        assert_eq!(
            wanted(OpenFlags(libc::O_RDONLY | libc::O_TRUNC), &small),
            None
        );
        assert_eq!(
            wanted(OpenFlags(libc::O_RDONLY), &attr(FileType::Directory, 10)),
            None
        );
        let big = attr(FileType::Regular, READ_AT_OPEN_MAX + 1);
        assert_eq!(wanted(OpenFlags(libc::O_RDONLY), &big), None);
    }

    /// With an open, of a larger file or one of unknown size, its first bytes.
    #[test]
    fn an_open_reads_the_start_of_a_larger_or_unknown_file() {
        let reading = OpenFlags(libc::O_RDONLY);
        let small = attr(FileType::Regular, 5000);
        assert_eq!(wanted_at_open(reading, Some(&small)), Some(5000));
        let big = attr(FileType::Regular, READ_AT_OPEN_MAX + 1);
        assert_eq!(
            wanted_at_open(reading, Some(&big)),
            Some(READ_AT_OPEN_PREFIX)
        );
        assert_eq!(wanted_at_open(reading, None), Some(READ_AT_OPEN_PREFIX));
        for flags in [libc::O_RDWR, libc::O_WRONLY, libc::O_RDONLY | libc::O_TRUNC] {
            assert_eq!(wanted_at_open(OpenFlags(flags), Some(&big)), None);
            assert_eq!(wanted_at_open(OpenFlags(flags), None), None);
        }
        let dir = attr(FileType::Directory, 10);
        assert_eq!(wanted_at_open(reading, Some(&dir)), None);
        let big_dir = attr(FileType::Directory, READ_AT_OPEN_MAX + 1);
        assert_eq!(wanted_at_open(reading, Some(&big_dir)), None);
    }

    #[test]
    fn kept_bytes_answer_reads_they_hold_while_the_file_is_unchanged() {
        let fh = &FileHandle::from_bytes([4; 48]);
        let other = &FileHandle::from_bytes([5; 48]);
        let cache = crate::cache::AttrCache::default();
        let since = cache.stamp();
        let mut r = ReadAtOpen::default();
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        r.keep(*fh, since, data.clone(), true, None);
        assert!(r.holds(fh, |_| true) && !r.holds(other, |_| true));
        assert!(!r.holds(fh, |s| s != since), "changed since");
        assert_eq!(r.take(other, 0, 4096, |_| true), None, "another file");
        assert_eq!(
            r.take(fh, 0, 4096, |_| true).as_deref(),
            Some(&data[..4096])
        );
        assert_eq!(
            r.take(fh, 4096, 65536, |_| true).as_deref(),
            Some(&data[4096..]),
            "to the end of the file"
        );
        assert_eq!(r.take(fh, 0, 10, |_| true), None, "read to the end: gone");
        assert!(!r.holds(fh, |_| true));

        r.keep(*fh, since, data.clone(), false, None);
        assert_eq!(
            r.take(fh, 8192, 4096, |_| true),
            None,
            "past what was read, not the end"
        );
        r.keep(*fh, since, data, true, None);
        assert_eq!(r.take(fh, 0, 10, |s| s != since), None, "changed since");
        assert_eq!(r.take(fh, 0, 10, |_| true), None, "and dropped");
    }

    /// A larger file's tail answers reads from its first byte to the end of the file, the
    /// start stays kept for a read of it after, and a read between the two is not answered.
    #[test]
    fn the_tail_answers_reads_at_the_end_of_the_file() {
        let fh = &FileHandle::from_bytes([6; 48]);
        let cache = crate::cache::AttrCache::default();
        let since = cache.stamp();
        let mut r = ReadAtOpen::default();
        let head: Vec<u8> = (0..100u32).map(|i| i as u8).collect();
        let tail: Vec<u8> = (0..50u32).map(|i| (i + 1) as u8).collect();
        r.keep(*fh, since, head.clone(), false, Some((1000, tail.clone())));
        assert_eq!(r.take(fh, 1000, 20, |_| true).as_deref(), Some(&tail[..20]));
        assert_eq!(
            r.take(fh, 1040, 4096, |_| true).as_deref(),
            Some(&tail[40..]),
            "short at the end of the file"
        );
        assert_eq!(
            r.take(fh, 1050, 10, |_| true).as_deref(),
            Some(&[][..]),
            "at the end"
        );
        assert_eq!(r.take(fh, 0, 10, |_| true).as_deref(), Some(&head[..10]));
        assert_eq!(r.take(fh, 90, 10, |_| true).as_deref(), Some(&head[90..]));
        assert_eq!(
            r.take(fh, 1000, 4, |_| true).as_deref(),
            Some(&tail[..4]),
            "still kept"
        );
        assert_eq!(r.take(fh, 500, 10, |_| true), None, "between the two");
        assert!(!r.holds(fh, |_| true), "and dropped");
        r.keep(*fh, since, head, false, Some((1000, tail)));
        assert_eq!(r.take(fh, 1000, 4, |s| s != since), None, "changed since");
        assert_eq!(r.take(fh, 1051, 4, |_| true), None, "past the end");
    }

    #[test]
    fn a_tail_is_read_only_of_a_file_longer_than_what_is_read_whole() {
        let reading = OpenFlags(libc::O_RDONLY);
        let size = READ_AT_OPEN_MAX + 5000;
        let big = attr(FileType::Regular, size);
        let at = tail_start(reading, Some(&big)).unwrap();
        assert_eq!(at % 4096, 0, "on a page boundary");
        assert!(at <= size - READ_AT_OPEN_TAIL && at > size - READ_AT_OPEN_TAIL - 4096);
        let small = attr(FileType::Regular, READ_AT_OPEN_MAX);
        assert_eq!(tail_start(reading, Some(&small)), None);
        assert_eq!(tail_start(reading, None), None, "size not known");
        assert_eq!(tail_start(OpenFlags(libc::O_RDWR), Some(&big)), None);
    }

    /// A kept last page answers a READ from its start to the end of the file, once, while
    /// the file is unchanged; the oldest go past the bound.
    #[test]
    fn a_last_page_answers_the_read_of_it_once() {
        let fh = FileHandle::from_bytes([7; 48]);
        let cache = crate::cache::AttrCache::default();
        let mut r = ReadAtOpen::default();
        r.keep_last_page(fh, cache.stamp(), 8192, vec![9; 100]);
        assert_eq!(
            r.take_last_page(&fh, 4096, 4096, |_| true),
            None,
            "before it"
        );
        r.keep_last_page(fh, cache.stamp(), 8192, vec![9; 100]);
        assert_eq!(
            r.take_last_page(&fh, 8192, 4096, |_| true),
            Some(vec![9; 100]),
            "to the end of the file"
        );
        assert_eq!(r.take_last_page(&fh, 8192, 4096, |_| true), None, "once");
        r.keep_last_page(fh, cache.stamp(), 8192, vec![9; 100]);
        assert_eq!(
            r.take_last_page(&fh, 8292, 4096, |_| true),
            Some(vec![]),
            "at the end of the file: nothing more"
        );
        r.keep_last_page(fh, cache.stamp(), 8192, vec![9; 100]);
        assert_eq!(r.take_last_page(&fh, 8293, 4096, |_| true), None, "past it");
        r.keep_last_page(fh, cache.stamp(), 8192, vec![9; 100]);
        assert_eq!(r.take_last_page(&fh, 8192, 10, |_| false), None, "changed");
        for i in 0..LAST_PAGES_MAX + 5 {
            let mut bytes = [0u8; 48];
            bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
            r.keep_last_page(FileHandle::from_bytes(bytes), cache.stamp(), 0, vec![1]);
        }
        assert_eq!(r.last_pages.len(), LAST_PAGES_MAX);
    }

    /// The earliest kept goes first when full, and pages taken leave the keeping order
    /// bounded.
    #[test]
    fn last_pages_go_in_the_order_kept_and_their_order_stays_bounded() {
        let cache = crate::cache::AttrCache::default();
        let mut r = ReadAtOpen::default();
        let fh = |i: usize| {
            let mut bytes = [0u8; 48];
            bytes[..8].copy_from_slice(&(i as u64).to_le_bytes());
            FileHandle::from_bytes(bytes)
        };
        for i in 0..LAST_PAGES_MAX {
            r.keep_last_page(fh(i), cache.stamp(), 0, vec![1]);
        }
        // File 0 kept again: now the latest, so file 1 is the earliest.
        r.keep_last_page(fh(0), cache.stamp(), 0, vec![2]);
        r.keep_last_page(fh(LAST_PAGES_MAX), cache.stamp(), 0, vec![3]);
        let mut take = |i| r.take_last_page(&fh(i), 0, 1, |_| true);
        assert_eq!(take(1), None, "the earliest kept went");
        assert_eq!(take(0), Some(vec![2]), "kept again: the latest page");
        assert_eq!(take(2), Some(vec![1]));
        assert_eq!(take(LAST_PAGES_MAX), Some(vec![3]));
        // A build keeping and taking back page after page.
        for i in 0..10 * LAST_PAGES_MAX {
            r.keep_last_page(fh(i), cache.stamp(), 0, vec![1]);
            assert_eq!(r.take_last_page(&fh(i), 0, 1, |_| true), Some(vec![1]));
        }
        assert!(r.last_pages.places() <= 2 * LAST_PAGES_MAX + 1);
        assert!(r.last_pages.len() < LAST_PAGES_MAX);
    }

    #[test]
    fn at_most_kept_max_files_are_kept() {
        let cache = crate::cache::AttrCache::default();
        let mut r = ReadAtOpen::default();
        let fh = |i: usize| FileHandle::from_bytes([i as u8; 48]);
        for i in 0..(KEPT_MAX + 10) {
            r.keep(fh(i), cache.stamp(), vec![1], true, None);
        }
        assert_eq!(r.by_fh.len(), KEPT_MAX);
        assert!(
            r.take(&fh(KEPT_MAX + 9), 0, 1, |_| true).is_some(),
            "the newest stays"
        );
    }
}
