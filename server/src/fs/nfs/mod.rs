//! The NFS backend: sfsd in front of an NFSv3 server (the paper's "NFS-loopback" setup).
//!
//! Every request becomes one NFSv3 call (a few for MOUNT, REMOVE, RMDIR and RENAME) sent with
//! AUTH_SYS credentials of the user it was made for, so the NFS server makes every permission
//! decision; anonymous requests go out as the configured unprivileged uid. The calls are
//! pipelined over a small pool of libcolor sockets ([`link`]) and their replies complete as
//! callbacks: no thread ever waits for the backend.
//!
//! **Handles.** The backend's handles never reach clients: each is wrapped, with the object's
//! file system id and file id, in a MAC'd sfsd handle (see `protocol::handle`). A client can
//! neither read nor forge one, and since NFS handles are persistent, wrapped handles stay
//! valid across sfsd restarts. The export's root handle comes from MOUNT at start-up; `..` at
//! the root stays at the root, and `.`/`..` entries are never listed, so no handle above the
//! export is ever wrapped.
//!
//! **Hostile or broken backends.** Replies are bounded records read with a bounded reader
//! ([`xdr`]); anything malformed takes the connection down (its calls are answered JUKEBOX)
//! and it reconnects. A backend that goes away gives JUKEBOX to clients until it returns.
//! Writes are answered with the backend's own `committed` level and write verifier, so a
//! backend restart changes the verifier and clients resend unstable data (COMMIT works the
//! same way): nothing acknowledged as stable is lost.

pub mod append;
pub mod hidden;
pub mod link;
pub mod ops;
pub mod rpc;
pub mod setup;
pub mod xdr;

use std::collections::VecDeque;
use std::sync::Arc;

use libcolor::Handle;
use protocol::{
    Attr, BackendFh, CreateHow, DirEntry, DirEntryPlus, DirPage, FileHandle, FileType, HandleData,
    HandleKey, NewObject, NfsStatus, Proc, ReplyBody, RequestOp, access,
};

use self::link::{Body, CallError, LinkLimits, Pool};
use self::ops::Raw;
use self::rpc::AuthSys;
use self::setup::{NFS_PROG, NFS_VERS};
use self::xdr::{Malformed, Xdr};
use super::{Busy, Done, ObjKey, OpCtx, Outcome, ReadArgs, ReadCall, Storage};
use crate::read::ReplyRecord;
use crate::users::Creds;

pub use self::setup::BackendUrl;

/// Export id of wrapped handles (local handles use 1): one never resolves in the other
/// backend.
pub const EXPORT_ID: u32 = 2;
/// Longest name component accepted (as the local backend).
const NAME_MAX: usize = 255;
/// Largest READDIR/READDIRPLUS reply, whatever the client asks (as the local backend).
const MAX_DIR_REPLY: usize = 64 * 1024;
/// Room for RPC and NFS headers around READ data in a reply record.
const RECORD_OVERHEAD: usize = 4096;
/// READDIR(PLUS) reply bytes one entry costs in sfs's encoding, beyond its name.
const ENTRY_COST: usize = 8 + 4 + 8 + 4;
const ENTRY_PLUS_COST: usize = 4 + protocol::attr::ATTR_LEN + 4 + 4 + protocol::MAX_HANDLE_LEN;

/// Settings of the backend.
#[derive(Debug, Clone)]
pub struct NfsConfig {
    pub url: BackendUrl,
    /// RPC connections to the backend.
    pub connections: usize,
    /// Calls in flight on one connection.
    pub max_pending: usize,
    /// Largest READ/WRITE sfsd does (FSINFO reports the smaller of this and the backend's).
    pub max_io: u32,
    pub read_only: bool,
    /// A call unanswered this long takes its connection down (its calls get JUKEBOX).
    pub call_timeout: std::time::Duration,
    /// How long start-up waits for a backend that is not answering yet.
    pub start_wait: std::time::Duration,
}

struct Inner {
    pool: Arc<Pool>,
    key: HandleKey,
    root: BackendFh,
    max_io: u32,
    read_only: bool,
    /// Open states, and the hidden names of held files whose last name went ([`hidden`]).
    opens: hidden::Opens,
    /// APPENDs take turns per object ([`append`]).
    appends: Arc<append::Turns>,
}

/// The NFS backend (see the module docs).
pub struct NfsBackend {
    inner: Arc<Inner>,
}

impl NfsBackend {
    /// MOUNTs the export (blocking, before the runtime runs; waiting up to `cfg.start_wait`
    /// for a backend that is not answering yet) and starts the connections.
    pub fn start(h: &Handle, cfg: &NfsConfig, key: HandleKey) -> anyhow::Result<NfsBackend> {
        let m = setup::mount_waiting(&cfg.url, cfg.start_wait)?;
        let root = BackendFh::new(&m.root_fh)?;
        tracing::info!(backend = %m.nfs_addr, export = %cfg.url.export, "mounted the NFS backend");
        let pool = Pool::start(
            h,
            m.nfs_addr,
            cfg.connections,
            LinkLimits {
                max_record: cfg.max_io as usize + RECORD_OVERHEAD + MAX_DIR_REPLY,
                max_pending: cfg.max_pending,
                call_timeout: cfg.call_timeout,
            },
        );
        Ok(NfsBackend {
            inner: Arc::new(Inner {
                pool,
                key,
                root,
                max_io: cfg.max_io,
                read_only: cfg.read_only,
                opens: hidden::Opens::default(),
                appends: Arc::default(),
            }),
        })
    }
}

fn auth(c: &Creds) -> AuthSys {
    AuthSys {
        uid: c.uid,
        gid: c.primary_gid(),
        gids: c.gids.clone(),
    }
}

fn call_status(e: CallError) -> NfsStatus {
    match e {
        // Gone, or too busy: the client retries later.
        CallError::Down | CallError::Busy => NfsStatus::Jukebox,
        CallError::Rpc(e) => {
            tracing::warn!(error = %e, "NFS backend refused a call");
            NfsStatus::Io
        }
    }
}

/// Decodes results: the status, then `f` on the rest.
fn results<T>(
    body: Result<Body, CallError>,
    f: impl FnOnce(&mut Xdr<'_>) -> Result<T, Malformed>,
) -> Result<T, NfsStatus> {
    let body = body.map_err(call_status)?;
    let mut r = Xdr::new(body.bytes());
    let res = ops::status(&mut r).and_then(|st| match st {
        Ok(()) => f(&mut r).map(Ok),
        Err(s) => Ok(Err(s)),
    });
    match res {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "malformed reply from the NFS backend");
            Err(NfsStatus::Io)
        }
    }
}

/// A name component from a client (as the local backend checks it).
fn component(name: &[u8]) -> Result<(), NfsStatus> {
    if name.len() > NAME_MAX {
        return Err(NfsStatus::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(NfsStatus::Inval);
    }
    Ok(())
}

fn new_component(name: &[u8]) -> Result<(), NfsStatus> {
    component(name)?;
    if name == b"." || name == b".." {
        return Err(NfsStatus::Exist);
    }
    Ok(())
}

fn old_component(name: &[u8]) -> Result<(), NfsStatus> {
    new_component(name).map_err(|e| match e {
        NfsStatus::Exist => NfsStatus::Inval,
        e => e,
    })
}

/// An object no directory links to any more is gone for sfs clients, as with the local
/// backend (which resolves handles through names): a backend that still has it open (Ganesha
/// keeps descriptors) reports `nlink` 0, and the handle is answered STALE.
fn alive(a: Option<&Attr>) -> Result<(), NfsStatus> {
    match a {
        Some(a) if a.nlink == 0 => Err(NfsStatus::Stale),
        _ => Ok(()),
    }
}

/// Whether a backend directory entry is shown to clients: never `.`, `..` or a hidden name
/// ([`hidden`]).
fn listed(name: &[u8]) -> bool {
    name != b"." && name != b".." && !name.starts_with(hidden::HIDDEN_PREFIX)
}

fn key(a: &Attr) -> ObjKey {
    (a.fsid, a.fileid)
}

fn leased(mut a: Option<Attr>, lease_ms: u32) -> Option<Attr> {
    if let Some(a) = &mut a {
        a.lease_ms = lease_ms;
    }
    a
}

/// What [`Inner::peek`] found under a name: its key and handle.
type Peeked = (ObjKey, FileHandle);

/// A client handle, verified, with its backend handle.
#[derive(Clone, Copy)]
struct Obj {
    fh: FileHandle,
    key: ObjKey,
    b: BackendFh,
}

impl Inner {
    fn unwrap(&self, fh: &FileHandle) -> Result<Obj, NfsStatus> {
        let hd = self.key.verify(fh)?;
        match hd.backend {
            Some(b) if hd.export_id == EXPORT_ID => Ok(Obj {
                fh: *fh,
                key: (hd.device, hd.inode),
                b,
            }),
            // A local handle (or one of another export): not ours.
            _ => Err(NfsStatus::Stale),
        }
    }

    /// Wraps a backend handle; its attributes give the object's identity.
    fn wrap(&self, b: &[u8], attr: Option<&Attr>) -> Result<FileHandle, NfsStatus> {
        let Some(a) = attr else {
            tracing::warn!("the NFS backend returned a handle without attributes");
            return Err(NfsStatus::Io);
        };
        let backend = BackendFh::new(b).map_err(|_| NfsStatus::Io)?;
        Ok(self.key.seal(&HandleData {
            export_id: EXPORT_ID,
            device: a.fsid,
            inode: a.fileid,
            generation: 0,
            backend: Some(backend),
        }))
    }

    fn call(
        self: &Arc<Self>,
        creds: &Creds,
        proc: Proc,
        args: Raw,
        then: impl FnOnce(&Arc<Self>, Result<Body, CallError>) + Send + 'static,
    ) {
        let a = auth(creds);
        let me = self.clone();
        self.pool.call(
            move |xid, out| {
                rpc::encode_call(out, xid, NFS_PROG, NFS_VERS, proc.code(), Some(&a), &args)
            },
            Box::new(move |res| then(&me, res)),
        );
    }

    /// One request: checks what the local backend checks before the kernel would, then the
    /// NFSv3 call(s); `done` gets the reply and the lease bookkeeping.
    fn submit(self: &Arc<Self>, ctx: OpCtx, op: RequestOp, done: Done<Outcome>) {
        let fail = |done: Done<Outcome>, s: NfsStatus| done(Outcome::err(s));
        if self.read_only && super::is_mutating(&op) && !matches!(op, RequestOp::Commit { .. }) {
            return fail(done, NfsStatus::RoFs);
        }
        let lease = ctx.lease_ms;
        macro_rules! obj {
            ($fh:expr) => {
                match self.unwrap(&$fh) {
                    Ok(o) => o,
                    Err(s) => return fail(done, s),
                }
            };
        }
        macro_rules! check {
            ($e:expr) => {
                if let Err(s) = $e {
                    return fail(done, s);
                }
            };
        }
        let c = &ctx.creds;
        match op {
            RequestOp::Mount { path } => {
                let comps = match path_components(&path) {
                    Ok(comps) => comps,
                    Err(s) => return fail(done, s),
                };
                self.mount_step(ctx, self.root, comps, done);
            }
            RequestOp::Fetch { path, count } => {
                let comps = match path_components(&path) {
                    Ok(comps) => comps,
                    Err(s) => return fail(done, s),
                };
                self.fetch_step(ctx, (self.root, None), comps, count, done);
            }
            RequestOp::GetAttr { fh } => {
                let o = obj!(fh);
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
            RequestOp::SetAttr { fh, attr, guard } => {
                let o = obj!(fh);
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
            RequestOp::Lookup { dir, name } => {
                let d = obj!(dir);
                check!(component(&name));
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
            RequestOp::Access { fh, access: asked } => {
                let o = obj!(fh);
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
            RequestOp::ReadLink { fh } => {
                let o = obj!(fh);
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
            RequestOp::Write {
                fh,
                offset,
                stable,
                data,
            } => {
                let o = obj!(fh);
                if offset.checked_add(data.len() as u64).is_none() {
                    return fail(done, NfsStatus::FBig);
                }
                let sent = data.len() as u32;
                let args = ops::write(o.b.as_slice(), offset, stable, &data);
                drop(data);
                self.call(c, Proc::Write, args, move |_, res| {
                    let r = results(res, |r| {
                        let a = ops::wcc(r)?;
                        let count = r.u32("count")?;
                        let committed = ops::stable(r)?;
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
            RequestOp::Append { fh, stable, data } => {
                let o = obj!(fh);
                self.append(append::Pending {
                    creds: c.clone(),
                    o,
                    lease,
                    stable,
                    data,
                    done,
                });
            }
            RequestOp::Commit { fh, offset, count } => {
                let o = obj!(fh);
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
            RequestOp::Create { dir, name, how } => {
                let d = obj!(dir);
                check!(new_component(&name));
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
            RequestOp::Mkdir { dir, name, attr } => {
                let d = obj!(dir);
                check!(new_component(&name));
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
            RequestOp::Symlink {
                dir,
                name,
                attr,
                target,
            } => {
                let d = obj!(dir);
                check!(new_component(&name));
                if target.is_empty() || target.contains(&0) || target.len() > ops::MAX_LINK {
                    return fail(done, NfsStatus::Inval);
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
            RequestOp::Remove { dir, name } => {
                let d = obj!(dir);
                check!(old_component(&name));
                self.remove(ctx, d, name, false, done);
            }
            RequestOp::Rmdir { dir, name } => {
                let d = obj!(dir);
                if name == b"." {
                    return fail(done, NfsStatus::Inval);
                }
                if name == b".." {
                    return fail(done, NfsStatus::NotEmpty);
                }
                check!(old_component(&name));
                self.remove(ctx, d, name, true, done);
            }
            RequestOp::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            } => {
                let fd = obj!(from_dir);
                let td = obj!(to_dir);
                check!(old_component(&from_name));
                check!(old_component(&to_name));
                self.rename(ctx, fd, from_name, td, to_name, done);
            }
            RequestOp::Rename2 {
                from_dir,
                from_name,
                to_dir,
                to_name,
                flags,
            } => {
                // NFSv3 RENAME always replaces: only the plain form can be passed on.
                if flags != 0 {
                    return fail(done, NfsStatus::NotSupp);
                }
                let fd = obj!(from_dir);
                let td = obj!(to_dir);
                check!(old_component(&from_name));
                check!(old_component(&to_name));
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
                self.rename(ctx, fd, from_name, td, to_name, as_rename2);
            }
            // Not passed on yet (NFSv3 MKNOD would carry it): FIFOs, sockets and devices
            // cannot be made through this backend.
            RequestOp::Mknod { .. } => fail(done, NfsStatus::NotSupp),
            // Its point is to answer extended-attribute questions, which this backend answers
            // NOTSUPP: the client lists with READDIRPLUS instead.
            RequestOp::ListDir { .. } => fail(done, NfsStatus::NotSupp),
            // NFSv3 has no extended attributes (nor does it carry ACLs): answered as a local
            // file system without them answers.
            RequestOp::GetXattr { .. }
            | RequestOp::SetXattr { .. }
            | RequestOp::ListXattr { .. }
            | RequestOp::RemoveXattr { .. } => fail(done, NfsStatus::NotSupp),
            RequestOp::Open { fh } => {
                let o = obj!(fh);
                self.open_state(&ctx, &o, done);
            }
            RequestOp::Close { fh } => self.close_state(&ctx, &fh, done),
            RequestOp::Link { fh, dir, name } => {
                let o = obj!(fh);
                let d = obj!(dir);
                check!(new_component(&name));
                self.link(ctx, o, d, name, done);
            }
            RequestOp::ReadDir {
                dir,
                cookie,
                verifier,
                count,
            } => {
                let d = obj!(dir);
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
            RequestOp::ReadDirPlus {
                dir,
                cookie,
                verifier,
                dircount,
                maxcount,
            } => {
                let d = obj!(dir);
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
                            if used + cost > budget
                                || (dir_budget > 0 && dir_used + base > dir_budget)
                            {
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
            RequestOp::FsStat { fh } => {
                let o = obj!(fh);
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
            RequestOp::FsInfo { fh } => {
                let o = obj!(fh);
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
            RequestOp::PathConf { fh } => {
                let o = obj!(fh);
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
            RequestOp::Null
            | RequestOp::Login(_)
            | RequestOp::Narrow { .. }
            | RequestOp::Session { .. }
            | RequestOp::Sequence { .. }
            | RequestOp::Read { .. } => fail(done, NfsStatus::ServerFault),
            // The lock table's ([`crate::lock_ops`]), never storage's.
            RequestOp::Lock(_) | RequestOp::Unlock(_) | RequestOp::TestLock(_) => {
                fail(done, NfsStatus::ServerFault)
            }
        }
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

    /// FETCH: LOOKUP one component at a time from the export's root (as MOUNT, but the last
    /// may be of any type), then a regular file's first `count` bytes with one READ, the
    /// backend checking each step as the caller. `at` is where the walk stands and its
    /// attributes, when the LOOKUP that found it gave them.
    fn fetch_step(
        self: &Arc<Self>,
        ctx: OpCtx,
        at: (BackendFh, Option<Attr>),
        mut rest: VecDeque<Vec<u8>>,
        count: u32,
        done: Done<Outcome>,
    ) {
        let c = ctx.creds.clone();
        let (at, attr) = at;
        let Some(name) = rest.pop_front() else {
            return match attr {
                Some(a) => self.fetch_data(ctx, at, a, count, done),
                None => {
                    let args = ops::pack(&nfs3_types::nfs3::GETATTR3args {
                        object: ops::fh3(at.as_slice()),
                    });
                    self.call(&c, Proc::GetAttr, args, move |me, res| {
                        match results(res, ops::fattr) {
                            Ok(a) => me.fetch_data(ctx, at, a, count, done),
                            Err(s) => done(Outcome::err(s)),
                        }
                    })
                }
            };
        };
        if attr.is_some_and(|a| a.ftype != FileType::Directory) {
            return done(Outcome::err(NfsStatus::NotDir));
        }
        self.lookup_in(&c, at, &name, move |me, r| match r {
            Ok(next) => me.fetch_step(ctx, next, rest, count, done),
            Err(s) => done(Outcome::err(s)),
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

    /// LINK, after the check the local kernel makes with `protected_hardlinks` (an NFS server
    /// such as Ganesha links as root or without that check): a user may link only a file it
    /// owns, or a regular, non-setuid, non-setgid-executable file it may both read and write.
    /// The read/write answer is the backend's own (ACCESS with the user's credentials).
    fn link(self: &Arc<Self>, ctx: OpCtx, o: Obj, d: Obj, name: Vec<u8>, done: Done<Outcome>) {
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

    fn remove(
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

    fn rename(
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

    fn read(
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

/// MOUNT's and FETCH's path: its components from the export's root (empty and `.` skipped,
/// `..` refused).
fn path_components(path: &[u8]) -> Result<VecDeque<Vec<u8>>, NfsStatus> {
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

/// Builds an [`Outcome`] from decoded results; on any error it carries no lease and changes
/// nothing.
fn outcome<T>(
    r: Result<T, NfsStatus>,
    f: impl FnOnce(T, &mut Outcome) -> Result<ReplyBody, NfsStatus>,
) -> Outcome {
    let mut out = Outcome::err(NfsStatus::ServerFault);
    out.result = r.and_then(|v| f(v, &mut out));
    if out.result.is_err() {
        out.leased.clear();
        out.changed.clear();
    }
    out
}

impl Storage for NfsBackend {
    /// Never refuses: past its bound of calls in flight the backend answers JUKEBOX itself.
    fn submit(&self, ctx: OpCtx, op: RequestOp, done: Done<Outcome>) -> Result<(), Busy> {
        self.inner.submit(ctx, op, done);
        Ok(())
    }

    /// One RPC; the reply is decoded and copied into the reply record in the connection's
    /// color, in parallel with other connections. No descriptor to cache.
    fn read(&self, call: ReadCall<'_>) {
        let (color, ctx, args) = (call.color(), call.ctx(), call.args());
        call.later(|reply| {
            let done: Done<Result<Vec<u8>, NfsStatus>> = Box::new(move |res| {
                reply.complete(res.map(|buf| ReplyRecord { buf, start: 0 }), None)
            });
            self.inner.read(color, ctx, args, done);
            Ok(())
        });
    }

    fn connection_closed(&self, conn: crate::leases::ConnId) {
        self.inner.connection_closed(conn);
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
