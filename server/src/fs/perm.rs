//! Unix permission checks with the mapped user's credentials (not the server's).

use protocol::{Attr, FileType, access};

use crate::users::Creds;

pub const R: u32 = 4;
pub const W: u32 = 2;
pub const X: u32 = 1;

/// Whether `c` has all of `want` (R/W/X bits) on an object with attributes `a`, by the
/// owner/group/other mode bits. uid 0 (a user explicitly mapped to root) bypasses read/write
/// checks as the kernel does, and needs some x bit to execute a non-directory.
pub fn may(a: &Attr, c: &Creds, want: u32) -> bool {
    if c.anonymous && want & W != 0 {
        return false;
    }
    if c.uid == 0 && !c.anonymous {
        return want & X == 0 || a.ftype == FileType::Directory || a.mode & 0o111 != 0;
    }
    let bits = if a.uid == c.uid {
        (a.mode >> 6) & 7
    } else if c.in_group(a.gid) {
        (a.mode >> 3) & 7
    } else {
        a.mode & 7
    };
    bits & want == want
}

/// Whether `c` owns the object (or is root): needed for chmod, utimes to arbitrary values.
pub fn owns(a: &Attr, c: &Creds) -> bool {
    !c.anonymous && (c.uid == 0 || a.uid == c.uid)
}

/// Sticky directories: only the owner of the entry, of the directory or root may remove or
/// rename it.
pub fn may_delete_in(dir: &Attr, victim: &Attr, c: &Creds) -> bool {
    dir.mode & 0o1000 == 0 || owns(victim, c) || owns(dir, c)
}

/// The ACCESS bits granted out of `asked`.
pub fn access_bits(a: &Attr, c: &Creds, asked: u32, read_only: bool) -> u32 {
    let is_dir = a.ftype == FileType::Directory;
    let mut granted = 0;
    if may(a, c, R) {
        granted |= access::READ;
    }
    if is_dir && may(a, c, X) {
        granted |= access::LOOKUP;
    }
    if !is_dir && may(a, c, X) {
        granted |= access::EXECUTE;
    }
    if !read_only && may(a, c, W) {
        granted |= access::MODIFY | access::EXTEND;
        if is_dir {
            granted |= access::DELETE;
        }
    }
    granted & asked
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mode: u32, uid: u32, gid: u32) -> Attr {
        let t = protocol::Time {
            seconds: 0,
            nanos: 0,
        };
        Attr {
            ftype: FileType::Regular,
            mode,
            nlink: 1,
            uid,
            gid,
            size: 0,
            used: 0,
            rdev: (0, 0),
            fsid: 0,
            fileid: 1,
            atime: t,
            mtime: t,
            ctime: t,
            lease_ms: 0,
        }
    }

    fn creds(uid: u32, gids: &[u32]) -> Creds {
        Creds {
            name: "t".into(),
            uid,
            gids: gids.to_vec(),
            anonymous: false,
        }
    }

    #[test]
    fn owner_group_other() {
        let a = attr(0o640, 1000, 100);
        assert!(may(&a, &creds(1000, &[1]), R | W));
        assert!(may(&a, &creds(2000, &[100]), R));
        assert!(!may(&a, &creds(2000, &[100]), W));
        assert!(!may(&a, &creds(2000, &[200]), R));
        // The owner class applies even when it grants less than the group.
        let b = attr(0o070, 1000, 100);
        assert!(!may(&b, &creds(1000, &[100]), R));
        assert!(!may(&attr(0o777, 1, 1), &Creds::anonymous(), W));
        assert!(may(&attr(0o604, 1, 1), &Creds::anonymous(), R));
    }
}
