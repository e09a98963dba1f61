//! Open states: descriptors sfsd keeps for one connection's user, as NFSv4's OPEN does.
//!
//! Two things POSIX programs rely on need the server to remember an open file:
//!
//! - **Access granted at creation.** `open(O_CREAT | O_RDWR, 0444)` makes a file its creator
//!   may not write, yet writing through the descriptor that call returned is allowed (version
//!   control tools write every object so, `tar x` of read-only files too). Each later WRITE
//!   re-opens the file as the caller and the kernel refuses it. So CREATE of a file whose mode
//!   denies its owner reading or writing keeps the descriptor its `O_CREAT` returned (which
//!   the kernel opened read-write without a permission check, the file being new) for that
//!   connection and user; WRITE, SETATTR of the size, COMMIT and READ of that user on that
//!   connection use it when re-opening is refused. Nobody else, and no later open, gains
//!   anything: another user, or the same user on another connection, is checked against the
//!   mode as before, and the state ends with CLOSE or the connection.
//! - **Open files that lose their last name.** A program may unlink a file it has open and go
//!   on using it. The client sends OPEN first; the kept descriptor keeps the inode alive, and
//!   a handle whose object no longer has a name resolves to it ([`OpenStates::anchor`]) until
//!   the last holder closes. Nothing is left in the export, whatever happens to the client:
//!   the kernel frees the inode when sfsd closes the descriptor.
//!
//! The table and its bounds are [`crate::fs::open_states`]'s; past them CREATE keeps nothing
//! (writing a read-only file through its creating descriptor then fails as before) and OPEN is
//! refused, which the client handles by renaming the file to a hidden name instead.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use protocol::{FileHandle, NfsStatus, ReplyBody};

use super::LocalFs;
use crate::fs::open_states::{Holder, OpenStates};
use crate::fs::{ObjKey, OpCtx, Outcome};

pub(super) use crate::fs::open_states::holder;

/// One kept descriptor.
pub(super) struct State {
    fd: Arc<OwnedFd>,
    /// Opened for reading and writing by the CREATE that made the file.
    granted: bool,
}

/// The local backend's open states: a descriptor per holder and object.
pub(super) type Descriptors = OpenStates<State>;

/// Keeps `fd` for `holder` on `key` (`granted`: the read-write descriptor of the CREATE that
/// made the file, never replaced by a plain one). Whether it was kept.
pub(super) fn keep(
    states: &Descriptors,
    holder: Holder,
    key: ObjKey,
    fd: OwnedFd,
    granted: bool,
) -> bool {
    let state = State {
        fd: Arc::new(fd),
        granted,
    };
    states.keep(holder, key, state, |old| granted || !old.granted)
}

/// The read-write descriptor CREATE kept for `holder` on `key`, if any.
pub(super) fn granted(states: &Descriptors, holder: Holder, key: ObjKey) -> Option<File> {
    states.get(holder, key, |s| {
        s.granted
            .then(|| s.fd.try_clone().ok().map(File::from))
            .flatten()
    })
}

/// A descriptor of `key` some holder keeps (the object may have no name left), duplicated.
pub(super) fn anchor(states: &Descriptors, key: ObjKey) -> Option<OwnedFd> {
    states.any(key, |s| s.fd.try_clone().ok())
}

impl LocalFs {
    /// OPEN: keeps the object (resolved as the caller) alive for this connection's user.
    pub(super) fn open_state(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        let attr = o.fresh_attr(ctx.lease_ms);
        if !keep(&self.open, holder(ctx), o.key, o.fd, false) {
            return Err(NfsStatus::DQuot);
        }
        out.leased.push((o.key, fh));
        Ok(ReplyBody::Open { attr })
    }

    /// CLOSE: drops this connection's user's state on the object, if any. The handle is not
    /// resolved: the object may have no name left.
    pub(super) fn close_state(&self, ctx: &OpCtx, fh: FileHandle) -> Result<ReplyBody, NfsStatus> {
        let h = self.key.verify(&fh)?;
        self.open.close(holder(ctx), crate::fs::key_of(&h));
        Ok(ReplyBody::Close)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fd() -> OwnedFd {
        File::open("/dev/null").unwrap().into()
    }

    #[test]
    fn grants_are_per_connection_and_user() {
        let s = Descriptors::default();
        assert!(keep(&s, (1, 1000), (5, 7), fd(), true));
        assert!(granted(&s, (1, 1000), (5, 7)).is_some());
        assert!(granted(&s, (1, 1001), (5, 7)).is_none(), "another user");
        assert!(
            granted(&s, (2, 1000), (5, 7)).is_none(),
            "another connection"
        );
        assert!(granted(&s, (1, 1000), (5, 8)).is_none(), "another object");
        // A plain OPEN by the same holder does not take the grant away.
        assert!(keep(&s, (1, 1000), (5, 7), fd(), false));
        assert!(granted(&s, (1, 1000), (5, 7)).is_some());
        s.close((1, 1000), (5, 7));
        assert!(granted(&s, (1, 1000), (5, 7)).is_none());
        assert!(anchor(&s, (5, 7)).is_none());
    }

    #[test]
    fn plain_states_anchor_but_grant_nothing() {
        let s = Descriptors::default();
        assert!(keep(&s, (1, 1000), (5, 7), fd(), false));
        assert!(granted(&s, (1, 1000), (5, 7)).is_none());
        assert!(anchor(&s, (5, 7)).is_some());
        // A grant replaces a plain state of the same holder.
        assert!(keep(&s, (1, 1000), (5, 7), fd(), true));
        assert!(granted(&s, (1, 1000), (5, 7)).is_some());
        s.close_conn(1);
        assert!(anchor(&s, (5, 7)).is_none());
    }
}
