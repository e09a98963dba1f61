//! READDIR, READDIRPLUS: one backend page each, cut to what the client asked (the local
//! backend's `readdir.rs`).

use std::sync::Arc;

use protocol::{DirEntry, DirEntryPlus, DirPage, FileHandle, NfsStatus, Proc, ReplyBody};

use super::{
    ENTRY_COST, ENTRY_PLUS_COST, MAX_DIR_REPLY, NfsState, key, leased, listed, ops, outcome,
    results,
};
use crate::fs::{Done, OpCtx, Outcome};

impl NfsState {
    /// READDIR: one backend page, cut to the client's count, never `.`, `..` or a hidden name.
    pub(super) fn readdir(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        cookie: u64,
        verifier: [u8; 8],
        count: u32,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let d = or_fail!(self.unwrap(&dir), done);
        let budget = (count as usize).min(MAX_DIR_REPLY);
        let args = ops::readdir(d.b.as_slice(), cookie, verifier, budget as u32);
        self.call(c, Proc::ReadDir, args, move |_, res| {
            let r = results(res, |r| {
                let p = ops::dir_page(r, false)?;
                let mut used = 200;
                let mut entries = Vec::new();
                let mut eof = p.eof;
                for e in p.entries.iter().filter(|e| listed(e.name)) {
                    let cost = ENTRY_COST + e.name.len().div_ceil(4) * 4;
                    if used + cost > budget {
                        eof = false;
                        break;
                    }
                    used += cost;
                    entries.push(DirEntry {
                        fileid: e.fileid,
                        name: e.name.to_vec(),
                        cookie: e.cookie,
                    });
                }
                Ok((p.dir_attr, p.verifier, entries, eof, p.entries.is_empty()))
            });
            done(outcome(
                r,
                |(dir_attr, verifier, entries, eof, none), out| {
                    if entries.is_empty() && !eof && !none {
                        return Err(NfsStatus::TooSmall);
                    }
                    out.leased.push((d.key, d.fh));
                    Ok(ReplyBody::ReadDir(DirPage {
                        dir_attr: leased(dir_attr, lease),
                        verifier,
                        entries,
                        eof,
                    }))
                },
            ))
        });
    }

    /// READDIRPLUS: as READDIR, with each entry's handle wrapped and its attributes.
    pub(super) fn readdirplus(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        cookie: u64,
        verifier: [u8; 8],
        (dircount, maxcount): (u32, u32),
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let d = or_fail!(self.unwrap(&dir), done);
        let budget = (maxcount as usize).min(MAX_DIR_REPLY);
        let dir_budget = (dircount as usize).min(MAX_DIR_REPLY);
        let args = ops::readdirplus(
            d.b.as_slice(),
            cookie,
            verifier,
            dir_budget as u32,
            budget as u32,
        );
        self.call(c, Proc::ReadDirPlus, args, move |me, res| {
            let r = results(res, |r| {
                let p = ops::dir_page(r, true)?;
                let mut used = 200;
                let mut dir_used = 0;
                let mut entries = Vec::new();
                let mut eof = p.eof;
                for e in p.entries.iter().filter(|e| listed(e.name)) {
                    let base = ENTRY_COST + e.name.len().div_ceil(4) * 4;
                    let cost = base + ENTRY_PLUS_COST;
                    if used + cost > budget || (dir_budget > 0 && dir_used + base > dir_budget) {
                        eof = false;
                        break;
                    }
                    used += cost;
                    dir_used += base;
                    // An entry whose handle cannot be wrapped is listed without one.
                    let fh = e.fh.and_then(|b| me.wrap(b, e.attr.as_ref()).ok());
                    entries.push(DirEntryPlus {
                        fileid: e.fileid,
                        name: e.name.to_vec(),
                        cookie: e.cookie,
                        attr: if fh.is_some() {
                            leased(e.attr, lease)
                        } else {
                            None
                        },
                        fh,
                    });
                }
                Ok((p.dir_attr, p.verifier, entries, eof, p.entries.is_empty()))
            });
            done(outcome(
                r,
                |(dir_attr, verifier, entries, eof, none), out| {
                    if entries.is_empty() && !eof && !none {
                        return Err(NfsStatus::TooSmall);
                    }
                    out.leased.push((d.key, d.fh));
                    for e in &entries {
                        if let (Some(fh), Some(a)) = (e.fh, &e.attr) {
                            out.leased.push((key(a), fh));
                        }
                    }
                    Ok(ReplyBody::ReadDirPlus(DirPage {
                        dir_attr: leased(dir_attr, lease),
                        verifier,
                        entries,
                        eof,
                    }))
                },
            ))
        });
    }
}
