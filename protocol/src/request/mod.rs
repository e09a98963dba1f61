//! Request operations (client to server) and their arguments.
//!
//! The operation set is NFSv3's (RFC 1813), with the same procedure numbers, plus three SFS
//! extensions: MOUNT (get the root handle of a path), LOGIN (user authentication) and RENAME2
//! (RENAME with `renameat2(2)` flags, so a no-replace rename is one atomic operation on the
//! server instead of a LOOKUP racing a RENAME), OPEN and CLOSE (open states), the four
//! extended-attribute operations ([`crate::xattr`]), NARROW (an authno acting with a subset
//! of a login's groups, so a local process's own groups apply) and APPEND (a write at the end
//! of the file as the server finds it, so appenders on different clients do not overwrite
//! each other).

use crate::attr::{SetAttr, Time};
use crate::data::Data;
use crate::error::DecodeError;
use crate::handle::{FileHandle, MAX_HANDLE_LEN};
use crate::keys::UserPublicKey;
use crate::login::{LoginArgs, MAX_USER_NAME_LEN};
use crate::xattr;
use crate::xdr::{self, Reader};

/// Longest file name accepted in a message, in bytes (servers may refuse shorter ones with
/// `NameTooLong`).
pub const MAX_NAME_LEN: usize = 1024;
/// Longest path (MOUNT path, symlink target) accepted in a message, in bytes.
pub const MAX_PATH_LEN: usize = 4096;

/// A procedure number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum Proc {
    /// Do nothing (ping).
    Null = 0,
    /// Get attributes.
    GetAttr = 1,
    /// Set attributes.
    SetAttr = 2,
    /// Look a name up in a directory.
    Lookup = 3,
    /// Check access permission.
    Access = 4,
    /// Read a symbolic link.
    ReadLink = 5,
    /// Read from a file.
    Read = 6,
    /// Write to a file.
    Write = 7,
    /// Create a file.
    Create = 8,
    /// Create a directory.
    Mkdir = 9,
    /// Create a symbolic link.
    Symlink = 10,
    /// Create a special file (FIFO, socket, device node).
    Mknod = 11,
    /// Remove a file.
    Remove = 12,
    /// Remove a directory.
    Rmdir = 13,
    /// Rename.
    Rename = 14,
    /// Create a hard link.
    Link = 15,
    /// Read a directory.
    ReadDir = 16,
    /// Read a directory with attributes and handles.
    ReadDirPlus = 17,
    /// File system statistics.
    FsStat = 18,
    /// Static file system information.
    FsInfo = 19,
    /// POSIX path configuration.
    PathConf = 20,
    /// Commit unstable writes.
    Commit = 21,
    /// SFS extension: the root handle of an exported path.
    Mount = 100,
    /// SFS extension: user login.
    Login = 101,
    /// SFS extension: rename with flags ([`rename_flags`]).
    Rename2 = 102,
    /// SFS extension: keep an object alive for this connection and user (an open state).
    Open = 103,
    /// SFS extension: drop this connection's and user's open state on an object.
    Close = 104,
    /// SFS extension: read an extended attribute.
    GetXattr = 105,
    /// SFS extension: create or replace an extended attribute.
    SetXattr = 106,
    /// SFS extension: list an object's extended attribute names.
    ListXattr = 107,
    /// SFS extension: remove an extended attribute.
    RemoveXattr = 108,
    /// SFS extension: bind this connection to a client's reply cache ([`crate::sequence`]).
    Session = 110,
    /// SFS extension: a change sent through a slot of the reply cache ([`crate::sequence`]).
    Sequence = 111,
    /// SFS extension: write at the end of a file, wherever that is when the server gets there
    /// ([`RequestOp::Append`]).
    Append = 109,
    /// SFS extension: an authno with a subset of the request authno's groups ([`RequestOp::Narrow`]).
    Narrow = 112,
    /// SFS extension: take a byte-range or whole-file lock ([`crate::lock`]).
    Lock = 113,
    /// SFS extension: release a holder's locks in a range.
    Unlock = 114,
    /// SFS extension: would a LOCK be granted now (and if not, what is in the way)?
    TestLock = 115,
    /// SFS extension: the handle and attributes of any object by its path from the export's
    /// root, and a regular file's first bytes: a whole small file, or the start of a large
    /// one, in the first round trip after the handshake ([`RequestOp::Fetch`]).
    Fetch = 116,
    /// SFS extension: READDIRPLUS that also says which entries have no extended attributes
    /// the caller may list ([`RequestOp::ListDir`], versions 7 to 10), so `ls -l` of a
    /// directory needs no LISTXATTR or GETXATTR per entry.
    ListDir = 117,
    /// SFS extension: CREATE of a regular file named by its path from the export's root
    /// ([`RequestOp::CreateAt`], versions 11 to 14), so an upload's file is made in the first
    /// round trip after the handshake instead of a round trip after its directory is found.
    CreateAt = 118,
}

/// Most supplementary groups a NARROW may name; a request with more does not decode (before
/// anything is allocated for them). The server applies at most this many groups anyway.
pub const MAX_NARROW_GROUPS: usize = 64;

impl Proc {
    /// Every procedure.
    pub const ALL: &'static [Proc] = &[
        Proc::Null,
        Proc::GetAttr,
        Proc::SetAttr,
        Proc::Lookup,
        Proc::Access,
        Proc::ReadLink,
        Proc::Read,
        Proc::Write,
        Proc::Create,
        Proc::Mkdir,
        Proc::Symlink,
        Proc::Mknod,
        Proc::Remove,
        Proc::Rmdir,
        Proc::Rename,
        Proc::Link,
        Proc::ReadDir,
        Proc::ReadDirPlus,
        Proc::FsStat,
        Proc::FsInfo,
        Proc::PathConf,
        Proc::Commit,
        Proc::Mount,
        Proc::Login,
        Proc::Rename2,
        Proc::Open,
        Proc::Close,
        Proc::GetXattr,
        Proc::SetXattr,
        Proc::ListXattr,
        Proc::RemoveXattr,
        Proc::Session,
        Proc::Sequence,
        Proc::Append,
        Proc::Narrow,
        Proc::Lock,
        Proc::Unlock,
        Proc::TestLock,
        Proc::Fetch,
        Proc::ListDir,
        Proc::CreateAt,
    ];

    /// The wire number.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// The procedure of wire number `code`.
    pub fn from_code(code: u32) -> Option<Proc> {
        Proc::ALL.iter().copied().find(|p| p.code() == code)
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Proc, DecodeError> {
        let value = r.u32("procedure")?;
        Proc::from_code(value).ok_or(DecodeError::BadDiscriminant {
            what: "procedure",
            value,
        })
    }

    /// Whether a client sends this procedure inside a SEQUENCE when the session has a reply
    /// cache ([`crate::sequence`]): every procedure that changes the file system, idempotent
    /// or not. A WRITE or a truncating SETATTR done again after the reply was lost would undo
    /// what another client wrote in between; answered from the cache it is done once. (Where
    /// the server lost the cache, a client still sends a WRITE again, as NFS clients do: see
    /// [`Proc::is_idempotent`].)
    pub fn is_sequenced(self) -> bool {
        matches!(
            self,
            Proc::SetAttr
                | Proc::Write
                | Proc::Create
                | Proc::CreateAt
                | Proc::Mkdir
                | Proc::Symlink
                | Proc::Mknod
                | Proc::Remove
                | Proc::Rmdir
                | Proc::Rename
                | Proc::Rename2
                | Proc::Link
                | Proc::SetXattr
                | Proc::RemoveXattr
                | Proc::Append
                | Proc::Lock
                | Proc::Unlock
        )
    }

    /// Whether repeating the call has the same effect as doing it once, so a client may retry
    /// it after a reconnect.
    pub fn is_idempotent(self) -> bool {
        !matches!(
            self,
            Proc::SetAttr
                | Proc::Create
                | Proc::CreateAt
                | Proc::Mkdir
                | Proc::Symlink
                | Proc::Mknod
                | Proc::Remove
                | Proc::Rmdir
                | Proc::Rename
                | Proc::Rename2
                | Proc::Link
                | Proc::Login
                // A replay after a CREATE-flagged set, or of a remove, fails on what the
                // first try did.
                | Proc::SetXattr
                | Proc::RemoveXattr
                // A replay appends the data a second time.
                | Proc::Append
                // A replayed LOCK may find the first one's lock and a replayed UNLOCK may
                // release what was taken since; TESTLOCK changes nothing.
                | Proc::Lock
                | Proc::Unlock
        )
    }
}

/// Whether a CREATE that makes a regular file with `mode` leaves an open state for its creator
/// (docs/PROTOCOL.md, "Open states"): the mode denies the file's owner reading or writing, so
/// the creator could not otherwise use what POSIX's `open(O_CREAT)` granted it. Server and
/// client apply this one rule: the server keeps the state, the client CLOSEs it.
pub fn create_keeps_open_state(mode: u32) -> bool {
    mode & 0o600 != 0o600
}

/// `ACCESS` bits (NFSv3 `ACCESS3_*`).
pub mod access {
    /// Read data or list a directory.
    pub const READ: u32 = 0x01;
    /// Look up a name in a directory.
    pub const LOOKUP: u32 = 0x02;
    /// Rewrite data or modify a directory.
    pub const MODIFY: u32 = 0x04;
    /// Write beyond the end of a file or add a directory entry.
    pub const EXTEND: u32 = 0x08;
    /// Delete a directory entry.
    pub const DELETE: u32 = 0x10;
    /// Execute a file or search a directory.
    pub const EXECUTE: u32 = 0x20;
}

/// RENAME2 flags (the values of Linux's `renameat2(2)` flags, so a server passes them on).
pub mod rename_flags {
    /// Fail with `Exist` instead of replacing an existing target.
    pub const NOREPLACE: u32 = 0x1;
    /// Every flag this protocol version defines; a request with any other bit does not decode.
    pub const ALL: u32 = NOREPLACE;
}

/// What MKNOD makes (NFSv3 `mknoddata3`): only the special types, so a request can never name
/// a regular file, directory or symlink here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SpecialKind {
    /// A named pipe.
    Fifo,
    /// A Unix-domain socket's name.
    Socket,
    /// A character device (major, minor).
    Char(u32, u32),
    /// A block device (major, minor).
    Block(u32, u32),
}

impl SpecialKind {
    /// The file type of the object made.
    pub fn ftype(self) -> crate::attr::FileType {
        use crate::attr::FileType;
        match self {
            SpecialKind::Fifo => FileType::Fifo,
            SpecialKind::Socket => FileType::Socket,
            SpecialKind::Char(..) => FileType::Char,
            SpecialKind::Block(..) => FileType::Block,
        }
    }
}

/// How durably WRITE must store data (NFSv3 `stable_how`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum StableHow {
    /// May stay in the server's cache until COMMIT.
    Unstable = 0,
    /// Data on stable storage before the reply.
    DataSync = 1,
    /// Data and metadata on stable storage before the reply.
    FileSync = 2,
}

impl StableHow {
    /// Reads a stability level (NFSv3 `stable_how`, the same numbers), refusing any other value.
    pub fn decode(r: &mut Reader<'_>) -> Result<StableHow, DecodeError> {
        Ok(match r.u32("stable how")? {
            0 => StableHow::Unstable,
            1 => StableHow::DataSync,
            2 => StableHow::FileSync,
            value => {
                return Err(DecodeError::BadDiscriminant {
                    what: "stable how",
                    value,
                });
            }
        })
    }
}

/// How CREATE creates (NFSv3 `createhow3`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreateHow {
    /// Create or truncate an existing file.
    Unchecked(SetAttr),
    /// Fail with `Exist` if the name exists.
    Guarded(SetAttr),
    /// Exclusive create, idempotent under retry thanks to the verifier.
    Exclusive([u8; 8]),
}

/// A request operation with its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestOp {
    /// Do nothing.
    Null,
    /// Get the root handle of `path` (`/` for the export's root).
    Mount {
        /// Path below the server's root.
        path: Vec<u8>,
    },
    /// The handle and attributes of the object at `path` (from the export's root; any type),
    /// and if it is a regular file, its first `count` bytes (versions 5 to 10).
    Fetch {
        /// Path below the export's root, components separated by `/` (`..` is refused).
        path: Vec<u8>,
        /// Most bytes of a regular file to return from offset 0 (clamped by the server).
        count: u32,
    },
    /// Log a user in.
    Login(LoginArgs),
    /// Get attributes.
    GetAttr {
        /// Object.
        fh: FileHandle,
    },
    /// Set attributes.
    SetAttr {
        /// Object.
        fh: FileHandle,
        /// What to change.
        attr: SetAttr,
        /// Only if the object's ctime is this.
        guard: Option<Time>,
    },
    /// Look `name` up in `dir`.
    Lookup {
        /// Directory.
        dir: FileHandle,
        /// Name.
        name: Vec<u8>,
    },
    /// Which of the `access` bits the user has on `fh`.
    Access {
        /// Object.
        fh: FileHandle,
        /// Bits asked about (see [`access`]).
        access: u32,
    },
    /// Read a symbolic link.
    ReadLink {
        /// Link.
        fh: FileHandle,
    },
    /// Open state (OPEN): the server keeps the object alive for this connection and user
    /// until CLOSE or the connection ends, and keeps what CREATE granted this user.
    Open {
        /// Object.
        fh: FileHandle,
    },
    /// Drops this connection's and user's open state on `fh` (CLOSE); none is not an error.
    Close {
        /// Object.
        fh: FileHandle,
    },
    /// An authno acting as the request authno's user with primary group `gid` and the
    /// supplementary `groups` the server also grants that user (NARROW): what a local process
    /// has, never more than the users file gives (docs/PROTOCOL.md, "Narrowed authnos").
    Narrow {
        /// Primary group (new objects' group; must be one of the user's groups).
        gid: u32,
        /// Supplementary groups wanted (at most [`MAX_NARROW_GROUPS`]).
        groups: Vec<u32>,
    },
    /// Binds the connection to the reply cache of client `client_id` (SESSION; authno 0),
    /// made if the server has none for it ([`crate::sequence`]).
    Session {
        /// The client's secret, random identity (the same on each of its connections).
        client_id: [u8; crate::sequence::CLIENT_ID_LEN],
        /// Slots wanted (at most [`crate::sequence::MAX_SLOTS`]).
        slots: u32,
    },
    /// `op` sent through slot `slot` with sequence number `seq` (SEQUENCE): done once however
    /// often it is sent, its reply kept until the slot's next request.
    Sequence {
        /// Slot (below the number SESSION granted).
        slot: u32,
        /// The slot's sequence number: its last one plus one for a new request, the same for a
        /// request sent again.
        seq: u32,
        /// The change ([`Proc::is_sequenced`]).
        op: Box<RequestOp>,
    },
    /// Read `count` bytes at `offset`.
    Read {
        /// File.
        fh: FileHandle,
        /// Byte offset.
        offset: u64,
        /// Bytes wanted (at most the negotiated maximum).
        count: u32,
    },
    /// Write `data` at `offset`.
    Write {
        /// File.
        fh: FileHandle,
        /// Byte offset.
        offset: u64,
        /// Durability wanted.
        stable: StableHow,
        /// The bytes.
        data: Data,
    },
    /// Write `data` at the end of the file (APPEND): the server places it at the size the file
    /// has then, atomically with respect to other appends, and answers where it went. Unlike a
    /// WRITE at the size the client believes, two clients appending never overwrite each
    /// other.
    Append {
        /// File.
        fh: FileHandle,
        /// Durability wanted.
        stable: StableHow,
        /// The bytes (bounded by the record, as WRITE's).
        data: Data,
    },
    /// Create a regular file.
    Create {
        /// Directory.
        dir: FileHandle,
        /// Name.
        name: Vec<u8>,
        /// Mode of creation.
        how: CreateHow,
    },
    /// Create a regular file at `path` from the export's root (versions 11 to 14): the
    /// directories on the way are searched as FETCH searches them, then the last component is
    /// made as CREATE makes it in the directory found.
    CreateAt {
        /// Path below the export's root, components separated by `/` (`..` is refused); the
        /// last component is the new name.
        path: Vec<u8>,
        /// Mode of creation.
        how: CreateHow,
    },
    /// Create a directory.
    Mkdir {
        /// Parent directory.
        dir: FileHandle,
        /// Name.
        name: Vec<u8>,
        /// Initial attributes.
        attr: SetAttr,
    },
    /// Create a symbolic link.
    Symlink {
        /// Directory.
        dir: FileHandle,
        /// Name.
        name: Vec<u8>,
        /// Initial attributes.
        attr: SetAttr,
        /// What the link points to.
        target: Vec<u8>,
    },
    /// Create a FIFO, socket or device node.
    Mknod {
        /// Directory.
        dir: FileHandle,
        /// Name.
        name: Vec<u8>,
        /// Type (and device numbers).
        kind: SpecialKind,
        /// Initial attributes.
        attr: SetAttr,
    },
    /// Remove a non-directory.
    Remove {
        /// Directory.
        dir: FileHandle,
        /// Name.
        name: Vec<u8>,
    },
    /// Remove an empty directory.
    Rmdir {
        /// Parent directory.
        dir: FileHandle,
        /// Name.
        name: Vec<u8>,
    },
    /// Rename.
    Rename {
        /// Source directory.
        from_dir: FileHandle,
        /// Source name.
        from_name: Vec<u8>,
        /// Target directory.
        to_dir: FileHandle,
        /// Target name.
        to_name: Vec<u8>,
    },
    /// Rename with [`rename_flags`] (RENAME2).
    Rename2 {
        /// Source directory.
        from_dir: FileHandle,
        /// Source name.
        from_name: Vec<u8>,
        /// Target directory.
        to_dir: FileHandle,
        /// Target name.
        to_name: Vec<u8>,
        /// Flags (only bits of [`rename_flags::ALL`]).
        flags: u32,
    },
    /// Make a hard link to `fh` as `dir/name`.
    Link {
        /// Existing object.
        fh: FileHandle,
        /// Directory of the new link.
        dir: FileHandle,
        /// Name of the new link.
        name: Vec<u8>,
    },
    /// Read directory entries.
    ReadDir {
        /// Directory.
        dir: FileHandle,
        /// Where to continue (0 = start).
        cookie: u64,
        /// Verifier returned with `cookie` (zeros at start).
        verifier: [u8; 8],
        /// Maximum reply size in bytes.
        count: u32,
    },
    /// Read directory entries with attributes and handles.
    ReadDirPlus {
        /// Directory.
        dir: FileHandle,
        /// Where to continue (0 = start).
        cookie: u64,
        /// Verifier returned with `cookie` (zeros at start).
        verifier: [u8; 8],
        /// Maximum bytes of names and cookies.
        dircount: u32,
        /// Maximum reply size in bytes.
        maxcount: u32,
    },
    /// READDIRPLUS's page with, for each entry, whether it has no extended attributes the
    /// caller may list (versions 7 to 10; the arguments are READDIRPLUS's).
    ListDir {
        /// Directory.
        dir: FileHandle,
        /// Where to continue (0 = start).
        cookie: u64,
        /// Verifier returned with `cookie` (zeros at start).
        verifier: [u8; 8],
        /// Maximum bytes of names and cookies.
        dircount: u32,
        /// Maximum reply size in bytes.
        maxcount: u32,
    },
    /// File system statistics.
    FsStat {
        /// Any object of the file system.
        fh: FileHandle,
    },
    /// Static file system information.
    FsInfo {
        /// Any object of the file system.
        fh: FileHandle,
    },
    /// POSIX path configuration.
    PathConf {
        /// Any object of the file system.
        fh: FileHandle,
    },
    /// Read extended attribute `name` of `fh` (GETXATTR).
    GetXattr {
        /// Object.
        fh: FileHandle,
        /// Attribute name, namespace prefix included (see [`crate::xattr`]).
        name: Vec<u8>,
    },
    /// Set extended attribute `name` of `fh` to `value` (SETXATTR).
    SetXattr {
        /// Object.
        fh: FileHandle,
        /// Attribute name.
        name: Vec<u8>,
        /// The value (at most [`crate::xattr::MAX_VALUE_LEN`] bytes).
        value: Vec<u8>,
        /// Only bits of [`crate::xattr::flags::ALL`].
        flags: u32,
    },
    /// The extended attribute names of `fh` (LISTXATTR).
    ListXattr {
        /// Object.
        fh: FileHandle,
    },
    /// Remove extended attribute `name` of `fh` (REMOVEXATTR).
    RemoveXattr {
        /// Object.
        fh: FileHandle,
        /// Attribute name.
        name: Vec<u8>,
    },
    /// Take a lock (LOCK).
    Lock(crate::lock::LockArgs),
    /// Release a holder's locks in a range (UNLOCK).
    Unlock(crate::lock::UnlockArgs),
    /// Test for a conflicting lock (TESTLOCK).
    TestLock(crate::lock::TestLockArgs),
    /// Commit unstable writes of a range (count 0 = to the end).
    Commit {
        /// File.
        fh: FileHandle,
        /// Start of the range.
        offset: u64,
        /// Length of the range.
        count: u32,
    },
}

mod wire;
pub(crate) use wire::{get_fh, get_name, put_fh};
