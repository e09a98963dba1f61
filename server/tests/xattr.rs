//! Extended attributes and POSIX ACLs (GETXATTR, SETXATTR, LISTXATTR, REMOVEXATTR) against a
//! real sfsd: round trips, bounds, and the kernel's permission decisions as two users. With
//! `SFSD_TEST_BACKEND=nfs` every operation is `NotSupp` (NFSv3 has no extended attributes),
//! which the tests check instead.

mod common;

use common::*;
use protocol::*;

const USERS: &[(&str, u8, u32, &str)] = &[
    ("alice", 1, 1000, "1000"),
    ("bob", 2, 1001, "1001"),
    ("root", 3, 0, "0"),
];

fn get(c: &mut Client, a: u32, fh: FileHandle, name: &str) -> Result<Vec<u8>, NfsStatus> {
    match c.call(
        a,
        RequestOp::GetXattr {
            fh,
            name: name.into(),
        },
    )? {
        ReplyBody::GetXattr { value } => Ok(value),
        o => panic!("{o:?}"),
    }
}

fn set(
    c: &mut Client,
    a: u32,
    fh: FileHandle,
    name: &str,
    value: &[u8],
    flags: u32,
) -> Result<(), NfsStatus> {
    match c.call(
        a,
        RequestOp::SetXattr {
            fh,
            name: name.into(),
            value: value.to_vec(),
            flags,
        },
    )? {
        ReplyBody::SetXattr { attr } => {
            assert!(attr.is_some());
            Ok(())
        }
        o => panic!("{o:?}"),
    }
}

fn list(c: &mut Client, a: u32, fh: FileHandle) -> Result<Vec<Vec<u8>>, NfsStatus> {
    match c.call(a, RequestOp::ListXattr { fh })? {
        ReplyBody::ListXattr { mut names } => {
            names.sort();
            Ok(names)
        }
        o => panic!("{o:?}"),
    }
}

fn remove(c: &mut Client, a: u32, fh: FileHandle, name: &str) -> Result<(), NfsStatus> {
    match c.call(
        a,
        RequestOp::RemoveXattr {
            fh,
            name: name.into(),
        },
    )? {
        ReplyBody::RemoveXattr { .. } => Ok(()),
        o => panic!("{o:?}"),
    }
}

/// An export owned by alice holding alice's 0644 file `f`; the server, a client with alice,
/// bob and root logged in, and `f`'s handle.
fn setup() -> (Area, Sfsd, Client, [u32; 3], FileHandle) {
    let area = Area::new();
    let ex = area.export();
    own(&ex, 1000, 1000, 0o755);
    std::fs::write(ex.join("f"), b"data").unwrap();
    own(&ex.join("f"), 1000, 1000, 0o644);
    let users = area.users(USERS);
    let s = area.start(&["--users", users.to_str().unwrap()]);
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    let bob = c.login("bob", 2).unwrap();
    let root = c.login("root", 3).unwrap();
    let dir = c.mount(alice);
    let f = c.lookup(alice, dir, "f").unwrap();
    (area, s, c, [alice, bob, root], f)
}

/// The NFS backend answers every extended-attribute operation `NotSupp`; true when it did.
fn nfs_backend_refuses(s: &Sfsd, c: &mut Client, a: u32, f: FileHandle) -> bool {
    if s.backend.is_none() {
        return false;
    }
    assert_eq!(get(c, a, f, "user.k"), Err(NfsStatus::NotSupp));
    assert_eq!(set(c, a, f, "user.k", b"v", 0), Err(NfsStatus::NotSupp));
    assert_eq!(list(c, a, f), Err(NfsStatus::NotSupp));
    assert_eq!(remove(c, a, f, "user.k"), Err(NfsStatus::NotSupp));
    eprintln!("NFS backend: every extended-attribute operation answered NotSupp");
    true
}

#[test]
fn user_attributes_round_trip() {
    let (area, s, mut c, [alice, ..], f) = setup();
    if nfs_backend_refuses(&s, &mut c, alice, f) {
        return;
    }
    let on_disk = area.export().join("f");
    assert_eq!(get(&mut c, alice, f, "user.k"), Err(NfsStatus::NoXattr));
    assert_eq!(list(&mut c, alice, f), Ok(vec![]));
    set(&mut c, alice, f, "user.k", b"v1", 0).unwrap();
    assert_eq!(get(&mut c, alice, f, "user.k").unwrap(), b"v1");
    // What the server's file system holds, read without sfsd.
    let held = std::process::Command::new("python3")
        .arg("-c")
        .arg("import os,sys; sys.stdout.buffer.write(os.getxattr(sys.argv[1], 'user.k'))")
        .arg(&on_disk)
        .output()
        .unwrap();
    assert_eq!(held.stdout, b"v1", "{held:?}");
    // Create-exclusive conflicts with the existing one; replace needs one.
    assert_eq!(
        set(&mut c, alice, f, "user.k", b"x", xattr::flags::CREATE),
        Err(NfsStatus::Exist)
    );
    assert_eq!(
        set(&mut c, alice, f, "user.none", b"x", xattr::flags::REPLACE),
        Err(NfsStatus::NoXattr)
    );
    set(&mut c, alice, f, "user.k", b"v2", xattr::flags::REPLACE).unwrap();
    assert_eq!(get(&mut c, alice, f, "user.k").unwrap(), b"v2");
    set(&mut c, alice, f, "user.empty", b"", xattr::flags::CREATE).unwrap();
    assert_eq!(get(&mut c, alice, f, "user.empty").unwrap(), b"");
    assert_eq!(
        list(&mut c, alice, f).unwrap(),
        vec![b"user.empty".to_vec(), b"user.k".to_vec()]
    );
    remove(&mut c, alice, f, "user.k").unwrap();
    assert_eq!(get(&mut c, alice, f, "user.k"), Err(NfsStatus::NoXattr));
    assert_eq!(remove(&mut c, alice, f, "user.k"), Err(NfsStatus::NoXattr));
    assert_eq!(
        list(&mut c, alice, f).unwrap(),
        vec![b"user.empty".to_vec()]
    );
    // Directories have them too.
    let dir = c.mount(alice);
    set(&mut c, alice, dir, "user.d", b"dir", 0).unwrap();
    assert_eq!(get(&mut c, alice, dir, "user.d").unwrap(), b"dir");
}

#[test]
fn sizes_and_namespaces_are_bounded() {
    let (_area, s, mut c, [alice, ..], f) = setup();
    if nfs_backend_refuses(&s, &mut c, alice, f) {
        return;
    }
    // The largest value Linux allows round-trips (ext4 keeps at most a block's worth: the
    // file system's own limit answers, as a local call would get it).
    let big: Vec<u8> = (0..xattr::MAX_VALUE_LEN).map(|i| (i * 7) as u8).collect();
    match set(&mut c, alice, f, "user.big", &big, 0) {
        Ok(()) => assert_eq!(get(&mut c, alice, f, "user.big").unwrap(), big),
        Err(e) => assert!(
            matches!(e, NfsStatus::NoSpc | NfsStatus::Xattr2Big),
            "{e:?}"
        ),
    }
    let mid = vec![5u8; 2000];
    set(&mut c, alice, f, "user.mid", &mid, 0).unwrap();
    assert_eq!(get(&mut c, alice, f, "user.mid").unwrap(), mid);
    // One byte over XATTR_SIZE_MAX does not even decode: the server closes the connection
    // rather than allocating for it.
    let id = c.send(
        alice,
        RequestOp::SetXattr {
            fh: f,
            name: b"user.over".to_vec(),
            value: vec![0; xattr::MAX_VALUE_LEN + 1],
            flags: 0,
        },
    );
    let answered = c.next_message_timeout(std::time::Duration::from_secs(10));
    assert!(
        !matches!(&answered, Some(ServerMessage::Reply(r)) if r.id == id && r.result.is_ok()),
        "{answered:?}"
    );
    // Namespaces the protocol does not serve.
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    for name in ["system.nfs4_acl", "os2.k", "k"] {
        assert_eq!(
            get(&mut c, alice, f, name),
            Err(NfsStatus::NotSupp),
            "{name}"
        );
        assert_eq!(
            set(&mut c, alice, f, name, b"v", 0),
            Err(NfsStatus::NotSupp),
            "{name}"
        );
    }
}

#[test]
fn the_kernel_decides_as_the_caller() {
    let (_area, s, mut c, [alice, bob, root], f) = setup();
    if nfs_backend_refuses(&s, &mut c, alice, f) {
        return;
    }
    set(&mut c, alice, f, "user.k", b"alice's", 0).unwrap();
    // Bob may read the 0644 file, so its user attributes, but not write them.
    assert_eq!(get(&mut c, bob, f, "user.k").unwrap(), b"alice's");
    assert_eq!(list(&mut c, bob, f).unwrap(), vec![b"user.k".to_vec()]);
    assert_eq!(
        set(&mut c, bob, f, "user.k", b"bob's", 0),
        Err(NfsStatus::Acces)
    );
    assert_eq!(remove(&mut c, bob, f, "user.k"), Err(NfsStatus::Acces));
    assert_eq!(get(&mut c, alice, f, "user.k").unwrap(), b"alice's");
    // trusted. is the superuser's: alice may not set it; a user mapped to root may, and only
    // root lists it.
    assert_eq!(
        set(&mut c, alice, f, "trusted.t", b"x", 0),
        Err(NfsStatus::Perm)
    );
    // Nor security. names (the server's own capabilities must not let her through).
    assert_eq!(
        set(&mut c, alice, f, "security.x", b"x", 0),
        Err(NfsStatus::Perm)
    );
    set(&mut c, root, f, "trusted.t", b"x", 0).unwrap();
    assert_eq!(get(&mut c, root, f, "trusted.t").unwrap(), b"x");
    assert!(
        !list(&mut c, alice, f)
            .unwrap()
            .contains(&b"trusted.t".to_vec())
    );
    assert!(
        list(&mut c, root, f)
            .unwrap()
            .contains(&b"trusted.t".to_vec())
    );
    // Once the file is 0600 bob cannot read its attributes either.
    c.call(
        alice,
        RequestOp::SetAttr {
            fh: f,
            attr: SetAttr {
                mode: Some(0o600),
                ..SetAttr::default()
            },
            guard: None,
        },
    )
    .unwrap();
    assert_eq!(get(&mut c, bob, f, "user.k"), Err(NfsStatus::Acces));
    // Anonymous users modify nothing.
    assert_eq!(set(&mut c, 0, f, "user.k", b"x", 0), Err(NfsStatus::Acces));
}

/// `system.posix_acl_access` in the kernel's xattr form (version 2, little-endian entries of
/// tag, permissions, id): `mode`'s owner and other bits, no group bits, and `bob` with `perm`.
fn acl(owner: u16, bob: u16, other: u16) -> Vec<u8> {
    const UNDEFINED: u32 = u32::MAX;
    let entries: [(u16, u16, u32); 5] = [
        (0x01, owner, UNDEFINED), // ACL_USER_OBJ
        (0x02, bob, 1001),        // ACL_USER bob
        (0x04, 0, UNDEFINED),     // ACL_GROUP_OBJ
        (0x10, bob, UNDEFINED),   // ACL_MASK
        (0x20, other, UNDEFINED), // ACL_OTHER
    ];
    let mut v = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in entries {
        v.extend_from_slice(&tag.to_le_bytes());
        v.extend_from_slice(&perm.to_le_bytes());
        v.extend_from_slice(&id.to_le_bytes());
    }
    v
}

#[test]
fn an_acl_set_by_the_owner_grants_another_user_access() {
    let (area, s, mut c, [alice, bob, _], f) = setup();
    if nfs_backend_refuses(&s, &mut c, alice, f) {
        return;
    }
    own(&area.export().join("f"), 1000, 1000, 0o600);
    assert_eq!(c.read(bob, f, 0, 10), Err(NfsStatus::Acces));
    // Bob may not grant himself access.
    let grant = acl(6, 4, 0);
    assert_eq!(
        set(&mut c, bob, f, "system.posix_acl_access", &grant, 0),
        Err(NfsStatus::Perm)
    );
    set(&mut c, alice, f, "system.posix_acl_access", &grant, 0).unwrap();
    assert_eq!(c.read(bob, f, 0, 10).unwrap().0, b"data");
    assert_eq!(
        get(&mut c, alice, f, "system.posix_acl_access").unwrap(),
        grant
    );
    assert_eq!(c.write(bob, f, 0, b"x"), Err(NfsStatus::Acces));
    // Removing it takes the grant back at once (no cached descriptor serves bob after it).
    remove(&mut c, alice, f, "system.posix_acl_access").unwrap();
    assert_eq!(c.read(bob, f, 0, 10), Err(NfsStatus::Acces));
}

/// LISTDIR's page, and the names of the entries it says have no extended attributes.
fn listdir(
    c: &mut Client,
    a: u32,
    dir: FileHandle,
) -> Result<(Vec<String>, Vec<String>), NfsStatus> {
    let op = RequestOp::ListDir {
        dir,
        cookie: 0,
        verifier: [0; 8],
        dircount: 64 * 1024,
        maxcount: 256 * 1024,
    };
    match c.call(a, op)? {
        ReplyBody::ListDir { page, bare } => {
            assert_eq!(bare.len(), page.entries.len());
            assert!(page.eof);
            let name = |e: &DirEntryPlus| String::from_utf8(e.name.clone()).unwrap();
            let mut all: Vec<String> = page.entries.iter().map(name).collect();
            let mut none: Vec<String> = page
                .entries
                .iter()
                .zip(&bare)
                .filter(|(e, b)| **b && e.fh.is_some())
                .map(|(e, _)| name(e))
                .collect();
            all.sort();
            none.sort();
            Ok((all, none))
        }
        o => panic!("{o:?}"),
    }
}

/// LISTDIR says which entries have no extended attributes the caller may list, as the kernel
/// answers LISTXATTR for that caller: a `user.` attribute is anyone's to list, a `trusted.`
/// one only root's; an entry with none is "bare" for everyone (a symlink never: it is left to
/// LISTXATTR). The NFS backend answers
/// NOTSUPP (the client lists with READDIRPLUS).
#[test]
fn listdir_says_which_entries_have_no_extended_attributes() {
    let (area, s, mut c, [alice, bob, root], f) = setup();
    let dir = c.mount(alice);
    if s.backend.is_some() {
        assert_eq!(listdir(&mut c, alice, dir), Err(NfsStatus::NotSupp));
        return;
    }
    let ex = area.export();
    for name in ["plain", "tagged", "trusted"] {
        std::fs::write(ex.join(name), b"x").unwrap();
        own(&ex.join(name), 1000, 1000, 0o644);
    }
    std::fs::create_dir(ex.join("sub")).unwrap();
    own(&ex.join("sub"), 1000, 1000, 0o755);
    // A symlink is left to LISTXATTR of its own handle.
    std::os::unix::fs::symlink("plain", ex.join("link")).unwrap();
    let tagged = c.lookup(alice, dir, "tagged").unwrap();
    set(&mut c, alice, tagged, "user.k", b"v", 0).unwrap();
    let trusted = c.lookup(alice, dir, "trusted").unwrap();
    set(&mut c, root, trusted, "trusted.t", b"v", 0).unwrap();
    let _ = f;
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let all = names(&["f", "link", "plain", "sub", "tagged", "trusted"]);
    assert_eq!(
        listdir(&mut c, alice, dir).unwrap(),
        (all.clone(), names(&["f", "plain", "sub", "trusted"]))
    );
    assert_eq!(
        listdir(&mut c, bob, dir).unwrap(),
        (all.clone(), names(&["f", "plain", "sub", "trusted"]))
    );
    assert_eq!(
        listdir(&mut c, root, dir).unwrap(),
        (all, names(&["f", "plain", "sub"]))
    );
}
