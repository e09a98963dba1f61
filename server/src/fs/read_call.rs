//! A READ as the storage receives it ([`crate::fs::Storage::read`]): in the connection's
//! color, with what the connection keeps to answer it at once (its cached descriptors and a
//! sent reply's buffer, see [`crate::read`]), and the means to answer it later from any thread.
//!
//! The connection's side is reached through traits ([`ReadingConn`] while its color runs,
//! [`ReadLink`] later), implemented by the connection driver (`conn.rs`), so that storage does
//! not depend on it. Nothing here allocates or boxes: a READ answered at once borrows the
//! connection's side; one answered later carries its request and a reference to the
//! connection.

use std::fs::File;
use std::sync::Arc;

use libcolor::{Color, Handle};
use protocol::{FileHandle, HandleData, NfsStatus};

use super::{Busy, OpCtx, ReadArgs};
use crate::changes::Epoch;
use crate::ids::ConnId;
use crate::read::{LeaseChoice, ReplyRecord};
use crate::users::Creds;

/// A READ admitted on a connection, with everything needed to answer it wherever it is.
pub(crate) struct PendingRead {
    pub conn: ConnId,
    pub req_id: u64,
    /// Bytes of reply reserved against the connection's output limit.
    pub reserved: usize,
    pub creds: Creds,
    /// The authno the request came with (cached descriptors are per authno).
    pub authno: u32,
    pub fh: FileHandle,
    pub handle: HandleData,
    pub offset: u64,
    /// Already clamped to the client's and the server's limits.
    pub count: usize,
    /// The lease the reply carries.
    pub lease: LeaseChoice,
    /// The change log when the read started.
    pub epoch: Epoch,
}

/// The connection's side of a READ while its color runs.
pub(crate) trait ReadingConn {
    /// The descriptor this connection cached for this user and object, if it may still serve.
    fn cached_file(&mut self, read: &PendingRead) -> Option<Arc<File>>;
    /// A sent reply's buffer to build the reply record in (empty if there is none).
    fn spare_buffer(&mut self) -> Vec<u8>;
    /// Answers now: seals the record in place and queues it.
    fn answer(&mut self, read: PendingRead, res: Result<ReplyRecord, NfsStatus>);
    /// Answers JUKEBOX ("try later") now: the backend had no room for the READ.
    fn answer_busy(&mut self, req_id: u64, reserved: usize);
    /// The connection, to answer later, and the runtime to get back to its color with.
    fn link(&self) -> (Arc<dyn ReadLink>, Handle);
}

/// The connection's side of a READ answered later ([`ReadReply`]).
pub(crate) trait ReadLink: Send + Sync {
    /// In the connection's color: answers `read` with `res`, caching `opened`.
    fn complete(
        self: Arc<Self>,
        read: PendingRead,
        res: Result<ReplyRecord, NfsStatus>,
        opened: Option<Arc<File>>,
    );
}

/// A READ being answered, borrowed from its connection (its color is running).
pub(crate) struct ReadCall<'a> {
    conn: &'a mut dyn ReadingConn,
    read: PendingRead,
}

impl<'a> ReadCall<'a> {
    pub(crate) fn new(conn: &'a mut dyn ReadingConn, read: PendingRead) -> Self {
        ReadCall { conn, read }
    }

    /// What the READ asks.
    pub(crate) fn args(&self) -> ReadArgs {
        ReadArgs {
            hd: self.read.handle,
            offset: self.read.offset,
            count: self.read.count,
            req_id: self.read.req_id,
        }
    }

    /// The credentials and lease the read runs with (the lease its reply carries).
    pub(crate) fn ctx(&self) -> OpCtx {
        OpCtx {
            creds: self.read.creds.clone(),
            lease_ms: self.read.lease.ms,
            conn: self.read.conn,
        }
    }

    /// The lease the reply carries.
    pub(crate) fn lease_ms(&self) -> u32 {
        self.read.lease.ms
    }

    /// The connection the READ came on.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.read.conn
    }

    /// The connection's color, where the reply is sealed.
    pub(crate) fn color(&self) -> Color {
        Color(self.read.conn)
    }

    /// The descriptor this connection cached for this user and object, if it may still serve
    /// (see [`crate::read::ReadState::cached_file`]).
    pub(crate) fn cached_file(&mut self) -> Option<Arc<File>> {
        self.conn.cached_file(&self.read)
    }

    /// A sent reply's buffer to build the reply record in (empty if there is none).
    pub(crate) fn spare_buffer(&mut self) -> Vec<u8> {
        self.conn.spare_buffer()
    }

    /// Answers now, in the connection's color: seals the record in place and queues it.
    pub(crate) fn answer(self, res: Result<ReplyRecord, NfsStatus>) {
        self.conn.answer(self.read, res);
    }

    /// Detaches the READ from the connection for `submit` to answer later through the
    /// [`ReadReply`] it is given. `Err(Busy)` from `submit`: the backend has no room, and the
    /// READ is answered JUKEBOX ("try later") here and now.
    pub(crate) fn later(self, submit: impl FnOnce(ReadReply) -> Result<(), Busy>) {
        let ReadCall { conn, read } = self;
        let (req_id, reserved) = (read.req_id, read.reserved);
        let (link, h) = conn.link();
        if submit(ReadReply { link, h, read }).is_err() {
            conn.answer_busy(req_id, reserved);
        }
    }
}

/// A READ detached from its connection ([`ReadCall::later`]), to be answered once.
pub(crate) struct ReadReply {
    link: Arc<dyn ReadLink>,
    h: Handle,
    read: PendingRead,
}

impl ReadReply {
    /// In the connection's color ([`ReadCall::color`]): answers with `res`; `opened`, a
    /// descriptor the backend opened for this user and object, is cached for the next READs.
    pub(crate) fn complete(self, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        self.link.complete(self.read, res, opened);
    }

    /// From any thread: [`ReadReply::complete`] in the connection's color.
    pub(crate) fn send(self, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        let ReadReply { link, h, read } = self;
        h.cpucb(Color(read.conn), move || link.complete(read, res, opened));
    }
}
