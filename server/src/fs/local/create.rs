//! Operations that make objects or names: CREATE, MKDIR, SYMLINK, MKNOD, LINK.
//!
//! New objects get exactly the mode the client asked for (the process umask is 0), or the
//! one default of [`default_mode`] when it asked none, and belong to whoever the kernel says
//! made them (the storage thread runs as the caller). That includes the decision whether a
//! device node may be made at all: only a caller mapped to root keeps CAP_MKNOD on its
//! storage thread (a non-zero fsuid drops it), so an ordinary user's MKNOD of a device fails
//! with the kernel's EPERM.

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;

use protocol::{CreateHow, FileHandle, FileType, NfsStatus, ReplyBody, SetAttr, SpecialKind};
use rustix::fs::{AtFlags, Mode, OFlags, Timespec, Timestamps};

use super::attrs::{changes_times, timespec};
use super::resolve::{Obj, RESOLVE, new_component};
use super::{LocalFs, MAX_LINK, errno, io_status};
use crate::fs::{OpCtx, Outcome, default_mode};

/// The exclusive-create verifier, decoded once. NFS convention: the server keeps it in the
/// new file's atime and mtime (seconds) until the client's follow-up SETATTR replaces them, so
/// a retried CREATE finds the file it made and succeeds again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verifier {
    atime: i64,
    mtime: i64,
}

impl Verifier {
    fn decode(v: &[u8; 8]) -> Verifier {
        let secs = |b: &[u8]| i64::from(u32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        Verifier {
            atime: secs(&v[..4]),
            mtime: secs(&v[4..]),
        }
    }

    /// The times that store the verifier in a new file.
    fn timestamps(self) -> Timestamps {
        let at = |s: i64| Timespec {
            tv_sec: s,
            tv_nsec: 0,
        };
        Timestamps {
            last_access: at(self.atime),
            last_modification: at(self.mtime),
        }
    }

    /// Whether `o` is the file an earlier CREATE with this verifier made.
    fn made(self, o: &Obj) -> bool {
        let a = o.attr(0);
        o.ftype() == FileType::Regular
            && a.atime.seconds == self.atime
            && a.mtime.seconds == self.mtime
    }
}

/// CREATE's mode with the verifier decoded.
enum How {
    /// Create, or truncate an existing regular file to the size asked.
    Unchecked(SetAttr),
    /// Create; an existing name is an error.
    Guarded(SetAttr),
    /// Create, or succeed again on the file an earlier try with this verifier made.
    Exclusive(Verifier),
}

impl From<CreateHow> for How {
    fn from(how: CreateHow) -> How {
        match how {
            CreateHow::Unchecked(s) => How::Unchecked(s),
            CreateHow::Guarded(s) => How::Guarded(s),
            CreateHow::Exclusive(v) => How::Exclusive(Verifier::decode(&v)),
        }
    }
}

impl LocalFs {
    /// CREATE: a regular file, made with `O_CREAT | O_EXCL` and set up through the descriptor
    /// that call returned; an existing name is handled as `how` says.
    pub(super) fn create(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        how: CreateHow,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let d = self.dir(&dir, &ctx.creds)?;
        self.create_in(ctx, &d, name, how, out)
    }

    /// CREATEAT: CREATE in the directory `path` leads to, found as FETCH finds its object
    /// (each directory on the way searched as the caller), named by the path's last component.
    pub(super) fn create_at(
        &self,
        ctx: &OpCtx,
        path: &[u8],
        how: CreateHow,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let (dir_path, name) = crate::fs::split_create_path(path)?;
        let d = self.find_path(dir_path)?;
        if d.ftype() != FileType::Directory {
            return Err(NfsStatus::NotDir);
        }
        let dir = self.fh(&d);
        match self.create_in(ctx, &d, name, how, out)? {
            ReplyBody::Create(made) => Ok(ReplyBody::CreateAt {
                dir,
                made: Box::new(made),
            }),
            other => Ok(other),
        }
    }

    /// CREATE of `name` in the directory `d`.
    fn create_in(
        &self,
        ctx: &OpCtx,
        d: &Obj,
        name: &[u8],
        how: CreateHow,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let n = new_component(name)?;
        let how = How::from(how);
        let mode = match &how {
            How::Unchecked(s) | How::Guarded(s) => s.mode.unwrap_or(default_mode::FILE),
            How::Exclusive(_) => default_mode::EXCLUSIVE,
        };
        let mode = Mode::from_raw_mode(mode & 0o7777);
        // Read-write: the kernel grants any access to the file this call creates, which an
        // open state keeps when the mode denies its owner ([`super::open`]).
        let flags = OFlags::CREATE
            | OFlags::EXCL
            | OFlags::RDWR
            | OFlags::NOFOLLOW
            | OFlags::NONBLOCK
            | OFlags::NOCTTY
            | OFlags::CLOEXEC;
        match rustix::fs::openat2(&d.fd, n, flags, mode, RESOLVE) {
            Ok(fd) => self.created(ctx, d, n, File::from(fd), &how, out),
            Err(rustix::io::Errno::EXIST) => self.create_existing(ctx, d, n, &how, out),
            Err(e) => Err(errno(e)),
        }
    }

    /// The file CREATE just made: its initial size and times, set through its descriptor.
    fn created(
        &self,
        ctx: &OpCtx,
        d: &Obj,
        n: &OsStr,
        file: File,
        how: &How,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        match how {
            How::Exclusive(v) => rustix::fs::futimens(&file, &v.timestamps()).map_err(errno)?,
            How::Unchecked(s) | How::Guarded(s) => {
                if let Some(size) = s.size {
                    file.set_len(size).map_err(|e| io_status(&e))?;
                }
                if changes_times(s) {
                    let ts = Timestamps {
                        last_access: timespec(&s.atime),
                        last_modification: timespec(&s.mtime),
                    };
                    rustix::fs::futimens(&file, &ts).map_err(errno)?;
                }
            }
        }
        let o = self.obj_from(file.into(), d.path.join(n))?;
        self.remember(o.key, d.key, n);
        if protocol::create_keeps_open_state(o.meta.mode())
            && let Ok(fd) = o.fd.try_clone()
        {
            super::open::keep(&self.open, super::open::holder(ctx), o.key, fd, true);
        }
        Ok(ReplyBody::Create(self.new_object(ctx, d, &o, out)))
    }

    /// CREATE on a name that exists.
    fn create_existing(
        &self,
        ctx: &OpCtx,
        d: &Obj,
        n: &OsStr,
        how: &How,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let o = self.child(d, n)?;
        match how {
            How::Guarded(_) => Err(NfsStatus::Exist),
            How::Exclusive(v) if v.made(&o) => {
                Ok(ReplyBody::Create(self.new_object(ctx, d, &o, out)))
            }
            How::Exclusive(_) => Err(NfsStatus::Exist),
            How::Unchecked(s) => {
                if o.ftype() != FileType::Regular {
                    return Err(NfsStatus::Exist);
                }
                if let Some(size) = s.size {
                    o.reopen(OFlags::WRONLY)?
                        .set_len(size)
                        .map_err(|e| io_status(&e))?;
                }
                let new = self.new_object(ctx, d, &o, out);
                out.changed.push((o.key, self.fh(&o), new.attr));
                Ok(ReplyBody::Create(new))
            }
        }
    }

    /// MKDIR; the new directory is looked up once for its handle ([`LocalFs::made`]).
    pub(super) fn mkdir(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        attr: &SetAttr,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let d = self.dir(&dir, &ctx.creds)?;
        let n = new_component(name)?;
        let mode = attr.mode.unwrap_or(default_mode::DIRECTORY) & 0o7777;
        rustix::fs::mkdirat(&d.fd, n, Mode::from_raw_mode(mode)).map_err(errno)?;
        Ok(ReplyBody::Mkdir(self.made(ctx, &d, n, out)))
    }

    /// SYMLINK: the link holds `target` as text; the server never follows it.
    pub(super) fn symlink(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        target: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let d = self.dir(&dir, &ctx.creds)?;
        let n = new_component(name)?;
        if target.is_empty() || target.contains(&0) || target.len() > MAX_LINK {
            return Err(NfsStatus::Inval);
        }
        rustix::fs::symlinkat(OsStr::from_bytes(target), &d.fd, n).map_err(errno)?;
        Ok(ReplyBody::Symlink(self.made(ctx, &d, n, out)))
    }

    /// MKNOD: a FIFO, socket or device node, made with `mknodat(2)` as the caller and looked
    /// up once (as an `O_PATH` descriptor, never opened for data) for its handle. Only the
    /// mode of `attr` is used, as for MKDIR.
    pub(super) fn mknod(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        kind: SpecialKind,
        attr: &SetAttr,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let d = self.dir(&dir, &ctx.creds)?;
        let n = new_component(name)?;
        let mode = Mode::from_raw_mode(attr.mode.unwrap_or(default_mode::FILE) & 0o7777);
        let (ftype, dev) = match kind {
            SpecialKind::Fifo => (rustix::fs::FileType::Fifo, 0),
            SpecialKind::Socket => (rustix::fs::FileType::Socket, 0),
            SpecialKind::Char(major, minor) => (
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::makedev(major, minor),
            ),
            SpecialKind::Block(major, minor) => (
                rustix::fs::FileType::BlockDevice,
                rustix::fs::makedev(major, minor),
            ),
        };
        rustix::fs::mknodat(&d.fd, n, ftype, mode, dev).map_err(errno)?;
        Ok(ReplyBody::Mknod(self.made(ctx, &d, n, out)))
    }

    /// LINK: a new name in `dir` for the object `fh` (never a directory).
    pub(super) fn link(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        dir: FileHandle,
        name: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let o = self.obj(&fh, &ctx.creds)?;
        let d = self.dir(&dir, &ctx.creds)?;
        let n = new_component(name)?;
        if o.ftype() == FileType::Directory {
            return Err(NfsStatus::IsDir);
        }
        // Through the descriptor's /proc link, which names exactly this object; the kernel
        // applies protected_hardlinks against the caller.
        rustix::fs::linkat(
            rustix::fs::CWD,
            o.proc_path(),
            &d.fd,
            n,
            AtFlags::SYMLINK_FOLLOW,
        )
        .map_err(errno)?;
        self.remember(o.key, d.key, n);
        let attr = o.fresh_attr(ctx.lease_ms);
        let dir_attr = d.fresh_attr(ctx.lease_ms);
        out.changed.push((o.key, fh, attr));
        out.changed.push((d.key, dir, dir_attr));
        out.leased.push((o.key, fh));
        out.leased.push((d.key, dir));
        Ok(ReplyBody::Link { attr, dir_attr })
    }
}
