//! The FUSE file system: the kernel's requests forwarded over the session.
//!
//! Every request is handed to the tokio runtime and answered from there, so one kernel thread
//! keeps many requests in flight on the one encrypted stream (reads ahead, parallel lookups).
//! Extended attribute answers already cached are given at once (`ls -l` asks two per file;
//! they are read ahead along listings, [`xattr_ahead`]).
//!
//! **Parts.** This file holds [`Shared`], the state every request works on (with the node
//! [`Table`]), and the operations on it. [`kernel`] is the kernel adapter ([`SfsFuse`]: each
//! kernel request becomes a call on [`Shared`]); [`convert`] converts between the protocol's
//! types and the kernel's; [`invalidator()`] passes the server's invalidations on to the
//! kernel; each other submodule is one of the mechanisms below.
//!
//! **Inodes.** The kernel names objects by a 64-bit node id; the server by an opaque (48-113 byte)
//! handle. [`Table`] maps between them: a handle gets a node id the first time an entry for it
//! is sent to the kernel (LOOKUP, CREATE, MKDIR, SYMLINK, LINK), the kernel's lookup count is
//! kept, and the node is dropped when the kernel FORGETs it. Node ids are never reused, so a
//! stale kernel reference can only ever meet `ESTALE`, never another file. Hard links share a
//! handle, so they share a node id and `st_ino`.
//!
//! **Leases into the kernel cache.** Every attribute the server sends carries its lease; it
//! becomes the attribute and entry timeout of the reply to the kernel. The server sends
//! INVALIDATE to every other client holding a lease on an object it changes; the session hands
//! those to [`invalidator()`], which tells the kernel to drop the object's attributes and cached
//! pages (`FUSE_NOTIFY_INVAL_INODE`) and, for a directory, every name under it the kernel may
//! have cached (`FUSE_NOTIFY_INVAL_ENTRY`). After a reconnect everything is invalidated, since
//! INVALIDATEs may have been missed. Negative lookups are not cached at all.
//!
//! **Listings** are read whole at `opendir` (kept for the next opens while the directory's
//! lease lasts, [`kept_listings`], and read ahead along a walk, [`listing_ahead`]) and paged
//! by `readdirplus`; the kernel keeps its own copy and serves it again while that is still
//! the listing an open would get ([`kernel_listings`]); the kernel installs an
//! entry's attributes as of its READDIRPLUS request, so an entry changed since the listing was
//! read is sent with newer attributes (the session cache's, else a GETATTR's), never the
//! listing's: those would take a just-written file's size back.
//!
//! **Writes** go to the server UNSTABLE (it keeps them in its kernel's page cache, which a
//! crash of sfsd does not lose); `fsync` sends COMMIT, and if the server's write verifier
//! changed in between (it restarted and may have lost data) it fails with `EIO` instead of
//! claiming success. `close` sends nothing ([`Shared::flushed`]): it fails with `EIO` only
//! when the writes themselves came back with two verifiers.
//! Writes to a file opened `O_APPEND` go as APPEND, placed by the server at the end of the file
//! as it is then, so appends from several mounts never overwrite each other ([`append`]).
//!
//! **Killed callers.** A request whose program is being killed ends at once
//! ([`crate::interrupt`]), so `kill` works on a program waiting for a server that stopped
//! answering; requests whose bookkeeping must complete (RELEASE) run to their end.
//!
//! **Write-back** (the kernel writing a shared mapping's dirty pages) arrives as the kernel,
//! not as the program that wrote: in a `--multi-user` mount it is written as the local user
//! who opened the file handle the kernel sends it on (kept per handle from OPEN or CREATE to
//! RELEASE), and refused (`EACCES`) on a handle this mount does not know, never written as
//! the mount's owner. The kernel picks any writable open file of the node for it, so where
//! two users have one file open for writing, it may go as the other one: a user who opened
//! that file for writing too.
//!
//! **Locks** (`fcntl`, OFD, `flock`) are the server's, so every mount of it sees them
//! ([`locks`]: `F_SETLK` in conflict is `EAGAIN`, a waiting one polls and ends with `EINTR` on
//! a signal, a close releases them).
//!
//! **Permissions** are the server's: the mount does not use `default_permissions`, `access(2)`
//! and `open(2)` ask the server (ACCESS, cached per lease), and every operation is checked by
//! the server as the logged-in identity.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{
    AccessFlags, Errno, FileAttr, Generation, INodeNo, RenameFlags, ReplyDirectoryPlus, Request,
};
use parking_lot::{Mutex, MutexGuard};
use protocol::{Attr, CreateHow, FileHandle, FileType, NfsStatus, SetAttr, StableHow};

use crate::cache::Stamp;
use crate::caller_groups::Groups;
use crate::session::{Client, SessionError};

mod append;
mod convert;
mod invalidator;
mod kept_listings;
mod kernel;
mod kernel_listings;
mod listing_ahead;
mod locks;
mod write_behind;
mod xattr;
mod xattr_ahead;
pub(crate) use xattr::{list as xattr_list, reply_sized as reply_xattr};

use convert::{access_bits, kind, lease_left};
pub use convert::{errno, fattr, placeholder_dir, time_from, ttl};
pub use invalidator::invalidator;
pub use kernel::{SfsFuse, configure};

/// `ioctl` answering `ENOTTY` quietly: no ioctl is in the protocol, and every `isatty(3)` on a
/// file of the mount (thousands in a build) sends TCGETS, which fuser's default would log as a
/// warning each time (the kernel, unlike for other ENOSYS answers, keeps asking). `ENOTTY` is
/// what a regular file answers locally.
macro_rules! no_ioctls {
    () => {
        fn ioctl(
            &self,
            _req: &fuser::Request,
            _ino: fuser::INodeNo,
            _fh: fuser::FileHandle,
            _flags: fuser::IoctlFlags,
            _cmd: u32,
            _in_data: &[u8],
            _out_size: u32,
            reply: fuser::ReplyIoctl,
        ) {
            reply.error(fuser::Errno::ENOTTY);
        }
    };
}
pub(crate) use no_ioctls;

/// The root's node id (fixed by FUSE).
pub const ROOT: u64 = 1;

/// `st_blksize`: large, so `cp` and friends move data in big requests.
const BLKSIZE: u32 = 128 * 1024;

/// Unstable writes not yet committed, per node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dirty {
    /// All writes so far came back with this verifier.
    Verifier([u8; 8]),
    /// Two writes came back with different verifiers: the server restarted in between and
    /// may have lost the earlier one.
    Changed,
}

struct Node {
    fh: FileHandle,
    /// The kernel's lookup count: entries sent minus FORGET counts.
    lookups: u64,
}

/// One directory listing taken at `opendir`, served in pieces by `readdir`/`readdirplus`.
struct Listing {
    entries: Vec<Listed>,
    /// Taken before the listing was asked for: its attributes are from no earlier.
    since: Stamp,
    /// When its answer arrived: the entries' leases run from here (a listing may be kept
    /// and handed out again, [`kept_listings`]).
    received: Instant,
}

struct Listed {
    /// Inode number for plain `readdir` (ours when known, else the server's file id).
    ino: u64,
    kind: fuser::FileType,
    name: Vec<u8>,
    /// Handle and attributes, for `readdirplus` (none for `.` and `..`).
    node: Option<(FileHandle, Attr)>,
}

impl Listed {
    /// The inode number to list for this entry of directory node `dir`: `.` is the node the
    /// directory was opened as (a listing is kept, or read ahead, by handle, not by node).
    fn ino_in(&self, dir: INodeNo) -> u64 {
        if self.node.is_none() && self.name == b"." {
            dir.0
        } else {
            self.ino
        }
    }
}

#[derive(Default)]
struct Table {
    nodes: HashMap<u64, Node>,
    by_fh: HashMap<FileHandle, u64>,
    /// Names under each directory for which the kernel may hold a dentry (sent in an entry
    /// reply and not since invalidated).
    names: HashMap<u64, HashSet<Vec<u8>>>,
    next: u64,
    /// Open listings by FUSE file handle, with the directory node they were opened on.
    listings: HashMap<u64, (u64, Arc<Listing>)>,
    next_listing: u64,
    /// What the kernel's own copy of each directory's listing was filled from.
    kernel_listings: kernel_listings::KernelListings<Listing>,
    dirty: HashMap<u64, Dirty>,
    /// Open files per node (open/create minus release).
    open: HashMap<u64, u32>,
    /// The local user who opened each open file, by the FUSE file handle its open or create
    /// returned: write-back (kernel-initiated WRITEs of a shared mapping's dirty pages) and
    /// the last release act as that user, whoever the kernel sends them as.
    files: HashMap<u64, u32>,
    next_file: u64,
    /// Open nodes the server keeps an open state on, and for which local users: OPEN before
    /// their last name went, or a CREATE whose mode denies the owner
    /// ([`protocol::create_keeps_open_state`]).
    /// Each is CLOSEd at the node's last release.
    states: HashMap<u64, HashSet<u32>>,
    /// Nodes unlinked while open on a server without open states (OPEN answered `NotSupp`, as
    /// sfsd in front of an NFS server does, or the connection's states are used up): renamed
    /// to a hidden name, removed at the last release or when the mount ends.
    hidden: HashMap<u64, (FileHandle, Vec<u8>)>,
    next_hidden: u64,
    /// Nodes whose unstable writes the server may have lost: reported by every flush and by
    /// the next fsync (which clears it), like a kernel's write-back error, so the error is not
    /// swallowed by whichever process happened to close a descriptor first.
    lost: HashSet<u64>,
}

/// Prefix of the hidden names open-but-unlinked files get where the server keeps no open
/// states (not listed by `readdir`).
const HIDDEN_PREFIX: &[u8] = b".sfs-unlinked-";

/// State shared by the kernel-facing side and the invalidation thread.
pub struct Shared {
    client: Client,
    table: Mutex<Table>,
    /// Many users: each local uid other than `owner` acts with its own identity.
    multi_user: bool,
    owner: u32,
    /// The node id of the server's root: [`ROOT`] for a mount of one server; in a
    /// `--namespace` mount each server has its own range of node ids starting here.
    root: u64,
    /// Owners that may hold locks on the server, for UNLOCK at close ([`locks`]).
    locks: Mutex<locks::Held>,
    /// Extended attributes asked along a listing are read ahead ([`xattr_ahead`]).
    xattr_ahead: xattr_ahead::XattrAhead,
    /// WRITEs answered before the server's answer, and what waits for them
    /// ([`write_behind`]).
    behind: Arc<write_behind::WriteBehind>,
    /// Listings kept between opens while their directory's lease lasts ([`kept_listings`]).
    kept: kept_listings::KeptListings,
    /// Listings read ahead along a walk of the tree ([`listing_ahead`]).
    listing_ahead: listing_ahead::ListingAhead,
}

impl Shared {
    /// The tree of `client`'s server below `root`, every caller acting as `client`'s identity.
    pub fn new(client: Client, root: FileHandle) -> Arc<Shared> {
        Shared::with_users(client, root, None)
    }

    /// Like [`Shared::new`]; with `Some(owner)`, callers other than local uid `owner` act as
    /// themselves ([`Client::as_uid`]).
    pub fn with_users(client: Client, root: FileHandle, owner: Option<u32>) -> Arc<Shared> {
        Shared::with_base(client, root, owner, ROOT)
    }

    /// Like [`Shared::with_users`], with the server's root as node `base` and the node ids of
    /// everything below it allocated upwards from there.
    pub fn with_base(
        client: Client,
        root: FileHandle,
        owner: Option<u32>,
        base: u64,
    ) -> Arc<Shared> {
        let mut t = Table {
            next: base + 1,
            next_listing: 1,
            next_file: 1,
            ..Table::default()
        };
        t.nodes.insert(
            base,
            Node {
                fh: root,
                lookups: 1,
            },
        );
        t.by_fh.insert(root, base);
        Arc::new(Shared {
            client,
            table: Mutex::new(t),
            multi_user: owner.is_some(),
            owner: owner.unwrap_or(0),
            root: base,
            locks: Mutex::default(),
            xattr_ahead: xattr_ahead::XattrAhead::default(),
            behind: Arc::default(),
            kept: kept_listings::KeptListings::default(),
            listing_ahead: listing_ahead::ListingAhead::default(),
        })
    }

    /// The session acting for local uid `uid`.
    fn client_for(&self, uid: u32) -> Client {
        if self.multi_user && uid != self.owner {
            self.client.as_uid(uid)
        } else {
            self.client.clone()
        }
    }

    /// The local user whose identity acts for local uid `uid`: itself in a multi-user
    /// mount, the owner otherwise.
    fn acting_uid(&self, uid: u32) -> u32 {
        if self.multi_user { uid } else { self.owner }
    }

    /// The session acting for the process behind `req`. In a multi-user mount its requests
    /// also carry its own groups (its fsgid and supplementary groups, NARROW), so group
    /// permissions, `chgrp` and the group of new objects are what it has locally, within what
    /// the users file grants. A single-user mount keeps the login's groups: its owner's local
    /// group numbers need not be the server's, and the users file already says what the owner
    /// may do. A process whose groups cannot be read (it exited) keeps the login's groups.
    fn client_for_caller(&self, req: &Request) -> Client {
        let c = self.client_for(req.uid());
        if !self.multi_user {
            return c;
        }
        c.with_groups(Groups::of_process(req.pid(), req.gid()))
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock()
    }

    /// A new FUSE file handle for a file opened by local user `uid`.
    fn open_file(&self, uid: u32) -> fuser::FileHandle {
        let mut t = self.table();
        let fh = t.next_file;
        t.next_file += 1;
        t.files.insert(fh, uid);
        fuser::FileHandle(fh)
    }

    /// The session acting for whoever opened FUSE file handle `fh` (the session's own
    /// identity when one mount is one user). In a multi-user mount, a handle this mount did
    /// not hand out (0: the kernel knows no open file) is refused rather than used as the
    /// mount's owner.
    fn client_for_file(&self, fh: fuser::FileHandle) -> Result<Client, Errno> {
        if !self.multi_user {
            return Ok(self.client.clone());
        }
        let opener = self.table().files.get(&fh.0).copied();
        match opener {
            Some(uid) => Ok(self.client_for(uid)),
            None => {
                tracing::warn!(fh = fh.0, "a write-back for an unknown open file; refused");
                Err(Errno::EACCES)
            }
        }
    }

    fn fh(&self, ino: INodeNo) -> Result<FileHandle, Errno> {
        self.table()
            .nodes
            .get(&ino.0)
            .map(|n| n.fh)
            .ok_or(Errno::ESTALE)
    }

    /// The node for `fh`, counting one more kernel lookup; `name` under `parent` is
    /// remembered so a change of the directory can invalidate the kernel's dentry.
    fn remember(&self, parent: INodeNo, name: &[u8], fh: FileHandle) -> u64 {
        let mut t = self.table();
        let ino = match t.by_fh.get(&fh).copied() {
            Some(ino) => {
                if let Some(n) = t.nodes.get_mut(&ino) {
                    n.lookups += 1;
                }
                ino
            }
            None => {
                let ino = t.next;
                t.next += 1;
                t.nodes.insert(ino, Node { fh, lookups: 1 });
                t.by_fh.insert(fh, ino);
                ino
            }
        };
        t.names.entry(parent.0).or_default().insert(name.to_vec());
        ino
    }

    /// The kernel dropped `n` references to `ino`.
    fn forget(&self, ino: u64, n: u64) {
        if ino == self.root {
            return;
        }
        let mut t = self.table();
        let gone = match t.nodes.get_mut(&ino) {
            Some(node) => {
                node.lookups = node.lookups.saturating_sub(n);
                (node.lookups == 0).then_some(node.fh)
            }
            None => None,
        };
        if let Some(fh) = gone {
            t.kernel_listings.forgotten(ino);
            t.nodes.remove(&ino);
            t.by_fh.remove(&fh);
            t.names.remove(&ino);
            t.dirty.remove(&ino);
        }
    }

    fn forget_name(&self, parent: INodeNo, name: &[u8]) {
        if let Some(s) = self.table().names.get_mut(&parent.0) {
            s.remove(name);
        }
    }

    /// An entry reply for `fh` found as `name` in `parent`.
    fn entry(&self, parent: INodeNo, name: &[u8], fh: FileHandle, a: &Attr) -> Entry {
        let ino = self.remember(parent, name, fh);
        Entry {
            ttl: ttl(a),
            attr: fattr(ino, a),
        }
    }

    async fn lookup(&self, c: &Client, parent: INodeNo, name: &[u8]) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        let (fh, mut a) = c.lookup(&dir, name).await.map_err(errno)?;
        // A file with writes under way: its attributes once they are on the server.
        let known = self.table().by_fh.get(&fh).copied();
        if let Some(ino) = known.filter(|&ino| self.behind.busy(ino)) {
            self.behind.settle(ino).await;
            a = c.getattr_fresh(&fh).await.map_err(errno)?;
        }
        Ok(self.entry(parent, name, fh, &a))
    }

    async fn getattr(&self, c: &Client, ino: INodeNo) -> Result<(Duration, FileAttr), Errno> {
        let fh = self.fh(ino)?;
        self.behind.settle(ino.0).await;
        if let Some(a) = self.listed_attr(c, ino, &fh) {
            return Ok((ttl(&a), fattr(ino.0, &a)));
        }
        // The kernel asks only when its own copy expired or was invalidated: go to the server.
        let a = c.getattr_fresh(&fh).await.map_err(errno)?;
        Ok((ttl(&a), fattr(ino.0, &a)))
    }

    /// The attributes of directory `ino` (handle `fh`) that came with a listing of it still
    /// open, if nothing changed the directory since that listing was asked for.
    ///
    /// The kernel forgets a directory's atime after every READDIR (fs/fuse/readdir.c,
    /// `fuse_invalidate_atime`) and glibc's `opendir` `fstat`s the directory it opened, so
    /// each listing after the first would send a GETATTR to the server right after the
    /// READDIRPLUS this opendir made: a second round trip per directory of every walk (`ls
    /// -lR`, `find`). The listing's attributes are the server's as of this very open, as fresh
    /// as that GETATTR's answer would be.
    fn listed_attr(&self, c: &Client, ino: INodeNo, fh: &FileHandle) -> Option<Attr> {
        let since = self
            .table()
            .listings
            .values()
            .filter(|(dir, _)| *dir == ino.0)
            .map(|(_, l)| l.since)
            .max()?;
        if c.cache().changed_since(fh, since) {
            return None;
        }
        c.cache().get(fh)
    }

    async fn setattr(
        &self,
        c: &Client,
        ino: INodeNo,
        s: SetAttr,
    ) -> Result<(Duration, FileAttr), Errno> {
        let fh = self.fh(ino)?;
        self.behind.settle(ino.0).await;
        let a = c.setattr(&fh, s).await.map_err(errno)?;
        Ok((ttl(&a), fattr(ino.0, &a)))
    }

    /// Whether the server grants every `bits` (protocol ACCESS bits) on `ino`.
    async fn check_access(&self, c: &Client, ino: INodeNo, bits: u32) -> Result<(), Errno> {
        if bits == 0 {
            return Ok(());
        }
        let fh = self.fh(ino)?;
        let granted = c.access(&fh, bits).await.map_err(errno)?;
        if granted & bits == bits {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    async fn access(&self, c: &Client, ino: INodeNo, mask: AccessFlags) -> Result<(), Errno> {
        let fh = self.fh(ino)?;
        let a = c.getattr(&fh).await.map_err(errno)?;
        self.check_access(
            c,
            ino,
            access_bits(mask.bits(), a.ftype == FileType::Directory),
        )
        .await
    }

    async fn read(
        &self,
        c: &Client,
        ino: INodeNo,
        offset: u64,
        size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let fh = self.fh(ino)?;
        self.behind.settle(ino.0).await;
        let (rmax, _) = c.io_sizes().await.map_err(errno)?;
        let mut out = Vec::with_capacity(size.min(rmax.max(1) * 4) as usize);
        loop {
            let done = out.len() as u32;
            if done >= size {
                break;
            }
            let want = (size - done).min(rmax.max(1));
            let (data, eof) = c
                .read(&fh, offset + u64::from(done), want)
                .await
                .map_err(errno)?;
            let empty = data.is_empty();
            out.extend_from_slice(&data);
            if eof || empty {
                break;
            }
        }
        Ok(out)
    }

    async fn write(
        &self,
        c: &Client,
        ino: INodeNo,
        offset: u64,
        data: &[u8],
    ) -> Result<u32, Errno> {
        let fh = self.fh(ino)?;
        let (_, wmax) = c.io_sizes().await.map_err(errno)?;
        let wmax = wmax.max(1) as usize;
        let mut pos = 0usize;
        while pos < data.len() {
            let end = (pos + wmax).min(data.len());
            let (n, verf) = c
                .write(
                    &fh,
                    offset + pos as u64,
                    StableHow::Unstable,
                    &data[pos..end],
                )
                .await
                .map_err(errno)?;
            self.note_write(ino.0, verf);
            if n == 0 {
                return Err(Errno::EIO);
            }
            pos += n as usize;
        }
        Ok(data.len() as u32)
    }

    fn note_write(&self, ino: u64, verf: [u8; 8]) {
        let mut t = self.table();
        let d = t.dirty.entry(ino).or_insert(Dirty::Verifier(verf));
        if *d != Dirty::Verifier(verf) {
            *d = Dirty::Changed;
        }
    }

    /// `fsync(2)`: COMMITs the file, i.e. has the server `fsync` it; `EIO` when the server
    /// may have lost some of its unstable writes (the verifier changed since they were
    /// answered, or a loss is pending: see [`Table::lost`], which this clears).
    async fn commit(&self, c: &Client, ino: INodeNo) -> Result<(), Errno> {
        self.behind.settle_and_report(ino.0).await?;
        let (dirty, lost) = {
            let mut t = self.table();
            (t.dirty.remove(&ino.0), t.lost.remove(&ino.0))
        };
        // Until the server answers, what was taken out goes back if this ends early (an
        // error, or the caller killed and this dropped): the next flush or fsync reports it.
        let mut taken = Uncommitted {
            sh: self,
            ino: ino.0,
            dirty,
            lost,
            armed: true,
        };
        let fh = self.fh(ino)?;
        let committed = c.commit(&fh).await.map_err(errno)?;
        taken.armed = false;
        tracing::debug!(ino = ino.0, ?dirty, ?committed, lost, "commit");
        let lost_now = match dirty {
            Some(Dirty::Verifier(v)) => v != committed,
            Some(Dirty::Changed) => true,
            None => false,
        };
        if lost_now {
            tracing::warn!(
                ino = ino.0,
                "the server restarted before data written to this file was committed; \
                 some writes may be lost (reporting EIO)"
            );
            return Err(Errno::EIO);
        }
        taken.armed = false;
        if lost { Err(Errno::EIO) } else { Ok(()) }
    }

    /// `close(2)` (FLUSH): answered without a request. Every WRITE of the file was answered
    /// before the kernel sends FLUSH, and the server answers a WRITE once the data is in its
    /// kernel (its page cache), where it survives a crash or restart of sfsd and where every
    /// other client's next open reads it (close-to-open consistency). What only a COMMIT
    /// adds, the server's `fsync`, protects against a crash of the server machine, and
    /// costs a disk flush per file (3.5 ms of a 5 ms file created by `tar x`, measured):
    /// `fsync(2)` still sends it. `EIO` when the writes came back with two verifiers (the
    /// server restarted in between and may have lost the earlier ones), or a loss is pending
    /// (see [`Table::lost`]); the writes' verifier stays recorded until an `fsync` compares
    /// it with the server's.
    fn flushed(&self, ino: INodeNo) -> Result<(), Errno> {
        let mut t = self.table();
        if t.dirty.get(&ino.0) == Some(&Dirty::Changed) {
            t.dirty.remove(&ino.0);
            t.lost.insert(ino.0);
            tracing::warn!(
                ino = ino.0,
                "the server restarted while this file was being written; some writes may be \
                 lost (reporting EIO)"
            );
        }
        if t.lost.contains(&ino.0) {
            Err(Errno::EIO)
        } else {
            Ok(())
        }
    }

    async fn create(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
        exclusive: bool,
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        let attr = SetAttr {
            mode: Some(mode & 0o7777),
            ..crate::commands::transfer::set_nothing()
        };
        let how = if exclusive {
            CreateHow::Guarded(attr)
        } else {
            CreateHow::Unchecked(attr)
        };
        let (fh, a) = c.create(&dir, name, how).await.map_err(errno)?;
        Ok(self.entry(parent, name, fh, &a))
    }

    async fn mkdir(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        let attr = SetAttr {
            mode: Some(mode & 0o7777),
            ..crate::commands::transfer::set_nothing()
        };
        let (fh, a) = c.mkdir(&dir, name, attr).await.map_err(errno)?;
        Ok(self.entry(parent, name, fh, &a))
    }

    async fn mknod(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        kind: protocol::SpecialKind,
        mode: u32,
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        let attr = SetAttr {
            mode: Some(mode & 0o7777),
            ..crate::commands::transfer::set_nothing()
        };
        let (fh, a) = c.mknod(&dir, name, kind, attr).await.map_err(errno)?;
        Ok(self.entry(parent, name, fh, &a))
    }

    async fn symlink(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        target: &[u8],
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        let (fh, a) = c
            .symlink(&dir, name, target, crate::commands::transfer::set_nothing())
            .await
            .map_err(errno)?;
        Ok(self.entry(parent, name, fh, &a))
    }

    async fn link(
        &self,
        c: &Client,
        ino: INodeNo,
        parent: INodeNo,
        name: &[u8],
    ) -> Result<Entry, Errno> {
        let fh = self.fh(ino)?;
        let dir = self.fh(parent)?;
        let a = c.link(&fh, &dir, name).await.map_err(errno)?;
        Ok(self.entry(parent, name, fh, &a))
    }

    /// If `dir/name` is a file some program has open, makes sure it outlives its name: the
    /// server is asked to keep it (OPEN, an open state CLOSEd at its last release), or, on a
    /// server without open states, it is renamed to a hidden name removed at its last release.
    /// Whether it was renamed (the caller then has nothing left to remove).
    async fn keep_if_open(
        &self,
        c: &Client,
        uid: u32,
        dir: &FileHandle,
        name: &[u8],
    ) -> Result<bool, Errno> {
        if self.table().open.is_empty() {
            return Ok(false);
        }
        let fh = match c.lookup(dir, name).await {
            Ok((fh, _)) => fh,
            Err(SessionError::Nfs(NfsStatus::NoEnt)) => return Ok(false),
            Err(e) => return Err(errno(e)),
        };
        let ino = {
            let t = self.table();
            let Some(ino) = t.by_fh.get(&fh).copied() else {
                return Ok(false);
            };
            if t.open.get(&ino).copied().unwrap_or(0) == 0 || t.hidden.contains_key(&ino) {
                return Ok(false);
            }
            ino
        };
        match c.open(&fh).await {
            Ok(()) => {
                // The last close may have come while OPEN was under way (close, then unlink,
                // is common): then nothing will CLOSE this state but us, now.
                if !self.while_open(ino, |t| {
                    t.states.entry(ino).or_default().insert(uid);
                }) && let Err(e) = c.close(&fh).await
                {
                    tracing::debug!(error = %e.report(), "CLOSE failed (the state goes with the connection)");
                }
                return Ok(false);
            }
            Err(SessionError::Nfs(NfsStatus::NoEnt | NfsStatus::Stale)) => return Ok(false),
            Err(SessionError::Nfs(NfsStatus::NotSupp | NfsStatus::DQuot)) => {}
            Err(e) => return Err(errno(e)),
        }
        let hidden = {
            let mut t = self.table();
            t.next_hidden += 1;
            let mut h = HIDDEN_PREFIX.to_vec();
            h.extend_from_slice(
                format!("{ino}-{}-{}", std::process::id(), t.next_hidden).as_bytes(),
            );
            h
        };
        c.rename(dir, name, dir, &hidden).await.map_err(errno)?;
        let recorded = self.while_open(ino, |t| {
            t.hidden.insert(ino, (*dir, hidden.clone()));
        });
        if !recorded {
            // Closed while the rename was under way: nobody is left to remove it but us.
            c.remove(dir, &hidden, false).await.map_err(errno)?;
        }
        Ok(true)
    }

    /// Runs `f` on the table if `ino` is open; whether it was.
    fn while_open(&self, ino: u64, f: impl FnOnce(&mut Table)) -> bool {
        let mut t = self.table();
        if t.open.get(&ino).copied().unwrap_or(0) == 0 {
            return false;
        }
        f(&mut t);
        true
    }

    /// The server keeps an open state on `ino` for local user `uid` (a CREATE that kept one).
    fn holds_state(&self, ino: u64, uid: u32) {
        self.table().states.entry(ino).or_default().insert(uid);
    }

    /// Removes the hidden names of files still open when the mount ends.
    pub async fn remove_hidden(&self) {
        let hidden: Vec<_> = self.table().hidden.drain().map(|(_, h)| h).collect();
        for (dir, name) in hidden {
            if let Err(e) = self.client.remove(&dir, &name, false).await {
                tracing::warn!(error = %e.report(), "cannot remove a hidden name at unmount");
            }
        }
    }

    fn opened(&self, ino: u64) {
        *self.table().open.entry(ino).or_insert(0) += 1;
    }

    /// The last close of a file drops the server's open states on it and removes its hidden
    /// name, if it has them.
    async fn released(&self, c: &Client, ino: INodeNo) -> Result<(), Errno> {
        let (hidden, states) = {
            let mut t = self.table();
            let left = match t.open.get_mut(&ino.0) {
                Some(n) => {
                    *n = n.saturating_sub(1);
                    *n
                }
                None => 0,
            };
            if left == 0 {
                t.open.remove(&ino.0);
                t.lost.remove(&ino.0);
                let states = t.states.remove(&ino.0).unwrap_or_default();
                let fh = t.nodes.get(&ino.0).map(|n| n.fh);
                (t.hidden.remove(&ino.0), fh.map(|fh| (fh, states)))
            } else {
                (None, None)
            }
        };
        if let Some((fh, uids)) = states {
            for uid in uids {
                if let Err(e) = self.client_for(uid).close(&fh).await {
                    tracing::debug!(error = %e.report(), "CLOSE failed (the state goes with the connection)");
                }
            }
        }
        if let Some((dir, name)) = hidden {
            c.remove(&dir, &name, false).await.map_err(errno)?;
        }
        Ok(())
    }

    async fn remove(
        &self,
        c: &Client,
        uid: u32,
        parent: INodeNo,
        name: &[u8],
        is_dir: bool,
    ) -> Result<(), Errno> {
        let dir = self.fh(parent)?;
        if !is_dir && self.keep_if_open(c, uid, &dir, name).await? {
            self.forget_name(parent, name);
            return Ok(());
        }
        c.remove(&dir, name, is_dir).await.map_err(errno)?;
        self.forget_name(parent, name);
        Ok(())
    }

    /// RENAME of `name` in `parent` to `newname` in `newparent`, for local user `uid`.
    async fn rename(
        &self,
        (c, uid): (&Client, u32),
        (parent, name): (INodeNo, &[u8]),
        (newparent, newname): (INodeNo, &[u8]),
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let from = self.fh(parent)?;
        let to = self.fh(newparent)?;
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return Err(Errno::EINVAL);
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            // One RENAME2 on the server: the existence check and the rename are one
            // renameat2(RENAME_NOREPLACE), so a racing creator cannot be replaced.
            c.rename2(&from, name, &to, newname, protocol::rename_flags::NOREPLACE)
                .await
                .map_err(errno)?;
        } else {
            // Replacing a file some program has open: keep it alive.
            self.keep_if_open(c, uid, &to, newname).await?;
            c.rename(&from, name, &to, newname).await.map_err(errno)?;
        }
        self.forget_name(parent, name);
        Ok(())
    }

    async fn readlink(&self, c: &Client, ino: INodeNo) -> Result<Vec<u8>, Errno> {
        let fh = self.fh(ino)?;
        c.readlink(&fh).await.map_err(errno)
    }

    /// Reads the whole directory now (LISTDIR or READDIRPLUS), or takes the listing kept
    /// from an earlier open by local user `uid` while it holds ([`kept_listings`]), or read
    /// ahead for it ([`listing_ahead`]); `readdir`/`readdirplus` page through this snapshot.
    /// Opens a listing of `ino` for local user `uid`: its FUSE handle, and whether the
    /// kernel's own copy of the listing may be served instead ([`kernel_listings`]).
    async fn opendir(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        ino: INodeNo,
    ) -> Result<(u64, bool), Errno> {
        let dir = self.fh(ino)?;
        let uid = self.acting_uid(uid);
        if let Some(mut reading) = self.listing_ahead.reading(&dir, uid) {
            // Ends (Err) when the read ahead does, kept or not.
            let _ = reading.changed().await;
        }
        let listing = match self.kept.get(&dir, uid, c.cache()) {
            Some(kept) => kept,
            None => {
                let read = Arc::new(self.read_listing(c, &dir).await?);
                self.kept.keep(&dir, uid, &read, c.cache());
                read
            }
        };
        if let Some(parent) = self.listing_ahead.opened(&dir, uid, &listing) {
            self.read_ahead(c, uid, &dir, &listing, &parent);
        }
        let order = listing
            .entries
            .iter()
            .filter_map(|e| e.node.map(|(fh, _)| fh));
        self.xattr_ahead.remember(dir, order.collect());
        let mut t = self.table();
        let keep = t.kernel_listings.may_keep(ino.0, &listing);
        let h = t.next_listing;
        t.next_listing += 1;
        t.listings.insert(h, (ino.0, listing));
        Ok((h, keep))
    }

    /// A step down a walk: `uid` opened `dir`, a subdirectory of `parent`. Reads ahead the
    /// listings of `dir`'s subdirectories (the walk's next steps) and of its siblings, each
    /// directory's once, those not kept already ([`listing_ahead`]).
    fn read_ahead(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        dir: &FileHandle,
        listing: &Listing,
        parent: &FileHandle,
    ) {
        let ahead = &self.listing_ahead;
        let mut dirs: Vec<FileHandle> = Vec::new();
        if ahead.expand(dir, uid) {
            dirs.extend(listing_ahead::subdirectories(listing));
        }
        if ahead.expand(parent, uid)
            && let Some(siblings) = self.kept.get(parent, uid, c.cache())
        {
            dirs.extend(listing_ahead::subdirectories(&siblings).filter(|d| d != dir));
        }
        dirs.retain(|d| self.kept.get(d, uid, c.cache()).is_none());
        dirs.truncate(listing_ahead::MAX_PER_STEP);
        if dirs.is_empty() {
            return;
        }
        let (sh, c) = (self.clone(), c.clone());
        tokio::spawn(async move {
            for d in dirs {
                let Some(reading) = sh.listing_ahead.start(d, uid).await else {
                    continue;
                };
                let (sh, c) = (sh.clone(), c.clone());
                tokio::spawn(async move {
                    // A failure is left for the walker's own `opendir` to meet and report.
                    if let Ok(l) = sh.read_listing(&c, &d).await {
                        sh.kept.keep(&d, uid, &Arc::new(l), c.cache());
                    }
                    drop(reading);
                });
            }
        });
    }

    /// Reads directory `dir` whole from the server.
    async fn read_listing(&self, c: &Client, dir: &FileHandle) -> Result<Listing, Errno> {
        let dir = *dir;
        let since = c.cache().stamp();
        let all = c.readdir_all(&dir).await.map_err(errno)?;
        let mut entries = Vec::with_capacity(all.len() + 2);
        for name in [&b"."[..], b".."] {
            entries.push(Listed {
                // `.`'s is the node of whoever opens the directory ([`Listed::ino_in`]).
                ino: ROOT,
                kind: fuser::FileType::Directory,
                name: name.to_vec(),
                node: None,
            });
        }
        for e in all {
            // Not one path component (a hostile server's `a/b`, empty, NUL): the kernel
            // would fail the whole listing with EIO; leave it out and list the rest.
            if crate::commands::dest::check_name(&e.name).is_some()
                || e.name.starts_with(HIDDEN_PREFIX)
            {
                continue;
            }
            let (fh, attr) = match (e.fh, e.attr) {
                (Some(fh), Some(a)) => (fh, a),
                // The server did not include them: ask (rare; gone since is fine).
                _ => match c.lookup(&dir, &e.name).await {
                    Ok(x) => x,
                    Err(SessionError::Nfs(NfsStatus::NoEnt)) => continue,
                    Err(err) => return Err(errno(err)),
                },
            };
            // readdir's inode numbers are informational; use ours when we have one.
            let known = self.table().by_fh.get(&fh).copied();
            entries.push(Listed {
                ino: known.unwrap_or(e.fileid.max(2)),
                kind: kind(attr.ftype),
                name: e.name,
                node: Some((fh, attr)),
            });
        }
        Ok(Listing {
            entries,
            since,
            received: Instant::now(),
        })
    }

    /// The node id for `fh`, made (uncounted) if new; [`Shared::counted`] counts the lookup
    /// once the kernel has really been sent the entry.
    fn node_for(&self, fh: FileHandle) -> u64 {
        let mut t = self.table();
        if let Some(ino) = t.by_fh.get(&fh) {
            return *ino;
        }
        let ino = t.next;
        t.next += 1;
        t.nodes.insert(ino, Node { fh, lookups: 0 });
        t.by_fh.insert(fh, ino);
        ino
    }

    /// One kernel lookup of `ino` (handle `fh`) as `name` in `parent`.
    fn counted(&self, ino: u64, fh: FileHandle, parent: INodeNo, name: &[u8]) {
        let mut t = self.table();
        // Re-created if a FORGET removed it between node_for and now.
        t.nodes
            .entry(ino)
            .or_insert(Node { fh, lookups: 0 })
            .lookups += 1;
        t.by_fh.insert(fh, ino);
        t.names.entry(parent.0).or_default().insert(name.to_vec());
    }

    fn listing(&self, h: u64) -> Option<Arc<Listing>> {
        self.table().listings.get(&h).map(|(_, l)| l.clone())
    }

    /// Answers a READDIRPLUS from listing `l` at `start` (`added`: the reply has entries
    /// already), or stops at an entry whose attributes must be asked for.
    ///
    /// The kernel installs these attributes as of its READDIRPLUS request, not as of the
    /// listing (fs/fuse/readdir.c takes the attr_version when it sends the request): the
    /// listing's attributes of an entry changed since it was read, e.g. by a write that has
    /// returned, would take its size back. Such an entry gets the cache's attributes
    /// (installed in order) or, if it has none, stops the answer here; the caller asks the
    /// server and goes on with `known`, the attributes of entry `start` (None: gone since,
    /// left out).
    fn list_plus(
        &self,
        l: &Listing,
        dir: INodeNo,
        start: usize,
        mut known: Option<Option<Attr>>,
        mut reply: ReplyDirectoryPlus,
        mut added: bool,
    ) -> Option<NeedAttr> {
        let cache = self.client.cache();
        for (i, e) in l.entries.iter().enumerate().skip(start) {
            let name = OsStr::from_bytes(&e.name);
            let off = i as u64 + 1;
            match &e.node {
                Some((h, listed)) => {
                    let a = match known.take() {
                        Some(Some(a)) => a,
                        Some(None) => continue,
                        // Writes under way: its attributes once they are on the server.
                        None if self.behind.busy(e.ino) => {
                            return Some(NeedAttr {
                                at: i,
                                fh: *h,
                                reply,
                                added,
                            });
                        }
                        None if cache.changed_since(h, l.since) => match cache.get(h) {
                            Some(a) => a,
                            None => {
                                return Some(NeedAttr {
                                    at: i,
                                    fh: *h,
                                    reply,
                                    added,
                                });
                            }
                        },
                        None => Attr {
                            lease_ms: lease_left(listed, l.received),
                            ..*listed
                        },
                    };
                    // Every entry sent here is a lookup the kernel will FORGET later.
                    let node = self.node_for(*h);
                    if reply.add(
                        INodeNo(node),
                        off,
                        name,
                        &ttl(&a),
                        &fattr(node, &a),
                        Generation(0),
                    ) {
                        break;
                    }
                    self.counted(node, *h, dir, &e.name);
                }
                None => {
                    // `.` and `..`: the kernel uses neither the attributes nor a lookup.
                    let ino = e.ino_in(dir);
                    let attr = FileAttr {
                        ino: INodeNo(ino),
                        ..fattr(ino, &placeholder_dir())
                    };
                    if reply.add(
                        INodeNo(ino),
                        off,
                        name,
                        &Duration::ZERO,
                        &attr,
                        Generation(0),
                    ) {
                        break;
                    }
                }
            }
            added = true;
        }
        reply.ok();
        None
    }

    async fn statfs(&self, c: &Client) -> Result<protocol::FsStat, Errno> {
        let root = self.fh(INodeNo(self.root))?;
        c.fsstat(&root).await.map_err(errno)
    }
}

/// Unstable writes a COMMIT under way took out of the table, put back if it does not finish.
struct Uncommitted<'a> {
    sh: &'a Shared,
    ino: u64,
    dirty: Option<Dirty>,
    lost: bool,
    armed: bool,
}

impl Drop for Uncommitted<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let mut t = self.sh.table();
        if let Some(d) = self.dirty {
            let merged = match t.dirty.get(&self.ino) {
                Some(now) if *now != d => Dirty::Changed,
                _ => d,
            };
            t.dirty.insert(self.ino, merged);
        }
        if self.lost {
            t.lost.insert(self.ino);
        }
    }
}

/// A READDIRPLUS answer stopped at entry `at` (handle `fh`) of its listing, whose attributes
/// must come from the server; `added`: `reply` has entries already.
struct NeedAttr {
    at: usize,
    fh: FileHandle,
    reply: ReplyDirectoryPlus,
    added: bool,
}

/// An entry for the kernel.
struct Entry {
    ttl: Duration,
    attr: FileAttr,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared() -> Arc<Shared> {
        let name: protocol::ServerName = "@127.0.0.1%9,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .parse()
            .unwrap();
        let c = Client::new(&name, None, crate::session::Options::default());
        Shared::new(c, FileHandle::from_bytes([1; 48]))
    }

    #[test]
    fn nodes_count_lookups_and_are_forgotten() {
        let sh = shared();
        let a = FileHandle::from_bytes([2; 48]);
        let ino = sh.remember(INodeNo(ROOT), b"a", a);
        assert_ne!(ino, ROOT);
        // A hard link: same handle, same node.
        assert_eq!(sh.remember(INodeNo(ROOT), b"b", a), ino);
        assert_eq!(sh.fh(INodeNo(ino)).unwrap(), a);
        sh.forget(ino, 1);
        assert_eq!(sh.fh(INodeNo(ino)).unwrap(), a, "one lookup left");
        sh.forget(ino, 1);
        assert_eq!(sh.fh(INodeNo(ino)), Err(Errno::ESTALE));
        // Never reused: the handle comes back under a new number.
        let again = sh.remember(INodeNo(ROOT), b"a", a);
        assert!(again > ino);
        // The root is never forgotten.
        sh.forget(ROOT, 100);
        assert!(sh.fh(INodeNo(ROOT)).is_ok());
    }

    #[test]
    fn write_back_acts_as_the_opener_and_never_as_the_owner() {
        let name: protocol::ServerName = "@127.0.0.1%9,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .parse()
            .unwrap();
        let c = Client::new(&name, None, crate::session::Options::default());
        let many = Shared::with_users(c, FileHandle::from_bytes([1; 48]), Some(0));
        let fh = many.open_file(65534);
        assert_ne!(
            fh.0, 0,
            "0 is what the kernel sends when it knows no open file"
        );
        assert_eq!(many.table().files[&fh.0], 65534);
        assert!(many.client_for_file(fh).is_ok());
        for unknown in [fuser::FileHandle(0), fuser::FileHandle(fh.0 + 1)] {
            assert_eq!(many.client_for_file(unknown).err(), Some(Errno::EACCES));
        }
        // One user: every handle is that user's.
        assert!(shared().client_for_file(fuser::FileHandle(0)).is_ok());
    }

    #[test]
    fn a_commit_that_does_not_finish_keeps_its_writes_uncommitted() {
        let sh = shared();
        sh.note_write(5, [1; 8]);
        sh.table().lost.insert(5);
        let taken = sh.table().dirty.remove(&5);
        drop(Uncommitted {
            sh: &sh,
            ino: 5,
            dirty: taken,
            lost: true,
            armed: true,
        });
        assert_eq!(sh.table().dirty[&5], Dirty::Verifier([1; 8]));
        assert!(sh.table().lost.contains(&5));
        // Written again meanwhile with another verifier: the server restarted in between.
        sh.table().dirty.insert(6, Dirty::Verifier([2; 8]));
        drop(Uncommitted {
            sh: &sh,
            ino: 6,
            dirty: Some(Dirty::Verifier([1; 8])),
            lost: false,
            armed: true,
        });
        assert_eq!(sh.table().dirty[&6], Dirty::Changed);
    }

    #[test]
    fn verifier_changes_are_lost_writes() {
        let sh = shared();
        sh.note_write(5, [1; 8]);
        sh.note_write(5, [1; 8]);
        assert_eq!(sh.table().dirty[&5], Dirty::Verifier([1; 8]));
        sh.note_write(5, [2; 8]);
        assert_eq!(sh.table().dirty[&5], Dirty::Changed);
    }
}
