//! Opening files beneath the served root, so that no path and no symlink reaches outside it.
//!
//! The parser already refuses `..`; this is the second wall, against symlinks inside the root
//! that point out of it. Files are opened relative to a descriptor of the root with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)` (Linux 5.6+): the kernel refuses any
//! resolution that leaves the root, while symlinks that stay inside still work. Where
//! `openat2` is missing (ENOSYS, or seccomp's EPERM) every component is opened with
//! `O_NOFOLLOW` instead, which refuses all symlinks.

use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags, ResolveFlags};

/// A directory served at `/`.
pub struct Root {
    dir: OwnedFd,
    /// Cleared the first time `openat2` turns out not to exist.
    openat2: AtomicBool,
}

impl Root {
    pub fn open(path: &Path) -> io::Result<Root> {
        let dir = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Root {
            dir,
            openat2: AtomicBool::new(true),
        })
    }

    /// Opens `rel` (a path from [`crate::parser::normalise_target`]) for reading, beneath
    /// the root. Escapes fail (EXDEV or ELOOP), as do missing files.
    pub fn open_file(&self, rel: &str) -> io::Result<File> {
        let rel = if rel.is_empty() { "." } else { rel };
        let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        if self.openat2.load(Ordering::Relaxed) {
            match rustix::fs::openat2(
                &self.dir,
                rel,
                flags,
                Mode::empty(),
                ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            ) {
                Ok(fd) => return Ok(File::from(fd)),
                Err(e) if e == rustix::io::Errno::NOSYS || e == rustix::io::Errno::PERM => {
                    self.openat2.store(false, Ordering::Relaxed);
                }
                Err(e) => return Err(e.into()),
            }
        }
        self.open_nofollow(rel, flags)
    }

    /// The fallback: one `openat(O_NOFOLLOW)` per component.
    fn open_nofollow(&self, rel: &str, flags: OFlags) -> io::Result<File> {
        let parts: Vec<&str> = rel.split('/').collect();
        let (last, dirs) = parts.split_last().unwrap_or((&".", &[]));
        let mut held: Option<OwnedFd> = None;
        for part in dirs {
            let at = held.as_ref().unwrap_or(&self.dir);
            let next = rustix::fs::openat(
                at,
                *part,
                OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::empty(),
            )?;
            held = Some(next);
        }
        let at = held.as_ref().unwrap_or(&self.dir);
        Ok(File::from(rustix::fs::openat(
            at,
            *last,
            flags | OFlags::NOFOLLOW,
            Mode::empty(),
        )?))
    }

    #[cfg(test)]
    fn without_openat2(self) -> Root {
        self.openat2.store(false, Ordering::Relaxed);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> (tempfile::TempDir, tempfile::TempDir) {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "secret").unwrap();
        std::fs::create_dir(root.path().join("d")).unwrap();
        std::fs::write(root.path().join("d/f"), "inside").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.path().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("outdir")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.path().join("abs")).unwrap();
        (root, outside)
    }

    #[test]
    fn files_inside_open_and_symlinks_out_do_not() {
        let (root, _outside) = tree();
        for r in [
            Root::open(root.path()).unwrap(),
            Root::open(root.path()).unwrap().without_openat2(),
        ] {
            let mut s = String::new();
            io::Read::read_to_string(&mut r.open_file("d/f").unwrap(), &mut s).unwrap();
            assert_eq!(s, "inside");
            for escape in ["out", "outdir/secret", "abs", "missing"] {
                assert!(r.open_file(escape).is_err(), "{escape} opened");
            }
        }
    }
}
