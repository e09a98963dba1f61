//! Operations that find objects by name: MOUNT, LOOKUP, READLINK.

use protocol::{FileHandle, FileType, NfsStatus, ReplyBody};
use rustix::fs::Access;

use super::resolve::component;
use super::{LocalFs, MAX_LINK, errno};
use crate::fs::{OpCtx, Outcome};

impl LocalFs {
    /// MOUNT: resolves the path one component at a time beneath the root, so the kernel checks
    /// search permission on every directory on the way.
    pub(super) fn mount(
        &self,
        ctx: &OpCtx,
        path: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let text = std::str::from_utf8(path).map_err(|_| NfsStatus::Inval)?;
        let mut at = self.root_obj()?;
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

    /// LOOKUP, `.` and `..` included (`..` of the root is the root).
    pub(super) fn lookup(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let d = self.dir(&dir, &ctx.creds)?;
        let o = self.lookup_child(&d, name)?;
        let fh = self.fh(&o);
        out.leased.push((o.key, fh));
        out.leased.push((d.key, dir));
        Ok(ReplyBody::Lookup {
            fh,
            attr: Some(o.attr(ctx.lease_ms)),
            dir_attr: Some(d.attr(ctx.lease_ms)),
        })
    }

    /// READLINK: the link's text, read through its own descriptor (never followed).
    pub(super) fn readlink(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
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
            attr: Some(o.attr(ctx.lease_ms)),
            target,
        })
    }
}
