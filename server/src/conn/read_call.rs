//! The connection's side of a READ ([`ReadingConn`], [`DetachedRead`]): what the connection
//! keeps to answer it at once (its cached descriptors and a sent reply's buffer, see
//! [`crate::read`]), and what it hands the storage to answer it later from any thread.

use std::fs::File;
use std::sync::Arc;

use libcolor::Color;
use protocol::{NfsStatus, Reply};

use super::{Conn, ConnRef, ReadRequest, complete_borrowed, finish_read, pump_borrowed};
use crate::changes::Epoch;
use crate::fs::read_call::{DetachedRead, ReadReply, ReadingConn};
use crate::fs::{OpCtx, ReadArgs};
use crate::leases::ConnId;
use crate::read::{LeaseChoice, ReplyRecord};
use crate::server::{InFlight, Server};

/// A READ in flight, whichever side answers it.
pub(super) struct ReadJob {
    pub d: InFlight,
    pub r: ReadRequest,
    pub lease: LeaseChoice,
    /// The change log when the read started.
    pub epoch: Epoch,
}

/// A READ being answered, borrowed from its connection (its color is running).
pub(super) struct Reading<'a> {
    pub srv: &'a Arc<Server>,
    pub conn: &'a ConnRef,
    pub c: &'a mut Conn,
    /// Taken when the READ is detached ([`ReadingConn::detach`]); every other call comes
    /// before that ([`crate::fs::ReadCall`] answers once).
    pub job: Option<ReadJob>,
    /// The detached READ's id and reservation, to answer it here if the backend has no room.
    pub detached: Option<(u64, usize)>,
}

impl Reading<'_> {
    fn job(&self) -> &ReadJob {
        self.job.as_ref().expect("a READ is answered once")
    }
}

impl ReadingConn for Reading<'_> {
    fn args(&self) -> ReadArgs {
        let j = self.job();
        ReadArgs {
            hd: j.r.handle,
            offset: j.r.offset,
            count: j.r.count,
            req_id: j.d.req_id,
        }
    }

    fn ctx(&self) -> OpCtx {
        let j = self.job();
        OpCtx {
            creds: j.d.creds.clone(),
            lease_ms: j.lease.ms,
            conn: j.d.id,
        }
    }

    fn lease_ms(&self) -> u32 {
        self.job().lease.ms
    }

    fn conn_id(&self) -> ConnId {
        self.c.id
    }

    fn cached_file(&mut self) -> Option<Arc<File>> {
        if !self.c.phase.is_open() {
            return None;
        }
        let j = self.job.as_ref()?;
        self.c
            .reads
            .cached_file(j.r.authno, &j.r.handle, &self.srv.changes)
    }

    fn spare_buffer(&mut self) -> Vec<u8> {
        self.c.out.take_spare()
    }

    fn answer(&mut self, res: Result<ReplyRecord, NfsStatus>) {
        if let Some(j) = self.job.take() {
            finish_read(self.srv, self.conn, self.c, &j, res);
        }
    }

    fn detach(&mut self) -> ReadReply {
        let job = self.job.take().expect("a READ is answered once");
        self.detached = Some((job.d.req_id, job.d.reserved));
        ReadReply::new(Box::new(Detached {
            srv: self.srv.clone(),
            conn: self.conn.clone(),
            job,
        }))
    }

    fn answer_busy(&mut self) {
        // The job went with the reply, which the backend dropped.
        let Some((req_id, reserved)) = self.detached.take() else {
            return;
        };
        let result = Err(NfsStatus::Jukebox);
        complete_borrowed(self.srv, self.c, reserved, Reply { id: req_id, result });
    }
}

/// A READ detached from its connection ([`crate::fs::ReadCall::later`]).
struct Detached {
    srv: Arc<Server>,
    conn: ConnRef,
    job: ReadJob,
}

impl DetachedRead for Detached {
    fn complete(self: Box<Self>, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        let Detached { srv, conn, job } = *self;
        conn.with(|c| {
            if let Some(file) = opened
                && c.phase.is_open()
            {
                c.reads.remember_file(
                    job.r.authno,
                    &job.r.handle,
                    file,
                    job.epoch,
                    &srv.file_budget,
                );
            }
            finish_read(&srv, &conn, c, &job, res);
            pump_borrowed(&srv, &conn, c);
        })
    }

    fn send(self: Box<Self>, res: Result<ReplyRecord, NfsStatus>, opened: Option<Arc<File>>) {
        let (srv, color) = (self.srv.clone(), Color(self.job.d.id));
        srv.h.cpucb(color, move || self.complete(res, opened));
    }
}
