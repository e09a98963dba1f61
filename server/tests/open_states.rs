//! Open states (OPEN, CLOSE, and what CREATE keeps): a file created with a mode that denies its
//! owner can be written through the creating "descriptor" by that connection's user only, and
//! an open file whose last name goes lives on through its handle, leaving nothing in the
//! export.

mod common;

use std::os::unix::fs::MetadataExt;

use common::*;
use protocol::*;

const ALICE: (&str, u8, u32, &str) = ("alice", 1, 1000, "1000");
const BOB: (&str, u8, u32, &str) = ("bob", 2, 1001, "1001");

fn setup() -> (Area, Sfsd, Client, u32, FileHandle) {
    let area = Area::new();
    std::os::unix::fs::chown(area.export(), Some(1000), Some(1000)).unwrap();
    std::fs::set_permissions(
        area.export(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let users = area.users(&[ALICE, BOB]);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);
    (area, s, c, a, root)
}

fn truncate(c: &mut Client, a: u32, fh: FileHandle, size: u64) -> Result<ReplyBody, NfsStatus> {
    c.call(a, setattr_size(fh, size))
}

#[test]
fn a_file_created_read_only_is_writable_by_its_creator_until_close() {
    let (area, s, mut c, a, root) = setup();
    let f = c.create(a, root, "ro", 0o444).unwrap();
    assert_eq!(c.write(a, f, 0, b"object bytes"), Ok(12));
    assert!(truncate(&mut c, a, f, 6).is_ok(), "ftruncate through it");
    assert!(
        c.call(
            a,
            RequestOp::Commit {
                fh: f,
                offset: 0,
                count: 0
            }
        )
        .is_ok()
    );
    assert_eq!(c.read_all(a, f).unwrap(), b"object");
    // A mode with no access at all for anyone: the creator still reads what it wrote.
    let z = c.create(a, root, "zero", 0).unwrap();
    assert_eq!(c.write(a, z, 0, b"abc"), Ok(3));
    assert_eq!(c.read_all(a, z).unwrap(), b"abc");
    if common::ganesha::enabled() {
        // NFSv3 has no open state; what the NFS server allows its owner is its own rule.
        return;
    }
    // Nobody else gains anything: another user on this connection, the same user on another
    // connection.
    let b = c.login("bob", 2).unwrap();
    assert_eq!(c.write(b, f, 0, b"x"), Err(NfsStatus::Acces));
    let mut other = s.connect();
    let a2 = other.login("alice", 1).unwrap();
    assert_eq!(other.write(a2, f, 0, b"x"), Err(NfsStatus::Acces));
    assert_eq!(truncate(&mut other, a2, f, 0).err(), Some(NfsStatus::Acces));
    // After CLOSE the mode decides for the creator too.
    assert_eq!(c.call(a, RequestOp::Close { fh: f }), Ok(ReplyBody::Close));
    assert_eq!(c.write(a, f, 0, b"x"), Err(NfsStatus::Acces));
    assert_eq!(truncate(&mut c, a, f, 0).err(), Some(NfsStatus::Acces));
    assert_eq!(
        c.call(a, RequestOp::Close { fh: f }),
        Ok(ReplyBody::Close),
        "twice"
    );
    let m = std::fs::metadata(area.export().join("ro")).unwrap();
    assert_eq!((m.len(), m.mode() & 0o7777, m.uid()), (6, 0o444, 1000));
    // A file whose mode lets its owner write keeps no state: writable as usual.
    let w = c.create(a, root, "rw", 0o644).unwrap();
    assert_eq!(c.write(a, w, 0, b"x"), Ok(1));
}

#[test]
fn the_grant_ends_with_the_connection() {
    let (_area, s, mut c, a, root) = setup();
    if common::ganesha::enabled() {
        return;
    }
    let f = c.create(a, root, "ro", 0o400).unwrap();
    assert_eq!(c.write(a, f, 0, b"x"), Ok(1));
    drop(c);
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    assert_eq!(c.write(a, f, 0, b"y"), Err(NfsStatus::Acces));
}

#[test]
fn an_open_file_outlives_its_last_name_and_leaves_nothing_behind() {
    let (area, s, mut c, a, root) = setup();
    let f = c.create(a, root, "tmp", 0o644).unwrap();
    assert_eq!(c.write(a, f, 0, b"still here"), Ok(10));
    match c.call(a, RequestOp::Open { fh: f }) {
        Ok(ReplyBody::Open { attr }) => {
            // The NFS backend answers without attributes.
            assert!(attr.is_none_or(|a| a.size == 10), "{attr:?}");
        }
        other => panic!("OPEN: {other:?}"),
    }
    c.call(
        a,
        RequestOp::Remove {
            dir: root,
            name: b"tmp".to_vec(),
        },
    )
    .unwrap();
    // Locally the kept descriptor holds the file, and no name is left; through NFS, sfsd keeps
    // it under a hidden name that nobody lists.
    let left = hidden_names(&area.export());
    if common::ganesha::enabled() {
        assert_eq!(left.len(), 1, "{left:?}");
        assert!(left[0].starts_with(".sfs-open-"), "{left:?}");
    } else {
        assert_eq!(left, Vec::<String>::new(), "no hidden name in the export");
    }
    assert_eq!(c.readdir_names(a, root).unwrap(), Vec::<String>::new());
    assert_eq!(c.lookup(a, root, "tmp"), Err(NfsStatus::NoEnt));
    // The handle still reaches the file: attributes, data, writes.
    let attr = c.getattr(a, f).unwrap();
    let nlink = if common::ganesha::enabled() { 1 } else { 0 };
    assert_eq!((attr.nlink, attr.size), (nlink, 10));
    assert_eq!(c.read_all(a, f).unwrap(), b"still here");
    assert_eq!(c.write(a, f, 10, b"!"), Ok(1));
    assert_eq!(c.read_all(a, f).unwrap(), b"still here!");
    // Another connection's users reach it by its handle too (the mode decides), until the
    // last holder closes.
    let mut other = s.connect();
    let b = other.login("bob", 2).unwrap();
    assert_eq!(other.read_all(b, f).unwrap(), b"still here!");
    assert_eq!(other.write(b, f, 0, b"x"), Err(NfsStatus::Acces));
    assert_eq!(c.call(a, RequestOp::Close { fh: f }), Ok(ReplyBody::Close));
    gone(&area, || other.getattr(b, f));
    assert_eq!(c.getattr(a, f), Err(NfsStatus::Stale));
}

/// Every name in `dir`.
fn hidden_names(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

/// Waits (at most 5 s: the NFS backend removes a hidden name after answering, and a closed
/// connection is noticed shortly after) until `getattr` answers STALE and the export is empty.
fn gone(area: &Area, mut getattr: impl FnMut() -> Result<Attr, NfsStatus>) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while getattr().is_ok() || !hidden_names(&area.export()).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the file outlived its last state: {:?}",
            hidden_names(&area.export())
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(getattr(), Err(NfsStatus::Stale));
}

#[test]
fn states_go_with_their_connection_and_anonymous_users_hold_none() {
    let (area, s, mut c, a, root) = setup();
    let f = c.create(a, root, "tmp", 0o644).unwrap();
    c.call(a, RequestOp::Open { fh: f }).unwrap();
    c.call(
        a,
        RequestOp::Remove {
            dir: root,
            name: b"tmp".to_vec(),
        },
    )
    .unwrap();
    let mut watcher = s.connect();
    let b = watcher.login("bob", 2).unwrap();
    assert!(watcher.getattr(b, f).is_ok());
    drop(c);
    // The server notices the closed connection shortly after.
    gone(&area, || watcher.getattr(b, f));
    assert_eq!(
        watcher.call(protocol::ANONYMOUS, RequestOp::Open { fh: root }),
        Err(NfsStatus::Acces)
    );
}

#[test]
fn a_held_file_replaced_by_rename_lives_on_until_closed() {
    let (area, _s, mut c, a, root) = setup();
    let old = c.create(a, root, "target", 0o644).unwrap();
    assert_eq!(c.write(a, old, 0, b"old"), Ok(3));
    let new = c.create(a, root, "incoming", 0o644).unwrap();
    assert_eq!(c.write(a, new, 0, b"new"), Ok(3));
    c.call(a, RequestOp::Open { fh: old }).unwrap();
    c.call(
        a,
        RequestOp::Rename {
            from_dir: root,
            from_name: b"incoming".to_vec(),
            to_dir: root,
            to_name: b"target".to_vec(),
        },
    )
    .unwrap();
    assert_eq!(c.readdir_names(a, root).unwrap(), vec!["target".to_owned()]);
    let target = c.lookup(a, root, "target").unwrap();
    assert_eq!(c.read_all(a, target).unwrap(), b"new");
    assert_eq!(
        c.read_all(a, old).unwrap(),
        b"old",
        "the replaced file, by its handle"
    );
    assert_eq!(
        c.call(a, RequestOp::Close { fh: old }),
        Ok(ReplyBody::Close)
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while hidden_names(&area.export()) != vec!["target".to_owned()] {
        assert!(
            std::time::Instant::now() < deadline,
            "{:?}",
            hidden_names(&area.export())
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(c.getattr(a, old), Err(NfsStatus::Stale));
}

/// APPEND does not go through what CREATE granted (that descriptor is shared and not opened
/// for appending): `NotSupp`, so the client WRITEs at its offset instead. Anyone without the
/// grant is refused as for WRITE.
#[test]
fn append_through_a_creation_grant_is_not_supported() {
    let (_area, s, mut c, a, root) = setup();
    if common::ganesha::enabled() {
        // No open states there: what the NFS server allows the owner is its own rule.
        return;
    }
    let append = |fh: FileHandle| RequestOp::Append {
        fh,
        stable: StableHow::Unstable,
        data: b"x".to_vec().into(),
    };
    let f = c.create(a, root, "ro", 0o444).unwrap();
    assert_eq!(c.call(a, append(f)).err(), Some(NfsStatus::NotSupp));
    let mut other = s.connect();
    let a2 = other.login("alice", 1).unwrap();
    assert_eq!(other.call(a2, append(f)).err(), Some(NfsStatus::Acces));
    let w = c.create(a, root, "rw", 0o644).unwrap();
    match c.call(a, append(w)) {
        Ok(ReplyBody::Append { offset, count, .. }) => assert_eq!((offset, count), (0, 1)),
        o => panic!("{o:?}"),
    }
}
