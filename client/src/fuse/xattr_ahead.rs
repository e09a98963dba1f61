//! Extended-attribute read-ahead along a directory listing.
//!
//! The kernel does not cache extended attributes, and `ls -l` asks every file it lists for
//! `system.posix_acl_access` (newer coreutils ask LISTXATTR first; older ones
//! `security.selinux` too, until the mount answers that it carries no labels,
//! [`super::xattr`]), one file at a time, each ask waiting for the last: one round trip to
//! the server per file and name. The mount knows what comes next, since it read the whole listing at `opendir`
//! and `ls` walks it in that order. So when a name is asked for an entry of a listing after
//! an earlier entry of the same listing, by the same user, the answers for the next
//! [`AHEAD`] entries are asked for too, side by side on the one stream, and put in the
//! session's cache; `ls` then finds them there.
//!
//! - **Which names.** Any name (and LISTXATTR), not only the `security.`/`system.posix_acl_`
//!   ones `ls` asks: what starts a read-ahead is the same name asked along a listing in its
//!   order (a second entry after a first), which is what a bulk walk (`ls -l`, `getfattr -R`,
//!   `tar --xattrs`, `cp -a`) does and a program looking at one file does not, and a wrong
//!   guess costs at most [`AHEAD`] small requests.
//! - **One request per file for `ls`.** `security.` and `system.posix_acl_` names are read
//!   ahead through the file's LISTXATTR (shared by the walks), a name it does not list
//!   taken as absent ([`absent_unless_listed`] says why that is exact), and GETXATTR sent
//!   only for a listed one.
//! - **Backwards too.** A walk that steps back twice in a row reads ahead the entries
//!   before the one asked, nearest first (git opens its packs' indexes newest first, which is
//!   against the listing's order: 13 opens, a round trip each, in the first `git status` of
//!   this repository over a long link).
//! - **Answers from the cache keep the walk going.** An ask the cache answers on the
//!   kernel's thread ([`XattrAhead::answered`]) moves the walk on as one that waited does
//!   ([`XattrAhead::before_ask`]), so the read-ahead stays ahead of `ls`.
//! - **As whom.** Each read-ahead request goes as the user who asked (the same [`Client`],
//!   with its groups), and answers are cached per user: one user's asks never fetch or
//!   reveal another's answers.
//! - **Never staler than a direct answer.** A read-ahead is an ordinary [`Client::getxattr`]
//!   or [`Client::listxattr`] (an absence read from a list is put in the cache with a stamp
//!   taken before the list was read or asked for): the cache stamps it before sending and refuses its answer if
//!   the file changed since (our change, an INVALIDATE, a reconnect), and keeps it only for
//!   the lease of the file's cached attributes. Entries whose attributes are not cached are
//!   skipped, since their answer would not be kept.
//! - **No double asks.** An ask for an answer a read-ahead is fetching waits for it and then
//!   reads the cache (asking the server itself if the answer was refused or failed). An
//!   entry the cache answers already is skipped, also where the answer is what the entry's
//!   cached list of names shows (a listing tells which files have no extended attribute at
//!   all): a task for each would cost a wake-up of the runtime's thread per file of every
//!   `ls -l`, and ask nothing.
//! - **Bounds.** At most [`MAX_LISTINGS`] listings and [`MAX_REMEMBERED`] entries are
//!   remembered (the newest; a longer listing only its first entries), [`MAX_WALKS`] walks
//!   per listing, and [`MAX_IN_FLIGHT`] read-ahead requests are under way at once in the
//!   whole mount (past that, entries are left to be asked for directly). Answers themselves
//!   are bounded by the session's limits and the cache's.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::ops::Range;
use std::sync::Arc;

use parking_lot::Mutex;
use protocol::FileHandle;
use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::under_way::{End, Started, UnderWay};
use crate::cache::XattrAnswer;
use crate::session::Client;
use crate::session::absent_unless_listed;

/// Entries read ahead of the one asked for.
pub(crate) const AHEAD: usize = 64;

/// Listings remembered (the newest).
const MAX_LISTINGS: usize = 8;

/// Entries remembered over all listings (a file handle and a position each, ~140 bytes).
const MAX_REMEMBERED: usize = 32_768;

/// Walks (user and name) followed per listing; past it that listing's start again.
const MAX_WALKS: usize = 16;

/// Read-ahead requests under way at once, over the whole mount.
const MAX_IN_FLIGHT: usize = 128;

/// A name (`None`: the list, LISTXATTR) as asked by one user (authno).
type Asked = (u32, Option<Vec<u8>>);

/// Who walks a listing, doing what: one user asking one name (or the list) of each entry, or
/// one local user (uid) opening each entry for reading ([`super::files_ahead`] reads along
/// the same listings).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Walker {
    Asking(Asked),
    Opening(u32),
}

impl Walker {
    /// How many entries past the one asked it reads ahead.
    fn ahead(&self) -> usize {
        match self {
            Walker::Asking(_) => AHEAD,
            Walker::Opening(_) => super::files_ahead::AHEAD,
        }
    }
}

impl From<&Asked> for Walker {
    fn from(asked: &Asked) -> Walker {
        Walker::Asking(asked.clone())
    }
}

/// The read-ahead state of one mount.
pub(crate) struct XattrAhead {
    state: Mutex<State>,
    /// Read-ahead requests under way.
    asking: UnderWay<(FileHandle, Asked)>,
    permits: Arc<Semaphore>,
}

impl Default for XattrAhead {
    fn default() -> XattrAhead {
        XattrAhead {
            state: Mutex::default(),
            asking: UnderWay::default(),
            permits: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
}

#[derive(Default)]
struct State {
    /// Oldest first.
    listings: VecDeque<Remembered>,
    /// Entries held in `listings`.
    remembered: usize,
}

/// One listing's entries, in order.
struct Remembered {
    dir: FileHandle,
    entries: Vec<FileHandle>,
    /// Position of each entry by the hash of its handle (checked against `entries`: a
    /// collision only loses a read-ahead).
    at: HashMap<u64, u32>,
    hasher: RandomState,
    /// Per user and name asked (or opening): the walk along this listing.
    walks: HashMap<Walker, Walk>,
    /// The local user whose walk of the tree opened this directory, a step down
    /// ([`super::listing_ahead`]): that user's first open of a file in it already continues a
    /// walk (`grep -r` reads every file of every directory it steps into).
    stepped_into_by: Option<u32>,
}

/// How far one user has asked one name along a listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Walk {
    /// The last position asked.
    last: usize,
    /// Entries before this one were read ahead (or asked).
    ahead_to: usize,
    /// Going backwards: entries from this one on were read ahead (or asked).
    behind_from: usize,
    /// Whether the last step went backwards.
    backward: bool,
}

impl Walk {
    fn at(i: usize, backward: bool) -> Walk {
        Walk {
            last: i,
            ahead_to: i + 1,
            behind_from: i,
            backward,
        }
    }
}

impl Remembered {
    fn position(&self, fh: &FileHandle) -> Option<usize> {
        let i = *self.at.get(&self.hasher.hash_one(fh))? as usize;
        (self.entries.get(i) == Some(fh)).then_some(i)
    }

    /// The entries to read ahead now that `walker` asked for entry `i`: none the first time
    /// (one file is no walk), nor when the asks repeat (a size probe and then the read), nor
    /// while at least half of its [`Walker::ahead`] entries past `i` are read ahead already;
    /// else up to that many entries past `i` not read ahead yet, with the position asked
    /// before `i`. A step back starts a walk again, which goes backwards from its second step
    /// back in a row (git opens its packs' indexes newest first, against the listing's order):
    /// then the entries before `i` are read ahead the same way, nearest first (the range is
    /// then to be taken in reverse, the flag says so).
    fn plan(&mut self, walker: Walker, i: usize) -> (Range<usize>, usize, bool) {
        let len = self.entries.len();
        let ahead = walker.ahead();
        let new = !self.walks.contains_key(&walker);
        if new && self.walks.len() >= MAX_WALKS {
            self.walks.clear();
        }
        let stepped_in =
            new && matches!(walker, Walker::Opening(uid) if self.stepped_into_by == Some(uid));
        let w = self.walks.entry(walker).or_insert(Walk::at(i, false));
        if i < w.last && w.backward {
            let before = std::mem::replace(&mut w.last, i);
            if i >= w.behind_from + ahead / 2 {
                return (0..0, before, true);
            }
            let from = i.saturating_sub(ahead);
            let to = i.min(w.behind_from);
            w.behind_from = from.min(w.behind_from);
            return (from..to.max(from), before, true);
        }
        if i <= w.last && !stepped_in {
            if i < w.last {
                *w = Walk::at(i, true);
            }
            return (0..0, i, false);
        }
        if w.backward {
            // Forward again, from where the walk turned.
            *w = Walk::at(w.last, false);
        }
        let before = std::mem::replace(&mut w.last, i);
        if i + ahead / 2 < w.ahead_to {
            return (0..0, before, false);
        }
        let from = w.ahead_to.max(i + 1).min(len);
        let to = (i + 1 + ahead).min(len);
        w.ahead_to = to.max(w.ahead_to);
        (from..to, before, false)
    }
}

impl State {
    fn remember(
        &mut self,
        dir: FileHandle,
        entries: Vec<FileHandle>,
        stepped_into_by: Option<u32>,
    ) {
        if let Some(p) = self.listings.iter().position(|l| l.dir == dir) {
            let old = self.listings.remove(p);
            self.remembered -= old.map_or(0, |l| l.entries.len());
        }
        let mut entries = entries;
        entries.truncate(MAX_REMEMBERED);
        while !self.listings.is_empty()
            && (self.listings.len() >= MAX_LISTINGS
                || self.remembered + entries.len() > MAX_REMEMBERED)
        {
            let old = self.listings.pop_front();
            self.remembered -= old.map_or(0, |l| l.entries.len());
        }
        let hasher = RandomState::new();
        let mut at = HashMap::with_capacity(entries.len());
        for (i, fh) in entries.iter().enumerate() {
            // Positions fit: at most MAX_REMEMBERED entries.
            at.entry(hasher.hash_one(fh)).or_insert(i as u32);
        }
        self.remembered += entries.len();
        self.listings.push_back(Remembered {
            dir,
            entries,
            at,
            hasher,
            walks: HashMap::new(),
            stepped_into_by,
        });
    }

    /// What to read ahead for `walker` at `fh`, along the newest listing holding it.
    fn plan(&mut self, fh: &FileHandle, walker: impl Into<Walker>) -> Plan {
        for l in self.listings.iter_mut().rev() {
            if let Some(i) = l.position(fh) {
                let (r, before, backward) = l.plan(walker.into(), i);
                let mut entries = l.entries[r].to_vec();
                if backward {
                    entries.reverse();
                }
                return Plan {
                    entries,
                    before: l.entries.get(before).copied(),
                };
            }
        }
        Plan::default()
    }
}

/// What one ask reads ahead.
#[derive(Default)]
struct Plan {
    /// The entries to read ahead.
    entries: Vec<FileHandle>,
    /// The entry the same name was asked of before (its answer in the cache shows the
    /// server's file system serves the name).
    before: Option<FileHandle>,
}

impl XattrAhead {
    /// `opendir` read directory `dir` with these entries (in the order the kernel gets them);
    /// `stepped_into_by`: the local user whose walk of the tree this opendir is a step of.
    pub(crate) fn remember(
        &self,
        dir: FileHandle,
        entries: Vec<FileHandle>,
        stepped_into_by: Option<u32>,
    ) {
        self.state.lock().remember(dir, entries, stepped_into_by);
    }

    /// Local user `uid` opened `fh` for reading: the entries after it to read ahead, if this
    /// continues a walk along a listing ([`Remembered::plan`]'s rule), or is the first open
    /// in a directory that user's walk of the tree stepped into.
    pub(crate) fn opened(&self, fh: &FileHandle, uid: u32) -> Vec<FileHandle> {
        self.state.lock().plan(fh, Walker::Opening(uid)).entries
    }

    /// `c` is about to ask `name` (`None`: the list) of `fh`: reads ahead along the listing
    /// `fh` is in if this continues a walk, and waits for a read-ahead already fetching this
    /// very answer, so the ask that follows finds it in the cache.
    pub(crate) async fn before_ask(&self, c: &Client, fh: &FileHandle, name: Option<&[u8]>) {
        let Ok(authno) = c.authno().await else {
            return; // the ask itself will fail and say why
        };
        let asked: Asked = (authno, name.map(<[u8]>::to_vec));
        if let Some(end) = self.asked(c, fh, &asked, &Handle::current()) {
            end.wait().await;
        }
    }

    /// `c` (`authno`) asked `name` (`None`: the list) of `fh`, answered from the cache on the
    /// kernel's thread: the walk goes on as for an ask that waited (read-ahead tasks spawned
    /// on `rt`).
    pub(crate) fn answered(
        &self,
        c: &Client,
        authno: u32,
        fh: &FileHandle,
        name: Option<&[u8]>,
        rt: &Handle,
    ) {
        self.asked(c, fh, &(authno, name.map(<[u8]>::to_vec)), rt);
    }

    /// Starts the read-ahead `asked` of `fh` calls for (tasks on `rt`); the end of one
    /// already fetching this very answer, if any.
    fn asked(&self, c: &Client, fh: &FileHandle, asked: &Asked, rt: &Handle) -> Option<End> {
        let plan = self.state.lock().plan(fh, asked);
        let from_list = asked.1.as_deref().is_some_and(absent_unless_listed)
            && plan
                .before
                .is_some_and(|b| c.cache().get_xattr(&b, asked).is_some());
        let jobs: Vec<Job> = plan
            .entries
            .into_iter()
            .filter_map(|e| self.start(c, e, asked, from_list))
            .collect();
        if !jobs.is_empty() {
            let name = asked_name(asked.1.as_deref());
            tracing::debug!(?name, entries = jobs.len(), "xattr read-ahead");
        }
        for job in jobs {
            rt.spawn(job.run(c.clone()));
        }
        self.asking.end(&(*fh, asked.clone()))
    }

    /// A read-ahead of `asked` of `fh`, marked under way, unless the cache answers it
    /// already (by the answer, or by the file's list of names: a listing tells which files
    /// have none), it is under way already, its answer would not be kept (no cached
    /// attributes), or too many are under way. `from_list`: see [`Job::from_list`].
    fn start(&self, c: &Client, fh: FileHandle, asked: &Asked, from_list: bool) -> Option<Job> {
        if c.cache().get(&fh).is_none() || c.xattr_answered(&fh, asked) {
            return None;
        }
        let permit = self.permits.clone().try_acquire_owned().ok()?;
        Some(Job {
            _permit: permit,
            from_list,
            asking: self.asking.start((fh, asked.clone()))?,
            under_way: self.asking.clone(),
        })
    }
}

/// A name for the log (`None`: the list).
fn asked_name(name: Option<&[u8]>) -> Option<std::borrow::Cow<'_, str>> {
    name.map(String::from_utf8_lossy)
}

/// One read-ahead request, holding its place among those in flight.
struct Job {
    _permit: OwnedSemaphorePermit,
    /// Read the file's list first and take a name absent from it as absent
    /// ([`absent_unless_listed`]): set only when the same walk's previous entry has an answer
    /// for the name in the cache, so the server's file system serves it (where it does not,
    /// the server answers `NotSupp`, never cached, and the names are asked for themselves).
    from_list: bool,
    asking: Started<(FileHandle, Asked)>,
    /// Where the list it reads first is found under way ([`list`]).
    under_way: UnderWay<(FileHandle, Asked)>,
}

impl Job {
    /// Asks as `c`; the answer goes to the cache. Errors are left to the direct ask, which
    /// gets them itself.
    async fn run(self, c: Client) {
        let (fh, (authno, name)) = self.asking.key();
        let Some(n) = name else {
            let _ = c.listxattr(fh).await;
            return;
        };
        if self.from_list {
            // Stamped before the list is read or asked for: an absence taken from it is
            // kept only if nothing changed the file since (the cache's own rule).
            let since = c.cache().stamp();
            if let Some(names) = list(&self.under_way, &c, fh, *authno).await
                && !names.contains(n)
            {
                let key = (*authno, Some(n.clone()));
                c.cache().put_xattr(*fh, key, XattrAnswer::Missing, since);
                return;
            }
        }
        let _ = c.getxattr(fh, n).await;
    }
}

/// `fh`'s names as `c` (`authno`) sees them: from the cache, from a read-ahead already asking
/// for them (two walks, `security.selinux` and `system.posix_acl_access`, share one LISTXATTR),
/// else asked for. `None` if the server did not answer with a list.
async fn list(
    under_way: &UnderWay<(FileHandle, Asked)>,
    c: &Client,
    fh: &FileHandle,
    authno: u32,
) -> Option<Vec<Vec<u8>>> {
    let whole: Asked = (authno, None);
    let cached = || match c.cache().get_xattr(fh, &whole) {
        Some(XattrAnswer::Names(names)) => Some(names),
        _ => None,
    };
    if let Some(names) = cached() {
        return Some(names);
    }
    match under_way.start_or_end((*fh, whole.clone())) {
        Ok(_asking) => c.listxattr(fh).await.ok(),
        Err(end) => {
            end.wait().await;
            cached()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fh(i: u32) -> FileHandle {
        let mut b = [0u8; 48];
        b[..4].copy_from_slice(&i.to_le_bytes());
        b[4] = 1;
        FileHandle::from_bytes(b)
    }

    fn listing(n: u32) -> Vec<FileHandle> {
        (0..n).map(fh).collect()
    }

    fn positions(st: &State, v: &[FileHandle]) -> Vec<u32> {
        let l = st.listings.back().unwrap();
        v.iter().map(|h| l.position(h).unwrap() as u32).collect()
    }

    fn sel(authno: u32) -> Asked {
        (authno, Some(b"security.selinux".to_vec()))
    }

    /// The first ask is no walk; the second in order reads ahead the next AHEAD entries;
    /// later asks top up half a window at a time, and never past the end.
    #[test]
    fn reads_ahead_along_a_walk_in_order() {
        let mut st = State::default();
        st.remember(fh(1000), listing(200), None);
        assert!(
            st.plan(&fh(0), &sel(1)).entries.is_empty(),
            "one file is no walk"
        );
        let first = st.plan(&fh(1), &sel(1)).entries;
        assert_eq!(
            positions(&st, &first),
            (2..2 + AHEAD as u32).collect::<Vec<_>>()
        );
        // Asking the entries read ahead asks nothing more until half the window is used.
        for i in 2..2 + AHEAD as u32 / 2 {
            assert!(st.plan(&fh(i), &sel(1)).entries.is_empty(), "entry {i}");
        }
        let i = 2 + AHEAD as u32 / 2;
        let more = st.plan(&fh(i), &sel(1)).entries;
        let want: Vec<u32> = (2 + AHEAD as u32..i + 1 + AHEAD as u32).collect();
        assert_eq!(
            positions(&st, &more),
            want,
            "only what is not read ahead yet"
        );
        // Near the end: nothing past the last entry.
        let near = st.plan(&fh(190), &sel(1)).entries;
        assert_eq!(positions(&st, &near), (191..200).collect::<Vec<_>>());
        assert!(st.plan(&fh(199), &sel(1)).entries.is_empty());
    }

    /// A plan names the entry asked before, whose cached answer shows the name is served;
    /// only names Linux lists whenever present are taken as absent when unlisted.
    #[test]
    fn absence_is_read_from_lists_only_for_names_listed_whenever_present() {
        let mut st = State::default();
        st.remember(fh(1000), listing(10), None);
        assert_eq!(st.plan(&fh(3), &sel(1)).before, Some(fh(3)), "a first ask");
        let p = st.plan(&fh(4), &sel(1));
        assert_eq!((p.entries.len(), p.before), (5, Some(fh(3))));
        assert!(absent_unless_listed(b"security.selinux"));
        assert!(absent_unless_listed(b"system.posix_acl_access"));
        assert!(absent_unless_listed(b"system.posix_acl_default"));
        assert!(
            !absent_unless_listed(b"user.tag"),
            "get needs read permission"
        );
        assert!(!absent_unless_listed(b"trusted.x"));
        assert!(!absent_unless_listed(b"system.nfs4_acl"));
    }

    /// Opening walks read [`super::super::files_ahead::AHEAD`] entries ahead, from the second
    /// open, or from the first in a directory the same user's walk stepped into.
    #[test]
    fn opening_walks_start_at_the_first_open_where_a_walk_stepped_in() {
        let files_ahead = super::super::files_ahead::AHEAD;
        let mut st = State::default();
        st.remember(fh(1000), listing(100), None);
        assert!(
            st.plan(&fh(0), Walker::Opening(7)).entries.is_empty(),
            "one open"
        );
        let next = st.plan(&fh(1), Walker::Opening(7)).entries;
        assert_eq!(
            next,
            (2..2 + files_ahead as u32).map(fh).collect::<Vec<_>>()
        );

        st.remember(fh(2000), listing(100), Some(7));
        assert!(
            st.plan(&fh(0), Walker::Opening(8)).entries.is_empty(),
            "another user's first open"
        );
        assert_eq!(
            st.plan(&fh(0), Walker::Opening(7)).entries,
            (1..1 + files_ahead as u32).map(fh).collect::<Vec<_>>(),
            "the walking user's first open"
        );
        assert!(
            st.plan(&fh(0), Walker::Opening(7)).entries.is_empty(),
            "the same file again"
        );
        assert!(
            st.plan(&fh(0), &sel(7)).entries.is_empty(),
            "names asked: no step counts"
        );
    }

    /// Walks are per user and per name; a repeated ask (size probe, then read) and a step
    /// back start nothing; an unknown handle nothing.
    #[test]
    fn walks_are_per_user_and_name_and_need_order() {
        let mut st = State::default();
        st.remember(fh(1000), listing(100), None);
        st.plan(&fh(0), &sel(1));
        assert!(
            st.plan(&fh(0), &sel(1)).entries.is_empty(),
            "the same entry again"
        );
        assert!(
            st.plan(&fh(1), &sel(2)).entries.is_empty(),
            "another user: a first ask"
        );
        let acl = (1, Some(b"system.posix_acl_access".to_vec()));
        assert!(
            st.plan(&fh(1), &acl).entries.is_empty(),
            "another name: a first ask"
        );
        assert!(
            st.plan(&fh(1), &(1, None)).entries.is_empty(),
            "the list: a first ask"
        );
        assert_eq!(st.plan(&fh(2), &(1, None)).entries.len(), AHEAD);
        assert_eq!(st.plan(&fh(5), &sel(1)).entries.len(), AHEAD);
        assert!(
            st.plan(&fh(3), &sel(1)).entries.is_empty(),
            "backwards: a new start"
        );
        assert_eq!(st.plan(&fh(4), &sel(1)).entries.len(), AHEAD);
        assert!(
            st.plan(&fh(4), &sel(1)).entries.is_empty(),
            "the same entry again"
        );
        assert!(
            st.plan(&fh(5000), &sel(1)).entries.is_empty(),
            "in no listing"
        );
    }

    /// A walk backwards (git opens its packs' indexes newest first) reads ahead from its
    /// second step back in a row, the entries before the one asked, nearest first; a step
    /// forward again walks forward.
    #[test]
    fn a_walk_backwards_reads_the_entries_before_ahead() {
        let ahead = super::super::files_ahead::AHEAD as u32;
        let mut st = State::default();
        st.remember(fh(1000), listing(100), None);
        let open = |st: &mut State, i: u32| {
            let e = st.plan(&fh(i), Walker::Opening(7)).entries;
            positions(st, &e)
        };
        assert!(open(&mut st, 90).is_empty(), "one open");
        assert!(open(&mut st, 87).is_empty(), "one step back: no walk yet");
        assert!(open(&mut st, 87).is_empty(), "the same file again");
        assert_eq!(
            open(&mut st, 84),
            (84 - ahead..84).rev().collect::<Vec<_>>(),
            "the second step back in a row"
        );
        // Within the entries read ahead, nothing more until half of them are used.
        assert!(open(&mut st, 81).is_empty());
        assert!(open(&mut st, 78).is_empty());
        let low = 84 - ahead;
        let more = open(&mut st, 75);
        assert_eq!(more, (75 - ahead..low).rev().collect::<Vec<_>>());
        // Near the start: nothing before the first entry, nothing twice.
        assert_eq!(open(&mut st, 10), (0..10).rev().collect::<Vec<_>>());
        assert!(open(&mut st, 2).is_empty());
        // Forward again: a walk forward, from there.
        assert_eq!(open(&mut st, 3), (4..4 + ahead).collect::<Vec<_>>());
    }

    /// Listings and entries remembered are bounded, the newest kept; a directory listed again
    /// replaces its older listing; the walks per listing are bounded.
    #[test]
    fn memory_is_bounded() {
        let mut st = State::default();
        for d in 0..MAX_LISTINGS as u32 + 3 {
            st.remember(fh(100_000 + d), listing(10), None);
        }
        assert_eq!(st.listings.len(), MAX_LISTINGS);
        assert_eq!(
            st.listings.front().unwrap().dir,
            fh(100_003),
            "the oldest went"
        );
        st.remember(fh(100_005), listing(10), None);
        assert_eq!(st.listings.len(), MAX_LISTINGS, "listed again: replaced");
        assert_eq!(st.remembered, MAX_LISTINGS * 10);
        st.remember(fh(200_000), listing(MAX_REMEMBERED as u32 + 10), None);
        assert_eq!(st.listings.len(), 1, "a huge listing pushes out the others");
        assert_eq!(st.remembered, MAX_REMEMBERED);
        let last = fh(MAX_REMEMBERED as u32 - 1);
        assert!(st.listings[0].position(&last).is_some());
        assert!(
            st.listings[0]
                .position(&fh(MAX_REMEMBERED as u32))
                .is_none()
        );
        let l = &mut st.listings[0];
        for user in 0..MAX_WALKS as u32 + 5 {
            l.plan(Walker::from(&sel(user)), 0);
        }
        assert!(l.walks.len() <= MAX_WALKS);
    }
}
