//! Extended attributes (GETXATTR, SETXATTR, LISTXATTR, REMOVEXATTR): their bounds, flags,
//! and which names a server serves.
//!
//! The bounds are Linux's (`XATTR_NAME_MAX`, `XATTR_SIZE_MAX`, `XATTR_LIST_MAX`), so anything
//! a Linux program may store fits, and a decoder refuses a longer name, value or list before
//! allocating anything for it: one request or reply holds at most about 64 KiB of them.

use crate::error::DecodeError;
use crate::xdr::{self, Reader};

/// Longest attribute name, in bytes, namespace prefix included (`XATTR_NAME_MAX`).
pub const MAX_NAME_LEN: usize = 255;
/// Largest attribute value, in bytes (`XATTR_SIZE_MAX`).
pub const MAX_VALUE_LEN: usize = 65536;
/// Largest list of names, in bytes, each counted with its terminating NUL as `listxattr(2)`
/// returns them (`XATTR_LIST_MAX`).
pub const MAX_LIST_LEN: usize = 65536;

/// SETXATTR flags (the values of Linux's `setxattr(2)` flags, so a server passes them on).
pub mod flags {
    /// Fail with `Exist` if the attribute exists (`XATTR_CREATE`).
    pub const CREATE: u32 = 0x1;
    /// Fail with `NoXattr` if the attribute does not exist (`XATTR_REPLACE`).
    pub const REPLACE: u32 = 0x2;
    /// Every flag this protocol version defines; a request with any other bit does not decode.
    pub const ALL: u32 = CREATE | REPLACE;
}

/// The namespaces a server serves: user data (`user.`), the superuser's (`trusted.`), security
/// labels and capabilities (`security.`), and POSIX ACLs. Others (`system.` names a file
/// system invents, `system.nfs4_acl`, ...) are answered `NotSupp`, as a file system without
/// them does; a name that fits no namespace is answered so by the kernel too.
pub fn name_is_served(name: &[u8]) -> bool {
    const PREFIXES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];
    const EXACT: [&[u8]; 2] = [b"system.posix_acl_access", b"system.posix_acl_default"];
    PREFIXES
        .iter()
        .any(|p| name.len() > p.len() && name.starts_with(p))
        || EXACT.contains(&name)
}

/// Whether `name` can be an attribute name at all: not empty, no NUL (the kernel's interface
/// is NUL-terminated strings), at most [`MAX_NAME_LEN`] bytes.
pub fn name_is_valid(name: &[u8]) -> bool {
    !name.is_empty() && name.len() <= MAX_NAME_LEN && !name.contains(&0)
}

/// Reads an attribute name, refusing an invalid one ([`name_is_valid`]).
pub(crate) fn get_name(r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    let name = r.opaque(MAX_NAME_LEN, "xattr name")?;
    if !name_is_valid(name) {
        return Err(DecodeError::BadXattrName);
    }
    Ok(name.to_vec())
}

/// Reads an attribute value (at most [`MAX_VALUE_LEN`] bytes, checked before allocating).
pub(crate) fn get_value(r: &mut Reader<'_>) -> Result<Vec<u8>, DecodeError> {
    r.opaque_vec(MAX_VALUE_LEN, "xattr value")
}

/// Bytes `names` take in `listxattr(2)`'s form (each name and its NUL).
pub fn list_len(names: &[Vec<u8>]) -> usize {
    names.iter().map(|n| n.len() + 1).sum()
}

/// Writes a list of names.
pub(crate) fn put_names(buf: &mut Vec<u8>, names: &[Vec<u8>]) {
    xdr::put_count(buf, names.len());
    for n in names {
        xdr::put_opaque(buf, n);
    }
}

/// Reads a list of names: each valid, and all of them within [`MAX_LIST_LEN`].
pub(crate) fn get_names(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DecodeError> {
    // Each name takes at least 8 bytes (its length and one padded byte), and at least 2 bytes
    // of the list, so the count is bounded twice before anything is allocated.
    let n = r.count(8, "xattr names")?;
    if n > MAX_LIST_LEN / 2 {
        return Err(DecodeError::LimitExceeded {
            what: "xattr names",
            len: n as u64,
            max: (MAX_LIST_LEN / 2) as u64,
        });
    }
    let mut names = Vec::with_capacity(n);
    let mut total = 0usize;
    for _ in 0..n {
        let name = get_name(r)?;
        total += name.len() + 1;
        if total > MAX_LIST_LEN {
            return Err(DecodeError::LimitExceeded {
                what: "xattr list",
                len: total as u64,
                max: MAX_LIST_LEN as u64,
            });
        }
        names.push(name);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn served_namespaces() {
        for ok in [
            &b"user.k"[..],
            b"trusted.overlay.opaque",
            b"security.selinux",
            b"system.posix_acl_access",
            b"system.posix_acl_default",
        ] {
            assert!(name_is_served(ok), "{}", String::from_utf8_lossy(ok));
        }
        for no in [
            &b"user."[..],
            b"system.nfs4_acl",
            b"system.posix_acl_accessx",
            b"os2.k",
            b"k",
        ] {
            assert!(!name_is_served(no), "{}", String::from_utf8_lossy(no));
        }
    }

    #[test]
    fn valid_names() {
        assert!(name_is_valid(b"user.k"));
        assert!(!name_is_valid(b""));
        assert!(!name_is_valid(b"user.\0k"));
        assert!(name_is_valid(&[b'a'; MAX_NAME_LEN]));
        assert!(!name_is_valid(&[b'a'; MAX_NAME_LEN + 1]));
    }
}
