//! A READ as the storage receives it ([`crate::fs::Storage::read`]): in the connection's
//! color, with what the connection keeps to answer it at once (its cached descriptors and a
//! sent reply's buffer, see [`crate::read`]), and the means to answer it later from any thread.
//!
//! The connection's side is a trait ([`ReadingConn`], implemented by the connection driver, `conn.rs`) so that
//! storage does not depend on the connection's driver. A READ answered at once costs no
//! allocation (the call borrows the connection's side); one answered later boxes its detached
//! side once ([`ReadReply`]), next to the storage thread's job or the RPC it waits for.

use std::fs::File;
use std::sync::Arc;

use libcolor::Color;
use protocol::NfsStatus;

use super::{Busy, OpCtx, ReadArgs};
use crate::leases::ConnId;
use crate::read::ReplyRecord;

/// The connection's side of a READ being answered, in the connection's color. [`ReadCall`]
/// calls exactly one of [`ReadingConn::answer`], [`ReadingConn::detach`] (then, if the backend
/// has no room, [`ReadingConn::answer_busy`]).
pub(crate) trait ReadingConn {
    /// What the READ asks.
    fn args(&self) -> ReadArgs;
    /// The credentials and lease the read runs with.
    fn ctx(&self) -> OpCtx;
    /// The lease the reply carries.
    fn lease_ms(&self) -> u32;
    /// The connection the READ came on.
    fn conn_id(&self) -> ConnId;
    /// The descriptor this connection cached for this user and object, if it may still serve.
    fn cached_file(&mut self) -> Option<Arc<File>>;
    /// A sent reply's buffer to build the reply record in (empty if there is none).
    fn spare_buffer(&mut self) -> Vec<u8>;
    /// Answers now: seals the record in place and queues it.
    fn answer(&mut self, res: Result<ReplyRecord, NfsStatus>);
    /// The READ, detached from the connection, to be answered later.
    fn detach(&mut self) -> ReadReply;
    /// The detached READ found no room in the backend: answer JUKEBOX ("try later") now.
    fn answer_busy(&mut self);
}

/// The connection's side of a READ answered later ([`ReadReply`]).
pub(crate) trait DetachedRead: Send {
    /// In the connection's color: answers with `res`, caching `opened`.
    fn complete(self: Box<Self>, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>);
    /// From any thread: [`DetachedRead::complete`] in the connection's color.
    fn send(self: Box<Self>, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>);
}

/// A READ being answered, borrowed from its connection (its color is running).
pub(crate) struct ReadCall<'a> {
    conn: &'a mut dyn ReadingConn,
}

impl<'a> ReadCall<'a> {
    pub(crate) fn new(conn: &'a mut dyn ReadingConn) -> Self {
        ReadCall { conn }
    }

    /// What the READ asks.
    pub(crate) fn args(&self) -> ReadArgs {
        self.conn.args()
    }

    /// The credentials and lease the read runs with (the lease its reply carries).
    pub(crate) fn ctx(&self) -> OpCtx {
        self.conn.ctx()
    }

    /// The lease the reply carries.
    pub(crate) fn lease_ms(&self) -> u32 {
        self.conn.lease_ms()
    }

    /// The connection the READ came on.
    pub(crate) fn conn_id(&self) -> ConnId {
        self.conn.conn_id()
    }

    /// The connection's color, where the reply is sealed.
    pub(crate) fn color(&self) -> Color {
        Color(self.conn.conn_id())
    }

    /// The descriptor this connection cached for this user and object, if it may still serve
    /// (see [`crate::read::ReadState::cached_file`]).
    pub(crate) fn cached_file(&mut self) -> Option<Arc<File>> {
        self.conn.cached_file()
    }

    /// A sent reply's buffer to build the reply record in (empty if there is none).
    pub(crate) fn spare_buffer(&mut self) -> Vec<u8> {
        self.conn.spare_buffer()
    }

    /// Answers now, in the connection's color: seals the record in place and queues it.
    pub(crate) fn answer(self, res: Result<ReplyRecord, NfsStatus>) {
        self.conn.answer(res);
    }

    /// Detaches the READ from the connection for `submit` to answer later through the
    /// [`ReadReply`] it is given. `Err(Busy)` from `submit`: the backend has no room, and the
    /// READ is answered JUKEBOX ("try later") here and now.
    pub(crate) fn later(self, submit: impl FnOnce(ReadReply) -> Result<(), Busy>) {
        let reply = self.conn.detach();
        if submit(reply).is_err() {
            self.conn.answer_busy();
        }
    }
}

/// A READ detached from its connection ([`ReadCall::later`]), to be answered once.
pub(crate) struct ReadReply(Box<dyn DetachedRead>);

impl ReadReply {
    pub(crate) fn new(detached: Box<dyn DetachedRead>) -> Self {
        ReadReply(detached)
    }

    /// In the connection's color ([`ReadCall::color`]): answers with `res`; `opened`, a
    /// descriptor the backend opened for this user and object, is cached for the next READs.
    pub(crate) fn complete(self, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        self.0.complete(res, opened);
    }

    /// From any thread: [`ReadReply::complete`] in the connection's color.
    pub(crate) fn send(self, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        self.0.send(res, opened);
    }
}
