//! Listings kept between opens of a directory, for as long as the directory's lease lasts.
//!
//! Without them every `opendir` reads the directory from the server again: a second `ls -lR`
//! or `find` pays one round trip per directory, and `rm -r` (which opens each directory twice)
//! two. A listing read with the directory's attributes under a lease is still what the server
//! would answer while that lease lasts and nothing changed the directory since: a change made
//! through any sfsd client (this one or another) either went through this session, which the
//! attribute cache records as a change of the directory, or reaches us as an INVALIDATE of the
//! directory (we hold its lease), which the cache records too. Only a name a program makes on
//! the server's own disk, behind sfsd's back, shows when the lease ends (at most the lease,
//! 60 s by default), exactly as an attribute changed there does.
//!
//! A change of ours to the directory's names (a create, a removal, a rename) that nothing
//! but other changes of ours overlapped does not drop the listing: it is edited to show the
//! change and holds on ([`KeptListings::patch`]; changes of ours in flight together are all
//! applied before the listing is handed out again). git makes `index.lock` and renames it over `index` at each
//! index write, and probes `.git` for absent names (`MERGE_HEAD`, lock files) all the while:
//! read again after each change, each of those probes would be a round trip. Only a change
//! the server tells us all of is so applied: the new name's object and attributes come with
//! the reply, and the server tells us (before the reply) of the objects a removal or rename
//! changes without naming them, as it does other clients.
//!
//! A kept listing is handed only to the local user it was read for: another user may not be
//! allowed to read the directory, and the server is who decides. The keeping is bounded:
//! at most [`MAX_KEPT`] listings of at most [`MAX_KEPT_ENTRIES`] entries each and
//! [`MAX_KEPT_TOTAL`] entries in all (each up to a 255-byte name, a handle and attributes:
//! about 30 MiB at most, whatever a server answers).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use protocol::{Attr, FileHandle};

use super::convert::kind;
use super::listing::{Listed, Listing};
use crate::cache::{AttrCache, Settled, Stamp};

/// How many listings are kept at most (the soonest to expire goes first when full).
const MAX_KEPT: usize = 4096;
/// Larger listings are not kept: a walk's directories are small, and one huge directory
/// must not hold megabytes of names for a minute.
const MAX_KEPT_ENTRIES: usize = 4096;
/// Entries of all kept listings together.
const MAX_KEPT_TOTAL: usize = 65536;

/// Listings by directory, then by local user acting.
#[derive(Default)]
pub(super) struct KeptListings {
    kept: Mutex<KeptSet>,
}

/// The listings, how many, and how many entries they hold together.
#[derive(Default)]
struct KeptSet {
    by_dir: HashMap<FileHandle, HashMap<u32, Kept>>,
    listings: usize,
    entries: usize,
    /// Every listing's end, the soonest first, so that room is made without a scan (a
    /// `find` of a tree past [`MAX_KEPT`] directories scanned all the kept listings twice
    /// for each new one: 0.5 ms an `opendir`). A place whose listing went, or was kept
    /// again since, is skipped.
    ends: BinaryHeap<End>,
    /// Listings kept so far (each one's [`Kept::seq`]).
    kept: u64,
}

/// A kept listing's place among [`KeptSet::ends`]: the soonest end is the greatest.
struct End {
    until: Instant,
    seq: u64,
    dir: FileHandle,
    uid: u32,
}

impl End {
    fn key(&self) -> (Instant, u64) {
        (self.until, self.seq)
    }
}

impl Ord for End {
    fn cmp(&self, other: &End) -> Ordering {
        other.key().cmp(&self.key())
    }
}

impl PartialOrd for End {
    fn partial_cmp(&self, other: &End) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for End {
    fn eq(&self, other: &End) -> bool {
        self.key() == other.key()
    }
}

impl Eq for End {}

impl KeptSet {
    fn remove(&mut self, dir: &FileHandle, uid: u32) {
        let Some(users) = self.by_dir.get_mut(dir) else {
            return;
        };
        if let Some(k) = users.remove(&uid) {
            self.listings -= 1;
            self.entries -= k.listing.entries.len();
        }
        if users.is_empty() {
            self.by_dir.remove(dir);
        }
    }

    /// Whether `end` is the place of a listing still kept.
    fn current(&self, end: &End) -> bool {
        let kept = self
            .by_dir
            .get(&end.dir)
            .and_then(|users| users.get(&end.uid));
        kept.is_some_and(|k| k.seq == end.seq)
    }

    /// Adds `k`, kept for `uid`, to `dir`'s listings (the caller made room).
    fn insert(&mut self, dir: FileHandle, uid: u32, mut k: Kept) {
        self.kept += 1;
        k.seq = self.kept;
        self.listings += 1;
        self.entries += k.listing.entries.len();
        self.ends.push(End {
            until: k.until,
            seq: k.seq,
            dir,
            uid,
        });
        self.by_dir.entry(dir).or_default().insert(uid, k);
        // Places of listings gone: dropped once they outnumber the listings.
        if self.ends.len() > 2 * self.listings + 64 {
            let ends = std::mem::take(&mut self.ends);
            self.ends = ends.into_iter().filter(|e| self.current(e)).collect();
        }
    }
}

struct Kept {
    listing: Arc<Listing>,
    /// The end of the directory's lease.
    until: Instant,
    /// When it was kept (a count): its place among [`KeptSet::ends`].
    seq: u64,
    /// A group of our changes of the directory partly applied: until all are, the listing
    /// is handed to no one.
    applying: Option<Applying>,
}

/// The changes of a group ([`Settled`]) applied to a listing so far.
struct Applying {
    group: u64,
    applied: u32,
    /// The names they touched: two changes of one name in flight together may have been
    /// done in either order.
    touched: Vec<Vec<u8>>,
    /// How many the group had, and the stamp the listing holds as of once all are applied
    /// (known when the last to end is applied).
    last: Option<(u32, Stamp)>,
}

/// A change of ours to one directory's names, to apply to its kept listings.
pub(super) enum Edit<'a> {
    /// `name` now names this object (made, linked, or moved there).
    Named(&'a [u8], &'a (FileHandle, Attr)),
    /// `name` is gone.
    Unnamed(&'a [u8]),
    /// `from` was renamed `to` in the directory.
    Renamed { from: &'a [u8], to: &'a [u8] },
}

impl Edit<'_> {
    /// The names it touches.
    fn names(&self) -> [Option<&[u8]>; 2] {
        match *self {
            Edit::Named(name, _) | Edit::Unnamed(name) => [Some(name), None],
            Edit::Renamed { from, to } => [Some(from), Some(to)],
        }
    }

    /// Applies the edit to `entries`; false if it cannot be (a rename of a name they lack).
    fn apply(&self, entries: &mut Vec<Listed>) -> bool {
        let unname = |entries: &mut Vec<Listed>, name: &[u8]| {
            let at = entries.iter().position(|e| e.name == name)?;
            Some(entries.remove(at))
        };
        match *self {
            Edit::Named(name, node) => {
                unname(entries, name);
                entries.push(Listed {
                    kind: kind(node.1.ftype),
                    name: name.to_vec(),
                    node: Some(*node),
                    fileid: 0,
                });
            }
            Edit::Unnamed(name) => {
                unname(entries, name);
            }
            Edit::Renamed { from, to } => {
                let Some(moved) = unname(entries, from) else {
                    return false;
                };
                unname(entries, to);
                entries.push(Listed {
                    name: to.to_vec(),
                    ..moved
                });
            }
        }
        true
    }
}

impl KeptListings {
    /// The listing of directory `dir` kept for `uid`, if it is still what the server would
    /// answer: the directory's lease has not ended and `cache` saw no change of it since the
    /// listing was asked for (or since our own change last applied to it).
    pub(super) fn get(
        &self,
        dir: &FileHandle,
        uid: u32,
        cache: &AttrCache,
    ) -> Option<Arc<Listing>> {
        let mut kept = self.kept.lock();
        let k = kept.by_dir.get(dir)?.get(&uid)?;
        let live = Instant::now() < k.until;
        if live && k.applying.is_some() {
            return None;
        }
        if live && !cache.changed_since(dir, k.listing.names_since) {
            return Some(k.listing.clone());
        }
        kept.remove(dir, uid);
        None
    }

    /// Keeps `listing` of `dir`, read for `uid`, until the directory's cached attributes
    /// expire in `cache`; not at all when none are cached (no lease was granted, or a change
    /// overlapped the listing) or it is too large.
    pub(super) fn keep(
        &self,
        dir: &FileHandle,
        uid: u32,
        listing: &Arc<Listing>,
        cache: &AttrCache,
    ) {
        let Some(until) = cache.expiry(dir) else {
            return;
        };
        if listing.entries.len() > MAX_KEPT_ENTRIES || cache.changed_since(dir, listing.since) {
            return;
        }
        let mut kept = self.kept.lock();
        kept.remove(dir, uid);
        make_room(&mut kept, listing.entries.len());
        kept.insert(
            *dir,
            uid,
            Kept {
                listing: listing.clone(),
                until,
                seq: 0,
                applying: None,
            },
        );
    }

    /// Our change of `dir`'s names, answered, one of a group of ours that nothing else
    /// overlapped (`settled`): each listing of `dir` kept from before the group, unchanged
    /// since but by it, gets `edit`, and once it has all the group's changes it holds on as
    /// of the last one's reply. Listings read since already show the changes and stay as
    /// they are; one the edit does not fit (or whose group was left unfinished) goes.
    pub(super) fn patch(&self, dir: &FileHandle, settled: Settled, edit: &Edit<'_>) {
        let mut kept = self.kept.lock();
        let Some(users) = kept.by_dir.get_mut(dir) else {
            return;
        };
        let (mut patched, mut gone) = (Vec::new(), Vec::new());
        let mut grown = 0isize;
        for (uid, k) in users.iter_mut() {
            match &k.applying {
                Some(a) if a.group == settled.group() => {}
                Some(_) => {
                    gone.push(*uid);
                    continue;
                }
                None if settled.applies_to(k.listing.names_since) => {
                    k.applying = Some(Applying {
                        group: settled.group(),
                        applied: 0,
                        touched: Vec::new(),
                        last: None,
                    });
                }
                None => continue,
            }
            patched.push(*uid);
            let before = k.listing.entries.len();
            if !apply(k, settled, edit) {
                gone.push(*uid);
            }
            grown += k.listing.entries.len() as isize - before as isize;
        }
        kept.entries = kept.entries.saturating_add_signed(grown);
        if kept.entries > MAX_KEPT_TOTAL {
            gone = patched;
        }
        for uid in gone {
            kept.remove(dir, uid);
        }
    }

    /// How many listings are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.kept.lock().listings
    }
}

/// Applies `edit`, our change that settled as `settled`, to `k` (which is applying its
/// group): false if the listing must go instead.
fn apply(k: &mut Kept, settled: Settled, edit: &Edit<'_>) -> bool {
    let Some(a) = k.applying.as_mut() else {
        return false;
    };
    for name in edit.names().into_iter().flatten() {
        if a.touched.iter().any(|t| t == name) {
            return false;
        }
        a.touched.push(name.to_vec());
    }
    a.applied += 1;
    a.last = a.last.or(settled.last());
    // Edited in place unless a reader holds it (an open directory serves it to the end, as
    // read); a copy otherwise. Either way no longer the kernel's copy
    // ([`super::kernel_listings`] holds it weakly).
    let listing = Arc::make_mut(&mut k.listing);
    if !edit.apply(&mut listing.entries) || listing.entries.len() > MAX_KEPT_ENTRIES {
        return false;
    }
    match a.last {
        Some((n, to)) if a.applied == n => {
            Arc::make_mut(&mut k.listing).names_since = to;
            k.applying = None;
            true
        }
        Some((n, _)) => a.applied < n,
        None => true,
    }
}

/// Room for a listing of `n` entries: the soonest to expire go first (the expired, if any).
fn make_room(kept: &mut KeptSet, n: usize) {
    let full = |k: &KeptSet| k.listings >= MAX_KEPT || k.entries + n > MAX_KEPT_TOTAL;
    while full(kept) {
        let Some(end) = kept.ends.pop() else {
            break;
        };
        if kept.current(&end) {
            kept.remove(&end.dir, end.uid);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const DIR: FileHandle = FileHandle::from_bytes([3; 48]);

    fn listing(cache: &AttrCache, entries: usize) -> Arc<Listing> {
        let since = cache.stamp();
        let entries = (0..entries)
            .map(|i| super::super::listing::Listed {
                kind: fuser::FileType::RegularFile,
                name: format!("f{i}").into_bytes(),
                node: None,
                fileid: 0,
            })
            .collect();
        Arc::new(Listing {
            entries,
            since,
            names_since: since,
            received: Instant::now(),
        })
    }

    /// The directory's attributes arrived with the listing, under a lease of `lease_ms`.
    fn leased(cache: &AttrCache, l: &Listing, lease_ms: u32) {
        leased_dir(cache, DIR, l, lease_ms);
    }

    fn leased_dir(cache: &AttrCache, dir: FileHandle, l: &Listing, lease_ms: u32) {
        cache.put(dir, Attr::test_file(0, lease_ms), l.since);
    }

    /// Directory number `n`'s handle.
    fn dir(n: u64) -> FileHandle {
        let mut b = [0; 48];
        b[..8].copy_from_slice(&n.to_le_bytes());
        b[8] = 1;
        FileHandle::from_bytes(b)
    }

    #[test]
    fn a_kept_listing_is_handed_only_to_its_user_and_only_while_unchanged() {
        let cache = AttrCache::default();
        let kept = KeptListings::default();
        let l = listing(&cache, 3);
        leased(&cache, &l, 60_000);
        kept.keep(&DIR, 1000, &l, &cache);
        assert!(kept.get(&DIR, 1000, &cache).is_some());
        assert!(kept.get(&DIR, 1001, &cache).is_none(), "another user");
        let other = FileHandle::from_bytes([4; 48]);
        leased_dir(&cache, other, &l, 60_000);
        assert!(
            kept.get(&other, 1000, &cache).is_none(),
            "another directory"
        );
        // A change of the directory (ours, or an INVALIDATE) ends it.
        cache.invalidate(&DIR);
        assert!(kept.get(&DIR, 1000, &cache).is_none());
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn a_listing_is_kept_no_longer_than_the_directory_lease() {
        let cache = AttrCache::default();
        let kept = KeptListings::default();
        let l = listing(&cache, 1);
        leased(&cache, &l, 40);
        kept.keep(&DIR, 0, &l, &cache);
        assert!(kept.get(&DIR, 0, &cache).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(kept.get(&DIR, 0, &cache).is_none());
        // No lease at all (lease 0, or the attributes were refused): not kept.
        let l = listing(&cache, 1);
        leased(&cache, &l, 0);
        kept.keep(&DIR, 0, &l, &cache);
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn a_listing_a_change_overlapped_is_not_kept() {
        let cache = AttrCache::default();
        let kept = KeptListings::default();
        let l = listing(&cache, 1);
        leased(&cache, &l, 60_000);
        // A CREATE in the directory was answered after the listing was asked for.
        cache.begin(&DIR).end(None);
        cache.put(DIR, Attr::test_file(0, 60_000), cache.stamp());
        kept.keep(&DIR, 0, &l, &cache);
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn keeping_is_bounded() {
        let cache = AttrCache::default();
        let kept = KeptListings::default();
        let big = listing(&cache, MAX_KEPT_ENTRIES + 1);
        leased(&cache, &big, 60_000);
        kept.keep(&DIR, 0, &big, &cache);
        assert_eq!(kept.len(), 0, "too many entries");
        let l = listing(&cache, 1);
        for n in 0..MAX_KEPT as u64 + 10 {
            leased_dir(&cache, dir(n), &l, 60_000);
            kept.keep(&dir(n), 0, &l, &cache);
        }
        assert_eq!(kept.len(), MAX_KEPT);
        // Entries in all: listings of 4096 entries, at most MAX_KEPT_TOTAL of them together.
        let kept = KeptListings::default();
        let large = listing(&cache, MAX_KEPT_ENTRIES);
        for n in 0..40 {
            leased_dir(&cache, dir(n), &large, 60_000);
            kept.keep(&dir(n), 0, &large, &cache);
        }
        assert_eq!(kept.len(), MAX_KEPT_TOTAL / MAX_KEPT_ENTRIES);
        assert_eq!(kept.kept.lock().entries, MAX_KEPT_TOTAL);
        // Kept again under the same key: counted once.
        kept.keep(&dir(39), 0, &large, &cache);
        assert_eq!(kept.kept.lock().entries, MAX_KEPT_TOTAL);
    }

    /// When full, the listing whose lease ends soonest goes (found without a scan), and
    /// keeping listings again and again leaves the places of those gone bounded.
    #[test]
    fn the_soonest_to_end_goes_first_and_the_places_stay_bounded() {
        let cache = AttrCache::default();
        let kept = KeptListings::default();
        let l = listing(&cache, 1);
        for n in 0..MAX_KEPT as u64 {
            let lease = if n == 5 { 1_000 } else { 60_000 + n as u32 };
            leased_dir(&cache, dir(n), &l, lease);
            kept.keep(&dir(n), 0, &l, &cache);
        }
        let held = |n: u64| kept.get(&dir(n), 0, &cache).is_some();
        assert!(held(5) && held(0));
        let more = MAX_KEPT as u64;
        leased_dir(&cache, dir(more), &l, 60_000);
        kept.keep(&dir(more), 0, &l, &cache);
        assert!(!held(5), "the shortest lease went first");
        assert!(held(0) && held(more));
        leased_dir(&cache, dir(more + 1), &l, 60_000);
        kept.keep(&dir(more + 1), 0, &l, &cache);
        assert!(!held(0), "then the next to end");
        assert!(held(1) && held(more + 1));
        assert_eq!(kept.len(), MAX_KEPT);
        for _ in 0..10_000 {
            kept.keep(&dir(7), 0, &l, &cache);
        }
        assert_eq!(kept.len(), MAX_KEPT);
        let places = kept.kept.lock().ends.len();
        assert!(
            places <= 2 * MAX_KEPT + 65,
            "{places} places for {MAX_KEPT} listings"
        );
    }

    fn names(kept: &KeptListings, cache: &AttrCache, uid: u32) -> Option<Vec<String>> {
        let l = kept.get(&DIR, uid, cache)?;
        let names = l
            .entries
            .iter()
            .map(|e| String::from_utf8_lossy(&e.name).into());
        Some(names.collect())
    }

    /// A listing of f0, f1, f2 kept for user 0 under a minute's lease.
    fn kept_three(cache: &AttrCache) -> KeptListings {
        let kept = KeptListings::default();
        let l = listing(cache, 3);
        leased(cache, &l, 60_000);
        kept.keep(&DIR, 0, &l, cache);
        kept
    }

    const NEW: FileHandle = FileHandle::from_bytes([9; 48]);

    #[test]
    fn our_own_changes_edit_the_kept_listing_which_holds_on() {
        let cache = AttrCache::default();
        let kept = kept_three(&cache);
        let held = kept.get(&DIR, 0, &cache).unwrap();
        let weak = Arc::downgrade(&held);
        let created = cache.begin(&DIR).end(None).unwrap();
        kept.patch(
            &DIR,
            created,
            &Edit::Named(b"n", &(NEW, Attr::test_file(0, 60_000))),
        );
        assert_eq!(names(&kept, &cache, 0).unwrap(), ["f0", "f1", "f2", "n"]);
        assert_eq!(
            held.entries.len(),
            3,
            "an open directory serves what it opened"
        );
        let renamed = cache.begin(&DIR).end(None).unwrap();
        kept.patch(
            &DIR,
            renamed,
            &Edit::Renamed {
                from: b"n",
                to: b"f1",
            },
        );
        assert_eq!(names(&kept, &cache, 0).unwrap(), ["f0", "f2", "f1"]);
        let moved = kept.get(&DIR, 0, &cache).unwrap();
        assert_eq!(
            moved.entries[2].node.unwrap().0,
            NEW,
            "f1 is the moved object"
        );
        let removed = cache.begin(&DIR).end(None).unwrap();
        kept.patch(&DIR, removed, &Edit::Unnamed(b"f0"));
        assert_eq!(names(&kept, &cache, 0).unwrap(), ["f2", "f1"]);
        assert_eq!(kept.kept.lock().entries, 2);
        drop((held, moved));
        assert!(
            weak.upgrade().is_none(),
            "not the listing the kernel's copy was filled from"
        );
    }

    #[test]
    fn only_a_change_from_just_after_the_listing_edits_it() {
        let cache = AttrCache::default();
        // Another change came first, unseen by the listing: not edited, and dropped.
        let kept = kept_three(&cache);
        cache.invalidate(&DIR);
        let ours = cache.begin(&DIR).end(None).unwrap();
        kept.patch(&DIR, ours, &Edit::Unnamed(b"f0"));
        assert_eq!(names(&kept, &cache, 0), None);
        assert_eq!(kept.len(), 0);
        // A listing read after the change already shows it: left as it is.
        let settled = cache.begin(&DIR).end(None).unwrap();
        let kept = kept_three(&cache);
        kept.patch(&DIR, settled, &Edit::Unnamed(b"f0"));
        assert_eq!(names(&kept, &cache, 0).unwrap(), ["f0", "f1", "f2"]);
        // Nor one read while it was under way (it may or may not show it): never kept.
        let change = cache.begin(&DIR);
        let during = listing(&cache, 3);
        let settled = change.end(None).unwrap();
        assert!(!settled.applies_to(during.since));
    }

    #[test]
    fn changes_in_flight_together_apply_once_all_are_in() {
        let cache = AttrCache::default();
        let kept = kept_three(&cache);
        let (first, second) = (cache.begin(&DIR), cache.begin(&DIR));
        let second = second.end(None).unwrap();
        assert_eq!(second.last(), None, "the first is still in flight");
        kept.patch(&DIR, second, &Edit::Unnamed(b"f1"));
        assert_eq!(
            names(&kept, &cache, 0),
            None,
            "half applied: handed to no one"
        );
        assert_eq!(kept.len(), 1, "but kept");
        let first = first.end(None).unwrap();
        assert_eq!(first.last().map(|(n, _)| n), Some(2));
        kept.patch(&DIR, first, &Edit::Unnamed(b"f0"));
        assert_eq!(names(&kept, &cache, 0).unwrap(), ["f2"]);
        // Applied in the other order than they ended: the same.
        let kept = kept_three(&cache);
        let (first, second) = (cache.begin(&DIR), cache.begin(&DIR));
        let (second, first) = (second.end(None).unwrap(), first.end(None).unwrap());
        kept.patch(&DIR, first, &Edit::Unnamed(b"f0"));
        assert_eq!(names(&kept, &cache, 0), None);
        kept.patch(&DIR, second, &Edit::Unnamed(b"f1"));
        assert_eq!(names(&kept, &cache, 0).unwrap(), ["f2"]);
    }

    #[test]
    fn a_group_not_all_known_leaves_no_listing_handed_out() {
        let cache = AttrCache::default();
        // A member without its reply (an error, or given up).
        let kept = kept_three(&cache);
        let (first, second) = (cache.begin(&DIR), cache.begin(&DIR));
        let first = first.end(None).unwrap();
        kept.patch(&DIR, first, &Edit::Unnamed(b"f0"));
        drop(second);
        assert_eq!(names(&kept, &cache, 0), None);
        // The next change of ours drops it.
        let next = cache.begin(&DIR).end(None).unwrap();
        kept.patch(&DIR, next, &Edit::Unnamed(b"f1"));
        assert_eq!(kept.len(), 0);
        // Another client's change while ours were in flight: none of them settles after.
        let kept = kept_three(&cache);
        let (first, second) = (cache.begin(&DIR), cache.begin(&DIR));
        let first = first.end(None).unwrap();
        kept.patch(&DIR, first, &Edit::Unnamed(b"f0"));
        cache.invalidated(&DIR, None);
        assert_eq!(second.end(None), None);
        assert_eq!(names(&kept, &cache, 0), None);
        // A group left unfinished, then another: the other's changes are not the first's.
        let kept = kept_three(&cache);
        let (first, given_up) = (cache.begin(&DIR), cache.begin(&DIR));
        kept.patch(&DIR, first.end(None).unwrap(), &Edit::Unnamed(b"f0"));
        drop(given_up);
        let (third, fourth) = (cache.begin(&DIR), cache.begin(&DIR));
        let (fourth, third) = (fourth.end(None).unwrap(), third.end(None).unwrap());
        kept.patch(&DIR, third, &Edit::Unnamed(b"f1"));
        assert_eq!(names(&kept, &cache, 0), None);
        assert_eq!(kept.len(), 0);
        kept.patch(&DIR, fourth, &Edit::Unnamed(b"f2"));
        assert_eq!(kept.len(), 0);
        // Two changes of one name in flight together: the order is not known.
        let kept = kept_three(&cache);
        let (first, second) = (cache.begin(&DIR), cache.begin(&DIR));
        let (first, second) = (first.end(None).unwrap(), second.end(None).unwrap());
        kept.patch(&DIR, first, &Edit::Unnamed(b"f0"));
        kept.patch(
            &DIR,
            second,
            &Edit::Named(b"f0", &(NEW, Attr::test_file(0, 60_000))),
        );
        assert_eq!(kept.len(), 0);
    }

    #[test]
    fn an_edit_that_does_not_fit_drops_the_listing() {
        let cache = AttrCache::default();
        let kept = kept_three(&cache);
        let renamed = cache.begin(&DIR).end(None).unwrap();
        kept.patch(
            &DIR,
            renamed,
            &Edit::Renamed {
                from: b"absent",
                to: b"f0",
            },
        );
        assert_eq!(kept.len(), 0, "a rename of a name it lacks");
        assert_eq!(kept.kept.lock().entries, 0);
        // Grown past the bound on one listing.
        let kept = KeptListings::default();
        let full = listing(&cache, MAX_KEPT_ENTRIES);
        leased(&cache, &full, 60_000);
        kept.keep(&DIR, 0, &full, &cache);
        let made = cache.begin(&DIR).end(None).unwrap();
        kept.patch(
            &DIR,
            made,
            &Edit::Named(b"n", &(NEW, Attr::test_file(0, 60_000))),
        );
        assert_eq!(kept.len(), 0, "more than MAX_KEPT_ENTRIES");
        assert_eq!(kept.kept.lock().entries, 0);
        // Grown to the bound: kept.
        let almost = listing(&cache, MAX_KEPT_ENTRIES - 1);
        leased(&cache, &almost, 60_000);
        kept.keep(&DIR, 0, &almost, &cache);
        let made = cache.begin(&DIR).end(None).unwrap();
        let node = (NEW, Attr::test_file(0, 60_000));
        kept.patch(&DIR, made, &Edit::Named(b"n", &node));
        assert_eq!(
            kept.get(&DIR, 0, &cache).unwrap().entries.len(),
            MAX_KEPT_ENTRIES
        );
    }

    #[test]
    fn edits_keep_all_listings_within_the_total_bound() {
        let cache = AttrCache::default();
        let kept = KeptListings::default();
        let large = listing(&cache, MAX_KEPT_ENTRIES);
        let n = MAX_KEPT_TOTAL / MAX_KEPT_ENTRIES;
        for d in 0..n as u64 {
            leased_dir(&cache, dir(d), &large, 60_000);
            kept.keep(&dir(d), 0, &large, &cache);
        }
        assert_eq!(kept.kept.lock().entries, MAX_KEPT_TOTAL);
        // A rename keeps the count: at the bound, still kept.
        let renamed = cache.begin(&dir(0)).end(None).unwrap();
        kept.patch(
            &dir(0),
            renamed,
            &Edit::Renamed {
                from: b"f0",
                to: b"g0",
            },
        );
        assert_eq!(kept.len(), n);
        // One more name would pass it: that listing goes.
        let removed = cache.begin(&dir(1)).end(None).unwrap();
        kept.patch(&dir(1), removed, &Edit::Unnamed(b"f0"));
        let made = cache.begin(&dir(1)).end(None).unwrap();
        let node = (NEW, Attr::test_file(0, 60_000));
        kept.patch(&dir(1), made, &Edit::Named(b"n", &node));
        assert_eq!(kept.len(), n, "back to the bound");
        let made = cache.begin(&dir(2)).end(None).unwrap();
        kept.patch(&dir(2), made, &Edit::Named(b"n", &node));
        assert_eq!(kept.len(), n - 1);
        assert!(kept.get(&dir(2), 0, &cache).is_none());
        assert_eq!(kept.kept.lock().entries, MAX_KEPT_TOTAL - MAX_KEPT_ENTRIES);
    }

    #[test]
    fn every_user_s_listing_of_the_directory_is_edited() {
        let cache = AttrCache::default();
        let kept = kept_three(&cache);
        let l = listing(&cache, 3);
        kept.keep(&DIR, 7, &l, &cache);
        let made = cache.begin(&DIR).end(None).unwrap();
        kept.patch(
            &DIR,
            made,
            &Edit::Named(b"n", &(NEW, Attr::test_file(0, 60_000))),
        );
        for uid in [0, 7] {
            assert_eq!(names(&kept, &cache, uid).unwrap().len(), 4, "user {uid}");
        }
        assert_eq!(kept.kept.lock().entries, 8);
    }
}
