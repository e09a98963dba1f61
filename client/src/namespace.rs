//! The self-certifying namespace (`sfs mount --namespace DIR`): a FUSE file system whose root
//! is empty but for the bookmarks, where looking up `@HOST%PORT,HOSTID` connects to that
//! server (the handshake verifies the HOSTID) and shows its tree.
//!
//! Each server reached this way is an ordinary mount ([`ServerMount`]: one [`Client`] session, its
//! own inode table, lease and INVALIDATE handling) whose node ids live in a range of their own:
//! server `n` (from 1) has its root at `n << 40` and allocates upwards from there, so every
//! kernel request is routed by its node id's high bits without translating anything. Range 0
//! is the namespace's own: the root ([`ROOT`]) and the bookmark symlinks. The kernel adapter is
//! the one every mount has ([`SfsFuse`] over the namespace's [`NodeRanges`]); the namespace answers
//! only what its own nodes are asked.
//!
//! [`SfsFuse`]: crate::fuse::SfsFuse
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
    AccessFlags, Errno, FileAttr, Generation, INodeNo, Notifier, ReplyAttr, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, Request,
};
use parking_lot::{Mutex, MutexGuard};
use protocol::{FileType, ServerName};
use tokio::runtime::Handle;

use crate::bookmarks::{self, Bookmark};
use crate::fuse::{NodeRanges, ROOT, ServerMount, fattr, placeholder_dir, ttl};
use crate::identity::Identity;
use crate::session::{Client, Options, SessionError};

/// Bits of a node id below the server number.
const SHIFT: u32 = crate::fuse::RANGE_SHIFT;

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
    /// Its mount: the operations on its nodes.
    sh: Arc<ServerMount>,
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
pub(crate) struct Namespace {
    rt: Handle,
    /// Watches its own lookups' callers ([`crate::interrupt`]).
    kills: Arc<crate::interrupt::KillWatch>,
    identity: Option<Identity>,
    opts: Options,
    state: Mutex<State>,
    /// First contacts under way, by name: every lookup of a name waits for the same one.
    contacts: Mutex<HashMap<String, tokio::sync::watch::Receiver<Contact>>>,
    notifier: OnceLock<Notifier>,
}

impl Namespace {
    /// An empty namespace whose sessions log in as `identity` with `opts`.
    pub(crate) fn new(rt: Handle, identity: Option<Identity>, opts: Options) -> Arc<Namespace> {
        Arc::new(Namespace {
            kills: crate::interrupt::KillWatch::start(&rt),
            rt,
            identity,
            opts,
            state: Mutex::new(State::default()),
            contacts: Mutex::new(HashMap::new()),
            notifier: OnceLock::new(),
        })
    }

    /// Where INVALIDATEs of servers connected from now on are sent (set once, after mounting).
    pub(crate) fn set_notifier(&self, n: Notifier) {
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
        let sh = ServerMount::with_base(client.clone(), root, None, base);
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
            sh,
            root,
            last_used: Mutex::new(Instant::now()),
        });
        st.servers.push(s.clone());
        st.by_name.insert(key.clone(), n - 1);
        tracing::info!("namespace: connected to {key} (node ids from {base:#x})");
        Ok(s)
    }

    /// Disconnects every server idle for at least `idle`, forever (every `idle / 4`).
    pub(crate) async fn reap_idle(self: Arc<Self>, idle: Duration) {
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
        // Range 0's numbers are the node ids: no server's file shows one of them.
        FileAttr {
            stat_ino: None,
            ..fattr(ino, &a)
        }
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

    /// `.`, `..` and the bookmarks (symlinks), in listing order.
    fn root_entries(&self) -> Vec<(u64, fuser::FileType, String)> {
        let mut v = vec![
            (ROOT, fuser::FileType::Directory, ".".to_owned()),
            (ROOT, fuser::FileType::Directory, "..".to_owned()),
        ];
        for (ino, b) in self.bookmarks() {
            v.push((ino, fuser::FileType::Symlink, b.alias));
        }
        v
    }
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

/// The kernel's requests for a server's node go to that server's mount; the namespace answers
/// only for its own range: the root and the bookmark symlinks.
impl NodeRanges for Arc<Namespace> {
    fn mount(&self, ino: INodeNo) -> Option<Arc<ServerMount>> {
        self.server(ino).map(|s| s.sh.clone())
    }

    fn apart(&self, a: INodeNo, b: INodeNo) -> bool {
        a.0 >> SHIFT != b.0 >> SHIFT
    }

    /// Every server reached through the namespace: the hidden names of its files unlinked
    /// while open go at unmount, as a mount of one server's do.
    fn unmounting(&self) -> Vec<Arc<ServerMount>> {
        self.state().servers.iter().map(|s| s.sh.clone()).collect()
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        if parent.0 != ROOT {
            return reply.error(Errno::ENOTDIR);
        }
        let ns = self.clone();
        let name = name.as_bytes().to_vec();
        let work = async move {
            match ns.lookup_root(name).await {
                Ok((ttl, attr)) => reply.entry(&ttl, &attr, Generation(0)),
                Err(e) => reply.error(e),
            }
        };
        self.rt
            .spawn(self.kills.clone().unless_killed(req.pid(), work));
    }

    fn getattr(&self, ino: INodeNo, reply: ReplyAttr) {
        if ino.0 == ROOT {
            return reply.attr(&NS_TTL, &Namespace::own_attr(ROOT, None));
        }
        match self.bookmarks().into_iter().find(|(i, _)| *i == ino.0) {
            Some((i, b)) => reply.attr(
                &NS_TTL,
                &Namespace::own_attr(i, Some(&b.server.to_string())),
            ),
            None => reply.error(Errno::ESTALE),
        }
    }

    fn readlink(&self, ino: INodeNo, reply: ReplyData) {
        match self.bookmarks().into_iter().find(|(i, _)| *i == ino.0) {
            Some((_, b)) => reply.data(b.server.to_string().as_bytes()),
            None => reply.error(Errno::EINVAL),
        }
    }

    fn opendir(&self, ino: INodeNo, reply: ReplyOpen) {
        if ino.0 == ROOT {
            reply.opened(fuser::FileHandle(0), fuser::FopenFlags::empty())
        } else {
            reply.error(Errno::ENOTDIR)
        }
    }

    fn readdir(&self, _ino: INodeNo, offset: u64, mut reply: ReplyDirectory) {
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

    fn readdirplus(&self, _ino: INodeNo, offset: u64, mut reply: ReplyDirectoryPlus) {
        let marks = self.bookmarks();
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

    fn statfs(&self, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(0, 0, 0, 0, 0, 4096, 255, 4096)
    }

    fn access(&self, _ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        if mask.contains(AccessFlags::W_OK) {
            reply.error(Errno::EACCES)
        } else {
            reply.ok()
        }
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

    #[test]
    fn requests_go_to_the_server_whose_range_holds_their_node() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let ns = Namespace::new(rt.handle().clone(), None, Options::default());
        let first = INodeNo(1 << SHIFT);
        // The namespace's own range, and a range no server has yet.
        assert!(ns.mount(INodeNo(ROOT)).is_none());
        assert!(ns.mount(first).is_none());
        let name: ServerName = "@127.0.0.1%9,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .parse()
            .unwrap();
        let client = Client::new(&name, None, Options::default());
        let root = protocol::FileHandle::from_bytes([1; 48]);
        let sh = ServerMount::with_base(client.clone(), root, None, first.0);
        ns.state().servers.push(Arc::new(Server {
            name: name.to_string(),
            client,
            sh: sh.clone(),
            root,
            last_used: Mutex::new(Instant::now()),
        }));
        for ino in [first.0, first.0 + 7, (2 << SHIFT) - 1] {
            let routed = ns.mount(INodeNo(ino)).expect("the first server's range");
            assert!(Arc::ptr_eq(&routed, &sh));
        }
        assert!(ns.mount(INodeNo(ROOT)).is_none());
        assert!(ns.mount(INodeNo(2 << SHIFT)).is_none());
        // A rename or link between ranges is EXDEV; within one it goes to the server.
        assert!(ns.apart(INodeNo(ROOT), first));
        assert!(ns.apart(first, INodeNo(2 << SHIFT)));
        assert!(!ns.apart(first, INodeNo(first.0 + 7)));
        assert!(!ns.apart(INodeNo(ROOT), INodeNo(ROOT + 1)));
    }
}
