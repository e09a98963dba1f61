//! REMOVE, RMDIR, RENAME: names going away, with what they named looked up first for
//! INVALIDATE, and files held open hidden instead of removed ([`super::hidden`]); the local
//! backend's `remove.rs`.

use std::sync::Arc;

use protocol::{Attr, FileHandle, NfsStatus, Proc, ReplyBody};

use super::{NfsState, Obj, Peeked, key, leased, old_component, ops, outcome, results};
use crate::fs::{Done, ObjKey, OpCtx, Outcome};
use crate::users::Creds;

impl NfsState {
    /// REMOVE of `name` in `dir`.
    pub(super) fn remove(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        name: Vec<u8>,
        done: Done<Outcome>,
    ) {
        let d = or_fail!(self.unwrap(&dir), done);
        or_fail!(old_component(&name), done);
        self.unlink(ctx, d, name, false, done);
    }

    /// RMDIR of `name` in `dir`.
    pub(super) fn rmdir(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        name: Vec<u8>,
        done: Done<Outcome>,
    ) {
        let d = or_fail!(self.unwrap(&dir), done);
        if name == b"." {
            return done(Outcome::err(NfsStatus::Inval));
        }
        if name == b".." {
            return done(Outcome::err(NfsStatus::NotEmpty));
        }
        or_fail!(old_component(&name), done);
        self.unlink(ctx, d, name, true, done);
    }

    /// RENAME (`flags` None) and RENAME2 (only with no flags: NFSv3 has none).
    pub(super) fn rename(
        self: &Arc<Self>,
        ctx: OpCtx,
        (from_dir, from_name): (FileHandle, Vec<u8>),
        (to_dir, to_name): (FileHandle, Vec<u8>),
        flags: Option<u32>,
        done: Done<Outcome>,
    ) {
        // NFSv3 RENAME always replaces: only the plain form can be passed on.
        if flags.is_some_and(|f| f != 0) {
            return done(Outcome::err(NfsStatus::NotSupp));
        }
        let fd = or_fail!(self.unwrap(&from_dir), done);
        let td = or_fail!(self.unwrap(&to_dir), done);
        or_fail!(old_component(&from_name), done);
        or_fail!(old_component(&to_name), done);
        if flags.is_none() {
            return self.rename_objs(ctx, fd, from_name, td, to_name, done);
        }
        // Answered as what was asked.
        let as_rename2: Done<Outcome> = Box::new(move |mut o: Outcome| {
            if let Ok(ReplyBody::Rename {
                from_dir_attr,
                to_dir_attr,
            }) = o.result
            {
                o.result = Ok(ReplyBody::Rename2 {
                    from_dir_attr,
                    to_dir_attr,
                });
            }
            done(o)
        });
        self.rename_objs(ctx, fd, from_name, td, to_name, as_rename2);
    }

    /// LOOKUP of `name` (what an operation is about to change, for INVALIDATE), then `then`
    /// with its handle and key when it exists.
    fn peek(
        self: &Arc<Self>,
        c: &Creds,
        d: &Obj,
        name: &[u8],
        then: impl FnOnce(&Arc<Self>, Option<(ObjKey, FileHandle)>) + Send + 'static,
    ) {
        let args = ops::pack(&nfs3_types::nfs3::LOOKUP3args {
            what: ops::dirop(d.b.as_slice(), name),
        });
        self.call(c, Proc::Lookup, args, move |me, res| {
            let r = results(res, |r| {
                let fh = ops::fh(r)?.to_vec();
                Ok((fh, ops::post_op_attr(r)?))
            });
            let found = r.ok().and_then(|(b, a)| {
                let a = a?;
                me.wrap(&b, Some(&a)).ok().map(|fh| (key(&a), fh))
            });
            then(me, found)
        });
    }

    fn unlink(
        self: &Arc<Self>,
        ctx: OpCtx,
        d: Obj,
        name: Vec<u8>,
        rmdir: bool,
        done: Done<Outcome>,
    ) {
        let c = ctx.creds.clone();
        self.peek(&c, &d, &name.clone(), move |me, victim| {
            let lease = ctx.lease_ms;
            let removed = move |dir_attr: Option<Attr>, out: &mut Outcome| {
                let dir_attr = leased(dir_attr, lease);
                if let Some((k, fh)) = victim {
                    out.changed.push((k, fh, None));
                }
                out.changed.push((d.key, d.fh, dir_attr));
                out.leased.push((d.key, d.fh));
                Ok(if rmdir {
                    ReplyBody::Rmdir { dir_attr }
                } else {
                    ReplyBody::Remove { dir_attr }
                })
            };
            // A file some client holds open: kept under a hidden name until nobody does.
            if let Some((k, _)) = victim.filter(|(k, _)| !rmdir && me.opens.must_hide(*k)) {
                return me.hide(&ctx.creds, &d, name, k, move |_, r| {
                    done(outcome(r, removed))
                });
            }
            let (proc, args) = if rmdir {
                (
                    Proc::Rmdir,
                    ops::pack(&nfs3_types::nfs3::RMDIR3args {
                        object: ops::dirop(d.b.as_slice(), &name),
                    }),
                )
            } else {
                (
                    Proc::Remove,
                    ops::pack(&nfs3_types::nfs3::REMOVE3args {
                        object: ops::dirop(d.b.as_slice(), &name),
                    }),
                )
            };
            me.call(&ctx.creds, proc, args, move |_, res| {
                done(outcome(results(res, ops::wcc), removed))
            });
        });
    }

    fn rename_objs(
        self: &Arc<Self>,
        ctx: OpCtx,
        fd: Obj,
        from_name: Vec<u8>,
        td: Obj,
        to_name: Vec<u8>,
        done: Done<Outcome>,
    ) {
        let c = ctx.creds.clone();
        self.peek(&c, &fd, &from_name.clone(), move |me, moving| {
            me.peek(
                &ctx.creds.clone(),
                &td,
                &to_name.clone(),
                move |me, replaced| {
                    // Replacing a file some client holds open: hide it first, then rename.
                    if let Some((k, _)) = replaced.filter(|(k, _)| {
                        moving.is_none_or(|(m, _)| m != *k) && me.opens.must_hide(*k)
                    }) {
                        let creds = ctx.creds.clone();
                        let to = to_name.clone();
                        return me.hide(&creds, &td, to, k, move |me, r| match r {
                            Ok(_) => me.rename_now(
                                ctx,
                                (fd, from_name),
                                (td, to_name),
                                (moving, replaced),
                                done,
                            ),
                            Err(s) => done(Outcome::err(s)),
                        });
                    }
                    me.rename_now(
                        ctx,
                        (fd, from_name),
                        (td, to_name),
                        (moving, replaced),
                        done,
                    );
                },
            );
        });
    }

    /// The RENAME call itself, once `moving` and `replaced` (their keys and handles, for
    /// INVALIDATE) are known.
    fn rename_now(
        self: &Arc<Self>,
        ctx: OpCtx,
        (fd, from_name): (Obj, Vec<u8>),
        (td, to_name): (Obj, Vec<u8>),
        (moving, replaced): (Option<Peeked>, Option<Peeked>),
        done: Done<Outcome>,
    ) {
        let args = ops::pack(&nfs3_types::nfs3::RENAME3args {
            from: ops::dirop(fd.b.as_slice(), &from_name),
            to: ops::dirop(td.b.as_slice(), &to_name),
        });
        let lease = ctx.lease_ms;
        self.call(&ctx.creds, Proc::Rename, args, move |_, res| {
            let r = results(res, |r| Ok((ops::wcc(r)?, ops::wcc(r)?)));
            done(outcome(r, |(from_dir_attr, to_dir_attr), out| {
                let from_dir_attr = leased(from_dir_attr, lease);
                let to_dir_attr = leased(to_dir_attr, lease);
                if let Some((k, fh)) = moving {
                    out.changed.push((k, fh, None));
                }
                if let Some((k, fh)) = replaced
                    && moving.is_none_or(|(m, _)| m != k)
                {
                    out.changed.push((k, fh, None));
                }
                out.changed.push((fd.key, fd.fh, from_dir_attr));
                out.changed.push((td.key, td.fh, to_dir_attr));
                out.leased.push((fd.key, fd.fh));
                out.leased.push((td.key, td.fh));
                Ok(ReplyBody::Rename {
                    from_dir_attr,
                    to_dir_attr,
                })
            }))
        });
    }
}
