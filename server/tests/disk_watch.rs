//! Changes made on the export's own file system behind sfsd's back (a program on the server's
//! host) reach the lease holders as INVALIDATEs within a bounded delay, not when their leases
//! end; sfsd's own changes are not told back to whoever made them; `--no-disk-watch` turns the
//! watch off.
//!
//! The watch needs root (fanotify on a whole file system) and the local backend: elsewhere
//! these tests skip.

mod common;

use std::time::{Duration, Instant};

use common::*;
use protocol::*;

const USERS: &[(&str, u8, u32, &str)] = &[("alice", 1, 0, "0")];

/// The bound the tests hold the INVALIDATE to (the watch reads at once when idle; the rest is
/// a hop to color 0 and loopback, on a shared, busy 2-core machine).
const BOUND: Duration = Duration::from_secs(2);

/// Whether the watch cannot run here (saying why): the NFS backend, or not root.
fn skipped() -> bool {
    let why = if common::ganesha::enabled() {
        "the NFS backend has no disk to watch"
    // SAFETY: geteuid has no preconditions.
    } else if unsafe { libc::geteuid() } != 0 {
        "not root (fanotify on a file system needs CAP_SYS_ADMIN)"
    } else {
        return false;
    };
    eprintln!("skipped: {why}");
    true
}

/// sfsd (60 s leases, `extra` flags) on an export holding `f`, and a client of alice's that
/// has looked `f` up: the server, the client, alice's authno, the root's handle and `f`'s.
fn serving_f(area: &Area, extra: &[&str]) -> (Sfsd, Client, u32, FileHandle, FileHandle) {
    std::fs::write(area.export().join("f"), b"v1").unwrap();
    let mut args = vec!["--lease-secs", "60"];
    args.extend_from_slice(extra);
    let s = area.start_for(USERS, &args);
    let mut c = s.connect();
    let a = c.login("alice", 1).unwrap();
    let root = c.mount(a);
    let f = c.lookup(a, root, "f").unwrap();
    (s, c, a, root, f)
}

/// That `c` hears nothing for half a second (`what` the test expected not to hear of).
fn told_nothing(c: &mut Client, what: &str) {
    match c.next_message_timeout(Duration::from_millis(500)) {
        None => {}
        o => panic!("{what}: {o:?}"),
    }
}

/// The next INVALIDATE within [`BOUND`], and how long it took from `since`.
fn invalidated(c: &mut Client, since: Instant) -> (FileHandle, Duration) {
    match c.next_message_timeout(BOUND) {
        Some(ServerMessage::Invalidate(i)) => (i.fh, since.elapsed()),
        o => panic!("no INVALIDATE within {BOUND:?}: {o:?}"),
    }
}

/// Waits, within [`BOUND`] of `since`, for an INVALIDATE of `fh`, passing over those of other
/// objects (a write on the disk is two events, a truncation and the write, which the watch may
/// hand on 5 ms apart: the file's second INVALIDATE can come after the test moved on).
fn invalidated_of(c: &mut Client, fh: FileHandle, since: Instant) -> Duration {
    loop {
        let left = BOUND.saturating_sub(since.elapsed());
        match c.next_message_timeout(left) {
            Some(ServerMessage::Invalidate(i)) if i.fh == fh => return since.elapsed(),
            Some(ServerMessage::Invalidate(_)) => continue,
            o => panic!("no INVALIDATE of {fh:?} within {BOUND:?}: {o:?}"),
        }
    }
}

#[test]
fn changes_on_the_servers_disk_reach_the_lease_holders_at_once() {
    if skipped() {
        return;
    }
    let area = Area::new();
    let ex = area.export();
    let (s, mut c, a, root, f) = serving_f(&area, &[]);
    assert!(
        s.log().contains("watching the export's file system for"),
        "{}",
        s.log()
    );
    assert_eq!(c.getattr(a, f).unwrap().lease_ms, 60_000);

    // Data written on the disk: the file, not its directory.
    let t = Instant::now();
    std::fs::write(ex.join("f"), b"v2-longer").unwrap();
    let (fh, took) = invalidated(&mut c, t);
    assert_eq!(fh, f);
    eprintln!("INVALIDATE of a file written on the disk after {took:?}");
    assert_eq!(c.getattr(a, f).unwrap().size, 9);

    // A name made on the disk: the directory.
    c.getattr(a, root).unwrap();
    let t = Instant::now();
    std::fs::write(ex.join("new"), b"n").unwrap();
    let took = invalidated_of(&mut c, root, t);
    eprintln!("INVALIDATE of a directory changed on the disk after {took:?}");
    assert_eq!(c.lookup(a, root, "new").map(|_| ()), Ok(()));

    // A mode changed on the disk: the file again (its lease was renewed by the GETATTR).
    c.getattr(a, f).unwrap();
    let t = Instant::now();
    own(&ex.join("f"), 0, 0, 0o600);
    invalidated_of(&mut c, f, t);
    assert_eq!(c.getattr(a, f).unwrap().mode & 0o777, 0o600);
}

/// A change made through sfsd is told to the other holders by sfsd itself; the watch leaves
/// sfsd's own changes out, so their maker hears nothing back.
#[test]
fn changes_made_through_sfsd_are_not_told_back_to_their_maker() {
    if skipped() {
        return;
    }
    let area = Area::new();
    let (_s, mut c, a, root, f) = serving_f(&area, &[]);
    c.getattr(a, root).unwrap();
    c.getattr(a, f).unwrap();
    c.write(a, f, 0, b"v2").unwrap();
    c.create(a, root, "made", 0o644).unwrap();
    told_nothing(&mut c, "told of its own change");
    // The watch is running: a change on the disk still arrives.
    let t = Instant::now();
    std::fs::write(area.export().join("f"), b"from the disk").unwrap();
    invalidated_of(&mut c, f, t);
}

#[test]
fn no_disk_watch_leaves_changes_on_the_disk_to_the_lease() {
    if skipped() {
        return;
    }
    let area = Area::new();
    let (s, mut c, a, _root, f) = serving_f(&area, &["--no-disk-watch"]);
    c.getattr(a, f).unwrap();
    std::fs::write(area.export().join("f"), b"v2").unwrap();
    told_nothing(&mut c, "an INVALIDATE without the watch");
    assert!(!s.log().contains("watching the export's file system for"));
    assert!(
        s.log()
            .contains("not watching the export's file system (--no-disk-watch)"),
        "{}",
        s.log()
    );
}
