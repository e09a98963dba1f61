//! CREATE, MKDIR, SYMLINK, LINK: new objects and names (the local backend's `create.rs`).

use std::sync::Arc;

use protocol::{
    CreateHow, FileHandle, FileType, NewObject, NfsStatus, Proc, ReplyBody, SetAttr, access,
};

use super::ops::Raw;
use super::{NfsState, Obj, key, leased, new_component, ops, outcome, results};
use crate::fs::{Done, OpCtx, Outcome};
use crate::users::Creds;

impl NfsState {
    /// CREATE.
    pub(super) fn create(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        name: Vec<u8>,
        how: CreateHow,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let d = or_fail!(self.unwrap(&dir), done);
        or_fail!(new_component(&name), done);
        let unchecked = matches!(how, CreateHow::Unchecked(_));
        let args = ops::create(d.b.as_slice(), &name, &how);
        let call = NewObjectCall {
            proc: Proc::Create,
            args,
            reply: ReplyBody::Create,
            may_replace: unchecked,
        };
        self.new_object(c, d, lease, call, done);
    }

    /// CREATEAT: CREATE in the directory the path's other components lead to (walked as
    /// FETCH walks), answered with that directory's handle beside CREATE's answer.
    pub(super) fn create_at(
        self: &Arc<Self>,
        ctx: OpCtx,
        path: Vec<u8>,
        how: CreateHow,
        done: Done<Outcome>,
    ) {
        let (dir_path, name) = or_fail!(crate::fs::split_create_path(&path), done);
        let comps = or_fail!(super::lookup::path_components(dir_path), done);
        let name = name.to_vec();
        let c = ctx.creds.clone();
        self.walk(c, (self.root, None), comps, move |me, found| {
            let dir = match found {
                Ok((_, a)) if a.ftype != FileType::Directory => Err(NfsStatus::NotDir),
                Ok((b, a)) => me.wrap(b.as_slice(), Some(&a)),
                Err(s) => Err(s),
            };
            let dir = or_fail!(dir, done);
            let answer: Done<Outcome> = Box::new(move |mut o: Outcome| {
                o.result = o.result.map(|body| match body {
                    ReplyBody::Create(made) => ReplyBody::CreateAt {
                        dir,
                        made: Box::new(made),
                    },
                    other => other,
                });
                done(o)
            });
            me.create(ctx, dir, name, how, answer)
        });
    }

    /// MKDIR.
    pub(super) fn mkdir(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        name: Vec<u8>,
        attr: SetAttr,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let d = or_fail!(self.unwrap(&dir), done);
        or_fail!(new_component(&name), done);
        let args = ops::pack(&nfs3_types::nfs3::MKDIR3args {
            where_: ops::dirop(d.b.as_slice(), &name),
            attributes: ops::sattr(&attr),
        });
        let call = NewObjectCall {
            proc: Proc::Mkdir,
            args,
            reply: ReplyBody::Mkdir,
            may_replace: false,
        };
        self.new_object(c, d, lease, call, done);
    }

    /// SYMLINK.
    pub(super) fn symlink(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        name: Vec<u8>,
        attr: SetAttr,
        target: Vec<u8>,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let d = or_fail!(self.unwrap(&dir), done);
        or_fail!(new_component(&name), done);
        if target.is_empty() || target.contains(&0) || target.len() > ops::MAX_LINK {
            return done(Outcome::err(NfsStatus::Inval));
        }
        let args = ops::symlink(d.b.as_slice(), &name, &attr, &target);
        let call = NewObjectCall {
            proc: Proc::Symlink,
            args,
            reply: ReplyBody::Symlink,
            may_replace: false,
        };
        self.new_object(c, d, lease, call, done);
    }

    /// LINK of `fh` as `name` in `dir`.
    pub(super) fn link(
        self: &Arc<Self>,
        ctx: OpCtx,
        fh: FileHandle,
        dir: FileHandle,
        name: Vec<u8>,
        done: Done<Outcome>,
    ) {
        let o = or_fail!(self.unwrap(&fh), done);
        let d = or_fail!(self.unwrap(&dir), done);
        or_fail!(new_component(&name), done);
        self.link_checked(ctx, o, d, name, done);
    }

    /// CREATE, MKDIR, SYMLINK: the new object's handle, attributes and the directory's.
    fn new_object(
        self: &Arc<Self>,
        c: &Creds,
        d: Obj,
        lease: u32,
        call: NewObjectCall,
        done: Done<Outcome>,
    ) {
        let NewObjectCall {
            proc,
            args,
            reply: body,
            may_replace: maybe_existing,
        } = call;
        self.call(c, proc, args, move |me, res| {
            let r = results(res, |r| {
                let fh = ops::post_op_fh(r)?.map(<[u8]>::to_vec);
                Ok((fh, ops::post_op_attr(r)?, ops::wcc(r)?))
            });
            done(outcome(r, |(b, attr, dir_attr), out| {
                // NFSv3 lets the backend make the object without returning its handle: that
                // is success without one here too, and the client LOOKUPs the name.
                let fh = b.map(|b| me.wrap(&b, attr.as_ref())).transpose()?;
                let (attr, dir_attr) = (leased(attr, lease), leased(dir_attr, lease));
                out.leased.push((d.key, d.fh));
                out.changed.push((d.key, d.fh, dir_attr));
                if let Some(fh) = fh {
                    let k = attr.as_ref().map(key).unwrap_or_default();
                    out.leased.push((k, fh));
                    if maybe_existing {
                        // An UNCHECKED create may have truncated an existing file.
                        out.changed.push((k, fh, attr));
                    }
                }
                Ok(body(NewObject { fh, attr, dir_attr }))
            }))
        });
    }

    /// LINK, after the check the local kernel makes with `protected_hardlinks` (an NFS server
    /// such as Ganesha links as root or without that check): a user may link only a file it
    /// owns, or a regular, non-setuid, non-setgid-executable file it may both read and write.
    /// The read/write answer is the backend's own (ACCESS with the user's credentials).
    fn link_checked(
        self: &Arc<Self>,
        ctx: OpCtx,
        o: Obj,
        d: Obj,
        name: Vec<u8>,
        done: Done<Outcome>,
    ) {
        let args = ops::pack(&nfs3_types::nfs3::ACCESS3args {
            object: ops::fh3(o.b.as_slice()),
            access: access::READ | access::MODIFY,
        });
        let c = ctx.creds.clone();
        self.call(&c, Proc::Access, args, move |me, res| {
            let r = results(res, |r| Ok((ops::post_op_attr(r)?, r.u32("access")?)));
            let allowed = r.and_then(|(attr, granted)| {
                let Some(a) = attr else {
                    return Err(NfsStatus::Io);
                };
                if a.ftype == FileType::Directory {
                    return Err(NfsStatus::IsDir);
                }
                let owner = ctx.creds.uid == 0 || a.uid == ctx.creds.uid;
                let safe = a.ftype == FileType::Regular
                    && a.mode & 0o4000 == 0
                    && a.mode & 0o2010 != 0o2010
                    && granted & (access::READ | access::MODIFY) == access::READ | access::MODIFY;
                if owner || safe {
                    Ok(())
                } else {
                    Err(NfsStatus::Perm)
                }
            });
            if let Err(s) = allowed {
                return done(Outcome::err(s));
            }
            let lease = ctx.lease_ms;
            let args = ops::pack(&nfs3_types::nfs3::LINK3args {
                file: ops::fh3(o.b.as_slice()),
                link: ops::dirop(d.b.as_slice(), &name),
            });
            me.call(&ctx.creds, Proc::Link, args, move |_, res| {
                let r = results(res, |r| Ok((ops::post_op_attr(r)?, ops::wcc(r)?)));
                done(outcome(r, |(attr, dir_attr), out| {
                    let (attr, dir_attr) = (leased(attr, lease), leased(dir_attr, lease));
                    out.changed.push((o.key, o.fh, attr));
                    out.changed.push((d.key, d.fh, dir_attr));
                    out.leased.push((o.key, o.fh));
                    out.leased.push((d.key, d.fh));
                    Ok(ReplyBody::Link { attr, dir_attr })
                }))
            });
        });
    }
}

/// A call that makes a new object (CREATE, MKDIR, SYMLINK): the backend procedure and its
/// arguments, the reply it becomes, and whether it may have replaced an existing file (an
/// UNCHECKED create truncates one, which other holders must hear of).
struct NewObjectCall {
    proc: Proc,
    args: Raw,
    reply: fn(NewObject) -> ReplyBody,
    may_replace: bool,
}
