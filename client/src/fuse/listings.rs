//! Directory listings: read whole at `opendir` (or taken kept, [`super::kept_listings`], or
//! read ahead, [`super::listing_ahead`]) and paged by `readdir`/`readdirplus`, each entry sent
//! with attributes no older than the kernel's READDIRPLUS request.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{Errno, FileAttr, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};
use protocol::{Attr, FileHandle, NfsStatus};

use super::convert::{errno, fattr, kind, lease_left, placeholder_dir, stat_ino, ttl};
use super::listing::{Listed, Listing};
use super::unlinked::HIDDEN_PREFIX;
use super::{ServerMount, listing_ahead};
use crate::session::{Client, SessionError};

impl ServerMount {
    /// Reads the whole directory now (LISTDIR or READDIRPLUS), or takes the listing kept
    /// from an earlier open by local user `uid` while it holds ([`kept_listings`]), or read
    /// ahead for it ([`listing_ahead`]); `readdir`/`readdirplus` page through this snapshot.
    /// Opens a listing of `ino` for local user `uid`: its FUSE handle, and whether the
    /// kernel's own copy of the listing may be served instead ([`kernel_listings`]).
    ///
    /// [`kept_listings`]: super::kept_listings
    /// [`kernel_listings`]: super::kernel_listings
    pub(super) async fn opendir(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        ino: INodeNo,
    ) -> Result<(u64, bool), Errno> {
        let dir = self.fh(ino)?;
        let uid = self.acting_uid(uid);
        if let Some(end) = self.listing_ahead.reading(&dir, uid) {
            // The read ahead ended, its listing kept or not.
            end.wait().await;
        }
        let listing = match self.kept.get(&dir, uid, c.cache()) {
            Some(kept) => kept,
            None => {
                let read = Arc::new(self.read_listing(c, &dir).await?);
                self.kept.keep(&dir, uid, &read, c.cache());
                read
            }
        };
        Ok(self.open_listing(c, uid, ino, &dir, listing))
    }

    /// [`ServerMount::opendir`] without waiting, on the kernel's thread (within the runtime
    /// `rt`, where reading ahead starts its tasks): None if it would wait (no listing kept, or
    /// one being read ahead). A walk's directories listed again are answered here, without
    /// the hop to the runtime's thread and back.
    pub(super) fn opendir_now(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        ino: INodeNo,
        rt: &tokio::runtime::Handle,
    ) -> Option<(u64, bool)> {
        let dir = self.fh(ino).ok()?;
        let uid = self.acting_uid(uid);
        if self.listing_ahead.busy(&dir, uid) || self.removes.busy(&dir) {
            return None;
        }
        let listing = self.kept.get(&dir, uid, c.cache())?;
        let _within = rt.enter();
        Some(self.open_listing(c, uid, ino, &dir, listing))
    }

    /// `uid` opens `listing` of `dir` (node `ino`): reads ahead along a walk, and gives the
    /// open listing's handle and whether the kernel's copy may stay.
    fn open_listing(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        ino: INodeNo,
        dir: &FileHandle,
        listing: Arc<Listing>,
    ) -> (u64, bool) {
        let dir = *dir;
        let step = self.listing_ahead.opened(&dir, uid, &listing);
        if let Some(parent) = &step {
            self.read_ahead(c, uid, (&dir, &listing), parent, u64::MAX);
        }
        let order = listing
            .entries
            .iter()
            .filter_map(|e| e.node.map(|(fh, _)| fh));
        let stepped_into_by = step.map(|_| uid);
        self.xattr_ahead
            .remember(dir, order.collect(), stepped_into_by);
        let mut t = self.table();
        let keep = t.kernel_listings.may_keep(ino.0, &listing);
        let h = t.next_listing;
        t.next_listing += 1;
        t.listings.insert(h, (ino.0, listing));
        (h, keep)
    }

    /// A step down a walk: `uid` opened `dir`, a subdirectory of `parent` (or read its
    /// listing for lookups, [`super::lookups_listed`]). Reads ahead the listings of `dir`'s
    /// subdirectories (the walk's next steps) and of its siblings, those at most `max_size`
    /// bytes large as listed, each directory's once, those not kept already
    /// ([`listing_ahead`]), and, as each arrives, the listings of its own subdirectories, at
    /// most [`listing_ahead::MAX_DEEPER`] for the step (a walk goes down first: without that
    /// level its next step down waited for a listing asked for only one step before).
    pub(super) fn read_ahead(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        (dir, listing): (&FileHandle, &Listing),
        parent: &FileHandle,
        max_size: u64,
    ) {
        let ahead = &self.listing_ahead;
        let mut dirs: Vec<FileHandle> = Vec::new();
        if ahead.expand(dir, uid, max_size) {
            dirs.extend(listing_ahead::subdirectories(listing, max_size));
        }
        if ahead.expand(parent, uid, max_size)
            && let Some(siblings) = self.kept.get(parent, uid, c.cache())
        {
            let siblings = listing_ahead::subdirectories(&siblings, max_size);
            dirs.extend(siblings.filter(|d| d != dir));
        }
        dirs.retain(|d| self.kept.get(d, uid, c.cache()).is_none());
        dirs.truncate(listing_ahead::MAX_PER_STEP);
        let below = Arc::new(listing_ahead::Budget::new(listing_ahead::MAX_DEEPER));
        self.read_listings_ahead(c, uid, dirs, max_size, Some(below));
    }

    /// Reads the listings of `dirs` ahead for `uid` ([`ServerMount::read_ahead`]); with
    /// `below`, each one's subdirectories too when it arrives, as far as the budget goes.
    fn read_listings_ahead(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        dirs: Vec<FileHandle>,
        max_size: u64,
        below: Option<Arc<listing_ahead::Budget>>,
    ) {
        if dirs.is_empty() {
            return;
        }
        let (sh, c) = (self.clone(), c.clone());
        tokio::spawn(async move {
            for d in dirs {
                let Some(reading) = sh.listing_ahead.start(d, uid).await else {
                    continue;
                };
                // Read meanwhile, by the walker itself.
                if sh.kept.get(&d, uid, c.cache()).is_some() {
                    continue;
                }
                let (sh, c, below) = (sh.clone(), c.clone(), below.clone());
                tokio::spawn(async move {
                    // A failure is left for the walker's own `opendir` to meet and report.
                    if let Ok(l) = sh.read_listing(&c, &d).await {
                        let l = Arc::new(l);
                        sh.kept.keep(&d, uid, &l, c.cache());
                        sh.listing_ahead.listed(&d, uid, &l);
                        // Not marked expanded: a later step there reads what the budget
                        // left out.
                        if let Some(budget) = below {
                            let mut next: Vec<FileHandle> =
                                listing_ahead::subdirectories(&l, max_size)
                                    .filter(|s| sh.kept.get(s, uid, c.cache()).is_none())
                                    .collect();
                            let want = next.len().min(listing_ahead::MAX_PER_STEP);
                            next.truncate(budget.take(want));
                            sh.read_listings_ahead(&c, uid, next, max_size, None);
                        }
                    }
                    drop(reading);
                });
            }
        });
    }

    /// Reads directory `dir` whole from the server.
    pub(super) async fn read_listing(
        &self,
        c: &Client,
        dir: &FileHandle,
    ) -> Result<Listing, Errno> {
        let dir = *dir;
        // Never a listing with a name removed behind in it ([`super::removes_behind`]).
        self.removes.settle(&dir).await;
        let since = c.cache().stamp();
        let all = c.readdir_all(&dir).await.map_err(errno)?;
        let mut entries = Vec::with_capacity(all.len() + 2);
        for name in [&b"."[..], b".."] {
            entries.push(Listed {
                kind: fuser::FileType::Directory,
                name: name.to_vec(),
                node: None,
                fileid: 0,
            });
        }
        for e in all {
            // Not one path component (a hostile server's `a/b`, empty, NUL): the kernel
            // would fail the whole listing with EIO; leave it out and list the rest.
            if crate::commands::dest::check_name(&e.name).is_some()
                || e.name.starts_with(HIDDEN_PREFIX)
            {
                continue;
            }
            let (kind, node) = match (e.fh, e.attr) {
                (Some(fh), Some(a)) => (kind(a.ftype), Some((fh, a))),
                // The server could not look the name up as the caller (no search permission
                // on the directory; gone since): listed by name, and the kernel's own LOOKUP
                // gets the server's answer if a program asks more. Asking here would fail
                // the whole listing on the first refusal, one round trip per name.
                _ => (fuser::FileType::Unknown, None),
            };
            entries.push(Listed {
                kind,
                name: e.name,
                node,
                fileid: e.fileid,
            });
        }
        Ok(Listing {
            entries,
            since,
            names_since: since,
            received: Instant::now(),
        })
    }

    /// READDIR: answers from listing `fh` of `dir` at `offset`.
    pub(super) fn readdir(&self, dir: INodeNo, fh: u64, offset: u64, mut reply: ReplyDirectory) {
        let Some(l) = self.listing(fh) else {
            reply.error(Errno::EBADF);
            return;
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        // `.` as `stat` shows the directory, when its attributes are at hand.
        let dot = self
            .fh(dir)
            .ok()
            .and_then(|fh| self.client.cache().get(&fh))
            .map_or(dir.0, |a| stat_ino(dir.0, a.fileid));
        let mut t = self.table();
        if start == 0 {
            t.kernel_listings.filling(dir.0, &l);
        }
        for (i, e) in l.entries.iter().enumerate().skip(start) {
            // What `stat` shows for the entry, so `d_ino` agrees with `st_ino`.
            let ino = match &e.node {
                Some((_, a)) => stat_ino(dir.0, a.fileid),
                None if e.name == b"." => dot,
                None if e.is_dots() => e.dots_node(dir),
                None => stat_ino(dir.0, e.fileid),
            };
            // The offset of an entry is where to continue after it.
            if reply.add(
                INodeNo(ino),
                i as u64 + 1,
                e.kind,
                OsStr::from_bytes(&e.name),
            ) {
                break;
            }
        }
        drop(t);
        reply.ok();
    }

    /// READDIRPLUS: answers from listing `fh` of `ino` at `offset`, or stops at an entry whose
    /// attributes must be asked for: then the listing and where its answer stopped, for
    /// [`ServerMount::readdirplus_rest`].
    pub(super) fn readdirplus(
        &self,
        ino: INodeNo,
        fh: u64,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) -> Option<(Arc<Listing>, NeedAttr)> {
        let Some(l) = self.listing(fh) else {
            reply.error(Errno::EBADF);
            return None;
        };
        let start = usize::try_from(offset).unwrap_or(usize::MAX);
        if start == 0 {
            self.table().kernel_listings.filling(ino.0, &l);
        }
        let need = self.list_plus(&l, ino, start, None, reply, false)?;
        Some((l, need))
    }

    /// The rest of a READDIRPLUS answer from listing `l` of `ino` that stopped at `need`: the
    /// attributes of each entry changed since the listing and not cached are asked of the
    /// server, in order.
    pub(super) async fn readdirplus_rest(
        &self,
        c: &Client,
        l: &Listing,
        ino: INodeNo,
        mut need: NeedAttr,
    ) {
        loop {
            if let Some(busy) = self.writing(&need.fh) {
                self.behind.settle(busy).await;
                c.cache().invalidate(&need.fh);
            }
            let known = match c.getattr(&need.fh).await {
                Ok(a) => Some(a),
                Err(SessionError::Nfs(NfsStatus::NoEnt | NfsStatus::Stale)) => None,
                // What is in the reply stands; the kernel asks again for the rest.
                Err(_) if need.added => return need.reply.ok(),
                Err(e) => return need.reply.error(errno(e)),
            };
            match self.list_plus(l, ino, need.at, Some(known), need.reply, need.added) {
                Some(n) => need = n,
                None => return,
            }
        }
    }

    /// The node of the file with handle `fh`, if it has writes under way
    /// ([`super::write_behind`]).
    fn writing(&self, fh: &FileHandle) -> Option<u64> {
        let node = self.table().by_fh.get(fh).copied();
        node.filter(|&n| self.behind.busy(n))
    }

    pub(super) fn listing(&self, h: u64) -> Option<Arc<Listing>> {
        self.table().listings.get(&h).map(|(_, l)| l.clone())
    }

    /// Answers a READDIRPLUS from listing `l` at `start` (`added`: the reply has entries
    /// already), or stops at an entry whose attributes must be asked for.
    ///
    /// The kernel installs these attributes as of its READDIRPLUS request, not as of the
    /// listing (fs/fuse/readdir.c takes the attr_version when it sends the request): the
    /// listing's attributes of an entry changed since it was read, e.g. by a write that has
    /// returned, would take its size back. Such an entry gets the cache's attributes
    /// (installed in order) or, if it has none, stops the answer here; the caller asks the
    /// server and goes on with `known`, the attributes of entry `start` (None: gone since,
    /// left out).
    pub(super) fn list_plus(
        &self,
        l: &Listing,
        dir: INodeNo,
        start: usize,
        mut known: Option<Option<Attr>>,
        mut reply: ReplyDirectoryPlus,
        mut added: bool,
    ) -> Option<NeedAttr> {
        let cache = self.client.cache();
        let dir_fh = self.fh(dir).ok();
        for (i, e) in l.entries.iter().enumerate().skip(start) {
            let name = OsStr::from_bytes(&e.name);
            let off = i as u64 + 1;
            match &e.node {
                Some((h, listed)) => {
                    let a = match known.take() {
                        Some(Some(a)) => a,
                        Some(None) => continue,
                        // Writes under way: its attributes once they are on the server. (By
                        // handle: the node the entry had when listed may be forgotten since.)
                        None if self.writing(h).is_some() => {
                            return Some(NeedAttr {
                                at: i,
                                fh: *h,
                                reply,
                                added,
                            });
                        }
                        None if cache.changed_since(h, l.since) => match cache.get(h) {
                            Some(a) => a,
                            None => {
                                return Some(NeedAttr {
                                    at: i,
                                    fh: *h,
                                    reply,
                                    added,
                                });
                            }
                        },
                        None => Attr {
                            lease_ms: lease_left(listed, l.received),
                            ..*listed
                        },
                    };
                    // Every entry sent here is a lookup the kernel will FORGET later; it is
                    // counted with the node made or found, under one lock, so no FORGET comes
                    // in between, and taken back if it did not fit.
                    let node = self.remember(dir, &e.name, *h);
                    // A listing the directory changed since (a stream opened before another
                    // client's removal, read after we learnt of it) may still be read, but
                    // its names are no longer the kernel's to keep: their dentries would
                    // outlive the INVALIDATE already passed on, for the entry's lease. Asked
                    // after the name is remembered, so an INVALIDATE after this answer finds
                    // the name to pass on.
                    let names_stale = dir_fh.is_none_or(|d| cache.changed_since(&d, l.names_since));
                    let keep_for = if names_stale { Duration::ZERO } else { ttl(&a) };
                    if reply.add(
                        INodeNo(node),
                        off,
                        name,
                        &keep_for,
                        &fattr(node, &a),
                        Generation(0),
                    ) {
                        self.forget(node, 1);
                        break;
                    }
                }
                None => {
                    // `.` and `..`: the kernel uses neither the attributes nor a lookup. A
                    // name alone: node id 0 tells the kernel the entry comes without a
                    // lookup (it makes no dentry of it); it shows the server's file id and
                    // `DT_UNKNOWN`.
                    let (ino, attr) = if e.is_dots() {
                        let ino = e.dots_node(dir);
                        let attr = FileAttr {
                            ino: INodeNo(ino),
                            stat_ino: None,
                            ..fattr(ino, &placeholder_dir())
                        };
                        (ino, attr)
                    } else {
                        let attr = FileAttr {
                            ino: INodeNo(0),
                            stat_ino: Some(stat_ino(dir.0, e.fileid)),
                            kind: fuser::FileType::Unknown,
                            ..fattr(0, &placeholder_dir())
                        };
                        (0, attr)
                    };
                    if reply.add(
                        INodeNo(ino),
                        off,
                        name,
                        &Duration::ZERO,
                        &attr,
                        Generation(0),
                    ) {
                        break;
                    }
                }
            }
            added = true;
        }
        reply.ok();
        None
    }
}

/// A READDIRPLUS answer stopped at entry `at` (handle `fh`) of its listing, whose attributes
/// must come from the server; `added`: `reply` has entries already.
pub(super) struct NeedAttr {
    pub(super) at: usize,
    pub(super) fh: FileHandle,
    pub(super) reply: ReplyDirectoryPlus,
    pub(super) added: bool,
}
