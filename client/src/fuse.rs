//! The FUSE file system: the kernel's requests forwarded over the session.
//!
//! Every request is handed to the tokio runtime and answered from there, so one kernel thread
//! keeps many requests in flight on the one encrypted stream (reads ahead, parallel lookups).
//! Extended attribute answers already cached are given at once (`ls -l` asks two per file;
//! they are read ahead along listings, [`xattr_ahead`]).
//!
//! **Parts.** This file holds [`ServerMount`], the state every request works on, and how a request
//! finds the session to act as. The operations on it are grouped by kind: [`names`] (lookup,
//! create, remove, rename), [`attrs`] (getattr, setattr, access, statfs), [`data`] (read,
//! write, commit, flush, readlink), [`listings`] (opendir and the readdir answers); [`table`]
//! is the node [`Table`] (node ids, lookup counts, forget) and [`unlinked`] the open files and
//! those unlinked while open. [`kernel`] is the kernel adapter ([`SfsFuse`]: each kernel
//! request becomes a call on the [`ServerMount`] of the mount holding its node, which [`node_ranges`]
//! says: one mount, or a server of the namespace); [`convert`] converts between the
//! protocol's types and the kernel's; [`invalidator()`] passes the server's invalidations on
//! to the kernel; each other submodule is one of the mechanisms below.
//!
//! **Inodes.** The kernel names objects by a 64-bit node id; the server by an opaque (48-113 byte)
//! handle. [`Table`] maps between them: a handle gets a node id the first time an entry for it
//! is sent to the kernel (LOOKUP, CREATE, MKDIR, SYMLINK, LINK), the kernel's lookup count is
//! kept, and the node is dropped when the kernel FORGETs it. Node ids are never reused, so a
//! stale kernel reference can only ever meet `ESTALE`, never another file. Hard links share a
//! handle, so they share a node id and `st_ino`.
//!
//! **Leases into the kernel cache.** Every attribute the server sends carries its lease; it
//! becomes the attribute and entry timeout of the reply to the kernel. The server sends
//! INVALIDATE to every other client holding a lease on an object it changes; the session hands
//! those to [`invalidator()`], which tells the kernel to drop the object's attributes and cached
//! pages (`FUSE_NOTIFY_INVAL_INODE`) and, for a directory, every name under it the kernel may
//! have cached (`FUSE_NOTIFY_INVAL_ENTRY`). After a reconnect everything is invalidated, since
//! INVALIDATEs may have been missed. Negative lookups are not cached at all.
//!
//! **Listings** are read whole at `opendir` (kept for the next opens while the directory's
//! lease lasts, [`kept_listings`], and read ahead along a walk, [`listing_ahead`]) and paged
//! by `readdirplus`; the kernel keeps its own copy and serves it again while that is still
//! the listing an open would get ([`kernel_listings`]); the kernel installs an
//! entry's attributes as of its READDIRPLUS request, so an entry changed since the listing was
//! read is sent with newer attributes (the session cache's, else a GETATTR's), never the
//! listing's: those would take a just-written file's size back.
//!
//! **Writes** go to the server UNSTABLE (it keeps them in its kernel's page cache, which a
//! crash of sfsd does not lose); `fsync` sends COMMIT, and if the server's write verifier
//! changed in between (its machine restarted and may have lost data) it fails with `EIO`
//! instead of claiming success. `close` sends nothing ([`ServerMount::flushed`]): it fails with `EIO` only
//! when the writes themselves came back with two verifiers.
//! Writes to a file opened `O_APPEND` go as APPEND, placed by the server at the end of the file
//! as it is then, so appends from several mounts never overwrite each other ([`append`]).
//!
//! **Killed callers.** A request whose program is being killed ends at once
//! ([`crate::interrupt`]), so `kill` works on a program waiting for a server that stopped
//! answering; requests whose bookkeeping must complete (RELEASE) run to their end.
//!
//! **Write-back** (the kernel writing a shared mapping's dirty pages) arrives as the kernel,
//! not as the program that wrote: in a `--multi-user` mount it is written as the local user
//! who opened the file handle the kernel sends it on (kept per handle from OPEN or CREATE to
//! RELEASE), and refused (`EACCES`) on a handle this mount does not know, never written as
//! the mount's owner. The kernel picks any writable open file of the node for it, so where
//! two users have one file open for writing, it may go as the other one: a user who opened
//! that file for writing too.
//!
//! **Locks** (`fcntl`, OFD, `flock`) are the server's, so every mount of it sees them
//! ([`locks`]: `F_SETLK` in conflict is `EAGAIN`, a waiting one polls and ends with `EINTR` on
//! a signal, a close releases them).
//!
//! **Permissions** are the server's: the mount does not use `default_permissions`, `access(2)`
//! and `open(2)` ask the server (ACCESS, cached per lease), and every operation is checked by
//! the server as the logged-in identity.

use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FileAttr, Request};
use parking_lot::{Mutex, MutexGuard};
use protocol::FileHandle;

use crate::caller_groups::Groups;
use crate::session::Client;

mod append;
mod attrs;
mod attrs_behind;
mod bounded;
mod convert;
mod data;
mod files_ahead;
mod invalidator;
mod kept_listings;
mod kept_pages;
mod kernel;
mod kernel_listings;
mod listing;
mod listing_ahead;
mod listings;
mod locks;
mod lookups_listed;
mod names;
mod node_ranges;
mod read_at_open;
mod removes_behind;
mod table;
mod under_way;
mod unlinked;
mod write_behind;
mod xattr;
mod xattr_ahead;
pub(crate) use xattr::{list as xattr_list, reply_sized as reply_xattr};

pub(crate) use convert::{RANGE_SHIFT, errno, fattr, placeholder_dir, time_from, ttl};
pub(crate) use invalidator::invalidator;
pub(crate) use kernel::SfsFuse;
pub(crate) use node_ranges::NodeRanges;
use table::{Node, Table};

/// The root's node id (fixed by FUSE).
pub(crate) const ROOT: u64 = 1;

/// `st_blksize`: large, so `cp` and friends move data in big requests.
const BLKSIZE: u32 = 128 * 1024;

/// One server's mount: its session, node table, listings and write-back state, shared by the
/// kernel adapter's tasks and the invalidation thread. A mount of one server has one; a
/// `--namespace` mount one per server reached.
pub(crate) struct ServerMount {
    client: Client,
    table: Mutex<Table>,
    /// Many users: each local uid other than `owner` acts with its own identity.
    multi_user: bool,
    owner: u32,
    /// The node id of the server's root: [`ROOT`] for a mount of one server; in a
    /// `--namespace` mount each server has its own range of node ids starting here.
    root: u64,
    /// Owners that may hold locks on the server, for UNLOCK at close ([`locks`]).
    locks: Mutex<locks::Held>,
    /// Extended attributes asked along a listing are read ahead ([`xattr_ahead`]).
    xattr_ahead: xattr_ahead::XattrAhead,
    files_ahead: files_ahead::FilesAhead,
    /// WRITEs answered before the server's answer, and what waits for them
    /// ([`write_behind`]).
    behind: Arc<write_behind::WriteBehind>,
    /// REMOVEs answered before the server's answer, and what waits for them
    /// ([`removes_behind`]).
    removes: Arc<removes_behind::RemovesBehind>,
    /// Listings kept between opens while their directory's lease lasts ([`kept_listings`]).
    kept: Arc<kept_listings::KeptListings>,
    /// Listings read ahead along a walk of the tree ([`listing_ahead`]).
    listing_ahead: listing_ahead::ListingAhead,
    /// Directories read whole for the lookups in them ([`lookups_listed`]).
    lookups_listed: lookups_listed::LookupsListed,
}

impl ServerMount {
    /// The tree of `client`'s server below `root`, every caller acting as `client`'s identity.
    pub(crate) fn new(client: Client, root: FileHandle) -> Arc<ServerMount> {
        ServerMount::with_users(client, root, None)
    }

    /// Like [`ServerMount::new`]; with `Some(owner)`, callers other than local uid `owner` act as
    /// themselves ([`Client::as_uid`]).
    pub(crate) fn with_users(
        client: Client,
        root: FileHandle,
        owner: Option<u32>,
    ) -> Arc<ServerMount> {
        ServerMount::with_base(client, root, owner, ROOT)
    }

    /// Like [`ServerMount::with_users`], with the server's root as node `base` and the node ids of
    /// everything below it allocated upwards from there.
    pub(crate) fn with_base(
        client: Client,
        root: FileHandle,
        owner: Option<u32>,
        base: u64,
    ) -> Arc<ServerMount> {
        let mut t = Table {
            next: base + 1,
            next_listing: 1,
            next_file: 1,
            ..Table::default()
        };
        t.nodes.insert(
            base,
            Node {
                fh: root,
                lookups: 1,
            },
        );
        t.by_fh.insert(root, base);
        let behind = Arc::new(write_behind::WriteBehind::default());
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            behind.start_sweep(&rt);
        }
        Arc::new(ServerMount {
            client,
            table: Mutex::new(t),
            multi_user: owner.is_some(),
            owner: owner.unwrap_or(0),
            root: base,
            locks: Mutex::default(),
            xattr_ahead: xattr_ahead::XattrAhead::default(),
            files_ahead: files_ahead::FilesAhead::default(),
            behind,
            removes: Arc::default(),
            kept: Arc::default(),
            listing_ahead: listing_ahead::ListingAhead::default(),
            lookups_listed: lookups_listed::LookupsListed::default(),
        })
    }

    /// The session acting for local uid `uid`.
    fn client_for(&self, uid: u32) -> Client {
        if self.multi_user && uid != self.owner {
            self.client.as_uid(uid)
        } else {
            self.client.clone()
        }
    }

    /// The local user whose identity acts for local uid `uid`: itself in a multi-user
    /// mount, the owner otherwise.
    fn acting_uid(&self, uid: u32) -> u32 {
        if self.multi_user { uid } else { self.owner }
    }

    /// The session acting for the process behind `req`. In a multi-user mount its requests
    /// also carry its own groups (its fsgid and supplementary groups, NARROW), so group
    /// permissions, `chgrp` and the group of new objects are what it has locally, within what
    /// the users file grants. A single-user mount keeps the login's groups: its owner's local
    /// group numbers need not be the server's, and the users file already says what the owner
    /// may do. A process whose groups cannot be read (it exited) keeps the login's groups.
    fn client_for_caller(&self, req: &Request) -> Client {
        let c = self.client_for(req.uid());
        if !self.multi_user {
            return c;
        }
        c.with_groups(Groups::of_process(req.pid(), req.gid()))
    }

    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock()
    }

    /// A new FUSE file handle for a file opened by local user `uid`.
    fn open_file(&self, uid: u32) -> fuser::FileHandle {
        let mut t = self.table();
        let fh = t.next_file;
        t.next_file += 1;
        t.files.insert(fh, uid);
        fuser::FileHandle(fh)
    }

    /// The session acting for whoever opened FUSE file handle `fh` (the session's own
    /// identity when one mount is one user). In a multi-user mount, a handle this mount did
    /// not hand out (0: the kernel knows no open file) is refused rather than used as the
    /// mount's owner.
    fn client_for_file(&self, fh: fuser::FileHandle) -> Result<Client, Errno> {
        if !self.multi_user {
            return Ok(self.client.clone());
        }
        let opener = self.table().files.get(&fh.0).copied();
        match opener {
            Some(uid) => Ok(self.client_for(uid)),
            None => {
                tracing::warn!(fh = fh.0, "a write-back for an unknown open file; refused");
                Err(Errno::EACCES)
            }
        }
    }
}

/// An entry for the kernel.
struct Entry {
    ttl: Duration,
    attr: FileAttr,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mount's state for a server that is never contacted (for the tests of every part).
    pub(super) fn shared() -> Arc<ServerMount> {
        let name: protocol::ServerName = "@127.0.0.1%9,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .parse()
            .unwrap();
        let c = Client::new(&name, None, crate::session::Options::default());
        ServerMount::new(c, FileHandle::from_bytes([1; 48]))
    }

    #[test]
    fn write_back_acts_as_the_opener_and_never_as_the_owner() {
        let name: protocol::ServerName = "@127.0.0.1%9,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .parse()
            .unwrap();
        let c = Client::new(&name, None, crate::session::Options::default());
        let many = ServerMount::with_users(c, FileHandle::from_bytes([1; 48]), Some(0));
        let fh = many.open_file(65534);
        assert_ne!(
            fh.0, 0,
            "0 is what the kernel sends when it knows no open file"
        );
        assert_eq!(many.table().files[&fh.0], 65534);
        assert!(many.client_for_file(fh).is_ok());
        for unknown in [fuser::FileHandle(0), fuser::FileHandle(fh.0 + 1)] {
            assert_eq!(many.client_for_file(unknown).err(), Some(Errno::EACCES));
        }
        // One user: every handle is that user's.
        assert!(shared().client_for_file(fuser::FileHandle(0)).is_ok());
    }
}
