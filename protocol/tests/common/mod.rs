//! Proptest strategies for every protocol message, shared by the integration tests.

#![allow(dead_code)]

use proptest::prelude::*;
use proptest::strategy::Union;
use protocol::*;

pub(crate) fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..=max)
}

pub(crate) fn fh() -> impl Strategy<Value = FileHandle> {
    prop::collection::vec(any::<u8>(), HANDLE_LEN).prop_map(|v| FileHandle::from_slice(&v).unwrap())
}

pub(crate) fn name() -> impl Strategy<Value = Vec<u8>> {
    bytes(40)
}

/// A valid extended attribute name: non-empty, no NUL, at most 255 bytes (here up to 40).
pub(crate) fn xattr_name() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(1..=255u8, 1..=40)
}

pub(crate) fn verifier() -> impl Strategy<Value = [u8; 8]> {
    any::<u64>().prop_map(u64::to_be_bytes)
}

pub(crate) fn time() -> impl Strategy<Value = Time> {
    (any::<i64>(), 0..1_000_000_000u32).prop_map(|(seconds, nanos)| Time { seconds, nanos })
}

pub(crate) fn ftype() -> impl Strategy<Value = FileType> {
    prop_oneof![
        Just(FileType::Regular),
        Just(FileType::Directory),
        Just(FileType::Block),
        Just(FileType::Char),
        Just(FileType::Symlink),
        Just(FileType::Socket),
        Just(FileType::Fifo),
    ]
}

pub(crate) fn attr() -> impl Strategy<Value = Attr> {
    (
        (
            ftype(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
        ),
        (
            any::<u64>(),
            any::<u64>(),
            any::<(u32, u32)>(),
            any::<u64>(),
            any::<u64>(),
        ),
        (time(), time(), time(), any::<u32>()),
    )
        .prop_map(
            |(
                (ftype, mode, nlink, uid, gid),
                (size, used, rdev, fsid, fileid),
                (atime, mtime, ctime, lease_ms),
            )| Attr {
                ftype,
                mode,
                nlink,
                uid,
                gid,
                size,
                used,
                rdev,
                fsid,
                fileid,
                atime,
                mtime,
                ctime,
                lease_ms,
            },
        )
}

pub(crate) fn opt_attr() -> impl Strategy<Value = Option<Attr>> {
    prop::option::of(attr())
}

pub(crate) fn set_time() -> impl Strategy<Value = SetTime> {
    prop_oneof![
        Just(SetTime::DontChange),
        Just(SetTime::ServerTime),
        time().prop_map(SetTime::ClientTime),
    ]
}

pub(crate) fn set_attr() -> impl Strategy<Value = SetAttr> {
    (
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u32>>(),
        any::<Option<u64>>(),
        set_time(),
        set_time(),
    )
        .prop_map(|(mode, uid, gid, size, atime, mtime)| SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
        })
}

pub(crate) fn stable() -> impl Strategy<Value = StableHow> {
    prop_oneof![
        Just(StableHow::Unstable),
        Just(StableHow::DataSync),
        Just(StableHow::FileSync),
    ]
}

pub(crate) fn login_args() -> impl Strategy<Value = LoginArgs> {
    (
        "[a-z][a-z0-9_.-]{0,20}",
        any::<[u8; 32]>(),
        any::<u64>(),
        prop::collection::vec(any::<u8>(), 64),
    )
        .prop_map(|(user, seed, seqno, sig)| LoginArgs {
            user,
            public_key: UserKeypair::from_seed(seed).public_key(),
            seqno,
            signature: sig.try_into().unwrap(),
        })
}

/// Every operation: the plain ones, SESSION, and a SEQUENCE around each change.
pub(crate) fn request_op() -> impl Strategy<Value = RequestOp> {
    prop_oneof![
        8 => plain_request_op(),
        1 => (any::<[u8; protocol::sequence::CLIENT_ID_LEN]>(), any::<u32>())
            .prop_map(|(client_id, slots)| RequestOp::Session { client_id, slots }),
        2 => (
            any::<u32>(),
            any::<u32>(),
            plain_request_op().prop_filter("a change", |op| op.proc().is_sequenced()),
        )
            .prop_map(|(slot, seq, op)| RequestOp::Sequence { slot, seq, op: Box::new(op) }),
    ]
}

/// Every operation but SESSION and SEQUENCE.
fn plain_request_op() -> impl Strategy<Value = RequestOp> {
    Union::new(vec![
        Just(RequestOp::Null).boxed(),
        bytes(60).prop_map(|path| RequestOp::Mount { path }).boxed(),
        (bytes(60), any::<u32>())
            .prop_map(|(path, count)| RequestOp::Fetch { path, count })
            .boxed(),
        login_args().prop_map(RequestOp::Login).boxed(),
        fh().prop_map(|fh| RequestOp::GetAttr { fh }).boxed(),
        (fh(), set_attr(), prop::option::of(time()))
            .prop_map(|(fh, attr, guard)| RequestOp::SetAttr { fh, attr, guard })
            .boxed(),
        (fh(), name())
            .prop_map(|(dir, name)| RequestOp::Lookup { dir, name })
            .boxed(),
        (fh(), any::<u32>())
            .prop_map(|(fh, access)| RequestOp::Access { fh, access })
            .boxed(),
        fh().prop_map(|fh| RequestOp::ReadLink { fh }).boxed(),
        fh().prop_map(|fh| RequestOp::Open { fh }).boxed(),
        fh().prop_map(|fh| RequestOp::Close { fh }).boxed(),
        (
            fh(),
            any::<u64>(),
            lock_kind(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
            any::<bool>(),
        )
            .prop_map(|(fh, owner, kind, start, len, flock, reclaim)| {
                RequestOp::Lock(protocol::LockArgs {
                    fh,
                    owner,
                    kind,
                    start,
                    len,
                    flock,
                    reclaim,
                })
            })
            .boxed(),
        (
            fh(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
        )
            .prop_map(|(fh, owner, start, len, flock)| {
                RequestOp::Unlock(protocol::UnlockArgs {
                    fh,
                    owner,
                    start,
                    len,
                    flock,
                })
            })
            .boxed(),
        (
            fh(),
            any::<u64>(),
            lock_kind(),
            any::<u64>(),
            any::<u64>(),
            any::<bool>(),
        )
            .prop_map(|(fh, owner, kind, start, len, flock)| {
                RequestOp::TestLock(protocol::TestLockArgs {
                    fh,
                    owner,
                    kind,
                    start,
                    len,
                    flock,
                })
            })
            .boxed(),
        (fh(), xattr_name())
            .prop_map(|(fh, name)| RequestOp::GetXattr { fh, name })
            .boxed(),
        (fh(), xattr_name(), bytes(300), 0..=3u32)
            .prop_map(|(fh, name, value, flags)| RequestOp::SetXattr {
                fh,
                name,
                value,
                flags,
            })
            .boxed(),
        fh().prop_map(|fh| RequestOp::ListXattr { fh }).boxed(),
        (fh(), xattr_name())
            .prop_map(|(fh, name)| RequestOp::RemoveXattr { fh, name })
            .boxed(),
        (
            any::<u32>(),
            prop::collection::vec(any::<u32>(), 0..=protocol::request::MAX_NARROW_GROUPS),
        )
            .prop_map(|(gid, groups)| RequestOp::Narrow { gid, groups })
            .boxed(),
        (fh(), any::<u64>(), any::<u32>())
            .prop_map(|(fh, offset, count)| RequestOp::Read { fh, offset, count })
            .boxed(),
        (fh(), any::<u64>(), stable(), bytes(300))
            .prop_map(|(fh, offset, stable, data)| RequestOp::Write {
                fh,
                offset,
                stable,
                data: data.into(),
            })
            .boxed(),
        (fh(), stable(), bytes(300))
            .prop_map(|(fh, stable, data)| RequestOp::Append {
                fh,
                stable,
                data: data.into(),
            })
            .boxed(),
        (
            fh(),
            name(),
            prop_oneof![
                set_attr().prop_map(CreateHow::Unchecked),
                set_attr().prop_map(CreateHow::Guarded),
                verifier().prop_map(CreateHow::Exclusive),
            ],
        )
            .prop_map(|(dir, name, how)| RequestOp::Create { dir, name, how })
            .boxed(),
        (
            bytes(100),
            prop_oneof![
                set_attr().prop_map(CreateHow::Unchecked),
                set_attr().prop_map(CreateHow::Guarded),
                verifier().prop_map(CreateHow::Exclusive),
            ],
        )
            .prop_map(|(path, how)| RequestOp::CreateAt { path, how })
            .boxed(),
        (fh(), name(), set_attr())
            .prop_map(|(dir, name, attr)| RequestOp::Mkdir { dir, name, attr })
            .boxed(),
        (fh(), name(), set_attr(), bytes(60))
            .prop_map(|(dir, name, attr, target)| RequestOp::Symlink {
                dir,
                name,
                attr,
                target,
            })
            .boxed(),
        (
            fh(),
            name(),
            prop_oneof![
                Just(SpecialKind::Fifo),
                Just(SpecialKind::Socket),
                any::<(u32, u32)>().prop_map(|(a, b)| SpecialKind::Char(a, b)),
                any::<(u32, u32)>().prop_map(|(a, b)| SpecialKind::Block(a, b)),
            ],
            set_attr(),
        )
            .prop_map(|(dir, name, kind, attr)| RequestOp::Mknod {
                dir,
                name,
                kind,
                attr,
            })
            .boxed(),
        (fh(), name(), fh(), name(), 0..=rename_flags::ALL)
            .prop_map(
                |(from_dir, from_name, to_dir, to_name, flags)| RequestOp::Rename2 {
                    from_dir,
                    from_name,
                    to_dir,
                    to_name,
                    flags,
                },
            )
            .boxed(),
        (fh(), name())
            .prop_map(|(dir, name)| RequestOp::Remove { dir, name })
            .boxed(),
        (fh(), name())
            .prop_map(|(dir, name)| RequestOp::Rmdir { dir, name })
            .boxed(),
        (fh(), name(), fh(), name())
            .prop_map(|(from_dir, from_name, to_dir, to_name)| RequestOp::Rename {
                from_dir,
                from_name,
                to_dir,
                to_name,
            })
            .boxed(),
        (fh(), fh(), name())
            .prop_map(|(fh, dir, name)| RequestOp::Link { fh, dir, name })
            .boxed(),
        (fh(), any::<u64>(), verifier(), any::<u32>())
            .prop_map(|(dir, cookie, verifier, count)| RequestOp::ReadDir {
                dir,
                cookie,
                verifier,
                count,
            })
            .boxed(),
        (
            fh(),
            any::<u64>(),
            verifier(),
            any::<u32>(),
            any::<u32>(),
            any::<bool>(),
        )
            .prop_map(|(dir, cookie, verifier, dircount, maxcount, listdir)| {
                if listdir {
                    RequestOp::ListDir {
                        dir,
                        cookie,
                        verifier,
                        dircount,
                        maxcount,
                    }
                } else {
                    RequestOp::ReadDirPlus {
                        dir,
                        cookie,
                        verifier,
                        dircount,
                        maxcount,
                    }
                }
            })
            .boxed(),
        fh().prop_map(|fh| RequestOp::FsStat { fh }).boxed(),
        fh().prop_map(|fh| RequestOp::FsInfo { fh }).boxed(),
        fh().prop_map(|fh| RequestOp::PathConf { fh }).boxed(),
        (fh(), any::<u64>(), any::<u32>())
            .prop_map(|(fh, offset, count)| RequestOp::Commit { fh, offset, count })
            .boxed(),
    ])
}

pub(crate) fn request() -> impl Strategy<Value = Request> {
    (any::<u64>(), any::<u32>(), request_op()).prop_map(|(id, authno, op)| Request {
        id,
        authno,
        op,
    })
}

fn new_object() -> impl Strategy<Value = NewObject> {
    (proptest::option::of(fh()), opt_attr(), opt_attr())
        .prop_map(|(fh, attr, dir_attr)| NewObject { fh, attr, dir_attr })
}

fn dir_entry() -> impl Strategy<Value = DirEntry> {
    (any::<u64>(), name(), any::<u64>()).prop_map(|(fileid, name, cookie)| DirEntry {
        fileid,
        name,
        cookie,
    })
}

fn dir_entry_plus() -> impl Strategy<Value = DirEntryPlus> {
    (
        any::<u64>(),
        name(),
        any::<u64>(),
        opt_attr(),
        prop::option::of(fh()),
    )
        .prop_map(|(fileid, name, cookie, attr, fh)| DirEntryPlus {
            fileid,
            name,
            cookie,
            attr,
            fh,
        })
}

fn page<E: std::fmt::Debug>(entry: impl Strategy<Value = E>) -> impl Strategy<Value = DirPage<E>> {
    (
        opt_attr(),
        verifier(),
        prop::collection::vec(entry, 0..6),
        any::<bool>(),
    )
        .prop_map(|(dir_attr, verifier, entries, eof)| DirPage {
            dir_attr,
            verifier,
            entries,
            eof,
        })
}

pub(crate) fn reply_body() -> impl Strategy<Value = ReplyBody> {
    Union::new(vec![
        Just(ReplyBody::Null).boxed(),
        (fh(), attr())
            .prop_map(|(fh, attr)| ReplyBody::Mount { fh, attr })
            .boxed(),
        (fh(), attr(), any::<bool>(), bytes(300))
            .prop_map(|(fh, attr, eof, data)| ReplyBody::Fetch {
                fh,
                attr,
                eof,
                data: data.into(),
            })
            .boxed(),
        any::<u32>()
            .prop_map(|authno| ReplyBody::Login { authno })
            .boxed(),
        any::<u32>()
            .prop_map(|authno| ReplyBody::Narrow { authno })
            .boxed(),
        (any::<u32>(), any::<bool>())
            .prop_map(|(slots, resumed)| ReplyBody::Session { slots, resumed })
            .boxed(),
        Just(ReplyBody::Lock).boxed(),
        Just(ReplyBody::Unlock).boxed(),
        prop::option::of(
            (lock_kind(), any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
                |(kind, start, len, holder)| protocol::LockConflict {
                    kind,
                    start,
                    len,
                    holder,
                },
            ),
        )
        .prop_map(|conflict| ReplyBody::TestLock { conflict })
        .boxed(),
        attr().prop_map(|attr| ReplyBody::GetAttr { attr }).boxed(),
        opt_attr()
            .prop_map(|attr| ReplyBody::SetAttr { attr })
            .boxed(),
        (fh(), opt_attr(), opt_attr())
            .prop_map(|(fh, attr, dir_attr)| ReplyBody::Lookup { fh, attr, dir_attr })
            .boxed(),
        (opt_attr(), any::<u32>())
            .prop_map(|(attr, access)| ReplyBody::Access { attr, access })
            .boxed(),
        (opt_attr(), bytes(60))
            .prop_map(|(attr, target)| ReplyBody::ReadLink { attr, target })
            .boxed(),
        (opt_attr(), any::<bool>(), bytes(300))
            .prop_map(|(attr, eof, data)| ReplyBody::Read {
                attr,
                eof,
                data: data.into(),
            })
            .boxed(),
        (opt_attr(), any::<u32>(), stable(), verifier())
            .prop_map(|(attr, count, committed, verifier)| ReplyBody::Write {
                attr,
                count,
                committed,
                verifier,
            })
            .boxed(),
        (opt_attr(), any::<u32>(), stable(), verifier(), any::<u64>())
            .prop_map(
                |(attr, count, committed, verifier, offset)| ReplyBody::Append {
                    attr,
                    count,
                    committed,
                    verifier,
                    offset,
                },
            )
            .boxed(),
        new_object().prop_map(ReplyBody::Create).boxed(),
        (fh(), new_object())
            .prop_map(|(dir, made)| ReplyBody::CreateAt {
                dir,
                made: Box::new(made),
            })
            .boxed(),
        new_object().prop_map(ReplyBody::Mkdir).boxed(),
        new_object().prop_map(ReplyBody::Symlink).boxed(),
        new_object().prop_map(ReplyBody::Mknod).boxed(),
        (opt_attr(), opt_attr())
            .prop_map(|(from_dir_attr, to_dir_attr)| ReplyBody::Rename2 {
                from_dir_attr,
                to_dir_attr,
            })
            .boxed(),
        opt_attr()
            .prop_map(|dir_attr| ReplyBody::Remove { dir_attr })
            .boxed(),
        opt_attr()
            .prop_map(|dir_attr| ReplyBody::Rmdir { dir_attr })
            .boxed(),
        (opt_attr(), opt_attr())
            .prop_map(|(from_dir_attr, to_dir_attr)| ReplyBody::Rename {
                from_dir_attr,
                to_dir_attr,
            })
            .boxed(),
        (opt_attr(), opt_attr())
            .prop_map(|(attr, dir_attr)| ReplyBody::Link { attr, dir_attr })
            .boxed(),
        page(dir_entry()).prop_map(ReplyBody::ReadDir).boxed(),
        page(dir_entry_plus())
            .prop_map(ReplyBody::ReadDirPlus)
            .boxed(),
        (page(dir_entry_plus()), any::<u64>())
            .prop_map(|(page, bits)| {
                let bare = (0..page.entries.len())
                    .map(|i| bits >> (i % 64) & 1 == 1)
                    .collect();
                ReplyBody::ListDir { page, bare }
            })
            .boxed(),
        (opt_attr(), any::<[u64; 6]>(), any::<u32>())
            .prop_map(|(attr, v, invarsec)| {
                ReplyBody::FsStat(FsStat {
                    attr,
                    tbytes: v[0],
                    fbytes: v[1],
                    abytes: v[2],
                    tfiles: v[3],
                    ffiles: v[4],
                    afiles: v[5],
                    invarsec,
                })
            })
            .boxed(),
        (
            opt_attr(),
            any::<[u32; 7]>(),
            any::<u64>(),
            time(),
            any::<u32>(),
        )
            .prop_map(|(attr, v, maxfilesize, time_delta, properties)| {
                ReplyBody::FsInfo(FsInfo {
                    attr,
                    rtmax: v[0],
                    rtpref: v[1],
                    rtmult: v[2],
                    wtmax: v[3],
                    wtpref: v[4],
                    wtmult: v[5],
                    dtpref: v[6],
                    maxfilesize,
                    time_delta,
                    properties,
                })
            })
            .boxed(),
        (opt_attr(), any::<u32>(), any::<u32>(), any::<[bool; 4]>())
            .prop_map(|(attr, linkmax, name_max, b)| {
                ReplyBody::PathConf(PathConf {
                    attr,
                    linkmax,
                    name_max,
                    no_trunc: b[0],
                    chown_restricted: b[1],
                    case_insensitive: b[2],
                    case_preserving: b[3],
                })
            })
            .boxed(),
        (opt_attr(), verifier())
            .prop_map(|(attr, verifier)| ReplyBody::Commit { attr, verifier })
            .boxed(),
        opt_attr().prop_map(|attr| ReplyBody::Open { attr }).boxed(),
        Just(ReplyBody::Close).boxed(),
        bytes(300)
            .prop_map(|value| ReplyBody::GetXattr { value })
            .boxed(),
        opt_attr()
            .prop_map(|attr| ReplyBody::SetXattr { attr })
            .boxed(),
        prop::collection::vec(xattr_name(), 0..6)
            .prop_map(|names| ReplyBody::ListXattr { names })
            .boxed(),
        opt_attr()
            .prop_map(|attr| ReplyBody::RemoveXattr { attr })
            .boxed(),
    ])
}

pub(crate) fn status() -> impl Strategy<Value = NfsStatus> {
    prop::sample::select(NfsStatus::ALL)
}

pub(crate) fn server_message() -> impl Strategy<Value = ServerMessage> {
    prop_oneof![
        3 => (any::<u64>(), reply_body())
            .prop_map(|(id, body)| ServerMessage::Reply(Reply { id, result: Ok(body) })),
        1 => (any::<u64>(), status())
            .prop_map(|(id, s)| ServerMessage::Reply(Reply { id, result: Err(s) })),
        1 => (fh(), opt_attr())
            .prop_map(|(fh, attr)| ServerMessage::Invalidate(Invalidate { fh, attr })),
    ]
}

pub(crate) fn lock_kind() -> impl Strategy<Value = protocol::LockKind> {
    prop_oneof![
        Just(protocol::LockKind::Read),
        Just(protocol::LockKind::Write)
    ]
}
