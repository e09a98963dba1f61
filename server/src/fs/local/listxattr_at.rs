//! `listxattrat(2)` (Linux 6.13): the extended-attribute names of one entry of a directory,
//! looked up as one component beside the directory's descriptor, not followed if it is a
//! symlink.
//!
//! LISTDIR says which of its entries have extended attributes (`readdir.rs`), one question
//! per entry. Asked as `llistxattr("/proc/self/fd/N/name")`, each question walked procfs
//! (`self`, `fd`, `N`, each with its own revalidation) before reaching the entry: 12% of sfsd's
//! CPU in a cold `find` of a header tree, against under 1% for the listing itself. Neither
//! rustix nor libc wraps the call yet, so it is made here; on an older kernel (`ENOSYS`,
//! remembered) the caller goes back to the `/proc` path.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::sync::atomic::{AtomicBool, Ordering};

/// Its number in the table every architecture shares for system calls added since Linux 5.1.
const SYS_LISTXATTRAT: libc::c_long = 465;

/// Set once the kernel has answered `ENOSYS`: it has no `listxattrat`, ask no more.
static MISSING: AtomicBool = AtomicBool::new(false);

/// The names of entry `name` of `dir` in `listxattr(2)`'s form, into `list`'s spare capacity
/// (`list` must be empty; with no capacity, only their length is asked). `None` when this
/// kernel has no `listxattrat`.
pub(super) fn listxattr_at(
    dir: BorrowedFd<'_>,
    name: &OsStr,
    list: &mut Vec<u8>,
) -> Option<io::Result<usize>> {
    if MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let Ok(name) = CString::new(name.as_bytes()) else {
        return Some(Err(io::Error::from_raw_os_error(libc::EINVAL)));
    };
    debug_assert!(list.is_empty());
    let (buf, size) = if list.capacity() == 0 {
        (std::ptr::null_mut(), 0)
    } else {
        (list.as_mut_ptr(), list.capacity())
    };
    // SAFETY: `name` is NUL-terminated and lives across the call; the kernel writes at most
    // `size` bytes at `buf`, which is either null with size 0 (a length query, nothing
    // written) or `list`'s allocation of `capacity()` bytes; the descriptor is borrowed, so
    // open for the call.
    let r = unsafe {
        libc::syscall(
            SYS_LISTXATTRAT,
            dir.as_raw_fd() as libc::c_long,
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW as libc::c_long,
            buf,
            size,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::ENOSYS) {
            MISSING.store(true, Ordering::Relaxed);
            return None;
        }
        return Some(Err(e));
    }
    let len = usize::try_from(r).unwrap_or(0);
    if size > 0 {
        // SAFETY: the kernel initialised the first `len` bytes (its return value, never more
        // than `size`, the capacity; bounded again in case).
        unsafe { list.set_len(len.min(size)) };
    }
    Some(Ok(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::File;
    use std::os::fd::AsFd;

    fn names(list: &[u8]) -> Vec<&[u8]> {
        let mut n: Vec<&[u8]> = list.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
        n.sort();
        n
    }

    /// The answers are `llistxattr`'s for the same entries: names and lengths, nothing for a
    /// file without any, a symlink's own (not its target's), `ENOENT` for a missing name.
    #[test]
    fn answers_as_llistxattr_does() {
        let dir = tempfile::tempdir().unwrap();
        let tagged = dir.path().join("tagged");
        std::fs::write(&tagged, b"x").unwrap();
        std::fs::write(dir.path().join("plain"), b"x").unwrap();
        std::os::unix::fs::symlink("tagged", dir.path().join("link")).unwrap();
        let flags = rustix::fs::XattrFlags::empty();
        if rustix::fs::setxattr(&tagged, "user.a", b"1", flags).is_err() {
            eprintln!("SKIPPED: the temporary directory keeps no user. attributes");
            return;
        }
        rustix::fs::setxattr(&tagged, "user.bb", b"2", flags).unwrap();
        let d = File::open(dir.path()).unwrap();
        let at = |name: &str, cap: usize| {
            let mut list = Vec::with_capacity(cap);
            listxattr_at(d.as_fd(), OsStr::new(name), &mut list).map(|r| r.map(|n| (n, list)))
        };
        let Some(query) = at("tagged", 0) else {
            eprintln!("SKIPPED: this kernel has no listxattrat");
            return;
        };
        let want = rustix::fs::llistxattr_query(&tagged).unwrap();
        assert_eq!(query.unwrap().0, want);
        let (len, list) = at("tagged", 4096).unwrap().unwrap();
        assert_eq!(len, want);
        let mut theirs = vec![0; 4096];
        let n = rustix::fs::llistxattr(&tagged, &mut theirs[..]).unwrap();
        assert_eq!(names(&list), names(&theirs[..n]));
        assert!(names(&list).contains(&&b"user.bb"[..]));
        // (On a host that labels files, these have a label: compared, not assumed empty.)
        for other in ["plain", "link"] {
            let want = rustix::fs::llistxattr_query(dir.path().join(other)).unwrap();
            assert_eq!(at(other, 0).unwrap().unwrap().0, want, "{other}");
        }
        assert!(
            at("link", 0).unwrap().unwrap().0 < len,
            "the link's target was listed"
        );
        let missing = at("missing", 0).unwrap().unwrap_err();
        assert_eq!(missing.raw_os_error(), Some(libc::ENOENT));
        let small = at("tagged", 3).unwrap().unwrap_err();
        assert_eq!(small.raw_os_error(), Some(libc::ERANGE));
    }
}
