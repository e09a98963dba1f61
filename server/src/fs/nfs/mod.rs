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
//! **Hostile or broken backends.** Replies are bounded records read with the protocol crate's
//! bounded XDR reader ([`protocol::xdr::Reader`], the one sfs's own wire uses); anything
//! malformed takes the connection down (its calls are answered JUKEBOX) and it reconnects. A backend that goes away gives JUKEBOX to clients until it returns.
//! Writes are answered with the backend's own `committed` level and write verifier, so a
//! backend restart changes the verifier and clients resend unstable data (COMMIT works the
//! same way): nothing acknowledged as stable is lost.
//!
//! **Files.** As the local backend's (`fs/local/`), one per kind of operation, each a method
//! of [`NfsState`] that [`NfsState::submit`] calls in one line: [`lookup`] (MOUNT, FETCH, LOOKUP,
//! READLINK), [`attrs`] (GETATTR, SETATTR, ACCESS, FSSTAT, FSINFO, PATHCONF), [`data`] (WRITE,
//! APPEND, COMMIT, READ), [`create`] (CREATE, MKDIR, SYMLINK, LINK), [`remove`] (REMOVE,
//! RMDIR, RENAME), [`readdir`], [`hidden`] (OPEN, CLOSE, and removed files still held open),
//! [`append`] (APPEND's turns). The wire: [`rpc`] and [`ops`] (sans-IO ONC RPC and NFSv3
//! codecs), [`link`] (the sockets), [`setup`] (URL, port mapper, MOUNT).

/// The value of `$e`, or `$done` answers its error and the enclosing function returns.
macro_rules! or_fail {
    ($e:expr, $done:ident) => {
        match $e {
            Ok(v) => v,
            Err(s) => return $done(crate::fs::Outcome::err(s)),
        }
    };
}

pub(crate) mod append;
mod attrs;
mod create;
mod data;
pub(crate) mod hidden;
pub(crate) mod link;
mod lookup;
pub(crate) mod ops;
mod readdir;
mod remove;
pub(crate) mod rpc;
pub(crate) mod setup;

use std::sync::Arc;

use libcolor::Handle;
use protocol::error::DecodeError;
use protocol::xdr::Reader;
use protocol::{
    Attr, BackendFh, FileHandle, HandleData, HandleKey, NfsStatus, Proc, ReplyBody, RequestOp,
};

use self::link::{Body, CallError, LinkLimits, Pool};
use self::ops::Raw;
use self::rpc::AuthSys;
use self::setup::{NFS_PROG, NFS_VERS};
use super::{Busy, Done, ObjKey, OpCtx, Outcome, ReadCall, Storage};
use crate::read::ReplyRecord;
use crate::users::Creds;

pub(crate) use self::setup::BackendUrl;

/// Export id of wrapped handles (local handles use 1): one never resolves in the other
/// backend.
pub(crate) const EXPORT_ID: u32 = 2;
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
pub(crate) struct NfsConfig {
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

/// What the backend's operations share: the RPC connections, the handle key, the export's root
/// handle, its limits, open states and APPEND turns.
struct NfsState {
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
pub(crate) struct NfsBackend {
    state: Arc<NfsState>,
}

impl NfsBackend {
    /// MOUNTs the export (blocking, before the runtime runs; waiting up to `cfg.start_wait`
    /// for a backend that is not answering yet) and starts the connections.
    pub(crate) fn start(h: &Handle, cfg: &NfsConfig, key: HandleKey) -> anyhow::Result<NfsBackend> {
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
            state: Arc::new(NfsState {
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
    f: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, NfsStatus> {
    let body = body.map_err(call_status)?;
    let mut r = Reader::new(body.bytes());
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

/// What [`NfsState::peek`] found under a name: its key and handle.
type Peeked = (ObjKey, FileHandle);

/// A client handle, verified, with its backend handle.
#[derive(Clone, Copy)]
struct Obj {
    fh: FileHandle,
    key: ObjKey,
    b: BackendFh,
}

impl NfsState {
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

    /// One request: refused on a read-only export if it changes anything (COMMIT aside), else
    /// the operation's NFSv3 call(s), in the file of its kind; `done` gets the reply and the
    /// lease bookkeeping.
    fn submit(self: &Arc<Self>, ctx: OpCtx, op: RequestOp, done: Done<Outcome>) {
        use RequestOp as Op;
        if self.read_only && super::is_mutating(&op) && !matches!(op, Op::Commit { .. }) {
            return done(Outcome::err(NfsStatus::RoFs));
        }
        match op {
            Op::Mount { path } => self.mount(ctx, path, done),
            Op::Fetch { path, count } => self.fetch(ctx, path, count, done),
            Op::GetAttr { fh } => self.getattr(ctx, fh, done),
            Op::SetAttr { fh, attr, guard } => self.setattr(ctx, fh, attr, guard, done),
            Op::Lookup { dir, name } => self.lookup(ctx, dir, name, done),
            Op::Access { fh, access } => self.access(ctx, fh, access, done),
            Op::ReadLink { fh } => self.readlink(ctx, fh, done),
            Op::Write {
                fh,
                offset,
                stable,
                data,
            } => self.write(ctx, fh, offset, stable, data, done),
            Op::Append { fh, stable, data } => self.append_data(ctx, fh, stable, data, done),
            Op::Commit { fh, offset, count } => self.commit(ctx, fh, offset, count, done),
            Op::Create { dir, name, how } => self.create(ctx, dir, name, how, done),
            Op::CreateAt { path, how } => self.create_at(ctx, path, how, done),
            Op::Mkdir { dir, name, attr } => self.mkdir(ctx, dir, name, attr, done),
            Op::Symlink {
                dir,
                name,
                attr,
                target,
            } => self.symlink(ctx, dir, name, attr, target, done),
            Op::Remove { dir, name } => self.remove(ctx, dir, name, done),
            Op::Rmdir { dir, name } => self.rmdir(ctx, dir, name, done),
            Op::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            } => self.rename(ctx, (from_dir, from_name), (to_dir, to_name), None, done),
            Op::Rename2 {
                from_dir,
                from_name,
                to_dir,
                to_name,
                flags,
            } => self.rename(
                ctx,
                (from_dir, from_name),
                (to_dir, to_name),
                Some(flags),
                done,
            ),
            Op::Link { fh, dir, name } => self.link(ctx, fh, dir, name, done),
            Op::ReadDir {
                dir,
                cookie,
                verifier,
                count,
            } => self.readdir(ctx, dir, cookie, verifier, count, done),
            Op::ReadDirPlus {
                dir,
                cookie,
                verifier,
                dircount,
                maxcount,
            } => self.readdirplus(ctx, dir, cookie, verifier, (dircount, maxcount), done),
            Op::FsStat { fh } => self.fsstat(ctx, fh, done),
            Op::FsInfo { fh } => self.fsinfo(ctx, fh, done),
            Op::PathConf { fh } => self.pathconf(ctx, fh, done),
            Op::Open { fh } => self.open(ctx, fh, done),
            Op::Close { fh } => self.close_state(&ctx, &fh, done),
            // Not passed on yet (NFSv3 MKNOD would carry it): FIFOs, sockets and devices
            // cannot be made through this backend.
            Op::Mknod { .. } => done(Outcome::err(NfsStatus::NotSupp)),
            // Its point is to answer extended-attribute questions, which this backend answers
            // NOTSUPP: the client lists with READDIRPLUS instead.
            Op::ListDir { .. } => done(Outcome::err(NfsStatus::NotSupp)),
            // NFSv3 has no extended attributes (nor does it carry ACLs): answered as a local
            // file system without them answers.
            Op::GetXattr { .. }
            | Op::SetXattr { .. }
            | Op::ListXattr { .. }
            | Op::RemoveXattr { .. } => done(Outcome::err(NfsStatus::NotSupp)),
            // Answered by the connection (`conn.rs`) or, READ, through
            // [`Storage::read`]: never here.
            Op::Null
            | Op::Login(_)
            | Op::Narrow { .. }
            | Op::Session { .. }
            | Op::Sequence { .. }
            | Op::Read { .. } => done(Outcome::err(NfsStatus::ServerFault)),
            // The lock table's ([`crate::lock_ops`]), never storage's.
            Op::Lock(_) | Op::Unlock(_) | Op::TestLock(_) => {
                done(Outcome::err(NfsStatus::ServerFault))
            }
        }
    }
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
        self.state.submit(ctx, op, done);
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
            self.state.read(color, ctx, args, done);
            Ok(())
        });
    }

    fn connection_closed(&self, conn: crate::ids::ConnId) {
        self.state.connection_closed(conn);
    }
}
