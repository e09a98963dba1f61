//! Permissions per user, anonymous access, path escapes, hostile records.

mod common;

use std::io::Write;

use common::*;
use protocol::*;

const USERS: &[(&str, u8, u32, &str)] = &[
    ("alice", 1, 1000, "1000,500"),
    ("bob", 2, 1001, "1001"),
    ("carol", 3, 1002, "500"),
];

#[test]
fn permissions_follow_the_mapped_user() {
    let area = Area::new();
    let ex = area.export();
    own(&ex, 1000, 1000, 0o755);
    std::fs::write(ex.join("private"), b"alice only").unwrap();
    own(&ex.join("private"), 1000, 1000, 0o600);
    std::fs::write(ex.join("group"), b"group read").unwrap();
    own(&ex.join("group"), 1000, 500, 0o640);
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
    own(&ex, 1000, 1000, 0o755);
    std::fs::write(ex.join("shared"), b"for now").unwrap();
    own(&ex.join("shared"), 1000, 1000, 0o644);
    std::fs::write(ex.join("local"), b"until chmod").unwrap();
    own(&ex.join("local"), 1000, 1000, 0o644);
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
    if s.backend.is_some() {
        // The rest is the local backend's: an NFS server checks only the object itself on a
        // READ by handle (not the directories above it), and has its own attribute cache.
        return;
    }
    // The directory on the way (search permission), through sfsd.
    c.call(alice, chmod(shared, 0o644)).unwrap();
    assert_eq!(c.read_all(bob, shared).unwrap(), b"for now");
    c.call(alice, chmod(root, 0o700)).unwrap();
    assert_eq!(c.read(bob, shared, 0, 10), Err(NfsStatus::Acces));
    c.call(alice, chmod(root, 0o755)).unwrap();
    // On the server's own file system, behind sfsd's back: noticed within a second.
    let local = c.lookup(bob, root, "local").unwrap();
    assert_eq!(c.read_all(bob, local).unwrap(), b"until chmod");
    own(&ex.join("local"), 1000, 1000, 0o600);
    std::thread::sleep(std::time::Duration::from_millis(1100));
    assert_eq!(c.read(bob, local, 0, 10), Err(NfsStatus::Acces));
}

#[test]
fn anonymous_read_only_and_read_only_export() {
    let area = Area::new();
    let ex = area.export();
    std::fs::write(ex.join("public"), b"hello").unwrap();
    own(&ex.join("public"), 1000, 1000, 0o644);
    std::fs::write(ex.join("secret"), b"no").unwrap();
    own(&ex.join("secret"), 1000, 1000, 0o640);
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
    own(&ex, 0, 0, 0o777);
    std::fs::write(ex.join("w"), b"w").unwrap();
    own(&ex.join("w"), 0, 0, 0o666);
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
    let mut wire = bad.seal_request(1, 0, RequestOp::Null);
    let last = wire.len() - 1;
    wire[last] ^= 0x80;
    bad.stream.write_all(&wire).unwrap();
    assert!(bad.is_closed());
    // A well-sealed record that does not decode.
    let mut bad2 = s.connect();
    let mut wire = Vec::new();
    bad2.conn.requests.seal_raw(&[0xff; 12], &mut wire).unwrap();
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
    let wire = bad4.seal_request(1, 0, RequestOp::Null);
    bad4.stream.write_all(&wire[..wire.len() / 2]).unwrap();
    drop(bad4);
    // The good connection and new ones still work.
    let f = good.lookup(0, root, "f").unwrap();
    assert_eq!(good.read_all(0, f).unwrap(), b"data");
    let mut again = s.connect();
    let root2 = again.mount(0);
    assert_eq!(root2, root);
}

/// NARROW on `c` from `authno`: the narrowed authno.
fn narrow(c: &mut Client, authno: u32, gid: u32, groups: &[u32]) -> Result<u32, NfsStatus> {
    match c.call(
        authno,
        RequestOp::Narrow {
            gid,
            groups: groups.to_vec(),
        },
    )? {
        ReplyBody::Narrow { authno } => Ok(authno),
        other => panic!("unexpected {other:?}"),
    }
}

fn set_gid(c: &mut Client, authno: u32, fh: FileHandle, gid: u32) -> Result<(), NfsStatus> {
    let op = RequestOp::SetAttr {
        fh,
        attr: SetAttr {
            gid: Some(gid),
            ..SetAttr::default()
        },
        guard: None,
    };
    c.call(authno, op).map(drop)
}

/// A narrowed authno has the groups asked for that the users file grants, and no others: a
/// file of a dropped group is unreadable, a group the users file does not grant is not gained,
/// new objects get the narrowed primary group and `chown` goes only to a group it still has.
#[test]
fn narrowed_authnos_have_the_intersection_of_groups() {
    let area = Area::new();
    let ex = area.export();
    own(&ex, 1003, 1003, 0o755);
    for (name, gid) in [("g500", 500), ("g600", 600), ("g700", 700)] {
        std::fs::write(ex.join(name), name).unwrap();
        own(&ex.join(name), 0, gid, 0o640);
    }
    let users = area.users(&[("dave", 4, 1003, "1003,500,600")]);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let dave = c.login("dave", 4).unwrap();
    let root = c.mount(dave);
    let fh = |c: &mut Client, n| c.lookup(dave, root, n).unwrap();
    let (g500, g600, g700) = (fh(&mut c, "g500"), fh(&mut c, "g600"), fh(&mut c, "g700"));
    assert_eq!(c.read_all(dave, g500).unwrap(), b"g500");
    assert_eq!(c.read_all(dave, g600).unwrap(), b"g600");
    assert_eq!(c.read(dave, g700, 0, 4), Err(NfsStatus::Acces));

    // Dropping 500 (and asking for 700, which the users file does not grant).
    let only600 = narrow(&mut c, dave, 1003, &[600, 700, 600]).unwrap();
    assert_ne!(only600, dave);
    assert_eq!(narrow(&mut c, dave, 1003, &[700, 600]).unwrap(), only600);
    assert_eq!(c.read(only600, g500, 0, 4), Err(NfsStatus::Acces));
    assert_eq!(c.read_all(only600, g600).unwrap(), b"g600");
    assert_eq!(c.read(only600, g700, 0, 4), Err(NfsStatus::Acces));
    // A narrowed authno narrows further, never back.
    let none = narrow(&mut c, only600, 1003, &[500, 600]).unwrap();
    assert_eq!(narrow(&mut c, only600, 500, &[]), Err(NfsStatus::Perm));
    assert_eq!(narrow(&mut c, dave, 1003, &[600]).unwrap(), only600);
    let _ = none;

    // New objects get the narrowed primary group; chown only to a group still held.
    let as600 = narrow(&mut c, dave, 600, &[]).unwrap();
    let new = c.create(as600, root, "new", 0o640).unwrap();
    assert_eq!(c.getattr(dave, new).unwrap().gid, 600);
    assert_eq!(set_gid(&mut c, as600, new, 500), Err(NfsStatus::Perm));
    assert_eq!(set_gid(&mut c, only600, new, 1003), Ok(()));
    assert_eq!(set_gid(&mut c, only600, new, 500), Err(NfsStatus::Perm));
    assert_eq!(set_gid(&mut c, dave, new, 500), Ok(()));

    // A primary group the users file does not grant, anonymous, an authno never assigned.
    assert_eq!(narrow(&mut c, dave, 700, &[600]), Err(NfsStatus::Perm));
    assert_eq!(narrow(&mut c, ANONYMOUS, 1003, &[]), Err(NfsStatus::Acces));
    assert_eq!(narrow(&mut c, 77, 1003, &[]), Err(NfsStatus::Acces));
    // The base login is unchanged.
    assert_eq!(c.read_all(dave, g500).unwrap(), b"g500");
}

/// What NARROW can make the server hold is bounded: a group list longer than the protocol's
/// limit is not decoded (the connection closes), and one user's narrowed authnos are capped
/// per connection, so another user can still log in.
#[test]
fn narrowing_is_bounded() {
    let area = Area::new();
    let many: String = std::iter::once(2000)
        .chain(1..=99)
        .map(|g| g.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let users = area.users(&[("erin", 5, 2000, many.as_str()), ("bob", 2, 1001, "1001")]);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let erin = c.login("erin", 5).unwrap();
    let mut got = std::collections::HashSet::new();
    for g in 1..64 {
        assert!(got.insert(narrow(&mut c, erin, g, &[]).unwrap()));
    }
    assert_eq!(narrow(&mut c, erin, 64, &[]), Err(NfsStatus::Acces));
    // Asking again for one already held still answers it.
    assert!(got.contains(&narrow(&mut c, erin, 1, &[]).unwrap()));
    assert!(c.login("bob", 2).is_ok());

    let mut c = s.connect();
    let erin = c.login("erin", 5).unwrap();
    let groups: Vec<u32> = (1..=protocol::request::MAX_NARROW_GROUPS as u32 + 1).collect();
    c.send(erin, RequestOp::Narrow { gid: 2000, groups });
    assert!(
        c.is_closed(),
        "an over-long group list closes the connection"
    );
    let mut c = s.connect();
    let erin = c.login("erin", 5).unwrap();
    let groups: Vec<u32> = (1..=protocol::request::MAX_NARROW_GROUPS as u32).collect();
    assert!(narrow(&mut c, erin, 2000, &groups).is_ok());
}
