//! GETATTR, SETATTR, ACCESS, FSSTAT, FSINFO, PATHCONF (the local backend's `attrs.rs`).

use std::sync::Arc;

use protocol::{Attr, FileHandle, Proc, ReplyBody, SetAttr, Time, access};

use super::{MAX_DIR_REPLY, NfsState, alive, leased, ops, outcome, results};
use crate::fs::{Done, OpCtx, Outcome};

impl NfsState {
    /// GETATTR.
    pub(super) fn getattr(self: &Arc<Self>, ctx: OpCtx, fh: FileHandle, done: Done<Outcome>) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::pack(&nfs3_types::nfs3::GETATTR3args {
            object: ops::fh3(o.b.as_slice()),
        });
        self.call(c, Proc::GetAttr, args, move |_, res| {
            let r = results(res, ops::fattr);
            done(outcome(r, |a, out| {
                alive(Some(&a))?;
                out.leased.push((o.key, o.fh));
                Ok(ReplyBody::GetAttr {
                    attr: Attr {
                        lease_ms: lease,
                        ..a
                    },
                })
            }))
        });
    }

    /// SETATTR (the size too: NFSv3 truncates through SETATTR).
    pub(super) fn setattr(
        self: &Arc<Self>,
        ctx: OpCtx,
        fh: FileHandle,
        attr: SetAttr,
        guard: Option<Time>,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::setattr(o.b.as_slice(), &attr, guard);
        self.call(c, Proc::SetAttr, args, move |_, res| {
            let r = results(res, ops::wcc);
            done(outcome(r, |a, out| {
                let a = leased(a, lease);
                out.leased.push((o.key, o.fh));
                out.changed.push((o.key, o.fh, a));
                Ok(ReplyBody::SetAttr { attr: a })
            }))
        });
    }

    /// ACCESS: what the backend grants the caller, less any change on a read-only export or to an anonymous user.
    pub(super) fn access(
        self: &Arc<Self>,
        ctx: OpCtx,
        fh: FileHandle,
        asked: u32,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::pack(&nfs3_types::nfs3::ACCESS3args {
            object: ops::fh3(o.b.as_slice()),
            access: asked,
        });
        // Anonymous users and read-only exports never modify, whatever the backend says.
        let no_modify = self.read_only || c.anonymous;
        self.call(c, Proc::Access, args, move |_, res| {
            let r = results(res, |r| Ok((ops::post_op_attr(r)?, r.u32("access")?)));
            done(outcome(r, |(attr, mut granted), out| {
                alive(attr.as_ref())?;
                if no_modify {
                    granted &= !(access::MODIFY | access::EXTEND | access::DELETE);
                }
                out.leased.push((o.key, o.fh));
                Ok(ReplyBody::Access {
                    attr: leased(attr, lease),
                    access: granted & asked,
                })
            }))
        });
    }

    /// FSSTAT.
    pub(super) fn fsstat(self: &Arc<Self>, ctx: OpCtx, fh: FileHandle, done: Done<Outcome>) {
        let c = &ctx.creds;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::pack(&nfs3_types::nfs3::FSSTAT3args {
            fsroot: ops::fh3(o.b.as_slice()),
        });
        self.call(c, Proc::FsStat, args, move |_, res| {
            let r = results(res, ops::fsstat);
            done(outcome(r, |mut s, _| {
                s.attr = leased(s.attr, 0);
                Ok(ReplyBody::FsStat(s))
            }))
        });
    }

    /// FSINFO, bounded by sfsd's own limits.
    pub(super) fn fsinfo(self: &Arc<Self>, ctx: OpCtx, fh: FileHandle, done: Done<Outcome>) {
        let c = &ctx.creds;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::pack(&nfs3_types::nfs3::FSINFO3args {
            fsroot: ops::fh3(o.b.as_slice()),
        });
        let max_io = self.max_io;
        self.call(c, Proc::FsInfo, args, move |_, res| {
            let r = results(res, ops::fsinfo);
            done(outcome(r, |mut s, _| {
                // sfsd's own limits bound what clients may send and ask.
                s.attr = leased(s.attr, 0);
                s.rtmax = s.rtmax.min(max_io);
                s.rtpref = s.rtpref.min(max_io);
                s.wtmax = s.wtmax.min(max_io);
                s.wtpref = s.wtpref.min(max_io);
                s.dtpref = s.dtpref.min(MAX_DIR_REPLY as u32);
                Ok(ReplyBody::FsInfo(s))
            }))
        });
    }

    /// PATHCONF.
    pub(super) fn pathconf(self: &Arc<Self>, ctx: OpCtx, fh: FileHandle, done: Done<Outcome>) {
        let c = &ctx.creds;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::pack(&nfs3_types::nfs3::PATHCONF3args {
            object: ops::fh3(o.b.as_slice()),
        });
        self.call(c, Proc::PathConf, args, move |_, res| {
            let r = results(res, ops::pathconf);
            done(outcome(r, |mut s, _| {
                s.attr = leased(s.attr, 0);
                Ok(ReplyBody::PathConf(s))
            }))
        });
    }
}
