//! Dispatch to a backend that completes operations as callbacks ([`AsyncStorage`], the NFS
//! backend): the same bookkeeping as the storage-thread path in [`crate::server`], without
//! the threads. Completions go to color 0 (leases, INVALIDATE) and then to the connection's
//! color, exactly as there.

use std::sync::Arc;

use libcolor::Color;
use protocol::HandleData;

use crate::conn;
use crate::fs::{AsyncStorage, OpCtx, ReadArgs};
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
        } = d;
        let srv = self.clone();
        let ctx = OpCtx { creds, lease_ms };
        backend.submit(
            ctx,
            op,
            Box::new(move |outcome| {
                let srv2 = srv.clone();
                srv.h.cpucb(Color::DEFAULT, move || {
                    srv2.finish(conn, id, req_id, reserved, lease_ms, outcome)
                });
            }),
        );
    }

    /// Color 0, after the READ's lease is recorded: the call is made from the connection's
    /// color (so color 0 pays only for the bookkeeping), and the backend's reply is decoded,
    /// copied into the reply record and sealed in the connection's color.
    pub(crate) fn dispatch_read_async(
        self: &Arc<Self>,
        backend: Arc<dyn AsyncStorage>,
        d: Dispatch,
        hd: HandleData,
        offset: u64,
        count: usize,
        lease_ms: u32,
    ) {
        let srv = self.clone();
        let (id, conn, reserved, req_id) = (d.id, d.conn, d.reserved, d.req_id);
        let ctx = OpCtx {
            creds: d.creds,
            lease_ms,
        };
        self.h.cpucb(Color(id), move || {
            let srv2 = srv.clone();
            backend.submit_read(
                Color(id),
                ctx,
                ReadArgs {
                    hd,
                    offset,
                    count,
                    req_id,
                },
                Box::new(move |res| conn::complete_read(&srv2, &conn, req_id, reserved, res)),
            );
        });
    }
}
