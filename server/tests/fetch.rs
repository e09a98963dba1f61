//! FETCH and CREATEAT: an object by path with a regular file's first bytes, a file made by
//! path, and the pipelined first request either is sent as (with the authno a LOGIN not yet
//! answered will get).

mod common;

use common::*;
use protocol::*;

const ALICE: (&str, u8, u32, &str) = ("alice", 1, 1000, "1000");

fn fetch(c: &mut Client, a: u32, path: &str, count: u32) -> Result<ReplyBody, NfsStatus> {
    c.call(
        a,
        RequestOp::Fetch {
            path: path.as_bytes().to_vec(),
            count,
        },
    )
}

fn area_with_files() -> (Area, Sfsd) {
    let area = Area::new();
    let export = area.export();
    std::fs::create_dir(export.join("dir")).unwrap();
    std::fs::write(export.join("dir/small"), b"hello").unwrap();
    let big: Vec<u8> = (0..3_000_000u32).map(|i| ((i * 31) >> 3) as u8).collect();
    std::fs::write(export.join("big"), &big).unwrap();
    std::fs::write(export.join("secret"), b"no").unwrap();
    std::fs::set_permissions(
        export.join("secret"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    for p in ["dir", "dir/small", "big"] {
        std::os::unix::fs::chown(export.join(p), Some(1000), Some(1000)).unwrap();
    }
    let users = area.users(&[ALICE]);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    (area, s)
}

#[test]
fn fetch_finds_any_object_and_brings_a_files_first_bytes() {
    let (area, s) = area_with_files();
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    match fetch(&mut c, a, "/dir/small", u32::MAX).unwrap() {
        ReplyBody::Fetch {
            fh,
            attr,
            eof,
            data,
        } => {
            assert_eq!(&data[..], b"hello");
            assert!(eof);
            assert_eq!(attr.ftype, FileType::Regular);
            assert_eq!(attr.size, 5);
            // The handle is the one LOOKUP gives.
            let root = c.mount(a);
            let dir = c.lookup(a, root, "dir").unwrap();
            assert_eq!(c.lookup(a, dir, "small").unwrap(), fh);
        }
        other => panic!("{other:?}"),
    }
    // A large file: as much as one record holds (a handle's room short of a READ), not the end.
    let big = std::fs::read(area.export().join("big")).unwrap();
    match fetch(&mut c, a, "big", u32::MAX).unwrap() {
        ReplyBody::Fetch { eof, data, .. } => {
            assert!(!eof);
            assert!(
                !data.is_empty() && data.len() < c.max_io as usize,
                "{}",
                data.len()
            );
            assert_eq!(&data[..], &big[..data.len()]);
        }
        other => panic!("{other:?}"),
    }
    // A small count is honoured.
    match fetch(&mut c, a, "big", 10).unwrap() {
        ReplyBody::Fetch { eof, data, .. } => {
            assert!(!eof);
            assert_eq!(&data[..], &big[..10]);
        }
        other => panic!("{other:?}"),
    }
    // A directory: its handle and attributes, no bytes.
    match fetch(&mut c, a, "/dir/", u32::MAX).unwrap() {
        ReplyBody::Fetch {
            attr, eof, data, ..
        } => {
            assert_eq!(attr.ftype, FileType::Directory);
            assert!(eof && data.is_empty());
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn fetch_is_refused_what_the_caller_may_not_have() {
    let (_area, s) = area_with_files();
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    // Root's file, mode 0600: the kernel refuses alice the read.
    assert_eq!(fetch(&mut c, a, "secret", 100), Err(NfsStatus::Acces));
    assert_eq!(
        fetch(&mut c, a, "dir/../secret", 100),
        Err(NfsStatus::Acces)
    );
    assert_eq!(fetch(&mut c, a, "nothing", 100), Err(NfsStatus::NoEnt));
    assert_eq!(fetch(&mut c, a, "dir/small/x", 100), Err(NfsStatus::NotDir));
    // Anonymous, on a server that serves no anonymous reads.
    assert_eq!(
        fetch(&mut c, ANONYMOUS, "dir/small", 100),
        Err(NfsStatus::Acces)
    );
}

#[test]
fn a_request_sent_behind_an_unanswered_login_runs_as_the_authno_it_will_get() {
    let (_area, s) = area_with_files();
    let mut c = s.connect();
    // LOGIN and FETCH in one flight, the FETCH carrying authno 1 before LOGIN is answered.
    let key = UserKeypair::from_seed([1; 32]);
    let login = c.conn.login_args("alice", &key).unwrap();
    let l = c.send(ANONYMOUS, RequestOp::Login(login));
    let f = c.send(
        1,
        RequestOp::Fetch {
            path: b"dir/small".to_vec(),
            count: 100,
        },
    );
    assert_eq!(c.wait_reply(l), Ok(ReplyBody::Login { authno: 1 }));
    assert!(matches!(c.wait_reply(f), Ok(ReplyBody::Fetch { .. })));

    // A LOGIN that fails leaves authno 1 unassigned: the pipelined request is refused.
    let mut c = s.connect();
    let stranger = UserKeypair::from_seed([9; 32]);
    let login = c.conn.login_args("alice", &stranger).unwrap();
    let l = c.send(ANONYMOUS, RequestOp::Login(login));
    let f = c.send(
        1,
        RequestOp::Fetch {
            path: b"dir/small".to_vec(),
            count: 100,
        },
    );
    assert_eq!(c.wait_reply(l), Err(NfsStatus::Acces));
    assert_eq!(c.wait_reply(f), Err(NfsStatus::Acces));
}

fn create_at(c: &mut Client, a: u32, path: &str, how: CreateHow) -> Result<ReplyBody, NfsStatus> {
    c.call(
        a,
        RequestOp::CreateAt {
            path: path.as_bytes().to_vec(),
            how,
        },
    )
}

fn guarded(mode: u32) -> CreateHow {
    CreateHow::Guarded(SetAttr {
        mode: Some(mode),
        size: Some(0),
        ..SetAttr::default()
    })
}

#[test]
fn create_at_makes_a_file_by_path_as_the_caller() {
    use std::os::unix::fs::MetadataExt;
    let (area, s) = area_with_files();
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);
    let dir = c.lookup(a, root, "dir").unwrap();
    match create_at(&mut c, a, "/dir/new", guarded(0o640)).unwrap() {
        ReplyBody::CreateAt { dir: d, made } => {
            // The directory's handle and the new file's are the ones LOOKUP gives.
            assert_eq!(d, dir);
            assert_eq!(made.fh, Some(c.lookup(a, dir, "new").unwrap()));
            let attr = made.attr.unwrap();
            assert_eq!(
                (attr.ftype, attr.mode & 0o7777, attr.uid),
                (FileType::Regular, 0o640, 1000)
            );
            assert!(made.dir_attr.is_some());
        }
        other => panic!("{other:?}"),
    }
    // Made as alice, with the mode asked.
    let meta = std::fs::metadata(area.export().join("dir/new")).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o7777), (1000, 0o640));
    // GUARDED on a taken name fails; UNCHECKED truncates the file there, as CREATE does.
    assert_eq!(
        create_at(&mut c, a, "dir/new", guarded(0o600)),
        Err(NfsStatus::Exist)
    );
    let truncate = CreateHow::Unchecked(SetAttr {
        size: Some(0),
        ..SetAttr::default()
    });
    assert!(matches!(
        create_at(&mut c, a, "dir/small", truncate),
        Ok(ReplyBody::CreateAt { .. })
    ));
    assert_eq!(
        std::fs::metadata(area.export().join("dir/small"))
            .unwrap()
            .len(),
        0
    );
}

#[test]
fn create_at_is_refused_what_the_caller_may_not_do() {
    let (area, s) = area_with_files();
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    // The export's root is root's: the kernel refuses alice a new name there.
    assert_eq!(
        create_at(&mut c, a, "top", guarded(0o644)),
        Err(NfsStatus::Acces)
    );
    assert_eq!(
        create_at(&mut c, a, "dir/../x", guarded(0o644)),
        Err(NfsStatus::Acces)
    );
    assert_eq!(
        create_at(&mut c, a, "dir/small/x", guarded(0o644)),
        Err(NfsStatus::NotDir)
    );
    assert_eq!(
        create_at(&mut c, a, "nothing/x", guarded(0o644)),
        Err(NfsStatus::NoEnt)
    );
    // A path that names no file.
    for path in ["", "/", "dir/", "dir/.", "dir/.."] {
        assert_eq!(
            create_at(&mut c, a, path, guarded(0o644)),
            Err(NfsStatus::Inval),
            "{path:?}"
        );
    }
    // Anonymous users change nothing.
    assert!(create_at(&mut c, ANONYMOUS, "dir/anon", guarded(0o644)).is_err());
    for name in ["top", "x", "anon"] {
        assert!(
            !area.export().join(name).exists() && !area.export().join("dir").join(name).exists()
        );
    }
}

#[test]
fn a_create_at_sent_behind_an_unanswered_login_makes_the_file_as_that_user() {
    use std::os::unix::fs::MetadataExt;
    let (area, s) = area_with_files();
    let mut c = s.connect();
    let key = UserKeypair::from_seed([1; 32]);
    let login = c.conn.login_args("alice", &key).unwrap();
    let l = c.send(ANONYMOUS, RequestOp::Login(login));
    let f = c.send(
        1,
        RequestOp::CreateAt {
            path: b"dir/early".to_vec(),
            how: guarded(0o600),
        },
    );
    assert_eq!(c.wait_reply(l), Ok(ReplyBody::Login { authno: 1 }));
    assert!(matches!(c.wait_reply(f), Ok(ReplyBody::CreateAt { .. })));
    assert_eq!(
        std::fs::metadata(area.export().join("dir/early"))
            .unwrap()
            .uid(),
        1000
    );
}
