//! Conversions between the protocol's types and the kernel's: attributes and their leases
//! (as cache timeouts), times, file types, device numbers, `access(2)` and `open(2)` bits as
//! ACCESS bits, and the errno a program sees for a session error or an NFS status.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, INodeNo, OpenAccMode, OpenFlags, TimeOrNow};
use protocol::{Attr, FileType, NfsStatus, SetTime};

use super::BLKSIZE;
use crate::session::SessionError;

/// Attributes for `.` and `..` in READDIRPLUS replies, which the kernel ignores.
pub(crate) fn placeholder_dir() -> Attr {
    let t = protocol::Time {
        seconds: 0,
        nanos: 0,
    };
    Attr {
        ftype: FileType::Directory,
        mode: 0o755,
        nlink: 2,
        uid: 0,
        gid: 0,
        size: 0,
        used: 0,
        rdev: (0, 0),
        fsid: 0,
        fileid: 0,
        atime: t,
        mtime: t,
        ctime: t,
        lease_ms: 0,
    }
}

/// What is left at this moment of the lease of `a`, received at `received`, in milliseconds.
pub(super) fn lease_left(a: &Attr, received: Instant) -> u32 {
    let left = ttl(a).saturating_sub(received.elapsed());
    u32::try_from(left.as_millis()).unwrap_or(u32::MAX)
}

/// The kernel cache timeout for attributes carrying this lease.
pub(crate) fn ttl(a: &Attr) -> Duration {
    Duration::from_millis(u64::from(a.lease_ms))
}

pub(super) fn kind(t: FileType) -> fuser::FileType {
    match t {
        FileType::Regular => fuser::FileType::RegularFile,
        FileType::Directory => fuser::FileType::Directory,
        FileType::Block => fuser::FileType::BlockDevice,
        FileType::Char => fuser::FileType::CharDevice,
        FileType::Symlink => fuser::FileType::Symlink,
        FileType::Socket => fuser::FileType::Socket,
        FileType::Fifo => fuser::FileType::NamedPipe,
    }
}

pub(super) fn time(t: protocol::Time) -> SystemTime {
    let nanos = Duration::from_nanos(u64::from(t.nanos.min(999_999_999)));
    if t.seconds >= 0 {
        UNIX_EPOCH + Duration::from_secs(t.seconds as u64) + nanos
    } else {
        UNIX_EPOCH - Duration::from_secs(t.seconds.unsigned_abs()) + nanos
    }
}

pub(crate) fn time_from(t: SystemTime) -> protocol::Time {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => protocol::Time {
            seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: d.subsec_nanos(),
        },
        Err(e) => {
            // Before 1970: whole seconds down, nanoseconds up.
            let d = e.duration();
            let mut seconds = -i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            let mut nanos = d.subsec_nanos();
            if nanos > 0 {
                seconds -= 1;
                nanos = 1_000_000_000 - nanos;
            }
            protocol::Time { seconds, nanos }
        }
    }
}

pub(super) fn set_time(t: Option<TimeOrNow>) -> SetTime {
    match t {
        None => SetTime::DontChange,
        Some(TimeOrNow::Now) => SetTime::ServerTime,
        Some(TimeOrNow::SpecificTime(t)) => SetTime::ClientTime(time_from(t)),
    }
}

/// Bits of a node id below the number of its range: a mount of one server is range 0, and
/// in the namespace server `n` is range `n` ([`crate::namespace`]).
pub(crate) const RANGE_SHIFT: u32 = 40;

/// The inode number `stat` shows (`st_ino`, and a listing's `d_ino`) for the object with the
/// server's file id `fileid`, reached through node `node`: the file id itself in a mount of one
/// server, as NFS shows it, so it is the same in every mount and across remounts (git keeps
/// each file's `st_ino` in its index and reads again, whole, every file whose number
/// changed). In the namespace, where several servers share one file system, the server's
/// range number goes in the top 16 bits, so two servers' files differ. Node ids stay the
/// kernel's handles; they are made per mount, in the order objects are met. A server
/// controls only its own files' numbers: one that gives two files one number makes them
/// look like hard links of each other to `cp -a` or `du`, no more. A file id of 0 (no Linux
/// file system has one) shows as the node id.
pub(crate) fn stat_ino(node: u64, fileid: u64) -> u64 {
    match fileid ^ ((node >> RANGE_SHIFT) << 48) {
        0 => node,
        ino => ino,
    }
}

/// The kernel's view of attributes for node `ino`.
pub(crate) fn fattr(ino: u64, a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        stat_ino: Some(stat_ino(ino, a.fileid)),
        size: a.size,
        blocks: a.used.div_ceil(512),
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: UNIX_EPOCH,
        kind: kind(a.ftype),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: encode_dev(a.rdev.0, a.rdev.1),
        blksize: BLKSIZE,
        flags: 0,
    }
}

/// A device number as the kernel passes it over FUSE (`new_encode_dev`: minor's low byte,
/// 12 bits of major, then minor's upper bits), from (major, minor).
fn encode_dev(major: u32, minor: u32) -> u32 {
    (minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)
}

/// (major, minor) from the kernel's FUSE encoding (`new_decode_dev`).
fn decode_dev(dev: u32) -> (u32, u32) {
    ((dev & 0xfff00) >> 8, (dev & 0xff) | ((dev >> 12) & 0xfff00))
}

/// What a FUSE MKNOD of `mode` (with its `S_IFMT` bits) and `rdev` asks for; `None` for a
/// type the protocol's MKNOD does not make (regular files are CREATE).
pub(super) fn special_kind(mode: u32, rdev: u32) -> Option<protocol::SpecialKind> {
    use protocol::SpecialKind;
    let (major, minor) = decode_dev(rdev);
    match mode & libc::S_IFMT {
        libc::S_IFIFO => Some(SpecialKind::Fifo),
        libc::S_IFSOCK => Some(SpecialKind::Socket),
        libc::S_IFCHR => Some(SpecialKind::Char(major, minor)),
        libc::S_IFBLK => Some(SpecialKind::Block(major, minor)),
        _ => None,
    }
}

/// `access(2)` mask bits (R_OK 4, W_OK 2, X_OK 1) as protocol ACCESS bits.
pub(super) fn access_bits(mask: i32, is_dir: bool) -> u32 {
    use protocol::access::*;
    let mut bits = 0;
    if mask & libc::R_OK != 0 {
        bits |= READ;
    }
    if mask & libc::W_OK != 0 {
        bits |= if is_dir {
            MODIFY | EXTEND | DELETE
        } else {
            MODIFY | EXTEND
        };
    }
    if mask & libc::X_OK != 0 {
        bits |= if is_dir { LOOKUP } else { EXECUTE };
    }
    bits
}

/// The ACCESS bits `open(2)` with `flags` needs.
pub(super) fn open_bits(flags: OpenFlags) -> u32 {
    use protocol::access::*;
    let mut bits = match flags.acc_mode() {
        OpenAccMode::O_RDONLY => READ,
        OpenAccMode::O_WRONLY => MODIFY,
        OpenAccMode::O_RDWR => READ | MODIFY,
    };
    if flags.0 & libc::O_TRUNC != 0 {
        bits |= MODIFY;
    }
    bits
}

/// The errno the calling program sees for a session error.
pub(crate) fn errno(e: SessionError) -> Errno {
    match e {
        SessionError::Nfs(s) => status_errno(s),
        SessionError::Connect { .. }
        | SessionError::Handshake { .. }
        | SessionError::NotRetried { .. }
        | SessionError::Timeout { .. }
        | SessionError::Source(_)
        | SessionError::Protocol { .. } => {
            tracing::warn!("{}", e.report());
            Errno::EIO
        }
    }
}

/// NFS status to errno (the numbers agree only for the classic Unix ones).
fn status_errno(s: NfsStatus) -> Errno {
    Errno::from_i32(match s.code() {
        1 => libc::EPERM,
        2 => libc::ENOENT,
        5 => libc::EIO,
        6 => libc::ENXIO,
        13 => libc::EACCES,
        17 => libc::EEXIST,
        18 => libc::EXDEV,
        19 => libc::ENODEV,
        20 => libc::ENOTDIR,
        21 => libc::EISDIR,
        22 => libc::EINVAL,
        27 => libc::EFBIG,
        28 => libc::ENOSPC,
        30 => libc::EROFS,
        31 => libc::EMLINK,
        63 => libc::ENAMETOOLONG,
        66 => libc::ENOTEMPTY,
        69 => libc::EDQUOT,
        70 | 10001 => libc::ESTALE,
        71 => libc::EREMOTE,
        10004 => libc::EOPNOTSUPP,
        10008 => libc::EAGAIN,
        // A lock in the way (F_SETLK), no room for one.
        10010 => libc::EAGAIN,
        10018 => libc::ENOLCK,
        10095 => libc::ENODATA,
        10096 => libc::E2BIG,
        _ => libc::EIO,
    })
}

/// The kernel's answer to a request that returns nothing but success or an error.
pub(super) fn reply_empty(r: Result<(), Errno>, reply: fuser::ReplyEmpty) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_shows_the_servers_number_tagged_by_range() {
        assert_eq!(stat_ino(7, 1_180_354), 1_180_354, "a mount of one server");
        let third = 3 << RANGE_SHIFT;
        assert_eq!(
            stat_ino(third + 5, 1_180_354),
            1_180_354 ^ 3 << 48,
            "server 3"
        );
        assert_ne!(
            stat_ino(third + 5, 42),
            stat_ino((2 << RANGE_SHIFT) + 5, 42)
        );
        assert_eq!(stat_ino(9, 0), 9, "file id 0: the node id");
        assert_eq!(
            fattr(9, &Attr::test_file(1, 1)).stat_ino,
            Some(stat_ino(9, 7))
        );
    }

    #[test]
    fn errnos_are_linux_ones() {
        assert_eq!(status_errno(NfsStatus::NoEnt), Errno::ENOENT);
        assert_eq!(status_errno(NfsStatus::NotEmpty).code(), libc::ENOTEMPTY);
        assert_eq!(
            status_errno(NfsStatus::NameTooLong).code(),
            libc::ENAMETOOLONG
        );
        assert_eq!(status_errno(NfsStatus::Stale).code(), libc::ESTALE);
        assert_eq!(status_errno(NfsStatus::Jukebox).code(), libc::EAGAIN);
        assert_eq!(status_errno(NfsStatus::NoXattr).code(), libc::ENODATA);
        assert_eq!(status_errno(NfsStatus::Xattr2Big).code(), libc::E2BIG);
        for s in NfsStatus::ALL {
            let _ = status_errno(*s); // never panics
        }
    }

    #[test]
    fn times_round_trip_including_before_1970() {
        for (s, n) in [
            (0i64, 0u32),
            (1_700_000_000, 5),
            (-1, 500_000_000),
            (-10, 0),
        ] {
            let t = protocol::Time {
                seconds: s,
                nanos: n,
            };
            assert_eq!(time_from(time(t)), t, "{s}.{n}");
        }
    }

    /// The kernel's device encoding, checked against glibc's `makedev` (whose low 32 bits are
    /// the same layout for majors below 4096 and minors below 2^20).
    #[test]
    fn device_numbers_round_trip_the_kernel_encoding() {
        for (major, minor) in [
            (0, 0),
            (1, 3),
            (8, 1),
            (4095, 255),
            (7, 256),
            (259, 0xfffff),
        ] {
            let dev = encode_dev(major, minor);
            assert_eq!(
                u64::from(dev),
                libc::makedev(major, minor),
                "{major}:{minor}"
            );
            assert_eq!(decode_dev(dev), (major, minor));
        }
        use protocol::SpecialKind;
        let dev = encode_dev(10, 300);
        assert_eq!(
            special_kind(libc::S_IFCHR | 0o600, dev),
            Some(SpecialKind::Char(10, 300))
        );
        assert_eq!(
            special_kind(libc::S_IFBLK, dev),
            Some(SpecialKind::Block(10, 300))
        );
        assert_eq!(
            special_kind(libc::S_IFIFO | 0o644, 0),
            Some(SpecialKind::Fifo)
        );
        assert_eq!(special_kind(libc::S_IFSOCK, 0), Some(SpecialKind::Socket));
        assert_eq!(special_kind(libc::S_IFDIR, 0), None);
        assert_eq!(special_kind(libc::S_IFLNK, 0), None);
    }

    #[test]
    fn access_masks_map_per_type() {
        use protocol::access::*;
        assert_eq!(access_bits(libc::R_OK, false), READ);
        assert_eq!(access_bits(libc::X_OK, true), LOOKUP);
        assert_eq!(access_bits(libc::X_OK, false), EXECUTE);
        assert_eq!(access_bits(libc::W_OK, true), MODIFY | EXTEND | DELETE);
        assert_eq!(open_bits(OpenFlags(libc::O_RDONLY)), READ);
        assert_eq!(open_bits(OpenFlags(libc::O_WRONLY | libc::O_TRUNC)), MODIFY);
        assert_eq!(open_bits(OpenFlags(libc::O_RDWR)), READ | MODIFY);
    }
}
