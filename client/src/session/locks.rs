//! The lock operations (LOCK, UNLOCK, TESTLOCK; docs/PROTOCOL.md, "Locks"). The server
//! answers at once: a LOCK in conflict is `Denied`, and whoever wants to wait polls
//! ([`crate::fuse`]'s `setlk` with `sleep`).

use protocol::{LockArgs, LockConflict, ReplyBody, RequestOp, TestLockArgs, UnlockArgs};

use super::Client;
use super::error::SessionError;

impl Client {
    /// Sends a lock operation: to a server of protocol version 2, which has none (it would
    /// close the connection on the unknown procedure), nothing is sent and the answer is
    /// `NoLck` ("no locks available").
    async fn lock_call(&self, op: RequestOp) -> Result<ReplyBody, SessionError> {
        if self.connection().await?.version < protocol::SESSIONS_VERSION {
            return Err(SessionError::Nfs(protocol::NfsStatus::NoLck));
        }
        self.call(op).await
    }

    /// LOCK: granted, or `Nfs(Denied)` when another holder's lock is in the way.
    pub(crate) async fn lock(&self, args: LockArgs) -> Result<(), SessionError> {
        match self.lock_call(RequestOp::Lock(args)).await? {
            ReplyBody::Lock => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// UNLOCK: this session's user's locks of `args.owner` in the range go.
    pub(crate) async fn unlock(&self, args: UnlockArgs) -> Result<(), SessionError> {
        match self.lock_call(RequestOp::Unlock(args)).await? {
            ReplyBody::Unlock => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// TESTLOCK: the lock that would stand in the way of this LOCK now, if any.
    pub(crate) async fn testlock(
        &self,
        args: TestLockArgs,
    ) -> Result<Option<LockConflict>, SessionError> {
        match self.lock_call(RequestOp::TestLock(args)).await? {
            ReplyBody::TestLock { conflict } => Ok(conflict),
            other => Err(self.unexpected(&other)),
        }
    }
}
