//! The self-certifying namespace (`sfs mount --namespace DIR`): a FUSE file system whose root
//! is empty but for the bookmarks, where looking up `@HOST%PORT,HOSTID` connects to that
//! server (the handshake verifies the HOSTID) and shows its tree.
//!
//! Each server reached this way is an ordinary [`SfsFuse`] (one [`Client`] session, its own
//! inode table, lease and INVALIDATE handling) whose node ids live in a range of their own:
//! server `n` (from 1) has its root at `n << 40` and allocates upwards from there, so every
//! kernel request is routed by its node id's high bits without translating anything. Range 0
//! is the namespace's own: the root ([`ROOT`]) and the bookmark symlinks.
//!
//! A server no kernel request touched for `idle` is disconnected ([`Client::disconnect`]); its
//! node ids stay valid and the next request reconnects (verifying the HOSTID again).
//!
//! **One server cannot stall the others.** Every kernel request is answered from a task of its
//! own, so a request waiting on one server holds up nothing else. The first contact with a
//! name is one attempt of its own, run apart from every lookup (a killed program's lookup
//! leaves it going for the others), shared by every lookup of that name while it lasts, and
//! bounded: each TCP connect plus handshake by [`CONNECT_TIMEOUT`], at most
//! [`CONNECT_ATTEMPTS`] of them, all of it (login, MOUNT, the root's attributes) by
//! [`FIRST_CONTACT`]. A port where nobody listens fails at once (`EHOSTUNREACH`), a server
//! that accepts but never speaks within those bounds (`ETIMEDOUT`).

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    AccessFlags, Errno, FileAttr, Filesystem, Generation, INodeNo, KernelConfig, LockOwner,
    Notifier, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use parking_lot::{Mutex, MutexGuard};
use protocol::{FileType, ServerName};
use tokio::runtime::Handle;

use crate::bookmarks::{self, Bookmark};
use crate::fuse::{ROOT, SfsFuse, Shared, fattr, placeholder_dir, ttl};
use crate::identity::Identity;
use crate::session::{Client, Options, SessionError};

/// Bits of a node id below the server number.
const SHIFT: u32 = 40;

// The namespace's own node ids (root, bookmarks) stay far below the first server's range.
const _: () = assert!(ROOT + (1 << 30) < 1 << SHIFT);

/// How long the kernel may cache the namespace's own entries (bookmarks may change).
const NS_TTL: Duration = Duration::from_secs(1);

/// Longest TCP connect plus handshake with a server of the namespace: a server that answers
/// at all does so in well under a second, and a program looking a name up should learn within
/// seconds, not the tens a single mount may wait for its one server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connection attempts per contact (first, or after a disconnect): a second try rides out a
/// server restarting, more would only make a program wait on a server that is not there.
const CONNECT_ATTEMPTS: u32 = 2;

/// Longest first contact with a name, from TCP connect to the root's attributes: the two
/// attempts' timeouts plus room for the login and MOUNT round trips.
const FIRST_CONTACT: Duration = Duration::from_secs(12);

// Every attempt and the backoff between them (100 ms) fit in the first contact with a second
// to spare for the login and MOUNT round trips, and a program learns within 15 s.
const _: () = assert!(
    CONNECT_TIMEOUT.as_millis() * CONNECT_ATTEMPTS as u128 + 100 + 1000 < FIRST_CONTACT.as_millis()
        && FIRST_CONTACT.as_secs() <= 15
);

/// How long a failed first contact stays the answer for its name: the kernel looks a name up
/// once at a time, so programs that were waiting for the same name ask again one by one right
/// after the failure; within this they get it too, instead of a new attempt each.
const FAILURE_KEPT: Duration = Duration::from_secs(1);

/// The outcome of a first contact, shared by every lookup waiting for it.
type Contact = Option<Result<Arc<Server>, Errno>>;

/// One server reached through the namespace.
struct Server {
    name: String,
    client: Client,
    fs: SfsFuse,
    root: protocol::FileHandle,
    last_used: Mutex<Instant>,
}

#[derive(Default)]
struct State {
    /// Servers by number (index + 1).
    servers: Vec<Arc<Server>>,
    by_name: HashMap<String, usize>,
    /// Node ids of the bookmark symlinks (range 0, never reused).
    marks: HashMap<String, u64>,
}

/// The namespace file system.
pub struct Namespace {
    rt: Handle,
    identity: Option<Identity>,
    opts: Options,
    state: Mutex<State>,
    /// First contacts under way, by name: every lookup of a name waits for the same one.
    contacts: Mutex<HashMap<String, tokio::sync::watch::Receiver<Contact>>>,
    notifier: OnceLock<Notifier>,
}

/// The kernel-facing handle ([`Filesystem`] for a shared [`Namespace`]).
pub struct NsFuse(pub Arc<Namespace>);

impl Namespace {
    /// An empty namespace whose sessions log in as `identity` with `opts`.
    pub fn new(rt: Handle, identity: Option<Identity>, opts: Options) -> Arc<Namespace> {
        Arc::new(Namespace {
            rt,
            identity,
            opts,
            state: Mutex::new(State::default()),
            contacts: Mutex::new(HashMap::new()),
            notifier: OnceLock::new(),
        })
    }

    /// Where INVALIDATEs of servers connected from now on are sent (set once, after mounting).
    pub fn set_notifier(&self, n: Notifier) {
        let _ = self.notifier.set(n);
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The server whose range holds `ino` (None: the namespace's own range).
    fn server(&self, ino: INodeNo) -> Option<Arc<Server>> {
        let n = usize::try_from(ino.0 >> SHIFT).ok()?;
        let s = self.state().servers.get(n.checked_sub(1)?).cloned()?;
        *s.last_used.lock() = Instant::now();
        Some(s)
    }

    /// The bookmarks now (a broken file is logged and shows nothing).
    fn bookmarks(&self) -> Vec<(u64, Bookmark)> {
        let marks = match bookmarks::load() {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("bookmarks: {e}");
                Vec::new()
            }
        };
        let mut st = self.state();
        let mut out = Vec::with_capacity(marks.len());
        for b in marks {
            let next = ROOT + 1 + st.marks.len() as u64;
            let ino = *st.marks.entry(b.alias.clone()).or_insert(next);
            out.push((ino, b));
        }
        out
    }

    /// The server known as `key`, if connected before.
    fn known(&self, key: &str) -> Option<Arc<Server>> {
        let st = self.state();
        st.by_name.get(key).map(|&i| st.servers[i].clone())
    }

    /// The server for `name`, connecting (and verifying its HOSTID) on first use: one first
    /// contact per name at a time, on a task of its own, whose outcome every lookup of the
    /// name waiting meanwhile shares.
    async fn connect(self: &Arc<Self>, name: &ServerName) -> Result<Arc<Server>, Errno> {
        let key = name.to_string();
        if let Some(s) = self.known(&key) {
            return Ok(s);
        }
        let mut outcome = {
            let mut contacts = self.contacts.lock();
            // Checked again under the lock: a successful contact registers its server before
            // it leaves this map.
            if let Some(s) = self.known(&key) {
                return Ok(s);
            }
            match contacts.get(&key) {
                Some(rx) => rx.clone(),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    contacts.insert(key.clone(), rx.clone());
                    let ns = self.clone();
                    let name = name.clone();
                    self.rt.spawn(async move {
                        let r = match tokio::time::timeout(FIRST_CONTACT, ns.first_contact(&name))
                            .await
                        {
                            Ok(r) => r,
                            Err(_) => {
                                tracing::warn!(
                                    "namespace: {name}: no answer within {} s",
                                    FIRST_CONTACT.as_secs()
                                );
                                Err(Errno::ETIMEDOUT)
                            }
                        };
                        let failed = r.is_err();
                        let _ = tx.send(Some(r));
                        if failed {
                            tokio::time::sleep(FAILURE_KEPT).await;
                        }
                        ns.contacts.lock().remove(&name.to_string());
                    });
                    rx
                }
            }
        };
        match outcome.wait_for(Option::is_some).await {
            Ok(r) => r.clone().unwrap_or(Err(Errno::EIO)),
            // The contact's task went away without an answer (the runtime is shutting down).
            Err(_) => Err(Errno::EIO),
        }
    }

    /// Connects to `name` (verifying its HOSTID), mounts its root and registers it.
    async fn first_contact(self: &Arc<Self>, name: &ServerName) -> Result<Arc<Server>, Errno> {
        let key = name.to_string();
        let opts = Options {
            connect_timeout: self.opts.connect_timeout.min(CONNECT_TIMEOUT),
            connect_attempts: self.opts.connect_attempts.min(CONNECT_ATTEMPTS),
            ..self.opts.clone()
        };
        let client = Client::new(name, self.identity.clone(), opts);
        let (root, attr) = match client.mount("/").await {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!("namespace: {key}: {}", e.report());
                return Err(contact_errno(e));
            }
        };
        if attr.ftype != FileType::Directory {
            tracing::warn!("namespace: {key}: its root is not a directory");
            return Err(Errno::ENOTDIR);
        }
        let mut st = self.state();
        let n = st.servers.len() + 1;
        let base = (n as u64) << SHIFT;
        let sh = Shared::with_base(client.clone(), root, None, base);
        if let Some(notifier) = self.notifier.get().cloned() {
            let (tx, rx) = crate::session::invalidations::channel();
            client.on_invalidate(Box::new(move |ev| tx.send(ev)));
            let sh2 = sh.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("sfs-invalidate-{n}"))
                .spawn(move || crate::fuse::invalidator(sh2, notifier, rx));
            if let Err(e) = spawned {
                tracing::warn!("namespace: {key}: no invalidation thread: {e}");
            }
        }
        let s = Arc::new(Server {
            name: key.clone(),
            client,
            fs: SfsFuse::new(sh, self.rt.clone()),
            root,
            last_used: Mutex::new(Instant::now()),
        });
        st.servers.push(s.clone());
        st.by_name.insert(key.clone(), n - 1);
        tracing::info!("namespace: connected to {key} (node ids from {base:#x})");
        Ok(s)
    }

    /// Disconnects every server idle for at least `idle`, forever (every `idle / 4`).
    pub async fn reap_idle(self: Arc<Self>, idle: Duration) {
        let tick = (idle / 4).clamp(Duration::from_millis(100), Duration::from_secs(30));
        loop {
            tokio::time::sleep(tick).await;
            let servers = self.state().servers.clone();
            for s in servers {
                let quiet = s.last_used.lock().elapsed();
                if quiet >= idle && s.client.disconnect().await {
                    tracing::info!(
                        "namespace: disconnected {} (idle {} s); the next use reconnects",
                        s.name,
                        quiet.as_secs()
                    );
                }
            }
        }
    }

    /// Attributes of the namespace root or a bookmark symlink.
    fn own_attr(ino: u64, target: Option<&str>) -> FileAttr {
        let mut a = placeholder_dir();
        let now = crate::fuse::time_from(SystemTime::now());
        (a.atime, a.mtime, a.ctime) = (now, now, now);
        // SAFETY: getuid/getgid cannot fail.
        (a.uid, a.gid) = unsafe { (libc::getuid(), libc::getgid()) };
        if let Some(t) = target {
            a.ftype = FileType::Symlink;
            a.mode = 0o777;
            a.nlink = 1;
            a.size = t.len() as u64;
        } else {
            a.mode = 0o555;
        }
        fattr(ino, &a)
    }

    /// LOOKUP in the root: a bookmark, or a self-certifying name (connecting).
    async fn lookup_root(self: Arc<Self>, name: Vec<u8>) -> Result<(Duration, FileAttr), Errno> {
        let Ok(name) = String::from_utf8(name) else {
            return Err(Errno::ENOENT);
        };
        if !name.starts_with('@') {
            return self
                .bookmarks()
                .into_iter()
                .find(|(_, b)| b.alias == name)
                .map(|(ino, b)| (NS_TTL, Self::own_attr(ino, Some(&b.server.to_string()))))
                .ok_or(Errno::ENOENT);
        }
        let server: ServerName = match name.parse() {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("namespace: {name:?} is not a self-certifying name: {e}");
                return Err(Errno::ENOENT);
            }
        };
        if server.path().is_some() || server.to_string() != name {
            // One name per server (no paths, no other spellings): each directory entry is one
            // server, whose root must not appear under two names.
            tracing::warn!(
                "namespace: {name:?}: use the canonical form {}",
                server.without_path()
            );
            return Err(Errno::ENOENT);
        }
        let s = self.connect(&server).await?;
        let base = (self.state().by_name[&s.name] as u64 + 1) << SHIFT;
        *s.last_used.lock() = Instant::now();
        let attr = s
            .client
            .getattr(&s.root)
            .await
            .map_err(crate::fuse::errno)?;
        // The root's own entries are cached briefly (like the bookmarks), so a later lookup
        // of the name comes here again and finds the session.
        Ok((NS_TTL.min(ttl(&attr)), fattr(base, &attr)))
    }
}

/// `forward!(self, ino => method(args), else fallback)`: calls `method` on the file system of
/// the server serving `ino`, or evaluates `fallback` (the namespace's own answer) where none does.
macro_rules! forward {
    ($this:ident, $ino:expr => $method:ident($($arg:expr),* $(,)?), else $fallback:expr) => {
        match $this.route($ino) {
            Some(fs) => fs.$method($($arg),*),
            None => $fallback,
        }
    };
}

/// The errno a lookup gets when the first contact with its server failed with `e`.
fn contact_errno(e: SessionError) -> Errno {
    use crate::session::error::ConnectError;
    match e {
        SessionError::Handshake { .. } => Errno::EACCES,
        SessionError::Nfs(_) => crate::fuse::errno(e),
        SessionError::Connect {
            source: ConnectError::TimedOut,
            ..
        }
        | SessionError::Timeout { .. } => Errno::ETIMEDOUT,
        _ => Errno::EHOSTUNREACH,
    }
}

impl Filesystem for NsFuse {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        crate::fuse::configure(config);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if let Some(fs) = self.route(parent) {
            return fs.lookup(req, parent, name, reply);
        }
        if parent.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let ns = self.0.clone();
        let name = name.as_bytes().to_vec();
        let work = async move {
            match ns.lookup_root(name).await {
                Ok((ttl, attr)) => reply.entry(&ttl, &attr, Generation(0)),
                Err(e) => reply.error(e),
            }
        };
        self.0
            .rt
            .spawn(crate::interrupt::unless_killed(req.pid(), work));
    }

    fn forget(&self, req: &Request, ino: INodeNo, nlookup: u64) {
        forward!(self, ino => forget(req, ino, nlookup), else ())
    }

    fn getattr(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: Option<fuser::FileHandle>,
        reply: ReplyAttr,
    ) {
        if let Some(fs) = self.route(ino) {
            return fs.getattr(req, ino, fh, reply);
        }
        if ino.0 == ROOT {
            return reply.attr(&NS_TTL, &Namespace::own_attr(ROOT, None));
        }
        match self.0.bookmarks().into_iter().find(|(i, _)| *i == ino.0) {
            Some((i, b)) => reply.attr(
                &NS_TTL,
                &Namespace::own_attr(i, Some(&b.server.to_string())),
            ),
            None => reply.error(Errno::ESTALE),
        }
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        if let Some(fs) = self.route(ino) {
            return fs.readlink(req, ino, reply);
        }
        match self.0.bookmarks().into_iter().find(|(i, _)| *i == ino.0) {
            Some((_, b)) => reply.data(b.server.to_string().as_bytes()),
            None => reply.error(Errno::EINVAL),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if parent.0 >> SHIFT != newparent.0 >> SHIFT {
            return reply.error(Errno::EXDEV);
        }
        forward!(self, parent => rename(req, parent, name, newparent, newname, flags, reply),
            else reply.error(Errno::EACCES))
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        if ino.0 >> SHIFT != newparent.0 >> SHIFT {
            return reply.error(Errno::EXDEV);
        }
        forward!(self, ino => link(req, ino, newparent, newname, reply),
            else reply.error(Errno::EACCES))
    }

    fn opendir(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        forward!(self, ino => opendir(req, ino, flags, reply), else {
            if ino.0 == ROOT {
                reply.opened(fuser::FileHandle(0), fuser::FopenFlags::empty())
            } else {
                reply.error(Errno::ENOTDIR)
            }
        })
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        if let Some(fs) = self.route(ino) {
            return fs.readdir(req, ino, fh, offset, reply);
        }
        for (i, (ino, kind, name)) in self
            .root_entries()
            .into_iter()
            .enumerate()
            .skip(offset as usize)
        {
            if reply.add(INodeNo(ino), i as u64 + 1, kind, OsStr::new(&name)) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        if let Some(fs) = self.route(ino) {
            return fs.readdirplus(req, ino, fh, offset, reply);
        }
        let marks = self.0.bookmarks();
        for (i, (ino, _, name)) in self
            .root_entries()
            .into_iter()
            .enumerate()
            .skip(offset as usize)
        {
            let target = marks
                .iter()
                .find(|(m, _)| *m == ino && ino != ROOT)
                .map(|(_, b)| b.server.to_string());
            let attr = Namespace::own_attr(ino, target.as_deref());
            if reply.add(
                INodeNo(ino),
                i as u64 + 1,
                OsStr::new(&name),
                &NS_TTL,
                &attr,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        forward!(self, ino => releasedir(req, ino, fh, flags, reply), else reply.ok())
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: fuser::FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, req: &Request, ino: INodeNo, reply: ReplyStatfs) {
        forward!(self, ino => statfs(req, ino, reply),
            else reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096))
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        forward!(self, ino => access(req, ino, mask, reply), else {
            if mask.contains(AccessFlags::W_OK) {
                reply.error(Errno::EACCES)
            } else {
                reply.ok()
            }
        })
    }

    // The namespace's own nodes (root, bookmarks) have no attributes and take none; never
    // ENOSYS, which would turn extended attributes off for the servers' files too.
    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        forward!(self, ino => getxattr(req, ino, name, size, reply),
            else reply.error(Errno::ENODATA))
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        forward!(self, ino => listxattr(req, ino, size, reply),
            else crate::fuse::reply_xattr(crate::fuse::xattr_list(&[], size), reply))
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        position: u32,
        reply: ReplyEmpty,
    ) {
        forward!(self, ino => setxattr(req, ino, name, value, flags, position, reply),
            else reply.error(Errno::EOPNOTSUPP))
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        forward!(self, ino => removexattr(req, ino, name, reply),
            else reply.error(Errno::EOPNOTSUPP))
    }
    crate::fuse::no_ioctls!();

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        fh: Option<fuser::FileHandle>,
        crtime: Option<SystemTime>,
        chgtime: Option<SystemTime>,
        bkuptime: Option<SystemTime>,
        flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        forward!(self, ino => setattr(
            req, ino, mode, uid, gid, size, atime, mtime, ctime, fh, crtime, chgtime, bkuptime,
            flags, reply,
        ), else reply.error(Errno::EACCES))
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        forward!(self, parent => mknod(req, parent, name, mode, umask, rdev, reply),
            else reply.error(Errno::EACCES))
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        forward!(self, parent => mkdir(req, parent, name, mode, umask, reply),
            else reply.error(Errno::EACCES))
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        forward!(self, parent => unlink(req, parent, name, reply), else reply.error(Errno::EACCES))
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        forward!(self, parent => rmdir(req, parent, name, reply), else reply.error(Errno::EACCES))
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        forward!(self, parent => symlink(req, parent, link_name, target, reply),
            else reply.error(Errno::EACCES))
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        forward!(self, ino => open(req, ino, flags, reply), else reply.error(Errno::EACCES))
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        forward!(self, ino => read(req, ino, fh, offset, size, flags, lock_owner, reply),
            else reply.error(Errno::EACCES))
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        forward!(self, ino => write(
            req, ino, fh, offset, data, write_flags, flags, lock_owner, reply,
        ), else reply.error(Errno::EACCES))
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        forward!(self, ino => flush(req, ino, fh, lock_owner, reply),
            else reply.error(Errno::EACCES))
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        flush: bool,
        reply: ReplyEmpty,
    ) {
        forward!(self, ino => release(req, ino, fh, flags, lock_owner, flush, reply),
            else reply.error(Errno::EACCES))
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: fuser::ReplyLock,
    ) {
        forward!(self, ino => getlk(req, ino, fh, lock_owner, start, end, typ, pid, reply),
            else reply.error(Errno::EACCES))
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        forward!(self, ino => setlk(req, ino, fh, lock_owner, start, end, typ, pid, sleep, reply),
            else reply.error(Errno::EACCES))
    }

    fn flock(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        lock_owner: LockOwner,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        forward!(self, ino => flock(req, ino, fh, lock_owner, typ, pid, sleep, reply),
            else reply.error(Errno::EACCES))
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: fuser::FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        forward!(self, ino => fsync(req, ino, fh, datasync, reply), else reply.error(Errno::EACCES))
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        forward!(self, parent => create(req, parent, name, mode, umask, flags, reply),
            else reply.error(Errno::EACCES))
    }
}

impl NsFuse {
    /// The server serving `ino` (None: the namespace's own range).
    fn route(&self, ino: INodeNo) -> Option<Arc<Server>> {
        self.0.server(ino)
    }

    /// `.`, `..` and the bookmarks (symlinks), in listing order.
    fn root_entries(&self) -> Vec<(u64, fuser::FileType, String)> {
        let mut v = vec![
            (ROOT, fuser::FileType::Directory, ".".to_owned()),
            (ROOT, fuser::FileType::Directory, "..".to_owned()),
        ];
        for (ino, b) in self.0.bookmarks() {
            v.push((ino, fuser::FileType::Symlink, b.alias));
        }
        v
    }
}

impl std::ops::Deref for Server {
    type Target = SfsFuse;
    fn deref(&self) -> &SfsFuse {
        &self.fs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::error::ConnectError;

    fn connect(source: ConnectError) -> SessionError {
        SessionError::Connect {
            name: "@h%1,x".into(),
            source,
        }
    }

    #[test]
    fn first_contact_failures_say_why() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            contact_errno(connect(ConnectError::Io(refused))),
            Errno::EHOSTUNREACH
        );
        assert_eq!(
            contact_errno(connect(ConnectError::TimedOut)),
            Errno::ETIMEDOUT
        );
        assert_eq!(
            contact_errno(connect(ConnectError::ClosedInHandshake)),
            Errno::EHOSTUNREACH
        );
        assert_eq!(
            contact_errno(SessionError::Nfs(protocol::NfsStatus::Acces)),
            Errno::EACCES
        );
    }
}
