//! An in-process simulator of sfsd (the `testing` feature), after quinn-proto's `Pair`: client
//! connections ([`ClientConnection`]) and server connections ([`ServerConnection`]) joined by
//! byte pipes in memory, color 0's real bookkeeping (`color0::Bookkeeping`), the READ
//! path's real lease choice (`read::ReadState`) and change log, files in memory, and
//! virtual time: a base [`Instant`] plus an offset the test advances.
//!
//! Everything the real runtime does asynchronously is a [`Delivery`] waiting in one queue:
//! bytes on a socket in either direction, a finished request's hop to color 0, a READ's lease
//! hop to color 0, an INVALIDATE's or a reply's hop from color 0 to the connection's color.
//! [`Sim::step`] performs the oldest, [`Sim::deliver`] the one the test names (so it can hold
//! a reply and let color 0's INVALIDATE go first), [`Sim::drive`] all until quiet. Deliveries
//! of one kind to one connection keep their order, as a socket and libcolor's per-color queue
//! do; between kinds and connections any order the test picks is one the runtime can produce.
//!
//! What is modelled rather than reused, because it is the libcolor driver (`conn.rs`,
//! `server.rs`'s executor): the connection driver's handling of a request (its lease offer, the
//! READ answered in the connection's color then its lease sent to color 0, other requests
//! answered by storage at once then finished in color 0), and identity: LOGIN is not run, every
//! request of connection `n` runs as uid `1000 + n`. The handshake runs in full when a client
//! connects. Only GETATTR, READ, WRITE and APPEND are served.

mod storage;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use protocol::server::{Event, ServerConnection};
use protocol::{
    ClientConnection, ClientHandshake, FileHandle, HandshakeConfig, Invalidate, NfsStatus, Reply,
    Request, RequestOp, ServerKeypair, ServerMessage,
};

use crate::changes::{Changes, Epoch};
use crate::color0::{Bookkeeping, Changed, Invalidation};
use crate::fs::{ObjKey, Outcome};
use crate::leases::{Holder, Leases, Principal, Shares};
use crate::read::ReadState;
use crate::startups::Startups;
use crate::users::Creds;
use storage::MemStorage;

/// A connection's number (its color in the real server; numbered from 1).
pub type ConnId = u32;

/// What the simulated server is configured with.
#[derive(Debug, Clone, Copy)]
pub struct SimConfig {
    /// The lease granted (`--lease`).
    pub lease: Duration,
    /// Leases in the whole table (`--max-leases`).
    pub max_leases: usize,
    /// Leases per connection (`--max-leases-per-conn`).
    pub max_leases_per_conn: usize,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            lease: Duration::from_secs(10),
            max_leases: 1024,
            max_leases_per_conn: 64,
        }
    }
}

/// One thing the runtime would do next. Its payload stays in the simulator; the test sees
/// and names the kind and the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Bytes the client wrote reach its server connection, which handles the requests in
    /// them in its color.
    ToServer(ConnId),
    /// A request other than READ, done by storage, reaches color 0 (leases, INVALIDATEs).
    Finished(ConnId),
    /// The lease a READ reply announced reaches color 0, after the reply was queued.
    ReadLease(ConnId),
    /// An INVALIDATE from color 0 reaches the connection's color, which seals and sends it.
    Invalidate(ConnId),
    /// A reply from color 0 reaches the connection's color, which seals and sends it.
    Reply(ConnId),
    /// Bytes the server wrote reach the client.
    ToClient(ConnId),
    /// A closed connection's news reaches color 0, which forgets it and its leases.
    Forget(ConnId),
}

enum Payload {
    Bytes(Vec<u8>),
    Finished {
        holder: Holder,
        req_id: u64,
        lease_ms: u32,
        outcome: Outcome,
    },
    ReadLease {
        holder: Holder,
        key: ObjKey,
        fh: FileHandle,
        lease_ms: u32,
        epoch: Epoch,
    },
    Invalidate(Invalidation),
    Reply(Reply),
    Forget,
}

struct Pending {
    what: Delivery,
    payload: Payload,
}

/// The server's end of one connection, as its color holds it.
struct ServerSide {
    sc: ServerConnection<Creds>,
    reads: ReadState,
    lease_capped: Arc<AtomicBool>,
    open: bool,
}

/// The client's end: its protocol state and the messages it has received, in order.
struct ClientSide {
    cc: ClientConnection,
    received: Vec<ServerMessage>,
}

/// The simulated server and its clients.
pub struct Sim {
    base: Instant,
    offset: Duration,
    keypair: ServerKeypair,
    color0: Bookkeeping<()>,
    changes: Arc<Changes>,
    storage: MemStorage,
    servers: HashMap<ConnId, ServerSide>,
    clients: HashMap<ConnId, ClientSide>,
    queue: VecDeque<Pending>,
    next_conn: ConnId,
}

impl Sim {
    pub fn new(config: SimConfig) -> Sim {
        let changes = Arc::new(Changes::new());
        let leases = Leases::new(
            config.lease,
            config.max_leases,
            Shares::new(config.max_leases, config.max_leases_per_conn),
        );
        Sim {
            base: Instant::now(),
            offset: Duration::ZERO,
            keypair: ServerKeypair::generate(),
            color0: Bookkeeping::new(leases, Startups::new(64, 16), changes.clone()),
            changes,
            storage: MemStorage::default(),
            servers: HashMap::new(),
            clients: HashMap::new(),
            queue: VecDeque::new(),
            next_conn: 1,
        }
    }

    /// Virtual now.
    pub fn now(&self) -> Instant {
        self.base + self.offset
    }

    /// Virtual time passes (nothing is delivered meanwhile).
    pub fn advance(&mut self, by: Duration) {
        self.offset += by;
    }

    /// A regular file holding `data`.
    pub fn create_file(&mut self, data: &[u8]) -> FileHandle {
        self.storage.create(data)
    }

    /// A client connects: the handshake runs to its end, color 0 registers the connection
    /// (from its own address) and it logs in.
    pub fn connect(&mut self) -> ConnId {
        let id = self.next_conn;
        self.next_conn += 1;
        let name = self
            .keypair
            .server_name("localhost".parse().expect("a host"));
        let mut client = ClientHandshake::with_config(&name, HandshakeConfig::default());
        let mut sc =
            ServerConnection::new(&self.keypair, HandshakeConfig::default(), name.host_id());
        while !client.is_done() {
            client
                .receive(&sc.take_output())
                .expect("the simulated handshake succeeds");
            sc.receive(&client.take_output());
            if let Some(e @ (Event::Login { .. } | Event::Request { .. } | Event::Close(_))) =
                sc.next_event(usize::MAX, Vec::new)
            {
                panic!("{e:?} during the handshake");
            }
        }
        let session = client.into_session().expect("a session");
        let cc = ClientConnection::new(session, name.host_id(), &[]);
        let lease_capped = Arc::new(AtomicBool::new(false));
        let peer = IpAddr::from([10, 0, (id >> 8) as u8, id as u8]);
        let dropped = self.color0.opened(id, (), lease_capped.clone(), peer);
        assert!(
            dropped.is_none(),
            "the simulator has room for its connections"
        );
        self.color0.handshake_done(id);
        self.color0.logged_in(id);
        let server = ServerSide {
            sc,
            reads: ReadState::default(),
            lease_capped,
            open: true,
        };
        self.servers.insert(id, server);
        self.clients.insert(
            id,
            ClientSide {
                cc,
                received: Vec::new(),
            },
        );
        id
    }

    /// Connection `conn` closes in its color; color 0 learns it later ([`Delivery::Forget`]).
    /// What is still on its way to the connection is dropped when it arrives.
    pub fn close(&mut self, conn: ConnId) {
        if let Some(s) = self.servers.get_mut(&conn) {
            s.open = false;
            s.reads = ReadState::default();
        }
        self.push(Delivery::Forget(conn), Payload::Forget);
    }

    /// The client of `conn` sends `op`; returns the request's id. Nothing is delivered yet.
    pub fn send(&mut self, conn: ConnId, op: RequestOp) -> u64 {
        let client = self.clients.get_mut(&conn).expect("a connected client");
        let mut wire = Vec::new();
        let id = client
            .cc
            .requests
            .send(0, op, &mut wire)
            .expect("the request seals");
        self.push(Delivery::ToServer(conn), Payload::Bytes(wire));
        id
    }

    /// What is waiting to be delivered, oldest first.
    pub fn pending(&self) -> Vec<Delivery> {
        self.queue.iter().map(|p| p.what).collect()
    }

    /// Performs the oldest delivery; returns it, or None when there is nothing to do.
    pub fn step(&mut self) -> Option<Delivery> {
        let p = self.queue.pop_front()?;
        let what = p.what;
        self.perform(p);
        Some(what)
    }

    /// Performs the oldest delivery of kind and connection `what`. Panics if there is none:
    /// the interleaving the test asked for cannot happen.
    pub fn deliver(&mut self, what: Delivery) {
        let i = self
            .queue
            .iter()
            .position(|p| p.what == what)
            .unwrap_or_else(|| panic!("no {what:?} pending: {:?}", self.pending()));
        let p = self.queue.remove(i).expect("a position in the queue");
        self.perform(p);
    }

    /// Performs deliveries, oldest first, until none is left.
    pub fn drive(&mut self) {
        while self.step().is_some() {}
    }

    /// The reaper's tick at virtual now; returns how many leases it dropped.
    pub fn reap(&mut self) -> usize {
        self.color0.reap(self.now())
    }

    /// Whether color 0 has told `conn` it can be granted no lease.
    pub fn lease_capped(&self, conn: ConnId) -> bool {
        self.servers
            .get(&conn)
            .is_some_and(|s| s.lease_capped.load(Ordering::Relaxed))
    }

    /// Every message the client of `conn` has received so far, in order (taken).
    pub fn received(&mut self, conn: ConnId) -> Vec<ServerMessage> {
        self.clients
            .get_mut(&conn)
            .map(|c| std::mem::take(&mut c.received))
            .unwrap_or_default()
    }

    fn push(&mut self, what: Delivery, payload: Payload) {
        self.queue.push_back(Pending { what, payload });
    }

    fn perform(&mut self, p: Pending) {
        let conn = match p.what {
            Delivery::ToServer(c)
            | Delivery::Finished(c)
            | Delivery::ReadLease(c)
            | Delivery::Invalidate(c)
            | Delivery::Reply(c)
            | Delivery::ToClient(c)
            | Delivery::Forget(c) => c,
        };
        let now = self.now();
        match p.payload {
            Payload::Bytes(bytes) if matches!(p.what, Delivery::ToServer(_)) => {
                self.server_reads(conn, &bytes)
            }
            Payload::Bytes(bytes) => self.client_reads(conn, &bytes),
            Payload::Finished {
                holder,
                req_id,
                lease_ms,
                outcome,
            } => {
                // Color 0, as `Server::finish`: INVALIDATEs go out before the reply.
                let mut result = outcome.result;
                let told = self.color0.request_finished(
                    now,
                    holder,
                    lease_ms,
                    &mut result,
                    &outcome.leased,
                    Changed {
                        objects: &outcome.changed,
                        named: None,
                    },
                );
                self.queue_invalidations(told);
                let reply = Reply { id: req_id, result };
                self.push(Delivery::Reply(conn), Payload::Reply(reply));
            }
            Payload::ReadLease {
                holder,
                key,
                fh,
                lease_ms,
                epoch,
            } => {
                let revoked = self
                    .color0
                    .record_read_lease(now, holder, key, fh, lease_ms, epoch);
                self.queue_invalidations(revoked);
            }
            Payload::Invalidate(inv) => {
                // The connection's color, as `send_unsolicited`: its held lease ends.
                if let Some(s) = self.servers.get_mut(&conn).filter(|s| s.open) {
                    s.reads.lease_ended(&inv.fh);
                }
                let msg = ServerMessage::Invalidate(Invalidate {
                    fh: inv.fh,
                    attr: inv.attr,
                });
                self.server_sends(conn, &msg);
            }
            Payload::Reply(reply) => self.server_sends(conn, &ServerMessage::Reply(reply)),
            Payload::Forget => self.color0.closed(conn),
        }
    }

    fn queue_invalidations(&mut self, told: impl IntoIterator<Item = Invalidation>) {
        for inv in told {
            self.push(Delivery::Invalidate(inv.conn), Payload::Invalidate(inv));
        }
    }

    /// The connection's color seals `msg` and writes it to the socket.
    fn server_sends(&mut self, conn: ConnId, msg: &ServerMessage) {
        let Some(s) = self.servers.get_mut(&conn).filter(|s| s.open) else {
            return;
        };
        let mut wire = Vec::new();
        if s.sc.seal(msg, &mut wire).expect("the message seals") {
            self.push(Delivery::ToClient(conn), Payload::Bytes(wire));
        }
    }

    fn client_reads(&mut self, conn: ConnId, bytes: &[u8]) {
        let client = self.clients.get_mut(&conn).expect("a connected client");
        client.cc.messages.extend_from_slice(bytes);
        while let Some(msg) = client
            .cc
            .messages
            .next_message()
            .expect("the server's records open")
        {
            client.received.push(msg);
        }
    }

    /// The connection's color reads `bytes` and handles every request in them.
    fn server_reads(&mut self, conn: ConnId, bytes: &[u8]) {
        let Some(s) = self.servers.get_mut(&conn).filter(|s| s.open) else {
            return;
        };
        s.sc.receive(bytes);
        while let Some(event) = self
            .servers
            .get_mut(&conn)
            .and_then(|s| s.sc.next_event(usize::MAX, Vec::new))
        {
            match event {
                Event::Request { request, .. } => self.handle(conn, request),
                e => panic!("the simulator does not handle {e:?}"),
            }
        }
    }

    /// A request in its connection's color, as `conn.rs` handles it: the lease offered is
    /// color 0's, or 0 while the connection holds its share.
    fn handle(&mut self, conn: ConnId, request: Request) {
        let Request { id, op, .. } = request;
        let holder = Holder {
            conn,
            who: Principal::User(1000 + conn),
        };
        let capped = self.lease_capped(conn);
        let lease_ms = if capped { 0 } else { self.color0.lease_ms() };
        match op {
            RequestOp::Read { fh, offset, count } => {
                self.read(holder, id, fh, offset, count, lease_ms)
            }
            op => {
                let outcome = self.storage.execute(op, lease_ms);
                let payload = Payload::Finished {
                    holder,
                    req_id: id,
                    lease_ms,
                    outcome,
                };
                self.push(Delivery::Finished(conn), payload);
            }
        }
    }

    /// The READ path in the connection's color (as `conn.rs`'s `start_read`/`finish_read`):
    /// the lease is a held one's remainder or the offer, the reply goes out, then color 0
    /// records an offered lease.
    fn read(
        &mut self,
        holder: Holder,
        req_id: u64,
        fh: FileHandle,
        offset: u64,
        count: u32,
        offered_ms: u32,
    ) {
        let now = self.now();
        let conn = holder.conn;
        let Some(key) = self.storage.key(&fh) else {
            let reply = Reply {
                id: req_id,
                result: Err(NfsStatus::Stale),
            };
            return self.server_sends(conn, &ServerMessage::Reply(reply));
        };
        let epoch = self.changes.now();
        let Some(s) = self.servers.get_mut(&conn) else {
            return;
        };
        let lease = s.reads.lease_for(now, &fh, key, offered_ms, &self.changes);
        let result = self.storage.read(&fh, offset, count, lease.ms);
        if lease.record {
            s.reads.lease_announced(now, fh, lease.ms, epoch);
        }
        let reply = Reply { id: req_id, result };
        self.server_sends(conn, &ServerMessage::Reply(reply));
        if lease.record {
            let payload = Payload::ReadLease {
                holder,
                key,
                fh,
                lease_ms: lease.ms,
                epoch,
            };
            self.push(Delivery::ReadLease(conn), payload);
        }
    }
}
