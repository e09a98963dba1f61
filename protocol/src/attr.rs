//! File attributes, as NFSv3's `fattr3` plus SFS's lease.
//!
//! Every attribute set a server sends carries a lease: the client may use the attributes
//! without asking again for `lease_ms` milliseconds after it received them, unless an
//! INVALIDATE for the object arrives first. The lease is relative (not a wall-clock expiry) so
//! client and server clocks need not agree.

use crate::error::DecodeError;
use crate::xdr::{self, Reader};

/// The type of a file system object (NFSv3 `ftype3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum FileType {
    /// A regular file.
    Regular = 1,
    /// A directory.
    Directory = 2,
    /// A block device.
    Block = 3,
    /// A character device.
    Char = 4,
    /// A symbolic link.
    Symlink = 5,
    /// A socket.
    Socket = 6,
    /// A named pipe.
    Fifo = 7,
}

impl FileType {
    /// Reads a file type (NFSv3 `ftype3`, the same numbers), refusing any other value.
    pub fn decode(r: &mut Reader<'_>) -> Result<FileType, DecodeError> {
        Ok(match r.u32("file type")? {
            1 => FileType::Regular,
            2 => FileType::Directory,
            3 => FileType::Block,
            4 => FileType::Char,
            5 => FileType::Symlink,
            6 => FileType::Socket,
            7 => FileType::Fifo,
            value => {
                return Err(DecodeError::BadDiscriminant {
                    what: "file type",
                    value,
                });
            }
        })
    }
}

/// A point in time: seconds since the Unix epoch (signed, so times before 1970 and after 2106
/// survive) and nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Time {
    /// Seconds since 1970-01-01T00:00:00Z.
    pub seconds: i64,
    /// Nanoseconds, below 1 000 000 000.
    pub nanos: u32,
}

impl From<std::time::SystemTime> for Time {
    fn from(t: std::time::SystemTime) -> Time {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Time {
                seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
                nanos: d.subsec_nanos(),
            },
            Err(e) => {
                // Before 1970: round the seconds down so nanos stays positive.
                let d = e.duration();
                let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                if d.subsec_nanos() == 0 {
                    Time {
                        seconds: -secs,
                        nanos: 0,
                    }
                } else {
                    Time {
                        seconds: -secs - 1,
                        nanos: 1_000_000_000 - d.subsec_nanos(),
                    }
                }
            }
        }
    }
}

impl Time {
    /// The time as a `SystemTime` (saturating at the platform's limits).
    pub fn to_system_time(self) -> std::time::SystemTime {
        use std::time::{Duration, UNIX_EPOCH};
        let nanos = Duration::from_nanos(u64::from(self.nanos));
        let base = if self.seconds >= 0 {
            UNIX_EPOCH.checked_add(Duration::from_secs(self.seconds.unsigned_abs()))
        } else {
            UNIX_EPOCH.checked_sub(Duration::from_secs(self.seconds.unsigned_abs()))
        };
        base.and_then(|b| b.checked_add(nanos))
            .unwrap_or(UNIX_EPOCH)
    }

    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        xdr::put_i64(buf, self.seconds);
        xdr::put_u32(buf, self.nanos);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Time, DecodeError> {
        let seconds = r.i64("time seconds")?;
        let nanos = r.u32("time nanoseconds")?;
        if nanos >= 1_000_000_000 {
            return Err(DecodeError::BadNanos(nanos));
        }
        Ok(Time { seconds, nanos })
    }
}

/// Attributes of a file system object, with the lease under which they may be cached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Attr {
    /// Object type.
    pub ftype: FileType,
    /// Permission bits (and setuid/setgid/sticky), as `st_mode & 0o7777`.
    pub mode: u32,
    /// Number of hard links.
    pub nlink: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Size in bytes.
    pub size: u64,
    /// Bytes of storage used.
    pub used: u64,
    /// Device numbers (major, minor) of a block or character device.
    pub rdev: (u32, u32),
    /// File system id.
    pub fsid: u64,
    /// File id (inode number), unique within the file system.
    pub fileid: u64,
    /// Last access.
    pub atime: Time,
    /// Last modification of the data.
    pub mtime: Time,
    /// Last change of the attributes.
    pub ctime: Time,
    /// Milliseconds, from reception, during which the client may cache these attributes.
    pub lease_ms: u32,
}

/// Encoded size of [`Attr`] in bytes.
pub const ATTR_LEN: usize = 4 * 7 + 8 * 4 + 12 * 3 + 4;

impl Attr {
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        xdr::put_u32(buf, self.ftype as u32);
        xdr::put_u32(buf, self.mode);
        xdr::put_u32(buf, self.nlink);
        xdr::put_u32(buf, self.uid);
        xdr::put_u32(buf, self.gid);
        xdr::put_u64(buf, self.size);
        xdr::put_u64(buf, self.used);
        xdr::put_u32(buf, self.rdev.0);
        xdr::put_u32(buf, self.rdev.1);
        xdr::put_u64(buf, self.fsid);
        xdr::put_u64(buf, self.fileid);
        self.atime.encode(buf);
        self.mtime.encode(buf);
        self.ctime.encode(buf);
        xdr::put_u32(buf, self.lease_ms);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Attr, DecodeError> {
        Ok(Attr {
            ftype: FileType::decode(r)?,
            mode: r.u32("mode")?,
            nlink: r.u32("nlink")?,
            uid: r.u32("uid")?,
            gid: r.u32("gid")?,
            size: r.u64("size")?,
            used: r.u64("used")?,
            rdev: (r.u32("rdev major")?, r.u32("rdev minor")?),
            fsid: r.u64("fsid")?,
            fileid: r.u64("fileid")?,
            atime: Time::decode(r)?,
            mtime: Time::decode(r)?,
            ctime: Time::decode(r)?,
            lease_ms: r.u32("lease")?,
        })
    }
}

impl Attr {
    /// A test fixture: a regular file of `size` bytes (mode 0644, owner 0:0, file id 7, all
    /// times 1 s after the epoch) with a lease of `lease_ms`. The one copy every crate's tests
    /// share (`testing` feature).
    #[cfg(any(test, feature = "testing"))]
    pub fn test_file(size: u64, lease_ms: u32) -> Attr {
        let t = Time {
            seconds: 1,
            nanos: 0,
        };
        Attr {
            ftype: FileType::Regular,
            mode: 0o644,
            nlink: 1,
            uid: 0,
            gid: 0,
            size,
            used: size,
            rdev: (0, 0),
            fsid: 1,
            fileid: 7,
            atime: t,
            mtime: t,
            ctime: t,
            lease_ms,
        }
    }
}

#[cfg(unix)]
impl Attr {
    /// The attributes of a local file, as a server reports them, with a lease of `lease_ms`.
    pub fn from_metadata(m: &std::fs::Metadata, lease_ms: u32) -> Attr {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let t = m.file_type();
        let ftype = if t.is_dir() {
            FileType::Directory
        } else if t.is_symlink() {
            FileType::Symlink
        } else if t.is_block_device() {
            FileType::Block
        } else if t.is_char_device() {
            FileType::Char
        } else if t.is_socket() {
            FileType::Socket
        } else if t.is_fifo() {
            FileType::Fifo
        } else {
            FileType::Regular
        };
        let time = |s: i64, ns: i64| Time {
            seconds: s,
            nanos: u32::try_from(ns).unwrap_or(0).min(999_999_999),
        };
        // glibc's gnu_dev_major / gnu_dev_minor split of a 64-bit dev_t.
        let rdev = m.rdev();
        let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
        let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
        Attr {
            ftype,
            mode: m.mode() & 0o7777,
            nlink: u32::try_from(m.nlink()).unwrap_or(u32::MAX),
            uid: m.uid(),
            gid: m.gid(),
            size: m.size(),
            used: m.blocks().saturating_mul(512),
            rdev: (major as u32, minor as u32),
            fsid: m.dev(),
            fileid: m.ino(),
            atime: time(m.atime(), m.atime_nsec()),
            mtime: time(m.mtime(), m.mtime_nsec()),
            ctime: time(m.ctime(), m.ctime_nsec()),
            lease_ms,
        }
    }
}

pub(crate) fn encode_opt_attr(buf: &mut Vec<u8>, a: Option<&Attr>) {
    xdr::put_option(buf, a, |b, a| a.encode(b));
}

pub(crate) fn decode_opt_attr(r: &mut Reader<'_>) -> Result<Option<Attr>, DecodeError> {
    r.option("attributes follow", Attr::decode)
}

/// How SETATTR sets a time (NFSv3 `set_atime`/`set_mtime`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SetTime {
    /// Leave unchanged.
    #[default]
    DontChange,
    /// Set to the server's current time.
    ServerTime,
    /// Set to this time.
    ClientTime(Time),
}

impl SetTime {
    fn encode(&self, buf: &mut Vec<u8>) {
        match self {
            SetTime::DontChange => xdr::put_u32(buf, 0),
            SetTime::ServerTime => xdr::put_u32(buf, 1),
            SetTime::ClientTime(t) => {
                xdr::put_u32(buf, 2);
                t.encode(buf);
            }
        }
    }

    fn decode(r: &mut Reader<'_>) -> Result<SetTime, DecodeError> {
        Ok(match r.u32("set time")? {
            0 => SetTime::DontChange,
            1 => SetTime::ServerTime,
            2 => SetTime::ClientTime(Time::decode(r)?),
            value => {
                return Err(DecodeError::BadDiscriminant {
                    what: "set time",
                    value,
                });
            }
        })
    }
}

/// Attributes to change (NFSv3 `sattr3`): `None` leaves a field unchanged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SetAttr {
    /// New permission bits.
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (truncate or extend).
    pub size: Option<u64>,
    /// New access time.
    pub atime: SetTime,
    /// New modification time.
    pub mtime: SetTime,
}

impl SetAttr {
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        xdr::put_option(buf, self.mode.as_ref(), |b, v| xdr::put_u32(b, *v));
        xdr::put_option(buf, self.uid.as_ref(), |b, v| xdr::put_u32(b, *v));
        xdr::put_option(buf, self.gid.as_ref(), |b, v| xdr::put_u32(b, *v));
        xdr::put_option(buf, self.size.as_ref(), |b, v| xdr::put_u64(b, *v));
        self.atime.encode(buf);
        self.mtime.encode(buf);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<SetAttr, DecodeError> {
        Ok(SetAttr {
            mode: r.option("set mode", |r| r.u32("mode"))?,
            uid: r.option("set uid", |r| r.u32("uid"))?,
            gid: r.option("set gid", |r| r.u32("gid"))?,
            size: r.option("set size", |r| r.u64("size"))?,
            atime: SetTime::decode(r)?,
            mtime: SetTime::decode(r)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_time_round_trips() {
        use std::time::{Duration, UNIX_EPOCH};
        for t in [
            UNIX_EPOCH,
            UNIX_EPOCH + Duration::new(1_700_000_000, 5),
            UNIX_EPOCH - Duration::new(3, 250_000_000),
            UNIX_EPOCH - Duration::from_secs(10),
        ] {
            let ours = Time::from(t);
            assert!(ours.nanos < 1_000_000_000);
            assert_eq!(ours.to_system_time(), t);
        }
        assert_eq!(
            Time::from(UNIX_EPOCH - Duration::new(3, 250_000_000)),
            Time {
                seconds: -4,
                nanos: 750_000_000
            }
        );
    }

    #[cfg(unix)]
    #[test]
    fn metadata_of_a_directory() {
        let m = std::fs::metadata(".").unwrap();
        let a = Attr::from_metadata(&m, 5);
        assert_eq!(a.ftype, FileType::Directory);
        assert_eq!(a.lease_ms, 5);
    }

    #[test]
    fn attr_len_matches_encoding() {
        let a = Attr::test_file(5, 60_000);
        let mut buf = Vec::new();
        a.encode(&mut buf);
        assert_eq!(buf.len(), ATTR_LEN);
        let mut r = Reader::new(&buf);
        assert_eq!(Attr::decode(&mut r).unwrap(), a);
        r.finish().unwrap();
    }
}
