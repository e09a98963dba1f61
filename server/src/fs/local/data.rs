//! Operations on file data: WRITE, COMMIT, and the READ data path ([`read_into`]; READ itself
//! is opened by `Storage::open_read` and run by the server, not dispatched here).
//!
//! Data is only ever reached by re-opening a checked `O_PATH` descriptor
//! ([`super::resolve::Obj::reopen`]), never by name.

use std::os::unix::fs::FileExt;

use protocol::{Attr, FileHandle, NfsStatus, ReplyBody, StableHow};
use rustix::fs::OFlags;

use super::{LocalFs, io_status};
use crate::fs::{OpCtx, Outcome};

impl LocalFs {
    /// WRITE: all of `data` at `offset`, synced as the client asked.
    pub(super) fn write(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        offset: u64,
        stable: StableHow,
        data: &[u8],
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        self.writable()?;
        let o = self.obj(&fh, &ctx.creds)?;
        o.require_regular()?;
        if offset.checked_add(data.len() as u64).is_none() {
            return Err(NfsStatus::FBig);
        }
        let f = o.reopen(OFlags::WRONLY)?;
        f.write_all_at(data, offset).map_err(|e| io_status(&e))?;
        match stable {
            StableHow::Unstable => {}
            StableHow::DataSync => f.sync_data().map_err(|e| io_status(&e))?,
            StableHow::FileSync => f.sync_all().map_err(|e| io_status(&e))?,
        }
        let a = f
            .metadata()
            .ok()
            .map(|m| Attr::from_metadata(&m, ctx.lease_ms));
        out.leased.push((o.key, fh));
        out.changed.push((o.key, fh, a));
        Ok(ReplyBody::Write {
            attr: a,
            count: data.len() as u32,
            committed: stable,
            verifier: self.write_verifier,
        })
    }

    /// COMMIT: syncs the whole file (the requested range is a hint NFS allows ignoring).
    pub(super) fn commit(
        &self,
        ctx: &OpCtx,
        fh: FileHandle,
        out: &mut Outcome,
    ) -> Result<ReplyBody, NfsStatus> {
        let o = self.obj(&fh, &ctx.creds)?;
        o.require_regular()?;
        // fsync needs a descriptor open for data: whichever the caller may have.
        let f = o
            .reopen(OFlags::RDONLY)
            .or_else(|_| o.reopen(OFlags::WRONLY))?;
        f.sync_all().map_err(|e| io_status(&e))?;
        out.leased.push((o.key, fh));
        Ok(ReplyBody::Commit {
            attr: o.fresh_attr(ctx.lease_ms),
            verifier: self.write_verifier,
        })
    }
}
