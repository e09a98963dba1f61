//! Extended attributes and POSIX ACLs: GETXATTR, SETXATTR, LISTXATTR, REMOVEXATTR.
//!
//! **Which call, on what.** The object is the handle's resolved `O_PATH` descriptor, and the
//! `f*xattr` calls refuse those (`EBADF`). Re-opening the object for reading would need read
//! permission, which reading or setting an attribute does not (`user.` needs write
//! permission to set, ACLs need ownership), and cannot be done at all on a symlink, socket or
//! device. So each call names `/proc/self/fd/N` with the path-following variant
//! (`getxattr`, not `lgetxattr`): following that magic link lands on exactly the resolved
//! object, a symlink included (it is not followed further), never on anything found by name.
//! The `l*` variants would act on the `/proc` link itself.
//!
//! **The kernel decides, with one exception.** The calls run under the caller's file-system
//! credentials on the storage thread, so who may read or write `user.` attributes and ACLs is
//! the kernel's answer: `user.` on regular files and directories only, setting it needs write
//! permission; only the owner sets an ACL (`CAP_FOWNER` is one of the file-system
//! capabilities a non-zero fsuid drops). But the thread keeps the server's other
//! capabilities, and `trusted.` needs `CAP_SYS_ADMIN`, setting `security.` names
//! `CAP_SYS_ADMIN` or `CAP_SETFCAP`: with them the kernel would let any caller through. So for
//! a caller not mapped to root this module answers as the kernel answers an unprivileged
//! process ([`Privileged`]): `trusted.` is invisible (get `NoXattr`, absent from lists, set
//! and remove `Perm`), `security.` is read-only (set and remove `Perm`). A caller mapped to
//! root keeps the server's capabilities, as a local root process has them. Names outside the
//! namespaces the protocol serves ([`protocol::xattr::name_is_served`]) are `NotSupp`.
//!
//! **Bounded memory.** A value or list buffer is at most 64 KiB (`XATTR_SIZE_MAX`,
//! `XATTR_LIST_MAX`, the kernel's own ceiling), allocated once per call on a storage thread;
//! the connection reserved the encoded reply's size against its output limit before the
//! request was admitted.

use std::ffi::OsStr;
use std::io;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;

use protocol::xattr::{MAX_LIST_LEN, MAX_VALUE_LEN, name_is_served};
use protocol::{FileHandle, NfsStatus, ReplyBody};
use rustix::buffer::spare_capacity;
use rustix::fs::XattrFlags;

use super::listxattr_at::listxattr_at;
use super::resolve::Obj;
use super::{LocalFs, errno};
use crate::fs::{OpCtx, Outcome};
use crate::users::Creds;

/// The status an errno of an xattr call becomes: the two xattr-only errors have statuses of
/// their own, the rest map as for any other call.
fn xattr_errno(e: rustix::io::Errno) -> NfsStatus {
    match e {
        rustix::io::Errno::NODATA => NfsStatus::NoXattr,
        rustix::io::Errno::TOOBIG | rustix::io::Errno::RANGE => NfsStatus::Xattr2Big,
        rustix::io::Errno::OPNOTSUPP => NfsStatus::NotSupp,
        e => errno(e),
    }
}

/// The name as the kernel takes it, if the protocol serves its namespace.
fn served(name: &[u8]) -> Result<&OsStr, NfsStatus> {
    if name_is_served(name) {
        Ok(OsStr::from_bytes(name))
    } else {
        Err(NfsStatus::NotSupp)
    }
}

/// The namespaces whose access the kernel decides by capabilities (which the storage thread
/// keeps whatever the caller), and what an unprivileged caller gets there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Privileged {
    /// `trusted.`: hidden from unprivileged callers (the kernel's `xattr_permission`).
    Trusted,
    /// `security.`: readable by all, written only with capabilities (`cap_inode_setxattr`).
    Security,
}

impl Privileged {
    fn of(name: &[u8]) -> Option<Privileged> {
        if name.starts_with(b"trusted.") {
            Some(Privileged::Trusted)
        } else if name.starts_with(b"security.") {
            Some(Privileged::Security)
        } else {
            None
        }
    }
}

/// Whether the caller has the server's capabilities (is mapped to root).
fn privileged(creds: &Creds) -> bool {
    creds.uid == 0 && !creds.anonymous
}

/// Refuses a read of `name` the kernel would refuse an unprivileged caller.
fn may_read(creds: &Creds, name: &[u8]) -> Result<(), NfsStatus> {
    match Privileged::of(name) {
        Some(Privileged::Trusted) if !privileged(creds) => Err(NfsStatus::NoXattr),
        _ => Ok(()),
    }
}

/// Of a `listxattr` buffer, the names LISTXATTR answers `creds`: those the kernel would list
/// for them, in the namespaces the protocol serves.
fn listed<'a>(list: &'a [u8], creds: &'a Creds) -> impl Iterator<Item = &'a [u8]> + 'a {
    list.split(|&b| b == 0).filter(|n| {
        protocol::xattr::name_is_valid(n) && name_is_served(n) && may_read(creds, n).is_ok()
    })
}

/// Whether LISTXATTR of entry `name` of the directory `dir` (not followed if it is a
/// symlink) would answer the calling thread's `creds` any name (for LISTDIR). Most objects
/// have none, which one question of size 0 tells; an error counts as "some", so the client
/// asks itself. Asked with `listxattrat` beside `dir`; on a kernel without it, by the entry's
/// path through `dir_path` (the directory's `/proc/self/fd/N/`).
pub(super) fn entry_lists_any_xattr(
    dir: BorrowedFd<'_>,
    dir_path: &str,
    name: &OsStr,
    creds: &Creds,
) -> bool {
    match listxattr_at(dir, name, &mut Vec::new()) {
        None => lists_any_xattr(dir_path, name, creds),
        Some(len) => any_listed(len, creds, |list| {
            listxattr_at(dir, name, list).unwrap_or_else(|| Err(io::ErrorKind::Unsupported.into()))
        }),
    }
}

/// [`entry_lists_any_xattr`] by the entry's path below `dir_path`, with `llistxattr`.
fn lists_any_xattr(dir_path: &str, name: &OsStr, creds: &Creds) -> bool {
    let mut path = Vec::with_capacity(dir_path.len() + name.len());
    path.extend_from_slice(dir_path.as_bytes());
    path.extend_from_slice(name.as_bytes());
    let path = OsStr::from_bytes(&path);
    let len = rustix::fs::llistxattr_query(path).map_err(io::Error::from);
    any_listed(len, creds, |list| {
        rustix::fs::llistxattr(path, spare_capacity(list)).map_err(io::Error::from)
    })
}

/// Given what a list query of size 0 answered (the list's length), and `read`, which reads
/// the list into an empty buffer: whether it holds a name LISTXATTR would answer `creds`.
/// An error counts as "some", so the client asks itself.
fn any_listed(
    len: io::Result<usize>,
    creds: &Creds,
    read: impl FnOnce(&mut Vec<u8>) -> io::Result<usize>,
) -> bool {
    match len {
        Ok(0) => false,
        Ok(_) => {
            let mut list = Vec::with_capacity(MAX_LIST_LEN);
            match read(&mut list) {
                Ok(_) => listed(&list, creds).next().is_some(),
                Err(_) => true,
            }
        }
        Err(_) => true,
    }
}

/// Refuses a change of `name` the kernel would refuse an unprivileged caller.
fn may_change(creds: &Creds, name: &[u8]) -> Result<(), NfsStatus> {
    match Privileged::of(name) {
        Some(_) if !privileged(creds) => Err(NfsStatus::Perm),
        _ => Ok(()),
    }
}

impl LocalFs {
    pub(super) fn getxattr(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        name: &[u8],
    ) -> Result<ReplyBody, NfsStatus> {
        let name = served(name)?;
        let o = self.obj(&fh, &ctx.creds)?;
        may_read(&ctx.creds, name.as_bytes())?;
        let mut value = Vec::with_capacity(MAX_VALUE_LEN);
        rustix::fs::getxattr(o.proc_path(), name, spare_capacity(&mut value))
            .map_err(xattr_errno)?;
        Ok(ReplyBody::GetXattr { value })
    }

    pub(super) fn setxattr(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        name: &[u8],
        value: &[u8],
        flags: u32,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let name = served(name)?;
        let o = self.obj(&fh, &ctx.creds)?;
        may_change(&ctx.creds, name.as_bytes())?;
        // The protocol's flags are Linux's (`XATTR_CREATE`, `XATTR_REPLACE`), checked when
        // the request was decoded.
        let flags = XattrFlags::from_bits_retain(flags);
        rustix::fs::setxattr(o.proc_path(), name, value, flags).map_err(xattr_errno)?;
        Ok(ReplyBody::SetXattr {
            attr: self.xattr_changed(ctx, &o, fh, out),
        })
    }

    /// LISTXATTR: the names the kernel lists for the caller (`trusted.` only to a mapped
    /// root), less those outside the served namespaces, which a client could not get.
    pub(super) fn listxattr(&self, ctx: &OpCtx, fh: FileHandle) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        let mut list = Vec::with_capacity(MAX_LIST_LEN);
        rustix::fs::listxattr(o.proc_path(), spare_capacity(&mut list)).map_err(xattr_errno)?;
        let names = listed(&list, &ctx.creds).map(<[u8]>::to_vec).collect();
        Ok(ReplyBody::ListXattr { names })
    }

    pub(super) fn removexattr(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        name: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let name = served(name)?;
        let o = self.obj(&fh, &ctx.creds)?;
        may_change(&ctx.creds, name.as_bytes())?;
        rustix::fs::removexattr(o.proc_path(), name).map_err(xattr_errno)?;
        Ok(ReplyBody::RemoveXattr {
            attr: self.xattr_changed(ctx, &o, fh, out),
        })
    }

    /// Records the change of `o` (its ctime moved; an ACL changes its mode bits too) for the
    /// caller's lease and other holders' invalidation; its new attributes.
    fn xattr_changed(
        &self,
        ctx: &OpCtx,
        o: &Obj,
        fh: FileHandle,
        out: &mut Outcome,
    ) -> Option<protocol::Attr> {
        let a = o.fresh_attr(ctx.lease_ms);
        out.leased.push((o.key, fh));
        out.changed.push((o.key, fh, a));
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn creds(uid: u32) -> Creds {
        Creds {
            name: "u".into(),
            uid,
            gids: vec![uid],
            anonymous: false,
        }
    }

    #[test]
    fn unprivileged_callers_get_the_kernels_unprivileged_answers() {
        let (alice, root) = (creds(1000), creds(0));
        assert_eq!(may_read(&alice, b"trusted.t"), Err(NfsStatus::NoXattr));
        assert_eq!(may_change(&alice, b"trusted.t"), Err(NfsStatus::Perm));
        assert_eq!(may_read(&alice, b"security.selinux"), Ok(()));
        assert_eq!(
            may_change(&alice, b"security.capability"),
            Err(NfsStatus::Perm)
        );
        for name in [&b"user.k"[..], b"system.posix_acl_access"] {
            assert_eq!(may_read(&alice, name), Ok(()));
            assert_eq!(may_change(&alice, name), Ok(()));
        }
        for name in [&b"trusted.t"[..], b"security.capability", b"user.k"] {
            assert_eq!(may_read(&root, name), Ok(()));
            assert_eq!(may_change(&root, name), Ok(()));
        }
        let anonymous_root = Creds {
            anonymous: true,
            ..creds(0)
        };
        assert_eq!(
            may_change(&anonymous_root, b"trusted.t"),
            Err(NfsStatus::Perm)
        );
    }

    /// LISTDIR's question gets the same answer by `listxattrat` and by the `/proc` path older
    /// kernels take (run here directly, since this kernel has the call): an entry without
    /// attributes, one with a `user.` attribute, one with only a `trusted.` attribute (listed
    /// to root, hidden from others), and a missing one (an error: "ask yourself").
    #[test]
    fn both_ways_of_asking_an_entry_agree() {
        use std::os::fd::AsFd;
        let dir = tempfile::tempdir().unwrap();
        let flags = XattrFlags::empty();
        std::fs::write(dir.path().join("plain"), b"x").unwrap();
        std::fs::write(dir.path().join("user"), b"x").unwrap();
        std::fs::write(dir.path().join("trusted"), b"x").unwrap();
        if rustix::fs::setxattr(dir.path().join("user"), "user.k", b"v", flags).is_err()
            || rustix::fs::setxattr(dir.path().join("trusted"), "trusted.k", b"v", flags).is_err()
        {
            eprintln!(
                "SKIPPED: needs user. and trusted. attributes (root, a file system keeping them)"
            );
            return;
        }
        let d = std::fs::File::open(dir.path()).unwrap();
        let dir_path = format!("/proc/self/fd/{}/", std::os::fd::AsRawFd::as_raw_fd(&d));
        let (alice, root) = (creds(1000), creds(0));
        for (name, who, want) in [
            ("plain", &alice, false),
            ("user", &alice, true),
            ("trusted", &alice, false),
            ("trusted", &root, true),
            ("missing", &alice, true),
        ] {
            let name = OsStr::new(name);
            let at = entry_lists_any_xattr(d.as_fd(), &dir_path, name, who);
            let by_path = lists_any_xattr(&dir_path, name, who);
            assert_eq!((at, by_path), (want, want), "{name:?} for uid {}", who.uid);
        }
    }
}
