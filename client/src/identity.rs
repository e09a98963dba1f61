//! The user's identity: an Ed25519 key file, and the user name it logs in as.
//!
//! The key file is the protocol crate's text form (`secret-key ed25519:...`). Where it comes
//! from: `--identity FILE`, else `SFS_IDENTITY`, else `~/.sfs/identity`; when none of those
//! exists the client works anonymously (authno 0), which is what an export with anonymous read
//! allows.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use protocol::UserKeypair;

use crate::owned_file;

/// A user who logs in on every session: name and key.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    /// The name the server's users file lists the key under.
    pub user: String,
    /// The key that proves it.
    pub key: std::sync::Arc<UserKeypair>,
}

/// The default key file: `~/.sfs/identity`.
pub(crate) fn default_path() -> Option<PathBuf> {
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".sfs").join("identity"))
}

/// The user name to log in as: explicit, else `SFS_USER`, else `USER`, else the process's
/// user's name in /etc/passwd (the decimal uid when it has none), as `id -un` prints it.
pub(crate) fn user_name(explicit: Option<&str>) -> String {
    explicit
        .map(str::to_owned)
        .or_else(|| std::env::var("SFS_USER").ok())
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| {
            let uid = rustix::process::geteuid().as_raw();
            local_user(uid).map_or_else(|| uid.to_string(), |(name, _)| name)
        })
}

/// Loads the identity. An explicitly named file (flag or `SFS_IDENTITY`) must exist; the
/// default file is optional (anonymous without it).
pub(crate) fn load(explicit: Option<&Path>, user: Option<&str>) -> Result<Option<Identity>> {
    let (path, required) = match explicit {
        Some(p) => (p.to_path_buf(), true),
        None => match std::env::var_os("SFS_IDENTITY").filter(|s| !s.is_empty()) {
            Some(p) => (PathBuf::from(p), true),
            None => match default_path() {
                Some(p) => (p, false),
                None => return Ok(None),
            },
        },
    };
    let me = rustix::process::geteuid().as_raw();
    match read_key(&path, &[me])? {
        Some(key) => Ok(Some(Identity {
            user: user_name(user),
            key: std::sync::Arc::new(key),
        })),
        None if required => bail!("reading identity {}: No such file", path.display()),
        None => Ok(None),
    }
}

/// The key in `path`, which must be a private file of one of `owners` (`owned_file`); None
/// when it does not exist.
fn read_key(path: &Path, owners: &[u32]) -> Result<Option<UserKeypair>> {
    let rules = owned_file::Rules {
        owners,
        secret: true,
        max_len: owned_file::IDENTITY_MAX,
    };
    let Some(text) =
        owned_file::read(path, rules).with_context(|| format!("identity {}", path.display()))?
    else {
        return Ok(None);
    };
    let key = UserKeypair::from_text(&text)
        .with_context(|| format!("parsing identity {}", path.display()))?;
    Ok(Some(key))
}

/// Creates a new key file at `path` readable only by its owner; refuses to replace an
/// existing one unless `force`. Returns the key.
pub(crate) fn keygen(path: &Path, force: bool) -> Result<UserKeypair> {
    if path.exists() && !force {
        bail!(
            "{} already exists (use --force to overwrite it)",
            path.display()
        );
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        #[cfg(unix)]
        if dir.file_name().is_some_and(|n| n == ".sfs") {
            use std::os::unix::fs::PermissionsExt;
            let _ = fs::set_permissions(dir, fs::Permissions::from_mode(0o700));
        }
    }
    let key = UserKeypair::generate();
    // Write a sibling file with owner-only permissions from the start, then rename it over
    // the target: the secret never exists with wider permissions, nor half written.
    let tmp = path.with_extension("tmp-keygen");
    let mut opts = fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(key.to_text().as_bytes())?;
    f.sync_all()?;
    drop(f);
    fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keygen_is_private_and_refuses_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("id");
        let k = keygen(&p, false).unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert!(keygen(&p, false).is_err());
        let loaded = load(Some(&p), Some("alice")).unwrap().unwrap();
        assert_eq!(loaded.key.public_key(), k.public_key());
        assert_eq!(loaded.user, "alice");
        let k2 = keygen(&p, true).unwrap();
        assert_ne!(k2.public_key(), k.public_key());
    }

    #[test]
    fn explicit_missing_identity_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(Some(&dir.path().join("nope")), None).is_err());
    }
}

/// A local user's name and home directory, from /etc/passwd.
pub(crate) fn local_user(uid: u32) -> Option<(String, PathBuf)> {
    let text = fs::read_to_string("/etc/passwd").ok()?;
    parse_passwd(&text, uid)
}

fn parse_passwd(text: &str, uid: u32) -> Option<(String, PathBuf)> {
    text.lines().find_map(|l| {
        let f: Vec<&str> = l.split(':').collect();
        (f.len() >= 7 && f[2].parse() == Ok(uid)).then(|| (f[0].to_owned(), PathBuf::from(f[5])))
    })
}

/// The identity of local user `uid` for a many-user mount: `DIR/UID` when `dir` is given and
/// that file exists, else `~user/.sfs/identity`; logged in under the user's name from
/// /etc/passwd (the decimal uid when it has none). None (anonymous) when there is no key;
/// a key that cannot be read or may not be trusted is logged and treated the same.
///
/// Whose files count: `DIR` is the administrator's (owned by root or the mount's user, not
/// writable by others: whoever can write it could swap two users' keys), and `DIR/UID` is
/// theirs or the user's; `~user/.sfs/identity` must be the user's own. Both must be private
/// and not symlinks (`owned_file`), so a user cannot point the mount at someone else's key.
pub(crate) fn for_local_user(uid: u32, dir: Option<&Path>) -> Option<Identity> {
    let user = local_user(uid);
    let name = user
        .as_ref()
        .map(|(n, _)| n.clone())
        .unwrap_or_else(|| uid.to_string());
    let me = rustix::process::geteuid().as_raw();
    let found = (|| -> Result<Option<UserKeypair>> {
        if let Some(dir) = dir {
            owned_file::check_dir(dir, &[0, me])
                .with_context(|| format!("identities directory {}", dir.display()))?;
            if let Some(key) = read_key(&dir.join(uid.to_string()), &[uid, 0, me])? {
                return Ok(Some(key));
            }
        }
        match user {
            Some((_, home)) => read_key(&home.join(".sfs").join("identity"), &[uid]),
            None => Ok(None),
        }
    })();
    match found {
        Ok(key) => key.map(|key| Identity {
            user: name,
            key: std::sync::Arc::new(key),
        }),
        Err(e) => {
            tracing::warn!(uid, "identity not usable: {e:#}");
            None
        }
    }
}

#[cfg(test)]
mod local_user_tests {
    use super::*;

    /// Whose `--identities DIR/UID` a root mount uses: root's or that user's, in a directory
    /// nobody else can write; never a file another user made or could have swapped.
    #[test]
    fn identities_dir_keys_are_used_only_if_nobody_else_could_have_put_them_there() {
        use std::os::unix::fs::PermissionsExt;
        if rustix::process::geteuid().as_raw() != 0 {
            eprintln!("skipped: needs root to make files of other users");
            return;
        }
        let (user, stranger) = (64_210, 64_211);
        let dir = tempfile::tempdir().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        let key = dir.path().join(user.to_string());
        keygen(&key, false).unwrap();
        let found = |d: &Path| for_local_user(user, Some(d)).is_some();
        assert!(found(dir.path()), "root's key for the user");
        std::os::unix::fs::chown(&key, Some(user), None).unwrap();
        assert!(found(dir.path()), "the user's own key");
        std::os::unix::fs::chown(&key, Some(stranger), None).unwrap();
        assert!(!found(dir.path()), "a key another user made");
        std::os::unix::fs::chown(&key, Some(0), None).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        assert!(!found(dir.path()), "a directory others can write");
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        fs::set_permissions(&key, fs::Permissions::from_mode(0o644)).unwrap();
        assert!(!found(dir.path()), "a key others can read");
    }

    #[test]
    fn passwd_lines() {
        let t = "root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
        assert_eq!(
            parse_passwd(t, 0),
            Some(("root".into(), PathBuf::from("/root")))
        );
        assert_eq!(parse_passwd(t, 65534).unwrap().0, "nobody");
        assert_eq!(parse_passwd(t, 7), None);
    }
}
