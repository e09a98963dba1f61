//! SETATTRs answered before the server's answer, when the server cannot refuse them.
//!
//! `tar x` sets each file's times, owner and mode right after writing it (`utimensat`,
//! `fchown` and `fchmod` on the open file), and `cp -p` does the same: three round trips to
//! the server per file that the program waited for, one after the other, the first behind
//! the file's last WRITE. Here such a change is answered at once and goes to the server
//! behind the file's writes ([`super::write_behind`]), the three as one SETATTR.
//!
//! Only a change the server is certain to accept is answered early, so a program is never
//! told a change was made that the server then refuses for a reason it could have seen:
//!
//! - the file is one this mount made new (a CREATE that made it, [`super::names`]) for the
//!   same local user, and that open file is still open: its owner on the server is the
//!   identity this user acts as, and the owner may change its mode and times;
//! - no size change (truncation stays a round trip), no change of owner or group other than
//!   to the ones it has (which the owner may do), and no setuid or setgid bit before or
//!   after (a change of owner clears them, and a server clears setgid for a group the caller
//!   is not in).
//!
//! What the program may observe waits for it, as for a write: `close` and `fsync` (which
//! report its failure, as a write's), `stat` and everything [`super::write_behind`] lists.
//! The kernel gets the predicted attributes without a cache lifetime, so its next `stat`
//! asks, and waits. What the server could still refuse it for is what no client can foresee
//! (its disk failing, the file removed by another client): then `close` or `fsync` of the
//! file fails with that error, and it is logged.

use std::sync::Arc;
use std::time::SystemTime;

use fuser::{FileAttr, INodeNo};
use protocol::handshake::has_ordered_setattr;
use protocol::{SetAttr, SetTime};

use super::ServerMount;
use super::convert::{errno, time};
use super::write_behind::Ticket;
use crate::session::Client;

/// A regular file this mount made new for a local user, while the open file its CREATE
/// returned lasts.
#[derive(Debug, Clone)]
pub(super) struct MadeHere {
    /// The FUSE file handle of that open file.
    file: u64,
    /// The local user who made it.
    uid: u32,
    /// Its attributes as this mount knows them: the CREATE's answer, grown by the file's
    /// writes and changed by its SETATTRs.
    attr: FileAttr,
    /// While the file has been written from its start one write after the other: how far,
    /// and the bytes from the last page boundary to there ([`LastPage`]).
    last_page: Option<LastPage>,
}

/// The bytes of a file's last page, partly written ([`MadeHere::last_page`]): the kernel keeps
/// such a page as not read, so reading the file back would ask the server for it; these
/// answer that READ instead ([`super::kept_pages`]).
#[derive(Debug, Clone, Default)]
pub(super) struct LastPage {
    /// Where the writes have reached: the file's size.
    pub(super) end: u64,
    /// The bytes from the page boundary at or before `end` up to `end`.
    pub(super) bytes: Vec<u8>,
}

/// The kernel's page size, as its READs are aligned.
const PAGE: u64 = 4096;

impl LastPage {
    /// `data` written at `offset`: the last page still known, if the write continued the
    /// file's writes.
    fn written(self, offset: u64, data: &[u8]) -> Option<LastPage> {
        if offset != self.end {
            return None;
        }
        let end = offset.checked_add(data.len() as u64)?;
        let page = end - end % PAGE;
        let bytes = if page >= offset {
            data[usize::try_from(page - offset).ok()?..].to_vec()
        } else {
            let mut bytes = self.bytes;
            bytes.extend_from_slice(data);
            bytes
        };
        Some(LastPage { end, bytes })
    }
}

/// The setuid and setgid bits: never predicted (see the module's doc).
const SET_ID: u16 = 0o6000;

/// The attributes `s` leaves `attr` with, if the file's owner asking for `s` cannot be
/// refused (see the module's doc); `now` is the change time.
pub(super) fn predict(attr: &FileAttr, s: &SetAttr, now: SystemTime) -> Option<FileAttr> {
    if s.size.is_some() || attr.kind != fuser::FileType::RegularFile || attr.perm & SET_ID != 0 {
        return None;
    }
    let perm = match s.mode {
        Some(m) if m as u16 & SET_ID != 0 || m > 0o7777 => return None,
        Some(m) => m as u16,
        None => attr.perm,
    };
    if s.uid.is_some_and(|u| u != attr.uid) || s.gid.is_some_and(|g| g != attr.gid) {
        return None;
    }
    let set = |t: SetTime, old: SystemTime| match t {
        SetTime::DontChange => old,
        SetTime::ServerTime => now,
        SetTime::ClientTime(t) => time(t),
    };
    Some(FileAttr {
        perm,
        atime: set(s.atime, attr.atime),
        mtime: set(s.mtime, attr.mtime),
        ctime: now,
        ..*attr
    })
}

/// One change doing what `earlier` then `later` do. Exact for predicted changes: without
/// setuid and setgid bits, a server applies a SETATTR's fields in any order to one result.
pub(crate) fn merge(earlier: SetAttr, later: SetAttr) -> SetAttr {
    let time = |l: SetTime, e: SetTime| if l == SetTime::DontChange { e } else { l };
    SetAttr {
        mode: later.mode.or(earlier.mode),
        uid: later.uid.or(earlier.uid),
        gid: later.gid.or(earlier.gid),
        size: later.size.or(earlier.size),
        atime: time(later.atime, earlier.atime),
        mtime: time(later.mtime, earlier.mtime),
    }
}

impl ServerMount {
    /// Local user `uid` made `attr`'s file new, opened as FUSE file handle `file`.
    pub(super) fn made_here(&self, file: u64, uid: u32, attr: FileAttr) {
        if attr.kind == fuser::FileType::RegularFile {
            let last_page = (attr.size == 0).then(LastPage::default);
            let made = MadeHere {
                file,
                uid,
                attr,
                last_page,
            };
            self.table().made.insert(attr.ino.0, made);
        }
    }

    /// A write of `data` at `offset` of `ino` was asked for.
    pub(super) fn made_written(&self, ino: INodeNo, offset: u64, data: &[u8]) {
        if let Some(m) = self.table().made.get_mut(&ino.0) {
            let end = offset.saturating_add(data.len() as u64);
            m.attr.size = m.attr.size.max(end);
            m.last_page = m.last_page.take().and_then(|l| l.written(offset, data));
        }
    }

    /// `ino` changed in a way not followed here (an append, an extended attribute, which may
    /// be an ACL that changes the mode): its SETATTRs go to the server as usual.
    pub(super) fn made_forget(&self, ino: INodeNo) {
        self.table().made.remove(&ino.0);
    }

    /// A SETATTR sent as usual left `ino` with `attr`.
    pub(super) fn made_changed(&self, ino: INodeNo, attr: FileAttr) {
        if let Some(m) = self.table().made.get_mut(&ino.0) {
            if m.last_page.as_ref().is_some_and(|l| l.end != attr.size) {
                m.last_page = None;
            }
            m.attr = attr;
        }
    }

    /// FUSE file handle `file` of `ino` was released: the bytes of its last page, if it was
    /// made new through that open file and written from its start one write after another.
    pub(super) fn made_released(&self, ino: INodeNo, file: u64) -> Option<LastPage> {
        let mut t = self.table();
        if t.made.get(&ino.0).is_some_and(|m| m.file == file) {
            return t.made.remove(&ino.0).and_then(|m| m.last_page);
        }
        None
    }

    /// Answers local user `uid`'s change `s` of `ino` now if the server cannot refuse it:
    /// the attributes for the kernel, and the ticket of a SETATTR to send
    /// ([`ServerMount::send_early_setattr`]) unless it joined one not yet sent.
    pub(super) fn answer_setattr_early(
        &self,
        uid: u32,
        ino: INodeNo,
        s: SetAttr,
    ) -> Option<(FileAttr, Option<Ticket>)> {
        // A write held to gather more goes first (before the table's lock: sending it takes it).
        self.behind.send_held(ino.0);
        let mut t = self.table();
        let made = t.made.get_mut(&ino.0).filter(|m| m.uid == uid)?;
        let attr = predict(&made.attr, &s, SystemTime::now())?;
        let ticket = self.behind.queue_attrs(ino.0, s)?;
        made.attr = attr;
        Some((attr, ticket))
    }

    /// Sends the SETATTR answered early under `ticket`, behind the file's writes before it:
    /// to a server that applies a SETATTR only after the WRITEs of its file that came before
    /// it on the connection (protocol version 13 and up), as soon as they have gone out, else
    /// once they are answered. The order is relied on only where every one of those WRITEs
    /// went out before it on the connection that answered both; where one did not (a
    /// reconnect), the SETATTR is sent again after their replies (it sets no size, so twice
    /// is the same as once).
    pub(super) async fn send_early_setattr(
        self: Arc<Self>,
        c: Client,
        ino: INodeNo,
        ticket: Ticket,
    ) {
        let ordered = c.orders_setattr().await.unwrap_or(false);
        if ordered {
            self.behind.gone_out_before(&ticket).await;
        } else {
            self.behind.settle_before(&ticket).await;
        }
        let Some(s) = self.behind.take_queued(&ticket) else {
            return ticket.end(Ok(()));
        };
        let fh = match self.fh(ino) {
            Ok(fh) => fh,
            Err(e) => return self.early_setattr_failed(ino, ticket, e),
        };
        let mut at = None;
        let mut sent = c.setattr_sent(&fh, s, &mut |x| at = Some(x)).await;
        if sent.is_ok() && ordered {
            self.behind.settle_before(&ticket).await;
            let behind_writes = self.behind.take_watch(&ticket);
            let covered = behind_writes
                .zip(at)
                .is_some_and(|(w, at)| w.covered_by(at, has_ordered_setattr));
            if !covered {
                tracing::debug!(
                    ino = ino.0,
                    "a SETATTR went before a WRITE of its file: again"
                );
                sent = c.setattr(&fh, s).await;
            }
        }
        match sent {
            Ok(_) => ticket.end(Ok(())),
            Err(e) => self.early_setattr_failed(ino, ticket, errno(e)),
        }
    }

    fn early_setattr_failed(&self, ino: INodeNo, ticket: Ticket, e: fuser::Errno) {
        tracing::warn!(ino = ino.0, error = ?e, "a SETATTR answered early failed");
        self.made_forget(ino);
        ticket.end(Err(e));
    }
}

#[cfg(test)]
mod tests {
    /// The last page follows writes that continue one another, across page boundaries, and
    /// is lost to one that does not.
    #[test]
    fn the_last_page_follows_writes_from_the_start() {
        use super::LastPage;
        let l = LastPage::default().written(0, &[1; 5]).unwrap();
        assert_eq!((l.end, l.bytes.len()), (5, 5));
        let l = l.written(5, &[2; 4091]).unwrap();
        assert_eq!(
            (l.end, l.bytes.len()),
            (4096, 0),
            "a whole page: nothing partial"
        );
        let l = l.written(4096, &[3; 10_000]).unwrap();
        assert_eq!((l.end, l.bytes.len()), (14_096, 14_096 - 12_288));
        assert!(l.bytes.iter().all(|&b| b == 3));
        let l = l.written(14_096, &[4; 2]).unwrap();
        assert_eq!(&l.bytes[l.bytes.len() - 2..], &[4, 4]);
        assert!(l.clone().written(100, &[5]).is_none(), "a write elsewhere");
        assert!(l.written(14_099, &[5]).is_none(), "past the end");
    }

    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    fn file(perm: u16) -> FileAttr {
        let t = UNIX_EPOCH + Duration::from_secs(1000);
        FileAttr {
            ino: INodeNo(5),
            size: 10,
            blocks: 1,
            atime: t,
            mtime: t,
            ctime: t,
            crtime: UNIX_EPOCH,
            kind: fuser::FileType::RegularFile,
            perm,
            nlink: 1,
            uid: 1000,
            gid: 100,
            rdev: 0,
            blksize: 4096,
            flags: 0,
            stat_ino: Some(77),
        }
    }

    fn change() -> SetAttr {
        SetAttr::default()
    }

    #[test]
    fn tars_changes_are_predicted() {
        let now = UNIX_EPOCH + Duration::from_secs(5000);
        let a = file(0o600);
        let mtime = protocol::Time {
            seconds: 77,
            nanos: 5,
        };
        let times = SetAttr {
            mtime: SetTime::ClientTime(mtime),
            ..change()
        };
        let got = predict(&a, &times, now).unwrap();
        assert_eq!(got.mtime, time(mtime));
        assert_eq!((got.atime, got.ctime, got.perm), (a.atime, now, 0o600));
        let own = SetAttr {
            uid: Some(1000),
            gid: Some(100),
            ..change()
        };
        assert_eq!(predict(&got, &own, now).unwrap().uid, 1000);
        let chmod = SetAttr {
            mode: Some(0o644),
            ..change()
        };
        assert_eq!(predict(&got, &chmod, now).unwrap().perm, 0o644);
        let touch = SetAttr {
            atime: SetTime::ServerTime,
            ..change()
        };
        assert_eq!(predict(&got, &touch, now).unwrap().atime, now);
    }

    #[test]
    fn what_the_server_may_refuse_or_alter_is_not_predicted() {
        let now = SystemTime::now();
        let a = file(0o600);
        let refused = [
            SetAttr {
                size: Some(0),
                ..change()
            },
            SetAttr {
                uid: Some(0),
                ..change()
            },
            SetAttr {
                gid: Some(0),
                ..change()
            },
            SetAttr {
                mode: Some(0o4755),
                ..change()
            },
            SetAttr {
                mode: Some(0o2755),
                ..change()
            },
            SetAttr {
                mode: Some(0o10644),
                ..change()
            },
        ];
        for s in refused {
            assert!(predict(&a, &s, now).is_none(), "{s:?}");
        }
        let chmod = SetAttr {
            mode: Some(0o644),
            ..change()
        };
        assert!(predict(&file(0o4700), &chmod, now).is_none(), "setuid");
        assert!(predict(&file(0o2700), &chmod, now).is_none(), "setgid");
        let dir = FileAttr {
            kind: fuser::FileType::Directory,
            ..a
        };
        assert!(predict(&dir, &chmod, now).is_none(), "a directory");
    }

    #[test]
    fn merged_changes_keep_the_latest_of_each_field() {
        let t = |s| {
            SetTime::ClientTime(protocol::Time {
                seconds: s,
                nanos: 0,
            })
        };
        let first = SetAttr {
            mode: Some(0o600),
            mtime: t(1),
            atime: t(1),
            ..change()
        };
        let second = SetAttr {
            mode: Some(0o644),
            uid: Some(7),
            atime: t(2),
            ..change()
        };
        assert_eq!(
            merge(first, second),
            SetAttr {
                mode: Some(0o644),
                uid: Some(7),
                gid: None,
                size: None,
                atime: t(2),
                mtime: t(1),
            }
        );
    }
}
