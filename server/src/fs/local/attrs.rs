//! Operations on attributes: GETATTR, SETATTR, ACCESS, and the file-system-wide FSSTAT,
//! FSINFO, PATHCONF.

use protocol::{
    FileHandle, FileType, FsInfo, FsStat, NfsStatus, PathConf, ReplyBody, SetAttr, SetTime, Time,
    access,
};
use rustix::fs::{Access, AtFlags, Mode, OFlags, Timespec, Timestamps};

use super::resolve::Obj;
use super::{LocalFs, MAX_DIR_REPLY, NAME_MAX, errno, io_status};
use crate::fs::{OpCtx, Outcome};

/// The `utimensat` form of a time a client sets.
pub(super) fn timespec(t: &SetTime) -> Timespec {
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

/// Whether a SETATTR changes either time.
pub(super) fn changes_times(sa: &SetAttr) -> bool {
    !matches!(sa.atime, SetTime::DontChange) || !matches!(sa.mtime, SetTime::DontChange)
}

impl LocalFs {
    pub(super) fn getattr(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        out.leased.push((o.key, fh));
        Ok(ReplyBody::GetAttr {
            attr: o.attr(ctx.lease_ms),
        })
    }

    /// SETATTR, refused with NOT_SYNC when the client's guard (a ctime) no longer matches.
    pub(super) fn setattr(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        attr: &SetAttr,
        guard: Option<Time>,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let o = self.obj(&fh, &ctx.creds)?;
        if let Some(g) = guard
            && o.attr(0).ctime != g
        {
            return Err(NfsStatus::NotSync);
        }
        apply_setattr(&o, attr, || self.open_data(ctx, &o, OFlags::WRONLY))?;
        let a = o.fresh_attr(ctx.lease_ms);
        out.leased.push((o.key, fh));
        out.changed.push((o.key, fh, a));
        Ok(ReplyBody::SetAttr { attr: a })
    }

    /// ACCESS: asks the kernel, under the caller's credentials, for each bit.
    pub(super) fn access(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        asked: u32,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        out.leased.push((o.key, fh));
        let may_modify = !self.read_only && !ctx.creds.anonymous;
        Ok(ReplyBody::Access {
            access: access_bits(&o, may_modify, asked),
            attr: Some(o.attr(ctx.lease_ms)),
        })
    }

    pub(super) fn fsstat(&self, ctx: &OpCtx, fh: FileHandle) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        let s = rustix::fs::fstatvfs(&self.root).map_err(errno)?;
        Ok(ReplyBody::FsStat(FsStat {
            attr: Some(o.attr(ctx.lease_ms)),
            tbytes: s.f_blocks.saturating_mul(s.f_frsize),
            fbytes: s.f_bfree.saturating_mul(s.f_frsize),
            abytes: s.f_bavail.saturating_mul(s.f_frsize),
            tfiles: s.f_files,
            ffiles: s.f_ffree,
            afiles: s.f_favail,
            invarsec: 0,
        }))
    }

    pub(super) fn fsinfo(&self, ctx: &OpCtx, fh: FileHandle) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        Ok(ReplyBody::FsInfo(FsInfo {
            attr: Some(o.attr(ctx.lease_ms)),
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

    pub(super) fn pathconf(&self, ctx: &OpCtx, fh: FileHandle) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        Ok(ReplyBody::PathConf(PathConf {
            attr: Some(o.attr(ctx.lease_ms)),
            linkmax: 65000,
            name_max: NAME_MAX as u32,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        }))
    }
}

/// The ACCESS bits of `asked` the kernel grants on `o`; modify bits only when the export and
/// the caller may modify anything at all.
fn access_bits(o: &Obj, may_modify: bool, asked: u32) -> u32 {
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
    if asked & modify != 0 && may_modify && may(Access::WRITE_OK) {
        granted |= access::MODIFY | access::EXTEND;
        if is_dir {
            granted |= access::DELETE;
        }
    }
    granted & asked
}

/// SETATTR on a resolved object; the kernel checks each change against the caller. A new size
/// is set through `for_writing`, the file opened for writing.
fn apply_setattr(
    o: &Obj,
    sa: &SetAttr,
    for_writing: impl FnOnce() -> Result<std::fs::File, NfsStatus>,
) -> Result<(), NfsStatus> {
    let is_link = o.ftype() == FileType::Symlink;
    let changes_times = changes_times(sa);
    // Linux has no mode on symlinks (lchmod is EOPNOTSUPP). Their times can be set: the
    // descriptor's /proc link leads to the symlink's own inode, never to its target.
    if is_link && sa.mode.is_some() {
        return Err(NfsStatus::NotSupp);
    }
    if let Some(size) = sa.size {
        o.require_regular()?;
        let f = for_writing()?;
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
