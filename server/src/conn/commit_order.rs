//! A connection's ordering rule for COMMIT: protocol versions 9 and 10 promise that a COMMIT
//! covers every WRITE that came before it on the connection, so a client may send it behind
//! its last WRITE rather than a round trip after the last reply. The storage threads would
//! otherwise run them in any order, so a COMMIT of a file with WRITEs or APPENDs still being
//! done waits for them here.

use std::collections::HashMap;

use protocol::{FileHandle, RequestOp};

use crate::server::InFlight;

#[derive(Default)]
pub(super) struct CommitOrder {
    /// WRITEs and APPENDs being done, by request id, with their file (as many as requests in
    /// flight).
    writes: HashMap<u64, FileHandle>,
    /// COMMITs that came behind WRITEs of their file still being done, in arrival order; run
    /// when the last of those is answered (each is a request in flight, so at most
    /// `max_in_flight`).
    held: Vec<(FileHandle, InFlight, RequestOp)>,
}

impl CommitOrder {
    /// `op` is admitted: it is given back to go to the storage now, unless it is a COMMIT
    /// that must wait (then it is kept).
    pub(super) fn admit(&mut self, d: InFlight, op: RequestOp) -> Option<(InFlight, RequestOp)> {
        match &op {
            RequestOp::Commit { fh, .. } if self.writes.values().any(|w| w == fh) => {
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
    /// done, the COMMITs that waited for it go to `run`, in arrival order.
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
