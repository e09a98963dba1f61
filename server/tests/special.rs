//! MKNOD and RENAME2 against a real sfsd: FIFOs and sockets made as the caller, device nodes
//! only where the kernel lets the caller make them, none of them ever opened for data; a
//! no-replace rename that refuses an existing target in the same system call.

mod common;

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::time::{Duration, Instant};

use common::*;
use protocol::*;

const ALICE: (&str, u8, u32, &str) = ("alice", 1, 1000, "1000");
const ROOT: (&str, u8, u32, &str) = ("root", 2, 0, "0");

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// sfsd with alice (uid 1000, owning the export) and root; both logged in on one stream.
fn setup() -> (Area, Sfsd, Client, u32, u32, FileHandle) {
    let area = Area::new();
    std::os::unix::fs::chown(area.export(), Some(1000), Some(1000)).unwrap();
    let users = area.users(&[ALICE, ROOT]);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    let root_user = c.login("root", 2).unwrap();
    let root = c.mount(alice);
    (area, s, c, alice, root_user, root)
}

fn mknod(
    c: &mut Client,
    a: u32,
    dir: FileHandle,
    name: &str,
    kind: SpecialKind,
    mode: u32,
) -> Result<NewObject, NfsStatus> {
    let attr = SetAttr {
        mode: Some(mode),
        ..SetAttr::default()
    };
    match c.call(
        a,
        RequestOp::Mknod {
            dir,
            name: name.as_bytes().to_vec(),
            kind,
            attr,
        },
    )? {
        ReplyBody::Mknod(o) => Ok(o),
        other => panic!("MKNOD answered {other:?}"),
    }
}

fn rename2(
    c: &mut Client,
    a: u32,
    dir: FileHandle,
    from: &str,
    to: &str,
    flags: u32,
) -> Result<(), NfsStatus> {
    match c.call(
        a,
        RequestOp::Rename2 {
            from_dir: dir,
            from_name: from.as_bytes().to_vec(),
            to_dir: dir,
            to_name: to.as_bytes().to_vec(),
            flags,
        },
    )? {
        ReplyBody::Rename2 { .. } => Ok(()),
        other => panic!("RENAME2 answered {other:?}"),
    }
}

#[test]
fn fifos_and_sockets_are_made_as_the_caller_and_never_opened() {
    let (area, _s, mut c, alice, _root_user, root) = setup();
    let fifo = mknod(&mut c, alice, root, "pipe", SpecialKind::Fifo, 0o640).unwrap();
    let fifo_fh = fifo.fh.expect("MKNOD returned the FIFO's handle");
    let sock = mknod(&mut c, alice, root, "sock", SpecialKind::Socket, 0o600).unwrap();
    let fa = fifo.attr.expect("attributes of the new FIFO");
    assert_eq!((fa.ftype, fa.mode & 0o7777), (FileType::Fifo, 0o640));
    assert_eq!(sock.attr.unwrap().ftype, FileType::Socket);
    let dir_attr = fifo.dir_attr.expect("directory attributes");
    assert_eq!(dir_attr.ftype, FileType::Directory);

    let ex = area.export();
    let m = std::fs::symlink_metadata(ex.join("pipe")).unwrap();
    assert!(m.file_type().is_fifo());
    if is_root() {
        assert_eq!((m.uid(), m.gid()), (1000, 1000), "made as alice, not root");
    }
    assert!(
        std::fs::symlink_metadata(ex.join("sock"))
            .unwrap()
            .file_type()
            .is_socket()
    );
    // The handle looks the FIFO up again.
    assert_eq!(c.lookup(alice, root, "pipe").unwrap(), fifo_fh);
    assert_eq!(c.getattr(alice, fifo_fh).unwrap().ftype, FileType::Fifo);

    // Data operations are refused at once: opening a FIFO with no writer would block a
    // storage thread forever.
    let started = Instant::now();
    assert_eq!(c.read(alice, fifo_fh, 0, 10), Err(NfsStatus::Inval));
    assert_eq!(c.write(alice, fifo_fh, 0, b"x"), Err(NfsStatus::Inval));
    assert!(
        c.call(
            alice,
            RequestOp::Commit {
                fh: fifo_fh,
                offset: 0,
                count: 0
            }
        )
        .is_err()
    );
    assert_eq!(
        c.read(
            alice,
            sock.fh.expect("MKNOD returned the socket's handle"),
            0,
            10
        ),
        Err(NfsStatus::Inval)
    );
    assert!(started.elapsed() < Duration::from_secs(5));

    // An existing name, or a bad one, is refused.
    assert_eq!(
        mknod(&mut c, alice, root, "pipe", SpecialKind::Fifo, 0o600).map(|_| ()),
        Err(NfsStatus::Exist)
    );
    for bad in ["", ".", "..", "a/b"] {
        assert!(mknod(&mut c, alice, root, bad, SpecialKind::Fifo, 0o600).is_err());
    }
    // REMOVE works on them like on any name.
    assert!(
        c.call(
            alice,
            RequestOp::Remove {
                dir: root,
                name: b"pipe".to_vec()
            }
        )
        .is_ok()
    );
    assert!(!ex.join("pipe").exists());
}

#[test]
fn device_nodes_only_where_the_kernel_allows_the_caller() {
    if !is_root() {
        eprintln!("SKIPPED device_nodes_only_where_the_kernel_allows_the_caller: needs root");
        return;
    }
    let (area, _s, mut c, alice, root_user, root) = setup();
    // alice has no CAP_MKNOD: the kernel refuses, whatever the server's own privileges.
    assert_eq!(
        mknod(&mut c, alice, root, "null", SpecialKind::Char(1, 3), 0o666).map(|_| ()),
        Err(NfsStatus::Perm)
    );
    assert_eq!(
        mknod(&mut c, alice, root, "disk", SpecialKind::Block(7, 0), 0o600).map(|_| ()),
        Err(NfsStatus::Perm)
    );
    assert!(!area.export().join("null").exists());

    // Root (mapped to uid 0) may, if this machine lets root make device nodes at all: the
    // answer must be what the kernel says to this test process.
    let probe = area.path().join("probe");
    let local = rustix::fs::mknodat(
        rustix::fs::CWD,
        &probe,
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::from_raw_mode(0o600),
        rustix::fs::makedev(1, 3),
    );
    let remote = mknod(
        &mut c,
        root_user,
        root,
        "null",
        SpecialKind::Char(1, 3),
        0o666,
    );
    match local {
        Ok(()) => {
            let o = remote.expect("root makes a device node");
            let fh = o.fh.expect("MKNOD returned the node's handle");
            let a = o.attr.unwrap();
            assert_eq!((a.ftype, a.rdev), (FileType::Char, (1, 3)));
            let m = std::fs::symlink_metadata(area.export().join("null")).unwrap();
            assert!(m.file_type().is_char_device());
            assert_eq!(m.rdev(), rustix::fs::makedev(1, 3));
            // Never opened for data, even /dev/null's twin.
            assert_eq!(c.read(root_user, fh, 0, 10), Err(NfsStatus::Inval));
            assert_eq!(c.write(root_user, fh, 0, b"x"), Err(NfsStatus::Inval));
            let b = mknod(
                &mut c,
                root_user,
                root,
                "loop",
                SpecialKind::Block(7, 200),
                0o600,
            );
            assert_eq!(b.unwrap().attr.unwrap().rdev, (7, 200));
        }
        Err(e) => assert_eq!(
            remote.map(|_| ()),
            Err(NfsStatus::from_io_error(
                &std::io::Error::from_raw_os_error(e.raw_os_error())
            ))
        ),
    }
}

#[test]
fn rename_noreplace_refuses_an_existing_target() {
    let (area, _s, mut c, alice, _root_user, root) = setup();
    c.create(alice, root, "a", 0o644).unwrap();
    let b = c.create(alice, root, "b", 0o644).unwrap();
    c.write(alice, b, 0, b"bee").unwrap();
    let ex = area.export();

    assert_eq!(
        rename2(&mut c, alice, root, "a", "b", rename_flags::NOREPLACE),
        Err(NfsStatus::Exist)
    );
    assert!(ex.join("a").exists(), "the source stays");
    assert_eq!(
        std::fs::read(ex.join("b")).unwrap(),
        b"bee",
        "the target stays"
    );
    // Onto a directory, too (not "not empty": the target exists).
    c.mkdir(alice, root, "d", 0o755).unwrap();
    assert_eq!(
        rename2(&mut c, alice, root, "a", "d", rename_flags::NOREPLACE),
        Err(NfsStatus::Exist)
    );

    rename2(&mut c, alice, root, "a", "c", rename_flags::NOREPLACE).unwrap();
    assert!(!ex.join("a").exists() && ex.join("c").exists());
    // Flags 0 is a plain rename, which replaces.
    rename2(&mut c, alice, root, "c", "b", 0).unwrap();
    assert_eq!(std::fs::read(ex.join("b")).unwrap(), b"");
    assert_eq!(
        rename2(&mut c, alice, root, "missing", "x", rename_flags::NOREPLACE),
        Err(NfsStatus::NoEnt)
    );
}
