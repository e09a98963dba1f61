//! The kernel adapter: [`SfsFuse`] turns each request of the kernel into a call on the
//! [`ServerMount`] of the mount whose node range holds the request's node ([`NodeRanges::mount`]), run
//! on the tokio runtime as the calling program's user and answered from there, or answers it
//! from the router's own nodes (the namespace's root); [`configure`] is what every sfs FUSE mount
//! asks of the kernel.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, Filesystem, FopenFlags, Generation, INodeNo, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use protocol::SetAttr;
use tokio::runtime::Handle;

use super::convert::{open_bits, reply_empty, set_time, special_kind};
use super::node_ranges::{NodeRanges, OneServer};
use super::{BLKSIZE, Entry, ServerMount, append, locks, read_at_open, reply_xattr, xattr_list};
use crate::interrupt::KillWatch;
use crate::session::Client;

/// Largest WRITE the kernel is asked to send (it also caps reads and readahead).
const MAX_WRITE: u32 = 1 << 20;

/// The FUSE file system (the kernel-facing half): one mount ([`ServerMount`]), or the node ranges of a
/// namespace ([`NodeRanges`]).
pub(crate) struct SfsFuse<R: NodeRanges = OneServer> {
    ranges: R,
    rt: Handle,
    kills: Arc<KillWatch>,
    /// The kernel evaluates POSIX ACLs and keeps them (`FUSE_POSIX_ACL`): in a multi-user
    /// mount, the one where it checks each caller's access ([`configure`]).
    kernel_acls: bool,
}

/// `let sh = mount!(self, ino, else fallback);`: the mount serving node `ino`, or the request
/// is answered by `fallback` (the router's own nodes).
macro_rules! mount {
    ($this:ident, $ino:expr, else $fallback:expr) => {
        match $this.ranges.mount($ino) {
            Some(sh) => sh,
            None => return $fallback,
        }
    };
}

impl SfsFuse {
    /// Serves the mount `sh` with tasks on `rt`.
    pub(crate) fn new(sh: Arc<ServerMount>, rt: Handle) -> SfsFuse {
        let kernel_acls = sh.multi_user;
        SfsFuse {
            kernel_acls,
            ..SfsFuse::with_ranges(OneServer(sh), rt)
        }
    }
}

impl<R: NodeRanges> SfsFuse<R> {
    /// Serves the mounts of `ranges`, and its own nodes, with tasks on `rt`.
    pub(crate) fn with_ranges(ranges: R, rt: Handle) -> SfsFuse<R> {
        let kills = KillWatch::start(&rt);
        SfsFuse {
            ranges,
            rt,
            kills,
            kernel_acls: false,
        }
    }

    /// Runs `f` (polled first on this thread, [`crate::first_poll`], then on the runtime) with
    /// the mount's shared state `sh` and the session acting for the caller; it ends early if
    /// the caller is killed ([`crate::interrupt`]).
    fn spawn<F, Fut>(&self, req: &Request, sh: Arc<ServerMount>, f: F)
    where
        F: FnOnce(Arc<ServerMount>, Client) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let c = sh.client_for_caller(req);
        self.spawn_as(req, sh, c, f);
    }

    /// [`SfsFuse::spawn`] with the session for the caller already made: `c`.
    fn spawn_as<F, Fut>(&self, req: &Request, sh: Arc<ServerMount>, c: Client, f: F)
    where
        F: FnOnce(Arc<ServerMount>, Client) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let work = f(sh, c);
        crate::first_poll::spawn_here(&self.rt, self.kills.clone().unless_killed(req.pid(), work));
    }

    /// [`SfsFuse::spawn`] for requests that must run to their end whoever is killed (RELEASE:
    /// the open-file bookkeeping and the server's open states; a READDIRPLUS reply holding
    /// counted entries), acting as `c`.
    fn spawn_to_end<F, Fut>(&self, sh: Arc<ServerMount>, c: Client, f: F)
    where
        F: FnOnce(Arc<ServerMount>, Client) -> Fut,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        crate::first_poll::spawn_here(&self.rt, f(sh, c));
    }
}

/// Answers an `open` of `ino` by local user `uid` that the server's access answer `granted`
/// decided. No FOPEN_KEEP_CACHE: the kernel drops cached pages at open, so each open sees
/// what the server has (close-to-open consistency, as with NFS).
fn reply_open(
    sh: &ServerMount,
    c: &Client,
    ino: INodeNo,
    uid: u32,
    flags: OpenFlags,
    granted: Result<(), Errno>,
    reply: ReplyOpen,
) {
    match granted {
        Ok(()) => {
            sh.opened(ino.0);
            let mut open_flags = append::open_flags(flags.0);
            if sh.open_keeps_pages(c, ino, flags) {
                open_flags |= FopenFlags::FOPEN_KEEP_CACHE;
            }
            reply.opened(sh.open_file(uid), open_flags)
        }
        Err(e) => reply.error(e),
    }
}

fn reply_entry(r: Result<Entry, Errno>, reply: ReplyEntry) {
    match r {
        Ok(e) => reply.entry(&e.ttl, &e.attr, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_attr(r: Result<(Duration, FileAttr), Errno>, reply: ReplyAttr) {
    match r {
        Ok((ttl, a)) => reply.attr(&ttl, &a),
        Err(e) => reply.error(e),
    }
}

/// The kernel settings every sfs FUSE mount asks for; `kernel_acls` for a multi-user mount.
pub(super) fn configure(config: &mut KernelConfig, kernel_acls: bool) {
    // Best effort: an older kernel keeps its smaller limits.
    let _ = config.set_max_write(MAX_WRITE);
    let _ = config.set_max_readahead(MAX_WRITE);
    // Listings carry handles and attributes: `ls -l` needs no LOOKUP per name.
    let _ = config.add_capabilities(
        fuser::InitFlags::FUSE_DO_READDIRPLUS | fuser::InitFlags::FUSE_READDIRPLUS_AUTO,
    );
    // A write or truncate by someone without CAP_FSETID must clear set-user-ID and
    // set-group-ID bits. Without this flag the kernel does it itself, with a SETATTR of the
    // mode sent as the writer, which the server (acting as the writer, who need not own the
    // file) is refused: the write fails with EPERM. With it, the server's own write or
    // truncate, made as the writer, has the server's kernel clear the bits.
    let _ = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2);
    // Lookups and listings of one directory go to us side by side. Without this the kernel
    // holds a directory's lock across each LOOKUP in it, so one lookup waiting on a slow
    // server (a name in the namespace root) would hold up every other lookup and listing
    // there; every request here is answered from a task of its own, so none needs the lock.
    let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
    // Files opened O_APPEND are direct I/O (fuse/append.rs); without this a program could no
    // longer map one shared and writable (ENODEV), as it can any other file. Kernels before
    // 6.6 ignore it, and refuse such a mapping.
    let _ = config.add_capabilities(fuser::InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
    // fcntl, OFD and flock locks come to us and go to the server, so every mount of it sees
    // them; without these the kernel keeps them local to this mount (fuse/locks.rs).
    let _ = config
        .add_capabilities(fuser::InitFlags::FUSE_POSIX_LOCKS | fuser::InitFlags::FUSE_FLOCK_LOCKS);
    // A multi-user mount has the kernel check each caller's access against the modes
    // (`default_permissions`, which this flag implies); with it the kernel evaluates POSIX
    // ACLs as well, so an ACL that grants more than the mode bits works through the mount as
    // on the server, and it keeps each file's ACL as long as the file's attributes (forgotten
    // when they are fetched again, and on our INVALIDATE of the file): `ls -l` then asks the
    // mount for no ACL. A single-user mount leaves every check to the server, as the
    // identity it logged in as: its owner's local uid and groups need not be the server's.
    if kernel_acls {
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_POSIX_ACL);
    }
}

/// Each request goes to the mount serving its node; the router's own nodes (the namespace's
/// root and bookmarks) answer from [`NodeRanges`], and are read-only: what would change or open
/// one is `EACCES`.
impl<R: NodeRanges> Filesystem for SfsFuse<R> {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        configure(config, self.kernel_acls);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let sh = mount!(self, parent, else self.ranges.lookup(req, parent, name, reply));
        // One session for the caller for both ways (a multi-user mount reads the caller's
        // groups from /proc to make it).
        let c = sh.client_for_caller(req);
        if let Ok(dir) = sh.fh(parent)
            && sh.listed_absent(&c, req.uid(), &dir, name.as_bytes())
        {
            return reply.error(Errno::ENOENT);
        }
        let name = name.as_bytes().to_vec();
        let uid = req.uid();
        self.spawn_as(req, sh, c, move |sh, c| async move {
            reply_entry(sh.lookup(&c, uid, parent, &name).await, reply)
        });
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        // The router's own nodes are never forgotten.
        if let Some(sh) = self.ranges.mount(ino) {
            sh.forget(ino.0, nlookup);
        }
    }

    fn getattr(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: Option<fuser::FileHandle>,
        reply: ReplyAttr,
    ) {
        let sh = mount!(self, ino, else self.ranges.getattr(ino, reply));
        let c = sh.client_for_caller(req);
        if let Some(now) = sh.getattr_now(&c, ino) {
            return reply_attr(Ok(now), reply);
        }
        self.spawn_as(req, sh, c, |sh, c| async move {
            reply_attr(sh.getattr(&c, ino).await, reply)
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<fuser::FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        let s = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: set_time(atime),
            mtime: set_time(mtime),
        };
        if let Some((attr, ticket)) = sh.answer_setattr_early(req.uid(), ino, s) {
            // fuse/attrs_behind.rs: no cache lifetime, so the next stat asks (and waits).
            reply.attr(&Duration::ZERO, &attr);
            if let Some(ticket) = ticket {
                let c = sh.client_for_caller(req);
                crate::first_poll::spawn_here(&self.rt, sh.send_early_setattr(c, ino, ticket));
            }
            return;
        }
        self.spawn(req, sh, |sh, c| async move {
            reply_attr(sh.setattr(&c, ino, s).await, reply)
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        let sh = mount!(self, ino, else self.ranges.readlink(ino, reply));
        self.spawn(req, sh, |sh, c| async move {
            match sh.readlink(&c, ino).await {
                Ok(t) => reply.data(&t),
                Err(e) => reply.error(e),
            }
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let sh = mount!(self, parent, else reply.error(Errno::EACCES));
        let name = name.as_bytes().to_vec();
        if mode & libc::S_IFMT == libc::S_IFREG {
            self.spawn(req, sh, |sh, c| async move {
                // mknod(2) of a regular file fails on an existing name, as O_EXCL.
                let made = sh.create(&c, parent, &name, mode, libc::O_EXCL).await;
                let made = made.map(|(e, _)| e);
                // Nothing is open: drop the state a restrictive mode made the server keep.
                if let Ok(e) = &made
                    && protocol::create_keeps_open_state(mode)
                    && let Ok(fh) = sh.fh(e.attr.ino)
                {
                    let _ = c.close(&fh).await;
                }
                reply_entry(made, reply)
            });
            return;
        }
        let Some(kind) = special_kind(mode, rdev) else {
            reply.error(Errno::EINVAL);
            return;
        };
        self.spawn(req, sh, |sh, c| async move {
            reply_entry(sh.mknod(&c, parent, &name, kind, mode).await, reply)
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let sh = mount!(self, parent, else reply.error(Errno::EACCES));
        let name = name.as_bytes().to_vec();
        self.spawn(req, sh, |sh, c| async move {
            reply_entry(sh.mkdir(&c, parent, &name, mode).await, reply)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let sh = mount!(self, parent, else reply.error(Errno::EACCES));
        let name = name.as_bytes().to_vec();
        let uid = req.uid();
        self.spawn(req, sh, move |sh, c| async move {
            reply_empty(sh.remove(&c, uid, parent, &name, false).await, reply)
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let sh = mount!(self, parent, else reply.error(Errno::EACCES));
        let name = name.as_bytes().to_vec();
        let uid = req.uid();
        self.spawn(req, sh, move |sh, c| async move {
            reply_empty(sh.remove(&c, uid, parent, &name, true).await, reply)
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let sh = mount!(self, parent, else reply.error(Errno::EACCES));
        let name = link_name.as_bytes().to_vec();
        let target = target.as_os_str().as_bytes().to_vec();
        self.spawn(req, sh, |sh, c| async move {
            reply_entry(sh.symlink(&c, parent, &name, &target).await, reply)
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if self.ranges.apart(parent, newparent) {
            return reply.error(Errno::EXDEV);
        }
        let sh = mount!(self, parent, else reply.error(Errno::EACCES));
        let name = name.as_bytes().to_vec();
        let newname = newname.as_bytes().to_vec();
        let uid = req.uid();
        self.spawn(req, sh, move |sh, c| async move {
            reply_empty(
                sh.rename((&c, uid), (parent, &name), (newparent, &newname), flags)
                    .await,
                reply,
            )
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if self.ranges.apart(ino, newparent) {
            return reply.error(Errno::EXDEV);
        }
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        let name = newname.as_bytes().to_vec();
        self.spawn(req, sh, |sh, c| async move {
            reply_entry(sh.link(&c, ino, newparent, &name).await, reply)
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        let uid = req.uid();
        let c = sh.client_for_caller(req);
        let reading = read_at_open::reading_only(flags);
        // With the access answer cached (as for a file opened again: a build's headers) and no
        // write under way, answered here, without the hop to the runtime's thread and back.
        if let Some(granted) = sh.open_access_now(&c, ino, open_bits(flags)) {
            if reading
                && granted.is_ok()
                && let Ok(fh) = sh.fh(ino)
            {
                sh.opened_for_reading(&c, uid, &fh, &self.rt);
            }
            return reply_open(&sh, &c, ino, uid, flags, granted, reply);
        }
        self.spawn_as(req, sh, c, move |sh, c| async move {
            sh.behind.settle(ino.0).await;
            if reading && let Ok(fh) = sh.fh(ino) {
                sh.opened_for_reading(&c, uid, &fh, &Handle::current());
                sh.files_ahead.settle(&fh).await;
            }
            let granted = sh.check_open(&c, ino, flags, open_bits(flags)).await;
            reply_open(&sh, &c, ino, uid, flags, granted, reply);
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        self.spawn(req, sh, |sh, c| async move {
            match sh.read(&c, ino, offset, size).await {
                Ok(d) => reply.data(&d),
                Err(e) => reply.error(e),
            }
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        if append::is_append(write_flags, flags) {
            sh.made_forget(ino);
            let data = data.to_vec();
            return self.spawn(req, sh, |sh, c| async move {
                match sh.append(&c, ino, offset, &data).await {
                    Ok(n) => {
                        reply.written(n);
                        // Only now (see fuse/append.rs): the kernel's size and pages of the
                        // node are stale, and the invalidation thread tells it.
                        if let Ok(fh) = sh.fh(ino) {
                            c.invalidate_locally(&fh);
                        }
                    }
                    Err(e) => reply.error(e),
                }
            });
        }
        // Write-back of a shared mapping's dirty pages: the kernel sends it as itself (uid 0,
        // in a multi-user mount the owner's uid or nobody's) on one of the file's writable
        // open files, so it is written as whoever opened that file.
        let as_opener = if write_flags.contains(WriteFlags::FUSE_WRITE_CACHE) {
            match sh.client_for_file(fh) {
                Ok(c) => Some(c),
                Err(e) => return reply.error(e),
            }
        } else {
            None
        };
        sh.made_written(ino, offset, data);
        if let Some(c) = as_opener {
            let data = data.to_vec();
            return self.spawn_as(req, sh, c, |sh, c| async move {
                match sh.write(&c, ino, offset, &data).await {
                    Ok(n) => reply.written(n),
                    Err(e) => reply.error(e),
                }
            });
        }
        // Written behind (fuse/write_behind.rs): answered once registered, and held to gather
        // the next writes of the open file that continue it; the WRITE itself runs to its end
        // whatever happens to the writer. Registered here when that needs no wait, else on
        // the runtime.
        // The write's bytes are copied once, into the held write (or, past here, into the
        // task); the caller's groups are read only for a write that starts a held one.
        let owner = (fh.0, req.uid());
        let sender = {
            let (sh, rt) = (sh.clone(), self.rt.clone());
            move |ticket: super::write_behind::Ticket| -> super::write_behind::SendHeld {
                let c = sh.client_for_caller(req);
                Box::new(
                    move |offset: u64,
                          data: Vec<u8>,
                          permits: Vec<tokio::sync::OwnedSemaphorePermit>| {
                        // Sent from the thread that lets it go, not by waking the runtime.
                        crate::first_poll::spawn_here(&rt, async move {
                            let went = &mut |at| ticket.went(at);
                            let r = sh.write_sent(&c, ino, offset, &data, went).await;
                            drop(permits);
                            ticket.end(r.map(|_| ()));
                        });
                    },
                )
            }
        };
        match sh.behind.write_now(ino.0, offset, data, owner, sender) {
            Some(Ok(())) => return reply.written(data.len() as u32),
            Some(Err(e)) => return reply.error(e),
            None => {}
        }
        let data = data.to_vec();
        self.spawn(req, sh, |sh, c| async move {
            let ticket = match sh.behind.begin(ino.0, offset, data.len()).await {
                Ok(t) => t,
                Err(e) => return reply.error(e),
            };
            reply.written(data.len() as u32);
            crate::first_poll::spawn_here(&Handle::current(), async move {
                let went = &mut |at| ticket.went(at);
                let r = sh.write_sent(&c, ino, offset, &data, went).await;
                ticket.end(r.map(|_| ()));
            });
        });
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        // close(2) drops the closing process's POSIX locks on the file: the UNLOCK runs to
        // its end even when the closing process is being killed (its exit closes its files).
        if let Some(uid) = sh.posix_owner_closing(ino, lock_owner) {
            let c = sh.client_for_caller(req);
            return self.spawn_to_end(sh, c, |sh, _| async move {
                // Another process takes the lock once it is let go: the data first.
                let behind = sh.behind.settle_and_report(ino.0).await;
                sh.unlock_all(ino, lock_owner.0, false, uid).await;
                reply_empty(behind.and_then(|()| sh.flushed(ino)), reply)
            });
        }
        // close(2): once the writes under way are on the server, report a loss it may have
        // had.
        if sh.behind.busy(ino.0) || sh.behind.failed(ino.0) {
            return self.spawn(req, sh, |sh, _| async move {
                let behind = sh.behind.settle_and_report(ino.0).await;
                reply_empty(behind.and_then(|()| sh.flushed(ino)), reply)
            });
        }
        reply_empty(sh.flushed(ino), reply)
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        reply: ReplyLock,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        self.spawn(req, sh, |sh, c| async move {
            sh.behind.settle(ino.0).await;
            sh.getlk(&c, ino, lock_owner, start, end, typ, reply).await
        });
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        _pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        let r = locks::SetLk {
            ino,
            file: fh.0,
            owner: lock_owner,
            start,
            end,
            typ,
            flock: false,
            sleep,
            tid: req.pid(),
            uid: req.uid(),
        };
        self.spawn(req, sh, |sh, c| async move {
            // A lock let go or taken orders the file's data: the writes under way first.
            sh.behind.settle(ino.0).await;
            sh.setlk(&c, r, reply).await
        });
    }

    fn flock(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        typ: i32,
        _pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        let r = locks::SetLk {
            ino,
            file: fh.0,
            owner: lock_owner,
            start: 0,
            end: 0,
            typ,
            flock: true,
            sleep,
            tid: req.pid(),
            uid: req.uid(),
        };
        self.spawn(req, sh, |sh, c| async move {
            // A lock let go or taken orders the file's data: the writes under way first.
            sh.behind.settle(ino.0).await;
            sh.setlk(&c, r, reply).await
        });
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        // The kernel sends the last release as itself: act as whoever opened the file.
        let opener = sh.table().files.remove(&fh.0);
        let last_page = sh.made_released(ino, fh.0);
        let c = match opener {
            Some(uid) => sh.client_for(uid),
            None => sh.client_for(req.uid()),
        };
        sh.pages_written(&c, ino, flags, last_page);
        // The open file's OFD and flock locks end with it.
        let unlocks = sh.file_released(ino, fh.0);
        self.spawn_to_end(sh, c, |sh, c| async move {
            for (owner, flock, uid) in unlocks {
                sh.unlock_all(ino, owner, flock, uid).await;
            }
            reply_empty(sh.released(&c, ino).await, reply)
        });
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EACCES));
        self.spawn(req, sh, |sh, c| async move {
            reply_empty(sh.commit(&c, ino).await, reply)
        });
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let sh = mount!(self, ino, else self.ranges.opendir(ino, reply));
        let uid = req.uid();
        let opened = |(h, keep): (u64, bool), reply: ReplyOpen| {
            let mut flags = FopenFlags::FOPEN_CACHE_DIR;
            if keep {
                flags |= FopenFlags::FOPEN_KEEP_CACHE;
            }
            reply.opened(fuser::FileHandle(h), flags)
        };
        let c = sh.client_for_caller(req);
        if let Some(now) = sh.opendir_now(&c, uid, ino, &self.rt) {
            return opened(now, reply);
        }
        self.spawn_as(req, sh, c, move |sh, c| async move {
            match sh.opendir(&c, uid, ino).await {
                Ok(open) => opened(open, reply),
                Err(e) => reply.error(e),
            }
        });
    }

    fn readdir(
        &self,
        _req: &Request,
        dir: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let sh = mount!(self, dir, else self.ranges.readdir(dir, offset, reply));
        sh.readdir(dir, fh.0, offset, reply);
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let sh = mount!(self, ino, else self.ranges.readdirplus(ino, offset, reply));
        let Some((l, need)) = sh.readdirplus(ino, fh.0, offset, reply) else {
            return;
        };
        // An entry changed since the listing and not cached: the rest waits for its GETATTR.
        // To its end even if the caller is killed: entries already in the reply are counted
        // as kernel lookups, so the reply must go out.
        let c = sh.client_for_caller(req);
        self.spawn_to_end(sh, c, move |sh, c| async move {
            sh.readdirplus_rest(&c, &l, ino, need).await
        });
    }

    fn destroy(&mut self) {
        let mounts = self.ranges.unmounting();
        if mounts.is_empty() {
            return;
        }
        self.rt.block_on(async move {
            for sh in mounts {
                // Files removed behind are removed before the mount ends.
                sh.removes.settle_all().await;
                sh.remove_hidden().await;
            }
        });
    }

    fn releasedir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.ok());
        sh.table().listings.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.ok());
        let Ok(dir) = sh.fh(ino) else {
            return reply.ok();
        };
        if !sh.removes.busy(&dir) && !sh.removes.failed(&dir) {
            // Directory operations are synchronous on the server.
            return reply.ok();
        }
        // Removals answered early: once the server has answered them, with the first it
        // refused ([`super::removes_behind`]).
        self.spawn(req, sh, move |sh, _c| async move {
            reply_empty(sh.removes.settle_and_report(&dir).await, reply)
        });
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        let sh = mount!(self, ino, else self.ranges.statfs(ino, reply));
        self.spawn(req, sh, |sh, c| async move {
            match sh.statfs(&c).await {
                Ok(s) => {
                    let b = u64::from(BLKSIZE);
                    reply.statfs(
                        s.tbytes / b,
                        s.fbytes / b,
                        s.abytes / b,
                        s.tfiles,
                        s.ffiles,
                        BLKSIZE,
                        255,
                        BLKSIZE,
                    )
                }
                Err(e) => reply.error(e),
            }
        });
    }

    // The router's own nodes have no extended attributes and take none; never ENOSYS, which
    // would turn extended attributes off for the mounts' files too.
    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let sh = mount!(self, ino, else reply.error(Errno::ENODATA));
        let name = name.as_bytes().to_vec();
        let c = sh.client_for_caller(req);
        if let Some(answer) = sh.getxattr_now(&c, ino, &name, size, &self.rt) {
            return reply_xattr(answer, reply);
        }
        self.spawn_as(req, sh, c, |sh, c| async move {
            reply_xattr(sh.getxattr(&c, ino, &name, size).await, reply)
        });
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let sh = mount!(self, ino, else reply_xattr(xattr_list(&[], size), reply));
        let c = sh.client_for_caller(req);
        if let Some(answer) = sh.listxattr_now(&c, ino, size, &self.rt) {
            return reply_xattr(answer, reply);
        }
        self.spawn_as(req, sh, c, |sh, c| async move {
            reply_xattr(sh.listxattr(&c, ino, size).await, reply)
        });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let sh = mount!(self, ino, else reply.error(Errno::EOPNOTSUPP));
        let (name, value) = (name.as_bytes().to_vec(), value.to_vec());
        sh.made_forget(ino);
        self.spawn(req, sh, |sh, c| async move {
            // A WRITE clears `security.capability`: one under way must not clear this.
            sh.behind.settle(ino.0).await;
            // A directory's ACL could make the server refuse its removals under way.
            sh.settle_removes(ino).await;
            reply_empty(sh.setxattr(&c, ino, &name, &value, flags).await, reply)
        });
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let sh = mount!(self, ino, else reply.error(Errno::EOPNOTSUPP));
        let name = name.as_bytes().to_vec();
        sh.made_forget(ino);
        self.spawn(req, sh, |sh, c| async move {
            sh.behind.settle(ino.0).await;
            sh.settle_removes(ino).await;
            reply_empty(sh.removexattr(&c, ino, &name).await, reply)
        });
    }

    /// `ioctl` answering `ENOTTY` quietly: no ioctl is in the protocol, and every `isatty(3)`
    /// on a file of the mount (thousands in a build) sends TCGETS, which fuser's default would
    /// log as a warning each time (the kernel, unlike for other ENOSYS answers, keeps asking).
    /// `ENOTTY` is what a regular file answers locally.
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: fuser::FileHandle,
        _flags: fuser::IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: fuser::ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let sh = mount!(self, ino, else self.ranges.access(ino, mask, reply));
        self.spawn(req, sh, |sh, c| async move {
            reply_empty(sh.access(&c, ino, mask).await, reply)
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let sh = mount!(self, parent, else reply.error(Errno::EACCES));
        let name = name.as_bytes().to_vec();
        let uid = req.uid();
        self.spawn(req, sh, move |sh, c| async move {
            match sh.create(&c, parent, &name, mode, flags).await {
                Ok((e, made_new)) => {
                    sh.opened(e.attr.ino.0);
                    if protocol::create_keeps_open_state(mode) {
                        sh.holds_state(e.attr.ino.0, uid);
                    }
                    let file = sh.open_file(uid);
                    if made_new {
                        sh.made_here(file.0, uid, e.attr);
                    }
                    reply.created(
                        &e.ttl,
                        &e.attr,
                        Generation(0),
                        file,
                        append::open_flags(flags),
                    )
                }
                Err(e) => reply.error(e),
            }
        });
    }
}
