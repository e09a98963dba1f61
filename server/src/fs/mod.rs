//! Storage: the one trait the server calls ([`Storage`], completion-based), the blocking
//! backends' trait ([`BlockingStorage`]) and the storage threads that adapt one to the other
//! ([`pooled::Pooled`] over [`pool`]).
//!
//! A backend performs each operation with the request's [`Creds`] so that the system that
//! holds the files makes every permission decision: the local backend switches the storage
//! thread's file-system credentials for the operation ([`creds`]), as the kernel NFS server
//! does. Anonymous credentials never modify anything (the connection refuses such requests
//! before they reach storage). The storage threads ([`pool`]) are shared fairly between
//! connections.

pub(crate) mod creds;
pub(crate) mod local;
pub(crate) mod nfs;
pub(crate) mod open_states;
pub(crate) mod pool;
pub(crate) mod pooled;
pub(crate) mod read_call;

use protocol::{Attr, FileHandle, HandleData, NfsStatus, ReplyBody, RequestOp};

use crate::users::Creds;
pub(crate) use pool::Busy;
pub(crate) use read_call::ReadCall;

pub(crate) use crate::ids::ObjKey;

/// The key of a verified handle.
pub(crate) fn key_of(h: &HandleData) -> ObjKey {
    (h.device, h.inode)
}

/// Per-request context a storage operation runs with.
#[derive(Debug, Clone)]
pub(crate) struct OpCtx {
    pub creds: Creds,
    /// The connection the request came on (open states are its own).
    pub conn: crate::ids::ConnId,
    /// Lease to put in every attribute of the reply (0 when the lease table is full).
    pub lease_ms: u32,
}

/// What an operation did, for the dispatcher's lease bookkeeping.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub result: Result<ReplyBody, NfsStatus>,
    /// Objects whose attributes the reply carries: the connection now holds leases on them.
    pub leased: Vec<(ObjKey, FileHandle)>,
    /// Objects the operation changed: other holders get INVALIDATE.
    pub changed: Vec<(ObjKey, FileHandle, Option<Attr>)>,
    /// The request's own data buffer (a WRITE's), handed back so the connection decodes its
    /// next request into it instead of a fresh allocation.
    pub returned_buffer: Vec<u8>,
}

impl Outcome {
    pub(crate) fn err(status: NfsStatus) -> Outcome {
        Outcome {
            result: Err(status),
            leased: Vec::new(),
            changed: Vec::new(),
            returned_buffer: Vec::new(),
        }
    }
}

/// The storage the server calls: the dispatcher ([`crate::server`]), the READ path
/// (`conn.rs`), the lock operations ([`crate::lock_ops`]) and connection close. Every
/// operation is submitted with its completion and never blocks the caller: a blocking backend
/// runs behind the storage threads of [`pooled::Pooled`], the NFS backend sends an RPC and
/// completes when the reply arrives.
pub(crate) trait Storage: Send + Sync + 'static {
    /// Runs any request except NULL, LOGIN, READ and the lock operations. `done` runs once
    /// with the outcome, on whatever thread or color the backend completes in (possibly
    /// before this returns, on the caller's worker). `Err(Busy)`: the backend has no room for
    /// it now; nothing ran and `done` was dropped (the caller answers JUKEBOX, "try later").
    fn submit(&self, ctx: OpCtx, op: RequestOp, done: Done<Outcome>) -> Result<(), Busy>;
    /// READ of a verified handle, called in the connection's color: the backend answers it
    /// there at once ([`ReadCall::answer`]) or later ([`ReadCall::later`]) with the reply
    /// record laid out as [`protocol::encode_read_reply_at`] writes it after a 4-byte gap for
    /// the record header, which the connection seals in place.
    fn read(&self, call: ReadCall<'_>);
    /// Connection `conn` closed: whatever the backend keeps for it goes (open states).
    fn connection_closed(&self, conn: crate::ids::ConnId) {
        let _ = conn;
    }
    /// The server stopped: no operation starts after this (the storage threads are joined).
    fn stop(&self) {}
}

/// A storage backend whose methods may block (disk I/O): [`pooled::Pooled`] calls them on the
/// storage threads ([`pool`]), never on a worker, except [`BlockingStorage::execute_inline`].
pub(crate) trait BlockingStorage: Send + Sync + 'static {
    /// Runs any request except NULL, LOGIN and READ.
    fn execute(&self, ctx: &OpCtx, op: RequestOp) -> Outcome;
    /// Runs `op` on the calling worker if it is one the backend answers without waiting
    /// long (no data, no truncation, no walk of the export: `fs/local/inline.rs`), else None: the
    /// caller hands it to a storage thread. Nothing was changed when it returns None.
    fn execute_inline(&self, ctx: &OpCtx, op: &RequestOp) -> Option<Outcome> {
        let _ = (ctx, op);
        None
    }
    /// Opens `fh` for READ after checking the caller may read it (the READ path caches the
    /// descriptor for this caller: see [`crate::read`]).
    fn open_read(&self, ctx: &OpCtx, fh: &HandleData) -> Result<std::fs::File, NfsStatus>;
    /// Connection `conn` closed: whatever the backend keeps for it goes (open states).
    fn connection_closed(&self, conn: crate::ids::ConnId) {
        let _ = conn;
    }
}

/// A completion: runs once with the result, in whatever color the backend completes in.
pub(crate) type Done<T> = Box<dyn FnOnce(T) + Send>;

/// What a READ asks, once its handle is verified.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadArgs {
    pub hd: HandleData,
    pub offset: u64,
    /// Already clamped to the client's and the server's limits.
    pub count: usize,
    /// The request's id, for the reply record.
    pub req_id: u64,
}

/// The mode of an object made by a request that carries none: one default for every backend
/// (docs/PROTOCOL.md, "Modes of new objects"). [`fill_default_mode`] writes it into the
/// request before any backend sees it, so an NFS server's own choice (NFS-Ganesha makes such
/// a directory 000) never applies.
pub(crate) mod default_mode {
    /// MKDIR.
    pub(crate) const DIRECTORY: u32 = 0o755;
    /// CREATE (UNCHECKED or GUARDED) of a regular file, and MKNOD of a special file.
    pub(crate) const FILE: u32 = 0o644;
    /// SYMLINK (Linux gives every symlink 0777 and ignores any mode asked).
    pub(crate) const SYMLINK: u32 = 0o777;
    /// EXCLUSIVE CREATE, which carries no attributes: private until the SETATTR the client
    /// sends next sets the mode it wants. (The NFS backend cannot pass a mode in that call;
    /// the NFS server chooses, and NFS-Ganesha's choice is also 0600.)
    pub(crate) const EXCLUSIVE: u32 = 0o600;
}

/// Gives a request that makes an object without a mode the [`default_mode`] for its kind.
pub(crate) fn fill_default_mode(op: &mut RequestOp) {
    use protocol::CreateHow;
    let (attr, default) = match op {
        RequestOp::Mkdir { attr, .. } => (attr, default_mode::DIRECTORY),
        RequestOp::Create {
            how: CreateHow::Unchecked(attr) | CreateHow::Guarded(attr),
            ..
        }
        | RequestOp::CreateAt {
            how: CreateHow::Unchecked(attr) | CreateHow::Guarded(attr),
            ..
        }
        | RequestOp::Mknod { attr, .. } => (attr, default_mode::FILE),
        RequestOp::Symlink { attr, .. } => (attr, default_mode::SYMLINK),
        _ => return,
    };
    attr.mode.get_or_insert(default);
}

/// A CREATEAT path split into its directory's path and the new name (its last non-empty
/// component; a path ending in `/` names no file).
pub(crate) fn split_create_path(path: &[u8]) -> Result<(&[u8], &[u8]), NfsStatus> {
    let (dir, name) = match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&b""[..], path),
    };
    if name.is_empty() || name == b"." || name == b".." {
        return Err(NfsStatus::Inval);
    }
    Ok((dir, name))
}

/// Procedures that change the file system (refused on read-only exports and to anonymous
/// users).
pub(crate) fn is_mutating(op: &RequestOp) -> bool {
    matches!(
        op,
        RequestOp::SetAttr { .. }
            | RequestOp::Write { .. }
            | RequestOp::Append { .. }
            | RequestOp::Create { .. }
            | RequestOp::CreateAt { .. }
            | RequestOp::Mkdir { .. }
            | RequestOp::Symlink { .. }
            | RequestOp::Mknod { .. }
            | RequestOp::Remove { .. }
            | RequestOp::Rmdir { .. }
            | RequestOp::Rename { .. }
            | RequestOp::Rename2 { .. }
            | RequestOp::Link { .. }
            | RequestOp::Commit { .. }
            // Holds a descriptor on the server: not for anonymous users.
            | RequestOp::Open { .. }
            | RequestOp::SetXattr { .. }
            | RequestOp::RemoveXattr { .. }
    )
}

#[cfg(test)]
mod tests {
    use protocol::{CreateHow, FileHandle, SetAttr, SpecialKind};

    use super::*;

    #[test]
    fn a_missing_mode_gets_the_default_for_its_kind_and_a_sent_one_stays() {
        let fh = FileHandle::from_bytes([7; protocol::handle::HANDLE_LEN]);
        let none = SetAttr::default();
        let sent = SetAttr {
            mode: Some(0o700),
            ..SetAttr::default()
        };
        let mode_of = |op: RequestOp| {
            let mut op = op;
            fill_default_mode(&mut op);
            match op {
                RequestOp::Mkdir { attr, .. }
                | RequestOp::Symlink { attr, .. }
                | RequestOp::Mknod { attr, .. }
                | RequestOp::Create {
                    how: CreateHow::Unchecked(attr) | CreateHow::Guarded(attr),
                    ..
                } => attr.mode,
                RequestOp::Create {
                    how: CreateHow::Exclusive(_),
                    ..
                } => None,
                other => panic!("{other:?}"),
            }
        };
        let name = b"n".to_vec();
        let mkdir = |attr: &SetAttr| RequestOp::Mkdir {
            dir: fh,
            name: name.clone(),
            attr: *attr,
        };
        let create = |how| RequestOp::Create {
            dir: fh,
            name: name.clone(),
            how,
        };
        let symlink = RequestOp::Symlink {
            dir: fh,
            name: name.clone(),
            attr: none,
            target: b"t".to_vec(),
        };
        let mknod = RequestOp::Mknod {
            dir: fh,
            name: name.clone(),
            kind: SpecialKind::Fifo,
            attr: none,
        };
        assert_eq!(mode_of(mkdir(&none)), Some(0o755));
        assert_eq!(mode_of(mkdir(&sent)), Some(0o700));
        assert_eq!(mode_of(create(CreateHow::Guarded(none))), Some(0o644));
        assert_eq!(mode_of(create(CreateHow::Unchecked(none))), Some(0o644));
        assert_eq!(mode_of(create(CreateHow::Unchecked(sent))), Some(0o700));
        assert_eq!(mode_of(create(CreateHow::Exclusive([1; 8]))), None);
        assert_eq!(mode_of(symlink), Some(0o777));
        assert_eq!(mode_of(mknod), Some(0o644));
        // Requests that make nothing are left alone.
        let mut op = RequestOp::SetAttr {
            fh,
            attr: none,
            guard: None,
        };
        fill_default_mode(&mut op);
        assert!(matches!(op, RequestOp::SetAttr { attr, .. } if attr.mode.is_none()));
    }
}
