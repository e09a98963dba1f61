//! NFSv3 status codes: the error half of every reply.
//!
//! The lock operations ([`crate::lock`]) add two of NFSv4's (RFC 5661): `Denied` (10010,
//! `NFS4ERR_DENIED`: a lock conflicts) and `NoLck` (10018, `NFS4ERR_RESOURCE`: the server's
//! lock table has no room for the caller; the client's `ENOLCK`).
//!
//! The numeric values are NFSv3's (RFC 1813), so the client's loopback NFS server passes them
//! through to the kernel unchanged; the extended-attribute operations add two of NFSv4.2's
//! (RFC 8276): `NoXattr` (10095, Linux's `ENODATA`) and `Xattr2Big` (10096, `E2BIG`), which no
//! NFSv3 operation returns; and sessions (SESSION, SEQUENCE: [`crate::sequence`]) three of
//! NFSv4.1's (RFC 8881): `BadSession` (10052), `BadSlot` (10053) and `SeqMisordered` (10063).

use std::fmt;
use std::io;

use crate::error::DecodeError;

macro_rules! statuses {
    ($($name:ident = $val:expr, $text:expr;)*) => {
        /// An NFSv3 error status (`NFS3_OK` is represented by `Ok` in a reply's `Result`).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum NfsStatus {
            $(
                #[doc = $text]
                $name = $val,
            )*
        }

        impl NfsStatus {
            /// Every status, for tests and exhaustive tables.
            pub const ALL: &'static [NfsStatus] = &[$(NfsStatus::$name),*];

            /// The status with wire code `code`, if it is an error status.
            pub fn from_code(code: u32) -> Option<NfsStatus> {
                match code {
                    $($val => Some(NfsStatus::$name),)*
                    _ => None,
                }
            }

            /// What the status means, in words.
            pub fn description(self) -> &'static str {
                match self {
                    $(NfsStatus::$name => $text,)*
                }
            }
        }
    };
}

statuses! {
    Perm = 1, "not owner";
    NoEnt = 2, "no such file or directory";
    Io = 5, "I/O error";
    NxIo = 6, "no such device or address";
    Acces = 13, "permission denied";
    Exist = 17, "file exists";
    XDev = 18, "cross-device link";
    NoDev = 19, "no such device";
    NotDir = 20, "not a directory";
    IsDir = 21, "is a directory";
    Inval = 22, "invalid argument";
    FBig = 27, "file too large";
    NoSpc = 28, "no space left on device";
    RoFs = 30, "read-only file system";
    MLink = 31, "too many hard links";
    NameTooLong = 63, "file name too long";
    NotEmpty = 66, "directory not empty";
    DQuot = 69, "disk quota exceeded";
    Stale = 70, "stale file handle";
    Remote = 71, "too many levels of remote in path";
    BadHandle = 10001, "illegal file handle";
    NotSync = 10002, "update synchronization mismatch";
    BadCookie = 10003, "READDIR cookie is stale";
    NotSupp = 10004, "operation not supported";
    TooSmall = 10005, "buffer or request too small";
    ServerFault = 10006, "server fault";
    BadType = 10007, "object type not supported";
    Jukebox = 10008, "try again later";
    Denied = 10010, "lock conflicts";
    NoLck = 10018, "no locks available";
    NoXattr = 10095, "no such extended attribute";
    Xattr2Big = 10096, "extended attribute value too large";
    BadSession = 10052, "no session on this connection";
    BadSlot = 10053, "slot number beyond the session's slots";
    SeqMisordered = 10063, "sequence number neither the slot's next nor its last";
}

/// Wire code of success (`NFS3_OK`).
pub const NFS3_OK: u32 = 0;

impl NfsStatus {
    /// The wire code.
    pub fn code(self) -> u32 {
        self as u32
    }

    pub(crate) fn decode(code: u32) -> Result<NfsStatus, DecodeError> {
        NfsStatus::from_code(code).ok_or(DecodeError::BadDiscriminant {
            what: "status",
            value: code,
        })
    }

    /// The status a server reports for a failed local file operation.
    pub fn from_io_error(e: &io::Error) -> NfsStatus {
        use io::ErrorKind as K;
        if e.raw_os_error() == Some(1) {
            return NfsStatus::Perm; // EPERM has no ErrorKind of its own.
        }
        match e.kind() {
            K::NotFound => NfsStatus::NoEnt,
            K::PermissionDenied => NfsStatus::Acces,
            K::AlreadyExists => NfsStatus::Exist,
            K::NotADirectory => NfsStatus::NotDir,
            K::IsADirectory => NfsStatus::IsDir,
            K::DirectoryNotEmpty => NfsStatus::NotEmpty,
            K::ReadOnlyFilesystem => NfsStatus::RoFs,
            K::StorageFull => NfsStatus::NoSpc,
            K::QuotaExceeded => NfsStatus::DQuot,
            K::FileTooLarge => NfsStatus::FBig,
            K::CrossesDevices => NfsStatus::XDev,
            K::TooManyLinks => NfsStatus::MLink,
            K::InvalidFilename => NfsStatus::NameTooLong,
            K::StaleNetworkFileHandle => NfsStatus::Stale,
            K::InvalidInput => NfsStatus::Inval,
            K::Unsupported => NfsStatus::NotSupp,
            K::WouldBlock | K::Interrupted | K::ResourceBusy => NfsStatus::Jukebox,
            _ => NfsStatus::Io,
        }
    }
}

impl fmt::Display for NfsStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (NFS3ERR {})", self.description(), self.code())
    }
}

impl std::error::Error for NfsStatus {}

impl From<crate::error::HandleError> for NfsStatus {
    /// A handle that does not verify was not issued by this server (or was altered).
    fn from(_: crate::error::HandleError) -> NfsStatus {
        NfsStatus::BadHandle
    }
}

impl From<crate::error::LoginError> for NfsStatus {
    /// A refused login is a permission problem, except a malformed user name.
    fn from(e: crate::error::LoginError) -> NfsStatus {
        match e {
            crate::error::LoginError::BadUserName(_) => NfsStatus::Inval,
            _ => NfsStatus::Acces,
        }
    }
}

impl From<io::Error> for NfsStatus {
    fn from(e: io::Error) -> NfsStatus {
        NfsStatus::from_io_error(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for &s in NfsStatus::ALL {
            assert_eq!(NfsStatus::from_code(s.code()), Some(s));
        }
        assert_eq!(NfsStatus::from_code(NFS3_OK), None);
        assert_eq!(NfsStatus::BadHandle.code(), 10001);
        assert_eq!(NfsStatus::Jukebox.code(), 10008);
    }

    #[test]
    fn io_errors_map() {
        let e = io::Error::from(io::ErrorKind::NotFound);
        assert_eq!(NfsStatus::from_io_error(&e), NfsStatus::NoEnt);
        let e = io::Error::from_raw_os_error(1);
        assert_eq!(NfsStatus::from_io_error(&e), NfsStatus::Perm);
    }
}
