//! Operations on names: LOOKUP, the CREATE family (create, mkdir, mknod, symlink, link),
//! REMOVE and RENAME (which keep a file some program has open alive, [`super::unlinked`]).

use std::sync::Arc;

use fuser::{Errno, INodeNo, RenameFlags};
use protocol::{CreateHow, FileHandle, NfsStatus, SetAttr};

use super::convert::errno;
use super::kept_listings::{Edit, KeptListings};
use super::unlinked::HIDDEN_PREFIX;
use super::{Entry, ServerMount};
use crate::cache::Settled;
use crate::session::{Client, Made, SessionError};

impl ServerMount {
    pub(super) async fn lookup(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        parent: INodeNo,
        name: &[u8],
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        // A name removed behind must not be found again ([`super::removes_behind`]).
        self.removes.settle(&dir).await;
        if let Some(answer) = self.lookup_listed(c, uid, parent, &dir, name).await {
            return answer;
        }
        let (fh, mut a) = c.lookup(&dir, name).await.map_err(errno)?;
        // A file with writes under way: its attributes once they are on the server.
        let known = self.table().by_fh.get(&fh).copied();
        if let Some(ino) = known.filter(|&ino| self.behind.busy(ino)) {
            self.behind.settle(ino).await;
            a = c.getattr_fresh(&fh).await.map_err(errno)?;
        }
        Ok(self.entry(parent, name, fh, &a))
    }

    /// Whether `name` is certainly not in directory `dir` for local user `uid`: a listing of
    /// it kept for that user (unchanged under the directory's lease, [`super::kept_listings`])
    /// does not hold it, and shows that the user may search the directory (entries with
    /// attributes, which the server reads only with search permission). Then a LOOKUP is
    /// answered `ENOENT` without asking the server: git looks for a `.gitignore` in every
    /// directory of a work tree, each a round trip (50 ms apiece over a long link).
    pub(super) fn listed_absent(
        &self,
        c: &Client,
        uid: u32,
        dir: &FileHandle,
        name: &[u8],
    ) -> bool {
        if self.removes.busy(dir) {
            return false;
        }
        let Some(l) = self.kept.get(dir, self.acting_uid(uid), c.cache()) else {
            return false;
        };
        let may_search = super::lookups_listed::may_search(c, dir);
        matches!(
            super::lookups_listed::find(&l, name, may_search),
            Some(None)
        )
    }

    /// CREATE of `name` in `parent` for an `open` with `flags` and `mode`; the entry, and
    /// whether the call made the file new.
    ///
    /// The kernel sends CREATE only for a name it has just found absent (a LOOKUP, or a
    /// negative entry), and takes the file as made by the call (`FMODE_CREATED`: no
    /// truncation, no permission check of its own). So the file is asked for as new
    /// (GUARDED) even without `O_EXCL`: the answer then says it is new, which lets the mount
    /// answer what holds only of a file it made (no `security.capability`, which the kernel
    /// asks before the first write of every `>` of a shell, compiler output or unzipped
    /// file; its owner's SETATTRs early, [`super::attrs_behind`]). Only if the name appeared
    /// meanwhile (another client, or a change on the server's disk not yet told) is the
    /// existing file opened (UNCHECKED), and truncated if the program asked `O_TRUNC`, which
    /// the kernel then leaves to us.
    pub(super) async fn create(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
        flags: i32,
    ) -> Result<(Entry, bool), Errno> {
        let dir = self.fh(parent)?;
        self.removes.settle(&dir).await;
        let attr = SetAttr {
            mode: Some(mode & 0o7777),
            ..crate::commands::transfer::set_nothing()
        };
        match c.create(&dir, name, CreateHow::Guarded(attr)).await {
            Ok(made) => Ok((self.made(parent, &dir, name, made), true)),
            Err(SessionError::Nfs(NfsStatus::Exist)) if flags & libc::O_EXCL == 0 => {
                let attr = SetAttr {
                    size: (flags & libc::O_TRUNC != 0).then_some(0),
                    ..attr
                };
                let made = c
                    .create(&dir, name, CreateHow::Unchecked(attr))
                    .await
                    .map_err(errno)?;
                Ok((self.made(parent, &dir, name, made), false))
            }
            Err(e) => Err(errno(e)),
        }
    }

    pub(super) async fn mkdir(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        mode: u32,
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        self.removes.settle(&dir).await;
        let attr = SetAttr {
            mode: Some(mode & 0o7777),
            ..crate::commands::transfer::set_nothing()
        };
        let made = c.mkdir(&dir, name, attr).await.map_err(errno)?;
        Ok(self.made(parent, &dir, name, made))
    }

    pub(super) async fn mknod(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        kind: protocol::SpecialKind,
        mode: u32,
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        self.removes.settle(&dir).await;
        let attr = SetAttr {
            mode: Some(mode & 0o7777),
            ..crate::commands::transfer::set_nothing()
        };
        let made = c.mknod(&dir, name, kind, attr).await.map_err(errno)?;
        Ok(self.made(parent, &dir, name, made))
    }

    pub(super) async fn symlink(
        &self,
        c: &Client,
        parent: INodeNo,
        name: &[u8],
        target: &[u8],
    ) -> Result<Entry, Errno> {
        let dir = self.fh(parent)?;
        self.removes.settle(&dir).await;
        let made = c
            .symlink(&dir, name, target, crate::commands::transfer::set_nothing())
            .await
            .map_err(errno)?;
        Ok(self.made(parent, &dir, name, made))
    }

    pub(super) async fn link(
        &self,
        c: &Client,
        ino: INodeNo,
        parent: INodeNo,
        name: &[u8],
    ) -> Result<Entry, Errno> {
        let fh = self.fh(ino)?;
        let dir = self.fh(parent)?;
        self.removes.settle(&dir).await;
        let made = c.link(&fh, &dir, name).await.map_err(errno)?;
        Ok(self.made(parent, &dir, name, made))
    }

    /// The entry for `made` as `name` in `dir` (node `parent`), the name added to the
    /// directory's kept listings.
    fn made(&self, parent: INodeNo, dir: &FileHandle, name: &[u8], made: Made) -> Entry {
        let node = (made.fh, made.attr);
        edited(&self.kept, dir, made.settled, Edit::Named(name, &node));
        self.entry(parent, name, made.fh, &made.attr)
    }

    pub(super) async fn remove(
        &self,
        c: &Client,
        uid: u32,
        parent: INodeNo,
        name: &[u8],
        is_dir: bool,
    ) -> Result<(), Errno> {
        let dir = self.fh(parent)?;
        if is_dir {
            self.removes.settle(&dir).await;
            // The directory's own removals under way first: the server would find it not
            // empty.
            match self.named(parent, name) {
                Some((_, victim)) => self.removes.settle(&victim).await,
                None => self.removes.settle_all().await,
            }
        } else if self.remove_early(c, parent, name) {
            return Ok(());
        }
        if !is_dir && self.keep_if_open(c, uid, (parent, &dir), name).await? {
            self.forget_name(parent, name);
            return Ok(());
        }
        let settled = if is_dir {
            c.remove(&dir, name, true).await.map_err(errno)?
        } else {
            // Beside it, whether the directory's next unlinks may be answered early.
            let (removed, ()) =
                tokio::join!(c.remove(&dir, name, false), self.learn_removable(c, &dir));
            removed.map_err(errno)?
        };
        edited(&self.kept, &dir, settled, Edit::Unnamed(name));
        self.forget_name(parent, name);
        Ok(())
    }

    /// RENAME of `name` in `parent` to `newname` in `newparent`, for local user `uid`.
    pub(super) async fn rename(
        &self,
        (c, uid): (&Client, u32),
        (parent, name): (INodeNo, &[u8]),
        (newparent, newname): (INodeNo, &[u8]),
        flags: RenameFlags,
    ) -> Result<(), Errno> {
        let from = self.fh(parent)?;
        let to = self.fh(newparent)?;
        self.removes.settle(&from).await;
        self.removes.settle(&to).await;
        if flags.contains(RenameFlags::RENAME_EXCHANGE)
            || flags.contains(RenameFlags::RENAME_WHITEOUT)
        {
            return Err(Errno::EINVAL);
        }
        let settled = if flags.contains(RenameFlags::RENAME_NOREPLACE) {
            // One RENAME2 on the server: the existence check and the rename are one
            // renameat2(RENAME_NOREPLACE), so a racing creator cannot be replaced.
            c.rename2(&from, name, &to, newname, protocol::rename_flags::NOREPLACE)
                .await
                .map_err(errno)?
        } else {
            // Replacing a file some program has open: keep it alive.
            self.keep_if_open(c, uid, (newparent, &to), newname).await?;
            c.rename(&from, name, &to, newname).await.map_err(errno)?
        };
        if from == to {
            let edit = Edit::Renamed {
                from: name,
                to: newname,
            };
            edited(&self.kept, &from, settled, edit);
        } else {
            // Listings of the directory it went to are read again: the moved entry's
            // attributes would be checked against another listing's stamps.
            edited(&self.kept, &from, settled, Edit::Unnamed(name));
        }
        self.rename_name((parent, name), (newparent, newname));
        Ok(())
    }
}

/// Our change `edit` of `dir`'s names, which settled as `settled`, applied to its kept
/// listings ([`KeptListings::patch`]). Names of files kept hidden while open
/// ([`super::unlinked`]) are never listed: made or renamed so, a name is only gone.
pub(super) fn edited(
    kept: &KeptListings,
    dir: &FileHandle,
    settled: Option<Settled>,
    edit: Edit<'_>,
) {
    let Some(settled) = settled else {
        return;
    };
    let hidden = |name: &[u8]| name.starts_with(HIDDEN_PREFIX);
    let edit = match edit {
        Edit::Named(name, _) if hidden(name) => Edit::Unnamed(name),
        Edit::Renamed { from, to } if hidden(to) => Edit::Unnamed(from),
        edit => edit,
    };
    kept.patch(dir, settled, &edit);
}
