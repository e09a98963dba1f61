//! The short operations a worker may run itself instead of handing them to a storage thread:
//! metadata, and small WRITEs.
//!
//! A request handed to a storage thread costs two thread wake-ups on top of the operation (the
//! storage thread, then a worker again for color 0's bookkeeping): on the machines measured
//! that was most of a `chmod`'s round trip (sfsd's context switches per SETATTR 7 to 3.4, its
//! CPU 136-168 to 91-100 us, the round trip through a mount 320-385 to 203-247 us). The
//! operations below touch one object or one directory entry of a local file system, which the
//! kernel answers from its dentry and inode caches in microseconds; they run on the worker, in
//! the connection's color, with the request's credentials switched for their duration exactly
//! as on a storage thread.
//!
//! A small unstable WRITE ([`WRITE_INLINE_MAX`]) runs inline too: into the page cache it is a
//! copy, and it is what a new file's `close` waits for (`cp`, `tar x`, a compiler's output;
//! sfsd's CPU in a `cp -r` of 8,700 files went from 2.45-2.72 s to 2.16-2.27 s). Two ways it
//! could take long are kept off the worker: a page it covers only in part that holds data (the
//! kernel would first read it from disk) makes it refuse and go to a thread
//! ([`reads_no_page`]), and while the kernel throttles writers (dirty pages past its limit: a
//! `write` then sleeps) one inline WRITE over [`SLOW_WRITE`] sends the WRITEs of the next
//! [`SLOW_WRITE_COOLDOWN`] to the threads ([`SlowWrites`]).
//!
//! So does a listing of a small directory (READDIR, READDIRPLUS, LISTDIR of at most
//! [`LIST_INLINE_MAX`] entries): a walk (`find`, `ls -R`, the mount reading listings ahead)
//! asks one per directory, most directories of a source tree are that small, and each
//! listing handed to a storage thread cost two thread wake-ups besides its `getdents` and
//! one `statx` (and `llistxattr`) per entry. A listing that meets one entry more refuses
//! ([`refused`]) and runs again, whole, on a storage thread: it has changed nothing, and
//! what it did inline is bounded by those entries.
//!
//! RENAME too (git renames its lock files over the files they replace, editors and `rsync`
//! a temporary file over each file they write).
//!
//! What may take long stays on the storage threads: data (READ from disk, larger or synced
//! WRITEs, COMMIT's `fsync`), truncation (SETATTR of the size frees blocks), larger listings
//! and extended attributes. Two things an inline operation finds out only once it runs, and
//! then refuses before changing anything ([`refused`]), so that it runs again on a storage
//! thread: a handle the inode index does not know (resolving it walks the export), and a
//! REMOVE of the last name of a file over [`FREED_INLINE_MAX`], or a RENAME replacing one
//! (the kernel frees its blocks in the `unlink` or `rename`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use protocol::{RequestOp, StableHow};

/// The largest file whose last name a worker removes itself: freeing its blocks is quick.
pub(super) const FREED_INLINE_MAX: u64 = 1 << 20;

thread_local! {
    /// Set while an operation runs inline: it must not start long work.
    static INLINE: Cell<bool> = const { Cell::new(false) };
    /// Set when long work was refused because of [`INLINE`].
    static REFUSED: Cell<bool> = const { Cell::new(false) };
}

/// The most entries a listing a worker runs itself may have (more: a storage thread lists the
/// directory).
pub(super) const LIST_INLINE_MAX: usize = 32;

/// The largest unstable WRITE a worker does itself.
pub(super) const WRITE_INLINE_MAX: usize = 64 * 1024;
/// An inline WRITE that took longer than this (the kernel throttled it) ...
const SLOW_WRITE: Duration = Duration::from_millis(1);
/// ... sends WRITEs to the storage threads for this long.
const SLOW_WRITE_COOLDOWN: Duration = Duration::from_secs(1);
/// The kernel's page: the unit it reads before writing part of one.
fn page() -> u64 {
    rustix::param::page_size() as u64
}

/// Whether WRITEs may run inline now: not for a while after one that did was slow.
pub(super) struct SlowWrites {
    origin: Instant,
    /// Microseconds after `origin` before which WRITEs go to the storage threads.
    inline_after: AtomicU64,
}

impl Default for SlowWrites {
    fn default() -> Self {
        SlowWrites {
            origin: Instant::now(),
            inline_after: AtomicU64::new(0),
        }
    }
}

impl SlowWrites {
    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.origin).as_micros()).unwrap_or(u64::MAX)
    }

    /// Whether WRITEs go to the storage threads at `now`.
    pub(super) fn cooling(&self, now: Instant) -> bool {
        self.micros(now) < self.inline_after.load(Ordering::Relaxed)
    }

    /// An inline WRITE that ended at `now` took `took`: if that was slow, WRITEs go to the
    /// storage threads for the next [`SLOW_WRITE_COOLDOWN`].
    pub(super) fn took(&self, took: Duration, now: Instant) {
        if took > SLOW_WRITE {
            let until = self.micros(now + SLOW_WRITE_COOLDOWN);
            self.inline_after.fetch_max(until, Ordering::Relaxed);
            tracing::debug!(
                ?took,
                "a write was slow: writes go to the storage threads for 1 s"
            );
        }
    }
}

/// Whether `op` is one a worker may run itself (see the module's doc).
pub(super) fn runs_inline(op: &RequestOp) -> bool {
    match op {
        RequestOp::Write { data, stable, .. } => {
            *stable == StableHow::Unstable && data.len() <= WRITE_INLINE_MAX
        }
        RequestOp::GetAttr { .. }
        | RequestOp::Access { .. }
        | RequestOp::Lookup { .. }
        | RequestOp::ReadLink { .. }
        | RequestOp::Create { .. }
        | RequestOp::Mkdir { .. }
        | RequestOp::Symlink { .. }
        | RequestOp::Remove { .. }
        | RequestOp::Rmdir { .. }
        | RequestOp::Rename { .. }
        | RequestOp::Rename2 { .. }
        | RequestOp::ReadDir { .. }
        | RequestOp::ReadDirPlus { .. }
        | RequestOp::ListDir { .. } => true,
        RequestOp::SetAttr { attr, .. } => attr.size.is_none(),
        _ => false,
    }
}

/// Whether writing `len` bytes at `offset` of a file of `size` bytes leaves no page the kernel
/// must read first: each page it touches is covered whole, or what it does not cover lies
/// past the end of the file (or past the end of the write, which becomes the new end).
pub(super) fn reads_no_page(offset: u64, len: u64, size: u64) -> bool {
    let page = page();
    let end = offset.saturating_add(len);
    let first_page = offset - offset % page;
    let head_kept = !offset.is_multiple_of(page) && first_page < size;
    let tail_kept = !end.is_multiple_of(page) && end < size;
    !head_kept && !tail_kept
}

/// Whether the calling operation runs inline.
pub(super) fn running_inline() -> bool {
    INLINE.with(Cell::get)
}

/// Runs `f` inline, long work refused: None if `f` refused some (its result, an error it
/// returned before changing anything, is dropped: the caller runs the operation again on a
/// storage thread).
pub(super) fn only_short<T>(f: impl FnOnce() -> T) -> Option<T> {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            INLINE.with(|w| w.set(false));
        }
    }
    INLINE.with(|w| w.set(true));
    REFUSED.with(|r| r.set(false));
    let _reset = Reset;
    let out = f();
    if REFUSED.with(|r| r.replace(false)) {
        None
    } else {
        Some(out)
    }
}

/// Called where an operation is about to start long work, before it changes anything: true
/// (and the refusal noted) when it runs inline and must not; it then returns at once with
/// any error.
pub(super) fn refused() -> bool {
    if INLINE.with(Cell::get) {
        REFUSED.with(|r| r.set(true));
        true
    } else {
        false
    }
}

#[cfg(test)]
mod tests {
    use protocol::{ReplyBody, SetAttr, StableHow};

    use super::*;
    use crate::fs::BlockingStorage;
    use crate::fs::local::testing::{backend, ctx, open};

    fn set(mode: Option<u32>, size: Option<u64>) -> SetAttr {
        SetAttr {
            mode,
            size,
            ..SetAttr::default()
        }
    }

    #[test]
    fn short_metadata_runs_inline_and_data_truncation_and_removal_do_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"12345").unwrap();
        let (fs, fh) = backend(dir.path(), "f");
        let c = ctx();
        let getattr = fs.execute_inline(&c, &RequestOp::GetAttr { fh });
        assert!(matches!(
            getattr.map(|o| o.result),
            Some(Ok(ReplyBody::GetAttr { .. }))
        ));
        let chmod = RequestOp::SetAttr {
            fh,
            attr: set(Some(0o600), None),
            guard: None,
        };
        let out = fs.execute_inline(&c, &chmod).expect("a chmod runs inline");
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert_eq!(
            out.changed.len(),
            1,
            "lease holders are told, as from a storage thread"
        );
        let mode = std::fs::metadata(dir.path().join("f")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        let never_inline = [
            RequestOp::SetAttr {
                fh,
                attr: set(None, Some(0)),
                guard: None,
            },
            RequestOp::Write {
                fh,
                offset: 0,
                stable: StableHow::FileSync,
                data: b"x".to_vec().into(),
            },
            RequestOp::Write {
                fh,
                offset: 0,
                stable: StableHow::DataSync,
                data: b"x".to_vec().into(),
            },
            RequestOp::Commit {
                fh,
                offset: 0,
                count: 0,
            },
        ];
        for op in never_inline {
            assert!(fs.execute_inline(&c, &op).is_none(), "{op:?}");
        }
        assert_eq!(
            std::fs::read(dir.path().join("f")).unwrap(),
            b"12345",
            "untouched"
        );
    }

    fn rename(dir: protocol::FileHandle, from: &str, to: &str) -> RequestOp {
        RequestOp::Rename {
            from_dir: dir,
            from_name: from.as_bytes().to_vec(),
            to_dir: dir,
            to_name: to.as_bytes().to_vec(),
        }
    }

    /// A RENAME runs inline, unless it replaces the last name of a file over
    /// [`FREED_INLINE_MAX`]: that one refuses before renaming anything, and the storage
    /// thread's run does it. Replacing one of two names of such a file frees nothing: inline.
    #[test]
    fn renames_run_inline_unless_they_free_a_large_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("a"), b"new").unwrap();
        let big = std::fs::File::create(d.join("big")).unwrap();
        big.set_len(FREED_INLINE_MAX + 1).unwrap();
        let (fs, fh) = backend(dir.path(), "d");
        let c = ctx();
        let out = fs
            .execute_inline(&c, &rename(fh, "a", "b"))
            .expect("a rename to a free name runs inline");
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert!(!d.join("a").exists() && d.join("b").exists());
        assert!(fs.execute_inline(&c, &rename(fh, "b", "big")).is_none());
        assert_eq!(
            std::fs::read(d.join("b")).unwrap(),
            b"new",
            "nothing renamed"
        );
        assert_eq!(
            std::fs::metadata(d.join("big")).unwrap().len(),
            FREED_INLINE_MAX + 1
        );
        std::fs::hard_link(d.join("big"), d.join("big2")).unwrap();
        let out = fs
            .execute_inline(&c, &rename(fh, "b", "big"))
            .expect("a name of a file with another runs inline");
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert_eq!(std::fs::read(d.join("big")).unwrap(), b"new");
        std::fs::write(d.join("c"), b"third").unwrap();
        let out = fs.execute(&c, rename(fh, "c", "big2"));
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert_eq!(std::fs::read(d.join("big2")).unwrap(), b"third");
    }

    fn listdir(dir: protocol::FileHandle) -> RequestOp {
        RequestOp::ListDir {
            dir,
            cookie: 0,
            verifier: [0; 8],
            dircount: 64 << 10,
            maxcount: 256 << 10,
        }
    }

    fn listed(out: &crate::fs::Outcome) -> usize {
        match &out.result {
            Ok(ReplyBody::ListDir { page, .. }) => page.entries.len(),
            other => panic!("{other:?}"),
        }
    }

    /// A directory of [`LIST_INLINE_MAX`] entries is listed inline (its entries leased, as
    /// from a storage thread); one entry more and the listing refuses, and the storage
    /// thread's run lists them all.
    #[test]
    fn small_listings_run_inline_and_larger_ones_on_a_thread() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("d");
        std::fs::create_dir(&d).unwrap();
        for i in 0..LIST_INLINE_MAX {
            std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
        }
        let (fs, fh) = backend(dir.path(), "d");
        let c = ctx();
        let out = fs
            .execute_inline(&c, &listdir(fh))
            .expect("a small directory is listed inline");
        assert_eq!(listed(&out), LIST_INLINE_MAX);
        assert_eq!(
            out.leased.len(),
            LIST_INLINE_MAX + 1,
            "the directory and each entry"
        );
        std::fs::write(d.join("one-more"), b"x").unwrap();
        assert!(fs.execute_inline(&c, &listdir(fh)).is_none());
        let out = fs.execute(&c, listdir(fh));
        assert_eq!(listed(&out), LIST_INLINE_MAX + 1);
    }

    fn write(fh: protocol::FileHandle, offset: u64, data: &[u8]) -> RequestOp {
        RequestOp::Write {
            fh,
            offset,
            stable: StableHow::Unstable,
            data: data.to_vec().into(),
        }
    }

    /// A small unstable WRITE runs inline and is answered as from a storage thread; one over
    /// [`WRITE_INLINE_MAX`] does not; one covering part of a page that holds data gives up
    /// before writing (the kernel would read the page from disk), and the storage thread's run
    /// writes it.
    #[test]
    fn small_writes_run_inline_unless_a_page_must_be_read_first() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let (fs, fh) = backend(dir.path(), "f");
        let c = ctx();
        let out = fs
            .execute_inline(&c, &write(fh, 0, &[b'a'; 6000]))
            .expect("a new file's data is written inline");
        assert!(
            matches!(out.result, Ok(ReplyBody::Write { count: 6000, .. })),
            "{:?}",
            out.result
        );
        assert_eq!(out.changed.len(), 1, "lease holders are told");
        let big = vec![b'b'; WRITE_INLINE_MAX + 1];
        assert!(fs.execute_inline(&c, &write(fh, 0, &big)).is_none());
        let read = || std::fs::read(dir.path().join("f")).unwrap();
        assert_eq!(read().len(), 6000, "nothing written by the refused WRITE");
        // Bytes 100..110 of page 0, which holds data on both sides of them.
        assert!(
            fs.execute_inline(&c, &write(fh, 100, b"0123456789"))
                .is_none()
        );
        assert_eq!(read(), vec![b'a'; 6000], "nothing written inline");
        let out = fs.execute(&c, write(fh, 100, b"0123456789"));
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert_eq!(&read()[95..115], b"aaaaa0123456789aaaaa");
        // Whole pages, and a tail reaching past the end of the file, run inline again, up to
        // the largest inline WRITE.
        let p = page() as usize;
        assert!(
            fs.execute_inline(&c, &write(fh, p as u64, &big[..p]))
                .is_some()
        );
        assert_eq!(read().len(), 2 * p);
        let most = &big[..WRITE_INLINE_MAX];
        assert!(fs.execute_inline(&c, &write(fh, 0, most)).is_some());
        assert_eq!(read().len(), WRITE_INLINE_MAX.max(2 * p));
    }

    #[test]
    fn a_write_reads_no_page_when_what_it_leaves_of_each_page_is_past_the_end() {
        let p = page();
        // Whole pages.
        assert!(reads_no_page(0, p, 10 * p));
        assert!(reads_no_page(3 * p, 2 * p, 10 * p));
        // A new or empty file, anywhere.
        assert!(reads_no_page(0, 10, 0));
        assert!(reads_no_page(5 * p + 7, 10, 0));
        // The head of the first page holds data.
        assert!(!reads_no_page(1, p - 1, 10 * p));
        assert!(!reads_no_page(p + 1, 10, p + 2));
        // ... unless that page begins at or past the end.
        assert!(reads_no_page(p + 1, 10, p));
        // The tail of the last page holds data, unless the write reaches the end.
        assert!(!reads_no_page(0, 10, 11));
        assert!(reads_no_page(0, 10, 10));
        assert!(reads_no_page(0, 10, 9));
        // An append at an unaligned end keeps the page's head: read.
        assert!(!reads_no_page(100, 10, 100));
        assert!(reads_no_page(u64::MAX - 1, 10, 0), "no overflow");
    }

    /// An inline WRITE over [`SLOW_WRITE`] sends WRITEs to the storage threads for
    /// [`SLOW_WRITE_COOLDOWN`], then they run inline again; other operations are not affected.
    #[test]
    fn a_slow_write_sends_writes_to_the_threads_for_a_while() {
        let slow = SlowWrites::default();
        let t = Instant::now();
        slow.took(SLOW_WRITE, t);
        assert!(!slow.cooling(t), "not slow at the bound");
        slow.took(SLOW_WRITE + Duration::from_micros(1), t);
        assert!(slow.cooling(t));
        assert!(slow.cooling(t + SLOW_WRITE_COOLDOWN - Duration::from_millis(1)));
        assert!(!slow.cooling(t + SLOW_WRITE_COOLDOWN + Duration::from_millis(1)));

        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"").unwrap();
        let (fs, fh) = backend(dir.path(), "f");
        fs.slow_writes
            .took(SLOW_WRITE * 2, Instant::now() + Duration::from_secs(60));
        assert!(fs.execute_inline(&ctx(), &write(fh, 0, b"x")).is_none());
        assert!(
            fs.execute_inline(&ctx(), &RequestOp::GetAttr { fh })
                .is_some()
        );
    }

    /// Removing the last name of a small file runs inline; of a large one (the kernel frees
    /// its blocks in the unlink) it gives up before removing anything, and the storage
    /// thread's run removes it.
    #[test]
    fn only_small_files_are_removed_inline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/small"), b"x").unwrap();
        let big = std::fs::File::create(dir.path().join("d/big")).unwrap();
        big.set_len(FREED_INLINE_MAX + 1).unwrap();
        let (fs, d) = backend(dir.path(), "d");
        let remove = |name: &str| RequestOp::Remove {
            dir: d,
            name: name.as_bytes().to_vec(),
        };
        let out = fs.execute_inline(&ctx(), &remove("small")).expect("inline");
        assert!(
            matches!(out.result, Ok(ReplyBody::Remove { .. })),
            "{:?}",
            out.result
        );
        assert!(!dir.path().join("d/small").exists());
        assert!(fs.execute_inline(&ctx(), &remove("big")).is_none());
        assert!(dir.path().join("d/big").exists(), "nothing removed inline");
        let out = fs.execute(&ctx(), remove("big"));
        assert!(out.result.is_ok(), "{:?}", out.result);
        assert!(!dir.path().join("d/big").exists());
    }

    /// A handle the index does not know (here: a server restarted on the same export) needs a
    /// walk of the export, which never runs on a worker: the inline attempt gives up without
    /// walking (the index still does not know the handle after it), and the storage thread's
    /// run walks and answers.
    #[test]
    fn a_handle_the_index_does_not_know_is_never_walked_inline() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("d")).unwrap();
        std::fs::write(dir.path().join("d/f"), b"x").unwrap();
        let (_before, fh) = {
            let (fs, d) = backend(dir.path(), "d");
            let lookup = RequestOp::Lookup {
                dir: d,
                name: b"f".to_vec(),
            };
            match fs.execute(&ctx(), lookup).result {
                Ok(ReplyBody::Lookup { fh, .. }) => (fs, fh),
                other => panic!("{other:?}"),
            }
        };
        let restarted = open(dir.path());
        let getattr = RequestOp::GetAttr { fh };
        for _ in 0..2 {
            assert!(restarted.execute_inline(&ctx(), &getattr).is_none());
        }
        let out = restarted.execute(&ctx(), getattr.clone());
        assert!(
            matches!(out.result, Ok(ReplyBody::GetAttr { .. })),
            "{:?}",
            out.result
        );
        // Known now: inline from here on.
        assert!(restarted.execute_inline(&ctx(), &getattr).is_some());
    }
}
