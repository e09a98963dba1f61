//! Byte-range and whole-file locks (LOCK, UNLOCK, TESTLOCK): what two mounts of one server
//! need so that two database writers on different machines exclude each other, as they do on
//! one machine (docs/PROTOCOL.md, "Locks").
//!
//! A lock belongs to a *holder*: the connection it was taken on, the user the authno logged
//! in as, and an `owner` number the client chooses (sfs passes the kernel's lock owner: per
//! process for `fcntl` locks, per open file for OFD and `flock` locks). POSIX (`fcntl`) locks
//! cover byte ranges; `flock` locks cover the whole file and live in a space of their own,
//! so a `flock` lock never conflicts with an `fcntl` lock (as on Linux).
//!
//! Everything here is fixed size: decoding allocates nothing but the handle.

use crate::error::DecodeError;
use crate::handle::FileHandle;
use crate::request::{get_fh, put_fh};
use crate::xdr::{self, Reader};

/// Read (shared) or write (exclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum LockKind {
    /// Shared: any number of holders at once.
    Read = 1,
    /// Exclusive: conflicts with every other holder's lock on an overlapping range.
    Write = 2,
}

impl LockKind {
    fn decode(r: &mut Reader<'_>) -> Result<LockKind, DecodeError> {
        match r.u32("lock kind")? {
            1 => Ok(LockKind::Read),
            2 => Ok(LockKind::Write),
            value => Err(DecodeError::BadDiscriminant {
                what: "lock kind",
                value,
            }),
        }
    }
}

/// LOCK's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockArgs {
    /// The file.
    pub fh: FileHandle,
    /// The client's owner number (with the connection and user: the holder).
    pub owner: u64,
    /// Shared or exclusive.
    pub kind: LockKind,
    /// First byte.
    pub start: u64,
    /// Bytes covered; 0 = to the end of the file, however far it grows.
    pub len: u64,
    /// A whole-file `flock` lock (`start` and `len` ignored), not a POSIX one.
    pub flock: bool,
    /// Reclaim after a server restart (reserved: sfsd answers `NOTSUPP`).
    pub reclaim: bool,
}

/// UNLOCK's arguments: the holder's locks in the range go (start 0, len 0: all of them on
/// the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnlockArgs {
    /// The file.
    pub fh: FileHandle,
    /// The owner that took them.
    pub owner: u64,
    /// First byte.
    pub start: u64,
    /// Bytes; 0 = to the end of the file.
    pub len: u64,
    /// The owner's `flock` lock, not its POSIX locks.
    pub flock: bool,
}

/// TESTLOCK's arguments: would this LOCK be granted now?
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TestLockArgs {
    /// The file.
    pub fh: FileHandle,
    /// The owner asking (its own locks never conflict).
    pub owner: u64,
    /// Shared or exclusive.
    pub kind: LockKind,
    /// First byte.
    pub start: u64,
    /// Bytes; 0 = to the end of the file.
    pub len: u64,
    /// Test the `flock` space instead of the POSIX one.
    pub flock: bool,
}

/// A lock that stands in the way (TESTLOCK's answer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockConflict {
    /// Its kind.
    pub kind: LockKind,
    /// First byte.
    pub start: u64,
    /// Bytes; 0 = to the end of the file.
    pub len: u64,
    /// An opaque number the server gives that lock's holder (stable while it holds locks; never
    /// a process id of another client).
    pub holder: u64,
}

pub(crate) fn put_lock(buf: &mut Vec<u8>, a: &LockArgs) {
    put_fh(buf, &a.fh);
    xdr::put_u64(buf, a.owner);
    xdr::put_u32(buf, a.kind as u32);
    xdr::put_u64(buf, a.start);
    xdr::put_u64(buf, a.len);
    xdr::put_bool(buf, a.flock);
    xdr::put_bool(buf, a.reclaim);
}

pub(crate) fn get_lock(r: &mut Reader<'_>) -> Result<LockArgs, DecodeError> {
    Ok(LockArgs {
        fh: get_fh(r)?,
        owner: r.u64("lock owner")?,
        kind: LockKind::decode(r)?,
        start: r.u64("lock start")?,
        len: r.u64("lock length")?,
        flock: r.bool("flock")?,
        reclaim: r.bool("reclaim")?,
    })
}

pub(crate) fn put_unlock(buf: &mut Vec<u8>, a: &UnlockArgs) {
    put_fh(buf, &a.fh);
    xdr::put_u64(buf, a.owner);
    xdr::put_u64(buf, a.start);
    xdr::put_u64(buf, a.len);
    xdr::put_bool(buf, a.flock);
}

pub(crate) fn get_unlock(r: &mut Reader<'_>) -> Result<UnlockArgs, DecodeError> {
    Ok(UnlockArgs {
        fh: get_fh(r)?,
        owner: r.u64("lock owner")?,
        start: r.u64("lock start")?,
        len: r.u64("lock length")?,
        flock: r.bool("flock")?,
    })
}

pub(crate) fn put_test(buf: &mut Vec<u8>, a: &TestLockArgs) {
    put_fh(buf, &a.fh);
    xdr::put_u64(buf, a.owner);
    xdr::put_u32(buf, a.kind as u32);
    xdr::put_u64(buf, a.start);
    xdr::put_u64(buf, a.len);
    xdr::put_bool(buf, a.flock);
}

pub(crate) fn get_test(r: &mut Reader<'_>) -> Result<TestLockArgs, DecodeError> {
    Ok(TestLockArgs {
        fh: get_fh(r)?,
        owner: r.u64("lock owner")?,
        kind: LockKind::decode(r)?,
        start: r.u64("lock start")?,
        len: r.u64("lock length")?,
        flock: r.bool("flock")?,
    })
}

pub(crate) fn put_conflict(buf: &mut Vec<u8>, c: Option<&LockConflict>) {
    xdr::put_option(buf, c, |b, c| {
        xdr::put_u32(b, c.kind as u32);
        xdr::put_u64(b, c.start);
        xdr::put_u64(b, c.len);
        xdr::put_u64(b, c.holder);
    });
}

pub(crate) fn get_conflict(r: &mut Reader<'_>) -> Result<Option<LockConflict>, DecodeError> {
    r.option("lock conflict", |r| {
        Ok(LockConflict {
            kind: LockKind::decode(r)?,
            start: r.u64("lock start")?,
            len: r.u64("lock length")?,
            holder: r.u64("lock holder")?,
        })
    })
}

#[cfg(test)]
mod tests {
    use crate::handle::HANDLE_LEN;
    use crate::message::Request;
    use crate::request::RequestOp;

    use super::*;

    fn lock_request() -> Vec<u8> {
        let req = Request {
            id: 1,
            authno: 1,
            op: RequestOp::Lock(LockArgs {
                fh: FileHandle::from_bytes([7; HANDLE_LEN]),
                owner: 2,
                kind: LockKind::Read,
                start: 3,
                len: 4,
                flock: true,
                reclaim: false,
            }),
        };
        req.encode()
    }

    #[test]
    fn a_lock_of_another_kind_or_with_a_bad_flag_does_not_decode() {
        let good = lock_request();
        assert!(Request::decode(&good).is_ok());
        // kind sits after id, authno, proc, the handle (length + 48 bytes) and the owner.
        let kind_at = 8 + 4 + 4 + 4 + HANDLE_LEN + 8;
        let mut bad = good.clone();
        bad[kind_at + 3] = 3;
        assert!(matches!(
            Request::decode(&bad),
            Err(DecodeError::BadDiscriminant {
                what: "lock kind",
                value: 3
            })
        ));
        // A bool other than 0 or 1 (flock).
        let mut bad = good.clone();
        bad[kind_at + 4 + 16 + 3] = 2;
        assert!(Request::decode(&bad).is_err());
        // Cut short anywhere: an error, never a panic.
        for n in 0..good.len() {
            assert!(Request::decode(&good[..n]).is_err());
        }
    }
}
