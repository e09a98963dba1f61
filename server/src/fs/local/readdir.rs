//! Directory listing: READDIR and READDIRPLUS.
//!
//! **Directory cursors.** Cookies are the file system's own directory offsets (what
//! `getdents64` reports, as the kernel NFS server uses): a page seeks to its cookie and reads
//! only what it returns, never the whole directory.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;

use protocol::{Attr, DirEntry, DirEntryPlus, DirPage, FileHandle, FileType, NfsStatus, ReplyBody};

use super::resolve::{Obj, open_dir_stream};
use super::stat_at::{mount_id, stat_at};
use super::xattr::entry_lists_any_xattr;
use super::{LocalFs, MAX_DIR_REPLY, errno};
use crate::fs::{OpCtx, Outcome};

/// One page of a directory: the directory, its entries, and whether the page ends it.
struct Page {
    dir: Obj,
    entries: Vec<DirEntryPlus>,
    /// For LISTDIR, entry by entry: no extended attributes the caller may list.
    bare: Vec<bool>,
    eof: bool,
}

/// What a page tells of each entry beyond its name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Detail {
    /// READDIR: the name and file id.
    Names,
    /// READDIRPLUS: attributes and handle too.
    Plus,
    /// LISTDIR: READDIRPLUS's, and whether it has extended attributes.
    PlusXattrs,
}

impl LocalFs {
    /// READDIR: names and file ids, within `count` bytes of reply.
    pub(super) fn readdir(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        cookie: u64,
        count: u32,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let page = self.list(ctx, &dir, cookie, count as usize, 0, Detail::Names)?;
        out.leased.push((page.dir.key, dir));
        Ok(ReplyBody::ReadDir(DirPage {
            dir_attr: Some(page.dir.attr(ctx.lease_ms)),
            verifier: [0; 8],
            entries: page
                .entries
                .into_iter()
                .map(|e| DirEntry {
                    fileid: e.fileid,
                    name: e.name,
                    cookie: e.cookie,
                })
                .collect(),
            eof: page.eof,
        }))
    }

    /// READDIRPLUS: entries with attributes and handles (leased to the caller), within
    /// `maxcount` bytes of reply and `dircount` bytes of names.
    pub(super) fn readdirplus(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        cookie: u64,
        (dircount, maxcount): (u32, u32),
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let (page, _) =
            self.page_plus(ctx, dir, cookie, (dircount, maxcount), Detail::Plus, out)?;
        Ok(ReplyBody::ReadDirPlus(page))
    }

    /// LISTDIR: READDIRPLUS's page, and which entries have no extended attributes the
    /// caller may list (asked with `llistxattr` beside the directory, as the caller).
    pub(super) fn listdir(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        cookie: u64,
        (dircount, maxcount): (u32, u32),
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let (page, bare) = self.page_plus(
            ctx,
            dir,
            cookie,
            (dircount, maxcount),
            Detail::PlusXattrs,
            out,
        )?;
        Ok(ReplyBody::ListDir { page, bare })
    }

    /// A READDIRPLUS or LISTDIR page, its entries' handles leased to the caller.
    fn page_plus(
        &self,
        ctx: &OpCtx,
        dir: FileHandle,
        cookie: u64,
        (dircount, maxcount): (u32, u32),
        detail: Detail,
        out: &mut Outcome,
    ) -> Result<(DirPage<DirEntryPlus>, Vec<bool>), NfsStatus> {
        let page = self.list(
            ctx,
            &dir,
            cookie,
            maxcount as usize,
            dircount as usize,
            detail,
        )?;
        out.leased.push((page.dir.key, dir));
        for e in &page.entries {
            if let Some(fh) = e.fh
                && let Ok(h) = self.key.verify(&fh)
            {
                out.leased.push(((h.device, h.inode), fh));
            }
        }
        let listed = DirPage {
            dir_attr: Some(page.dir.attr(ctx.lease_ms)),
            verifier: [0; 8],
            entries: page.entries,
            eof: page.eof,
        };
        Ok((listed, page.bare))
    }

    /// One page of a directory from the cursor `cookie`, within the client's budget and the
    /// server's own maximum.
    fn list(
        &self,
        ctx: &OpCtx,
        dir: &FileHandle,
        cookie: u64,
        budget: usize,
        dir_budget: usize,
        detail: Detail,
    ) -> Result<Page, NfsStatus> {
        let plus = detail != Detail::Names;
        let d = self.dir(dir, &ctx.creds)?;
        let budget = budget.min(MAX_DIR_REPLY);
        let dir_budget = dir_budget.min(MAX_DIR_REPLY);
        let mut stream = open_dir_stream(d.fd.as_fd())?;
        let dir_mnt = if plus {
            mount_id(d.fd.as_fd()).ok()
        } else {
            None
        };
        // `/proc/self/fd/N/` of the directory: each entry's xattrs are asked beside it where
        // the kernel has no `listxattrat`.
        let dir_path = format!("{}/", d.proc_path());
        if cookie != 0 {
            let at = i64::try_from(cookie).map_err(|_| NfsStatus::BadCookie)?;
            stream.seek(at).map_err(|_| NfsStatus::BadCookie)?;
        }
        // Reply overhead: status, attrs, verifier, count, eof.
        let mut used = 200usize;
        let mut dir_used = 0usize;
        let mut entries = Vec::new();
        let mut bare = Vec::new();
        let mut eof = true;
        for e in stream {
            let e = e.map_err(errno)?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            // A directory this large is listed on a storage thread (`inline.rs`).
            if entries.len() == super::inline::LIST_INLINE_MAX && super::inline::refused() {
                return Err(NfsStatus::Jukebox);
            }
            let base = 8 + 4 + name.len().div_ceil(4) * 4 + 8;
            let cost = base + if plus { 4 + 104 + 4 + 48 } else { 0 };
            if used + cost > budget || (dir_budget > 0 && dir_used + base > dir_budget) {
                eof = false;
                break;
            }
            used += cost;
            dir_used += base;
            let (attr, fh, fileid) = if plus {
                // Under the caller's credentials: without search permission on the directory
                // the kernel refuses and the entry carries no handle.
                match self.described(&d, dir_mnt, OsStr::from_bytes(name), ctx.lease_ms) {
                    Ok((attr, fh, fileid)) => (Some(attr), Some(fh), fileid),
                    Err(_) => (None, None, e.ino()),
                }
            } else {
                (None, None, e.ino())
            };
            if detail == Detail::PlusXattrs {
                // Symlinks are left to LISTXATTR (which answers for the link through its
                // handle), as are entries without a handle.
                let plain = attr.is_some_and(|a| a.ftype != FileType::Symlink);
                bare.push(
                    plain
                        && !entry_lists_any_xattr(
                            d.fd.as_fd(),
                            &dir_path,
                            OsStr::from_bytes(name),
                            &ctx.creds,
                        ),
                );
            }
            entries.push(DirEntryPlus {
                fileid,
                name: name.to_vec(),
                cookie: e.offset() as u64,
                attr,
                fh,
            });
        }
        if entries.is_empty() && !eof {
            return Err(NfsStatus::TooSmall);
        }
        Ok(Page {
            dir: d,
            entries,
            bare,
            eof,
        })
    }

    /// Entry `name` of `d` as READDIRPLUS gives it: attributes, handle, file id. Described
    /// by one `statx` beside the directory ([`stat_at`]); opened as an object only where the
    /// kernel reports no mount ids (`dir_mnt` is `None`).
    fn described(
        &self,
        d: &Obj,
        dir_mnt: Option<u64>,
        name: &OsStr,
        lease_ms: u32,
    ) -> Result<(Attr, FileHandle, u64), NfsStatus> {
        let Some(mnt) = dir_mnt else {
            let o = self.child(d, name)?;
            return Ok((o.attr(lease_ms), self.fh(&o), o.key.1));
        };
        let s = stat_at(d.fd.as_fd(), mnt, name, lease_ms)?;
        self.remember(s.key, d.key, name);
        Ok((s.attr, self.handle(s.key, s.generation), s.key.1))
    }
}
