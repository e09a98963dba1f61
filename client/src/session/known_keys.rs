//! Server keys remembered between connections, so a handshake can start without waiting for
//! the server's key message (one round trip fewer: [`protocol::ClientHandshake::with_known_key`]).
//!
//! A key is only a cache of what the name certifies: the HOSTID in a self-certifying name is a
//! hash of the server's location and key, so a remembered key is checked against the name
//! before it is used, and one that does not match (a damaged or planted file) is ignored.
//! Keys live in memory for the session's life and in `$XDG_CACHE_HOME/sfs/keys/HOSTID` (else
//! `~/.cache/sfs/keys/HOSTID`) for the next process; failing to read or write the file only
//! costs that round trip.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use protocol::ServerName;
use protocol::name::PUBLIC_KEY_LEN;

/// A server's static public key.
pub(super) type ServerKey = [u8; PUBLIC_KEY_LEN];

/// The directory of remembered keys (none in unit tests, whose fake servers each have a new
/// key: they would fill the tester's cache).
fn dir() -> Option<PathBuf> {
    if cfg!(test) {
        return None;
    }
    let base = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    Some(base.join("sfs").join("keys"))
}

/// The key remembered on disk for `name`, if there is one the name certifies.
pub(super) fn load(name: &ServerName) -> Option<ServerKey> {
    load_from(&dir()?, name)
}

/// Remembers `key` for `name` on disk (best effort: a cache).
pub(super) fn store(name: &ServerName, key: &ServerKey) {
    if let Some(dir) = dir() {
        store_in(&dir, name, key);
    }
}

fn load_from(dir: &Path, name: &ServerName) -> Option<ServerKey> {
    let path = dir.join(name.host_id().to_string());
    let bytes = std::fs::read(path).ok()?;
    let key: ServerKey = bytes.as_slice().try_into().ok()?;
    name.without_path().verify_key(&key).ok()?;
    Some(key)
}

fn store_in(dir: &Path, name: &ServerName, key: &ServerKey) {
    let result = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .and_then(|()| {
            // Written under a temporary name and renamed, so a reader never sees half a key.
            let path = dir.join(name.host_id().to_string());
            let tmp = dir.join(format!(".{}.{}", name.host_id(), std::process::id()));
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(key)?;
            std::fs::rename(&tmp, &path)
        });
    if let Err(e) = result {
        tracing::debug!(dir = %dir.display(), error = %e, "could not remember the server's key");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use protocol::keys::ServerKeypair;
    use protocol::name::Location;

    #[test]
    fn a_stored_key_is_loaded_and_a_planted_one_is_ignored() {
        let cache = tempfile::tempdir().unwrap();
        let dir = cache.path().join("sfs").join("keys");
        let kp = ServerKeypair::generate();
        let name = kp.server_name(Location::new("localhost", 4004).unwrap());
        assert_eq!(load_from(&dir, &name), None);
        store_in(&dir, &name, kp.public_key());
        assert_eq!(load_from(&dir, &name), Some(*kp.public_key()));
        // Another key under this name's HOSTID: not what the name certifies.
        let other = ServerKeypair::generate();
        store_in(&dir, &name, other.public_key());
        assert_eq!(load_from(&dir, &name), None);
    }
}
