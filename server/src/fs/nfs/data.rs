//! WRITE, APPEND, COMMIT and READ: file data (the local backend's `data.rs`; READ completes
//! in the client connection's color, see [`crate::fs::Storage::read`]).

use std::sync::Arc;

use protocol::{Data, FileHandle, NfsStatus, Proc, ReplyBody, StableHow};

use super::{EXPORT_ID, NfsState, alive, append, leased, ops, outcome, results};
use crate::fs::{Done, OpCtx, Outcome, ReadArgs};

impl NfsState {
    /// WRITE, answered with the backend's own `committed` level and verifier.
    pub(super) fn write(
        self: &Arc<Self>,
        ctx: OpCtx,
        fh: FileHandle,
        offset: u64,
        stable: StableHow,
        data: Data,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let o = or_fail!(self.unwrap(&fh), done);
        if offset.checked_add(data.len() as u64).is_none() {
            return done(Outcome::err(NfsStatus::FBig));
        }
        let sent = data.len() as u32;
        let args = ops::write(o.b.as_slice(), offset, stable, &data);
        drop(data);
        self.call(c, Proc::Write, args, move |_, res| {
            let r = results(res, |r| {
                let a = ops::wcc(r)?;
                let count = r.u32("count")?;
                let committed = StableHow::decode(r)?;
                let verifier = r.fixed::<8>("write verifier")?;
                Ok((a, count, committed, verifier))
            });
            done(outcome(r, |(a, count, committed, verifier), out| {
                let a = leased(a, lease);
                out.leased.push((o.key, o.fh));
                out.changed.push((o.key, o.fh, a));
                Ok(ReplyBody::Write {
                    attr: a,
                    // Never more than was sent, whatever the backend claims.
                    count: count.min(sent),
                    committed,
                    verifier,
                })
            }))
        });
    }

    /// COMMIT.
    pub(super) fn commit(
        self: &Arc<Self>,
        ctx: OpCtx,
        fh: FileHandle,
        offset: u64,
        count: u32,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::pack(&nfs3_types::nfs3::COMMIT3args {
            file: ops::fh3(o.b.as_slice()),
            offset,
            count,
        });
        self.call(c, Proc::Commit, args, move |_, res| {
            let r = results(res, |r| Ok((ops::wcc(r)?, r.fixed::<8>("verifier")?)));
            done(outcome(r, |(a, verifier), out| {
                out.leased.push((o.key, o.fh));
                Ok(ReplyBody::Commit {
                    attr: leased(a, lease),
                    verifier,
                })
            }))
        });
    }

    /// APPEND: at the end of the file as the backend sees it, one APPEND per object at a time ([`super::append`]).
    pub(super) fn append_data(
        self: &Arc<Self>,
        ctx: OpCtx,
        fh: FileHandle,
        stable: StableHow,
        data: Data,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let o = or_fail!(self.unwrap(&fh), done);
        self.append(append::Pending {
            creds: c.clone(),
            o,
            lease,
            stable,
            data,
            done,
        });
    }

    pub(super) fn read(
        self: &Arc<Self>,
        color: libcolor::Color,
        ctx: OpCtx,
        read: ReadArgs,
        done: Done<Result<Vec<u8>, NfsStatus>>,
    ) {
        let ReadArgs {
            hd,
            offset,
            count,
            req_id,
        } = read;
        let b = match hd.backend {
            Some(b) if hd.export_id == EXPORT_ID => b,
            _ => return done(Err(NfsStatus::Stale)),
        };
        let count = count.min(self.max_io as usize) as u32;
        let args = ops::pack(&nfs3_types::nfs3::READ3args {
            file: ops::fh3(b.as_slice()),
            offset,
            count,
        });
        let lease = ctx.lease_ms;
        let h = self.pool.handle().clone();
        // The link only matches the reply; decoding and copying the data happen in the
        // client connection's color, in parallel with the other connections.
        self.call(&ctx.creds, Proc::Read, args, move |_, res| {
            h.cpucb(color, move || {
                let r = results(res, |r| {
                    let attr = ops::post_op_attr(r)?;
                    if alive(attr.as_ref()).is_err() {
                        return Ok(Err(NfsStatus::Stale));
                    }
                    let _count = r.u32("count")?;
                    let eof = r.bool("eof")?;
                    let data = r.opaque(count as usize, "data")?;
                    // The record: a 4-byte gap for the record header, the reply, data last.
                    let mut buf = Vec::with_capacity(4 + 160 + data.len() + 16);
                    let attr = leased(attr, lease);
                    let filled = protocol::encode_read_reply_at(
                        &mut buf,
                        protocol::record::HEADER_LEN,
                        req_id,
                        attr.as_ref(),
                        data.len(),
                        |b| {
                            b.copy_from_slice(data);
                            Ok::<_, std::convert::Infallible>((data.len(), eof))
                        },
                    );
                    let Ok(_) = filled;
                    Ok(Ok(buf))
                });
                done(r.and_then(|r| r))
            })
        });
    }
}
