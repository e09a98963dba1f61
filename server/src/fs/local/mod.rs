//! The local-directory backend.
//!
//! **The kernel decides.** Every operation runs under the request's credentials (see
//! [`super::creds`]), so the kernel makes every permission decision: search permission on each
//! path step, write permission and the sticky bit on directories, `protected_hardlinks`,
//! setgid inheritance, ownership of new objects (the creator's fsuid made them: nothing is
//! chowned afterwards), ACLs. The process umask is 0, so new objects get exactly the mode the
//! client asked for (minus what the kernel itself removes).
//!
//! **Where things are.** [`resolve`] turns handles and names into objects and is the one
//! place that opens anything by name: it holds the "never escapes the export" invariant, the
//! inode index and the rate-limited walk. Each other file is one kind of operation:
//!
//! | file          | operations                                              |
//! |---------------|---------------------------------------------------------|
//! | [`lookup`]    | MOUNT, LOOKUP, READLINK                                 |
//! | [`attrs`]     | GETATTR, SETATTR, ACCESS, FSSTAT, FSINFO, PATHCONF      |
//! | [`data`]      | WRITE, COMMIT, and the READ data path                   |
//! | [`append`]    | APPEND (the kernel places the data: `O_APPEND`)         |
//! | [`create`]    | CREATE, MKDIR, SYMLINK, LINK (objects and names made)   |
//! | [`remove`]    | REMOVE, RMDIR, RENAME (names taken away or moved)       |
//! | [`readdir`]   | READDIR, READDIRPLUS                                    |
//! | [`open`]      | OPEN, CLOSE (open states: see there)                    |
//! | [`xattr`]     | GETXATTR, SETXATTR, LISTXATTR, REMOVEXATTR (and ACLs)   |
//!
//! `LocalFs::run` below maps each request to its operation, one line each: adding an operation
//! means a method in the file of its kind and one line there.

mod append;
mod attrs;
mod create;
mod data;
mod inline;
mod listxattr_at;
mod lookup;
mod open;
mod readdir;
mod remove;
mod resolve;
mod stat_at;
#[cfg(test)]
mod testing;
mod xattr;

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use protocol::{Attr, HandleData, HandleKey, NewObject, NfsStatus, ReplyBody, RequestOp};
use rustix::fs::OFlags;

use super::creds::Switcher;
use super::{BlockingStorage, ObjKey, OpCtx, Outcome};
use data::write_verifier;
use resolve::{Index, Obj, WalkGate, stat_fd};

/// The only export this server has (handles carry it so a future multi-export server can tell
/// them apart).
pub(crate) const EXPORT_ID: u32 = 1;
/// Longest name component accepted.
pub(crate) const NAME_MAX: usize = 255;
/// Bound on the objects the index holds.
const MAX_INDEX: usize = 1 << 20;
/// Minimum time between two walks of the export.
const WALK_INTERVAL: Duration = Duration::from_secs(1);
/// A walk may take at most this share of the time (a walk of 0.5 s allows the next after 5 s).
const WALK_DUTY: u32 = 10;
/// Largest READDIR/READDIRPLUS reply, whatever the client asks.
pub(crate) const MAX_DIR_REPLY: usize = 64 * 1024;
/// Longest symlink target accepted or returned.
const MAX_LINK: usize = 4096;

/// The status an errno from a file-system call becomes.
fn errno(e: rustix::io::Errno) -> NfsStatus {
    io_status(&io::Error::from_raw_os_error(e.raw_os_error()))
}

/// The status an I/O error becomes; the cases `NfsStatus::from_io_error` does not know are
/// this backend's own (`ELOOP` is a symlink met on a path the server never follows).
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

/// The local-directory backend.
pub(crate) struct LocalFs {
    root: OwnedFd,
    root_key: ObjKey,
    key: HandleKey,
    index: Mutex<Index>,
    walks: Mutex<WalkGate>,
    /// Largest READ/WRITE (FSINFO).
    max_io: u32,
    /// WRITE/COMMIT verifier ([`write_verifier`]).
    write_verifier: [u8; 8],
    read_only: bool,
    switcher: Switcher,
    /// Descriptors kept for connections' users ([`open`]).
    open: open::Descriptors,
    /// Whether small WRITEs may run inline now ([`inline`]).
    slow_writes: inline::SlowWrites,
}

impl LocalFs {
    pub(crate) fn open(
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
            write_verifier: write_verifier(),
            read_only,
            switcher,
            open: open::Descriptors::default(),
            slow_writes: inline::SlowWrites::default(),
        })
    }

    /// Refuses modifications on a read-only export.
    fn writable(&self) -> Result<(), NfsStatus> {
        if self.read_only {
            Err(NfsStatus::RoFs)
        } else {
            Ok(())
        }
    }

    /// The reply part for an object made in `dir`; records the leases and the change of `dir`.
    fn new_object(&self, ctx: &OpCtx, dir: &Obj, obj: &Obj, out: &mut Outcome) -> NewObject {
        let fh = self.fh(obj);
        out.leased.push((obj.key, fh));
        NewObject {
            fh: Some(fh),
            attr: obj.fresh_attr(ctx.lease_ms),
            dir_attr: self.dir_grew(ctx, dir, out),
        }
    }

    /// Records that `dir` gained a name (its lease for the caller, its change for other
    /// holders) and returns its new attributes.
    fn dir_grew(&self, ctx: &OpCtx, dir: &Obj, out: &mut Outcome) -> Option<Attr> {
        let dir_fh = self.fh(dir);
        let dir_attr = dir.fresh_attr(ctx.lease_ms);
        out.leased.push((dir.key, dir_fh));
        out.changed.push((dir.key, dir_fh, dir_attr));
        dir_attr
    }

    /// The answer for an object this request made as `name` in `dir` (MKDIR, SYMLINK,
    /// MKNOD): its handle and attributes, or, when looking it up fails after it was made (out
    /// of descriptors, or the name already gone), success without them, which the client
    /// follows with a LOOKUP. An error would be wrong there: the object exists, so a retry
    /// would fail on the name the first try took.
    fn made(&self, ctx: &OpCtx, dir: &Obj, name: &OsStr, out: &mut Outcome) -> NewObject {
        match self.child(dir, name) {
            Ok(obj) => self.new_object(ctx, dir, &obj, out),
            Err(status) => {
                tracing::debug!(?status, "made an object but could not look it up");
                NewObject {
                    fh: None,
                    attr: None,
                    dir_attr: self.dir_grew(ctx, dir, out),
                }
            }
        }
    }

    /// `o` opened for data as the caller, or, when the kernel refuses that, through what the
    /// CREATE that made it granted this connection's user ([`open`]).
    fn open_data(&self, ctx: &OpCtx, o: &Obj, flags: OFlags) -> Result<File, NfsStatus> {
        match o.reopen(flags) {
            Err(NfsStatus::Acces) => {
                open::granted(&self.open, open::holder(ctx), o.key).ok_or(NfsStatus::Acces)
            }
            opened => opened,
        }
    }

    /// One request, already under the caller's credentials: which operation runs it.
    fn run(&self, ctx: &OpCtx, op: RequestOp, out: &mut Outcome) -> Result<ReplyBody, NfsStatus> {
        use RequestOp as Op;
        match op {
            Op::Mount { path } => self.mount(ctx, &path, out),
            Op::Fetch { path, count } => self.fetch(ctx, &path, count, out),
            Op::GetAttr { fh } => self.getattr(ctx, fh, out),
            Op::SetAttr { fh, attr, guard } => self.setattr(ctx, fh, &attr, guard, out),
            Op::Lookup { dir, name } => self.lookup(ctx, dir, &name, out),
            Op::Access { fh, access } => self.access(ctx, fh, access, out),
            Op::ReadLink { fh } => self.readlink(ctx, fh, out),
            Op::Write {
                fh,
                offset,
                stable,
                data,
            } => {
                let result = self.write(ctx, fh, offset, stable, &data, out);
                out.returned_buffer = data.into_buffer();
                result
            }
            Op::Append { fh, stable, data } => {
                let result = self.append(ctx, fh, stable, &data, out);
                out.returned_buffer = data.into_buffer();
                result
            }
            Op::Commit { fh, .. } => self.commit(ctx, fh, out),
            Op::Create { dir, name, how } => self.create(ctx, dir, &name, how, out),
            Op::CreateAt { path, how } => self.create_at(ctx, &path, how, out),
            Op::Mkdir { dir, name, attr } => self.mkdir(ctx, dir, &name, &attr, out),
            Op::Symlink {
                dir, name, target, ..
            } => self.symlink(ctx, dir, &name, &target, out),
            Op::Remove { dir, name } => self.remove(ctx, dir, &name, out),
            Op::Rmdir { dir, name } => self.rmdir(ctx, dir, &name, out),
            Op::Mknod {
                dir,
                name,
                kind,
                attr,
            } => self.mknod(ctx, dir, &name, kind, &attr, out),
            Op::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            } => self.rename(ctx, (from_dir, &from_name), (to_dir, &to_name), None, out),
            Op::Rename2 {
                from_dir,
                from_name,
                to_dir,
                to_name,
                flags,
            } => self.rename(
                ctx,
                (from_dir, &from_name),
                (to_dir, &to_name),
                Some(flags),
                out,
            ),
            Op::Link { fh, dir, name } => self.link(ctx, fh, dir, &name, out),
            Op::ReadDir {
                dir, cookie, count, ..
            } => self.readdir(ctx, dir, cookie, count, out),
            Op::ReadDirPlus {
                dir,
                cookie,
                dircount,
                maxcount,
                ..
            } => self.readdirplus(ctx, dir, cookie, (dircount, maxcount), out),
            Op::ListDir {
                dir,
                cookie,
                dircount,
                maxcount,
                ..
            } => self.listdir(ctx, dir, cookie, (dircount, maxcount), out),
            Op::Open { fh } => self.open_state(ctx, fh, out),
            Op::Close { fh } => self.close_state(ctx, fh),
            Op::GetXattr { fh, name } => self.getxattr(ctx, fh, &name),
            Op::SetXattr {
                fh,
                name,
                value,
                flags,
            } => self.setxattr(ctx, fh, &name, &value, flags, out),
            Op::ListXattr { fh } => self.listxattr(ctx, fh),
            Op::RemoveXattr { fh, name } => self.removexattr(ctx, fh, &name, out),
            Op::FsStat { fh } => self.fsstat(ctx, fh),
            Op::FsInfo { fh } => self.fsinfo(ctx, fh),
            Op::PathConf { fh } => self.pathconf(ctx, fh),
            // Answered by the connection before storage is involved.
            Op::Null
            | Op::Login(_)
            | Op::Narrow { .. }
            | Op::Session { .. }
            | Op::Sequence { .. }
            | Op::Read { .. } => Err(NfsStatus::ServerFault),
            // The lock table's ([`crate::lock_ops`]), never storage's.
            Op::Lock(_) | Op::Unlock(_) | Op::TestLock(_) => Err(NfsStatus::ServerFault),
        }
    }
}

impl BlockingStorage for LocalFs {
    fn execute_inline(&self, ctx: &OpCtx, op: &RequestOp) -> Option<Outcome> {
        if !inline::runs_inline(op) {
            return None;
        }
        let write = matches!(op, RequestOp::Write { .. });
        let started = Instant::now();
        if write && self.slow_writes.cooling(started) {
            return None;
        }
        let out = inline::only_short(|| self.execute(ctx, op.clone()));
        if write && out.is_some() {
            let now = Instant::now();
            self.slow_writes.took(now - started, now);
        }
        out
    }

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

    fn open_read(&self, ctx: &OpCtx, h: &HandleData) -> Result<File, NfsStatus> {
        let opened = self.switcher.run(&ctx.creds, || {
            let o = self.resolve(h, &ctx.creds)?;
            o.require_regular()?;
            self.open_data(ctx, &o, OFlags::RDONLY)
        });
        opened.unwrap_or_else(|e| {
            tracing::error!(error = %e, user = %ctx.creds.name, "cannot switch credentials");
            Err(NfsStatus::ServerFault)
        })
    }

    fn connection_closed(&self, conn: crate::ids::ConnId) {
        self.open.close_conn(conn);
    }
}
