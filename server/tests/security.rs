//! Permissions per user, anonymous access, path escapes, hostile records.

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use common::*;
use protocol::*;

const USERS: &[(&str, u8, u32, &str)] = &[
    ("alice", 1, 1000, "1000,500"),
    ("bob", 2, 1001, "1001"),
    ("carol", 3, 1002, "500"),
];

fn chown(p: &std::path::Path, uid: u32, gid: u32, mode: u32) {
    std::os::unix::fs::chown(p, Some(uid), Some(gid)).unwrap();
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn permissions_follow_the_mapped_user() {
    let area = Area::new();
    let ex = area.export();
    chown(&ex, 1000, 1000, 0o755);
    std::fs::write(ex.join("private"), b"alice only").unwrap();
    chown(&ex.join("private"), 1000, 1000, 0o600);
    std::fs::write(ex.join("group"), b"group read").unwrap();
    chown(&ex.join("group"), 1000, 500, 0o640);
    let users = area.users(USERS);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    let bob = c.login("bob", 2).unwrap();
    let carol = c.login("carol", 3).unwrap();
    assert_eq!(
        c.login("alice", 1).unwrap(),
        alice,
        "same user, same authno"
    );
    assert_ne!(alice, bob);
    // A key not in the users file, and a known key under another name.
    assert_eq!(c.login("mallory", 9), Err(NfsStatus::Acces));
    assert_eq!(c.login("bob", 1), Err(NfsStatus::Acces));
    // Unauthenticated requests without --anonymous-read get nothing.
    assert_eq!(
        c.call(
            0,
            RequestOp::Mount {
                path: b"/".to_vec()
            }
        ),
        Err(NfsStatus::Acces)
    );
    let root = c.mount(alice);
    let private = c.lookup(alice, root, "private").unwrap();
    let group = c.lookup(bob, root, "group").unwrap();
    assert_eq!(c.read_all(alice, private).unwrap(), b"alice only");
    assert_eq!(c.read(bob, private, 0, 10), Err(NfsStatus::Acces));
    assert_eq!(c.read(carol, private, 0, 10), Err(NfsStatus::Acces));
    assert_eq!(
        c.read_all(carol, group).unwrap(),
        b"group read",
        "via group 500"
    );
    assert_eq!(c.read(bob, group, 0, 10), Err(NfsStatus::Acces));
    assert_eq!(c.write(carol, group, 0, b"x"), Err(NfsStatus::Acces));
    assert_eq!(c.write(bob, private, 0, b"x"), Err(NfsStatus::Acces));
    // Only alice may add to her 0755 directory.
    assert_eq!(c.create(bob, root, "b", 0o644), Err(NfsStatus::Acces));
    assert_eq!(
        c.call(
            bob,
            RequestOp::Remove {
                dir: root,
                name: b"private".to_vec()
            }
        ),
        Err(NfsStatus::Acces)
    );
    // chmod is for the owner.
    let chmod = RequestOp::SetAttr {
        fh: group,
        attr: SetAttr {
            mode: Some(0o666),
            ..SetAttr::default()
        },
        guard: None,
    };
    assert_eq!(c.call(carol, chmod.clone()), Err(NfsStatus::Perm));
    assert!(c.call(alice, chmod).is_ok());
    // Chown to someone else is refused to non-root users.
    let chown_op = RequestOp::SetAttr {
        fh: group,
        attr: SetAttr {
            uid: Some(1001),
            ..SetAttr::default()
        },
        guard: None,
    };
    assert_eq!(c.call(alice, chown_op), Err(NfsStatus::Perm));
    // ACCESS reflects the user.
    let bits = |c: &mut Client, a| match c.call(
        a,
        RequestOp::Access {
            fh: private,
            access: 0x3f,
        },
    ) {
        Ok(ReplyBody::Access { access, .. }) => access,
        o => panic!("{o:?}"),
    };
    assert_eq!(bits(&mut c, bob), 0);
    assert_ne!(bits(&mut c, alice) & access::MODIFY, 0);
    // Authnos belong to their session.
    let mut other = s.connect();
    assert_eq!(other.getattr(alice, root), Err(NfsStatus::Acces));
}

/// READ answers from descriptors cached per connection and user: none may serve after a
/// change of access rights, whether made through sfsd (at once) or on the server's own file
/// system (within the cache's one-second life).
#[test]
fn a_cached_descriptor_never_outlives_a_permission_change() {
    let area = Area::new();
    let ex = area.export();
    chown(&ex, 1000, 1000, 0o755);
    std::fs::write(ex.join("shared"), b"for now").unwrap();
    chown(&ex.join("shared"), 1000, 1000, 0o644);
    std::fs::write(ex.join("local"), b"until chmod").unwrap();
    chown(&ex.join("local"), 1000, 1000, 0o644);
    let users = area.users(USERS);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    let bob = c.login("bob", 2).unwrap();
    let root = c.mount(alice);
    let shared = c.lookup(bob, root, "shared").unwrap();
    let chmod = |fh, mode| RequestOp::SetAttr {
        fh,
        attr: SetAttr {
            mode: Some(mode),
            ..SetAttr::default()
        },
        guard: None,
    };
    // The file itself, through sfsd.
    assert_eq!(c.read_all(bob, shared).unwrap(), b"for now");
    assert_eq!(c.read_all(bob, shared).unwrap(), b"for now");
    c.call(alice, chmod(shared, 0o600)).unwrap();
    assert_eq!(c.read(bob, shared, 0, 10), Err(NfsStatus::Acces));
    assert_eq!(c.read_all(alice, shared).unwrap(), b"for now");
    // The directory on the way (search permission), through sfsd.
    c.call(alice, chmod(shared, 0o644)).unwrap();
    assert_eq!(c.read_all(bob, shared).unwrap(), b"for now");
    c.call(alice, chmod(root, 0o700)).unwrap();
    assert_eq!(c.read(bob, shared, 0, 10), Err(NfsStatus::Acces));
    c.call(alice, chmod(root, 0o755)).unwrap();
    // On the server's own file system, behind sfsd's back: noticed within a second.
    let local = c.lookup(bob, root, "local").unwrap();
    assert_eq!(c.read_all(bob, local).unwrap(), b"until chmod");
    std::fs::set_permissions(ex.join("local"), std::fs::Permissions::from_mode(0o600)).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(c.read(bob, local, 0, 10), Err(NfsStatus::Acces));
}

#[test]
fn anonymous_read_only_and_read_only_export() {
    let area = Area::new();
    let ex = area.export();
    std::fs::write(ex.join("public"), b"hello").unwrap();
    chown(&ex.join("public"), 1000, 1000, 0o644);
    std::fs::write(ex.join("secret"), b"no").unwrap();
    chown(&ex.join("secret"), 1000, 1000, 0o640);
    let users = area.users(USERS);
    let s = area.start(&[
        "--users",
        users.to_str().unwrap(),
        "--anonymous-read",
        "--read-only",
    ]);
    let mut c = s.connect();
    let root = c.mount(0);
    let public = c.lookup(0, root, "public").unwrap();
    let secret = c.lookup(0, root, "secret").unwrap();
    assert_eq!(c.read_all(0, public).unwrap(), b"hello");
    assert_eq!(c.read(0, secret, 0, 10), Err(NfsStatus::Acces));
    assert_eq!(c.write(0, public, 0, b"x"), Err(NfsStatus::RoFs));
    let alice = c.login("alice", 1).unwrap();
    assert_eq!(c.write(alice, public, 0, b"x"), Err(NfsStatus::RoFs));
    assert_eq!(c.create(alice, root, "n", 0o644), Err(NfsStatus::RoFs));
    assert_eq!(std::fs::read(ex.join("public")).unwrap(), b"hello");
}

#[test]
fn anonymous_cannot_write_even_on_writable_export() {
    let area = Area::new();
    let ex = area.export();
    chown(&ex, 0, 0, 0o777);
    std::fs::write(ex.join("w"), b"w").unwrap();
    chown(&ex.join("w"), 0, 0, 0o666);
    let s = area.start(&["--anonymous-read"]);
    let mut c = s.connect();
    let root = c.mount(0);
    let w = c.lookup(0, root, "w").unwrap();
    assert_eq!(c.write(0, w, 0, b"x"), Err(NfsStatus::Acces));
    assert_eq!(c.create(0, root, "n", 0o644), Err(NfsStatus::Acces));
    assert_eq!(c.read_all(0, w).unwrap(), b"w");
}

#[test]
fn nothing_resolves_outside_the_export() {
    let area = Area::new();
    let ex = area.export();
    std::fs::write(area.path().join("outside"), b"SECRET").unwrap();
    std::os::unix::fs::symlink("/etc/passwd", ex.join("abs")).unwrap();
    std::os::unix::fs::symlink("../outside", ex.join("rel")).unwrap();
    std::os::unix::fs::symlink("..", ex.join("up")).unwrap();
    std::fs::create_dir(ex.join("sub")).unwrap();
    let users = area.users(&[("root", 4, 0, "0")]);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let r = c.login("root", 4).unwrap();
    let root = c.mount(r);
    // `..` at the root is the root.
    assert_eq!(c.lookup(r, root, "..").unwrap(), root);
    let sub = c.lookup(r, root, "sub").unwrap();
    assert_eq!(c.lookup(r, sub, "..").unwrap(), root);
    // Names with slashes are refused.
    assert!(c.lookup(r, root, "../outside").is_err());
    assert!(c.lookup(r, root, "/etc/passwd").is_err());
    // Symlinks are objects of their own: never followed for READ, LOOKUP, READDIR, WRITE.
    for link in ["abs", "rel", "up"] {
        let fh = c.lookup(r, root, link).unwrap();
        assert_eq!(c.getattr(r, fh).unwrap().ftype, FileType::Symlink);
        assert!(c.read(r, fh, 0, 100).is_err(), "{link}");
        assert!(c.write(r, fh, 0, b"x").is_err(), "{link}");
        assert!(c.lookup(r, fh, "passwd").is_err(), "{link}");
        assert!(c.readdir_names(r, fh).is_err(), "{link}");
        assert!(c.create(r, fh, "x", 0o644).is_err(), "{link}");
    }
    // MOUNT paths cannot climb out or go through symlinks.
    for p in ["/..", "/../", "/sub/../..", "/up", "/abs", "/rel"] {
        assert!(
            c.call(
                r,
                RequestOp::Mount {
                    path: p.as_bytes().to_vec()
                }
            )
            .is_err(),
            "{p}"
        );
    }
    // Race between LOOKUP and use: replace a looked-up directory by a symlink pointing out.
    let victim = c.lookup(r, root, "sub").unwrap();
    std::fs::remove_dir(ex.join("sub")).unwrap();
    std::os::unix::fs::symlink("/etc", ex.join("sub")).unwrap();
    assert!(c.lookup(r, victim, "passwd").is_err());
    assert!(c.create(r, victim, "evil", 0o644).is_err());
    assert!(!std::path::Path::new("/etc/evil").exists());
    assert_eq!(
        std::fs::read(area.path().join("outside")).unwrap(),
        b"SECRET"
    );
}

#[test]
fn garbage_and_tampered_records_close_only_that_connection() {
    let area = Area::new();
    std::fs::write(area.export().join("f"), b"data").unwrap();
    let s = area.start(&["--anonymous-read"]);
    let mut good = s.connect();
    let root = good.mount(0);
    // Garbage before the handshake.
    let mut raw = std::net::TcpStream::connect(s.addr).unwrap();
    raw.set_read_timeout(Some(TIMEOUT)).unwrap();
    let _ = raw.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut raw, &mut sink);
    // A tampered record after the handshake.
    let mut bad = s.connect();
    let mut wire = Vec::new();
    bad.sealer
        .seal_with(&mut wire, |b| {
            Request {
                id: 1,
                authno: 0,
                op: RequestOp::Null,
            }
            .encode_into(b)
        })
        .unwrap();
    let last = wire.len() - 1;
    wire[last] ^= 0x80;
    bad.stream.write_all(&wire).unwrap();
    assert!(bad.is_closed());
    // A well-sealed record that does not decode.
    let mut bad2 = s.connect();
    let mut wire = Vec::new();
    bad2.sealer.seal_into(&[0xff; 12], &mut wire).unwrap();
    bad2.stream.write_all(&wire).unwrap();
    assert!(bad2.is_closed());
    // An oversized record header.
    let mut bad3 = s.connect();
    bad3.stream
        .write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0])
        .unwrap();
    assert!(bad3.is_closed());
    // Vanishing mid-record.
    let mut bad4 = s.connect();
    let mut wire = Vec::new();
    bad4.sealer
        .seal_with(&mut wire, |b| {
            Request {
                id: 1,
                authno: 0,
                op: RequestOp::Null,
            }
            .encode_into(b)
        })
        .unwrap();
    bad4.stream.write_all(&wire[..wire.len() / 2]).unwrap();
    drop(bad4);
    // The good connection and new ones still work.
    let f = good.lookup(0, root, "f").unwrap();
    assert_eq!(good.read_all(0, f).unwrap(), b"data");
    let mut again = s.connect();
    let root2 = again.mount(0);
    assert_eq!(root2, root);
}
