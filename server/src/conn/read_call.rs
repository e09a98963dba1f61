//! A READ as the storage receives it ([`crate::fs::Storage::read`]): in the connection's
//! color, with what the connection keeps to answer it at once (its cached descriptors and a
//! sent reply's buffer, see [`crate::read`]), and the means to answer it later from any thread.
//! Nothing here allocates or boxes: a READ the backend answers at once costs what it cost
//! before there was a trait.

use std::fs::File;
use std::sync::Arc;

use libcolor::Color;
use protocol::{NfsStatus, Reply};

use super::{Conn, ReadRequest, complete_borrowed, finish_read, pump_borrowed};
use crate::changes::Epoch;
use crate::fs::{Busy, OpCtx, ReadArgs};
use crate::read::{LeaseChoice, ReplyRecord};
use crate::server::{InFlight, Server};

/// A READ being answered, borrowed from its connection (its color is running).
pub(crate) struct ReadCall<'a> {
    pub(super) srv: &'a Arc<Server>,
    pub(super) c: &'a mut Conn,
    pub(super) d: InFlight,
    pub(super) r: ReadRequest,
    pub(super) lease: LeaseChoice,
    /// The change log when the read started.
    pub(super) epoch: Epoch,
}

impl ReadCall<'_> {
    /// What the READ asks.
    pub(crate) fn args(&self) -> ReadArgs {
        ReadArgs {
            hd: self.r.handle,
            offset: self.r.offset,
            count: self.r.count,
            req_id: self.d.req_id,
        }
    }

    /// The credentials and lease the read runs with (the lease its reply carries).
    pub(crate) fn ctx(&self) -> OpCtx {
        OpCtx {
            creds: self.d.creds.clone(),
            lease_ms: self.lease.ms,
            conn: self.d.id,
        }
    }

    /// The lease the reply carries.
    pub(crate) fn lease_ms(&self) -> u32 {
        self.lease.ms
    }

    /// The connection the READ came on.
    pub(crate) fn conn_id(&self) -> crate::leases::ConnId {
        self.d.id
    }

    /// The connection's color, where the reply is sealed.
    pub(crate) fn color(&self) -> Color {
        Color(self.d.id)
    }

    /// The descriptor this connection cached for this user and object, if it may still serve
    /// (see [`crate::read::ReadState::cached_file`]).
    pub(crate) fn cached_file(&mut self) -> Option<Arc<File>> {
        if !self.c.phase.is_open() {
            return None;
        }
        self.c
            .reads
            .cached_file(self.r.authno, &self.r.handle, &self.srv.changes)
    }

    /// A sent reply's buffer to build the reply record in (empty if there is none).
    pub(crate) fn spare_buffer(&mut self) -> Vec<u8> {
        self.c.out.take_spare()
    }

    /// Answers now, in the connection's color: seals the record in place and queues it.
    pub(crate) fn answer(self, res: Result<ReplyRecord, NfsStatus>) {
        finish_read(
            self.srv, self.c, &self.d, &self.r, self.lease, self.epoch, res,
        );
    }

    /// Detaches the READ from the connection for `submit` to answer later through the
    /// [`ReadReply`] it is given. `Err(Busy)` from `submit`: the backend has no room, and the
    /// READ is answered JUKEBOX ("try later") here and now.
    pub(crate) fn later(self, submit: impl FnOnce(ReadReply) -> Result<(), Busy>) {
        let ReadCall {
            srv,
            c,
            d,
            r,
            lease,
            epoch,
        } = self;
        let (req_id, reserved) = (d.req_id, d.reserved);
        let reply = ReadReply {
            srv: srv.clone(),
            d,
            r,
            lease,
            epoch,
        };
        if submit(reply).is_err() {
            let result = Err(NfsStatus::Jukebox);
            complete_borrowed(srv, c, reserved, Reply { id: req_id, result });
        }
    }
}

/// A READ detached from its connection ([`ReadCall::later`]), to be answered once.
pub(crate) struct ReadReply {
    srv: Arc<Server>,
    d: InFlight,
    r: ReadRequest,
    lease: LeaseChoice,
    epoch: Epoch,
}

impl ReadReply {
    /// In the connection's color ([`ReadCall::color`]): answers with `res`; `opened`, a
    /// descriptor the backend opened for this user and object, is cached for the next READs.
    pub(crate) fn complete(self, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        let ReadReply {
            srv,
            d,
            r,
            lease,
            epoch,
        } = self;
        let conn = d.conn.clone();
        conn.with(|c| {
            if let Some(file) = opened
                && c.phase.is_open()
            {
                c.reads
                    .remember_file(r.authno, &r.handle, file, epoch, &srv.file_budget);
            }
            finish_read(&srv, c, &d, &r, lease, epoch, res);
            pump_borrowed(&srv, &conn, c);
        })
    }

    /// From any thread: [`ReadReply::complete`] in the connection's color.
    pub(crate) fn send(self, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        let (srv, color) = (self.srv.clone(), Color(self.d.id));
        srv.h.cpucb(color, move || self.complete(res, opened));
    }
}
