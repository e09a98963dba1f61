//! The local-directory backend.
//!
//! **The kernel decides.** Every operation runs under the request's credentials (see
//! [`super::creds`]), so the kernel makes every permission decision: search permission on each
//! path step, write permission and the sticky bit on directories, `protected_hardlinks`,
//! setgid inheritance, ownership of new objects (the creator's fsuid made them: nothing is
//! chowned afterwards), ACLs. The process umask is 0, so new objects get exactly the mode the
//! client asked for (minus what the kernel itself removes).
//!
//! **File descriptors, never names after a check.** A handle resolves to an `O_PATH` file
//! descriptor; its type is checked on that descriptor, and data is read or written only after
//! re-opening *that* descriptor through `/proc/self/fd` (the same inode, no name lookup), and
//! only for regular files and directories: device nodes and FIFOs are never opened for data.
//! Objects an operation creates are used through the descriptor the creating call returned
//! where the kernel gives one (CREATE); MKDIR and SYMLINK look the new name up once to answer
//! with its handle, and nothing is changed through that lookup.
//!
//! **Never escaping the export.** Every open by name is `openat2(2)` relative to the export
//! root or an already-resolved directory with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` and `O_NOFOLLOW`: the kernel refuses `..` above
//! the root, absolute paths, and any symlink (a symlink is served as an object of its own,
//! READLINK returns its text, the server never follows it). Names from clients are single
//! components. After every open by path the object's (dev, inode, generation) is compared with
//! the handle's, so a rename racing with a request can only make it fail (STALE).
//!
//! **Handles across restarts.** See [`super::index`]: (dev, inode) -> (parent, name). On a miss
//! (after a restart, or an external rename) the export is walked once with the server's own
//! credentials. Walks are rate-limited globally, whatever triggers them: at most one per
//! second, and never more than a tenth of the time (a slow walk widens the interval).
//!
//! **Generation.** The handle's generation is the object's birth time (`statx` `STATX_BTIME`)
//! in nanoseconds. A deleted file whose inode number is reused gets a new birth time, so the
//! old handle resolves to STALE. On a file system without birth times the generation is 0 and
//! a reused inode number would still revive an old handle.
//!
//! **Directory cursors.** READDIR cookies are the file system's own directory offsets (what
//! `getdents64` reports, as the kernel NFS server uses): a page seeks to its cookie and reads
//! only what it returns, never the whole directory.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, UNIX_EPOCH};

use protocol::{
    Attr, CreateHow, DirEntryPlus, DirPage, FileHandle, FileType, FsInfo, FsStat, HandleData,
    HandleKey, NewObject, NfsStatus, PathConf, ReplyBody, RequestOp, SetAttr, SetTime, StableHow,
    Time, access,
};
use rustix::fs::{Access, AtFlags, Mode, OFlags, ResolveFlags, Timespec, Timestamps};

use super::creds::Switcher;
use super::index::Index;
use super::{ObjKey, OpCtx, Outcome, ReadableFile, Storage};
use crate::server::lock;
use crate::users::Creds;

/// The only export this server has (handles carry it so a future multi-export server can tell
/// them apart).
pub const EXPORT_ID: u32 = 1;
/// Longest name component accepted.
pub const NAME_MAX: usize = 255;
/// Bound on the objects the index holds.
const MAX_INDEX: usize = 1 << 20;
/// Minimum time between two walks of the export.
const WALK_INTERVAL: Duration = Duration::from_secs(1);
/// A walk may take at most this share of the time (a walk of 0.5 s allows the next after 5 s).
const WALK_DUTY: u32 = 10;
/// Largest READDIR/READDIRPLUS reply, whatever the client asks.
pub const MAX_DIR_REPLY: usize = 64 * 1024;
/// Longest symlink target accepted or returned.
const MAX_LINK: usize = 4096;

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

fn errno(e: rustix::io::Errno) -> NfsStatus {
    io_status(&io::Error::from_raw_os_error(e.raw_os_error()))
}

fn io_status(e: &io::Error) -> NfsStatus {
    match e.raw_os_error() {
        Some(libc::ELOOP) => NfsStatus::Inval,
        Some(libc::EXDEV) => NfsStatus::XDev,
        Some(libc::ENAMETOOLONG) => NfsStatus::NameTooLong,
        // Out of descriptors for the moment: the client should retry.
        Some(libc::EMFILE | libc::ENFILE) => NfsStatus::Jukebox,
        _ => NfsStatus::from_io_error(e),
    }
}

/// A resolved object: an `O_PATH` descriptor and its metadata, read from that descriptor.
struct Obj {
    key: ObjKey,
    path: PathBuf,
    fd: OwnedFd,
    meta: std::fs::Metadata,
}

impl Obj {
    fn ftype(&self) -> FileType {
        Attr::from_metadata(&self.meta, 0).ftype
    }

    fn attr(&self, lease_ms: u32) -> Attr {
        Attr::from_metadata(&self.meta, lease_ms)
    }

    /// Current attributes, read again from the descriptor.
    fn fresh_attr(&self, lease_ms: u32) -> Option<Attr> {
        stat_fd(self.fd.as_fd())
            .ok()
            .map(|m| Attr::from_metadata(&m, lease_ms))
    }

    /// `/proc/self/fd/N`: names exactly this already-resolved object.
    fn proc_path(&self) -> String {
        format!("/proc/self/fd/{}", self.fd.as_raw_fd())
    }

    /// Opens this object's inode for data. Only for regular files, checked on the `O_PATH`
    /// descriptor by the caller; the kernel checks the access mode against the thread's
    /// credentials.
    fn reopen(&self, flags: OFlags) -> Result<File, NfsStatus> {
        debug_assert_eq!(self.ftype(), FileType::Regular);
        let flags = flags | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        rustix::fs::openat(rustix::fs::CWD, self.proc_path(), flags, Mode::empty())
            .map(File::from)
            .map_err(errno)
    }

    /// Whether the calling thread's credentials grant `want` on this object (the kernel's
    /// answer, `faccessat` with `AT_EACCESS`, which uses the fsuid).
    fn may(&self, want: Access) -> bool {
        rustix::fs::accessat(rustix::fs::CWD, self.proc_path(), want, AtFlags::EACCESS).is_ok()
    }

    fn require_regular(&self) -> Result<(), NfsStatus> {
        match self.ftype() {
            FileType::Regular => Ok(()),
            FileType::Directory => Err(NfsStatus::IsDir),
            _ => Err(NfsStatus::Inval),
        }
    }
}

fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<std::fs::Metadata> {
    File::from(fd.try_clone_to_owned()?).metadata()
}

/// Checks a client-supplied name is one component.
fn component(name: &[u8]) -> Result<&OsStr, NfsStatus> {
    if name.len() > NAME_MAX {
        return Err(NfsStatus::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(NfsStatus::Inval);
    }
    Ok(OsStr::from_bytes(name))
}

/// A name that may be created (not `.` or `..`).
fn new_component(name: &[u8]) -> Result<&OsStr, NfsStatus> {
    let n = component(name)?;
    if name == b"." || name == b".." {
        return Err(NfsStatus::Exist);
    }
    Ok(n)
}

/// A name that may be removed or renamed (`.` and `..` are invalid there).
fn old_component(name: &[u8]) -> Result<&OsStr, NfsStatus> {
    new_component(name).map_err(|e| match e {
        NfsStatus::Exist => NfsStatus::Inval,
        e => e,
    })
}

/// Handle generation of an object: its birth time in nanoseconds since the epoch, or 0 where
/// the file system records no birth time (see the module docs).
fn generation(meta: &std::fs::Metadata) -> u64 {
    let Ok(born) = meta.created() else {
        return 0;
    };
    let nanos: i128 = match born.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i128,
        Err(e) => -(e.duration().as_nanos() as i128),
    };
    nanos as u64
}

/// The exclusive-create verifier as the (atime, mtime) seconds it is stored in.
fn verifier_times(v: &[u8; 8]) -> (i64, i64) {
    let secs = |b: &[u8]| i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
    (secs(&v[..4]), secs(&v[4..]))
}

fn timespec(t: &SetTime) -> Timespec {
    match t {
        SetTime::DontChange => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        SetTime::ServerTime => Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_NOW,
        },
        SetTime::ClientTime(t) => Timespec {
            tv_sec: t.seconds,
            tv_nsec: i64::from(t.nanos.min(999_999_999)),
        },
    }
}

/// When the last walk ended and how long it took.
#[derive(Default)]
struct WalkGate {
    last_end: Option<Instant>,
    last_took: Duration,
}

impl WalkGate {
    fn may_walk(&self) -> bool {
        match self.last_end {
            None => true,
            Some(t) => t.elapsed() >= WALK_INTERVAL.max(self.last_took * WALK_DUTY),
        }
    }
}

/// The local-directory backend.
pub struct LocalFs {
    root: OwnedFd,
    root_key: ObjKey,
    key: HandleKey,
    index: Mutex<Index>,
    walks: Mutex<WalkGate>,
    /// Largest READ/WRITE (FSINFO).
    max_io: u32,
    /// WRITE/COMMIT verifier: changes on restart, so clients resend unstable writes.
    write_verifier: [u8; 8],
    read_only: bool,
    switcher: Switcher,
}

impl LocalFs {
    pub fn open(
        export: &Path,
        key: HandleKey,
        max_io: u32,
        read_only: bool,
        switcher: Switcher,
    ) -> io::Result<LocalFs> {
        let root: OwnedFd = File::open(export)?.into();
        let meta = stat_fd(root.as_fd())?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "export is not a directory",
            ));
        }
        let root_key = (meta.dev(), meta.ino());
        // Data is only ever opened by re-opening a checked descriptor through /proc.
        if !Path::new("/proc/self/fd").is_dir() {
            return Err(io::Error::other(
                "/proc is not mounted: sfsd re-opens checked descriptors through /proc/self/fd",
            ));
        }
        Ok(LocalFs {
            root,
            root_key,
            key,
            index: Mutex::new(Index::new(root_key, MAX_INDEX)),
            walks: Mutex::new(WalkGate::default()),
            max_io,
            write_verifier: rand::random(),
            read_only,
            switcher,
        })
    }

    fn handle(&self, key: ObjKey, generation: u64) -> FileHandle {
        self.key.seal(&HandleData {
            export_id: EXPORT_ID,
            device: key.0,
            inode: key.1,
            generation,
            backend: None,
        })
    }

    /// The handle of a resolved object.
    fn fh(&self, o: &Obj) -> FileHandle {
        self.handle(o.key, generation(&o.meta))
    }

    /// `openat2` beneath `dir` as an `O_PATH` descriptor (a symlink is opened itself).
    fn open_path_at(&self, dir: BorrowedFd<'_>, path: &Path) -> Result<OwnedFd, NfsStatus> {
        let p: &Path = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(dir, p, flags, Mode::empty(), RESOLVE) {
                Ok(fd) => return Ok(fd),
                // A concurrent rename somewhere in the tree: the kernel asks to retry.
                Err(rustix::io::Errno::AGAIN) if tries < 8 => tries += 1,
                Err(e) => return Err(errno(e)),
            }
        }
    }

    fn obj_from(&self, fd: OwnedFd, path: PathBuf) -> Result<Obj, NfsStatus> {
        let meta = stat_fd(fd.as_fd()).map_err(|e| io_status(&e))?;
        Ok(Obj {
            key: (meta.dev(), meta.ino()),
            path,
            fd,
            meta,
        })
    }

    /// Opens `path` below the root and checks it is still the object `key` born at `birth`.
    fn open_at_path(&self, key: ObjKey, birth: u64, path: &Path) -> Result<Obj, NfsStatus> {
        let fd = self.open_path_at(self.root.as_fd(), path)?;
        let o = self.obj_from(fd, path.to_path_buf())?;
        if o.key != key || generation(&o.meta) != birth {
            return Err(NfsStatus::Stale);
        }
        Ok(o)
    }

    /// From a verified handle to the object (an `O_PATH` descriptor).
    fn resolve(&self, h: &HandleData, creds: &Creds) -> Result<Obj, NfsStatus> {
        if h.export_id != EXPORT_ID {
            return Err(NfsStatus::Stale);
        }
        let key = (h.device, h.inode);
        let birth = h.generation;
        let known = lock(&self.index).path(key);
        let was_known = known.is_some();
        if let Some(path) = known {
            match self.open_path_at(self.root.as_fd(), &path) {
                Ok(fd) => {
                    let o = self.obj_from(fd, path)?;
                    if o.key == key {
                        // The inode number is live: either it is this object, or the object
                        // is gone and its number reused (another birth time). No walk needed.
                        return if generation(&o.meta) == birth {
                            Ok(o)
                        } else {
                            Err(NfsStatus::Stale)
                        };
                    }
                }
                Err(NfsStatus::Stale | NfsStatus::NoEnt | NfsStatus::NotDir) => {}
                Err(e) => return Err(e),
            }
        }
        // Unknown (restart) or moved outside the server: walk the export, rate-limited.
        let found = {
            let mut gate = lock(&self.walks);
            let known = lock(&self.index).path(key);
            match known {
                // Another request's walk found it while we waited.
                Some(p) if self.open_at_path(key, birth, &p).is_ok() => Some(p),
                _ if !gate.may_walk() => {
                    // A handle this server knew is worth retrying after the next walk; an
                    // unknown one (a deleted object, a replay) is stale.
                    return Err(if was_known {
                        NfsStatus::Jukebox
                    } else {
                        NfsStatus::Stale
                    });
                }
                _ => {
                    let started = Instant::now();
                    let found = self.switcher.as_server(creds, || self.walk(key));
                    gate.last_end = Some(Instant::now());
                    gate.last_took = started.elapsed();
                    found
                }
            }
        };
        match found {
            Some(path) => self.open_at_path(key, birth, &path).map_err(|e| match e {
                NfsStatus::NoEnt => NfsStatus::Stale,
                e => e,
            }),
            None => {
                lock(&self.index).forget(key);
                Err(NfsStatus::Stale)
            }
        }
    }

    /// Walks the export breadth-first (never following symlinks, never leaving the file
    /// system), rebuilding the index; returns the path of `want` if found.
    fn walk(&self, want: ObjKey) -> Option<PathBuf> {
        tracing::debug!(?want, "walking the export to find a handle");
        let mut fresh = Index::new(self.root_key, MAX_INDEX);
        let mut seen = std::collections::HashSet::from([self.root_key]);
        let mut queue = std::collections::VecDeque::new();
        if let Ok(fd) = self.open_path_at(self.root.as_fd(), Path::new("")) {
            queue.push_back((self.root_key, fd));
        }
        while let Some((dir_key, dir_fd)) = queue.pop_front() {
            let Ok(dir) = open_dir_stream(dir_fd.as_fd()) else {
                continue;
            };
            for entry in dir.flatten() {
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let Ok(st) = rustix::fs::statat(&dir_fd, name, AtFlags::SYMLINK_NOFOLLOW) else {
                    continue;
                };
                let key = (st.st_dev, st.st_ino);
                fresh.remember(key, dir_key, name);
                let is_dir = (st.st_mode & libc::S_IFMT) == libc::S_IFDIR;
                if is_dir
                    && st.st_dev == self.root_key.0
                    && seen.insert(key)
                    && let Ok(fd) =
                        self.open_path_at(dir_fd.as_fd(), Path::new(OsStr::from_bytes(name)))
                {
                    queue.push_back((key, fd));
                }
                if fresh.len() >= MAX_INDEX {
                    queue.clear();
                    break;
                }
            }
        }
        let found = fresh.path(want);
        lock(&self.index).replace(fresh);
        found
    }

    /// Opens `name` in directory `dir` (the kernel checks search permission on `dir`).
    fn child(&self, dir: &Obj, name: &OsStr) -> Result<Obj, NfsStatus> {
        let fd = self.open_path_at(dir.fd.as_fd(), Path::new(name))?;
        let o = self.obj_from(fd, dir.path.join(name))?;
        lock(&self.index).remember(o.key, dir.key, name.as_bytes());
        Ok(o)
    }

    /// LOOKUP semantics including `.` and `..` (which stops at the root).
    fn lookup_child(&self, dir: &Obj, name: &[u8]) -> Result<Obj, NfsStatus> {
        match name {
            b"." => self.open_at_path(dir.key, generation(&dir.meta), &dir.path),
            b".." => {
                let parent = dir.path.parent().unwrap_or(Path::new("")).to_path_buf();
                let fd = self.open_path_at(self.root.as_fd(), &parent)?;
                self.obj_from(fd, parent)
            }
            _ => self.child(dir, component(name)?),
        }
    }

    fn obj(&self, h: &FileHandle, creds: &Creds) -> Result<Obj, NfsStatus> {
        self.resolve(&self.key.verify(h)?, creds)
    }

    fn dir(&self, h: &FileHandle, creds: &Creds) -> Result<Obj, NfsStatus> {
        let o = self.obj(h, creds)?;
        if o.ftype() != FileType::Directory {
            return Err(NfsStatus::NotDir);
        }
        Ok(o)
    }

    fn writable(&self) -> Result<(), NfsStatus> {
        if self.read_only {
            Err(NfsStatus::RoFs)
        } else {
            Ok(())
        }
    }

    /// SETATTR on a resolved object; the kernel checks each change against the caller.
    fn apply_setattr(&self, o: &Obj, sa: &SetAttr) -> Result<(), NfsStatus> {
        let is_link = o.ftype() == FileType::Symlink;
        let changes_times =
            !matches!(sa.atime, SetTime::DontChange) || !matches!(sa.mtime, SetTime::DontChange);
        if is_link && (sa.mode.is_some() || changes_times) {
            return Err(NfsStatus::NotSupp);
        }
        if let Some(size) = sa.size {
            o.require_regular()?;
            let f = o.reopen(OFlags::WRONLY)?;
            f.set_len(size).map_err(|e| io_status(&e))?;
        }
        // Ownership before mode: a chown clears setuid bits the same request may set.
        if sa.uid.is_some() || sa.gid.is_some() {
            rustix::fs::chownat(
                &o.fd,
                "",
                sa.uid.map(rustix::fs::Uid::from_raw),
                sa.gid.map(rustix::fs::Gid::from_raw),
                AtFlags::EMPTY_PATH,
            )
            .map_err(errno)?;
        }
        if let Some(mode) = sa.mode {
            rustix::fs::chmodat(
                rustix::fs::CWD,
                o.proc_path(),
                Mode::from_raw_mode(mode & 0o7777),
                AtFlags::empty(),
            )
            .map_err(errno)?;
        }
        if changes_times {
            let ts = Timestamps {
                last_access: timespec(&sa.atime),
                last_modification: timespec(&sa.mtime),
            };
            rustix::fs::utimensat(rustix::fs::CWD, o.proc_path(), &ts, AtFlags::empty())
                .map_err(errno)?;
        }
        Ok(())
    }

    fn new_object(&self, ctx: &OpCtx, dir: &Obj, obj: &Obj, out: &mut Outcome) -> NewObject {
        let fh = self.fh(obj);
        let dir_fh = self.fh(dir);
        let dir_attr = dir.fresh_attr(ctx.lease_ms);
        out.leased.push((obj.key, fh));
        out.leased.push((dir.key, dir_fh));
        out.changed.push((dir.key, dir_fh, dir_attr));
        NewObject {
            fh,
            attr: obj.fresh_attr(ctx.lease_ms),
            dir_attr,
        }
    }

    fn run(&self, ctx: &OpCtx, op: RequestOp, out: &mut Outcome) -> Result<ReplyBody, NfsStatus> {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        match op {
            RequestOp::Mount { path } => self.mount(ctx, &path, out),
            RequestOp::GetAttr { fh } => {
                let o = self.obj(&fh, c)?;
                out.leased.push((o.key, fh));
                Ok(ReplyBody::GetAttr {
                    attr: o.attr(lease),
                })
            }
            RequestOp::SetAttr { fh, attr, guard } => {
                self.writable()?;
                let o = self.obj(&fh, c)?;
                if let Some(g) = guard
                    && o.attr(0).ctime != g
                {
                    return Err(NfsStatus::NotSync);
                }
                self.apply_setattr(&o, &attr)?;
                let a = o.fresh_attr(lease);
                out.leased.push((o.key, fh));
                out.changed.push((o.key, fh, a));
                Ok(ReplyBody::SetAttr { attr: a })
            }
            RequestOp::Lookup { dir, name } => {
                let d = self.dir(&dir, c)?;
                let o = self.lookup_child(&d, &name)?;
                let fh = self.fh(&o);
                out.leased.push((o.key, fh));
                out.leased.push((d.key, dir));
                Ok(ReplyBody::Lookup {
                    fh,
                    attr: Some(o.attr(lease)),
                    dir_attr: Some(d.attr(lease)),
                })
            }
            RequestOp::Access { fh, access } => {
                let o = self.obj(&fh, c)?;
                out.leased.push((o.key, fh));
                Ok(ReplyBody::Access {
                    access: self.access_bits(&o, c, access),
                    attr: Some(o.attr(lease)),
                })
            }
            RequestOp::ReadLink { fh } => {
                let o = self.obj(&fh, c)?;
                if o.ftype() != FileType::Symlink {
                    return Err(NfsStatus::Inval);
                }
                let target = rustix::fs::readlinkat(&o.fd, "", Vec::new()).map_err(errno)?;
                let target = target.into_bytes();
                if target.len() > MAX_LINK {
                    return Err(NfsStatus::NameTooLong);
                }
                out.leased.push((o.key, fh));
                Ok(ReplyBody::ReadLink {
                    attr: Some(o.attr(lease)),
                    target,
                })
            }
            RequestOp::Write {
                fh,
                offset,
                stable,
                data,
            } => {
                self.writable()?;
                let o = self.obj(&fh, c)?;
                o.require_regular()?;
                if offset.checked_add(data.len() as u64).is_none() {
                    return Err(NfsStatus::FBig);
                }
                let f = o.reopen(OFlags::WRONLY)?;
                f.write_all_at(&data, offset).map_err(|e| io_status(&e))?;
                match stable {
                    StableHow::Unstable => {}
                    StableHow::DataSync => f.sync_data().map_err(|e| io_status(&e))?,
                    StableHow::FileSync => f.sync_all().map_err(|e| io_status(&e))?,
                }
                let a = f.metadata().ok().map(|m| Attr::from_metadata(&m, lease));
                out.leased.push((o.key, fh));
                out.changed.push((o.key, fh, a));
                Ok(ReplyBody::Write {
                    attr: a,
                    count: data.len() as u32,
                    committed: stable,
                    verifier: self.write_verifier,
                })
            }
            RequestOp::Commit { fh, .. } => {
                let o = self.obj(&fh, c)?;
                o.require_regular()?;
                // fsync needs a descriptor open for data: whichever the caller may have.
                let f = o
                    .reopen(OFlags::RDONLY)
                    .or_else(|_| o.reopen(OFlags::WRONLY))?;
                f.sync_all().map_err(|e| io_status(&e))?;
                out.leased.push((o.key, fh));
                Ok(ReplyBody::Commit {
                    attr: o.fresh_attr(lease),
                    verifier: self.write_verifier,
                })
            }
            RequestOp::Create { dir, name, how } => self.create(ctx, &dir, &name, how, out),
            RequestOp::Mkdir { dir, name, attr } => {
                self.writable()?;
                let d = self.dir(&dir, c)?;
                let n = new_component(&name)?;
                let mode = attr.mode.unwrap_or(0o755) & 0o7777;
                rustix::fs::mkdirat(&d.fd, n, Mode::from_raw_mode(mode)).map_err(errno)?;
                let o = self.child(&d, n)?;
                Ok(ReplyBody::Mkdir(self.new_object(ctx, &d, &o, out)))
            }
            RequestOp::Symlink {
                dir, name, target, ..
            } => {
                self.writable()?;
                let d = self.dir(&dir, c)?;
                let n = new_component(&name)?;
                if target.is_empty() || target.contains(&0) || target.len() > MAX_LINK {
                    return Err(NfsStatus::Inval);
                }
                rustix::fs::symlinkat(OsStr::from_bytes(&target), &d.fd, n).map_err(errno)?;
                let o = self.child(&d, n)?;
                Ok(ReplyBody::Symlink(self.new_object(ctx, &d, &o, out)))
            }
            RequestOp::Remove { dir, name } => {
                let d = self.remove(ctx, &dir, &name, false, out)?;
                Ok(ReplyBody::Remove { dir_attr: d })
            }
            RequestOp::Rmdir { dir, name } => {
                let d = self.remove(ctx, &dir, &name, true, out)?;
                Ok(ReplyBody::Rmdir { dir_attr: d })
            }
            RequestOp::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            } => self.rename(ctx, from_dir, &from_name, to_dir, &to_name, out),
            RequestOp::Link { fh, dir, name } => {
                self.writable()?;
                let o = self.obj(&fh, c)?;
                let d = self.dir(&dir, c)?;
                let n = new_component(&name)?;
                if o.ftype() == FileType::Directory {
                    return Err(NfsStatus::IsDir);
                }
                // Through the descriptor's /proc link, which names exactly this object; the
                // kernel applies protected_hardlinks against the caller.
                rustix::fs::linkat(
                    rustix::fs::CWD,
                    o.proc_path(),
                    &d.fd,
                    n,
                    AtFlags::SYMLINK_FOLLOW,
                )
                .map_err(errno)?;
                lock(&self.index).remember(o.key, d.key, n.as_bytes());
                let attr = o.fresh_attr(lease);
                let dir_attr = d.fresh_attr(lease);
                out.changed.push((o.key, fh, attr));
                out.changed.push((d.key, dir, dir_attr));
                out.leased.push((o.key, fh));
                out.leased.push((d.key, dir));
                Ok(ReplyBody::Link { attr, dir_attr })
            }
            RequestOp::ReadDir {
                dir, cookie, count, ..
            } => {
                let (d, entries, eof) = self.list(ctx, &dir, cookie, count as usize, 0, false)?;
                out.leased.push((d.key, dir));
                Ok(ReplyBody::ReadDir(DirPage {
                    dir_attr: Some(d.attr(lease)),
                    verifier: [0; 8],
                    entries: entries
                        .into_iter()
                        .map(|e| protocol::DirEntry {
                            fileid: e.fileid,
                            name: e.name,
                            cookie: e.cookie,
                        })
                        .collect(),
                    eof,
                }))
            }
            RequestOp::ReadDirPlus {
                dir,
                cookie,
                dircount,
                maxcount,
                ..
            } => {
                let (d, entries, eof) = self.list(
                    ctx,
                    &dir,
                    cookie,
                    maxcount as usize,
                    dircount as usize,
                    true,
                )?;
                out.leased.push((d.key, dir));
                for e in &entries {
                    if let Some(fh) = e.fh
                        && let Ok(h) = self.key.verify(&fh)
                    {
                        out.leased.push(((h.device, h.inode), fh));
                    }
                }
                Ok(ReplyBody::ReadDirPlus(DirPage {
                    dir_attr: Some(d.attr(lease)),
                    verifier: [0; 8],
                    entries,
                    eof,
                }))
            }
            RequestOp::FsStat { fh } => {
                let o = self.obj(&fh, c)?;
                let s = rustix::fs::fstatvfs(&self.root).map_err(errno)?;
                Ok(ReplyBody::FsStat(FsStat {
                    attr: Some(o.attr(lease)),
                    tbytes: s.f_blocks.saturating_mul(s.f_frsize),
                    fbytes: s.f_bfree.saturating_mul(s.f_frsize),
                    abytes: s.f_bavail.saturating_mul(s.f_frsize),
                    tfiles: s.f_files,
                    ffiles: s.f_ffree,
                    afiles: s.f_favail,
                    invarsec: 0,
                }))
            }
            RequestOp::FsInfo { fh } => {
                let o = self.obj(&fh, c)?;
                Ok(ReplyBody::FsInfo(FsInfo {
                    attr: Some(o.attr(lease)),
                    rtmax: self.max_io,
                    rtpref: self.max_io,
                    rtmult: 4096,
                    wtmax: self.max_io,
                    wtpref: self.max_io,
                    wtmult: 4096,
                    dtpref: MAX_DIR_REPLY as u32,
                    maxfilesize: i64::MAX as u64,
                    time_delta: Time {
                        seconds: 0,
                        nanos: 1,
                    },
                    properties: 0x1 | 0x2 | 0x8 | 0x10,
                }))
            }
            RequestOp::PathConf { fh } => {
                let o = self.obj(&fh, c)?;
                Ok(ReplyBody::PathConf(PathConf {
                    attr: Some(o.attr(lease)),
                    linkmax: 65000,
                    name_max: NAME_MAX as u32,
                    no_trunc: true,
                    chown_restricted: true,
                    case_insensitive: false,
                    case_preserving: true,
                }))
            }
            RequestOp::Null | RequestOp::Login(_) | RequestOp::Read { .. } => {
                Err(NfsStatus::ServerFault)
            }
        }
    }

    /// MOUNT: resolves the path one component at a time beneath the root, so the kernel checks
    /// search permission on every directory on the way.
    fn mount(&self, ctx: &OpCtx, path: &[u8], out: &mut Outcome) -> Result<ReplyBody, NfsStatus> {
        let text = std::str::from_utf8(path).map_err(|_| NfsStatus::Inval)?;
        let root_fd = self.open_path_at(self.root.as_fd(), Path::new(""))?;
        let mut at = self.obj_from(root_fd, PathBuf::new())?;
        for comp in text.split('/').filter(|s| !s.is_empty() && *s != ".") {
            if comp == ".." {
                return Err(NfsStatus::Acces);
            }
            let name = component(comp.as_bytes())?;
            if at.ftype() != FileType::Directory {
                return Err(NfsStatus::NotDir);
            }
            at = self.child(&at, name)?;
        }
        if at.ftype() != FileType::Directory {
            return Err(NfsStatus::NotDir);
        }
        // Mounting needs search permission on the directory itself too.
        if !at.may(Access::EXEC_OK) {
            return Err(NfsStatus::Acces);
        }
        let fh = self.fh(&at);
        out.leased.push((at.key, fh));
        Ok(ReplyBody::Mount {
            fh,
            attr: at.attr(ctx.lease_ms),
        })
    }

    /// ACCESS: asks the kernel, under the caller's credentials, for each bit.
    fn access_bits(&self, o: &Obj, c: &Creds, asked: u32) -> u32 {
        let may = |want| o.may(want);
        let is_dir = o.ftype() == FileType::Directory;
        let mut granted = 0;
        if asked & access::READ != 0 && may(Access::READ_OK) {
            granted |= access::READ;
        }
        if asked & (access::LOOKUP | access::EXECUTE) != 0 && may(Access::EXEC_OK) {
            granted |= if is_dir {
                access::LOOKUP
            } else {
                access::EXECUTE
            };
        }
        let modify = access::MODIFY | access::EXTEND | access::DELETE;
        if asked & modify != 0 && !self.read_only && !c.anonymous && may(Access::WRITE_OK) {
            granted |= access::MODIFY | access::EXTEND;
            if is_dir {
                granted |= access::DELETE;
            }
        }
        granted & asked
    }

    fn create(
        &self,
        ctx: &OpCtx,
        dir: &FileHandle,
        name: &[u8],
        how: CreateHow,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let d = self.dir(dir, &ctx.creds)?;
        let n = new_component(name)?;
        let (sattr, verifier) = match &how {
            CreateHow::Unchecked(s) | CreateHow::Guarded(s) => (*s, None),
            CreateHow::Exclusive(v) => (SetAttr::default(), Some(*v)),
        };
        let mode = Mode::from_raw_mode(sattr.mode.unwrap_or(0o644) & 0o7777);
        let flags = OFlags::CREATE
            | OFlags::EXCL
            | OFlags::WRONLY
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        match rustix::fs::openat2(&d.fd, n, flags, mode, RESOLVE) {
            Ok(fd) => {
                // The new file, through the descriptor its creation returned.
                let file = File::from(fd);
                if let Some(v) = verifier {
                    // NFS convention: the verifier lives in atime/mtime until the client's
                    // follow-up SETATTR.
                    let (a, m) = verifier_times(&v);
                    let at = |s: i64| Timespec {
                        tv_sec: s,
                        tv_nsec: 0,
                    };
                    let ts = Timestamps {
                        last_access: at(a),
                        last_modification: at(m),
                    };
                    rustix::fs::futimens(&file, &ts).map_err(errno)?;
                } else {
                    if let Some(size) = sattr.size {
                        file.set_len(size).map_err(|e| io_status(&e))?;
                    }
                    let ts = Timestamps {
                        last_access: timespec(&sattr.atime),
                        last_modification: timespec(&sattr.mtime),
                    };
                    if !matches!(sattr.atime, SetTime::DontChange)
                        || !matches!(sattr.mtime, SetTime::DontChange)
                    {
                        rustix::fs::futimens(&file, &ts).map_err(errno)?;
                    }
                }
                let fd: OwnedFd = file.into();
                let o = self.obj_from(fd, d.path.join(n))?;
                lock(&self.index).remember(o.key, d.key, n.as_bytes());
                Ok(ReplyBody::Create(self.new_object(ctx, &d, &o, out)))
            }
            Err(rustix::io::Errno::EXIST) => {
                let o = self.child(&d, n)?;
                match how {
                    CreateHow::Guarded(_) => Err(NfsStatus::Exist),
                    CreateHow::Exclusive(v) => {
                        let a = o.attr(0);
                        let (at, mt) = verifier_times(&v);
                        let same = o.ftype() == FileType::Regular
                            && a.atime.seconds == at
                            && a.mtime.seconds == mt;
                        if !same {
                            return Err(NfsStatus::Exist);
                        }
                        Ok(ReplyBody::Create(self.new_object(ctx, &d, &o, out)))
                    }
                    CreateHow::Unchecked(s) => {
                        if o.ftype() != FileType::Regular {
                            return Err(NfsStatus::Exist);
                        }
                        if let Some(size) = s.size {
                            o.reopen(OFlags::WRONLY)?
                                .set_len(size)
                                .map_err(|e| io_status(&e))?;
                        }
                        let new = self.new_object(ctx, &d, &o, out);
                        out.changed.push((o.key, new.fh, new.attr));
                        Ok(ReplyBody::Create(new))
                    }
                }
            }
            Err(e) => Err(errno(e)),
        }
    }

    fn remove(
        &self,
        ctx: &OpCtx,
        dir: &FileHandle,
        name: &[u8],
        rmdir: bool,
        out: &mut Outcome,
    ) -> Result<Option<Attr>, NfsStatus> {
        self.writable()?;
        let d = self.dir(dir, &ctx.creds)?;
        if rmdir && name == b"." {
            return Err(NfsStatus::Inval);
        }
        if rmdir && name == b".." {
            return Err(NfsStatus::NotEmpty);
        }
        let n = old_component(name)?;
        // Only to tell other holders what changed; the kernel decides the removal itself.
        let victim = self.child(&d, n)?;
        let is_dir = victim.ftype() == FileType::Directory;
        if rmdir && !is_dir {
            return Err(NfsStatus::NotDir);
        }
        if !rmdir && is_dir {
            return Err(NfsStatus::IsDir);
        }
        let flags = if rmdir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&d.fd, n, flags).map_err(|e| match e {
            rustix::io::Errno::EXIST | rustix::io::Errno::NOTEMPTY => NfsStatus::NotEmpty,
            e => errno(e),
        })?;
        if victim.meta.nlink() <= 1 || is_dir {
            lock(&self.index).forget(victim.key);
        }
        let dir_attr = d.fresh_attr(ctx.lease_ms);
        out.changed.push((victim.key, self.fh(&victim), None));
        out.changed.push((d.key, *dir, dir_attr));
        out.leased.push((d.key, *dir));
        Ok(dir_attr)
    }

    fn rename(
        &self,
        ctx: &OpCtx,
        from_dir: FileHandle,
        from_name: &[u8],
        to_dir: FileHandle,
        to_name: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let c = &ctx.creds;
        let fd = self.dir(&from_dir, c)?;
        let td = self.dir(&to_dir, c)?;
        let fname = old_component(from_name)?;
        let tname = old_component(to_name)?;
        // For the index and INVALIDATE only; the kernel decides the rename itself.
        let moving = self.child(&fd, fname)?;
        let replaced = self.child(&td, tname).ok();
        rustix::fs::renameat(&fd.fd, fname, &td.fd, tname).map_err(|e| match e {
            rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST => NfsStatus::NotEmpty,
            e => errno(e),
        })?;
        {
            let mut ix = lock(&self.index);
            if let Some(r) = &replaced
                && r.key != moving.key
                && r.meta.nlink() <= 1
            {
                ix.forget(r.key);
            }
            ix.remember(moving.key, td.key, tname.as_bytes());
        }
        let lease = ctx.lease_ms;
        out.changed.push((moving.key, self.fh(&moving), None));
        if let Some(r) = replaced
            && r.key != moving.key
        {
            out.changed.push((r.key, self.fh(&r), None));
        }
        let from_dir_attr = fd.fresh_attr(lease);
        let to_dir_attr = td.fresh_attr(lease);
        out.changed.push((fd.key, from_dir, from_dir_attr));
        out.changed.push((td.key, to_dir, to_dir_attr));
        out.leased.push((fd.key, from_dir));
        out.leased.push((td.key, to_dir));
        Ok(ReplyBody::Rename {
            from_dir_attr,
            to_dir_attr,
        })
    }

    /// One page of a directory from the cursor `cookie`, within the client's budget and the
    /// server's own maximum.
    #[allow(clippy::type_complexity)]
    fn list(
        &self,
        ctx: &OpCtx,
        dir: &FileHandle,
        cookie: u64,
        budget: usize,
        dir_budget: usize,
        plus: bool,
    ) -> Result<(Obj, Vec<DirEntryPlus>, bool), NfsStatus> {
        let d = self.dir(dir, &ctx.creds)?;
        let budget = budget.min(MAX_DIR_REPLY);
        let dir_budget = dir_budget.min(MAX_DIR_REPLY);
        let mut stream = open_dir_stream(d.fd.as_fd())?;
        if cookie != 0 {
            let at = i64::try_from(cookie).map_err(|_| NfsStatus::BadCookie)?;
            stream.seek(at).map_err(|_| NfsStatus::BadCookie)?;
        }
        // Reply overhead: status, attrs, verifier, count, eof.
        let mut used = 200usize;
        let mut dir_used = 0usize;
        let mut entries = Vec::new();
        let mut eof = true;
        for e in stream {
            let e = e.map_err(errno)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let base = 8 + 4 + name.len().div_ceil(4) * 4 + 8;
            let cost = base + if plus { 4 + 104 + 4 + 48 } else { 0 };
            if used + cost > budget || (dir_budget > 0 && dir_used + base > dir_budget) {
                eof = false;
                break;
            }
            used += cost;
            dir_used += base;
            let (attr, fh, fileid) = if plus {
                // Under the caller's credentials: without search permission on the directory
                // the kernel refuses and the entry carries no handle.
                match self.child(&d, OsStr::from_bytes(name)) {
                    Ok(o) => (Some(o.attr(ctx.lease_ms)), Some(self.fh(&o)), o.key.1),
                    Err(_) => (None, None, e.ino()),
                }
            } else {
                (None, None, e.ino())
            };
            entries.push(DirEntryPlus {
                fileid,
                name: name.to_vec(),
                cookie: e.offset() as u64,
                attr,
                fh,
            });
        }
        if entries.is_empty() && !eof {
            return Err(NfsStatus::TooSmall);
        }
        Ok((d, entries, eof))
    }
}

/// Opens directory `dir` for reading (the kernel checks read permission) as a stream.
fn open_dir_stream(dir: BorrowedFd<'_>) -> Result<rustix::fs::Dir, NfsStatus> {
    let fd = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(errno)?;
    rustix::fs::Dir::new(fd).map_err(errno)
}

impl Storage for LocalFs {
    fn execute(&self, ctx: &OpCtx, op: RequestOp) -> Outcome {
        let mut out = Outcome::err(NfsStatus::ServerFault);
        out.result = match self
            .switcher
            .run(&ctx.creds, || self.run(ctx, op, &mut out))
        {
            Ok(result) => result,
            Err(e) => {
                tracing::error!(error = %e, user = %ctx.creds.name, "cannot switch credentials");
                Err(NfsStatus::ServerFault)
            }
        };
        if out.result.is_err() {
            out.changed.clear();
            out.leased.clear();
        }
        out
    }

    fn open_read(&self, ctx: &OpCtx, h: &HandleData) -> Result<ReadableFile, NfsStatus> {
        let opened = self.switcher.run(&ctx.creds, || {
            let o = self.resolve(h, &ctx.creds)?;
            o.require_regular()?;
            let file = o.reopen(OFlags::RDONLY)?;
            let meta = file.metadata().map_err(|e| io_status(&e))?;
            Ok(ReadableFile {
                file,
                attr: Attr::from_metadata(&meta, ctx.lease_ms),
            })
        });
        opened.unwrap_or_else(|e| {
            tracing::error!(error = %e, user = %ctx.creds.name, "cannot switch credentials");
            Err(NfsStatus::ServerFault)
        })
    }
}

/// Reads up to `count` bytes at `offset` straight into the end of `buf`; returns EOF. The
/// buffer grows by at most what the file holds past `offset` (never by what was asked).
pub fn read_into(
    file: &File,
    size: u64,
    offset: u64,
    count: usize,
    buf: &mut Vec<u8>,
) -> io::Result<bool> {
    let start = buf.len();
    let want = count.min(usize::try_from(size.saturating_sub(offset)).unwrap_or(usize::MAX));
    buf.resize(start + want, 0);
    let mut got = 0;
    while got < want {
        match file.read_at(&mut buf[start + got..], offset + got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                buf.truncate(start);
                return Err(e);
            }
        }
    }
    buf.truncate(start + got);
    Ok(offset + got as u64 >= size)
}
