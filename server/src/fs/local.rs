//! The local-directory backend.
//!
//! **Never escaping the export.** Every open is `openat2(2)` relative to a directory fd of the
//! export root (or of an already-resolved directory) with `RESOLVE_BENEATH |
//! RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` and `O_NOFOLLOW`: the kernel
//! refuses `..` above the root, absolute paths, and any symlink (a symlink is served as an
//! object of its own, READLINK returns its text, the server never follows it). Names from
//! clients are single components (no `/`, no NUL). After every open the object's (dev, inode)
//! is compared with the handle's, so a rename racing with a request can only make it fail
//! (STALE), never act on another object.
//!
//! **Handles across restarts.** A handle carries (export id, dev, inode, generation) and a
//! MAC; the MAC secret is persisted. To get from an inode back to the object the backend keeps
//! an in-memory map inode -> path below the root, filled by every LOOKUP, CREATE, READDIRPLUS...
//! On a miss (after a restart, or when a rename made the remembered path stale) it walks the
//! export once (bounded) and rebuilds the map.
//!
//! **Generation.** Linux does not expose inode generation numbers portably, so the handle's
//! generation is the object's birth time (`statx` `STATX_BTIME`, read through std's
//! `Metadata::created()`) in nanoseconds since the epoch. A deleted file whose inode number is
//! reused by a new file gets a new birth time, so the old handle resolves to STALE instead of
//! the new file. Birth time is stored on disk, so handles stay valid across a server restart.
//! Fallback: on a file system that records no birth time (`created()` fails) the generation is
//! 0 for every object, and there a reused inode number still revives an old handle (the
//! limitation NFS servers have on file systems without generations).

use std::collections::{HashMap, VecDeque};
use std::ffi::OsStr;
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use protocol::{
    Attr, CreateHow, DirEntry, DirEntryPlus, DirPage, FileHandle, FileType, FsInfo, FsStat,
    HandleData, HandleKey, NewObject, NfsStatus, PathConf, ReplyBody, RequestOp, SetAttr, SetTime,
    StableHow, Time,
};
use rustix::fs::{AtFlags, Mode, OFlags, ResolveFlags};

use super::perm::{self, R, W, X};
use super::{ObjKey, OpCtx, Outcome, ReadableFile, Storage};
use crate::server::lock;
use crate::users::Creds;

/// The only export this server has (handles carry it so a future multi-export server can tell
/// them apart).
pub const EXPORT_ID: u32 = 1;
/// Longest name component accepted.
pub const NAME_MAX: usize = 255;
/// Bound on the objects the restart walk indexes.
const MAX_INDEX: usize = 1 << 20;
/// Minimum time between two walks of the export.
const WALK_INTERVAL: Duration = Duration::from_secs(1);

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
        _ => NfsStatus::from_io_error(e),
    }
}

/// A resolved object: an fd opened with the flags asked for, and its metadata.
struct Obj {
    key: ObjKey,
    path: PathBuf,
    file: File,
    meta: std::fs::Metadata,
}

impl Obj {
    fn ftype(&self) -> FileType {
        let t = self.meta.file_type();
        if t.is_dir() {
            FileType::Directory
        } else if t.is_symlink() {
            FileType::Symlink
        } else if t.is_file() {
            FileType::Regular
        } else {
            FileType::Fifo
        }
    }
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

/// A name that may be created or removed (not `.` or `..`).
fn new_component(name: &[u8]) -> Result<&OsStr, NfsStatus> {
    let n = component(name)?;
    if name == b"." || name == b".." {
        return Err(NfsStatus::Exist);
    }
    Ok(n)
}

/// READDIR cookie of a name: a hash, so cookies do not move when other entries come and go.
fn cookie_of(name: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    name.hash(&mut h);
    (h.finish() >> 1).max(3)
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

fn to_system_time(t: Time) -> SystemTime {
    t.to_system_time()
}

/// The local-directory backend.
pub struct LocalFs {
    root: OwnedFd,
    root_key: ObjKey,
    key: HandleKey,
    paths: Mutex<HashMap<ObjKey, PathBuf>>,
    /// Serialises walks and remembers when the last one finished: a burst of unknown handles
    /// (after a restart, or a hostile client replaying handles of deleted files) costs one
    /// walk, not one per request.
    last_walk: Mutex<Option<Instant>>,
    /// Largest READ/WRITE (FSINFO).
    max_io: u32,
    /// WRITE/COMMIT verifier: changes on restart, so clients resend unstable writes.
    write_verifier: [u8; 8],
    /// New objects are given to the creating user (possible only when running as root).
    chown_new: bool,
    read_only: bool,
}

impl LocalFs {
    pub fn open(
        export: &Path,
        key: HandleKey,
        max_io: u32,
        read_only: bool,
    ) -> io::Result<LocalFs> {
        let root: OwnedFd = File::open(export)?.into();
        let meta = File::from(root.try_clone()?).metadata()?;
        if !meta.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "export is not a directory",
            ));
        }
        let root_key = (meta.dev(), meta.ino());
        let mut paths = HashMap::new();
        paths.insert(root_key, PathBuf::new());
        Ok(LocalFs {
            root,
            root_key,
            key,
            paths: Mutex::new(paths),
            last_walk: Mutex::new(None),
            max_io,
            write_verifier: rand::random(),
            // /proc/self belongs to the process's effective uid.
            chown_new: std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0),
            read_only,
        })
    }

    fn handle(&self, key: ObjKey, generation: u64) -> FileHandle {
        self.key.seal(&HandleData {
            export_id: EXPORT_ID,
            device: key.0,
            inode: key.1,
            generation,
        })
    }

    /// The handle of a resolved object.
    fn fh(&self, o: &Obj) -> FileHandle {
        self.handle(o.key, generation(&o.meta))
    }

    fn attr(&self, o: &Obj, lease_ms: u32) -> Attr {
        Attr::from_metadata(&o.meta, lease_ms)
    }

    /// Opens `path` (relative to the root, never escaping it).
    fn open_beneath(&self, path: &Path, flags: OFlags) -> Result<File, NfsStatus> {
        let p: &Path = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        self.openat_beneath(self.root.as_fd(), p, flags)
    }

    fn openat_beneath(
        &self,
        dir: std::os::fd::BorrowedFd<'_>,
        path: &Path,
        flags: OFlags,
    ) -> Result<File, NfsStatus> {
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mut tries = 0;
        loop {
            match rustix::fs::openat2(dir, path, flags, Mode::empty(), RESOLVE) {
                Ok(fd) => return Ok(File::from(fd)),
                // A concurrent rename somewhere in the tree: the kernel asks to retry.
                Err(rustix::io::Errno::AGAIN) if tries < 8 => tries += 1,
                Err(e) => return Err(errno(e)),
            }
        }
    }

    fn remember(&self, key: ObjKey, path: PathBuf) {
        let mut map = lock(&self.paths);
        if map.len() < MAX_INDEX || map.contains_key(&key) {
            map.insert(key, path);
        }
    }

    fn forget(&self, key: ObjKey) {
        lock(&self.paths).remove(&key);
    }

    /// The path last seen for `key`, if any.
    fn known_path(&self, key: ObjKey) -> Option<PathBuf> {
        lock(&self.paths).get(&key).cloned()
    }

    /// Opens `path` and checks it is still the object `key` born at `birth` (else STALE).
    fn open_at_path(
        &self,
        key: ObjKey,
        birth: u64,
        path: &Path,
        flags: OFlags,
    ) -> Result<Obj, NfsStatus> {
        let file = self.open_beneath(path, flags)?;
        let meta = file.metadata().map_err(|e| io_status(&e))?;
        if (meta.dev(), meta.ino()) != key || generation(&meta) != birth {
            return Err(NfsStatus::Stale);
        }
        Ok(Obj {
            key,
            path: path.to_path_buf(),
            file,
            meta,
        })
    }

    /// From a verified handle to the object, opened with `flags`.
    fn resolve(&self, h: &HandleData, flags: OFlags) -> Result<Obj, NfsStatus> {
        if h.export_id != EXPORT_ID {
            return Err(NfsStatus::Stale);
        }
        let key = (h.device, h.inode);
        let birth = h.generation;
        let known = self.known_path(key);
        let was_known = known.is_some();
        if let Some(path) = known {
            match self.open_at_path(key, birth, &path, flags) {
                Ok(o) => return Ok(o),
                Err(NfsStatus::Stale | NfsStatus::NoEnt | NfsStatus::NotDir) => {}
                Err(e) => return Err(e),
            }
        }
        // Unknown (restart) or moved: index the export again, once per burst.
        let found = {
            let mut last = lock(&self.last_walk);
            let known = self.known_path(key);
            match known {
                // Another request's walk found it while we waited.
                Some(p) if self.open_at_path(key, birth, &p, OFlags::PATH).is_ok() => Some(p),
                // A handle we never saw this run (or whose object is gone): rate-limited.
                // A known object that moved always gets a walk.
                _ if !was_known && last.is_some_and(|t| t.elapsed() < WALK_INTERVAL) => None,
                _ => {
                    let found = self.walk(key);
                    *last = Some(Instant::now());
                    found
                }
            }
        };
        match found {
            Some(path) => self
                .open_at_path(key, birth, &path, flags)
                .map_err(|e| match e {
                    NfsStatus::NoEnt => NfsStatus::Stale,
                    e => e,
                }),
            None => {
                self.forget(key);
                Err(NfsStatus::Stale)
            }
        }
    }

    /// Walks the export breadth-first (never following symlinks), remembering every object's
    /// path; returns the path of `want` if found.
    fn walk(&self, want: ObjKey) -> Option<PathBuf> {
        tracing::debug!(?want, "walking the export to find a handle");
        let mut found = None;
        let mut seen = 0usize;
        let mut queue = VecDeque::from([PathBuf::new()]);
        let mut fresh = HashMap::new();
        fresh.insert(self.root_key, PathBuf::new());
        while let Some(dir) = queue.pop_front() {
            let Ok(file) = self.open_beneath(&dir, OFlags::RDONLY | OFlags::DIRECTORY) else {
                continue;
            };
            let Ok(entries) = rustix::fs::Dir::read_from(&file) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name().to_bytes();
                if name == b"." || name == b".." {
                    continue;
                }
                let name = OsStr::from_bytes(name);
                let Ok(st) = rustix::fs::statat(&file, name, AtFlags::SYMLINK_NOFOLLOW) else {
                    continue;
                };
                let key = (st.st_dev, st.st_ino);
                let path = dir.join(name);
                if key == want && found.is_none() {
                    found = Some(path.clone());
                }
                if (st.st_mode & libc::S_IFMT) == libc::S_IFDIR && !fresh.contains_key(&key) {
                    queue.push_back(path.clone());
                }
                fresh.entry(key).or_insert(path);
                seen += 1;
                if seen >= MAX_INDEX {
                    queue.clear();
                    break;
                }
            }
        }
        *lock(&self.paths) = fresh;
        found
    }

    /// Opens `name` in directory `dir` as an object (a symlink is opened itself).
    fn child(&self, dir: &Obj, name: &OsStr) -> Result<Obj, NfsStatus> {
        let file = self.openat_beneath(dir.file.as_fd(), Path::new(name), OFlags::PATH)?;
        let meta = file.metadata().map_err(|e| io_status(&e))?;
        let key = (meta.dev(), meta.ino());
        let path = dir.path.join(name);
        self.remember(key, path.clone());
        Ok(Obj {
            key,
            path,
            file,
            meta,
        })
    }

    /// LOOKUP semantics including `.` and `..` (which stops at the root).
    fn lookup_child(&self, dir: &Obj, name: &[u8]) -> Result<Obj, NfsStatus> {
        match name {
            b"." => self.open_at_path(dir.key, generation(&dir.meta), &dir.path, OFlags::PATH),
            b".." => {
                let parent = dir.path.parent().unwrap_or(Path::new("")).to_path_buf();
                let file = self.open_beneath(&parent, OFlags::PATH | OFlags::DIRECTORY)?;
                let meta = file.metadata().map_err(|e| io_status(&e))?;
                Ok(Obj {
                    key: (meta.dev(), meta.ino()),
                    path: parent,
                    file,
                    meta,
                })
            }
            _ => self.child(dir, component(name)?),
        }
    }

    fn dir(&self, h: &FileHandle) -> Result<Obj, NfsStatus> {
        let o = self.resolve(&self.key.verify(h)?, OFlags::PATH)?;
        if o.ftype() != FileType::Directory {
            return Err(NfsStatus::NotDir);
        }
        Ok(o)
    }

    fn obj(&self, h: &FileHandle) -> Result<Obj, NfsStatus> {
        self.resolve(&self.key.verify(h)?, OFlags::PATH)
    }

    /// Re-stats an object after a change.
    fn refresh(&self, o: &Obj) -> Option<Attr> {
        let p = if o.path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            &o.path
        };
        let st = self.open_beneath(p, OFlags::PATH).ok()?;
        let meta = st.metadata().ok()?;
        ((meta.dev(), meta.ino()) == o.key && generation(&meta) == generation(&o.meta))
            .then(|| Attr::from_metadata(&meta, 0))
    }

    fn with_lease(a: Option<Attr>, lease_ms: u32) -> Option<Attr> {
        a.map(|mut a| {
            a.lease_ms = lease_ms;
            a
        })
    }

    /// Applies SETATTR-style changes to a regular file or directory the caller has been
    /// checked against.
    fn apply_setattr(&self, o: &Obj, sa: &SetAttr, c: &Creds) -> Result<(), NfsStatus> {
        let a = self.attr(o, 0);
        let is_link = o.ftype() == FileType::Symlink;
        if sa.size.is_some() {
            if o.ftype() != FileType::Regular {
                return Err(if o.ftype() == FileType::Directory {
                    NfsStatus::IsDir
                } else {
                    NfsStatus::Inval
                });
            }
            if !perm::may(&a, c, W) {
                return Err(NfsStatus::Acces);
            }
        }
        if sa.mode.is_some() && !perm::owns(&a, c) {
            return Err(NfsStatus::Perm);
        }
        if let Some(uid) = sa.uid
            && uid != a.uid
            && (c.uid != 0 || c.anonymous)
        {
            return Err(NfsStatus::Perm);
        }
        if let Some(gid) = sa.gid
            && gid != a.gid
            && !(c.uid == 0 && !c.anonymous || perm::owns(&a, c) && c.in_group(gid))
        {
            return Err(NfsStatus::Perm);
        }
        let client_time = |t: &SetTime| matches!(t, SetTime::ClientTime(_));
        let server_time = |t: &SetTime| matches!(t, SetTime::ServerTime);
        if (client_time(&sa.atime) || client_time(&sa.mtime)) && !perm::owns(&a, c) {
            return Err(NfsStatus::Perm);
        }
        if (server_time(&sa.atime) || server_time(&sa.mtime))
            && !perm::owns(&a, c)
            && !perm::may(&a, c, W)
        {
            return Err(NfsStatus::Acces);
        }
        let changes_anything = sa.size.is_some()
            || sa.mode.is_some()
            || sa.uid.is_some()
            || sa.gid.is_some()
            || !matches!(sa.atime, SetTime::DontChange)
            || !matches!(sa.mtime, SetTime::DontChange);
        if !changes_anything {
            return Ok(());
        }
        if is_link {
            return Err(NfsStatus::NotSupp);
        }
        let flags = if sa.size.is_some() {
            OFlags::WRONLY
        } else {
            OFlags::RDONLY | OFlags::NONBLOCK
        };
        let f = self
            .open_at_path(o.key, generation(&o.meta), &o.path, flags)?
            .file;
        if let Some(size) = sa.size {
            f.set_len(size).map_err(|e| io_status(&e))?;
        }
        if let Some(mode) = sa.mode {
            rustix::fs::fchmod(&f, Mode::from_raw_mode(mode & 0o7777)).map_err(errno)?;
        }
        if sa.uid.is_some() || sa.gid.is_some() {
            std::os::unix::fs::fchown(&f, sa.uid, sa.gid).map_err(|e| io_status(&e))?;
        }
        let mut times = std::fs::FileTimes::new();
        let mut any_time = false;
        for (which, t) in [(0, &sa.atime), (1, &sa.mtime)] {
            let when = match t {
                SetTime::DontChange => continue,
                SetTime::ServerTime => SystemTime::now(),
                SetTime::ClientTime(t) => to_system_time(*t),
            };
            any_time = true;
            times = if which == 0 {
                times.set_accessed(when)
            } else {
                times.set_modified(when)
            };
        }
        if any_time {
            f.set_times(times).map_err(|e| io_status(&e))?;
        }
        Ok(())
    }

    /// Gives a new object to its creator (when the server runs as root) and sets its mode
    /// exactly (the process umask does not apply to exported files).
    fn init_new(&self, dir: &Obj, name: &OsStr, c: &Creds, mode: Option<u32>, is_link: bool) {
        if self.chown_new {
            let _ = rustix::fs::chownat(
                &dir.file,
                name,
                Some(rustix::fs::Uid::from_raw(c.uid)),
                Some(rustix::fs::Gid::from_raw(c.primary_gid())),
                AtFlags::SYMLINK_NOFOLLOW,
            );
        }
        if !is_link
            && let Some(mode) = mode
            && let Ok(f) = self.openat_beneath(
                dir.file.as_fd(),
                Path::new(name),
                OFlags::RDONLY | OFlags::NONBLOCK,
            )
        {
            let _ = rustix::fs::fchmod(&f, Mode::from_raw_mode(mode & 0o7777));
        }
    }

    fn new_object(
        &self,
        ctx: &OpCtx,
        dir: &Obj,
        obj: &Obj,
        out: &mut Outcome,
    ) -> (FileHandle, NewObject) {
        let fh = self.fh(obj);
        let dir_fh = self.fh(dir);
        let dir_attr = Self::with_lease(self.refresh(dir), ctx.lease_ms);
        out.leased.push((obj.key, fh));
        out.leased.push((dir.key, dir_fh));
        out.changed.push((dir.key, dir_fh, dir_attr));
        (
            fh,
            NewObject {
                fh,
                attr: Some(self.attr(obj, ctx.lease_ms)),
                dir_attr,
            },
        )
    }

    /// Checks the caller may add or remove entries of `dir`.
    fn check_dir_write(&self, dir: &Obj, c: &Creds) -> Result<(), NfsStatus> {
        if self.read_only {
            return Err(NfsStatus::RoFs);
        }
        if !perm::may(&self.attr(dir, 0), c, W | X) {
            return Err(NfsStatus::Acces);
        }
        Ok(())
    }

    fn run(&self, ctx: &OpCtx, op: RequestOp, out: &mut Outcome) -> Result<ReplyBody, NfsStatus> {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        match op {
            RequestOp::Mount { path } => {
                let text = std::str::from_utf8(&path).map_err(|_| NfsStatus::Inval)?;
                let mut rel = PathBuf::new();
                for comp in text.split('/').filter(|s| !s.is_empty() && *s != ".") {
                    component(comp.as_bytes())?;
                    if comp == ".." {
                        return Err(NfsStatus::Acces);
                    }
                    rel.push(comp);
                }
                let file = self.open_beneath(&rel, OFlags::PATH)?;
                let meta = file.metadata().map_err(|e| io_status(&e))?;
                if !meta.is_dir() {
                    return Err(NfsStatus::NotDir);
                }
                let key = (meta.dev(), meta.ino());
                self.remember(key, rel);
                let fh = self.handle(key, generation(&meta));
                out.leased.push((key, fh));
                Ok(ReplyBody::Mount {
                    fh,
                    attr: Attr::from_metadata(&meta, lease),
                })
            }
            RequestOp::GetAttr { fh } => {
                let o = self.obj(&fh)?;
                out.leased.push((o.key, fh));
                Ok(ReplyBody::GetAttr {
                    attr: self.attr(&o, lease),
                })
            }
            RequestOp::SetAttr { fh, attr, guard } => {
                if self.read_only {
                    return Err(NfsStatus::RoFs);
                }
                let o = self.obj(&fh)?;
                if let Some(g) = guard
                    && self.attr(&o, 0).ctime != g
                {
                    return Err(NfsStatus::NotSync);
                }
                self.apply_setattr(&o, &attr, c)?;
                let a = Self::with_lease(self.refresh(&o), lease);
                out.leased.push((o.key, fh));
                out.changed.push((o.key, fh, a));
                Ok(ReplyBody::SetAttr { attr: a })
            }
            RequestOp::Lookup { dir, name } => {
                let d = self.dir(&dir)?;
                if !perm::may(&self.attr(&d, 0), c, X) {
                    return Err(NfsStatus::Acces);
                }
                let o = self.lookup_child(&d, &name)?;
                let fh = self.fh(&o);
                out.leased.push((o.key, fh));
                out.leased.push((d.key, dir));
                Ok(ReplyBody::Lookup {
                    fh,
                    attr: Some(self.attr(&o, lease)),
                    dir_attr: Some(self.attr(&d, lease)),
                })
            }
            RequestOp::Access { fh, access } => {
                let o = self.obj(&fh)?;
                let a = self.attr(&o, lease);
                out.leased.push((o.key, fh));
                Ok(ReplyBody::Access {
                    access: perm::access_bits(&a, c, access, self.read_only),
                    attr: Some(a),
                })
            }
            RequestOp::ReadLink { fh } => {
                let o = self.obj(&fh)?;
                if o.ftype() != FileType::Symlink {
                    return Err(NfsStatus::Inval);
                }
                let target = rustix::fs::readlinkat(&o.file, "", Vec::new()).map_err(errno)?;
                out.leased.push((o.key, fh));
                Ok(ReplyBody::ReadLink {
                    attr: Some(self.attr(&o, lease)),
                    target: target.into_bytes(),
                })
            }
            RequestOp::Write {
                fh,
                offset,
                stable,
                data,
            } => {
                if self.read_only {
                    return Err(NfsStatus::RoFs);
                }
                let h = self.key.verify(&fh)?;
                let o = self.resolve(&h, OFlags::WRONLY | OFlags::NONBLOCK)?;
                self.check_regular(&o)?;
                if !perm::may(&self.attr(&o, 0), c, W) {
                    return Err(NfsStatus::Acces);
                }
                if offset.checked_add(data.len() as u64).is_none() {
                    return Err(NfsStatus::FBig);
                }
                o.file
                    .write_all_at(&data, offset)
                    .map_err(|e| io_status(&e))?;
                match stable {
                    StableHow::Unstable => {}
                    StableHow::DataSync => o.file.sync_data().map_err(|e| io_status(&e))?,
                    StableHow::FileSync => o.file.sync_all().map_err(|e| io_status(&e))?,
                }
                let a = o
                    .file
                    .metadata()
                    .ok()
                    .map(|m| Attr::from_metadata(&m, lease));
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
                let h = self.key.verify(&fh)?;
                let o = self.resolve(&h, OFlags::RDONLY | OFlags::NONBLOCK)?;
                self.check_regular(&o)?;
                o.file.sync_all().map_err(|e| io_status(&e))?;
                out.leased.push((o.key, fh));
                Ok(ReplyBody::Commit {
                    attr: Some(self.attr(&o, lease)),
                    verifier: self.write_verifier,
                })
            }
            RequestOp::Create { dir, name, how } => {
                let d = self.dir(&dir)?;
                self.check_dir_write(&d, c)?;
                let n = new_component(&name)?;
                let (sattr, exclusive) = match &how {
                    CreateHow::Unchecked(s) | CreateHow::Guarded(s) => (*s, None),
                    CreateHow::Exclusive(v) => (SetAttr::default(), Some(*v)),
                };
                let excl = OFlags::CREATE | OFlags::EXCL | OFlags::RDONLY;
                let mode = Mode::from_raw_mode(sattr.mode.unwrap_or(0o644) & 0o7777);
                let created = rustix::fs::openat2(
                    &d.file,
                    n,
                    excl | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    mode,
                    RESOLVE,
                );
                match created {
                    Ok(_) => {
                        self.init_new(&d, n, c, Some(mode.as_raw_mode()), false);
                        let o = self.child(&d, n)?;
                        if let Some(v) = exclusive {
                            // NFS convention: the verifier lives in atime/mtime until the
                            // client's follow-up SETATTR.
                            let secs =
                                |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as u64;
                            let f = self
                                .open_at_path(o.key, generation(&o.meta), &o.path, OFlags::RDONLY)?
                                .file;
                            let times = std::fs::FileTimes::new()
                                .set_accessed(UNIX_EPOCH + Duration::from_secs(secs(&v[..4])))
                                .set_modified(UNIX_EPOCH + Duration::from_secs(secs(&v[4..])));
                            f.set_times(times).map_err(|e| io_status(&e))?;
                        } else {
                            let rest = SetAttr {
                                mode: None,
                                uid: None,
                                gid: None,
                                ..sattr
                            };
                            self.apply_setattr(&o, &rest, c)?;
                        }
                        let o = self.child(&d, n)?;
                        let (_, new) = self.new_object(ctx, &d, &o, out);
                        Ok(ReplyBody::Create(new))
                    }
                    Err(rustix::io::Errno::EXIST) => {
                        let o = self.child(&d, n)?;
                        match how {
                            CreateHow::Guarded(_) => Err(NfsStatus::Exist),
                            CreateHow::Exclusive(v) => {
                                let a = self.attr(&o, 0);
                                let same = o.ftype() == FileType::Regular
                                    && a.atime.seconds as u64
                                        == u32::from_be_bytes([v[0], v[1], v[2], v[3]]) as u64
                                    && a.mtime.seconds as u64
                                        == u32::from_be_bytes([v[4], v[5], v[6], v[7]]) as u64;
                                if !same {
                                    return Err(NfsStatus::Exist);
                                }
                                let (_, new) = self.new_object(ctx, &d, &o, out);
                                Ok(ReplyBody::Create(new))
                            }
                            CreateHow::Unchecked(s) => {
                                if o.ftype() != FileType::Regular {
                                    return Err(NfsStatus::Exist);
                                }
                                let only_size = SetAttr {
                                    size: s.size,
                                    ..SetAttr::default()
                                };
                                self.apply_setattr(&o, &only_size, c)?;
                                let o = self.child(&d, n)?;
                                let (fh, new) = self.new_object(ctx, &d, &o, out);
                                out.changed.push((o.key, fh, new.attr));
                                Ok(ReplyBody::Create(new))
                            }
                        }
                    }
                    Err(e) => Err(errno(e)),
                }
            }
            RequestOp::Mkdir { dir, name, attr } => {
                let d = self.dir(&dir)?;
                self.check_dir_write(&d, c)?;
                let n = new_component(&name)?;
                let mode = attr.mode.unwrap_or(0o755) & 0o7777;
                rustix::fs::mkdirat(&d.file, n, Mode::from_raw_mode(mode)).map_err(errno)?;
                self.init_new(&d, n, c, Some(mode), false);
                let o = self.child(&d, n)?;
                let (_, new) = self.new_object(ctx, &d, &o, out);
                Ok(ReplyBody::Mkdir(new))
            }
            RequestOp::Symlink {
                dir, name, target, ..
            } => {
                let d = self.dir(&dir)?;
                self.check_dir_write(&d, c)?;
                let n = new_component(&name)?;
                if target.is_empty() || target.contains(&0) {
                    return Err(NfsStatus::Inval);
                }
                rustix::fs::symlinkat(OsStr::from_bytes(&target), &d.file, n).map_err(errno)?;
                self.init_new(&d, n, c, None, true);
                let o = self.child(&d, n)?;
                let (_, new) = self.new_object(ctx, &d, &o, out);
                Ok(ReplyBody::Symlink(new))
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
            } => {
                let fd = self.dir(&from_dir)?;
                let td = self.dir(&to_dir)?;
                self.check_dir_write(&fd, c)?;
                self.check_dir_write(&td, c)?;
                let fname = new_component(&from_name).map_err(|e| match e {
                    NfsStatus::Exist => NfsStatus::Inval,
                    e => e,
                })?;
                let tname = new_component(&to_name).map_err(|e| match e {
                    NfsStatus::Exist => NfsStatus::Inval,
                    e => e,
                })?;
                let moving = self.child(&fd, fname)?;
                let fa = self.attr(&fd, 0);
                if !perm::may_delete_in(&fa, &self.attr(&moving, 0), c) {
                    return Err(NfsStatus::Acces);
                }
                let replaced = self.child(&td, tname).ok();
                if let Some(r) = &replaced
                    && !perm::may_delete_in(&self.attr(&td, 0), &self.attr(r, 0), c)
                {
                    return Err(NfsStatus::Acces);
                }
                rustix::fs::renameat(&fd.file, fname, &td.file, tname).map_err(|e| {
                    if e == rustix::io::Errno::NOTEMPTY || e == rustix::io::Errno::EXIST {
                        NfsStatus::NotEmpty
                    } else {
                        errno(e)
                    }
                })?;
                self.remember(moving.key, td.path.join(tname));
                let mfh = self.fh(&moving);
                out.changed.push((moving.key, mfh, None));
                if let Some(r) = replaced
                    && r.key != moving.key
                {
                    out.changed.push((r.key, self.fh(&r), None));
                }
                let from_dir_attr = Self::with_lease(self.refresh(&fd), lease);
                let to_dir_attr = Self::with_lease(self.refresh(&td), lease);
                out.changed.push((fd.key, from_dir, from_dir_attr));
                out.changed.push((td.key, to_dir, to_dir_attr));
                out.leased.push((fd.key, from_dir));
                out.leased.push((td.key, to_dir));
                Ok(ReplyBody::Rename {
                    from_dir_attr,
                    to_dir_attr,
                })
            }
            RequestOp::Link { fh, dir, name } => {
                let o = self.obj(&fh)?;
                let d = self.dir(&dir)?;
                self.check_dir_write(&d, c)?;
                let n = new_component(&name)?;
                if o.ftype() == FileType::Directory {
                    return Err(NfsStatus::IsDir);
                }
                let linked = rustix::fs::linkat(&o.file, "", &d.file, n, AtFlags::EMPTY_PATH);
                if let Err(e) = linked {
                    if e != rustix::io::Errno::NOENT {
                        return Err(errno(e));
                    }
                    // Without CAP_DAC_READ_SEARCH: go through the fd's /proc link, which
                    // names exactly this already-resolved object.
                    let proc = format!("/proc/self/fd/{}", {
                        use std::os::fd::AsRawFd;
                        o.file.as_raw_fd()
                    });
                    rustix::fs::linkat(
                        rustix::fs::CWD,
                        proc.as_str(),
                        &d.file,
                        n,
                        AtFlags::SYMLINK_FOLLOW,
                    )
                    .map_err(errno)?;
                }
                let attr = Self::with_lease(self.refresh(&o), lease);
                let dir_attr = Self::with_lease(self.refresh(&d), lease);
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
                    dir_attr: Some(self.attr(&d, lease)),
                    verifier: [0; 8],
                    entries: entries
                        .into_iter()
                        .map(|e| DirEntry {
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
                    dir_attr: Some(self.attr(&d, lease)),
                    verifier: [0; 8],
                    entries,
                    eof,
                }))
            }
            RequestOp::FsStat { fh } => {
                let o = self.obj(&fh)?;
                let s = rustix::fs::fstatvfs(&self.root).map_err(errno)?;
                Ok(ReplyBody::FsStat(FsStat {
                    attr: Some(self.attr(&o, lease)),
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
                let o = self.obj(&fh)?;
                Ok(ReplyBody::FsInfo(FsInfo {
                    attr: Some(self.attr(&o, lease)),
                    rtmax: self.max_io,
                    rtpref: self.max_io,
                    rtmult: 4096,
                    wtmax: self.max_io,
                    wtpref: self.max_io,
                    wtmult: 4096,
                    dtpref: 64 * 1024,
                    maxfilesize: i64::MAX as u64,
                    time_delta: Time {
                        seconds: 0,
                        nanos: 1,
                    },
                    properties: 0x1 | 0x2 | 0x8 | 0x10,
                }))
            }
            RequestOp::PathConf { fh } => {
                let o = self.obj(&fh)?;
                Ok(ReplyBody::PathConf(PathConf {
                    attr: Some(self.attr(&o, lease)),
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

    fn check_regular(&self, o: &Obj) -> Result<(), NfsStatus> {
        match o.ftype() {
            FileType::Regular => Ok(()),
            FileType::Directory => Err(NfsStatus::IsDir),
            _ => Err(NfsStatus::Inval),
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
        let c = &ctx.creds;
        let d = self.dir(dir)?;
        self.check_dir_write(&d, c)?;
        if rmdir && name == b"." {
            return Err(NfsStatus::Inval);
        }
        if rmdir && name == b".." {
            return Err(NfsStatus::NotEmpty);
        }
        let n = new_component(name).map_err(|_| NfsStatus::Inval)?;
        let victim = self.child(&d, n)?;
        let is_dir = victim.ftype() == FileType::Directory;
        if rmdir && !is_dir {
            return Err(NfsStatus::NotDir);
        }
        if !rmdir && is_dir {
            return Err(NfsStatus::IsDir);
        }
        if !perm::may_delete_in(&self.attr(&d, 0), &self.attr(&victim, 0), c) {
            return Err(NfsStatus::Acces);
        }
        let flags = if rmdir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&d.file, n, flags).map_err(|e| {
            if e == rustix::io::Errno::EXIST {
                NfsStatus::NotEmpty
            } else {
                errno(e)
            }
        })?;
        if victim.meta.nlink() <= 1 || is_dir {
            self.forget(victim.key);
        }
        let dir_attr = Self::with_lease(self.refresh(&d), ctx.lease_ms);
        out.changed.push((victim.key, self.fh(&victim), None));
        out.changed.push((d.key, *dir, dir_attr));
        out.leased.push((d.key, *dir));
        Ok(dir_attr)
    }

    /// Directory listing in cookie order, from just after `cookie`, within `budget` bytes.
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
        let h = self.key.verify(dir)?;
        let d = self.resolve(&h, OFlags::RDONLY | OFlags::DIRECTORY)?;
        if !perm::may(&self.attr(&d, 0), &ctx.creds, R) {
            return Err(NfsStatus::Acces);
        }
        let mut names: Vec<(u64, Vec<u8>, u64)> = Vec::new();
        let entries = rustix::fs::Dir::read_from(&d.file).map_err(errno)?;
        for e in entries {
            let e = e.map_err(errno)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            let c = cookie_of(name);
            if c > cookie {
                names.push((c, name.to_vec(), e.ino()));
            }
        }
        names.sort_unstable();
        // Reply overhead: status, attrs, verifier, count, eof.
        let mut used = 200usize;
        let mut dir_used = 0usize;
        let mut out = Vec::new();
        let mut eof = true;
        for (c, name, ino) in names {
            let base = 8 + 4 + name.len().div_ceil(4) * 4 + 8;
            let cost = base + if plus { 4 + 104 + 4 + 48 } else { 0 };
            if used + cost > budget || (dir_budget > 0 && dir_used + base > dir_budget) {
                eof = false;
                break;
            }
            used += cost;
            dir_used += base;
            let (attr, fh, fileid) = if plus {
                match self.child(&d, OsStr::from_bytes(&name)) {
                    Ok(o) => (
                        Some(self.attr(&o, ctx.lease_ms)),
                        Some(self.fh(&o)),
                        o.key.1,
                    ),
                    Err(_) => (None, None, ino),
                }
            } else {
                (None, None, ino)
            };
            out.push(DirEntryPlus {
                fileid,
                name,
                cookie: c,
                attr,
                fh,
            });
        }
        if out.is_empty() && !eof {
            return Err(NfsStatus::TooSmall);
        }
        Ok((d, out, eof))
    }
}

impl Storage for LocalFs {
    fn execute(&self, ctx: &OpCtx, op: RequestOp) -> Outcome {
        let mut out = Outcome::err(NfsStatus::ServerFault);
        out.result = self.run(ctx, op, &mut out);
        if out.result.is_err() {
            out.changed.clear();
            out.leased.clear();
        }
        out
    }

    fn open_read(&self, ctx: &OpCtx, h: &HandleData) -> Result<ReadableFile, NfsStatus> {
        let o = self.resolve(h, OFlags::RDONLY | OFlags::NONBLOCK)?;
        self.check_regular(&o)?;
        let attr = self.attr(&o, ctx.lease_ms);
        if !perm::may(&attr, &ctx.creds, R) {
            return Err(NfsStatus::Acces);
        }
        Ok(ReadableFile { file: o.file, attr })
    }
}

/// Reads up to `count` bytes at `offset` straight into the end of `buf`; returns EOF.
pub fn read_into(
    file: &File,
    size: u64,
    offset: u64,
    count: usize,
    buf: &mut Vec<u8>,
) -> io::Result<bool> {
    let start = buf.len();
    let want = count.min(size.saturating_sub(offset) as usize);
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
