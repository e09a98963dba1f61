//! Reply bodies (server to client), one per procedure.
//!
//! Replies carry post-operation attributes where NFSv3 does (so a client refreshes its cache
//! without another round trip), each with its lease.

use crate::attr::{Attr, Time, decode_opt_attr, encode_opt_attr};
use crate::data::Data;
use crate::error::DecodeError;
use crate::handle::FileHandle;
use crate::request::{MAX_PATH_LEN, Proc, StableHow, get_fh, get_name, put_fh};
use crate::xattr;
use crate::xdr::{self, Reader};

/// A new object made by CREATE, MKDIR, SYMLINK or MKNOD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewObject {
    /// Its handle; absent when the object was made but the server could not then look it up
    /// (out of descriptors, or the name already gone again). The operation succeeded all
    /// the same: the client LOOKUPs the name for the handle, as with NFSv3's optional
    /// `post_op_fh3`. An error answer would be wrong, since a retry would find the name
    /// taken (by the object the first try made).
    pub fh: Option<FileHandle>,
    /// Its attributes.
    pub attr: Option<Attr>,
    /// The directory's attributes after the operation.
    pub dir_attr: Option<Attr>,
}

/// One READDIR entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// File id (inode number).
    pub fileid: u64,
    /// Name.
    pub name: Vec<u8>,
    /// Cookie to continue after this entry.
    pub cookie: u64,
}

/// One READDIRPLUS entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntryPlus {
    /// File id (inode number).
    pub fileid: u64,
    /// Name.
    pub name: Vec<u8>,
    /// Cookie to continue after this entry.
    pub cookie: u64,
    /// Attributes, if the server has them cheaply.
    pub attr: Option<Attr>,
    /// Handle, if the server has it cheaply.
    pub fh: Option<FileHandle>,
}

/// A page of directory entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirPage<E> {
    /// The directory's attributes.
    pub dir_attr: Option<Attr>,
    /// Verifier to send back with the cookies of this page.
    pub verifier: [u8; 8],
    /// The entries.
    pub entries: Vec<E>,
    /// Whether the last entry is the directory's last.
    pub eof: bool,
}

/// FSSTAT results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsStat {
    /// Attributes of the object asked about.
    pub attr: Option<Attr>,
    /// Total bytes.
    pub tbytes: u64,
    /// Free bytes.
    pub fbytes: u64,
    /// Free bytes available to the user.
    pub abytes: u64,
    /// Total file slots.
    pub tfiles: u64,
    /// Free file slots.
    pub ffiles: u64,
    /// Free file slots available to the user.
    pub afiles: u64,
    /// Seconds for which these values will not change (0: volatile).
    pub invarsec: u32,
}

/// FSINFO results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FsInfo {
    /// Attributes of the object asked about.
    pub attr: Option<Attr>,
    /// Largest READ count.
    pub rtmax: u32,
    /// Preferred READ count.
    pub rtpref: u32,
    /// Suggested READ multiple.
    pub rtmult: u32,
    /// Largest WRITE count.
    pub wtmax: u32,
    /// Preferred WRITE count.
    pub wtpref: u32,
    /// Suggested WRITE multiple.
    pub wtmult: u32,
    /// Preferred READDIR count.
    pub dtpref: u32,
    /// Largest file size.
    pub maxfilesize: u64,
    /// Time granularity.
    pub time_delta: Time,
    /// `FSF3_*` property bits (LINK 1, SYMLINK 2, HOMOGENEOUS 8, CANSETTIME 0x10).
    pub properties: u32,
}

/// PATHCONF results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathConf {
    /// Attributes of the object asked about.
    pub attr: Option<Attr>,
    /// Largest link count.
    pub linkmax: u32,
    /// Longest name.
    pub name_max: u32,
    /// Whether longer names are refused rather than truncated.
    pub no_trunc: bool,
    /// Whether chown is restricted to the superuser.
    pub chown_restricted: bool,
    /// Whether names are case-insensitive.
    pub case_insensitive: bool,
    /// Whether names keep their case.
    pub case_preserving: bool,
}

/// The successful result of a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyBody {
    /// NULL.
    Null,
    /// MOUNT: the root handle of the path.
    Mount {
        /// Root handle.
        fh: FileHandle,
        /// Its attributes.
        attr: Attr,
    },
    /// FETCH: the object at the path, and a regular file's first bytes.
    Fetch {
        /// Its handle.
        fh: FileHandle,
        /// Its attributes.
        attr: Attr,
        /// Whether `data` reaches the end of the file (always true for other types).
        eof: bool,
        /// The file's bytes from offset 0 (empty for other types).
        data: Data,
    },
    /// LOGIN: the authno the user's requests carry from now on.
    Login {
        /// Assigned authno (never 0).
        authno: u32,
    },
    /// SESSION: the slots granted, and whether the server still had the client's record
    /// (the replies of its earlier connection are kept; see [`crate::sequence`]).
    Session {
        /// Slots granted (1 to [`crate::sequence::MAX_SLOTS`]).
        slots: u32,
        /// The record existed: requests sent on an earlier connection may be sent again.
        resumed: bool,
    },
    /// NARROW: the authno with the narrowed groups.
    Narrow {
        /// Assigned authno (never 0).
        authno: u32,
    },
    /// GETATTR.
    GetAttr {
        /// Attributes.
        attr: Attr,
    },
    /// SETATTR.
    SetAttr {
        /// Attributes after the change.
        attr: Option<Attr>,
    },
    /// LOOKUP.
    Lookup {
        /// The object found.
        fh: FileHandle,
        /// Its attributes.
        attr: Option<Attr>,
        /// The directory's attributes.
        dir_attr: Option<Attr>,
    },
    /// ACCESS.
    Access {
        /// Attributes.
        attr: Option<Attr>,
        /// Bits granted (a subset of those asked).
        access: u32,
    },
    /// READLINK.
    ReadLink {
        /// Attributes.
        attr: Option<Attr>,
        /// The link's target.
        target: Vec<u8>,
    },
    /// READ. On the wire `data` is the tail of the record, see
    /// [`crate::message::encode_read_reply_at`].
    Read {
        /// Attributes.
        attr: Option<Attr>,
        /// Whether the read reached the end of the file.
        eof: bool,
        /// The bytes read.
        data: Data,
    },
    /// WRITE.
    Write {
        /// Attributes after the write.
        attr: Option<Attr>,
        /// Bytes written.
        count: u32,
        /// Durability achieved.
        committed: StableHow,
        /// Changes when the server restarts (unstable writes must then be resent).
        verifier: [u8; 8],
    },
    /// APPEND: WRITE's results, and where the data went.
    Append {
        /// Attributes after the append.
        attr: Option<Attr>,
        /// Bytes written.
        count: u32,
        /// Durability achieved.
        committed: StableHow,
        /// As WRITE's (unstable appends are committed like unstable writes).
        verifier: [u8; 8],
        /// The offset of the first byte written: the file's size just before, as the server
        /// placed the data.
        offset: u64,
    },
    /// CREATE.
    Create(NewObject),
    /// CREATEAT: CREATE's answer and the directory the path led to (where the client looks
    /// the name up if the answer carries no handle for it).
    CreateAt {
        /// The directory the new name is in.
        dir: FileHandle,
        /// The new file, as CREATE answers (boxed: the variant would otherwise make every
        /// reply larger).
        made: Box<NewObject>,
    },
    /// MKDIR.
    Mkdir(NewObject),
    /// SYMLINK.
    Symlink(NewObject),
    /// MKNOD.
    Mknod(NewObject),
    /// REMOVE.
    Remove {
        /// The directory's attributes after the removal.
        dir_attr: Option<Attr>,
    },
    /// RMDIR.
    Rmdir {
        /// The parent's attributes after the removal.
        dir_attr: Option<Attr>,
    },
    /// RENAME.
    Rename {
        /// Source directory attributes after the rename.
        from_dir_attr: Option<Attr>,
        /// Target directory attributes after the rename.
        to_dir_attr: Option<Attr>,
    },
    /// RENAME2 (the same results as RENAME).
    Rename2 {
        /// Source directory attributes after the rename.
        from_dir_attr: Option<Attr>,
        /// Target directory attributes after the rename.
        to_dir_attr: Option<Attr>,
    },
    /// LINK.
    Link {
        /// The object's attributes.
        attr: Option<Attr>,
        /// The directory's attributes.
        dir_attr: Option<Attr>,
    },
    /// READDIR.
    ReadDir(DirPage<DirEntry>),
    /// READDIRPLUS.
    ReadDirPlus(DirPage<DirEntryPlus>),
    /// LISTDIR: READDIRPLUS's page, and for each of its entries (same order, same count)
    /// whether it had no extended attributes the caller may list when the page was read.
    ListDir {
        /// The page.
        page: DirPage<DirEntryPlus>,
        /// `bare[i]`: entry `i` had none (false: it had some, or the server did not look).
        bare: Vec<bool>,
    },
    /// FSSTAT.
    FsStat(FsStat),
    /// FSINFO.
    FsInfo(FsInfo),
    /// PATHCONF.
    PathConf(PathConf),
    /// OPEN: the object's attributes.
    Open {
        /// Attributes.
        attr: Option<Attr>,
    },
    /// CLOSE.
    Close,
    /// GETXATTR: the whole value (a client asking only for its size gets it from here).
    GetXattr {
        /// The value (at most [`crate::xattr::MAX_VALUE_LEN`] bytes).
        value: Vec<u8>,
    },
    /// SETXATTR.
    SetXattr {
        /// Attributes after the change (the ctime moved).
        attr: Option<Attr>,
    },
    /// LISTXATTR: every name of the object the caller may list.
    ListXattr {
        /// The names, without NULs ([`crate::xattr::list_len`] at most
        /// [`crate::xattr::MAX_LIST_LEN`]).
        names: Vec<Vec<u8>>,
    },
    /// REMOVEXATTR.
    RemoveXattr {
        /// Attributes after the change.
        attr: Option<Attr>,
    },
    /// COMMIT.
    Commit {
        /// Attributes.
        attr: Option<Attr>,
        /// Write verifier.
        verifier: [u8; 8],
    },
    /// LOCK: granted.
    Lock,
    /// UNLOCK.
    Unlock,
    /// TESTLOCK: the lock in the way, or none (a LOCK would be granted now).
    TestLock {
        /// The conflicting lock.
        conflict: Option<crate::lock::LockConflict>,
    },
}

fn encode_new(buf: &mut Vec<u8>, o: &NewObject) {
    xdr::put_option(buf, o.fh.as_ref(), put_fh);
    encode_opt_attr(buf, o.attr.as_ref());
    encode_opt_attr(buf, o.dir_attr.as_ref());
}

fn decode_new(r: &mut Reader<'_>) -> Result<NewObject, DecodeError> {
    Ok(NewObject {
        fh: r.option("handle follows", get_fh)?,
        attr: decode_opt_attr(r)?,
        dir_attr: decode_opt_attr(r)?,
    })
}

/// Smallest encoding of a READDIR entry: fileid, empty name, cookie.
const MIN_ENTRY_LEN: usize = 8 + 4 + 8;
/// Smallest encoding of a READDIRPLUS entry: the above plus two absent optionals.
const MIN_ENTRY_PLUS_LEN: usize = MIN_ENTRY_LEN + 4 + 4;

fn encode_page<E>(buf: &mut Vec<u8>, p: &DirPage<E>, entry: impl Fn(&mut Vec<u8>, &E)) {
    encode_opt_attr(buf, p.dir_attr.as_ref());
    xdr::put_fixed(buf, &p.verifier);
    xdr::put_count(buf, p.entries.len());
    for e in &p.entries {
        entry(buf, e);
    }
    xdr::put_bool(buf, p.eof);
}

fn encode_entry_plus(b: &mut Vec<u8>, e: &DirEntryPlus) {
    xdr::put_u64(b, e.fileid);
    xdr::put_opaque(b, &e.name);
    xdr::put_u64(b, e.cookie);
    encode_opt_attr(b, e.attr.as_ref());
    xdr::put_option(b, e.fh.as_ref(), put_fh);
}

fn decode_entry_plus(r: &mut Reader<'_>) -> Result<DirEntryPlus, DecodeError> {
    Ok(DirEntryPlus {
        fileid: r.u64("fileid")?,
        name: get_name(r)?,
        cookie: r.u64("cookie")?,
        attr: decode_opt_attr(r)?,
        fh: r.option("handle follows", get_fh)?,
    })
}

/// LISTDIR's bits, entry `i` in bit `i % 8` of byte `i / 8`.
fn bare_bitmap(bare: &[bool]) -> Vec<u8> {
    let mut bits = vec![0u8; bare.len().div_ceil(8)];
    for (i, _) in bare.iter().enumerate().filter(|(_, b)| **b) {
        bits[i / 8] |= 1 << (i % 8);
    }
    bits
}

fn decode_page<E>(
    r: &mut Reader<'_>,
    min_entry: usize,
    entry: impl Fn(&mut Reader<'_>) -> Result<E, DecodeError>,
) -> Result<DirPage<E>, DecodeError> {
    let dir_attr = decode_opt_attr(r)?;
    let verifier = r.fixed::<8>("cookie verifier")?;
    let n = r.count(min_entry, "directory entries")?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        entries.push(entry(r)?);
    }
    Ok(DirPage {
        dir_attr,
        verifier,
        entries,
        eof: r.bool("eof")?,
    })
}

impl ReplyBody {
    /// The procedure this is a reply to.
    pub fn proc(&self) -> Proc {
        match self {
            ReplyBody::Null => Proc::Null,
            ReplyBody::Mount { .. } => Proc::Mount,
            ReplyBody::Fetch { .. } => Proc::Fetch,
            ReplyBody::Login { .. } => Proc::Login,
            ReplyBody::Narrow { .. } => Proc::Narrow,
            ReplyBody::Session { .. } => Proc::Session,
            ReplyBody::GetAttr { .. } => Proc::GetAttr,
            ReplyBody::SetAttr { .. } => Proc::SetAttr,
            ReplyBody::Lookup { .. } => Proc::Lookup,
            ReplyBody::Access { .. } => Proc::Access,
            ReplyBody::ReadLink { .. } => Proc::ReadLink,
            ReplyBody::Read { .. } => Proc::Read,
            ReplyBody::Write { .. } => Proc::Write,
            ReplyBody::Append { .. } => Proc::Append,
            ReplyBody::Create(_) => Proc::Create,
            ReplyBody::CreateAt { .. } => Proc::CreateAt,
            ReplyBody::Mkdir(_) => Proc::Mkdir,
            ReplyBody::Symlink(_) => Proc::Symlink,
            ReplyBody::Mknod(_) => Proc::Mknod,
            ReplyBody::Remove { .. } => Proc::Remove,
            ReplyBody::Rmdir { .. } => Proc::Rmdir,
            ReplyBody::Rename { .. } => Proc::Rename,
            ReplyBody::Rename2 { .. } => Proc::Rename2,
            ReplyBody::Link { .. } => Proc::Link,
            ReplyBody::ReadDir(_) => Proc::ReadDir,
            ReplyBody::ReadDirPlus(_) => Proc::ReadDirPlus,
            ReplyBody::ListDir { .. } => Proc::ListDir,
            ReplyBody::FsStat(_) => Proc::FsStat,
            ReplyBody::FsInfo(_) => Proc::FsInfo,
            ReplyBody::PathConf(_) => Proc::PathConf,
            ReplyBody::Commit { .. } => Proc::Commit,
            ReplyBody::Open { .. } => Proc::Open,
            ReplyBody::Close => Proc::Close,
            ReplyBody::GetXattr { .. } => Proc::GetXattr,
            ReplyBody::SetXattr { .. } => Proc::SetXattr,
            ReplyBody::ListXattr { .. } => Proc::ListXattr,
            ReplyBody::RemoveXattr { .. } => Proc::RemoveXattr,
            ReplyBody::Lock => Proc::Lock,
            ReplyBody::Unlock => Proc::Unlock,
            ReplyBody::TestLock { .. } => Proc::TestLock,
        }
    }

    /// Every attribute the reply carries (a server uses it to adjust the leases they grant).
    pub fn attrs_mut(&mut self) -> Vec<&mut Attr> {
        let mut out: Vec<&mut Attr> = Vec::new();
        match self {
            ReplyBody::Null
            | ReplyBody::Login { .. }
            | ReplyBody::Narrow { .. }
            | ReplyBody::Session { .. }
            | ReplyBody::Close
            | ReplyBody::GetXattr { .. }
            | ReplyBody::ListXattr { .. }
            | ReplyBody::Lock
            | ReplyBody::Unlock
            | ReplyBody::TestLock { .. } => {}
            ReplyBody::Mount { attr, .. }
            | ReplyBody::Fetch { attr, .. }
            | ReplyBody::GetAttr { attr } => out.push(attr),
            ReplyBody::SetAttr { attr }
            | ReplyBody::Access { attr, .. }
            | ReplyBody::ReadLink { attr, .. }
            | ReplyBody::Read { attr, .. }
            | ReplyBody::Write { attr, .. }
            | ReplyBody::Append { attr, .. }
            | ReplyBody::Commit { attr, .. }
            | ReplyBody::Open { attr }
            | ReplyBody::SetXattr { attr }
            | ReplyBody::RemoveXattr { attr }
            | ReplyBody::FsStat(FsStat { attr, .. })
            | ReplyBody::FsInfo(FsInfo { attr, .. })
            | ReplyBody::PathConf(PathConf { attr, .. })
            | ReplyBody::Remove { dir_attr: attr }
            | ReplyBody::Rmdir { dir_attr: attr } => out.extend(attr.as_mut()),
            ReplyBody::Lookup { attr, dir_attr, .. } | ReplyBody::Link { attr, dir_attr } => {
                out.extend(attr.as_mut());
                out.extend(dir_attr.as_mut());
            }
            ReplyBody::Create(o)
            | ReplyBody::Mkdir(o)
            | ReplyBody::Symlink(o)
            | ReplyBody::Mknod(o) => {
                out.extend(o.attr.as_mut());
                out.extend(o.dir_attr.as_mut());
            }
            ReplyBody::CreateAt { made, .. } => {
                out.extend(made.attr.as_mut());
                out.extend(made.dir_attr.as_mut());
            }
            ReplyBody::Rename {
                from_dir_attr,
                to_dir_attr,
            }
            | ReplyBody::Rename2 {
                from_dir_attr,
                to_dir_attr,
            } => {
                out.extend(from_dir_attr.as_mut());
                out.extend(to_dir_attr.as_mut());
            }
            ReplyBody::ReadDir(page) => out.extend(page.dir_attr.as_mut()),
            ReplyBody::ReadDirPlus(page) | ReplyBody::ListDir { page, .. } => {
                out.extend(page.dir_attr.as_mut());
                out.extend(page.entries.iter_mut().filter_map(|e| e.attr.as_mut()));
            }
        }
        out
    }

    /// Appends the procedure number and the body.
    pub(crate) fn encode(&self, buf: &mut Vec<u8>) {
        xdr::put_u32(buf, self.proc().code());
        match self {
            ReplyBody::Null | ReplyBody::Close | ReplyBody::Lock | ReplyBody::Unlock => {}
            ReplyBody::TestLock { conflict } => crate::lock::put_conflict(buf, conflict.as_ref()),
            ReplyBody::Open { attr }
            | ReplyBody::SetXattr { attr }
            | ReplyBody::RemoveXattr { attr } => encode_opt_attr(buf, attr.as_ref()),
            ReplyBody::GetXattr { value } => xdr::put_opaque(buf, value),
            ReplyBody::ListXattr { names } => xattr::put_names(buf, names),
            ReplyBody::Mount { fh, attr } => {
                put_fh(buf, fh);
                attr.encode(buf);
            }
            ReplyBody::Fetch {
                fh,
                attr,
                eof,
                data,
            } => {
                put_fh(buf, fh);
                attr.encode(buf);
                xdr::put_bool(buf, *eof);
                xdr::put_opaque(buf, data);
            }
            ReplyBody::Login { authno } | ReplyBody::Narrow { authno } => {
                xdr::put_u32(buf, *authno)
            }
            ReplyBody::Session { slots, resumed } => {
                xdr::put_u32(buf, *slots);
                xdr::put_bool(buf, *resumed);
            }
            ReplyBody::GetAttr { attr } => attr.encode(buf),
            ReplyBody::SetAttr { attr } => encode_opt_attr(buf, attr.as_ref()),
            ReplyBody::Lookup { fh, attr, dir_attr } => {
                put_fh(buf, fh);
                encode_opt_attr(buf, attr.as_ref());
                encode_opt_attr(buf, dir_attr.as_ref());
            }
            ReplyBody::Access { attr, access } => {
                encode_opt_attr(buf, attr.as_ref());
                xdr::put_u32(buf, *access);
            }
            ReplyBody::ReadLink { attr, target } => {
                encode_opt_attr(buf, attr.as_ref());
                xdr::put_opaque(buf, target);
            }
            ReplyBody::Read { attr, eof, data } => {
                encode_opt_attr(buf, attr.as_ref());
                xdr::put_bool(buf, *eof);
                xdr::put_opaque(buf, data);
            }
            ReplyBody::Write {
                attr,
                count,
                committed,
                verifier,
            } => {
                encode_opt_attr(buf, attr.as_ref());
                xdr::put_u32(buf, *count);
                xdr::put_u32(buf, *committed as u32);
                xdr::put_fixed(buf, verifier);
            }
            ReplyBody::Append {
                attr,
                count,
                committed,
                verifier,
                offset,
            } => {
                encode_opt_attr(buf, attr.as_ref());
                xdr::put_u32(buf, *count);
                xdr::put_u32(buf, *committed as u32);
                xdr::put_fixed(buf, verifier);
                xdr::put_u64(buf, *offset);
            }
            ReplyBody::Create(o)
            | ReplyBody::Mkdir(o)
            | ReplyBody::Symlink(o)
            | ReplyBody::Mknod(o) => {
                encode_new(buf, o);
            }
            ReplyBody::CreateAt { dir, made } => {
                put_fh(buf, dir);
                encode_new(buf, made);
            }
            ReplyBody::Remove { dir_attr } | ReplyBody::Rmdir { dir_attr } => {
                encode_opt_attr(buf, dir_attr.as_ref());
            }
            ReplyBody::Rename {
                from_dir_attr,
                to_dir_attr,
            }
            | ReplyBody::Rename2 {
                from_dir_attr,
                to_dir_attr,
            } => {
                encode_opt_attr(buf, from_dir_attr.as_ref());
                encode_opt_attr(buf, to_dir_attr.as_ref());
            }
            ReplyBody::Link { attr, dir_attr } => {
                encode_opt_attr(buf, attr.as_ref());
                encode_opt_attr(buf, dir_attr.as_ref());
            }
            ReplyBody::ReadDir(p) => encode_page(buf, p, |b, e| {
                xdr::put_u64(b, e.fileid);
                xdr::put_opaque(b, &e.name);
                xdr::put_u64(b, e.cookie);
            }),
            ReplyBody::ReadDirPlus(p) => encode_page(buf, p, encode_entry_plus),
            ReplyBody::ListDir { page, bare } => {
                encode_page(buf, page, encode_entry_plus);
                xdr::put_opaque(buf, &bare_bitmap(bare));
            }
            ReplyBody::FsStat(s) => {
                encode_opt_attr(buf, s.attr.as_ref());
                for v in [s.tbytes, s.fbytes, s.abytes, s.tfiles, s.ffiles, s.afiles] {
                    xdr::put_u64(buf, v);
                }
                xdr::put_u32(buf, s.invarsec);
            }
            ReplyBody::FsInfo(i) => {
                encode_opt_attr(buf, i.attr.as_ref());
                for v in [
                    i.rtmax, i.rtpref, i.rtmult, i.wtmax, i.wtpref, i.wtmult, i.dtpref,
                ] {
                    xdr::put_u32(buf, v);
                }
                xdr::put_u64(buf, i.maxfilesize);
                i.time_delta.encode(buf);
                xdr::put_u32(buf, i.properties);
            }
            ReplyBody::PathConf(p) => {
                encode_opt_attr(buf, p.attr.as_ref());
                xdr::put_u32(buf, p.linkmax);
                xdr::put_u32(buf, p.name_max);
                for v in [
                    p.no_trunc,
                    p.chown_restricted,
                    p.case_insensitive,
                    p.case_preserving,
                ] {
                    xdr::put_bool(buf, v);
                }
            }
            ReplyBody::Commit { attr, verifier } => {
                encode_opt_attr(buf, attr.as_ref());
                xdr::put_fixed(buf, verifier);
            }
        }
    }

    /// Reads the procedure number and the body.
    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<ReplyBody, DecodeError> {
        Ok(match Proc::decode(r)? {
            Proc::Null => ReplyBody::Null,
            Proc::Open => ReplyBody::Open {
                attr: decode_opt_attr(r)?,
            },
            Proc::Close => ReplyBody::Close,
            Proc::Lock => ReplyBody::Lock,
            Proc::Unlock => ReplyBody::Unlock,
            Proc::TestLock => ReplyBody::TestLock {
                conflict: crate::lock::get_conflict(r)?,
            },
            Proc::GetXattr => ReplyBody::GetXattr {
                value: xattr::get_value(r)?,
            },
            Proc::SetXattr => ReplyBody::SetXattr {
                attr: decode_opt_attr(r)?,
            },
            Proc::ListXattr => ReplyBody::ListXattr {
                names: xattr::get_names(r)?,
            },
            Proc::RemoveXattr => ReplyBody::RemoveXattr {
                attr: decode_opt_attr(r)?,
            },
            Proc::Mount => ReplyBody::Mount {
                fh: get_fh(r)?,
                attr: Attr::decode(r)?,
            },
            Proc::Fetch => ReplyBody::Fetch {
                fh: get_fh(r)?,
                attr: Attr::decode(r)?,
                eof: r.bool("eof")?,
                data: r.opaque_data(usize::MAX, "fetch data")?,
            },
            Proc::Login => ReplyBody::Login {
                authno: r.u32("authno")?,
            },
            Proc::Narrow => ReplyBody::Narrow {
                authno: r.u32("authno")?,
            },
            Proc::Session => ReplyBody::Session {
                slots: r.u32("slots")?,
                resumed: r.bool("resumed")?,
            },
            // A sequenced request's reply is its change's.
            Proc::Sequence => {
                return Err(DecodeError::BadDiscriminant {
                    what: "reply procedure",
                    value: Proc::Sequence.code(),
                });
            }
            Proc::GetAttr => ReplyBody::GetAttr {
                attr: Attr::decode(r)?,
            },
            Proc::SetAttr => ReplyBody::SetAttr {
                attr: decode_opt_attr(r)?,
            },
            Proc::Lookup => ReplyBody::Lookup {
                fh: get_fh(r)?,
                attr: decode_opt_attr(r)?,
                dir_attr: decode_opt_attr(r)?,
            },
            Proc::Access => ReplyBody::Access {
                attr: decode_opt_attr(r)?,
                access: r.u32("access")?,
            },
            Proc::ReadLink => ReplyBody::ReadLink {
                attr: decode_opt_attr(r)?,
                target: r.opaque_vec(MAX_PATH_LEN, "symlink target")?,
            },
            Proc::Read => ReplyBody::Read {
                attr: decode_opt_attr(r)?,
                eof: r.bool("eof")?,
                data: r.opaque_data(usize::MAX, "read data")?,
            },
            Proc::Write => ReplyBody::Write {
                attr: decode_opt_attr(r)?,
                count: r.u32("count")?,
                committed: StableHow::decode(r)?,
                verifier: r.fixed::<8>("write verifier")?,
            },
            Proc::Append => ReplyBody::Append {
                attr: decode_opt_attr(r)?,
                count: r.u32("count")?,
                committed: StableHow::decode(r)?,
                verifier: r.fixed::<8>("write verifier")?,
                offset: r.u64("append offset")?,
            },
            Proc::Create => ReplyBody::Create(decode_new(r)?),
            Proc::CreateAt => ReplyBody::CreateAt {
                dir: get_fh(r)?,
                made: Box::new(decode_new(r)?),
            },
            Proc::Mkdir => ReplyBody::Mkdir(decode_new(r)?),
            Proc::Symlink => ReplyBody::Symlink(decode_new(r)?),
            Proc::Mknod => ReplyBody::Mknod(decode_new(r)?),
            Proc::Remove => ReplyBody::Remove {
                dir_attr: decode_opt_attr(r)?,
            },
            Proc::Rmdir => ReplyBody::Rmdir {
                dir_attr: decode_opt_attr(r)?,
            },
            Proc::Rename => ReplyBody::Rename {
                from_dir_attr: decode_opt_attr(r)?,
                to_dir_attr: decode_opt_attr(r)?,
            },
            Proc::Rename2 => ReplyBody::Rename2 {
                from_dir_attr: decode_opt_attr(r)?,
                to_dir_attr: decode_opt_attr(r)?,
            },
            Proc::Link => ReplyBody::Link {
                attr: decode_opt_attr(r)?,
                dir_attr: decode_opt_attr(r)?,
            },
            Proc::ReadDir => ReplyBody::ReadDir(decode_page(r, MIN_ENTRY_LEN, |r| {
                Ok(DirEntry {
                    fileid: r.u64("fileid")?,
                    name: get_name(r)?,
                    cookie: r.u64("cookie")?,
                })
            })?),
            Proc::ReadDirPlus => {
                ReplyBody::ReadDirPlus(decode_page(r, MIN_ENTRY_PLUS_LEN, decode_entry_plus)?)
            }
            Proc::ListDir => {
                let page = decode_page(r, MIN_ENTRY_PLUS_LEN, decode_entry_plus)?;
                let n = page.entries.len();
                let bits = r.opaque(n.div_ceil(8), "bare entries")?;
                if bits.len() != n.div_ceil(8) {
                    // One bit per entry, no more and no fewer bytes.
                    return Err(DecodeError::UnexpectedEnd {
                        what: "bare entries",
                        needed: n.div_ceil(8),
                        remaining: bits.len(),
                    });
                }
                // Bits beyond the last entry are zero (the encoding is canonical: a hostile
                // server cannot say anything of entries it did not list).
                if n % 8 != 0 && bits[n / 8] >> (n % 8) != 0 {
                    return Err(DecodeError::NonZeroPadding("bare entries"));
                }
                let bare = (0..n).map(|i| bits[i / 8] & (1 << (i % 8)) != 0).collect();
                ReplyBody::ListDir { page, bare }
            }
            Proc::FsStat => ReplyBody::FsStat(FsStat {
                attr: decode_opt_attr(r)?,
                tbytes: r.u64("tbytes")?,
                fbytes: r.u64("fbytes")?,
                abytes: r.u64("abytes")?,
                tfiles: r.u64("tfiles")?,
                ffiles: r.u64("ffiles")?,
                afiles: r.u64("afiles")?,
                invarsec: r.u32("invarsec")?,
            }),
            Proc::FsInfo => ReplyBody::FsInfo(FsInfo {
                attr: decode_opt_attr(r)?,
                rtmax: r.u32("rtmax")?,
                rtpref: r.u32("rtpref")?,
                rtmult: r.u32("rtmult")?,
                wtmax: r.u32("wtmax")?,
                wtpref: r.u32("wtpref")?,
                wtmult: r.u32("wtmult")?,
                dtpref: r.u32("dtpref")?,
                maxfilesize: r.u64("maxfilesize")?,
                time_delta: Time::decode(r)?,
                properties: r.u32("properties")?,
            }),
            Proc::PathConf => ReplyBody::PathConf(PathConf {
                attr: decode_opt_attr(r)?,
                linkmax: r.u32("linkmax")?,
                name_max: r.u32("name_max")?,
                no_trunc: r.bool("no_trunc")?,
                chown_restricted: r.bool("chown_restricted")?,
                case_insensitive: r.bool("case_insensitive")?,
                case_preserving: r.bool("case_preserving")?,
            }),
            Proc::Commit => ReplyBody::Commit {
                attr: decode_opt_attr(r)?,
                verifier: r.fixed::<8>("write verifier")?,
            },
        })
    }
}
