//! The READ data path: what a connection keeps to answer READs from its own color.
//!
//! Most READs of a busy server are for data already in the page cache, from a file the same
//! user read a moment ago. For those the connection's color answers alone, as the paper's
//! server answered cached reads without waiting: a cached descriptor, one `preadv2` with
//! `RWF_NOWAIT` (which never blocks: it fails with `EAGAIN` instead of waiting for the disk)
//! straight into the record buffer, sealed in place, no other thread involved. Only a miss
//! goes to a storage thread: opening the file (as the user, where the kernel checks access)
//! or reading what the page cache does not hold.
//!
//! **Open files** are cached per connection and per authno (one authno is one user's
//! credentials for the connection's life), so a descriptor opened under one user's credentials
//! never serves another's request. An entry is dropped when the object changed, when anything
//! that can change access rights happened anywhere on the server (SETATTR, RENAME, REMOVE,
//! RMDIR: see [`crate::changes`]), and after [`OPEN_FILE_TTL`], which bounds how long a change
//! made outside sfsd (a local `chmod` on the server) can go unnoticed. Cached descriptors are
//! bounded per connection and server-wide ([`FileBudget`]), and counted in the descriptor
//! budget ([`crate::limits::reserved_fds`]).
//!
//! **Leases** for READ replies are decided here and recorded by color 0 *after* the reply is
//! queued, so a READ is not a round trip through color 0. Color 0 then checks that the object
//! did not change since the read started and that the grant fit the table; otherwise it sends
//! the reader an INVALIDATE, which ends the lease the reply announced. A lease this connection
//! already holds is reused without telling color 0 at all: the reply carries what remains of
//! it (never more), until half of it is gone.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use protocol::{Attr, FileHandle, HandleData, NfsStatus};

use crate::changes::{Changes, Epoch};
use crate::ids::ObjKey;

/// How long a cached descriptor may serve without being opened again.
pub(crate) const OPEN_FILE_TTL: Duration = Duration::from_secs(1);
/// Cached descriptors per connection.
pub(crate) const OPEN_FILES_PER_CONN: usize = 4;
/// Leases a connection remembers holding (beyond it, the memory is cleared: every READ then
/// asks color 0 again until it fills).
const LEASES_REMEMBERED: usize = 4096;

/// A server-wide bound on cached descriptors.
#[derive(Clone, Debug)]
pub(crate) struct FileBudget {
    used: Arc<AtomicUsize>,
    max: usize,
}

/// One descriptor's share of the budget, returned when dropped.
#[derive(Debug)]
struct BudgetToken(Arc<AtomicUsize>);

impl Drop for BudgetToken {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl FileBudget {
    pub(crate) fn new(max: usize) -> FileBudget {
        FileBudget {
            used: Arc::new(AtomicUsize::new(0)),
            max,
        }
    }

    fn take(&self) -> Option<BudgetToken> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .ok()
            .map(|_| BudgetToken(self.used.clone()))
    }

    /// Descriptors cached now, server-wide.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FileKey {
    authno: u32,
    handle: HandleData,
}

#[derive(Debug)]
struct CachedFile {
    file: Arc<File>,
    opened: Instant,
    /// The change log when the open was decided (before it happened).
    epoch: Epoch,
    _budget: BudgetToken,
}

#[derive(Debug, Clone, Copy)]
struct HeldLease {
    expires: Instant,
    /// The change log when the read that was granted it started.
    epoch: Epoch,
}

/// The lease a READ reply carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseChoice {
    pub ms: u32,
    /// Color 0 must record it (false when the reply reuses a lease already held).
    pub record: bool,
}

/// Per connection: cached descriptors and the leases it holds.
#[derive(Debug, Default)]
pub(crate) struct ReadState {
    files: HashMap<FileKey, CachedFile>,
    leases: HashMap<FileHandle, HeldLease>,
}

impl ReadState {
    /// The descriptor cached for this user and object, if it may still serve.
    pub(crate) fn cached_file(
        &mut self,
        authno: u32,
        handle: &HandleData,
        changes: &Changes,
    ) -> Option<Arc<File>> {
        let key = FileKey {
            authno,
            handle: *handle,
        };
        let entry = self.files.get(&key)?;
        let fresh = entry.opened.elapsed() < OPEN_FILE_TTL
            && !changes.access_changed_since(&entry.epoch)
            && !changes.object_changed_since(crate::fs::key_of(handle), &entry.epoch);
        if fresh {
            Some(entry.file.clone())
        } else {
            self.files.remove(&key);
            None
        }
    }

    /// Caches `file`, opened for `authno` after `epoch`, if the budgets allow.
    pub(crate) fn remember_file(
        &mut self,
        authno: u32,
        handle: &HandleData,
        file: Arc<File>,
        epoch: Epoch,
        budget: &FileBudget,
    ) {
        let key = FileKey {
            authno,
            handle: *handle,
        };
        self.files.remove(&key);
        if self.files.len() >= OPEN_FILES_PER_CONN {
            let oldest = self
                .files
                .iter()
                .min_by_key(|(_, e)| e.opened)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                self.files.remove(&k);
            }
        }
        let Some(token) = budget.take() else {
            return;
        };
        self.files.insert(
            key,
            CachedFile {
                file,
                opened: Instant::now(),
                epoch,
                _budget: token,
            },
        );
    }

    /// Closes descriptors that can no longer serve (called when the connection is quiet).
    pub(crate) fn sweep(&mut self) {
        self.files.retain(|_, e| e.opened.elapsed() < OPEN_FILE_TTL);
        let now = Instant::now();
        self.leases.retain(|_, l| l.expires > now);
    }

    /// Cached descriptors of this connection.
    #[cfg(test)]
    pub(crate) fn cached_files(&self) -> usize {
        self.files.len()
    }

    /// The lease to put in a READ reply for `fh` whose read starts at `epoch`: what remains of
    /// one this connection holds (if nothing changed since it was granted and at least half
    /// remains), else `offered_ms`, to be recorded by color 0. Time is an input (here and in
    /// [`ReadState::lease_announced`]) so the simulator drives it.
    pub(crate) fn lease_for(
        &self,
        now: Instant,
        fh: &FileHandle,
        key: ObjKey,
        offered_ms: u32,
        changes: &Changes,
    ) -> LeaseChoice {
        if let Some(held) = self.leases.get(fh)
            && !changes.object_changed_since(key, &held.epoch)
        {
            let left = held.expires.saturating_duration_since(now);
            let left_ms = u32::try_from(left.as_millis()).unwrap_or(u32::MAX);
            if left_ms > 0 && (offered_ms == 0 || left_ms >= offered_ms / 2) {
                return LeaseChoice {
                    ms: left_ms,
                    record: false,
                };
            }
        }
        LeaseChoice {
            ms: offered_ms,
            record: offered_ms > 0,
        }
    }

    /// A reply announced at `now` a lease of `ms` on `fh`, read from `epoch` on; color 0
    /// records it.
    pub(crate) fn lease_announced(&mut self, now: Instant, fh: FileHandle, ms: u32, epoch: Epoch) {
        if self.leases.len() >= LEASES_REMEMBERED {
            self.leases.clear();
        }
        self.leases.insert(
            fh,
            HeldLease {
                expires: now + Duration::from_millis(ms as u64),
                epoch,
            },
        );
    }

    /// The lease on `fh` ended (an INVALIDATE went out for it).
    pub(crate) fn lease_ended(&mut self, fh: &FileHandle) {
        self.leases.remove(fh);
    }
}

/// Why a READ could not be answered here.
#[derive(Debug)]
pub(crate) enum ReadFailure {
    /// The data is not in the page cache (or the file system cannot say): read it on a
    /// storage thread.
    WouldBlock,
    Status(NfsStatus),
}

/// A READ reply record in its buffer: the record starts at `start` (the bytes before it pad
/// the file data onto a cache-line boundary).
pub(crate) struct ReplyRecord {
    pub buf: Vec<u8>,
    pub start: usize,
}

/// Alignment of the data in a READ reply buffer: the kernel's copy from the page cache costs
/// up to four times more into a destination that is not on a cache-line boundary (measured on
/// AMD Zen 3, where `rep movsb` is slow into the first half of a line).
const DATA_ALIGN: usize = 64;

/// Encodes a READ reply into `buf` after a 4-byte gap for the record header, reading up to
/// `count` bytes at `offset` of `file` straight into it, the data on a cache-line boundary.
/// With `nowait` the read never blocks (`preadv2` with `RWF_NOWAIT`). The buffer grows by
/// what the file holds past `offset`, never by what was asked.
///
/// `buf` is normally a sent reply's buffer, kept by the connection: its old bytes are
/// overwritten, not zeroed first (zeroing the data area cost 1-2% of the server's CPU on a
/// read benchmark). They are this connection's own earlier replies, and only what the read
/// filled is sent.
pub(crate) fn read_reply(
    mut buf: Vec<u8>,
    req_id: u64,
    file: &File,
    offset: u64,
    count: usize,
    lease_ms: u32,
    nowait: bool,
) -> Result<ReplyRecord, ReadFailure> {
    let meta = file
        .metadata()
        .map_err(|e| ReadFailure::Status(NfsStatus::from_io_error(&e)))?;
    let attr = Attr::from_metadata(&meta, lease_ms);
    let size = attr.size;
    let want = count.min(usize::try_from(size.saturating_sub(offset)).unwrap_or(usize::MAX));
    let data_at = protocol::record::HEADER_LEN + protocol::read_reply_data_offset(Some(&attr));
    let capacity = DATA_ALIGN + data_at + want + protocol::record::TAG_LEN + 4;
    if buf.capacity() < capacity {
        buf = Vec::with_capacity(capacity);
    }
    let start = (DATA_ALIGN - (buf.as_ptr().addr() + data_at) % DATA_ALIGN) % DATA_ALIGN;
    let at = start + protocol::record::HEADER_LEN;
    protocol::encode_read_reply_at(&mut buf, at, req_id, Some(&attr), want, |dst| {
        read_into(file, size, offset, dst, nowait)
    })
    .map_err(|e| {
        if nowait {
            // Not cached, or no RWF_NOWAIT on this file system: the storage thread retries,
            // and reports any real error.
            ReadFailure::WouldBlock
        } else {
            ReadFailure::Status(NfsStatus::from_io_error(&e))
        }
    })?;
    Ok(ReplyRecord { buf, start })
}

/// Fills `dst` from `offset` of `file` (less at the end of the file); returns how much it
/// read and whether that reaches `size`, the file's size.
fn read_into(
    file: &File,
    size: u64,
    offset: u64,
    dst: &mut [u8],
    nowait: bool,
) -> io::Result<(usize, bool)> {
    let mut got = 0;
    while got < dst.len() {
        let rest = &mut dst[got..];
        let at = offset + got as u64;
        let n = if nowait {
            rustix::io::preadv2(
                file,
                &mut [io::IoSliceMut::new(rest)],
                at,
                rustix::io::ReadWriteFlags::NOWAIT,
            )
            .map_err(io::Error::from)
        } else {
            file.read_at(rest, at)
        };
        match n {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok((got, offset + got as u64 >= size))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn handle(inode: u64) -> HandleData {
        HandleData {
            export_id: 1,
            device: 9,
            inode,
            generation: 3,
            backend: None,
        }
    }

    fn temp_file(bytes: &[u8]) -> File {
        let dir = std::env::temp_dir().join(format!("sfsd-read-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("f{}", rand_suffix()));
        let mut f = File::create(&path).unwrap();
        f.write_all(bytes).unwrap();
        let f = File::open(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        f
    }

    fn rand_suffix() -> u64 {
        use std::sync::atomic::AtomicU64;
        static N: AtomicU64 = AtomicU64::new(0);
        N.fetch_add(1, Ordering::Relaxed)
    }

    #[test]
    fn a_descriptor_serves_only_the_user_it_was_opened_for() {
        let changes = Changes::new();
        let budget = FileBudget::new(10);
        let mut st = ReadState::default();
        let f = Arc::new(temp_file(b"x"));
        st.remember_file(1, &handle(5), f, changes.now(), &budget);
        assert!(st.cached_file(1, &handle(5), &changes).is_some());
        assert!(
            st.cached_file(2, &handle(5), &changes).is_none(),
            "other authno"
        );
        assert!(
            st.cached_file(1, &handle(6), &changes).is_none(),
            "other object"
        );
        let other_generation = HandleData {
            generation: 4,
            ..handle(5)
        };
        assert!(st.cached_file(1, &other_generation, &changes).is_none());
    }

    #[test]
    fn a_change_of_the_object_or_of_access_rights_drops_the_descriptor() {
        let changes = Changes::new();
        let budget = FileBudget::new(10);
        let mut st = ReadState::default();
        st.remember_file(
            1,
            &handle(5),
            Arc::new(temp_file(b"x")),
            changes.now(),
            &budget,
        );
        changes.note((9, 5));
        assert!(st.cached_file(1, &handle(5), &changes).is_none());
        assert_eq!(
            budget.used(),
            0,
            "the dropped descriptor returned its budget"
        );

        st.remember_file(
            1,
            &handle(5),
            Arc::new(temp_file(b"x")),
            changes.now(),
            &budget,
        );
        changes.note_access();
        assert!(st.cached_file(1, &handle(5), &changes).is_none());
    }

    #[test]
    fn descriptors_are_bounded_per_connection_and_server_wide() {
        let changes = Changes::new();
        let budget = FileBudget::new(OPEN_FILES_PER_CONN + 1);
        let mut a = ReadState::default();
        for i in 0..10 {
            a.remember_file(
                1,
                &handle(i),
                Arc::new(temp_file(b"x")),
                changes.now(),
                &budget,
            );
            assert!(a.cached_files() <= OPEN_FILES_PER_CONN);
        }
        let mut b = ReadState::default();
        for i in 0..10 {
            b.remember_file(
                1,
                &handle(i),
                Arc::new(temp_file(b"x")),
                changes.now(),
                &budget,
            );
        }
        assert_eq!(b.cached_files(), 1, "the server-wide budget is shared");
        assert_eq!(budget.used(), OPEN_FILES_PER_CONN + 1);
        drop(a);
        assert_eq!(budget.used(), 1);
    }

    #[test]
    fn a_held_lease_is_reused_only_while_unchanged_and_never_extended() {
        let changes = Changes::new();
        let mut st = ReadState::default();
        let fh = FileHandle::from_bytes([7; protocol::HANDLE_LEN]);
        let key = (9, 5);
        let first = st.lease_for(Instant::now(), &fh, key, 60_000, &changes);
        assert_eq!(
            first,
            LeaseChoice {
                ms: 60_000,
                record: true
            }
        );
        st.lease_announced(Instant::now(), fh, first.ms, changes.now());
        let again = st.lease_for(Instant::now(), &fh, key, 60_000, &changes);
        assert!(!again.record);
        assert!(again.ms <= 60_000 && again.ms > 59_000, "{again:?}");

        changes.note(key);
        assert!(
            st.lease_for(Instant::now(), &fh, key, 60_000, &changes)
                .record
        );

        st.lease_announced(Instant::now(), fh, 60_000, changes.now());
        st.lease_ended(&fh);
        assert!(
            st.lease_for(Instant::now(), &fh, key, 60_000, &changes)
                .record
        );

        // Less than half left: ask color 0 again.
        st.lease_announced(Instant::now(), fh, 100, changes.now());
        assert!(
            st.lease_for(Instant::now(), &fh, key, 60_000, &changes)
                .record
        );
        // No lease offered: nothing to record.
        let none = st.lease_for(
            Instant::now(),
            &FileHandle::from_bytes([8; protocol::HANDLE_LEN]),
            key,
            0,
            &changes,
        );
        assert_eq!(
            none,
            LeaseChoice {
                ms: 0,
                record: false
            }
        );
    }

    #[test]
    fn replies_hold_what_the_file_has_and_nowait_reads_cached_data() {
        let data: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
        let f = temp_file(&data);
        let r = read_reply(Vec::new(), 1, &f, 9_000, 65_536, 0, true).expect("cached read");
        assert!(
            r.buf.capacity() < 4 + 160 + 1_000 + 16 + 64 + 64,
            "sized by the file, not the ask"
        );
        assert!(r.buf.ends_with(&data[9_000..]));
        // The data starts on a cache-line boundary, the record before it.
        assert_eq!(data_at(&r), r.buf.len() - 1_000);
        assert_eq!(r.buf[data_at(&r)..].as_ptr().addr() % DATA_ALIGN, 0);
        assert!(r.start < DATA_ALIGN);
        let blocking = read_reply(Vec::new(), 1, &f, 9_000, 65_536, 0, false).unwrap();
        // Same reply but for the attributes (the first read may have changed the atime).
        assert_eq!(r.buf.len() - r.start, blocking.buf.len() - blocking.start);
        assert!(blocking.buf.ends_with(&data[9_000..]));
        let past_end = read_reply(Vec::new(), 1, &f, 20_000, 100, 0, false).unwrap();
        assert!(past_end.buf.len() - past_end.start < 200);
        // Sealing appends the tag without moving the record.
        let (ptr, start, mut record) = (r.buf.as_ptr(), r.start, r.buf);
        protocol::Sealer::new(&[1; 32], 1 << 20)
            .finish(&mut record, protocol::RecordStart::at(start))
            .unwrap();
        assert_eq!(record.as_ptr(), ptr, "the buffer had no room for the tag");
    }

    /// Where the data of a reply record starts in its buffer.
    fn data_at(r: &ReplyRecord) -> usize {
        r.start
            + protocol::record::HEADER_LEN
            + protocol::read_reply_data_offset(Some(&Attr::from_metadata(
                &std::fs::metadata("/").unwrap(),
                0,
            )))
    }

    #[test]
    fn a_reused_buffer_gets_aligned_data_and_none_of_its_old_bytes() {
        let data: Vec<u8> = (0..5_000u32).map(|i| (i * 31 % 251) as u8).collect();
        let f = temp_file(&data);
        // A sent reply's buffer: full length, full of an earlier record's bytes.
        let mut buf = vec![0xEE; 64 << 10];
        let ptr = buf.as_ptr();
        for offset in [0, 1, 33, 4_999, 5_000] {
            let r = read_reply(buf, 1, &f, offset, 4_096, 0, false).unwrap();
            assert_eq!(r.buf.as_ptr(), ptr, "the allocation is reused");
            let len = (4_096).min(5_000 - offset as usize);
            let at = data_at(&r);
            assert_eq!(r.buf[at..].as_ptr().addr() % DATA_ALIGN, 0, "at {offset}");
            let payload = &r.buf[r.start + protocol::record::HEADER_LEN..];
            match protocol::ServerMessage::decode(payload).expect("exactly one reply") {
                protocol::ServerMessage::Reply(protocol::Reply {
                    result: Ok(protocol::ReplyBody::Read { eof, data: got, .. }),
                    ..
                }) => {
                    assert_eq!(&*got, &data[offset as usize..][..len], "at {offset}");
                    assert_eq!(eof, offset as usize + len == 5_000, "at {offset}");
                }
                other => panic!("{other:?}"),
            }
            buf = r.buf;
        }
    }
}
