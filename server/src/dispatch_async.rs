//! Dispatch to a backend that completes operations as callbacks ([`AsyncStorage`], the NFS
//! backend): the same bookkeeping as the storage-thread path in [`crate::server`], without
//! the threads. Completions go to color 0 (leases, INVALIDATE) and then to the connection's
//! color, exactly as there. READ goes from the connection's color to the backend and back
//! ([`crate::conn`], `start_read`).

use std::sync::Arc;

use libcolor::Color;

use crate::fs::{AsyncStorage, OpCtx};
use crate::leases::{Holder, Principal};
use crate::server::{Dispatch, Server};

impl Server {
    /// Connection color: submits the operation; its completion runs [`Server::finish`] in
    /// color 0.
    pub(crate) fn dispatch_async(
        self: &Arc<Self>,
        backend: Arc<dyn AsyncStorage>,
        d: Dispatch,
        op: protocol::RequestOp,
    ) {
        let Dispatch {
            conn,
            id,
            req_id,
            creds,
            reserved,
            lease_ms,
            ..
        } = d;
        let srv = self.clone();
        let holder = Holder {
            conn: id,
            who: Principal::of(&creds),
        };
        let ctx = OpCtx {
            creds,
            lease_ms,
            conn: id,
        };
        backend.submit(
            ctx,
            op,
            Box::new(move |outcome| {
                let srv2 = srv.clone();
                srv.h.cpucb(Color::DEFAULT, move || {
                    srv2.finish(conn, holder, req_id, reserved, lease_ms, outcome)
                });
            }),
        );
    }
}
