//! Directories this client made, and every name in them: a LOOKUP of any other name there is
//! answered "no such file" without a request.
//!
//! `tar x` and `cp -r` look up each name before they create it (the kernel asks LOOKUP, then
//! CREATE or MKDIR), one round trip a file that can only answer `NOENT` in a directory they
//! just made. A directory is *fresh* from our MKDIR's reply until that reply's lease ends,
//! for the user (authno) who made it: the server told us of no name in it then, every
//! request of ours that may add a name there (CREATE, MKDIR, SYMLINK, MKNOD, LINK, RENAME to
//! it) records the name before it is sent, so does every name a listing of it shows (one a
//! program on the server's disk made, which no INVALIDATE announces), and another client's
//! change of it reaches us as
//! an INVALIDATE (we hold its lease), which ends its freshness; so does a reconnect (an
//! INVALIDATE may have been missed), a SETATTR of ours on it (its mode might no longer let
//! its maker search it: the server would answer `EACCES`) and the lease's end (no
//! INVALIDATE is promised after it). Names removed stay recorded: such a name goes to the
//! server, which is never wrong. Only a directory whose owner may search it is fresh.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use protocol::{Attr, FileHandle};

/// Bound on fresh directories (past it, the expired ones go, then all).
const MAX_DIRS: usize = 4096;
/// Bound on the names recorded in one directory (past it, it is no longer fresh).
const MAX_NAMES: usize = 65_536;

struct Fresh {
    until: Instant,
    authno: u32,
    names: HashSet<Vec<u8>>,
}

/// The fresh directories ([module docs](self)).
#[derive(Default)]
pub(super) struct FreshDirs {
    dirs: HashMap<FileHandle, Fresh>,
}

impl FreshDirs {
    /// `dir` was made by a MKDIR of `authno` whose reply gave `attr`.
    pub(super) fn made(&mut self, dir: FileHandle, attr: &Attr, authno: u32) {
        if attr.lease_ms == 0 || attr.mode & 0o100 == 0 {
            return;
        }
        let now = Instant::now();
        if self.dirs.len() >= MAX_DIRS {
            self.dirs.retain(|_, f| f.until > now);
            if self.dirs.len() >= MAX_DIRS {
                self.dirs.clear();
            }
        }
        let until = now + Duration::from_millis(u64::from(attr.lease_ms));
        self.dirs.insert(
            dir,
            Fresh {
                until,
                authno,
                names: HashSet::new(),
            },
        );
    }

    /// A request that may add `name` to `dir` is about to be sent.
    pub(super) fn naming(&mut self, dir: &FileHandle, name: &[u8]) {
        if let Some(f) = self.dirs.get_mut(dir) {
            if f.names.len() >= MAX_NAMES {
                self.dirs.remove(dir);
            } else {
                f.names.insert(name.to_vec());
            }
        }
    }

    /// Whether `name` is known not to be in `dir` for `authno`.
    pub(super) fn known_absent(&self, dir: &FileHandle, name: &[u8], authno: u32) -> bool {
        self.dirs.get(dir).is_some_and(|f| {
            f.authno == authno && f.until > Instant::now() && !f.names.contains(name)
        })
    }

    /// `dir` is no longer fresh (changed by another client, or by a SETATTR of ours).
    pub(super) fn forget(&mut self, dir: &FileHandle) {
        self.dirs.remove(dir);
    }

    /// No directory is fresh (a reconnect).
    pub(super) fn clear(&mut self) {
        self.dirs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(mode: u32, lease_ms: u32) -> Attr {
        Attr {
            mode,
            lease_ms,
            ..crate::fuse::placeholder_dir()
        }
    }

    #[test]
    fn only_names_never_sent_are_absent_and_only_while_fresh() {
        let d = FileHandle::from_bytes([3; 48]);
        let mut f = FreshDirs::default();
        assert!(!f.known_absent(&d, b"a", 1), "not made by us");
        f.made(d, &attr(0o755, 60_000), 1);
        assert!(f.known_absent(&d, b"a", 1));
        assert!(!f.known_absent(&d, b"a", 2), "another user");
        f.naming(&d, b"a");
        assert!(!f.known_absent(&d, b"a", 1), "a name we may have made");
        assert!(f.known_absent(&d, b"b", 1));
        f.forget(&d);
        assert!(!f.known_absent(&d, b"b", 1), "an INVALIDATE ends it");
        f.made(d, &attr(0o600, 60_000), 1);
        assert!(!f.known_absent(&d, b"b", 1), "its owner may not search it");
        f.made(d, &attr(0o700, 0), 1);
        assert!(!f.known_absent(&d, b"b", 1), "no lease, no INVALIDATE");
        f.made(d, &attr(0o700, 1), 1);
        std::thread::sleep(Duration::from_millis(5));
        assert!(!f.known_absent(&d, b"b", 1), "the lease ended");
        f.made(d, &attr(0o700, 60_000), 1);
        f.clear();
        assert!(!f.known_absent(&d, b"b", 1), "a reconnect ends it");
    }
}
