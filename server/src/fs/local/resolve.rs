//! From handles and names to objects, never outside the export.
//!
//! This file is the one place that opens anything by name; every operation works on the
//! [`Obj`]s it returns. Review it as a whole: the guarantees below hold because nothing else
//! calls `openat2` with a client-supplied name.
//!
//! **Never escaping the export.** Every open by name is `openat2(2)` relative to the export
//! root or an already-resolved directory with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV` and `O_NOFOLLOW` ([`RESOLVE`]): the kernel refuses
//! `..` above the root, absolute paths, and any symlink (a symlink is served as an object of
//! its own, READLINK returns its text, the server never follows it). Names from clients are
//! single components ([`component`]). After every open by path the object's (dev, inode,
//! generation) is compared with the handle's, so a rename racing with a request can only make
//! it fail (STALE).
//!
//! **File descriptors, never names after a check.** A handle resolves to an `O_PATH` file
//! descriptor; its type is checked on that descriptor, and data is read or written only after
//! re-opening *that* descriptor through `/proc/self/fd` ([`Obj::reopen`]: the same inode, no
//! name lookup), and only for regular files and directories: device nodes and FIFOs are never
//! opened for data. Objects an operation creates are used through the descriptor the creating
//! call returned where the kernel gives one (CREATE); MKDIR and SYMLINK look the new name up
//! once to answer with its handle, and nothing is changed through that lookup.
//!
//! **Handles across restarts: the inode index.** [`Index`] maps (dev, inode) to (parent,
//! name), keeping every name of a hard-linked object up to [`MAX_NAMES`]: REMOVE and RENAME
//! take away only the name they removed, so after link-then-unlink the object is found through
//! the name it kept. On a miss (after a restart, or an external rename) the export is walked
//! once with the server's own credentials. Walks are rate-limited globally, whatever triggers them: at
//! most one per second, and never more than a tenth of the time (a slow walk widens the
//! interval).
//!
//! **Generation.** The handle's generation is the object's birth time (`statx` `STATX_BTIME`)
//! in nanoseconds. A deleted file whose inode number is reused gets a new birth time, so the
//! old handle resolves to STALE. On a file system without birth times the generation is 0 and
//! a reused inode number would still revive an old handle.

use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::mem::ManuallyDrop;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Instant, UNIX_EPOCH};

use protocol::{Attr, FileHandle, FileType, HandleData, NfsStatus};
use rustix::fs::{Access, AtFlags, Mode, OFlags, ResolveFlags};

use super::{EXPORT_ID, LocalFs, MAX_INDEX, NAME_MAX, WALK_DUTY, WALK_INTERVAL, errno, io_status};
use crate::fs::ObjKey;
use crate::users::Creds;

/// How every open by name resolves: beneath the starting directory, through no symlink of any
/// kind, on the same mount.
pub(super) const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Deepest path the index rebuilds.
pub(super) const MAX_DEPTH: usize = 2048;

/// A resolved object: an `O_PATH` descriptor and its metadata, read from that descriptor.
pub(super) struct Obj {
    pub(super) key: ObjKey,
    /// Below the export root; a hint for `..` and for naming children, never trusted alone.
    pub(super) path: PathBuf,
    pub(super) fd: OwnedFd,
    pub(super) meta: std::fs::Metadata,
}

impl Obj {
    pub(super) fn ftype(&self) -> FileType {
        Attr::from_metadata(&self.meta, 0).ftype
    }

    pub(super) fn attr(&self, lease_ms: u32) -> Attr {
        Attr::from_metadata(&self.meta, lease_ms)
    }

    /// Current attributes, read again from the descriptor.
    pub(super) fn fresh_attr(&self, lease_ms: u32) -> Option<Attr> {
        stat_fd(self.fd.as_fd())
            .ok()
            .map(|m| Attr::from_metadata(&m, lease_ms))
    }

    /// `/proc/self/fd/N`: names exactly this already-resolved object.
    pub(super) fn proc_path(&self) -> String {
        format!("/proc/self/fd/{}", self.fd.as_raw_fd())
    }

    /// Opens this object's inode for data. Only for regular files, checked on the `O_PATH`
    /// descriptor by the caller; the kernel checks the access mode against the thread's
    /// credentials.
    pub(super) fn reopen(&self, flags: OFlags) -> Result<File, NfsStatus> {
        debug_assert_eq!(self.ftype(), FileType::Regular);
        let flags = flags | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        rustix::fs::openat(rustix::fs::CWD, self.proc_path(), flags, Mode::empty())
            .map(File::from)
            .map_err(errno)
    }

    /// Whether the calling thread's credentials grant `want` on this object (the kernel's
    /// answer, `faccessat` with `AT_EACCESS`, which uses the fsuid).
    pub(super) fn may(&self, want: Access) -> bool {
        rustix::fs::accessat(rustix::fs::CWD, self.proc_path(), want, AtFlags::EACCESS).is_ok()
    }

    pub(super) fn require_regular(&self) -> Result<(), NfsStatus> {
        match self.ftype() {
            FileType::Regular => Ok(()),
            FileType::Directory => Err(NfsStatus::IsDir),
            _ => Err(NfsStatus::Inval),
        }
    }
}

/// `fstat` of a descriptor we only borrow, through a `File` that is never dropped. Duplicating
/// the descriptor for the call instead would cost two more system calls per stat, and fail
/// when the process is out of descriptors (right after CREATE made a file, say).
pub(super) fn stat_fd(fd: BorrowedFd<'_>) -> io::Result<std::fs::Metadata> {
    // SAFETY: `fd` stays open while it is borrowed, which outlasts `file`, and `file` is never
    // dropped, so it never closes the descriptor it does not own.
    let file = ManuallyDrop::new(unsafe { File::from_raw_fd(fd.as_raw_fd()) });
    file.metadata()
}

/// Checks a client-supplied name is one component.
pub(super) fn component(name: &[u8]) -> Result<&OsStr, NfsStatus> {
    if name.len() > NAME_MAX {
        return Err(NfsStatus::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(NfsStatus::Inval);
    }
    Ok(OsStr::from_bytes(name))
}

/// A name that may be created (not `.` or `..`).
pub(super) fn new_component(name: &[u8]) -> Result<&OsStr, NfsStatus> {
    let n = component(name)?;
    if name == b"." || name == b".." {
        return Err(NfsStatus::Exist);
    }
    Ok(n)
}

/// A name that may be removed or renamed (`.` and `..` are invalid there).
pub(super) fn old_component(name: &[u8]) -> Result<&OsStr, NfsStatus> {
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

/// Opens directory `dir` for reading (the kernel checks read permission) as a stream.
///
/// Through `/proc/self/fd/N`, which names the directory itself: `openat(dir, ".")` would
/// look `.` up in it, which needs search permission as well, so a directory its caller may
/// list but not search (mode 0744 to others) could not be listed, as it can be locally.
pub(super) fn open_dir_stream(dir: BorrowedFd<'_>) -> Result<rustix::fs::Dir, NfsStatus> {
    let fd = rustix::fs::openat(
        rustix::fs::CWD,
        format!("/proc/self/fd/{}", dir.as_raw_fd()),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(errno)?;
    rustix::fs::Dir::new(fd).map_err(errno)
}

impl LocalFs {
    /// The handle of object `key` born at `generation`.
    pub(super) fn handle(&self, key: ObjKey, generation: u64) -> FileHandle {
        self.key.seal(&HandleData {
            export_id: EXPORT_ID,
            device: key.0,
            inode: key.1,
            generation,
            backend: None,
        })
    }

    /// The handle of a resolved object.
    pub(super) fn fh(&self, o: &Obj) -> FileHandle {
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

    /// An object from a descriptor just opened (by this file, or by the call that created it).
    pub(super) fn obj_from(&self, fd: OwnedFd, path: PathBuf) -> Result<Obj, NfsStatus> {
        let meta = stat_fd(fd.as_fd()).map_err(|e| io_status(&e))?;
        Ok(Obj {
            key: (meta.dev(), meta.ino()),
            path,
            fd,
            meta,
        })
    }

    /// The export root itself, opened afresh.
    pub(super) fn root_obj(&self) -> Result<Obj, NfsStatus> {
        let root_fd = self.open_path_at(self.root.as_fd(), Path::new(""))?;
        self.obj_from(root_fd, PathBuf::new())
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
    pub(super) fn resolve(&self, h: &HandleData, creds: &Creds) -> Result<Obj, NfsStatus> {
        if h.export_id != EXPORT_ID {
            return Err(NfsStatus::Stale);
        }
        let key = (h.device, h.inode);
        let birth = h.generation;
        // Every name the index knows (hard links: several), latest first.
        let known = self.index.lock().paths(key);
        let was_known = !known.is_empty();
        for path in known {
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
                // That name is gone or names another object now: try the next.
                Err(NfsStatus::Stale | NfsStatus::NoEnt | NfsStatus::NotDir) => {}
                Err(e) => return Err(e),
            }
        }
        // An object some client keeps open after its last name went ([`super::open`]).
        if let Some(fd) = super::open::anchor(&self.open, key) {
            let o = self.obj_from(fd, PathBuf::new())?;
            if generation(&o.meta) == birth && o.meta.nlink() == 0 {
                return Ok(o);
            }
        }
        // Unknown (restart) or moved outside the server: walk the export, rate-limited; never
        // inline on a worker, nor wait there for another request's walk.
        if super::inline::refused() {
            return Err(NfsStatus::Jukebox);
        }
        let found = {
            let mut gate = self.walks.lock();
            let known = self.index.lock().paths(key);
            let now_found = known
                .into_iter()
                .find(|p| self.open_at_path(key, birth, p).is_ok());
            match now_found {
                // Another request's walk found it while we waited.
                Some(p) => Some(p),
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
                self.index.lock().forget(key);
                Err(NfsStatus::Stale)
            }
        }
    }

    /// Walks the export breadth-first (never following symlinks, never leaving the file
    /// system), rebuilding the index; returns the path of `want` if found.
    fn walk(&self, want: ObjKey) -> Option<PathBuf> {
        tracing::debug!(?want, "walking the export to find a handle");
        let mut fresh = Index::new(self.root_key, MAX_INDEX);
        let mut seen = HashSet::from([self.root_key]);
        let mut queue = VecDeque::new();
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
        self.index.lock().replace(fresh);
        found
    }

    /// Opens `name` in directory `dir` (the kernel checks search permission on `dir`).
    pub(super) fn child(&self, dir: &Obj, name: &OsStr) -> Result<Obj, NfsStatus> {
        let fd = self.open_path_at(dir.fd.as_fd(), Path::new(name))?;
        let o = self.obj_from(fd, dir.path.join(name))?;
        self.index.lock().remember(o.key, dir.key, name.as_bytes());
        Ok(o)
    }

    /// LOOKUP semantics including `.` and `..` (which stops at the root).
    pub(super) fn lookup_child(&self, dir: &Obj, name: &[u8]) -> Result<Obj, NfsStatus> {
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

    /// Records that `obj` is also called `name` in `dir` (after CREATE or LINK made it so).
    pub(super) fn remember(&self, obj: ObjKey, dir: ObjKey, name: &OsStr) {
        self.index.lock().remember(obj, dir, name.as_bytes());
    }

    /// After REMOVE of `name` in `dir`, which named `obj`: forgets that name, and the object
    /// with it if it was the last (`last`); the object's other names stay.
    pub(super) fn removed(&self, obj: ObjKey, last: bool, dir: ObjKey, name: &OsStr) {
        let mut ix = self.index.lock();
        if last {
            ix.forget(obj);
        } else {
            ix.unname(obj, dir, name.as_bytes());
        }
    }

    /// After RENAME of `from` to `to`: `moved` is called `to` instead of `from` (its other
    /// names stay), and `replaced`, the object `to` named before, if any, lost that name (and
    /// is forgotten with its last one, `true`); one update, under one lock.
    pub(super) fn renamed(
        &self,
        moved: ObjKey,
        replaced: Option<(ObjKey, bool)>,
        from: (ObjKey, &OsStr),
        to: (ObjKey, &OsStr),
    ) {
        let mut ix = self.index.lock();
        match replaced {
            Some((r, true)) => ix.forget(r),
            Some((r, false)) => ix.unname(r, to.0, to.1.as_bytes()),
            None => {}
        }
        ix.unname(moved, from.0, from.1.as_bytes());
        ix.remember(moved, to.0, to.1.as_bytes());
    }

    /// The object a client's handle names.
    pub(super) fn obj(&self, h: &FileHandle, creds: &Creds) -> Result<Obj, NfsStatus> {
        self.resolve(&self.key.verify(h)?, creds)
    }

    /// The directory a client's handle names.
    pub(super) fn dir(&self, h: &FileHandle, creds: &Creds) -> Result<Obj, NfsStatus> {
        let o = self.obj(h, creds)?;
        if o.ftype() != FileType::Directory {
            return Err(NfsStatus::NotDir);
        }
        Ok(o)
    }
}

/// When the last walk ended and how long it took.
#[derive(Default)]
pub(super) struct WalkGate {
    last_end: Option<Instant>,
    last_took: std::time::Duration,
}

impl WalkGate {
    fn may_walk(&self) -> bool {
        match self.last_end {
            None => true,
            Some(t) => t.elapsed() >= WALK_INTERVAL.max(self.last_took * WALK_DUTY),
        }
    }
}

/// Names the index keeps for one object: its hard links, the most recently seen first.
const MAX_NAMES: usize = 4;

/// The inode index: from a handle's (device, inode) back to a path below the export root.
///
/// Each known object records its parent directory and its name there (a dentry, in kernel
/// terms), so renaming a directory updates one entry and every path below it follows; the
/// path is rebuilt by walking up the parents. An object with several hard links keeps up to
/// [`MAX_NAMES`] of them, the most recently seen first, and REMOVE and RENAME take away only
/// the name they removed: after link-then-unlink (how mail spools, lock files and git write
/// objects) the object is still found through the name it kept, without a walk. Bounded: at
/// most `max` names in all, paths at most [`MAX_DEPTH`] components (a stale loop of parents
/// ends there instead of spinning).
///
/// The index is only a hint: every path it yields is opened beneath the export root and the
/// opened object's identity checked against the handle, so a stale entry can make a request
/// fail, never act on another object.
#[derive(Debug)]
pub(super) struct Index {
    root: ObjKey,
    /// Each known object's latest name.
    entries: HashMap<ObjKey, Name>,
    /// The older names of objects with several (hard links), newest first: at most
    /// [`MAX_NAMES`]` - 1` each. Kept apart so that the many objects with one name pay nothing
    /// for them.
    older: HashMap<ObjKey, Vec<Name>>,
    /// Names held, over both maps (what `max` bounds).
    names: usize,
    max: usize,
}

/// One name of an object: its parent directory and the name there.
#[derive(Debug)]
struct Name {
    parent: ObjKey,
    name: Box<[u8]>,
}

impl Name {
    fn new(parent: ObjKey, name: &[u8]) -> Name {
        Name {
            parent,
            name: name.into(),
        }
    }

    fn is(&self, parent: ObjKey, name: &[u8]) -> bool {
        self.parent == parent && *self.name == *name
    }
}

impl Index {
    pub(super) fn new(root: ObjKey, max: usize) -> Index {
        Index {
            root,
            entries: HashMap::new(),
            older: HashMap::new(),
            names: 0,
            max,
        }
    }

    /// Records that `key` is called `name` in directory `parent` (its latest name; the names
    /// it already had stay, up to [`MAX_NAMES`], the oldest dropped first).
    fn remember(&mut self, key: ObjKey, parent: ObjKey, name: &[u8]) {
        if key == self.root || key == parent {
            return;
        }
        let full = self.names >= self.max;
        let Some(latest) = self.entries.get_mut(&key) else {
            if !full {
                self.entries.insert(key, Name::new(parent, name));
                self.names += 1;
            }
            return;
        };
        if latest.is(parent, name) {
            return;
        }
        let older = self.older.entry(key).or_default();
        let new = if let Some(i) = older.iter().position(|n| n.is(parent, name)) {
            // Known already: it becomes the latest again.
            older.remove(i)
        } else if !full && older.len() + 1 < MAX_NAMES {
            self.names += 1;
            Name::new(parent, name)
        } else if older.pop().is_some() {
            // No room for one more name: the oldest makes way.
            Name::new(parent, name)
        } else {
            // Its only name, in a full index: replaced, so known objects still move.
            self.older.remove(&key);
            *latest = Name::new(parent, name);
            return;
        };
        older.insert(0, std::mem::replace(latest, new));
    }

    /// Forgets `key` and every name it had.
    fn forget(&mut self, key: ObjKey) {
        if self.entries.remove(&key).is_some() {
            self.names -= 1;
        }
        if let Some(older) = self.older.remove(&key) {
            self.names -= older.len();
        }
    }

    /// Takes away one name of `key` (REMOVE or RENAME took it away); its other names stay,
    /// and with none left it is forgotten.
    fn unname(&mut self, key: ObjKey, parent: ObjKey, name: &[u8]) {
        let Some(latest) = self.entries.get_mut(&key) else {
            return;
        };
        let older = self.older.get_mut(&key);
        if latest.is(parent, name) {
            match older {
                Some(older) if !older.is_empty() => *latest = older.remove(0),
                _ => {
                    self.entries.remove(&key);
                }
            }
        } else if let Some(older) = older
            && let Some(i) = older.iter().position(|n| n.is(parent, name))
        {
            older.remove(i);
        } else {
            return;
        }
        self.names -= 1;
        if self.older.get(&key).is_some_and(Vec::is_empty) {
            self.older.remove(&key);
        }
    }

    /// The path of `key` relative to the root (empty for the root) through its latest name,
    /// if known.
    fn path(&self, key: ObjKey) -> Option<PathBuf> {
        self.up_from(key, Vec::new())
    }

    /// Every known path of `key`, one per name it has (latest first); for the root, the
    /// empty path. Directories have one name, so the ancestors follow their latest names.
    fn paths(&self, key: ObjKey) -> Vec<PathBuf> {
        if key == self.root {
            return vec![PathBuf::new()];
        }
        let Some(latest) = self.entries.get(&key) else {
            return Vec::new();
        };
        let older = self.older.get(&key).into_iter().flatten();
        std::iter::once(latest)
            .chain(older)
            .filter_map(|n| self.up_from(n.parent, vec![&n.name]))
            .collect()
    }

    /// `names` (innermost first) below `at`, completed up to the root through latest names.
    fn up_from<'a>(&'a self, mut at: ObjKey, mut names: Vec<&'a [u8]>) -> Option<PathBuf> {
        while at != self.root {
            if names.len() >= MAX_DEPTH {
                return None;
            }
            let e = self.entries.get(&at)?;
            names.push(&e.name);
            at = e.parent;
        }
        Some(names.iter().rev().map(|n| OsStr::from_bytes(n)).collect())
    }

    /// Names held, over all objects.
    fn len(&self) -> usize {
        self.names
    }

    /// Replaces everything with the result of a fresh walk.
    fn replace(&mut self, fresh: Index) {
        self.entries = fresh.entries;
        self.older = fresh.older;
        self.names = fresh.names;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_and_self_parents_are_never_recorded() {
        let mut ix = Index::new((1, 1), 100);
        ix.remember((1, 1), (1, 2), b"r");
        ix.remember((1, 3), (1, 3), b"me");
        assert_eq!(ix.len(), 0);
        assert_eq!(ix.path((1, 1)), Some(PathBuf::new()));
        assert_eq!(ix.path((1, 3)), None);
    }

    #[test]
    fn walks_take_at_most_a_tenth_of_the_time() {
        let now = Instant::now();
        let gate = |ago: u64, took: u64| WalkGate {
            last_end: Some(now - std::time::Duration::from_millis(ago)),
            last_took: std::time::Duration::from_millis(took),
        };
        assert!(WalkGate::default().may_walk(), "the first walk");
        assert!(!gate(500, 10).may_walk(), "at most one a second");
        assert!(gate(1_100, 10).may_walk());
        // A walk that took 500 ms is followed by 5 s without one.
        assert!(!gate(2_000, 500).may_walk());
        assert!(gate(5_100, 500).may_walk());
    }

    #[test]
    fn names_up_to_name_max_are_one_component() {
        assert!(component(&[b'a'; NAME_MAX]).is_ok());
        assert_eq!(
            component(&[b'a'; NAME_MAX + 1]),
            Err(NfsStatus::NameTooLong)
        );
        for bad in [&b""[..], b"a/b", b"/", b"a\0b"] {
            assert_eq!(component(bad), Err(NfsStatus::Inval), "{bad:?}");
        }
        assert_eq!(new_component(b".."), Err(NfsStatus::Exist));
        assert!(new_component(b"..a").is_ok());
    }

    /// Descriptors sfsd opens for data or listing are close-on-exec and non-blocking (a FIFO
    /// or a leased file never holds a storage thread).
    #[test]
    fn reopened_and_listing_descriptors_carry_their_flags() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        let path_fd =
            |p: &Path| rustix::fs::open(p, OFlags::PATH | OFlags::CLOEXEC, Mode::empty()).unwrap();
        let fd = path_fd(&dir.path().join("f"));
        let meta = stat_fd(fd.as_fd()).unwrap();
        let o = Obj {
            key: (meta.dev(), meta.ino()),
            path: PathBuf::from("f"),
            fd,
            meta,
        };
        let check = |fd: BorrowedFd<'_>| {
            let getfd = rustix::io::fcntl_getfd(fd).unwrap();
            assert!(getfd.contains(rustix::io::FdFlags::CLOEXEC));
            let getfl = rustix::fs::fcntl_getfl(fd).unwrap();
            assert!(getfl.contains(OFlags::NONBLOCK), "{getfl:?}");
        };
        let file = o.reopen(OFlags::RDONLY).unwrap();
        check(file.as_fd());
        let listing = open_dir_stream(path_fd(dir.path()).as_fd()).unwrap();
        check(listing.fd().unwrap());
    }

    #[test]
    fn stat_fd_reads_a_borrowed_descriptor_and_leaves_it_open() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), b"12345").unwrap();
        std::os::unix::fs::symlink("f", dir.path().join("l")).unwrap();
        let open = |name: &str| {
            rustix::fs::open(
                dir.path().join(name),
                OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .unwrap()
        };
        let (file, link) = (open("f"), open("l"));
        for _ in 0..2 {
            let m = stat_fd(file.as_fd()).unwrap();
            assert_eq!((m.is_file(), m.len()), (true, 5));
            let m = stat_fd(link.as_fd()).unwrap();
            assert!(m.file_type().is_symlink(), "the link itself, not followed");
        }
        // Still open, and still the same file: stat_fd closed neither.
        for (fd, name) in [(&file, "f"), (&link, "l")] {
            rustix::io::fcntl_getfd(fd).expect("descriptor still open");
            let by_path = std::fs::symlink_metadata(dir.path().join(name)).unwrap();
            assert_eq!(stat_fd(fd.as_fd()).unwrap().ino(), by_path.ino());
        }
    }

    #[test]
    fn paths_follow_a_renamed_directory() {
        let mut ix = Index::new((1, 1), 100);
        ix.remember((1, 2), (1, 1), b"a");
        ix.remember((1, 3), (1, 2), b"b");
        ix.remember((1, 4), (1, 3), b"f");
        assert_eq!(ix.path((1, 4)), Some(PathBuf::from("a/b/f")));
        assert_eq!(ix.path((1, 1)), Some(PathBuf::new()));
        // Rename a -> z: one update, the file below follows.
        ix.remember((1, 2), (1, 1), b"z");
        assert_eq!(ix.path((1, 4)), Some(PathBuf::from("z/b/f")));
        ix.forget((1, 3));
        assert_eq!(ix.path((1, 4)), None, "a missing ancestor: unknown");
        assert_eq!(ix.path((9, 9)), None);
    }

    fn paths(ix: &Index, key: ObjKey) -> Vec<String> {
        let p = ix.paths(key);
        p.iter().map(|p| p.display().to_string()).collect()
    }

    /// LINK to a new name, then REMOVE of the old one (whose lookup records the old name
    /// again): the object is still found through the new name.
    #[test]
    fn link_then_unlink_keeps_the_other_name() {
        let (root, d, f) = ((1, 1), (1, 2), (1, 3));
        let mut ix = Index::new(root, 100);
        ix.remember(d, root, b"d");
        ix.remember(f, d, b"tmp");
        ix.remember(f, d, b"obj");
        assert_eq!(paths(&ix, f), ["d/obj", "d/tmp"], "latest first");
        ix.remember(f, d, b"tmp");
        assert_eq!(
            paths(&ix, f),
            ["d/tmp", "d/obj"],
            "seen again: latest again"
        );
        assert_eq!(ix.len(), 3, "no name twice");
        ix.unname(f, d, b"tmp");
        assert_eq!(paths(&ix, f), ["d/obj"]);
        assert_eq!(ix.path(f), Some(PathBuf::from("d/obj")));
        // A name it does not have, or an object it does not know: nothing changes.
        ix.unname(f, root, b"obj");
        ix.unname((1, 9), d, b"obj");
        assert_eq!((paths(&ix, f), ix.len()), (vec!["d/obj".to_string()], 2));
        // The last name taken away: forgotten.
        ix.unname(f, d, b"obj");
        assert!(ix.paths(f).is_empty());
        assert_eq!(ix.len(), 1);
        assert_eq!(paths(&ix, root), [""], "the root is always known");
    }

    /// RENAME as `LocalFs::renamed` does it: the moved name taken away and the new one
    /// recorded; the object's other names, and those of a hard-linked object the rename
    /// replaced, stay.
    #[test]
    fn rename_moves_one_name_of_several() {
        let (root, f, g) = ((1, 1), (1, 3), (1, 4));
        let mut ix = Index::new(root, 100);
        ix.remember(f, root, b"a");
        ix.remember(f, root, b"b");
        ix.remember(g, root, b"y");
        ix.remember(g, root, b"y2");
        // a -> y, replacing one of g's two names.
        ix.unname(g, root, b"y");
        ix.unname(f, root, b"a");
        ix.remember(f, root, b"y");
        assert_eq!(paths(&ix, f), ["y", "b"]);
        assert_eq!(paths(&ix, g), ["y2"]);
        assert_eq!(ix.len(), 3);
        assert_eq!(ix.older.len(), 1, "only f has an older name");
        // An object with one name, renamed: still one name, nothing kept beside it.
        ix.unname(g, root, b"y2");
        ix.remember(g, root, b"y3");
        ix.unname(g, root, b"y3");
        ix.remember(g, root, b"y4");
        ix.remember(g, (1, 9), b"elsewhere");
        ix.unname(g, root, b"y4");
        assert_eq!(paths(&ix, g), Vec::<String>::new(), "(1, 9) is unknown");
        assert_eq!(ix.path(g), None);
        ix.remember(g, root, b"y5");
        ix.unname(g, (1, 9), b"elsewhere");
        assert_eq!(paths(&ix, g), ["y5"]);
        assert_eq!(ix.older.len(), 1, "no empty list left for g");
        assert_eq!(ix.len(), 3);
        // Forgetting drops every name.
        ix.forget(f);
        assert!(ix.paths(f).is_empty());
        assert_eq!(ix.len(), 1);
    }

    #[test]
    fn names_per_object_are_bounded_oldest_dropped() {
        let (root, f) = ((1, 1), (1, 3));
        let mut ix = Index::new(root, 100);
        for n in 0..MAX_NAMES + 2 {
            ix.remember(f, root, format!("n{n}").as_bytes());
        }
        let want: Vec<String> = (2..MAX_NAMES + 2).rev().map(|n| format!("n{n}")).collect();
        assert_eq!(paths(&ix, f), want);
        assert_eq!(ix.len(), MAX_NAMES);
    }

    /// Children follow their directory's latest name; a hard link's names each give a path.
    #[test]
    fn every_name_gives_a_path_through_its_directory() {
        let (root, a, b, f) = ((1, 1), (1, 2), (1, 5), (1, 3));
        let mut ix = Index::new(root, 100);
        ix.remember(a, root, b"a");
        ix.remember(b, a, b"b");
        ix.remember(f, a, b"x");
        ix.remember(f, b, b"y");
        ix.remember(f, (1, 9), b"lost");
        assert_eq!(
            paths(&ix, f),
            ["a/b/y", "a/x"],
            "an unknown parent gives no path"
        );
        ix.remember(a, root, b"z");
        assert_eq!(paths(&ix, f), ["z/b/y", "z/x"]);
    }

    /// The global bound counts names: a full index takes no new object, and a known one
    /// trades its oldest name for the new one (or, with one name, replaces it).
    #[test]
    fn the_bound_counts_names() {
        let (root, f, g, h) = ((1, 1), (1, 3), (1, 4), (1, 5));
        let mut ix = Index::new(root, 3);
        ix.remember(f, root, b"f1");
        ix.remember(f, root, b"f2");
        ix.remember(g, root, b"g1");
        assert_eq!(ix.len(), 3);
        ix.remember(h, root, b"h");
        assert!(ix.paths(h).is_empty(), "full: no new object");
        ix.remember(f, root, b"f3");
        assert_eq!(paths(&ix, f), ["f3", "f2"]);
        ix.remember(g, root, b"g2");
        assert_eq!(paths(&ix, g), ["g2"]);
        assert_eq!(ix.len(), 3);
        ix.unname(f, root, b"f2");
        ix.remember(h, root, b"h");
        assert_eq!(paths(&ix, h), ["h"], "room again");
    }

    #[test]
    fn bounded_and_loop_safe() {
        let mut ix = Index::new((1, 1), 2);
        ix.remember((1, 2), (1, 3), b"x");
        ix.remember((1, 3), (1, 2), b"y");
        assert_eq!(ix.path((1, 2)), None, "a parent loop ends");
        ix.remember((1, 4), (1, 1), b"z");
        assert_eq!(ix.len(), 2, "full: new entries are not added");
        ix.remember((1, 2), (1, 1), b"x");
        assert_eq!(
            ix.path((1, 2)),
            Some(PathBuf::from("x")),
            "known ones update"
        );
    }
}
