//! Attribute and access caches honouring the server's leases, installed in order.
//!
//! Every attribute the server sends carries `lease_ms`: the client may use it for that long
//! after *receiving* it (so clocks need not agree) unless an INVALIDATE arrives first. Access
//! results are cached per authno (one per user on the session), with the lease of the
//! attributes that came with them.
//!
//! **Order.** Requests are pipelined on one stream and the server runs them on several
//! threads, so a reply can carry attributes taken before a WRITE whose reply came first; the
//! last reply to arrive is not the newest state. Like the kernel's FUSE `attr_version` and the
//! Linux NFS client, the cache keeps a logical clock and, per object, the tick of its last
//! change and how many modifying requests to it are in flight:
//!
//! * a request that does not modify an object takes a [`Stamp`] before it is sent; its reply's
//!   attributes are installed ([`AttrCache::put`]) only if no modification of that object was
//!   in flight or started or ended since the stamp;
//! * a modifying request (WRITE, SETATTR, COMMIT, a change of a directory) is bracketed by
//!   [`AttrCache::begin`] and [`Change::end`]; its own post-op attributes are installed only if
//!   no other change overlapped it (none in flight when it began, none begun since);
//! * an INVALIDATE or a local [`AttrCache::invalidate`] counts as a change, and an
//!   INVALIDATE's attributes are installed only for an object we have not changed ourselves
//!   (the server may have taken them before a change of ours whose reply came first);
//! * attributes whose ctime is older than the cached ones' are refused too.
//!
//! Anything refused leaves the object uncached, so the next use asks the server. The change
//! records are bounded: when they are dropped, every stamp taken before is refused.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use protocol::{Attr, FileHandle, FileType};

mod fresh_dirs;
mod removable_dirs;
use fresh_dirs::FreshDirs;
use removable_dirs::RemovableDirs;

/// Cached attributes and access bits, keyed by file handle.
#[derive(Default)]
pub(crate) struct AttrCache {
    inner: Mutex<Cached>,
}

/// A point of the cache's logical clock, taken before a request is sent: attributes its
/// reply carries are installed only if nothing changed the object since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(u64);

/// What the cache knows of the changes of one object.
#[derive(Debug, Default)]
struct Changes {
    /// Tick of its last change event (a modification begun or ended, an invalidation).
    tick: u64,
    /// Tick of the last modification begun (or invalidation).
    begun: u64,
    /// Modifying requests in flight.
    in_flight: u32,
    /// We changed it (since its record was made): an INVALIDATE's attributes, taken when
    /// another client changed it, may predate our change, so they are not installed.
    ours: bool,
    /// Our changes in flight together now, or last ([`Settled`]).
    group: Group,
}

/// Our changes of one object in flight together: from one begun while none was, to the
/// last of those begun meanwhile ended.
#[derive(Debug, Default, Clone, Copy)]
struct Group {
    /// Tick of its first begin (which names it).
    began: u64,
    /// The stamp from which what was known of the object held until the group began: the
    /// object's last change event before (or the floor then).
    from: u64,
    /// Changes begun in it.
    members: u32,
    /// Something else changed the object meanwhile (an INVALIDATE, a local invalidation,
    /// an unbracketed change), or a member ended without its reply: what the group did is
    /// not all known.
    spoiled: bool,
}

/// What the cache holds, behind its one mutex.
#[derive(Default)]
struct Cached {
    /// Attributes, until when their lease holds, and the stamp of the request that brought
    /// them (None for an INVALIDATE's).
    attrs: HashMap<FileHandle, (Attr, Instant, Option<u64>)>,
    /// Per handle (so a change drops them in one step), per authno: (asked, granted, expiry).
    access: HashMap<FileHandle, HashMap<u32, (u32, u32, Instant)>>,
    /// Per handle, per (authno, attribute name, or None for the list): what GETXATTR or
    /// LISTXATTR answered, until the attributes' lease ends (`ls -l` asks every file for
    /// `system.posix_acl_access`).
    xattrs: HashMap<FileHandle, HashMap<XattrKey, (XattrAnswer, Instant)>>,
    /// Bytes held in `xattrs` (bounded by [`MAX_XATTR_BYTES`]).
    xattr_bytes: usize,
    /// Objects this client made new (a GUARDED or EXCLUSIVE CREATE, a MKDIR), until the lease
    /// of the reply that made them ends: no object is born with a `security.capability`,
    /// which the kernel asks of a file before its first write and before a chown (two round
    /// trips of each file `tar x` makes). Unlike the other answers these survive our own
    /// writes and SETATTRs, which can take a capability away but never add one; an
    /// INVALIDATE (another client changed the object), a SETXATTR or REMOVEXATTR of ours, or
    /// a reconnect drops them.
    no_caps: HashMap<FileHandle, Instant>,
    /// Directories we made, with every name we may have put in them ([`fresh_dirs`]).
    fresh: FreshDirs,
    /// Directories whose entries a user may remove ([`removable_dirs`]).
    removable: RemovableDirs,
    /// The logical clock: the tick of the last change event of any object.
    clock: u64,
    changes: HashMap<FileHandle, Changes>,
    /// Stamps older than this are refused for every object: the change records they would be
    /// checked against were dropped (bound on memory, or a reconnect).
    floor: u64,
    /// Changes of ours that can change files, or directories, they do not name: a REMOVE or
    /// RENAME changes the link count and change time of the object behind the name it removes
    /// or replaces, a RENAME the change time of the object it moves, an RMDIR the directory it
    /// removes, and no request carries those objects' handles. (Every other change changes
    /// only the objects it names, which the per-object records follow.)
    unseen_files: Unseen,
    unseen_dirs: Unseen,
}

/// Changes of ours that can change objects of one kind without naming them.
#[derive(Default)]
struct Unseen {
    /// Tick of the last one ended.
    last: u64,
    /// How many are in flight.
    in_flight: u32,
}

impl Unseen {
    fn ended(&mut self, at: u64) {
        self.in_flight = self.in_flight.saturating_sub(1);
        self.last = at;
    }

    /// Whether attributes brought by a request stamped `since` may show all of them.
    fn all_before(&self, since: u64) -> bool {
        self.in_flight == 0 && since >= self.last
    }
}

/// What a change may change without naming it ([`AttrCache::begin_unnamed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unnamed {
    /// Nothing: it changes only the objects it names.
    Nothing,
    /// A file behind a removed name (REMOVE).
    Files,
    /// The directory removed (RMDIR).
    Dirs,
    /// Either (RENAME: the object moved, and the one replaced).
    Both,
}

impl Unnamed {
    fn files(self) -> bool {
        matches!(self, Unnamed::Files | Unnamed::Both)
    }

    fn dirs(self) -> bool {
        matches!(self, Unnamed::Dirs | Unnamed::Both)
    }
}

/// Bound on entries: past it, expired entries are swept, then everything if still too many.
const MAX_ENTRIES: usize = 65_536;

/// Bound on the bytes of cached extended attribute answers (names and values, plus 64 for
/// each answer): past it, that cache starts again empty.
const MAX_XATTR_BYTES: usize = 4 << 20;

/// Values longer than this are not cached (`ls -l` asks for small ones and for absent ones).
const MAX_CACHED_VALUE: usize = 4096;

/// Whose question about which attribute: (authno, name; None for the list of names).
pub(crate) type XattrKey = (u32, Option<Vec<u8>>);

/// A cached GETXATTR or LISTXATTR answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum XattrAnswer {
    /// LISTXATTR's names.
    Names(Vec<Vec<u8>>),
    /// GETXATTR's value.
    Value(Vec<u8>),
    /// GETXATTR answered NOXATTR.
    Missing,
}

impl XattrAnswer {
    fn bytes(&self, key: &XattrKey) -> usize {
        64 + key.1.as_ref().map_or(0, Vec::len)
            + match self {
                XattrAnswer::Names(n) => protocol::xattr::list_len(n),
                XattrAnswer::Value(v) => v.len(),
                XattrAnswer::Missing => 0,
            }
    }
}

/// A modifying request to one object in flight (see [`AttrCache::begin`]). Ending it without
/// attributes is what dropping it does, so an error or a cancelled request still counts.
pub(crate) struct Change<'a> {
    cache: &'a AttrCache,
    fh: FileHandle,
    /// Its tick when it began.
    began: u64,
    /// Another change of the object was in flight when it began.
    overlapped: bool,
    /// What it may change without naming it ([`AttrCache::begin_unnamed`]).
    unnamed: Unnamed,
    /// A change of data only: the object's access answers stay ([`AttrCache::begin_data`]).
    keeps_access: bool,
    ended: bool,
}

/// A change of ours to one object answered by the server, one of a group of ours in flight
/// together that nothing else overlapped. What was known of the object as of a stamp taken
/// after its last change before the group and before the group began
/// ([`Settled::applies_to`]) is, with each of the group's changes applied (all of them:
/// the last to end says how many there were), what the server holds as of the last one's
/// reply. A kept directory listing is brought up to date so, rather than read again after
/// each name we add or remove (git removes two lock files at once, the first removed
/// behind).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Settled {
    /// The object's last change event before the group (or the floor then).
    from: u64,
    /// The group's first begin, which names it.
    group: u64,
    /// This change's end.
    to: u64,
    /// How many changes the group had, if this one ended last.
    members: Option<u32>,
}

impl Settled {
    /// Whether knowledge of the object valid as of `since` misses exactly the group's
    /// changes: no other change came between `since` and the group, which began after it.
    pub(crate) fn applies_to(&self, since: Stamp) -> bool {
        (self.from..self.group).contains(&since.0)
    }

    /// The group this change was one of.
    pub(crate) fn group(&self) -> u64 {
        self.group
    }

    /// How many changes the group had, if this one ended last; then, the stamp the
    /// knowledge holds as of once all of them are applied.
    pub(crate) fn last(&self) -> Option<(u32, Stamp)> {
        self.members.map(|n| (n, Stamp(self.to)))
    }
}

impl Change<'_> {
    /// The request's reply came: installs `attr` (its post-op attributes) unless another
    /// change of the object overlapped this one. How it settled ([`Settled`]), unless
    /// something other than our changes in flight with it changed the object, or one of
    /// those ended without its reply.
    pub(crate) fn end(mut self, attr: Option<Attr>) -> Option<Settled> {
        self.ended = true;
        self.cache.end(&self, attr)
    }
}

impl Drop for Change<'_> {
    fn drop(&mut self) {
        if !self.ended {
            // No reply (an error, or the request given up): what it did is not known.
            self.cache.end(self, None);
        }
    }
}

impl Cached {
    /// Our changes that may change objects of kind `ftype` unseen.
    fn unseen_of(&self, ftype: FileType) -> &Unseen {
        match ftype {
            FileType::Directory => &self.unseen_dirs,
            _ => &self.unseen_files,
        }
    }

    /// Whether attributes of `fh` taken by a request stamped `since` may be installed.
    fn unchanged_since(&self, fh: &FileHandle, since: Stamp) -> bool {
        since.0 >= self.floor
            && self
                .changes
                .get(fh)
                .is_none_or(|c| c.in_flight == 0 && c.tick <= since.0)
    }

    /// Caches `attr` for `fh`, brought by a request stamped `since`, unless the cached
    /// attributes have a later ctime.
    fn install(&mut self, fh: FileHandle, attr: Attr, since: Option<u64>) {
        let now = Instant::now();
        if let Some((old, e, _)) = self.attrs.get(&fh)
            && *e > now
            && old.ctime > attr.ctime
        {
            return;
        }
        if attr.lease_ms == 0 {
            self.attrs.remove(&fh);
            return;
        }
        if self.attrs.len() >= MAX_ENTRIES {
            self.attrs.retain(|_, (_, e, _)| *e > now);
            if self.attrs.len() >= MAX_ENTRIES {
                self.attrs.clear();
            }
        }
        let expiry = now + Duration::from_millis(u64::from(attr.lease_ms));
        self.attrs.insert(fh, (attr, expiry, since));
    }

    fn drop_xattrs(&mut self, fh: &FileHandle) {
        if let Some(answers) = self.xattrs.remove(fh) {
            let freed: usize = answers.iter().map(|(k, (a, _))| a.bytes(k)).sum();
            self.xattr_bytes = self.xattr_bytes.saturating_sub(freed);
        }
    }

    /// [`Cached::changed`] for a change event not of our bracketed changes: a group of ours
    /// in flight on `fh` is spoiled ([`Settled`]; a group begun later starts unspoiled).
    fn changed_unbracketed(&mut self, fh: &FileHandle) -> &mut Changes {
        let c = self.changed(fh);
        c.group.spoiled = true;
        c
    }

    /// Stores what `authno` asked of `fh` and was granted, for `lease_ms` (the map starts
    /// again empty past its bound).
    fn put_access(&mut self, fh: FileHandle, authno: u32, answer: (u32, u32), lease_ms: u32) {
        if self.access.len() >= MAX_ENTRIES {
            self.access.clear();
        }
        let expiry = Instant::now() + Duration::from_millis(u64::from(lease_ms));
        self.access
            .entry(fh)
            .or_default()
            .insert(authno, (answer.0, answer.1, expiry));
    }

    /// [`Cached::changed`], keeping `fh`'s access answers if `keep_access`.
    fn changed_keeping_access(&mut self, fh: &FileHandle, keep_access: bool) -> &mut Changes {
        let access = keep_access.then(|| self.access.remove(fh)).flatten();
        self.changed(fh);
        if let Some(access) = access {
            self.access.insert(*fh, access);
        }
        self.changes.get_mut(fh).expect("`changed` made the record")
    }

    /// A new tick of the clock, recorded as a change event of `fh`; what is cached of it goes.
    fn changed(&mut self, fh: &FileHandle) -> &mut Changes {
        if self.changes.len() >= MAX_ENTRIES && !self.changes.contains_key(fh) {
            // Forget the settled objects; stamps taken before can no longer be checked.
            self.changes.retain(|_, c| c.in_flight > 0);
            self.floor = self.clock + 1;
        }
        self.clock += 1;
        self.attrs.remove(fh);
        self.access.remove(fh);
        self.drop_xattrs(fh);
        let clock = self.clock;
        let c = self.changes.entry(*fh).or_default();
        c.tick = clock;
        c
    }
}

impl AttrCache {
    /// The stamp of a request about to be sent.
    pub(crate) fn stamp(&self) -> Stamp {
        Stamp(self.inner.lock().clock)
    }

    /// Remembers `attr` for `fh` (valid for its lease from now), from the reply to a request
    /// stamped `since`: unless `fh` changed since (see the module's doc).
    pub(crate) fn put(&self, fh: FileHandle, attr: Attr, since: Stamp) {
        let mut g = self.inner.lock();
        if g.unchanged_since(&fh, since) {
            g.install(fh, attr, Some(since.0));
        }
    }

    /// Whether attributes of `fh` taken by a request stamped `since` would be out of date: a
    /// change of it began or ended since, or is in flight.
    pub(crate) fn changed_since(&self, fh: &FileHandle, since: Stamp) -> bool {
        !self.inner.lock().unchanged_since(fh, since)
    }

    /// A modifying request to `fh` is about to be sent: what is cached of `fh` goes, and
    /// replies to requests sent before (or while it is in flight) are not installed.
    pub(crate) fn begin(&self, fh: &FileHandle) -> Change<'_> {
        self.begin_unnamed(fh, Unnamed::Nothing)
    }

    /// [`AttrCache::begin`] for a change of directory `dir` that also changes objects of a
    /// kind it does not name (REMOVE, RMDIR, RENAME): until it has ended, no cached
    /// attributes of that kind answer [`AttrCache::get_unchanged_by_us`].
    pub(crate) fn begin_unnamed(&self, fh: &FileHandle, unnamed: Unnamed) -> Change<'_> {
        self.begin_with(fh, unnamed, false)
    }

    /// [`AttrCache::begin`] for a change of `fh`'s data only (WRITE, APPEND, COMMIT): its
    /// access answers stay, since who may read, write or run a file is a matter of its mode,
    /// owner and ACL, which such a change leaves be (the set-user-ID and set-group-ID bits a
    /// write may clear grant no access). A file written and then opened again (a compiler's
    /// output read by the linker) needs no ACCESS round trip for it.
    pub(crate) fn begin_data(&self, fh: &FileHandle) -> Change<'_> {
        self.begin_with(fh, Unnamed::Nothing, true)
    }

    fn begin_with(&self, fh: &FileHandle, unnamed: Unnamed, keeps_access: bool) -> Change<'_> {
        let mut g = self.inner.lock();
        let last = g.changes.get(fh).map_or(0, |c| c.tick);
        g.changed_keeping_access(fh, keeps_access);
        // After `changed`, which raises the floor when it drops the records.
        let from = last.max(g.floor);
        let c = g.changes.get_mut(fh).expect("`changed` made the record");
        let overlapped = c.in_flight > 0;
        if !overlapped {
            c.group = Group {
                began: c.tick,
                from,
                members: 0,
                spoiled: false,
            };
        }
        c.group.members += 1;
        c.in_flight += 1;
        c.ours = true;
        c.begun = c.tick;
        let began = c.tick;
        if unnamed.files() {
            g.unseen_files.in_flight += 1;
        }
        if unnamed.dirs() {
            g.unseen_dirs.in_flight += 1;
        }
        Change {
            cache: self,
            fh: *fh,
            began,
            overlapped,
            unnamed,
            keeps_access,
            ended: false,
        }
    }

    fn end(&self, change: &Change<'_>, attr: Option<Attr>) -> Option<Settled> {
        let mut g = self.inner.lock();
        let valid = change.began >= g.floor;
        let c = g.changed_keeping_access(&change.fh, change.keeps_access);
        c.in_flight = c.in_flight.saturating_sub(1);
        let alone = !change.overlapped && c.begun == change.began;
        c.group.spoiled |= !change.ended;
        let (group, last) = (c.group, c.in_flight == 0);
        let clock = g.clock;
        if change.unnamed.files() {
            g.unseen_files.ended(clock);
        }
        if change.unnamed.dirs() {
            g.unseen_dirs.ended(clock);
        }
        if let (Some(a), true) = (attr, alone && valid) {
            g.install(change.fh, a, Some(change.began));
        }
        // The group's records still hold after `changed`, which may have dropped them.
        if group.spoiled || group.began < g.floor {
            return None;
        }
        Some(Settled {
            from: group.from,
            group: group.began,
            to: clock,
            members: last.then_some(group.members),
        })
    }

    /// `fh` was made, or maybe changed (CREATE of an existing file truncates it), by a request
    /// stamped `since` that was not bracketed by [`AttrCache::begin`] since its handle was not
    /// known: its reply's `attr` is installed unless something else changed `fh` since, and
    /// replies to requests sent before are refused from now on.
    pub(crate) fn made(&self, fh: &FileHandle, attr: Option<Attr>, since: Stamp) {
        let mut g = self.inner.lock();
        let install = g.unchanged_since(fh, since);
        let c = g.changed_unbracketed(fh);
        c.begun = c.tick;
        c.ours = true;
        if let (Some(a), true) = (attr, install) {
            g.install(*fh, a, Some(since.0));
        }
    }

    /// Attributes of `fh` whose lease has not expired.
    pub(crate) fn get(&self, fh: &FileHandle) -> Option<Attr> {
        let mut g = self.inner.lock();
        match g.attrs.get(fh) {
            Some((a, e, _)) if *e > Instant::now() => Some(*a),
            Some(_) => {
                g.attrs.remove(fh);
                None
            }
            None => None,
        }
    }

    /// [`AttrCache::get`], if also the request that brought them was sent after every change
    /// of ours that may change objects of its kind (file or directory) without naming them had
    /// ended: what the server would
    /// answer now, but for the access time its READs moved. Such a change (an unlink: the link
    /// count and change time of the file behind another name) may not show in the attributes
    /// of a request sent before it ended; nor in an INVALIDATE's, which may have been taken
    /// before such a change. Their `lease_ms` is what is left of the lease.
    pub(crate) fn get_unchanged_by_us(&self, fh: &FileHandle) -> Option<Attr> {
        let g = self.inner.lock();
        let now = Instant::now();
        match g.attrs.get(fh) {
            Some((a, e, Some(since))) if *e > now && g.unseen_of(a.ftype).all_before(*since) => {
                let left = e.duration_since(now).as_millis();
                Some(Attr {
                    lease_ms: u32::try_from(left).unwrap_or(u32::MAX).max(1),
                    ..*a
                })
            }
            _ => None,
        }
    }

    /// Until when the cached attributes of `fh` hold (their lease), if any are cached.
    pub(crate) fn expiry(&self, fh: &FileHandle) -> Option<Instant> {
        let g = self.inner.lock();
        g.attrs
            .get(fh)
            .map(|(_, until, _)| *until)
            .filter(|until| *until > Instant::now())
    }

    /// Drops everything known about `fh` (it changed), so replies to requests sent before
    /// are not installed either.
    pub(crate) fn invalidate(&self, fh: &FileHandle) {
        let mut g = self.inner.lock();
        g.changed_unbracketed(fh);
        g.no_caps.remove(fh);
        g.fresh.forget(fh);
        g.removable.forget(fh);
    }

    /// `dir` was made by a MKDIR of `authno` replying `attr` ([`fresh_dirs`]).
    pub(crate) fn dir_made(&self, dir: &FileHandle, attr: &Attr, authno: u32) {
        self.inner.lock().fresh.made(*dir, attr, authno);
    }

    /// A request that may add `name` to `dir` is about to be sent ([`fresh_dirs`]).
    pub(crate) fn naming(&self, dir: &FileHandle, name: &[u8]) {
        self.inner.lock().fresh.naming(dir, name);
    }

    /// Whether `name` is known not to be in `dir` for `authno` ([`fresh_dirs`]).
    pub(crate) fn known_absent(&self, dir: &FileHandle, name: &[u8], authno: u32) -> bool {
        self.inner.lock().fresh.known_absent(dir, name, authno)
    }

    /// A SETATTR of ours on `fh` is about to be sent: if a directory, it may no longer let
    /// its maker search it ([`fresh_dirs`]).
    pub(crate) fn setattr_sending(&self, fh: &FileHandle) {
        let mut g = self.inner.lock();
        g.fresh.forget(fh);
        g.removable.forget(fh);
    }

    /// Taken before asking ACCESS for [`AttrCache::removable_granted`].
    pub(crate) fn removable_epoch(&self) -> u64 {
        self.inner.lock().removable.epoch()
    }

    /// `authno` asked at `epoch` for DELETE and LOOKUP on `dir` and was `granted` them or
    /// not, with `dir`'s attributes `attr` ([`removable_dirs`]).
    pub(crate) fn removable_answered(
        &self,
        dir: FileHandle,
        authno: u32,
        attr: &Attr,
        granted: bool,
        epoch: u64,
    ) {
        let mut g = self.inner.lock();
        g.removable.answered(dir, authno, attr, granted, epoch);
    }

    /// Whether `authno` may remove any entry of `dir`, as far as the server last said, and
    /// whether the server's answer (either way) still holds ([`removable_dirs`]).
    pub(crate) fn removable(&self, dir: &FileHandle, authno: u32) -> (bool, bool) {
        let g = self.inner.lock();
        (
            g.removable.removable(dir, authno),
            g.removable.known(dir, authno),
        )
    }

    /// `fh` was made new by this client with `attr` ([`Cached::no_caps`]).
    pub(crate) fn made_new(&self, fh: &FileHandle, attr: &Attr) {
        if attr.lease_ms == 0 {
            return;
        }
        let now = Instant::now();
        let mut g = self.inner.lock();
        if g.no_caps.len() >= MAX_ENTRIES {
            g.no_caps.retain(|_, e| *e > now);
            if g.no_caps.len() >= MAX_ENTRIES {
                g.no_caps.clear();
            }
        }
        let expiry = now + Duration::from_millis(u64::from(attr.lease_ms));
        g.no_caps.insert(*fh, expiry);
    }

    /// `fh`, a regular file `authno` just made new with `attr`: what its owner bits grant is
    /// cached as the server's ACCESS answer for its maker, so opening it again (a compiler's
    /// output read by the linker, a file written then read back) waits for no ACCESS round
    /// trip. The server made the file as that user, and for a file's owner only the owner
    /// bits count (an ACL's owner entry is those bits); only grants are kept, since the
    /// server may grant more (root). What the server's host could still refuse beyond the
    /// mode (a security module's policy) its READ or WRITE then refuses. Only while the
    /// reply's attributes are the cached ones: nothing changed the file since.
    pub(crate) fn made_new_access(&self, fh: &FileHandle, authno: u32, attr: &Attr) {
        use protocol::access::{EXECUTE, EXTEND, MODIFY, READ};
        let granted = [(0o400, READ), (0o200, MODIFY | EXTEND), (0o100, EXECUTE)]
            .into_iter()
            .filter(|(bit, _)| attr.mode & bit != 0)
            .fold(0, |g, (_, b)| g | b);
        if attr.ftype != FileType::Regular || granted == 0 || attr.lease_ms == 0 {
            return;
        }
        let mut g = self.inner.lock();
        let current = g.attrs.get(fh).is_some_and(|(a, e, _)| {
            *e > Instant::now() && a.ctime == attr.ctime && a.mode == attr.mode
        });
        if current {
            g.put_access(*fh, authno, (granted, granted), attr.lease_ms);
        }
    }

    /// Whether `fh` is known to hold no `security.capability` ([`Cached::no_caps`]).
    pub(crate) fn known_without_caps(&self, fh: &FileHandle) -> bool {
        let g = self.inner.lock();
        g.no_caps.get(fh).is_some_and(|e| *e > Instant::now())
    }

    /// An extended attribute of `fh` is about to be set or removed by us: it may get a
    /// capability.
    pub(crate) fn xattr_changing(&self, fh: &FileHandle) {
        let mut g = self.inner.lock();
        g.no_caps.remove(fh);
        // An ACL may take away the right to remove entries.
        g.removable.forget(fh);
    }

    /// The server's INVALIDATE of `fh` (another client changed it), with its attributes when
    /// the server sent them: installed only if we never changed `fh` (as far as its record
    /// goes), since the server may have taken them before a change of ours whose reply came
    /// first.
    pub(crate) fn invalidated(&self, fh: &FileHandle, attr: Option<Attr>) {
        let mut g = self.inner.lock();
        g.no_caps.remove(fh);
        g.fresh.forget(fh);
        g.removable.forget(fh);
        let c = g.changed_unbracketed(fh);
        c.begun = c.tick;
        if let (Some(a), false) = (attr, c.ours) {
            g.install(*fh, a, None);
        }
    }

    /// Drops everything (after a reconnect: invalidations may have been missed), including
    /// what replies to requests sent before would bring.
    pub(crate) fn clear(&self) {
        let mut g = self.inner.lock();
        g.attrs.clear();
        g.access.clear();
        g.xattrs.clear();
        g.xattr_bytes = 0;
        g.no_caps.clear();
        g.fresh.clear();
        g.removable.clear();
        g.clock += 1;
        g.floor = g.clock;
    }

    /// Remembers that `authno` asked `asked` on `fh` and was granted `granted`, in the reply
    /// to a request stamped `since` (unless `fh` changed since).
    pub(crate) fn put_access(
        &self,
        fh: FileHandle,
        authno: u32,
        (asked, granted): (u32, u32),
        lease_ms: u32,
        since: Stamp,
    ) {
        if lease_ms == 0 {
            return;
        }
        let mut g = self.inner.lock();
        if !g.unchanged_since(&fh, since) {
            return;
        }
        g.put_access(fh, authno, (asked, granted), lease_ms);
    }

    /// Remembers what GETXATTR or LISTXATTR answered `key` for `fh`, in the reply to a
    /// request stamped `since`, for as long as `fh`'s cached attributes' lease lasts: the
    /// server INVALIDATEs lease holders when an attribute changes (its ctime moves), so the
    /// answer is as fresh as the attributes. Nothing is kept without a lease, nor a value
    /// longer than [`MAX_CACHED_VALUE`].
    pub(crate) fn put_xattr(
        &self,
        fh: FileHandle,
        key: XattrKey,
        answer: XattrAnswer,
        since: Stamp,
    ) {
        if matches!(&answer, XattrAnswer::Value(v) if v.len() > MAX_CACHED_VALUE) {
            return;
        }
        let now = Instant::now();
        let mut g = self.inner.lock();
        let expiry = match g.attrs.get(&fh) {
            Some((_, e, _)) if *e > now => *e,
            _ => return,
        };
        if !g.unchanged_since(&fh, since) {
            return;
        }
        let size = answer.bytes(&key);
        if g.xattr_bytes + size > MAX_XATTR_BYTES || g.xattrs.len() >= MAX_ENTRIES {
            g.xattrs.clear();
            g.xattr_bytes = 0;
        }
        let old = g.xattrs.entry(fh).or_default().remove(&key);
        let freed = old.map_or(0, |(a, _)| a.bytes(&key));
        g.xattr_bytes = g.xattr_bytes.saturating_sub(freed) + size;
        g.xattrs
            .entry(fh)
            .or_default()
            .insert(key, (answer, expiry));
    }

    /// The answer cached for `key` on `fh`, while the lease lasts.
    pub(crate) fn get_xattr(&self, fh: &FileHandle, key: &XattrKey) -> Option<XattrAnswer> {
        let g = self.inner.lock();
        match g.xattrs.get(fh).and_then(|m| m.get(key)) {
            Some((a, e)) if *e > Instant::now() => Some(a.clone()),
            _ => None,
        }
    }

    /// Cached answer to `asked` for `authno` on `fh`, if every bit asked was asked before.
    pub(crate) fn get_access(&self, fh: &FileHandle, authno: u32, asked: u32) -> Option<u32> {
        let g = self.inner.lock();
        match g.access.get(fh).and_then(|m| m.get(&authno)) {
            Some((a, granted, e)) if *e > Instant::now() && asked & !a == 0 => {
                Some(granted & asked)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(lease_ms: u32) -> Attr {
        Attr::test_file(5, lease_ms)
    }

    /// A file of `size` bytes whose ctime is `ctime` seconds.
    fn sized(size: u64, ctime: i64) -> Attr {
        let mut a = Attr::test_file(size, 60_000);
        a.ctime.seconds = ctime;
        a
    }

    fn size(c: &AttrCache, fh: &FileHandle) -> Option<u64> {
        c.get(fh).map(|a| a.size)
    }

    const FH: FileHandle = FileHandle::from_bytes([9; 48]);
    const OTHER: FileHandle = FileHandle::from_bytes([8; 48]);

    /// Cached attributes answer the kernel's GETATTR only when brought by a request sent after
    /// every change of ours that may change objects it does not name had ended (a REMOVE may
    /// change this one unseen), never an INVALIDATE's, and with what is left of their lease.
    /// Changes of other objects that change only what they name (a WRITE, a CREATE) leave
    /// them be.
    #[test]
    fn attributes_unchanged_by_us_are_those_asked_after_our_last_change() {
        let c = AttrCache::default();
        c.put(FH, attr(60_000), c.stamp());
        let a = c.get_unchanged_by_us(&FH).expect("nothing of ours changed");
        assert!(
            a.lease_ms <= 60_000 && a.lease_ms > 50_000,
            "{}",
            a.lease_ms
        );

        c.begin(&OTHER).end(None);
        c.made(&OTHER, Some(attr(60_000)), c.stamp());
        assert!(
            c.get_unchanged_by_us(&FH).is_some(),
            "changes of another object that name only it"
        );

        let asked_before = c.stamp();
        let change = c.begin_unnamed(&OTHER, Unnamed::Files);
        assert_eq!(
            c.get_unchanged_by_us(&FH),
            None,
            "a change of ours in flight"
        );
        assert_eq!(size(&c, &FH), Some(5), "still cached for other uses");
        change.end(None);
        assert_eq!(
            c.get_unchanged_by_us(&FH),
            None,
            "asked before that change ended"
        );
        c.put(FH, attr(60_000), asked_before);
        assert_eq!(
            c.get_unchanged_by_us(&FH),
            None,
            "a reply to a request sent before"
        );
        c.put(FH, attr(60_000), c.stamp());
        assert!(c.get_unchanged_by_us(&FH).is_some(), "asked after it ended");

        // A REMOVE changes no directory unseen, an RMDIR no file.
        let dir = FileHandle::from_bytes([7; 48]);
        let mut d = attr(60_000);
        d.ftype = FileType::Directory;
        c.put(dir, d, c.stamp());
        c.begin_unnamed(&OTHER, Unnamed::Files).end(None);
        assert!(
            c.get_unchanged_by_us(&dir).is_some(),
            "a REMOVE, a directory"
        );
        assert_eq!(c.get_unchanged_by_us(&FH), None, "a REMOVE, a file");
        c.put(FH, attr(60_000), c.stamp());
        c.begin_unnamed(&OTHER, Unnamed::Dirs).end(None);
        assert!(c.get_unchanged_by_us(&FH).is_some(), "an RMDIR, a file");
        assert_eq!(c.get_unchanged_by_us(&dir), None, "an RMDIR, a directory");
        c.put(dir, d, c.stamp());
        c.begin_unnamed(&OTHER, Unnamed::Both).end(None);
        assert_eq!(c.get_unchanged_by_us(&FH), None, "a RENAME, a file");
        assert_eq!(c.get_unchanged_by_us(&dir), None, "a RENAME, a directory");
        c.put(FH, attr(60_000), c.stamp());

        c.invalidated(&FH, Some(attr(60_000)));
        assert_eq!(
            size(&c, &FH),
            Some(5),
            "an INVALIDATE's attributes are cached"
        );
        assert_eq!(c.get_unchanged_by_us(&FH), None, "but not for this");

        c.put(OTHER, attr(30), c.stamp());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get_unchanged_by_us(&OTHER), None, "the lease ended");
    }

    #[test]
    fn lease_expires() {
        let c = AttrCache::default();
        let fh = FileHandle::from_bytes([1; 48]);
        c.put(fh, attr(30), c.stamp());
        assert!(c.get(&fh).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(c.get(&fh).is_none());
    }

    /// Extended attribute answers are kept only under a lease, per user, until the object
    /// changes; long values and a stale stamp are not kept.
    #[test]
    fn xattr_answers_live_as_long_as_the_attributes() {
        let c = AttrCache::default();
        let k = (7, Some(b"user.k".to_vec()));
        c.put_xattr(FH, k.clone(), XattrAnswer::Missing, c.stamp());
        assert_eq!(c.get_xattr(&FH, &k), None, "no lease, nothing kept");
        c.put(FH, attr(60_000), c.stamp());
        c.put_xattr(FH, k.clone(), XattrAnswer::Missing, c.stamp());
        assert_eq!(c.get_xattr(&FH, &k), Some(XattrAnswer::Missing));
        assert_eq!(c.get_xattr(&FH, &(8, k.1.clone())), None, "another user");
        let list = (7, None);
        c.put_xattr(
            FH,
            list.clone(),
            XattrAnswer::Names(vec![b"user.k".to_vec()]),
            c.stamp(),
        );
        assert!(c.get_xattr(&FH, &list).is_some());
        c.put_xattr(
            FH,
            (7, Some(b"user.big".to_vec())),
            XattrAnswer::Value(vec![0; MAX_CACHED_VALUE + 1]),
            c.stamp(),
        );
        assert_eq!(c.get_xattr(&FH, &(7, Some(b"user.big".to_vec()))), None);
        c.invalidated(&FH, None);
        assert_eq!(c.get_xattr(&FH, &k), None, "an INVALIDATE drops them");
        assert_eq!(c.get_xattr(&FH, &list), None);
        // A reply to a request sent before a change is not kept.
        c.put(FH, attr(60_000), c.stamp());
        let before = c.stamp();
        drop(c.begin(&FH));
        c.put(FH, attr(60_000), c.stamp());
        c.put_xattr(FH, k.clone(), XattrAnswer::Missing, before);
        assert_eq!(c.get_xattr(&FH, &k), None);
        assert_eq!(c.inner.lock().xattr_bytes, 0);
    }

    #[test]
    fn invalidate_drops_attrs_and_access() {
        let c = AttrCache::default();
        let fh = FileHandle::from_bytes([2; 48]);
        c.put(fh, attr(60_000), c.stamp());
        c.put_access(fh, 1, (0x3, 0x1), 60_000, c.stamp());
        assert_eq!(c.get_access(&fh, 1, 0x1), Some(0x1));
        assert_eq!(c.get_access(&fh, 1, 0x4), None, "bit never asked");
        assert_eq!(c.get_access(&fh, 2, 0x1), None, "per user");
        c.invalidate(&fh);
        assert!(c.get(&fh).is_none());
        assert_eq!(c.get_access(&fh, 1, 0x1), None);
    }

    /// A change of a file's data keeps who may do what with it; a change of its attributes
    /// (a SETATTR) and another client's change do not.
    #[test]
    fn access_answers_outlast_our_changes_of_a_files_data_only() {
        let c = AttrCache::default();
        c.put_access(FH, 1, (0x3, 0x1), 60_000, c.stamp());
        c.begin_data(&FH).end(Some(attr(60_000)));
        assert_eq!(c.get_access(&FH, 1, 0x1), Some(0x1), "written");
        c.begin(&FH).end(None);
        assert_eq!(c.get_access(&FH, 1, 0x1), None, "any other change");
        c.put_access(FH, 1, (0x3, 0x1), 60_000, c.stamp());
        let w = c.begin_data(&FH);
        c.invalidated(&FH, None);
        w.end(None);
        assert_eq!(
            c.get_access(&FH, 1, 0x1),
            None,
            "another client's change meanwhile"
        );
        let during = c.stamp();
        let w = c.begin_data(&FH);
        c.put_access(FH, 1, (0x3, 0x1), 60_000, during);
        w.end(None);
        assert_eq!(
            c.get_access(&FH, 1, 0x1),
            None,
            "an answer asked while a change was in flight is refused as before"
        );
    }

    /// A file made new is granted to its maker what its owner bits say, and nothing else;
    /// not once something changed it.
    #[test]
    fn a_file_made_new_may_be_opened_by_its_maker_as_its_owner_bits_say() {
        use protocol::access::{EXECUTE, EXTEND, MODIFY, READ};
        let c = AttrCache::default();
        let mut a = attr(60_000);
        a.mode = 0o640;
        c.made(&FH, Some(a), c.stamp());
        c.made_new_access(&FH, 1, &a);
        assert_eq!(c.get_access(&FH, 1, READ), Some(READ));
        assert_eq!(c.get_access(&FH, 1, READ | MODIFY), Some(READ | MODIFY));
        assert_eq!(c.get_access(&FH, 1, EXTEND), Some(EXTEND));
        assert_eq!(
            c.get_access(&FH, 1, EXECUTE),
            None,
            "not granted: the server's to say"
        );
        assert_eq!(c.get_access(&FH, 2, READ), None, "another user");
        c.invalidated(&FH, None);
        assert_eq!(c.get_access(&FH, 1, READ), None, "changed since");
        c.made_new_access(&FH, 1, &a);
        assert_eq!(
            c.get_access(&FH, 1, READ),
            None,
            "its attributes are not cached now"
        );
        a.mode = 0o444;
        c.made(&OTHER, Some(a), c.stamp());
        c.made_new_access(&OTHER, 1, &a);
        assert_eq!(c.get_access(&OTHER, 1, MODIFY), None);
        assert_eq!(c.get_access(&OTHER, 1, READ), Some(READ));
    }

    #[test]
    fn zero_lease_is_not_cached() {
        let c = AttrCache::default();
        let fh = FileHandle::from_bytes([3; 48]);
        c.put(fh, attr(0), c.stamp());
        assert!(c.get(&fh).is_none());
    }

    /// A GETATTR sent before a WRITE whose reply came first carries the size from before it.
    #[test]
    fn a_reply_to_a_request_sent_before_a_change_is_not_installed() {
        let c = AttrCache::default();
        let read = c.stamp();
        let w = c.begin(&FH);
        w.end(Some(sized(100, 2)));
        assert_eq!(size(&c, &FH), Some(100));
        c.put(FH, sized(0, 1), read);
        assert_eq!(size(&c, &FH), Some(100), "the older reply lost");
        // Other objects are not affected, and later requests install again.
        c.put(OTHER, sized(3, 1), read);
        assert_eq!(size(&c, &OTHER), Some(3));
        c.put(FH, sized(200, 3), c.stamp());
        assert_eq!(size(&c, &FH), Some(200));
    }

    /// A reply that arrives while a WRITE is in flight may have been taken before it or after.
    #[test]
    fn nothing_is_installed_while_a_change_is_in_flight() {
        let c = AttrCache::default();
        c.put(FH, sized(10, 1), c.stamp());
        let w = c.begin(&FH);
        assert_eq!(size(&c, &FH), None, "a change drops the cached attributes");
        let during = c.stamp();
        c.put(FH, sized(10, 1), during);
        assert_eq!(size(&c, &FH), None);
        assert!(c.changed_since(&FH, during));
        drop(w);
        c.put(FH, sized(10, 1), during);
        assert_eq!(size(&c, &FH), None, "the change ended after the stamp");
        assert!(c.changed_since(&FH, during));
        assert!(!c.changed_since(&FH, c.stamp()));
    }

    /// Two WRITEs in flight at once: either's post-op attributes may predate the other's.
    #[test]
    fn overlapping_changes_install_neither_post_op_attribute() {
        let c = AttrCache::default();
        let first = c.begin(&FH);
        let second = c.begin(&FH);
        second.end(Some(sized(200, 2)));
        assert_eq!(size(&c, &FH), None, "the first was in flight");
        first.end(Some(sized(100, 2)));
        assert_eq!(size(&c, &FH), None, "the second began after it");
        // One alone installs its own.
        c.begin(&FH).end(Some(sized(300, 3)));
        assert_eq!(size(&c, &FH), Some(300));
        // A change begun and ended inside another's span spoils the outer one too.
        let outer = c.begin(&FH);
        c.begin(&FH).end(Some(sized(400, 4)));
        outer.end(Some(sized(350, 4)));
        assert_eq!(size(&c, &FH), None);
    }

    /// An INVALIDATE's attributes are the newest unless one of our changes is in flight; a
    /// reply to a request sent before it is not.
    #[test]
    fn invalidations_order_like_changes() {
        let c = AttrCache::default();
        let before = c.stamp();
        c.invalidated(&FH, Some(sized(50, 5)));
        assert_eq!(size(&c, &FH), Some(50));
        c.put(FH, sized(40, 4), before);
        assert_eq!(size(&c, &FH), Some(50));
        let w = c.begin(&FH);
        c.invalidated(&FH, Some(sized(60, 6)));
        assert_eq!(size(&c, &FH), None, "our write may land after it");
        w.end(Some(sized(70, 7)));
        assert_eq!(
            size(&c, &FH),
            None,
            "the invalidation came during our write"
        );
        // After a write of ours, an INVALIDATE may carry attributes taken before it.
        c.begin(&FH).end(Some(sized(80, 8)));
        assert_eq!(size(&c, &FH), Some(80));
        c.invalidated(&FH, Some(sized(60, 8)));
        assert_eq!(size(&c, &FH), None);
    }

    #[test]
    fn an_older_ctime_never_replaces_a_newer_one() {
        let c = AttrCache::default();
        c.put(FH, sized(100, 5), c.stamp());
        c.put(FH, sized(0, 4), c.stamp());
        assert_eq!(size(&c, &FH), Some(100));
        c.put(FH, sized(0, 5), c.stamp());
        assert_eq!(size(&c, &FH), Some(0), "equal ctimes: the later reply");
    }

    #[test]
    fn access_answers_from_before_a_change_are_not_kept() {
        let c = AttrCache::default();
        let before = c.stamp();
        c.begin(&FH).end(None);
        c.put_access(FH, 1, (0x1, 0x1), 60_000, before);
        assert_eq!(c.get_access(&FH, 1, 0x1), None);
    }

    /// After a reconnect (or when the change records are dropped) nothing stamped before is
    /// trusted, for any object.
    #[test]
    fn our_changes_in_flight_together_settle_as_one_group() {
        let c = AttrCache::default();
        c.invalidate(&FH);
        let stale = c.stamp();
        c.invalidate(&FH);
        let before = c.stamp();
        let (first, second) = (c.begin(&FH), c.begin(&FH));
        let during = c.stamp();
        let second = second.end(None).unwrap();
        assert!(second.applies_to(before));
        assert!(!second.applies_to(stale), "another change came between");
        assert!(
            !second.applies_to(during),
            "taken while the group was in flight"
        );
        assert_eq!(second.last(), None, "the first is still in flight");
        let first = first.end(None).unwrap();
        assert_eq!(first.group(), second.group());
        let (members, to) = first.last().unwrap();
        assert_eq!(members, 2);
        assert!(!c.changed_since(&FH, to), "holds as of the last reply");
        // A new group begins where the last one ended.
        let next = c.begin(&FH).end(None).unwrap();
        assert!(next.applies_to(to));
        assert_ne!(next.group(), first.group());
        assert_eq!(next.last().map(|(n, _)| n), Some(1));

        // Spoiled by what is not one of our bracketed changes, while in flight.
        let spoilers: [fn(&AttrCache); 4] = [
            |c| c.invalidate(&FH),
            |c| c.invalidated(&FH, None),
            |c| c.made(&FH, None, c.stamp()),
            |c| c.clear(),
        ];
        for spoil in spoilers {
            let change = c.begin(&FH);
            spoil(&c);
            assert_eq!(change.end(None), None);
        }
        // Not spoiled by such an event after it; nor by a change of another object.
        let change = c.begin(&FH);
        c.invalidate(&OTHER);
        assert!(change.end(None).is_some());
        // A member given up (no reply) spoils the whole group, also the ones answered.
        let (first, second) = (c.begin(&FH), c.begin(&FH));
        drop(first);
        assert_eq!(second.end(None), None);
        // Nothing known before a reconnect applies after it.
        let old = c.stamp();
        c.clear();
        let after = c.begin(&FH).end(None).unwrap();
        assert!(!after.applies_to(old));
    }

    #[test]
    fn clear_and_dropped_records_refuse_older_stamps() {
        let c = AttrCache::default();
        let before = c.stamp();
        let w = c.begin(&FH);
        c.clear();
        c.put(OTHER, sized(1, 1), before);
        assert_eq!(size(&c, &OTHER), None);
        w.end(Some(sized(2, 2)));
        assert_eq!(size(&c, &FH), None, "begun before the reconnect");
        c.put(OTHER, sized(1, 1), c.stamp());
        assert_eq!(size(&c, &OTHER), Some(1));

        let c = AttrCache::default();
        let before = c.stamp();
        for i in 0..MAX_ENTRIES as u32 + 1 {
            let mut b = [0u8; 48];
            b[..4].copy_from_slice(&i.to_le_bytes());
            c.invalidate(&FileHandle::from_bytes(b));
        }
        assert!(c.inner.lock().changes.len() <= MAX_ENTRIES, "bounded");
        c.put(OTHER, sized(1, 1), before);
        assert_eq!(size(&c, &OTHER), None, "its record may have been dropped");
        c.put(OTHER, sized(1, 1), c.stamp());
        assert_eq!(size(&c, &OTHER), Some(1));
    }
}
