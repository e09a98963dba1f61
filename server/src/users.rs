//! The users file: which Ed25519 keys may log in, and as which local uid/gids.
//!
//! Format, one user a line (blank lines and `#` comments ignored):
//! `name ed25519:<64 hex> uid gid[,gid...]`. The first gid is the primary group.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{Context, Result, bail};
use protocol::UserPublicKey;

/// The credentials a request runs with: the storage thread's fsuid, fsgid and supplementary
/// groups for the operation (see `fs::creds`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Creds {
    /// Who (for logs).
    pub name: String,
    pub uid: u32,
    /// Primary group first.
    pub gids: Vec<u32>,
    /// Anonymous access (authno 0 with `--anonymous-read`): "other" bits, never writes.
    pub anonymous: bool,
}

/// Default uid/gid for anonymous requests ("nobody").
pub(crate) const NOBODY: u32 = 65534;

impl Creds {
    /// The credentials anonymous requests run with (`--anonymous-uid/--anonymous-gid`).
    pub(crate) fn anonymous(uid: u32, gid: u32) -> Creds {
        Creds {
            name: "anonymous".into(),
            uid,
            gids: vec![gid],
            anonymous: true,
        }
    }

    pub(crate) fn primary_gid(&self) -> u32 {
        self.gids.first().copied().unwrap_or(NOBODY)
    }
}

/// Authorised users, keyed by (name, key). Read-only once loaded, so connection colors can
/// consult it without going through color 0.
#[derive(Debug, Default)]
pub(crate) struct Users {
    by_key: HashMap<(String, [u8; 32]), Creds>,
}

impl Users {
    pub(crate) fn load(path: &Path) -> Result<Users> {
        // Whoever can write this file can act as any uid: it must be sfsd's own.
        crate::trust::check_mine(path, crate::trust::Kind::Trusted)?;
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        Users::parse(&text).with_context(|| format!("in users file {}", path.display()))
    }

    pub(crate) fn parse(text: &str) -> Result<Users> {
        let mut by_key = HashMap::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [name, key, uid, gids] = fields[..] else {
                bail!("line {}: want `name ed25519:<hex> uid gid[,gid...]`", n + 1);
            };
            protocol::login::check_user_name(name)
                .map_err(|e| anyhow::anyhow!("line {}: bad user name: {e}", n + 1))?;
            let key: UserPublicKey = key
                .parse()
                .map_err(|e| anyhow::anyhow!("line {}: bad key: {e}", n + 1))?;
            let uid: u32 = uid
                .parse()
                .with_context(|| format!("line {}: uid", n + 1))?;
            let gids = gids
                .split(',')
                .map(|g| g.parse::<u32>())
                .collect::<Result<Vec<u32>, _>>()
                .with_context(|| format!("line {}: gids", n + 1))?;
            by_key.insert(
                (name.to_string(), key.to_bytes()),
                Creds {
                    name: name.to_string(),
                    uid,
                    gids,
                    anonymous: false,
                },
            );
        }
        Ok(Users { by_key })
    }

    pub(crate) fn lookup(&self, name: &str, key: &UserPublicKey) -> Option<&Creds> {
        self.by_key.get(&(name.to_string(), key.to_bytes()))
    }

    pub(crate) fn count(&self) -> usize {
        self.by_key.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects() {
        let k = protocol::UserKeypair::from_seed([7; 32]).public_key();
        let u = Users::parse(&format!("# c\n\nalice {k} 1000 100,200\n")).unwrap();
        let c = u.lookup("alice", &k).unwrap();
        assert_eq!((c.uid, c.gids.clone()), (1000, vec![100, 200]));
        assert!(u.lookup("bob", &k).is_none());
        assert!(Users::parse("alice ed25519:zz 1 1").is_err());
        assert!(Users::parse(&format!("alice {k} x 1")).is_err());
        assert!(Users::parse(&format!("alice {k} 1")).is_err());
    }
}
