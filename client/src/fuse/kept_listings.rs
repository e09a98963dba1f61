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
//! A kept listing is handed only to the local user it was read for: another user may not be
//! allowed to read the directory, and the server is who decides. The keeping is bounded:
//! at most [`MAX_KEPT`] listings of at most [`MAX_KEPT_ENTRIES`] entries each and
//! [`MAX_KEPT_TOTAL`] entries in all (each up to a 255-byte name, a handle and attributes:
//! about 30 MiB at most, whatever a server answers).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use protocol::FileHandle;

use super::listing::Listing;
use crate::cache::AttrCache;

/// How many listings are kept at most (the soonest to expire goes first when full).
const MAX_KEPT: usize = 4096;
/// Larger listings are not kept: a walk's directories are small, and one huge directory
/// must not hold megabytes of names for a minute.
const MAX_KEPT_ENTRIES: usize = 4096;
/// Entries of all kept listings together.
const MAX_KEPT_TOTAL: usize = 65536;

/// Listings by (directory, local user acting).
#[derive(Default)]
pub(super) struct KeptListings {
    kept: Mutex<KeptSet>,
}

/// The listings, and how many entries they hold together.
#[derive(Default)]
struct KeptSet {
    by_dir: HashMap<(FileHandle, u32), Kept>,
    entries: usize,
}

impl KeptSet {
    fn remove(&mut self, key: &(FileHandle, u32)) {
        if let Some(k) = self.by_dir.remove(key) {
            self.entries -= k.listing.entries.len();
        }
    }
}

struct Kept {
    listing: Arc<Listing>,
    /// The end of the directory's lease.
    until: Instant,
}

impl KeptListings {
    /// The listing of directory `dir` kept for `uid`, if it is still what the server would
    /// answer: the directory's lease has not ended and `cache` saw no change of it since the
    /// listing was asked for.
    pub(super) fn get(
        &self,
        dir: &FileHandle,
        uid: u32,
        cache: &AttrCache,
    ) -> Option<Arc<Listing>> {
        let mut kept = self.kept.lock();
        let k = kept.by_dir.get(&(*dir, uid))?;
        if Instant::now() < k.until && !cache.changed_since(dir, k.listing.since) {
            return Some(k.listing.clone());
        }
        kept.remove(&(*dir, uid));
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
        let n = listing.entries.len();
        let mut kept = self.kept.lock();
        kept.remove(&(*dir, uid));
        let full = |k: &KeptSet| k.by_dir.len() >= MAX_KEPT || k.entries + n > MAX_KEPT_TOTAL;
        if full(&kept) {
            let now = Instant::now();
            let expired: Vec<_> = kept
                .by_dir
                .iter()
                .filter(|(_, k)| k.until <= now)
                .map(|(key, _)| *key)
                .collect();
            for key in &expired {
                kept.remove(key);
            }
        }
        while full(&kept) {
            let Some(soonest) = kept
                .by_dir
                .iter()
                .min_by_key(|(_, k)| k.until)
                .map(|(key, _)| *key)
            else {
                break;
            };
            kept.remove(&soonest);
        }
        kept.entries += n;
        kept.by_dir.insert(
            (*dir, uid),
            Kept {
                listing: listing.clone(),
                until,
            },
        );
    }

    /// How many listings are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.kept.lock().by_dir.len()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use protocol::Attr;

    use super::*;

    const DIR: FileHandle = FileHandle::from_bytes([3; 48]);

    fn listing(cache: &AttrCache, entries: usize) -> Arc<Listing> {
        let since = cache.stamp();
        let entries = (0..entries)
            .map(|i| super::super::listing::Listed {
                kind: fuser::FileType::RegularFile,
                name: format!("f{i}").into_bytes(),
                node: None,
            })
            .collect();
        Arc::new(Listing {
            entries,
            since,
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
}
