//! Loopback NFSv3 server (nfsserve) forwarding every operation over the session.
//!
//! nfsserve names objects by a 64-bit file id and builds its own NFS file handles from it, so
//! this module keeps a two-way table between those ids and the server's opaque handles; the id
//! is also what the kernel sees as the inode number. Ids are assigned in the order objects are
//! met (the root is 1), so they are stable for the life of one `sfs nfs` process, and the
//! server's handles behind them stay valid across reconnects and server restarts.
//!
//! What nfsserve 0.11 cannot express, and what is done instead:
//! - **Caller uid**: the trait gets no RPC credentials, so every operation acts as the sfs
//!   identity of this process (its LOGIN). That is why only connections from this user's own
//!   sockets and root's (the kernel's NFS client) are served (`peer_owner`, checked in
//!   `commands::mount`); local permission checks still happen in the kernel against the
//!   attributes we report.
//! - **COMMIT**: nfsserve answers COMMIT itself without asking us, so WRITEs are forwarded as
//!   DATA_SYNC: when the kernel hears "written", the data is on the server's disk.
//! - **LINK**: not in the trait; nfsserve answers NOTSUPP. (FSINFO advertises no LINK.)
//! - **READDIR cookies**: nfsserve pages by "start after file id"; we read the whole directory
//!   with READDIRPLUS (following the server's cookies) and page from that.
//! - **Exclusive CREATE**: the verifier is not passed on, so it becomes a GUARDED create
//!   (same "fail if it exists" semantics, not retry-safe).

use std::collections::HashMap;

use async_trait::async_trait;
use nfsserve::nfs::{
    fattr3, fileid3, filename3, ftype3, nfspath3, nfsstat3, nfstime3, sattr3, set_atime, set_gid3,
    set_mode3, set_mtime, set_size3, set_uid3, specdata3,
};
use nfsserve::vfs::{DirEntry, NFSFileSystem, ReadDirResult, VFSCapabilities};
use parking_lot::{Mutex, MutexGuard};
use protocol::{Attr, CreateHow, FileHandle, FileType, NfsStatus, SetAttr, SetTime, StableHow};

use crate::session::{Client, SessionError};

/// The id nfsserve uses for the root.
const ROOT_ID: fileid3 = 1;

#[derive(Default)]
struct Ids {
    by_id: HashMap<fileid3, FileHandle>,
    by_fh: HashMap<FileHandle, fileid3>,
    next: fileid3,
}

/// The NFS view of one server's tree.
pub(crate) struct SfsNfs {
    client: Client,
    ids: Mutex<Ids>,
}

impl SfsNfs {
    /// A file system rooted at `root` on `client`'s server.
    pub(crate) fn new(client: Client, root: FileHandle) -> SfsNfs {
        let mut ids = Ids {
            next: ROOT_ID + 1,
            ..Ids::default()
        };
        ids.by_id.insert(ROOT_ID, root);
        ids.by_fh.insert(root, ROOT_ID);
        SfsNfs {
            client,
            ids: Mutex::new(ids),
        }
    }

    fn ids(&self) -> MutexGuard<'_, Ids> {
        self.ids.lock()
    }

    fn fh(&self, id: fileid3) -> Result<FileHandle, nfsstat3> {
        self.ids()
            .by_id
            .get(&id)
            .copied()
            .ok_or(nfsstat3::NFS3ERR_STALE)
    }

    fn id(&self, fh: FileHandle) -> fileid3 {
        let mut ids = self.ids();
        if let Some(id) = ids.by_fh.get(&fh) {
            return *id;
        }
        let id = ids.next;
        ids.next += 1;
        ids.by_id.insert(id, fh);
        ids.by_fh.insert(fh, id);
        id
    }

    fn fattr(&self, id: fileid3, a: &Attr) -> fattr3 {
        fattr3 {
            ftype: match a.ftype {
                FileType::Regular => ftype3::NF3REG,
                FileType::Directory => ftype3::NF3DIR,
                FileType::Block => ftype3::NF3BLK,
                FileType::Char => ftype3::NF3CHR,
                FileType::Symlink => ftype3::NF3LNK,
                FileType::Socket => ftype3::NF3SOCK,
                FileType::Fifo => ftype3::NF3FIFO,
            },
            mode: a.mode & 0o7777,
            nlink: a.nlink,
            uid: a.uid,
            gid: a.gid,
            size: a.size,
            used: a.used,
            rdev: specdata3 {
                specdata1: a.rdev.0,
                specdata2: a.rdev.1,
            },
            fsid: a.fsid,
            fileid: id,
            atime: time3(a.atime),
            mtime: time3(a.mtime),
            ctime: time3(a.ctime),
        }
    }

    async fn attr_of(&self, id: fileid3) -> Result<fattr3, nfsstat3> {
        let fh = self.fh(id)?;
        let a = self.client.getattr(&fh).await.map_err(nfs_err)?;
        Ok(self.fattr(id, &a))
    }
}

fn time3(t: protocol::Time) -> nfstime3 {
    nfstime3 {
        seconds: u32::try_from(t.seconds.max(0)).unwrap_or(u32::MAX),
        nseconds: t.nanos,
    }
}

fn time_from3(t: nfstime3) -> protocol::Time {
    protocol::Time {
        seconds: i64::from(t.seconds),
        nanos: t.nseconds.min(999_999_999),
    }
}

/// Maps a session error to the NFS status the kernel should see.
fn nfs_err(e: SessionError) -> nfsstat3 {
    match e {
        SessionError::Nfs(s) => status3(s),
        SessionError::Handshake { .. } | SessionError::Protocol { .. } => {
            nfsstat3::NFS3ERR_SERVERFAULT
        }
        SessionError::Connect { .. }
        | SessionError::NotRetried { .. }
        | SessionError::Timeout { .. }
        | SessionError::Source(_) => nfsstat3::NFS3ERR_IO,
    }
}

/// Status codes are NFSv3's on both sides; unknown ones become SERVERFAULT.
fn status3(s: NfsStatus) -> nfsstat3 {
    use num_like::from_code;
    from_code(s.code()).unwrap_or(nfsstat3::NFS3ERR_SERVERFAULT)
}

mod num_like {
    use nfsserve::nfs::nfsstat3;

    /// nfsstat3 by wire value.
    pub(super) fn from_code(c: u32) -> Option<nfsstat3> {
        use nfsstat3::*;
        Some(match c {
            1 => NFS3ERR_PERM,
            2 => NFS3ERR_NOENT,
            5 => NFS3ERR_IO,
            6 => NFS3ERR_NXIO,
            13 => NFS3ERR_ACCES,
            17 => NFS3ERR_EXIST,
            18 => NFS3ERR_XDEV,
            19 => NFS3ERR_NODEV,
            20 => NFS3ERR_NOTDIR,
            21 => NFS3ERR_ISDIR,
            22 => NFS3ERR_INVAL,
            27 => NFS3ERR_FBIG,
            28 => NFS3ERR_NOSPC,
            30 => NFS3ERR_ROFS,
            31 => NFS3ERR_MLINK,
            63 => NFS3ERR_NAMETOOLONG,
            66 => NFS3ERR_NOTEMPTY,
            69 => NFS3ERR_DQUOT,
            70 => NFS3ERR_STALE,
            71 => NFS3ERR_REMOTE,
            10001 => NFS3ERR_BADHANDLE,
            10002 => NFS3ERR_NOT_SYNC,
            10003 => NFS3ERR_BAD_COOKIE,
            10004 => NFS3ERR_NOTSUPP,
            10005 => NFS3ERR_TOOSMALL,
            10006 => NFS3ERR_SERVERFAULT,
            10007 => NFS3ERR_BADTYPE,
            10008 => NFS3ERR_JUKEBOX,
            _ => return None,
        })
    }
}

/// Converts NFS set-attributes to the protocol's.
fn setattr_from(s: &sattr3) -> SetAttr {
    SetAttr {
        mode: match s.mode {
            set_mode3::mode(m) => Some(m),
            set_mode3::Void => None,
        },
        uid: match s.uid {
            set_uid3::uid(u) => Some(u),
            set_uid3::Void => None,
        },
        gid: match s.gid {
            set_gid3::gid(g) => Some(g),
            set_gid3::Void => None,
        },
        size: match s.size {
            set_size3::size(n) => Some(n),
            set_size3::Void => None,
        },
        atime: match s.atime {
            set_atime::DONT_CHANGE => SetTime::DontChange,
            set_atime::SET_TO_SERVER_TIME => SetTime::ServerTime,
            set_atime::SET_TO_CLIENT_TIME(t) => SetTime::ClientTime(time_from3(t)),
        },
        mtime: match s.mtime {
            set_mtime::DONT_CHANGE => SetTime::DontChange,
            set_mtime::SET_TO_SERVER_TIME => SetTime::ServerTime,
            set_mtime::SET_TO_CLIENT_TIME(t) => SetTime::ClientTime(time_from3(t)),
        },
    }
}

#[async_trait]
impl NFSFileSystem for SfsNfs {
    fn capabilities(&self) -> VFSCapabilities {
        VFSCapabilities::ReadWrite
    }

    fn root_dir(&self) -> fileid3 {
        ROOT_ID
    }

    async fn lookup(&self, dirid: fileid3, filename: &filename3) -> Result<fileid3, nfsstat3> {
        let dir = self.fh(dirid)?;
        match &filename.0[..] {
            b"." => return Ok(dirid),
            b".." if dirid == ROOT_ID => return Ok(ROOT_ID),
            _ => {}
        }
        let (fh, _) = self
            .client
            .lookup(&dir, &filename.0)
            .await
            .map_err(nfs_err)?;
        Ok(self.id(fh))
    }

    async fn getattr(&self, id: fileid3) -> Result<fattr3, nfsstat3> {
        self.attr_of(id).await
    }

    async fn setattr(&self, id: fileid3, setattr: sattr3) -> Result<fattr3, nfsstat3> {
        let fh = self.fh(id)?;
        let a = self
            .client
            .setattr(&fh, setattr_from(&setattr))
            .await
            .map_err(nfs_err)?;
        Ok(self.fattr(id, &a))
    }

    async fn read(
        &self,
        id: fileid3,
        offset: u64,
        count: u32,
    ) -> Result<(Vec<u8>, bool), nfsstat3> {
        let fh = self.fh(id)?;
        let (rmax, _) = self.client.io_sizes().await.map_err(nfs_err)?;
        // The kernel may ask for more than one record carries: gather several READs.
        let mut out = Vec::with_capacity(count.min(rmax * 4) as usize);
        let mut eof = false;
        while (out.len() as u64) < u64::from(count) && !eof {
            let want = count - out.len() as u32;
            let (data, e) = self
                .client
                .read(&fh, offset + out.len() as u64, want.min(rmax))
                .await
                .map_err(nfs_err)?;
            eof = e;
            if data.is_empty() {
                break;
            }
            out.extend_from_slice(&data);
        }
        Ok((out, eof))
    }

    async fn write(&self, id: fileid3, offset: u64, data: &[u8]) -> Result<fattr3, nfsstat3> {
        let fh = self.fh(id)?;
        let (_, wmax) = self.client.io_sizes().await.map_err(nfs_err)?;
        let mut pos = 0usize;
        while pos < data.len() {
            let end = (pos + wmax as usize).min(data.len());
            let (n, _) = self
                .client
                .write(
                    &fh,
                    offset + pos as u64,
                    StableHow::DataSync,
                    &data[pos..end],
                )
                .await
                .map_err(nfs_err)?;
            if n == 0 {
                return Err(nfsstat3::NFS3ERR_IO);
            }
            pos += n as usize;
        }
        self.attr_of(id).await
    }

    async fn create(
        &self,
        dirid: fileid3,
        filename: &filename3,
        attr: sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        let dir = self.fh(dirid)?;
        let made = self
            .client
            .create(&dir, &filename.0, CreateHow::Unchecked(setattr_from(&attr)))
            .await
            .map_err(nfs_err)?;
        let id = self.id(made.fh);
        Ok((id, self.fattr(id, &made.attr)))
    }

    async fn create_exclusive(
        &self,
        dirid: fileid3,
        filename: &filename3,
    ) -> Result<fileid3, nfsstat3> {
        let dir = self.fh(dirid)?;
        let made = self
            .client
            .create(
                &dir,
                &filename.0,
                CreateHow::Guarded(crate::commands::transfer::set_nothing()),
            )
            .await
            .map_err(nfs_err)?;
        Ok(self.id(made.fh))
    }

    async fn mkdir(
        &self,
        dirid: fileid3,
        dirname: &filename3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        let dir = self.fh(dirid)?;
        let made = self
            .client
            .mkdir(&dir, &dirname.0, crate::commands::transfer::set_nothing())
            .await
            .map_err(nfs_err)?;
        let id = self.id(made.fh);
        Ok((id, self.fattr(id, &made.attr)))
    }

    async fn remove(&self, dirid: fileid3, filename: &filename3) -> Result<(), nfsstat3> {
        let dir = self.fh(dirid)?;
        // NFS REMOVE and RMDIR arrive here alike; ask what the name is.
        let (fh, a) = self
            .client
            .lookup(&dir, &filename.0)
            .await
            .map_err(nfs_err)?;
        self.client
            .remove(&dir, &filename.0, a.ftype == FileType::Directory)
            .await
            .map_err(nfs_err)?;
        self.client.cache().invalidate(&fh);
        Ok(())
    }

    async fn rename(
        &self,
        from_dirid: fileid3,
        from_filename: &filename3,
        to_dirid: fileid3,
        to_filename: &filename3,
    ) -> Result<(), nfsstat3> {
        let from = self.fh(from_dirid)?;
        let to = self.fh(to_dirid)?;
        self.client
            .rename(&from, &from_filename.0, &to, &to_filename.0)
            .await
            .map(|_| ())
            .map_err(nfs_err)
    }

    async fn readdir(
        &self,
        dirid: fileid3,
        start_after: fileid3,
        max_entries: usize,
    ) -> Result<ReadDirResult, nfsstat3> {
        let dir = self.fh(dirid)?;
        let all = self.client.readdir_all(&dir).await.map_err(nfs_err)?;
        let mut entries = Vec::new();
        let mut started = start_after == 0;
        let mut end = true;
        for e in all {
            // `.`, `..`, and names that are not one path component (a hostile server's
            // `a/b`), which the kernel's NFS client would hand to programs as they are.
            if crate::commands::dest::check_name(&e.name).is_some() {
                continue;
            }
            let (fh, attr) = match (e.fh, e.attr) {
                (Some(fh), Some(a)) => (fh, a),
                _ => self.client.lookup(&dir, &e.name).await.map_err(nfs_err)?,
            };
            let id = self.id(fh);
            if !started {
                started = id == start_after;
                continue;
            }
            if entries.len() >= max_entries {
                end = false;
                break;
            }
            entries.push(DirEntry {
                fileid: id,
                name: e.name.into(),
                attr: self.fattr(id, &attr),
            });
        }
        if !started {
            // The entry we were to continue after is gone: the cookie is stale.
            return Err(nfsstat3::NFS3ERR_BAD_COOKIE);
        }
        Ok(ReadDirResult { entries, end })
    }

    async fn symlink(
        &self,
        dirid: fileid3,
        linkname: &filename3,
        symlink: &nfspath3,
        attr: &sattr3,
    ) -> Result<(fileid3, fattr3), nfsstat3> {
        let dir = self.fh(dirid)?;
        let made = self
            .client
            .symlink(&dir, &linkname.0, &symlink.0, setattr_from(attr))
            .await
            .map_err(nfs_err)?;
        let id = self.id(made.fh);
        Ok((id, self.fattr(id, &made.attr)))
    }

    async fn readlink(&self, id: fileid3) -> Result<nfspath3, nfsstat3> {
        let fh = self.fh(id)?;
        let t = self.client.readlink(&fh).await.map_err(nfs_err)?;
        Ok(t.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_keeps_its_code() {
        for s in NfsStatus::ALL {
            // The extended-attribute statuses (NFSv4.2's) answer only the xattr operations,
            // the lock statuses (NFSv4's) only the lock operations, and the session statuses
            // (NFSv4.1's) only SEQUENCE, which NFSv3 has not: this server never sees them,
            // and passes none to the kernel.
            if matches!(
                s,
                NfsStatus::NoXattr
                    | NfsStatus::Xattr2Big
                    | NfsStatus::Denied
                    | NfsStatus::NoLck
                    | NfsStatus::BadSession
                    | NfsStatus::BadSlot
                    | NfsStatus::SeqMisordered
            ) {
                assert_eq!(status3(*s) as u32, NfsStatus::ServerFault.code());
                continue;
            }
            assert_eq!(status3(*s) as u32, s.code(), "{s:?}");
        }
    }

    #[test]
    fn setattr_truncation_and_times_carry_over() {
        let s = sattr3 {
            mode: set_mode3::mode(0o600),
            uid: set_uid3::Void,
            gid: set_gid3::gid(5),
            size: set_size3::size(0),
            atime: set_atime::SET_TO_SERVER_TIME,
            mtime: set_mtime::SET_TO_CLIENT_TIME(nfstime3 {
                seconds: 10,
                nseconds: 20,
            }),
        };
        let p = setattr_from(&s);
        assert_eq!(p.mode, Some(0o600));
        assert_eq!(p.uid, None);
        assert_eq!(p.gid, Some(5));
        assert_eq!(p.size, Some(0));
        assert_eq!(p.atime, SetTime::ServerTime);
        assert_eq!(
            p.mtime,
            SetTime::ClientTime(protocol::Time {
                seconds: 10,
                nanos: 20
            })
        );
    }

    #[test]
    fn ids_are_stable_and_unknown_ids_are_stale() {
        let name: protocol::ServerName = "@127.0.0.1%9,aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
            .parse()
            .unwrap();
        let c = Client::new(&name, None, crate::session::Options::default());
        let root = FileHandle::from_bytes([1; 48]);
        let fs = SfsNfs::new(c, root);
        assert_eq!(fs.fh(ROOT_ID).unwrap(), root);
        let a = FileHandle::from_bytes([2; 48]);
        let id = fs.id(a);
        assert_ne!(id, ROOT_ID);
        assert_eq!(fs.id(a), id);
        assert_eq!(fs.fh(id).unwrap(), a);
        assert!(matches!(fs.fh(999), Err(nfsstat3::NFS3ERR_STALE)));
    }
}
