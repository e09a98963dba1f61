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
//! Bounded: at most [`MAX_PER_HOLDER`] states per connection, each charged to it, and
//! [`crate::limits::OPEN_STATES`] in all (counted in the descriptors the server reserves); past that
//! CREATE keeps nothing (writing a read-only file through its creating descriptor then fails
//! as before) and OPEN is refused, which the client handles by renaming the file to a hidden
//! name instead.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use parking_lot::Mutex;

use protocol::{FileHandle, NfsStatus, ReplyBody};

use super::LocalFs;
use crate::fs::{ObjKey, OpCtx, Outcome};
use crate::leases::ConnId;

/// Most open states one connection may hold.
pub const MAX_PER_HOLDER: usize = 256;

/// Who holds a state: a connection and the server uid its request ran as.
pub type Holder = (ConnId, u32);

/// The holder a request acts for.
pub fn holder(ctx: &OpCtx) -> Holder {
    (ctx.conn, ctx.creds.uid)
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
        if !self.open.keep(holder(ctx), o.key, o.fd, false) {
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

/// One kept descriptor.
struct State {
    fd: Arc<OwnedFd>,
    /// Opened for reading and writing by the CREATE that made the file.
    granted: bool,
}

/// How many closed connections are remembered (see [`Inner::closed`]).
const CLOSED_REMEMBERED: usize = 1024;

#[derive(Default)]
struct Inner {
    by_obj: HashMap<ObjKey, HashMap<Holder, State>>,
    by_conn: HashMap<ConnId, HashSet<(u32, ObjKey)>>,
    /// States held, all connections together.
    total: usize,
    /// Connections closed lately: a request of theirs still on a storage thread when they
    /// closed must not leave a state nobody will ever drop.
    closed: VecDeque<ConnId>,
}

/// Every connection's open states.
#[derive(Default)]
pub struct OpenStates {
    inner: Mutex<Inner>,
}

impl OpenStates {
    /// Keeps `fd` for `holder` on object `key` (`granted`: a read-write descriptor from the
    /// CREATE that made the file). A granted state is never replaced by a plain one. Whether it
    /// was kept (false when the connection holds [`MAX_PER_HOLDER`] states already).
    pub fn keep(&self, holder: Holder, key: ObjKey, fd: OwnedFd, granted: bool) -> bool {
        let mut g = self.inner.lock();
        if g.closed.contains(&holder.0) {
            return false;
        }
        let total = g.total;
        let held = g.by_conn.entry(holder.0).or_default();
        if !held.contains(&(holder.1, key)) {
            if held.len() >= MAX_PER_HOLDER || total >= crate::limits::OPEN_STATES {
                return false;
            }
            held.insert((holder.1, key));
            g.total += 1;
        }
        let states = g.by_obj.entry(key).or_default();
        match states.get(&holder) {
            Some(s) if s.granted && !granted => {}
            _ => {
                states.insert(
                    holder,
                    State {
                        fd: Arc::new(fd),
                        granted,
                    },
                );
            }
        }
        true
    }

    /// The read-write descriptor CREATE kept for `holder` on `key`, if any.
    pub fn granted(&self, holder: Holder, key: ObjKey) -> Option<File> {
        let g = self.inner.lock();
        let s = g.by_obj.get(&key)?.get(&holder)?;
        if !s.granted {
            return None;
        }
        s.fd.try_clone().ok().map(File::from)
    }

    /// A descriptor of `key` any holder keeps (the object may have no name left), duplicated.
    pub fn anchor(&self, key: ObjKey) -> Option<OwnedFd> {
        let g = self.inner.lock();
        let s = g.by_obj.get(&key)?.values().next()?;
        s.fd.try_clone().ok()
    }

    /// Drops `holder`'s state on `key`; none is fine.
    pub fn close(&self, holder: Holder, key: ObjKey) {
        let mut g = self.inner.lock();
        if let Some(held) = g.by_conn.get_mut(&holder.0) {
            if held.remove(&(holder.1, key)) {
                g.total -= 1;
            }
            if g.by_conn.get(&holder.0).is_some_and(HashSet::is_empty) {
                g.by_conn.remove(&holder.0);
            }
        }
        if let Some(states) = g.by_obj.get_mut(&key) {
            states.remove(&holder);
            if states.is_empty() {
                g.by_obj.remove(&key);
            }
        }
    }

    /// Drops every state of connection `conn` (it closed).
    pub fn close_conn(&self, conn: ConnId) {
        let mut g = self.inner.lock();
        if g.closed.len() >= CLOSED_REMEMBERED {
            g.closed.pop_front();
        }
        g.closed.push_back(conn);
        let Some(held) = g.by_conn.remove(&conn) else {
            return;
        };
        g.total -= held.len();
        for (uid, key) in held {
            if let Some(states) = g.by_obj.get_mut(&key) {
                states.remove(&(conn, uid));
                if states.is_empty() {
                    g.by_obj.remove(&key);
                }
            }
        }
    }

    /// States held by connection `conn`.
    #[cfg(test)]
    fn held_by(&self, conn: ConnId) -> usize {
        self.inner.lock().by_conn.get(&conn).map_or(0, HashSet::len)
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
        let s = OpenStates::default();
        assert!(s.keep((1, 1000), (5, 7), fd(), true));
        assert!(s.granted((1, 1000), (5, 7)).is_some());
        assert!(s.granted((1, 1001), (5, 7)).is_none(), "another user");
        assert!(s.granted((2, 1000), (5, 7)).is_none(), "another connection");
        assert!(s.granted((1, 1000), (5, 8)).is_none(), "another object");
        // A plain OPEN by the same holder does not take the grant away.
        assert!(s.keep((1, 1000), (5, 7), fd(), false));
        assert!(s.granted((1, 1000), (5, 7)).is_some());
        s.close((1, 1000), (5, 7));
        assert!(s.granted((1, 1000), (5, 7)).is_none());
        assert!(s.anchor((5, 7)).is_none());
    }

    #[test]
    fn plain_states_anchor_but_grant_nothing() {
        let s = OpenStates::default();
        assert!(s.keep((1, 1000), (5, 7), fd(), false));
        assert!(s.granted((1, 1000), (5, 7)).is_none());
        assert!(s.anchor((5, 7)).is_some());
        assert!(s.keep((2, 1001), (5, 7), fd(), false));
        s.close((1, 1000), (5, 7));
        assert!(s.anchor((5, 7)).is_some(), "the other holder keeps it");
        s.close_conn(2);
        assert!(s.anchor((5, 7)).is_none());
        assert_eq!(s.held_by(2), 0);
        // A request that finishes after its connection closed keeps nothing.
        assert!(!s.keep((2, 1001), (5, 7), fd(), true));
        assert!(s.anchor((5, 7)).is_none());
    }

    #[test]
    fn a_connection_holds_a_bounded_number() {
        let s = OpenStates::default();
        for i in 0..MAX_PER_HOLDER as u64 {
            assert!(s.keep((1, 1000), (1, i), fd(), false));
        }
        assert!(!s.keep((1, 1000), (1, u64::MAX), fd(), false));
        assert!(
            s.keep((1, 1000), (1, 0), fd(), true),
            "one it holds may be renewed"
        );
        assert!(
            s.keep((2, 1000), (1, u64::MAX), fd(), false),
            "others unaffected"
        );
        assert_eq!(s.held_by(1), MAX_PER_HOLDER);
        s.close_conn(1);
        assert_eq!(s.held_by(1), 0);
        assert!(s.anchor((1, 5)).is_none());
        s.close((2, 1000), (1, u64::MAX));
        assert_eq!(s.inner.lock().total, 0);
    }

    #[test]
    fn the_server_holds_a_bounded_number() {
        let s = OpenStates::default();
        let per = MAX_PER_HOLDER as u64;
        let conns = (crate::limits::OPEN_STATES as u64).div_ceil(per);
        for conn in 0..conns {
            for i in 0..per {
                s.keep((conn as ConnId, 0), (conn, i), fd(), false);
            }
        }
        assert_eq!(s.inner.lock().total, crate::limits::OPEN_STATES);
        assert!(!s.keep((999, 0), (7, 7), fd(), false), "full");
        s.close((0, 0), (0, 0));
        assert!(s.keep((999, 0), (7, 7), fd(), false), "room again");
    }
}
