//! The shared server state and the color-0 dispatcher.
//!
//! ```text
//! conn color c: read, open, decode, auth, verify READ handle --cpucb--> color 0: leases,
//!   issue storage job --helper pool--> color 0 (metadata: leases, INVALIDATEs) --cpucb--> c
//!                                  \--> c directly for READ data (sealed in place)
//! ```
//! Only the short bookkeeping (lease table, connection registry) runs in color 0; sealing,
//! opening and copying file data run in connection colors or on helper threads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use libcolor::{Color, Handle};
use protocol::{
    Attr, FileHandle, HandleData, HandleKey, HandshakeConfig, Invalidate, NfsStatus, Reply,
    RequestOp, ServerKeypair, ServerMessage, ServerName,
};

use crate::conn::{self, Conn};
use crate::fs::{OpCtx, Storage, key_of};
use crate::leases::{ConnId, Leases};
use crate::limits::Limits;
use crate::users::{Creds, Users};

/// State only color 0 touches (the mutex is uncontended: it satisfies `Sync`, libcolor's
/// color 0 provides the serialisation).
pub struct Color0 {
    pub leases: Leases,
    pub conns: HashMap<ConnId, Weak<Mutex<Conn>>>,
}

/// Everything the connection colors and color 0 share.
pub struct Server {
    pub h: Handle,
    pub keypair: ServerKeypair,
    pub name: ServerName,
    pub handshake: HandshakeConfig,
    pub handle_key: HandleKey,
    pub storage: Arc<dyn Storage>,
    pub users: Users,
    pub limits: Limits,
    pub read_only: bool,
    pub anonymous_read: bool,
    pub color0: Mutex<Color0>,
    /// Requests admitted and not yet answered (for shutdown).
    pub in_flight: AtomicUsize,
    pub open_conns: AtomicUsize,
    pub draining: AtomicBool,
}

/// Locks a mutex whose data stays consistent even if a holder panicked (a panicking callback
/// stops the runtime anyway).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Server {
    fn color0(&self) -> MutexGuard<'_, Color0> {
        lock(&self.color0)
    }

    /// Color 0: a READ. Records the lease, then reads on a helper straight into a record
    /// buffer; the connection's color seals and sends it.
    pub fn dispatch_read(
        self: &Arc<Self>,
        conn: Arc<Mutex<Conn>>,
        id: ConnId,
        req_id: u64,
        creds: Creds,
        fh: FileHandle,
        hd: HandleData,
        offset: u64,
        count: usize,
    ) {
        let lease_ms = {
            let mut c0 = self.color0();
            let lease_ms = c0.leases.lease_ms();
            c0.leases.grant(id, key_of(&hd), fh, lease_ms);
            lease_ms
        };
        let storage = self.storage.clone();
        let ctx = OpCtx { creds, lease_ms };
        let srv = self.clone();
        let conn2 = conn.clone();
        let job = move || -> Result<Vec<u8>, NfsStatus> {
            let f = storage.open_read(&ctx, &hd)?;
            // Four bytes for the record header, then the reply payload, data last.
            let mut buf = Vec::with_capacity(4 + 160 + count + 16);
            buf.extend_from_slice(&[0; 4]);
            protocol::encode_read_reply_into(&mut buf, req_id, Some(&f.attr), |b| {
                crate::fs::local::read_into(&f.file, f.attr.size, offset, count, b)
            })
            .map_err(|e| NfsStatus::from_io_error(&e))?;
            Ok(buf)
        };
        let submitted = self.h.blocking(Color(id), job, move |res| {
            conn::complete_read(&srv, &conn2, req_id, res)
        });
        if submitted.is_err() {
            self.answer_busy(conn, id, req_id);
        }
    }

    /// Color 0: any other storage operation.
    pub fn dispatch(
        self: &Arc<Self>,
        conn: Arc<Mutex<Conn>>,
        id: ConnId,
        req_id: u64,
        creds: Creds,
        op: RequestOp,
    ) {
        let lease_ms = self.color0().leases.lease_ms();
        let storage = self.storage.clone();
        let ctx = OpCtx { creds, lease_ms };
        let srv = self.clone();
        let conn2 = conn.clone();
        let submitted = self.h.blocking(
            Color::DEFAULT,
            move || storage.execute(&ctx, op),
            move |outcome| {
                // Back in color 0: leases, then invalidations, then the reply in c.
                let mut invalidations = Vec::new();
                {
                    let mut c0 = srv.color0();
                    for (key, fh) in &outcome.leased {
                        c0.leases.grant(id, *key, *fh, lease_ms);
                    }
                    for (key, fh, attr) in &outcome.changed {
                        let (who, _) = c0.leases.changed(*key, id);
                        for other in who {
                            if let Some(target) = c0.conns.get(&other).and_then(Weak::upgrade) {
                                invalidations.push((other, target, *fh, *attr));
                            }
                        }
                    }
                }
                for (other, target, fh, attr) in invalidations {
                    let attr = attr.map(|a| Attr { lease_ms: 0, ..a });
                    let srv3 = srv.clone();
                    srv.h.cpucb(Color(other), move || {
                        conn::send_unsolicited(
                            &srv3,
                            &target,
                            &ServerMessage::Invalidate(Invalidate { fh, attr }),
                        )
                    });
                }
                let reply = Reply {
                    id: req_id,
                    result: outcome.result,
                };
                let srv2 = srv.clone();
                srv.h
                    .cpucb(Color(id), move || conn::complete(&srv2, &conn2, reply));
            },
        );
        if submitted.is_err() {
            self.answer_busy(conn, id, req_id);
        }
    }

    /// The helper pool is full: answer JUKEBOX ("try later") instead of queueing more.
    fn answer_busy(self: &Arc<Self>, conn: Arc<Mutex<Conn>>, id: ConnId, req_id: u64) {
        let srv = self.clone();
        self.h.cpucb(Color(id), move || {
            conn::complete(
                &srv,
                &conn,
                Reply {
                    id: req_id,
                    result: Err(NfsStatus::Jukebox),
                },
            )
        });
    }

    /// Color 0: a connection opened.
    pub fn register_conn(&self, id: ConnId, conn: &Arc<Mutex<Conn>>) {
        self.color0().conns.insert(id, Arc::downgrade(conn));
    }

    /// Color 0: a connection closed; its leases go.
    pub fn forget_conn(&self, id: ConnId) {
        let mut c0 = self.color0();
        c0.conns.remove(&id);
        c0.leases.drop_conn(id);
    }

    /// Color 0, periodically: reap expired leases.
    pub fn start_reaper(self: &Arc<Self>, every: Duration) {
        let srv = self.clone();
        self.h.delaycb(every, Color::DEFAULT, move || {
            let reaped = srv.color0().leases.reap();
            if reaped > 0 {
                tracing::debug!(reaped, "expired leases reaped");
            }
            if !srv.h.is_stopping() {
                srv.start_reaper(every);
            }
        });
    }

    pub fn lease_count(&self) -> usize {
        self.color0().leases.count()
    }

    pub fn drain_pending(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }
}
