//! Operations that take names away or move them: REMOVE, RMDIR, RENAME, RENAME2.
//!
//! The victim is looked up first only to tell other lease holders what changed and to keep
//! the inode index right; the kernel decides the removal or rename itself, by name in the
//! resolved directory.

use std::os::unix::fs::MetadataExt;

use protocol::{Attr, FileHandle, FileType, NfsStatus, ReplyBody, rename_flags};
use rustix::fs::{AtFlags, RenameFlags};

use super::resolve::{Obj, old_component};
use super::{LocalFs, errno};
use crate::fs::{OpCtx, Outcome};

impl LocalFs {
    pub(super) fn remove(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let dir_attr = self.unlink(ctx, dir, name, false, out)?;
        Ok(ReplyBody::Remove { dir_attr })
    }

    pub(super) fn rmdir(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let dir_attr = self.unlink(ctx, dir, name, true, out)?;
        Ok(ReplyBody::Rmdir { dir_attr })
    }

    /// REMOVE (`rmdir` false) or RMDIR; returns the directory's attributes after.
    fn unlink(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        name: &[u8],
        rmdir: bool,
        out: &mut Outcome,
    ) -> Result<Option<Attr>, NfsStatus> {
        self.writable()?;
        let d = self.dir(&dir, &ctx.creds)?;
        if rmdir && name == b"." {
            return Err(NfsStatus::Inval);
        }
        if rmdir && name == b".." {
            return Err(NfsStatus::NotEmpty);
        }
        let n = old_component(name)?;
        let victim = self.child(&d, n)?;
        let is_dir = victim.ftype() == FileType::Directory;
        if rmdir && !is_dir {
            return Err(NfsStatus::NotDir);
        }
        if !rmdir && is_dir {
            return Err(NfsStatus::IsDir);
        }
        if frees_a_large_file(&victim) && super::inline::refused() {
            return Err(NfsStatus::Jukebox);
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
        // Only this name is gone while the object has others (link-then-unlink): the index
        // keeps them, so its handle still resolves without a walk.
        let last = victim.meta.nlink() <= 1 || is_dir;
        self.removed(victim.key, last, d.key, n);
        let dir_attr = d.fresh_attr(ctx.lease_ms);
        out.changed.push((victim.key, self.fh(&victim), None));
        out.changed.push((d.key, dir, dir_attr));
        out.leased.push((d.key, dir));
        Ok(dir_attr)
    }

    /// RENAME `from_dir/from_name` to `to_dir/to_name`, replacing what the target named.
    /// RENAME (`flags` `None`) and RENAME2: one `renameat2(2)` with the protocol's flags, so
    /// with NOREPLACE the existence check and the rename are one atomic step in the kernel.
    pub(super) fn rename(
        &self,
        ctx: &OpCtx,
        (from_dir, from_name): (FileHandle, &[u8]),
        (to_dir, to_name): (FileHandle, &[u8]),
        rename2: Option<u32>,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let flags = rename2.unwrap_or(0);
        // The decoder admits only defined bits; refuse anything else rather than pass it on.
        if flags & !rename_flags::ALL != 0 {
            return Err(NfsStatus::Inval);
        }
        let noreplace = flags & rename_flags::NOREPLACE != 0;
        let kernel_flags = if noreplace {
            RenameFlags::NOREPLACE
        } else {
            RenameFlags::empty()
        };
        self.writable()?;
        let c = &ctx.creds;
        let source_dir = self.dir(&from_dir, c)?;
        let target_dir = self.dir(&to_dir, c)?;
        let source_name = old_component(from_name)?;
        let target_name = old_component(to_name)?;
        let moving = self.child(&source_dir, source_name)?;
        // What the target name named before. The same object (the same name, or two hard
        // links of one file) makes the rename a no-op: POSIX leaves both names in place.
        let at_target = self.child(&target_dir, target_name).ok();
        let no_op = at_target.as_ref().is_some_and(|r| r.key == moving.key);
        let replaced = at_target.filter(|r| r.key != moving.key);
        if replaced.as_ref().is_some_and(frees_a_large_file) && super::inline::refused() {
            return Err(NfsStatus::Jukebox);
        }
        rustix::fs::renameat_with(
            &source_dir.fd,
            source_name,
            &target_dir.fd,
            target_name,
            kernel_flags,
        )
        .map_err(|e| match e {
            // With NOREPLACE, EEXIST is "the target exists"; without, the kernel uses it (like
            // ENOTEMPTY) for a directory target that is not empty.
            rustix::io::Errno::EXIST if noreplace => NfsStatus::Exist,
            rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST => NfsStatus::NotEmpty,
            e => errno(e),
        })?;
        if !no_op {
            // The replaced object lost the target name; it is gone with its last name (a
            // directory has only one).
            let replaced = replaced.as_ref().map(|r| {
                let last = r.meta.nlink() <= 1 || r.ftype() == FileType::Directory;
                (r.key, last)
            });
            self.renamed(
                moving.key,
                replaced,
                (source_dir.key, source_name),
                (target_dir.key, target_name),
            );
        }
        let lease = ctx.lease_ms;
        out.changed.push((moving.key, self.fh(&moving), None));
        if let Some(r) = replaced {
            out.changed.push((r.key, self.fh(&r), None));
        }
        let from_dir_attr = source_dir.fresh_attr(lease);
        let to_dir_attr = target_dir.fresh_attr(lease);
        out.changed.push((source_dir.key, from_dir, from_dir_attr));
        out.changed.push((target_dir.key, to_dir, to_dir_attr));
        out.leased.push((source_dir.key, from_dir));
        out.leased.push((target_dir.key, to_dir));
        Ok(if rename2.is_none() {
            ReplyBody::Rename {
                from_dir_attr,
                to_dir_attr,
            }
        } else {
            ReplyBody::Rename2 {
                from_dir_attr,
                to_dir_attr,
            }
        })
    }
}

/// Whether taking away a name of `o` takes its last name from a file over
/// [`super::inline::FREED_INLINE_MAX`]: the kernel then frees its blocks in the `unlink` or
/// `rename`, which is left to a storage thread rather than a worker.
fn frees_a_large_file(o: &Obj) -> bool {
    o.ftype() != FileType::Directory
        && o.meta.nlink() <= 1
        && o.meta.size() > super::inline::FREED_INLINE_MAX
}
