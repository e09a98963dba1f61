//! Operations that find objects by name: MOUNT, LOOKUP, READLINK.

use protocol::{FileHandle, FileType, NfsStatus, ReplyBody};
use rustix::fs::{Access, OFlags};

use super::resolve::{Obj, component};
use super::{LocalFs, MAX_LINK, errno, io_status};
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
        let at = self.find_path(path)?;
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

    /// FETCH: the object at `path`, as MOUNT finds it but of any type, and a regular file's
    /// first `count` bytes (already clamped by the connection), read as the caller.
    pub(super) fn fetch(
        &self,
        ctx: &OpCtx,
        path: &[u8],
        count: u32,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let at = self.find_path(path)?;
        let fh = self.fh(&at);
        let (data, eof) = if at.ftype() == FileType::Regular && count > 0 {
            let file = self.open_data(ctx, &at, OFlags::RDONLY)?;
            read_start(&file, count as usize)?
        } else {
            (Vec::new(), true)
        };
        out.leased.push((at.key, fh));
        Ok(ReplyBody::Fetch {
            fh,
            // Taken after the read, so a reader's attributes are never older than its data.
            attr: at.attr(ctx.lease_ms),
            eof,
            data: data.into(),
        })
    }

    /// The object at `path` below the root, found one component at a time (`.` and empty
    /// components skipped, `..` refused), each directory searched as the caller.
    pub(super) fn find_path(&self, path: &[u8]) -> Result<Obj, NfsStatus> {
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
        Ok(at)
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

/// Up to `count` bytes of `file` from offset 0, and whether they reach its end. The buffer
/// is sized by the file, so a FETCH of an empty file allocates nothing.
fn read_start(file: &std::fs::File, count: usize) -> Result<(Vec<u8>, bool), NfsStatus> {
    use std::os::unix::fs::FileExt;
    let size = file.metadata().map_err(|e| io_status(&e))?.len();
    let want = usize::try_from(size).unwrap_or(usize::MAX).min(count);
    let mut buf = vec![0u8; want];
    let mut got = 0;
    while got < want {
        match file.read_at(&mut buf[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(io_status(&e)),
        }
    }
    buf.truncate(got);
    // Short of `count` is the end, unless the file grew since its size was taken.
    let eof = got < count && got as u64 >= size;
    Ok((buf, eof))
}
