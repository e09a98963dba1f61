//! A connection's ordering rule for what follows a file's WRITEs: protocol versions 9 and up
//! promise that a COMMIT covers every WRITE that came before it on the connection, and
//! versions 13 and up that a SETATTR is applied after them, so a client may send either right
//! behind its last WRITE rather than a round trip after the last reply (`tar x` sets each
//! file's times right after writing it). The storage threads would otherwise run them in any
//! order (a SETATTR even runs inline, before a WRITE handed to a storage thread), so a COMMIT
//! or SETATTR of a file with WRITEs or APPENDs still being done waits for them here. Holding
//! them costs an older client nothing it relied on, so the rule does not look at the version.
//!
//! WRITEs that arrive after a held request are not held behind it: the promise is only about
//! what came before, and a client that needs a WRITE after a SETATTR waits for its reply.

use std::collections::HashMap;

use protocol::{FileHandle, RequestOp};

use crate::server::InFlight;

#[derive(Default)]
pub(super) struct WriteOrder {
    /// WRITEs and APPENDs being done, by request id, with their file (as many as requests in
    /// flight).
    writes: HashMap<u64, FileHandle>,
    /// COMMITs and SETATTRs that came behind WRITEs of their file still being done, in
    /// arrival order; run when the last of those is answered (each is a request in flight, so
    /// at most `max_in_flight`).
    held: Vec<(FileHandle, InFlight, RequestOp)>,
}

impl WriteOrder {
    /// `op` is admitted: it is given back to go to the storage now, unless it is a COMMIT or
    /// SETATTR that must wait (then it is kept).
    pub(super) fn admit(&mut self, d: InFlight, op: RequestOp) -> Option<(InFlight, RequestOp)> {
        match &op {
            RequestOp::Commit { fh, .. } | RequestOp::SetAttr { fh, .. }
                if self.writes.values().any(|w| w == fh) =>
            {
                let fh = *fh;
                self.held.push((fh, d, op));
                return None;
            }
            RequestOp::Write { fh, .. } | RequestOp::Append { fh, .. } => {
                self.writes.insert(d.req_id, *fh);
            }
            _ => {}
        }
        Some((d, op))
    }

    /// Request `id` was answered; if it was the last WRITE or APPEND of its file still being
    /// done, the requests that waited for it go to `run`, in arrival order.
    pub(super) fn answered(&mut self, id: u64, mut run: impl FnMut(InFlight, RequestOp)) {
        let Some(fh) = self.writes.remove(&id) else {
            return;
        };
        if self.held.is_empty() || self.writes.values().any(|w| *w == fh) {
            return;
        }
        let held = std::mem::take(&mut self.held);
        for (file, d, op) in held {
            if file == fh {
                run(d, op);
            } else {
                self.held.push((file, d, op));
            }
        }
    }
}
