//! Listings read ahead along a walk of the tree.
//!
//! `find`, `ls -R`, `du`, `rm -r` and `git status` open every directory below where they start,
//! one after the other, and on a fresh mount each `opendir` waits for the server's LISTDIR:
//! one round trip per directory, during which the walker and the stream sit idle. The mount
//! can see such a walk coming: a directory opened while it is a subdirectory in a listing the
//! same user opened before is a step down a walk. At such a step the listings of that
//! directory's subdirectories and of its siblings (the subdirectories of its parent) are read
//! ahead, side by side on the one stream, into the kept listings ([`super::kept_listings`]),
//! where the walker's next `opendir`s find them; and as each of those arrives, the listings
//! of its own subdirectories too (one level more, at most [`MAX_DEEPER`] per step): a walk
//! goes down first, and its next step down would otherwise wait for a listing asked for only
//! at its last step (`find` of a header tree on a fresh mount: about 7% less time).
//!
//! - **Only along a walk.** Opening one directory (`ls dir`, a shell completing a name) reads
//!   nothing ahead: what starts it is a second open, one level down, by the same user (or a
//!   listing read for that user's lookups one level down, [`super::lookups_listed`]: then
//!   only directories of at most 64 KiB). Each directory's subdirectories are read ahead
//!   once per walk ([`ListingAhead::expand`]); a listing read ahead shows its own
//!   subdirectories as the walk's next steps.
//! - **As whom.** A listing read ahead is asked for as the user whose step started it (the
//!   same session, with its groups) and kept for that user only, the kept listings' rule.
//! - **Never staler than a read at `opendir`.** It is kept by the same rule: under the
//!   directory's lease, and only if nothing changed the directory since it was asked for.
//! - **No double reads.** An `opendir` of a directory whose listing is being read ahead for
//!   the same user waits for that read, then takes the kept listing (or reads the directory
//!   itself if the listing was not kept).
//! - **Bounds.** At most [`MAX_PER_STEP`] directories are read ahead per step (and
//!   [`MAX_DEEPER`] one level below them), and
//!   [`MAX_IN_FLIGHT`] listings are being read ahead at once in the whole mount; the walk's
//!   memory holds at most [`MAX_REMEMBERED`] subdirectories and [`MAX_EXPANDED`] expanded
//!   directories (the newest). Listings themselves are bounded by the kept listings' limits.

use std::sync::Arc;

use parking_lot::Mutex;
use protocol::{FileHandle, FileType};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::bounded::Bounded;
use super::listing::Listing;
use super::under_way::{End, Started, UnderWay};

/// Directories whose listings are read ahead at one step of a walk (its subdirectories
/// first, then its siblings).
pub(super) const MAX_PER_STEP: usize = 64;
/// Listings being read ahead at once in the whole mount.
pub(super) const MAX_IN_FLIGHT: usize = 16;
/// Directories read ahead one level below those of a step of a walk, at most.
pub(super) const MAX_DEEPER: usize = 256;
/// Subdirectories of opened listings remembered, to recognise the next step of a walk.
const MAX_REMEMBERED: usize = 16384;
/// Directories remembered as expanded (their subdirectories read ahead already).
const MAX_EXPANDED: usize = 4096;

/// A directory as one local user sees it.
type Key = (FileHandle, u32);

/// What a walk has shown so far, and which listings are being read ahead.
pub(super) struct ListingAhead {
    state: Mutex<State>,
    reading: UnderWay<Key>,
    permits: Arc<Semaphore>,
}

impl Default for ListingAhead {
    fn default() -> Self {
        ListingAhead {
            state: Mutex::default(),
            reading: UnderWay::default(),
            permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
}

#[derive(Default)]
struct State {
    /// Subdirectories of the listings got lately: the directory they were listed in, and
    /// whether that listing was opened (not only read for lookups or ahead).
    parent_of: Bounded<Key, (FileHandle, bool)>,
    /// Directories whose subdirectories were read ahead already: those up to this size.
    expanded: Bounded<Key, u64>,
}

impl State {
    /// `uid` got `dir`'s `listing`, opened or not: its subdirectories are listed in `dir`
    /// (once opened, for good).
    fn remember(&mut self, dir: &FileHandle, uid: u32, listing: &Listing, opened: bool) {
        for sub in subdirectories(listing, u64::MAX) {
            let key = (sub, uid);
            match self.parent_of.get_mut(&key) {
                Some(known) if known.0 == *dir => known.1 |= opened,
                Some(known) => *known = (*dir, opened),
                None => {
                    self.parent_of.insert(key, (*dir, opened));
                }
            }
        }
    }
}

impl Default for Bounded<Key, (FileHandle, bool)> {
    fn default() -> Self {
        Bounded::with_max(MAX_REMEMBERED)
    }
}

impl Default for Bounded<Key, u64> {
    fn default() -> Self {
        Bounded::with_max(MAX_EXPANDED)
    }
}

/// How many more directories a step may read ahead (shared by its reads).
pub(super) struct Budget(std::sync::atomic::AtomicUsize);

impl Budget {
    pub(super) fn new(n: usize) -> Budget {
        Budget(std::sync::atomic::AtomicUsize::new(n))
    }

    /// Takes up to `want` from what is left; how many were taken.
    pub(super) fn take(&self, want: usize) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        let left = self
            .0
            .fetch_update(Relaxed, Relaxed, |n| Some(n.saturating_sub(want)));
        want.min(left.unwrap_or(0))
    }
}

/// A listing read ahead, from its start to its end: dropping it ends the read for whoever
/// waits on it, and frees its place among [`MAX_IN_FLIGHT`].
pub(super) struct Reading {
    _started: Started<Key>,
    _permit: OwnedSemaphorePermit,
}

/// The subdirectories of `listing` at most `max_size` bytes large (as listed), in its order.
pub(super) fn subdirectories(
    listing: &Listing,
    max_size: u64,
) -> impl Iterator<Item = FileHandle> + '_ {
    listing.entries.iter().filter_map(move |e| {
        e.node
            .filter(|(_, a)| a.ftype == FileType::Directory && a.size <= max_size)
            .map(|(fh, _)| fh)
    })
}

impl ListingAhead {
    /// The end of the read ahead of `dir`'s listing for `uid`, if one is under way.
    pub(super) fn reading(&self, dir: &FileHandle, uid: u32) -> Option<End> {
        self.reading.end(&(*dir, uid))
    }

    /// Whether `dir`'s listing is being read ahead for `uid`.
    pub(super) fn busy(&self, dir: &FileHandle, uid: u32) -> bool {
        self.reading.busy(&(*dir, uid))
    }

    /// Local user `uid` opened directory `dir` and got `listing`: its subdirectories are
    /// remembered as the next steps of a walk. If `dir` was itself one (a subdirectory of a
    /// listing `uid` opened before), returns the directory it was listed in: a walk is under
    /// way. (Opening a directory found by lookups alone is no walk: `ls dir`.)
    pub(super) fn opened(
        &self,
        dir: &FileHandle,
        uid: u32,
        listing: &Listing,
    ) -> Option<FileHandle> {
        let (parent, opened) = self.got(dir, uid, listing, true)?;
        opened.then_some(parent)
    }

    /// [`ListingAhead::opened`] for a listing of `dir` read for `uid`'s lookups or read
    /// ahead for that user: a step of a walk of lookups if `dir` is a subdirectory of any
    /// listing `uid` got before ([`super::lookups_listed`]).
    pub(super) fn listed(
        &self,
        dir: &FileHandle,
        uid: u32,
        listing: &Listing,
    ) -> Option<FileHandle> {
        self.got(dir, uid, listing, false).map(|(parent, _)| parent)
    }

    /// `uid` got `dir`'s `listing` (`opened` or not): its subdirectories are remembered; the
    /// directory `dir` was listed in, if any, and whether that listing was opened.
    fn got(
        &self,
        dir: &FileHandle,
        uid: u32,
        listing: &Listing,
        opened: bool,
    ) -> Option<(FileHandle, bool)> {
        let mut s = self.state.lock();
        s.remember(dir, uid, listing, opened);
        s.parent_of.get(&(*dir, uid)).copied()
    }

    /// Whether `dir`'s subdirectories of at most `max_size` bytes are still to be read ahead
    /// for `uid` (true once, or again for a larger `max_size`).
    pub(super) fn expand(&self, dir: &FileHandle, uid: u32, max_size: u64) -> bool {
        let mut s = self.state.lock();
        match s.expanded.get_mut(&(*dir, uid)) {
            Some(done) if *done >= max_size => false,
            Some(done) => {
                *done = max_size;
                true
            }
            None => s.expanded.insert((*dir, uid), max_size),
        }
    }

    /// Waits for a place among [`MAX_IN_FLIGHT`] reads, then starts reading `dir` ahead for
    /// `uid`; None if that read is already under way.
    pub(super) async fn start(&self, dir: FileHandle, uid: u32) -> Option<Reading> {
        let permit = self.permits.clone().acquire_owned().await.ok()?;
        Some(Reading {
            _started: self.reading.start((dir, uid))?,
            _permit: permit,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use protocol::Attr;

    use super::super::listing::Listed;
    use super::*;

    fn fh(n: u8) -> FileHandle {
        FileHandle::from_bytes([n; protocol::handle::HANDLE_LEN])
    }

    /// A listing of `dirs` (subdirectories) and one regular file.
    fn listing(dirs: &[u8]) -> Listing {
        let entry = |n: u8, ftype| {
            let mut attr = Attr::test_file(0, 60_000);
            attr.ftype = ftype;
            Listed {
                kind: fuser::FileType::Directory,
                name: format!("e{n}").into_bytes(),
                node: Some((fh(n), attr)),
                fileid: 0,
            }
        };
        let mut entries: Vec<Listed> = dirs
            .iter()
            .map(|&d| entry(d, FileType::Directory))
            .collect();
        entries.push(entry(200, FileType::Regular));
        Listing {
            entries,
            since: crate::cache::AttrCache::default().stamp(),
            names_since: crate::cache::AttrCache::default().stamp(),
            received: Instant::now(),
        }
    }

    #[test]
    fn a_walk_is_a_subdirectory_opened_after_its_parent_by_the_same_user() {
        let ahead = ListingAhead::default();
        // Opening a directory alone is no walk.
        assert_eq!(ahead.opened(&fh(1), 1000, &listing(&[2, 3])), None);
        // Its subdirectory, by the same user: a step down a walk from 1.
        assert_eq!(ahead.opened(&fh(2), 1000, &listing(&[4])), Some(fh(1)));
        assert_eq!(ahead.opened(&fh(4), 1000, &listing(&[])), Some(fh(2)));
        // The same subdirectory by another user, a regular file, an unrelated directory: no.
        assert_eq!(ahead.opened(&fh(3), 1001, &listing(&[])), None);
        assert_eq!(ahead.opened(&fh(200), 1000, &listing(&[])), None);
        assert_eq!(ahead.opened(&fh(9), 1000, &listing(&[])), None);
    }

    #[test]
    fn a_listing_got_for_lookups_starts_walks_of_lookups_only() {
        let ahead = ListingAhead::default();
        assert_eq!(ahead.listed(&fh(1), 1000, &listing(&[2, 3])), None);
        // Opening a directory found in it is no walk (`ls dir`); reading it for lookups is.
        assert_eq!(ahead.opened(&fh(2), 1000, &listing(&[4])), None);
        assert_eq!(ahead.listed(&fh(3), 1000, &listing(&[])), Some(fh(1)));
        // Once its parent is opened, opening it is a step.
        assert_eq!(ahead.opened(&fh(1), 1000, &listing(&[2, 3])), None);
        assert_eq!(ahead.opened(&fh(2), 1000, &listing(&[4])), Some(fh(1)));
        // A listing got again without opening leaves an opened parent so.
        assert_eq!(ahead.listed(&fh(1), 1000, &listing(&[2, 3])), None);
        assert_eq!(ahead.opened(&fh(3), 1000, &listing(&[])), Some(fh(1)));
        // A directory listed in another parent since (moved) is that one's.
        assert_eq!(ahead.listed(&fh(5), 1000, &listing(&[2])), None);
        assert_eq!(ahead.listed(&fh(2), 1000, &listing(&[])), Some(fh(5)));
        assert_eq!(
            ahead.opened(&fh(2), 1000, &listing(&[])),
            None,
            "5 was not opened"
        );
    }

    #[test]
    fn subdirectories_are_those_listed_no_larger_than_asked() {
        let mut l = listing(&[2, 3, 4]);
        if let Some((_, a)) = &mut l.entries[1].node {
            a.size = 65 * 1024;
        }
        let all: Vec<FileHandle> = subdirectories(&l, u64::MAX).collect();
        assert_eq!(all, vec![fh(2), fh(3), fh(4)], "in order, no regular file");
        let small: Vec<FileHandle> = subdirectories(&l, 64 * 1024).collect();
        assert_eq!(small, vec![fh(2), fh(4)]);
    }

    #[test]
    fn a_budget_gives_what_is_left_and_no_more() {
        let b = Budget::new(10);
        assert_eq!(b.take(4), 4);
        assert_eq!(b.take(0), 0);
        assert_eq!(b.take(8), 6, "what is left");
        assert_eq!(b.take(1), 0);
    }

    #[test]
    fn each_directory_is_expanded_once_per_user() {
        let ahead = ListingAhead::default();
        let all = u64::MAX;
        assert!(ahead.expand(&fh(1), 1000, all));
        assert!(!ahead.expand(&fh(1), 1000, all));
        assert!(ahead.expand(&fh(1), 1001, all));
        // Expanded for lookups (small directories only), then for a walk of opens: again.
        assert!(ahead.expand(&fh(2), 1000, 64 * 1024));
        assert!(!ahead.expand(&fh(2), 1000, 64 * 1024));
        assert!(ahead.expand(&fh(2), 1000, all));
        assert!(!ahead.expand(&fh(2), 1000, 64 * 1024));
    }

    #[test]
    fn the_walk_memory_is_bounded_and_keeps_the_newest() {
        let ahead = ListingAhead::default();
        let parent = fh(1);
        let mut s = ahead.state.lock();
        for i in 0..MAX_REMEMBERED as u32 + 100 {
            s.parent_of.insert((parent, i), (parent, true));
        }
        assert_eq!(s.parent_of.len(), MAX_REMEMBERED);
        assert_eq!(s.parent_of.places(), MAX_REMEMBERED);
        assert!(
            s.parent_of
                .get(&(parent, MAX_REMEMBERED as u32 + 99))
                .is_some()
        );
        assert!(s.parent_of.get(&(parent, 0)).is_none());
        for i in 0..MAX_EXPANDED as u32 + 1 {
            s.expanded.insert((parent, i), u64::MAX);
        }
        assert_eq!(s.expanded.len(), MAX_EXPANDED);
    }

    #[tokio::test]
    async fn a_read_under_way_is_started_once_and_its_end_is_seen_by_waiters() {
        let ahead = ListingAhead::default();
        let reading = ahead.start(fh(1), 0).await.expect("first start");
        assert!(ahead.start(fh(1), 0).await.is_none(), "already under way");
        let waiter = ahead.reading(&fh(1), 0).expect("under way");
        assert!(ahead.reading(&fh(1), 1).is_none(), "not for another user");
        drop(reading);
        // The waiter sees the end, and the read is no longer listed.
        waiter.wait().await;
        assert!(!ahead.busy(&fh(1), 0));
        assert!(ahead.start(fh(1), 0).await.is_some(), "may start again");
    }

    #[tokio::test]
    async fn reads_under_way_are_bounded() {
        let ahead = ListingAhead::default();
        let mut held = Vec::new();
        for i in 0..MAX_IN_FLIGHT as u8 {
            held.push(ahead.start(fh(i), 0).await.expect("a place"));
        }
        let next = tokio::time::timeout(
            std::time::Duration::from_millis(50),
            ahead.start(fh(100), 0),
        );
        assert!(next.await.is_err(), "waits for a place");
        held.pop();
        assert!(ahead.start(fh(100), 0).await.is_some());
    }
}
