//! The shared in-memory file cache, sharded, each shard's changes owned by its own color.
//!
//! The paper's web server colors its cache by file name so that lookups of different files
//! run in parallel. Here a shard's *changes* (loading a file, accounting, eviction) run only in
//! the shard's color, so they are serialised per shard without a lock and a file missed by
//! many connections at once is read once. *Hits* do not hop: they take the shard's read lock
//! from the connection's color, which costs one atomic where a hop to the shard's color and
//! back costs two callbacks per request (the paper's design; on this runtime the hops cost
//! more than the lookup they protect).
//!
//! Bounds: each shard holds at most `cache bytes / SHARDS`; files above [`Cache::max_entry`]
//! are never cached (sent with `sendfile` from a descriptor opened per request). Eviction is
//! first-in first-out per shard. An entry is trusted for [`FRESH_FOR`] after it was loaded or
//! last checked; after that the next request re-checks it (open + fstat in the shard's color)
//! and reloads it if its size, mtime or inode changed.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use libcolor::{COLOR_SLOTS, Color, ColorCell, Handle};
use parking_lot::RwLock;

use crate::fsroot::Root;
use crate::response::FileMeta;

/// Number of shards (and shard colors).
pub const SHARDS: usize = 64;
/// Shard `i`'s color: in the upper half of libcolor's slot table, apart from connections'.
pub const SHARD_COLOR_BASE: u32 = COLOR_SLOTS as u32 / 2;
/// How long a cached file is served without looking at the disk again (nginx's
/// `open_file_cache_valid` plays the same role).
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// A cached file.
pub struct Entry {
    pub meta: FileMeta,
    pub body: Arc<[u8]>,
    /// (dev, ino, size, mtime in ns): what a re-check compares.
    identity: (u64, u64, u64, i128),
    /// When it was last found current, in ms since the cache's creation.
    checked_ms: AtomicU64,
}

/// The outcome of a load in a shard's color.
pub enum Loaded {
    Cached(Arc<Entry>),
    /// Too large to cache: the descriptor to `sendfile` from.
    Large(Arc<File>, FileMeta),
    NotFound,
}

struct Accounting {
    used: usize,
    /// Insertion order, for eviction; entries replaced since are dead `Weak`s.
    fifo: VecDeque<(String, Weak<Entry>)>,
}

struct Shard {
    map: RwLock<HashMap<String, Arc<Entry>>>,
    acct: ColorCell<Accounting>,
}

pub struct Cache {
    shards: Box<[Shard]>,
    hasher: RandomState,
    shard_bytes: usize,
    max_entry: u64,
    base: Instant,
}

fn identity(m: &std::fs::Metadata) -> (u64, u64, u64, i128) {
    (
        m.dev(),
        m.ino(),
        m.len(),
        i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    )
}

impl Cache {
    /// A cache of at most `bytes` on runtime `h`.
    pub fn new(h: &Handle, bytes: usize) -> Cache {
        let shard_bytes = bytes / SHARDS;
        let shards = (0..SHARDS)
            .map(|i| Shard {
                map: RwLock::new(HashMap::new()),
                acct: ColorCell::new(
                    h,
                    Cache::shard_color(i),
                    Accounting {
                        used: 0,
                        fifo: VecDeque::new(),
                    },
                ),
            })
            .collect();
        Cache {
            shards,
            hasher: RandomState::new(),
            shard_bytes,
            // A quarter of a shard, so one file cannot flush a shard by itself.
            max_entry: (shard_bytes / 4).min(1 << 20) as u64,
            base: Instant::now(),
        }
    }

    pub fn shard_of(&self, path: &str) -> usize {
        (self.hasher.hash_one(path) % SHARDS as u64) as usize
    }

    pub fn shard_color(shard: usize) -> Color {
        Color(SHARD_COLOR_BASE + shard as u32)
    }

    /// Largest file kept in memory.
    pub fn max_entry(&self) -> u64 {
        self.max_entry
    }

    fn now_ms(&self) -> u64 {
        self.base.elapsed().as_millis() as u64
    }

    fn is_fresh(&self, e: &Entry, now_ms: u64) -> bool {
        now_ms.saturating_sub(e.checked_ms.load(Ordering::Relaxed)) < FRESH_FOR.as_millis() as u64
    }

    /// A current entry for `path`, from any color (the hit path).
    pub fn get_fresh(&self, path: &str) -> Option<Arc<Entry>> {
        let shard = &self.shards[self.shard_of(path)];
        let e = shard.map.read().get(path).cloned()?;
        self.is_fresh(&e, self.now_ms()).then_some(e)
    }

    /// Looks `path` up, re-checks or loads it. Must run in `path`'s shard color (it panics
    /// otherwise: a programming error).
    pub fn load(&self, root: &Root, path: &str) -> Loaded {
        let shard = &self.shards[self.shard_of(path)];
        shard
            .acct
            .with(|acct| self.load_in_color(shard, acct, root, path))
    }

    fn load_in_color(
        &self,
        shard: &Shard,
        acct: &mut Accounting,
        root: &Root,
        path: &str,
    ) -> Loaded {
        let now = self.now_ms();
        let old = shard.map.read().get(path).cloned();
        if let Some(e) = &old
            && self.is_fresh(e, now)
        {
            return Loaded::Cached(e.clone());
        }
        let Some((file, md)) = root
            .open_file(path)
            .ok()
            .and_then(|f| f.metadata().ok().map(|m| (f, m)))
            .filter(|(_, m)| m.is_file())
        else {
            self.remove(shard, acct, path);
            return Loaded::NotFound;
        };
        let id = identity(&md);
        if let Some(e) = old {
            if e.identity == id {
                e.checked_ms.store(now, Ordering::Relaxed);
                return Loaded::Cached(e);
            }
            self.remove(shard, acct, path);
        }
        let meta = FileMeta::new(
            md.len(),
            md.modified().unwrap_or(std::time::UNIX_EPOCH),
            path,
        );
        if md.len() > self.max_entry {
            return Loaded::Large(Arc::new(file), meta);
        }
        let mut body = Vec::with_capacity(md.len() as usize);
        // At most one byte more than the cap: a file that grew meanwhile is served as read.
        if (&file)
            .take(self.max_entry + 1)
            .read_to_end(&mut body)
            .is_err()
        {
            return Loaded::NotFound;
        }
        let mut meta = meta;
        meta.len = body.len() as u64;
        let entry = Arc::new(Entry {
            meta,
            body: body.into(),
            identity: id,
            checked_ms: AtomicU64::new(now),
        });
        let size = entry.body.len() + path.len() + 128;
        while acct.used + size > self.shard_bytes {
            let Some((key, weak)) = acct.fifo.pop_front() else {
                break;
            };
            if let Some(victim) = weak.upgrade() {
                let mut map = shard.map.write();
                if map.get(&key).is_some_and(|cur| Arc::ptr_eq(cur, &victim)) {
                    map.remove(&key);
                    acct.used -= victim.body.len() + key.len() + 128;
                }
            }
        }
        if acct.used + size <= self.shard_bytes {
            acct.used += size;
            shard.map.write().insert(path.to_owned(), entry.clone());
            acct.fifo
                .push_back((path.to_owned(), Arc::downgrade(&entry)));
        }
        Loaded::Cached(entry)
    }

    fn remove(&self, shard: &Shard, acct: &mut Accounting, path: &str) {
        if let Some(e) = shard.map.write().remove(path) {
            acct.used -= e.body.len() + path.len() + 128;
        }
        // Dead FIFO records cost a few bytes each; drop them once they outnumber live ones.
        if acct.fifo.len() > 64 && acct.fifo.len() > 2 * shard.map.read().len() {
            acct.fifo.retain(|(_, w)| w.strong_count() > 0);
        }
    }

    /// Bytes held by all shards (for tests and logs; reads other colors' counters racily
    /// through the maps, so it is an estimate while the server runs).
    pub fn approx_bytes(&self) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.map
                    .read()
                    .iter()
                    .map(|(k, e)| e.body.len() + k.len() + 128)
                    .sum::<usize>()
            })
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Loads many files through their shard colors on a two-worker runtime: every load of a
    /// small file is served from memory, a file above `max_entry` is not kept, and the bytes
    /// held never exceed the cache's budget however many files go through it.
    #[test]
    fn loads_stay_within_the_budget_and_large_files_are_not_kept() {
        let dir = tempfile::tempdir().unwrap();
        let budget = 256 * 1024; // 4 KiB per shard, 1 KiB largest entry
        for i in 0..400 {
            std::fs::write(dir.path().join(format!("f{i}")), vec![i as u8; 700]).unwrap();
        }
        std::fs::write(dir.path().join("big"), vec![1u8; 5000]).unwrap();
        let rt = libcolor::Runtime::builder().workers(2).build().unwrap();
        let h = rt.handle();
        let cache = Arc::new(Cache::new(&h, budget));
        let root = Arc::new(Root::open(dir.path()).unwrap());
        assert_eq!(cache.max_entry(), 1024);
        let left = Arc::new(AtomicUsize::new(401));
        let bad = Arc::new(AtomicUsize::new(0));
        for i in 0..401 {
            let path = if i == 400 {
                "big".to_string()
            } else {
                format!("f{i}")
            };
            let (c, r, h2, left, bad) = (
                cache.clone(),
                root.clone(),
                h.clone(),
                left.clone(),
                bad.clone(),
            );
            h.cpucb(Cache::shard_color(cache.shard_of(&path)), move || {
                let ok = match c.load(&r, &path) {
                    Loaded::Cached(e) => path != "big" && e.body.len() == 700,
                    Loaded::Large(_, meta) => path == "big" && meta.len == 5000,
                    Loaded::NotFound => false,
                };
                if !ok || c.approx_bytes() > budget {
                    bad.fetch_add(1, Ordering::SeqCst);
                }
                if left.fetch_sub(1, Ordering::SeqCst) == 1 {
                    h2.stop();
                }
            });
        }
        rt.run().unwrap();
        assert_eq!(bad.load(Ordering::SeqCst), 0);
        assert!(cache.approx_bytes() <= budget);
        assert!(
            cache.approx_bytes() > budget / 2,
            "the cache kept almost nothing"
        );
        assert!(cache.get_fresh("big").is_none());
    }

    #[test]
    #[should_panic]
    fn a_load_outside_its_shard_color_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "x").unwrap();
        let rt = libcolor::Runtime::builder().uniprocessor().build().unwrap();
        let cache = Cache::new(&rt.handle(), 1 << 20);
        let root = Root::open(dir.path()).unwrap();
        let _ = cache.load(&root, "f");
    }
}
