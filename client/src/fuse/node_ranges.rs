//! Which handler answers a kernel request: the kernel adapter ([`super::SfsFuse`]) asks its
//! [`NodeRanges`] for the mount whose node range holds the request's node and calls that mount's
//! operations; a node no mount holds is one of the router's own, answered by the methods below.
//!
//! A mount of one server is one range holding every node ([`OneServer`]). The namespace
//! ([`crate::namespace`]) gives each server a range of node ids of its own and keeps range 0
//! for its root and bookmarks: it implements only what those nodes answer (lookup, attributes,
//! listings, symlink targets), so no method is forwarded by hand. Whatever would change or
//! open an own node is refused by the adapter (`EACCES`), and they have no extended
//! attributes.

use std::ffi::OsStr;
use std::sync::Arc;

use fuser::{
    AccessFlags, Errno, INodeNo, ReplyAttr, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};

use super::ServerMount;

/// The mounts behind one FUSE file system, by node range, and the answers for the nodes no
/// mount holds. Those answers default to `ESTALE`, what a mount answers for a node it does
/// not know.
pub(crate) trait NodeRanges: Send + Sync + 'static {
    /// The mount whose range holds `ino`; None: `ino` is one of the router's own nodes.
    fn mount(&self, ino: INodeNo) -> Option<Arc<ServerMount>>;

    /// Whether `a` and `b` are in different ranges: a rename or link between them is `EXDEV`.
    fn apart(&self, _a: INodeNo, _b: INodeNo) -> bool {
        false
    }

    /// The mounts whose hidden names (files unlinked while open, [`super::unlinked`]) are
    /// removed when the kernel unmounts the file system.
    fn unmounting(&self) -> Vec<Arc<ServerMount>> {
        Vec::new()
    }

    /// LOOKUP of `name` in own node `parent`, answered on a task of its own if it waits
    /// (killed with `req`'s caller).
    fn lookup(&self, _req: &Request, _parent: INodeNo, _name: &OsStr, reply: ReplyEntry) {
        reply.error(Errno::ESTALE);
    }

    /// GETATTR of own node `ino`.
    fn getattr(&self, _ino: INodeNo, reply: ReplyAttr) {
        reply.error(Errno::ESTALE);
    }

    /// READLINK of own node `ino`.
    fn readlink(&self, _ino: INodeNo, reply: ReplyData) {
        reply.error(Errno::ESTALE);
    }

    /// OPENDIR of own node `ino`.
    fn opendir(&self, _ino: INodeNo, reply: ReplyOpen) {
        reply.error(Errno::ESTALE);
    }

    /// READDIR of own node `ino` from `offset`.
    fn readdir(&self, _ino: INodeNo, _offset: u64, reply: ReplyDirectory) {
        reply.error(Errno::ESTALE);
    }

    /// READDIRPLUS of own node `ino` from `offset`.
    fn readdirplus(&self, _ino: INodeNo, _offset: u64, reply: ReplyDirectoryPlus) {
        reply.error(Errno::ESTALE);
    }

    /// STATFS asked on own node `ino`.
    fn statfs(&self, _ino: INodeNo, reply: ReplyStatfs) {
        reply.error(Errno::ESTALE);
    }

    /// ACCESS of own node `ino`.
    fn access(&self, _ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        reply.error(Errno::ESTALE);
    }
}

/// A mount of one server: one range holding every node.
pub(crate) struct OneServer(pub Arc<ServerMount>);

impl NodeRanges for OneServer {
    fn mount(&self, _ino: INodeNo) -> Option<Arc<ServerMount>> {
        Some(self.0.clone())
    }

    fn unmounting(&self) -> Vec<Arc<ServerMount>> {
        vec![self.0.clone()]
    }
}
