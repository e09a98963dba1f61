//! Directories whose entries a user may remove, as the server last answered: what lets the
//! mount answer an `unlink` before the server does (`fuse::removes_behind`).
//!
//! The server's ACCESS grants DELETE and LOOKUP on a directory when the user may write and
//! search it; then it removes any entry the user names there, unless the directory is sticky
//! (where only an entry's or the directory's owner may), which the attributes of the same
//! answer show. Unlike the other answers this survives our own removals and creations in the
//! directory (they change its entries, not who may change them), so a walk removing a
//! directory's files asks once per directory. What may change the answer drops it: a SETATTR
//! of ours on the directory (its mode or owner), a change of its extended attributes (an
//! ACL), another client's change (its INVALIDATE), a reconnect (an INVALIDATE may have been
//! missed), and the end of the answer's lease. An answer asked before any of these happened
//! to its directory is refused when it arrives (the epochs below), so it cannot outlive the
//! change. Only to its directory: the server tells the sender of a REMOVE of the file it
//! removed (protocol version 15), and that INVALIDATE arrives while the ACCESS asked right
//! behind the REMOVE is still out.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use protocol::{Attr, FileHandle};

/// Bound on remembered (directory, user) answers (past it, the expired go, then all).
const MAX_DIRS: usize = 4096;

/// Bound on the objects whose last revoking event is remembered (past it, all answers asked
/// before are refused).
const MAX_FORGOTTEN: usize = 4096;

/// The sticky bit: entries only their owner (or the directory's) may remove.
const STICKY: u32 = 0o1000;

#[derive(Default)]
pub(super) struct RemovableDirs {
    /// Per (directory, authno): whether entries may be removed, and until when that is known.
    /// A refusal is kept too, so a user who may not (or a sticky directory) is not asked
    /// again at every unlink.
    known: HashMap<(FileHandle, u32), (bool, Instant)>,
    /// Counts the events that may revoke an answer.
    epoch: u64,
    /// The epoch of the last such event, per object it happened to: an answer for a
    /// directory is kept only if none happened to it since it was asked for.
    forgotten: HashMap<FileHandle, u64>,
    /// Answers asked before this epoch are refused (the forgotten ones went).
    floor: u64,
}

impl RemovableDirs {
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// `authno` asked at `epoch` for DELETE and LOOKUP on `dir` and was `granted` them or
    /// not, with `dir`'s attributes `attr`.
    pub(super) fn answered(
        &mut self,
        dir: FileHandle,
        authno: u32,
        attr: &Attr,
        granted: bool,
        epoch: u64,
    ) {
        let revoked = self.forgotten.get(&dir).is_some_and(|&at| at > epoch);
        if epoch < self.floor || revoked || attr.lease_ms == 0 {
            return;
        }
        let now = Instant::now();
        if self.known.len() >= MAX_DIRS {
            self.known.retain(|_, (_, until)| *until > now);
            if self.known.len() >= MAX_DIRS {
                self.known.clear();
            }
        }
        let until = now + Duration::from_millis(u64::from(attr.lease_ms));
        let removable = granted && attr.mode & STICKY == 0;
        self.known.insert((dir, authno), (removable, until));
    }

    /// What the server last said of `authno` removing entries of `dir`, while it holds.
    fn current(&self, dir: &FileHandle, authno: u32) -> Option<bool> {
        self.known
            .get(&(*dir, authno))
            .filter(|(_, until)| *until > Instant::now())
            .map(|(removable, _)| *removable)
    }

    /// Whether `authno` may remove any entry of `dir` as far as the server last said.
    pub(super) fn removable(&self, dir: &FileHandle, authno: u32) -> bool {
        self.current(dir, authno) == Some(true)
    }

    /// Whether the server's answer for `authno` and `dir`, either way, still holds.
    pub(super) fn known(&self, dir: &FileHandle, authno: u32) -> bool {
        self.current(dir, authno).is_some()
    }

    /// Something that may change who may remove entries of `dir` happened.
    pub(super) fn forget(&mut self, dir: &FileHandle) {
        self.epoch += 1;
        if self.forgotten.len() >= MAX_FORGOTTEN {
            self.forgotten.clear();
            self.floor = self.epoch;
        }
        self.forgotten.insert(*dir, self.epoch);
        self.known.retain(|(d, _), _| d != dir);
    }

    pub(super) fn clear(&mut self) {
        self.epoch += 1;
        self.floor = self.epoch;
        self.forgotten.clear();
        self.known.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir_attr(mode: u32, lease_ms: u32) -> Attr {
        let mut a = Attr::test_file(0, lease_ms);
        a.ftype = protocol::FileType::Directory;
        a.mode = mode;
        a
    }

    const D: FileHandle = FileHandle::from_bytes([1; 48]);
    const E: FileHandle = FileHandle::from_bytes([2; 48]);

    #[test]
    fn a_grant_holds_for_its_user_and_directory_until_revoked() {
        let mut r = RemovableDirs::default();
        let epoch = r.epoch();
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, epoch);
        assert!(r.removable(&D, 7) && r.known(&D, 7));
        assert!(!r.removable(&D, 8), "another user asks for itself");
        assert!(!r.removable(&E, 7), "another directory");
        r.forget(&E);
        assert!(r.removable(&D, 7), "a change elsewhere leaves it");
        r.forget(&D);
        assert!(!r.removable(&D, 7));
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, r.epoch());
        r.clear();
        assert!(!r.removable(&D, 7));
    }

    #[test]
    fn sticky_directories_unleased_answers_and_answers_overtaken_are_not_kept() {
        let mut r = RemovableDirs::default();
        r.answered(D, 7, &dir_attr(0o1777, 60_000), true, r.epoch());
        assert!(
            !r.removable(&D, 7),
            "sticky: the owner of each entry decides"
        );
        assert!(r.known(&D, 7), "and that is not asked again");
        r.answered(D, 7, &dir_attr(0o755, 60_000), false, r.epoch());
        assert!(!r.removable(&D, 7) && r.known(&D, 7), "refused");
        r.forget(&D);
        r.answered(D, 7, &dir_attr(0o755, 0), true, r.epoch());
        assert!(!r.removable(&D, 7) && !r.known(&D, 7), "no lease");
        let asked = r.epoch();
        r.forget(&E);
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, asked);
        assert!(r.removable(&D, 7), "a change elsewhere since it was asked");
        let asked = r.epoch();
        r.forget(&D);
        r.forget(&E);
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, asked);
        assert!(
            !r.removable(&D, 7),
            "asked before a change that may revoke it"
        );
        let asked = r.epoch();
        r.clear();
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, asked);
        assert!(!r.removable(&D, 7), "asked before a reconnect");
    }

    #[test]
    fn past_its_bound_every_answer_asked_before_is_refused() {
        let mut r = RemovableDirs::default();
        let asked = r.epoch();
        for i in 0..MAX_FORGOTTEN + 1 {
            r.forget(&FileHandle::from_bytes([(i % 251) as u8 + 3; 48]));
            r.forget(&FileHandle::from_bytes({
                let mut b = [0; 48];
                b[..8].copy_from_slice(&(i as u64).to_le_bytes());
                b[8] = 9;
                b
            }));
        }
        assert!(r.forgotten.len() <= MAX_FORGOTTEN);
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, asked);
        assert!(
            !r.removable(&D, 7),
            "D's own change may have been forgotten"
        );
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, r.epoch());
        assert!(r.removable(&D, 7));
    }

    #[test]
    fn past_its_bound_the_expired_answers_go_then_all() {
        let mut r = RemovableDirs::default();
        let dir = |i: usize| {
            let mut b = [0; 48];
            b[..8].copy_from_slice(&(i as u64).to_le_bytes());
            FileHandle::from_bytes(b)
        };
        // Half of them expire at once; past the bound only those go.
        for i in 0..MAX_DIRS {
            let lease = if i % 2 == 0 { 1 } else { 60_000 };
            r.answered(dir(i), 7, &dir_attr(0o755, lease), true, r.epoch());
        }
        std::thread::sleep(Duration::from_millis(5));
        r.answered(D, 7, &dir_attr(0o755, 60_000), true, r.epoch());
        assert_eq!(r.known.len(), MAX_DIRS / 2 + 1);
        assert!(r.removable(&dir(1), 7) && r.removable(&D, 7));
        // None expired: past the bound all go, and the new answer stays.
        for i in MAX_DIRS..2 * MAX_DIRS {
            r.answered(dir(i), 7, &dir_attr(0o755, 60_000), true, r.epoch());
        }
        assert!(r.known.len() <= MAX_DIRS);
        assert!(!r.removable(&dir(1), 7), "the oldest went with the rest");
        assert!(r.removable(&dir(2 * MAX_DIRS - 1), 7));
    }

    #[test]
    fn a_grant_ends_with_its_lease() {
        let mut r = RemovableDirs::default();
        r.answered(D, 7, &dir_attr(0o755, 1), true, r.epoch());
        std::thread::sleep(Duration::from_millis(5));
        assert!(!r.removable(&D, 7));
    }
}
