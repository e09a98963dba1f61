//! NFSv3 (RFC 1813) procedures, sans I/O: arguments packed with `nfs3_types`, results read
//! with the protocol crate's bounded XDR [`Reader`] into sfs's own types.
//!
//! The procedure numbers of sfs's protocol are NFSv3's, so a request maps to one NFSv3 call
//! (MOUNT, REMOVE and RENAME take a few, driven by the backend). Backend handles appear here
//! as plain byte slices: wrapping them in sfsd's MAC'd handles is the backend's job.

use std::io::Write;

use nfs3_types::nfs3::{
    self as n3, Nfs3Option, cookieverf3, createhow3, createverf3, diropargs3, filename3, nfs_fh3,
    nfspath3, nfstime3, sattr3, set_atime, set_mtime, stable_how, symlinkdata3,
};
use nfs3_types::xdr_codec::{Opaque, Pack};
use protocol::error::DecodeError;
use protocol::xdr::Reader;
use protocol::{
    Attr, CreateHow, FileType, FsInfo, FsStat, NfsStatus, PathConf, SetAttr, SetTime, StableHow,
    Time,
};

/// Longest name in a directory entry or path accepted from the backend.
pub(crate) const MAX_NAME: usize = 1024;
/// Longest symlink target accepted from the backend.
pub(crate) const MAX_LINK: usize = 4096;

/// Already-packed arguments.
pub(crate) struct Raw(pub Vec<u8>);

impl Pack for Raw {
    fn packed_size(&self) -> usize {
        self.0.len()
    }

    fn pack(&self, out: &mut impl Write) -> nfs3_types::xdr_codec::Result<usize> {
        out.write_all(&self.0)
            .map_err(nfs3_types::xdr_codec::Error::Io)?;
        Ok(self.0.len())
    }
}

/// Packs `args` (our own values: cannot fail).
pub(crate) fn pack(args: &impl Pack) -> Raw {
    let mut v = Vec::with_capacity(args.packed_size());
    let ok = args.pack(&mut v).is_ok();
    debug_assert!(ok);
    Raw(v)
}

pub(crate) fn fh3(b: &[u8]) -> nfs_fh3 {
    nfs_fh3 {
        data: Opaque::owned(b.to_vec()),
    }
}

pub(crate) fn dirop<'a>(dir: &[u8], name: &'a [u8]) -> diropargs3<'a> {
    diropargs3 {
        dir: fh3(dir),
        name: filename3(Opaque::borrowed(name)),
    }
}

/// NFSv3 times are unsigned 32-bit seconds: earlier or later times are clamped.
fn time3(t: Time) -> nfstime3 {
    nfstime3 {
        seconds: u32::try_from(t.seconds.max(0)).unwrap_or(u32::MAX),
        nseconds: t.nanos.min(999_999_999),
    }
}

fn opt<T: Pack + nfs3_types::xdr_codec::Unpack>(v: Option<T>) -> Nfs3Option<T> {
    v.map_or(Nfs3Option::None, Nfs3Option::Some)
}

pub(crate) fn sattr(s: &SetAttr) -> sattr3 {
    sattr3 {
        mode: opt(s.mode),
        uid: opt(s.uid),
        gid: opt(s.gid),
        size: opt(s.size),
        atime: match s.atime {
            SetTime::DontChange => set_atime::DONT_CHANGE,
            SetTime::ServerTime => set_atime::SET_TO_SERVER_TIME,
            SetTime::ClientTime(t) => set_atime::SET_TO_CLIENT_TIME(time3(t)),
        },
        mtime: match s.mtime {
            SetTime::DontChange => set_mtime::DONT_CHANGE,
            SetTime::ServerTime => set_mtime::SET_TO_SERVER_TIME,
            SetTime::ClientTime(t) => set_mtime::SET_TO_CLIENT_TIME(time3(t)),
        },
    }
}

pub(crate) fn setattr(fh: &[u8], s: &SetAttr, guard: Option<Time>) -> Raw {
    pack(&n3::SETATTR3args {
        object: fh3(fh),
        new_attributes: sattr(s),
        guard: opt(guard.map(time3)),
    })
}

pub(crate) fn create(dir: &[u8], name: &[u8], how: &CreateHow) -> Raw {
    pack(&n3::CREATE3args {
        where_: dirop(dir, name),
        how: match how {
            CreateHow::Unchecked(s) => createhow3::UNCHECKED(sattr(s)),
            CreateHow::Guarded(s) => createhow3::GUARDED(sattr(s)),
            CreateHow::Exclusive(v) => createhow3::EXCLUSIVE(createverf3(*v)),
        },
    })
}

pub(crate) fn symlink(dir: &[u8], name: &[u8], attr: &SetAttr, target: &[u8]) -> Raw {
    pack(&n3::SYMLINK3args {
        where_: dirop(dir, name),
        symlink: symlinkdata3 {
            symlink_attributes: sattr(attr),
            symlink_data: nfspath3(Opaque::borrowed(target)),
        },
    })
}

pub(crate) fn write(fh: &[u8], offset: u64, stable: StableHow, data: &[u8]) -> Raw {
    pack(&n3::WRITE3args {
        file: fh3(fh),
        offset,
        count: data.len() as u32,
        stable: match stable {
            StableHow::Unstable => stable_how::UNSTABLE,
            StableHow::DataSync => stable_how::DATA_SYNC,
            StableHow::FileSync => stable_how::FILE_SYNC,
        },
        data: Opaque::borrowed(data),
    })
}

pub(crate) fn readdir(dir: &[u8], cookie: u64, verifier: [u8; 8], count: u32) -> Raw {
    pack(&n3::READDIR3args {
        dir: fh3(dir),
        cookie,
        cookieverf: cookieverf3(verifier),
        count,
    })
}

pub(crate) fn readdirplus(
    dir: &[u8],
    cookie: u64,
    verifier: [u8; 8],
    dircount: u32,
    max: u32,
) -> Raw {
    pack(&n3::READDIRPLUS3args {
        dir: fh3(dir),
        cookie,
        cookieverf: cookieverf3(verifier),
        dircount,
        maxcount: max,
    })
}

/// MOUNT's MNT argument: the export path.
pub(crate) fn mnt(path: &[u8]) -> Raw {
    pack(&nfs3_types::mount::dirpath(Opaque::borrowed(path)))
}

/// PMAP GETPORT's argument.
pub(crate) fn getport(prog: u32, vers: u32) -> Raw {
    pack(&nfs3_types::portmap::mapping {
        prog,
        vers,
        prot: nfs3_types::portmap::IPPROTO_TCP,
        port: 0,
    })
}

// ---- results ----

/// The status that starts every NFSv3 result; anything but OK ends the decoding.
pub(crate) fn status(r: &mut Reader<'_>) -> Result<Result<(), NfsStatus>, DecodeError> {
    let code = r.u32("nfs status")?;
    Ok(match code {
        0 => Ok(()),
        // The backend's numbers are NFSv3's, as ours; one we do not know is an I/O error.
        code => Err(NfsStatus::from_code(code).unwrap_or(NfsStatus::Io)),
    })
}

fn time(r: &mut Reader<'_>) -> Result<Time, DecodeError> {
    let seconds = i64::from(r.u32("seconds")?);
    let nanos = r.u32("nanoseconds")?;
    // A backend's out-of-range nanoseconds are clamped rather than passed on (our clients
    // refuse them).
    Ok(Time {
        seconds,
        nanos: nanos.min(999_999_999),
    })
}

/// `fattr3`, with lease 0 (the backend sets the lease).
pub(crate) fn fattr(r: &mut Reader<'_>) -> Result<Attr, DecodeError> {
    Ok(Attr {
        ftype: FileType::decode(r)?,
        mode: r.u32("mode")? & 0o7777,
        nlink: r.u32("nlink")?,
        uid: r.u32("uid")?,
        gid: r.u32("gid")?,
        size: r.u64("size")?,
        used: r.u64("used")?,
        rdev: (r.u32("rdev")?, r.u32("rdev")?),
        fsid: r.u64("fsid")?,
        fileid: r.u64("fileid")?,
        atime: time(r)?,
        mtime: time(r)?,
        ctime: time(r)?,
        lease_ms: 0,
    })
}

pub(crate) fn post_op_attr(r: &mut Reader<'_>) -> Result<Option<Attr>, DecodeError> {
    if r.bool("post_op_attr")? {
        Ok(Some(fattr(r)?))
    } else {
        Ok(None)
    }
}

/// `wcc_data`: the attributes after the change (those before are skipped).
pub(crate) fn wcc(r: &mut Reader<'_>) -> Result<Option<Attr>, DecodeError> {
    if r.bool("pre_op_attr")? {
        r.fixed::<24>("wcc_attr")?;
    }
    post_op_attr(r)
}

pub(crate) fn fh<'a>(r: &mut Reader<'a>) -> Result<&'a [u8], DecodeError> {
    r.opaque(protocol::handle::BACKEND_FH_MAX, "nfs_fh3")
}

pub(crate) fn post_op_fh<'a>(r: &mut Reader<'a>) -> Result<Option<&'a [u8]>, DecodeError> {
    if r.bool("post_op_fh3")? {
        Ok(Some(fh(r)?))
    } else {
        Ok(None)
    }
}

/// A READDIR(PLUS) entry as the backend sent it.
#[derive(Debug)]
pub(crate) struct Entry<'a> {
    pub fileid: u64,
    pub name: &'a [u8],
    pub cookie: u64,
    pub attr: Option<Attr>,
    pub fh: Option<&'a [u8]>,
}

/// A directory page: attributes, verifier, entries, eof.
#[derive(Debug)]
pub(crate) struct Page<'a> {
    pub dir_attr: Option<Attr>,
    pub verifier: [u8; 8],
    pub entries: Vec<Entry<'a>>,
    pub eof: bool,
}

/// READDIR or READDIRPLUS results. The entry list is as long as the (bounded) reply allows,
/// at least 20 bytes an entry.
pub(crate) fn dir_page<'a>(r: &mut Reader<'a>, plus: bool) -> Result<Page<'a>, DecodeError> {
    let dir_attr = post_op_attr(r)?;
    let verifier = r.fixed::<8>("cookie verifier")?;
    let mut entries = Vec::new();
    while r.bool("entry follows")? {
        let fileid = r.u64("fileid")?;
        let name = r.opaque(MAX_NAME, "file name")?;
        let cookie = r.u64("cookie")?;
        let (attr, fh) = if plus {
            (post_op_attr(r)?, post_op_fh(r)?)
        } else {
            (None, None)
        };
        entries.push(Entry {
            fileid,
            name,
            cookie,
            attr,
            fh,
        });
    }
    let eof = r.bool("eof")?;
    Ok(Page {
        dir_attr,
        verifier,
        entries,
        eof,
    })
}

pub(crate) fn fsstat(r: &mut Reader<'_>) -> Result<FsStat, DecodeError> {
    Ok(FsStat {
        attr: post_op_attr(r)?,
        tbytes: r.u64("tbytes")?,
        fbytes: r.u64("fbytes")?,
        abytes: r.u64("abytes")?,
        tfiles: r.u64("tfiles")?,
        ffiles: r.u64("ffiles")?,
        afiles: r.u64("afiles")?,
        invarsec: r.u32("invarsec")?,
    })
}

pub(crate) fn fsinfo(r: &mut Reader<'_>) -> Result<FsInfo, DecodeError> {
    Ok(FsInfo {
        attr: post_op_attr(r)?,
        rtmax: r.u32("rtmax")?,
        rtpref: r.u32("rtpref")?,
        rtmult: r.u32("rtmult")?,
        wtmax: r.u32("wtmax")?,
        wtpref: r.u32("wtpref")?,
        wtmult: r.u32("wtmult")?,
        dtpref: r.u32("dtpref")?,
        maxfilesize: r.u64("maxfilesize")?,
        time_delta: time(r)?,
        properties: r.u32("properties")?,
    })
}

pub(crate) fn pathconf(r: &mut Reader<'_>) -> Result<PathConf, DecodeError> {
    Ok(PathConf {
        attr: post_op_attr(r)?,
        linkmax: r.u32("linkmax")?,
        name_max: r.u32("name_max")?,
        no_trunc: r.bool("no_trunc")?,
        chown_restricted: r.bool("chown_restricted")?,
        case_insensitive: r.bool("case_insensitive")?,
        case_preserving: r.bool("case_preserving")?,
    })
}

/// MOUNT MNT results: the export's root handle (the auth flavors are not needed: sfsd
/// always speaks AUTH_SYS, and a refusal shows up as an RPC auth error).
pub(crate) fn mnt_result<'a>(r: &mut Reader<'a>) -> Result<Result<&'a [u8], u32>, DecodeError> {
    match r.u32("mount status")? {
        0 => Ok(Ok(fh(r)?)),
        code => Ok(Err(code)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(v: &mut Vec<u8>, words: &[u32]) {
        for x in words {
            v.extend_from_slice(&x.to_be_bytes());
        }
    }

    fn fattr_words(v: &mut Vec<u8>, ftype: u32, fileid: u32) {
        // type mode nlink uid gid size(2) used(2) rdev(2) fsid(2) fileid(2) 3 times(2 each)
        w(
            v,
            &[
                ftype,
                0o100644,
                1,
                1000,
                100,
                0,
                42,
                0,
                4096,
                0,
                0,
                0,
                7,
                0,
                fileid,
                1,
                2,
                3,
                2_000_000_000,
                5,
                6,
            ],
        );
    }

    #[test]
    fn attributes_and_handles() {
        let mut v = Vec::new();
        w(&mut v, &[1]);
        fattr_words(&mut v, 1, 99);
        w(&mut v, &[1, 3]);
        v.extend_from_slice(b"fh\x01\x00");
        let mut r = Reader::new(&v);
        let a = post_op_attr(&mut r).unwrap().unwrap();
        assert_eq!(a.ftype, FileType::Regular);
        assert_eq!(a.mode, 0o644);
        assert_eq!((a.size, a.fsid, a.fileid), (42, 7, 99));
        // Out-of-range nanoseconds are clamped, not passed on.
        assert_eq!(a.mtime.nanos, 999_999_999);
        assert_eq!(post_op_fh(&mut r).unwrap(), Some(&b"fh\x01"[..]));
        // A backend handle longer than NFSv3 allows is refused.
        let mut v = Vec::new();
        w(&mut v, &[65]);
        v.extend_from_slice(&[0; 68]);
        assert!(fh(&mut Reader::new(&v)).is_err());
        // An unknown file type is refused.
        let mut v = Vec::new();
        fattr_words(&mut v, 9, 1);
        assert!(fattr(&mut Reader::new(&v)).is_err());
    }

    #[test]
    fn statuses_map_to_ours() {
        for (code, want) in [
            (0, Ok(())),
            (13, Err(NfsStatus::Acces)),
            (70, Err(NfsStatus::Stale)),
            (10008, Err(NfsStatus::Jukebox)),
            (12345, Err(NfsStatus::Io)),
        ] {
            let v = (code as u32).to_be_bytes();
            assert_eq!(status(&mut Reader::new(&v)).unwrap(), want);
        }
    }

    #[test]
    fn directory_pages() {
        let mut v = Vec::new();
        w(&mut v, &[0]); // no dir attributes
        v.extend_from_slice(&[9; 8]);
        for (id, name) in [(5u32, &b"a"[..]), (6, b"bcde")] {
            w(&mut v, &[1, 0, id, name.len() as u32]);
            v.extend_from_slice(name);
            v.resize(v.len().div_ceil(4) * 4, 0);
            w(&mut v, &[0, id * 10]);
        }
        w(&mut v, &[0, 1]);
        let p = dir_page(&mut Reader::new(&v), false).unwrap();
        assert_eq!(p.verifier, [9; 8]);
        assert!(p.eof);
        assert_eq!(p.entries.len(), 2);
        assert_eq!(
            (p.entries[1].fileid, p.entries[1].name, p.entries[1].cookie),
            (6, &b"bcde"[..], 60)
        );
        // Cut anywhere, it is an error, never a panic.
        for cut in 0..v.len() {
            assert!(dir_page(&mut Reader::new(&v[..cut]), false).is_err());
        }
        // A name's padding that is not zero is refused (XDR has one encoding of each value):
        // the first entry's name "a" is followed by three bytes of padding.
        let padding = 4 + 8 + 16 + 1;
        v[padding] = 1;
        assert_eq!(
            dir_page(&mut Reader::new(&v), false).unwrap_err(),
            DecodeError::NonZeroPadding("file name")
        );
    }

    #[test]
    fn arguments_pack_as_rfc_1813_says() {
        let Raw(b) = write(b"abc", 7, StableHow::FileSync, b"hello");
        let mut r = Reader::new(&b);
        assert_eq!(r.opaque(64, "").unwrap(), b"abc");
        assert_eq!(r.u64("").unwrap(), 7);
        assert_eq!(r.u32("").unwrap(), 5);
        assert_eq!(r.u32("").unwrap(), 2);
        assert_eq!(r.opaque(64, "").unwrap(), b"hello");
        assert_eq!(r.remaining(), 0);
        let s = SetAttr {
            mode: Some(0o600),
            mtime: SetTime::ClientTime(Time {
                seconds: -5,
                nanos: 1,
            }),
            ..SetAttr::default()
        };
        let Raw(b) = setattr(b"f", &s, None);
        let mut r = Reader::new(&b);
        r.opaque(64, "").unwrap();
        assert_eq!(r.u32("").unwrap(), 1);
        assert_eq!(r.u32("").unwrap(), 0o600);
        for _ in 0..3 {
            assert_eq!(r.u32("").unwrap(), 0); // uid, gid, size unset
        }
        assert_eq!(r.u32("").unwrap(), 0); // atime: don't change
        assert_eq!(r.u32("").unwrap(), 2); // mtime: client time, clamped at 0
        assert_eq!(r.u32("").unwrap(), 0);
        assert_eq!(r.u32("").unwrap(), 1);
        assert_eq!(r.u32("").unwrap(), 0); // no guard
        assert_eq!(r.remaining(), 0);
    }
}
