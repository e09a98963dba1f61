//! One typed method per NFS operation: builds the request, checks the reply is of the
//! operation's kind, and keeps the attribute cache in step with what the reply says.

use protocol::client::UnsealedRequest;
use protocol::{
    Attr, CreateHow, Data, DirEntryPlus, FileHandle, FsStat, NewObject, NfsStatus, Proc, ReplyBody,
    RequestOp, SetAttr, StableHow, WriteHead,
};

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use super::Client;
use super::Sent;
use super::error::{ProtocolError, SessionError};
use super::limits::{MAX_DIR_ENTRIES, MAX_DIR_NAME_BYTES, MAX_DIR_PAGES};
use crate::cache::{Settled, Stamp, Unnamed, XattrAnswer};

/// Binds the fields of the reply an operation expects (`let`-else on `pattern = reply`); any
/// other kind of reply returns [`Client::unexpected`] from the calling operation.
macro_rules! let_reply {
    ($client:expr, $pattern:pat = $reply:expr) => {
        let reply = $reply;
        let $pattern = reply else {
            return Err($client.unexpected(&reply));
        };
    };
}

impl Client {
    /// MOUNT: the handle of `path` below the server's root.
    pub(crate) async fn mount(&self, path: &str) -> Result<(FileHandle, Attr), SessionError> {
        let path = if path.is_empty() { "/" } else { path };
        let op = RequestOp::Mount {
            path: path.as_bytes().to_vec(),
        };
        let since = self.inner.cache.stamp();
        let_reply!(self, ReplyBody::Mount { fh, attr } = self.call(op).await?);
        self.inner.cache.put(fh, attr, since);
        Ok((fh, attr))
    }

    /// Attributes, from the cache while their lease lasts.
    pub(crate) async fn getattr(&self, fh: &FileHandle) -> Result<Attr, SessionError> {
        if let Some(a) = self.inner.cache.get(fh) {
            return Ok(a);
        }
        self.getattr_fresh(fh).await
    }

    /// Attributes from the server, bypassing the cache.
    pub(crate) async fn getattr_fresh(&self, fh: &FileHandle) -> Result<Attr, SessionError> {
        let op = RequestOp::GetAttr { fh: *fh };
        let since = self.inner.cache.stamp();
        let_reply!(self, ReplyBody::GetAttr { attr } = self.call(op).await?);
        self.inner.cache.put(*fh, attr, since);
        Ok(attr)
    }

    /// Whether the cache knows `name` absent from `dir` for this session's user now (a
    /// directory we made: [`crate::cache::AttrCache::known_absent`]); a LOOKUP of it would be
    /// answered `NoEnt` without a request.
    pub(crate) fn known_absent(&self, dir: &FileHandle, name: &[u8]) -> bool {
        self.authno_now()
            .is_some_and(|authno| self.inner.cache.known_absent(dir, name, authno))
    }

    /// LOOKUP.
    pub(crate) async fn lookup(
        &self,
        dir: &FileHandle,
        name: &[u8],
    ) -> Result<(FileHandle, Attr), SessionError> {
        if self.known_absent(dir, name) {
            return Err(SessionError::Nfs(NfsStatus::NoEnt));
        }
        let op = RequestOp::Lookup {
            dir: *dir,
            name: name.to_vec(),
        };
        let since = self.inner.cache.stamp();
        let_reply!(
            self,
            ReplyBody::Lookup { fh, attr, dir_attr } = self.call(op).await?
        );
        if let Some(d) = dir_attr {
            self.inner.cache.put(*dir, d, since);
        }
        let attr = match attr {
            Some(a) => {
                self.inner.cache.put(fh, a, since);
                a
            }
            None => self.getattr(&fh).await?,
        };
        Ok((fh, attr))
    }

    /// [`Client::access`] if its answer is cached (for answers on the kernel's thread).
    pub(crate) fn access_cached(&self, fh: &FileHandle, bits: u32) -> Option<u32> {
        let authno = self.authno_now()?;
        self.inner.cache.get_access(fh, authno, bits)
    }

    /// ACCESS, cached per user while the attributes' lease lasts (the FUSE mount asks it for
    /// `access(2)` and `open(2)`; nfsserve answers ACCESS itself from the attributes).
    pub(crate) async fn access(&self, fh: &FileHandle, bits: u32) -> Result<u32, SessionError> {
        let authno = self.authno().await?;
        if let Some(g) = self.inner.cache.get_access(fh, authno, bits) {
            return Ok(g);
        }
        let op = RequestOp::Access {
            fh: *fh,
            access: bits,
        };
        let since = self.inner.cache.stamp();
        let_reply!(
            self,
            ReplyBody::Access { attr, access } = self.call(op).await?
        );
        if let Some(a) = &attr {
            self.inner
                .cache
                .put_access(*fh, authno, (bits, access), a.lease_ms, since);
        }
        self.note(fh, &attr, since);
        Ok(access)
    }

    /// Asks whether this user may remove any entry of directory `dir` (ACCESS DELETE and
    /// LOOKUP), and remembers a grant for a directory that is not sticky
    /// ([`crate::cache`]'s `removable_dirs`), for removals answered before the server's
    /// answer. Whether it was granted.
    pub(crate) async fn ask_removable(&self, dir: &FileHandle) -> Result<bool, SessionError> {
        let authno = self.authno().await?;
        let epoch = self.inner.cache.removable_epoch();
        let bits = protocol::access::DELETE | protocol::access::LOOKUP;
        let op = RequestOp::Access {
            fh: *dir,
            access: bits,
        };
        let since = self.inner.cache.stamp();
        let_reply!(
            self,
            ReplyBody::Access { attr, access } = self.call(op).await?
        );
        let granted = access & bits == bits;
        if let Some(a) = &attr {
            self.inner
                .cache
                .put_access(*dir, authno, (bits, access), a.lease_ms, since);
            if a.ftype == protocol::FileType::Directory {
                let cache = &self.inner.cache;
                cache.removable_answered(*dir, authno, a, granted, epoch);
            }
        }
        self.note(dir, &attr, since);
        Ok(granted)
    }

    /// Whether the server last said this user may remove any entry of `dir`
    /// ([`Client::ask_removable`]), and whether that answer (either way) still holds; known
    /// without waiting.
    pub(crate) fn removable_now(&self, dir: &FileHandle) -> (bool, bool) {
        self.authno_now().map_or((false, false), |authno| {
            self.inner.cache.removable(dir, authno)
        })
    }

    /// SETATTR.
    pub(crate) async fn setattr(
        &self,
        fh: &FileHandle,
        attr: SetAttr,
    ) -> Result<Attr, SessionError> {
        self.setattr_sent(fh, attr, &mut |_| {}).await
    }

    /// [`Client::setattr`], telling `on_sent` where each attempt went.
    pub(crate) async fn setattr_sent(
        &self,
        fh: &FileHandle,
        attr: SetAttr,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<Attr, SessionError> {
        self.inner.cache.setattr_sending(fh);
        let change = self.inner.cache.begin(fh);
        let op = RequestOp::SetAttr {
            fh: *fh,
            attr,
            guard: None,
        };
        let_reply!(
            self,
            ReplyBody::SetAttr { attr } = self.call_sent(op, on_sent).await?
        );
        change.end(attr);
        match attr {
            Some(a) => Ok(a),
            None => self.getattr_fresh(fh).await,
        }
    }

    /// READLINK.
    pub(crate) async fn readlink(&self, fh: &FileHandle) -> Result<Vec<u8>, SessionError> {
        let op = RequestOp::ReadLink { fh: *fh };
        let_reply!(
            self,
            ReplyBody::ReadLink { target, .. } = self.call(op).await?
        );
        Ok(target)
    }

    /// One READ of at most the negotiated size: (data, eof).
    pub(crate) async fn read(
        &self,
        fh: &FileHandle,
        offset: u64,
        count: u32,
    ) -> Result<(Data, bool), SessionError> {
        let (rmax, _) = self.io_sizes().await?;
        let count = count.min(rmax);
        let op = RequestOp::Read {
            fh: *fh,
            offset,
            count,
        };
        let since = self.inner.cache.stamp();
        let_reply!(
            self,
            ReplyBody::Read { attr, eof, data } = self.call(op).await?
        );
        // Callers write what comes back at `offset`: more than asked would be written over
        // what the next request brings, or past the end.
        if data.len() > count as usize {
            return Err(self.protocol_error(ProtocolError::ReadTooLong {
                asked: count,
                got: data.len(),
            }));
        }
        if let Some(a) = attr {
            self.inner.cache.put(*fh, a, since);
        }
        Ok((data, eof))
    }

    /// Whether the server of the current connection applies a SETATTR only after the WRITEs
    /// of its file sent before it ([`protocol::handshake::has_ordered_setattr`]); connects if
    /// needed.
    pub(crate) async fn orders_setattr(&self) -> Result<bool, SessionError> {
        let version = self.connection().await?.version;
        Ok(protocol::handshake::has_ordered_setattr(version))
    }

    /// One WRITE of at most the negotiated size: (count written, verifier).
    pub(crate) async fn write(
        &self,
        fh: &FileHandle,
        offset: u64,
        stable: StableHow,
        data: &[u8],
    ) -> Result<(u32, [u8; 8]), SessionError> {
        self.write_sent(fh, offset, stable, data, &mut |_| {}).await
    }

    /// [`Client::write`], telling `on_sent` where each attempt went.
    pub(crate) async fn write_sent(
        &self,
        fh: &FileHandle,
        offset: u64,
        stable: StableHow,
        data: &[u8],
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<(u32, [u8; 8]), SessionError> {
        self.write_with(fh, offset, stable, data.len(), on_sent, |dst| {
            dst.copy_from_slice(data);
            Ok(data.len())
        })
        .await
    }

    /// WRITE of `len` bytes of `file` from `offset`, to the same offset on the server, read
    /// straight into the request (and read again if the request must be sent again: a sent
    /// request is sealed in place). A file shorter than `offset + len` is an error.
    /// `on_sent` is told where each attempt went.
    pub(super) async fn write_from_file(
        &self,
        fh: &FileHandle,
        offset: u64,
        stable: StableHow,
        file: &std::fs::File,
        len: usize,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<(u32, [u8; 8]), SessionError> {
        use std::os::unix::fs::FileExt;
        self.write_with(fh, offset, stable, len, on_sent, |dst| {
            file.read_exact_at(dst, offset).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    std::io::Error::other("the file shrank while it was being copied")
                } else {
                    e
                }
            })?;
            Ok(len)
        })
        .await
    }

    /// WRITE of the `len` bytes `fill` puts in the request.
    async fn write_with(
        &self,
        fh: &FileHandle,
        offset: u64,
        stable: StableHow,
        len: usize,
        on_sent: &mut (dyn FnMut(Sent) + Send),
        fill: impl Fn(&mut [u8]) -> std::io::Result<usize>,
    ) -> Result<(u32, [u8; 8]), SessionError> {
        let change = self.inner.cache.begin_data(fh);
        let encode = |id, authno, ticket, buf| {
            let head = WriteHead {
                id,
                authno,
                fh,
                offset,
                stable,
                ticket,
            };
            UnsealedRequest::write(buf, &head, len, &fill)
        };
        let reply = self
            .call_with(
                Proc::Write,
                Proc::Write.is_idempotent(),
                len,
                encode,
                on_sent,
            )
            .await?;
        let_reply!(
            self,
            ReplyBody::Write {
                attr,
                count,
                verifier,
                ..
            } = reply
        );
        change.end(attr);
        Ok((count, verifier))
    }

    /// COMMIT: the write verifier after the data is stable.
    pub(crate) async fn commit(&self, fh: &FileHandle) -> Result<[u8; 8], SessionError> {
        self.commit_sent(fh, &mut |_| {}).await
    }

    /// [`Client::commit`], telling `on_sent` where each attempt went.
    pub(super) async fn commit_sent(
        &self,
        fh: &FileHandle,
        on_sent: &mut (dyn FnMut(Sent) + Send),
    ) -> Result<[u8; 8], SessionError> {
        let op = RequestOp::Commit {
            fh: *fh,
            offset: 0,
            count: 0,
        };
        let change = self.inner.cache.begin_data(fh);
        let_reply!(
            self,
            ReplyBody::Commit { verifier, attr } = self.call_sent(op, on_sent).await?
        );
        change.end(attr);
        Ok(verifier)
    }

    /// All entries of a directory (READDIRPLUS, following cookies to the end), within the
    /// bounds of [`super::limits`]: a listing that goes past them, or asks for a cookie it
    /// asked for before, is an error (a hostile server could otherwise keep us listing, and
    /// growing, for ever).
    pub(crate) async fn readdir_all(
        &self,
        dir: &FileHandle,
    ) -> Result<Vec<DirEntryPlus>, SessionError> {
        let mut out = Vec::new();
        let mut cookie = 0u64;
        let mut verifier = [0u8; 8];
        let mut asked = HashSet::new();
        let mut name_bytes = 0usize;
        let endless = |why: String| self.protocol_error(ProtocolError::EndlessListing(why));
        // LISTDIR where the server speaks it: the answer says which entries have no extended
        // attributes, so `ls -l` asks no LISTXATTR or GETXATTR of them.
        let conn = self.connection().await?;
        let listdir = protocol::handshake::has_listdir(conn.version)
            && !self.inner.no_listdir.load(Ordering::Relaxed);
        let mut xattrs_by = if listdir {
            Some(self.authno_on(&conn).await?)
        } else {
            None
        };
        loop {
            if asked.len() >= MAX_DIR_PAGES {
                return Err(endless(format!("more than {MAX_DIR_PAGES} pages")));
            }
            if !asked.insert(cookie) {
                return Err(endless(format!("cookie {cookie} came back")));
            }
            let (dircount, maxcount) = (64 * 1024, 256 * 1024);
            let op = match xattrs_by {
                Some(_) => RequestOp::ListDir {
                    dir: *dir,
                    cookie,
                    verifier,
                    dircount,
                    maxcount,
                },
                None => RequestOp::ReadDirPlus {
                    dir: *dir,
                    cookie,
                    verifier,
                    dircount,
                    maxcount,
                },
            };
            let since = self.inner.cache.stamp();
            let (page, bare) = match self.call(op).await {
                Ok(ReplyBody::ReadDirPlus(page)) if xattrs_by.is_none() => (page, Vec::new()),
                Ok(ReplyBody::ListDir { page, bare }) if xattrs_by.is_some() => (page, bare),
                // A backend without it (NFS): READDIRPLUS from now on.
                Err(SessionError::Nfs(NfsStatus::NotSupp)) if xattrs_by.is_some() => {
                    self.inner.no_listdir.store(true, Ordering::Relaxed);
                    xattrs_by = None;
                    asked.remove(&cookie);
                    continue;
                }
                Ok(other) => return Err(self.unexpected(&other)),
                Err(e) => return Err(e),
            };
            if let Some(a) = page.dir_attr {
                self.inner.cache.put(*dir, a, since);
            }
            verifier = page.verifier;
            let n = page.entries.len();
            if out.len() + n > MAX_DIR_ENTRIES {
                return Err(endless(format!("more than {MAX_DIR_ENTRIES} entries")));
            }
            name_bytes += page.entries.iter().map(|e| e.name.len()).sum::<usize>();
            if name_bytes > MAX_DIR_NAME_BYTES {
                return Err(endless(format!(
                    "more than {MAX_DIR_NAME_BYTES} bytes of names"
                )));
            }
            for (i, e) in page.entries.into_iter().enumerate() {
                cookie = e.cookie;
                // A name the server lists is no longer known absent (one a program on the
                // server's disk made: no INVALIDATE tells us of it).
                self.inner.cache.naming(dir, &e.name);
                if let (Some(fh), Some(a)) = (&e.fh, &e.attr) {
                    self.inner.cache.put(*fh, *a, since);
                    // What LISTXATTR would have answered this user: no names (kept, as its
                    // answer would be, only with the attributes just cached).
                    if let (Some(authno), true) = (xattrs_by, bare.get(i) == Some(&true)) {
                        let key = (authno, None);
                        let none = XattrAnswer::Names(Vec::new());
                        self.inner.cache.put_xattr(*fh, key, none, since);
                    }
                }
                out.push(e);
            }
            if page.eof || n == 0 {
                return Ok(out);
            }
        }
    }

    /// CREATE (unchecked: truncates an existing file when `size` is set to 0).
    pub(crate) async fn create(
        &self,
        dir: &FileHandle,
        name: &[u8],
        how: CreateHow,
    ) -> Result<Made, SessionError> {
        // Unchecked may have opened an existing file; the others made this one.
        let made = !matches!(how, CreateHow::Unchecked(_));
        self.inner.cache.naming(dir, name);
        let change = self.inner.cache.begin(dir);
        let since = self.inner.cache.stamp();
        let op = RequestOp::Create {
            dir: *dir,
            name: name.to_vec(),
            how,
        };
        let_reply!(self, ReplyBody::Create(o) = self.call(op).await?);
        let settled = change.end(o.dir_attr);
        self.made(dir, name, o, (since, settled), made).await
    }

    /// MKDIR.
    pub(crate) async fn mkdir(
        &self,
        dir: &FileHandle,
        name: &[u8],
        attr: SetAttr,
    ) -> Result<Made, SessionError> {
        self.inner.cache.naming(dir, name);
        let change = self.inner.cache.begin(dir);
        let since = self.inner.cache.stamp();
        let op = RequestOp::Mkdir {
            dir: *dir,
            name: name.to_vec(),
            attr,
        };
        let_reply!(self, ReplyBody::Mkdir(o) = self.call(op).await?);
        let settled = change.end(o.dir_attr);
        let known = o.fh.is_some();
        let made = self.made(dir, name, o, (since, settled), true).await?;
        if known && let Some(authno) = self.authno_now() {
            self.inner.cache.dir_made(&made.fh, &made.attr, authno);
        }
        Ok(made)
    }

    /// [`Client::new_object`], with how the change of `dir` that made it settled, for an
    /// object the request made new when `made`: the cache then knows it has no
    /// `security.capability` ([`crate::cache::AttrCache::made_new`]). Not when the reply
    /// carries no handle: the name looked up may be another object by then.
    pub(super) async fn made(
        &self,
        dir: &FileHandle,
        name: &[u8],
        o: NewObject,
        (since, settled): (Stamp, Option<Settled>),
        made: bool,
    ) -> Result<Made, SessionError> {
        let known = made && o.fh.is_some();
        let (fh, attr) = self.new_object(dir, name, o, since).await?;
        if known {
            self.inner.cache.made_new(&fh, &attr);
            if let Some(authno) = self.authno_now() {
                self.inner.cache.made_new_access(&fh, authno, &attr);
            }
        }
        Ok(Made { fh, attr, settled })
    }

    /// SYMLINK.
    pub(crate) async fn symlink(
        &self,
        dir: &FileHandle,
        name: &[u8],
        target: &[u8],
        attr: SetAttr,
    ) -> Result<Made, SessionError> {
        self.inner.cache.naming(dir, name);
        let change = self.inner.cache.begin(dir);
        let since = self.inner.cache.stamp();
        let op = RequestOp::Symlink {
            dir: *dir,
            name: name.to_vec(),
            attr,
            target: target.to_vec(),
        };
        let_reply!(self, ReplyBody::Symlink(o) = self.call(op).await?);
        let settled = change.end(o.dir_attr);
        self.made(dir, name, o, (since, settled), false).await
    }

    /// The handle and attributes of an object just made (asked for when the reply has none).
    /// MKNOD: a FIFO, socket or device node (the server makes it as the caller; the kernel
    /// there decides whether that user may make a device).
    pub(crate) async fn mknod(
        &self,
        dir: &FileHandle,
        name: &[u8],
        kind: protocol::SpecialKind,
        attr: SetAttr,
    ) -> Result<Made, SessionError> {
        self.inner.cache.naming(dir, name);
        let change = self.inner.cache.begin(dir);
        let since = self.inner.cache.stamp();
        let op = RequestOp::Mknod {
            dir: *dir,
            name: name.to_vec(),
            kind,
            attr,
        };
        let_reply!(self, ReplyBody::Mknod(o) = self.call(op).await?);
        let settled = change.end(o.dir_attr);
        self.made(dir, name, o, (since, settled), false).await
    }

    /// The handle and attributes of the object just made as `name` in `dir`: from the reply,
    /// or, when the server made it but could not look it up, from a LOOKUP (which, unlike the
    /// operation that made it, can be retried).
    ///
    /// `since` is the stamp taken before the request: the object may be an existing file that
    /// CREATE truncated, so replies about it sent before are refused from now on.
    async fn new_object(
        &self,
        dir: &FileHandle,
        name: &[u8],
        o: NewObject,
        since: Stamp,
    ) -> Result<(FileHandle, Attr), SessionError> {
        let Some(fh) = o.fh else {
            return self.lookup(dir, name).await;
        };
        self.inner.cache.made(&fh, o.attr, since);
        match o.attr {
            Some(a) => Ok((fh, a)),
            None => Ok((fh, self.getattr_fresh(&fh).await?)),
        }
    }

    /// What a REMOVE, RMDIR or RENAME that may change `unnamed` objects without naming them
    /// holds back of the cached attributes: nothing where the server tells us of each such
    /// object before its reply, as it tells other clients (an INVALIDATE, which the cache
    /// takes before the reply; [`protocol::handshake::tells_unnamed`]). Asked of the current
    /// connection without waiting (a removal answered before the server must not wait here,
    /// nor any request for another's turn at the connection's lock); with none at hand it
    /// holds back as with a server that does not tell. A reconnect before the request goes
    /// out drops the whole cache anyway.
    fn unnamed(&self, unnamed: Unnamed) -> Unnamed {
        let now = self.inner.conn_now.lock().clone();
        if now.is_some_and(|c| protocol::handshake::tells_unnamed(c.version)) {
            Unnamed::Nothing
        } else {
            unnamed
        }
    }

    /// Whether the server tells this client of changes made behind its back, on its own disk
    /// ([`protocol::handshake::tells_disk_changes`]), as of the current connection (no: with
    /// none at hand). A reconnect drops the whole cache, so what was kept on the strength of
    /// it never outlives the connection that said so.
    pub(crate) fn tells_disk_changes(&self) -> bool {
        let now = self.inner.conn_now.lock().clone();
        now.is_some_and(|c| protocol::handshake::tells_disk_changes(c.version))
    }

    /// REMOVE or RMDIR; how the directory's change settled when the server tells us of the
    /// object removed (what we know of it then stays true: [`Client::unnamed`]).
    pub(crate) async fn remove(
        &self,
        dir: &FileHandle,
        name: &[u8],
        is_dir: bool,
    ) -> Result<Option<Settled>, SessionError> {
        let unnamed = if is_dir {
            Unnamed::Dirs
        } else {
            Unnamed::Files
        };
        let unnamed = self.unnamed(unnamed);
        let change = self.inner.cache.begin_unnamed(dir, unnamed);
        let op = if is_dir {
            RequestOp::Rmdir {
                dir: *dir,
                name: name.to_vec(),
            }
        } else {
            RequestOp::Remove {
                dir: *dir,
                name: name.to_vec(),
            }
        };
        let dir_attr = match self.call(op).await? {
            ReplyBody::Remove { dir_attr } | ReplyBody::Rmdir { dir_attr } => dir_attr,
            _ => None,
        };
        let settled = change.end(dir_attr);
        Ok(settled.filter(|_| unnamed == Unnamed::Nothing))
    }

    /// LINK: a new name `dir/name` for `fh`; the object's attributes afterwards.
    pub(crate) async fn link(
        &self,
        fh: &FileHandle,
        dir: &FileHandle,
        name: &[u8],
    ) -> Result<Made, SessionError> {
        self.inner.cache.naming(dir, name);
        let dir_change = self.inner.cache.begin(dir);
        let change = self.inner.cache.begin(fh);
        let op = RequestOp::Link {
            fh: *fh,
            dir: *dir,
            name: name.to_vec(),
        };
        let_reply!(
            self,
            ReplyBody::Link { attr, dir_attr } = self.call(op).await?
        );
        change.end(attr);
        let settled = dir_change.end(dir_attr);
        let attr = match attr {
            Some(a) => a,
            None => self.getattr_fresh(fh).await?,
        };
        Ok(Made {
            fh: *fh,
            attr,
            settled,
        })
    }

    /// OPEN: the server keeps `fh` alive for this session's user until [`Client::close`] or
    /// the connection ends, so the file can lose its last name and still be used through its
    /// handle. A server without open states answers `NotSupp`.
    pub(crate) async fn open(&self, fh: &FileHandle) -> Result<(), SessionError> {
        let op = RequestOp::Open { fh: *fh };
        let since = self.inner.cache.stamp();
        let_reply!(self, ReplyBody::Open { attr } = self.call(op).await?);
        self.note(fh, &attr, since);
        Ok(())
    }

    /// CLOSE: drops this session's user's open state on `fh` (OPEN's, or the one CREATE keeps
    /// for a file made with a mode that denies its owner reading or writing).
    pub(crate) async fn close(&self, fh: &FileHandle) -> Result<(), SessionError> {
        let_reply!(
            self,
            ReplyBody::Close = self.call(RequestOp::Close { fh: *fh }).await?
        );
        Ok(())
    }

    /// FSSTAT.
    pub(crate) async fn fsstat(&self, fh: &FileHandle) -> Result<FsStat, SessionError> {
        let op = RequestOp::FsStat { fh: *fh };
        let since = self.inner.cache.stamp();
        let_reply!(self, ReplyBody::FsStat(s) = self.call(op).await?);
        self.note(fh, &s.attr, since);
        Ok(s)
    }

    /// RENAME.
    pub(crate) async fn rename(
        &self,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
    ) -> Result<Option<Settled>, SessionError> {
        let op = RequestOp::Rename {
            from_dir: *from_dir,
            from_name: from_name.to_vec(),
            to_dir: *to_dir,
            to_name: to_name.to_vec(),
        };
        self.renaming(op, from_dir, (to_dir, to_name)).await
    }

    /// Sends RENAME or RENAME2 `op` of a name in `from_dir` to `to_name` in `to_dir`,
    /// bracketed as a change of both (once when they are one); how the change of `from_dir`
    /// settled when the server tells us of the objects moved and replaced
    /// ([`Client::unnamed`]).
    async fn renaming(
        &self,
        op: RequestOp,
        from_dir: &FileHandle,
        (to_dir, to_name): (&FileHandle, &[u8]),
    ) -> Result<Option<Settled>, SessionError> {
        self.inner.cache.naming(to_dir, to_name);
        let unnamed = self.unnamed(Unnamed::Both);
        let from = self.inner.cache.begin_unnamed(from_dir, unnamed);
        let to = (to_dir != from_dir).then(|| self.inner.cache.begin(to_dir));
        let_reply!(
            self,
            (ReplyBody::Rename {
                from_dir_attr,
                to_dir_attr
            } | ReplyBody::Rename2 {
                from_dir_attr,
                to_dir_attr
            }) = self.call(op).await?
        );
        // Ended without its reply: the listings of the directory the name went to are read
        // again (the mount applies only `from_dir`'s change, [`Settled`]).
        drop(to);
        // One directory: its attributes after the rename, in either field.
        let from_attr = if to_dir == from_dir {
            from_dir_attr.or(to_dir_attr)
        } else {
            from_dir_attr
        };
        Ok(from.end(from_attr).filter(|_| unnamed == Unnamed::Nothing))
    }

    /// RENAME2 with `flags` ([`protocol::rename_flags`]): with NOREPLACE the server fails with
    /// `Exist` rather than replace `to_name`, in the same system call as the rename.
    pub(crate) async fn rename2(
        &self,
        from_dir: &FileHandle,
        from_name: &[u8],
        to_dir: &FileHandle,
        to_name: &[u8],
        flags: u32,
    ) -> Result<Option<Settled>, SessionError> {
        let op = RequestOp::Rename2 {
            from_dir: *from_dir,
            from_name: from_name.to_vec(),
            to_dir: *to_dir,
            to_name: to_name.to_vec(),
            flags,
        };
        self.renaming(op, from_dir, (to_dir, to_name)).await
    }
}

/// An object a request made (or CREATE opened, or LINK named again) as a name in a directory.
#[derive(Debug)]
pub(crate) struct Made {
    pub(crate) fh: FileHandle,
    pub(crate) attr: Attr,
    /// How the directory's change settled, when it did ([`Settled`]).
    pub(crate) settled: Option<Settled>,
}
