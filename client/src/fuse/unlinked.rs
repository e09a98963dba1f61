//! Open files, and files unlinked while open: the server is asked to keep such a file (OPEN,
//! an open state CLOSEd at its last release) or, on a server without open states, it is
//! renamed to a hidden name removed at its last release or when the mount ends.

use fuser::{Errno, INodeNo};
use protocol::{FileHandle, NfsStatus};

use super::ServerMount;
use super::convert::errno;
use super::kept_listings::Edit;
use super::names::edited;
use super::table::Table;
use crate::session::{Client, SessionError};

/// Prefix of the hidden names open-but-unlinked files get where the server keeps no open
/// states (not listed by `readdir`).
pub(super) const HIDDEN_PREFIX: &[u8] = b".sfs-unlinked-";

impl ServerMount {
    /// If `dir/name` is a file some program has open, makes sure it outlives its name: the
    /// server is asked to keep it (OPEN, an open state CLOSEd at its last release), or, on a
    /// server without open states, it is renamed to a hidden name removed at its last release.
    /// Whether it was renamed (the caller then has nothing left to remove).
    ///
    /// The file is the node the kernel was told `name` is, when it holds one: the kernel
    /// acts on its own dentry too, and the record follows our renames and ends with another
    /// client's change of the directory (its INVALIDATE). Only otherwise is the server asked
    /// (a LOOKUP; git removes and renames over files while it holds others open).
    pub(super) async fn keep_if_open(
        &self,
        c: &Client,
        uid: u32,
        (parent, dir): (INodeNo, &FileHandle),
        name: &[u8],
    ) -> Result<bool, Errno> {
        if self.table().open.is_empty() {
            return Ok(false);
        }
        let fh = match self.named(parent, name) {
            Some((_, fh)) => fh,
            None => match c.lookup(dir, name).await {
                Ok((fh, _)) => fh,
                Err(SessionError::Nfs(NfsStatus::NoEnt)) => return Ok(false),
                Err(e) => return Err(errno(e)),
            },
        };
        let ino = {
            let t = self.table();
            let Some(ino) = t.by_fh.get(&fh).copied() else {
                return Ok(false);
            };
            if t.open.get(&ino).copied().unwrap_or(0) == 0 || t.hidden.contains_key(&ino) {
                return Ok(false);
            }
            ino
        };
        match c.open(&fh).await {
            Ok(()) => {
                // The last close may have come while OPEN was under way (close, then unlink,
                // is common): then nothing will CLOSE this state but us, now.
                if !self.while_open(ino, |t| {
                    t.states.entry(ino).or_default().insert(uid);
                }) && let Err(e) = c.close(&fh).await
                {
                    tracing::debug!(error = %e.report(), "CLOSE failed (the state goes with the connection)");
                }
                return Ok(false);
            }
            Err(SessionError::Nfs(NfsStatus::NoEnt | NfsStatus::Stale)) => return Ok(false),
            Err(SessionError::Nfs(NfsStatus::NotSupp | NfsStatus::DQuot)) => {}
            Err(e) => return Err(errno(e)),
        }
        let hidden = {
            let mut t = self.table();
            t.next_hidden += 1;
            let mut h = HIDDEN_PREFIX.to_vec();
            h.extend_from_slice(
                format!("{ino}-{}-{}", std::process::id(), t.next_hidden).as_bytes(),
            );
            h
        };
        let settled = c.rename(dir, name, dir, &hidden).await.map_err(errno)?;
        let renamed = Edit::Renamed {
            from: name,
            to: &hidden,
        };
        edited(&self.kept, dir, settled, renamed);
        let recorded = self.while_open(ino, |t| {
            t.hidden.insert(ino, (*dir, hidden.clone()));
        });
        if !recorded {
            // Closed while the rename was under way: nobody is left to remove it but us.
            let settled = c.remove(dir, &hidden, false).await.map_err(errno)?;
            edited(&self.kept, dir, settled, Edit::Unnamed(&hidden));
        }
        Ok(true)
    }

    /// Runs `f` on the table if `ino` is open; whether it was.
    fn while_open(&self, ino: u64, f: impl FnOnce(&mut Table)) -> bool {
        let mut t = self.table();
        if t.open.get(&ino).copied().unwrap_or(0) == 0 {
            return false;
        }
        f(&mut t);
        true
    }

    /// The server keeps an open state on `ino` for local user `uid` (a CREATE that kept one).
    pub(super) fn holds_state(&self, ino: u64, uid: u32) {
        self.table().states.entry(ino).or_default().insert(uid);
    }

    /// Removes the hidden names of files still open when the mount ends.
    pub(crate) async fn remove_hidden(&self) {
        let hidden: Vec<_> = self.table().hidden.drain().map(|(_, h)| h).collect();
        for (dir, name) in hidden {
            match self.client.remove(&dir, &name, false).await {
                Ok(settled) => edited(&self.kept, &dir, settled, Edit::Unnamed(&name)),
                Err(e) => {
                    tracing::warn!(error = %e.report(), "cannot remove a hidden name at unmount");
                }
            }
        }
    }

    pub(super) fn opened(&self, ino: u64) {
        *self.table().open.entry(ino).or_insert(0) += 1;
    }

    /// The last close of a file drops the server's open states on it and removes its hidden
    /// name, if it has them.
    pub(super) async fn released(&self, c: &Client, ino: INodeNo) -> Result<(), Errno> {
        let (hidden, states) = {
            let mut t = self.table();
            let left = match t.open.get_mut(&ino.0) {
                Some(n) => {
                    *n = n.saturating_sub(1);
                    *n
                }
                None => 0,
            };
            if left == 0 {
                t.open.remove(&ino.0);
                t.lost.remove(&ino.0);
                let states = t.states.remove(&ino.0).unwrap_or_default();
                let fh = t.nodes.get(&ino.0).map(|n| n.fh);
                (t.hidden.remove(&ino.0), fh.map(|fh| (fh, states)))
            } else {
                (None, None)
            }
        };
        if let Some((fh, uids)) = states {
            for uid in uids {
                if let Err(e) = self.client_for(uid).close(&fh).await {
                    tracing::debug!(error = %e.report(), "CLOSE failed (the state goes with the connection)");
                }
            }
        }
        if let Some((dir, name)) = hidden {
            let settled = c.remove(&dir, &name, false).await.map_err(errno)?;
            edited(&self.kept, &dir, settled, Edit::Unnamed(&name));
        }
        Ok(())
    }
}
