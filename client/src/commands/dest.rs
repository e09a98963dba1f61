//! Where `sfs get` writes: every local file and directory it makes is created beneath a
//! directory descriptor, by one name at a time, never through a symbolic link.
//!
//! Any user can reach any server by its self-certifying name, so the server may be hostile:
//! it chooses the names in a tree and may list `..`, `a/b`, a name twice, or a symlink `d`
//! to somewhere else followed by a directory `d` whose files would then be written through
//! that link. And the destination may be in a sticky world-writable directory (`/tmp`) where
//! another local user planted a symlink named like the file being fetched, which the kernel
//! follows for us unless `fs.protected_symlinks` is set. So:
//!
//! - the destination's parent directory (which the user named) is opened once; from there on
//!   every path is one component, opened with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)` and `O_NOFOLLOW` relative to its directory's descriptor (plain
//!   `openat` with `O_NOFOLLOW` where the kernel has no `openat2`: for a single component
//!   that is not `..` it is the same check);
//! - a name that is not one component (empty, `.`, `..`, holding `/` or NUL) is refused
//!   ([`check_name`]), and so is a name listed twice in one directory (the caller keeps the
//!   names it made in each): the second could be written through the first;
//! - new files are created `O_EXCL`; an existing one is reused (truncated) only when it is a
//!   regular file, opened without following a link, as `cp` overwrites the file it is
//!   named, and not when another user owns it in a sticky world-writable directory (they
//!   could read what we write: `fs.protected_regular` refuses `cp` that, so we do always);
//!   a directory that exists is entered only when it is a directory, not a link;
//! - a server's symlink is made as a symlink ([`Dir::symlink`]) and never followed.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};

/// Why a name from the server is not used, or `None` when it is one path component.
pub(crate) fn check_name(name: &[u8]) -> Option<&'static str> {
    if name.is_empty() || name == b"." || name == b".." {
        Some("not a file name")
    } else if name.contains(&b'/') {
        Some("holds a '/'")
    } else if name.contains(&0) {
        Some("holds a NUL byte")
    } else {
        None
    }
}

/// A local directory files are made in, by descriptor.
pub(crate) struct Dir {
    fd: OwnedFd,
    /// Where it is, for messages.
    pub path: PathBuf,
    /// Sticky and writable by others (as `/tmp`): others may have made what is in it.
    shared: bool,
}

/// Whether a directory's mode is sticky and world-writable.
fn is_shared(fd: &OwnedFd) -> io::Result<bool> {
    let mode = rustix::fs::fstat(fd)?.st_mode;
    Ok(mode & 0o1002 == 0o1002)
}

/// Permission bits for new files and directories (the umask applies, as for `cp`).
const FILE_MODE: u32 = 0o666;
const DIR_MODE: u32 = 0o777;

impl Dir {
    /// The directory the user named, opened by path (following links in it: the user chose
    /// it). The empty path is the current directory (and names in it are shown bare).
    pub(crate) fn open_named(path: &Path) -> io::Result<Dir> {
        let open_as = if path.as_os_str().is_empty() {
            Path::new(".")
        } else {
            path
        };
        let fd = rustix::fs::open(
            open_as,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir {
            shared: is_shared(&fd)?,
            fd,
            path: path.to_path_buf(),
        })
    }

    /// Where `name` is, for messages.
    pub(crate) fn path_of(&self, name: &[u8]) -> PathBuf {
        self.path.join(OsStr::from_bytes(name))
    }

    /// Opens one component beneath this directory, never following a symlink.
    fn open_beneath(&self, name: &[u8], flags: OFlags, mode: u32) -> io::Result<OwnedFd> {
        let name = OsStr::from_bytes(name);
        let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let mode = Mode::from_raw_mode(mode);
        let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS;
        match rustix::fs::openat2(&self.fd, name, flags, mode, resolve) {
            // No openat2 (before Linux 5.6, or refused by an older container's seccomp
            // filter): for one component that is not `..` (check_name), O_NOFOLLOW alone
            // already keeps it beneath.
            Err(rustix::io::Errno::NOSYS | rustix::io::Errno::PERM) => {
                Ok(rustix::fs::openat(&self.fd, name, flags, mode)?)
            }
            r => Ok(r?),
        }
    }

    /// A regular file `name` to write from the start: a new one, or an existing regular
    /// file (not a link, not a FIFO or device) truncated.
    pub(crate) fn create_file(&self, name: &[u8]) -> io::Result<File> {
        self.create_or_open(name, false)
    }

    /// [`Dir::create_file`] for the name the user gave as the destination: an existing
    /// character device (`/dev/null`, a terminal) is written too, as `cp` would, since the
    /// user named it (a name from the server never comes here).
    pub(crate) fn create_named_file(&self, name: &[u8]) -> io::Result<File> {
        self.create_or_open(name, true)
    }

    fn create_or_open(&self, name: &[u8], device_ok: bool) -> io::Result<File> {
        let write = OFlags::WRONLY;
        let fd = match self.open_beneath(name, write | OFlags::CREATE | OFlags::EXCL, FILE_MODE) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                // NONBLOCK: opening a FIFO for writing would wait for a reader; NOCTTY: a
                // terminal does not become ours.
                let fd = self
                    .open_beneath(name, write | OFlags::NONBLOCK | OFlags::NOCTTY, 0)
                    .map_err(link_error)?;
                let st = rustix::fs::fstat(&fd)?;
                match FileType::from_raw_mode(st.st_mode) {
                    FileType::RegularFile => {}
                    FileType::CharacterDevice if device_ok => {
                        rustix::fs::fcntl_setfl(
                            &fd,
                            rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK,
                        )?;
                        return Ok(File::from(fd));
                    }
                    _ => return Err(io::Error::other("exists and is not a regular file")),
                }
                if self.shared && st.st_uid != rustix::process::geteuid().as_raw() {
                    return Err(io::Error::other(
                        "belongs to another user in a sticky directory; not overwritten",
                    ));
                }
                rustix::fs::fcntl_setfl(&fd, rustix::fs::fcntl_getfl(&fd)? - OFlags::NONBLOCK)?;
                rustix::fs::ftruncate(&fd, 0)?;
                fd
            }
            r => r.map_err(link_error)?,
        };
        Ok(File::from(fd))
    }

    /// The directory `name` beneath this one, made if it does not exist (an existing one
    /// is entered only if it is a directory, not a link to one).
    pub(crate) fn make_dir(&self, name: &[u8]) -> io::Result<Dir> {
        match rustix::fs::mkdirat(
            &self.fd,
            OsStr::from_bytes(name),
            Mode::from_raw_mode(DIR_MODE),
        ) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(e) => return Err(e.into()),
        }
        let fd = self
            .open_beneath(name, OFlags::RDONLY | OFlags::DIRECTORY, 0)
            .map_err(|e| match rustix::io::Errno::from_io_error(&e) {
                // O_DIRECTORY meets a link first: say so rather than "Not a directory".
                Some(rustix::io::Errno::NOTDIR) if self.is_symlink(name) => {
                    link_error(io::Error::from(rustix::io::Errno::LOOP))
                }
                _ => link_error(e),
            })?;
        Ok(Dir {
            shared: is_shared(&fd)?,
            fd,
            path: self.path_of(name),
        })
    }

    /// Whether `name` here is a symlink.
    fn is_symlink(&self, name: &[u8]) -> bool {
        rustix::fs::statat(&self.fd, OsStr::from_bytes(name), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
    }

    /// The symlink `name` to `target` (never followed). An existing symlink of that name is
    /// replaced, as a second copy into the same place replaces what the first made; anything
    /// else there is left alone and is an error.
    pub(crate) fn symlink(&self, name: &[u8], target: &[u8]) -> io::Result<()> {
        let (name, target) = (OsStr::from_bytes(name), OsStr::from_bytes(target));
        match rustix::fs::symlinkat(target, &self.fd, name) {
            Err(rustix::io::Errno::EXIST) => {
                let st = rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW)?;
                if FileType::from_raw_mode(st.st_mode) != FileType::Symlink {
                    return Err(io::Error::from(io::ErrorKind::AlreadyExists));
                }
                rustix::fs::unlinkat(&self.fd, name, AtFlags::empty())?;
                Ok(rustix::fs::symlinkat(target, &self.fd, name)?)
            }
            r => Ok(r?),
        }
    }
}

/// ELOOP (O_NOFOLLOW met a link) and EXDEV (RESOLVE_BENEATH) as the user reads them.
fn link_error(e: io::Error) -> io::Error {
    match rustix::io::Errno::from_io_error(&e) {
        Some(rustix::io::Errno::LOOP) | Some(rustix::io::Errno::XDEV) => {
            io::Error::other("is a symbolic link (not followed)")
        }
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_single_components_are_names() {
        for bad in [&b""[..], b".", b"..", b"../x", b"a/b", b"/", b"a\0b"] {
            assert!(check_name(bad).is_some(), "{bad:?}");
        }
        for good in [&b"a"[..], b"...", b".hidden", b"a b", b"\xff"] {
            assert_eq!(check_name(good), None, "{good:?}");
        }
    }

    #[test]
    fn existing_links_are_never_followed_and_files_are_reused() {
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, b"keep").unwrap();
        let d = tmp.path().join("d");
        std::fs::create_dir(&d).unwrap();
        std::os::unix::fs::symlink(&outside, d.join("l")).unwrap();
        std::os::unix::fs::symlink(tmp.path(), d.join("ld")).unwrap();
        std::fs::write(d.join("f"), b"old contents").unwrap();
        let dir = Dir::open_named(&d).unwrap();
        let e = dir.create_file(b"l").unwrap_err();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        let e = dir.make_dir(b"ld").err().unwrap();
        assert!(e.to_string().contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&outside).unwrap(), b"keep");
        // An existing regular file is truncated, as cp does.
        let mut f = dir.create_file(b"f").unwrap();
        io::Write::write_all(&mut f, b"new").unwrap();
        assert_eq!(std::fs::read(d.join("f")).unwrap(), b"new");
        // A symlink replaces a symlink, never a file.
        dir.symlink(b"l", b"elsewhere").unwrap();
        assert_eq!(
            std::fs::read_link(d.join("l")).unwrap(),
            Path::new("elsewhere")
        );
        assert!(dir.symlink(b"f", b"x").is_err());
        assert_eq!(std::fs::read(d.join("f")).unwrap(), b"new");
        // A FIFO is not opened (which would block) nor written.
        let fifo = d.join("p");
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &fifo,
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(dir.create_file(b"p").is_err());
        assert!(dir.create_named_file(b"p").is_err(), "a FIFO, even named");
    }

    #[test]
    fn a_device_is_written_only_when_the_user_named_it() {
        // Written only if it is the device: where it is missing, the named write would make
        // it a regular file for every later program on the machine.
        let null = std::fs::symlink_metadata("/dev/null");
        assert!(
            null.is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_char_device(&m.file_type())),
            "this machine's /dev/null is not a character device"
        );
        let dev = Dir::open_named(Path::new("/dev")).unwrap();
        assert!(dev.create_file(b"null").is_err());
        let mut f = dev.create_named_file(b"null").unwrap();
        std::io::Write::write_all(&mut f, b"gone").unwrap();
    }
}
