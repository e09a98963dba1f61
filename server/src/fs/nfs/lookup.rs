//! MOUNT, FETCH, LOOKUP, READLINK: walking names (the local backend's `lookup.rs`).

use std::collections::VecDeque;
use std::sync::Arc;

use protocol::{Attr, BackendFh, FileHandle, FileType, NfsStatus, Proc, ReplyBody, access};

use super::{NfsState, alive, component, key, leased, ops, outcome, results};
use crate::fs::{Done, OpCtx, Outcome};
use crate::users::Creds;

impl NfsState {
    /// MOUNT of `path` below the export's root.
    pub(super) fn mount(self: &Arc<Self>, ctx: OpCtx, path: Vec<u8>, done: Done<Outcome>) {
        let comps = or_fail!(path_components(&path), done);
        self.mount_step(ctx, self.root, comps, done);
    }

    /// FETCH of `path` below the export's root: a file's attributes and first `count` bytes.
    pub(super) fn fetch(
        self: &Arc<Self>,
        ctx: OpCtx,
        path: Vec<u8>,
        count: u32,
        done: Done<Outcome>,
    ) {
        let comps = or_fail!(path_components(&path), done);
        let c = ctx.creds.clone();
        self.walk(c, (self.root, None), comps, move |me, found| match found {
            Ok((at, attr)) => me.fetch_data(ctx, at, attr, count, done),
            Err(s) => done(Outcome::err(s)),
        });
    }

    /// LOOKUP (`..` of the export's root is the root).
    pub(super) fn lookup(
        self: &Arc<Self>,
        ctx: OpCtx,
        dir: FileHandle,
        name: Vec<u8>,
        done: Done<Outcome>,
    ) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let d = or_fail!(self.unwrap(&dir), done);
        or_fail!(component(&name), done);
        // `..` of the export's root is the root: never a handle above the export.
        let name = if name == b".." && d.b == self.root {
            b".".to_vec()
        } else {
            name
        };
        let args = ops::pack(&nfs3_types::nfs3::LOOKUP3args {
            what: ops::dirop(d.b.as_slice(), &name),
        });
        self.call(c, Proc::Lookup, args, move |me, res| {
            let r = results(res, |r| {
                let fh = ops::fh(r)?.to_vec();
                Ok((fh, ops::post_op_attr(r)?, ops::post_op_attr(r)?))
            });
            done(outcome(r, |(b, attr, dir_attr), out| {
                let fh = me.wrap(&b, attr.as_ref())?;
                if let Some(a) = &attr {
                    out.leased.push((key(a), fh));
                }
                out.leased.push((d.key, d.fh));
                Ok(ReplyBody::Lookup {
                    fh,
                    attr: leased(attr, lease),
                    dir_attr: leased(dir_attr, lease),
                })
            }))
        });
    }

    /// READLINK.
    pub(super) fn readlink(self: &Arc<Self>, ctx: OpCtx, fh: FileHandle, done: Done<Outcome>) {
        let c = &ctx.creds;
        let lease = ctx.lease_ms;
        let o = or_fail!(self.unwrap(&fh), done);
        let args = ops::pack(&nfs3_types::nfs3::READLINK3args {
            symlink: ops::fh3(o.b.as_slice()),
        });
        self.call(c, Proc::ReadLink, args, move |_, res| {
            let r = results(res, |r| {
                Ok((
                    ops::post_op_attr(r)?,
                    r.opaque(ops::MAX_LINK, "link")?.to_vec(),
                ))
            });
            done(outcome(r, |(attr, target), out| {
                out.leased.push((o.key, o.fh));
                Ok(ReplyBody::ReadLink {
                    attr: leased(attr, lease),
                    target,
                })
            }))
        });
    }

    /// MOUNT: LOOKUP one component at a time from the export's root, then ACCESS (search
    /// permission on the directory itself, as the local backend asks of the kernel).
    fn mount_step(
        self: &Arc<Self>,
        ctx: OpCtx,
        at: BackendFh,
        mut rest: VecDeque<Vec<u8>>,
        done: Done<Outcome>,
    ) {
        let c = ctx.creds.clone();
        let Some(name) = rest.pop_front() else {
            let args = ops::pack(&nfs3_types::nfs3::ACCESS3args {
                object: ops::fh3(at.as_slice()),
                access: access::LOOKUP,
            });
            return self.call(&c, Proc::Access, args, move |me, res| {
                let r = results(res, |r| Ok((ops::post_op_attr(r)?, r.u32("access")?)));
                done(outcome(r, |(attr, granted), out| {
                    let Some(a) = attr else {
                        return Err(NfsStatus::Io);
                    };
                    if a.ftype != FileType::Directory {
                        return Err(NfsStatus::NotDir);
                    }
                    if granted & access::LOOKUP == 0 {
                        return Err(NfsStatus::Acces);
                    }
                    let fh = me.wrap(at.as_slice(), Some(&a))?;
                    out.leased.push((key(&a), fh));
                    Ok(ReplyBody::Mount {
                        fh,
                        attr: Attr {
                            lease_ms: ctx.lease_ms,
                            ..a
                        },
                    })
                }))
            });
        };
        self.lookup_in(&c, at, &name, move |me, r| {
            match r.and_then(|(b, a)| match a {
                Some(a) if a.ftype != FileType::Directory => Err(NfsStatus::NotDir),
                _ => Ok(b),
            }) {
                Ok(next) => me.mount_step(ctx, next, rest, done),
                Err(s) => done(Outcome::err(s)),
            }
        });
    }

    /// One LOOKUP of `name` in `at` as `c`: the object's backend handle and, if the server
    /// sent them, its attributes.
    fn lookup_in(
        self: &Arc<Self>,
        c: &Creds,
        at: BackendFh,
        name: &[u8],
        then: impl FnOnce(&Arc<Self>, Result<(BackendFh, Option<Attr>), NfsStatus>) + Send + 'static,
    ) {
        let args = ops::pack(&nfs3_types::nfs3::LOOKUP3args {
            what: ops::dirop(at.as_slice(), name),
        });
        self.call(c, Proc::Lookup, args, move |me, res| {
            let r = results(res, |r| {
                let fh = ops::fh(r)?.to_vec();
                Ok((fh, ops::post_op_attr(r)?))
            })
            .and_then(|(b, a)| Ok((BackendFh::new(&b).map_err(|_| NfsStatus::Io)?, a)));
            then(me, r)
        });
    }

    /// The object at the end of `rest`, walked from `at` one LOOKUP at a time as the caller
    /// (the backend checks search permission on each directory), with its attributes: those
    /// the last LOOKUP gave, else one GETATTR's. `at` carries its attributes when known.
    pub(super) fn walk(
        self: &Arc<Self>,
        c: Creds,
        at: (BackendFh, Option<Attr>),
        mut rest: VecDeque<Vec<u8>>,
        then: impl FnOnce(&Arc<Self>, Result<(BackendFh, Attr), NfsStatus>) + Send + 'static,
    ) {
        let (at, attr) = at;
        let Some(name) = rest.pop_front() else {
            return match attr {
                Some(a) => then(self, Ok((at, a))),
                None => {
                    let args = ops::pack(&nfs3_types::nfs3::GETATTR3args {
                        object: ops::fh3(at.as_slice()),
                    });
                    self.call(&c, Proc::GetAttr, args, move |me, res| {
                        then(me, results(res, ops::fattr).map(|a| (at, a)))
                    })
                }
            };
        };
        if attr.is_some_and(|a| a.ftype != FileType::Directory) {
            return then(self, Err(NfsStatus::NotDir));
        }
        let creds = c.clone();
        self.lookup_in(&c, at, &name, move |me, r| match r {
            Ok(next) => me.walk(creds, next, rest, then),
            Err(s) => then(me, Err(s)),
        });
    }

    /// FETCH's answer for the object found: a regular file's first `count` bytes (one READ,
    /// whose attributes are then the reply's: never older than its data), else none.
    fn fetch_data(
        self: &Arc<Self>,
        ctx: OpCtx,
        at: BackendFh,
        attr: Attr,
        count: u32,
        done: Done<Outcome>,
    ) {
        let lease = ctx.lease_ms;
        let answer = move |me: &Arc<Self>, attr: Attr, eof: bool, data: Vec<u8>| {
            outcome(alive(Some(&attr)).map(|()| attr), |a, out| {
                let fh = me.wrap(at.as_slice(), Some(&a))?;
                out.leased.push((key(&a), fh));
                Ok(ReplyBody::Fetch {
                    fh,
                    attr: Attr {
                        lease_ms: lease,
                        ..a
                    },
                    eof,
                    data: data.into(),
                })
            })
        };
        if attr.ftype != FileType::Regular || count == 0 {
            let eof = attr.ftype != FileType::Regular || attr.size == 0;
            return done(answer(self, attr, eof, Vec::new()));
        }
        let count = count.min(self.max_io);
        let args = ops::pack(&nfs3_types::nfs3::READ3args {
            file: ops::fh3(at.as_slice()),
            offset: 0,
            count,
        });
        self.call(&ctx.creds, Proc::Read, args, move |me, res| {
            let r = results(res, |r| {
                let after = ops::post_op_attr(r)?;
                let _count = r.u32("count")?;
                let eof = r.bool("eof")?;
                let data = r.opaque(count as usize, "data")?.to_vec();
                Ok((after, eof, data))
            });
            match r {
                Ok((after, eof, data)) => done(answer(me, after.unwrap_or(attr), eof, data)),
                Err(s) => done(Outcome::err(s)),
            }
        });
    }
}

/// MOUNT's, FETCH's and CREATEAT's path: its components from the export's root (empty and `.` skipped,
/// `..` refused).
pub(super) fn path_components(path: &[u8]) -> Result<VecDeque<Vec<u8>>, NfsStatus> {
    let text = std::str::from_utf8(path).map_err(|_| NfsStatus::Inval)?;
    let mut comps = VecDeque::new();
    for comp in text.split('/').filter(|s| !s.is_empty() && *s != ".") {
        if comp == ".." {
            return Err(NfsStatus::Acces);
        }
        component(comp.as_bytes())?;
        comps.push_back(comp.as_bytes().to_vec());
    }
    Ok(comps)
}
