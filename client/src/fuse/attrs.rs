//! Operations on attributes: GETATTR, SETATTR, ACCESS (the server's, per lease) and STATFS.

use std::time::Duration;

use fuser::{AccessFlags, Errno, FileAttr, INodeNo};
use protocol::{Attr, FileHandle, FileType, SetAttr};

use super::ServerMount;
use super::convert::{access_bits, errno, fattr, ttl};
use crate::session::Client;

impl ServerMount {
    pub(super) async fn getattr(
        &self,
        c: &Client,
        ino: INodeNo,
    ) -> Result<(Duration, FileAttr), Errno> {
        let fh = self.fh(ino)?;
        self.behind.settle(ino.0).await;
        // A directory's size, times and link count once its entries removed behind are gone.
        self.removes.settle(&fh).await;
        if let Some(a) = self.listed_attr(c, ino, &fh) {
            return Ok((ttl(&a), fattr(ino.0, &a)));
        }
        // The kernel asks when its own copy expired or was invalidated. It invalidates a
        // file's access time after every READ, and then the cached attributes under their
        // lease are still the server's (but for that time) unless a change of ours could have
        // changed them unseen; otherwise go to the server.
        if let Some(a) = c.cache().get_unchanged_by_us(&fh) {
            return Ok((ttl(&a), fattr(ino.0, &a)));
        }
        let a = c.getattr_fresh(&fh).await.map_err(errno)?;
        Ok((ttl(&a), fattr(ino.0, &a)))
    }

    /// [`ServerMount::getattr`] without waiting, on the kernel's thread: None if it would wait
    /// (writes under way, or the server to ask).
    pub(super) fn getattr_now(&self, c: &Client, ino: INodeNo) -> Option<(Duration, FileAttr)> {
        if self.behind.busy(ino.0) {
            return None;
        }
        let fh = self.fh(ino).ok()?;
        if self.removes.busy(&fh) {
            return None;
        }
        let a = self
            .listed_attr(c, ino, &fh)
            .or_else(|| c.cache().get_unchanged_by_us(&fh))?;
        Some((ttl(&a), fattr(ino.0, &a)))
    }

    /// The attributes of directory `ino` (handle `fh`) that came with a listing of it still
    /// open, if nothing changed the directory since that listing was asked for.
    ///
    /// The kernel forgets a directory's atime after every READDIR (fs/fuse/readdir.c,
    /// `fuse_invalidate_atime`) and glibc's `opendir` `fstat`s the directory it opened, so
    /// each listing after the first would send a GETATTR to the server right after the
    /// READDIRPLUS this opendir made: a second round trip per directory of every walk (`ls
    /// -lR`, `find`). The listing's attributes are the server's as of this very open, as fresh
    /// as that GETATTR's answer would be.
    fn listed_attr(&self, c: &Client, ino: INodeNo, fh: &FileHandle) -> Option<Attr> {
        let since = self
            .table()
            .listings
            .values()
            .filter(|(dir, _)| *dir == ino.0)
            .map(|(_, l)| l.since)
            .max()?;
        if c.cache().changed_since(fh, since) {
            return None;
        }
        c.cache().get(fh)
    }

    pub(super) async fn setattr(
        &self,
        c: &Client,
        ino: INodeNo,
        s: SetAttr,
    ) -> Result<(Duration, FileAttr), Errno> {
        let fh = self.fh(ino)?;
        self.behind.settle(ino.0).await;
        // A directory's mode changed before its entries removed behind are gone could make
        // the server refuse them.
        self.removes.settle(&fh).await;
        let a = c.setattr(&fh, s).await.map_err(errno)?;
        let attr = fattr(ino.0, &a);
        self.made_changed(ino, attr);
        Ok((ttl(&a), attr))
    }

    /// Whether the server grants every `bits` (protocol ACCESS bits) on `ino`.
    pub(super) async fn check_access(
        &self,
        c: &Client,
        ino: INodeNo,
        bits: u32,
    ) -> Result<(), Errno> {
        if bits == 0 {
            return Ok(());
        }
        let fh = self.fh(ino)?;
        let granted = c.access(&fh, bits).await.map_err(errno)?;
        all_granted(granted, bits)
    }

    /// [`ServerMount::check_access`] for an `open` without waiting, on the kernel's thread:
    /// None if it would wait (writes of the file under way, or the server to ask).
    pub(super) fn open_access_now(
        &self,
        c: &Client,
        ino: INodeNo,
        bits: u32,
    ) -> Option<Result<(), Errno>> {
        if self.behind.busy(ino.0) {
            return None;
        }
        if bits == 0 {
            return Some(Ok(()));
        }
        let fh = self.fh(ino).ok()?;
        let granted = c.access_cached(&fh, bits)?;
        Some(all_granted(granted, bits))
    }

    pub(super) async fn access(
        &self,
        c: &Client,
        ino: INodeNo,
        mask: AccessFlags,
    ) -> Result<(), Errno> {
        let fh = self.fh(ino)?;
        let a = c.getattr(&fh).await.map_err(errno)?;
        self.check_access(
            c,
            ino,
            access_bits(mask.bits(), a.ftype == FileType::Directory),
        )
        .await
    }

    pub(super) async fn statfs(&self, c: &Client) -> Result<protocol::FsStat, Errno> {
        let root = self.fh(INodeNo(self.root))?;
        c.fsstat(&root).await.map_err(errno)
    }
}

/// `EACCES` unless the server granted every one of `bits`.
fn all_granted(granted: u32, bits: u32) -> Result<(), Errno> {
    if granted & bits == bits {
        Ok(())
    } else {
        Err(Errno::EACCES)
    }
}
