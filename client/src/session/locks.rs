//! The lock operations (LOCK, UNLOCK, TESTLOCK; docs/PROTOCOL.md, "Locks"). The server
//! answers at once: a LOCK in conflict is `Denied`, and whoever wants to wait polls
//! ([`crate::fuse`]'s `setlk` with `sleep`).

use protocol::{LockArgs, LockConflict, ReplyBody, RequestOp, TestLockArgs, UnlockArgs};

use super::Client;
use super::error::SessionError;

impl Client {
    /// LOCK: granted, or `Nfs(Denied)` when another holder's lock is in the way.
    pub async fn lock(&self, args: LockArgs) -> Result<(), SessionError> {
        match self.call(RequestOp::Lock(args)).await? {
            ReplyBody::Lock => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// UNLOCK: this session's user's locks of `args.owner` in the range go.
    pub async fn unlock(&self, args: UnlockArgs) -> Result<(), SessionError> {
        match self.call(RequestOp::Unlock(args)).await? {
            ReplyBody::Unlock => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// TESTLOCK: the lock that would stand in the way of this LOCK now, if any.
    pub async fn testlock(&self, args: TestLockArgs) -> Result<Option<LockConflict>, SessionError> {
        match self.call(RequestOp::TestLock(args)).await? {
            ReplyBody::TestLock { conflict } => Ok(conflict),
            other => Err(self.unexpected(&other)),
        }
    }
}
