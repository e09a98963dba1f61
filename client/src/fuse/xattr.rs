//! Extended attributes and POSIX ACLs through the mount: the kernel's GETXATTR, LISTXATTR,
//! SETXATTR and REMOVEXATTR become the protocol's, answered with the kernel's conventions.
//!
//! - **Size probes.** The kernel asks with `size` 0 to learn the length (`getxattr(2)` with
//!   an empty buffer), else with its buffer's size: a longer value or list is `ERANGE`. The
//!   server always sends the whole value (at most 64 KiB, bounded by the decoder before any
//!   allocation), so the probe and the read are each one round trip.
//! - **Errors.** A missing attribute is `ENODATA`, a namespace the server does not serve
//!   `EOPNOTSUPP` (never `ENOSYS`: the kernel would take that as "no extended attributes on
//!   this whole mount" and stop asking for every file).
//! - **ACLs.** `system.posix_acl_*` travel as attributes, and the server's kernel enforces
//!   them. A multi-user mount negotiates `FUSE_POSIX_ACL` (fuse/kernel.rs), so its kernel,
//!   which checks each caller itself there, evaluates and keeps them too; a single-user mount
//!   does not, and leaves every check to the server.
//! - **Security labels stay on the server's host.** `security.selinux`, Smack's and
//!   AppArmor's labels ([`host_label`]) are the server host's access-control policy, which
//!   means nothing to this host's (as with NFS without labeled NFS, or sshfs): through the
//!   mount they are `EOPNOTSUPP` and left out of lists. A client host that runs SELinux never
//!   asks the mount (its kernel labels the mount itself); one that does not is `ls -l`, which
//!   asks `security.selinux` of every file and, told `EOPNOTSUPP`, stops asking for the
//!   whole mount: a request to the mount per file less. Nor does root's `cp -a` or
//!   `tar --xattrs` off the mount stamp the server host's labels on this host's files.

use fuser::{Errno, INodeNo, ReplyXattr};
use protocol::xattr::{self, MAX_LIST_LEN, MAX_VALUE_LEN};

use super::{ServerMount, errno};
use crate::session::Client;
use tokio::runtime::Handle;

impl ServerMount {
    pub(super) async fn getxattr(
        &self,
        c: &Client,
        ino: INodeNo,
        name_: &[u8],
        size: u32,
    ) -> Result<Sized, Errno> {
        let name = name(name_)?;
        let fh = self.fh(ino)?;
        self.xattr_ahead.before_ask(c, &fh, Some(name)).await;
        value(c.getxattr(&fh, name).await.map_err(errno)?, size)
    }

    /// A GETXATTR answered on the kernel's thread, from the cache, when the answer is there
    /// (None: ask on the runtime). `ls -l` asks two names of every file one after the other,
    /// and the read-ahead has most answers in the cache by then: a task per answer would cost
    /// more than the lookup (measured: about half the time of a cached `ls -l`). The
    /// read-ahead is told, so a walk the cache serves keeps reading ahead.
    pub(super) fn getxattr_now(
        &self,
        c: &Client,
        ino: INodeNo,
        name_: &[u8],
        size: u32,
        rt: &Handle,
    ) -> Option<Result<Sized, Errno>> {
        let name = match name(name_) {
            Ok(name) => name,
            Err(e) => return Some(Err(e)),
        };
        let fh = self.fh(ino).ok()?;
        let (authno, answer) = c.getxattr_cached(&fh, name)?;
        self.xattr_ahead.answered(c, authno, &fh, Some(name), rt);
        Some(answer.map_err(errno).and_then(|v| value(v, size)))
    }

    /// [`ServerMount::getxattr_now`] for LISTXATTR (newer coreutils' `ls -l` asks it first).
    pub(super) fn listxattr_now(
        &self,
        c: &Client,
        ino: INodeNo,
        size: u32,
        rt: &Handle,
    ) -> Option<Result<Sized, Errno>> {
        let fh = self.fh(ino).ok()?;
        let (authno, names) = c.listxattr_cached(&fh)?;
        self.xattr_ahead.answered(c, authno, &fh, None, rt);
        Some(list(&names, size))
    }

    pub(super) async fn listxattr(
        &self,
        c: &Client,
        ino: INodeNo,
        size: u32,
    ) -> Result<Sized, Errno> {
        let fh = self.fh(ino)?;
        self.xattr_ahead.before_ask(c, &fh, None).await;
        list(&c.listxattr(&fh).await.map_err(errno)?, size)
    }

    pub(super) async fn setxattr(
        &self,
        c: &Client,
        ino: INodeNo,
        name_: &[u8],
        value: &[u8],
        flags: i32,
    ) -> Result<(), Errno> {
        let name = name(name_)?;
        let flags = set_flags(flags)?;
        check_value(value)?;
        let fh = self.fh(ino)?;
        c.setxattr(&fh, name, value, flags).await.map_err(errno)
    }

    pub(super) async fn removexattr(
        &self,
        c: &Client,
        ino: INodeNo,
        name_: &[u8],
    ) -> Result<(), Errno> {
        let name = name(name_)?;
        let fh = self.fh(ino)?;
        c.removexattr(&fh, name).await.map_err(errno)
    }
}

/// Hands `answer` to the kernel.
pub(crate) fn reply_sized(answer: Result<Sized, Errno>, reply: ReplyXattr) {
    match answer {
        Ok(Sized::Len(n)) => reply.size(n),
        Ok(Sized::Data(d)) => reply.data(&d),
        Err(e) => reply.error(e),
    }
}

/// What a GETXATTR or LISTXATTR answers the kernel: the length it asked for, or the bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sized {
    /// `size` was 0: only the length.
    Len(u32),
    /// The bytes, which fit the kernel's buffer.
    Data(Vec<u8>),
}

/// The answer to a request with buffer `size` for `bytes` (a value, or a list in
/// `listxattr(2)`'s form): its length for a probe, `ERANGE` when the buffer is smaller, and
/// `E2BIG` beyond `max`, which only a hostile server could send (the decoder already refuses
/// that; checked again where the bytes go to the kernel).
pub(crate) fn sized(bytes: Vec<u8>, size: u32, max: usize) -> Result<Sized, Errno> {
    if bytes.len() > max {
        return Err(Errno::E2BIG);
    }
    let len = u32::try_from(bytes.len()).map_err(|_| Errno::E2BIG)?;
    if size == 0 {
        Ok(Sized::Len(len))
    } else if len > size {
        Err(Errno::ERANGE)
    } else {
        Ok(Sized::Data(bytes))
    }
}

/// A value for the kernel.
pub(crate) fn value(bytes: Vec<u8>, size: u32) -> Result<Sized, Errno> {
    sized(bytes, size, MAX_VALUE_LEN)
}

/// Names in `listxattr(2)`'s form (each followed by a NUL), for a buffer of `size`, without
/// the [`host_label`]s.
pub(crate) fn list(names: &[Vec<u8>], size: u32) -> Result<Sized, Errno> {
    let mut out = Vec::with_capacity(xattr::list_len(names).min(MAX_LIST_LEN + 1));
    for n in names {
        if !xattr::name_is_valid(n) {
            continue; // not from a decoded reply; never handed to the kernel
        }
        if host_label(n) {
            continue;
        }
        out.extend_from_slice(n);
        out.push(0);
        if out.len() > MAX_LIST_LEN {
            return Err(Errno::E2BIG);
        }
    }
    sized(out, size, MAX_LIST_LEN)
}

/// A name from the kernel, checked as the server will check it (the kernel already refuses
/// longer ones with `ERANGE`); a [`host_label`] is `EOPNOTSUPP`, never asked of the server.
pub(crate) fn name(name: &[u8]) -> Result<&[u8], Errno> {
    if name.len() > xattr::MAX_NAME_LEN {
        Err(Errno::ERANGE)
    } else if !xattr::name_is_valid(name) {
        Err(Errno::EINVAL)
    } else if host_label(name) {
        Err(Errno::EOPNOTSUPP)
    } else {
        Ok(name)
    }
}

/// A mandatory-access-control label (SELinux, Smack, AppArmor): the server host's policy's,
/// which this mount does not carry (module documentation). `security.capability` and the
/// other `security.` names are not labels and do travel.
pub(crate) fn host_label(name: &[u8]) -> bool {
    name == b"security.selinux"
        || name == b"security.apparmor"
        || name.starts_with(b"security.SMACK64")
}

/// `setxattr(2)`'s flags as the protocol's (the same bits); any other bit is `EINVAL`, as the
/// kernel answers it.
pub(crate) fn set_flags(flags: i32) -> Result<u32, Errno> {
    u32::try_from(flags)
        .ok()
        .filter(|f| f & !xattr::flags::ALL == 0)
        .ok_or(Errno::EINVAL)
}

/// A value from the kernel (which refuses larger ones itself): `E2BIG` beyond the bound.
pub(crate) fn check_value(value: &[u8]) -> Result<(), Errno> {
    if value.len() > MAX_VALUE_LEN {
        Err(Errno::E2BIG)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_get_the_length_and_small_buffers_erange() {
        assert_eq!(value(b"abc".to_vec(), 0), Ok(Sized::Len(3)));
        assert_eq!(value(b"abc".to_vec(), 3), Ok(Sized::Data(b"abc".to_vec())));
        assert_eq!(value(b"abc".to_vec(), 2), Err(Errno::ERANGE));
        assert_eq!(value(vec![0; MAX_VALUE_LEN + 1], 0), Err(Errno::E2BIG));
        let names = vec![b"user.a".to_vec(), b"user.bc".to_vec()];
        assert_eq!(list(&names, 0), Ok(Sized::Len(15)));
        assert_eq!(
            list(&names, 100),
            Ok(Sized::Data(b"user.a\0user.bc\0".to_vec()))
        );
        assert_eq!(list(&names, 14), Err(Errno::ERANGE));
        assert_eq!(list(&[], 0), Ok(Sized::Len(0)));
        let too_many = vec![vec![b'n'; 255]; 300];
        assert_eq!(list(&too_many, 0), Err(Errno::E2BIG));
    }

    #[test]
    fn flags_and_names_are_checked() {
        assert_eq!(set_flags(0), Ok(0));
        assert_eq!(set_flags(libc::XATTR_CREATE), Ok(xattr::flags::CREATE));
        assert_eq!(set_flags(libc::XATTR_REPLACE), Ok(xattr::flags::REPLACE));
        assert_eq!(set_flags(4), Err(Errno::EINVAL));
        assert_eq!(set_flags(-1), Err(Errno::EINVAL));
        assert_eq!(name(&[b'a'; 256]), Err(Errno::ERANGE));
        assert_eq!(name(b""), Err(Errno::EINVAL));
        assert_eq!(name(b"user.k"), Ok(&b"user.k"[..]));
    }

    #[test]
    fn bounds_hold_at_their_edges() {
        let longest = |i: usize| {
            let mut n = format!("user.{i:03}").into_bytes();
            n.resize(xattr::MAX_NAME_LEN, b'x');
            n
        };
        assert_eq!(name(&longest(0)), Ok(&longest(0)[..]));
        // 256 names of 255 bytes and their NULs: exactly the kernel's 64 KiB list.
        let mut names: Vec<Vec<u8>> = (0..256).map(longest).collect();
        assert_eq!(list(&names, 0), Ok(Sized::Len(MAX_LIST_LEN as u32)));
        names.push(b"user.a".to_vec());
        assert_eq!(list(&names, 0), Err(Errno::E2BIG));
    }

    #[test]
    fn host_labels_are_not_supported_and_not_listed() {
        for label in [
            &b"security.selinux"[..],
            b"security.apparmor",
            b"security.SMACK64",
            b"security.SMACK64EXEC",
        ] {
            assert_eq!(name(label), Err(Errno::EOPNOTSUPP));
        }
        for carried in [
            &b"security.capability"[..],
            b"security.selinuxx",
            b"security.ima",
            b"system.posix_acl_access",
            b"user.selinux",
        ] {
            assert_eq!(name(carried), Ok(carried));
        }
        let names = vec![
            b"security.selinux".to_vec(),
            b"user.a".to_vec(),
            b"security.SMACK64".to_vec(),
            b"security.capability".to_vec(),
        ];
        assert_eq!(
            list(&names, 100),
            Ok(Sized::Data(b"user.a\0security.capability\0".to_vec()))
        );
        assert_eq!(list(&names, 0), Ok(Sized::Len(27)));
    }
}
