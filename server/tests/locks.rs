//! LOCK, UNLOCK and TESTLOCK against a real sfsd: holders are (client, user, owner), the
//! client being the connection, or with SESSION the client's record across reconnects; a
//! write lock needs write access and a read lock read access as the caller, anonymous users
//! lock nothing, one user cannot release another's locks, and a closed connection's locks
//! outlive it by the lease only. With `SFSD_TEST_BACKEND=nfs` the same runs in front of an
//! NFS server (the table is sfsd's own, whatever the backend).

mod common;

use std::time::{Duration, Instant};

use common::*;
use protocol::*;

const USERS: &[(&str, u8, u32, &str)] = &[("alice", 1, 1000, "1000"), ("bob", 2, 1001, "1001")];

fn lock(
    c: &mut Client,
    a: u32,
    fh: FileHandle,
    owner: u64,
    kind: LockKind,
    start: u64,
    len: u64,
) -> Result<(), NfsStatus> {
    let args = LockArgs {
        fh,
        owner,
        kind,
        start,
        len,
        flock: false,
        reclaim: false,
    };
    match c.call(a, RequestOp::Lock(args))? {
        ReplyBody::Lock => Ok(()),
        o => panic!("{o:?}"),
    }
}

fn unlock(
    c: &mut Client,
    a: u32,
    fh: FileHandle,
    owner: u64,
    start: u64,
    len: u64,
) -> Result<(), NfsStatus> {
    let args = UnlockArgs {
        fh,
        owner,
        start,
        len,
        flock: false,
    };
    match c.call(a, RequestOp::Unlock(args))? {
        ReplyBody::Unlock => Ok(()),
        o => panic!("{o:?}"),
    }
}

fn test(
    c: &mut Client,
    a: u32,
    fh: FileHandle,
    owner: u64,
    kind: LockKind,
) -> Result<Option<LockConflict>, NfsStatus> {
    let args = TestLockArgs {
        fh,
        owner,
        kind,
        start: 0,
        len: 0,
        flock: false,
    };
    match c.call(a, RequestOp::TestLock(args))? {
        ReplyBody::TestLock { conflict } => Ok(conflict),
        o => panic!("{o:?}"),
    }
}

/// alice's 0644 file `f` in an export alice owns; a server with a 2-second lease.
fn setup() -> (Area, Sfsd, FileHandle) {
    let area = Area::new();
    let ex = area.export();
    own(&ex, 1000, 1000, 0o755);
    std::fs::write(ex.join("f"), b"data").unwrap();
    own(&ex.join("f"), 1000, 1000, 0o644);
    let users = area.users(USERS);
    let s = area.start(&[
        "--users",
        users.to_str().unwrap(),
        "--anonymous-read",
        "--lease-secs",
        "2",
    ]);
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    let dir = c.mount(alice);
    let f = c.lookup(alice, dir, "f").unwrap();
    (area, s, f)
}

#[test]
fn holders_permissions_and_users() {
    use LockKind::{Read, Write};
    let (_area, s, f) = setup();
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    let bob = c.login("bob", 2).unwrap();

    lock(&mut c, alice, f, 7, Write, 0, 10).unwrap();
    // bob may read f: a read lock is checked against alice's and refused...
    assert_eq!(lock(&mut c, bob, f, 7, Read, 5, 1), Err(NfsStatus::Denied));
    assert_eq!(
        test(&mut c, bob, f, 7, Read),
        Ok(Some(LockConflict {
            kind: Write,
            start: 0,
            len: 10,
            holder: test(&mut c, bob, f, 7, Read).unwrap().unwrap().holder,
        }))
    );
    // ...but he may not write it: no write lock, whatever is held.
    assert_eq!(
        lock(&mut c, bob, f, 8, Write, 100, 1),
        Err(NfsStatus::Acces)
    );
    assert_eq!(lock(&mut c, bob, f, 8, Read, 100, 1), Ok(()));
    // The same owner number on the same connection as another user is another holder: bob
    // cannot release alice's lock.
    unlock(&mut c, bob, f, 7, 0, 0).unwrap();
    assert!(test(&mut c, bob, f, 9, Read).unwrap().is_some());
    // alice's own other owner (another process) conflicts; her own owner does not.
    assert_eq!(
        lock(&mut c, alice, f, 9, Write, 0, 1),
        Err(NfsStatus::Denied)
    );
    assert_eq!(
        test(&mut c, alice, f, 7, Write),
        Ok(Some(LockConflict {
            kind: Read,
            start: 100,
            len: 1,
            holder: test(&mut c, alice, f, 7, Write).unwrap().unwrap().holder,
        }))
    );
    // Another connection of alice's is another holder too.
    let mut c2 = s.connect();
    let alice2 = c2.login("alice", 1).unwrap();
    assert_eq!(
        lock(&mut c2, alice2, f, 7, Read, 0, 1),
        Err(NfsStatus::Denied)
    );
    unlock(&mut c, alice, f, 7, 0, 0).unwrap();
    assert_eq!(lock(&mut c2, alice2, f, 7, Read, 0, 1), Ok(()));

    // Anonymous users lock nothing; ranges past 2^64 and reclaims are refused.
    assert_eq!(
        lock(&mut c, ANONYMOUS, f, 1, Read, 0, 0),
        Err(NfsStatus::Acces)
    );
    assert_eq!(
        lock(&mut c, alice, f, 1, Read, u64::MAX, 2),
        Err(NfsStatus::Inval)
    );
    let reclaim = LockArgs {
        fh: f,
        owner: 1,
        kind: Read,
        start: 0,
        len: 0,
        flock: false,
        reclaim: true,
    };
    assert_eq!(
        c.call(alice, RequestOp::Lock(reclaim)),
        Err(NfsStatus::NotSupp)
    );
    // A handle that does not verify fails as for any operation.
    let mut bad = f.as_bytes().to_vec();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    let bad = FileHandle::from_slice(&bad).unwrap();
    assert_eq!(
        lock(&mut c, alice, bad, 1, Read, 0, 0),
        Err(NfsStatus::BadHandle)
    );
}

#[test]
fn a_closed_connection_keeps_its_locks_for_the_lease_only() {
    let (_area, s, f) = setup();
    let mut c = s.connect();
    let alice = c.login("alice", 1).unwrap();
    lock(&mut c, alice, f, 1, LockKind::Write, 0, 0).unwrap();
    let mut other = s.connect();
    let bob = other.login("bob", 2).unwrap();
    drop(c);
    let closed = Instant::now();
    assert_eq!(
        lock(&mut other, bob, f, 1, LockKind::Read, 0, 0),
        Err(NfsStatus::Denied)
    );
    loop {
        match lock(&mut other, bob, f, 1, LockKind::Read, 0, 0) {
            Ok(()) => break,
            Err(NfsStatus::Denied) => {
                assert!(closed.elapsed() < Duration::from_secs(10), "never released");
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("{e:?}"),
        }
    }
    assert!(
        closed.elapsed() >= Duration::from_millis(1500),
        "released after {:?}, before the 2 s grace",
        closed.elapsed()
    );
}

/// A connection bound to client `id`'s reply-cache record (SESSION), logged in as alice.
fn session(s: &Sfsd, id: u8) -> (Client, u32) {
    let mut c = s.connect();
    let bound = c.call(
        ANONYMOUS,
        RequestOp::Session {
            client_id: [id; 32],
            slots: 4,
        },
    );
    assert!(matches!(bound, Ok(ReplyBody::Session { .. })), "{bound:?}");
    let alice = c.login("alice", 1).unwrap();
    (c, alice)
}

/// With a session, locks are the client's, not one connection's: a client that reconnects
/// within the lease finds its locks held for it and can release them, and once back they no
/// longer expire with the old connection's grace.
#[test]
fn a_clients_locks_survive_its_reconnect() {
    let (_area, s, f) = setup();
    let (mut first, alice) = session(&s, 7);
    lock(&mut first, alice, f, 1, LockKind::Write, 0, 0).unwrap();
    drop(first);
    let mut other = s.connect();
    let bob = other.login("bob", 2).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let (mut back, alice) = session(&s, 7);
    // Past the first connection's 2 s grace: still held, for the client that came back.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        lock(&mut other, bob, f, 1, LockKind::Read, 0, 0),
        Err(NfsStatus::Denied)
    );
    // Another client (another id), the same user and owner number, releases nothing of it.
    let (mut stranger, alice2) = session(&s, 8);
    unlock(&mut stranger, alice2, f, 1, 0, 0).unwrap();
    assert_eq!(
        lock(&mut other, bob, f, 1, LockKind::Read, 0, 0),
        Err(NfsStatus::Denied)
    );
    // Its own lock: the same owner may take it again (a no-op), and releases it.
    lock(&mut back, alice, f, 1, LockKind::Write, 0, 0).unwrap();
    unlock(&mut back, alice, f, 1, 0, 0).unwrap();
    lock(&mut other, bob, f, 1, LockKind::Read, 0, 0).unwrap();
}
