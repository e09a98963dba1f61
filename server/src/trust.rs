//! sfsd trusts only its own files, as sshd's `StrictModes` does: the state directory, its
//! secrets, the users file (which says which key acts as which uid: whoever can write it can
//! become anyone) and the config file must belong to sfsd's user or root, must not be writable
//! by group or others, and must not be symlinks (which another user could point elsewhere).
//! Secrets must not be readable by group or others either. A refusal names the file and says
//! why.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use anyhow::{Result, bail};

/// What a file is, for the rules it must follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The state directory.
    Directory,
    /// A key or secret: no access for group or others at all.
    Secret,
    /// Read by sfsd, decides who is who (users file, config file, location).
    Trusted,
}

/// Checks `path` against the rules for `kind` (see the module docs), for a process whose
/// effective uid is `euid`.
pub(crate) fn check(path: &Path, kind: Kind, euid: u32) -> Result<()> {
    let meta =
        std::fs::symlink_metadata(path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let shown = path.display();
    if meta.file_type().is_symlink() {
        bail!("{shown} is a symbolic link; sfsd reads only files it can trust (name the target)");
    }
    match kind {
        Kind::Directory if !meta.is_dir() => bail!("{shown} is not a directory"),
        Kind::Secret | Kind::Trusted if !meta.is_file() => bail!("{shown} is not a regular file"),
        _ => {}
    }
    if meta.uid() != euid && meta.uid() != 0 {
        bail!(
            "{shown} belongs to uid {}, not to sfsd's user (uid {euid}) or root; chown it",
            meta.uid()
        );
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o022 != 0 {
        bail!("{shown} is writable by group or others (mode {mode:04o}); chmod go-w it");
    }
    if kind == Kind::Secret && mode & 0o077 != 0 {
        bail!("{shown} is readable by others (mode {mode:04o}); chmod 600 it");
    }
    Ok(())
}

/// [`check`] for the running process.
pub(crate) fn check_mine(path: &Path, kind: Kind) -> Result<()> {
    check(path, kind, rustix::process::geteuid().as_raw())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn mode(p: &Path, m: u32) {
        fs::set_permissions(p, fs::Permissions::from_mode(m)).unwrap();
    }

    #[test]
    fn modes_owners_and_links() {
        let d = tempfile::tempdir().unwrap();
        let me = rustix::process::geteuid().as_raw();
        let f = d.path().join("users");
        fs::write(&f, "x").unwrap();
        mode(&f, 0o644);
        check(&f, Kind::Trusted, me).unwrap();
        let e = check(&f, Kind::Secret, me).unwrap_err().to_string();
        assert!(
            e.contains("readable by others") && e.contains("users"),
            "{e}"
        );
        mode(&f, 0o664);
        let e = check(&f, Kind::Trusted, me).unwrap_err().to_string();
        assert!(e.contains("writable by group or others (mode 0664)"), "{e}");
        mode(&f, 0o602);
        assert!(check(&f, Kind::Trusted, me).is_err(), "other-writable");
        mode(&f, 0o600);
        check(&f, Kind::Secret, me).unwrap();
        // Owned by somebody else (neither us nor root).
        let owner = fs::metadata(&f).unwrap().uid();
        if owner != 0 {
            let e = check(&f, Kind::Trusted, owner + 1).unwrap_err().to_string();
            assert!(e.contains(&format!("belongs to uid {owner}")), "{e}");
        } else if me == 0 {
            std::os::unix::fs::chown(&f, Some(4321), None).unwrap();
            let e = check(&f, Kind::Trusted, 0).unwrap_err().to_string();
            assert!(e.contains("belongs to uid 4321"), "{e}");
            std::os::unix::fs::chown(&f, Some(0), None).unwrap();
        }
        // Root's files are trusted by anyone.
        if owner == 0 {
            check(&f, Kind::Trusted, 1234).unwrap();
        }
        let l = d.path().join("link");
        std::os::unix::fs::symlink(&f, &l).unwrap();
        let e = check(&l, Kind::Trusted, me).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        assert!(check(&f, Kind::Directory, me).is_err(), "not a directory");
        assert!(check(d.path(), Kind::Trusted, me).is_err(), "not a file");
        mode(d.path(), 0o700);
        check(d.path(), Kind::Directory, me).unwrap();
        mode(d.path(), 0o777);
        assert!(check(d.path(), Kind::Directory, me).is_err());
        mode(d.path(), 0o700);
    }
}
