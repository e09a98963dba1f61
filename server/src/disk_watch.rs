//! Changes made on the export's file system behind sfsd's back, turned into INVALIDATEs.
//!
//! A client caches what sfsd leased it (attributes, listings, pages) until the lease ends or
//! sfsd tells it the object changed. sfsd tells it of every change made through sfsd, but a
//! program on the server's own host (an editor, a build, `git pull` run there) changes the
//! files without sfsd: before this, its change showed in the mounts only when the lease ran
//! out (60 s by default).
//!
//! sfsd now watches the file system its export is on with fanotify
//! ([`FAN_MARK_FILESYSTEM`](libc::FAN_MARK_FILESYSTEM), events naming objects by file handle),
//! and for each event caused by another process (the event's pid is not sfsd's own: sfsd's
//! own changes already told their holders) ends the leases on the objects it names and
//! INVALIDATEs their holders, as for a change made through another instance
//! ([`crate::peers`]).
//!
//! ```text
//! watching thread: read events -> skip sfsd's own -> file handles -> (device, inode) keys
//!     (open_by_handle_at + fstat, cached) -> one batch to color 0 -> Server::changed_on_disk
//! ```
//!
//! - **Which objects.** A change of names (create, delete, rename) names the directory and
//!   the object named; any other change (data, attributes, an object deleted or moved) names
//!   the object itself. An event sfsd cannot resolve (the object is gone) is left out: the
//!   directory's own event covers its name. A handle's key is cached while its object lives,
//!   and dropped at its `FAN_DELETE_SELF` before the batch is resolved, since the next file
//!   made may get its inode number (an event for the old object then ended the new one's
//!   lease: a concurrent test's deletions sent a client a needless INVALIDATE).
//! - **Access.** A change of modes, owners, ACLs or names may change who can open what, so
//!   sfsd's cached open files are checked again ([`crate::changes::Changes::note_access`]).
//! - **Bounded.** Events are read [`READ_BUFFER`] bytes at a time; one read's distinct
//!   objects, at most [`MAX_BATCH`] of them, are resolved and handed on as one batch, and the
//!   thread waits [`MIN_GAP`] after each (the kernel merges repeated events meanwhile), so a
//!   busy file system costs at most 200 batches (and wake-ups of the thread) a second,
//!   sfsd's own changes included: woken for each of them, the thread cost an untar through
//!   a mount 15% more CPU in sfsd. More objects in one read, and the
//!   kernel's queue overflowing (`FAN_Q_OVERFLOW`), end *every* lease instead, without
//!   resolving anything, and the thread then waits [`FLOOD_GAP`]: a change missed costs a
//!   refetch, never a stale cache, and a program flooding the file system with changes costs
//!   sfsd at most 200 x [`MAX_BATCH`] resolutions a second, its clients a refetch ten times a
//!   second. The handle-to-key cache holds at most [`MAX_CACHED`] entries.
//! - **A promise.** While it runs, sfsd offers protocol versions 17 and 18, whose server
//!   promises to tell of changes behind its back ([`protocol::handshake::DISK_TOLD_VERSION`]).
//!   A failed read of the group (never seen) therefore ends every lease, and the thread
//!   goes on reading.
//! - **Where it cannot.** fanotify with file handles on a whole file system needs
//!   `CAP_SYS_ADMIN` and a file system that can encode handles; without them (an unprivileged
//!   sfsd, some FUSE or overlay file systems), and on the NFS backend, sfsd logs why and
//!   clients see such changes when their leases end, as before. `--no-disk-watch` turns it off.
//! - **Events of the rest of the file system.** The mark covers the whole file system, not
//!   only the export: objects outside it are resolved (once each, then cached) and hold no
//!   lease, so they end nothing.

use std::collections::HashMap;
use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, poll};

use crate::ids::ObjKey;

/// Bytes of events read at once.
const READ_BUFFER: usize = 64 << 10;
/// Objects one batch may name (and resolve); more end every lease instead.
pub(crate) const MAX_BATCH: usize = 1024;
/// The least time between two batches.
const MIN_GAP: Duration = Duration::from_millis(5);
/// The time after a batch that ended every lease: a flood of changes (or one program making
/// files as fast as it can on the same file system) costs a refetch ten times a second.
const FLOOD_GAP: Duration = Duration::from_millis(100);
/// Handles whose keys are remembered.
const MAX_CACHED: usize = 16384;
/// How long the thread waits for events before it looks whether sfsd is stopping.
const STOP_CHECK: rustix::event::Timespec = rustix::event::Timespec {
    tv_sec: 0,
    tv_nsec: 500_000_000,
};

/// Events that change a directory's names.
const NAMES_CHANGED: u64 = libc::FAN_CREATE
    | libc::FAN_DELETE
    | libc::FAN_MOVED_FROM
    | libc::FAN_MOVED_TO
    | libc::FAN_RENAME;
/// Events that may change who can open what.
const ACCESS_CHANGED: u64 =
    libc::FAN_ATTRIB | NAMES_CHANGED | libc::FAN_DELETE_SELF | libc::FAN_MOVE_SELF;
/// Everything watched.
const WATCHED: u64 = libc::FAN_MODIFY | ACCESS_CHANGED | libc::FAN_ONDIR;

/// Bytes of an event's metadata (`struct fanotify_event_metadata`), before its records.
const META: usize = std::mem::size_of::<libc::fanotify_event_metadata>();

/// Info record types that carry a file handle (`fanotify_event_info_fid`).
const FID: u8 = libc::FAN_EVENT_INFO_TYPE_FID;
const DIR_FIDS: [u8; 4] = [
    libc::FAN_EVENT_INFO_TYPE_DFID,
    libc::FAN_EVENT_INFO_TYPE_DFID_NAME,
    libc::FAN_EVENT_INFO_TYPE_OLD_DFID_NAME,
    libc::FAN_EVENT_INFO_TYPE_NEW_DFID_NAME,
];

/// A file handle as the kernel reports it: its type and its bytes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct Handle {
    pub kind: i32,
    pub bytes: Vec<u8>,
}

/// What one read of events says.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Parsed {
    /// Objects changed by someone else, in the order met (repeats left in).
    pub handles: Vec<Handle>,
    /// Objects gone (`FAN_DELETE_SELF`, sfsd's own deletions included): their inode numbers
    /// may already be another object's.
    pub gone: Vec<Handle>,
    /// The kernel dropped events: anything may have changed.
    pub overflow: bool,
    /// Some change may have changed who can open what.
    pub access: bool,
}

/// What a batch tells color 0.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Batch {
    pub keys: Vec<ObjKey>,
    /// End every lease (overflow, or more keys than a batch holds).
    pub everything: bool,
    pub access: bool,
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at + 8)?.try_into().ok()?))
}

/// The events in `buf` (as `read` returned them), those caused by process `own` left out.
/// Whatever does not parse (a length out of bounds, a record cut short) ends the parse with
/// `overflow` set, so a kernel this does not understand costs a refetch, not a miss.
pub(crate) fn parse(buf: &[u8], own: i32) -> Parsed {
    let mut out = Parsed::default();
    let mut at = 0;
    while at < buf.len() {
        let Some(event) = parse_event(&buf[at..], own, &mut out) else {
            out.overflow = true;
            return out;
        };
        // `parse_event` checked the length against the metadata's size: progress is sure.
        debug_assert!(event >= META);
        at += event;
    }
    out
}

/// One event at the start of `b` into `out`; its length, or None if it does not parse.
fn parse_event(b: &[u8], own: i32, out: &mut Parsed) -> Option<usize> {
    let len = u32_at(b, 0)? as usize;
    let version = *b.get(4)?;
    let meta_len = u16_at(b, 6)? as usize;
    if len < META || len > b.len() || meta_len < META || meta_len > len {
        return None;
    }
    if version != libc::FANOTIFY_METADATA_VERSION {
        return None;
    }
    let mask = u64_at(b, 8)?;
    let pid = i32::from_ne_bytes(b.get(20..24)?.try_into().ok()?);
    if mask & libc::FAN_Q_OVERFLOW != 0 {
        out.overflow = true;
        return Some(len);
    }
    let names = mask & NAMES_CHANGED != 0;
    let mut own_fids = Vec::new();
    let mut dir_fids = Vec::new();
    let mut at = meta_len;
    while at < len {
        let kind = *b.get(at)?;
        let rec_len = u16_at(b, at + 2)? as usize;
        if rec_len < 4 || at + rec_len > len {
            return None;
        }
        let rec = &b[at..at + rec_len];
        if kind == FID {
            own_fids.push(handle_in(rec)?);
        } else if DIR_FIDS.contains(&kind) {
            dir_fids.push(handle_in(rec)?);
        }
        at += rec_len;
    }
    if mask & libc::FAN_DELETE_SELF != 0 {
        out.gone.extend(own_fids.iter().cloned());
    }
    if pid == own {
        return Some(len);
    }
    // A directory's names changed: the directory. Otherwise the object itself, or, where the
    // event names only its directory, that.
    if names || own_fids.is_empty() {
        out.handles.append(&mut dir_fids);
    }
    out.handles.append(&mut own_fids);
    out.access |= mask & ACCESS_CHANGED != 0;
    Some(len)
}

/// The file handle in a `fanotify_event_info_fid` record: header (4), fsid (8), then
/// `struct file_handle` (bytes: u32, type: i32, the bytes).
fn handle_in(rec: &[u8]) -> Option<Handle> {
    let n = u32_at(rec, 12)? as usize;
    let kind = i32::from_ne_bytes(rec.get(16..20)?.try_into().ok()?);
    let bytes = rec.get(20..20 + n)?.to_vec();
    if bytes.len() > libc::MAX_HANDLE_SZ as usize {
        return None;
    }
    Some(Handle { kind, bytes })
}

/// The fanotify group watching one file system, and a descriptor on it to open handles by.
pub(crate) struct DiskWatch {
    group: OwnedFd,
    mount: OwnedFd,
    own: i32,
    cache: HashMap<Handle, ObjKey>,
}

impl DiskWatch {
    /// Watches the file system `export` is on. Fails without `CAP_SYS_ADMIN`, on a kernel
    /// before 5.9, or on a file system that cannot encode file handles.
    pub(crate) fn open(export: &Path) -> io::Result<DiskWatch> {
        let flags = libc::FAN_CLASS_NOTIF | libc::FAN_CLOEXEC;
        let with_target = flags | libc::FAN_REPORT_DFID_NAME_TARGET;
        let event_flags = (libc::O_RDONLY | libc::O_LARGEFILE | libc::O_CLOEXEC) as libc::c_uint;
        // SAFETY: fanotify_init takes two integers and returns a new descriptor or -1.
        let mut fd = unsafe { libc::fanotify_init(with_target, event_flags) };
        if fd < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
            // Before 5.17 (no target FID): the directory still names every change of names.
            let older = flags | libc::FAN_REPORT_DFID_NAME | libc::FAN_REPORT_FID;
            // SAFETY: as above.
            fd = unsafe { libc::fanotify_init(older, event_flags) };
        }
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned by fanotify_init and is owned by nothing else.
        let group = unsafe { OwnedFd::from_raw_fd(fd) };
        let path = CString::new(export.as_os_str().as_bytes())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: the group is a live fanotify descriptor, the path a NUL-terminated string
        // that outlives the call.
        let r = unsafe {
            libc::fanotify_mark(
                group.as_raw_fd(),
                libc::FAN_MARK_ADD | libc::FAN_MARK_FILESYSTEM,
                WATCHED,
                libc::AT_FDCWD,
                path.as_ptr(),
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // Not O_PATH: open_by_handle_at refuses one (EBADF).
        let mount = rustix::fs::open(
            export,
            rustix::fs::OFlags::RDONLY
                | rustix::fs::OFlags::DIRECTORY
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )?;
        // What the watch is told it must resolve (CAP_DAC_READ_SEARCH), or it would offer a
        // promise (versions 17 and 18) it cannot keep.
        let root = name_to_handle(export)
            .ok_or_else(|| io::Error::other("no file handle for the export"))?;
        open_by_handle(&mount, &root)?;
        Ok(DiskWatch {
            group,
            mount,
            own: std::process::id() as i32,
            cache: HashMap::new(),
        })
    }

    /// Runs on a thread of its own until `stop` is set (looked at least every [`STOP_CHECK`]),
    /// handing each read's batch to `deliver`.
    pub(crate) fn start(
        mut self,
        stop: Arc<AtomicBool>,
        deliver: impl Fn(Batch) + Send + 'static,
    ) -> io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("sfsd-disk-watch".into())
            .spawn(move || {
                let mut buf = vec![0u8; READ_BUFFER];
                while !stop.load(Ordering::Relaxed) {
                    let mut ready = [PollFd::new(&self.group, PollFlags::IN)];
                    let read = match poll(&mut ready, Some(&STOP_CHECK)) {
                        Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                        Ok(_) => rustix::io::read(&self.group, &mut buf[..]),
                        Err(e) => Err(e),
                    };
                    let parsed = match read {
                        Ok(n) => parse(&buf[..n], self.own),
                        Err(rustix::io::Errno::INTR | rustix::io::Errno::AGAIN) => continue,
                        Err(e) => {
                            // Never seen; the promise holds all the same (versions 17 and 18):
                            // every lease ends, and the watch tries again.
                            tracing::warn!(error = %e, "reading the disk watch failed");
                            Parsed {
                                overflow: true,
                                ..Parsed::default()
                            }
                        }
                    };
                    let batch = self.batch(parsed);
                    let gap = if batch.everything { FLOOD_GAP } else { MIN_GAP };
                    if batch.everything || batch.access || !batch.keys.is_empty() {
                        deliver(batch);
                    }
                    // Even after a read of sfsd's own events only: while this thread sleeps
                    // here, not in `poll`, an event wakes no one, and sfsd's own changes
                    // (several per file of an untar) would otherwise wake it one by one.
                    std::thread::sleep(gap);
                }
            })
    }

    /// The keys of `parsed`'s handles (each once; those no longer there left out).
    fn batch(&mut self, parsed: Parsed) -> Batch {
        let mut batch = Batch {
            keys: Vec::new(),
            everything: parsed.overflow,
            access: parsed.access,
        };
        let mut handles = parsed.handles;
        handles.sort_unstable();
        handles.dedup();
        if handles.len() > MAX_BATCH {
            batch.everything = true;
        }
        if batch.everything {
            batch.access = true;
            return batch;
        }
        // A gone object's handle is resolved no more: its key may be a new object's now (the
        // file system gives its inode number to the next file made), which this batch's
        // events for it would end the lease of. Its directory's event covers its name.
        for h in &parsed.gone {
            self.cache.remove(h);
        }
        batch.keys = handles.into_iter().filter_map(|h| self.key_of(h)).collect();
        // Two handles of one object (a directory's and its own encoding) name it once.
        batch.keys.sort_unstable();
        batch.keys.dedup();
        batch
    }

    /// The (device, inode) of the object handle `h` names, if it is still there.
    fn key_of(&mut self, h: Handle) -> Option<ObjKey> {
        if let Some(k) = self.cache.get(&h) {
            return Some(*k);
        }
        let fd = open_by_handle(&self.mount, &h).ok()?;
        let st = rustix::fs::fstat(&fd).ok()?;
        let key = (st.st_dev, st.st_ino);
        if self.cache.len() >= MAX_CACHED {
            self.cache.clear();
        }
        self.cache.insert(h, key);
        Some(key)
    }
}

/// `open_by_handle_at(mount, h, O_PATH)`: needs `CAP_DAC_READ_SEARCH`.
fn open_by_handle(mount: &OwnedFd, h: &Handle) -> io::Result<OwnedFd> {
    // `struct file_handle`: handle_bytes (u32), handle_type (i32), then the bytes; built in
    // u32s for its alignment.
    let mut raw = vec![0u32; 2 + h.bytes.len().div_ceil(4)];
    raw[0] = h.bytes.len() as u32;
    raw[1] = h.kind as u32;
    for (i, b) in h.bytes.iter().enumerate() {
        let word = &mut raw[2 + i / 4];
        let mut le = word.to_ne_bytes();
        le[i % 4] = *b;
        *word = u32::from_ne_bytes(le);
    }
    let flags = libc::O_PATH | libc::O_CLOEXEC;
    // SAFETY: `raw` is a `struct file_handle` (4-byte aligned, its header's handle_bytes
    // equal to the bytes that follow it in the buffer), alive for the call; the kernel only
    // reads it. `mount` is a live descriptor.
    let fd = unsafe {
        libc::open_by_handle_at(
            mount.as_raw_fd(),
            raw.as_mut_ptr().cast::<libc::file_handle>(),
            flags,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by open_by_handle_at and is owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `name_to_handle_at` of `path`: the handle the kernel reports the object by.
fn name_to_handle(path: &Path) -> Option<Handle> {
    let c = CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut raw = vec![0u32; 2 + libc::MAX_HANDLE_SZ as usize / 4];
    raw[0] = libc::MAX_HANDLE_SZ as u32;
    let mut mount_id = 0;
    // SAFETY: `raw` is a `struct file_handle` with room for MAX_HANDLE_SZ bytes, as its
    // header says; the path is NUL-terminated; both outlive the call.
    let r = unsafe {
        libc::name_to_handle_at(
            libc::AT_FDCWD,
            c.as_ptr(),
            raw.as_mut_ptr().cast::<libc::file_handle>(),
            &mut mount_id,
            0,
        )
    };
    if r < 0 {
        return None;
    }
    let n = raw[0] as usize;
    let bytes: Vec<u8> = raw[2..]
        .iter()
        .flat_map(|w| w.to_ne_bytes())
        .take(n)
        .collect();
    Some(Handle {
        kind: raw[1] as i32,
        bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN: i32 = 100;

    /// An info record with a handle of `bytes` (type 1), then `name` for DFID_NAME records.
    fn record(kind: u8, bytes: &[u8], name: &[u8]) -> Vec<u8> {
        let mut r = vec![kind, 0, 0, 0];
        r.extend_from_slice(&[7u8; 8]); // fsid
        r.extend_from_slice(&(bytes.len() as u32).to_ne_bytes());
        r.extend_from_slice(&1i32.to_ne_bytes());
        r.extend_from_slice(bytes);
        r.extend_from_slice(name);
        r.push(0);
        while r.len() % 4 != 0 {
            r.push(0);
        }
        let len = r.len() as u16;
        r[2..4].copy_from_slice(&len.to_ne_bytes());
        r
    }

    fn event(mask: u64, pid: i32, records: &[Vec<u8>]) -> Vec<u8> {
        let mut e = Vec::new();
        let body: usize = records.iter().map(Vec::len).sum();
        e.extend_from_slice(&((24 + body) as u32).to_ne_bytes());
        e.push(libc::FANOTIFY_METADATA_VERSION);
        e.push(0);
        e.extend_from_slice(&24u16.to_ne_bytes());
        e.extend_from_slice(&mask.to_ne_bytes());
        e.extend_from_slice(&(-1i32).to_ne_bytes());
        e.extend_from_slice(&pid.to_ne_bytes());
        for r in records {
            e.extend_from_slice(r);
        }
        e
    }

    fn h(b: &[u8]) -> Handle {
        Handle {
            kind: 1,
            bytes: b.to_vec(),
        }
    }

    #[test]
    fn a_create_names_the_directory_and_the_new_object() {
        let dfid = record(libc::FAN_EVENT_INFO_TYPE_DFID_NAME, b"dir1", b"new");
        let fid = record(FID, b"obj1", b"");
        let p = parse(&event(libc::FAN_CREATE, 7, &[dfid, fid]), OWN);
        assert_eq!(p.handles, vec![h(b"dir1"), h(b"obj1")]);
        assert!(p.access && !p.overflow);
    }

    #[test]
    fn a_write_names_only_the_object_and_leaves_access_alone() {
        let dfid = record(libc::FAN_EVENT_INFO_TYPE_DFID_NAME, b"dir1", b"f");
        let fid = record(FID, b"obj1", b"");
        let p = parse(&event(libc::FAN_MODIFY, 7, &[dfid, fid]), OWN);
        assert_eq!(p.handles, vec![h(b"obj1")]);
        assert!(!p.access);
        // Reported by its directory alone (no target FID): the directory.
        let dfid = record(libc::FAN_EVENT_INFO_TYPE_DFID_NAME, b"dir1", b"f");
        let p = parse(&event(libc::FAN_ATTRIB, 7, &[dfid]), OWN);
        assert_eq!(p.handles, vec![h(b"dir1")]);
        assert!(p.access);
    }

    #[test]
    fn a_rename_names_both_directories() {
        let old = record(libc::FAN_EVENT_INFO_TYPE_OLD_DFID_NAME, b"from", b"a");
        let new = record(libc::FAN_EVENT_INFO_TYPE_NEW_DFID_NAME, b"to", b"b");
        let fid = record(FID, b"obj", b"");
        let p = parse(&event(libc::FAN_RENAME, 7, &[old, new, fid]), OWN);
        assert_eq!(p.handles, vec![h(b"from"), h(b"to"), h(b"obj")]);
    }

    #[test]
    fn our_own_events_are_left_out_and_the_next_one_read() {
        let fid = || record(FID, b"obj1", b"");
        let mut buf = event(libc::FAN_MODIFY, OWN, &[fid()]);
        buf.extend(event(libc::FAN_ATTRIB, OWN + 1, &[fid()]));
        let p = parse(&buf, OWN);
        assert_eq!(p.handles, vec![h(b"obj1")]);
        assert!(p.access);
        assert_eq!(
            parse(&event(libc::FAN_ATTRIB, OWN, &[fid()]), OWN),
            Parsed::default()
        );
    }

    #[test]
    fn records_of_other_kinds_are_passed_over_and_an_event_may_have_none() {
        // A bare header of a kind this does not know, then the object.
        let unknown = vec![99u8, 0, 4, 0];
        let fid = record(FID, b"obj1", b"");
        let p = parse(&event(libc::FAN_MODIFY, 7, &[unknown, fid]), OWN);
        assert_eq!(p.handles, vec![h(b"obj1")]);
        assert!(!p.overflow);
        // No record at all: nothing named, nothing wrong.
        let p = parse(&event(libc::FAN_MODIFY, 7, &[]), OWN);
        assert_eq!(p, Parsed::default());
        // A record claiming less than its own header ends the parse (and cannot loop).
        let empty = vec![99u8, 0, 0, 0];
        assert!(parse(&event(libc::FAN_MODIFY, 7, &[empty]), OWN).overflow);
    }

    #[test]
    fn a_handle_of_the_largest_size_is_taken_and_a_larger_one_is_not() {
        let max = vec![1u8; libc::MAX_HANDLE_SZ as usize];
        let p = parse(&event(libc::FAN_MODIFY, 7, &[record(FID, &max, b"")]), OWN);
        assert_eq!(p.handles, vec![h(&max)]);
        let over = vec![1u8; libc::MAX_HANDLE_SZ as usize + 1];
        let p = parse(&event(libc::FAN_MODIFY, 7, &[record(FID, &over, b"")]), OWN);
        assert!(p.overflow);
    }

    #[test]
    fn an_overflow_is_told() {
        let p = parse(&event(libc::FAN_Q_OVERFLOW, -1, &[]), OWN);
        assert!(p.overflow);
    }

    #[test]
    fn what_does_not_parse_counts_as_an_overflow() {
        let good = event(libc::FAN_MODIFY, 7, &[record(FID, b"x", b"")]);
        // Cut short, anywhere.
        for cut in 1..good.len() {
            let p = parse(&good[..cut], OWN);
            assert!(p.overflow, "cut at {cut}: {p:?}");
        }
        // A length past the buffer, a length below the metadata, a record running over.
        let mut long = good.clone();
        long[0..4].copy_from_slice(&(good.len() as u32 + 4).to_ne_bytes());
        assert!(parse(&long, OWN).overflow);
        let mut short = good.clone();
        short[0..4].copy_from_slice(&8u32.to_ne_bytes());
        assert!(parse(&short, OWN).overflow);
        let mut over = good.clone();
        over[26..28].copy_from_slice(&0xfff0u16.to_ne_bytes());
        assert!(parse(&over, OWN).overflow);
        let mut handle_over = good.clone();
        handle_over[24 + 12..24 + 16].copy_from_slice(&1000u32.to_ne_bytes());
        assert!(parse(&handle_over, OWN).overflow);
        let mut version = good;
        version[4] = 2;
        assert!(parse(&version, OWN).overflow);
    }

    /// A file `name` made in `dir` and its handle as the kernel encodes it (None, saying so,
    /// where the file system has none).
    fn real_file(dir: &Path, name: &str) -> Option<(std::path::PathBuf, Handle)> {
        let f = dir.join(name);
        std::fs::write(&f, name).unwrap();
        let handle = name_to_handle(&f);
        if handle.is_none() {
            eprintln!("skipped: no file handles here");
        }
        Some((f, handle?))
    }

    #[test]
    fn open_by_handle_finds_what_name_to_handle_named() {
        // Opening a handle needs CAP_DAC_READ_SEARCH, so this checks the buffer only where the
        // test runs as root.
        let dir = tempfile::tempdir().unwrap();
        let Some((f, handle)) = real_file(dir.path(), "f") else {
            return;
        };
        match open_by_handle(&unmarked(dir.path()).mount, &handle) {
            Ok(fd) => {
                use std::os::unix::fs::MetadataExt;
                let st = rustix::fs::fstat(&fd).unwrap();
                assert_eq!(st.st_ino, std::fs::metadata(&f).unwrap().ino());
            }
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
                eprintln!("skipped: not root");
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// A watch that was never marked: `/dev/null` as its group, `dir` to open handles in.
    fn unmarked(dir: &Path) -> DiskWatch {
        let open = |p: &Path| {
            rustix::fs::open(p, rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap()
        };
        DiskWatch {
            group: open(Path::new("/dev/null")),
            mount: open(dir),
            own: OWN,
            cache: HashMap::new(),
        }
    }

    #[test]
    fn a_flood_ends_every_lease_without_resolving_anything() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = unmarked(dir.path());
        let many: Vec<Handle> = (0..=MAX_BATCH as u32)
            .map(|i| h(&i.to_ne_bytes()))
            .collect();
        let flood = Parsed {
            handles: many.clone(),
            ..Parsed::default()
        };
        let b = w.batch(flood);
        assert!(b.everything && b.access && b.keys.is_empty(), "{b:?}");
        assert!(w.cache.is_empty(), "resolved {}", w.cache.len());
        // At the bound (repeats counted once) it is an ordinary batch.
        let mut at_bound = many[..MAX_BATCH].to_vec();
        at_bound.extend_from_slice(&many[..10]);
        let b = w.batch(Parsed {
            handles: at_bound,
            ..Parsed::default()
        });
        assert!(!b.everything, "{b:?}");
        let b = w.batch(Parsed {
            overflow: true,
            ..Parsed::default()
        });
        assert!(b.everything && b.access);
    }

    /// A file `f` made in `dir`, its handle, and an unmarked watch that can resolve it (None,
    /// saying why, where handles cannot be opened: no handles there, or not root).
    fn resolvable_file(dir: &Path) -> Option<(std::path::PathBuf, Handle, DiskWatch)> {
        let (f, real) = real_file(dir, "f")?;
        let w = unmarked(dir);
        if open_by_handle(&w.mount, &real).is_err() {
            eprintln!("skipped: not root");
            return None;
        }
        Some((f, real, w))
    }

    #[test]
    fn each_object_is_resolved_once_and_named_once() {
        let dir = tempfile::tempdir().unwrap();
        let Some((f, real, mut w)) = resolvable_file(dir.path()) else {
            return;
        };
        use std::os::unix::fs::MetadataExt;
        let st = std::fs::metadata(&f).unwrap();
        let gone = h(b"no such object");
        let b = w.batch(Parsed {
            handles: vec![real.clone(), gone, real.clone()],
            access: true,
            ..Parsed::default()
        });
        assert_eq!(b.keys, vec![(st.dev(), st.ino())]);
        assert!(b.access && !b.everything);
        let (g, other) = real_file(dir.path(), "g").unwrap();
        let gst = std::fs::metadata(&g).unwrap();
        let b = w.batch(Parsed {
            handles: vec![other.clone()],
            ..Parsed::default()
        });
        assert_eq!(b.keys, vec![(gst.dev(), gst.ino())]);
        // From the cache: the files' names gone, their handles still name them.
        std::fs::remove_file(&f).unwrap();
        std::fs::remove_file(&g).unwrap();
        let b = w.batch(Parsed {
            handles: vec![real, other],
            ..Parsed::default()
        });
        let mut want = vec![(st.dev(), st.ino()), (gst.dev(), gst.ino())];
        want.sort();
        let mut got = b.keys;
        got.sort();
        assert_eq!(got, want);
    }

    /// An object whose `FAN_DELETE_SELF` is in the batch is not resolved from the cache: its
    /// inode number may be another object's by then.
    #[test]
    fn a_gone_objects_cached_key_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let Some((f, real, mut w)) = resolvable_file(dir.path()) else {
            return;
        };
        let b = w.batch(Parsed {
            handles: vec![real.clone()],
            ..Parsed::default()
        });
        assert_eq!(b.keys.len(), 1);
        std::fs::remove_file(&f).unwrap();
        let b = w.batch(Parsed {
            handles: vec![real.clone()],
            gone: vec![real.clone()],
            ..Parsed::default()
        });
        assert!(b.keys.is_empty(), "{b:?}");
        assert!(!w.cache.contains_key(&real));
    }

    #[test]
    fn a_deleted_object_is_gone_even_when_sfsd_deleted_it() {
        let fid = record(FID, b"file", b"");
        for pid in [7, OWN] {
            let one = std::slice::from_ref(&fid);
            let p = parse(&event(libc::FAN_DELETE_SELF, pid, one), OWN);
            assert_eq!(p.gone, vec![h(b"file")], "pid {pid}");
        }
        let p = parse(&event(libc::FAN_ATTRIB, 7, &[fid]), OWN);
        assert!(p.gone.is_empty());
    }
}
