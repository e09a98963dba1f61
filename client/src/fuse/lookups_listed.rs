//! Lookups answered from a listing of their directory, read at the second lookup in it (a
//! small one at the first, where the server tells of changes made behind its back).
//!
//! `git status` `lstat`s every path in its index before it lists any directory, and `make`
//! `stat`s every prerequisite: each name not yet known to the kernel is a LOOKUP, a round trip
//! to the server apiece (50 ms over a long link: 539 of them in the first `git status` of
//! this repository). As the Linux NFS client turns to READDIRPLUS when lookups in a directory
//! pile up, the mount reads the directory whole (one LISTDIR) at the second lookup in it that
//! no listing answers, keeps the listing ([`super::kept_listings`]: for that user, under the
//! directory's lease, until anything changes the directory), and answers that lookup and the
//! next ones from it: a name it holds with its handle and attributes (or the cache's, if the
//! object changed since), a name it lacks with `ENOENT`.
//!
//! - **The first or the second**: a name made on the server's disk, behind the server's back,
//!   shows in a kept listing only when the directory's lease ends unless the server tells of
//!   it ([`protocol::handshake::tells_disk_changes`], versions 17 and up: sfsd watching its
//!   file system). Where it does, a directory of one block is read at the first lookup no
//!   listing answers: git probes most of `.git`'s small directories for one absent name each
//!   per command. Elsewhere at the second, so a single lookup never hides such a name.
//! - **Only small directories**: those whose cached size says at most [`LISTED_DIR_MAX`]
//!   bytes; a large one is not read whole for a few names. One of a single block
//!   ([`ONE_BLOCK`]) may be empty, and an empty listing does not show that its reader may
//!   search the directory: the server is asked that beside (ACCESS, in the same round trip),
//!   so git's probes of empty directories (`.git/refs/tags` for `HEAD`, `.git/objects/info`
//!   for `alternates`) are answered too.
//! - **Not where the cache knows the name absent**: in a directory this mount made
//!   ([`crate::cache`]'s `fresh_dirs`), `tar x` and `cp -r` look up each name before making
//!   it, and the cache answers without a request.
//! - **Once per directory and lease**: a directory whose listing keeps being invalidated (one
//!   being filled) is read for lookups at most once per [`RELIST_AFTER`].
//! - **As whom**: the listing is read as the user who looked up, and answers only that user:
//!   reading it needs the permission to list and to search the directory, more than a LOOKUP
//!   needs; if it fails, the lookup goes to the server as before.
//! - **A walk of lookups**: a listing read for a lookup in a subdirectory of a listing the
//!   same user got before (read for lookups, at `opendir`, or ahead) is a step down a walk,
//!   as an `opendir` is for [`super::listing_ahead`]: the listings of its subdirectories and
//!   siblings, those of at most [`LISTED_DIR_MAX`] bytes, are read ahead by the same rules,
//!   and a lookup in a directory being read ahead waits for that read; the listings read
//!   ahead have their subdirectories read ahead too as they arrive (one level,
//!   [`super::listing_ahead::MAX_DEEPER`] at most).
//!   `git status` `lstat`s its index's paths directory after directory: its first run over a
//!   50 ms round trip went from 5.3 to 2.7 s. Only where the server tells of changes behind
//!   its back, as for a
//!   listing read at the first miss. A listing without attributes (an empty one read ahead)
//!   lacks a name only once the server said its reader may search the directory: that is
//!   asked (ACCESS, kept under the lease) instead of the name.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fuser::{Errno, INodeNo};
use parking_lot::Mutex;
use protocol::{Attr, FileHandle, FileType};

use super::listing::Listing;
use super::{Entry, ServerMount};
use crate::session::Client;

/// Largest directory (its size as the server reports it) read whole for lookups.
const LISTED_DIR_MAX: u64 = 64 * 1024;

/// A directory is read for lookups at most once in this long.
const RELIST_AFTER: Duration = Duration::from_secs(60);

/// Lookups in a directory no listing answered before it is read.
const MISSES_BEFORE_LISTING: u32 = 2;
/// The same for a directory of one block whose server tells of changes behind its back.
const MISSES_BEFORE_LISTING_TOLD: u32 = 1;

/// A directory at most this large (one block of most file systems: a few dozen names, or
/// none) is read for lookups with an ACCESS beside.
const ONE_BLOCK: u64 = 4096;

/// Bound on the directories remembered (past it, all are forgotten).
const MAX_REMEMBERED: usize = 4096;

/// Largest listing searched for a name (a scan of its entries; larger directories ask the
/// server).
const SCAN_MAX: usize = 4096;

/// Longest name a listing can hold (`NAME_MAX`): a longer one is the server's to refuse
/// (`ENAMETOOLONG`), never absent.
const NAME_MAX: usize = 255;

#[derive(Default)]
struct Seen {
    misses: u32,
    listed: Option<Instant>,
}

/// Per directory and user: lookups no listing answered, and when it was last read for them.
#[derive(Default)]
pub(super) struct LookupsListed {
    seen: Mutex<HashMap<(FileHandle, u32), Seen>>,
}

impl LookupsListed {
    /// A lookup in `dir` by `uid` that no listing answered: whether to read the directory now,
    /// at its `needed`th such lookup.
    fn missed(&self, dir: &FileHandle, uid: u32, now: Instant, needed: u32) -> bool {
        let mut seen = self.seen.lock();
        if seen.len() >= MAX_REMEMBERED && !seen.contains_key(&(*dir, uid)) {
            seen.clear();
        }
        let s = seen.entry((*dir, uid)).or_default();
        if s.listed
            .is_some_and(|at| now.duration_since(at) < RELIST_AFTER)
        {
            return false;
        }
        s.misses += 1;
        if s.misses < needed {
            return false;
        }
        s.misses = 0;
        s.listed = Some(now);
        true
    }
}

/// What a listing says of `name`: Some(Some(handle, attributes)) if it holds it, Some(None) if
/// it certainly does not (its reader may search the directory: the server said so, `may_search`,
/// or the listing has entries with attributes, which the server reads only then), None if it
/// cannot say.
pub(super) fn find(
    listing: &Listing,
    name: &[u8],
    may_search: bool,
) -> Option<Option<(FileHandle, Attr)>> {
    if !searchable(listing, name) {
        return None;
    }
    match listing.entries.iter().find(|e| e.name == name) {
        Some(e) => e.node.map(Some),
        None if may_search || listing.entries.iter().any(|e| e.node.is_some()) => Some(None),
        None => None,
    }
}

/// Whether `listing` is short enough to scan, and `name` a name it could hold.
fn searchable(listing: &Listing, name: &[u8]) -> bool {
    listing.entries.len() <= SCAN_MAX && name.len() <= NAME_MAX
}

/// Whether `listing` can be searched for `name` and lacks it.
fn lacks(listing: &Listing, name: &[u8]) -> bool {
    searchable(listing, name) && !listing.entries.iter().any(|e| e.name == name)
}

/// Whether the server said, in an ACCESS answer still cached, that this session's user may
/// search `dir`: an empty directory's listing shows nothing else of it.
pub(super) fn may_search(c: &Client, dir: &FileHandle) -> bool {
    let lookup = protocol::access::LOOKUP;
    c.access_cached(dir, lookup)
        .is_some_and(|g| g & lookup != 0)
}

impl ServerMount {
    /// LOOKUP of `name` in `dir` (node `parent`) by local user `uid` answered from a listing
    /// of `dir` (see the module's doc), or None: ask the server.
    pub(super) async fn lookup_listed(
        self: &Arc<Self>,
        c: &Client,
        uid: u32,
        parent: INodeNo,
        dir: &FileHandle,
        name: &[u8],
    ) -> Option<Result<Entry, Errno>> {
        let uid = self.acting_uid(uid);
        if let Some(end) = self.listing_ahead.reading(dir, uid) {
            // Being read ahead: its listing answers, if it is kept.
            end.wait().await;
        }
        let listing = match self.kept.get(dir, uid, c.cache()) {
            Some(kept) => kept,
            None => {
                let size = c
                    .cache()
                    .get(dir)
                    .filter(|a| a.ftype == FileType::Directory);
                let size = size.map(|a| a.size).filter(|&s| s <= LISTED_DIR_MAX)?;
                if c.known_absent(dir, name) {
                    return None;
                }
                // A small directory is read at its first miss where a name made behind the
                // server's back would be told (an INVALIDATE ends the listing), else at its
                // second: a name made on the server's disk then stays unseen in no more
                // directories than one a program looks up two names in.
                let needed = if size <= ONE_BLOCK && c.tells_disk_changes() {
                    MISSES_BEFORE_LISTING_TOLD
                } else {
                    MISSES_BEFORE_LISTING
                };
                if !self.lookups_listed.missed(dir, uid, Instant::now(), needed) {
                    return None;
                }
                // A directory of one block may be empty: whether its user may search it is
                // asked beside, in the same round trip, so its absent names are answered.
                let read = if size <= ONE_BLOCK && !may_search(c, dir) {
                    let search = c.access(dir, protocol::access::LOOKUP);
                    tokio::join!(self.read_listing(c, dir), search).0
                } else {
                    self.read_listing(c, dir).await
                };
                let read = Arc::new(read.ok()?);
                self.kept.keep(dir, uid, &read, c.cache());
                self.lookup_step(c, uid, dir, &read);
                read
            }
        };
        let found = match find(&listing, name, may_search(c, dir)) {
            Some(found) => found,
            // Not in a listing without attributes (an empty one, read ahead without the
            // ACCESS a read for lookups asks beside): whether its reader may search the
            // directory is asked (and kept as long as the lease), not the name.
            None if lacks(&listing, name) => {
                let lookup = protocol::access::LOOKUP;
                let granted = c.access(dir, lookup).await.ok()?;
                find(&listing, name, granted & lookup != 0)?
            }
            None => return None,
        };
        let (fh, listed) = match found {
            Some(node) => node,
            None => return Some(Err(Errno::ENOENT)),
        };
        let known = self.table().by_fh.get(&fh).copied();
        if known.is_some_and(|ino| self.behind.busy(ino)) {
            return None;
        }
        // The entry's attributes, unless the object changed since the listing was asked for:
        // then the cache's, if it has them.
        let a = if c.cache().changed_since(&fh, listing.since) {
            c.cache().get(&fh)?
        } else {
            let gone = u32::try_from(listing.received.elapsed().as_millis()).unwrap_or(u32::MAX);
            let left = listed.lease_ms.checked_sub(gone).filter(|&ms| ms > 0)?;
            let a = Attr {
                lease_ms: left,
                ..listed
            };
            // Cached as a LOOKUP's would be: an open keeps the pages, and a GETATTR after a
            // READ is answered, only from the cache ([`super::kept_pages`]).
            c.cache().put(fh, a, listing.since);
            a
        };
        Some(Ok(self.entry(parent, name, fh, &a)))
    }

    /// `uid` read `dir`'s listing for a lookup: a step of a walk of lookups if `dir` is a
    /// subdirectory of a listing that user got before. Then the listings of `dir`'s
    /// subdirectories and siblings are read ahead ([`super::listing_ahead`]), those at most
    /// [`LISTED_DIR_MAX`] bytes large, as one read for lookups would be; only where the
    /// server tells of changes behind its back, as for a listing read at the first miss.
    fn lookup_step(self: &Arc<Self>, c: &Client, uid: u32, dir: &FileHandle, listing: &Listing) {
        let step = self.listing_ahead.listed(dir, uid, listing);
        if let Some(parent) = step.filter(|_| c.tells_disk_changes()) {
            self.read_ahead(c, uid, (dir, listing), &parent, LISTED_DIR_MAX);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: FileHandle = FileHandle::from_bytes([7; 48]);

    #[test]
    fn a_listing_answers_names_it_holds_and_lacks_but_not_over_name_max() {
        let file = FileHandle::from_bytes([8; 48]);
        let a = Attr::test_file(1, 60_000);
        let entry = |name: &[u8], node| super::super::listing::Listed {
            kind: fuser::FileType::RegularFile,
            name: name.to_vec(),
            node,
            fileid: 0,
        };
        let listing = |entries| Listing {
            entries,
            since: crate::cache::AttrCache::default().stamp(),
            names_since: crate::cache::AttrCache::default().stamp(),
            received: Instant::now(),
        };
        let l = listing(vec![entry(b".", None), entry(b"f", Some((file, a)))]);
        assert_eq!(find(&l, b"f", false), Some(Some((file, a))));
        assert_eq!(find(&l, b"g", false), Some(None), "absent");
        assert_eq!(
            find(&l, &[b'g'; 255], false),
            Some(None),
            "NAME_MAX is a name"
        );
        assert_eq!(
            find(&l, &[b'g'; 256], false),
            None,
            "the server's ENAMETOOLONG"
        );
        let bare = listing(vec![entry(b".", None), entry(b"f", None)]);
        assert_eq!(
            find(&bare, b"g", false),
            None,
            "no attributes: may not search"
        );
        let empty = listing(vec![entry(b".", None), entry(b"..", None)]);
        assert_eq!(find(&empty, b"g", false), None, "empty: may not search");
        assert_eq!(
            find(&empty, b"g", true),
            Some(None),
            "the server said it may"
        );
        assert_eq!(find(&bare, b"f", true), None, "a name without attributes");
    }

    /// Only a name a listing can be searched for and does not hold has the directory's search
    /// permission asked instead (a name listed without a handle, one longer than `NAME_MAX`,
    /// or a listing too long to scan go to the server as they are).
    #[test]
    fn a_listing_lacks_only_names_it_can_be_searched_for() {
        let entry = |name: &[u8]| super::super::listing::Listed {
            kind: fuser::FileType::RegularFile,
            name: name.to_vec(),
            node: None,
            fileid: 0,
        };
        let listing = |entries| Listing {
            entries,
            since: crate::cache::AttrCache::default().stamp(),
            names_since: crate::cache::AttrCache::default().stamp(),
            received: Instant::now(),
        };
        let l = listing(vec![entry(b"."), entry(b"f")]);
        assert!(lacks(&l, b"g"));
        assert!(!lacks(&l, b"f"), "listed, without a handle");
        assert!(lacks(&l, &[b'g'; NAME_MAX]));
        assert!(
            !lacks(&l, &[b'g'; NAME_MAX + 1]),
            "the server's ENAMETOOLONG"
        );
        let long = listing(
            (0..=SCAN_MAX)
                .map(|i| entry(format!("e{i}").as_bytes()))
                .collect(),
        );
        assert!(!lacks(&long, b"g"), "too long to scan");
    }

    #[test]
    fn a_directory_is_read_at_its_second_miss_and_not_again_within_the_lease() {
        let l = LookupsListed::default();
        let t = Instant::now();
        let two = MISSES_BEFORE_LISTING;
        assert!(
            !l.missed(&DIR, 1, t, two),
            "the first lookup asks the server"
        );
        assert!(l.missed(&DIR, 1, t, two), "the second reads the directory");
        assert!(!l.missed(&DIR, 2, t, two), "another user counts apart");
        for _ in 0..5 {
            assert!(!l.missed(&DIR, 1, t + Duration::from_secs(1), two));
        }
        let later = t + RELIST_AFTER + Duration::from_secs(1);
        assert!(!l.missed(&DIR, 1, later, two));
        assert!(
            l.missed(&DIR, 1, later, two),
            "read again once the lease would have ended"
        );
        let told = MISSES_BEFORE_LISTING_TOLD;
        assert!(l.missed(&DIR, 3, t, told), "where told, at the first");
        assert!(
            !l.missed(&DIR, 3, t, told),
            "and not again within the lease"
        );
    }
}
