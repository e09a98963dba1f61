//! `fcntl`, OFD and `flock` locks through the mount, held on the server so that every mount
//! of it sees them (LOCK, UNLOCK, TESTLOCK; docs/PROTOCOL.md, "Locks").
//!
//! - **Owners.** The server's owner number is the kernel's lock owner: per process (its
//!   `files_struct`) for `fcntl` locks, per open file for OFD and `flock` locks, so two local
//!   processes never share a lock by accident. The server adds the connection and the user
//!   (a `--multi-user` mount's users each lock as themselves), so one local user cannot act
//!   on another's locks.
//! - **Waiting** (`F_SETLKW`, `flock` without `LOCK_NB`): LOCK is polled with back-off (10 ms
//!   doubling to 500 ms) until granted; a signal the caller does not block ends the wait with
//!   `EINTR`, as a local wait does ([`crate::interrupt::signal_pending`]).
//! - **Release.** The kernel sends FLUSH with the closing process's owner on every `close(2)`
//!   and counts on the file system to drop that owner's POSIX locks on the file; RELEASE ends
//!   an open file, and with it its OFD and `flock` locks. Only an owner that took (or tried to
//!   take) a lock on the file costs an UNLOCK there: [`Held`] remembers them, so an ordinary
//!   close needs no round trip.
//! - **F_GETLK** reports the conflicting lock's kind and range with `l_pid` 0: the holder may
//!   be on another machine, and the kernel refuses a pid it cannot find in its namespace.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fuser::{Errno, INodeNo, LockOwner, ReplyEmpty, ReplyLock};
use protocol::{LockArgs, LockKind, NfsStatus, TestLockArgs, UnlockArgs};

use super::{ServerMount, errno};
use crate::session::{Client, SessionError};

/// First pause between two LOCKs of a waiting request.
const FIRST_WAIT: Duration = Duration::from_millis(10);
/// Longest pause between two LOCKs of a waiting request.
const LONGEST_WAIT: Duration = Duration::from_millis(500);

/// The kernel's "to the end of the file" (`OFFSET_MAX`).
const OFFSET_MAX: u64 = i64::MAX as u64;

/// Which owners may hold locks, so FLUSH and RELEASE send UNLOCK only for them.
#[derive(Default)]
pub(super) struct Held {
    /// (node, owner, flock) → the local uid that locked (its UNLOCK goes as that user).
    owners: HashMap<(u64, u64, bool), u32>,
    /// Open file (FUSE file handle) → owners that locked through it: their OFD and `flock`
    /// locks end when it is released.
    by_file: HashMap<u64, HashSet<(u64, bool)>>,
}

/// What a lock request asks, in the protocol's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Want {
    Lock(LockKind),
    Unlock,
}

/// The kernel's `F_RDLCK`/`F_WRLCK`/`F_UNLCK`.
fn want(typ: i32) -> Result<Want, Errno> {
    match typ {
        libc::F_RDLCK => Ok(Want::Lock(LockKind::Read)),
        libc::F_WRLCK => Ok(Want::Lock(LockKind::Write)),
        libc::F_UNLCK => Ok(Want::Unlock),
        _ => Err(Errno::EINVAL),
    }
}

/// The kernel's inclusive range (`end` `OFFSET_MAX`: to the end) as the wire's (start, len).
fn wire_range(start: u64, end: u64) -> Result<(u64, u64), Errno> {
    if end < start {
        return Err(Errno::EINVAL);
    }
    if end >= OFFSET_MAX {
        return Ok((start, 0));
    }
    Ok((start, end - start + 1))
}

/// The wire's (start, len) as the kernel's inclusive range, within `OFFSET_MAX`.
fn kernel_range(start: u64, len: u64) -> (u64, u64) {
    let start = start.min(OFFSET_MAX);
    let end = match len {
        0 => OFFSET_MAX,
        n => start.saturating_add(n - 1).min(OFFSET_MAX),
    };
    (start, end)
}

/// A lock request from the kernel.
pub(super) struct SetLk {
    pub ino: INodeNo,
    pub file: u64,
    pub owner: LockOwner,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub flock: bool,
    pub sleep: bool,
    /// The caller's thread (for signals) and local uid.
    pub tid: u32,
    pub uid: u32,
}

impl ServerMount {
    /// SETLK, SETLKW, and `flock`.
    pub(super) async fn setlk(&self, c: &Client, r: SetLk, reply: ReplyEmpty) {
        super::convert::reply_empty(self.setlk_inner(c, r).await, reply)
    }

    async fn setlk_inner(&self, c: &Client, r: SetLk) -> Result<(), Errno> {
        let fh = self.fh(r.ino)?;
        let (start, len) = if r.flock {
            (0, 0)
        } else {
            wire_range(r.start, r.end)?
        };
        let owner = r.owner.0;
        let kind = match want(r.typ)? {
            Want::Unlock => {
                let args = UnlockArgs {
                    fh,
                    owner,
                    start,
                    len,
                    flock: r.flock,
                };
                return c.unlock(args).await.map_err(errno);
            }
            Want::Lock(kind) => kind,
        };
        // Remembered before asking: a LOCK whose answer is lost may still have been granted.
        {
            let mut h = self.locks.lock();
            h.owners.insert((r.ino.0, owner, r.flock), r.uid);
            h.by_file
                .entry(r.file)
                .or_default()
                .insert((owner, r.flock));
        }
        let args = LockArgs {
            fh,
            owner,
            kind,
            start,
            len,
            flock: r.flock,
            reclaim: false,
        };
        let mut pause = FIRST_WAIT;
        loop {
            match c.lock(args).await {
                Err(SessionError::Nfs(NfsStatus::Denied)) if r.sleep => {}
                other => return other.map_err(errno),
            }
            if crate::interrupt::signal_pending(r.tid) {
                return Err(Errno::EINTR);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(LONGEST_WAIT);
            if crate::interrupt::signal_pending(r.tid) {
                return Err(Errno::EINTR);
            }
        }
    }

    /// GETLK: the conflicting lock, or `F_UNLCK`.
    #[allow(clippy::too_many_arguments)] // The kernel's request, as fuser hands it over.
    pub(super) async fn getlk(
        &self,
        c: &Client,
        ino: INodeNo,
        owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        reply: ReplyLock,
    ) {
        match self.getlk_inner(c, ino, owner, start, end, typ).await {
            Ok(Some((start, end, typ))) => reply.locked(start, end, typ, 0),
            Ok(None) => reply.locked(start, end, libc::F_UNLCK, 0),
            Err(e) => reply.error(e),
        }
    }

    async fn getlk_inner(
        &self,
        c: &Client,
        ino: INodeNo,
        owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
    ) -> Result<Option<(u64, u64, i32)>, Errno> {
        let Want::Lock(kind) = want(typ)? else {
            return Err(Errno::EINVAL);
        };
        let fh = self.fh(ino)?;
        let (start, len) = wire_range(start, end)?;
        let args = TestLockArgs {
            fh,
            owner: owner.0,
            kind,
            start,
            len,
            flock: false,
        };
        Ok(c.testlock(args).await.map_err(errno)?.map(|l| {
            let (s, e) = kernel_range(l.start, l.len);
            let typ = match l.kind {
                LockKind::Read => libc::F_RDLCK,
                LockKind::Write => libc::F_WRLCK,
            };
            (s, e, typ)
        }))
    }

    /// FLUSH (a `close(2)`): if `owner` may hold POSIX locks on `ino`, the user who locked
    /// and the UNLOCK of all of them to send.
    pub(super) fn posix_owner_closing(&self, ino: INodeNo, owner: LockOwner) -> Option<u32> {
        self.locks.lock().owners.remove(&(ino.0, owner.0, false))
    }

    /// RELEASE of open file `file`: the owners that locked through it and still may hold
    /// locks (OFD and `flock` ones; a process's POSIX locks went at its close), with the user
    /// each locked as.
    pub(super) fn file_released(&self, ino: INodeNo, file: u64) -> Vec<(u64, bool, u32)> {
        let mut h = self.locks.lock();
        let Some(owners) = h.by_file.remove(&file) else {
            return Vec::new();
        };
        owners
            .into_iter()
            .filter_map(|(owner, flock)| {
                h.owners
                    .remove(&(ino.0, owner, flock))
                    .map(|uid| (owner, flock, uid))
            })
            .collect()
    }

    /// Releases every lock of `owner` on `ino` (its POSIX ones, or its `flock` one), acting
    /// as local user `uid`. A failure is logged: the server drops them with the connection.
    pub(super) async fn unlock_all(&self, ino: INodeNo, owner: u64, flock: bool, uid: u32) {
        let Ok(fh) = self.fh(ino) else {
            return;
        };
        let args = UnlockArgs {
            fh,
            owner,
            start: 0,
            len: 0,
            flock,
        };
        if let Err(e) = self.client_for(uid).unlock(args).await {
            tracing::warn!(error = %e.report(), "UNLOCK at close failed (the server releases the locks when this connection ends)");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_convert_both_ways() {
        assert_eq!(wire_range(0, OFFSET_MAX), Ok((0, 0)));
        assert_eq!(wire_range(10, 19), Ok((10, 10)));
        assert_eq!(wire_range(5, 5), Ok((5, 1)));
        assert!(wire_range(6, 5).is_err());
        assert_eq!(kernel_range(10, 10), (10, 19));
        assert_eq!(kernel_range(10, 0), (10, OFFSET_MAX));
        assert_eq!(kernel_range(u64::MAX - 1, 5), (OFFSET_MAX, OFFSET_MAX));
        assert_eq!(want(libc::F_WRLCK), Ok(Want::Lock(LockKind::Write)));
        assert_eq!(want(libc::F_UNLCK), Ok(Want::Unlock));
        assert!(want(77).is_err());
    }
}
