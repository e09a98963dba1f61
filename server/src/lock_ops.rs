//! LOCK, UNLOCK and TESTLOCK: the caller's access is checked by the storage backend as the
//! caller (an ACCESS on the handle, submitted to [`crate::fs::Storage`] like any other: the
//! local backend runs it in the connection's color or on a storage thread, the NFS backend
//! sends it), which also verifies the handle and names the object; then the [`crate::locks`]
//! table answers, and the reply goes straight back to the connection's color (locks grant no
//! leases and change no attributes, so color 0 has nothing to do).
//!
//! Who may: a logged-in user (never anonymous: a lock holds server memory); a write lock
//! needs write access to the file and a read lock read access, as `fcntl(2)` needs a
//! descriptor open for writing or reading; UNLOCK and TESTLOCK need only a valid handle. A
//! read-only export serves read locks and answers write locks `ROFS`.

use std::sync::Arc;
use std::time::Instant;

use libcolor::Color;
use protocol::{LockKind, NfsStatus, Reply, ReplyBody, RequestOp, access};

use crate::fs::{ObjKey, OpCtx, Outcome};
use crate::locks::{Holder, LockClient, Range};
use crate::server::{InFlight, Server};

/// A lock request, split from the other operations by [`take`] (the connection's
/// dispatcher sends it to [`dispatch`] instead of the storage's).
pub(crate) enum LockOp {
    Lock(protocol::LockArgs),
    Unlock(protocol::UnlockArgs),
    Test(protocol::TestLockArgs),
}

/// A request: a lock request, or any other.
pub(crate) enum Split {
    Lock(LockOp),
    Other(RequestOp),
}

/// `op` as a lock request, or back as it was.
pub(crate) fn take(op: RequestOp) -> Split {
    match op {
        RequestOp::Lock(a) => Split::Lock(LockOp::Lock(a)),
        RequestOp::Unlock(a) => Split::Lock(LockOp::Unlock(a)),
        RequestOp::TestLock(a) => Split::Lock(LockOp::Test(a)),
        op => Split::Other(op),
    }
}

impl LockOp {
    fn fh(&self) -> protocol::FileHandle {
        match self {
            LockOp::Lock(a) => a.fh,
            LockOp::Unlock(a) => a.fh,
            LockOp::Test(a) => a.fh,
        }
    }

    /// The ACCESS bits the caller needs.
    fn needs(&self) -> u32 {
        match self {
            LockOp::Lock(a) if a.kind == LockKind::Write => access::MODIFY,
            LockOp::Lock(_) => access::READ,
            LockOp::Unlock(_) | LockOp::Test(_) => 0,
        }
    }
}

/// Where a reply goes.
struct ReplyTo {
    conn: crate::server::ConnLinkRef,
    id: crate::leases::ConnId,
    req_id: u64,
    reserved: usize,
}

/// Connection color: checks what needs no storage, then has the backend check access.
pub(crate) fn dispatch(srv: &Arc<Server>, d: InFlight, op: LockOp) {
    let refused = if d.creds.anonymous {
        Some(NfsStatus::Acces)
    } else {
        match &op {
            LockOp::Lock(a) if a.reclaim => Some(NfsStatus::NotSupp),
            LockOp::Lock(a) if a.kind == LockKind::Write && srv.read_only => Some(NfsStatus::RoFs),
            _ => None,
        }
    };
    if let Some(s) = refused {
        return answer(srv, d, Err(s));
    }
    let ctx = OpCtx {
        creds: d.creds.clone(),
        lease_ms: 0,
        conn: d.id,
    };
    let check = RequestOp::Access {
        fh: op.fh(),
        access: op.needs(),
    };
    let to = ReplyTo {
        conn: d.conn.clone(),
        id: d.id,
        req_id: d.req_id,
        reserved: d.reserved,
    };
    let me = srv.clone();
    let finish = move |outcome: Outcome| {
        let result = apply(&me, &d, &op, outcome);
        answer(&me, d, result);
    };
    if srv.storage.submit(ctx, check, Box::new(finish)).is_err() {
        // The storage is full: try later.
        answer_to(srv, to, Err(NfsStatus::Jukebox));
    }
}

/// After the access check: the table's answer.
fn apply(
    srv: &Server,
    d: &InFlight,
    op: &LockOp,
    outcome: Outcome,
) -> Result<ReplyBody, NfsStatus> {
    let granted = match outcome.result? {
        ReplyBody::Access { access, .. } => access,
        _ => return Err(NfsStatus::ServerFault),
    };
    if granted & op.needs() != op.needs() {
        return Err(NfsStatus::Acces);
    }
    let key: ObjKey = outcome
        .leased
        .first()
        .map(|(k, _)| *k)
        .ok_or(NfsStatus::ServerFault)?;
    let client = LockClient::of(d.id, d.record);
    let uid = d.creds.uid;
    let holder = |owner| Holder { client, uid, owner };
    let mut t = srv.locks.lock();
    t.reap(Instant::now());
    match *op {
        LockOp::Lock(a) => {
            let holder = holder(a.owner);
            let r = Range::from_wire(a.start, a.len)?;
            t.lock(key, holder, a.kind, r, a.flock)?;
            Ok(ReplyBody::Lock)
        }
        LockOp::Unlock(a) => {
            let holder = holder(a.owner);
            let r = Range::from_wire(a.start, a.len)?;
            t.unlock(key, holder, r, a.flock)?;
            Ok(ReplyBody::Unlock)
        }
        LockOp::Test(a) => {
            let holder = holder(a.owner);
            let r = Range::from_wire(a.start, a.len)?;
            Ok(ReplyBody::TestLock {
                conflict: t.test(key, holder, a.kind, r, a.flock),
            })
        }
    }
}

/// The reply, sent in the connection's color.
fn answer(srv: &Arc<Server>, d: InFlight, result: Result<ReplyBody, NfsStatus>) {
    let to = ReplyTo {
        conn: d.conn,
        id: d.id,
        req_id: d.req_id,
        reserved: d.reserved,
    };
    answer_to(srv, to, result);
}

fn answer_to(srv: &Arc<Server>, to: ReplyTo, result: Result<ReplyBody, NfsStatus>) {
    let ReplyTo {
        conn,
        id,
        req_id,
        reserved,
    } = to;
    let me = srv.clone();
    srv.h.cpucb(Color(id), move || {
        conn.complete(&me, reserved, Reply { id: req_id, result }, Vec::new())
    });
}
