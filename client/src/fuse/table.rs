//! The node table: the kernel's 64-bit node ids for the server's handles.
//!
//! A handle gets a node id the first time an entry for it is sent to the kernel; the kernel's
//! lookup count is kept, and the node is dropped when the kernel FORGETs it. A handle found
//! again gets a new id; an id is never given to another handle, so a stale kernel reference
//! can only ever meet `ESTALE`. What `stat` shows is the server's inode number, not the id
//! (`convert::stat_ino`). [`Table`] also holds, under the same lock, what the other parts
//! keep per node and per open file (their fields say which).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use fuser::{Errno, INodeNo};
use protocol::{Attr, FileHandle};

use super::convert::{fattr, ttl};
use super::data::Dirty;
use super::listing::Listing;
use super::{Entry, ServerMount, kernel_listings};

pub(super) struct Node {
    pub(super) fh: FileHandle,
    /// The kernel's lookup count: entries sent minus FORGET counts.
    pub(super) lookups: u64,
}

/// The mount's nodes and what is kept per node and per open file, under one lock.
#[derive(Default)]
pub(super) struct Table {
    pub(super) nodes: HashMap<u64, Node>,
    pub(super) by_fh: HashMap<FileHandle, u64>,
    /// Names under each directory for which the kernel may hold a dentry (sent in an entry
    /// reply and not since invalidated), each with the node it was sent for.
    pub(super) names: HashMap<u64, HashMap<Vec<u8>, u64>>,
    pub(super) next: u64,
    /// Open listings by FUSE file handle, with the directory node they were opened on.
    pub(super) listings: HashMap<u64, (u64, Arc<Listing>)>,
    pub(super) next_listing: u64,
    /// What the kernel's own copy of each directory's listing was filled from.
    pub(super) kernel_listings: kernel_listings::KernelListings<Listing>,
    pub(super) dirty: HashMap<u64, Dirty>,
    /// Open files per node (open/create minus release).
    pub(super) open: HashMap<u64, u32>,
    /// The local user who opened each open file, by the FUSE file handle its open or create
    /// returned: write-back (kernel-initiated WRITEs of a shared mapping's dirty pages) and
    /// the last release act as that user, whoever the kernel sends them as.
    pub(super) files: HashMap<u64, u32>,
    pub(super) next_file: u64,
    /// Open nodes the server keeps an open state on, and for which local users: OPEN before
    /// their last name went, or a CREATE whose mode denies the owner
    /// ([`protocol::create_keeps_open_state`]).
    /// Each is CLOSEd at the node's last release.
    pub(super) states: HashMap<u64, HashSet<u32>>,
    /// Nodes unlinked while open on a server without open states (OPEN answered `NotSupp`, as
    /// sfsd in front of an NFS server does, or the connection's states are used up): renamed
    /// to a hidden name, removed at the last release or when the mount ends.
    pub(super) hidden: HashMap<u64, (FileHandle, Vec<u8>)>,
    pub(super) next_hidden: u64,
    /// Nodes whose unstable writes the server may have lost: reported by every flush and by
    /// the next fsync (which clears it), like a kernel's write-back error, so the error is not
    /// swallowed by whichever process happened to close a descriptor first.
    pub(super) lost: HashSet<u64>,
    /// Regular files made new here and still open by their maker, whose SETATTRs may be
    /// answered early ([`super::attrs_behind`]).
    pub(super) made: HashMap<u64, super::attrs_behind::MadeHere>,
    /// Small files' bytes read with their opens ([`super::read_at_open`]).
    pub(super) read_at_open: super::read_at_open::ReadAtOpen,
    /// What the kernel's pages of each file were read under ([`super::kept_pages`]).
    pub(super) kept_pages: super::kept_pages::KeptPages,
}

impl ServerMount {
    pub(super) fn fh(&self, ino: INodeNo) -> Result<FileHandle, Errno> {
        self.table()
            .nodes
            .get(&ino.0)
            .map(|n| n.fh)
            .ok_or(Errno::ESTALE)
    }

    /// The node for `fh`, counting one more kernel lookup; `name` under `parent` is
    /// remembered so a change of the directory can invalidate the kernel's dentry.
    pub(super) fn remember(&self, parent: INodeNo, name: &[u8], fh: FileHandle) -> u64 {
        let mut t = self.table();
        let ino = match t.by_fh.get(&fh).copied() {
            Some(ino) => {
                if let Some(n) = t.nodes.get_mut(&ino) {
                    n.lookups += 1;
                }
                ino
            }
            None => {
                // Never an id the kernel knew another handle by: `st_ino` is not the id
                // (`convert::stat_ino`), so a handle found again may take a new one.
                t.next += 1;
                let ino = t.next - 1;
                t.nodes.insert(ino, Node { fh, lookups: 1 });
                t.by_fh.insert(fh, ino);
                ino
            }
        };
        t.names
            .entry(parent.0)
            .or_default()
            .insert(name.to_vec(), ino);
        ino
    }

    /// The kernel dropped `n` references to `ino`.
    pub(super) fn forget(&self, ino: u64, n: u64) {
        if ino == self.root {
            return;
        }
        let mut t = self.table();
        let gone = match t.nodes.get_mut(&ino) {
            Some(node) => {
                node.lookups = node.lookups.saturating_sub(n);
                (node.lookups == 0).then_some(node.fh)
            }
            None => None,
        };
        if let Some(fh) = gone {
            t.kernel_listings.dir_forgotten(ino);
            t.nodes.remove(&ino);
            t.by_fh.remove(&fh);
            t.names.remove(&ino);
            t.dirty.remove(&ino);
            t.kept_pages.forget(ino);
            drop(t);
            self.behind.forget(ino);
        }
    }

    /// The node the kernel was last told `name` in `parent` is, if it still exists.
    pub(super) fn named(&self, parent: INodeNo, name: &[u8]) -> Option<(u64, FileHandle)> {
        let t = self.table();
        let ino = *t.names.get(&parent.0)?.get(name)?;
        Some((ino, t.nodes.get(&ino)?.fh))
    }

    pub(super) fn forget_name(&self, parent: INodeNo, name: &[u8]) {
        if let Some(s) = self.table().names.get_mut(&parent.0) {
            s.remove(name);
        }
    }

    /// `name` in `parent` was renamed `newname` in `newparent`: the kernel moved its dentry,
    /// so the node goes with the name, and what `newname` named before is no longer there.
    pub(super) fn rename_name(&self, (parent, name): (INodeNo, &[u8]), to: (INodeNo, &[u8])) {
        let mut t = self.table();
        let moved = t.names.get_mut(&parent.0).and_then(|s| s.remove(name));
        let (newparent, newname) = to;
        let names = t.names.entry(newparent.0).or_default();
        match moved {
            Some(ino) => names.insert(newname.to_vec(), ino),
            None => names.remove(newname),
        };
    }

    /// An entry reply for `fh` found as `name` in `parent`.
    pub(super) fn entry(&self, parent: INodeNo, name: &[u8], fh: FileHandle, a: &Attr) -> Entry {
        let ino = self.remember(parent, name, fh);
        Entry {
            ttl: ttl(a),
            attr: fattr(ino, a),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse::ROOT;
    use crate::fuse::tests::shared;

    #[test]
    fn nodes_count_lookups_and_are_forgotten() {
        let sh = shared();
        let a = FileHandle::from_bytes([2; 48]);
        let ino = sh.remember(INodeNo(ROOT), b"a", a);
        assert_ne!(ino, ROOT);
        // A hard link: same handle, same node.
        assert_eq!(sh.remember(INodeNo(ROOT), b"b", a), ino);
        assert_eq!(sh.fh(INodeNo(ino)).unwrap(), a);
        sh.forget(ino, 1);
        assert_eq!(sh.fh(INodeNo(ino)).unwrap(), a, "one lookup left");
        sh.forget(ino, 1);
        assert_eq!(sh.fh(INodeNo(ino)), Err(Errno::ESTALE));
        // Found again: a new id; no other handle ever gets the old one.
        let again = sh.remember(INodeNo(ROOT), b"a", a);
        assert!(again > ino);
        assert_eq!(sh.fh(INodeNo(again)).unwrap(), a);
        assert_eq!(sh.fh(INodeNo(ino)), Err(Errno::ESTALE));
        // Another handle never gets either.
        let b = FileHandle::from_bytes([3; 48]);
        assert!(sh.remember(INodeNo(ROOT), b"c", b) > again);
        // The root is never forgotten.
        sh.forget(ROOT, 100);
        assert!(sh.fh(INodeNo(ROOT)).is_ok());
    }

    #[test]
    fn a_renamed_name_takes_its_node_and_ends_the_one_it_replaced() {
        let sh = shared();
        let (a, b) = (
            FileHandle::from_bytes([2; 48]),
            FileHandle::from_bytes([3; 48]),
        );
        let dir = INodeNo(ROOT);
        let lock = sh.remember(dir, b"index.lock", a);
        sh.remember(dir, b"index", b);
        sh.rename_name((dir, b"index.lock"), (dir, b"index"));
        assert_eq!(sh.named(dir, b"index"), Some((lock, a)));
        assert_eq!(sh.named(dir, b"index.lock"), None);
        // A name the kernel was not told of, moved over one it was: neither is known now.
        sh.rename_name((dir, b"unknown"), (dir, b"index"));
        assert_eq!(sh.named(dir, b"index"), None);
    }
}
