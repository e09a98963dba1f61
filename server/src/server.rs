//! The shared server state and the color-0 bookkeeping.
//!
//! ```text
//! READ:   conn color c: read, open record, decode, auth, verify handle
//!           --cpucb--> color 0: grant lease --cpucb--> c: submit to helper pool
//!           --helper: open, check permission, pread straight into the record buffer--> c: seal
//!           in place, write when writable
//! others: c: decode, auth, submit to helper pool --helper: the file operation--> color 0:
//!           record leases, send INVALIDATEs to other holders --cpucb--> c: seal, write
//! ```
//! Only the short bookkeeping (lease table, connection registry) runs in color 0; sealing,
//! opening and copying file data run in connection colors or on helper threads. Submissions
//! to the helper pool are made from connection colors, never color 0 (see `dispatch_read`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
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
    /// The lease color 0 currently grants (milliseconds; 0 when the table is full), readable
    /// from any color.
    pub lease_ms_now: AtomicU32,
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
    #[allow(clippy::too_many_arguments)]
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
        // Submitting to the helper pool wakes a helper thread, and on a busy machine the
        // kernel often runs the woken thread at once on the waker's CPU: that time would be
        // charged to the submitting callback. Submit from the connection's color, so color 0
        // only pays for the lease bookkeeping and one cpucb.
        self.h.cpucb(Color(id), move || {
            let srv3 = srv.clone();
            let submitted = srv.h.blocking(Color(id), job, move |res| {
                conn::complete_read(&srv3, &conn2, req_id, res)
            });
            if submitted.is_err() {
                srv.answer_busy(conn, id, req_id);
            }
        });
    }

    /// Connection color: any other storage operation goes straight to the helper pool (see
    /// `dispatch_read` for why not from color 0); its completion runs in color 0, which owns
    /// the lease table, then the reply goes back to the connection's color.
    pub fn dispatch(
        self: &Arc<Self>,
        conn: Arc<Mutex<Conn>>,
        id: ConnId,
        req_id: u64,
        creds: Creds,
        op: RequestOp,
    ) {
        // Published by color 0 whenever the table changes (0 when it is full).
        let lease_ms = self.lease_ms_now.load(Ordering::Relaxed);
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
                    srv.lease_ms_now
                        .store(c0.leases.lease_ms(), Ordering::Relaxed);
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
        self.lease_ms_now
            .store(c0.leases.lease_ms(), Ordering::Relaxed);
    }

    /// Color 0, periodically: reap expired leases.
    pub fn start_reaper(self: &Arc<Self>, every: Duration) {
        let srv = self.clone();
        self.h.delaycb(every, Color::DEFAULT, move || {
            let reaped = {
                let mut c0 = srv.color0();
                let reaped = c0.leases.reap();
                srv.lease_ms_now
                    .store(c0.leases.lease_ms(), Ordering::Relaxed);
                reaped
            };
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
