//! Reading a small file that only its owner may have written: identity keys and bookmarks.
//!
//! A `--multi-user` mount runs as root and reads `~USER/.sfs/identity` for every local user
//! who touches it; whatever that file says, the mount acts as. So a user must not be able to
//! point it at someone else's key (a symlink, a hard link, a parent directory that is a
//! symlink), make it hang the mount (a FIFO, a device) or fill its memory (`/dev/zero`, a huge
//! file), and nobody else may have been able to write it. The rules, as sshd's `StrictModes`
//! and ssh's private-key check: the file is opened without following a final symlink, must be
//! a regular file owned by one of the expected users, not writable by group or others (a
//! secret also not readable by them), and at most a few KiB. The checks are on the opened
//! descriptor, so nothing can be swapped between check and read.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;

/// What a file must be to be read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules<'a> {
    /// Uids allowed to own it.
    pub owners: &'a [u32],
    /// A secret: not readable by group or others either.
    pub secret: bool,
    /// The most bytes it may hold.
    pub max_len: u64,
}

/// The largest identity file: a key's text form is about a hundred bytes.
pub(crate) const IDENTITY_MAX: u64 = 4096;

/// The largest bookmarks file: hundreds of bookmarks.
pub(crate) const BOOKMARKS_MAX: u64 = 64 * 1024;

/// Why a file was not read. The message names what to change.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    #[error("is a symbolic link (sfs reads only the file itself)")]
    Symlink,
    #[error("is not a regular file")]
    NotRegular,
    #[error("belongs to uid {0}, not to {1}")]
    Owner(u32, String),
    #[error("is writable by group or others (chmod go-w)")]
    Writable,
    #[error("is readable by group or others (chmod 600)")]
    Readable,
    #[error("is larger than {0} bytes")]
    TooLarge(u64),
    #[error("{0}")]
    Io(std::io::Error),
}

/// The file's text, `Ok(None)` when it does not exist, or why it may not be read.
pub(crate) fn read(path: &Path, rules: Rules<'_>) -> Result<Option<String>, Refused> {
    let file = match File::options()
        .read(true)
        // NONBLOCK: a FIFO planted in its place must not hang the reader in open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(Refused::Symlink),
        Err(e) => return Err(Refused::Io(e)),
    };
    let meta = file.metadata().map_err(Refused::Io)?;
    if !meta.file_type().is_file() {
        return Err(Refused::NotRegular);
    }
    if !rules.owners.contains(&meta.uid()) {
        let allowed: Vec<String> = rules.owners.iter().map(|u| format!("uid {u}")).collect();
        return Err(Refused::Owner(meta.uid(), allowed.join(" or ")));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Refused::Writable);
    }
    if rules.secret && meta.mode() & 0o044 != 0 {
        return Err(Refused::Readable);
    }
    let mut text = String::new();
    file.take(rules.max_len + 1)
        .read_to_string(&mut text)
        .map_err(Refused::Io)?;
    if text.len() as u64 > rules.max_len {
        return Err(Refused::TooLarge(rules.max_len));
    }
    Ok(Some(text))
}

/// Whether a directory of files others may rely on (`--identities DIR`) could have been
/// changed by someone other than `owners`: owned by one of them, not writable by group or
/// others, not a symlink. Whoever can write the directory can swap two users' files.
pub(crate) fn check_dir(path: &Path, owners: &[u32]) -> Result<(), Refused> {
    let meta = std::fs::symlink_metadata(path).map_err(Refused::Io)?;
    if meta.file_type().is_symlink() {
        return Err(Refused::Symlink);
    }
    if !meta.is_dir() {
        return Err(Refused::NotRegular);
    }
    if !owners.contains(&meta.uid()) {
        let allowed: Vec<String> = owners.iter().map(|u| format!("uid {u}")).collect();
        return Err(Refused::Owner(meta.uid(), allowed.join(" or ")));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(Refused::Writable);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn me() -> u32 {
        rustix::process::geteuid().as_raw()
    }

    fn rules(owners: &[u32]) -> Rules<'_> {
        Rules {
            owners,
            secret: true,
            max_len: 16,
        }
    }

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> std::path::PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    #[test]
    fn reads_a_private_file_of_its_owner() {
        let d = tempfile::tempdir().unwrap();
        let me = [me()];
        let p = file(d.path(), "id", "key", 0o600);
        assert_eq!(read(&p, rules(&me)).unwrap().as_deref(), Some("key"));
        assert!(read(&d.path().join("none"), rules(&me)).unwrap().is_none());
        // Not a secret: readable by others is fine.
        let p = file(d.path(), "marks", "m", 0o644);
        let open = Rules {
            secret: false,
            ..rules(&me)
        };
        assert_eq!(read(&p, open).unwrap().as_deref(), Some("m"));
    }

    #[test]
    fn refuses_what_others_could_have_written_or_redirected() {
        let d = tempfile::tempdir().unwrap();
        let me = [me()];
        let p = file(d.path(), "gw", "key", 0o620);
        assert!(matches!(read(&p, rules(&me)), Err(Refused::Writable)));
        let p = file(d.path(), "ow", "key", 0o602);
        assert!(matches!(read(&p, rules(&me)), Err(Refused::Writable)));
        let p = file(d.path(), "or", "key", 0o644);
        assert!(matches!(read(&p, rules(&me)), Err(Refused::Readable)));
        let p = file(d.path(), "big", "0123456789abcdefX", 0o600);
        assert!(matches!(read(&p, rules(&me)), Err(Refused::TooLarge(16))));
        let p = file(d.path(), "other", "key", 0o600);
        let not_me = [me[0].wrapping_add(1)];
        assert!(matches!(read(&p, rules(&not_me)), Err(Refused::Owner(..))));
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&p, &link).unwrap();
        assert!(matches!(read(&link, rules(&me)), Err(Refused::Symlink)));
        assert!(matches!(
            read(Path::new("/dev/zero"), rules(&[0, me[0]])),
            Err(Refused::NotRegular)
        ));
        let fifo = d.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(matches!(read(&fifo, rules(&me)), Err(Refused::NotRegular)));
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let me = [me()];
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(check_dir(d.path(), &me).is_ok());
        std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        assert!(matches!(check_dir(d.path(), &me), Err(Refused::Writable)));
        let link = d.path().join("link");
        std::os::unix::fs::symlink(d.path(), &link).unwrap();
        assert!(matches!(check_dir(&link, &me), Err(Refused::Symlink)));
    }
}
