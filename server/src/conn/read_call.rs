//! The connection's side of a READ ([`ReadingConn`] while its color runs, [`ReadLink`] when
//! the storage answers later): its cached descriptors and a sent reply's buffer (see
//! [`crate::read`]), and the way back to it.

use std::fs::File;
use std::sync::Arc;

use libcolor::{ColorCell, Handle};
use protocol::{NfsStatus, Reply};

use super::{Conn, ConnRef, complete_borrowed, finish_read, pump_borrowed};
use crate::fs::read_call::{PendingRead, ReadLink, ReadingConn};
use crate::read::ReplyRecord;
use crate::server::Server;

/// A connection answering a READ in its color.
pub(super) struct Reading<'a> {
    pub srv: &'a Arc<Server>,
    pub conn: &'a ConnRef,
    pub c: &'a mut Conn,
}

impl ReadingConn for Reading<'_> {
    fn cached_file(&mut self, read: &PendingRead) -> Option<Arc<File>> {
        if !self.c.phase.is_open() {
            return None;
        }
        self.c
            .reads
            .cached_file(read.authno, &read.handle, &self.srv.changes)
    }

    fn spare_buffer(&mut self) -> Vec<u8> {
        self.c.out.take_spare()
    }

    fn answer(&mut self, read: PendingRead, res: Result<ReplyRecord, NfsStatus>) {
        finish_read(self.srv, self.conn, self.c, &read, res);
    }

    fn answer_busy(&mut self, req_id: u64, reserved: usize) {
        let result = Err(NfsStatus::Jukebox);
        complete_borrowed(self.srv, self.c, reserved, Reply { id: req_id, result });
    }

    fn link(&self) -> (Arc<dyn ReadLink>, Handle) {
        (self.conn.clone(), self.srv.h.clone())
    }
}

/// A READ the storage answers later comes back here, in the connection's color.
impl ReadLink for ColorCell<Conn> {
    fn complete(
        self: Arc<Self>,
        read: PendingRead,
        res: Result<ReplyRecord, NfsStatus>,
        opened: Option<Arc<File>>,
    ) {
        self.with(|c| {
            let srv = c.srv.clone();
            if let Some(file) = opened
                && c.phase.is_open()
            {
                c.reads.remember_file(
                    read.authno,
                    &read.handle,
                    file,
                    read.epoch,
                    &srv.file_budget,
                );
            }
            finish_read(&srv, &self, c, &read, res);
            pump_borrowed(&srv, &self, c);
        })
    }
}
