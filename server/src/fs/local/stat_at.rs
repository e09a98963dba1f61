//! A directory entry's attributes and handle by name, without opening it.
//!
//! READDIRPLUS answers every entry of a page with its attributes and handle. Resolving each
//! entry as an object (`openat2` of an `O_PATH` descriptor, `fstat`, `close`) was half of a
//! listing's CPU on the server; one `statx` relative to the directory's descriptor gives the
//! same answer. Nothing is opened and nothing is changed through it, and it stays within the
//! guarantees of [`super::resolve`]:
//! - the name is one component read from the directory itself (the caller skips `.` and
//!   `..`), looked up relative to the directory's descriptor: it cannot leave the directory;
//! - `AT_SYMLINK_NOFOLLOW`: a symlink is described itself, never followed;
//! - an entry on another mount (a mount point inside the export, which `openat2` refuses with
//!   `RESOLVE_NO_XDEV`) is refused too: its mount id differs from the directory's;
//! - the lookup runs under the caller's credentials, so the kernel checks search permission
//!   on the directory exactly as for the open.
//!
//! The attributes and the handle's (dev, inode, generation) are computed as for an opened
//! object ([`Attr::from_metadata`], the birth time as generation), which the tests check
//! against `std::fs::symlink_metadata` of the same entries.

use std::ffi::OsStr;
use std::os::fd::BorrowedFd;

use protocol::{Attr, FileType, NfsStatus, Time};
use rustix::fs::{AtFlags, StatxFlags, StatxTimestamp};

use super::errno;
use crate::fs::ObjKey;

/// What a listing needs of an entry.
pub(super) struct EntryStat {
    pub(super) key: ObjKey,
    pub(super) generation: u64,
    pub(super) attr: Attr,
}

/// The mount id of the directory `dir`, which its entries must share.
pub(super) fn mount_id(dir: BorrowedFd<'_>) -> Result<u64, NfsStatus> {
    let s = rustix::fs::statx(dir, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID).map_err(errno)?;
    if s.stx_mask & StatxFlags::MNT_ID.bits() == 0 {
        // A kernel before 5.8 does not report mount ids: no entry can be checked.
        return Err(NfsStatus::NotSupp);
    }
    Ok(s.stx_mnt_id)
}

/// `name` in `dir` (mount id `dir_mnt`), described without opening it.
pub(super) fn stat_at(
    dir: BorrowedFd<'_>,
    dir_mnt: u64,
    name: &OsStr,
    lease_ms: u32,
) -> Result<EntryStat, NfsStatus> {
    let want = StatxFlags::BASIC_STATS | StatxFlags::BTIME | StatxFlags::MNT_ID;
    let flags = AtFlags::SYMLINK_NOFOLLOW | AtFlags::NO_AUTOMOUNT;
    let s = rustix::fs::statx(dir, name, flags, want).map_err(errno)?;
    if s.stx_mask & StatxFlags::MNT_ID.bits() == 0 || s.stx_mnt_id != dir_mnt {
        return Err(NfsStatus::XDev);
    }
    let dev = rustix::fs::makedev(s.stx_dev_major, s.stx_dev_minor);
    let generation = if s.stx_mask & StatxFlags::BTIME.bits() != 0 {
        // As `resolve::generation`: nanoseconds since the epoch, two's complement before it.
        (i128::from(s.stx_btime.tv_sec) * 1_000_000_000 + i128::from(s.stx_btime.tv_nsec)) as u64
    } else {
        0
    };
    let time = |t: &StatxTimestamp| Time {
        seconds: t.tv_sec,
        nanos: t.tv_nsec.min(999_999_999),
    };
    let attr = Attr {
        ftype: file_type(u32::from(s.stx_mode)),
        mode: u32::from(s.stx_mode) & 0o7777,
        nlink: s.stx_nlink,
        uid: s.stx_uid,
        gid: s.stx_gid,
        size: s.stx_size,
        used: s.stx_blocks.saturating_mul(512),
        rdev: (s.stx_rdev_major, s.stx_rdev_minor),
        fsid: dev,
        fileid: s.stx_ino,
        atime: time(&s.stx_atime),
        mtime: time(&s.stx_mtime),
        ctime: time(&s.stx_ctime),
        lease_ms,
    };
    Ok(EntryStat {
        key: (dev, s.stx_ino),
        generation,
        attr,
    })
}

/// The protocol's type of a `st_mode`; anything unknown is served as a regular file, as
/// [`Attr::from_metadata`] does.
fn file_type(mode: u32) -> FileType {
    use rustix::fs::FileType as Kind;
    match Kind::from_raw_mode(mode) {
        Kind::Directory => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::BlockDevice => FileType::Block,
        Kind::CharacterDevice => FileType::Char,
        Kind::Socket => FileType::Socket,
        Kind::Fifo => FileType::Fifo,
        _ => FileType::Regular,
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;

    use super::*;

    /// Every kind of entry a listing meets is described exactly as an opened object is.
    #[test]
    fn entries_are_described_as_opened_objects_are() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        std::fs::write(d.join("file"), b"some bytes").unwrap();
        std::fs::create_dir(d.join("dir")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", d.join("link")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            d.join("fifo"),
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o640),
            0,
        )
        .unwrap();
        let dir = std::fs::File::open(d).unwrap();
        let mnt = mount_id(dir.as_fd()).unwrap();
        for name in ["file", "dir", "link", "fifo"] {
            let got = stat_at(dir.as_fd(), mnt, OsStr::new(name), 1234).unwrap();
            let meta = std::fs::symlink_metadata(d.join(name)).unwrap();
            assert_eq!(got.attr, Attr::from_metadata(&meta, 1234), "{name}");
            assert_eq!(got.key, (meta.dev(), meta.ino()), "{name}");
            let born = meta.created().ok().map_or(0, |t| {
                t.duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
            });
            assert_eq!(got.generation, born, "{name}");
        }
        assert_eq!(
            stat_at(dir.as_fd(), mnt, OsStr::new("missing"), 0).err(),
            Some(NfsStatus::NoEnt)
        );
        // An entry that is not on the directory's mount is refused.
        assert_eq!(
            stat_at(dir.as_fd(), mnt + 1, OsStr::new("file"), 0).err(),
            Some(NfsStatus::XDev)
        );
    }
}
